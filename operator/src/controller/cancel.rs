//! `spec.cancel`: the cancellation is recorded in the event stream by a short cancel worker.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use openwop_crds::{Run, RunPhase, Workflow};
use openwop_protocol::run::projection::Projection;

use super::common::{Step, apply_projection, delete_ignoring_missing};
use super::start::{build_worker_pod, create_pod};
use super::{Context, Error};
use crate::pod::{MANAGER, pod_name, snapshot_name};
use crate::snapshot::{read_snapshot, snapshot_configmap, with_cancel};

/// `spec.cancel`: record the cancellation in the event stream. The snapshot gets
/// `cancel: true`; a running worker is deleted (SIGTERM); once it is gone a short cancel
/// worker (next attempt) publishes `run.cancelled` and exits 0. Phase `cancelling` until
/// the stream or the termination message says `cancelled`. Without a worker NATS URL or a
/// snapshot (the run never started) the operator marks the run cancelled itself.
#[allow(clippy::too_many_arguments)]
pub(super) async fn cancel(
    run: &Run,
    ctx: &Context,
    step: &mut Step,
    pods: &Api<Pod>,
    cms: &Api<ConfigMap>,
    wfs: &Api<Workflow>,
    now: Timestamp,
) -> Result<Action, Error> {
    let generation = run.metadata.generation;
    let name = run.name_any();
    let snap = snapshot_name(&name);
    let stored = if ctx.config.worker.nats_url.is_empty() {
        Err("worker.natsUrl is not configured, so no worker can record run.cancelled")
    } else {
        match cms.get_opt(&snap).await? {
            Some(cm) if crate::pod::owned_by(&cm.metadata, run) => Ok(cm),
            _ => Err("the run never started (no snapshot), so there is no event stream"),
        }
    };
    let cm = match stored {
        Ok(cm) => cm,
        Err(why) => {
            if let Some(p) = step.status.worker_pod.take() {
                delete_ignoring_missing(pods, &p).await?;
            }
            let msg = format!("cancelled by spec.cancel; {why}: the operator set the phase");
            let ending = (EventType::Normal, "Cancelled");
            step.finish(RunPhase::Cancelled, now, generation, ending, msg);
            return Ok(Action::await_change());
        }
    };
    let stored = read_snapshot(&cm)?;
    if !stored.cancel {
        cms.patch(
            &snap,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&snapshot_configmap(run, &with_cancel(&stored))),
        )
        .await?;
    }
    let cancelling = step.status.phase == Some(RunPhase::Cancelling);
    match step.status.worker_pod.clone() {
        // The run's own worker: stop it; the cancel worker starts once it is gone.
        Some(p) if !cancelling => {
            delete_ignoring_missing(pods, &p).await?;
            step.status.worker_pod = None;
            step.status.phase = Some(RunPhase::Cancelling);
            step.status.pending_interrupts.clear();
            step.event(
                EventType::Normal,
                "Cancelling",
                format!(
                    "spec.cancel: stopping worker pod {p}; a cancel worker records run.cancelled"
                ),
            );
            Ok(Action::requeue(Duration::from_secs(2)))
        }
        // The cancel worker: wait for it to record run.cancelled.
        Some(p) => {
            let pod = pods.get_opt(&p).await?;
            let state = pod.as_ref().and_then(|p| p.status.as_ref());
            let terminated = state
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.name == "worker"))
                .and_then(|c| c.state.as_ref())
                .and_then(|s| s.terminated.clone());
            let done = matches!(
                state.and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            );
            match (pod.is_some(), done, terminated) {
                (true, true, Some(t)) if t.exit_code == 0 => {
                    if let Some(p) = t
                        .message
                        .as_deref()
                        .and_then(Projection::from_termination_message)
                    {
                        apply_projection(&mut step.status, &p);
                    }
                    // The log may already have ended otherwise (e.g. completed meanwhile).
                    let phase = step
                        .status
                        .phase
                        .filter(|p| p.is_terminal())
                        .unwrap_or(RunPhase::Cancelled);
                    let msg = format!("the worker recorded the run as {phase}");
                    let ending = (EventType::Normal, "Cancelled");
                    step.finish(phase, now, generation, ending, msg);
                    Ok(Action::requeue(Duration::from_secs(
                        ctx.config.runs.pod_ttl_seconds_after_finished.max(1),
                    )))
                }
                (true, false, _) => Ok(Action::requeue(Duration::from_secs(2))),
                (_, _, t) => {
                    delete_ignoring_missing(pods, &p).await?;
                    step.status.worker_pod = None;
                    let why = t.map_or("disappeared".to_string(), |t| {
                        format!("exited with code {}", t.exit_code)
                    });
                    let msg = format!(
                        "cancel worker {p} {why}; the operator set the phase and records run.cancelled itself"
                    );
                    let ending = (EventType::Warning, "Cancelled");
                    step.finish(RunPhase::Cancelled, now, generation, ending, msg);
                    Ok(Action::await_change())
                }
            }
        }
        None => {
            // The previous worker may still be terminating: never run two workers at once.
            let attempts = step.status.attempts.unwrap_or(0);
            if attempts > 0 && pods.get_opt(&pod_name(&name, attempts)).await?.is_some() {
                step.status.phase = Some(RunPhase::Cancelling);
                return Ok(Action::requeue(Duration::from_secs(2)));
            }
            let attempt = attempts + 1;
            let pod = build_worker_pod(run, ctx, wfs, None, step, attempt).await?;
            if !create_pod(pods, &pod, run).await? {
                return Ok(Action::requeue(Duration::from_secs(2)));
            }
            let p = pod_name(&name, attempt);
            step.status.attempts = Some(attempt);
            step.status.worker_pod = Some(p.clone());
            step.status.phase = Some(RunPhase::Cancelling);
            step.status.pending_interrupts.clear();
            step.status.retry_after = None;
            step.set_condition(
                "Scheduled",
                true,
                "CancelWorkerStarted",
                format!("cancel worker pod {p}"),
                generation,
                now,
            );
            step.event(
                EventType::Normal,
                "CancelWorkerStarted",
                format!("started cancel worker pod {p} to record run.cancelled"),
            );
            Ok(Action::requeue(Duration::from_secs(2)))
        }
    }
}
