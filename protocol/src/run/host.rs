//! The host profile: the limits and postures this host runs with. The operator builds it
//! from its configuration, serves it as capabilities (`/.well-known/openwop`) and freezes it
//! in each run's snapshot; the worker enforces exactly what the snapshot says. One value,
//! so what discovery advertises is what a run gets.

use serde::{Deserialize, Serialize};

use crate::limits::{DEFAULT_TRUNCATION_BUDGET_MULTIPLIER, Limits, TRUNCATION_MULTIPLIER_RANGE};
use crate::pipeline::{HostPolicy, Strictness};
use crate::retry::reasoning::ReasoningPosture;
use crate::tier1::Tier1Posture;

/// Largest truncation budget multiplier (RFC 0033).
pub const MAX_MULTIPLIER: f64 = *TRUNCATION_MULTIPLIER_RANGE.end();
/// Most provider calls of one emission whatever a node asks for.
pub const MAX_SCHEMA_ROUNDS: u32 = 16;
/// Default bound of one provider HTTP response body (8 MiB): far above any answer a model
/// gives within an output budget, small enough that a broken or hostile endpoint cannot
/// exhaust the worker's memory.
pub const DEFAULT_MAX_PROVIDER_RESPONSE_BYTES: u64 = 8 * 1024 * 1024;
/// Default `runs.durableWaitThresholdMs`: a wait (a `core.delay`) up to this long sleeps in
/// the worker pod; a longer one is recorded in the run's log and the pod exits, the operator
/// starting a worker again at the wake time. 30 s keeps every conformance timing (running
/// within 5 s, cancel within 5 s) in one pod.
pub const DEFAULT_DURABLE_WAIT_THRESHOLD_MS: u64 = 30_000;
/// Default `runs.maxSubWorkflowDepth`: how deep child runs may nest (a root run is depth 0;
/// its child 1). Deep enough for real compositions, shallow enough that a workflow calling
/// itself fails early with a clear error instead of filling the cluster with Runs.
pub const DEFAULT_MAX_SUB_WORKFLOW_DEPTH: u32 = 8;

/// What the host enforces on every run. Its `Default` is the host's defaults, once: the
/// operator's configuration starts from it and the chart's values must agree with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HostProfile {
    /// `limits`: clarification rounds per node, provider calls per emission (schemaRounds),
    /// envelopes per turn, node executions per run, run duration.
    pub limits: Limits,
    /// `envelopeStrictness`.
    pub strictness: Strictness,
    /// `tierOneSubsetCompliance`.
    pub tier_one_subset_compliance: Tier1Posture,
    /// `envelopes.reasoning.promptDirective`.
    pub reasoning_directive: ReasoningPosture,
    /// Truncation budget multiplier (1..=8), the default of every prompt node.
    pub truncation_budget_multiplier: f64,
    /// `maxProviderResponseBytes` (chart `limits.maxProviderResponseBytes`): the largest
    /// provider HTTP response body the worker reads; a larger one fails the call.
    pub max_provider_response_bytes: u64,
    /// Nodes of one run executing at once when its workflow sets no `maxConcurrency`.
    pub node_concurrency: u32,
    /// What the HTTP node's calls may reach and read (chart `egress.allowHosts`,
    /// `limits.maxHttpResponseBytes`); advertised as `httpClient`.
    pub http: crate::http::HttpClientProfile,
    /// `runs.durableWaitThresholdMs`: a wait up to this long sleeps in the pod; a longer one
    /// lets the pod exit and the operator wakes the run.
    pub durable_wait_threshold_ms: u64,
    /// `runs.maxSubWorkflowDepth`: the deepest a child run may be nested.
    pub max_sub_workflow_depth: u32,
    /// The host opted in to the RFC 0023 mock agent for this run's tenant (chart
    /// `conformance.mockAgentNamespaces`), so its workflow may use
    /// `core.conformance.mock-agent` whatever its id
    /// ([`crate::run::nodes::mock_agent_allowed`]). Per run, not advertised: the operator
    /// sets it for the run's namespace when it writes the snapshot, the worker obeys it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub mock_agent: bool,
}

impl Default for HostProfile {
    fn default() -> Self {
        HostProfile {
            limits: Limits::default(),
            strictness: Strictness::default(),
            tier_one_subset_compliance: Tier1Posture::default(),
            reasoning_directive: ReasoningPosture::default(),
            truncation_budget_multiplier: DEFAULT_TRUNCATION_BUDGET_MULTIPLIER,
            max_provider_response_bytes: DEFAULT_MAX_PROVIDER_RESPONSE_BYTES,
            node_concurrency: crate::schedule::DEFAULT_NODE_CONCURRENCY,
            http: crate::http::HttpClientProfile::default(),
            durable_wait_threshold_ms: DEFAULT_DURABLE_WAIT_THRESHOLD_MS,
            max_sub_workflow_depth: DEFAULT_MAX_SUB_WORKFLOW_DEPTH,
            mock_agent: false,
        }
    }
}

impl HostProfile {
    /// The envelope pipeline's host policy.
    pub fn pipeline_policy(&self) -> HostPolicy {
        HostPolicy {
            strictness: self.strictness,
            ..HostPolicy::default()
        }
    }

    /// Clarification rounds a node may use: its own `clarificationRounds` when lower than the
    /// host's limit, else the limit.
    pub fn clarification_rounds(&self, node: Option<u64>) -> u64 {
        let host = u64::from(self.limits.clarification_rounds);
        node.map_or(host, |n| n.min(host))
    }

    /// Provider calls per emission: the node's `schemaRounds` when lower than the host's
    /// limit, else the limit (at least 1).
    pub fn schema_rounds(&self, node: Option<u64>) -> u32 {
        let host = self.limits.schema_rounds.clamp(1, MAX_SCHEMA_ROUNDS);
        node.map_or(host, |n| (n.min(u64::from(host)) as u32).max(1))
    }

    /// Whether this run's workflow `workflow_id` may use the mock agent.
    pub fn mock_agent_allowed(&self, workflow_id: &str) -> bool {
        super::nodes::mock_agent_allowed(workflow_id, self.mock_agent)
    }

    /// The truncation multiplier of a node: its own `truncationMultiplier` (1..=8) or the
    /// host's.
    pub fn multiplier(&self, node: Option<f64>) -> f64 {
        node.filter(|m| m.is_finite())
            .unwrap_or(self.truncation_budget_multiplier)
            .clamp(*TRUNCATION_MULTIPLIER_RANGE.start(), MAX_MULTIPLIER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_settings_may_lower_but_never_exceed_the_host_limits() {
        let mut h = HostProfile::default();
        h.limits.clarification_rounds = 3;
        h.limits.schema_rounds = 4;
        assert_eq!(h.clarification_rounds(None), 3);
        assert_eq!(h.clarification_rounds(Some(1)), 1);
        assert_eq!(h.clarification_rounds(Some(9)), 3);
        assert_eq!(h.schema_rounds(None), 4);
        assert_eq!(h.schema_rounds(Some(2)), 2);
        assert_eq!(h.schema_rounds(Some(0)), 1);
        assert_eq!(h.schema_rounds(Some(99)), 4);
        assert_eq!(h.multiplier(None), 2.0);
        assert_eq!(h.multiplier(Some(3.0)), 3.0);
        assert_eq!(h.multiplier(Some(50.0)), 8.0);
    }

    #[test]
    fn the_profile_round_trips_and_older_snapshots_get_defaults() {
        let h = HostProfile {
            strictness: Strictness::Strict,
            tier_one_subset_compliance: Tier1Posture::Off,
            reasoning_directive: ReasoningPosture::Mandatory,
            ..HostProfile::default()
        };
        let v = serde_json::to_value(&h).unwrap();
        assert_eq!(v["strictness"], "strict");
        assert_eq!(v["tierOneSubsetCompliance"], "off");
        assert_eq!(v["reasoningDirective"], "mandatory");
        assert_eq!(v["limits"]["clarificationRounds"], 3);
        assert_eq!(v["maxProviderResponseBytes"], 8 * 1024 * 1024);
        assert_eq!(serde_json::from_value::<HostProfile>(v).unwrap(), h);
        let empty: HostProfile = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, HostProfile::default());
        assert_eq!(h.pipeline_policy().strictness, Strictness::Strict);
    }

    #[test]
    fn the_mock_agent_opt_in_travels_in_the_profile() {
        let h = HostProfile::default();
        assert!(h.mock_agent_allowed("conformance-x"));
        assert!(!h.mock_agent_allowed("team-agent"));
        assert!(serde_json::to_value(&h).unwrap().get("mockAgent").is_none());
        let opted: HostProfile = serde_json::from_str(r#"{"mockAgent": true}"#).unwrap();
        assert!(opted.mock_agent_allowed("team-agent"));
        assert_eq!(serde_json::to_value(&opted).unwrap()["mockAgent"], true);
    }
}
