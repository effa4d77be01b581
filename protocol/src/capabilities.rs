//! The capabilities (discovery) document served at `GET /.well-known/openwop`
//! (`schemas/capabilities.schema.json`), built from what the host really has.
//!
//! [`build`] turns a typed [`CapabilitiesConfig`] into a [`CapabilitiesDocument`]:
//! - `supportedEnvelopes`: the universal kinds first whenever any kind is
//!   supported, then the configured kinds, without duplicates;
//! - `schemaVersions`: the embedded schema version ([`schema::kind_schema_version`])
//!   or the version of the host-served vendor schema;
//! - `envelopes.tierOneSubsetCompliance`: `strict` only when configured so and
//!   every served envelope payload schema passes [`tier1::check`]; otherwise
//!   `warn` (or `off` when configured off);
//! - `envelopes.reliability.events`: every reliability event this engine emits
//!   (always including `envelope.retry.exhausted` and `envelope.refusal`) when
//!   reliability is supported;
//! - every family sits at the root and is mirrored under `capabilities`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::envelope::UNIVERSAL_KINDS;
use crate::limits::{
    DEFAULT_MAX_RETRY_ATTEMPTS, DEFAULT_TRUNCATION_BUDGET_MULTIPLIER, Limits,
    MAX_RETRY_ATTEMPTS_RANGE, TRUNCATION_MULTIPLIER_RANGE,
};
use crate::pipeline::Strictness;
use crate::retry::reasoning::ReasoningPosture;
use crate::{schema, tier1};

/// The protocol version this crate implements, in the spec's grammar (RFC 0149 §C,
/// `version-negotiation.md`): ASCII `<major>.<minor>`, no leading zeros, no patch (a patch
/// belongs to suite and SDK versions). The whole v1 line is `1.0`; the discovery document also
/// names it in `protocolVersions` and `preferredVersion` (one major served).
pub const PROTOCOL_VERSION: &str = "1.0";

/// Host-extension key (`x-host-<host>-<key>`, `host-extensions.md`) describing the
/// live event stream: NATS JetStream is not an OpenWOP transport, so it is not listed
/// in `supportedTransports`.
pub const EVENT_STREAM_EXTENSION: &str = "x-host-openwop-operator-event-stream";

/// Host-extension key listing the conformance-only test seams this host serves
/// (`host-sample-test-seams.md`; present only while they are enabled). Seams whose spec
/// names no capability flag are advertised here, so a driver can tell "not served" from
/// "served" without probing.
pub const TEST_SEAMS_EXTENSION: &str = "x-host-openwop-operator-test-seams";

/// Reliability events (RFC 0032 / 0033) the engine emits, advertised when supported.
pub const RELIABILITY_EVENTS: [&str; 6] = [
    "envelope.retry.attempted",
    "envelope.retry.exhausted",
    "envelope.refusal",
    "envelope.truncated",
    "envelope.recovery.applied",
    "envelope.nlToFormat.engaged",
];

// ---------------------------------------------------------------------------
// The document (wire types)
// ---------------------------------------------------------------------------

/// The discovery document: every family at the root, mirrored under `capabilities`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapabilitiesDocument {
    #[serde(flatten)]
    pub families: CapabilityFamilies,
    /// Mirror of the root families (clients read either).
    pub capabilities: CapabilityFamilies,
}

/// Every capability family (`$defs/CapabilityFamilies`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityFamilies {
    pub protocol_version: String,
    /// Every `<major>.<minor>` served (RFC 0165 §A): contains `protocolVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_versions: Option<Vec<String>>,
    /// The version a request without a version header gets (RFC 0179 §A.1): on this
    /// single-major host, `protocolVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_version: Option<String>,
    pub supported_envelopes: Vec<String>,
    pub schema_versions: BTreeMap<String, u32>,
    pub limits: Limits,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope_strictness: Option<Strictness>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope_contracts: Option<EnvelopeContracts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelopes: Option<Envelopes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conformance: Option<Conformance>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Agents>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observability: Option<Observability>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Secrets>,
    /// Present only when webhook subscriptions are served and delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhooks: Option<Webhooks>,
    /// `extensions` (`interrupt-profiles.md` §"Discovery guidance"): present only while
    /// something is advertised in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ai_providers: Option<AiProviders>,
    /// Run controls beyond create and cancel (`capabilities.md` §`runs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<Runs>,
    /// `mcp` (`mcp-integration.md` §A): the MCP revisions this host's client speaks to
    /// ToolServers. Present only while LLM nodes may call tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<Mcp>,
    /// `toolCatalog` (`tool-catalog.md` §A): `GET /v1/tools` is served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_catalog: Option<ToolCatalog>,
    /// `host` services; this host advertises `toolHooks` (RFC 0064 §A) in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostServices>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixtures: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supported_transports: Option<Vec<Transport>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<Implementation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_client: Option<HttpClient>,
    /// `subWorkflow` (RFC 0022 §B): present while `core.subWorkflow` is registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_workflow: Option<SubWorkflow>,
    /// Host extension (the schema is open): the registered node typeIds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_types: Option<Vec<String>>,
    /// Host extension [`EVENT_STREAM_EXTENSION`]: where live run events stream besides REST.
    #[serde(
        rename = "x-host-openwop-operator-event-stream",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub event_stream: Option<EventStream>,
    /// Host extension [`TEST_SEAMS_EXTENSION`]: the conformance test seams served.
    #[serde(
        rename = "x-host-openwop-operator-test-seams",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub test_seams: Option<TestSeamPaths>,
}

/// The [`TEST_SEAMS_EXTENSION`] block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TestSeamPaths {
    /// `METHOD /v1/host/sample/...` of each seam served.
    pub paths: Vec<String>,
}

/// `supportedTransports` — the official schema's closed set. REST is served whether or
/// not it is listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Rest,
    Mcp,
    A2a,
    Grpc,
}

/// `secrets.scopes` — the official schema's closed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretScope {
    Tenant,
    User,
    Run,
    Workspace,
}

/// The [`EVENT_STREAM_EXTENSION`] block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventStream {
    /// Always `nats-jetstream`.
    pub transport: String,
    /// Subject of one run's events, with `<namespace>` and `<runId>` placeholders.
    pub subject: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeContracts {
    pub advertised: bool,
}

/// `envelopes` (RFC 0030, 0032, 0033).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelopes {
    pub reasoning: EnvelopeReasoning,
    pub tier_one_subset_compliance: TierOneSubsetCompliance,
    pub reliability: Reliability,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvelopeReasoning {
    pub supported: bool,
    pub prompt_directive: ReasoningPosture,
}

/// `envelopes.tierOneSubsetCompliance`; in the config, the posture asked for. One type with
/// the Workflow check's posture: the same setting decides both.
pub type TierOneSubsetCompliance = crate::tier1::Tier1Posture;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reliability {
    pub supported: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    pub max_retry_attempts: u32,
    pub completion: Completion,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Completion {
    pub distinguishes_truncation: bool,
    pub truncation_budget_multiplier: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Conformance {
    pub mock_agent: bool,
}

/// `observability`: only the conformance test seams are advertised here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observability {
    pub test_seams: TestSeams,
}

/// `observability.testSeams` (`host-sample-test-seams.md` §2, §3): the seams served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TestSeams {
    /// `GET /v1/host/sample/test/otel/spans`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub otel_scrape: bool,
    /// `POST /v1/host/sample/test/debug-bundle/export`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub debug_bundle_export: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agents {
    pub supported: bool,
    pub reasoning: AgentReasoning,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentReasoning {
    pub verbosity: ReasoningVerbosity,
    /// `agent.reasoning.delta` events are emitted.
    pub streaming: bool,
}

/// Default verbosity of agent reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningVerbosity {
    #[default]
    Summary,
    Full,
    Off,
}

/// `mcp`: the MCP client (`mcp-integration.md` §A). Revisions in MCP's date form; no
/// `profiles` (a version may be listed without one, and this host's client is not a
/// 2026-07-28 client), no `serverMount` (this host serves no MCP server).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mcp {
    pub supported: bool,
    /// Where this host mounts an MCP server: none (the v1.0 discoverability shape has the
    /// member; ToolServers' own URLs are not published, discovery being public).
    pub server_urls: Vec<String>,
    /// Every revision the client can speak (a ToolServer's `protocolVersion` chooses).
    pub protocol_versions: Vec<String>,
    /// What a ToolServer asks for unless it says otherwise; listed in `protocolVersions`.
    pub preferred_version: String,
}

impl Mcp {
    /// The client of `tools::mcp`: its revisions, oldest first, and its default.
    pub fn client() -> Mcp {
        use crate::tools::mcp::McpRevision;
        Mcp {
            supported: true,
            server_urls: Vec::new(),
            protocol_versions: McpRevision::ALL
                .iter()
                .map(|r| r.as_str().to_owned())
                .collect(),
            preferred_version: McpRevision::DEFAULT.as_str().to_owned(),
        }
    }
}

/// `toolCatalog` (`tool-catalog.md` §A).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCatalog {
    pub supported: bool,
    /// The sources the catalog projects (an admin's `exec`-tier MCP tool is listed as
    /// `host-extension`, as the spec requires of exec tools).
    pub sources: Vec<String>,
    /// No `tool.session.*` events are emitted.
    pub session_lifecycle: bool,
}

/// `host` services advertised by this host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostServices {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_hooks: Option<ToolHooks>,
}

/// `host.toolHooks` (RFC 0064 §A): `agent.toolCalled` carries `argsHash` and `transport`,
/// `agent.toolReturned` `status` and `durationMs`, for every tool call. No per-tool scopes
/// or rate limits (a node's allowlist and approval govern calls instead).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolHooks {
    pub supported: bool,
    pub pre_post_events: bool,
    pub per_tool_authorization: bool,
    pub per_tool_rate_limit: bool,
}

/// `webhooks`: subscriptions (`POST/DELETE /v1/webhooks`) and the signature schemes of their
/// deliveries (`protocol::webhook`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Webhooks {
    pub supported: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signature_algorithms: Vec<String>,
}

/// `extensions`: advisory host details the spec places there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Extensions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupts: Option<InterruptExtensions>,
}

/// `extensions.interrupts` (`interrupt-profiles.md`): the signed-token surface
/// (`GET`/`POST /v1/interrupts/{token}`, `RunSnapshot.interrupt.interruptToken`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptExtensions {
    pub signed_callback_tokens: bool,
    /// The interrupt profiles claimed (`openwop-interrupt-quorum`, `run::quorum`;
    /// `openwop-interrupt-cascade-cancel`, `run::waits`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<String>,
}

/// `runs`: run controls beyond create and cancel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Runs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_resume: Option<PauseResume>,
}

/// `runs.pauseResume`: `POST /v1/runs/{runId}:pause` / `:resume`; every listed drain policy is
/// accepted by `:pause` (`crate::run::pause`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseResume {
    pub supported: bool,
    pub drain_policies: Vec<crate::events::DrainPolicy>,
}

impl Runs {
    /// What this host serves: pause and resume with every drain policy it implements.
    pub fn served() -> Runs {
        Runs {
            pause_resume: Some(PauseResume {
                supported: true,
                drain_policies: crate::events::DrainPolicy::ALL.to_vec(),
            }),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Secrets {
    pub supported: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<SecretScope>,
    /// Present when `supported`: `capabilities.md` §"Secrets" requires `host-managed` then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<SecretResolution>,
}

/// `secrets.resolution`: who turns a secret reference into its value (`host-managed`, the
/// only value in v1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SecretResolution {
    HostManaged,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AiProviders {
    pub supported: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_inline_media_bytes: Option<u64>,
}

/// `httpClient` (RFC 0076 host HTTP service; field names of the reference in-memory host):
/// the HTTP node's calls go through the egress guard, bounded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpClient {
    pub supported: bool,
    /// Every call passes the egress guard (resolve, check every address, pin).
    pub ssrf_guard: bool,
    pub max_response_body_bytes: u64,
    /// Default per-attempt timeout.
    pub request_timeout_ms: u64,
    pub methods: Vec<String>,
}

impl HttpClient {
    /// What a host running `profile` advertises.
    pub fn of(profile: &crate::http::HttpClientProfile) -> HttpClient {
        HttpClient {
            supported: true,
            ssrf_guard: true,
            max_response_body_bytes: profile.max_response_bytes,
            request_timeout_ms: crate::http::config::DEFAULT_TIMEOUT_MS,
            methods: crate::http::METHODS
                .iter()
                .map(|m| m.as_str().to_owned())
                .collect(),
        }
    }
}

/// `subWorkflow` (RFC 0022 §B, `node-packs.md` §"`core.subWorkflow` contract"): the child
/// run's variables are seeded from the parent's by `inputMapping`, once, at child creation
/// (`crate::run::waits::SubWorkflowConfig::child_inputs`, applied by the operator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubWorkflow {
    pub input_mapping: bool,
}

impl SubWorkflow {
    /// What a host advertises with `node_types` registered: `inputMapping: true` while a
    /// sub-workflow type is among them (its executor always honours the mapping).
    pub fn of(node_types: &[String]) -> Option<SubWorkflow> {
        node_types
            .iter()
            .any(|t| {
                crate::run::nodes::executor_of(t) == Some(crate::run::nodes::Executor::SubWorkflow)
            })
            .then_some(SubWorkflow {
                input_mapping: true,
            })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Implementation {
    pub name: String,
    pub version: String,
}

// ---------------------------------------------------------------------------
// The config (what the host really has)
// ---------------------------------------------------------------------------

/// A payload schema the host serves for a kind without an embedded schema
/// (a vendor kind), at `/schemas/envelopes/{kind}.schema.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedKindSchema {
    /// Advertised in `schemaVersions`.
    pub schema_version: u32,
    /// Walked by the Tier-1 check that decides `tierOneSubsetCompliance`.
    pub schema: Value,
}

/// Reliability posture (RFC 0032 events, RFC 0033 completion criteria); also the operator
/// config's `reliability` section (chart `reliability.*`), read as is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ReliabilityConfig {
    pub supported: bool,
    /// [`MAX_RETRY_ATTEMPTS_RANGE`].
    pub max_retry_attempts: u32,
    pub distinguishes_truncation: bool,
    /// [`TRUNCATION_MULTIPLIER_RANGE`]; the default of every prompt node (host profile).
    pub truncation_budget_multiplier: f64,
}

impl Default for ReliabilityConfig {
    fn default() -> Self {
        ReliabilityConfig {
            supported: true,
            max_retry_attempts: DEFAULT_MAX_RETRY_ATTEMPTS,
            distinguishes_truncation: true,
            truncation_budget_multiplier: DEFAULT_TRUNCATION_BUDGET_MULTIPLIER,
        }
    }
}

/// Reasoning posture: the RFC 0030 prompt directive and agent reasoning events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReasoningConfig {
    pub supported: bool,
    pub prompt_directive: ReasoningPosture,
    pub verbosity: ReasoningVerbosity,
    /// `agent.reasoning.delta` events are emitted.
    pub streaming: bool,
}

impl Default for ReasoningConfig {
    fn default() -> Self {
        ReasoningConfig {
            supported: true,
            prompt_directive: ReasoningPosture::default(),
            verbosity: ReasoningVerbosity::Summary,
            streaming: false,
        }
    }
}

/// What the host really has; [`build`] derives the document from it.
#[derive(Debug, Clone, PartialEq)]
pub struct CapabilitiesConfig {
    /// Defaults to [`PROTOCOL_VERSION`].
    pub protocol_version: String,
    /// Envelope kinds the host handles. The universal kinds are added whenever
    /// this is non-empty; empty advertises no kinds at all.
    pub envelope_kinds: Vec<String>,
    /// Payload schemas served for kinds without an embedded schema.
    pub served_schemas: BTreeMap<String, ServedKindSchema>,
    /// Registered node typeIds (advertised as the `nodeTypes` extension).
    pub node_types: Vec<String>,
    /// The HTTP node's client, when an HTTP node type is registered.
    pub http_client: Option<HttpClient>,
    /// Configured LLM provider ids.
    pub providers: Vec<String>,
    pub max_inline_media_bytes: Option<u64>,
    pub limits: Limits,
    pub reliability: ReliabilityConfig,
    pub reasoning: ReasoningConfig,
    pub strictness: Strictness,
    /// The posture asked for; `Strict` is advertised only if every served schema passes.
    pub tier_one_subset_compliance: TierOneSubsetCompliance,
    /// Nodes declare envelope contracts and the pipeline enforces them.
    pub envelope_contracts: bool,
    /// `core.conformance.mock-agent` is registered and opted in for some tenant.
    pub mock_agent: bool,
    /// `agent.*` events are emitted.
    pub agents_supported: bool,
    /// Scopes BYOK secrets may be bound at; empty = secrets not supported.
    pub secret_scopes: Vec<SecretScope>,
    /// Webhook subscriptions are served and delivered (advertised as `webhooks` only then).
    pub webhooks: bool,
    /// LLM nodes call tools on ToolServers through the MCP client, recording each call
    /// (advertised as `mcp` and `host.toolHooks`).
    pub tools: bool,
    /// `GET /v1/tools` is served (advertised as `toolCatalog`).
    pub tool_catalog: bool,
    /// Signed interrupt tokens are minted and served (`extensions.interrupts`).
    pub interrupt_tokens: bool,
    pub fixtures: Vec<String>,
    /// Conformance test seams served (advertised under `observability.testSeams` when any).
    pub test_seams: TestSeams,
    pub transports: Vec<Transport>,
    /// Advertised as [`EVENT_STREAM_EXTENSION`] when set.
    pub event_stream: Option<EventStream>,
    /// Conformance test seams served (`METHOD path`); advertised as
    /// [`TEST_SEAMS_EXTENSION`] when non-empty.
    pub test_seam_paths: Vec<String>,
    pub implementation: Implementation,
}

impl Default for CapabilitiesConfig {
    fn default() -> Self {
        CapabilitiesConfig {
            protocol_version: PROTOCOL_VERSION.to_owned(),
            envelope_kinds: UNIVERSAL_KINDS.iter().map(|k| (*k).to_owned()).collect(),
            served_schemas: BTreeMap::new(),
            node_types: Vec::new(),
            http_client: None,
            providers: Vec::new(),
            max_inline_media_bytes: None,
            limits: Limits::default(),
            reliability: ReliabilityConfig::default(),
            reasoning: ReasoningConfig::default(),
            strictness: Strictness::default(),
            tier_one_subset_compliance: TierOneSubsetCompliance::default(),
            envelope_contracts: true,
            mock_agent: false,
            agents_supported: false,
            secret_scopes: Vec::new(),
            webhooks: false,
            tools: false,
            tool_catalog: false,
            interrupt_tokens: false,
            fixtures: Vec::new(),
            test_seams: TestSeams::default(),
            transports: Vec::new(),
            event_stream: None,
            test_seam_paths: Vec::new(),
            implementation: Implementation {
                name: "openwop-operator".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            },
        }
    }
}

/// A config value the document cannot carry.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CapabilitiesError {
    #[error(
        "reliability.maxRetryAttempts is {0}: use a whole number from 1 to 16 (the highest attempt number a retry may reach)"
    )]
    MaxRetryAttempts(u32),
    #[error(
        "reliability.truncationBudgetMultiplier is {0}: use a number from 1 to 8 (the factor applied to the output budget on a truncation retry)"
    )]
    TruncationBudgetMultiplier(f64),
    #[error(
        "protocolVersion '{0}' is not an OpenWOP v1 version: use the spec's `<major>.<minor>` form with major 1 and no leading zeros or patch (RFC 0149), e.g. {PROTOCOL_VERSION}"
    )]
    ProtocolVersion(String),
    #[error(
        "limits.maxNodeExecutions is 0: use at least 1 (the official capabilities schema's minimum), or leave it unset"
    )]
    MaxNodeExecutions,
    #[error(
        "limits.maxRunDurationMs is {0}: use at least 1000 (the official capabilities schema's minimum), or leave it unset"
    )]
    MaxRunDurationMs(u64),
    #[error("{field} lists '{value}' twice: each entry must be unique")]
    Duplicate { field: &'static str, value: String },
    #[error(
        "envelope kind at index {index} is {len} characters long: kinds must be 1..256 characters"
    )]
    KindLength { index: usize, len: usize },
    #[error(
        "served schema for '{kind}' is also an embedded kind schema: drop it from served_schemas (the embedded schema is served)"
    )]
    ServedSchemaShadowsEmbedded { kind: String },
    #[error("implementation.{field} is empty: set the host's {field}")]
    EmptyImplementation { field: &'static str },
}

impl CapabilitiesError {
    /// The configured field the value came from, as the document names it (a host's config
    /// names its refusal by it).
    pub fn field(&self) -> &'static str {
        match self {
            CapabilitiesError::MaxRetryAttempts(_) => "reliability.maxRetryAttempts",
            CapabilitiesError::TruncationBudgetMultiplier(_) => {
                "reliability.truncationBudgetMultiplier"
            }
            CapabilitiesError::ProtocolVersion(_) => "protocolVersion",
            CapabilitiesError::MaxNodeExecutions => "limits.maxNodeExecutions",
            CapabilitiesError::MaxRunDurationMs(_) => "limits.maxRunDurationMs",
            CapabilitiesError::Duplicate { field, .. } => field,
            CapabilitiesError::KindLength { .. } => "envelopeKinds",
            CapabilitiesError::ServedSchemaShadowsEmbedded { .. } => "servedSchemas",
            CapabilitiesError::EmptyImplementation { field } => match *field {
                "name" => "implementation.name",
                "version" => "implementation.version",
                _ => "implementation",
            },
        }
    }
}

impl ReliabilityConfig {
    /// Checks the bounds of the reliability settings ([`MAX_RETRY_ATTEMPTS_RANGE`],
    /// [`TRUNCATION_MULTIPLIER_RANGE`]): the one check both the capabilities document
    /// ([`CapabilitiesConfig::validate`]) and the operator's config (its `reliability`
    /// section) run.
    pub fn validate(&self) -> Result<(), CapabilitiesError> {
        if !MAX_RETRY_ATTEMPTS_RANGE.contains(&self.max_retry_attempts) {
            return Err(CapabilitiesError::MaxRetryAttempts(self.max_retry_attempts));
        }
        // NaN fails `contains` too.
        if !TRUNCATION_MULTIPLIER_RANGE.contains(&self.truncation_budget_multiplier) {
            return Err(CapabilitiesError::TruncationBudgetMultiplier(
                self.truncation_budget_multiplier,
            ));
        }
        Ok(())
    }
}

impl CapabilitiesConfig {
    /// Checks every bound the document schema sets on configured values.
    pub fn validate(&self) -> Result<(), CapabilitiesError> {
        self.reliability.validate()?;
        if !is_protocol_version(&self.protocol_version) {
            return Err(CapabilitiesError::ProtocolVersion(
                self.protocol_version.clone(),
            ));
        }
        if self.limits.max_node_executions == Some(0) {
            return Err(CapabilitiesError::MaxNodeExecutions);
        }
        if let Some(ms) = self.limits.max_run_duration_ms.filter(|ms| *ms < 1000) {
            return Err(CapabilitiesError::MaxRunDurationMs(ms));
        }
        for (field, list) in [
            ("aiProviders.supported", &self.providers),
            ("fixtures", &self.fixtures),
        ] {
            if let Some(value) = first_duplicate(list) {
                return Err(CapabilitiesError::Duplicate { field, value });
            }
        }
        for (index, k) in self.envelope_kinds.iter().enumerate() {
            let len = k.chars().count();
            if !(1..=256).contains(&len) {
                return Err(CapabilitiesError::KindLength { index, len });
            }
        }
        if let Some(kind) = self
            .served_schemas
            .keys()
            .find(|k| schema::kind_payload_schema(k).is_some())
        {
            return Err(CapabilitiesError::ServedSchemaShadowsEmbedded { kind: kind.clone() });
        }
        for (field, v) in [
            ("name", &self.implementation.name),
            ("version", &self.implementation.version),
        ] {
            if v.is_empty() {
                return Err(CapabilitiesError::EmptyImplementation { field });
            }
        }
        Ok(())
    }

    /// `supportedEnvelopes`: universal kinds first (when any kind is supported), then the rest.
    pub fn advertised_kinds(&self) -> Vec<String> {
        if self.envelope_kinds.is_empty() {
            return Vec::new();
        }
        crate::envelope::universal_first(&self.envelope_kinds)
    }

    /// The payload schema served for `kind`: embedded, else host-served.
    pub fn served_schema(&self, kind: &str) -> Option<&Value> {
        schema::kind_payload_schema(kind)
            .or_else(|| self.served_schemas.get(kind).map(|s| &s.schema))
    }

    /// The posture to advertise: `strict` only when asked for and every served
    /// schema of an advertised kind passes the Tier-1 walk.
    pub fn advertised_tier1(&self) -> TierOneSubsetCompliance {
        match self.tier_one_subset_compliance {
            TierOneSubsetCompliance::Off => TierOneSubsetCompliance::Off,
            TierOneSubsetCompliance::Warn => TierOneSubsetCompliance::Warn,
            TierOneSubsetCompliance::Strict => {
                let all_pass = self
                    .advertised_kinds()
                    .iter()
                    .filter_map(|k| self.served_schema(k))
                    .all(|s| tier1::check(s).is_empty());
                if all_pass {
                    TierOneSubsetCompliance::Strict
                } else {
                    TierOneSubsetCompliance::Warn
                }
            }
        }
    }
}

/// Whether `v` is a version in the spec's grammar (`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`,
/// RFC 0149 §C), of any major.
pub fn is_version(v: &str) -> bool {
    let number = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    matches!(v.split_once('.'), Some((major, minor)) if number(major) && number(minor))
}

/// Whether `v` is a v1 version this host can advertise (`1.<minor>`).
fn is_protocol_version(v: &str) -> bool {
    is_version(v) && v.split_once('.').is_some_and(|(major, _)| major == "1")
}

fn first_duplicate(list: &[String]) -> Option<String> {
    list.iter()
        .enumerate()
        .find(|(i, v)| list[..*i].contains(v))
        .map(|(_, v)| v.clone())
}

/// Builds the discovery document from the host's configuration.
pub fn build(cfg: &CapabilitiesConfig) -> Result<CapabilitiesDocument, CapabilitiesError> {
    cfg.validate()?;
    let kinds = cfg.advertised_kinds();
    let schema_versions = kinds
        .iter()
        .filter_map(|k| {
            schema::kind_schema_version(k)
                .or_else(|| cfg.served_schemas.get(k).map(|s| s.schema_version))
                .map(|v| (k.clone(), v))
        })
        .collect();
    let r = &cfg.reliability;
    let families = CapabilityFamilies {
        protocol_version: cfg.protocol_version.clone(),
        // One major (v1) served: the list is the version itself, and so is the default.
        protocol_versions: Some(vec![cfg.protocol_version.clone()]),
        preferred_version: Some(cfg.protocol_version.clone()),
        supported_envelopes: kinds,
        schema_versions,
        limits: cfg.limits,
        envelope_strictness: Some(cfg.strictness),
        envelope_contracts: Some(EnvelopeContracts {
            advertised: cfg.envelope_contracts,
        }),
        envelopes: Some(Envelopes {
            reasoning: EnvelopeReasoning {
                supported: cfg.reasoning.supported,
                prompt_directive: cfg.reasoning.prompt_directive,
            },
            tier_one_subset_compliance: cfg.advertised_tier1(),
            reliability: Reliability {
                supported: r.supported,
                events: if r.supported {
                    RELIABILITY_EVENTS.iter().map(|e| (*e).to_owned()).collect()
                } else {
                    Vec::new()
                },
                max_retry_attempts: r.max_retry_attempts,
                completion: Completion {
                    distinguishes_truncation: r.distinguishes_truncation,
                    truncation_budget_multiplier: r.truncation_budget_multiplier,
                },
            },
        }),
        conformance: Some(Conformance {
            mock_agent: cfg.mock_agent,
        }),
        agents: Some(Agents {
            supported: cfg.agents_supported,
            reasoning: AgentReasoning {
                verbosity: cfg.reasoning.verbosity,
                streaming: cfg.reasoning.streaming,
            },
        }),
        observability: (cfg.test_seams != TestSeams::default()).then_some(Observability {
            test_seams: cfg.test_seams,
        }),
        secrets: Some({
            let supported = !cfg.secret_scopes.is_empty();
            Secrets {
                supported,
                scopes: dedup(&cfg.secret_scopes),
                resolution: supported.then_some(SecretResolution::HostManaged),
            }
        }),
        webhooks: cfg.webhooks.then(|| Webhooks {
            supported: true,
            signature_algorithms: vec![crate::webhook::SIGNATURE_ALGORITHM.to_owned()],
        }),
        extensions: Some(Extensions {
            interrupts: Some(InterruptExtensions {
                signed_callback_tokens: cfg.interrupt_tokens,
                profiles: vec![
                    crate::run::quorum::QUORUM_PROFILE.to_owned(),
                    crate::run::waits::CASCADE_CANCEL_PROFILE.to_owned(),
                ],
            }),
        }),
        ai_providers: Some(AiProviders {
            supported: cfg.providers.clone(),
            max_inline_media_bytes: cfg.max_inline_media_bytes,
        }),
        runs: Some(Runs::served()),
        mcp: cfg.tools.then(Mcp::client),
        tool_catalog: cfg.tool_catalog.then(|| ToolCatalog {
            supported: true,
            sources: vec!["mcp".to_owned(), "host-extension".to_owned()],
            session_lifecycle: false,
        }),
        host: cfg.tools.then_some(HostServices {
            tool_hooks: Some(ToolHooks {
                supported: true,
                pre_post_events: true,
                per_tool_authorization: false,
                per_tool_rate_limit: false,
            }),
        }),
        fixtures: Some(cfg.fixtures.clone()),
        supported_transports: Some(dedup(&cfg.transports)),
        implementation: Some(cfg.implementation.clone()),
        http_client: cfg.http_client.clone(),
        sub_workflow: SubWorkflow::of(&cfg.node_types),
        node_types: (!cfg.node_types.is_empty()).then(|| cfg.node_types.clone()),
        event_stream: cfg.event_stream.clone(),
        test_seams: (!cfg.test_seam_paths.is_empty()).then(|| TestSeamPaths {
            paths: cfg.test_seam_paths.clone(),
        }),
    };
    Ok(CapabilitiesDocument {
        capabilities: families.clone(),
        families,
    })
}

/// The list without repeats, first occurrence kept (the schema says `uniqueItems`).
fn dedup<T: PartialEq + Copy>(list: &[T]) -> Vec<T> {
    let mut out = Vec::with_capacity(list.len());
    for v in list {
        if !out.contains(v) {
            out.push(*v);
        }
    }
    out
}

impl CapabilitiesDocument {
    /// The document as JSON (root families first, then the `capabilities` mirror).
    pub fn to_value(&self) -> Value {
        // Plain structs of strings, numbers and maps with string keys: cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}
