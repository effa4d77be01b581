//! The ToolServer reconciler against a mocked API server (`common`) and the fake MCP server
//! (`providers::testing::mcp::FakeMcp`): what it writes in `status`, which Events it records,
//! and that a header's Secret value appears in none of them, nor in the log.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use base64::Engine;
use common::fixtures::event_of;
use common::{ApiServerVerifier, Expect, Scenario, fixed_now};
use http::Method;
use kube::runtime::controller::Action;
use openwop_crds::ToolServer;
use openwop_operator::metrics::Metrics;
use openwop_operator::toolservers::reconcile::{MIN_RETRY, READY_RECHECK};
use openwop_operator::toolservers::{ToolServerContext, reconcile_tool_server, resolve};
use openwop_providers::testing::mcp::{FakeMcp, Knobs};
use serde_json::{Value, json};

/// The Secret value of the tests' `Authorization` header: it must never leave the Secret.
const SECRET: &str = "Bearer s3cr3t-4f9a";
const STATUS: &str = "/apis/openwop.dev/v1alpha1/namespaces/team-a/toolservers/search/status?&force=true&fieldManager=openwop-operator";
const GET_SECRET: &str = "/api/v1/namespaces/team-a/secrets/mcp-auth";

fn tool_server(spec: Value, status: Option<Value>) -> Arc<ToolServer> {
    let mut doc = json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "ToolServer",
        "metadata": {"name": "search", "namespace": "team-a", "uid": "tuid", "generation": 2},
        "spec": spec,
    });
    if let Some(s) = status {
        doc["status"] = s;
    }
    Arc::new(serde_json::from_value(doc).expect("a valid ToolServer"))
}

/// A ToolServer of `url` sending `Authorization` from Secret `mcp-auth` key `token`.
fn with_header(url: &str, extra: Value) -> Value {
    let mut spec = json!({
        "url": url,
        "headersFrom": [{"name": "Authorization", "secretKeyRef": {"name": "mcp-auth", "key": "token"}}],
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    spec
}

fn secret(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": "mcp-auth", "namespace": "team-a"}, "data": data})
}

fn token(value: &str) -> Value {
    json!({"token": base64::engine::general_purpose::STANDARD.encode(value)})
}

fn context(api: &ApiServerVerifier, client: kube::Client) -> Arc<ToolServerContext> {
    Arc::new(ToolServerContext {
        client,
        events: api.events(),
        metrics: Metrics::default(),
        now: fixed_now,
    })
}

/// The status patch, with `check` on the written status; answered with a ToolServer.
fn status(check: impl FnOnce(&Value) + 'static) -> Expect {
    Expect::new(Method::PATCH, STATUS)
        .body(move |b| {
            assert!(
                !b.to_string().contains("s3cr3t"),
                "a secret in the status: {b}"
            );
            check(&b["status"])
        })
        .reply(
            200,
            serde_json::to_value(tool_server(json!({"url": "http://s/mcp"}), None).as_ref())
                .unwrap(),
        )
}

fn ready(status: &Value) -> &Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .expect("a Ready condition")
}

/// An Event of `type_` and `reason` about the ToolServer, without the secret.
fn event(type_: &'static str, reason: &'static str) -> Expect {
    event_of("ToolServer", type_, reason).body(|b| {
        assert!(
            !b.to_string().contains("s3cr3t"),
            "a secret in an Event: {b}"
        )
    })
}

/// The log lines written while the test runs (every level).
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_log() -> (Log, tracing::subscriber::DefaultGuard) {
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    (log, tracing::subscriber::set_default(subscriber))
}

#[tokio::test]
async fn a_listed_server_is_ready_with_the_admins_tiers_and_one_event() {
    let mcp = FakeMcp::start(Knobs {
        authorization: Some(SECRET.into()),
        ..Knobs::default()
    });
    let (client, mut api) = ApiServerVerifier::pair();
    let ctx = context(&api, client);
    let ts = tool_server(
        with_header(
            &mcp.url,
            json!({"toolTiers": [{"name": "lookup", "tier": "read"}, {"name": "huge", "tier": "exec"}]}),
        ),
        None,
    );
    let (log, _guard) = capture_log();
    let scenario = Scenario::new()
        .then(
            Expect::new(Method::GET, GET_SECRET).reply(200, secret(token(&format!("{SECRET}\n")))),
        )
        .then(status(|s| {
            let c = ready(s);
            assert_eq!(
                (c["status"].as_str(), c["reason"].as_str()),
                (Some("True"), Some("Listed")),
                "{s:#}"
            );
            assert_eq!(c["message"], "listed 5 tools at MCP revision 2025-06-18");
            assert_eq!(s["observedGeneration"], 2);
            assert_eq!(s["protocolVersion"], "2025-06-18");
            assert_eq!(s["toolCount"], 5);
            let tiers: Vec<(String, String)> = s["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    (
                        t["name"].as_str().unwrap().into(),
                        t["tier"].as_str().unwrap().into(),
                    )
                })
                .collect();
            let want = [
                ("fail", "write"),
                ("huge", "exec"),
                ("lookup", "read"),
                ("slow", "write"),
                ("write_note", "write"),
            ];
            assert_eq!(tiers, want.map(|(a, b)| (a.to_owned(), b.to_owned())));
        }))
        .then(event("Normal", "Listed"));
    let action = api
        .play(scenario, reconcile_tool_server(ts, ctx))
        .await
        .expect("reconcile");
    assert_eq!(action, Action::requeue(READY_RECHECK));
    // The header reached the server (it answers 401 without it), one session.
    assert_eq!(mcp.log(|l| l.sessions), 1);
    let log = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert!(!log.contains("s3cr3t"), "the secret in the log: {log}");
}

#[tokio::test]
async fn refused_credentials_are_unauthorized_and_the_value_is_nowhere() {
    let mcp = FakeMcp::start(Knobs {
        authorization: Some("Bearer the-right-one".into()),
        ..Knobs::default()
    });
    let (client, mut api) = ApiServerVerifier::pair();
    let ctx = context(&api, client);
    let ts = tool_server(with_header(&mcp.url, json!({})), None);
    let (log, _guard) = capture_log();
    let scenario = Scenario::new()
        .then(Expect::new(Method::GET, GET_SECRET).reply(200, secret(token(SECRET))))
        .then(status(|s| {
            let c = ready(s);
            assert_eq!(
                (c["status"].as_str(), c["reason"].as_str()),
                (Some("False"), Some("Unauthorized"))
            );
            let m = c["message"].as_str().unwrap();
            assert!(m.contains("HTTP 401") && m.contains("headersFrom"), "{m}");
            assert!(
                s.get("tools").is_none() && s.get("protocolVersion").is_none(),
                "{s:#}"
            );
        }))
        .then(event("Warning", "Unauthorized"));
    let action = api
        .play(scenario, reconcile_tool_server(ts, ctx))
        .await
        .unwrap();
    assert_eq!(action, Action::requeue(MIN_RETRY));
    let log = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert!(
        !log.is_empty(),
        "nothing was logged: the check would prove nothing"
    );
    assert!(!log.contains("s3cr3t"), "the secret in the log: {log}");
}

#[tokio::test]
async fn an_unreachable_server_is_not_ready_and_says_what_to_check() {
    // Bound and dropped: nothing listens on the port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (client, mut api) = ApiServerVerifier::pair();
    let ctx = context(&api, client);
    let ts = tool_server(
        json!({"url": format!("http://127.0.0.1:{port}/mcp?key=q")}),
        None,
    );
    let scenario = Scenario::new()
        .then(status(|s| {
            let c = ready(s);
            assert_eq!(
                (c["status"].as_str(), c["reason"].as_str()),
                (Some("False"), Some("Unreachable"))
            );
            let m = c["message"].as_str().unwrap();
            assert!(
                m.contains("cannot reach the MCP server at http://127.0.0.1:")
                    && m.contains("spec.url"),
                "{m}"
            );
            // The URL's query (it may carry a key) is not repeated.
            assert!(!m.contains("key=q"), "{m}");
        }))
        .then(event("Warning", "Unreachable"));
    let action = api
        .play(scenario, reconcile_tool_server(ts, ctx))
        .await
        .unwrap();
    assert_eq!(action, Action::requeue(MIN_RETRY));
}

#[tokio::test]
async fn another_revision_without_a_fallback_is_unsupported() {
    let mcp = FakeMcp::start(Knobs {
        revision: Some("2025-03-26".into()),
        ..Knobs::default()
    });
    let (client, mut api) = ApiServerVerifier::pair();
    let ctx = context(&api, client);
    let ts = tool_server(json!({"url": mcp.url}), None);
    let scenario = Scenario::new()
        .then(status(|s| {
            let c = ready(s);
            assert_eq!(
                (c["status"].as_str(), c["reason"].as_str()),
                (Some("False"), Some("ProtocolUnsupported"))
            );
            let m = c["message"].as_str().unwrap();
            assert!(
                m.contains("\"2025-03-26\"") && m.contains("spec.protocolVersion.fallback"),
                "{m}"
            );
        }))
        .then(event("Warning", "ProtocolUnsupported"));
    api.play(scenario, reconcile_tool_server(ts, ctx))
        .await
        .unwrap();
    assert_eq!(mcp.log(|l| l.calls.len()), 0);
}

#[tokio::test]
async fn the_named_fallback_is_used_and_recorded() {
    let mcp = FakeMcp::start(Knobs {
        revision: Some("2025-03-26".into()),
        ..Knobs::default()
    });
    let (client, mut api) = ApiServerVerifier::pair();
    let ctx = context(&api, client);
    let ts = tool_server(
        json!({"url": mcp.url, "protocolVersion": {"preferred": "2025-06-18", "fallback": "2025-03-26"}}),
        None,
    );
    let scenario = Scenario::new()
        .then(status(|s| {
            let c = ready(s);
            assert_eq!(
                (c["status"].as_str(), c["reason"].as_str()),
                (Some("True"), Some("ProtocolFallback"))
            );
            assert!(
                c["message"]
                    .as_str()
                    .unwrap()
                    .contains("fallback MCP revision 2025-03-26"),
                "{c}"
            );
            assert_eq!(s["protocolVersion"], "2025-03-26");
            assert_eq!(s["toolCount"], 5);
        }))
        .then(event("Normal", "ProtocolFallback"));
    api.play(scenario, reconcile_tool_server(ts, ctx))
        .await
        .unwrap();
    // Every message after initialize carried the fallback revision.
    assert_eq!(mcp.log(|l| l.bad_headers), 0);
}

#[tokio::test]
async fn a_missing_secret_or_key_is_named_and_no_server_is_called() {
    let mcp = FakeMcp::start(Knobs::default());
    for (answer, names) in [
        (
            Expect::new(Method::GET, GET_SECRET).not_found(),
            "Secret team-a/mcp-auth does not exist",
        ),
        (
            Expect::new(Method::GET, GET_SECRET).reply(200, secret(json!({"other": "eA=="}))),
            "Secret team-a/mcp-auth has no key \"token\"",
        ),
    ] {
        let (client, mut api) = ApiServerVerifier::pair();
        let ctx = context(&api, client);
        let ts = tool_server(with_header(&mcp.url, json!({})), None);
        let scenario = Scenario::new()
            .then(answer)
            .then(status(move |s| {
                let c = ready(s);
                assert_eq!(
                    (c["status"].as_str(), c["reason"].as_str()),
                    (Some("False"), Some("HeaderSecretMissing"))
                );
                let m = c["message"].as_str().unwrap();
                assert!(
                    m.starts_with("header Authorization: ") && m.contains(names),
                    "{m}"
                );
            }))
            .then(event("Warning", "HeaderSecretMissing"));
        api.play(scenario, reconcile_tool_server(ts, ctx))
            .await
            .unwrap();
    }
    assert_eq!(mcp.log(|l| l.sessions), 0);
}

#[tokio::test]
async fn an_unchanged_condition_writes_nothing_and_records_no_event() {
    let mcp = FakeMcp::start(Knobs::default());
    let (client, mut api) = ApiServerVerifier::pair();
    let ctx = context(&api, client);
    let written = Arc::new(Mutex::new(Value::Null));
    let keep = written.clone();
    let first = Scenario::new()
        .then(status(move |s| *keep.lock().unwrap() = s.clone()))
        .then(event("Normal", "Listed"));
    let spec = json!({"url": mcp.url});
    api.play(
        first,
        reconcile_tool_server(tool_server(spec.clone(), None), ctx.clone()),
    )
    .await
    .unwrap();
    // The next listing (the periodic one) finds the same tools: no request at all.
    let again = tool_server(spec, Some(written.lock().unwrap().clone()));
    let action = api
        .play(Scenario::new(), reconcile_tool_server(again, ctx))
        .await
        .unwrap();
    assert_eq!(action, Action::requeue(READY_RECHECK));
    assert_eq!(mcp.log(|l| l.sessions), 2);
}

#[tokio::test]
async fn headers_from_one_secret_are_read_with_one_get_and_come_as_pairs() {
    let (client, mut api) = ApiServerVerifier::pair();
    let ts = tool_server(
        json!({"url": "http://s/mcp", "headersFrom": [
            {"name": "Authorization", "secretKeyRef": {"name": "mcp-auth", "key": "token"}},
            {"name": "X-Tenant", "secretKeyRef": {"name": "mcp-auth", "key": "tenant"}},
        ]}),
        None,
    );
    let b64 = |v: &str| base64::engine::general_purpose::STANDARD.encode(v);
    let scenario = Scenario::new().then(Expect::new(Method::GET, GET_SECRET).reply(
        200,
        secret(json!({"token": b64(SECRET), "tenant": b64(" acme\n")})),
    ));
    let resolved = api
        .play(scenario, resolve(&client, &ts))
        .await
        .expect("resolved");
    assert_eq!(
        resolved.pairs().collect::<Vec<_>>(),
        [
            ("Authorization", SECRET.as_bytes()),
            ("X-Tenant", &b"acme"[..])
        ]
    );
    assert!(!format!("{resolved:?}").contains("s3cr3t"));
}

#[tokio::test]
async fn an_unreadable_or_unusable_secret_value_is_named_without_the_value() {
    for (answer, says) in [
        (
            Expect::new(Method::GET, GET_SECRET).reply(
                403,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
                       "message": "secrets \"mcp-auth\" is forbidden"}),
            ),
            "may not read Secret team-a/mcp-auth",
        ),
        (
            Expect::new(Method::GET, GET_SECRET).reply(200, secret(token("Bearer s3cr3t\r\nX-Injected: 1"))),
            "not a valid HTTP header value",
        ),
    ] {
        let (client, mut api) = ApiServerVerifier::pair();
        let ts = tool_server(with_header("http://s/mcp", json!({})), None);
        let e = api
            .play(Scenario::new().then(answer), resolve(&client, &ts))
            .await
            .expect_err("refused");
        let text = format!("{e} {e:?}");
        assert!(text.contains(says) && text.contains("Authorization"), "{text}");
        assert!(!text.contains("s3cr3t"), "{text}");
        assert_eq!(e.reason(), Some("HeaderSecretMissing"));
    }
}
