//! The ToolServer reconciler: resolves the server's headers from their Secrets, connects
//! with the MCP client at the ToolServer's revision policy, lists its tools, and writes
//! `status` (the tools with the host's tiers, the revision in use, `Ready`). A failure is
//! `Ready=False` with a reason and a message that says what to do; a change of the `Ready`
//! condition is also a Kubernetes Event (Warning when it turns False).
//!
//! It runs on create and change (a new generation), and again every [`READY_RECHECK`] while
//! Ready (a server's tools change without the ToolServer changing); while not Ready it
//! retries after the time it has been failing, between [`MIN_RETRY`] and [`READY_RECHECK`],
//! so a fixed Secret or a server that came up is noticed soon and a dead one is not hammered.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Client, Resource, ResourceExt};
use openwop_crds::toolserver::{
    MAX_STATUS_TOOLS, REASON_LIST_FAILED, REASON_LISTED, REASON_PROTOCOL_FALLBACK,
    REASON_PROTOCOL_UNSUPPORTED, REASON_UNAUTHORIZED, REASON_UNREACHABLE,
};
use openwop_crds::{ToolServer, ToolServerStatus};
use openwop_protocol::tools::mcp::Negotiated;
use openwop_protocol::tools::policy::DiscoveredTool;
use openwop_providers::mcp::{McpError, McpServer, McpSession};
use serde_json::json;

use super::headers::{HeaderError, resolve};
use crate::kube_events::{EventSink, Note};
use crate::metrics::Metrics;
use crate::names::MANAGER;
use crate::reasons::{ConditionType, Reason, condition, set_condition};

/// How often a Ready ToolServer's tools are listed again.
pub const READY_RECHECK: Duration = Duration::from_secs(300);
/// The soonest a failing ToolServer is tried again.
pub const MIN_RETRY: Duration = Duration::from_secs(15);
/// Longest wait for one exchange of a listing: the server's `timeoutSeconds` bounds a tool
/// call (up to 10 minutes), which is far too long to hold a reconcile for a list.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest `tools/list` page read (a 512-tool page with schemas fits well within it).
const MAX_LIST_BYTES: u64 = 8 << 20;
/// Longest part of the MCP client's own description of a malformed answer kept in a message.
const MAX_WHY_CHARS: usize = 200;
/// Longest tool name `status.tools` admits (`CatalogTool.name`'s bound in the CRD schema,
/// MCP's own limit): a longer one would make the apiserver refuse the whole status.
const MAX_TOOL_NAME_CHARS: usize = 128;
/// The metrics' controller label.
const CONTROLLER: &str = "toolserver";

/// What the ToolServer reconciler is given.
pub struct ToolServerContext {
    pub client: Client,
    /// Where its Kubernetes Events go (the reconcilers' shared sink).
    pub events: EventSink,
    pub metrics: Metrics,
    /// Injected clock, so tests are deterministic.
    pub now: fn() -> Timestamp,
}

/// A reconcile that failed before deciding the status (retried by [`error_policy`]).
#[derive(Debug, thiserror::Error)]
pub enum ToolServerError {
    #[error("ToolServer {0} has no namespace")]
    NoNamespace(String),
    /// The API server failed a header Secret's GET (a missing Secret is a status instead).
    #[error("{0}")]
    Headers(HeaderError),
    #[error("writing the ToolServer's status: {0}")]
    Kube(#[from] kube::Error),
}

impl ToolServerError {
    /// Metric label.
    fn reason(&self) -> &'static str {
        match self {
            ToolServerError::NoNamespace(_) => "NoNamespace",
            ToolServerError::Headers(_) => "HeaderSecret",
            ToolServerError::Kube(_) => "Kube",
        }
    }
}

/// After a failed reconcile: log, count, retry later.
pub fn error_policy(
    _ts: Arc<ToolServer>,
    err: &ToolServerError,
    ctx: Arc<ToolServerContext>,
) -> Action {
    ctx.metrics.reconcile_failed(CONTROLLER, err.reason());
    tracing::warn!(error = %err, "ToolServer reconcile failed");
    Action::requeue(MIN_RETRY)
}

/// A listing that worked: the tools and the revision spoken.
struct Listing {
    tools: Vec<DiscoveredTool>,
    negotiated: Negotiated,
}

/// A listing that did not: the `Ready` reason and a message for people.
struct Failure {
    reason: &'static str,
    message: String,
}

/// Lists `ts`'s tools and writes its status; see the module doc.
pub async fn reconcile_tool_server(
    ts: Arc<ToolServer>,
    ctx: Arc<ToolServerContext>,
) -> Result<Action, ToolServerError> {
    let started = std::time::Instant::now();
    ctx.metrics.reconcile_started(CONTROLLER);
    let name = ts.name_any();
    let ns = ts
        .namespace()
        .ok_or_else(|| ToolServerError::NoNamespace(name.clone()))?;
    let outcome = list(&ctx.client, &ts).await?;
    let now = (ctx.now)();
    let old = ts.status.clone().unwrap_or_default();
    let generation = ts.metadata.generation;
    let mut status = ToolServerStatus {
        observed_generation: generation,
        conditions: old.conditions.clone(),
        ..ToolServerStatus::default()
    };
    let ready = match &outcome {
        Ok(listing) => {
            let (tools, unnamed) = admissible(&listing.tools);
            status.set_tools(&tools, &ts.spec.tool_tiers);
            let revision = listing.negotiated.revision();
            status.protocol_version = Some(revision.as_str().to_owned());
            let count = status.tool_count.unwrap_or_default() as usize;
            let mut message = match listing.negotiated {
                Negotiated::Preferred(_) => {
                    format!("listed {count} tools at MCP revision {}", revision.as_str())
                }
                Negotiated::Fallback(_) => format!(
                    "listed {count} tools at the fallback MCP revision {} (spec.protocolVersion.fallback): the server does not speak {}; upgrade it to stop relying on the fallback",
                    revision.as_str(),
                    ts.spec.protocol_version.preferred.as_str()
                ),
            };
            if count > MAX_STATUS_TOOLS {
                message.push_str(&format!(
                    "; status.tools holds the first {MAX_STATUS_TOOLS} by name"
                ));
            }
            if unnamed > 0 {
                message.push_str(&format!(
                    "; {unnamed} more have an empty name or one longer than {MAX_TOOL_NAME_CHARS} characters and are not offered"
                ));
            }
            let reason = match listing.negotiated {
                Negotiated::Preferred(_) => REASON_LISTED,
                Negotiated::Fallback(_) => REASON_PROTOCOL_FALLBACK,
            };
            condition(
                ConditionType::Ready,
                true,
                reason,
                message,
                generation,
                now,
                &old.conditions,
            )
        }
        // What was listed before is not kept: a server that is not Ready offers no tools.
        Err(f) => condition(
            ConditionType::Ready,
            false,
            f.reason,
            f.message.clone(),
            generation,
            now,
            &old.conditions,
        ),
    };
    set_condition(&mut status.conditions, ready.clone());
    if status != old {
        let api: Api<ToolServer> = Api::namespaced(ctx.client.clone(), &ns);
        let patch = json!({
            "apiVersion": ToolServer::api_version(&()),
            "kind": ToolServer::kind(&()),
            "status": status,
        });
        api.patch_status(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    }
    let previous = ready_of(&old.conditions);
    // One Event per change of the condition, not one per listing.
    if previous.map(|c| (&c.status, &c.reason)) != Some((&ready.status, &ready.reason)) {
        // Names and reasons only: the message may name a Secret, never its value.
        tracing::info!(toolserver = %format!("{ns}/{name}"), ready = %ready.status, reason = %ready.reason, "ToolServer Ready changed");
        let type_ = if ready.status == "True" {
            EventType::Normal
        } else {
            EventType::Warning
        };
        let reason = match &outcome {
            Ok(l) if matches!(l.negotiated, Negotiated::Fallback(_)) => REASON_PROTOCOL_FALLBACK,
            Ok(_) => REASON_LISTED,
            Err(f) => f.reason,
        };
        ctx.events
            .record(
                ts.object_ref(&()),
                Note {
                    type_,
                    reason: Reason::ToolServer(reason),
                    note: ready.message.clone(),
                },
            )
            .await;
    }
    ctx.metrics
        .observe_duration(CONTROLLER, started.elapsed().as_secs_f64());
    Ok(Action::requeue(match outcome {
        Ok(_) => READY_RECHECK,
        Err(_) => retry_after(&ready, now),
    }))
}

/// The listed tools whose names `status.tools` can hold, and how many were left out.
fn admissible(listed: &[DiscoveredTool]) -> (Vec<DiscoveredTool>, usize) {
    let ok: Vec<DiscoveredTool> = listed
        .iter()
        .filter(|t| (1..=MAX_TOOL_NAME_CHARS).contains(&t.name.chars().count()))
        .cloned()
        .collect();
    let left_out = listed.len() - ok.len();
    (ok, left_out)
}

fn ready_of(conditions: &[Condition]) -> Option<&Condition> {
    conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Ready.as_str())
}

/// While failing: as long again as it has been failing, within [`MIN_RETRY`] and
/// [`READY_RECHECK`] (a backoff that needs no state beyond the condition).
fn retry_after(ready: &Condition, now: Timestamp) -> Duration {
    let failing = now.duration_since(ready.last_transition_time.0);
    Duration::from_secs(failing.as_secs().max(0) as u64).clamp(MIN_RETRY, READY_RECHECK)
}

/// Resolves the headers, connects and lists. `Err` only when the API server failed a
/// Secret's GET; every other failure is the `Ready=False` it causes.
async fn list(
    client: &Client,
    ts: &ToolServer,
) -> Result<Result<Listing, Failure>, ToolServerError> {
    let headers = match resolve(client, ts).await {
        Ok(h) => h,
        Err(e) => {
            let Some(reason) = e.reason() else {
                return Err(ToolServerError::Headers(e));
            };
            return Ok(Err(Failure {
                reason,
                message: e.to_string(),
            }));
        }
    };
    let server = McpServer {
        url: ts.spec.url.clone(),
        headers: headers.to_http(),
        revisions: ts.spec.protocol_version,
        timeout: LIST_TIMEOUT.min(Duration::from_secs(u64::from(ts.spec.timeout_seconds))),
        max_body_bytes: MAX_LIST_BYTES,
    };
    let session = match McpSession::connect(server).await {
        Ok(s) => s,
        Err(e) => return Ok(Err(failure(&e, Stage::Connect))),
    };
    Ok(match session.list_tools().await {
        Ok(tools) => Ok(Listing {
            tools,
            negotiated: session.negotiated(),
        }),
        Err(e) => Err(failure(&e, Stage::List)),
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// `initialize`: a failure here is about reaching and speaking to the server.
    Connect,
    /// `tools/list`.
    List,
}

/// The `Ready=False` of an MCP failure. Messages are built here from the error's fields, not
/// its text: a server's error body and JSON-RPC message are not quoted (they are the
/// server's words, which may echo what it was sent); the URL is without its query.
fn failure(e: &McpError, stage: Stage) -> Failure {
    let (reason, message) = match e {
        McpError::Unauthorized { url, status } => (
            REASON_UNAUTHORIZED,
            format!(
                "the MCP server at {url} refused the credentials (HTTP {status}); check the values of the Secrets spec.headersFrom names, and that the server expects those headers"
            ),
        ),
        McpError::Revision(r) => (
            REASON_PROTOCOL_UNSUPPORTED,
            format!(
                "the MCP server answered protocol revision {:?}, and this ToolServer accepts {}; set spec.protocolVersion.fallback to an older revision the server speaks, or upgrade the server",
                r.answered,
                r.supported.join(" or ")
            ),
        ),
        McpError::Timeout { url, seconds } => (
            REASON_UNREACHABLE,
            format!(
                "the MCP server at {url} did not answer within {seconds} s; check that it is up and that the operator can reach it (Service, DNS, NetworkPolicy)"
            ),
        ),
        McpError::Unreachable { url, why } => (
            REASON_UNREACHABLE,
            format!(
                "cannot reach the MCP server at {url} ({}); check spec.url, that the server is up, and that the operator can reach it (Service, DNS, NetworkPolicy)",
                openwop_protocol::text::truncate(why, MAX_WHY_CHARS)
            ),
        ),
        McpError::Http { url, status, .. } if stage == Stage::Connect && *status >= 500 => (
            REASON_UNREACHABLE,
            format!(
                "the MCP server at {url} answered HTTP {status} to initialize; check the server's own logs"
            ),
        ),
        McpError::Http { url, status, .. } => (
            REASON_LIST_FAILED,
            format!(
                "the MCP server at {url} answered HTTP {status} to {}; check that spec.url is the server's streamable HTTP endpoint (often ending in /mcp)",
                stage.method()
            ),
        ),
        McpError::Rpc { url, code, .. } => (
            REASON_LIST_FAILED,
            format!(
                "the MCP server at {url} answered {} with JSON-RPC error {code}; check the server's own logs",
                stage.method()
            ),
        ),
        McpError::TooLarge { url, limit } => (
            REASON_LIST_FAILED,
            format!(
                "the MCP server at {url} answered {} with more than {limit} bytes; the operator does not read it",
                stage.method()
            ),
        ),
        McpError::Malformed { url, why } => (
            REASON_LIST_FAILED,
            format!(
                "the MCP server at {url} answered {} outside the protocol ({}); check that spec.url is an MCP server's streamable HTTP endpoint",
                stage.method(),
                openwop_protocol::text::truncate(why, MAX_WHY_CHARS)
            ),
        ),
    };
    Failure { reason, message }
}

impl Stage {
    fn method(self) -> &'static str {
        match self {
            Stage::Connect => "initialize",
            Stage::List => "tools/list",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn a_failing_server_is_retried_later_the_longer_it_fails() {
        let since = Timestamp::from_second(1_000_000).unwrap();
        let ready = Condition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: REASON_UNREACHABLE.into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(since),
        };
        let at = |s: i64| Timestamp::from_second(1_000_000 + s).unwrap();
        assert_eq!(retry_after(&ready, at(0)), MIN_RETRY);
        assert_eq!(retry_after(&ready, at(40)), Duration::from_secs(40));
        assert_eq!(retry_after(&ready, at(100_000)), READY_RECHECK);
    }

    #[test]
    fn tools_whose_names_the_status_cannot_hold_are_left_out() {
        let tool = |name: String| DiscoveredTool {
            name,
            description: None,
            input_schema: serde_json::json!({"type": "object"}),
            annotations: None,
        };
        let listed = [
            tool("lookup".into()),
            tool(String::new()),
            tool("x".repeat(MAX_TOOL_NAME_CHARS)),
            tool("x".repeat(MAX_TOOL_NAME_CHARS + 1)),
        ];
        let (ok, left_out) = admissible(&listed);
        assert_eq!(left_out, 2);
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[0].name, "lookup");
    }

    #[test]
    fn failure_messages_quote_no_server_text() {
        let f = failure(
            &McpError::Http {
                url: "http://s/mcp".into(),
                status: 404,
                text: "server said: token=abc".into(),
            },
            Stage::List,
        );
        assert_eq!(f.reason, REASON_LIST_FAILED);
        assert!(!f.message.contains("token=abc"), "{}", f.message);
        let f = failure(
            &McpError::Rpc {
                url: "http://s/mcp".into(),
                code: -32601,
                message: "no such method, you sent Bearer xyz".into(),
            },
            Stage::List,
        );
        assert!(f.message.contains("-32601") && !f.message.contains("xyz"));
        let f = failure(
            &McpError::Http {
                url: "http://s/mcp".into(),
                status: 503,
                text: String::new(),
            },
            Stage::Connect,
        );
        assert_eq!(f.reason, REASON_UNREACHABLE);
    }
}
