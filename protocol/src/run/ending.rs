//! The event that ends a run's log: `run.completed`, `run.failed` or `run.cancelled`.
//!
//! The worker appends it when the run ends inside it; the operator appends `run.failed` /
//! `run.cancelled` itself when it ends the run (crash limit, timeout, cancel without a
//! worker, a refused snapshot, a worker that refused its input), so every log ends with one
//! and a follower (`kubectl openwop events -f`, SSE) always returns. Both build it here, with
//! the same step keys, so its `eventId` (and the stream's `Nats-Msg-Id`) is the same whoever
//! writes it: a second copy is dropped by the stream's dedup.

use serde_json::{Value, json};

use super::status::{RunError, RunPhase};
use crate::events::{ErrorInfo, EventFactory, EventType, RunEventDoc};

/// Step key of `run.failed` (its eventId is `event_id_for(runId, RUN_FAILED_STEP)`).
pub const RUN_FAILED_STEP: &str = "run.failed";
/// Step key of `run.cancelled`.
pub const RUN_CANCELLED_STEP: &str = "run.cancelled";
/// `run.cancelled` `payload.cancelledBy` when the operator (spec.cancel) cancelled the run.
pub const CANCELLED_BY_OPERATOR: &str = "operator";

/// `run.failed {error}` payload.
pub fn failed_payload(error: &ErrorInfo) -> Value {
    json!({ "error": error })
}

/// `run.cancelled {reason, cancelledBy}` payload.
pub fn cancelled_payload(reason: &str, cancelled_by: &str) -> Value {
    json!({ "reason": reason, "cancelledBy": cancelled_by })
}

/// The event recording that the host ended the run in `phase` (`failed` or `cancelled`),
/// at `sequence` (the log's next). `None` for a phase the host never decides alone
/// (`completed` comes only from the worker; non-terminal phases end nothing).
pub fn host_ending(
    run_id: &str,
    sequence: u64,
    timestamp: &str,
    phase: RunPhase,
    error: Option<&RunError>,
    engine_version: &str,
) -> Option<RunEventDoc> {
    let mut factory = EventFactory::new(run_id, sequence).with_engine_version(engine_version);
    match phase {
        RunPhase::Failed => {
            let error = error.map_or_else(
                || ErrorInfo {
                    code: "run_failed".into(),
                    message: "the run failed".into(),
                    details: None,
                    retryable: Some(false),
                },
                |e| ErrorInfo {
                    code: e.code.clone(),
                    message: e.message.clone(),
                    details: None,
                    retryable: Some(false),
                },
            );
            Some(factory.emit_value(
                RUN_FAILED_STEP,
                timestamp,
                EventType::RunFailed,
                failed_payload(&error),
            ))
        }
        RunPhase::Cancelled => {
            let reason = error.map_or("cancelled by spec.cancel", |e| e.message.as_str());
            Some(factory.emit_value(
                RUN_CANCELLED_STEP,
                timestamp,
                EventType::RunCancelled,
                cancelled_payload(reason, CANCELLED_BY_OPERATOR),
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::event_id_for;
    use crate::run::projection::{Projection, is_terminal};

    #[test]
    fn the_host_ending_has_the_workers_event_id_and_projects_to_its_phase() {
        let err = RunError::new("worker_crashed", "4 worker failures (limit 3)");
        let e = host_ending(
            "uid-1",
            7,
            "2026-01-01T00:00:00Z",
            RunPhase::Failed,
            Some(&err),
            "op/1",
        )
        .unwrap();
        assert_eq!(e.event_id, event_id_for("uid-1", RUN_FAILED_STEP));
        assert_eq!((e.sequence, e.event_type), (7, EventType::RunFailed));
        assert_eq!(e.payload["error"]["code"], "worker_crashed");
        let v = serde_json::to_value(&e).unwrap();
        assert!(is_terminal(&v));
        let mut p = Projection::default();
        p.apply(&v);
        assert_eq!(p.phase, Some(RunPhase::Failed));
        assert_eq!(p.error.unwrap().code, "worker_crashed");

        let c = host_ending("uid-1", 0, "t", RunPhase::Cancelled, None, "op/1").unwrap();
        assert_eq!(c.event_id, event_id_for("uid-1", RUN_CANCELLED_STEP));
        assert_eq!(c.payload["cancelledBy"], CANCELLED_BY_OPERATOR);
        assert!(is_terminal(&serde_json::to_value(&c).unwrap()));

        assert!(host_ending("uid-1", 0, "t", RunPhase::Completed, None, "op/1").is_none());
        assert!(host_ending("uid-1", 0, "t", RunPhase::Running, None, "op/1").is_none());
        assert!(!is_terminal(
            &json!({"type": "node.completed", "sequence": 3})
        ));
    }
}
