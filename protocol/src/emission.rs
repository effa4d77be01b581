//! One LLM node's emission around the retry router: the schema sent to the provider, the
//! router-side validation of the model's output, and the envelope the engine builds from an
//! accepted output (the engine owns correlation, node id, source and trust; the model only
//! chooses `type`, `payload` and `schemaVersion`).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::envelope::is_universal_kind;
use crate::schema::{self, CompiledSchema, ValidationIssue};

/// The kind a node may answer with besides its own: a clarification request.
pub const CLARIFICATION_KIND: &str = "clarification.request";

/// The schema sent to the provider for an `envelopeType` node: an envelope of that kind or
/// a clarification request, with the kind's payload schema (the node's vendor schema, else
/// the embedded one, else any object).
pub fn wire_schema(kind: &str, vendor: Option<&Value>) -> Value {
    let payload = vendor
        .cloned()
        .or_else(|| schema::kind_payload_schema(kind).cloned())
        .unwrap_or_else(|| json!({"type": "object"}));
    json!({"type": "object", "additionalProperties": false, "required": ["type", "payload"],
           "properties": {"type": {"type": "string", "enum": [kind, CLARIFICATION_KIND]}, "payload": payload}})
}

/// Router-side validation of an envelope-shaped model output (the pipeline re-checks all):
/// a string `type` that is `expected` or a universal kind, a `payload` valid against the
/// node's vendor schema for that kind, else the embedded schema.
pub fn validate_output(
    expected: &str,
    v: &Value,
    vendor: &BTreeMap<String, CompiledSchema>,
) -> Result<(), Vec<ValidationIssue>> {
    let issue = |path: &str, keyword: &str, message: String| {
        vec![ValidationIssue {
            instance_path: path.into(),
            keyword: keyword.into(),
            message,
        }]
    };
    let Some(kind) = v.get("type").and_then(Value::as_str) else {
        return Err(issue(
            "/type",
            "required",
            "the output must be an envelope object with a string `type`".into(),
        ));
    };
    if kind != expected && !is_universal_kind(kind) {
        return Err(issue(
            "/type",
            "enum",
            format!("expected envelope type `{expected}` (or a universal kind)"),
        ));
    }
    let Some(payload) = v.get("payload") else {
        return Err(issue(
            "/payload",
            "required",
            "the envelope needs a `payload`".into(),
        ));
    };
    let prefix = |mut issues: Vec<ValidationIssue>| {
        for i in &mut issues {
            i.instance_path = format!("/payload{}", i.instance_path);
        }
        issues
    };
    if let Some(s) = vendor.get(kind) {
        return s.validate(payload).map_err(prefix);
    }
    match schema::validate_kind_payload(kind, payload) {
        Some(r) => r.map_err(prefix),
        None => Ok(()),
    }
}

/// The envelope the engine submits to the pipeline for an accepted output: the model's
/// `type` (default `kind`), `payload` and `schemaVersion`, and the engine's
/// `correlationId`, `nodeId` and `meta` (`ai-generation`, untrusted). Anything else the
/// model wrote is dropped.
pub fn assemble(
    output: &Value,
    kind: &str,
    correlation_id: &str,
    node_id: &str,
    ts: &str,
) -> Value {
    let mut env: Map<String, Value> = output.as_object().cloned().unwrap_or_default();
    env.retain(|k, _| k == "type" || k == "payload" || k == "schemaVersion");
    env.entry("type").or_insert_with(|| json!(kind));
    env.insert("correlationId".into(), json!(correlation_id));
    env.insert("nodeId".into(), json!(node_id));
    env.insert(
        "meta".into(),
        json!({"source": "ai-generation", "ts": ts, "contentTrust": "untrusted"}),
    );
    Value::Object(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_owns_correlation_node_and_trust() {
        let out = json!({"type": "vendor.acme.x", "payload": {"a": 1}, "correlationId": "forged",
                         "meta": {"contentTrust": "trusted"}, "extra": true});
        let env = assemble(&out, "vendor.acme.x", "c-1", "n", "2025-01-01T00:00:00Z");
        assert_eq!(env["correlationId"], "c-1");
        assert_eq!(env["nodeId"], "n");
        assert_eq!(env["meta"]["contentTrust"], "untrusted");
        assert!(env.get("extra").is_none());
        let env = assemble(&json!({"payload": {}}), "k", "c", "n", "t");
        assert_eq!(env["type"], "k");
    }

    #[test]
    fn outputs_are_checked_for_kind_and_payload() {
        let none = BTreeMap::new();
        assert!(validate_output("k", &json!({"type": "k", "payload": {}}), &none).is_ok());
        let e = validate_output("k", &json!({"type": "other", "payload": {}}), &none).unwrap_err();
        assert_eq!(e[0].instance_path, "/type");
        let e = validate_output("k", &json!({"type": "k"}), &none).unwrap_err();
        assert_eq!(e[0].instance_path, "/payload");
        let vendor = BTreeMap::from([(
            "k".to_owned(),
            schema::compile(&json!({"type": "object", "required": ["x"]})).unwrap(),
        )]);
        let e = validate_output("k", &json!({"type": "k", "payload": {}}), &vendor).unwrap_err();
        assert!(e[0].instance_path.starts_with("/payload"), "{e:?}");
        let w = wire_schema("k", None);
        assert_eq!(
            w["properties"]["type"]["enum"],
            json!(["k", CLARIFICATION_KIND])
        );
    }
}
