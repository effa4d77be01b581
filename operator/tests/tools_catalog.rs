//! `GET /v1/tools` and `GET /v1/tools/{toolId}` over this replica's ToolServer cache, against
//! a mocked API server that accepts the token, answers each SubjectAccessReview from a fixed
//! rule and serves namespaces' labels: a tenant sees the tools of the Ready servers that admit
//! it, with the host's policies; a caller who may not read the tenant's workflows gets 403 for
//! the list and 404 for one tool, as for a tool that does not exist.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body as AxBody;
use http::{Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use kube::runtime::{reflector, watcher};
use openwop_crds::{Run, ToolServer, Workflow};
use openwop_operator::config::OperatorConfig;
use openwop_operator::rest::{self, RestState};
use serde_json::{Value, json};
use tower::ServiceExt;
use tower_test::mock;

/// Every token is `system:serviceaccount:team-a:<token>`. `reader` may read workflows in
/// team-a and team-b; anyone else nothing. Namespace team-b is labelled `tier: gold`.
fn app(servers: Vec<ToolServer>, namespace_reads: Arc<AtomicUsize>) -> axum::Router {
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let sars = Arc::new(Mutex::new(Vec::<Value>::new()));
    tokio::spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            let path = req.uri().path().to_owned();
            let bytes = req.into_body().collect().await.unwrap().to_bytes();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (code, out) = if path.ends_with("/tokenreviews") {
                let t = body["spec"]["token"].as_str().unwrap();
                let mut out = body.clone();
                out["status"] = json!({"authenticated": true, "user": {"username": format!("system:serviceaccount:team-a:{t}"), "uid": t}});
                (201, out)
            } else if path.ends_with("/subjectaccessreviews") {
                let a = &body["spec"]["resourceAttributes"];
                let user = body["spec"]["user"].as_str().unwrap();
                sars.lock().unwrap().push(a.clone());
                let allowed = user.ends_with(":reader")
                    && a["resource"] == "workflows"
                    && a["verb"] == "get"
                    && (a["namespace"] == "team-a" || a["namespace"] == "team-b");
                let mut out = body.clone();
                out["status"] = json!({"allowed": allowed});
                (201, out)
            } else if let Some(ns) = path.strip_prefix("/api/v1/namespaces/") {
                namespace_reads.fetch_add(1, Ordering::SeqCst);
                let labels = if ns == "team-b" {
                    json!({"tier": "gold"})
                } else {
                    json!({})
                };
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}),
                )
            } else {
                panic!("unexpected request {path}");
            };
            send.send_response(
                Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&out).unwrap()))
                    .unwrap(),
            );
        }
    });
    let (store, mut writer) = reflector::store::<ToolServer>();
    for ts in servers {
        writer.apply_watcher_event(&watcher::Event::Apply(ts));
    }
    let (runs, _) = reflector::store::<Run>();
    let (workflows, _) = reflector::store::<Workflow>();
    let state = RestState::new(
        Client::new(svc, "default"),
        Arc::new(OperatorConfig::default()),
        runs,
        workflows,
    )
    .with_tool_servers(store);
    rest::router(state, utoipa_axum::router::OpenApiRouter::new())
}

fn server(ns: &str, name: &str, spec: Value, ready: bool, tools: Value) -> ToolServer {
    let mut spec = spec;
    spec["url"] = json!("http://mcp.example/mcp");
    serde_json::from_value(json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "ToolServer",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
        "status": {
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                "reason": if ready { "Listed" } else { "Unreachable" }, "message": "",
                "lastTransitionTime": "2025-06-15T15:06:40Z"}],
            "tools": tools,
        },
    }))
    .unwrap()
}

fn fixture() -> Vec<ToolServer> {
    vec![
        server(
            "team-a",
            "search",
            json!({"headersFrom": [{"name": "Authorization", "secretKeyRef": {"name": "s", "key": "k"}}]}),
            true,
            json!([{"name": "lookup", "description": "Looks a term up", "tier": "read"},
                   {"name": "write_note", "tier": "write"}]),
        ),
        server(
            "shared",
            "tickets",
            json!({"allowedNamespaces": {"from": "All"}}),
            true,
            json!([{"name": "close", "tier": "write"}, {"name": "shell", "tier": "exec"}]),
        ),
        // A second `search`, shared with everyone: team-a's own one wins there.
        server(
            "shared",
            "search",
            json!({"allowedNamespaces": {"from": "All"}}),
            true,
            json!([{"name": "shared_lookup", "tier": "read"}]),
        ),
        server(
            "team-a",
            "down",
            json!({}),
            false,
            json!([{"name": "x", "tier": "read"}]),
        ),
        server(
            "other",
            "private",
            json!({}),
            true,
            json!([{"name": "y", "tier": "read"}]),
        ),
        server(
            "labs",
            "picky",
            json!({"allowedNamespaces": {"from": "Selector", "selector": {"matchLabels": {"tier": "gold"}}}}),
            true,
            json!([{"name": "p", "tier": "read"}]),
        ),
    ]
}

async fn get(app: &axum::Router, uri: &str, token: &str) -> (StatusCode, Value) {
    let req = Request::get(uri)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(AxBody::empty())
        .unwrap();
    let r = app.clone().oneshot(req).await.unwrap();
    let status = r.status();
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn ids(list: &Value) -> Vec<String> {
    list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["toolId"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_tenant_sees_the_tools_of_the_ready_servers_that_admit_it() {
    let reads = Arc::new(AtomicUsize::new(0));
    let app = app(fixture(), reads.clone());
    // The caller's own namespace is the default tenant.
    let (status, body) = get(&app, "/v1/tools", "reader").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        ids(&body),
        [
            "mcp:search/lookup",
            "mcp:search/write_note",
            "mcp:tickets/close",
            "mcp:tickets/shell"
        ]
    );
    assert_eq!(
        body["tools"][0],
        json!({"toolId": "mcp:search/lookup", "source": "mcp", "title": "lookup",
               "description": "Looks a term up", "safetyTier": "read", "approval": "conditional",
               "replayPolicy": "idempotent", "egress": "host-mediated",
               "auth": {"credentialRef": true}})
    );
    let shell = &body["tools"][3];
    assert_eq!(
        (
            &shell["source"],
            &shell["safetyTier"],
            &shell["approval"],
            &shell["replayPolicy"]
        ),
        (
            &json!("host-extension"),
            &json!("exec"),
            &json!("always"),
            &json!("non-deterministic")
        )
    );
    assert!(shell.get("auth").is_none(), "{shell}");
    // The labels of team-a are read: a server of another namespace admits by selector.
    assert_eq!(reads.load(Ordering::SeqCst), 1);

    // team-b is labelled tier=gold: the selector server admits it; team-a's own do not.
    let (status, body) = get(&app, "/v1/tools?tenantId=team-b", "reader").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        ids(&body),
        [
            "mcp:picky/p",
            "mcp:search/shared_lookup",
            "mcp:tickets/close",
            "mcp:tickets/shell"
        ]
    );
}

#[tokio::test]
async fn source_filters_and_an_unknown_source_is_named() {
    let app = app(fixture(), Arc::default());
    let (status, body) = get(&app, "/v1/tools?source=host-extension", "reader").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(ids(&body), ["mcp:tickets/shell"]);
    let (_, body) = get(&app, "/v1/tools?source=workflow", "reader").await;
    assert_eq!(ids(&body), Vec::<String>::new());
    let (status, body) = get(&app, "/v1/tools?source=plugins", "reader").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["details"]["field"], "source", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("\"plugins\""),
        "{body}"
    );
}

#[tokio::test]
async fn one_tool_by_its_encoded_or_plain_id_else_404_even_when_forbidden() {
    let app = app(fixture(), Arc::default());
    let (status, encoded) = get(&app, "/v1/tools/mcp:search%2Flookup", "reader").await;
    assert_eq!(status, StatusCode::OK, "{encoded}");
    assert_eq!(encoded["toolId"], "mcp:search/lookup");
    let (status, plain) = get(
        &app,
        "/v1/tools/mcp:search/lookup?tenantId=team-a",
        "reader",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{plain}");
    assert_eq!(plain, encoded);
    let (status, fully) = get(&app, "/v1/tools/mcp%3Atickets%2Fshell", "reader").await;
    assert_eq!(
        (status, &fully["safetyTier"]),
        (StatusCode::OK, &json!("exec"))
    );
    for (uri, token) in [
        ("/v1/tools/mcp:search%2Fnope", "reader"),
        // Not Ready, another namespace's private server, not an id at all.
        ("/v1/tools/mcp:down%2Fx", "reader"),
        ("/v1/tools/mcp:private%2Fy", "reader"),
        ("/v1/tools/search", "reader"),
        // Exists, but the caller may not read the tenant's workflows: the same 404.
        ("/v1/tools/mcp:search%2Flookup", "stranger"),
    ] {
        let (status, body) = get(&app, uri, token).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri} as {token}: {body}");
        assert_eq!(body["error"], "not_found", "{body}");
    }
    // The list says 403: the tenant was named (or defaulted), not a tool.
    let (status, body) = get(&app, "/v1/tools", "stranger").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
}
