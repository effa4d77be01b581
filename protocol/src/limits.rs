//! The engine's limits and their bounds, named once: the `limits` object the capabilities
//! document advertises and the host profile enforces ([`Limits`], a breach emits
//! `cap.breached`), and the bounds and defaults of the reliability settings the retry router
//! applies. Below both the router and the capabilities document, so each reads one value.

use serde::{Deserialize, Serialize};

/// Bounds of `envelopes.reliability.maxRetryAttempts`.
pub const MAX_RETRY_ATTEMPTS_RANGE: std::ops::RangeInclusive<u32> = 1..=16;
/// Bounds of `envelopes.reliability.completion.truncationBudgetMultiplier`.
pub const TRUNCATION_MULTIPLIER_RANGE: std::ops::RangeInclusive<f64> = 1.0..=8.0;

/// Default truncation budget multiplier: a truncated answer is retried with twice the
/// output budget (RFC 0033).
pub const DEFAULT_TRUNCATION_BUDGET_MULTIPLIER: f64 = 2.0;
/// Default `envelopes.reliability.maxRetryAttempts`.
pub const DEFAULT_MAX_RETRY_ATTEMPTS: u32 = 3;

/// Engine-enforced limits; a breach emits `cap.breached`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    pub clarification_rounds: u32,
    pub schema_rounds: u32,
    pub envelopes_per_turn: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_node_executions: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_run_duration_ms: Option<u64>,
}

/// Default `limits.clarificationRounds`.
pub const DEFAULT_CLARIFICATION_ROUNDS: u32 = 3;
/// Default `limits.schemaRounds`: provider calls per emission.
pub const DEFAULT_SCHEMA_ROUNDS: u32 = 3;
/// Default `limits.envelopesPerTurn`.
pub const DEFAULT_ENVELOPES_PER_TURN: u32 = 32;
/// Default `limits.maxNodeExecutions`.
pub const DEFAULT_MAX_NODE_EXECUTIONS: u32 = 1000;

impl Default for Limits {
    /// This host's defaults (the host profile's, which the operator's config starts from):
    /// 3 / 3 / 32, 1000 node executions.
    fn default() -> Self {
        Limits {
            clarification_rounds: DEFAULT_CLARIFICATION_ROUNDS,
            schema_rounds: DEFAULT_SCHEMA_ROUNDS,
            envelopes_per_turn: DEFAULT_ENVELOPES_PER_TURN,
            max_node_executions: Some(DEFAULT_MAX_NODE_EXECUTIONS),
            max_run_duration_ms: None,
        }
    }
}
