//! Durable waits, the operator's side: a run whose worker exited while a node waits without
//! a pod — a long `core.delay` (a recorded timer) or a `core.subWorkflow` (a recorded
//! `node.dispatched`) — is woken here. Timers: the reconcile is requeued at the earliest
//! `wakeAt` (never polled) and a worker started then. Child runs: the child `Run` is created
//! from the record (its name derived from parent and node, so it is made once), and once it
//! ended its outcome is written into the parent's snapshot (like an answer) and the parent's
//! worker started. Cancelling the parent cancels its children (`reason: parent-cancelled`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use openwop_crds::names::{
    ANNOTATION_CANCEL_REASON, ANNOTATION_PARENT_NODE, ANNOTATION_SUB_WORKFLOW_DEPTH,
    LABEL_INSTANCE, LABEL_PARENT_RUN,
};
use openwop_crds::{ChildRun, Run, RunSpec, RunStatus, WorkflowRef};
use openwop_protocol::run::RunPhase;
use openwop_protocol::run::snapshot::RunSnapshot;
use openwop_protocol::run::status::RunError;
use openwop_protocol::run::subjects::events_subject;
use openwop_protocol::run::variables::Variables;
use openwop_protocol::run::waits::{ChildResult, ChildWait, PARENT_CANCELLED, mirrored_phase};
use serde_json::{Map, Value, json};

use super::common::{Draft, wait_until};
use super::context::Error;
use super::state::RunReconcile;
use crate::names::{MANAGER, owner_ref};
use crate::reasons::Reason;
use crate::snapshot::read_snapshot;

/// How far ahead of a timer's `wakeAt` the worker is started (at most the threshold): the
/// worker sleeps the rest in its pod, so pod start-up does not make the wake late.
pub(super) const WAKE_LEAD: Duration = Duration::from_secs(1);

/// What the run's armed timers call for at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timers {
    /// No timer is armed.
    None,
    /// The earliest is due (within `lead`): start a worker.
    Due,
    /// Look again in this long (at the earliest timer's wake time minus `lead`).
    Later(Duration),
}

/// The run's timers at `now`, starting a worker `lead` early.
pub(super) fn timers(status: &RunStatus, now: Timestamp, lead: Duration) -> Timers {
    let earliest = status
        .timers
        .iter()
        .filter_map(|t| t.wake_at.parse::<Timestamp>().ok())
        .min();
    let Some(at) = earliest else {
        return Timers::None;
    };
    let lead = k8s_openapi::jiff::SignedDuration::try_from(lead).unwrap_or_default();
    let start = at.checked_sub(lead).unwrap_or(at);
    if now >= start {
        Timers::Due
    } else {
        Timers::Later(wait_until(now, start))
    }
}

/// The lead of [`WAKE_LEAD`] bounded by the threshold: a worker started earlier than the
/// threshold before `wakeAt` would only exit again.
pub(super) fn lead(threshold_ms: u64) -> Duration {
    WAKE_LEAD.min(Duration::from_millis(threshold_ms))
}

/// What the child runs of a dormant parent call for.
pub(super) struct Children {
    /// Outcomes of children that ended (or could not be made) and are not yet in the
    /// parent's snapshot.
    pub(super) ended: Vec<ChildResult>,
}

/// Creates the missing child Runs of `rr`'s waiting sub-workflow nodes, keeps
/// `status.childRuns` current, and collects the outcomes of those that ended. `stored` is
/// the parent's snapshot (outcomes already written there are not collected again).
pub(super) async fn tend_children(
    rr: &mut RunReconcile<'_>,
    stored: &RunSnapshot,
) -> Result<Children, Error> {
    let mut ended = Vec::new();
    let waits = rr.status().child_waits.clone();
    for wait in waits {
        if stored.child_result(&wait.node_id).is_some() {
            continue;
        }
        let child = rr.run_named(&wait.child_run_name).await?;
        match child {
            None => {
                if let Some(result) = create_child(rr, stored, &wait).await? {
                    ended.push(result);
                }
            }
            Some(child) if !is_child_of(&child, rr.run) => {
                // The name is held by a Run that is not ours: never adopt it.
                ended.push(not_made(
                    &wait,
                    "child_name_taken",
                    format!(
                        "Run {} exists and was not created by this run's node {}; delete or rename it",
                        wait.child_run_name, wait.node_id
                    ),
                ));
            }
            Some(child) => {
                let st = child.status.as_ref();
                let phase = st.and_then(|s| s.phase);
                // The child's node holding its (first) interrupt, while it waits.
                let waiting_node = st
                    .filter(|s| s.phase.is_some_and(RunPhase::is_waiting))
                    .and_then(|s| s.pending_interrupts.first())
                    .map(|p| p.node_id.clone());
                note_child(
                    &mut rr.draft.status,
                    &wait,
                    child.uid(),
                    phase,
                    waiting_node,
                );
                if phase.is_some_and(RunPhase::is_terminal) {
                    ended.push(child_result(rr, stored, &wait, &child).await?);
                }
            }
        }
    }
    Ok(Children { ended })
}

/// Whether `child` was created by `parent` (its controller owner).
fn is_child_of(child: &Run, parent: &Run) -> bool {
    child
        .owner_references()
        .iter()
        .any(|o| Some(&o.uid) == parent.metadata.uid.as_ref())
}

/// Records (or refreshes) the child of `wait` in `status.childRuns`.
fn note_child(
    status: &mut RunStatus,
    wait: &ChildWait,
    uid: Option<String>,
    phase: Option<RunPhase>,
    waiting_node: Option<String>,
) {
    if let Some(c) = status
        .child_runs
        .iter_mut()
        .find(|c| c.name == wait.child_run_name)
    {
        c.run_id = uid.or(c.run_id.take());
        c.phase = phase.or(c.phase);
        c.waiting_node = waiting_node;
    } else if status.child_runs.len() < MAX_CHILD_RUNS {
        status.child_runs.push(ChildRun {
            node_id: wait.node_id.clone(),
            name: wait.child_run_name.clone(),
            run_id: uid,
            phase,
            waiting_node,
        });
    }
}

/// A run whose sub-workflow nodes wait for children shows a child's wait as its own phase
/// (`protocol::run::waits::mirrored_phase`): set from the children's last-seen phases.
pub(super) fn mirror_children(status: &mut RunStatus) {
    let Some(own) = status.phase else { return };
    let children = status.child_waits.iter().map(|w| {
        status
            .child_runs
            .iter()
            .find(|c| c.name == w.child_run_name)
            .and_then(|c| c.phase)
    });
    let shown = mirrored_phase(own, !status.pending_interrupts.is_empty(), children);
    status.phase = Some(shown);
}

/// Most entries of `status.childRuns` (the CRD's bound).
const MAX_CHILD_RUNS: usize = 64;

/// An outcome for a child that could not be made.
fn not_made(wait: &ChildWait, code: &str, message: String) -> ChildResult {
    ChildResult {
        node_id: wait.node_id.clone(),
        child_run_id: String::new(),
        child_run_name: wait.child_run_name.clone(),
        child_status: RunPhase::Failed,
        variables: Map::new(),
        error: Some(RunError::new(code, &message)),
    }
}

/// Creates the child Run of `wait`; `Some(outcome)` when it cannot be made (its workflow is
/// not in the namespace).
async fn create_child(
    rr: &mut RunReconcile<'_>,
    stored: &RunSnapshot,
    wait: &ChildWait,
) -> Result<Option<ChildResult>, Error> {
    let known = rr
        .workflows()
        .await?
        .iter()
        .any(|w| w.spec.id == wait.child_workflow_id);
    if !known {
        return Ok(Some(not_made(
            wait,
            "unknown_child_workflow",
            format!(
                "node {}: no Workflow with id {} in namespace {}; create it, then run the parent again",
                wait.node_id, wait.child_workflow_id, rr.ns
            ),
        )));
    }
    let inputs = dispatched_inputs(rr, &wait.node_id).await?;
    let depth = stored.parent.as_ref().map_or(0, |p| p.depth) + 1;
    let child = child_run(rr.run, wait, inputs, depth);
    let created = rr.create_run(&child).await?;
    note_child(
        &mut rr.draft.status,
        wait,
        created.uid(),
        Some(RunPhase::Pending),
        None,
    );
    rr.draft.event(
        EventType::Normal,
        Reason::ChildRunCreated,
        format!(
            "node {}: created child Run {} (workflow {})",
            wait.node_id, wait.child_run_name, wait.child_workflow_id
        ),
    );
    Ok(None)
}

/// The child Run of `wait`: owned by the parent (deleted with it), labelled with the parent's
/// runId, annotated with the node and the nesting depth.
pub(super) fn child_run(
    parent: &Run,
    wait: &ChildWait,
    inputs: Map<String, Value>,
    depth: u32,
) -> Run {
    let mut labels = BTreeMap::from([(
        LABEL_PARENT_RUN.to_owned(),
        parent.uid().unwrap_or_default(),
    )]);
    if let Some(i) = parent.labels().get(LABEL_INSTANCE) {
        labels.insert(LABEL_INSTANCE.to_owned(), i.clone());
    }
    let annotations = BTreeMap::from([
        (ANNOTATION_PARENT_NODE.to_owned(), wait.node_id.clone()),
        (ANNOTATION_SUB_WORKFLOW_DEPTH.to_owned(), depth.to_string()),
    ]);
    Run {
        metadata: ObjectMeta {
            name: Some(wait.child_run_name.clone()),
            namespace: parent.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner_ref(parent)]),
            ..Default::default()
        },
        spec: RunSpec {
            workflow_ref: WorkflowRef {
                name: None,
                id: Some(wait.child_workflow_id.clone()),
            },
            inputs: Some(Value::Object(inputs)),
            configurable: None,
            timeout_seconds: None,
            answers: Vec::new(),
            cancel: None,
            pause: None,
            provider_mocks: BTreeMap::new(),
        },
        status: None,
    }
}

/// The child's inputs as the parent's `node.dispatched` recorded them (read back from the
/// parent's log); empty without an event stream.
async fn dispatched_inputs(
    rr: &RunReconcile<'_>,
    node_id: &str,
) -> Result<Map<String, Value>, Error> {
    let (Some(slot), Some(run_id)) = (&rr.ctx.jetstream, rr.run.uid()) else {
        return Ok(Map::new());
    };
    let events_err =
        |e: String| Error::Events(format!("reading the dispatch of node {node_id}: {e}"));
    let js = slot
        .get()
        .ok_or_else(|| events_err("the operator is not connected to NATS yet".into()))?;
    let stream = js
        .get_stream(&rr.ctx.config.worker.events_stream)
        .await
        .map_err(|e| events_err(e.to_string()))?;
    let subject = events_subject(&rr.ns, &run_id);
    let messages = openwop_nats::stream::read_subject(&stream, &subject, Duration::from_secs(5))
        .await
        .map_err(|e| events_err(e.to_string()))?;
    Ok(messages
        .iter()
        .filter_map(|m| serde_json::from_slice::<Value>(&m.payload).ok())
        .find(|e| {
            e.get("type").and_then(Value::as_str) == Some("node.dispatched")
                && e.get("nodeId").and_then(Value::as_str) == Some(node_id)
        })
        .and_then(|e| e["payload"]["inputs"].as_object().cloned())
        .unwrap_or_default())
}

/// The outcome of the ended `child`: its phase, error, and the variables the parent node's
/// `outputMapping` reads (the child's inputs over its variables' defaults, from its
/// snapshot).
async fn child_result(
    rr: &RunReconcile<'_>,
    stored: &RunSnapshot,
    wait: &ChildWait,
    child: &Run,
) -> Result<ChildResult, Error> {
    let st = child.status.clone().unwrap_or_default();
    let wanted = mapped_child_variables(&stored.workflow, &wait.node_id);
    let mut variables = Map::new();
    if !wanted.is_empty()
        && let Some(cm) = rr.snapshot_of(&wait.child_run_name).await?
        && let Ok(snap) = read_snapshot(&cm)
        && let Ok(graph) = openwop_protocol::graph::Graph::parse(&snap.workflow)
    {
        variables = Variables::new(&graph, &snap.inputs)
            .initial()
            .iter()
            .filter(|(k, _)| wanted.contains(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
    }
    Ok(ChildResult {
        node_id: wait.node_id.clone(),
        child_run_id: child.uid().unwrap_or_default(),
        child_run_name: wait.child_run_name.clone(),
        child_status: st.phase.unwrap_or(RunPhase::Failed),
        variables,
        error: st.error,
    })
}

/// The child variables node `node_id`'s `outputMapping` reads.
fn mapped_child_variables(workflow: &Value, node_id: &str) -> BTreeSet<String> {
    node_config(workflow, node_id)
        .and_then(|c| c.get("outputMapping"))
        .and_then(Value::as_object)
        .map(|m| {
            m.values()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The config of node `node_id` of a workflow definition.
fn node_config<'w>(workflow: &'w Value, node_id: &str) -> Option<&'w Value> {
    workflow
        .get("nodes")?
        .as_array()?
        .iter()
        .find(|n| n.get("id").and_then(Value::as_str) == Some(node_id))?
        .get("config")
}

/// Events for the ended children whose outcomes go into the parent's snapshot (the caller
/// writes it before starting the parent's worker, which completes or fails their nodes).
pub(super) fn note_outcomes(draft: &mut Draft, ended: &[ChildResult]) {
    for r in ended {
        let msg = match &r.error {
            Some(e) if r.child_run_id.is_empty() => {
                format!(
                    "node {}: no child run: {} ({})",
                    r.node_id, e.message, e.code
                )
            }
            _ => format!(
                "node {}: child Run {} ended {}; resuming",
                r.node_id, r.child_run_name, r.child_status
            ),
        };
        draft.event(EventType::Normal, Reason::ChildRunEnded, msg);
    }
}

/// Cancels every child Run of the run that has not ended (`propagateCancellation`, default
/// true, read from the node's config in the snapshot): `spec.cancel` with the reason
/// `parent-cancelled`, which the child's `run.cancelled` carries with `parentRunId`.
pub(super) async fn cancel_children(
    rr: &mut RunReconcile<'_>,
    stored: Option<&RunSnapshot>,
) -> Result<(), Error> {
    let mut names: Vec<(String, String)> = rr
        .status()
        .child_runs
        .iter()
        .filter(|c| !c.phase.is_some_and(RunPhase::is_terminal))
        .map(|c| (c.node_id.clone(), c.name.clone()))
        .collect();
    for w in &rr.status().child_waits {
        if !names.iter().any(|(_, n)| n == &w.child_run_name) {
            names.push((w.node_id.clone(), w.child_run_name.clone()));
        }
    }
    let mut cancelled = Vec::new();
    for (node, name) in names {
        let propagate = stored
            .and_then(|s| node_config(&s.workflow, &node))
            .and_then(|c| c.get("propagateCancellation"))
            .and_then(Value::as_bool)
            .unwrap_or(true);
        if !propagate {
            continue;
        }
        let Some(child) = rr.run_named(&name).await? else {
            continue;
        };
        let done = child
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .is_some_and(RunPhase::is_terminal);
        if !is_child_of(&child, rr.run) || done || child.spec.cancel == Some(true) {
            continue;
        }
        rr.cancel_run_named(&name, PARENT_CANCELLED).await?;
        cancelled.push(name);
    }
    if !cancelled.is_empty() {
        rr.draft.event(
            EventType::Normal,
            Reason::ChildRunsCancelled,
            format!("cancelled child Run(s) {}", cancelled.join(", ")),
        );
    }
    Ok(())
}

impl RunReconcile<'_> {
    /// Run `name` of the Run's namespace.
    pub(super) async fn run_named(&self, name: &str) -> Result<Option<Run>, Error> {
        Ok(self.runs_api().get_opt(name).await?)
    }

    /// The snapshot ConfigMap of Run `name` of the Run's namespace.
    async fn snapshot_of(
        &self,
        name: &str,
    ) -> Result<Option<k8s_openapi::api::core::v1::ConfigMap>, Error> {
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(self.ctx.client.clone(), &self.ns);
        Ok(cms.get_opt(&crate::names::snapshot_name(name)).await?)
    }

    /// Creates `run` (a child); one that already exists (a retried reconcile) is returned.
    async fn create_run(&self, run: &Run) -> Result<Run, Error> {
        let api = self.runs_api();
        let params = PostParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        match api.create(&params, run).await {
            Ok(r) => Ok(r),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let name = run.metadata.name.clone().unwrap_or_default();
                Ok(api.get(&name).await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Sets `spec.cancel` on Run `name`, with `reason` as its cancel-reason annotation.
    async fn cancel_run_named(&self, name: &str, reason: &str) -> Result<(), Error> {
        let patch = json!({
            "metadata": {"annotations": {ANNOTATION_CANCEL_REASON: reason}},
            "spec": {"cancel": true},
        });
        self.runs_api()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    fn runs_api(&self) -> Api<Run> {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }
}

/// The reconcile's requeue while the run waits without a pod: at the earliest timer, or on a
/// change (a child Run's change reaches the parent through its owner reference).
pub(super) fn waiting_requeue(
    status: &RunStatus,
    now: Timestamp,
    lead: Duration,
) -> Option<Duration> {
    match timers(status, now, lead) {
        Timers::Later(d) => Some(d),
        Timers::Due => Some(Duration::ZERO),
        Timers::None => None,
    }
}

/// Words for what a dormant run waits for (Events, `kubectl openwop describe`).
pub(super) fn describe(status: &RunStatus) -> String {
    let mut parts = Vec::new();
    if let Some(at) = &status.wake_at {
        let nodes: Vec<&str> = status.timers.iter().map(|t| t.node_id.as_str()).collect();
        parts.push(format!("delay node(s) {} until {at}", nodes.join(", ")));
    }
    for c in &status.child_waits {
        parts.push(format!(
            "node {} on child Run {} (workflow {})",
            c.node_id, c.child_run_name, c.child_workflow_id
        ));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use openwop_crds::ArmedTimer;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_750_000_000 + s).unwrap()
    }

    #[test]
    fn the_earliest_timer_decides_with_a_lead() {
        let mut st = RunStatus::default();
        assert_eq!(timers(&st, at(0), WAKE_LEAD), Timers::None);
        for (node, s) in [("late", 100), ("soon", 10)] {
            st.timers.push(ArmedTimer {
                node_id: node.into(),
                wake_at: at(s).to_string(),
            });
        }
        assert_eq!(
            timers(&st, at(0), WAKE_LEAD),
            Timers::Later(Duration::from_secs(9))
        );
        assert_eq!(timers(&st, at(9), WAKE_LEAD), Timers::Due);
        assert_eq!(timers(&st, at(50), Duration::ZERO), Timers::Due);
        assert_eq!(lead(500), Duration::from_millis(500));
        assert_eq!(lead(30_000), WAKE_LEAD);
    }

    #[test]
    fn the_child_run_is_owned_labelled_and_named_by_the_record() {
        let parent: Run = serde_json::from_value(json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p",
                         "labels": {LABEL_INSTANCE: "blue"}},
            "spec": {"workflowRef": {"name": "w"}}}))
        .unwrap();
        let wait = ChildWait {
            node_id: "call".into(),
            child_run_name: "p-c0123456789".into(),
            child_workflow_id: "child-wf".into(),
        };
        let inputs = json!({"topic": "cats"}).as_object().unwrap().clone();
        let c = child_run(&parent, &wait, inputs, 2);
        assert_eq!(c.name_any(), "p-c0123456789");
        assert_eq!(c.labels()[LABEL_PARENT_RUN], "uid-p");
        assert_eq!(c.labels()[LABEL_INSTANCE], "blue");
        assert_eq!(c.annotations()[ANNOTATION_PARENT_NODE], "call");
        assert_eq!(c.annotations()[ANNOTATION_SUB_WORKFLOW_DEPTH], "2");
        assert!(is_child_of(&c, &parent));
        assert_eq!(c.spec.workflow_ref.id.as_deref(), Some("child-wf"));
        assert_eq!(c.spec.inputs, Some(json!({"topic": "cats"})));
        let wf =
            json!({"nodes": [{"id": "call", "config": {"outputMapping": {"a": "x", "b": "y"}}}]});
        assert_eq!(
            mapped_child_variables(&wf, "call"),
            BTreeSet::from(["x".to_owned(), "y".to_owned()])
        );
        assert!(mapped_child_variables(&wf, "other").is_empty());
    }

    #[test]
    fn child_runs_are_noted_once_and_refreshed() {
        let mut st = RunStatus::default();
        let wait = ChildWait {
            node_id: "n".into(),
            child_run_name: "p-c1".into(),
            child_workflow_id: "w".into(),
        };
        note_child(
            &mut st,
            &wait,
            Some("u1".into()),
            Some(RunPhase::Pending),
            None,
        );
        let gate = Some("gate".to_owned());
        note_child(&mut st, &wait, None, Some(RunPhase::WaitingApproval), gate);
        assert_eq!(st.child_runs[0].waiting_node.as_deref(), Some("gate"));
        note_child(&mut st, &wait, None, Some(RunPhase::Completed), None);
        assert_eq!(
            st.child_runs,
            vec![ChildRun {
                node_id: "n".into(),
                name: "p-c1".into(),
                run_id: Some("u1".into()),
                phase: Some(RunPhase::Completed),
                waiting_node: None,
            }]
        );
    }

    #[test]
    fn a_parent_shows_the_wait_of_its_waiting_child() {
        let mut st = RunStatus {
            phase: Some(RunPhase::Running),
            ..Default::default()
        };
        let wait = ChildWait {
            node_id: "call".into(),
            child_run_name: "p-c1".into(),
            child_workflow_id: "w".into(),
        };
        st.child_waits.push(wait.clone());
        let gate = Some("gate".to_owned());
        note_child(&mut st, &wait, None, Some(RunPhase::WaitingApproval), gate);
        mirror_children(&mut st);
        assert_eq!(st.phase, Some(RunPhase::WaitingApproval));
        // Answered: the child runs again, so does the parent's phase.
        note_child(&mut st, &wait, None, Some(RunPhase::Running), None);
        mirror_children(&mut st);
        assert_eq!(st.phase, Some(RunPhase::Running));
        // A child no wait names any more (its outcome is in) is not mirrored.
        note_child(&mut st, &wait, None, Some(RunPhase::WaitingInput), None);
        st.child_waits.clear();
        mirror_children(&mut st);
        assert_eq!(st.phase, Some(RunPhase::Running));
    }
}
