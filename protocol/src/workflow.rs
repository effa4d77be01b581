//! The OpenWOP workflow definition (`schemas/workflow-definition.schema.json`)
//! as typed structs, read with [`WorkflowDefinition::from_value`]: the schema
//! is checked first (every problem with its JSON Pointer), then node ids must
//! be unique and edges must join existing nodes. Graph helpers for the worker:
//! node lookup, incoming / outgoing edges, and a deterministic topological
//! order that names the cycle when there is one.
//!
//! Optional members are `Option`s (an explicit `[]` or `null` survives a round
//! trip), and open objects (`config`, `metadata`, schemas) stay JSON.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Number, Value, json};

pub use crate::as_written::AsWritten;

use crate::events::LogLevel;
use crate::pipeline::{EnvelopeContract, RefusalMode};
use crate::schema::{self, Document, ValidationIssue};

/// A workflow definition. It is also the definition part of the Workflow custom resource's
/// spec (`openwop-crds`), hence the schema annotations: lengths, patterns and the Kubernetes
/// structural-schema keywords (`crate::structural`) shape the CRD, while a definition read
/// from JSON is checked against `schemas/workflow-definition.schema.json`. Members the CRD
/// keeps free-form are [`AsWritten`], read leniently (`crate::lenient`), so every object the
/// apiserver admits decodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowDefinition {
    /// OpenWOP workflow id: lowercase, starts with a letter, then letters, digits, `_` or `-`
    /// (1..128 characters). Runs may reference the workflow by this id.
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[a-z][a-z0-9_-]*$"))]
    pub id: String,
    /// Human-readable workflow name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub name: Option<String>,
    /// Free-text description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub description: Option<String>,
    /// Workflow version (semver-like).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub version: Option<String>,
    /// The nodes of the graph (1..200).
    #[schemars(length(min = 1, max = 200))]
    pub nodes: Vec<WorkflowNode>,
    /// Directed edges between nodes, with optional conditions and trigger rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000))]
    pub edges: Option<Vec<WorkflowEdge>>,
    /// OpenWOP triggers (kept as written; `manual` runs are started by creating a Run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::structural::free_object_list")]
    pub triggers: Option<Vec<AsWritten<WorkflowTrigger>>>,
    /// Workflow variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub variables: Option<Vec<WorkflowVariable>>,
    /// JSON Schema for the run's `configurable` keys.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::lenient::option_object"
    )]
    #[schemars(schema_with = "crate::structural::free_object")]
    pub configurable_schema: Option<Map<String, Value>>,
    /// JSON Schema the run's outputs must satisfy.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::lenient::option_object"
    )]
    #[schemars(schema_with = "crate::structural::free_object")]
    pub output_schema: Option<Map<String, Value>>,
    /// OpenWOP workflow metadata (free-form object).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::lenient::option_object"
    )]
    #[schemars(schema_with = "crate::structural::free_object")]
    pub metadata: Option<Map<String, Value>>,
    /// OpenWOP workflow settings (free-form object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::structural::free_object")]
    pub settings: Option<AsWritten<WorkflowSettings>>,
}

/// One node of the workflow graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowNode {
    /// Node id, unique within the workflow.
    #[schemars(length(min = 1, max = 253))]
    pub id: String,
    /// Node type, e.g. `core.ai.callPrompt`, `core.identity`, `core.conformance.mock-agent`.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[a-z][a-zA-Z0-9._-]*$"))]
    pub type_id: String,
    /// Display name (defaults to the node id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Node configuration; its shape is defined by the node type.
    // Checked against the node type's own config schema (not here).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::lenient::option_object"
    )]
    #[schemars(schema_with = "crate::structural::free_object")]
    pub config: Option<Map<String, Value>>,
    /// Input ports: port name → value source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "port_values_schema")]
    pub inputs: Option<BTreeMap<String, AsWritten<PortValue>>>,
    /// Agent pinned to this node (OpenWOP AgentRef).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::structural::free_object")]
    pub agent: Option<AsWritten<AgentRef>>,
    /// Envelope kinds this node accepts (universal kinds are always accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope_contract: Option<NodeEnvelopeContract>,
    /// Per-node settings (free-form object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::structural::free_object")]
    pub settings: Option<AsWritten<NodeSettings>>,
    /// A disabled node is skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    /// Author notes. Not in the Workflow CRD (v1alpha1 never had it: the apiserver prunes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub notes: Option<String>,
    /// Canvas position (defaults to the origin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
}

impl WorkflowNode {
    /// `(input port, source node id)` of each `connection` input.
    pub fn connections(&self) -> impl Iterator<Item = (&str, &str)> {
        self.inputs
            .iter()
            .flatten()
            .filter_map(|(port, v)| match v.typed()? {
                PortValue::Connection { node_id, .. } => Some((port.as_str(), node_id.as_str())),
                _ => None,
            })
    }
}

/// Where an input port gets its value; told apart by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum PortValue {
    /// A constant.
    Static { value: Value },
    /// Another node's output.
    #[serde(rename_all = "camelCase")]
    Connection {
        node_id: String,
        output_key: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        optional: Option<bool>,
    },
    /// A workflow variable.
    #[serde(rename_all = "camelCase")]
    Variable {
        variable_name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        optional: Option<bool>,
    },
    /// An expression over run state.
    Expression { expression: String },
}

/// The CRD schema of `inputs`: port name → input source. A source is one flat object whose
/// `type` names the variant, with CEL rules for each variant's required members — not the
/// schema of the [`PortValue`] enum (a `oneOf` of variants is not a structural schema, and
/// CEL rules are what the apiserver can enforce per variant). No rule for `static` needing
/// `value`: an untyped (any JSON) field is invisible to CEL (`has(self.value)` does not
/// compile on the apiserver); the Workflow controller's schema check reports it.
fn port_values_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let name = || json!({"type": "string", "minLength": 1, "maxLength": 253, "nullable": true});
    let mut node_id = name();
    node_id["description"] = json!("Source node (`connection`).");
    let mut output_key = name();
    output_key["description"] = json!("Output port of the source node (`connection`).");
    let mut variable_name = name();
    variable_name["description"] = json!("Variable name (`variable`).");
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": {
            "description": "Where an input port takes its value from.",
            "type": "object",
            "required": ["type"],
            "properties": {
                "type": {
                    "description": "Source kind.",
                    "type": "string",
                    "enum": ["static", "expression", "connection", "variable"]
                },
                "value": {
                    "description": "Constant value (`static`).",
                    "x-kubernetes-preserve-unknown-fields": true
                },
                "expression": {
                    "description": "Expression (`expression`).",
                    "type": "string", "minLength": 1, "maxLength": 4096, "nullable": true
                },
                "nodeId": node_id,
                "outputKey": output_key,
                "variableName": variable_name,
                "optional": {
                    "description": "A missing optional source yields no value instead of failing the node.",
                    "type": "boolean", "nullable": true
                }
            },
            "x-kubernetes-validations": [
                {"rule": "self.type != 'expression' || has(self.expression)",
                 "message": "an expression input needs expression"},
                {"rule": "self.type != 'connection' || (has(self.nodeId) && has(self.outputKey))",
                 "message": "a connection input needs nodeId and outputKey"},
                {"rule": "self.type != 'variable' || has(self.variableName)",
                 "message": "a variable input needs variableName"}
            ]
        }
    })
}

/// Agent pinned to the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRef {
    pub agent_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// The node's envelope contract (RFC 0021), with the payload schemas of the vendor kinds it
/// accepts. The Workflow CRD uses this type too (hence the schema annotations): the contract
/// is declared, validated and enforced as one definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeEnvelopeContract {
    /// Envelope kinds the node may emit besides the four universal kinds; a contract without
    /// `accepts` restricts nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub accepts: Option<Vec<String>>,
    /// What happens when the node emits a kind outside `accepts` (default `fail-node`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal_mode: Option<RefusalMode>,
    /// Payload JSON Schemas of vendor kinds (`vendor.<host>.<kind>`) this node accepts, by kind;
    /// checked against the Tier-1 structured-output subset per the operator's posture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_object")]
    pub schemas: Option<Map<String, Value>>,
}

/// Any JSON object, kept as written by the apiserver (a structural schema would prune it).
fn free_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

impl NodeEnvelopeContract {
    /// The contract as the pipeline's contract gate takes it (`fail-node` by default).
    pub fn to_pipeline(&self) -> EnvelopeContract {
        EnvelopeContract {
            accepts: self.accepts.clone().unwrap_or_default(),
            refusal_mode: self.refusal_mode.unwrap_or_default(),
        }
    }
}

/// Per-node settings; members beyond `timeout` / `maxRetries` are kept as is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSettings {
    /// Milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u64>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// Canvas position of a node (kept as the JSON numbers given, so a round trip is exact).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Position {
    /// Horizontal coordinate.
    #[schemars(with = "f64")]
    pub x: Number,
    /// Vertical coordinate.
    #[schemars(with = "f64")]
    pub y: Number,
}

/// A directed edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowEdge {
    /// Edge id, unique within the workflow.
    #[schemars(length(min = 1, max = 253))]
    pub id: String,
    /// Source node id.
    #[schemars(length(min = 1, max = 253))]
    pub source_node_id: String,
    /// Source output port (default `output`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_output: Option<String>,
    /// Target node id.
    #[schemars(length(min = 1, max = 253))]
    pub target_node_id: String,
    /// Target input port (default `input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_input: Option<String>,
    /// Condition under which the edge contributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<EdgeCondition>,
    /// Label for display.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// When the target fires given its upstream outcomes (default `all_success`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_rule: Option<TriggerRule>,
}

impl WorkflowEdge {
    /// The trigger rule, `all_success` when absent.
    pub fn trigger_rule(&self) -> TriggerRule {
        self.trigger_rule.unwrap_or_default()
    }
    /// The source output port, `output` when absent.
    pub fn source_output(&self) -> &str {
        self.source_output.as_deref().unwrap_or("output")
    }
    /// The target input port, `input` when absent.
    pub fn target_input(&self) -> &str {
        self.target_input.as_deref().unwrap_or("input")
    }
}

/// When the target may run, given its incoming edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TriggerRule {
    #[default]
    AllSuccess,
    AnySuccess,
    AllComplete,
    NoneFailed,
    AnyFailed,
}

impl TriggerRule {
    /// Rules under which a failed source does not fail the run.
    pub fn handles_failure(self) -> bool {
        matches!(self, Self::AllComplete | Self::AnyFailed)
    }
}

/// Condition under which an edge is taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.type == 'expression' ? has(self.expression) : has(self.left)",
    "message": "an expression condition needs expression; every other operator needs left"
}]))]
pub struct EdgeCondition {
    /// Operator.
    #[serde(rename = "type")]
    pub kind: ConditionKind,
    /// Left operand path, e.g. `output.approved`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left: Option<String>,
    /// Right operand (any JSON value); ignored by `truthy` / `falsy`.
    // Any JSON value, `null` included (kept apart from absent).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "crate::structural::any_json")]
    pub right: Option<Value>,
    /// Expression for `type: expression`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
}

/// Edge condition operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ConditionKind {
    Expression,
    Equals,
    NotEquals,
    Contains,
    Regex,
    Truthy,
    Falsy,
}

/// What starts a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowTrigger {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: TriggerKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TriggerKind {
    Manual,
    Schedule,
    Webhook,
    Event,
    Artifact,
    Canvas,
    Envelope,
    Command,
    ChatMessage,
    ChannelWrite,
}

/// A workflow variable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowVariable {
    /// Variable name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Value type.
    #[serde(rename = "type")]
    pub kind: VariableKind,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether a run must supply it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    /// Default value.
    // Any JSON value, `null` included (kept apart from absent).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "crate::structural::any_json")]
    pub default_value: Option<Value>,
    /// Masked in persisted events and projections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitive: Option<bool>,
}

/// Variable value types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VariableKind {
    String,
    Number,
    Boolean,
    Object,
    Array,
}

/// Run-wide settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowSettings {
    /// Longest run duration in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<LogLevel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_loopback_iterations: Option<u64>,
    /// Most nodes of one run executing at once (else the host's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u64>,
}

/// A present member is `Some`, even when it is `null`. Read leniently: a value nested too
/// deep to decode becomes [`crate::lenient`]'s marker instead of failing the definition
/// (and, in a Workflow object, the operator's whole list of Workflows).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    crate::lenient::Lenient::deserialize(d).map(|l| Some(l.0))
}

/// Why a definition was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkflowError {
    /// The definition does not match the workflow-definition schema.
    #[error("{}", describe_issues(.issues))]
    Schema { issues: Vec<ValidationIssue> },
    /// Two nodes share an id.
    #[error(
        "{pointer}: node id '{id}' is already used by /nodes/{first}; give every node a unique id"
    )]
    DuplicateNodeId {
        id: String,
        first: usize,
        pointer: String,
    },
    /// A `connection` input names a node that does not exist.
    #[error(
        "{pointer}: input connects to node '{node_id}', which is not in nodes; fix the id or add the node"
    )]
    UnknownInputNode { node_id: String, pointer: String },
    /// An edge names a node that does not exist.
    #[error(
        "{pointer}: edge '{edge_id}' refers to node '{node_id}', which is not in nodes; fix the id or add the node"
    )]
    UnknownNode {
        edge_id: String,
        node_id: String,
        pointer: String,
    },
    /// Edges and `connection` inputs form a cycle, so there is no topological order.
    #[error(
        "the nodes depend on each other in a cycle (through edges or connection inputs): {}; remove or redirect one of these dependencies",
        .cycle.join(" → ")
    )]
    Cycle {
        /// Node ids along the cycle, the first repeated at the end.
        cycle: Vec<String>,
    },
}

fn describe_issues(issues: &[ValidationIssue]) -> String {
    let mut out = String::from("the workflow definition does not match the schema: ");
    for (i, issue) in issues.iter().enumerate() {
        if i > 0 {
            out.push_str("; ");
        }
        out.push_str(&issue.to_string());
    }
    out
}

/// A node id as quoted in an error: bounded, control characters dropped.
fn quote(id: &str) -> String {
    const MAX: usize = 128;
    let mut out: String = id.chars().filter(|c| !c.is_control()).take(MAX).collect();
    if id.chars().count() > MAX {
        out.push('…');
    }
    out
}

impl WorkflowDefinition {
    /// Reads a definition: schema first, then unique node ids, and edges and `connection`
    /// inputs that name known nodes.
    pub fn from_value(value: Value) -> Result<Self, WorkflowError> {
        schema::validate(Document::WorkflowDefinition, &value)
            .map_err(|issues| WorkflowError::Schema { issues })?;
        Self::from_checked_value(value)
    }

    /// [`Self::from_value`] of a document known to pass the workflow-definition schema of
    /// these schemas ([`crate::schema::SCHEMAS_DIGEST`]): the types and the graph only.
    pub(crate) fn from_checked_value(value: Value) -> Result<Self, WorkflowError> {
        // The schema is closed wherever the types are, so this only fails if the
        // two disagree; report it like a schema problem rather than panic.
        let def: WorkflowDefinition =
            serde_json::from_value(value).map_err(|_| WorkflowError::Schema {
                issues: vec![ValidationIssue {
                    instance_path: String::new(),
                    keyword: "type".to_owned(),
                    message:
                        "passes the schema but does not fit the workflow types; report this defect"
                            .to_owned(),
                }],
            })?;
        def.check_graph()?;
        Ok(def)
    }

    fn check_graph(&self) -> Result<(), WorkflowError> {
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(&first) = seen.get(n.id.as_str()) {
                return Err(WorkflowError::DuplicateNodeId {
                    id: quote(&n.id),
                    first,
                    pointer: format!("/nodes/{i}/id"),
                });
            }
            seen.insert(&n.id, i);
        }
        for (i, e) in self.edges().iter().enumerate() {
            for (field, node) in [
                ("sourceNodeId", &e.source_node_id),
                ("targetNodeId", &e.target_node_id),
            ] {
                if !seen.contains_key(node.as_str()) {
                    return Err(WorkflowError::UnknownNode {
                        edge_id: quote(&e.id),
                        node_id: quote(node),
                        pointer: format!("/edges/{i}/{field}"),
                    });
                }
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            for (port, source) in n.connections() {
                if !seen.contains_key(source) {
                    return Err(WorkflowError::UnknownInputNode {
                        node_id: quote(source),
                        pointer: format!("/nodes/{i}/inputs/{port}/nodeId"),
                    });
                }
            }
        }
        Ok(())
    }

    /// The definition with the members a Workflow object may leave out filled with neutral
    /// defaults, as the snapshot, the REST API and the checks take it: a node's `name` is
    /// its id, `position` the origin, `config` and `inputs` empty; `edges`, `triggers` and
    /// `variables` empty lists; `metadata` and `settings` empty objects.
    pub fn filled(&self) -> WorkflowDefinition {
        let origin = || Number::from_f64(0.0).unwrap_or_else(|| Number::from(0));
        let nodes = self
            .nodes
            .iter()
            .map(|n| WorkflowNode {
                name: Some(n.name.clone().unwrap_or_else(|| n.id.clone())),
                position: Some(n.position.clone().unwrap_or_else(|| Position {
                    x: origin(),
                    y: origin(),
                })),
                config: Some(n.config.clone().unwrap_or_default()),
                inputs: Some(n.inputs.clone().unwrap_or_default()),
                ..n.clone()
            })
            .collect();
        WorkflowDefinition {
            nodes,
            edges: Some(self.edges.clone().unwrap_or_default()),
            triggers: Some(self.triggers.clone().unwrap_or_default()),
            variables: Some(self.variables.clone().unwrap_or_default()),
            metadata: Some(self.metadata.clone().unwrap_or_default()),
            settings: Some(
                self.settings
                    .clone()
                    .unwrap_or_else(|| AsWritten::from_raw(Value::Object(Map::new()))),
            ),
            ..self.clone()
        }
    }

    /// The definition as JSON.
    pub fn to_value(&self) -> Value {
        // Strings, numbers, maps with string keys and JSON values: cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The edges (empty when absent).
    pub fn edges(&self) -> &[WorkflowEdge] {
        self.edges.as_deref().unwrap_or_default()
    }

    /// The node with this id.
    pub fn node(&self, id: &str) -> Option<&WorkflowNode> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Edges ending at `node_id`, in definition order.
    pub fn incoming_edges<'a>(
        &'a self,
        node_id: &'a str,
    ) -> impl Iterator<Item = &'a WorkflowEdge> {
        self.edges()
            .iter()
            .filter(move |e| e.target_node_id == node_id)
    }

    /// Edges starting at `node_id`, in definition order.
    pub fn outgoing_edges<'a>(
        &'a self,
        node_id: &'a str,
    ) -> impl Iterator<Item = &'a WorkflowEdge> {
        self.edges()
            .iter()
            .filter(move |e| e.source_node_id == node_id)
    }

    /// Nodes without incoming edges, in definition order.
    pub fn entry_nodes(&self) -> impl Iterator<Item = &WorkflowNode> {
        self.nodes
            .iter()
            .filter(|n| self.incoming_edges(&n.id).next().is_none())
    }

    /// Every node after all of its predecessors: the sources of its incoming
    /// edges and the nodes its `connection` inputs read. Deterministic: among
    /// nodes ready at the same time, definition order wins. A cycle is an error
    /// naming its nodes in dependency order.
    pub fn topological_order(&self) -> Result<Vec<&WorkflowNode>, WorkflowError> {
        let index: HashMap<&str, usize> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id.as_str(), i))
            .collect();
        let n = self.nodes.len();
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
        // Edges or connections to unknown nodes are refused by `from_value`; a
        // hand-built definition with one simply has that dependency ignored here.
        let dependencies = self
            .edges()
            .iter()
            .map(|e| (e.source_node_id.as_str(), e.target_node_id.as_str()))
            .chain(self.nodes.iter().flat_map(|n| {
                n.connections()
                    .map(move |(_, source)| (source, n.id.as_str()))
            }));
        for (source, target) in dependencies {
            if let (Some(&s), Some(&t)) = (index.get(source), index.get(target)) {
                preds[t].push(s);
                succs[s].push(t);
            }
        }
        let mut remaining: Vec<usize> = preds.iter().map(Vec::len).collect();
        let mut ready: BTreeSet<usize> = (0..n).filter(|&i| remaining[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &t in &succs[i] {
                remaining[t] -= 1;
                if remaining[t] == 0 {
                    ready.insert(t);
                }
            }
        }
        if order.len() == n {
            return Ok(order.into_iter().map(|i| &self.nodes[i]).collect());
        }
        Err(WorkflowError::Cycle {
            cycle: self.find_cycle(&remaining, &preds),
        })
    }

    /// A cycle among the nodes Kahn's walk could not place: each has a
    /// predecessor that is also unplaced, so walking predecessors must repeat.
    fn find_cycle(&self, remaining: &[usize], preds: &[Vec<usize>]) -> Vec<String> {
        let stuck = |i: usize| remaining[i] > 0;
        let Some(start) = (0..remaining.len()).find(|&i| stuck(i)) else {
            return Vec::new();
        };
        let mut path = vec![start];
        let mut pos: HashMap<usize, usize> = HashMap::from([(start, 0)]);
        let mut cur = start;
        loop {
            let Some(&p) = preds[cur].iter().find(|&&p| stuck(p)) else {
                return Vec::new();
            };
            if let Some(&at) = pos.get(&p) {
                // path[at..] walked backwards along edges: reverse for edge order.
                let mut cycle: Vec<String> = path[at..]
                    .iter()
                    .rev()
                    .map(|&i| quote(&self.nodes[i].id))
                    .collect();
                cycle.push(cycle[0].clone());
                return cycle;
            }
            pos.insert(p, path.len());
            path.push(p);
            cur = p;
        }
    }
}
