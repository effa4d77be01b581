//! The `Workflow` custom resource: an OpenWOP workflow definition plus Kubernetes-side settings.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// Desired state of a Workflow: the OpenWOP workflow definition (`id`, `name`, `version`,
/// `nodes`, `edges`, `variables`, `settings`, ...) plus Kubernetes-side settings (`providers`,
/// `worker`). The OpenWOP `id` is independent of `metadata.name`: it may
/// contain `_` and be up to 128 characters, which a Kubernetes name cannot.
// Several printer columns share `type_ = "string"`, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, JsonSchema, Serialize, Clone, Debug, PartialEq)]
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
#[schemars(transform = crd_spec_schema)]
pub struct WorkflowSpec {
    /// The OpenWOP workflow definition: protocol's type, so what the CRD admits, what the
    /// operator checks and what the worker runs are one definition. Its members are the
    /// spec's own (`spec.id`, `spec.nodes`, ...); read them through `Deref`.
    #[serde(flatten)]
    pub definition: WorkflowDefinition,
    /// LLM provider credentials, each a reference to a key of a Secret in the Workflow's
    /// namespace. Never inline keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub providers: Vec<ProviderCredential>,
    /// Secrets the HTTP node sends in request headers (`{{secrets.<name>}}` in a header
    /// value), each a key of a Secret in the Workflow's namespace, mounted read-only into the
    /// worker pod and redacted from events, logs and spans. Never inline values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub secrets: Vec<WorkflowSecret>,
    /// Overrides for the worker pods of this workflow's runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerOverrides>,
}

impl std::ops::Deref for WorkflowSpec {
    type Target = WorkflowDefinition;
    fn deref(&self) -> &WorkflowDefinition {
        &self.definition
    }
}

impl std::ops::DerefMut for WorkflowSpec {
    fn deref_mut(&mut self) -> &mut WorkflowDefinition {
        &mut self.definition
    }
}

// By hand rather than `#[serde(flatten)]`: flatten buffers the members through serde's
// recursive content, where a value nested too deep fails the whole Workflow (and the
// operator's list of them) before the lenient fields can read it. Raw members are skipped
// without recursion and the definition is then read from them by serde_json itself.
impl<'de> Deserialize<'de> for WorkflowSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let members = BTreeMap::<String, Box<RawValue>>::deserialize(d)?;
        let mut definition = String::from("{");
        let (mut providers, mut secrets, mut worker) = (Vec::new(), Vec::new(), None);
        for (key, raw) in &members {
            match key.as_str() {
                "providers" => {
                    providers = serde_json::from_str(raw.get())
                        .map_err(|e| D::Error::custom(format!("spec.providers: {e}")))?;
                }
                "secrets" => {
                    secrets = serde_json::from_str(raw.get())
                        .map_err(|e| D::Error::custom(format!("spec.secrets: {e}")))?;
                }
                "worker" => {
                    worker = serde_json::from_str(raw.get())
                        .map_err(|e| D::Error::custom(format!("spec.worker: {e}")))?;
                }
                _ => {
                    if definition.len() > 1 {
                        definition.push(',');
                    }
                    // A string serializes infallibly.
                    definition.push_str(&serde_json::to_string(key).unwrap_or_default());
                    definition.push(':');
                    definition.push_str(raw.get());
                }
            }
        }
        definition.push('}');
        let definition = serde_json::from_str(&definition).map_err(D::Error::custom)?;
        Ok(WorkflowSpec {
            definition,
            providers,
            secrets,
            worker,
        })
    }
}

/// The spec's schema as v1alpha1 has it where the Kubernetes object is stricter than (or
/// defaults differently from) the OpenWOP definition: `name` and `version` are required,
/// and absent `edges` / `variables` are stored as empty lists.
fn crd_spec_schema(schema: &mut Schema) {
    let not_null = |p: &mut Value| {
        if let Some(o) = p.as_object_mut() {
            o.remove("nullable");
            if let Some(Value::Array(types)) = o.get("type") {
                let t: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
                if let [one] = t.as_slice() {
                    o.insert("type".into(), one.clone());
                }
            }
        }
    };
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for k in ["name", "version", "edges", "variables"] {
            if let Some(p) = props.get_mut(k) {
                not_null(p);
            }
        }
        for k in ["edges", "variables"] {
            if let Some(Value::Object(p)) = props.get_mut(k) {
                p.insert("default".into(), Value::Array(vec![]));
            }
        }
    }
    if let Some(Value::Array(required)) = schema.get_mut("required") {
        for k in ["name", "version"] {
            if !required.iter().any(|r| r == k) {
                required.push(k.into());
            }
        }
    }
}

/// The definition's types: protocol's (one definition for the CRD, the operator's checks
/// and the worker's graph).
pub use openwop_protocol::workflow::{
    AgentRef, AsWritten, NodeSettings, PortValue, Position, WorkflowDefinition, WorkflowNode,
    WorkflowSettings, WorkflowTrigger,
};

pub use openwop_protocol::pipeline::RefusalMode;
/// The per-node envelope permission set (RFC 0021 Envelope Contract): protocol's type, so
/// the CRD admits exactly what the operator validates and the worker enforces.
pub use openwop_protocol::workflow::NodeEnvelopeContract as EnvelopeContract;

/// Edges and variables: protocol's types (one definition for the CRD, the operator's
/// checks and the worker's graph).
pub use openwop_protocol::workflow::{
    ConditionKind, EdgeCondition, TriggerRule, VariableKind, WorkflowEdge, WorkflowVariable,
};

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

/// A secret the HTTP node may put in a request header: a key of a Secret, mounted as a file.
#[derive(KubeSchema, Serialize, Deserialize, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowSecret {
    /// The name header values use: `{{secrets.<name>}}`.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[A-Za-z][A-Za-z0-9_-]*$")
    )]
    pub name: String,
    /// The Secret key holding the value.
    pub secret_ref: SecretKeyRef,
}

// Holds only references, but keep Debug explicit so a later field can never leak a value.
impl std::fmt::Debug for WorkflowSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowSecret")
            .field("name", &self.name)
            .field("secret_ref", &self.secret_ref)
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
    /// The first free-form field too deep to decode (`openwop_protocol::lenient`): its
    /// path and why. Such a Workflow is not Ready and no run is snapshotted from it.
    pub fn undecodable(&self) -> Option<(String, &str)> {
        use openwop_protocol::lenient::{flagged as field, undecodable};
        let d = &self.definition;
        let top = [
            ("metadata", object(&d.metadata)),
            (
                "settings",
                d.settings.as_ref().and_then(|s| undecodable(s.raw())),
            ),
            ("configurableSchema", object(&d.configurable_schema)),
            ("outputSchema", object(&d.output_schema)),
        ];
        top.into_iter()
            .find_map(|(k, why)| Some((format!("spec.{k}"), why?)))
            .or_else(|| {
                d.triggers
                    .iter()
                    .flatten()
                    .enumerate()
                    .find_map(|(i, t)| field(format!("spec.triggers[{i}]"), Some(t.raw())))
            })
            .or_else(|| {
                d.nodes.iter().find_map(|n| {
                    let at = |k: &str| format!("spec.nodes[{}].{k}", n.id);
                    object(&n.config)
                        .map(|why| (at("config"), why))
                        .or_else(|| field(at("agent"), n.agent.as_ref().map(AsWritten::raw)))
                        .or_else(|| field(at("settings"), n.settings.as_ref().map(AsWritten::raw)))
                        .or_else(|| {
                            // Only `value` of a source can nest (the rest are strings and
                            // booleans), so the marker of a source is its value's.
                            n.inputs.iter().flatten().find_map(|(p, v)| {
                                field(at(&format!("inputs.{p}.value")), Some(v.raw()))
                            })
                        })
                })
            })
            .or_else(|| {
                d.edges().iter().find_map(|e| {
                    let c = e.condition.as_ref()?;
                    field(
                        format!("spec.edges[{}].condition.right", e.id),
                        c.right.as_ref(),
                    )
                })
            })
            .or_else(|| {
                d.variables.iter().flatten().find_map(|v| {
                    field(
                        format!("spec.variables[{}].defaultValue", v.name),
                        v.default_value.as_ref(),
                    )
                })
            })
    }
}

/// Why a free-form object field holds the lenient marker (an object of one member, so a map
/// field holds it as that map), if it does.
fn object(m: &Option<serde_json::Map<String, Value>>) -> Option<&str> {
    let m = m.as_ref().filter(|m| m.len() == 1)?;
    m.get(openwop_protocol::lenient::UNDECODABLE_KEY)
        .and_then(Value::as_str)
}
