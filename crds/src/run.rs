//! The `Run` custom resource: one execution of a Workflow.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use openwop_protocol::lenient::Lenient;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use openwop_protocol::structural::free_object;

/// Desired state of a Run: which workflow, with which inputs, answers to its pending
/// interrupts, and whether to cancel it.
// Several printer columns share `type_ = "string"`, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "openwop.dev",
    version = "v1alpha1",
    kind = "Run",
    namespaced,
    status = "RunStatus",
    derive = "PartialEq",
    shortname = "owr",
    shortname = "wfrun",
    category = "openwop",
    doc = "One execution of an OpenWOP Workflow, carried out by a worker pod.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Workflow", type_ = "string", json_path = ".status.workflow"),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.currentNode"),
    printcolumn(name = "Wakes", type_ = "string", json_path = ".status.wakeAt"),
    printcolumn(
        name = "Attempts",
        type_ = "integer",
        json_path = ".status.attempts",
        priority = 1
    ),
    printcolumn(
        name = "Events",
        type_ = "integer",
        json_path = ".status.events",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)")
        .message("cancel cannot be reverted once set")
        .reason(Reason::FieldValueForbidden)
)]
#[serde(rename_all = "camelCase")]
pub struct RunSpec {
    /// The workflow to run: exactly one of `name` (Kubernetes name of a Workflow in this
    /// namespace) or `id` (OpenWOP workflow id). Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("workflowRef is immutable; create a new Run"))]
    pub workflow_ref: WorkflowRef,
    /// Run inputs (free-form object).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "openwop_protocol::lenient::option"
    )]
    #[schemars(schema_with = "free_object")]
    pub inputs: Option<Value>,
    /// Run options, e.g. `escalationThreshold` (0..1, default 0.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configurable: Option<Configurable>,
    /// Maximum wall-clock duration of the run in seconds; the run fails with
    /// `run_timeout` when exceeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604800))]
    pub timeout_seconds: Option<i64>,
    /// Answers to interrupts (clarification questions, approvals). Append-only: adding an
    /// answer to the pending interrupt resumes the run with a new worker.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("oldSelf.all(o, self.exists(n, n.interruptId == o.interruptId))")
        .message("answers are append-only: an answer cannot be removed"))]
    pub answers: Vec<InterruptAnswer>,
    /// Set to true to cancel the run. Cannot be reverted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<bool>,
    /// Set to pause the run (`{reason?, drainPolicy: immediate|drain-current-node}`); remove
    /// (set to null) to resume it. A paused run holds no pod; resuming replays its log. The
    /// REST `:pause`/`:resume` and `kubectl openwop pause|resume` set exactly this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseRequest>,
    /// Test seam for CI: node id → scripted responses. Every provider call of a listed node
    /// goes to the built-in mock provider instead of the node's configured provider. Only
    /// honoured in namespaces the operator allows (`conformance.providerMockNamespaces`);
    /// elsewhere the Run fails with `ProviderMocksNotAllowed`. Frozen in the run snapshot
    /// when the run starts.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub provider_mocks: BTreeMap<String, ProviderMock>,
}

/// `spec.providerMocks` values: protocol's mock types (one definition for the CRD, the
/// snapshot and the mock provider).
pub use openwop_protocol::retry::mock::{
    MockProgram as MockTurn, MockResponse as MockStep, ProviderMock,
};

/// Reference to the Workflow of a Run.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("has(self.name) != has(self.id)")
        .message("set exactly one of workflowRef.name (Kubernetes name) or workflowRef.id (OpenWOP id)")
)]
pub struct WorkflowRef {
    /// Kubernetes name of the Workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,
    /// OpenWOP workflow id (`spec.id` of the Workflow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[a-z][a-z0-9_-]*$"))]
    pub id: Option<String>,
}

impl fmt::Display for WorkflowRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.name, &self.id) {
            (Some(n), _) => f.write_str(n),
            (None, Some(id)) => write!(f, "id:{id}"),
            (None, None) => f.write_str("<none>"),
        }
    }
}

/// Run options (`RunOptions.configurable`). Unknown keys are kept and passed to the worker.
// Deserialize by hand: `#[serde(flatten)]` buffers the unknown keys through serde's
// recursive content, which a too-deep value would fail (see `openwop_protocol::lenient`).
#[derive(KubeSchema, Serialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Configurable {
    /// Confidence below which an agent decision suspends the run for approval (default 0.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub escalation_threshold: Option<f64>,
    /// Other options, passed through.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl<'de> Deserialize<'de> for Configurable {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut extra: BTreeMap<String, Value> = BTreeMap::<String, Lenient>::deserialize(d)?
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        let escalation_threshold = match extra.remove("escalationThreshold") {
            None | Some(Value::Null) => None,
            Some(v) => Some(f64::deserialize(v).map_err(|e| {
                serde::de::Error::custom(format!("configurable.escalationThreshold: {e}"))
            })?),
        };
        Ok(Configurable {
            escalation_threshold,
            extra,
        })
    }
}

/// `spec.answers` items: protocol's answer (one type for the CRD, the REST API, the CLI and
/// the snapshot the worker reads), built with `InterruptAnswer::from_user_input`.
pub use openwop_protocol::run::snapshot::Answer as InterruptAnswer;

pub use openwop_protocol::run::status::RunPhase;

/// `spec.pause`: protocol's pause request (one type for the CRD, the REST API, the CLI, the
/// snapshot and the operator's message to the worker).
pub use openwop_protocol::events::DrainPolicy;
pub use openwop_protocol::run::pause::PauseRequest;

/// Observed state of a Run. Small by design: details live in the run's event stream.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RunStatus {
    /// OpenWOP run status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RunPhase>,
    /// `Ready` (workflow resolved and snapshotted) and `Succeeded` (terminal outcome).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// OpenWOP run id (the Run's uid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The Workflow this run executes (Kubernetes name once resolved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// The node executing or suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_node: Option<String>,
    /// Number of run events seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<u64>,
    /// Worker pods started for this run (first start, retries and resumes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Worker pods that died before finishing, since the last successful progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_attempts: Option<u32>,
    /// Sequence of the run's last event when the last counted worker failure happened: a
    /// failure after newer events made progress and starts the count again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at_sequence: Option<u64>,
    /// Sequence of the last run event seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sequence: Option<u64>,
    /// Every interrupt waiting for an answer (several branches of a run may wait at once),
    /// oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub pending_interrupts: Vec<PendingInterrupt>,
    /// Interrupts whose request events are still being recorded (a gate's suspension is
    /// recorded before its approval or questions): not answerable yet, and the run does not
    /// wait on them until they move to `pendingInterrupts`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub recording_interrupts: Vec<PendingInterrupt>,
    /// Nodes executing now (concurrent branches).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    #[schemars(length(max = 64))]
    pub running_nodes: BTreeSet<String>,
    /// When the run's next timer is due (RFC 3339): a `core.delay` waits without a pod and
    /// the operator starts a worker then. The phase stays `running`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<String>,
    /// Every delay node waiting for its wake time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub timers: Vec<ArmedTimer>,
    /// Every sub-workflow node waiting for its child run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub child_waits: Vec<ChildWait>,
    /// The child runs this run created (`core.subWorkflow`), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub child_runs: Vec<ChildRun>,
    /// Interrupts answered so far (ids), so an answer is consumed once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub answered_interrupts: Vec<String>,
    /// eventId of the event ending the run's log (`run.completed`, `run.failed` or
    /// `run.cancelled`, appended by the operator when it ended the run itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_event: Option<String>,
    /// Terminal error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// When the first worker started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the run reached a terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Earliest time of the next worker start after a crash (backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<Time>,
    /// Current worker pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_pod: Option<String>,
    /// The `metadata.generation` this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

use openwop_protocol::run::projection::Projection;
pub use openwop_protocol::run::status::{PendingInterrupt, PendingQuestion, RunError};
pub use openwop_protocol::run::waits::{ArmedTimer, ChildWait};

/// A child Run of this run (`core.subWorkflow`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChildRun {
    /// The parent's node that called it.
    pub node_id: String,
    /// The child Run's name (same namespace).
    pub name: String,
    /// The child's runId, once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The child's phase as last seen (terminal once its outcome reached this run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RunPhase>,
    /// While the child waits for an answer: its node holding the interrupt (answer it on the
    /// child Run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_node: Option<String>,
}

impl RunStatus {
    /// The event-derived part of this status, as protocol's projection folded it.
    pub fn projection(&self) -> Projection {
        Projection {
            phase: self.phase,
            current_node: self.current_node.clone(),
            events: self.events.unwrap_or(0),
            last_sequence: self.last_sequence,
            running_nodes: self.running_nodes.iter().cloned().collect(),
            pending_interrupts: self.pending_interrupts.clone(),
            recording_interrupts: self.recording_interrupts.clone(),
            error: self.error.clone(),
            timers: self.timers.clone(),
            children: self.child_waits.clone(),
        }
    }

    /// Writes `p` over the event-derived part of this status (the inverse of
    /// [`RunStatus::projection`]); every other field is kept. No events counted and none
    /// recorded before stays unset.
    pub fn set_projection(&mut self, p: Projection) {
        self.wake_at = p.wake_at().map(str::to_owned);
        self.phase = p.phase;
        self.current_node = p.current_node;
        if p.events > 0 || self.events.is_some() {
            self.events = Some(p.events);
        }
        self.last_sequence = p.last_sequence;
        self.running_nodes = p.running_nodes;
        self.pending_interrupts = p.pending_interrupts;
        self.recording_interrupts = p.recording_interrupts;
        self.error = p.error;
        self.timers = p.timers;
        self.child_waits = p.children;
    }

    /// Merges `newer` (the stored projection with new events folded in, or a worker's
    /// termination summary) into this status by protocol's one rule
    /// ([`openwop_protocol::run::projection::merge`]).
    pub fn merge_projection(&mut self, newer: &Projection) {
        let merged = openwop_protocol::run::projection::merge(&self.projection(), newer);
        self.set_projection(merged);
    }
}

impl RunSpec {
    /// The first free-form field too deep to decode (`openwop_protocol::lenient`): its
    /// path and why. Such a Run is failed before anything is built from it.
    pub fn undecodable(&self) -> Option<(String, &str)> {
        use openwop_protocol::lenient::flagged as field;
        field("spec.inputs".into(), self.inputs.as_ref())
            .or_else(|| {
                let extra = &self.configurable.as_ref()?.extra;
                extra
                    .iter()
                    .find_map(|(k, v)| field(format!("spec.configurable.{k}"), Some(v)))
            })
            .or_else(|| {
                self.answers
                    .iter()
                    .enumerate()
                    .find_map(|(i, a)| field(format!("spec.answers[{i}].value"), a.value.as_ref()))
            })
            .or_else(|| {
                self.provider_mocks.iter().find_map(|(node, m)| {
                    let programs = m
                        .responses
                        .iter()
                        .chain(m.turns.iter().flat_map(|t| t.iter().map(|p| &p.responses)));
                    programs.flatten().enumerate().find_map(|(i, r)| {
                        field(
                            format!("spec.providerMocks.{node} response {i} content"),
                            r.content.as_ref(),
                        )
                    })
                })
            })
    }
}
