//! The MCP facts the host's records depend on: which protocol revisions a ToolServer may ask
//! for and how a server's answer is accepted (never a silent downgrade), and how a
//! `tools/call` result becomes the text a model reads.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::events::ErrorInfo;

/// A ToolServer's `timeoutSeconds` (one `tools/call`) unless it says otherwise.
pub const DEFAULT_TIMEOUT_SECONDS: u32 = 30;
/// Largest `timeoutSeconds`: a longer call holds the node's pod; a longer wait belongs in an
/// approval or a durable wait, not a call.
pub const MAX_TIMEOUT_SECONDS: u32 = 600;
/// Largest MCP answer (one response body) read; a larger one fails the exchange unread. A
/// result is cut to the ToolServer's `maxResultBytes` after it is read, so this bound is
/// well above that one: it only protects the worker's and the operator's memory.
pub const MAX_RESPONSE_BYTES: u64 = 8 << 20;

/// Request headers the MCP client owns beyond the HTTP client's
/// ([`crate::egress::CLIENT_OWNED_HEADERS`]): the body's type and what it accepts,
/// `MCP-Protocol-Version` (the negotiated revision), `Mcp-Session-Id` (the server's session)
/// and `Last-Event-ID` (stream resumption).
const MCP_OWNED_HEADERS: &[&str] = &[
    "content-type",
    "accept",
    "mcp-protocol-version",
    "mcp-session-id",
    "last-event-id",
];

/// Request headers a ToolServer may not set from a Secret (compared without case): the HTTP
/// client's and the MCP client's own.
pub fn reserved_headers() -> impl Iterator<Item = &'static str> {
    crate::egress::CLIENT_OWNED_HEADERS
        .iter()
        .chain(MCP_OWNED_HEADERS)
        .copied()
}
/// An MCP protocol revision this host's client can speak: the revisions with the
/// `initialize` handshake over streamable HTTP. The stateless 2026-07-28 revision (no
/// handshake, per-request `_meta`) needs a different client and is not listed until it has one.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum McpRevision {
    #[serde(rename = "2025-03-26")]
    V2025_03_26,
    #[serde(rename = "2025-06-18")]
    V2025_06_18,
    #[serde(rename = "2025-11-25")]
    V2025_11_25,
}

impl McpRevision {
    /// Oldest first.
    pub const ALL: [McpRevision; 3] = [
        McpRevision::V2025_03_26,
        McpRevision::V2025_06_18,
        McpRevision::V2025_11_25,
    ];
    /// What a ToolServer asks for unless it says otherwise.
    pub const DEFAULT: McpRevision = McpRevision::V2025_06_18;

    /// The date form MCP uses on the wire (`protocolVersion`, `MCP-Protocol-Version`).
    pub fn as_str(self) -> &'static str {
        match self {
            McpRevision::V2025_03_26 => "2025-03-26",
            McpRevision::V2025_06_18 => "2025-06-18",
            McpRevision::V2025_11_25 => "2025-11-25",
        }
    }

    pub fn parse(s: &str) -> Option<McpRevision> {
        McpRevision::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

fn default_revision() -> McpRevision {
    McpRevision::DEFAULT
}

/// Which revision to speak with a server (`ToolServer.spec.protocolVersion`): the preferred
/// one, or an older one only when the admin named it. `mcp-integration.md` §B: a client
/// MUST NOT proceed under a lower revision silently; a downgrade is explicit and recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.fallback) || self.fallback < self.preferred",
    "message": "fallback must be an older revision than preferred"
}]))]
pub struct RevisionPolicy {
    /// The revision asked for in `initialize`.
    #[serde(default = "default_revision")]
    pub preferred: McpRevision,
    /// An older revision the admin accepts when the server does not speak `preferred`; the
    /// ToolServer's status then reports it. Absent: such a server is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<McpRevision>,
}

impl Default for RevisionPolicy {
    fn default() -> Self {
        RevisionPolicy {
            preferred: McpRevision::DEFAULT,
            fallback: None,
        }
    }
}

/// The revision a connection speaks after `initialize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiated {
    Preferred(McpRevision),
    /// The admin's fallback: to be recorded (`status.protocolVersion` and a condition reason).
    Fallback(McpRevision),
}

impl Negotiated {
    pub fn revision(self) -> McpRevision {
        match self {
            Negotiated::Preferred(r) | Negotiated::Fallback(r) => r,
        }
    }
}

/// A server answered `initialize` with a revision the policy does not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the MCP server speaks protocol revision {answered:?}, and this ToolServer accepts {}; set spec.protocolVersion.fallback to an older revision the server speaks, or upgrade the server",
    .supported.join(" or ")
)]
pub struct RevisionRefused {
    pub requested: String,
    pub answered: String,
    pub supported: Vec<String>,
}

impl RevisionRefused {
    /// The error the boundary reports (`mcp-integration.md` §B: `interop_version_unsupported`,
    /// not retriable, with `details.protocol`, `requested`, `supported[]`).
    pub fn error_info(&self) -> ErrorInfo {
        ErrorInfo {
            code: "interop_version_unsupported".to_owned(),
            message: self.to_string(),
            details: Some(json!({
                "protocol": "mcp",
                "requested": self.requested,
                "supported": self.supported,
            })),
            retryable: Some(false),
        }
    }
}

/// Accepts the `protocolVersion` a server answered to `initialize` (sent with
/// `policy.preferred`): the preferred revision, or the admin's fallback, never another.
pub fn accept_revision(
    policy: &RevisionPolicy,
    answered: &str,
) -> Result<Negotiated, RevisionRefused> {
    match McpRevision::parse(answered) {
        Some(r) if r == policy.preferred => Ok(Negotiated::Preferred(r)),
        Some(r) if Some(r) == policy.fallback => Ok(Negotiated::Fallback(r)),
        _ => Err(RevisionRefused {
            requested: policy.preferred.as_str().to_owned(),
            answered: crate::text::truncate(answered, 32),
            supported: std::iter::once(policy.preferred)
                .chain(policy.fallback)
                .map(|r| r.as_str().to_owned())
                .collect(),
        }),
    }
}

/// A `tools/call` result (`CallToolResult`) as text for a model, and whether the tool
/// reported an error (`isError`). Text blocks are kept; embedded text resources are kept;
/// binary blocks (images, audio, blobs) are named, not inlined; `structuredContent` is used
/// as JSON text when there is no content block.
pub fn result_text(result: &Value) -> (String, bool) {
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    let mut parts: Vec<String> = Vec::new();
    for block in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let s = |k: &str| block.get(k).and_then(Value::as_str);
        let size = |k: &str| s(k).map_or(0, |d| d.len() / 4 * 3);
        parts.push(match s("type").unwrap_or("") {
            "text" => s("text").unwrap_or("").to_owned(),
            kind @ ("image" | "audio") => format!(
                "[{kind} {} of about {} bytes, not shown]",
                s("mimeType").unwrap_or("of unknown type"),
                size("data")
            ),
            "resource_link" => format!("[resource link: {}]", s("uri").unwrap_or("")),
            "resource" => {
                let r = block.get("resource").unwrap_or(&Value::Null);
                let rs = |k: &str| r.get(k).and_then(Value::as_str);
                match rs("text") {
                    Some(t) => t.to_owned(),
                    None => format!(
                        "[resource {} ({}), binary, not shown]",
                        rs("uri").unwrap_or(""),
                        rs("mimeType").unwrap_or("unknown type")
                    ),
                }
            }
            other => format!("[{} content, not shown]", crate::text::truncate(other, 32)),
        });
    }
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        parts.push(structured.to_string());
    }
    (parts.join("\n"), is_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_parse_and_order() {
        for r in McpRevision::ALL {
            assert_eq!(McpRevision::parse(r.as_str()), Some(r));
            assert_eq!(serde_json::to_value(r).unwrap(), json!(r.as_str()));
        }
        assert!(McpRevision::V2025_03_26 < McpRevision::V2025_11_25);
        assert_eq!(McpRevision::parse("2026-07-28"), None);
        let p: RevisionPolicy = serde_json::from_value(json!({})).unwrap();
        assert_eq!(p, RevisionPolicy::default());
        assert!(serde_json::from_value::<RevisionPolicy>(json!({"preferred": "latest"})).is_err());
    }

    #[test]
    fn a_downgrade_happens_only_to_the_named_fallback() {
        let strict = RevisionPolicy::default();
        assert_eq!(
            accept_revision(&strict, "2025-06-18"),
            Ok(Negotiated::Preferred(McpRevision::V2025_06_18))
        );
        let e = accept_revision(&strict, "2025-03-26").unwrap_err();
        assert_eq!(e.supported, vec!["2025-06-18"]);
        let info = e.error_info();
        assert_eq!(info.code, "interop_version_unsupported");
        assert_eq!(
            info.details.unwrap(),
            json!({"protocol": "mcp", "requested": "2025-06-18", "supported": ["2025-06-18"]})
        );
        let lenient = RevisionPolicy {
            preferred: McpRevision::V2025_11_25,
            fallback: Some(McpRevision::V2025_03_26),
        };
        assert_eq!(
            accept_revision(&lenient, "2025-03-26").map(Negotiated::revision),
            Ok(McpRevision::V2025_03_26)
        );
        assert!(matches!(
            accept_revision(&lenient, "2025-03-26"),
            Ok(Negotiated::Fallback(_))
        ));
        // A revision between the two was not named: refused, not taken.
        assert!(accept_revision(&lenient, "2025-06-18").is_err());
        assert!(accept_revision(&lenient, "garbage").is_err());
    }

    #[test]
    fn results_become_text() {
        let r = json!({"content": [
            {"type": "text", "text": "line one"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}},
            {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAAA", "mimeType": "application/octet-stream"}},
            {"type": "resource_link", "uri": "https://x.example/doc"},
            {"type": "hologram"}
        ]});
        assert_eq!(
            result_text(&r),
            (
                "line one\n[image image/png of about 3 bytes, not shown]\ninside\n[resource file:///b.bin (application/octet-stream), binary, not shown]\n[resource link: https://x.example/doc]\n[hologram content, not shown]".into(),
                false
            )
        );
        assert_eq!(
            result_text(&json!({"content": [{"type": "text", "text": "boom"}], "isError": true})),
            ("boom".into(), true)
        );
        assert_eq!(
            result_text(&json!({"content": [], "structuredContent": {"n": 1}})),
            ("{\"n\":1}".into(), false)
        );
        assert_eq!(result_text(&json!({})), (String::new(), false));
    }
}
