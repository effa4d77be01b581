//! Step 10 — handler and projection: kind → `RunEventDoc`s
//! (`causationId = correlationId`, `contentTrust` = the resolved trust).
//! - `clarification.request` → `clarification.requested` + `interrupt.requested`
//!   (`payload.kind: "clarification"`);
//! - `schema.request` / `schema.response` → `log.appended` (debug);
//! - `error` → `log.appended` (level error), never `node.failed`;
//! - other kinds: no event here — the node consumes `redactedPayload`.
//!
//! SR-1: every text placed in these events is the redacted payload (or a part
//! of it), the redacted correlationId / envelopeId, a hash-derived id, a fixed
//! text, or redacted here (the node id, composed messages) — so the pipeline
//! passes them on without a second walk.

use std::sync::LazyLock;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::envelope::{AiEnvelope, ContentTrust};
use crate::events::{EventFactory, EventType, InterruptKind, LogAppended, LogLevel, RunEventDoc};

use super::context::{Context, stamp};

pub(crate) fn project(
    env: &AiEnvelope,
    payload: &Value,
    envelope_id: &str,
    ctx: &Context<'_>,
    corr: &str,
    trust: ContentTrust,
    events: &mut EventFactory,
) -> Vec<RunEventDoc> {
    let node = ctx.redactor.redact_str(ctx.node_id).0.into_owned();
    // Event ids hash the step key `<corr>/handler/<event type>` in parts.
    let key = |t: &'static str| [corr, "/handler/", t];
    let str_field = |f: &str| {
        payload
            .get(f)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let docs = match env.kind.as_str() {
        "clarification.request" => {
            // The payloads are built as JSON directly (same shape as the typed
            // `ClarificationRequested` / `InterruptRequested`, checked by the
            // run-event schema tests): serialising the typed structs would copy
            // every question twice more.
            let interrupt_id = interrupt_id_for(events.run_id(), corr);
            let questions = payload.get("questions");
            let refs: Vec<Value> = questions
                .and_then(Value::as_array)
                .map(|qs| qs.iter().map(question_ref).collect())
                .unwrap_or_default();
            let mut inner = keyed(
                &INNER,
                [
                    questions.cloned().unwrap_or(Value::Null),
                    Value::from(envelope_id),
                ],
            );
            if let Some(ct) = payload.get("contextType") {
                inner.insert("contextType".to_owned(), ct.clone());
            }
            let requested = keyed(
                &REQUESTED,
                [
                    Value::from(node.as_str()),
                    Value::Array(refs),
                    Value::from(interrupt_id.as_str()),
                ],
            );
            let interrupt = keyed(
                &INTERRUPT,
                [
                    Value::from(interrupt_id),
                    Value::from(node),
                    Value::from(InterruptKind::Clarification.as_str()),
                    Value::Object(inner),
                ],
            );
            vec![
                events.emit_value_at(
                    &key("clarification.requested"),
                    ctx.timestamp,
                    EventType::ClarificationRequested,
                    Value::Object(requested),
                ),
                events.emit_value_at(
                    &key("interrupt.requested"),
                    ctx.timestamp,
                    EventType::InterruptRequested,
                    Value::Object(interrupt),
                ),
            ]
        }
        "schema.request" | "schema.response" => {
            let message = if env.kind == "schema.request" {
                "the model asked for the schema of an envelope kind"
            } else {
                "the model acknowledged an envelope schema"
            };
            vec![events.emit_at(
                &key("log.appended"),
                ctx.timestamp,
                &LogAppended {
                    level: LogLevel::Debug,
                    message: message.to_owned(),
                    node_id: Some(node),
                    fields: Some(json!({"envelopeKind": env.kind, "envelopeType": str_field("envelopeType"), "envelopeId": envelope_id})),
                },
            )]
        }
        "error" => vec![
            events.emit_at(
                &key("log.appended"),
                ctx.timestamp,
                &LogAppended {
                    level: LogLevel::Error,
                    // Redacted again as a whole: a secret could straddle the join.
                    message: ctx
                        .redactor
                        .redact_str(&format!(
                            "the model reported an error: {}",
                            str_field("message")
                        ))
                        .0
                        .into_owned(),
                    node_id: Some(node),
                    fields: Some(json!({"code": str_field("code"), "envelopeId": envelope_id})),
                },
            ),
        ],
        _ => Vec::new(),
    };
    docs.into_iter()
        .map(|d| stamp(d, ctx, corr, trust))
        .collect()
}

/// One `clarification.requested` question: `{id, question, schema?}`.
fn question_ref(q: &Value) -> Value {
    let text = |f: &str| Value::from(q.get(f).and_then(Value::as_str).unwrap_or_default());
    let mut m = keyed(&QUESTION, [text("id"), text("question")]);
    if let Some(schema) = q.get("schema") {
        m.insert("schema".to_owned(), schema.clone());
    }
    Value::Object(m)
}

// The fixed key sets of the projected objects, in wire order.
static REQUESTED: LazyLock<Map<String, Value>> =
    LazyLock::new(|| template(&["nodeId", "questions", "interruptId"]));
static INTERRUPT: LazyLock<Map<String, Value>> =
    LazyLock::new(|| template(&["interruptId", "nodeId", "kind", "payload"]));
static INNER: LazyLock<Map<String, Value>> =
    LazyLock::new(|| template(&["questions", "envelopeId"]));
static QUESTION: LazyLock<Map<String, Value>> = LazyLock::new(|| template(&["id", "question"]));

fn template(keys: &[&str]) -> Map<String, Value> {
    keys.iter()
        .map(|k| ((*k).to_owned(), Value::Null))
        .collect()
}

/// The template's keys, in order, with `values`. The object is a copy of the
/// template, hash table included, so no key is hashed again: these objects
/// are built for every clarification.
fn keyed<const N: usize>(template: &Map<String, Value>, values: [Value; N]) -> Map<String, Value> {
    debug_assert_eq!(template.len(), N);
    let mut m = template.clone();
    for (slot, v) in m.values_mut().zip(values) {
        *slot = v;
    }
    m
}

/// Deterministic interrupt id for a clarification lifted from `correlationId`.
pub fn interrupt_id_for(run_id: &str, correlation_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"interrupt\0");
    h.update(run_id.as_bytes());
    h.update([0u8]);
    h.update(correlation_id.as_bytes());
    crate::events::hex_id("int-", &h.finalize(), 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{ClarificationRequested, InterruptRequested, QuestionRef};

    #[test]
    fn interrupt_kind_wire_names_match_serde() {
        for k in [
            InterruptKind::Approval,
            InterruptKind::Clarification,
            InterruptKind::ExternalEvent,
            InterruptKind::Custom,
        ] {
            assert_eq!(serde_json::to_value(k).unwrap(), Value::from(k.as_str()));
        }
    }

    #[test]
    fn direct_payloads_equal_the_typed_events() {
        let payload = json!({"questions": [
            {"id": "q1", "question": "Which region?", "schema": {"type": "string"}},
            {"id": "q2", "question": "Why?", "context": "ignored"}
        ], "contextType": "deploy"});
        let redactor = crate::redact::Redactor::default();
        let host = super::super::HostPolicy::default();
        let ctx = Context::new(&host, &redactor, "node-1", "2026-05-18T10:00:00Z");
        let env: AiEnvelope = serde_json::from_value(json!({"type": "clarification.request",
            "correlationId": "c1", "payload": payload, "meta": {"source": "ai-generation", "ts": "2026-05-18T10:00:00Z"}}))
        .unwrap();
        let mut events = EventFactory::new("run-1", 0);
        let docs = project(
            &env,
            &payload,
            "env-1",
            &ctx,
            "c1",
            ContentTrust::Trusted,
            &mut events,
        );
        let interrupt_id = interrupt_id_for("run-1", "c1");
        let typed_requested = ClarificationRequested {
            node_id: "node-1".into(),
            questions: vec![
                QuestionRef {
                    id: "q1".into(),
                    question: "Which region?".into(),
                    schema: Some(json!({"type": "string"})),
                },
                QuestionRef {
                    id: "q2".into(),
                    question: "Why?".into(),
                    schema: None,
                },
            ],
            interrupt_id: Some(interrupt_id.clone()),
        };
        let typed_interrupt = InterruptRequested {
            interrupt_id,
            node_id: "node-1".into(),
            kind: InterruptKind::Clarification,
            payload: Some(
                json!({"questions": payload["questions"], "envelopeId": "env-1", "contextType": "deploy"}),
            ),
            key: None,
            data: None,
            requested_at: None,
            timeout_ms: None,
        };
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].event_type, EventType::ClarificationRequested);
        assert_eq!(
            docs[0].payload,
            serde_json::to_value(&typed_requested).unwrap()
        );
        assert_eq!(docs[1].event_type, EventType::InterruptRequested);
        assert_eq!(
            docs[1].payload,
            serde_json::to_value(&typed_interrupt).unwrap()
        );
        // Key order is part of the wire form too.
        assert_eq!(
            docs[1].payload.to_string(),
            serde_json::to_string(&typed_interrupt).unwrap()
        );
        assert_eq!(
            docs[0].payload.to_string(),
            serde_json::to_string(&typed_requested).unwrap()
        );
    }
}
