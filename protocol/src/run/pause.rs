//! Pausing a run (`rest-endpoints.md` `POST /v1/runs/{runId}:pause` / `:resume`): one request
//! type for the Run's `spec.pause` (set by REST, `kubectl openwop pause` and `kubectl patch`
//! alike), the run snapshot and the operator's message to a running worker (its
//! [`DrainPolicy`] is part of the `run.paused` payload, so it lives in `events`); and the fold
//! that tells, from a run's log, whether it is paused and how many pauses it has seen (the
//! step keys of `run.paused` / `run.resumed`).
//!
//! The life of a pause: the worker stops at a safe point (`immediate`: in-flight nodes are
//! abandoned unrecorded and run again as fresh attempts on resume; `drain-current-node`:
//! in-flight nodes finish, no node starts and the run does not end), records `run.paused`
//! and exits suspended, so a paused run holds no pod. Clearing `spec.pause` resumes it: a new
//! worker records `run.resumed {fromStatus: paused}`, replays the log and continues. Replay
//! treats both events as no-ops: they claim no node's step.

use serde::{Deserialize, Serialize};

use super::status::RunPhase;
use crate::events::{DrainPolicy, EventType, RunEventDoc, RunPaused};

/// Longest `reason` a pause keeps (longer ones are refused by the API and the CRD).
pub const MAX_REASON_CHARS: usize = 1024;

/// A pause of a run: the Run's `spec.pause`, copied into the snapshot of a worker started
/// while it is set, and the body of the operator's message to the running worker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PauseRequest {
    /// Why (recorded in `run.paused.reason`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
    /// `immediate` or `drain-current-node` (the default).
    #[serde(default)]
    pub drain_policy: DrainPolicy,
    /// When the pause was requested (RFC 3339; the API's `pausedAt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<String>,
}

impl PauseRequest {
    /// The `run.paused` payload of this pause, taking effect at `at`.
    pub fn paused_payload(&self, at: &str) -> RunPaused {
        RunPaused {
            reason: self.reason.clone(),
            drain_policy: self.drain_policy,
            paused_at: Some(at.to_owned()),
        }
    }
}

/// A live worker's answer on the run's control subject to a pause it took
/// ([`super::subjects::control_subject`]); anything else says why it did not.
pub const CONTROL_ACK: &[u8] = b"ok";

/// `run.resumed.fromStatus` of a resume after a pause (an interrupt's resume names its
/// `interruptId` instead).
pub const FROM_PAUSED: &str = "paused";

/// What a run's log says about its pauses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PauseLog {
    /// `run.paused` events recorded.
    pub pauses: u32,
    /// The last pause has no `run.resumed {fromStatus: paused}` after it.
    pub paused: bool,
}

impl PauseLog {
    /// Folds a run's log.
    pub fn of<'a>(events: impl IntoIterator<Item = &'a RunEventDoc>) -> PauseLog {
        let mut log = PauseLog::default();
        for e in events {
            log.apply(e.event_type, &e.payload);
        }
        log
    }

    /// Applies one event; every other event type changes nothing.
    pub fn apply(&mut self, event_type: EventType, payload: &serde_json::Value) {
        match event_type {
            EventType::RunPaused => {
                self.pauses += 1;
                self.paused = true;
            }
            EventType::RunResumed
                if payload
                    .get("fromStatus")
                    .and_then(serde_json::Value::as_str)
                    == Some(FROM_PAUSED) =>
            {
                self.paused = false;
            }
            _ => {}
        }
    }

    /// Step key of the next `run.paused` (one per pause, so each has its own eventId and a
    /// worker re-recording the same pause after a crash is deduplicated).
    pub fn next_paused_step(&self) -> String {
        format!("run.paused/{}", self.pauses + 1)
    }

    /// Step key of the `run.resumed` that ends the current pause.
    pub fn resumed_step(&self) -> String {
        format!("run.resumed/paused/{}", self.pauses)
    }
}

/// Why a `:pause` or `:resume` is refused (409; `details.runStatus` is [`Self::run_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PauseConflict {
    #[error("the run already ended ({0}); there is nothing to pause or resume")]
    Ended(RunPhase),
    #[error("the run is being cancelled; it cannot be paused or resumed")]
    Cancelling,
    #[error("the run is already paused; resume it first (POST :resume)")]
    AlreadyPaused,
    #[error(
        "the run is {0}: it holds no worker and waits for an answer; resolve its interrupt instead of pausing it"
    )]
    Waiting(RunPhase),
    #[error("the run is not paused ({0}); only a paused run can be resumed")]
    NotPaused(RunPhase),
}

impl PauseConflict {
    /// The status the conflict reports: the run's phase, or `paused` once a pause is set.
    pub fn run_status(self) -> RunPhase {
        match self {
            PauseConflict::Ended(p) | PauseConflict::Waiting(p) | PauseConflict::NotPaused(p) => p,
            PauseConflict::Cancelling => RunPhase::Cancelling,
            PauseConflict::AlreadyPaused => RunPhase::Paused,
        }
    }

    /// The error code: `run_terminal` for a run that ended (the one code v1 names), else
    /// `run_state_conflict`.
    pub fn code(self) -> &'static str {
        match self {
            PauseConflict::Ended(_) => "run_terminal",
            _ => "run_state_conflict",
        }
    }
}

/// Whether a run in `phase` (with `pause_set`: its `spec.pause`) may be paused. A run waiting
/// for an answer is refused: it already holds no pod, and a pause must not hide its interrupt.
pub fn check_pause(phase: RunPhase, pause_set: bool) -> Result<(), PauseConflict> {
    match phase {
        p if p.is_terminal() => Err(PauseConflict::Ended(p)),
        RunPhase::Cancelling => Err(PauseConflict::Cancelling),
        _ if pause_set => Err(PauseConflict::AlreadyPaused),
        RunPhase::Paused => Err(PauseConflict::AlreadyPaused),
        p if p.is_waiting() => Err(PauseConflict::Waiting(p)),
        _ => Ok(()),
    }
}

/// Whether a run in `phase` (with `pause_set`: its `spec.pause`) may be resumed: only while a
/// pause is set (also before it landed: the resume then withdraws it).
pub fn check_resume(phase: RunPhase, pause_set: bool) -> Result<(), PauseConflict> {
    match phase {
        p if p.is_terminal() => Err(PauseConflict::Ended(p)),
        RunPhase::Cancelling => Err(PauseConflict::Cancelling),
        _ if pause_set => Ok(()),
        p => Err(PauseConflict::NotPaused(p)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventFactory;
    use serde_json::json;

    #[test]
    fn the_request_reads_the_spec_body_with_its_default_policy() {
        let r: PauseRequest = serde_json::from_value(json!({"reason": "r"})).unwrap();
        assert_eq!(r.drain_policy, DrainPolicy::DrainCurrentNode);
        let r: PauseRequest = serde_json::from_value(json!({"drainPolicy": "immediate"})).unwrap();
        assert_eq!(r.drain_policy, DrainPolicy::Immediate);
        assert!(serde_json::from_value::<PauseRequest>(json!({"drainPolicy": "later"})).is_err());
        let p = serde_json::to_value(r.paused_payload("2026-01-01T00:00:00Z")).unwrap();
        assert_eq!(
            p,
            json!({"drainPolicy": "immediate", "pausedAt": "2026-01-01T00:00:00Z"})
        );
        let names: Vec<_> = DrainPolicy::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(names, ["immediate", "drain-current-node"]);
    }

    #[test]
    fn the_log_fold_counts_pauses_and_ignores_interrupt_resumes() {
        let mut f = EventFactory::new("r", 0);
        let t = "2026-01-01T00:00:00Z";
        let mut log = vec![f.emit_value("run.started", t, EventType::RunStarted, json!({}))];
        assert_eq!(PauseLog::of(&log), PauseLog::default());
        let p = PauseLog::of(&log);
        log.push(f.emit_value(&p.next_paused_step(), t, EventType::RunPaused, json!({})));
        let p = PauseLog::of(&log);
        assert_eq!((p.pauses, p.paused), (1, true));
        assert_eq!(p.resumed_step(), "run.resumed/paused/1");
        // An interrupt's resume does not end a pause.
        log.push(f.emit_value("x", t, EventType::RunResumed, json!({"interruptId": "i"})));
        assert!(PauseLog::of(&log).paused);
        log.push(f.emit_value(
            &p.resumed_step(),
            t,
            EventType::RunResumed,
            json!({"fromStatus": FROM_PAUSED}),
        ));
        let p = PauseLog::of(&log);
        assert_eq!((p.pauses, p.paused), (1, false));
        assert_eq!(p.next_paused_step(), "run.paused/2");
    }

    #[test]
    fn pause_and_resume_are_refused_with_the_status_they_found() {
        use RunPhase::*;
        assert_eq!(check_pause(Running, false), Ok(()));
        assert_eq!(check_pause(Pending, false), Ok(()));
        for p in [Completed, Failed, Cancelled] {
            let e = check_pause(p, false).unwrap_err();
            assert_eq!((e.code(), e.run_status()), ("run_terminal", p));
            assert_eq!(check_resume(p, true).unwrap_err().code(), "run_terminal");
        }
        let e = check_pause(Running, true).unwrap_err();
        assert_eq!((e.code(), e.run_status()), ("run_state_conflict", Paused));
        assert_eq!(check_pause(Paused, false).unwrap_err().run_status(), Paused);
        for p in [WaitingApproval, WaitingInput, WaitingExternal] {
            assert_eq!(check_pause(p, false).unwrap_err().run_status(), p);
        }
        assert_eq!(
            check_pause(Cancelling, false).unwrap_err().run_status(),
            Cancelling
        );
        assert_eq!(check_resume(Paused, true), Ok(()));
        assert_eq!(
            check_resume(Running, true),
            Ok(()),
            "withdraws a pending pause"
        );
        let e = check_resume(Running, false).unwrap_err();
        assert_eq!((e.code(), e.run_status()), ("run_state_conflict", Running));
    }
}
