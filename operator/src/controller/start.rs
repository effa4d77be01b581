//! Starting a run: snapshot the resolved workflow (with the host profile), wait for the
//! Workflow when it is missing or not valid, resume on an answer, queue under the
//! namespace's concurrency limit, and create the worker pod.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use openwop_crds::names::ANNOTATION_SNAPSHOT_WORKFLOW;
use openwop_crds::{Run, RunPhase, RunStatus, Workflow};
use openwop_protocol::run::quorum;
use openwop_protocol::run::snapshot::RunSnapshot;

use super::common::{Draft, has_condition, wait_until};
use super::context::Error;
use super::namespace::{ensure_nats_credentials, ensure_worker_service_account};
use super::observe::observe_worker;
use super::slots::Full;
use super::state::{RunReconcile, WorkerState};
use super::tools;
use super::waits;
use crate::names::{owned_by, pod_name, snapshot_name};
use crate::pod::{WorkerInputs, needed_credentials, worker_pod};
use crate::reasons::{ConditionType, Reason};
use crate::snapshot::{
    SnapshotError, build_snapshot, read_snapshot, snapshot_configmap, with_current_answers,
};

/// How the Run's workflow reference resolved.
enum Resolved {
    Found(Box<Workflow>),
    Missing(String),
    NotReady(String, String),
}

async fn resolve_workflow(rr: &RunReconcile<'_>) -> Result<Resolved, Error> {
    let r = &rr.run.spec.workflow_ref;
    let found = match (&r.name, &r.id) {
        (Some(name), _) => rr.workflow(name).await?,
        (None, Some(id)) => rr.workflows().await?.into_iter().find(|w| &w.spec.id == id),
        (None, None) => None,
    };
    let Some(wf) = found else {
        return Ok(Resolved::Missing(format!(
            "Workflow {r} not found in namespace {}; the run starts when it is created",
            rr.ns
        )));
    };
    let ready = wf.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == ConditionType::Ready.as_str())
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

/// Sets `Ready=True Snapshotted` and records the matching Event.
fn mark_snapshotted(draft: &mut Draft, msg: String) {
    draft.set_condition(ConditionType::Ready, true, Reason::Snapshotted, msg.clone());
    draft.event(EventType::Normal, Reason::Snapshotted, msg);
}

/// The worker pod of a run that has one: its state decides ([`observe_worker`]).
async fn observe(rr: &mut RunReconcile<'_>) -> Result<Action, Error> {
    let Some(pod_name) = rr.status().worker_pod.clone() else {
        return Ok(Action::await_change());
    };
    let state = WorkerState::of(rr.pod(&pod_name).await?.as_ref());
    Ok(observe_worker(&mut rr.draft, &rr.ctx.config, state))
}

/// The pending interrupts of a waiting run that `spec.answers` decides and that no earlier
/// worker consumed: any of them resumes the run (the others keep waiting). A quorum
/// approval's partial votes decide nothing (`quorum::decided`): no worker for them.
fn newly_answered(run: &Run, status: &RunStatus) -> Vec<String> {
    status
        .pending_interrupts
        .iter()
        .filter(|p| {
            quorum::decided(p, &run.spec.answers)
                && !status.answered_interrupts.contains(&p.interrupt_id)
        })
        .map(|p| p.interrupt_id.clone())
        .collect()
}

/// The Workflow a snapshot froze: its annotation, else (a snapshot written before the
/// annotation existed) the snapshot itself, read from the API server when only its metadata
/// is at hand.
async fn snapshot_workflow(
    rr: &RunReconcile<'_>,
    meta: &ObjectMeta,
    cm: Option<&ConfigMap>,
) -> Result<Option<String>, Error> {
    let annotated = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_SNAPSHOT_WORKFLOW));
    if let Some(n) = annotated {
        return Ok(Some(n.clone()).filter(|n| !n.is_empty()));
    }
    let fetched = match cm {
        Some(_) => None,
        None => rr.snapshot_now().await?,
    };
    Ok(cm
        .or(fetched.as_ref())
        .and_then(|cm| read_snapshot(cm).ok())
        .map(|s| s.workflow_ref.name)
        .filter(|n| !n.is_empty()))
}

/// The snapshot of a dormant or waiting run: [`progress`] read it whole from the API server.
fn recorded_snapshot(cm: Option<&ConfigMap>) -> Result<RunSnapshot, Error> {
    Ok(read_snapshot(cm.ok_or(SnapshotError::Missing)?)?)
}

/// A run without a terminal phase: snapshot, observe the worker, or start one.
pub(super) async fn progress(rr: &mut RunReconcile<'_>) -> Result<Action, Error> {
    // 1. Snapshot the resolved workflow once.
    let (snapshot_cm, workflow) = match snapshot(rr).await? {
        Snapshotted::Done(action) => return Ok(action),
        Snapshotted::Ready(cm, workflow) => (cm.map(|cm| *cm), workflow),
    };

    // 2. Observe the current worker.
    if rr.status().worker_pod.is_some() {
        return observe(rr).await;
    }

    // 3. No worker: resume, back off, queue or start one.
    start_next(rr, snapshot_cm, workflow).await
}

/// What [`snapshot`] leaves: the reconcile's answer, or the run's snapshot (whole when it was
/// read from the API server) and the Workflow resolved for it, to go on with.
enum Snapshotted {
    Done(Action),
    /// Boxed: a ConfigMap is large beside an `Action`.
    Ready(Option<Box<ConfigMap>>, Option<Box<Workflow>>),
}

/// Step 1 of [`progress`]: snapshot the resolved workflow once (a first start creates its
/// worker with it at once), or find the snapshot already written. While a worker runs, the
/// snapshot it mounts exists (its status says so): the reconciles its pod's changes trigger
/// skip the GET and observe it.
async fn snapshot(rr: &mut RunReconcile<'_>) -> Result<Snapshotted, Error> {
    let ctx = rr.ctx;
    let cfg = &ctx.config;
    let run = rr.run;
    let ns = rr.ns.clone();
    let snap = snapshot_name(&rr.name);
    let snapshotted = has_condition(
        &rr.status().conditions,
        ConditionType::Ready,
        Some(Reason::Snapshotted),
    );
    if snapshotted && rr.status().worker_pod.is_some() {
        return observe(rr).await.map(Snapshotted::Done);
    }
    // A dormant or waiting run reads what was recorded in its snapshot (children, answers):
    // from the API server, not from a cache that may be behind its last write.
    let st = rr.status();
    let recorded = !st.timers.is_empty()
        || !st.child_waits.is_empty()
        || st.phase.unwrap_or_default().is_waiting();
    // Any other run needs only whether it exists, its owner and the Workflow it froze: the
    // snapshot cache's metadata (`snapshot_cm` is then `None`).
    let found = if recorded {
        rr.snapshot_now()
            .await?
            .map(|cm| (cm.metadata.clone(), Some(cm)))
    } else {
        rr.snapshot_meta().await?
    };
    Ok(match found {
        // A deleted Run of the same name left its snapshot (the garbage collector removes it
        // asynchronously): never run from it; remove it and snapshot this run afresh.
        Some((meta, _)) if !owned_by(&meta, run) => {
            rr.delete_snapshot().await?;
            return Ok(Snapshotted::Done(Action::requeue(Duration::from_secs(1))));
        }
        Some((meta, cm)) => {
            // A retried reconcile (e.g. after a 409 on the status write) still names the
            // resolved Workflow, not the `id:` reference.
            if let Some(n) = snapshot_workflow(rr, &meta, cm.as_ref()).await? {
                rr.draft.status.workflow = Some(n);
            }
            // ... and its Ready condition says so even if the first write was lost.
            if !has_condition(&rr.status().conditions, ConditionType::Ready, None) {
                // Events go out only after a successful status write, so the one of the
                // lost first write is recorded now.
                mark_snapshotted(
                    &mut rr.draft,
                    format!("workflow snapshotted in ConfigMap {snap}"),
                );
            }
            Snapshotted::Ready(cm.map(Box::new), None)
        }
        None => match resolve_workflow(rr).await? {
            Resolved::Found(wf) => {
                let host = cfg.host_profile_for(&ns);
                let mut doc = match build_snapshot(
                    run,
                    &wf,
                    &ctx.definitions.of(&wf),
                    &host,
                    cfg.conformance.provider_mocks_allowed_in(&ns),
                ) {
                    Ok(doc) => doc,
                    Err(refused) => {
                        rr.draft.status.workflow = Some(wf.name_any());
                        rr.draft.refuse(&refused);
                        return Ok(Snapshotted::Done(Action::await_change()));
                    }
                };
                match tools::resolve(ctx, run, &wf).await? {
                    tools::Resolution::Ready { mounts, headers } => {
                        doc.tool_servers = mounts;
                        if let Some(data) = headers {
                            tools::apply_headers(ctx, run, data).await?;
                        }
                    }
                    tools::Resolution::Unavailable(msg) => {
                        rr.draft.status.phase = Some(RunPhase::Pending);
                        rr.draft.status.workflow = Some(wf.name_any());
                        let reason = Reason::ToolServerUnavailable;
                        rr.draft
                            .set_condition(ConditionType::Ready, false, reason, msg);
                        return Ok(Snapshotted::Done(Action::requeue(Duration::from_secs(30))));
                    }
                }
                let cm = snapshot_configmap(run, &doc);
                rr.draft.status.workflow = Some(wf.name_any());
                let msg = format!(
                    "workflow {} (generation {}) snapshotted in ConfigMap {snap}",
                    wf.name_any(),
                    wf.metadata.generation.unwrap_or(0)
                );
                mark_snapshotted(&mut rr.draft, msg);
                if is_first_start(run, rr.status()) {
                    return start_worker(rr, Some(wf), Some(cm), Why::First)
                        .await
                        .map(Snapshotted::Done);
                }
                rr.apply_snapshot(&cm).await?;
                Snapshotted::Ready(Some(Box::new(cm)), Some(wf))
            }
            Resolved::Missing(msg) => {
                rr.draft.status.phase = Some(RunPhase::Pending);
                let reason = Reason::WorkflowNotFound;
                rr.draft
                    .set_condition(ConditionType::Ready, false, reason, msg);
                return Ok(Snapshotted::Done(Action::requeue(Duration::from_secs(30))));
            }
            Resolved::NotReady(wf_name, msg) => {
                rr.draft.status.phase = Some(RunPhase::Pending);
                rr.draft.status.workflow = Some(wf_name);
                let reason = Reason::WorkflowNotReady;
                rr.draft
                    .set_condition(ConditionType::Ready, false, reason, msg);
                return Ok(Snapshotted::Done(Action::requeue(Duration::from_secs(30))));
            }
        },
    })
}

/// Step 3 of [`progress`], a run without a worker: wait (for an answer, a timer, a child),
/// back off after a crash, or resume, pause or start it, queued under the namespace's limit.
async fn start_next(
    rr: &mut RunReconcile<'_>,
    snapshot_cm: Option<ConfigMap>,
    workflow: Option<Box<Workflow>>,
) -> Result<Action, Error> {
    let ctx = rr.ctx;
    let cfg = &ctx.config;
    let run = rr.run;
    let now = rr.now;
    let phase = rr.status().phase.unwrap_or_default();
    let mut resume = false;
    let answered = newly_answered(run, rr.status());
    // Durable waits (a long delay, a child run): wake the run when a timer is due or a
    // child ended; create the children its worker recorded.
    let dormant = !rr.status().timers.is_empty() || !rr.status().child_waits.is_empty();
    let lead = waits::lead(cfg.runs.durable_wait_threshold_ms);
    let (stored, woken) = if dormant {
        durable_waits(rr, snapshot_cm.as_ref(), lead).await?
    } else {
        (None, None)
    };
    // A pause or a resume may start a worker whatever else the run waits for.
    let paused = super::pause_start::start_for(rr);
    let pause_now = paused.as_ref().is_some_and(|p| p.now);
    if woken.is_none() && answered.is_empty() && !pause_now && (phase.is_waiting() || dormant) {
        return Ok(waits::waiting_requeue(rr.status(), now, lead)
            .map_or_else(Action::await_change, Action::requeue));
    }
    // Back off before an answer is consumed: a consumed answer is never "newly answered"
    // again, so consuming it and then waiting would leave the run waiting with nothing
    // pending and no worker.
    if let Some(at) = rr.status().retry_after.clone()
        && now < at.0
    {
        return Ok(Action::requeue(wait_until(now, at.0)));
    }
    if phase.is_waiting() || woken.is_some() {
        let stored = match stored {
            Some(s) => s,
            None => recorded_snapshot(snapshot_cm.as_ref())?,
        };
        let doc = with_current_answers(&stored, run);
        if let Err(refused) = crate::snapshot::fits(&doc) {
            // The apiserver would refuse this snapshot at every retry: end the run now.
            rr.draft.refuse(&refused);
            return Ok(Action::await_change());
        }
        rr.apply_snapshot(&snapshot_configmap(run, &doc)).await?;
        let status = &mut rr.draft.status;
        status
            .pending_interrupts
            .retain(|p| !answered.contains(&p.interrupt_id));
        status.answered_interrupts.extend(answered);
        resume = true;
    }
    if let Some(p) = &paused {
        super::pause_start::prepare_snapshot(rr, p.pause.clone()).await?;
    }
    let why = match (paused, woken) {
        (Some(p), _) => Why::Pause(p.note),
        (None, Some(why)) => Why::Woken(why),
        (None, None) if resume => Why::Answered,
        (None, None) => Why::First,
    };
    start_worker(rr, workflow, None, why).await
}

/// The durable waits of a dormant run (a long delay, a child run): the children its worker
/// recorded are created and the ended ones' outcomes noted; whether the run wakes (a child
/// ended, or a timer is due: why, for the start's Event), and its recorded snapshot (with
/// the children's outcomes), which a wake-up writes.
async fn durable_waits(
    rr: &mut RunReconcile<'_>,
    snapshot_cm: Option<&ConfigMap>,
    lead: Duration,
) -> Result<(Option<RunSnapshot>, Option<&'static str>), Error> {
    let now = rr.now;
    let mut stored = None;
    let mut woken = None;
    let snap = recorded_snapshot(snapshot_cm)?;
    let children = waits::tend_children(rr, &snap).await?;
    if !children.ended.is_empty() {
        let mut doc = snap.clone();
        waits::note_outcomes(&mut rr.draft, &children.ended);
        doc.children.extend(children.ended);
        stored = Some(doc);
        woken = Some("a child run ended");
    } else if waits::timers(rr.status(), now, lead) == waits::Timers::Due {
        woken = Some("a timer is due");
    }
    if woken.is_none() {
        waits::mirror_children(&mut rr.draft.status);
    }
    stored.get_or_insert(snap);
    Ok((stored, woken))
}

/// Whether a run that has no snapshot yet goes straight to its first worker: it never had one
/// and nothing recorded it as anything but pending. A run whose first status write was lost
/// while its events were folded (waiting for an answer, say) has no snapshot in the cache
/// either, and must take the steps that wait, resume or pause instead.
fn is_first_start(run: &Run, status: &RunStatus) -> bool {
    status.attempts.unwrap_or(0) == 0
        && status.worker_pod.is_none()
        && status.phase.unwrap_or_default() == RunPhase::Pending
        && status.timers.is_empty()
        && status.child_waits.is_empty()
        && run.spec.pause.is_none()
}

/// Why a worker starts, for its Event.
enum Why {
    /// The run's first worker, or a retry after a crash.
    First,
    /// A pause requested, or a paused run resumed (`PauseStart::note`).
    Pause(&'static str),
    /// A durable wait ended: a timer is due or a child run ended.
    Woken(&'static str),
    /// An answer to a pending interrupt.
    Answered,
}

/// Reserves a worker slot (or queues the run) and creates the worker pod.
///
/// `first_snapshot`: the snapshot of a run's first start, not written yet. It is created
/// together with the pod (one round trip instead of two while the start holds its reconcile
/// slot): the pod mounts it, and the kubelet starts no container before every volume it
/// mounts exists. A queued run writes it alone, so it is snapshotted while it waits.
async fn start_worker(
    rr: &mut RunReconcile<'_>,
    workflow: Option<Box<Workflow>>,
    first_snapshot: Option<ConfigMap>,
    why: Why,
) -> Result<Action, Error> {
    let ctx = rr.ctx;
    let cfg = &ctx.config;
    let ns = rr.ns.clone();
    let now = rr.now;
    // The slot is reserved in memory (no API call under the lock); the pod is built and
    // created outside it, and a failed create releases the slot (module `slots`).
    let attempt = rr.status().attempts.unwrap_or(0) + 1;
    let pod_name = pod_name(&rr.name, attempt);
    let limit = cfg.runs.max_concurrent_per_namespace as usize;
    let listing = rr.worker_pod_listing().await?;
    let ahead = |counted: &dyn Fn(&str) -> bool| rr.queued_ahead(counted);
    let slot = match ctx
        .starts
        .reserve(&ns, &pod_name, limit, ahead, || listing.read(&ns))
    {
        Ok(slot) => slot,
        Err(Full { active, ahead }) => {
            if let Some(cm) = &first_snapshot {
                rr.create_snapshot(cm).await?;
            }
            rr.draft.status.phase = Some(RunPhase::Pending);
            // No count in the message: a queued run's status is written once, not at every
            // look at the queue.
            let msg = format!(
                "the namespace's {limit} worker slots are taken (runs.maxConcurrentPerNamespace); queued, started in creation order"
            );
            tracing::debug!(namespace = %ns, run = %rr.name, active, ahead, limit, "queued");
            let scheduled = ConditionType::Scheduled;
            rr.draft
                .set_condition(scheduled, false, Reason::Queued, msg);
            return Ok(Action::requeue(QUEUED_REQUEUE));
        }
    };
    let pod = build_worker_pod(rr, workflow.map(|w| w.spec), attempt).await?;
    let created = match &first_snapshot {
        None => rr.create_pod(&pod).await,
        Some(cm) => {
            let (snapshot, created) = tokio::join!(rr.create_snapshot(cm), rr.create_pod(&pod));
            if let Err(e) = snapshot {
                // Never leave a pod without its snapshot: it would hold a slot and never
                // start (or, in a race with a deleted Run's snapshot of the same name, start
                // from that one). The next reconcile creates both again.
                if matches!(created, Ok(true)) {
                    rr.discard_pod(&pod_name).await;
                }
                return Err(e);
            }
            created
        }
    };
    match created {
        Ok(true) => slot.keep(),
        Ok(false) => {
            rr.draft.status.phase = Some(RunPhase::Pending);
            let msg = format!(
                "worker pod name {} is still held by a pod being deleted (a deleted Run's of the same name, or one this run discarded); retrying",
                pod.metadata.name.as_deref().unwrap_or_default()
            );
            let reason = Reason::PreviousRunTerminating;
            rr.draft
                .set_condition(ConditionType::Scheduled, false, reason, msg);
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
        // Admission refused the pod (quota, policy, missing service account...): say so on
        // the Run instead of failing silently in a retry loop.
        Err(kube::Error::Api(s)) if matches!(s.code, 403 | 422) => {
            rr.draft.status.phase = Some(RunPhase::Pending);
            let msg = format!("the worker pod was refused: {}", s.message);
            // One Event per distinct refusal, not one per retry.
            let repeated = rr.status().conditions.iter().any(|c| {
                c.type_ == ConditionType::Scheduled.as_str()
                    && c.reason == Reason::PodRejected.as_str()
                    && c.message == msg
            });
            let scheduled = ConditionType::Scheduled;
            rr.draft
                .set_condition(scheduled, false, Reason::PodRejected, msg.clone());
            if !repeated {
                rr.draft.event(EventType::Warning, Reason::PodRejected, msg);
            }
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
        Err(e) => return Err(e.into()),
    }
    let draft = &mut rr.draft;
    draft.status.attempts = Some(attempt);
    draft.status.worker_pod = Some(pod_name.clone());
    draft.status.retry_after = None;
    draft.status.phase = Some(RunPhase::Running);
    draft.status.start_time.get_or_insert(Time(now));
    draft.set_condition(
        ConditionType::Scheduled,
        true,
        Reason::WorkerStarted,
        format!("worker pod {pod_name}"),
    );
    let (reason, note) = match why {
        Why::Pause(note) => (
            Reason::Resumed,
            format!("{note}; started worker pod {pod_name}"),
        ),
        Why::Woken(why) => (
            Reason::Woken,
            format!("{why}; started worker pod {pod_name}"),
        ),
        Why::Answered => (
            Reason::Resumed,
            format!("answer received; started worker pod {pod_name}"),
        ),
        Why::First => (
            Reason::WorkerStarted,
            format!("started worker pod {pod_name} (attempt {attempt})"),
        ),
    };
    // Snapshotted and started in one reconcile: one change, one Event (at 200 Runs at once the
    // two Events were a fifth of the operator's API requests).
    let note = match draft.take_note(Reason::Snapshotted) {
        Some(snapshotted) => format!("{snapshotted}; {note}"),
        None => note,
    };
    draft.event(EventType::Normal, reason, note);
    Ok(Action::requeue(Duration::from_secs(60)))
}

/// How often a queued run looks at the queue again on its own; a worker pod that ends wakes
/// the oldest queued runs of its namespace at once (the pod watch's mapper in the binary).
const QUEUED_REQUEUE: Duration = Duration::from_secs(15);

/// Attempt `attempt` of the run's worker pod (workflow spec from the snapshot's Workflow);
/// creates the default worker service account when the pod uses it.
pub(super) async fn build_worker_pod(
    rr: &RunReconcile<'_>,
    wf_spec: Option<openwop_crds::WorkflowSpec>,
    attempt: u32,
) -> Result<Pod, Error> {
    let run = rr.run;
    let wf_spec = match wf_spec {
        Some(s) => Some(s),
        None => match rr.status().workflow.as_deref() {
            Some(n) => rr.workflow(n).await?.map(|w| w.spec),
            None => None,
        },
    };
    let credentials = wf_spec
        .as_ref()
        .map(|s| needed_credentials(run, s))
        .unwrap_or_default();
    let inputs = WorkerInputs {
        providers: &credentials,
        secrets: wf_spec.as_ref().map_or(&[][..], |s| s.secrets.as_slice()),
        tool_headers: wf_spec
            .as_ref()
            .filter(|s| !tools::named_servers(s, &rr.ns).is_empty())
            .map(|_| crate::names::tool_headers_secret_name(&rr.name)),
        overrides: wf_spec.as_ref().and_then(|s| s.worker.as_ref()),
    };
    let pod = worker_pod(run, &inputs, &rr.ctx.config, attempt);
    if inputs
        .overrides
        .and_then(|o| o.service_account_name.as_ref())
        .is_none()
    {
        ensure_worker_service_account(rr).await?;
    }
    ensure_nats_credentials(rr.ctx, &rr.ns).await?;
    Ok(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openwop_protocol::run::gate::Gate;
    use openwop_protocol::run::nodes::APPROVAL_GATE_TYPE_ID;
    use openwop_protocol::run::projection::Projection;
    use serde_json::{Value, json};

    /// The controller starts no worker for a quorum gate before its votes decide it, at every
    /// moment of the gate's recording (a status may be written after each of its events) and
    /// with any number of votes already in `spec.answers`.
    #[test]
    fn no_worker_for_a_quorum_gate_before_its_quorum_at_any_moment_of_its_recording() {
        let g = Gate::of(
            "gate",
            APPROVAL_GATE_TYPE_ID,
            &json!({"title": "Ship?", "requiredApprovals": 3}),
        )
        .unwrap();
        let w = g.wait("gate", "i1", "2026-12-07T10:00:00Z");
        let events = [
            ("node.started", json!({"nodeId": "gate"})),
            (
                "node.suspended",
                serde_json::to_value(&w.suspended).unwrap(),
            ),
            (
                "interrupt.requested",
                serde_json::to_value(&w.requested).unwrap(),
            ),
            (
                "approval.requested",
                serde_json::to_value(w.approval.as_ref().unwrap()).unwrap(),
            ),
        ];
        for k in 0..=events.len() {
            let mut p = Projection::default();
            for (seq, (ty, payload)) in events[..k].iter().enumerate() {
                p.apply(
                    &json!({"type": ty, "sequence": seq, "nodeId": "gate", "payload": payload}),
                );
            }
            for votes in 0..=3 {
                let answers: Vec<Value> = (0..votes)
                    .map(|v| json!({"interruptId": "i1", "nodeId": "gate", "action": "accept", "value": {"voter": format!("v{v}")}}))
                    .collect();
                let mut run: Run = serde_json::from_value(json!({
                    "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
                    "metadata": {"name": "r", "namespace": "ns"},
                    "spec": {"workflowRef": {"name": "w"}, "answers": answers},
                }))
                .unwrap();
                let mut status = RunStatus::default();
                status.set_projection(p.clone());
                run.status = Some(status.clone());
                let started = newly_answered(&run, &status);
                assert_eq!(
                    !started.is_empty(),
                    votes == 3 && k == events.len(),
                    "after event {k} with {votes} vote(s): {started:?}"
                );
            }
        }
    }
}
