//! Starting a run: snapshot the resolved workflow (with the host profile), wait for the
//! Workflow when it is missing or not valid, resume on an answer, queue under the
//! namespace's concurrency limit, and create the worker pod.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use openwop_crds::{Run, RunPhase, Workflow};

use super::common::{Step, wait_until};
use super::namespace::{ensure_nats_credentials, ensure_worker_service_account};
use super::{Context, Error};
use crate::pod::{
    LABEL_COMPONENT, LABEL_MANAGED_BY, MANAGER, WorkerInputs, needed_credentials, owned_by,
    pod_name, snapshot_name, worker_pod,
};
use crate::snapshot::{build_snapshot, read_snapshot, snapshot_configmap, with_current_answers};

/// How the Run's workflow reference resolved.
enum Resolved {
    Found(Box<Workflow>),
    Missing(String),
    NotReady(String, String),
}

async fn resolve_workflow(run: &Run, api: &Api<Workflow>, ns: &str) -> Result<Resolved, Error> {
    let r = &run.spec.workflow_ref;
    let found = match (&r.name, &r.id) {
        (Some(name), _) => api.get_opt(name).await?,
        (None, Some(id)) => api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|w| &w.spec.id == id),
        (None, None) => None,
    };
    let Some(wf) = found else {
        return Ok(Resolved::Missing(format!(
            "Workflow {r} not found in namespace {ns}; the run starts when it is created"
        )));
    };
    let ready = wf.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .filter(|_| s.observed_generation == wf.metadata.generation)
            .map(|c| (c.status == "True", c.message.clone()))
    });
    Ok(match ready {
        Some((true, _)) => Resolved::Found(Box::new(wf)),
        Some((false, msg)) => Resolved::NotReady(
            wf.name_any(),
            format!("Workflow {} is not valid: {msg}", wf.name_any()),
        ),
        None => Resolved::NotReady(
            wf.name_any(),
            format!("Workflow {} has not been validated yet", wf.name_any()),
        ),
    })
}

/// Creates a worker pod as the operator's field manager; a pod that already exists (a
/// reconcile retried after its status write was lost) counts as created.
///
/// Returns `false` when the name is held by a leftover of a deleted Run of the same name (a
/// re-created Run reuses pod names while the old pods still terminate): that pod is deleted
/// and the caller retries shortly. Adopting it would report the old run's outcome as this
/// run's.
pub(super) async fn create_pod(pods: &Api<Pod>, pod: &Pod, run: &Run) -> Result<bool, kube::Error> {
    let params = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    match pods.create(&params, pod).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let name = pod.metadata.name.clone().unwrap_or_default();
            match pods.get_opt(&name).await? {
                Some(existing) if owned_by(&existing.metadata, run) => Ok(true),
                Some(_) => {
                    tracing::info!(pod = %name, "a deleted Run's worker pod holds the name; deleting it");
                    match pods.delete(&name, &DeleteParams::background()).await {
                        Ok(_) => Ok(false),
                        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
                        Err(e) => Err(e),
                    }
                }
                None => Ok(false),
            }
        }
        Err(e) => Err(e),
    }
}

/// Sets `Ready=True Snapshotted` and records the matching Event.
fn mark_snapshotted(step: &mut Step, msg: String, generation: Option<i64>, now: Timestamp) {
    step.set_condition("Ready", true, "Snapshotted", msg.clone(), generation, now);
    step.event(EventType::Normal, "Snapshotted", msg);
}
#[allow(clippy::too_many_arguments)]
pub(super) async fn progress(
    run: &Run,
    ctx: &Context,
    step: &mut Step,
    pods: &Api<Pod>,
    cms: &Api<ConfigMap>,
    wfs: &Api<Workflow>,
    now: Timestamp,
) -> Result<Action, Error> {
    let cfg = &ctx.config;
    let generation = run.metadata.generation;
    let ns = run.namespace().unwrap_or_default();
    let name = run.name_any();

    // 1. Snapshot the resolved workflow once. While a worker runs, the snapshot it mounts
    // exists (its status says so): skip the GET in the reconciles its pod's changes trigger.
    let snap = snapshot_name(&name);
    let snapshotted = step
        .status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True" && c.reason == "Snapshotted");
    if snapshotted && step.status.worker_pod.is_some() {
        return super::observe::observe_worker(ctx, step, pods, generation, now).await;
    }
    let (snapshot_cm, workflow) = match cms.get_opt(&snap).await? {
        // A deleted Run of the same name left its snapshot (the garbage collector removes it
        // asynchronously): never run from it; remove it and snapshot this run afresh.
        Some(cm) if !owned_by(&cm.metadata, run) => {
            match cms.delete(&snap, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        Some(cm) => {
            // A retried reconcile (e.g. after a 409 on the status write) still names the
            // resolved Workflow, not the `id:` reference.
            if let Some(n) = read_snapshot(&cm)
                .ok()
                .map(|s| s.workflow_ref.name)
                .filter(|n| !n.is_empty())
            {
                step.status.workflow = Some(n);
            }
            // ... and its Ready condition says so even if the first write was lost.
            if !step
                .status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
            {
                // Events go out only after a successful status write, so the one of the
                // lost first write is recorded now.
                mark_snapshotted(
                    step,
                    format!("workflow snapshotted in ConfigMap {snap}"),
                    generation,
                    now,
                );
            }
            (cm, None)
        }
        None => match resolve_workflow(run, wfs, &ns).await? {
            Resolved::Found(wf) => {
                let host = cfg.host_profile_for(&ns);
                let doc = match build_snapshot(
                    run,
                    &wf,
                    &host,
                    cfg.conformance.provider_mocks_allowed_in(&ns),
                ) {
                    Ok(doc) => doc,
                    Err(refused) => {
                        step.status.workflow = Some(wf.name_any());
                        step.refuse(&refused, now, generation);
                        return Ok(Action::await_change());
                    }
                };
                let cm = snapshot_configmap(run, &doc);
                let cm = cms
                    .patch(
                        &snap,
                        &PatchParams::apply(MANAGER).force(),
                        &Patch::Apply(&cm),
                    )
                    .await?;
                step.status.workflow = Some(wf.name_any());
                let msg = format!(
                    "workflow {} (generation {}) snapshotted in ConfigMap {snap}",
                    wf.name_any(),
                    wf.metadata.generation.unwrap_or(0)
                );
                mark_snapshotted(step, msg, generation, now);
                (cm, Some(wf))
            }
            Resolved::Missing(msg) => {
                step.status.phase = Some(RunPhase::Pending);
                step.set_condition("Ready", false, "WorkflowNotFound", msg, generation, now);
                return Ok(Action::requeue(Duration::from_secs(30)));
            }
            Resolved::NotReady(wf_name, msg) => {
                step.status.phase = Some(RunPhase::Pending);
                step.status.workflow = Some(wf_name);
                step.set_condition("Ready", false, "WorkflowNotReady", msg, generation, now);
                return Ok(Action::requeue(Duration::from_secs(30)));
            }
        },
    };

    // 2. Observe the current worker.
    if step.status.worker_pod.is_some() {
        return super::observe::observe_worker(ctx, step, pods, generation, now).await;
    }

    // 3. No worker: resume, back off, queue or start one.
    let phase = step.status.phase.unwrap_or_default();
    let mut resume = false;
    if phase.is_waiting() {
        // Any pending interrupt with a new answer resumes the run: a new worker continues the
        // answered branches (the others keep waiting).
        let answered: Vec<String> = step
            .status
            .pending_interrupts
            .iter()
            .map(|p| p.interrupt_id.clone())
            .filter(|id| {
                run.spec.answers.iter().any(|a| &a.interrupt_id == id)
                    && !step.status.answered_interrupts.contains(id)
            })
            .collect();
        if answered.is_empty() {
            return Ok(Action::await_change());
        }
        let stored = read_snapshot(&snapshot_cm)?;
        let doc = with_current_answers(&stored, run);
        if let Err(refused) = crate::snapshot::fits(&doc) {
            // The apiserver would refuse this snapshot at every retry: end the run now.
            step.refuse(&refused, now, generation);
            return Ok(Action::await_change());
        }
        cms.patch(
            &snap,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&snapshot_configmap(run, &doc)),
        )
        .await?;
        step.status
            .pending_interrupts
            .retain(|p| !answered.contains(&p.interrupt_id));
        step.status.answered_interrupts.extend(answered);
        resume = true;
    }
    if let Some(at) = step.status.retry_after.clone()
        && now < at.0
    {
        return Ok(Action::requeue(wait_until(now, at.0)));
    }
    // Starts in one namespace are serialized and count the pods this operator created that
    // the pod cache has not seen yet, so concurrent reconciles never exceed the limit.
    let gate = ctx.starts.namespace(&ns);
    let mut recent = gate.lock().await;
    let active = active_workers(ctx, pods, &ns, &mut recent).await?;
    let limit = cfg.runs.max_concurrent_per_namespace as usize;
    if active >= limit {
        step.status.phase = Some(RunPhase::Pending);
        let msg = format!("{active} runs hold a worker in namespace {ns} (limit {limit}); queued");
        step.set_condition("Scheduled", false, "Queued", msg, generation, now);
        return Ok(Action::requeue(Duration::from_secs(15)));
    }
    let attempt = step.status.attempts.unwrap_or(0) + 1;
    let pod = build_worker_pod(run, ctx, wfs, workflow.map(|w| w.spec), step, attempt).await?;
    match create_pod(pods, &pod, run).await {
        Ok(true) => {}
        Ok(false) => {
            step.status.phase = Some(RunPhase::Pending);
            let msg = format!(
                "worker pod name {} is still held by a deleted Run of the same name; retrying",
                pod.metadata.name.as_deref().unwrap_or_default()
            );
            step.set_condition(
                "Scheduled",
                false,
                "PreviousRunTerminating",
                msg,
                generation,
                now,
            );
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
        // Admission refused the pod (quota, policy, missing service account...): say so on
        // the Run instead of failing silently in a retry loop.
        Err(kube::Error::Api(s)) if matches!(s.code, 403 | 422) => {
            step.status.phase = Some(RunPhase::Pending);
            let msg = format!("the worker pod was refused: {}", s.message);
            // One Event per distinct refusal, not one per retry.
            let repeated =
                step.status.conditions.iter().any(|c| {
                    c.type_ == "Scheduled" && c.reason == "PodRejected" && c.message == msg
                });
            step.set_condition(
                "Scheduled",
                false,
                "PodRejected",
                msg.clone(),
                generation,
                now,
            );
            if !repeated {
                step.event(EventType::Warning, "PodRejected", msg);
            }
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
        Err(e) => return Err(e.into()),
    }
    let pod_name = pod_name(&name, attempt);
    recent.insert(pod_name.clone(), Instant::now());
    drop(recent);
    step.status.attempts = Some(attempt);
    step.status.worker_pod = Some(pod_name.clone());
    step.status.retry_after = None;
    step.status.phase = Some(RunPhase::Running);
    step.status.start_time.get_or_insert(Time(now));
    step.set_condition(
        "Scheduled",
        true,
        "WorkerStarted",
        format!("worker pod {pod_name}"),
        generation,
        now,
    );
    let (reason, note) = if resume {
        (
            "Resumed",
            format!("answer received; started worker pod {pod_name}"),
        )
    } else {
        (
            "WorkerStarted",
            format!("started worker pod {pod_name} (attempt {attempt})"),
        )
    };
    step.event(EventType::Normal, reason, note);
    Ok(Action::requeue(Duration::from_secs(60)))
}

/// How long a pod this operator created is counted while the pod cache has not seen it.
const UNSEEN_TTL: Duration = Duration::from_secs(60);

/// Pods this process created (name → when) that the pod cache may not show yet, behind the
/// lock that serializes one namespace's worker starts.
type Unseen = Arc<tokio::sync::Mutex<HashMap<String, Instant>>>;

/// Per namespace: a lock serializing worker starts, around the pods this process created
/// that the pod cache may not show yet.
#[derive(Default)]
pub struct StartGate(std::sync::Mutex<HashMap<String, Unseen>>);

impl StartGate {
    pub(super) fn namespace(&self, ns: &str) -> Unseen {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(ns.to_owned()).or_default().clone()
    }
}

/// Worker pods of `ns` that hold a slot (not finished), counting `recent` (pods this operator
/// created, dropped once the cache or the list shows them). From the cache when there is one:
/// a LIST of every worker pod per worker start made starting N runs cost O(N²) transfer.
pub(super) async fn active_workers(
    ctx: &Context,
    pods: &Api<Pod>,
    ns: &str,
    recent: &mut HashMap<String, Instant>,
) -> Result<usize, Error> {
    let holds_slot = |p: &Pod| {
        matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            None | Some("Pending" | "Running")
        )
    };
    // (name, holds a slot) of the namespace's worker pods.
    let listed: Vec<(String, bool)> = match &ctx.worker_pods {
        Some(store) if store.wait_until_ready().await.is_ok() => store
            .state()
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
            .map(|p| (p.name_any(), holds_slot(p)))
            .collect(),
        _ => pods
            .list(&ListParams::default().labels(&worker_selector()))
            .await?
            .items
            .iter()
            .map(|p| (p.name_any(), holds_slot(p)))
            .collect(),
    };
    recent.retain(|name, at| at.elapsed() < UNSEEN_TTL && !listed.iter().any(|(n, _)| n == name));
    Ok(listed.iter().filter(|(_, slot)| *slot).count() + recent.len())
}

/// Label selector of the worker pods this operator creates.
pub fn worker_selector() -> String {
    format!("{LABEL_COMPONENT}=worker,{LABEL_MANAGED_BY}={MANAGER}")
}

/// Attempt `attempt` of the run's worker pod (workflow spec from the snapshot's Workflow);
/// creates the default worker service account when the pod uses it.
pub(super) async fn build_worker_pod(
    run: &Run,
    ctx: &Context,
    wfs: &Api<Workflow>,
    wf_spec: Option<openwop_crds::WorkflowSpec>,
    step: &Step,
    attempt: u32,
) -> Result<Pod, Error> {
    let wf_spec = match wf_spec {
        Some(s) => Some(s),
        None => match step.status.workflow.as_deref() {
            Some(n) => wfs.get_opt(n).await?.map(|w| w.spec),
            None => None,
        },
    };
    let credentials = wf_spec
        .as_ref()
        .map(|s| needed_credentials(run, s))
        .unwrap_or_default();
    let inputs = WorkerInputs {
        providers: &credentials,
        overrides: wf_spec.as_ref().and_then(|s| s.worker.as_ref()),
    };
    let pod = worker_pod(run, &inputs, &ctx.config, attempt);
    if inputs
        .overrides
        .and_then(|o| o.service_account_name.as_ref())
        .is_none()
    {
        ensure_worker_service_account(ctx, &run.namespace().unwrap_or_default()).await?;
    }
    ensure_nats_credentials(ctx, &run.namespace().unwrap_or_default()).await?;
    Ok(pod)
}
