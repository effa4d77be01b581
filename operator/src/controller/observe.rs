//! A run with a worker pod: the pod's state and exit code decide — terminal (exit 0, with
//! the worker's termination summary), suspended (exit 3: the pod goes, the run waits),
//! refused input (exit 2: failed at once), or a crash (retried with backoff, quoting the
//! worker's last error from its log tail).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use openwop_crds::RunPhase;
use openwop_protocol::run::exit;
use openwop_protocol::run::projection::Projection;
use openwop_protocol::run::status::{PendingInterrupt, waiting_phase};

use super::common::{Step, apply_projection, backoff_seconds, delete_ignoring_missing, plus};
use super::{Context, Error};
use crate::projection::crash_reason;

/// Step 2 of [`progress`]: the run has a worker pod; its state decides the reconcile.
pub(super) async fn observe_worker(
    ctx: &Context,
    step: &mut Step,
    pods: &Api<Pod>,
    generation: Option<i64>,
    now: Timestamp,
) -> Result<Action, Error> {
    let cfg = &ctx.config;
    let Some(pod_name) = step.status.worker_pod.clone() else {
        return Ok(Action::await_change());
    };
    let pod = pods.get_opt(&pod_name).await?;
    let phase = pod
        .as_ref()
        .and_then(|p| p.status.as_ref())
        .and_then(|s| s.phase.clone());
    let terminated = pod
        .as_ref()
        .and_then(|p| p.status.as_ref())
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "worker"))
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.clone());
    match (pod.is_some(), phase.as_deref(), terminated) {
        (true, Some("Succeeded" | "Failed"), Some(t)) if t.exit_code == 0 => {
            let p = t
                .message
                .as_deref()
                .and_then(Projection::from_termination_message);
            let p = p.unwrap_or(Projection {
                phase: Some(RunPhase::Completed),
                ..Default::default()
            });
            apply_projection(&mut step.status, &p);
            let final_phase = if step.status.phase.is_some_and(RunPhase::is_terminal) {
                step.status.phase.unwrap_or(RunPhase::Completed)
            } else {
                RunPhase::Completed
            };
            let (reason, msg) = match (&final_phase, &step.status.error) {
                (RunPhase::Failed, Some(e)) => ("Failed", format!("{}: {}", e.code, e.message)),
                (RunPhase::Cancelled, _) => (
                    "Cancelled",
                    "the worker recorded the run as cancelled".to_string(),
                ),
                _ => ("Completed", "the run completed".to_string()),
            };
            let t = if final_phase == RunPhase::Completed {
                EventType::Normal
            } else {
                EventType::Warning
            };
            step.finish(final_phase, now, generation, (t, reason), msg);
            step.status.failed_attempts = None;
            Ok(Action::requeue(Duration::from_secs(
                cfg.runs.pod_ttl_seconds_after_finished.max(1),
            )))
        }
        (true, Some("Succeeded" | "Failed"), Some(t)) if t.exit_code == exit::SUSPENDED => {
            let p = t
                .message
                .as_deref()
                .and_then(Projection::from_termination_message);
            let p = p.unwrap_or(Projection {
                phase: Some(RunPhase::WaitingInput),
                ..Default::default()
            });
            apply_projection(&mut step.status, &p);
            // The worker exited suspended: nothing runs, whatever late events said.
            step.status.running_nodes.clear();
            if !step.status.phase.is_some_and(RunPhase::is_waiting) {
                step.status.phase = Some(
                    waiting_phase(&step.status.pending_interrupts)
                        .unwrap_or(RunPhase::WaitingInput),
                );
            }
            // A waiting run holds no pod.
            delete_ignoring_missing(pods, &pod_name).await?;
            step.status.worker_pod = None;
            step.status.failed_attempts = None;
            let msg = format!(
                "run is {}; answer the pending interrupt(s) of node(s) {} in spec.answers to resume",
                step.status.phase.unwrap_or_default(),
                pending_nodes(&step.status.pending_interrupts)
            );
            step.event(EventType::Normal, "Suspended", msg);
            Ok(Action::await_change())
        }
        (true, Some("Succeeded" | "Failed"), t) => {
            let code = t.as_ref().map_or(-1, |t| t.exit_code);
            let reason = t
                .as_ref()
                .and_then(|t| t.message.as_deref())
                .and_then(crash_reason);
            if code == exit::BAD_INPUT {
                // Same snapshot, same refusal: another attempt cannot succeed.
                delete_ignoring_missing(pods, &pod_name).await?;
                step.status.worker_pod = None;
                let msg = format!(
                    "the worker refused its input (exit {code}): {}; fix the Workflow or the operator configuration, then create a new Run",
                    reason.as_deref().unwrap_or("no reason in its log tail")
                );
                let failure = ("WorkerInputInvalid", "Failed");
                step.fail(now, generation, "worker_input_invalid", failure, msg);
                return Ok(Action::await_change());
            }
            let reason = reason.map(|r| format!(" ({r})")).unwrap_or_default();
            return crashed(
                ctx,
                step,
                pods,
                &pod_name,
                format!("worker exited with code {code}{reason}"),
                now,
            )
            .await;
        }
        // Gone because the suspension was handled already (we deleted it, then our
        // status write lost a race with the event consumer): not a crash.
        (false, _, _)
            if step.status.phase.is_some_and(RunPhase::is_waiting)
                && !step.status.pending_interrupts.is_empty() =>
        {
            step.status.worker_pod = None;
            step.status.failed_attempts = None;
            step.status.retry_after = None;
            let msg = format!(
                "run is {}; answer the pending interrupt in spec.answers to resume",
                step.status.phase.unwrap_or_default()
            );
            step.event(EventType::Normal, "Suspended", msg);
            Ok(Action::await_change())
        }
        (false, _, _) => {
            return crashed(
                ctx,
                step,
                pods,
                &pod_name,
                "worker pod disappeared".into(),
                now,
            )
            .await;
        }
        (true, ph, _) => {
            // Only from pending: the event stream may already say waiting-input while
            // the worker is still exiting.
            if ph == Some("Running") && step.status.phase.is_none_or(|p| p == RunPhase::Pending) {
                step.status.phase = Some(RunPhase::Running);
            }
            Ok(Action::requeue(Duration::from_secs(60)))
        }
    }
}

async fn crashed(
    ctx: &Context,
    step: &mut Step,
    pods: &Api<Pod>,
    pod_name: &str,
    why: String,
    now: Timestamp,
) -> Result<Action, Error> {
    let cfg = &ctx.config;
    delete_ignoring_missing(pods, pod_name).await?;
    step.status.worker_pod = None;
    // The budget counts consecutive failures without progress (Temporal/Argo retry
    // semantics): a worker that appended events since the last counted failure advanced the
    // run, and the count starts again. `lastSequence` is kept current by the event consumer.
    let seen = step.status.last_sequence;
    let progressed = seen > step.status.failed_at_sequence;
    let failures = if progressed {
        1
    } else {
        step.status.failed_attempts.unwrap_or(0) + 1
    };
    step.status.failed_attempts = Some(failures);
    step.status.failed_at_sequence = seen;
    if failures > cfg.runs.max_worker_retries {
        let msg = format!(
            "{why}; {failures} consecutive worker failures without progress (limit {}, chart value runs.maxWorkerRetries)",
            cfg.runs.max_worker_retries
        );
        let generation = step.status.observed_generation;
        step.fail(
            now,
            generation,
            "worker_crashed",
            ("WorkerCrashed", "Failed"),
            msg,
        );
        return Ok(Action::await_change());
    }
    let delay = backoff_seconds(cfg, failures);
    step.status.retry_after = Some(Time(plus(now, delay)));
    step.event(
        EventType::Warning,
        "WorkerCrashed",
        format!(
            "{why}; retrying in {delay}s (failure {failures} of {} without progress)",
            cfg.runs.max_worker_retries
        ),
    );
    Ok(Action::requeue(Duration::from_secs(delay)))
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
