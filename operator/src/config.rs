//! Operator configuration: a YAML/JSON file (`--config` / `OPENWOP_CONFIG`) with defaults for
//! every field. Documented in `operator/README.md`.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use openwop_protocol::capabilities::{ReasoningConfig, ReliabilityConfig};
use openwop_protocol::pipeline::Strictness;
use openwop_protocol::retry::reasoning::ReasoningPosture;
use openwop_protocol::run::host::HostProfile;
use openwop_protocol::run::nodes::{BUILTIN_NODES, ConfigCheck};
use openwop_protocol::run::subjects::StreamSpec;
use openwop_protocol::tier1::Tier1Posture;
use openwop_protocol::vendor::{LlmVendor, MOCK_VENDOR};
use openwop_protocol::workflow_check::NodeRegistry;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Full operator configuration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct OperatorConfig {
    pub worker: WorkerConfig,
    pub limits: Limits,
    /// What workflow-aimed outbound calls (the HTTP node) may reach besides public hosts.
    pub egress: EgressConfig,
    /// LLM providers configured on this host (advertised in `aiProviders.supported`).
    pub providers: Vec<ProviderConfig>,
    /// RFC 0032/0033 reliability settings (protocol's type and defaults).
    pub reliability: ReliabilityConfig,
    pub reasoning: Reasoning,
    /// `envelopeStrictness`: `warn` or `strict`.
    pub envelope_strictness: Strictness,
    /// Tier-1 posture for vendor envelope schemas: `strict`, `warn` or `off`.
    pub tier_one_subset_compliance: Tier1Posture,
    pub conformance: Conformance,
    /// Config JSON Schemas for built-in node types (the worker executes only
    /// `protocol::run::nodes::BUILTIN_NODES`; any other typeId is refused).
    pub node_types: Vec<NodeTypeConfig>,
    /// Fixture ids advertised in discovery (`fixtures`).
    pub fixtures: Vec<String>,
    pub runs: RunPolicy,
    pub discovery: DiscoveryConfig,
    pub leader_election: LeaderElectionConfig,
    /// Live status from the run event stream (NATS JetStream).
    pub events: EventsConfig,
    /// Credentials of an external NATS, for the operator and (copied) for worker pods.
    pub nats_credentials: NatsCredentialsConfig,
    /// Only reconcile Workflows and Runs in this namespace (empty = every namespace).
    pub watch_namespace: String,
    /// Controller instance id, so several operators can share a cluster (like Argo's
    /// `instanceID`): a non-empty id handles only objects labelled `openwop.dev/instance=<id>`;
    /// the empty default handles only objects without that label.
    pub instance_id: String,
    /// Address of the HTTP server (metrics, probes, discovery, REST API).
    pub listen: String,
    /// The OpenWOP REST API.
    pub rest: RestConfig,
    /// The web run viewer at `/ui/`.
    pub ui: UiConfig,
    /// Webhook subscriptions and their delivery.
    pub webhooks: WebhooksConfig,
    /// After SIGTERM, how long the HTTP server keeps answering (with `/readyz` failing) before
    /// the process exits, so Services stop sending this replica requests before it stops
    /// listening. The controllers stop and the leader lease is released at once.
    pub shutdown_drain_seconds: u64,
}

/// Longest `shutdownDrainSeconds`: the chart's pod grace period (30 s) less time to exit.
pub const MAX_SHUTDOWN_DRAIN_SECONDS: u64 = 25;

use openwop_crds::names::LABEL_INSTANCE;

impl OperatorConfig {
    /// Label selector of the objects this operator instance handles.
    pub fn instance_selector(&self) -> String {
        if self.instance_id.is_empty() {
            format!("!{LABEL_INSTANCE}")
        } else {
            format!("{LABEL_INSTANCE}={}", self.instance_id)
        }
    }

    /// Whether an object with these labels belongs to this operator instance.
    pub fn handles(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        labels.get(LABEL_INSTANCE).map_or("", String::as_str) == self.instance_id
    }
}

/// The refusal of `field`.
fn invalid(field: &'static str, message: String) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid { field, message })
}

/// An endpoint setting: empty (none), or an http(s) URL.
fn check_url(field: &'static str, url: &str) -> Result<(), ConfigError> {
    if !(url.is_empty() || url.starts_with("http://") || url.starts_with("https://")) {
        return invalid(
            field,
            format!("{url:?} must be an http:// or https:// URL (or empty for none)"),
        );
    }
    Ok(())
}

fn is_label_value(v: &str) -> bool {
    let alnum = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && alnum(v.chars().next())
        && alnum(v.chars().last())
}

impl Default for OperatorConfig {
    fn default() -> Self {
        Self {
            worker: WorkerConfig::default(),
            limits: Limits::default(),
            egress: EgressConfig::default(),
            providers: Vec::new(),
            reliability: ReliabilityConfig::default(),
            reasoning: Reasoning::default(),
            envelope_strictness: HostProfile::default().strictness,
            tier_one_subset_compliance: HostProfile::default().tier_one_subset_compliance,
            conformance: Conformance::default(),
            node_types: Vec::new(),
            fixtures: Vec::new(),
            runs: RunPolicy::default(),
            discovery: DiscoveryConfig::default(),
            leader_election: LeaderElectionConfig::default(),
            events: EventsConfig::default(),
            nats_credentials: NatsCredentialsConfig::default(),
            watch_namespace: String::new(),
            instance_id: String::new(),
            listen: "0.0.0.0:8080".into(),
            rest: RestConfig::default(),
            ui: UiConfig::default(),
            webhooks: Default::default(),
            shutdown_drain_seconds: 5,
        }
    }
}

/// Worker pod settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct WorkerConfig {
    pub image: String,
    pub image_pull_policy: String,
    /// Service account of worker pods; it needs no RBAC (the token is not mounted).
    pub service_account_name: String,
    pub resources: ResourceRequirements,
    /// NATS URL the worker publishes run events to.
    pub nats_url: String,
    /// JetStream stream of run events.
    pub events_stream: String,
    /// Uid/gid the worker runs as (non-root).
    pub run_as_user: i64,
    /// OTLP/HTTP base URL of the collector workers export spans to (`/v1/traces` is
    /// appended); empty: no spans.
    pub otlp_endpoint: String,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        let q = |s: &str| Quantity(s.into());
        Self {
            image: "ghcr.io/openwop/openwop-worker:latest".into(),
            image_pull_policy: "IfNotPresent".into(),
            service_account_name: "openwop-worker".into(),
            resources: ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".into(), q("100m")),
                    ("memory".into(), q("128Mi")),
                ])),
                limits: Some(BTreeMap::from([
                    ("cpu".into(), q("1")),
                    ("memory".into(), q("512Mi")),
                ])),
                ..Default::default()
            },
            nats_url: "nats://nats.openwop-system.svc:4222".into(),
            events_stream: "OPENWOP_EVENTS".into(),
            run_as_user: 65532,
            otlp_endpoint: String::new(),
        }
    }
}

impl WorkerConfig {
    /// Workers never run as root; spans go to an http(s) collector or nowhere.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.run_as_user == 0 {
            return invalid(
                "worker.runAsUser",
                "workers never run as root (uid 0)".into(),
            );
        }
        check_url("worker.otlpEndpoint", &self.otlp_endpoint)
    }
}

/// Engine limits advertised in `limits` (defaults: the host profile's).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Limits {
    pub clarification_rounds: u32,
    pub schema_rounds: u32,
    pub envelopes_per_turn: u32,
    pub max_node_executions: Option<u32>,
    pub max_run_duration_ms: Option<u64>,
    /// The worker's bound on one provider response body (host profile, not advertised).
    pub max_provider_response_bytes: u64,
    /// The worker's bound on one HTTP node response body (host profile; advertised as
    /// `httpClient.maxResponseBodyBytes`).
    pub max_http_response_bytes: u64,
}

/// The egress guard's allow list (`protocol::egress`): internal hosts the platform admin
/// vouches for. Everything public is reachable without it; everything internal (loopback,
/// private ranges, link-local and metadata, cluster names) is refused unless listed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EgressConfig {
    /// Host names, `*.suffix`, addresses or CIDR blocks.
    pub allow_hosts: Vec<String>,
}

impl Default for Limits {
    fn default() -> Self {
        let host = HostProfile::default();
        let l = host.limits;
        Self {
            clarification_rounds: l.clarification_rounds,
            schema_rounds: l.schema_rounds,
            envelopes_per_turn: l.envelopes_per_turn,
            max_node_executions: l.max_node_executions,
            max_run_duration_ms: l.max_run_duration_ms,
            max_provider_response_bytes: host.max_provider_response_bytes,
            max_http_response_bytes: host.http.max_response_bytes,
        }
    }
}

impl Limits {
    /// The advertised part (`limits` of the capabilities document and the host profile).
    pub fn advertised(&self) -> openwop_protocol::limits::Limits {
        openwop_protocol::limits::Limits {
            clarification_rounds: self.clarification_rounds,
            schema_rounds: self.schema_rounds,
            envelopes_per_turn: self.envelopes_per_turn,
            max_node_executions: self.max_node_executions,
            max_run_duration_ms: self.max_run_duration_ms,
        }
    }
}

/// A configured LLM provider.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderConfig {
    /// Name used by Workflows (`spec.providers[].provider`).
    pub name: String,
    /// One of [`LlmVendor::ALL`], or [`MOCK_VENDOR`].
    pub vendor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
}

/// RFC 0030 reasoning posture.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Reasoning {
    pub supported: bool,
    /// `mandatory`, `advisory` or `off`.
    pub prompt_directive: ReasoningPosture,
}

impl Default for Reasoning {
    fn default() -> Self {
        let r = ReasoningConfig::default();
        Self {
            supported: r.supported,
            prompt_directive: r.prompt_directive,
        }
    }
}

/// Test seams a host opts into per namespace: the RFC 0023 mock agent and Run provider mocks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Conformance {
    /// Namespaces whose workflows may use `core.conformance.mock-agent` whatever their id
    /// (`*` = all). Empty = only `conformance-*` workflow ids may.
    pub mock_agent_namespaces: Vec<String>,
    /// Namespaces whose Runs may set `spec.providerMocks` (exact names, `prefix-*`, or `*` =
    /// all). Empty = none: a Run with mocks elsewhere fails with `ProviderMocksNotAllowed`.
    pub provider_mock_namespaces: Vec<String>,
    /// The conformance test seams and fixture workflows (chart `conformance.seams`).
    pub seams: Seams,
}

/// `conformance.seams`: conformance-only, never in production.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Seams {
    /// The chart installs the conformance fixture workflows (their ids are in `fixtures`),
    /// and the mock agent they use is advertised (`conformance.mockAgent`).
    pub enabled: bool,
    /// The operator's base URL as worker pods reach it (the chart's Service by default):
    /// with the seams on, workers also export their spans to its span store, which
    /// `test/otel/spans` reads. Empty: no span store (`otelScrape` not advertised).
    pub span_ingest_url: String,
}

impl Conformance {
    /// Whether Runs in `namespace` may carry `spec.providerMocks`. With the seams on, in
    /// every namespace: `mock-ai/program` lets anyone who may create Runs in a namespace
    /// put mocks on the Runs they create there, so a narrower list would not be a second
    /// control, only the same switch read twice.
    pub fn provider_mocks_allowed_in(&self, namespace: &str) -> bool {
        self.seams.enabled
            || self
                .provider_mock_namespaces
                .iter()
                .any(|p| match p.strip_suffix('*') {
                    Some(prefix) => namespace.starts_with(prefix),
                    None => p == namespace,
                })
    }

    /// Whether the host opted in for `namespace`.
    pub fn mock_agent_allowed_in(&self, namespace: &str) -> bool {
        self.mock_agent_namespaces
            .iter()
            .any(|n| n == "*" || n == namespace)
    }

    /// The span store's URL, and the namespace patterns of `providerMockNamespaces`.
    fn validate(&self) -> Result<(), ConfigError> {
        check_url(
            "conformance.seams.spanIngestUrl",
            &self.seams.span_ingest_url,
        )?;
        for p in &self.provider_mock_namespaces {
            let name = p.strip_suffix('*').unwrap_or(p);
            let ok = name.len() <= 63
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && (p.ends_with('*')
                    || (!name.is_empty() && !name.starts_with('-') && !name.ends_with('-')));
            if !ok || name.contains('*') {
                return invalid(
                    "conformance.providerMockNamespaces",
                    format!("{p:?} is not a namespace name, a `prefix*` pattern or `*`"),
                );
            }
        }
        Ok(())
    }
}

/// A config JSON Schema for one built-in node type.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeTypeConfig {
    pub type_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_schema: Option<Value>,
}

/// Accepted `runs.reconcileConcurrency`: at least one; a bound well above what one process
/// holds connections for (each reconcile in flight may hold its own API connection).
pub const RECONCILE_CONCURRENCY_RANGE: std::ops::RangeInclusive<u16> = 1..=512;

/// Run lifecycle policy.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct RunPolicy {
    /// Runs holding a worker pod at once per namespace; others wait as `pending` (`Queued`).
    pub max_concurrent_per_namespace: u32,
    /// Run reconciles the leader runs at once. More start a batch's worker pods sooner, at
    /// the cost of one API connection and its buffers per reconcile in flight (the
    /// operator's memory) and more load on the API server at once.
    pub reconcile_concurrency: u16,
    /// Nodes of one run executing at once when its workflow sets no `maxConcurrency`
    /// (frozen in the snapshot's host profile).
    pub node_concurrency: u32,
    /// A wait (`core.delay`) up to this many ms sleeps in the worker pod; a longer one lets
    /// the pod exit and the operator starts a worker at the wake time (host profile).
    pub durable_wait_threshold_ms: u64,
    /// The deepest a child run (`core.subWorkflow`) may be nested (host profile).
    pub max_sub_workflow_depth: u32,
    /// Worker pods that may die before finishing before the run fails (`worker_crashed`).
    pub max_worker_retries: u32,
    /// First retry delay; doubles per failed attempt up to `backoffMaxSeconds`.
    pub backoff_base_seconds: u64,
    pub backoff_max_seconds: u64,
    /// Finished worker pods are deleted this long after the run ends.
    pub pod_ttl_seconds_after_finished: u64,
    /// When set, finished Runs themselves are deleted this long after they end.
    pub run_ttl_seconds_after_finished: Option<u64>,
}

impl Default for RunPolicy {
    fn default() -> Self {
        Self {
            max_concurrent_per_namespace: 10,
            reconcile_concurrency: 64,
            node_concurrency: openwop_protocol::schedule::DEFAULT_NODE_CONCURRENCY,
            durable_wait_threshold_ms:
                openwop_protocol::run::host::DEFAULT_DURABLE_WAIT_THRESHOLD_MS,
            max_sub_workflow_depth: openwop_protocol::run::host::DEFAULT_MAX_SUB_WORKFLOW_DEPTH,
            max_worker_retries: 3,
            backoff_base_seconds: 10,
            backoff_max_seconds: 300,
            pod_ttl_seconds_after_finished: 300,
            run_ttl_seconds_after_finished: None,
        }
    }
}

impl RunPolicy {
    /// Concurrency, nesting and backoff bounds.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.max_concurrent_per_namespace == 0 {
            return invalid(
                "runs.maxConcurrentPerNamespace",
                "must be at least 1".into(),
            );
        }
        if !RECONCILE_CONCURRENCY_RANGE.contains(&self.reconcile_concurrency) {
            return invalid(
                "runs.reconcileConcurrency",
                format!(
                    "must be {}..{}, got {}",
                    RECONCILE_CONCURRENCY_RANGE.start(),
                    RECONCILE_CONCURRENCY_RANGE.end(),
                    self.reconcile_concurrency
                ),
            );
        }
        if !(1..=openwop_protocol::schedule::MAX_NODE_CONCURRENCY).contains(&self.node_concurrency)
        {
            return invalid(
                "runs.nodeConcurrency",
                format!(
                    "must be 1..{}",
                    openwop_protocol::schedule::MAX_NODE_CONCURRENCY
                ),
            );
        }
        if self.max_sub_workflow_depth == 0 {
            return invalid(
                "runs.maxSubWorkflowDepth",
                "must be at least 1 (a run with a core.subWorkflow node needs depth 1)".into(),
            );
        }
        if self.backoff_base_seconds == 0 || self.backoff_max_seconds < self.backoff_base_seconds {
            return invalid(
                "runs.backoffBaseSeconds",
                "must be > 0 and not above runs.backoffMaxSeconds".into(),
            );
        }
        Ok(())
    }
}

/// Where the capabilities document is kept.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct DiscoveryConfig {
    pub namespace: String,
    pub config_map: String,
    /// `Cache-Control` of `/.well-known/openwop`.
    pub cache_control: String,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        Self {
            namespace: "openwop-system".into(),
            config_map: "openwop-discovery".into(),
            cache_control: "public, max-age=60".into(),
        }
    }
}

/// Lease-based leader election.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct LeaderElectionConfig {
    pub enabled: bool,
    pub lease_name: String,
    /// Defaults to `discovery.namespace` when empty.
    pub lease_namespace: String,
    /// How long the lease stays valid after a renewal; another replica may take it then.
    pub lease_duration_seconds: u32,
    /// A leader that could not renew for this long stops its controllers and event consumer
    /// and exits (a restart re-elects): below `lease_duration_seconds`, so it has stopped
    /// before another replica can take the lease.
    pub renew_deadline_seconds: u32,
    pub renew_interval_seconds: u32,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            lease_name: "openwop-operator".into(),
            lease_namespace: String::new(),
            lease_duration_seconds: 15,
            renew_deadline_seconds: 10,
            renew_interval_seconds: 2,
        }
    }
}

impl LeaderElectionConfig {
    /// A leader renews more than once before it gives up, and gives up before the lease
    /// expires for the others.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.renew_interval_seconds == 0
            || self.renew_interval_seconds >= self.renew_deadline_seconds
        {
            return invalid(
                "leaderElection.renewIntervalSeconds",
                format!(
                    "{} must be > 0 and below renewDeadlineSeconds ({}), so a leader tries to renew more than once before it gives up",
                    self.renew_interval_seconds, self.renew_deadline_seconds
                ),
            );
        }
        if self.renew_deadline_seconds >= self.lease_duration_seconds {
            return invalid(
                "leaderElection.renewDeadlineSeconds",
                format!(
                    "{} must be below leaseDurationSeconds ({}): a leader that cannot renew must stop before another replica may take the lease",
                    self.renew_deadline_seconds, self.lease_duration_seconds
                ),
            );
        }
        Ok(())
    }
}

impl OperatorConfig {
    /// Reads and validates a config file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_yaml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.display().to_string(),
                message,
            },
            other => other,
        })
    }

    /// Parses and validates YAML (or JSON) text.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let cfg: OperatorConfig = serde_yaml::from_str(text).map_err(|e| ConfigError::Parse {
            path: "<inline>".into(),
            message: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks ranges and enumerations, one section after another (each section's own check
    /// beside its type); the first refusal names its field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !is_label_value(&self.instance_id) {
            return invalid(
                "instanceId",
                "must be a Kubernetes label value: at most 63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric".into(),
            );
        }
        // The bounds the capabilities document sets (protocol's one check of them).
        self.reliability
            .validate()
            .map_err(|e| ConfigError::Invalid {
                field: e.field(),
                message: e.to_string(),
            })?;
        self.runs.validate()?;
        self.check_limits()?;
        self.ui.validate()?;
        self.webhooks.validate()?;
        self.rest.validate()?;
        self.worker.validate()?;
        self.check_providers()?;
        self.conformance.validate()?;
        if self.shutdown_drain_seconds > MAX_SHUTDOWN_DRAIN_SECONDS {
            return invalid(
                "shutdownDrainSeconds",
                format!(
                    "{} is above {MAX_SHUTDOWN_DRAIN_SECONDS}: the operator pod's grace period (30 s) would kill it mid-drain",
                    self.shutdown_drain_seconds
                ),
            );
        }
        self.leader_election.validate()?;
        self.events.validate()?;
        self.node_registry()?;
        self.nats_credentials.validate()
    }

    /// `limits` and `egress`: what the host profile enforces on a run's calls.
    fn check_limits(&self) -> Result<(), ConfigError> {
        if self.limits.max_provider_response_bytes < 1024 {
            return invalid(
                "limits.maxProviderResponseBytes",
                format!(
                    "must be at least 1024 bytes, got {} (every provider answer would fail)",
                    self.limits.max_provider_response_bytes
                ),
            );
        }
        let http_bytes = self.limits.max_http_response_bytes;
        if !(1024..=openwop_protocol::http::MAX_RESPONSE_BYTES_CEILING).contains(&http_bytes) {
            return invalid(
                "limits.maxHttpResponseBytes",
                format!(
                    "must be 1024..{} bytes (the body is recorded in the run's event log), got {http_bytes}",
                    openwop_protocol::http::MAX_RESPONSE_BYTES_CEILING
                ),
            );
        }
        if let Err(e) = self.host_profile().http.egress_policy() {
            return invalid("egress.allowHosts", e.to_string());
        }
        Ok(())
    }

    /// `providers[].vendor`: a vendor the worker has a client for, or the mock.
    fn check_providers(&self) -> Result<(), ConfigError> {
        for p in &self.providers {
            if LlmVendor::parse(&p.vendor).is_none() && p.vendor != MOCK_VENDOR {
                return invalid(
                    "providers[].vendor",
                    format!(
                        "provider {:?}: vendor must be {} or {MOCK_VENDOR}",
                        p.name,
                        LlmVendor::names()
                    ),
                );
            }
        }
        Ok(())
    }

    /// The run-events stream as the operator and every worker create or update it
    /// (`worker.eventsStream`, `events.retention`). An unparsable retention (refused by
    /// [`OperatorConfig::validate`]) falls back to the default.
    pub fn stream_spec(&self) -> StreamSpec {
        let max_age = parse_retention(&self.events.retention)
            .unwrap_or_else(|_| parse_retention(DEFAULT_RETENTION).unwrap_or_default());
        StreamSpec::new(self.worker.events_stream.clone(), max_age)
    }

    /// The node types Workflows may use: the built-ins the worker executes
    /// ([`BUILTIN_NODES`]), with the config schemas `nodeTypes[]` adds to them. A typeId
    /// that is not built in is refused: the worker could not execute it.
    pub fn node_registry(&self) -> Result<NodeRegistry, ConfigError> {
        let mut registry = NodeRegistry::builtin();
        for t in &self.node_types {
            let builtin = BUILTIN_NODES.iter().find(|n| n.type_id == t.type_id);
            let Some(builtin) = builtin else {
                let known: Vec<&str> = BUILTIN_NODES.iter().map(|n| n.type_id).collect();
                return Err(ConfigError::Invalid {
                    field: "nodeTypes",
                    message: format!(
                        "typeId {:?} is not a built-in node type; the worker executes only {}, so nodeTypes may only add a configSchema to one of them",
                        t.type_id,
                        known.join(", ")
                    ),
                });
            };
            if builtin.config != ConfigCheck::AnyObject {
                return Err(ConfigError::Invalid {
                    field: "nodeTypes",
                    message: format!(
                        "typeId {:?} has a fixed config (RFC 0023); it takes no configSchema",
                        t.type_id
                    ),
                });
            }
            if let Some(schema) = &t.config_schema {
                registry
                    .register_with_schema(&t.type_id, schema)
                    .map_err(|e| ConfigError::Invalid {
                        field: "nodeTypes",
                        message: format!("configSchema of {:?}: {e}", t.type_id),
                    })?;
            }
        }
        Ok(registry)
    }

    /// The host profile: the limits and postures every run gets (frozen in its snapshot,
    /// enforced by the worker) and discovery advertises. One function, so the two can never
    /// differ.
    pub fn host_profile(&self) -> HostProfile {
        HostProfile {
            limits: self.limits.advertised(),
            strictness: self.envelope_strictness,
            tier_one_subset_compliance: self.tier_one_subset_compliance,
            reasoning_directive: self.reasoning.prompt_directive,
            truncation_budget_multiplier: self.reliability.truncation_budget_multiplier,
            max_provider_response_bytes: self.limits.max_provider_response_bytes,
            node_concurrency: self.runs.node_concurrency,
            http: openwop_protocol::http::HttpClientProfile {
                allow_hosts: self.egress.allow_hosts.clone(),
                max_response_bytes: self.limits.max_http_response_bytes,
            },
            durable_wait_threshold_ms: self.runs.durable_wait_threshold_ms,
            max_sub_workflow_depth: self.runs.max_sub_workflow_depth,
            mock_agent: false,
        }
    }

    /// The host profile of a run in `namespace`: [`OperatorConfig::host_profile`] with the
    /// mock-agent opt-in the Workflow controller checks that namespace's Workflows against
    /// ([`Conformance::mock_agent_allowed_in`]), frozen in the run's snapshot so the worker
    /// allows exactly what the operator accepted.
    pub fn host_profile_for(&self, namespace: &str) -> HostProfile {
        HostProfile {
            mock_agent: self.conformance.mock_agent_allowed_in(namespace),
            ..self.host_profile()
        }
    }

    /// Whether this operator serves and delivers webhooks: enabled, the REST API on (where they
    /// are registered) and run events on NATS (what they deliver). Discovery advertises
    /// `webhooks` exactly then.
    pub fn webhooks_active(&self) -> bool {
        self.webhooks.enabled
            && self.rest.enabled
            && self
                .events
                .nats_url
                .as_deref()
                .is_some_and(|u| !u.is_empty())
    }

    /// Namespace of the leader Lease.
    pub fn lease_namespace(&self) -> &str {
        if self.leader_election.lease_namespace.is_empty() {
            &self.discovery.namespace
        } else {
            &self.leader_election.lease_namespace
        }
    }
}

mod error;
mod events;
mod rest;
pub mod seams;
mod ui;
mod webhooks;
pub use error::ConfigError;
pub use events::{
    DEFAULT_RETENTION, EventsConfig, MAX_RETENTION_SECONDS, NatsCredentialsConfig, parse_retention,
};
pub use rest::{
    IdempotencyConfig, InterruptTokensConfig, MAX_INTERRUPT_RECORD_WAIT_SECONDS,
    MAX_KEEPALIVE_SECONDS, MAX_REVIEW_CACHE_SECONDS, MIN_BODY_BYTES, MIN_RETENTION_SECONDS,
    RestConfig, TOKEN_LIFETIME_SECONDS,
};
pub use ui::{SESSION_SECONDS, UiConfig};
pub use webhooks::WebhooksConfig;

#[cfg(test)]
mod tests;
