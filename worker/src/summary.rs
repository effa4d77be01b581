//! The worker's final summary, written to its termination message (at most 4096 bytes):
//! `{phase, currentNode?, events, lastSequence?, pendingInterrupt?, error?}` — the shape
//! `operator/src/projection.rs::parse_termination_message` reads.

use openwop_protocol::events::{EventType, RunEventDoc};
use serde_json::{Value, json};

use crate::executor::RunEnd;

const MAX_BYTES: usize = 4096;

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

/// Builds the summary from how the run ended and its log.
pub fn summary(end: &RunEnd, events: &[RunEventDoc]) -> Value {
    let current = events.iter().rev().find_map(|e| e.node_id.clone());
    let mut out =
        json!({"events": events.len(), "lastSequence": events.last().map(|e| e.sequence)});
    if let Some(n) = &current {
        out["currentNode"] = json!(n);
    }
    match end {
        RunEnd::Completed => out["phase"] = json!("completed"),
        RunEnd::Cancelled => out["phase"] = json!("cancelled"),
        RunEnd::Failed(e) => {
            out["phase"] = json!("failed");
            out["error"] = json!({"code": e.code, "message": e.message.chars().take(1024).collect::<String>()});
        }
        RunEnd::Suspended {
            node_id,
            interrupt_id,
            ..
        } => {
            let suspended = events.iter().rev().find(|e| {
                e.event_type == EventType::NodeSuspended
                    && s(&e.payload, "interruptId") == Some(interrupt_id)
            });
            let p = suspended.map(|e| &e.payload).unwrap_or(&Value::Null);
            let low = s(p, "reason") == Some("low-confidence");
            let kind = if low {
                "approval"
            } else {
                s(p, "kind").unwrap_or("custom")
            };
            out["phase"] = json!(match kind {
                "approval" => "waiting-approval",
                "clarification" => "waiting-input",
                _ => "waiting-external",
            });
            let questions: Vec<Value> = events
                .iter()
                .rev()
                .find(|e| e.event_type == EventType::ClarificationRequested && s(&e.payload, "interruptId") == Some(interrupt_id))
                .and_then(|e| e.payload.get("questions").and_then(Value::as_array).cloned())
                .unwrap_or_default()
                .iter()
                .take(8)
                .map(|q| json!({"id": s(q, "id").unwrap_or_default(), "question": s(q, "question").unwrap_or_default().chars().take(256).collect::<String>()}))
                .collect();
            let mut pi = json!({"interruptId": interrupt_id, "nodeId": node_id, "kind": kind, "questions": questions});
            for k in ["reason", "agentId", "threshold", "observed"] {
                if let Some(v) = p.get(k) {
                    pi[k] = v.clone();
                }
            }
            out["pendingInterrupt"] = pi;
        }
    }
    // Keep within the kubelet's termination-message limit: drop questions first.
    if out.to_string().len() > MAX_BYTES {
        out["pendingInterrupt"]["questions"] = json!([]);
    }
    out
}
