//! `spec.pause` ([`openwop_protocol::run::pause`]): a paused run holds no pod, and resumes
//! exactly (a new worker replays its log).
//!
//! * A live worker is asked on the run's control subject (NATS request/reply, repeated each
//!   reconcile until the log says `paused`); it stops as the drain policy says, records
//!   `run.paused` and exits suspended, which [`super::observe`] turns into phase `paused`.
//! * With no live worker (queued, backing off after a crash, waiting on a durable timer or
//!   a child) the run's snapshot gets the pause and a short worker records `run.paused`.
//! * A paused run with `spec.pause` still set is left alone: no pod, no wake-up.
//! * Clearing `spec.pause` resumes: the snapshot loses the pause and a worker starts (also
//!   for a run whose only waits are timers), records `run.resumed` and replays.
//!
//! A run waiting for an answer is not paused (`check_pause` refuses it at the API); a
//! `spec.pause` set by hand on one takes effect once the answer resumed it.

use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use openwop_crds::{PauseRequest, RunPhase};
use openwop_protocol::run::pause::CONTROL_ACK;
use openwop_protocol::run::subjects::control_subject;

use super::context::Error;
use super::state::{RunReconcile, WorkerState};
use crate::reasons::Reason;

/// How long the operator waits for the live worker's answer to a pause.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);
/// How soon a pausing run is looked at again (the worker's exit also triggers a reconcile).
const PAUSING_REQUEUE: Duration = Duration::from_secs(1);

/// A Run with `spec.pause` (`req`) set and not waiting for an answer.
pub(super) async fn pause(rr: &mut RunReconcile<'_>, req: &PauseRequest) -> Result<Action, Error> {
    let phase = rr.status().phase.unwrap_or_default();
    match rr.status().worker_pod.clone() {
        // Paused and no pod: nothing to do until the resume.
        None if phase == RunPhase::Paused => Ok(Action::await_change()),
        Some(pod) if phase != RunPhase::Paused => {
            let state = WorkerState::of(rr.pod(&pod).await?.as_ref());
            if !matches!(state, WorkerState::Active { .. }) {
                // Its exit decides (suspended → paused; a crash backs off, then a worker
                // that only records the pause starts).
                return super::start::progress(rr).await;
            }
            if ask_worker(rr, req).await {
                let msg = format!(
                    "spec.pause: worker pod {pod} stops at a safe point ({}) and records run.paused",
                    req.drain_policy.as_str()
                );
                rr.draft.event(EventType::Normal, Reason::Pausing, msg);
            }
            Ok(Action::requeue(PAUSING_REQUEUE))
        }
        // No live worker, or the paused worker is still exiting: start (or observe) a worker
        // whose snapshot carries the pause.
        _ => super::start::progress(rr).await,
    }
}

/// Asks the run's live worker to pause; whether it answered that it did. A worker that is
/// not listening yet (starting) or an operator without NATS is asked again next time.
async fn ask_worker(rr: &RunReconcile<'_>, req: &PauseRequest) -> bool {
    let (Some(slot), Some(run_id)) = (&rr.ctx.jetstream, rr.run.uid()) else {
        return false;
    };
    let Some(js) = slot.get() else {
        return false;
    };
    let Ok(body) = serde_json::to_vec(req) else {
        return false;
    };
    let subject = control_subject(&rr.ns, &run_id);
    match tokio::time::timeout(ASK_TIMEOUT, js.client().request(subject, body.into())).await {
        Ok(Ok(reply)) if reply.payload.as_ref() == CONTROL_ACK => true,
        Ok(Ok(reply)) => {
            let why = String::from_utf8_lossy(&reply.payload);
            tracing::warn!(run = %rr.run.name_any(), %why, "the worker refused the pause message");
            false
        }
        Ok(Err(e)) => {
            tracing::debug!(run = %rr.run.name_any(), error = %e, "the worker did not take the pause yet; asking again");
            false
        }
        Err(_) => false,
    }
}
