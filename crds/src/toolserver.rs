//! The `ToolServer` custom resource: an MCP server (streamable HTTP) whose tools the LLM
//! nodes of Workflows may call. An admin declares it; a workflow names it (`tools[].server`),
//! never a URL. The operator lists its tools into `status.tools`, each with the host's
//! safety tier (the admin's `toolTiers`, else `write`; the server's own annotations are never
//! believed), and reports `Ready`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::core::{Selector, SelectorExt};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::workflow::SecretKeyRef;
use openwop_protocol::tools::mcp::{
    DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS, RevisionPolicy, reserved_headers,
};
use openwop_protocol::tools::policy::{CatalogTool, TierAssignment};
use openwop_protocol::tools::result::{
    DEFAULT_MAX_RESULT_BYTES, MAX_RESULT_BYTES, MIN_RESULT_BYTES,
};

/// Desired state of a ToolServer.
// Several printer columns share `type_ = "string"`, which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[kube(
    group = "openwop.dev",
    version = "v1alpha1",
    kind = "ToolServer",
    namespaced,
    status = "ToolServerStatus",
    derive = "PartialEq",
    shortname = "ots",
    shortname = "toolsrv",
    category = "openwop",
    doc = "An MCP server whose tools the LLM nodes of Workflows may call. The operator lists its tools and reports Ready.",
    printcolumn(name = "URL", type_ = "string", json_path = ".spec.url"),
    printcolumn(
        name = "Protocol",
        type_ = "string",
        json_path = ".status.protocolVersion",
        description = "MCP revision in use"
    ),
    printcolumn(name = "Tools", type_ = "integer", json_path = ".status.toolCount"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct ToolServerSpec {
    /// What the server is for (shown to people, not to models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub description: Option<String>,
    /// The server's MCP endpoint (streamable HTTP), `http` or `https`, without credentials
    /// in it (put them in `headersFrom`).
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(
        validation = Rule::new("isURL(self) && url(self).getScheme() in ['http', 'https']")
            .message("url must be an http or https URL"),
        validation = Rule::new("self.matches('^[A-Za-z][A-Za-z0-9+.-]*://[^/?#@]*([/?#].*)?$')")
            .message("url must not carry credentials (user@host); put them in headersFrom")
    )]
    pub url: String,
    /// Request headers whose values come from Secrets in this namespace (e.g.
    /// `Authorization`), redacted from every event, log and status.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(
        validation = Rule::new("self.all(h, self.exists_one(o, o.name.lowerAscii() == h.name.lowerAscii()))")
            .message("each header may appear once in headersFrom")
    )]
    pub headers_from: Vec<HeaderFromSecret>,
    /// How long one tool call may take, seconds; then it ends as a timeout.
    #[serde(default = "default_timeout_seconds")]
    #[schemars(range(min = 1, max = MAX_TIMEOUT_SECONDS))]
    pub timeout_seconds: u32,
    /// Most bytes of a result the model reads; a longer one keeps its head and tail and says
    /// how much was cut.
    #[serde(default = "default_max_result_bytes")]
    #[schemars(range(min = MIN_RESULT_BYTES, max = MAX_RESULT_BYTES))]
    pub max_result_bytes: u32,
    /// Which namespaces' Workflows may use this server; absent: this namespace only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_namespaces: Option<AllowedNamespaces>,
    /// The MCP revision to speak, and an older one accepted only when named here; the
    /// revision in use is reported in `status.protocolVersion`.
    #[serde(default)]
    pub protocol_version: RevisionPolicy,
    /// The admin's safety tier of named tools (`read`, `write`, `exec`); an unnamed tool is
    /// `write`. Write and exec calls wait for a person unless the node's `requireApproval`
    /// says otherwise; exec calls always wait.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // A list map keyed by name: the apiserver refuses a tool classified twice, at no CEL
    // cost (a pairwise rule over 512 entries would be costly to admit).
    #[schemars(
        length(max = 512),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub tool_tiers: Vec<TierAssignment>,
}

fn default_timeout_seconds() -> u32 {
    DEFAULT_TIMEOUT_SECONDS
}

fn default_max_result_bytes() -> u32 {
    DEFAULT_MAX_RESULT_BYTES as u32
}

/// The CEL rule that keeps reserved headers ([`reserved_headers`]) out of `headersFrom`.
fn reserved_header_rule() -> String {
    let list: Vec<String> = reserved_headers().map(|h| format!("'{h}'")).collect();
    format!("!(self.lowerAscii() in [{}])", list.join(", "))
}

/// A request header whose value is a key of a Secret in the ToolServer's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HeaderFromSecret {
    /// The header name (an HTTP token), e.g. `Authorization`.
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
    )]
    #[x_kube(
        validation = Rule::new(reserved_header_rule())
            .message("this header is set by the MCP client itself (framing, content negotiation, MCP-Protocol-Version, Mcp-Session-Id); choose another")
    )]
    pub name: String,
    /// The Secret key holding the value.
    pub secret_key_ref: SecretKeyRef,
}

/// Where Workflows that may use a ToolServer live (the Gateway API's cross-namespace rule).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.from != 'Selector' || has(self.selector)")
        .message("from: Selector needs a selector"),
    validation = Rule::new("self.from == 'Selector' || !has(self.selector)")
        .message("a selector is read only with from: Selector")
)]
pub struct AllowedNamespaces {
    #[serde(default)]
    pub from: NamespacesFrom,
    /// The namespaces' labels to match, with `from: Selector` (an empty selector matches
    /// every namespace, as in Kubernetes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// Which namespaces [`AllowedNamespaces`] admits.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum NamespacesFrom {
    /// The ToolServer's own namespace.
    #[default]
    Same,
    /// Every namespace.
    All,
    /// Namespaces whose labels match `selector`.
    Selector,
}

/// A ToolServer's `allowedNamespaces` names a selector that cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allowedNamespaces.selector is not a valid label selector: {0}")]
pub struct InvalidSelector(pub String);

impl ToolServer {
    /// Whether a Workflow in namespace `namespace` (labels `labels`) may use this server.
    /// Absent `allowedNamespaces` means this namespace only.
    pub fn allows_namespace(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<bool, InvalidSelector> {
        let own = self.metadata.namespace.as_deref() == Some(namespace);
        let Some(allowed) = &self.spec.allowed_namespaces else {
            return Ok(own);
        };
        match allowed.from {
            NamespacesFrom::Same => Ok(own),
            NamespacesFrom::All => Ok(true),
            NamespacesFrom::Selector => {
                // Admission requires a selector with `Selector`; a missing one admits nobody
                // else rather than everybody.
                let Some(selector) = &allowed.selector else {
                    return Ok(own);
                };
                let selector = Selector::try_from(selector.clone())
                    .map_err(|e| InvalidSelector(e.to_string()))?;
                Ok(own || selector.matches(labels))
            }
        }
    }
}

/// Most tools `status.tools` lists (`status.toolCount` counts them all): bounds the object.
pub const MAX_STATUS_TOOLS: usize = 512;

/// `Ready` reason: the tools are listed at the preferred revision.
pub const REASON_LISTED: &str = "Listed";
/// `Ready` reason: the tools are listed at the admin's fallback revision.
pub const REASON_PROTOCOL_FALLBACK: &str = "ProtocolFallback";
/// `Ready=False` reason: the server did not answer.
pub const REASON_UNREACHABLE: &str = "Unreachable";
/// `Ready=False` reason: the server speaks no revision the spec accepts.
pub const REASON_PROTOCOL_UNSUPPORTED: &str = "ProtocolUnsupported";
/// `Ready=False` reason: a `headersFrom` Secret or key is missing.
pub const REASON_HEADER_SECRET_MISSING: &str = "HeaderSecretMissing";
/// `Ready=False` reason: `tools/list` failed or answered outside the protocol.
pub const REASON_LIST_FAILED: &str = "ListFailed";
/// `Ready=False` reason: the server refused the credentials (HTTP 401 or 403).
pub const REASON_UNAUTHORIZED: &str = "Unauthorized";

/// Observed state of a ToolServer.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ToolServerStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: the tools are listed (reasons `Listed`, `ProtocolFallback`) or not
    /// (`Unreachable`, `Unauthorized`, `ProtocolUnsupported`, `HeaderSecretMissing`,
    /// `ListFailed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The MCP revision in use: the preferred one, or the named fallback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"))]
    pub protocol_version: Option<String>,
    /// The server's tools with the host's tier, sorted by name (at most 512).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 512))]
    pub tools: Vec<CatalogTool>,
    /// How many tools the server lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_count: Option<u32>,
}

impl ToolServerStatus {
    /// `status.tools` and `status.toolCount` from a `tools/list` answer: each tool classified
    /// by the spec's `toolTiers`, sorted by name (an unchanged catalog reads the same), at
    /// most [`MAX_STATUS_TOOLS`].
    pub fn set_tools(
        &mut self,
        listed: &[openwop_protocol::tools::policy::DiscoveredTool],
        tiers: &[TierAssignment],
    ) {
        let mut tools: Vec<CatalogTool> =
            listed.iter().map(|t| CatalogTool::of(t, tiers)).collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools.dedup_by(|a, b| a.name == b.name);
        self.tool_count = Some(tools.len() as u32);
        tools.truncate(MAX_STATUS_TOOLS);
        self.tools = tools;
    }
}
