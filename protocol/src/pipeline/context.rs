//! What every step of the pipeline reads: the host's policy and the node's envelope contract
//! (also the capabilities document's and the workflow definition's types), the engine-limit
//! counters, one call's [`Context`], and the helpers that stamp and quote alike in every step.
//! A leaf of `pipeline`, so the steps never import the module that calls them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::parse::InputLimits;
use crate::envelope::ContentTrust;
use crate::events::RunEventDoc;
use crate::redact::Redactor;
use crate::schema::CompiledSchema;

/// `envelopeStrictness` from the capabilities document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strictness {
    #[default]
    Warn,
    Strict,
}

/// What to do with an envelope outside a contract.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalMode {
    /// `node.failed` with `envelope_contract_violation` (the spec default).
    #[default]
    FailNode,
    /// `log.appended` warning; the envelope is dropped and the node goes on.
    DiscardAndWarn,
}

/// An envelope contract: the non-universal kinds accepted, and the refusal mode.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvelopeContract {
    pub accepts: Vec<String>,
    #[serde(default)]
    pub refusal_mode: RefusalMode,
}

/// Host-wide configuration: what the capabilities document advertises.
#[derive(Debug, Default)]
pub struct HostPolicy {
    /// `supportedEnvelopes`; `None` accepts any kind at the kind step.
    pub supported_envelopes: Option<Vec<String>>,
    /// `schemaVersions`; kinds with an embedded schema fall back to its version.
    pub schema_versions: BTreeMap<String, u32>,
    pub strictness: Strictness,
    /// Payload schemas of vendor kinds (compiled once, network resolution disabled).
    pub kind_schemas: BTreeMap<String, CompiledSchema>,
    /// The host-level envelope contract of the node's typeId, checked before the node's own.
    pub host_contract: Option<EnvelopeContract>,
    pub input_limits: InputLimits,
}

/// One engine-limit counter: `current` uses so far this turn/run, `cap` the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    pub current: u64,
    pub cap: u64,
}

/// Engine-limit counters as they stand before this envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counters {
    #[serde(default)]
    pub envelopes_per_turn: Option<Counter>,
    #[serde(default)]
    pub schema_rounds: Option<Counter>,
    #[serde(default)]
    pub clarification_rounds: Option<Counter>,
}

/// Everything one call needs besides the envelope, the dedup store and the event factory.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub host: &'a HostPolicy,
    /// The run's SR-1 redactor (built once per run from its secrets).
    pub redactor: &'a Redactor,
    /// The emitting node: stamped on every projected event.
    pub node_id: &'a str,
    /// The node's own envelope contract (`None` = no node-level restriction).
    pub node_contract: Option<&'a EnvelopeContract>,
    pub run_trust_boundary: Option<ContentTrust>,
    pub counters: Counters,
    /// The envelope is being presented as the resolution of an approval gate.
    pub approval_gate_context: bool,
    /// Overrides the contracts' refusal mode at every gate (the seam's `projectTo.refusalMode`).
    pub refusal_mode: Option<RefusalMode>,
    /// RFC 3339 timestamp stamped on projected events (this crate reads no clock).
    pub timestamp: &'a str,
}

impl<'a> Context<'a> {
    pub fn new(
        host: &'a HostPolicy,
        redactor: &'a Redactor,
        node_id: &'a str,
        timestamp: &'a str,
    ) -> Self {
        Context {
            host,
            redactor,
            node_id,
            node_contract: None,
            run_trust_boundary: None,
            counters: Counters::default(),
            approval_gate_context: false,
            refusal_mode: None,
            timestamp,
        }
    }
}

/// Stamps the pipeline's common fields on a projected event.
pub(crate) fn stamp(
    doc: RunEventDoc,
    ctx: &Context<'_>,
    corr: &str,
    trust: ContentTrust,
) -> RunEventDoc {
    doc.with_node(ctx.node_id).caused_by(corr).with_trust(trust)
}

/// A kind name as quoted in messages: bounded, control characters dropped.
pub(crate) fn quote_kind(kind: &str) -> String {
    const MAX: usize = 64;
    let mut out: String = kind.chars().filter(|c| !c.is_control()).take(MAX).collect();
    if kind.chars().count() > MAX {
        out.push('…');
    }
    out
}
