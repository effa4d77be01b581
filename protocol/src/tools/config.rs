//! An LLM node's tool config: `tools: [{server, names?, requireApproval?}]` and
//! `maxToolRounds`, checked at registration (shape by `schemas/nodes/llm.tools.config.schema.json`,
//! then what a schema cannot say) and read by the worker.

use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::Value;

use crate::schema::{self, CompiledSchema, ValidationIssue};

/// The config schema of the tool members (the node's other members are free).
pub const TOOLS_CONFIG_SCHEMA: &str =
    include_str!("../../../schemas/nodes/llm.tools.config.schema.json");

/// Most `tools` entries (servers) one node may name.
pub const MAX_SERVERS_PER_NODE: usize = 16;
/// Most tool names one entry may list.
pub const MAX_NAMES_PER_SERVER: usize = 128;
/// Rounds of tool calls a node makes unless its config says otherwise.
pub const DEFAULT_MAX_TOOL_ROUNDS: u32 = 8;
/// Most rounds a node's config may ask for.
pub const MAX_TOOL_ROUNDS: u32 = 64;

// Embedded and compiled by this crate's tests: a compile failure is a build defect.
static SCHEMA: LazyLock<CompiledSchema> = LazyLock::new(|| {
    let doc: Value = serde_json::from_str(TOOLS_CONFIG_SCHEMA)
        .unwrap_or_else(|e| panic!("llm.tools.config.schema.json is not JSON: {e}"));
    schema::compile(&doc).unwrap_or_else(|e| panic!("llm.tools.config.schema.json: {e}"))
});

/// Which calls of one server's tools wait for a person (`requireApproval`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ApprovalPolicy {
    /// `true`: every call; `false`: none (except exec-tier tools, which always wait).
    All(bool),
    /// The named tools' calls.
    Named(Vec<String>),
}

/// One `tools` entry: a ToolServer and what the node may do with it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsEntry {
    /// The ToolServer's `metadata.name`.
    pub server: String,
    /// The ToolServer's namespace; `None`: the Workflow's (the run's) own.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The tools the model may call; `None`: every tool the server lists.
    #[serde(default)]
    pub names: Option<Vec<String>>,
    /// Which calls wait for approval; `None`: decided by each tool's tier
    /// ([`super::policy::needs_approval`]).
    #[serde(default)]
    pub require_approval: Option<ApprovalPolicy>,
}

impl ToolsEntry {
    /// The ToolServer's namespace for a run in `run_namespace`.
    pub fn namespace_in<'a>(&'a self, run_namespace: &'a str) -> &'a str {
        self.namespace.as_deref().unwrap_or(run_namespace)
    }

    /// Whether the node declared `tool` of this server.
    pub fn allows(&self, tool: &str) -> bool {
        self.names
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == tool))
    }

    /// What this entry's policy says about `tool`: `Some(true)` wait, `Some(false)` do not,
    /// `None` no policy (the tier decides).
    pub fn approval_for(&self, tool: &str) -> Option<bool> {
        match &self.require_approval {
            None => None,
            Some(ApprovalPolicy::All(all)) => Some(*all),
            Some(ApprovalPolicy::Named(names)) => Some(names.iter().any(|n| n == tool)),
        }
    }
}

/// The tool members of an LLM node's config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolsConfig {
    /// One entry per server, in config order.
    pub entries: Vec<ToolsEntry>,
    /// Most rounds of tool calls ([`DEFAULT_MAX_TOOL_ROUNDS`] when not configured).
    pub max_rounds: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Members {
    #[serde(default)]
    tools: Vec<ToolsEntry>,
    #[serde(default)]
    max_tool_rounds: Option<u32>,
}

impl ToolsConfig {
    /// Reads and checks the tool members of `node_config` (an LLM node's whole config). Each
    /// problem names its place (`/tools/1/server`) and what to do.
    pub fn parse(node_config: &Value) -> Result<ToolsConfig, Vec<ValidationIssue>> {
        SCHEMA.validate(node_config)?;
        // The schema admitted the members' shapes: they deserialize.
        let members: Members = serde_json::from_value(serde_json::json!({
            "tools": node_config.get("tools").cloned().unwrap_or(Value::Array(vec![])),
            "maxToolRounds": node_config.get("maxToolRounds").cloned().unwrap_or(Value::Null),
        }))
        .map_err(|e| vec![issue("", "type", format!("tool members unreadable: {e}"))])?;
        let mut issues = Vec::new();
        for (i, entry) in members.tools.iter().enumerate() {
            if let Some(first) = members.tools[..i]
                .iter()
                .position(|e| e.server == entry.server)
            {
                issues.push(issue(
                    &format!("/tools/{i}/server"),
                    "unique",
                    format!(
                        "server {:?} is already listed at /tools/{first}; merge the two entries",
                        entry.server
                    ),
                ));
            }
            if let (Some(names), Some(ApprovalPolicy::Named(approve))) =
                (&entry.names, &entry.require_approval)
            {
                for (j, tool) in approve.iter().enumerate() {
                    if !names.contains(tool) {
                        issues.push(issue(
                            &format!("/tools/{i}/requireApproval/{j}"),
                            "subset",
                            format!(
                                "tool {tool:?} needs approval but is not in names, so the model cannot call it; add it to names or remove it here"
                            ),
                        ));
                    }
                }
            }
        }
        if !issues.is_empty() {
            return Err(issues);
        }
        Ok(ToolsConfig {
            entries: members.tools,
            max_rounds: members.max_tool_rounds.unwrap_or(DEFAULT_MAX_TOOL_ROUNDS),
        })
    }

    /// Whether the node may call any tool at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry of `server`.
    pub fn entry(&self, server: &str) -> Option<&ToolsEntry> {
        self.entries.iter().find(|e| e.server == server)
    }
}

fn issue(path: &str, keyword: &str, message: impl Into<String>) -> ValidationIssue {
    ValidationIssue {
        instance_path: path.to_owned(),
        keyword: keyword.to_owned(),
        message: message.into(),
    }
}

/// The node type of one tool call without a model.
pub const TOOL_CALL_TYPE_ID: &str = "core.mcp.toolCall";

static TOOL_CALL_SCHEMA: LazyLock<CompiledSchema> = LazyLock::new(|| {
    let doc: Value = serde_json::from_str(include_str!(
        "../../../schemas/nodes/core.mcp.toolCall.config.schema.json"
    ))
    .unwrap_or_else(|e| panic!("core.mcp.toolCall.config.schema.json is not JSON: {e}"));
    schema::compile(&doc).unwrap_or_else(|e| panic!("core.mcp.toolCall.config.schema.json: {e}"))
});

/// `core.mcp.toolCall`'s config: one tool of one ToolServer, its arguments, and whether the
/// call waits for approval (shape by `schemas/nodes/core.mcp.toolCall.config.schema.json`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallConfig {
    pub server: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub tool: String,
    #[serde(default)]
    pub arguments: Option<Value>,
    #[serde(default)]
    pub require_approval: Option<bool>,
}

impl ToolCallConfig {
    /// Reads and checks a `core.mcp.toolCall` config.
    pub fn parse(config: &Value) -> Result<ToolCallConfig, Vec<ValidationIssue>> {
        TOOL_CALL_SCHEMA.validate(config)?;
        serde_json::from_value(config.clone())
            .map_err(|e| vec![issue("", "type", format!("config unreadable: {e}"))])
    }

    /// The call as an LLM node's tool config: its server, only its tool, its approval policy
    /// and one round — so the node is offered, approved, recorded and replayed by the same
    /// rules as a model's call.
    pub fn as_tools(&self) -> ToolsConfig {
        ToolsConfig {
            entries: vec![ToolsEntry {
                server: self.server.clone(),
                namespace: self.namespace.clone(),
                names: Some(vec![self.tool.clone()]),
                require_approval: self.require_approval.map(ApprovalPolicy::All),
            }],
            max_rounds: 1,
        }
    }

    /// The call's arguments (absent: none).
    pub fn arguments(&self) -> Value {
        self.arguments
            .clone()
            .unwrap_or_else(|| Value::Object(Default::default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(config: Value) -> Vec<(String, String)> {
        ToolsConfig::parse(&config)
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|i| (i.instance_path, i.message))
            .collect()
    }

    #[test]
    fn a_config_without_tools_has_none_and_other_members_stay_free() {
        let c = ToolsConfig::parse(&json!({"systemPrompt": "s", "anything": [1]})).unwrap();
        assert!(c.is_empty());
        assert_eq!(c.max_rounds, DEFAULT_MAX_TOOL_ROUNDS);
    }

    #[test]
    fn entries_are_read_with_their_policies() {
        let c = ToolsConfig::parse(&json!({
            "maxToolRounds": 3,
            "tools": [
                {"server": "search"},
                {"server": "tickets.prod", "names": ["get", "close"], "requireApproval": ["close"]},
                {"server": "shell", "requireApproval": false},
            ]
        }))
        .unwrap();
        assert_eq!(c.max_rounds, 3);
        let search = c.entry("search").unwrap();
        assert!(search.allows("anything"));
        assert_eq!(search.approval_for("anything"), None);
        let tickets = c.entry("tickets.prod").unwrap();
        assert!(tickets.allows("get") && !tickets.allows("delete"));
        assert_eq!(tickets.approval_for("close"), Some(true));
        assert_eq!(tickets.approval_for("get"), Some(false));
        assert_eq!(c.entry("shell").unwrap().approval_for("x"), Some(false));
        assert!(c.entry("nope").is_none());
    }

    #[test]
    fn shape_problems_name_the_member() {
        for (config, at) in [
            (json!({"tools": {}}), "/tools"),
            (json!({"tools": [{}]}), "/tools/0"),
            (
                json!({"tools": [{"server": "Bad_Name"}]}),
                "/tools/0/server",
            ),
            (
                json!({"tools": [{"server": "s", "url": "http://x"}]}),
                "/tools/0",
            ),
            (
                json!({"tools": [{"server": "s", "names": []}]}),
                "/tools/0/names",
            ),
            (
                json!({"tools": [{"server": "s", "names": ["a", "a"]}]}),
                "/tools/0/names",
            ),
            (
                json!({"tools": [{"server": "s", "names": ["has space"]}]}),
                "/tools/0/names/0",
            ),
            (
                json!({"tools": [{"server": "s", "requireApproval": "yes"}]}),
                "/tools/0/requireApproval",
            ),
            (json!({"maxToolRounds": 0}), "/maxToolRounds"),
            (json!({"maxToolRounds": 65}), "/maxToolRounds"),
        ] {
            let p = problems(config.clone());
            assert!(p.iter().any(|(path, _)| path == at), "{config}: {p:?}");
        }
        let too_many: Vec<Value> = (0..=MAX_SERVERS_PER_NODE)
            .map(|i| json!({"server": format!("s{i}")}))
            .collect();
        assert!(
            problems(json!({ "tools": too_many }))
                .iter()
                .any(|(p, _)| p == "/tools")
        );
    }

    #[test]
    fn a_server_twice_and_approval_of_an_undeclared_tool_are_refused() {
        assert_eq!(
            problems(
                json!({"tools": [{"server": "a"}, {"server": "b"}, {"server": "a", "names": ["x"]}]})
            ),
            vec![(
                "/tools/2/server".into(),
                "server \"a\" is already listed at /tools/0; merge the two entries".into()
            )]
        );
        let p = problems(
            json!({"tools": [{"server": "a", "names": ["get"], "requireApproval": ["get", "delete"]}]}),
        );
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].0, "/tools/0/requireApproval/1");
        assert!(p[0].1.contains("\"delete\""), "{}", p[0].1);
        // Without `names`, every tool is declared, so any may need approval.
        assert!(
            ToolsConfig::parse(&json!({"tools": [{"server": "a", "requireApproval": ["delete"]}]}))
                .is_ok()
        );
    }

    /// The schema's bounds are the constants the worker enforces.
    #[test]
    fn schema_bounds_match_the_constants() {
        let doc: Value = serde_json::from_str(TOOLS_CONFIG_SCHEMA).unwrap();
        let p = &doc["properties"];
        assert_eq!(p["tools"]["maxItems"], MAX_SERVERS_PER_NODE);
        assert_eq!(p["maxToolRounds"]["maximum"], MAX_TOOL_ROUNDS);
        assert_eq!(
            doc["$defs"]["entry"]["properties"]["names"]["maxItems"],
            MAX_NAMES_PER_SERVER
        );
        assert!(
            p["maxToolRounds"]["description"]
                .as_str()
                .unwrap()
                .contains(&format!("Default {DEFAULT_MAX_TOOL_ROUNDS}."))
        );
    }

    /// A `core.mcp.toolCall` reads as a one-tool, one-round tool config with its approval
    /// policy; a config with an unknown member or no tool is refused where it is wrong.
    #[test]
    fn a_tool_call_node_is_a_one_tool_config() {
        let c = ToolCallConfig::parse(&serde_json::json!({
            "server": "kb", "tool": "file_note", "arguments": {"text": "x"}, "requireApproval": false
        }))
        .unwrap();
        let t = c.as_tools();
        assert_eq!(t.max_rounds, 1);
        assert_eq!(
            t.entries[0].names.as_deref(),
            Some(&["file_note".to_owned()][..])
        );
        assert_eq!(t.entries[0].approval_for("file_note"), Some(false));
        assert_eq!(c.arguments(), serde_json::json!({"text": "x"}));
        let bare =
            ToolCallConfig::parse(&serde_json::json!({"server": "kb", "tool": "t"})).unwrap();
        assert_eq!(bare.as_tools().entries[0].approval_for("t"), None);
        assert_eq!(bare.arguments(), serde_json::json!({}));
        let issues =
            ToolCallConfig::parse(&serde_json::json!({"server": "kb", "url": "x"})).unwrap_err();
        assert!(issues.iter().any(|i| i.keyword == "required"), "{issues:?}");
        assert!(
            issues.iter().any(|i| i.keyword == "additionalProperties"),
            "{issues:?}"
        );
    }
}
