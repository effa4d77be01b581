//! `spec.cancel`: the cancellation is recorded in the event stream by a short cancel worker.

use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use openwop_crds::RunPhase;
use openwop_protocol::run::status::{EndReason, RecordedBy};

use super::common::Draft;
use super::context::Error;
use super::observe::worker_finished;
use super::start::build_worker_pod;
use super::state::{RunReconcile, WorkerState};
use crate::config::OperatorConfig;
use crate::names::pod_name;
use crate::reasons::{ConditionType, Reason};
use crate::snapshot::{read_snapshot, snapshot_configmap, with_cancel};

/// `spec.cancel`: record the cancellation in the event stream. The snapshot gets
/// `cancel: true`; a running worker is deleted (SIGTERM); once it is gone a short cancel
/// worker (next attempt) publishes `run.cancelled` and exits 0. Phase `cancelling` until
/// the stream or the termination message says `cancelled`. Without a worker NATS URL or a
/// snapshot (the run never started) the operator marks the run cancelled itself.
pub(super) async fn cancel(rr: &mut RunReconcile<'_>) -> Result<Action, Error> {
    let (ctx, run) = (rr.ctx, rr.run);
    let stored = if ctx.config.worker.nats_url.is_empty() {
        Err("worker.natsUrl is not configured, so no worker can record run.cancelled")
    } else {
        match rr.snapshot().await? {
            Some(cm) if crate::names::owned_by(&cm.metadata, run) => Ok(cm),
            _ => Err("the run never started (no snapshot), so there is no event stream"),
        }
    };
    let cm = match stored {
        Ok(cm) => cm,
        Err(why) => {
            rr.draft.stop_worker();
            let msg = format!("cancelled by spec.cancel; {why}: the operator set the phase");
            rr.draft
                .finish(RunPhase::Cancelled, (EventType::Normal, CANCELLED), msg);
            return Ok(Action::await_change());
        }
    };
    let stored = read_snapshot(&cm)?;
    super::waits::cancel_children(rr, Some(&stored)).await?;
    if !stored.cancel {
        let mut doc = with_cancel(&stored);
        // A child cancelled with its parent says so in its run.cancelled.
        doc.cancel_reason = run
            .annotations()
            .get(openwop_crds::names::ANNOTATION_CANCEL_REASON)
            .cloned();
        rr.apply_snapshot(&snapshot_configmap(run, &doc)).await?;
    }
    let cancelling = rr.status().phase == Some(RunPhase::Cancelling);
    match rr.status().worker_pod.clone() {
        // The run's own worker: stop it; the cancel worker starts once it is gone.
        Some(p) if !cancelling => {
            rr.draft.stop_worker();
            rr.draft.status.phase = Some(RunPhase::Cancelling);
            rr.draft.status.pending_interrupts.clear();
            rr.draft.status.recording_interrupts.clear();
            rr.draft.event(
                EventType::Normal,
                Reason::Cancelling,
                format!(
                    "spec.cancel: stopping worker pod {p}; a cancel worker records run.cancelled"
                ),
            );
            Ok(Action::requeue(Duration::from_secs(2)))
        }
        // The cancel worker: wait for it to record run.cancelled.
        Some(p) => {
            let state = WorkerState::of(rr.pod(&p).await?.as_ref());
            Ok(cancel_worker_observed(
                &mut rr.draft,
                &ctx.config,
                &p,
                state,
            ))
        }
        None => start_cancel_worker(rr).await,
    }
}

/// The condition and Event reason of a cancellation the operator records itself.
const CANCELLED: Reason = Reason::Ended(EndReason::Cancelled);

/// The cancel worker `pod` is in `state`: wait for it, or end the run as it recorded, or
/// (it failed or vanished) cancel the run without it.
fn cancel_worker_observed(
    draft: &mut Draft,
    cfg: &OperatorConfig,
    pod: &str,
    state: WorkerState,
) -> Action {
    match state {
        WorkerState::Ended {
            exit_code: Some(0),
            message,
        } => worker_finished(
            draft,
            cfg,
            message,
            RunPhase::Cancelled,
            RecordedBy::CancelWorker,
        ),
        WorkerState::Active { .. } => Action::requeue(Duration::from_secs(2)),
        other => {
            draft.stop_worker();
            let why = match other {
                WorkerState::Ended {
                    exit_code: Some(c), ..
                } => format!("exited with code {c}"),
                _ => "disappeared".to_owned(),
            };
            let msg = format!(
                "cancel worker {pod} {why}; the operator set the phase and records run.cancelled itself"
            );
            draft.finish(RunPhase::Cancelled, (EventType::Warning, CANCELLED), msg);
            Action::await_change()
        }
    }
}

/// No worker: start the cancel worker (the next attempt), once the previous worker is gone
/// (never two workers at once).
async fn start_cancel_worker(rr: &mut RunReconcile<'_>) -> Result<Action, Error> {
    let attempts = rr.status().attempts.unwrap_or(0);
    if attempts > 0 && rr.pod(&pod_name(&rr.name, attempts)).await?.is_some() {
        rr.draft.status.phase = Some(RunPhase::Cancelling);
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    let attempt = attempts + 1;
    let pod = build_worker_pod(rr, None, attempt).await?;
    if !rr.create_pod(&pod).await? {
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    let p = pod_name(&rr.name, attempt);
    let draft = &mut rr.draft;
    draft.status.attempts = Some(attempt);
    draft.status.worker_pod = Some(p.clone());
    draft.status.phase = Some(RunPhase::Cancelling);
    draft.status.pending_interrupts.clear();
    draft.status.recording_interrupts.clear();
    draft.status.retry_after = None;
    draft.set_condition(
        ConditionType::Scheduled,
        true,
        Reason::CancelWorkerStarted,
        format!("cancel worker pod {p}"),
    );
    draft.event(
        EventType::Normal,
        Reason::CancelWorkerStarted,
        format!("started cancel worker pod {p} to record run.cancelled"),
    );
    Ok(Action::requeue(Duration::from_secs(2)))
}
