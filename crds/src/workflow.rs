//! The `Workflow` custom resource: an OpenWOP workflow definition plus Kubernetes-side settings.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::schema::{any_json, free_object, free_object_list};

/// Desired state of a Workflow: the OpenWOP workflow definition (`id`, `name`, `version`,
/// `nodes`, `edges`, `variables`, `settings`, ...) plus Kubernetes-side settings (`providers`,
/// `worker`). The OpenWOP `id` is independent of `metadata.name`: it may
/// contain `_` and be up to 128 characters, which a Kubernetes name cannot.
// Several printer columns share `type_ = "string"`, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "openwop.dev",
    version = "v1alpha1",
    kind = "Workflow",
    namespaced,
    status = "WorkflowStatus",
    derive = "PartialEq",
    shortname = "wf",
    shortname = "owf",
    category = "openwop",
    doc = "An OpenWOP workflow definition. The operator validates it and reports Ready or Invalid.",
    printcolumn(
        name = "ID",
        type_ = "string",
        json_path = ".spec.id",
        description = "OpenWOP workflow id"
    ),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowSpec {
    /// OpenWOP workflow id: lowercase, starts with a letter, then letters, digits, `_` or `-`
    /// (1..128 characters). Runs may reference the workflow by this id.
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[a-z][a-z0-9_-]*$"))]
    pub id: String,
    /// Human-readable workflow name.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Workflow version (semver-like).
    #[schemars(length(min = 1, max = 64))]
    pub version: String,
    /// Free-text description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub description: Option<String>,
    /// The nodes of the graph (1..200).
    #[schemars(length(min = 1, max = 200))]
    pub nodes: Vec<WorkflowNode>,
    /// Directed edges between nodes, with optional conditions and trigger rules.
    #[serde(default)]
    #[schemars(length(max = 1000))]
    pub edges: Vec<WorkflowEdge>,
    /// OpenWOP triggers (kept as written; `manual` runs are started by creating a Run).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "openwop_protocol::lenient::option_vec"
    )]
    #[schemars(schema_with = "free_object_list")]
    pub triggers: Option<Vec<Value>>,
    /// Workflow variables.
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub variables: Vec<WorkflowVariable>,
    /// OpenWOP workflow metadata (free-form object).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "openwop_protocol::lenient::option"
    )]
    #[schemars(schema_with = "free_object")]
    pub metadata: Option<Value>,
    /// OpenWOP workflow settings (free-form object).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "openwop_protocol::lenient::option"
    )]
    #[schemars(schema_with = "free_object")]
    pub settings: Option<Value>,
    /// JSON Schema for the run's `configurable` keys.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "openwop_protocol::lenient::option"
    )]
    #[schemars(schema_with = "free_object")]
    pub configurable_schema: Option<Value>,
    /// JSON Schema the run's outputs must satisfy.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "openwop_protocol::lenient::option"
    )]
    #[schemars(schema_with = "free_object")]
    pub output_schema: Option<Value>,
    /// LLM provider credentials, each a reference to a key of a Secret in the Workflow's
    /// namespace. Never inline keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub providers: Vec<ProviderCredential>,
    /// Overrides for the worker pods of this workflow's runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerOverrides>,
}

/// One node of the workflow graph.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
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
    /// Canvas position (defaults to the origin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
    /// Node configuration; its shape is defined by the node type.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "openwop_protocol::lenient::option"
    )]
    #[schemars(schema_with = "free_object")]
    pub config: Option<Value>,
    /// Input ports: port name → value source.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, PortValue>,
    /// Agent pinned to this node (OpenWOP AgentRef).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "openwop_protocol::lenient::option"
    )]
    #[schemars(schema_with = "free_object")]
    pub agent: Option<Value>,
    /// Envelope kinds this node accepts (universal kinds are always accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope_contract: Option<EnvelopeContract>,
    /// A disabled node is skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    /// Per-node settings (free-form object).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "openwop_protocol::lenient::option"
    )]
    #[schemars(schema_with = "free_object")]
    pub settings: Option<Value>,
}

/// Canvas position of a node.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Position {
    /// Horizontal coordinate.
    pub x: f64,
    /// Vertical coordinate.
    pub y: f64,
}

/// Where an input port takes its value from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
// No CEL rule for `static` needing `value`: an untyped (any JSON) field is invisible to CEL
// (`has(self.value)` does not compile on the apiserver); the Workflow controller reports it.
#[x_kube(
    validation = Rule::new("self.type != 'expression' || has(self.expression)").message("an expression input needs expression"),
    validation = Rule::new("self.type != 'connection' || (has(self.nodeId) && has(self.outputKey))").message("a connection input needs nodeId and outputKey"),
    validation = Rule::new("self.type != 'variable' || has(self.variableName)").message("a variable input needs variableName")
)]
pub struct PortValue {
    /// Source kind.
    #[serde(rename = "type")]
    pub kind: PortValueKind,
    /// Constant value (`static`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "openwop_protocol::lenient::option"
    )]
    #[schemars(schema_with = "any_json")]
    pub value: Option<Value>,
    /// Expression (`expression`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub expression: Option<String>,
    /// Source node (`connection`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub node_id: Option<String>,
    /// Output port of the source node (`connection`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub output_key: Option<String>,
    /// Variable name (`variable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub variable_name: Option<String>,
    /// A missing optional source yields no value instead of failing the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// Kind of an input port source.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PortValueKind {
    Static,
    Expression,
    Connection,
    Variable,
}

pub use openwop_protocol::pipeline::RefusalMode;
/// The per-node envelope permission set (RFC 0021 Envelope Contract): protocol's type, so
/// the CRD admits exactly what the operator validates and the worker enforces.
pub use openwop_protocol::workflow::NodeEnvelopeContract as EnvelopeContract;

/// A directed edge.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
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

/// Edge condition.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.type == 'expression' ? has(self.expression) : has(self.left)")
        .message("an expression condition needs expression; every other operator needs left")
)]
pub struct EdgeCondition {
    /// Operator.
    #[serde(rename = "type")]
    pub kind: ConditionOperator,
    /// Left operand path, e.g. `output.approved`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left: Option<String>,
    /// Right operand (any JSON value); ignored by `truthy` / `falsy`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "openwop_protocol::lenient::option"
    )]
    #[schemars(schema_with = "any_json")]
    pub right: Option<Value>,
    /// Expression for `type: expression`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
}

/// Edge condition operators.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ConditionOperator {
    Expression,
    Equals,
    NotEquals,
    Contains,
    Regex,
    Truthy,
    Falsy,
}

/// Trigger rules of an edge's target.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TriggerRule {
    AllSuccess,
    AnySuccess,
    AllComplete,
    NoneFailed,
    AnyFailed,
}

/// A workflow variable.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowVariable {
    /// Variable name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Value type.
    #[serde(rename = "type")]
    pub kind: VariableType,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether a run must supply it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    /// Default value.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "openwop_protocol::lenient::option"
    )]
    #[schemars(schema_with = "any_json")]
    pub default_value: Option<Value>,
    /// Masked in persisted events and projections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitive: Option<bool>,
}

/// Variable value types.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum VariableType {
    String,
    Number,
    Boolean,
    Object,
    Array,
}

/// An LLM provider credential: a key of a Secret, injected into the worker pod.
#[derive(KubeSchema, Serialize, Deserialize, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.mountAs != 'env' || has(self.envName)").message("mountAs env needs envName")
)]
pub struct ProviderCredential {
    /// Provider name as configured in the operator, e.g. `openai`, `anthropic`, `gemini`.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    )]
    pub provider: String,
    /// The Secret key holding the credential.
    pub secret_ref: SecretKeyRef,
    /// How the worker receives it: as a file under `/var/run/openwop/providers/<provider>/`
    /// (default) or as an environment variable.
    #[serde(default)]
    pub mount_as: CredentialMount,
    /// Environment variable name when `mountAs: env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Z_][A-Z0-9_]*$"))]
    pub env_name: Option<String>,
}

// Holds only references, but keep Debug explicit so a later field can never leak a value.
impl std::fmt::Debug for ProviderCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderCredential")
            .field("provider", &self.provider)
            .field("secret_ref", &self.secret_ref)
            .field("mount_as", &self.mount_as)
            .field("env_name", &self.env_name)
            .finish()
    }
}

/// Reference to one key of a Secret in the same namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key within the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// How a provider credential reaches the worker.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum CredentialMount {
    #[default]
    File,
    Env,
}

/// Worker pod overrides for this workflow's runs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct WorkerOverrides {
    /// Container resources (replace the operator defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Node selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Tolerations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Service account for the worker (default: the operator's configured worker account).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: Option<String>,
}

/// Observed state of a Workflow.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowStatus {
    /// The `metadata.generation` the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (True when the definition is valid; reason `Valid` or `Invalid`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Number of nodes in the validated definition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_count: Option<u32>,
}

impl WorkflowSpec {
    /// The OpenWOP workflow definition document (without the Kubernetes-side settings),
    /// with the fields the wire schema requires filled with their neutral defaults.
    pub fn definition(&self) -> Value {
        let mut doc = Map::new();
        doc.insert("id".into(), Value::String(self.id.clone()));
        doc.insert("name".into(), Value::String(self.name.clone()));
        doc.insert("version".into(), Value::String(self.version.clone()));
        if let Some(d) = &self.description {
            doc.insert("description".into(), Value::String(d.clone()));
        }
        let nodes = self.nodes.iter().map(WorkflowNode::definition).collect();
        doc.insert("nodes".into(), Value::Array(nodes));
        doc.insert("edges".into(), to_value(&self.edges));
        doc.insert(
            "triggers".into(),
            Value::Array(self.triggers.clone().unwrap_or_default()),
        );
        doc.insert("variables".into(), to_value(&self.variables));
        doc.insert("metadata".into(), object_or_empty(&self.metadata));
        doc.insert("settings".into(), object_or_empty(&self.settings));
        if let Some(s) = &self.configurable_schema {
            doc.insert("configurableSchema".into(), s.clone());
        }
        if let Some(s) = &self.output_schema {
            doc.insert("outputSchema".into(), s.clone());
        }
        Value::Object(doc)
    }
}

impl WorkflowNode {
    /// The node as an OpenWOP definition node (`name` defaults to the id, `position` to 0,0).
    pub fn definition(&self) -> Value {
        let mut n = Map::new();
        n.insert("id".into(), Value::String(self.id.clone()));
        n.insert("typeId".into(), Value::String(self.type_id.clone()));
        n.insert(
            "name".into(),
            Value::String(self.name.clone().unwrap_or_else(|| self.id.clone())),
        );
        let (x, y) = self.position.as_ref().map_or((0.0, 0.0), |p| (p.x, p.y));
        n.insert("position".into(), serde_json::json!({ "x": x, "y": y }));
        n.insert("config".into(), object_or_empty(&self.config));
        n.insert("inputs".into(), to_value(&self.inputs));
        if let Some(a) = &self.agent {
            n.insert("agent".into(), a.clone());
        }
        if let Some(c) = &self.envelope_contract {
            n.insert("envelopeContract".into(), to_value(c));
        }
        if let Some(d) = self.disabled {
            n.insert("disabled".into(), Value::Bool(d));
        }
        if let Some(s) = &self.settings {
            n.insert("settings".into(), s.clone());
        }
        Value::Object(n)
    }
}

fn object_or_empty(v: &Option<Value>) -> Value {
    v.clone().unwrap_or_else(|| Value::Object(Map::new()))
}

// These types hold only strings, numbers, maps and JSON values, so serialization cannot fail.
fn to_value<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

impl WorkflowSpec {
    /// The first free-form field too deep to decode (`openwop_protocol::lenient`): its
    /// path and why. Such a Workflow is not Ready and no run is snapshotted from it.
    pub fn undecodable(&self) -> Option<(String, &str)> {
        use openwop_protocol::lenient::flagged as field;
        let top = [
            ("metadata", &self.metadata),
            ("settings", &self.settings),
            ("configurableSchema", &self.configurable_schema),
            ("outputSchema", &self.output_schema),
        ];
        top.into_iter()
            .find_map(|(k, v)| field(format!("spec.{k}"), v.as_ref()))
            .or_else(|| {
                self.triggers
                    .iter()
                    .flatten()
                    .enumerate()
                    .find_map(|(i, t)| field(format!("spec.triggers[{i}]"), Some(t)))
            })
            .or_else(|| {
                self.nodes.iter().find_map(|n| {
                    let at = |k: &str| format!("spec.nodes[{}].{k}", n.id);
                    field(at("config"), n.config.as_ref())
                        .or_else(|| field(at("agent"), n.agent.as_ref()))
                        .or_else(|| field(at("settings"), n.settings.as_ref()))
                        .or_else(|| {
                            n.inputs.iter().find_map(|(p, v)| {
                                field(at(&format!("inputs.{p}.value")), v.value.as_ref())
                            })
                        })
                })
            })
            .or_else(|| {
                self.edges.iter().find_map(|e| {
                    let c = e.condition.as_ref()?;
                    field(
                        format!("spec.edges[{}].condition.right", e.id),
                        c.right.as_ref(),
                    )
                })
            })
            .or_else(|| {
                self.variables.iter().find_map(|v| {
                    field(
                        format!("spec.variables[{}].defaultValue", v.name),
                        v.default_value.as_ref(),
                    )
                })
            })
    }
}
