//! The host profile: the limits and postures this host runs with. The operator builds it
//! from its configuration, serves it as capabilities (`/.well-known/openwop`) and freezes it
//! in each run's snapshot; the worker enforces exactly what the snapshot says. One value,
//! so what discovery advertises is what a run gets.

use serde::{Deserialize, Serialize};

use crate::capabilities::Limits;
use crate::pipeline::{HostPolicy, Strictness};
use crate::retry::reasoning::ReasoningPosture;
use crate::workflow_check::Tier1Posture;

/// Largest truncation budget multiplier (RFC 0033).
pub const MAX_MULTIPLIER: f64 = 8.0;
/// Most provider calls of one emission whatever a node asks for.
pub const MAX_SCHEMA_ROUNDS: u32 = 16;
/// Default bound of one provider HTTP response body (8 MiB): far above any answer a model
/// gives within an output budget, small enough that a broken or hostile endpoint cannot
/// exhaust the worker's memory.
pub const DEFAULT_MAX_PROVIDER_RESPONSE_BYTES: u64 = 8 * 1024 * 1024;

/// What the host enforces on every run.
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
}

impl Default for HostProfile {
    fn default() -> Self {
        HostProfile {
            limits: Limits::default(),
            strictness: Strictness::Warn,
            tier_one_subset_compliance: Tier1Posture::Warn,
            reasoning_directive: ReasoningPosture::Advisory,
            truncation_budget_multiplier: 2.0,
            max_provider_response_bytes: DEFAULT_MAX_PROVIDER_RESPONSE_BYTES,
            node_concurrency: crate::schedule::DEFAULT_NODE_CONCURRENCY,
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

    /// The truncation multiplier of a node: its own `truncationMultiplier` (1..=8) or the
    /// host's.
    pub fn multiplier(&self, node: Option<f64>) -> f64 {
        node.filter(|m| m.is_finite())
            .unwrap_or(self.truncation_budget_multiplier)
            .clamp(1.0, MAX_MULTIPLIER)
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
}
