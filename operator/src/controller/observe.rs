//! A run with a worker pod: the pod's state and exit code decide — terminal (exit 0, with
//! the worker's termination summary), suspended (exit 3: the pod goes, the run waits),
//! refused input (exit 2: failed at once), or a crash (retried with backoff, quoting the
//! worker's last error from its log tail). Pure: the pod was read by the caller, and the
//! pod's deletion is left in the draft.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use openwop_crds::RunPhase;
use openwop_protocol::run::exit;
use openwop_protocol::run::projection::Projection;
use openwop_protocol::run::status::{EndReason, PendingInterrupt, RecordedBy, waiting_phase};

use super::common::{Draft, backoff_seconds, plus};
use super::state::WorkerState;
use crate::config::OperatorConfig;
use crate::projection::crash_reason;
use crate::reasons::Reason;

/// The run's worker pod is in `state`: what the run becomes.
pub(super) fn observe_worker(
    draft: &mut Draft,
    cfg: &OperatorConfig,
    state: WorkerState,
) -> Action {
    match state {
        WorkerState::Ended {
            exit_code: Some(0),
            message,
        } => {
            let action =
                worker_finished(draft, cfg, message, RunPhase::Completed, RecordedBy::Worker);
            draft.status.failed_attempts = None;
            action
        }
        WorkerState::Ended {
            exit_code: Some(exit::SUSPENDED),
            message,
        } => {
            let p = message
                .as_deref()
                .and_then(Projection::from_termination_message)
                .unwrap_or(Projection {
                    phase: Some(RunPhase::WaitingInput),
                    ..Default::default()
                });
            draft.status.merge_projection(&p);
            // The worker exited suspended: nothing runs, whatever late events said.
            draft.status.running_nodes.clear();
            // Paused (`run.paused`): no pod until the resume.
            if draft.status.phase == Some(RunPhase::Paused) {
                draft.stop_worker();
                draft.status.failed_attempts = None;
                let msg = "run is paused and holds no pod; resume it (POST :resume, kubectl openwop resume, or remove spec.pause)";
                draft.event(EventType::Normal, Reason::Paused, msg.to_owned());
                return Action::await_change();
            }
            let pending = waiting_phase(&draft.status.pending_interrupts);
            let dormant = dormant(&draft.status);
            if !draft.status.phase.is_some_and(RunPhase::is_waiting) {
                // Only a timer or a child run left: the run is still `running` (a delay is
                // never a waiting-* suspension); else it waits for the answers.
                draft.status.phase = Some(match pending {
                    None if dormant => RunPhase::Running,
                    p => p.unwrap_or(RunPhase::WaitingInput),
                });
            }
            // A waiting run holds no pod.
            draft.stop_worker();
            draft.status.failed_attempts = None;
            if pending.is_none() && dormant {
                let msg = format!(
                    "the worker exited; the run waits without a pod for {}",
                    super::waits::describe(&draft.status)
                );
                draft.event(EventType::Normal, Reason::Waiting, msg);
            } else {
                let msg = format!(
                    "run is {}; answer the pending interrupt(s) of node(s) {} in spec.answers to resume",
                    draft.status.phase.unwrap_or_default(),
                    pending_nodes(&draft.status.pending_interrupts)
                );
                draft.event(EventType::Normal, Reason::Suspended, msg);
            }
            wake_requeue(draft, cfg)
        }
        WorkerState::Ended { exit_code, message } => {
            let code = exit_code.unwrap_or(-1);
            let reason = message.as_deref().and_then(crash_reason);
            if code == exit::BAD_INPUT {
                // Same snapshot, same refusal: another attempt cannot succeed.
                draft.stop_worker();
                let msg = format!(
                    "the worker refused its input (exit {code}): {}; fix the Workflow or the operator configuration, then create a new Run",
                    reason.as_deref().unwrap_or("no reason in its log tail")
                );
                let failure = (Reason::WorkerInputInvalid, Reason::Ended(EndReason::Failed));
                draft.fail("worker_input_invalid", failure, msg);
                return Action::await_change();
            }
            let reason = reason.map(|r| format!(" ({r})")).unwrap_or_default();
            crashed(
                draft,
                cfg,
                format!("worker exited with code {code}{reason}"),
            )
        }
        // Gone because the suspension was handled already (we deleted it, then our
        // status write lost a race with the event consumer): not a crash.
        WorkerState::Missing
            if draft.status.phase.is_some_and(RunPhase::is_waiting)
                && !draft.status.pending_interrupts.is_empty() =>
        {
            draft.status.worker_pod = None;
            draft.status.failed_attempts = None;
            draft.status.retry_after = None;
            let msg = format!(
                "run is {}; answer the pending interrupt in spec.answers to resume",
                draft.status.phase.unwrap_or_default()
            );
            draft.event(EventType::Normal, Reason::Suspended, msg);
            Action::await_change()
        }
        // Gone after it left a durable wait (a timer or a child run) and nothing running:
        // the run waits for the operator to wake it, not a crash.
        WorkerState::Missing if dormant(&draft.status) && draft.status.running_nodes.is_empty() => {
            draft.status.worker_pod = None;
            draft.status.failed_attempts = None;
            draft.status.retry_after = None;
            wake_requeue(draft, cfg)
        }
        WorkerState::Missing => crashed(draft, cfg, "worker pod disappeared".into()),
        WorkerState::Active { running } => {
            // Only from pending: the event stream may already say waiting-input while
            // the worker is still exiting.
            if running && draft.status.phase.is_none_or(|p| p == RunPhase::Pending) {
                draft.status.phase = Some(RunPhase::Running);
            }
            Action::requeue(Duration::from_secs(60))
        }
    }
}

/// A worker exited 0: its termination summary (`message`, when it wrote one) is merged, and
/// the run ends in the terminal phase the status now shows, else `otherwise`, reported as
/// recorded `by` it. The pod stays until the pod TTL.
pub(super) fn worker_finished(
    draft: &mut Draft,
    cfg: &OperatorConfig,
    message: Option<String>,
    otherwise: RunPhase,
    by: RecordedBy,
) -> Action {
    if let Some(p) = message
        .as_deref()
        .and_then(Projection::from_termination_message)
    {
        draft.status.merge_projection(&p);
    }
    // The log may have ended otherwise (e.g. completed while a cancel worker started).
    let phase = draft
        .status
        .phase
        .filter(|p| p.is_terminal())
        .unwrap_or(otherwise);
    draft.end(phase, by);
    Action::requeue(Duration::from_secs(
        cfg.runs.pod_ttl_seconds_after_finished.max(1),
    ))
}

/// The worker crashed (`why`): retried after a backoff, or the run fails once the failures
/// without progress exceed `runs.maxWorkerRetries`.
fn crashed(draft: &mut Draft, cfg: &OperatorConfig, why: String) -> Action {
    draft.stop_worker();
    // The budget counts consecutive failures without progress (Temporal/Argo retry
    // semantics): a worker that appended events since the last counted failure advanced the
    // run, and the count starts again. `lastSequence` is kept current by the event consumer.
    let seen = draft.status.last_sequence;
    let progressed = seen > draft.status.failed_at_sequence;
    let failures = if progressed {
        1
    } else {
        draft.status.failed_attempts.unwrap_or(0) + 1
    };
    draft.status.failed_attempts = Some(failures);
    draft.status.failed_at_sequence = seen;
    if failures > cfg.runs.max_worker_retries {
        let msg = format!(
            "{why}; {failures} consecutive worker failures without progress (limit {}, chart value runs.maxWorkerRetries)",
            cfg.runs.max_worker_retries
        );
        let failure = (Reason::WorkerCrashed, Reason::Ended(EndReason::Failed));
        draft.fail("worker_crashed", failure, msg);
        return Action::await_change();
    }
    let delay = backoff_seconds(cfg, failures);
    draft.status.retry_after = Some(Time(plus(draft.now(), delay)));
    draft.event(
        EventType::Warning,
        Reason::WorkerCrashed,
        format!(
            "{why}; retrying in {delay}s (failure {failures} of {} without progress)",
            cfg.runs.max_worker_retries
        ),
    );
    Action::requeue(Duration::from_secs(delay))
}

/// Whether a node of the run waits without a pod (a timer or a child run).
fn dormant(status: &openwop_crds::RunStatus) -> bool {
    !status.timers.is_empty() || !status.child_waits.is_empty()
}

/// The requeue of a run that waits without a pod: at its earliest timer (less the start-up
/// lead), else on a change (an answer, a child Run's change).
fn wake_requeue(draft: &Draft, cfg: &OperatorConfig) -> Action {
    let lead = super::waits::lead(cfg.runs.durable_wait_threshold_ms);
    super::waits::waiting_requeue(&draft.status, draft.now(), lead)
        .map_or_else(Action::await_change, Action::requeue)
}

/// `a, b` (the nodes whose interrupts wait), for messages.
fn pending_nodes(pending: &[PendingInterrupt]) -> String {
    let nodes: Vec<&str> = pending.iter().map(|p| p.node_id.as_str()).collect();
    if nodes.is_empty() {
        "-".into()
    } else {
        nodes.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use openwop_crds::RunStatus;

    fn running() -> Draft {
        let status = RunStatus {
            phase: Some(RunPhase::Running),
            worker_pod: Some("r1-w1".into()),
            last_sequence: Some(4),
            ..Default::default()
        };
        Draft::new(
            status,
            Some(1),
            Timestamp::from_second(1_750_000_000).unwrap(),
        )
    }

    fn ended(code: i32, message: &str) -> WorkerState {
        WorkerState::Ended {
            exit_code: Some(code),
            message: Some(message.into()),
        }
    }

    /// Each worker state, what the run becomes: (phase, pod kept, pod deleted, Event reasons).
    #[test]
    fn the_worker_state_decides() {
        let cfg = OperatorConfig::default();
        let rows: Vec<(&str, WorkerState, RunPhase, bool, &[&str])> = vec![
            (
                "running",
                WorkerState::Active { running: true },
                RunPhase::Running,
                true,
                &[],
            ),
            (
                "exit 0 with a summary",
                ended(0, r#"{"phase":"completed","events":6,"lastSequence":5}"#),
                RunPhase::Completed,
                true,
                &["Completed"],
            ),
            (
                "exit 0 without a summary",
                ended(0, "bye"),
                RunPhase::Completed,
                true,
                &["Completed"],
            ),
            (
                "exit 3: suspended",
                ended(
                    3,
                    r#"{"phase":"waiting-input","events":6,"lastSequence":5,"pendingInterrupts":[{"interruptId":"i1","nodeId":"n","kind":"clarification"}]}"#,
                ),
                RunPhase::WaitingInput,
                false,
                &["Suspended"],
            ),
            (
                "exit 2: refused input",
                ended(2, "bad"),
                RunPhase::Failed,
                false,
                &["Failed"],
            ),
            (
                "crash",
                ended(137, ""),
                RunPhase::Running,
                false,
                &["WorkerCrashed"],
            ),
            (
                "gone",
                WorkerState::Missing,
                RunPhase::Running,
                false,
                &["WorkerCrashed"],
            ),
        ];
        for (case, state, phase, kept, reasons) in rows {
            let mut d = running();
            observe_worker(&mut d, &cfg, state);
            assert_eq!(d.status.phase, Some(phase), "{case}");
            assert_eq!(d.status.worker_pod.is_some(), kept, "{case}");
            let deleted = if kept {
                vec![]
            } else {
                vec!["r1-w1".to_owned()]
            };
            assert_eq!(d.delete_pods, deleted, "{case}");
            let got: Vec<&str> = d.notes.iter().map(|n| n.reason.as_str()).collect();
            assert_eq!(got, reasons, "{case}");
        }
    }
}
