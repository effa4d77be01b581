//! The Run reconciler's entry point: the finalizer (delete the worker pod and purge the
//! run's subjects when the Run is deleted), terminal phases and their TTLs, the run timeout,
//! and the status write.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use openwop_crds::{Run, RunPhase, Workflow};
use serde_json::json;

use super::common::{Step, delete_ignoring_missing, plus, publish, wait_until};
use super::{Context, Error, RUN_FINALIZER};
use crate::pod::MANAGER;

/// Run reconciler entry: finalizer handling around [`apply_run`].
pub async fn reconcile_run(run: Arc<Run>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    ctx.metrics.reconcile_started("run");
    let ns = run.namespace().ok_or_else(|| Error::NoNamespace {
        kind: "Run",
        name: run.name_any(),
    })?;
    let api: Api<Run> = Api::namespaced(ctx.client.clone(), &ns);
    let result = finalizer(&api, RUN_FINALIZER, run, |event| async {
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
    });
    ctx.metrics
        .observe_duration("run", started.elapsed().as_secs_f64());
    result
}

async fn cleanup_run(run: Arc<Run>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = run.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    if let Some(p) = run.status.as_ref().and_then(|s| s.worker_pod.clone()) {
        delete_ignoring_missing(&pods, &p).await?;
    }
    purge_events(&run, &ctx).await;
    Ok(Action::await_change())
}

/// Longest wait for NATS when purging a deleted Run's subjects.
const PURGE_TIMEOUT: Duration = Duration::from_secs(5);

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
    let stream = &ctx.config.worker.events_stream;
    let outcome = match slot.get() {
        None => Err("the operator is not connected to NATS".to_owned()),
        Some(js) => match tokio::time::timeout(
            PURGE_TIMEOUT,
            openwop_nats::stream::purge_run(&js, stream, &ns, &run_id),
        )
        .await
        {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {}s", PURGE_TIMEOUT.as_secs())),
        },
    };
    match outcome {
        Ok(purged) => {
            tracing::debug!(namespace = %ns, run = %run.name_any(), run_id = %run_id, purged, "deleted Run's events purged")
        }
        Err(why) => {
            let retention = &ctx.config.events.retention;
            let note = format!(
                "could not purge the run's events (runId {run_id}) from stream {stream}: {why}; they expire with the stream's retention ({retention})"
            );
            tracing::warn!(namespace = %ns, run = %run.name_any(), "{note}");
            publish(ctx, run, EventType::Warning, "EventsNotPurged", note).await;
        }
    }
}

async fn apply_run(run: Arc<Run>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = run.namespace().unwrap_or_default();
    let name = run.name_any();

    let now = (ctx.now)();
    let generation = run.metadata.generation;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let wfs: Api<Workflow> = Api::namespaced(ctx.client.clone(), &ns);
    let original = run.status.clone().unwrap_or_default();
    let mut step = Step {
        status: original.clone(),
        events: vec![],
    };
    step.status.run_id = run.uid();
    step.status.observed_generation = generation;
    if step.status.workflow.is_none() {
        step.status.workflow = Some(run.spec.workflow_ref.to_string());
    }
    let phase = step.status.phase.unwrap_or_default();
    let mut action = Action::requeue(Duration::from_secs(60));

    if phase.is_terminal() {
        if step.status.completion_time.is_none() {
            // Terminal through the event stream: record the outcome once, so TTLs count.
            let (reason, msg) = match (phase, &step.status.error) {
                (RunPhase::Failed, Some(e)) => ("Failed", format!("{}: {}", e.code, e.message)),
                (RunPhase::Failed, None) => ("Failed", "the run failed".to_string()),
                (RunPhase::Cancelled, _) => ("Cancelled", "the run was cancelled".to_string()),
                _ => ("Completed", "the run completed".to_string()),
            };
            let t = if phase == RunPhase::Completed {
                EventType::Normal
            } else {
                EventType::Warning
            };
            step.finish(phase, now, generation, (t, reason), msg);
        }
        let again = super::ending::record_ending(&run, &ctx, &mut step, &pods).await?;
        action = finished(&run, &ctx, &mut step, &pods, now).await?;
        if let Some(again) = again {
            action = again;
        }
    } else if let Some(refused) = crate::snapshot::Refused::undecodable_run(&run) {
        // Before anything else: nothing (snapshot, pod) is ever built from the marker.
        if let Some(p) = step.status.worker_pod.take() {
            delete_ignoring_missing(&pods, &p).await?;
        }
        step.refuse(&refused, now, generation);
        action = Action::await_change();
    } else if run.spec.cancel == Some(true) {
        action = super::cancel::cancel(&run, &ctx, &mut step, &pods, &cms, &wfs, now).await?;
    } else if let (Some(limit), Some(start)) =
        (run.spec.timeout_seconds, step.status.start_time.clone())
        && now >= plus(start.0, limit as u64)
    {
        if let Some(p) = step.status.worker_pod.take() {
            delete_ignoring_missing(&pods, &p).await?;
        }
        let msg = format!("run exceeded its timeout of {limit}s");
        step.fail(now, generation, "run_timeout", ("Timeout", "Timeout"), msg);
    } else {
        action = super::start::progress(&run, &ctx, &mut step, &pods, &cms, &wfs, now).await?;
        if let (Some(limit), Some(start)) = (run.spec.timeout_seconds, &step.status.start_time)
            && step.status.worker_pod.is_some()
        {
            let deadline = plus(start.0, limit as u64);
            action = Action::requeue(wait_until(now, deadline).min(Duration::from_secs(60)));
        }
    }

    if step.status != original {
        let api: Api<Run> = Api::namespaced(ctx.client.clone(), &ns);
        // The resourceVersion precondition: the event consumer writes status too; a status
        // computed from a stale cache must not overwrite its newer one (409 → re-reconcile).
        let patch = json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
            "metadata": {"resourceVersion": run.resource_version()},
            "status": step.status,
        });
        api.patch_status(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    }
    for (t, reason, note) in step.events {
        publish(&ctx, run.as_ref(), t, reason, note).await;
    }
    Ok(action)
}

/// Terminal run: delete the pod after the pod TTL, the Run after the run TTL.
async fn finished(
    run: &Run,
    ctx: &Context,
    step: &mut Step,
    pods: &Api<Pod>,
    now: Timestamp,
) -> Result<Action, Error> {
    let policy = &ctx.config.runs;
    let done = step.status.completion_time.clone().map_or(now, |t| t.0);
    let mut next: Option<Timestamp> = None;
    if let Some(p) = step.status.worker_pod.clone() {
        let at = plus(done, policy.pod_ttl_seconds_after_finished);
        if now >= at {
            delete_ignoring_missing(pods, &p).await?;
            step.status.worker_pod = None;
        } else {
            next = Some(at);
        }
    }
    if let Some(ttl) = policy.run_ttl_seconds_after_finished {
        let at = plus(done, ttl);
        if now >= at {
            let api: Api<Run> =
                Api::namespaced(ctx.client.clone(), &run.namespace().unwrap_or_default());
            delete_ignoring_missing(&api, &run.name_any()).await?;
            return Ok(Action::await_change());
        }
        next = Some(next.map_or(at, |n| n.min(at)));
    }
    Ok(next.map_or_else(Action::await_change, |at| {
        Action::requeue(wait_until(now, at))
    }))
}
