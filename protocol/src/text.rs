//! Small text rules used across the crate and by the binaries: JSON Pointer escaping
//! (RFC 6901), character-bounded truncation, a JSON value's type named in a message, and a
//! JSON value read as a type with the member at fault named ([`read_json`]).

use serde_json::Value;

/// RFC 6901 escaping of one reference token: `~` → `~0`, `/` → `~1`.
pub fn escape_pointer(token: &str) -> String {
    if !token.contains(['~', '/']) {
        return token.to_owned();
    }
    token.replace('~', "~0").replace('/', "~1")
}

/// `text` cut to at most `max` characters, with `…` appended when cut.
pub fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// A JSON value's type as a message names it (`found an object`).
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Why a JSON value does not fit a type: serde's reason, and the member it is about
/// (`events[1]`, `tenantId`, `spec.url`; empty when it is the value as a whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

/// `value` as `T`, or which member does not fit and why: the one reading of a request body
/// that names the field a caller must fix (the REST API's bodies, webhook registrations).
pub fn read_json<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        // "unknown field `x`" and "missing field `x`" stop at the parent: name `x` too.
        let named = ["unknown field `", "missing field `"]
            .iter()
            .find_map(|prefix| {
                message
                    .strip_prefix(prefix)?
                    .split_once('`')
                    .map(|(field, _)| field.to_owned())
            });
        let field = match (path.as_str(), named) {
            (".", Some(n)) => n,
            (".", None) => String::new(),
            (p, Some(n)) if !p.ends_with(&n) => format!("{p}.{n}"),
            (p, _) => p.to_owned(),
        };
        FieldError { field, message }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_tokens_are_escaped() {
        assert_eq!(escape_pointer("a/b~c"), "a~1b~0c");
        assert_eq!(escape_pointer("plain"), "plain");
    }

    #[test]
    fn truncate_counts_characters_not_bytes() {
        assert_eq!(truncate("héllo", 2), "hé…");
        assert_eq!(truncate("hé", 2), "hé");
        assert_eq!(truncate("", 0), "");
    }

    #[test]
    fn read_json_names_the_member_at_fault() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        #[allow(dead_code)] // read only for its refusals
        struct Req {
            url: String,
            events: Vec<String>,
            #[serde(default)]
            inner: Option<Inner>,
        }
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Inner {
            a: u8,
        }
        use serde_json::json;
        let field = |v: Value| read_json::<Req>(&v).unwrap_err().field;
        assert_eq!(field(json!([])), "");
        assert_eq!(field(json!({"events": []})), "url");
        assert_eq!(field(json!({"url": 7, "events": []})), "url");
        assert_eq!(field(json!({"url": "u", "events": ["a", 7]})), "events[1]");
        assert_eq!(
            field(json!({"url": "u", "events": [], "secret": "s"})),
            "secret"
        );
        assert_eq!(
            field(json!({"url": "u", "events": [], "inner": {}})),
            "inner.a"
        );
        assert_eq!(
            field(json!({"url": "u", "events": [], "inner": {"a": 1, "b": 2}})),
            "inner.b"
        );
        let e = read_json::<Req>(&json!({"url": "u", "events": "run.completed"})).unwrap_err();
        assert_eq!(e.field, "events");
        assert!(e.message.contains("expected a sequence"), "{e}");
        assert!(read_json::<Req>(&json!({"url": "u", "events": []})).is_ok());
    }
}
