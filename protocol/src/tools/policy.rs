//! What a node may do with tools: the host's safety tier of each tool, the set of tools a
//! node offers its model (and the refusal of any other name), which calls wait for a
//! person, what happens to a call whose outcome is unknown, and the round cap.
//!
//! Trust: a tool's tier is the host's decision (the admin's classification in the
//! ToolServer, else [`SafetyTier::UNCLASSIFIED`]); an MCP server's `annotations`
//! (`readOnlyHint`, `destructiveHint`, …) are claims by the party being classified and are
//! never read as a tier (v2 `tool-catalog.md` §The descriptor; threat model §4.4, invariant
//! `tool-annotations-untrusted`). A model's call names a tool; only names the node offered
//! resolve (`prompt-injection-tool-allowlist`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::config::ToolsConfig;
use crate::events::{CapBreached, CapKind, ErrorInfo};

/// How much harm a tool's call can do, as the host classifies it (the tool catalog's
/// `safetyTier` vocabulary without `pure`: a call that leaves the host is at least `read`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SafetyTier {
    /// Reads only: calling it again changes nothing.
    Read,
    /// Changes something outside the run.
    Write,
    /// Runs commands or code.
    Exec,
}

impl SafetyTier {
    /// The tier of an MCP tool nobody classified (v2 `tool-catalog.md`: an unclassified
    /// `source: "mcp"` tool MUST be `write`).
    pub const UNCLASSIFIED: SafetyTier = SafetyTier::Write;

    pub fn as_str(self) -> &'static str {
        match self {
            SafetyTier::Read => "read",
            SafetyTier::Write => "write",
            SafetyTier::Exec => "exec",
        }
    }
}

/// An admin's classification of one tool of a server (`ToolServer.spec.toolTiers[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TierAssignment {
    /// The tool's name as the server lists it.
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9_.-]+$"))]
    pub name: String,
    /// Its tier.
    pub tier: SafetyTier,
}

/// Longest tool description kept in a catalog or offered to a model (characters): the
/// description is the server's text, read by the model, so it is bounded like any untrusted
/// input.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// One tool as an MCP server lists it (`tools/list` → `tools[]`), the members the host reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredTool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// The tool's JSON Schema for its arguments.
    #[serde(default = "empty_object_schema")]
    pub input_schema: Value,
    /// The server's hints (`readOnlyHint`, …): kept to show, never used to classify.
    #[serde(default)]
    pub annotations: Option<Value>,
}

fn empty_object_schema() -> Value {
    json!({"type": "object"})
}

/// The host's tier for `tool`: the admin's classification, else [`SafetyTier::UNCLASSIFIED`].
/// Takes no annotations on purpose.
pub fn classify(tool: &str, assignments: &[TierAssignment]) -> SafetyTier {
    assignments
        .iter()
        .find(|a| a.name == tool)
        .map_or(SafetyTier::UNCLASSIFIED, |a| a.tier)
}

/// One tool of a server's catalog as the host publishes it (`ToolServer.status.tools[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogTool {
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// The server's description, cut to [`MAX_DESCRIPTION_CHARS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub description: Option<String>,
    /// The host's tier ([`classify`]).
    pub tier: SafetyTier,
}

impl CatalogTool {
    /// The catalog entry of a listed tool.
    pub fn of(tool: &DiscoveredTool, assignments: &[TierAssignment]) -> CatalogTool {
        CatalogTool {
            name: tool.name.clone(),
            description: bounded_description(tool.description.as_deref()),
            tier: classify(&tool.name, assignments),
        }
    }
}

fn bounded_description(d: Option<&str>) -> Option<String> {
    d.filter(|d| !d.is_empty())
        .map(|d| super::within(d, MAX_DESCRIPTION_CHARS))
}

/// Whether a call waits for a person: exec-tier tools always; otherwise the node's
/// `requireApproval` when it has one for the tool (`policy`, from
/// [`super::config::ToolsEntry::approval_for`]), else write-tier tools do and read-tier tools
/// do not.
pub fn needs_approval(tier: SafetyTier, policy: Option<bool>) -> bool {
    match (tier, policy) {
        (SafetyTier::Exec, _) => true,
        (_, Some(decided)) => decided,
        (SafetyTier::Read, None) => false,
        (SafetyTier::Write, None) => true,
    }
}

/// What to do with a call recorded as made (`agent.toolCalled`) whose return never was (the
/// worker died in between): nobody knows whether it took effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownOutcome {
    /// Make it again: a read changes nothing.
    CallAgain,
    /// Never repeat it silently: record it as returned with
    /// [`super::record::ToolStatus::Unknown`] and tell the model so. The model may ask
    /// again; that is a new call, decided (and approved) like any other.
    ReportUnknown,
}

/// The kill rule, per tier.
pub fn after_unknown_outcome(tier: SafetyTier) -> UnknownOutcome {
    match tier {
        SafetyTier::Read => UnknownOutcome::CallAgain,
        SafetyTier::Write | SafetyTier::Exec => UnknownOutcome::ReportUnknown,
    }
}

/// Longest model-facing tool name: what OpenAI, Anthropic and Gemini all accept
/// (`[A-Za-z0-9_-]`, at most 64, Gemini's starting with a letter or `_`).
pub const MAX_MODEL_NAME_CHARS: usize = 64;

/// Most calls of one model turn the node runs; the rest are refused (the model is told).
pub const MAX_CALLS_PER_ROUND: usize = 16;

/// One server's tools as the worker found them: what `tools/list` returned and the admin's
/// classification.
#[derive(Debug, Clone, Copy)]
pub struct ServerTools<'a> {
    pub server: &'a str,
    pub tools: &'a [DiscoveredTool],
    pub tiers: &'a [TierAssignment],
}

/// A tool the node offers its model.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedTool {
    /// The name the model sees and calls (see [`ToolSet::build`]).
    pub model_name: String,
    pub server: String,
    /// The tool's name on its server.
    pub tool: String,
    pub description: Option<String>,
    pub input_schema: Value,
    pub tier: SafetyTier,
    /// Whether its calls wait for a person ([`needs_approval`]).
    pub needs_approval: bool,
}

impl OfferedTool {
    /// The tool's catalog id, `mcp:<server>/<tool>` (`tool-catalog.md`'s `<scope>:` form;
    /// server names and tool names contain no `/`).
    pub fn tool_id(&self) -> String {
        tool_id(&self.server, &self.tool)
    }
}

/// The `toolId` of `server`'s tool `tool` (the `mcp:` scope of `tool-catalog.md` §C): the
/// ToolServer's name as a Workflow names it, then the tool's name on that server.
pub fn tool_id(server: &str, tool: &str) -> String {
    format!("{MCP_SCOPE}{server}/{tool}")
}

/// The `(server, tool)` of an MCP `toolId`, `None` for any other. A ToolServer's name has no
/// `/` (a Kubernetes name), so the first one ends it; a tool's name may hold more.
pub fn parse_tool_id(id: &str) -> Option<(&str, &str)> {
    let (server, tool) = id.strip_prefix(MCP_SCOPE)?.split_once('/')?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

const MCP_SCOPE: &str = "mcp:";

/// Why the tool set of a node cannot be built: the node fails with [`ToolSetError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolSetError {
    #[error(
        "ToolServer {server:?} is not available to this run (absent, not Ready, or not shared with this namespace)"
    )]
    ServerUnavailable { server: String },
    #[error(
        "ToolServer {server:?} does not list tool {tool:?}, which the node's config names; remove it from names or fix the server"
    )]
    ToolNotListed { server: String, tool: String },
    #[error("two offered tools would both be called {name:?}; rename one on its server")]
    NameCollision { name: String },
}

impl ToolSetError {
    /// The `node.failed` error code.
    pub fn code(&self) -> &'static str {
        match self {
            ToolSetError::ServerUnavailable { .. } => "tool_server_unavailable",
            ToolSetError::ToolNotListed { .. } => "tool_not_found",
            ToolSetError::NameCollision { .. } => "tool_name_collision",
        }
    }
}

/// Why a model's call is not run. The model gets the message as the call's result (a
/// refusal is an answer, not a node failure) and `agent.toolReturned` records
/// `status: forbidden` (RFC 0064 §C: the tool was never invoked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: RefusalReason,
    /// For the model: what happened and what it may do instead.
    pub message: String,
}

/// The kinds of [`Refusal`], as `error.details.reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalReason {
    /// The name is not one the node offered.
    NotOffered,
    /// The arguments are not a JSON object.
    BadArguments,
    /// More calls in one turn than [`MAX_CALLS_PER_ROUND`].
    TooManyCalls,
    /// A person rejected the call.
    ApprovalRejected,
}

impl RefusalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::NotOffered => "not-offered",
            RefusalReason::BadArguments => "bad-arguments",
            RefusalReason::TooManyCalls => "too-many-calls",
            RefusalReason::ApprovalRejected => "approval-rejected",
        }
    }
}

impl Refusal {
    /// The refusal of a name the node did not offer.
    pub fn not_offered(name: &str, offered: &[&str]) -> Refusal {
        Refusal {
            reason: RefusalReason::NotOffered,
            message: format!(
                "No tool is named {:?} here; the tools you may call are: {}.",
                crate::text::truncate(name, MAX_MODEL_NAME_CHARS),
                if offered.is_empty() {
                    "none".to_owned()
                } else {
                    offered.join(", ")
                }
            ),
        }
    }

    /// The refusal of arguments that are not an object.
    pub fn bad_arguments(why: &super::call::ArgumentsError) -> Refusal {
        Refusal {
            reason: RefusalReason::BadArguments,
            message: format!("The call was not made: {why}."),
        }
    }

    /// The refusal of call `index` (0-based) of a turn with more than [`MAX_CALLS_PER_ROUND`].
    pub fn too_many_calls(index: usize) -> Refusal {
        Refusal {
            reason: RefusalReason::TooManyCalls,
            message: format!(
                "The call was not made: at most {MAX_CALLS_PER_ROUND} tool calls run per turn and this was call {}; ask again in the next turn.",
                index + 1
            ),
        }
    }

    /// The refusal of a call a person rejected.
    pub fn approval_rejected() -> Refusal {
        Refusal {
            reason: RefusalReason::ApprovalRejected,
            message: "The call was not made: a person reviewing it rejected it.".to_owned(),
        }
    }

    /// `agent.toolReturned.error`: RFC 0064 §C reuses RFC 0049's `forbidden` with
    /// `details.scope: "tool"`.
    pub fn error_info(&self, tool_name: &str) -> ErrorInfo {
        ErrorInfo {
            code: FORBIDDEN_CODE.to_owned(),
            message: self.message.clone(),
            details: Some(json!({
                "scope": "tool",
                "toolName": tool_name,
                "reason": self.reason.as_str(),
            })),
            retryable: Some(false),
        }
    }
}

/// The error code of a refused call (RFC 0049's, reused by RFC 0064 §C).
pub const FORBIDDEN_CODE: &str = "forbidden";

/// The tools a node offers its model, by model-facing name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolSet {
    tools: Vec<OfferedTool>,
}

impl ToolSet {
    /// The node's tools: every declared tool of every declared server, with its tier and
    /// approval rule. A tool's model-facing name is its own name when that is a valid
    /// vendor name and no other offered tool has it; otherwise `<server>__<tool>`, made
    /// valid (other characters become `_`) and, when changed or too long, suffixed with 8
    /// hex digits of SHA-256(`server/tool`) so distinct tools never share a name. The
    /// names depend only on the inputs, so a replayed node offers the same names as long as
    /// it is given the same tools.
    pub fn build(
        config: &ToolsConfig,
        servers: &[ServerTools<'_>],
    ) -> Result<ToolSet, ToolSetError> {
        let mut picked: Vec<(&str, &DiscoveredTool, SafetyTier, bool)> = Vec::new();
        for entry in &config.entries {
            let found = servers
                .iter()
                .find(|s| s.server == entry.server)
                .ok_or_else(|| ToolSetError::ServerUnavailable {
                    server: entry.server.clone(),
                })?;
            if let Some(missing) = entry
                .names
                .iter()
                .flatten()
                .find(|n| !found.tools.iter().any(|t| &t.name == *n))
            {
                return Err(ToolSetError::ToolNotListed {
                    server: entry.server.clone(),
                    tool: missing.clone(),
                });
            }
            for tool in found.tools.iter().filter(|t| entry.allows(&t.name)) {
                let tier = classify(&tool.name, found.tiers);
                let approve = needs_approval(tier, entry.approval_for(&tool.name));
                picked.push((found.server, tool, tier, approve));
            }
        }
        let plain: Vec<String> = picked
            .iter()
            .map(|(s, t, ..)| model_name(s, &t.name, false))
            .collect();
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for n in &plain {
            *counts.entry(n.as_str()).or_default() += 1;
        }
        let mut tools = Vec::with_capacity(picked.len());
        for ((server, tool, tier, approve), plain) in picked.iter().zip(&plain) {
            let model_name = if counts[plain.as_str()] > 1 {
                model_name(server, &tool.name, true)
            } else {
                plain.clone()
            };
            if tools
                .iter()
                .any(|t: &OfferedTool| t.model_name == model_name)
            {
                return Err(ToolSetError::NameCollision { name: model_name });
            }
            tools.push(OfferedTool {
                model_name,
                server: (*server).to_owned(),
                tool: tool.name.clone(),
                description: bounded_description(tool.description.as_deref()),
                input_schema: tool.input_schema.clone(),
                tier: *tier,
                needs_approval: *approve,
            });
        }
        Ok(ToolSet { tools })
    }

    /// The offered tools, in config order.
    pub fn tools(&self) -> &[OfferedTool] {
        &self.tools
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The tool a model's call names, or the refusal to give the model instead.
    pub fn resolve(&self, model_name: &str) -> Result<&OfferedTool, Refusal> {
        self.tools
            .iter()
            .find(|t| t.model_name == model_name)
            .ok_or_else(|| {
                let offered: Vec<&str> = self.tools.iter().map(|t| t.model_name.as_str()).collect();
                Refusal::not_offered(model_name, &offered)
            })
    }
}

/// The model-facing name of `server`'s `tool` (see [`ToolSet::build`]).
fn model_name(server: &str, tool: &str, qualified: bool) -> String {
    let raw = if qualified {
        format!("{server}__{tool}")
    } else {
        tool.to_owned()
    };
    let valid_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let mut name: String = raw
        .chars()
        .map(|c| if valid_char(c) { c } else { '_' })
        .collect();
    if !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        name.insert_str(0, "t_");
    }
    if name == raw && name.len() <= MAX_MODEL_NAME_CHARS {
        return name;
    }
    let digest = hex::encode(Sha256::digest(format!("{server}/{tool}").as_bytes()));
    let suffix = &digest[..8];
    // ASCII only by now: byte truncation is character truncation.
    name.truncate(MAX_MODEL_NAME_CHARS - suffix.len() - 1);
    format!("{name}_{suffix}")
}

/// The node's rounds of tool calls are used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the model asked for tools in a round beyond the node's limit of {limit} (maxToolRounds); raise maxToolRounds or change the prompt so the model answers sooner"
)]
pub struct LoopLimitExceeded {
    pub limit: u32,
}

/// The `node.failed` code of [`LoopLimitExceeded`].
pub const LOOP_LIMIT_EXCEEDED: &str = "loop_limit_exceeded";

impl LoopLimitExceeded {
    pub fn error_info(&self) -> ErrorInfo {
        ErrorInfo {
            code: LOOP_LIMIT_EXCEEDED.to_owned(),
            message: self.to_string(),
            details: Some(json!({"maxToolRounds": self.limit})),
            retryable: Some(false),
        }
    }

    /// The `cap.breached` that precedes the node's failure.
    pub fn cap_breached(&self, node_id: &str) -> CapBreached {
        CapBreached {
            kind: CapKind::LoopIterations,
            limit: u64::from(self.limit),
            observed: u64::from(self.limit) + 1,
            node_id: Some(node_id.to_owned()),
        }
    }
}

/// Whether the node may run round `round` (0-based: the `round`-th model turn that asked for
/// tools) under `max_rounds`.
pub fn check_round(round: u32, max_rounds: u32) -> Result<(), LoopLimitExceeded> {
    if round < max_rounds {
        Ok(())
    } else {
        Err(LoopLimitExceeded { limit: max_rounds })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, annotations: Option<Value>) -> DiscoveredTool {
        DiscoveredTool {
            name: name.into(),
            description: Some(format!("does {name}")),
            input_schema: json!({"type": "object"}),
            annotations,
        }
    }

    fn tiers(list: &[(&str, SafetyTier)]) -> Vec<TierAssignment> {
        list.iter()
            .map(|(n, t)| TierAssignment {
                name: (*n).into(),
                tier: *t,
            })
            .collect()
    }

    #[test]
    fn the_host_assigns_tiers_and_ignores_annotations() {
        let t = tiers(&[("search", SafetyTier::Read), ("shell", SafetyTier::Exec)]);
        assert_eq!(classify("search", &t), SafetyTier::Read);
        assert_eq!(classify("shell", &t), SafetyTier::Exec);
        assert_eq!(classify("delete_repo", &t), SafetyTier::Write);
        // A server calling its mutating tool read-only is not believed.
        let liar = tool(
            "delete_repo",
            Some(json!({"readOnlyHint": true, "destructiveHint": false})),
        );
        assert_eq!(CatalogTool::of(&liar, &t).tier, SafetyTier::Write);
        // Nor is one calling a read tool destructive: the admin's word holds.
        let honest = tool("search", Some(json!({"readOnlyHint": false})));
        assert_eq!(CatalogTool::of(&honest, &t).tier, SafetyTier::Read);
    }

    #[test]
    fn a_listed_tool_reads_from_mcp_and_its_description_is_bounded() {
        let d: DiscoveredTool = serde_json::from_value(json!({
            "name": "search", "title": "Search", "description": "x".repeat(5000),
            "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
            "annotations": {"readOnlyHint": true}
        }))
        .unwrap();
        let c = CatalogTool::of(&d, &[]);
        assert_eq!(
            c.description.unwrap().chars().count(),
            MAX_DESCRIPTION_CHARS
        );
        let bare: DiscoveredTool = serde_json::from_value(json!({"name": "n"})).unwrap();
        assert_eq!(bare.input_schema, json!({"type": "object"}));
        assert_eq!(CatalogTool::of(&bare, &[]).description, None);
    }

    #[test]
    fn approval_follows_tier_then_policy_and_exec_always_waits() {
        use SafetyTier::*;
        assert!(!needs_approval(Read, None));
        assert!(needs_approval(Write, None));
        assert!(needs_approval(Exec, None));
        assert!(needs_approval(Read, Some(true)));
        assert!(!needs_approval(Write, Some(false)));
        assert!(needs_approval(Exec, Some(false)));
    }

    #[test]
    fn the_kill_rule_repeats_only_reads() {
        assert_eq!(
            after_unknown_outcome(SafetyTier::Read),
            UnknownOutcome::CallAgain
        );
        assert_eq!(
            after_unknown_outcome(SafetyTier::Write),
            UnknownOutcome::ReportUnknown
        );
        assert_eq!(
            after_unknown_outcome(SafetyTier::Exec),
            UnknownOutcome::ReportUnknown
        );
    }

    fn config(v: Value) -> ToolsConfig {
        ToolsConfig::parse(&v).unwrap()
    }

    #[test]
    fn the_tool_set_offers_declared_tools_and_refuses_other_names() {
        let search_tools = [tool("search", None), tool("fetch", None)];
        let ticket_tools = [tool("get", None), tool("close", None), tool("delete", None)];
        let search_tiers = tiers(&[("search", SafetyTier::Read), ("fetch", SafetyTier::Read)]);
        let servers = [
            ServerTools {
                server: "web",
                tools: &search_tools,
                tiers: &search_tiers,
            },
            ServerTools {
                server: "tickets",
                tools: &ticket_tools,
                tiers: &[],
            },
        ];
        let set = ToolSet::build(
            &config(json!({"tools": [
                {"server": "web"},
                {"server": "tickets", "names": ["get", "close"], "requireApproval": ["close"]}
            ]})),
            &servers,
        )
        .unwrap();
        let names: Vec<(&str, &str, bool)> = set
            .tools()
            .iter()
            .map(|t| (t.model_name.as_str(), t.tier.as_str(), t.needs_approval))
            .collect();
        assert_eq!(
            names,
            vec![
                ("search", "read", false),
                ("fetch", "read", false),
                // Unclassified (write), but the node's policy names only `close`.
                ("get", "write", false),
                ("close", "write", true),
            ]
        );
        assert_eq!(set.resolve("close").unwrap().tool_id(), "mcp:tickets/close");
        // `delete` exists on the server but was not declared: refused, with the offer.
        let r = set.resolve("delete").unwrap_err();
        assert_eq!(r.reason, RefusalReason::NotOffered);
        assert_eq!(
            r.message,
            "No tool is named \"delete\" here; the tools you may call are: search, fetch, get, close."
        );
        let e = r.error_info("delete");
        assert_eq!(e.code, "forbidden");
        assert_eq!(
            e.details.unwrap(),
            json!({"scope": "tool", "toolName": "delete", "reason": "not-offered"})
        );
    }

    #[test]
    fn unavailable_servers_and_unlisted_tools_fail_the_node() {
        let tools = [tool("get", None)];
        let servers = [ServerTools {
            server: "tickets",
            tools: &tools,
            tiers: &[],
        }];
        let e =
            ToolSet::build(&config(json!({"tools": [{"server": "gone"}]})), &servers).unwrap_err();
        assert_eq!(e.code(), "tool_server_unavailable");
        let e = ToolSet::build(
            &config(json!({"tools": [{"server": "tickets", "names": ["get", "purge"]}]})),
            &servers,
        )
        .unwrap_err();
        assert_eq!(
            e,
            ToolSetError::ToolNotListed {
                server: "tickets".into(),
                tool: "purge".into()
            }
        );
        assert_eq!(e.code(), "tool_not_found");
    }

    #[test]
    fn model_names_are_valid_for_every_vendor_and_distinct() {
        let a = [
            tool("search", None),
            tool("read.file", None),
            tool("9lives", None),
        ];
        let b = [tool("search", None), tool(&"x".repeat(100), None)];
        let servers = [
            ServerTools {
                server: "web.prod",
                tools: &a,
                tiers: &[],
            },
            ServerTools {
                server: "docs",
                tools: &b,
                tiers: &[],
            },
        ];
        let set = ToolSet::build(
            &config(json!({"tools": [{"server": "web.prod"}, {"server": "docs"}]})),
            &servers,
        )
        .unwrap();
        let names: Vec<&str> = set.tools().iter().map(|t| t.model_name.as_str()).collect();
        let valid = regex::Regex::new("^[A-Za-z_][A-Za-z0-9_-]{0,63}$").unwrap();
        for n in &names {
            assert!(valid.is_match(n), "{n}");
        }
        for (i, n) in names.iter().enumerate() {
            assert!(!names[..i].contains(n), "{n} twice");
        }
        // Colliding plain names are qualified by server; a changed name carries a hash.
        assert!(names[0].starts_with("web_prod__search_"), "{}", names[0]);
        assert_eq!(names[3], "docs__search");
        assert!(names[1].starts_with("read_file_"));
        assert!(names[2].starts_with("t_9lives_"));
        assert_eq!(names[4].len(), MAX_MODEL_NAME_CHARS);
        // Deterministic: the same inputs give the same names.
        let again = ToolSet::build(
            &config(json!({"tools": [{"server": "web.prod"}, {"server": "docs"}]})),
            &servers,
        )
        .unwrap();
        assert_eq!(again, set);
        assert_eq!(set.resolve(names[1]).unwrap().tool, "read.file");
    }

    #[test]
    fn the_round_cap_fails_with_loop_limit_exceeded() {
        assert!(check_round(0, 2).is_ok());
        assert!(check_round(1, 2).is_ok());
        let e = check_round(2, 2).unwrap_err();
        assert_eq!(e.error_info().code, "loop_limit_exceeded");
        let cap = e.cap_breached("n1");
        assert_eq!(
            (cap.kind, cap.limit, cap.observed),
            (CapKind::LoopIterations, 2, 3)
        );
        let payload = serde_json::to_value(&cap).unwrap();
        assert_eq!(
            crate::schema::validate_event_payload("cap.breached", &payload),
            Some(Ok(()))
        );
    }

    #[test]
    fn refusals_read_well() {
        assert_eq!(
            Refusal::too_many_calls(16).message,
            "The call was not made: at most 16 tool calls run per turn and this was call 17; ask again in the next turn."
        );
        assert_eq!(
            Refusal::bad_arguments(&super::super::call::ArgumentsError::NotJson).message,
            "The call was not made: the arguments are not valid JSON: send a JSON object."
        );
        assert_eq!(
            Refusal::not_offered("x", &[]).message,
            "No tool is named \"x\" here; the tools you may call are: none."
        );
    }
}
