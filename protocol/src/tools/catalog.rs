//! The tool catalog's entries (`GET /v1/tools`, `tool-catalog.md` v1 §C and v2): a
//! [`ToolDescriptor`] per MCP tool a tenant may use, in the spec's closed vocabularies. The
//! host assigns the safety tier, replay policy, approval and egress itself from its own
//! rules ([`super::policy`]); an MCP server's `annotations` are untrusted hints and never
//! copied.

use serde::{Deserialize, Serialize};

use super::policy::{
    CatalogTool, SafetyTier, UnknownOutcome, after_unknown_outcome, needs_approval,
};

// The ids are the policy's (an offered tool names itself by the same id).
pub use super::policy::{parse_tool_id, tool_id};

/// Which surface backs a tool (`source`; this host projects MCP only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ToolSource {
    Mcp,
    /// An exec-tier tool: the spec allows `exec` only on a host-extension source (RFC 0069,
    /// `tool-catalog.md` §C-1), and an admin classing a server's tool `exec` makes it the
    /// host's own carve-out (it always waits for approval).
    HostExtension,
}

/// Whether a call waits for a person (`approval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Approval {
    Never,
    /// The node's `requireApproval` decides; without one, the tier does (a write waits, a
    /// read does not).
    Conditional,
    Always,
}

/// How a call behaves on replay (`replayPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ReplayPolicy {
    Deterministic,
    /// May be called again when a call's outcome is unknown (a read).
    Idempotent,
    /// Never repeated: a replay answers from the recorded result, and a call whose outcome
    /// is unknown is reported as such, not made again (a write or exec).
    NonDeterministic,
}

/// How a call reaches the network (`egress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Egress {
    None,
    SafeFetch,
    /// The host's MCP client calls the admin-declared server (not the model, and not the
    /// HTTP node's guarded fetch).
    HostMediated,
    HostOwned,
}

/// What a caller must hold (`auth`); never credential material.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ToolAuth {
    /// The host sends a stored credential with each call (the ToolServer's `headersFrom`).
    pub credential_ref: bool,
}

/// One catalog entry (`schemas/tool-descriptor.schema.json`). `inputSchema` is absent: the
/// host keeps no tool's schema between runs (a worker reads it from the server when a run
/// offers the tool), and the catalog does not invent one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolDescriptor {
    /// `mcp:<server>/<tool>` ([`tool_id`]).
    pub tool_id: String,
    pub source: ToolSource,
    /// The tool's name on its server.
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Host-assigned: the ToolServer's `toolTiers`, else `write`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub safety_tier: SafetyTier,
    pub approval: Approval,
    pub replay_policy: ReplayPolicy,
    pub egress: Egress,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<ToolAuth>,
}

impl ToolDescriptor {
    /// The entry of `tool` (as a ToolServer's status lists it) on the server a Workflow names
    /// `server`; `credentials`: the server is called with headers from Secrets.
    pub fn of(server: &str, tool: &CatalogTool, credentials: bool) -> ToolDescriptor {
        ToolDescriptor {
            tool_id: tool_id(server, &tool.name),
            source: match tool.tier {
                SafetyTier::Exec => ToolSource::HostExtension,
                SafetyTier::Read | SafetyTier::Write => ToolSource::Mcp,
            },
            title: tool.name.clone(),
            description: tool.description.clone(),
            safety_tier: tool.tier,
            approval: approval(tool.tier),
            replay_policy: match after_unknown_outcome(tool.tier) {
                UnknownOutcome::CallAgain => ReplayPolicy::Idempotent,
                UnknownOutcome::ReportUnknown => ReplayPolicy::NonDeterministic,
            },
            egress: Egress::HostMediated,
            auth: credentials.then_some(ToolAuth {
                credential_ref: true,
            }),
        }
    }
}

/// `approval` from the one approval rule ([`needs_approval`]) over every node policy: a
/// call no policy can spare waits `always`, one no policy can make wait `never`, else
/// `conditional`.
fn approval(tier: SafetyTier) -> Approval {
    let outcomes = [None, Some(true), Some(false)].map(|p| needs_approval(tier, p));
    if outcomes.iter().all(|w| *w) {
        Approval::Always
    } else if outcomes.iter().all(|w| !*w) {
        Approval::Never
    } else {
        Approval::Conditional
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, tier: SafetyTier) -> CatalogTool {
        CatalogTool {
            name: name.into(),
            description: Some("d".into()),
            tier,
        }
    }

    #[test]
    fn tool_ids_round_trip() {
        assert_eq!(tool_id("search", "lookup"), "mcp:search/lookup");
        assert_eq!(
            parse_tool_id("mcp:search/lookup"),
            Some(("search", "lookup"))
        );
        assert_eq!(parse_tool_id("mcp:search/a/b"), Some(("search", "a/b")));
        for bad in [
            "search/lookup",
            "mcp:search",
            "mcp:/x",
            "mcp:s/",
            "openwop:x/y",
        ] {
            assert_eq!(parse_tool_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_host_assigns_every_policy_from_the_tier() {
        let read = ToolDescriptor::of("web", &tool("lookup", SafetyTier::Read), false);
        assert_eq!(
            serde_json::to_value(&read).unwrap(),
            json!({"toolId": "mcp:web/lookup", "source": "mcp", "title": "lookup",
                   "description": "d", "safetyTier": "read", "approval": "conditional",
                   "replayPolicy": "idempotent", "egress": "host-mediated"})
        );
        let write = ToolDescriptor::of("web", &tool("post", SafetyTier::Write), true);
        assert_eq!(write.replay_policy, ReplayPolicy::NonDeterministic);
        assert_eq!(write.approval, Approval::Conditional);
        assert_eq!(
            serde_json::to_value(&write).unwrap()["auth"],
            json!({"credentialRef": true})
        );
        let exec = ToolDescriptor::of("sh", &tool("run", SafetyTier::Exec), false);
        assert_eq!(exec.approval, Approval::Always);
        assert_eq!(exec.replay_policy, ReplayPolicy::NonDeterministic);
        // tool-descriptor.schema.json: exec only on a host-extension source.
        assert_eq!(exec.source, ToolSource::HostExtension);
    }
}
