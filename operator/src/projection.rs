//! Projection of a run's event stream onto the small `Run.status`: phase, current node,
//! counters, pending interrupt and error. Pure; the operator feeds it events (or the worker's
//! final summary) and writes the result with server-side apply.

use openwop_crds::{PendingInterrupt, PendingQuestion, RunError, RunPhase};
use serde_json::Value;

/// Longest question text kept in status.
const MAX_QUESTION_CHARS: usize = 512;
/// Most questions kept in status.
const MAX_QUESTIONS: usize = 16;
/// Longest error message kept in status.
const MAX_MESSAGE_CHARS: usize = 1024;

/// The status fields the event stream determines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Projection {
    pub phase: Option<RunPhase>,
    pub current_node: Option<String>,
    pub events: u64,
    pub last_sequence: Option<u64>,
    pub pending_interrupt: Option<PendingInterrupt>,
    pub error: Option<RunError>,
}

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

impl Projection {
    /// Applies one `RunEventDoc`. Events at or below the last applied sequence are replays
    /// and change nothing. Returns whether the event was applied.
    pub fn apply(&mut self, event: &Value) -> bool {
        let seq = event.get("sequence").and_then(Value::as_u64);
        if let (Some(seq), Some(last)) = (seq, self.last_sequence)
            && seq <= last
        {
            return false;
        }
        self.events += 1;
        if seq.is_some() {
            self.last_sequence = seq;
        }
        let empty = Value::Null;
        let payload = event.get("payload").unwrap_or(&empty);
        let node = s(event, "nodeId").or_else(|| s(payload, "nodeId"));
        match s(event, "type").unwrap_or("") {
            "run.started" | "run.resumed" => self.phase = Some(RunPhase::Running),
            "node.started" => {
                self.phase = Some(RunPhase::Running);
                self.current_node = node.map(str::to_owned);
            }
            "node.suspended" => {
                let kind = s(payload, "kind").unwrap_or("custom");
                let low_confidence = s(payload, "reason") == Some("low-confidence");
                self.phase = Some(match kind {
                    _ if low_confidence => RunPhase::WaitingApproval,
                    "approval" => RunPhase::WaitingApproval,
                    "clarification" => RunPhase::WaitingInput,
                    _ => RunPhase::WaitingExternal,
                });
                self.current_node = node.map(str::to_owned);
                let questions = self
                    .pending_interrupt
                    .take()
                    .map(|p| p.questions)
                    .unwrap_or_default();
                self.pending_interrupt = Some(PendingInterrupt {
                    interrupt_id: s(payload, "interruptId").unwrap_or_default().to_owned(),
                    node_id: node.unwrap_or_default().to_owned(),
                    kind: if low_confidence { "approval" } else { kind }.to_owned(),
                    questions,
                    reason: s(payload, "reason").map(str::to_owned),
                    agent_id: s(payload, "agentId").map(str::to_owned),
                    threshold: payload.get("threshold").and_then(Value::as_f64),
                    observed: payload.get("observed").and_then(Value::as_f64),
                });
            }
            "clarification.requested" => {
                self.phase = Some(RunPhase::WaitingInput);
                let questions = payload
                    .get("questions")
                    .and_then(Value::as_array)
                    .map(|qs| {
                        qs.iter()
                            .take(MAX_QUESTIONS)
                            .map(|q| PendingQuestion {
                                id: s(q, "id").unwrap_or_default().to_owned(),
                                question: truncate(
                                    s(q, "question").unwrap_or_default(),
                                    MAX_QUESTION_CHARS,
                                ),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let p = self
                    .pending_interrupt
                    .get_or_insert_with(|| PendingInterrupt {
                        interrupt_id: String::new(),
                        node_id: node.unwrap_or_default().to_owned(),
                        kind: "clarification".into(),
                        questions: vec![],
                        reason: None,
                        agent_id: None,
                        threshold: None,
                        observed: None,
                    });
                if let Some(id) = s(payload, "interruptId") {
                    p.interrupt_id = id.to_owned();
                }
                p.questions = questions;
            }
            "approval.requested" => self.phase = Some(RunPhase::WaitingApproval),
            "interrupt.resolved"
            | "clarification.resolved"
            | "approval.granted"
            | "node.resumed" => {
                self.pending_interrupt = None;
                self.phase = Some(RunPhase::Running);
            }
            "run.completed" => {
                self.phase = Some(RunPhase::Completed);
                self.pending_interrupt = None;
            }
            "run.cancelled" => {
                self.phase = Some(RunPhase::Cancelled);
                self.pending_interrupt = None;
            }
            "run.failed" => {
                self.phase = Some(RunPhase::Failed);
                self.pending_interrupt = None;
                let err = payload.get("error").unwrap_or(payload);
                self.error = Some(RunError {
                    code: s(err, "code").unwrap_or("run_failed").to_owned(),
                    message: truncate(
                        s(err, "message").unwrap_or("the run failed"),
                        MAX_MESSAGE_CHARS,
                    ),
                });
            }
            _ => {}
        }
        true
    }
}

/// The worker's final summary, written to its termination message (`/dev/termination-log`,
/// at most 4096 bytes): `{phase, currentNode?, events?, lastSequence?, pendingInterrupt?, error?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerSummary {
    pub projection: Projection,
}

/// Parses a worker termination message; `None` when absent or not a summary.
pub fn parse_termination_message(text: &str) -> Option<WorkerSummary> {
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    let phase: RunPhase = serde_json::from_value(v.get("phase")?.clone()).ok()?;
    let pending_interrupt = v
        .get("pendingInterrupt")
        .and_then(|p| serde_json::from_value::<PendingInterrupt>(p.clone()).ok())
        .map(|mut p| {
            p.questions.truncate(MAX_QUESTIONS);
            for q in &mut p.questions {
                q.question = truncate(&q.question, MAX_QUESTION_CHARS);
            }
            p
        });
    let error = v
        .get("error")
        .and_then(|e| serde_json::from_value::<RunError>(e.clone()).ok())
        .map(|mut e| {
            e.message = truncate(&e.message, MAX_MESSAGE_CHARS);
            e
        });
    Some(WorkerSummary {
        projection: Projection {
            phase: Some(phase),
            current_node: s(&v, "currentNode").map(str::to_owned),
            events: v.get("events").and_then(Value::as_u64).unwrap_or(0),
            last_sequence: v.get("lastSequence").and_then(Value::as_u64),
            pending_interrupt,
            error,
        },
    })
}

/// Why a worker failed, from a termination message that is not a summary: the log tail the
/// kubelet puts there (`terminationMessagePolicy: FallbackToLogsOnError`) when the worker
/// exits non-zero without writing one. The last ERROR line of the worker's JSON log as
/// `message: error`, else the last plain-text line (a panic); `None` when the tail is only
/// ordinary log lines (a killed worker). Bounded; the worker's log is redacted at the source.
pub fn crash_reason(text: &str) -> Option<String> {
    if parse_termination_message(text).is_some() {
        return None;
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let last_error = lines.iter().rev().find_map(|l| {
        let v: Value = serde_json::from_str(l).ok()?;
        if v.get("level")?.as_str()? != "ERROR" {
            return None;
        }
        let fields = v.get("fields")?;
        let message = fields.get("message")?.as_str()?;
        Some(match fields.get("error").and_then(Value::as_str) {
            Some(e) => format!("{message}: {e}"),
            None => message.to_owned(),
        })
    });
    let plain = || {
        let text: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| serde_json::from_str::<Value>(l).is_err())
            .collect();
        // A panic prints its location on one line and its message on the next.
        match text.iter().rposition(|l| l.contains("panicked at")) {
            Some(i) => Some(text[i..text.len().min(i + 2)].join(" ")),
            None => text.last().map(|l| (*l).to_owned()),
        }
    };
    let reason = last_error.or_else(plain)?;
    Some(truncate(&reason, MAX_MESSAGE_CHARS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(seq: u64, ty: &str, payload: Value) -> Value {
        json!({"eventId": format!("e{seq}"), "runId": "r", "type": ty, "sequence": seq,
               "timestamp": "2025-01-01T00:00:00Z", "payload": payload})
    }

    #[test]
    fn happy_path_ends_completed_with_counters() {
        let mut p = Projection::default();
        p.apply(&ev(0, "run.started", json!({})));
        p.apply(&ev(1, "node.started", json!({"nodeId": "a"})));
        assert_eq!(
            (p.phase, p.current_node.as_deref()),
            (Some(RunPhase::Running), Some("a"))
        );
        p.apply(&ev(2, "node.completed", json!({"nodeId": "a"})));
        p.apply(&ev(3, "run.completed", json!({})));
        assert_eq!(p.phase, Some(RunPhase::Completed));
        assert_eq!((p.events, p.last_sequence), (4, Some(3)));
    }

    #[test]
    fn replayed_events_are_ignored() {
        let mut p = Projection::default();
        assert!(p.apply(&ev(0, "run.started", json!({}))));
        assert!(p.apply(&ev(1, "node.started", json!({"nodeId": "a"}))));
        assert!(!p.apply(&ev(1, "node.started", json!({"nodeId": "a"}))));
        assert!(!p.apply(&ev(0, "run.started", json!({}))));
        assert_eq!(p.events, 2);
    }

    #[test]
    fn low_confidence_suspension_waits_for_approval() {
        let mut p = Projection::default();
        p.apply(&ev(
            0,
            "node.suspended",
            json!({"nodeId": "m", "interruptId": "i1",
            "reason": "low-confidence", "agentId": "agent-x", "threshold": 0.7, "observed": 0.4}),
        ));
        assert_eq!(p.phase, Some(RunPhase::WaitingApproval));
        let pi = p.pending_interrupt.clone().unwrap();
        assert_eq!(
            (pi.interrupt_id.as_str(), pi.kind.as_str(), pi.observed),
            ("i1", "approval", Some(0.4))
        );
        p.apply(&ev(1, "interrupt.resolved", json!({})));
        assert_eq!(
            (p.phase, p.pending_interrupt.is_none()),
            (Some(RunPhase::Running), true)
        );
    }

    #[test]
    fn clarification_waits_for_input_with_bounded_questions() {
        let mut p = Projection::default();
        let long = "q".repeat(2000);
        let qs: Vec<Value> = (0..40)
            .map(|i| json!({"id": format!("q{i}"), "question": long}))
            .collect();
        p.apply(&ev(
            0,
            "clarification.requested",
            json!({"nodeId": "n", "questions": qs, "interruptId": "i9"}),
        ));
        p.apply(&ev(
            1,
            "node.suspended",
            json!({"nodeId": "n", "interruptId": "i9", "kind": "clarification"}),
        ));
        assert_eq!(p.phase, Some(RunPhase::WaitingInput));
        let pi = p.pending_interrupt.unwrap();
        assert_eq!(pi.questions.len(), 16);
        assert!(pi.questions[0].question.chars().count() <= 513);
        assert_eq!(pi.interrupt_id, "i9");
    }

    #[test]
    fn failure_keeps_code_and_message() {
        let mut p = Projection::default();
        p.apply(&ev(
            0,
            "run.failed",
            json!({"error": {"code": "envelope_invalid", "message": "schema rounds exhausted"}}),
        ));
        assert_eq!(p.phase, Some(RunPhase::Failed));
        assert_eq!(
            p.error,
            Some(RunError {
                code: "envelope_invalid".into(),
                message: "schema rounds exhausted".into()
            })
        );
    }

    #[test]
    fn termination_message_parses_or_is_ignored() {
        let s = parse_termination_message(r#"{"phase":"waiting-input","currentNode":"n","events":7,"lastSequence":6,
            "pendingInterrupt":{"interruptId":"i1","nodeId":"n","kind":"clarification","questions":[{"id":"q","question":"Which?"}]}}"#).unwrap();
        assert_eq!(s.projection.phase, Some(RunPhase::WaitingInput));
        assert_eq!(s.projection.last_sequence, Some(6));
        assert_eq!(s.projection.pending_interrupt.unwrap().questions[0].id, "q");
        assert!(parse_termination_message("panic: boom").is_none());
        assert!(parse_termination_message(r#"{"phase":"exploded"}"#).is_none());
    }

    #[test]
    fn crash_reason_is_the_last_error_of_the_log_tail() {
        let tail = concat!(
            r#"{"timestamp":"t","level":"INFO","fields":{"message":"event log read"},"target":"w"}"#,
            "\n",
            r#"{"timestamp":"t","level":"ERROR","fields":{"message":"unusable NATS credentials","error":"has `username` but no `password`"},"target":"w"}"#,
            "\n",
            r#"{"timestamp":"t","level":"INFO","fields":{"message":"bye"},"target":"w"}"#,
            "\n"
        );
        assert_eq!(
            crash_reason(tail).as_deref(),
            Some("unusable NATS credentials: has `username` but no `password`")
        );
        assert_eq!(
            crash_reason(
                "thread 'main' panicked at x.rs:1:\nboom\nnote: run with RUST_BACKTRACE=1\n"
            )
            .as_deref(),
            Some("thread 'main' panicked at x.rs:1: boom")
        );
        assert_eq!(
            crash_reason("out of memory\n").as_deref(),
            Some("out of memory")
        );
        // Only ordinary log lines (SIGKILL mid-step): no reason to quote.
        let killed = r#"{"timestamp":"t","level":"INFO","fields":{"message":"mock provider call"},"target":"w"}"#;
        assert_eq!(crash_reason(killed), None);
        assert_eq!(crash_reason("  \n"), None);
        // A worker summary is not a crash reason.
        assert_eq!(crash_reason(r#"{"phase":"failed","events":3}"#), None);
        assert!(crash_reason(&"x".repeat(5000)).unwrap().chars().count() <= MAX_MESSAGE_CHARS + 1);
    }
}
