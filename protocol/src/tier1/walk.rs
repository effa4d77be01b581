//! What both the Tier-1 walk ([`super::check`]) and the lowering ([`super::lower`]) need to
//! move through a schema: JSON Pointers, local `$ref`s, object schemas. A leaf of `tier1`, so
//! neither of them imports the other.

use serde_json::{Map, Value};

use crate::text::escape_pointer;

/// `ptr` extended by one reference token.
pub(crate) fn child(ptr: &str, token: &str) -> String {
    format!("{ptr}/{}", escape_pointer(token))
}

/// Resolves a local `$ref` (`#` or `#/…`) against `root`.
pub(crate) fn resolve_local<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    if !pointer.starts_with('/') {
        return None;
    }
    root.pointer(pointer)
}

/// Whether a schema describes objects (`type: object`, among its types, or with `properties`).
pub(crate) fn is_object_schema(m: &Map<String, Value>) -> bool {
    match m.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => m.contains_key("properties"),
    }
}
