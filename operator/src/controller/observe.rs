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
use super::reasons::Reason;
use super::state::WorkerState;
use crate::config::OperatorConfig;
use crate::projection::crash_reason;

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
            let p = message
                .as_deref()
                .and_then(Projection::from_termination_message)
                .unwrap_or(Projection {
                    phase: Some(RunPhase::Completed),
                    ..Default::default()
                });
            draft.status.merge_projection(&p);
            let phase = draft
                .status
                .phase
                .filter(|p| p.is_terminal())
                .unwrap_or(RunPhase::Completed);
            draft.end(phase, RecordedBy::Worker);
            draft.status.failed_attempts = None;
            Action::requeue(Duration::from_secs(
                cfg.runs.pod_ttl_seconds_after_finished.max(1),
            ))
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
            if !draft.status.phase.is_some_and(RunPhase::is_waiting) {
                draft.status.phase = Some(
                    waiting_phase(&draft.status.pending_interrupts)
                        .unwrap_or(RunPhase::WaitingInput),
                );
            }
            // A waiting run holds no pod.
            draft.stop_worker();
            draft.status.failed_attempts = None;
            let msg = format!(
                "run is {}; answer the pending interrupt(s) of node(s) {} in spec.answers to resume",
                draft.status.phase.unwrap_or_default(),
                pending_nodes(&draft.status.pending_interrupts)
            );
            draft.event(EventType::Normal, Reason::Suspended, msg);
            Action::await_change()
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

/// `a, b` (the nodes whose interrupts wait), for messages.
fn pending_nodes(pending: &[PendingInterrupt]) -> String {
    let nodes: Vec<&str> = pending.iter().map(|p| p.node_id.as_str()).collect();
    if nodes.is_empty() {
        "-".into()
    } else {
        nodes.join(", ")
    }
}
