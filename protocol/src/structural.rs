//! Schema helpers for protocol types that the Kubernetes CRDs embed (`openwop-crds`).
//!
//! The apiserver only accepts *structural* schemas, so a field that may hold any JSON must be
//! marked `x-kubernetes-preserve-unknown-fields` (otherwise the apiserver prunes its content).
//! These are plain `schemars` schemas with Kubernetes' vendor keywords in them: protocol stays
//! free of `kube` and `k8s-openapi`.

use schemars::{Schema, SchemaGenerator, json_schema};

/// Any JSON value (object, array, string, number, boolean).
pub fn any_json(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// A JSON object with arbitrary content. Atomic for server-side apply: otherwise the
/// apiserver's `metadata.managedFields` mirror the content key by key, as deep as it nests,
/// and a value deeper than serde_json's 128 levels there fails the decoding of the whole
/// object's metadata (and of every list holding it) before the lenient fields can help.
pub fn free_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "x-kubernetes-map-type": "atomic"
    })
}

/// A list of JSON objects with arbitrary content.
pub fn free_object_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": 256,
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
    })
}
