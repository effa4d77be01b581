//! The Workflow and Run reconcilers.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use openwop_crds::{Run, RunError, RunPhase, RunStatus, Workflow, WorkflowStatus};
use openwop_protocol::workflow_check::{CheckOptions, NodeRegistry, Tier1Posture, check_workflow};
use serde_json::json;

use crate::config::OperatorConfig;
use crate::discovery::advertised_kinds;
use crate::metrics::Metrics;
use crate::pod::{
    EXIT_BAD_INPUT, EXIT_SUSPENDED, LABEL_COMPONENT, LABEL_MANAGED_BY, MANAGER, WorkerInputs,
    nats_credentials_secret, needed_credentials, pod_name, snapshot_name, worker_pod,
};
use crate::projection::{Projection, crash_reason, parse_termination_message};
use crate::snapshot::{read_snapshot, snapshot_configmap, snapshot_document, with_current_answers};

/// Finalizer on Runs: deletes the worker pod and snapshot promptly when a Run is deleted.
pub const RUN_FINALIZER: &str = "openwop.dev/cleanup";
/// How many problems a Workflow's Ready message quotes.
const MESSAGE_PROBLEMS: usize = 5;

/// Reconciler errors (retried with backoff by `error_policy`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("run snapshot: {0}")]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    #[error("finalizer: {0}")]
    Finalizer(String),
    #[error("{kind} {name} has no namespace")]
    NoNamespace { kind: &'static str, name: String },
    #[error("NATS credentials (natsCredentials.dir, chart nats.external.credentialsSecret): {0}")]
    NatsCredentials(#[from] openwop_nats::AuthError),
}

impl Error {
    /// A 409 from the apiserver (stale resourceVersion), also when wrapped by the finalizer.
    pub fn is_conflict(&self) -> bool {
        match self {
            Error::Kube(kube::Error::Api(s)) => s.code == 409,
            Error::Finalizer(m) => m.contains("409"),
            _ => false,
        }
    }

    /// Metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "Kube",
            Error::Snapshot(_) => "Snapshot",
            Error::Finalizer(_) => "Finalizer",
            Error::NoNamespace { .. } => "NoNamespace",
            Error::NatsCredentials(_) => "NatsCredentials",
        }
    }
}

/// Shared state of the reconcilers.
pub struct Context {
    pub client: Client,
    pub config: Arc<OperatorConfig>,
    pub registry: Arc<NodeRegistry>,
    pub metrics: Metrics,
    pub reporter: Reporter,
    /// Injected clock, so tests are deterministic.
    pub now: fn() -> Timestamp,
    /// Cache of the worker pods (labels `component=worker`, `managed-by`), fed by a watch the
    /// binary runs; `None` lists them from the API server at each worker start instead.
    pub worker_pods: Option<Store<Pod>>,
    /// The NATS credentials last applied per namespace (`natsCredentials`) and when, so a
    /// worker start does not re-apply an unchanged copy.
    pub nats_copies: NatsCopies,
}

/// Per namespace: the NATS credentials of the copy last applied, and when.
pub type NatsCopies =
    std::sync::Mutex<std::collections::HashMap<String, (openwop_nats::NatsAuth, Instant)>>;

/// An unchanged NATS credentials copy is re-applied after this long anyway, in case someone
/// deleted or edited it.
const NATS_COPY_REFRESH: Duration = Duration::from_secs(300);

impl Context {
    fn recorder(&self) -> Recorder {
        Recorder::new(self.client.clone(), self.reporter.clone())
    }
}

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
    old: &[Condition],
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let since = old
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: since,
    }
}

fn set_condition(list: &mut Vec<Condition>, c: Condition) {
    list.retain(|x| x.type_ != c.type_);
    list.push(c);
    list.sort_by(|a, b| a.type_.cmp(&b.type_));
}

async fn publish(
    ctx: &Context,
    obj: &impl Resource<DynamicType = ()>,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: None,
    };
    // Events are best-effort: failing to record one must not fail the reconcile.
    if let Err(e) = ctx.recorder().publish(&ev, &obj.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "could not publish Kubernetes Event");
    }
}

// ---------------------------------------------------------------- Workflow

/// Validates a Workflow and reports `Ready` (reason `Valid`) or not (reason = first problem).
pub async fn reconcile_workflow(wf: Arc<Workflow>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    ctx.metrics.reconcile_started("workflow");
    let ns = wf.namespace().ok_or_else(|| Error::NoNamespace {
        kind: "Workflow",
        name: wf.name_any(),
    })?;
    let kinds: BTreeSet<String> = advertised_kinds().into_iter().collect();
    let opts = CheckOptions {
        registry: &ctx.registry,
        advertised_kinds: &kinds,
        tier1: Tier1Posture::parse(&ctx.config.tier_one_subset_compliance).unwrap_or_default(),
        mock_agent_opt_in: ctx.config.conformance.mock_agent_allowed_in(&ns),
    };
    let report = check_workflow(&wf.spec.definition(), &opts);
    let now = (ctx.now)();
    let old = wf.status.clone().unwrap_or_default();
    let generation = wf.metadata.generation;
    let ready = if report.is_valid() {
        let mut msg = format!("definition is valid ({} nodes)", wf.spec.nodes.len());
        if !report.warnings.is_empty() {
            let w: Vec<String> = report
                .warnings
                .iter()
                .take(MESSAGE_PROBLEMS)
                .map(ToString::to_string)
                .collect();
            msg.push_str(&format!(
                "; {} warning(s): {}",
                report.warnings.len(),
                w.join("; ")
            ));
        }
        condition(
            "Ready",
            true,
            "Valid",
            msg,
            generation,
            now,
            &old.conditions,
        )
    } else {
        let e: Vec<String> = report
            .errors
            .iter()
            .take(MESSAGE_PROBLEMS)
            .map(ToString::to_string)
            .collect();
        let more = report.errors.len().saturating_sub(MESSAGE_PROBLEMS);
        let mut msg = format!("Invalid: {}", e.join("; "));
        if more > 0 {
            msg.push_str(&format!(" (and {more} more)"));
        }
        condition(
            "Ready",
            false,
            report.errors[0].code.as_str(),
            msg,
            generation,
            now,
            &old.conditions,
        )
    };
    let mut status = WorkflowStatus {
        observed_generation: generation,
        conditions: old.conditions.clone(),
        node_count: Some(wf.spec.nodes.len() as u32),
    };
    set_condition(&mut status.conditions, ready.clone());
    if status != old {
        let api: Api<Workflow> = Api::namespaced(ctx.client.clone(), &ns);
        let patch =
            json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "status": status});
        api.patch_status(
            &wf.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
        let previous = old.conditions.iter().find(|c| c.type_ == "Ready");
        if previous.map(|c| (&c.status, &c.message)) != Some((&ready.status, &ready.message)) {
            let (t, reason) = if ready.status == "True" {
                (EventType::Normal, "Validated")
            } else {
                (EventType::Warning, "Invalid")
            };
            publish(&ctx, wf.as_ref(), t, reason, ready.message.clone()).await;
        }
    }
    ctx.metrics
        .observe_duration("workflow", started.elapsed().as_secs_f64());
    Ok(Action::requeue(Duration::from_secs(600)))
}

// ---------------------------------------------------------------- Run

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
    Ok(Action::await_change())
}

async fn delete_ignoring_missing<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn plus(t: Timestamp, secs: u64) -> Timestamp {
    t.checked_add(SignedDuration::from_secs(secs.min(i64::MAX as u64) as i64))
        .unwrap_or(t)
}

fn wait_until(now: Timestamp, at: Timestamp) -> Duration {
    let d = at.duration_since(now);
    Duration::from_secs(d.as_secs().clamp(1, 3600) as u64)
}

/// Worker crash backoff: base × 2^(failures-1), capped.
pub fn backoff_seconds(cfg: &OperatorConfig, failures: u32) -> u64 {
    let exp = failures.saturating_sub(1).min(20);
    cfg.runs
        .backoff_base_seconds
        .saturating_mul(1u64 << exp)
        .min(cfg.runs.backoff_max_seconds)
}

struct Step {
    status: RunStatus,
    events: Vec<(EventType, &'static str, String)>,
}

impl Step {
    fn event(&mut self, t: EventType, reason: &'static str, note: String) {
        self.events.push((t, reason, note));
    }

    /// Ends the run `failed` with `error.code` = `code`, condition reason `reason` and a
    /// Warning Event `event_reason`, all carrying `message`.
    fn fail(
        &mut self,
        now: Timestamp,
        generation: Option<i64>,
        code: &str,
        (reason, event_reason): (&str, &'static str),
        message: String,
    ) {
        self.status.error = Some(RunError {
            code: code.into(),
            message: message.clone(),
        });
        self.finish(RunPhase::Failed, now, generation, reason, message.clone());
        self.event(EventType::Warning, event_reason, message);
    }

    fn finish(
        &mut self,
        phase: RunPhase,
        now: Timestamp,
        generation: Option<i64>,
        reason: &str,
        message: String,
    ) {
        let old = self.status.conditions.clone();
        self.status.phase = Some(phase);
        self.status.completion_time = Some(Time(now));
        self.status.retry_after = None;
        self.status.pending_interrupt = None;
        let ok = phase == RunPhase::Completed;
        set_condition(
            &mut self.status.conditions,
            condition("Succeeded", ok, reason, message, generation, now, &old),
        );
    }
}

fn apply_projection(st: &mut RunStatus, p: &Projection) {
    st.phase = p.phase.or(st.phase);
    if p.current_node.is_some() {
        st.current_node = p.current_node.clone();
    }
    // Counters never go backwards (the event consumer may have seen more than the summary).
    if p.events > st.events.unwrap_or(0) {
        st.events = Some(p.events);
    }
    if p.last_sequence > st.last_sequence {
        st.last_sequence = p.last_sequence;
    }
    st.pending_interrupt = p.pending_interrupt.clone();
    if p.error.is_some() {
        st.error = p.error.clone();
    }
}

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
            step.finish(phase, now, generation, reason, msg.clone());
            let t = if phase == RunPhase::Completed {
                EventType::Normal
            } else {
                EventType::Warning
            };
            step.event(t, reason, msg);
        }
        action = finished(&run, &ctx, &mut step, &pods, now).await?;
    } else if run.spec.cancel == Some(true) {
        action = cancel(&run, &ctx, &mut step, &pods, &cms, &wfs, now).await?;
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
        action = progress(&run, &ctx, &mut step, &pods, &cms, &wfs, now).await?;
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

/// Creates a worker pod as the operator's field manager; a pod that already exists (a
/// reconcile retried after its status write was lost) counts as created.
async fn create_pod(pods: &Api<Pod>, pod: &Pod) -> Result<(), kube::Error> {
    let params = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    match pods.create(&params, pod).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Sets `Ready=True Snapshotted` and records the matching Event.
fn mark_snapshotted(step: &mut Step, msg: String, generation: Option<i64>, now: Timestamp) {
    let old = step.status.conditions.clone();
    set_condition(
        &mut step.status.conditions,
        condition(
            "Ready",
            true,
            "Snapshotted",
            msg.clone(),
            generation,
            now,
            &old,
        ),
    );
    step.event(EventType::Normal, "Snapshotted", msg);
}
#[allow(clippy::too_many_arguments)]
async fn progress(
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
        return observe_worker(ctx, step, pods, generation, now).await;
    }
    let (snapshot_cm, workflow) = match cms.get_opt(&snap).await? {
        Some(cm) => {
            // A retried reconcile (e.g. after a 409 on the status write) still names the
            // resolved Workflow, not the `id:` reference.
            if let Some(n) = read_snapshot(&cm).ok().and_then(|d| {
                d.pointer("/workflowRef/name")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned)
            }) {
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
                let doc = match snapshot_document(
                    run,
                    &wf,
                    cfg.conformance.provider_mocks_allowed_in(&ns),
                ) {
                    Ok(doc) => doc,
                    Err(refused) => {
                        let msg = refused.to_string();
                        step.status.workflow = Some(wf.name_any());
                        step.status.error = Some(RunError {
                            code: refused.code().into(),
                            message: msg.clone(),
                        });
                        let old = step.status.conditions.clone();
                        set_condition(
                            &mut step.status.conditions,
                            condition(
                                "Ready",
                                false,
                                refused.reason(),
                                msg.clone(),
                                generation,
                                now,
                                &old,
                            ),
                        );
                        step.finish(
                            RunPhase::Failed,
                            now,
                            generation,
                            refused.reason(),
                            msg.clone(),
                        );
                        step.event(EventType::Warning, refused.reason(), msg);
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
                let old = step.status.conditions.clone();
                set_condition(
                    &mut step.status.conditions,
                    condition(
                        "Ready",
                        false,
                        "WorkflowNotFound",
                        msg,
                        generation,
                        now,
                        &old,
                    ),
                );
                return Ok(Action::requeue(Duration::from_secs(30)));
            }
            Resolved::NotReady(wf_name, msg) => {
                step.status.phase = Some(RunPhase::Pending);
                step.status.workflow = Some(wf_name);
                let old = step.status.conditions.clone();
                set_condition(
                    &mut step.status.conditions,
                    condition(
                        "Ready",
                        false,
                        "WorkflowNotReady",
                        msg,
                        generation,
                        now,
                        &old,
                    ),
                );
                return Ok(Action::requeue(Duration::from_secs(30)));
            }
        },
    };

    // 2. Observe the current worker.
    if step.status.worker_pod.is_some() {
        return observe_worker(ctx, step, pods, generation, now).await;
    }

    // 3. No worker: resume, back off, queue or start one.
    let phase = step.status.phase.unwrap_or_default();
    let mut resume = false;
    if phase.is_waiting() {
        let Some(pending) = step.status.pending_interrupt.clone() else {
            return Ok(Action::await_change());
        };
        let answered = run
            .spec
            .answers
            .iter()
            .any(|a| a.interrupt_id == pending.interrupt_id)
            && !step
                .status
                .answered_interrupts
                .contains(&pending.interrupt_id);
        if !answered {
            return Ok(Action::await_change());
        }
        let stored = read_snapshot(&snapshot_cm)?;
        let doc = with_current_answers(&stored, run);
        cms.patch(
            &snap,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&snapshot_configmap(run, &doc)),
        )
        .await?;
        step.status
            .answered_interrupts
            .push(pending.interrupt_id.clone());
        step.status.pending_interrupt = None;
        resume = true;
    }
    if let Some(at) = step.status.retry_after.clone()
        && now < at.0
    {
        return Ok(Action::requeue(wait_until(now, at.0)));
    }
    let active = active_workers(ctx, pods, &ns).await?;
    let limit = cfg.runs.max_concurrent_per_namespace as usize;
    let old = step.status.conditions.clone();
    if active >= limit {
        step.status.phase = Some(RunPhase::Pending);
        let msg = format!("{active} runs hold a worker in namespace {ns} (limit {limit}); queued");
        set_condition(
            &mut step.status.conditions,
            condition("Scheduled", false, "Queued", msg, generation, now, &old),
        );
        return Ok(Action::requeue(Duration::from_secs(15)));
    }
    let attempt = step.status.attempts.unwrap_or(0) + 1;
    let pod = build_worker_pod(run, ctx, wfs, workflow.map(|w| w.spec), step, attempt).await?;
    match create_pod(pods, &pod).await {
        Ok(()) => {}
        // Admission refused the pod (quota, policy, missing service account...): say so on
        // the Run instead of failing silently in a retry loop.
        Err(kube::Error::Api(s)) if matches!(s.code, 403 | 422) => {
            step.status.phase = Some(RunPhase::Pending);
            let msg = format!("the worker pod was refused: {}", s.message);
            set_condition(
                &mut step.status.conditions,
                condition(
                    "Scheduled",
                    false,
                    "PodRejected",
                    msg.clone(),
                    generation,
                    now,
                    &old,
                ),
            );
            if old
                .iter()
                .find(|c| c.type_ == "Scheduled")
                .is_none_or(|c| c.reason != "PodRejected" || c.message != msg)
            {
                step.event(EventType::Warning, "PodRejected", msg);
            }
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
        Err(e) => return Err(e.into()),
    }
    let pod_name = pod_name(&name, attempt);
    step.status.attempts = Some(attempt);
    step.status.worker_pod = Some(pod_name.clone());
    step.status.retry_after = None;
    step.status.phase = Some(RunPhase::Running);
    step.status.start_time.get_or_insert(Time(now));
    set_condition(
        &mut step.status.conditions,
        condition(
            "Scheduled",
            true,
            "WorkerStarted",
            format!("worker pod {pod_name}"),
            generation,
            now,
            &old,
        ),
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

/// Step 2 of [`progress`]: the run has a worker pod; its state decides the reconcile.
async fn observe_worker(
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
                .and_then(parse_termination_message)
                .map(|s| s.projection);
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
            step.finish(final_phase, now, generation, reason, msg.clone());
            let t = if final_phase == RunPhase::Completed {
                EventType::Normal
            } else {
                EventType::Warning
            };
            step.event(t, reason, msg);
            step.status.failed_attempts = None;
            Ok(Action::requeue(Duration::from_secs(
                cfg.runs.pod_ttl_seconds_after_finished.max(1),
            )))
        }
        (true, Some("Succeeded" | "Failed"), Some(t)) if t.exit_code == EXIT_SUSPENDED => {
            let p = t
                .message
                .as_deref()
                .and_then(parse_termination_message)
                .map(|s| s.projection);
            let p = p.unwrap_or(Projection {
                phase: Some(RunPhase::WaitingInput),
                ..Default::default()
            });
            apply_projection(&mut step.status, &p);
            if !step.status.phase.is_some_and(RunPhase::is_waiting) {
                step.status.phase = Some(RunPhase::WaitingInput);
            }
            // A waiting run holds no pod.
            delete_ignoring_missing(pods, &pod_name).await?;
            step.status.worker_pod = None;
            step.status.failed_attempts = None;
            let msg = format!(
                "run is {}; answer the pending interrupt in spec.answers to resume",
                step.status.phase.unwrap_or_default()
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
            if code == EXIT_BAD_INPUT {
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
                && step.status.pending_interrupt.is_some() =>
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

/// Worker pods of `ns` that hold a slot (not finished). From the cache when there is one: a
/// LIST of every worker pod per worker start made starting N runs cost O(N²) transfer.
async fn active_workers(ctx: &Context, pods: &Api<Pod>, ns: &str) -> Result<usize, Error> {
    let holds_slot = |p: &Pod| {
        matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            None | Some("Pending" | "Running")
        )
    };
    if let Some(store) = &ctx.worker_pods
        && store.wait_until_ready().await.is_ok()
    {
        return Ok(store
            .state()
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns) && holds_slot(p))
            .count());
    }
    Ok(pods
        .list(&ListParams::default().labels(&worker_selector()))
        .await?
        .items
        .iter()
        .filter(|p| holds_slot(p))
        .count())
}

/// Label selector of the worker pods this operator creates.
pub fn worker_selector() -> String {
    format!("{LABEL_COMPONENT}=worker,{LABEL_MANAGED_BY}={MANAGER}")
}

/// Attempt `attempt` of the run's worker pod (workflow spec from the snapshot's Workflow);
/// creates the default worker service account when the pod uses it.
async fn build_worker_pod(
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

/// `spec.cancel`: record the cancellation in the event stream. The snapshot gets
/// `cancel: true`; a running worker is deleted (SIGTERM); once it is gone a short cancel
/// worker (next attempt) publishes `run.cancelled` and exits 0. Phase `cancelling` until
/// the stream or the termination message says `cancelled`. Without a worker NATS URL or a
/// snapshot (the run never started) the operator marks the run cancelled itself.
#[allow(clippy::too_many_arguments)]
async fn cancel(
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
            Some(cm) => Ok(cm),
            None => Err("the run never started (no snapshot), so there is no event stream"),
        }
    };
    let cm = match stored {
        Ok(cm) => cm,
        Err(why) => {
            if let Some(p) = step.status.worker_pod.take() {
                delete_ignoring_missing(pods, &p).await?;
            }
            let msg = format!("cancelled by spec.cancel; {why}: the operator set the phase");
            step.finish(
                RunPhase::Cancelled,
                now,
                generation,
                "Cancelled",
                msg.clone(),
            );
            step.event(EventType::Normal, "Cancelled", msg);
            return Ok(Action::await_change());
        }
    };
    let doc = read_snapshot(&cm)?;
    if doc.get("cancel") != Some(&json!(true)) {
        let mut doc = doc;
        if let Some(o) = doc.as_object_mut() {
            o.insert("cancel".into(), json!(true));
        }
        cms.patch(
            &snap,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&snapshot_configmap(run, &doc)),
        )
        .await?;
    }
    let old = step.status.conditions.clone();
    let cancelling = step.status.phase == Some(RunPhase::Cancelling);
    match step.status.worker_pod.clone() {
        // The run's own worker: stop it; the cancel worker starts once it is gone.
        Some(p) if !cancelling => {
            delete_ignoring_missing(pods, &p).await?;
            step.status.worker_pod = None;
            step.status.phase = Some(RunPhase::Cancelling);
            step.status.pending_interrupt = None;
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
                    if let Some(s) = t.message.as_deref().and_then(parse_termination_message) {
                        apply_projection(&mut step.status, &s.projection);
                    }
                    // The log may already have ended otherwise (e.g. completed meanwhile).
                    let phase = step
                        .status
                        .phase
                        .filter(|p| p.is_terminal())
                        .unwrap_or(RunPhase::Cancelled);
                    let msg = format!("the worker recorded the run as {phase}");
                    step.finish(phase, now, generation, "Cancelled", msg.clone());
                    step.event(EventType::Normal, "Cancelled", msg);
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
                        "cancel worker {p} {why}; the operator set the phase, run.cancelled may be missing from the event stream"
                    );
                    step.finish(
                        RunPhase::Cancelled,
                        now,
                        generation,
                        "Cancelled",
                        msg.clone(),
                    );
                    step.event(EventType::Warning, "Cancelled", msg);
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
            create_pod(pods, &pod).await?;
            let p = pod_name(&name, attempt);
            step.status.attempts = Some(attempt);
            step.status.worker_pod = Some(p.clone());
            step.status.phase = Some(RunPhase::Cancelling);
            step.status.pending_interrupt = None;
            step.status.retry_after = None;
            set_condition(
                &mut step.status.conditions,
                condition(
                    "Scheduled",
                    true,
                    "CancelWorkerStarted",
                    format!("cancel worker pod {p}"),
                    generation,
                    now,
                    &old,
                ),
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

/// The default worker service account, created in the Run's namespace when missing. It has
/// no RBAC and its token is never mounted; it exists because pod admission requires it.
async fn ensure_worker_service_account(ctx: &Context, ns: &str) -> Result<(), Error> {
    let name = &ctx.config.worker.service_account_name;
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), ns);
    if api.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let sa = json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "labels": {LABEL_MANAGED_BY: MANAGER}},
        "automountServiceAccountToken": false
    });
    api.patch(name, &PatchParams::apply(MANAGER), &Patch::Apply(&sa))
        .await?;
    Ok(())
}

/// With `natsCredentials` configured: the copy of the operator's NATS credentials in `ns`
/// that worker pods mount, applied when its content changed (a rotation) or went unchecked for
/// `NATS_COPY_REFRESH`. Credentials are read from the mounted Secret each time.
async fn ensure_nats_credentials(ctx: &Context, ns: &str) -> Result<(), Error> {
    let cfg = &ctx.config.nats_credentials;
    if cfg.dir.is_empty() {
        return Ok(());
    }
    let auth = cfg.load()?;
    let fresh = ctx
        .nats_copies
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(ns)
        .is_some_and(|(applied, at)| *applied == auth && at.elapsed() < NATS_COPY_REFRESH);
    if fresh {
        return Ok(());
    }
    let secret = nats_credentials_secret(&cfg.worker_secret, ns, auth.secret_data());
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    api.patch(
        &cfg.worker_secret,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&secret),
    )
    .await?;
    ctx.nats_copies
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(ns.to_owned(), (auth, Instant::now()));
    tracing::debug!(namespace = ns, secret = %cfg.worker_secret, "NATS credentials copy applied");
    Ok(())
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
    let failures = step.status.failed_attempts.unwrap_or(0) + 1;
    step.status.failed_attempts = Some(failures);
    if failures > cfg.runs.max_worker_retries {
        let msg = format!(
            "{why}; {failures} worker failures (limit {})",
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
            "{why}; retrying in {delay}s (failure {failures} of {})",
            cfg.runs.max_worker_retries
        ),
    );
    Ok(Action::requeue(Duration::from_secs(delay)))
}

/// Requeue policy after an error: log, count, retry later. Never crash-loops.
pub fn error_policy<K>(_obj: Arc<K>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed("controller", err.reason());
    if err.is_conflict() {
        // Someone wrote the object meanwhile; its watch event brings the fresh copy.
        tracing::debug!(error = %err, "reconcile raced a concurrent write");
        return Action::requeue(Duration::from_secs(1));
    }
    tracing::warn!(error = %err, "reconcile failed");
    Action::requeue(Duration::from_secs(15))
}
