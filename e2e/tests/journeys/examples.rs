//! Issue #24's example (`examples/07-ticket-escalation.yaml`) as CI applies it: the file with
//! its placeholder ticketing API (`http://ticketing.tools.svc:8080`) pointed at a stand-in
//! service on this host's loopback (the mini-cluster's values allow loopback egress). The
//! urgent ticket waits for a person's approval, then opens the ticket and follows up in a child
//! Run (`ticket-follow-up`: a delay, then the follow-up call); the routine one skips the
//! approval.

use super::*;

/// The placeholder the example documents for the ticketing API.
const TICKETING: &str = "http://ticketing.tools.svc:8080";

pub(super) async fn ticket_escalation(c: &Cluster, ns: &str) {
    if !c.local {
        eprintln!(
            "SKIPPED examples/07-ticket-escalation.yaml: its stand-in ticketing service listens on this host's loopback, which only the mini-cluster's workers share"
        );
        return;
    }
    let (port, seen) = super::ticket_service();
    let file = std::fs::read_to_string(repo().join("examples/07-ticket-escalation.yaml")).unwrap();
    assert!(
        file.contains(TICKETING),
        "the example's placeholder URL moved"
    );
    let manifests = file.replace(TICKETING, &format!("http://127.0.0.1:{port}"));
    ok(
        apply(c, ns, &manifests),
        "apply examples/07-ticket-escalation.yaml",
    );
    wait_workflow(c, ns, "ticket-escalation", "True").await;
    wait_workflow(c, ns, "ticket-follow-up", "True").await;

    // Routine: no approval, the ticket is opened and followed up.
    wait_run(c, ns, "ticket-routine", "completed", 120).await;
    let evs = events(c, ns, "ticket-routine");
    assert_gapless(&evs);
    let skipped = node_ids(&evs, "node.skipped");
    assert_eq!(skipped, ["approve"], "{:?}", types(&evs));

    // Urgent: waits for a person, then the same path.
    let st = wait_run(c, ns, "ticket-urgent", "waiting-approval", 120).await;
    assert_eq!(st["pendingInterrupts"][0]["nodeId"], "approve", "{st:#}");
    ok(
        cli(
            c,
            &["resume", "ticket-urgent", "-n", ns, "--action", "accept"],
        ),
        "kubectl openwop resume ticket-urgent",
    );
    wait_run(c, ns, "ticket-urgent", "completed", 120).await;
    let evs = events(c, ns, "ticket-urgent");
    assert_gapless(&evs);
    let completed = node_ids(&evs, "node.completed");
    assert_eq!(
        completed,
        [
            "classify",
            "approve",
            "open-ticket",
            "remember",
            "follow-up"
        ],
        "{:?}",
        types(&evs)
    );
    // The follow-up ran as a child Run of the parent's `follow-up` node: a delay, then the call.
    let dispatched = evs
        .iter()
        .find(|e| e["type"] == "node.completed" && e["nodeId"] == "follow-up")
        .unwrap();
    assert_eq!(
        dispatched["payload"]["outputs"]["childStatus"], "completed",
        "{dispatched}"
    );
    let parent_id = st["runId"].as_str().unwrap();
    let child = child_run(c, ns, parent_id).await;
    let child_evs = events(c, ns, &child);
    assert_gapless(&child_evs);
    let child_done = node_ids(&child_evs, "node.completed");
    assert_eq!(child_done, ["wait", "follow-up"], "{:?}", types(&child_evs));
    let follow_up = child_evs
        .iter()
        .find(|e| e["type"] == "node.completed" && e["nodeId"] == "follow-up")
        .unwrap();
    assert_eq!(
        follow_up["payload"]["outputs"]["status"], 201,
        "{follow_up}"
    );
    let all = serde_json::to_string(&child_evs).unwrap();
    assert!(
        !all.contains("replace-me"),
        "the Secret's token reached the child's events"
    );
    let all = serde_json::to_string(&evs).unwrap();
    assert!(
        !all.contains("replace-me"),
        "the Secret's token reached the events"
    );

    // Two runs, two calls each: open, then follow up on the id the API answered.
    let heads = seen.lock().unwrap().clone();
    let lines: Vec<String> = heads
        .iter()
        .map(|h| h.lines().next().unwrap_or("").to_owned())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    for want in ["POST /tickets ", "POST /tickets/T-1/follow-up "] {
        assert_eq!(
            lines.iter().filter(|l| l.starts_with(want)).count(),
            2,
            "{want}: {lines:?}"
        );
    }
    assert!(
        heads.iter().all(|h| h
            .to_ascii_lowercase()
            .contains("authorization: bearer replace-me")),
        "the Secret's token reached the ticketing API"
    );
}

/// The name of the one child Run of the run `parent_id` (label `openwop.dev/parent-run`).
async fn child_run(c: &Cluster, ns: &str, parent_id: &str) -> String {
    let runs = api(c, ns, "Run")
        .list(&ListParams::default().labels(&format!("openwop.dev/parent-run={parent_id}")))
        .await
        .unwrap();
    let names: Vec<String> = runs
        .items
        .into_iter()
        .filter_map(|r| r.metadata.name)
        .collect();
    assert_eq!(names.len(), 1, "children of {parent_id}: {names:?}");
    names.into_iter().next().unwrap()
}

/// The node ids of the events of type `ty`, in log order.
fn node_ids<'a>(evs: &'a [Value], ty: &str) -> Vec<&'a str> {
    evs.iter()
        .filter(|e| e["type"] == ty)
        .filter_map(|e| e["nodeId"].as_str())
        .collect()
}

/// The placeholder the agent-tools example documents for its MCP server.
const KB: &str = "http://kb.tools.svc:8000/mcp";

/// Issue #42's example (`examples/08-agent-tools.yaml`) as CI applies it, against a real MCP
/// server built with the `rmcp` SDK on this host's loopback (`kb_server`), its placeholder
/// URL and token replaced: the ToolServer becomes Ready with the admin's tiers; the agent
/// looks the question up (a read, no approval), then waits holding no pod before its write;
/// accepted, the write is made once; each call is in the events and the CLI timeline, and
/// the token is in none of them.
pub(super) async fn agent_tools(c: &Cluster, ns: &str) {
    if !c.local {
        eprintln!(
            "SKIPPED examples/08-agent-tools.yaml: its MCP server listens on this host's loopback, which only the mini-cluster's workers share"
        );
        return;
    }
    let token = "Bearer kb-token-7f3a91";
    let (url, calls) = kb_server(token).await;
    let file = std::fs::read_to_string(repo().join("examples/08-agent-tools.yaml")).unwrap();
    assert!(file.contains(KB), "the example's placeholder URL moved");
    let manifests = file.replace(KB, &url).replace("Bearer replace-me", token);
    ok(
        apply(c, ns, &manifests),
        "apply examples/08-agent-tools.yaml",
    );

    // The operator lists the server's tools with the admin's tiers.
    let servers = api(c, ns, "ToolServer");
    let listed = wait_for(Duration::from_secs(60), "ToolServer kb Ready", || {
        let servers = servers.clone();
        async move {
            let o = servers.get_opt("kb").await.ok().flatten()?;
            condition(&o, "Ready")
                .filter(|c| c["status"] == "True")
                .map(|_| status(&o))
        }
    })
    .await;
    let tiers: Vec<(String, String)> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_owned(),
                t["tier"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        tiers,
        [
            ("file_note".into(), "write".into()),
            ("lookup".into(), "read".into())
        ],
        "{listed:#}"
    );

    // The read is made; the write waits for a person, and no pod waits with it.
    let st = wait_run(c, ns, "agent-tools", "waiting-approval", 120).await;
    assert_eq!(st["pendingInterrupts"][0]["nodeId"], "answer", "{st:#}");
    assert_eq!(kb_calls(&calls), ["lookup"]);
    wait_for(Duration::from_secs(30), "no worker is held", || {
        let c = c.clone();
        let ns = ns.to_owned();
        async move { worker_pods(&c, &ns).await.is_empty().then_some(()) }
    })
    .await;
    let timeline = ok(
        cli(c, &["events", "agent-tools", "-n", ns]),
        "kubectl openwop events agent-tools",
    );
    assert!(
        timeline.contains("mcp:kb/lookup") && timeline.contains("Call tool mcp:kb/file_note?"),
        "{timeline}"
    );

    ok(
        cli(
            c,
            &["resume", "agent-tools", "-n", ns, "--action", "accept"],
        ),
        "kubectl openwop resume agent-tools",
    );
    let st = wait_run(c, ns, "agent-tools", "completed", 120).await;
    assert_eq!(
        kb_calls(&calls),
        ["lookup", "file_note"],
        "each call made once"
    );
    let evs = events(c, ns, "agent-tools");
    assert_gapless(&evs);
    let returned: Vec<(&str, &str)> = evs
        .iter()
        .filter(|e| e["type"] == "agent.toolReturned")
        .map(|e| {
            (
                e["payload"]["toolId"].as_str().unwrap_or(""),
                e["payload"]["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        returned,
        [("mcp:kb/lookup", "ok"), ("mcp:kb/file_note", "ok")]
    );
    let done = evs
        .iter()
        .find(|e| e["type"] == "node.completed" && e["nodeId"] == "answer")
        .unwrap();
    assert_eq!(
        done["payload"]["outputs"]["output"]["answer"],
        "Open the VPN client, choose Reset, and sign in again."
    );
    let token_value = token.trim_start_matches("Bearer ");
    for (what, text) in [
        ("events", serde_json::to_string(&evs).unwrap()),
        ("status", st.to_string()),
        ("ToolServer status", listed.to_string()),
    ] {
        assert!(!text.contains(token_value), "the token reached the {what}");
    }
}

fn kb_calls(calls: &std::sync::Arc<std::sync::Mutex<Vec<String>>>) -> Vec<String> {
    calls.lock().unwrap().clone()
}

/// A knowledge-base MCP server built with the `rmcp` SDK (streamable HTTP), requiring
/// `Authorization: <token>`: `lookup {query}` and `file_note {text}`, each call counted.
/// Serves until the test's runtime ends; returns its URL and the calls it ran.
async fn kb_server(token: &'static str) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::sync::{Arc, Mutex};

    use axum::response::IntoResponse;
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

    #[derive(Clone)]
    struct Kb(Arc<Mutex<Vec<String>>>);

    impl ServerHandler for Kb {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            let arg = |name: &str| {
                let s = json!({"type": "object", "properties": {name: {"type": "string"}},
                               "required": [name]});
                Arc::new(s.as_object().cloned().unwrap_or_default())
            };
            Ok(ListToolsResult::with_all_items(vec![
                Tool::new(
                    "lookup",
                    "Looks a question up in the knowledge base.",
                    arg("query"),
                ),
                Tool::new("file_note", "Files a note.", arg("text")),
            ]))
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            let args = request.arguments.unwrap_or_default();
            let text = |k: &str| {
                args.get(k)
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_owned()
            };
            self.0.lock().unwrap().push(request.name.to_string());
            let answer = match request.name.as_ref() {
                "lookup" => format!(
                    "KB-12: to reset the VPN ({}) open the client and choose Reset.",
                    text("query")
                ),
                "file_note" => format!("note filed: {}", text("text")),
                other => {
                    return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                        "no tool {other}"
                    ))])
                    .into());
                }
            };
            Ok(CallToolResult::success(vec![ContentBlock::text(answer)]).into())
        }
    }

    let calls: Arc<Mutex<Vec<String>>> = Arc::default();
    let kb = Kb(calls.clone());
    let service: StreamableHttpService<Kb, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(kb.clone()),
        Default::default(),
        StreamableHttpServerConfig::default(),
    );
    let router =
        axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| async move {
                    let authorized = req
                        .headers()
                        .get("authorization")
                        .is_some_and(|v| v.as_bytes() == token.as_bytes());
                    if !authorized {
                        return axum::http::StatusCode::UNAUTHORIZED.into_response();
                    }
                    next.run(req).await
                },
            ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (format!("http://{addr}/mcp"), calls)
}
