//! The Run reconciler's entry point: the finalizer of earlier releases (delete the worker pod
//! and purge the run's subjects when such a Run is deleted), the step a reconcile takes ([`decide`]),
//! terminal phases and their TTLs ([`expiry`]), the run timeout.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use openwop_crds::{Run, RunStatus};
use openwop_protocol::run::status::RecordedBy;

use super::common::{delete_ignoring_missing, plus, publish, wait_until};
use super::context::{Context, Error};
use super::state::RunReconcile;
use crate::config::RunPolicy;
use crate::reasons::Reason;
use openwop_crds::names::RUN_FINALIZER;

/// Run reconciler entry. New Runs get no finalizer (`departed`: their events are purged once
/// they are gone); a Run that still carries the finalizer of an earlier release is cleaned
/// up by it when deleted.
pub async fn reconcile_run(run: Arc<Run>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    ctx.metrics.reconcile_started("run");
    let ns = run.namespace().ok_or_else(|| Error::NoNamespace {
        kind: "Run",
        name: run.name_any(),
    })?;
    // A copy this reconciler's own status write replaced: the write's watch event brings the
    // fresh copy and reconciles it; acting on this one would redo what was done.
    if ctx.superseded.is_stale(&run) {
        return Ok(Action::await_change());
    }
    let result = if run.finalizers().iter().any(|f| f == RUN_FINALIZER) {
        let api: Api<Run> = Api::namespaced(ctx.client.clone(), &ns);
        finalizer(&api, RUN_FINALIZER, run, |event| async {
            match event {
                Finalizer::Apply(run) => apply_run(run, ctx.clone()).await,
                Finalizer::Cleanup(run) => cleanup_run(run, ctx.clone()).await,
            }
        })
        .await
        .map_err(|e| match e {
            // Keep the reconciler's own error (so a 409 stays recognisable as a conflict).
            kube::runtime::finalizer::Error::ApplyFailed(e)
            | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
            other => Error::Finalizer(other.to_string()),
        })
    } else if run.metadata.deletion_timestamp.is_some() {
        // Being deleted (another controller's finalizer holds it): nothing to start or end.
        Ok(Action::await_change())
    } else {
        apply_run(run, ctx.clone()).await
    };
    ctx.metrics
        .observe_duration("run", started.elapsed().as_secs_f64());
    result
}

async fn cleanup_run(run: Arc<Run>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.superseded.forget(&run);
    let ns = run.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    if let Some(p) = run.status.as_ref().and_then(|s| s.worker_pod.clone()) {
        delete_ignoring_missing(&pods, &p).await?;
    }
    purge_events(&run, &ctx).await;
    Ok(Action::await_change())
}

/// Best effort: purges the deleted Run's subjects (events and reasoning) from the stream. A
/// failure is a warning and a Warning Event, never a reason to hold the Run: the stream's
/// retention (`events.retention`) removes the events later anyway.
async fn purge_events(run: &Run, ctx: &Context) {
    let Some(slot) = &ctx.jetstream else {
        return;
    };
    let ns = run.namespace().unwrap_or_default();
    let Some(run_id) = run.uid() else {
        return;
    };
    let outcome = match slot.get() {
        None => Err("the operator is not connected to NATS".to_owned()),
        Some(js) => super::departed::purge(&ctx.config, &js, &ns, &run_id).await,
    };
    if let Err(why) = outcome {
        let stream = &ctx.config.worker.events_stream;
        let retention = &ctx.config.events.retention;
        let note = format!(
            "could not purge the run's events (runId {run_id}) from stream {stream}: {why}; they expire with the stream's retention ({retention})"
        );
        tracing::warn!(namespace = %ns, run = %run.name_any(), "{note}");
        publish(ctx, run, EventType::Warning, Reason::EventsNotPurged, note).await;
    }
}

async fn apply_run(run: Arc<Run>, ctx: Arc<Context>) -> Result<Action, Error> {
    let mut rr = RunReconcile::new(&run, &ctx);
    let path = decide(&run, rr.status(), rr.now);
    let decided_ended = matches!(path, Path::Ended);
    let action = match path {
        Path::Ended => ended(&mut rr, true).await?,
        Path::Refused(refused) => {
            // Before anything else: nothing (snapshot, pod) is ever built from the marker.
            rr.draft.stop_worker();
            rr.draft.refuse(&refused);
            Action::await_change()
        }
        Path::Cancel => super::cancel::cancel(&mut rr).await?,
        Path::Pause(req) => super::pause::pause(&mut rr, &req).await?,
        Path::TimedOut { limit } => {
            rr.draft.stop_worker();
            let msg = format!("run exceeded its timeout of {limit}s");
            let reasons = (Reason::Timeout, Reason::Timeout);
            rr.draft.fail("run_timeout", reasons, msg);
            Action::requeue(IDLE_REQUEUE)
        }
        Path::Progress => {
            let action = super::start::progress(&mut rr).await?;
            deadline_requeue(&run, rr.status(), rr.now).map_or(action, Action::requeue)
        }
    };
    // Ended by this reconcile (the worker's exit, a timeout, a cancel, a refusal): a log that
    // ends already (the worker's own terminal event) is recorded now, not by a reconcile its
    // own status write would trigger (one more reconcile and status write per run whose
    // worker's exit was seen before its events). The operator's own terminal event is
    // appended only after this status write (`ending::record_ending`).
    let action = if !decided_ended && rr.status().phase.unwrap_or_default().is_terminal() {
        match ended(&mut rr, false).await {
            Ok(next) => next,
            // The terminal status is written all the same; the ending is recorded later.
            Err(e) => {
                tracing::warn!(run = %rr.name, error = %e, "the run ended; recording its terminal event failed, retrying");
                Action::requeue(ENDING_RETRY)
            }
        }
    } else {
        action
    };
    rr.act().await?;
    Ok(action)
}

/// When a run that ended in a reconcile whose terminal event could not be recorded looks again.
const ENDING_RETRY: Duration = Duration::from_secs(5);

/// How long a reconcile with nothing due waits before looking again.
const IDLE_REQUEUE: Duration = Duration::from_secs(60);

/// Which step a Run's reconcile takes.
pub(super) enum Path {
    /// Terminal: record the ending once, then the TTLs.
    Ended,
    /// Nothing can be built from the Run (`spec` too deep to decode): fail it.
    Refused(crate::snapshot::Refused),
    /// `spec.cancel`.
    Cancel,
    /// `spec.pause` on a run not waiting for an answer.
    Pause(openwop_crds::PauseRequest),
    /// Running longer than `spec.timeoutSeconds`.
    TimedOut { limit: i64 },
    /// Start, resume or observe the worker.
    Progress,
}

/// The step of a Run with (draft) `status` at `now`, in order: terminal, refused, cancelled,
/// timed out, else progress.
pub(super) fn decide(run: &Run, status: &RunStatus, now: Timestamp) -> Path {
    if status.phase.unwrap_or_default().is_terminal() {
        return Path::Ended;
    }
    if let Some(refused) = crate::snapshot::Refused::undecodable_run(run) {
        return Path::Refused(refused);
    }
    if run.spec.cancel == Some(true) {
        return Path::Cancel;
    }
    if let (Some(limit), Some(start)) = (run.spec.timeout_seconds, &status.start_time)
        && now >= plus(start.0, limit as u64)
    {
        return Path::TimedOut { limit };
    }
    if let Some(req) = &run.spec.pause
        && !status.phase.unwrap_or_default().is_waiting()
    {
        return Path::Pause(req.clone());
    }
    Path::Progress
}

/// While a worker runs under `spec.timeoutSeconds`: look again at the deadline (at most a
/// minute from now).
fn deadline_requeue(run: &Run, status: &RunStatus, now: Timestamp) -> Option<Duration> {
    let (Some(limit), Some(start)) = (run.spec.timeout_seconds, &status.start_time) else {
        return None;
    };
    status.worker_pod.as_ref()?;
    let deadline = plus(start.0, limit as u64);
    Some(wait_until(now, deadline).min(IDLE_REQUEUE))
}

/// A terminal run: its ending recorded once (Event, `Succeeded`, the log's terminal event),
/// then the pod deleted after the pod TTL and the Run after the run TTL.
async fn ended(rr: &mut RunReconcile<'_>, append: bool) -> Result<Action, Error> {
    if rr.status().completion_time.is_none() {
        // Terminal through the event stream: record the outcome once, so TTLs count.
        let phase = rr.status().phase.unwrap_or_default();
        rr.draft.end(phase, RecordedBy::Stream);
    }
    let again = super::ending::record_ending(rr, append).await?;
    let expiry = expiry(rr.status(), &rr.ctx.config.runs, rr.now);
    if expiry.delete_pod {
        rr.draft.stop_worker();
    }
    rr.draft.delete_run = expiry.delete_run;
    let action = match expiry.next {
        _ if expiry.delete_run => Action::await_change(),
        Some(at) => Action::requeue(wait_until(rr.now, at)),
        None => Action::await_change(),
    };
    Ok(again.unwrap_or(action))
}

/// What the TTLs of a finished run call for at `now`.
#[derive(Debug, PartialEq)]
pub(super) struct Expiry {
    /// The pod TTL has passed: delete the worker pod.
    pub(super) delete_pod: bool,
    /// The run TTL has passed: delete the Run.
    pub(super) delete_run: bool,
    /// When the next TTL is due.
    pub(super) next: Option<Timestamp>,
}

pub(super) fn expiry(status: &RunStatus, policy: &RunPolicy, now: Timestamp) -> Expiry {
    let done = status.completion_time.clone().map_or(now, |t| t.0);
    let mut e = Expiry {
        delete_pod: false,
        delete_run: false,
        next: None,
    };
    if status.worker_pod.is_some() {
        let at = plus(done, policy.pod_ttl_seconds_after_finished);
        if now >= at {
            e.delete_pod = true;
        } else {
            e.next = Some(at);
        }
    }
    if let Some(ttl) = policy.run_ttl_seconds_after_finished {
        let at = plus(done, ttl);
        if now >= at {
            e.delete_run = true;
        } else {
            e.next = Some(e.next.map_or(at, |n| n.min(at)));
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use openwop_crds::RunPhase;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_750_000_000 + s).unwrap()
    }

    fn run(cancel: bool, timeout: Option<i64>) -> Run {
        let mut r: Run = serde_json::from_value(serde_json::json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": "r1", "namespace": "ns", "uid": "u"},
            "spec": {"workflowRef": {"name": "w"}}}))
        .unwrap();
        r.spec.cancel = cancel.then_some(true);
        r.spec.timeout_seconds = timeout;
        r
    }

    #[test]
    fn the_step_is_terminal_then_cancel_then_timeout_then_progress() {
        let started = RunStatus {
            phase: Some(RunPhase::Running),
            start_time: Some(Time(at(0))),
            ..Default::default()
        };
        let done = RunStatus {
            phase: Some(RunPhase::Completed),
            ..started.clone()
        };
        let step = |r: &Run, st: &RunStatus, now| match decide(r, st, now) {
            Path::Ended => "ended",
            Path::Refused(_) => "refused",
            Path::Cancel => "cancel",
            Path::Pause(_) => "pause",
            Path::TimedOut { .. } => "timed out",
            Path::Progress => "progress",
        };
        assert_eq!(step(&run(true, Some(5)), &done, at(10)), "ended");
        assert_eq!(step(&run(true, Some(5)), &started, at(10)), "cancel");
        assert_eq!(step(&run(false, Some(5)), &started, at(10)), "timed out");
        assert_eq!(step(&run(false, Some(5)), &started, at(4)), "progress");
        assert_eq!(step(&run(false, None), &started, at(1000)), "progress");
        assert_eq!(
            deadline_requeue(&run(false, Some(30)), &started, at(10)),
            None,
            "no worker pod, no deadline to watch"
        );
        let with_pod = RunStatus {
            worker_pod: Some("r1-w1".into()),
            ..started
        };
        assert_eq!(
            deadline_requeue(&run(false, Some(30)), &with_pod, at(10)),
            Some(Duration::from_secs(20))
        );
    }

    #[test]
    fn ttls_delete_the_pod_then_the_run() {
        let policy = RunPolicy {
            pod_ttl_seconds_after_finished: 300,
            run_ttl_seconds_after_finished: Some(600),
            ..Default::default()
        };
        let st = RunStatus {
            phase: Some(RunPhase::Completed),
            completion_time: Some(Time(at(0))),
            worker_pod: Some("r1-w1".into()),
            ..Default::default()
        };
        let e = |now| expiry(&st, &policy, now);
        assert_eq!(
            e(at(10)),
            Expiry {
                delete_pod: false,
                delete_run: false,
                next: Some(at(300))
            }
        );
        assert_eq!(
            e(at(300)),
            Expiry {
                delete_pod: true,
                delete_run: false,
                next: Some(at(600))
            }
        );
        assert!(e(at(600)).delete_run);
        let no_ttl = RunPolicy::default();
        let gone = RunStatus {
            worker_pod: None,
            ..st.clone()
        };
        assert_eq!(
            expiry(&gone, &no_ttl, at(10)),
            Expiry {
                delete_pod: false,
                delete_run: false,
                next: None
            }
        );
    }
}
