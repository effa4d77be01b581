//! AI envelope wire types (LLM → engine), RFC 0021 / `spec/v1/ai-envelope.md`.
//!
//! The top level and `meta` are closed objects; unknown fields are refused by
//! the pipeline's shape step (which reports every problem with a JSON Pointer)
//! before these types are ever deserialised.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The four universal kinds: always accepted by contract gates and always
/// advertised whenever any kind is.
pub const UNIVERSAL_KINDS: [&str; 4] = [
    "clarification.request",
    "schema.request",
    "schema.response",
    "error",
];

/// The media reference kinds (RFC 0055 §C): optional core kinds whose payload schemas ship
/// with this project (`schemas/envelopes/media.*.schema.json`).
pub const MEDIA_KINDS: [&str; 3] = ["media.image", "media.audio", "media.file"];

/// The A2UI surface kind (RFC 0102): an optional core kind a host advertises only if it
/// renders A2UI. This project does not: it ships no payload schema for it and never
/// advertises it.
pub const A2UI_SURFACE_KIND: &str = "ui.a2ui-surface";

/// The spec's optional core kinds (`ai-envelope.md` §"Media reference payloads",
/// §"A2UI surfaces"): not universal, advertised only by hosts that produce them.
pub const OPTIONAL_CORE_KINDS: [&str; 4] = [
    MEDIA_KINDS[0],
    MEDIA_KINDS[1],
    MEDIA_KINDS[2],
    A2UI_SURFACE_KIND,
];

/// True for `clarification.request`, `schema.request`, `schema.response`, `error`.
pub fn is_universal_kind(kind: &str) -> bool {
    UNIVERSAL_KINDS.contains(&kind)
}

/// `kinds` with the universal kinds first (ai-envelope.md, RFC 0094: a host advertising any
/// kind advertises the universal four), then the others in their order, without duplicates.
/// The one ordering of `supportedEnvelopes`, of a contract's accepted kinds and of the
/// kinds a refusal lists.
pub fn universal_first(kinds: &[String]) -> Vec<String> {
    let mut out: Vec<String> = UNIVERSAL_KINDS.iter().map(|k| (*k).to_owned()).collect();
    for k in kinds {
        if !out.contains(k) {
            out.push(k.clone());
        }
    }
    out
}

/// Maximum lengths of the envelope's identifier fields (from the wire schema).
pub const MAX_TYPE_LEN: usize = 256;
/// `envelopeId` and `correlationId` are 1..128 characters.
pub const MAX_ID_LEN: usize = 128;
/// `meta.label` is at most 256 characters.
pub const MAX_LABEL_LEN: usize = 256;

/// One AI envelope as it travels on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AiEnvelope {
    /// The envelope kind, e.g. `clarification.request` or `vendor.acme.prd.create`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Assigned by the engine when the model omits it (see `pipeline::envelope_id_for`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope_id: Option<String>,
    /// Dedup / replay key; recommended `${runId}:${nodeId}:${turnIndex}:${kindHash}`.
    pub correlation_id: String,
    /// Per-kind payload schema version; absent means 0.
    #[serde(default)]
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    pub payload: Value,
    pub meta: EnvelopeMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<Partial>,
}

/// `meta` block (closed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvelopeMeta {
    pub source: Source,
    /// ISO 8601 / RFC 3339 timestamp, checked by the shape step.
    pub ts: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_trust: Option<ContentTrust>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendering: Option<Rendering>,
}

/// Who produced the envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    AiGeneration,
    User,
    System,
}

/// Trust marker carried by envelopes and run events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContentTrust {
    #[default]
    Trusted,
    Untrusted,
}

impl ContentTrust {
    pub fn as_str(self) -> &'static str {
        match self {
            ContentTrust::Trusted => "trusted",
            ContentTrust::Untrusted => "untrusted",
        }
    }
}

/// Rendering hints for clients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rendering {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<Display>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lang: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Display {
    Markdown,
    Code,
    Card,
    Image,
    Audio,
    File,
}

/// Streaming fragment marker; `total` is -1 when unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Partial {
    pub is_partial: bool,
    pub index: u64,
    pub total: i64,
}

/// `clarification.request` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClarificationRequest {
    pub questions: Vec<ClarificationQuestion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

/// One question of a `clarification.request`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClarificationQuestion {
    pub id: String,
    pub question: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
}

/// `schema.request` payload: the model asks for the schema of `envelopeType`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaRequest {
    pub envelope_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

/// `schema.response` payload (never carries `reasoning`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaResponse {
    pub envelope_type: String,
    pub ack: bool,
}

/// `error` payload: the model reports it cannot proceed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorPayload {
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_with_wire_names() {
        let v = json!({
            "type": "clarification.request",
            "envelopeId": "e1",
            "correlationId": "r:n:0:k",
            "schemaVersion": 1,
            "payload": {"questions": [{"id": "q", "question": "Which?"}]},
            "meta": {"source": "ai-generation", "ts": "2026-05-18T10:00:00Z", "contentTrust": "untrusted"},
            "partial": {"isPartial": true, "index": 0, "total": -1}
        });
        let env: AiEnvelope = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(env.kind, "clarification.request");
        assert_eq!(env.meta.source, Source::AiGeneration);
        assert_eq!(env.meta.content_trust, Some(ContentTrust::Untrusted));
        assert_eq!(serde_json::to_value(&env).unwrap(), v);
        let p: ClarificationRequest = serde_json::from_value(env.payload).unwrap();
        assert_eq!(p.questions[0].question, "Which?");
    }

    #[test]
    fn absent_schema_version_is_zero_and_unknown_fields_refused() {
        let v = json!({"type": "error", "correlationId": "c", "payload": {},
            "meta": {"source": "system", "ts": "2026-05-18T10:00:00Z"}});
        let env: AiEnvelope = serde_json::from_value(v).unwrap();
        assert_eq!(env.schema_version, 0);
        let bad = json!({"type": "error", "correlationId": "c", "payload": {}, "extra": 1,
            "meta": {"source": "system", "ts": "2026-05-18T10:00:00Z"}});
        assert!(serde_json::from_value::<AiEnvelope>(bad).is_err());
    }

    #[test]
    fn universal_kinds_are_recognised() {
        assert!(is_universal_kind("error"));
        assert!(is_universal_kind("schema.response"));
        assert!(!is_universal_kind("media.image"));
    }
}
