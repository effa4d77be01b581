//! The MCP client (`openwop_providers::mcp`) against two servers: the test support's
//! [`FakeMcp`] (every knob: event streams, another revision, refused credentials, a huge
//! result, a slow tool, an expired session), and a real MCP server implementation from the
//! registry — the `rmcp` SDK's streamable HTTP server — as the interop peer.

use std::time::Duration;

use openwop_protocol::tools::mcp::{McpRevision, Negotiated, RevisionPolicy};
use openwop_providers::mcp::{McpError, McpServer, McpSession};
use openwop_providers::testing::mcp::{FakeMcp, Knobs};
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

fn server(url: &str) -> McpServer {
    McpServer {
        url: url.to_owned(),
        headers: vec![],
        revisions: RevisionPolicy::default(),
        timeout: Duration::from_secs(5),
        max_body_bytes: 4 << 20,
    }
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn lists_and_calls_tools_over_json_and_event_stream_answers() {
    for event_stream in [false, true] {
        let fake = FakeMcp::start(Knobs {
            event_stream,
            ..Knobs::default()
        });
        let s = McpSession::connect(server(&fake.url)).await.unwrap();
        assert_eq!(s.negotiated(), Negotiated::Preferred(McpRevision::DEFAULT));
        let names: Vec<String> = s
            .list_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(names, ["lookup", "write_note", "fail", "huge", "slow"]);
        let r = s
            .call_tool("lookup", args(json!({"query": "otters"})))
            .await
            .unwrap();
        assert_eq!(text_of(&r), "found: otters", "event stream: {event_stream}");
        // A tool's own failure is a result for the model, not a client error.
        let r = s.call_tool("fail", Map::new()).await.unwrap();
        assert_eq!(r["isError"], true);
        // An unknown tool is the server's JSON-RPC error, named.
        let e = s.call_tool("nope", Map::new()).await.unwrap_err();
        assert!(matches!(e, McpError::Rpc { code: -32602, .. }), "{e}");
        fake.log(|l| {
            assert_eq!(l.calls.len(), 3);
            assert_eq!(
                l.bad_headers, 0,
                "session id and revision on every later request"
            );
        });
    }
}

#[tokio::test]
async fn another_revision_is_refused_unless_the_admin_named_it_as_the_fallback() {
    let fake = FakeMcp::start(Knobs {
        revision: Some("2025-03-26".into()),
        ..Knobs::default()
    });
    let e = McpSession::connect(server(&fake.url)).await.unwrap_err();
    let McpError::Revision(refused) = &e else {
        panic!("{e}")
    };
    let info = refused.error_info();
    assert_eq!(info.code, "interop_version_unsupported");
    assert_eq!(info.details.unwrap()["supported"], json!(["2025-06-18"]));
    let mut with_fallback = server(&fake.url);
    with_fallback.revisions.fallback = Some(McpRevision::V2025_03_26);
    let s = McpSession::connect(with_fallback).await.unwrap();
    assert_eq!(
        s.negotiated(),
        Negotiated::Fallback(McpRevision::V2025_03_26)
    );
    s.call_tool("lookup", args(json!({"query": "q"})))
        .await
        .unwrap();
    fake.log(|l| assert_eq!(l.bad_headers, 0, "the fallback revision is the one sent"));
}

#[tokio::test]
async fn credentials_come_from_headers_and_a_refusal_never_quotes_them() {
    let fake = FakeMcp::start(Knobs {
        authorization: Some("Bearer tool-secret-1".into()),
        ..Knobs::default()
    });
    let e = McpSession::connect(server(&fake.url)).await.unwrap_err();
    assert!(
        matches!(e, McpError::Unauthorized { status: 401, .. }),
        "{e}"
    );
    let mut wrong = server(&fake.url);
    wrong.headers = vec![(
        HeaderName::from_static("authorization"),
        HeaderValue::from_static("Bearer tool-secret-2"),
    )];
    let e = McpSession::connect(wrong).await.unwrap_err();
    assert!(!format!("{e} {e:?}").contains("tool-secret"), "{e:?}");
    let mut right = server(&fake.url);
    right.headers = vec![(
        HeaderName::from_static("authorization"),
        HeaderValue::from_static("Bearer tool-secret-1"),
    )];
    let s = McpSession::connect(right).await.unwrap();
    assert!(!format!("{s:?}").contains("tool-secret"), "{s:?}");
    s.call_tool("write_note", args(json!({"text": "hi"})))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_huge_result_and_a_slow_tool_are_cut_off_by_their_bounds() {
    let fake = FakeMcp::start(Knobs {
        huge_bytes: 3 << 20,
        slow: Duration::from_secs(3),
        ..Knobs::default()
    });
    let mut bounded = server(&fake.url);
    bounded.max_body_bytes = 1 << 20;
    bounded.timeout = Duration::from_millis(800);
    let s = McpSession::connect(bounded).await.unwrap();
    let e = s.call_tool("huge", Map::new()).await.unwrap_err();
    assert!(
        matches!(e, McpError::TooLarge { limit: 1048576, .. }),
        "{e}"
    );
    assert!(!e.is_transient());
    let e = s.call_tool("slow", Map::new()).await.unwrap_err();
    assert!(matches!(e, McpError::Timeout { .. }), "{e}");
    assert!(e.is_transient());
}

#[tokio::test]
async fn an_expired_session_is_replaced_and_the_call_made_once() {
    let fake = FakeMcp::start(Knobs::default());
    let s = McpSession::connect(server(&fake.url)).await.unwrap();
    fake.knobs(|k| k.expire_session = true);
    let r = s
        .call_tool("lookup", args(json!({"query": "again"})))
        .await
        .unwrap();
    assert_eq!(text_of(&r), "found: again");
    fake.log(|l| {
        assert_eq!(l.sessions, 2, "a new session");
        assert_eq!(l.calls.len(), 1, "the call reached the tool once");
        assert_eq!(l.bad_headers, 0);
    });
}

#[tokio::test]
async fn an_unreachable_server_is_named_and_transient() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = McpSession::connect(server(&format!("http://127.0.0.1:{port}/mcp?key=k3y")))
        .await
        .unwrap_err();
    assert!(matches!(e, McpError::Unreachable { .. }), "{e}");
    assert!(e.is_transient());
    assert!(!e.to_string().contains("k3y"), "{e}");
}

/// The interop peer: a server built with the `rmcp` SDK (its streamable HTTP transport),
/// with one tool, `add`.
mod rmcp_peer {
    use std::sync::Arc;

    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    };
    use rmcp::service::RequestContext;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    use rmcp::{ErrorData, RoleServer, ServerHandler};
    use serde_json::json;

    #[derive(Clone)]
    pub struct Adder;

    impl ServerHandler for Adder {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            let schema = json!({"type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"]});
            let schema = schema.as_object().cloned().unwrap_or_default();
            Ok(ListToolsResult::with_all_items(vec![Tool::new(
                "add",
                "Adds two numbers.",
                Arc::new(schema),
            )]))
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            let args = request.arguments.unwrap_or_default();
            let n = |k: &str| args.get(k).and_then(|v| v.as_f64()).unwrap_or(0.0);
            if request.name != "add" {
                return Ok(CallToolResult::error(vec![ContentBlock::text("no such tool")]).into());
            }
            Ok(
                CallToolResult::success(vec![ContentBlock::text(format!("{}", n("a") + n("b")))])
                    .into(),
            )
        }
    }

    /// Serves [`Adder`] at `http://127.0.0.1:<port>/mcp` until the runtime ends.
    pub async fn start() -> String {
        let service: StreamableHttpService<Adder, LocalSessionManager> = StreamableHttpService::new(
            || Ok(Adder),
            Default::default(),
            StreamableHttpServerConfig::default(),
        );
        let router = axum::Router::new().nest_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        format!("http://{addr}/mcp")
    }
}

#[tokio::test]
async fn a_real_mcp_server_from_the_registry_is_listed_and_called() {
    let url = rmcp_peer::start().await;
    for preferred in [McpRevision::V2025_06_18, McpRevision::V2025_11_25] {
        let mut srv = server(&url);
        srv.revisions.preferred = preferred;
        let s = McpSession::connect(srv).await.unwrap();
        assert_eq!(s.negotiated(), Negotiated::Preferred(preferred));
        let tools = s.list_tools().await.unwrap();
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].name, "add");
        assert_eq!(tools[0].input_schema["required"], json!(["a", "b"]));
        let r = s
            .call_tool("add", args(json!({"a": 2, "b": 40})))
            .await
            .unwrap();
        assert_eq!(text_of(&r), "42", "{r}");
        assert_ne!(r["isError"], true);
    }
}
