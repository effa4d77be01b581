//! Step 10 — handler and projection: kind → `RunEventDoc`s
//! (`causationId = correlationId`, `contentTrust` = the resolved trust).
//! - `clarification.request` → `clarification.requested` + `interrupt.requested`
//!   (`payload.kind: "clarification"`);
//! - `schema.request` / `schema.response` → `log.appended` (debug);
//! - `error` → `log.appended` (level error), never `node.failed`;
//! - other kinds: no event here — the node consumes `redactedPayload`.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::envelope::{AiEnvelope, ContentTrust};
use crate::events::{
    ClarificationRequested, EventFactory, InterruptKind, InterruptRequested, LogAppended, LogLevel,
    QuestionRef, RunEventDoc,
};

use super::Context;

pub(crate) fn project(
    env: &AiEnvelope,
    payload: &Value,
    envelope_id: &str,
    ctx: &Context<'_>,
    corr: &str,
    trust: ContentTrust,
    events: &mut EventFactory,
) -> Vec<RunEventDoc> {
    let node = ctx.node_id.to_owned();
    let key = |t: &str| format!("{corr}/handler/{t}");
    let str_field = |f: &str| {
        payload
            .get(f)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let docs = match env.kind.as_str() {
        "clarification.request" => {
            let interrupt_id = interrupt_id_for(events.run_id(), corr);
            let questions: Vec<QuestionRef> = payload
                .get("questions")
                .and_then(Value::as_array)
                .map(|qs| {
                    qs.iter()
                        .map(|q| QuestionRef {
                            id: q
                                .get("id")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                            question: q
                                .get("question")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                            schema: q.get("schema").cloned(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let mut interrupt_payload = json!({"questions": payload.get("questions").cloned().unwrap_or(Value::Null), "envelopeId": envelope_id});
            if let Some(ct) = payload.get("contextType") {
                interrupt_payload["contextType"] = ct.clone();
            }
            vec![
                events.emit(
                    &key("clarification.requested"),
                    ctx.timestamp,
                    &ClarificationRequested {
                        node_id: node.clone(),
                        questions,
                        interrupt_id: Some(interrupt_id.clone()),
                    },
                ),
                events.emit(
                    &key("interrupt.requested"),
                    ctx.timestamp,
                    &InterruptRequested {
                        interrupt_id,
                        node_id: node,
                        kind: InterruptKind::Clarification,
                        payload: Some(interrupt_payload),
                    },
                ),
            ]
        }
        "schema.request" | "schema.response" => {
            let message = if env.kind == "schema.request" {
                "the model asked for the schema of an envelope kind"
            } else {
                "the model acknowledged an envelope schema"
            };
            vec![events.emit(
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
        "error" => vec![events.emit(
            &key("log.appended"),
            ctx.timestamp,
            &LogAppended {
                level: LogLevel::Error,
                message: format!("the model reported an error: {}", str_field("message")),
                node_id: Some(node),
                fields: Some(json!({"code": str_field("code"), "envelopeId": envelope_id})),
            },
        )],
        _ => Vec::new(),
    };
    docs.into_iter()
        .map(|d| super::stamp(d, ctx, corr, trust))
        .collect()
}

/// Deterministic interrupt id for a clarification lifted from `correlationId`.
pub fn interrupt_id_for(run_id: &str, correlation_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"interrupt\0");
    h.update(run_id.as_bytes());
    h.update([0u8]);
    h.update(correlation_id.as_bytes());
    format!("int-{}", &hex::encode(h.finalize())[..32])
}
