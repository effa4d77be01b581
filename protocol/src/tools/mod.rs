//! Agents that call tools (issue #42): the pure half. LLM nodes call tools on MCP servers an
//! admin declares as `ToolServer` resources; the worker runs the loop and the MCP client,
//! the operator keeps each server's catalog. What they must agree on is here:
//!
//! - [`config`]: an LLM node's `tools` / `maxToolRounds` config, checked at registration;
//! - [`policy`]: the host's safety tier of a tool, the tools a node offers its model and the
//!   refusal of any other name, approval, the kill rule for a call with an unknown outcome,
//!   the round cap;
//! - [`result`]: a result's size cap and its `<UNTRUSTED tool="…">` wrapper;
//! - [`record`]: the `agent.toolCalled` / `agent.toolReturned` records, each call's step
//!   key, and the lookup that answers a replayed call from the log;
//! - [`call`]: a model's tool call, vendor-neutral, and a mock provider step's;
//! - [`mcp`]: the MCP revisions a ToolServer may ask for and the no-silent-downgrade rule,
//!   and a `tools/call` result as text;
//! - [`catalog`]: the tool catalog's entries (`GET /v1/tools`) and the `mcp:` tool id.
//!
//! Spec: `mcp-integration.md` (trust boundary, RFC 0153 §B), RFC 0064 (`host.toolHooks`),
//! `tool-catalog.md` (v1 and v2), `SECURITY/threat-model-prompt-injection.md` §4.4–4.5,
//! `replay.md` §Suppression.

pub mod call;
pub mod catalog;
pub mod config;
pub mod mcp;
pub mod policy;
pub mod record;
pub mod result;

pub use call::{MockToolCall, ModelToolCall};
pub use config::ToolsConfig;
pub use policy::{OfferedTool, SafetyTier, ToolSet};
pub use record::{ToolCalled, ToolLog, ToolReturned, ToolStatus, ToolStep};

/// `text` in at most `max` characters, the last of them `…` when it was cut.
pub(crate) fn within(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        crate::text::truncate(text, max.saturating_sub(1))
    }
}
