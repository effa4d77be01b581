//! Every endpoint the operator serves × every status code the spec gives it
//! (`rest-endpoints.md`, `api/openapi.yaml`; the table in docs/design/core-standard.md §6),
//! through the real router: a mocked API server (tower-test) that reviews tokens and RBAC
//! from a fixed table and stores the Runs it is asked to create, and a real nats-server
//! holding the runs' event logs. Each row is one request and the status and error code it
//! must get; each status is also one the route's OpenAPI document declares. Then the event
//! stream's modes (`stream-modes.md`) over the same router, and the snapshot that is never
//! behind the stream.
//!
//! Why one file of this size: the rows and the stream checks share one mocked cluster, its
//! Runs and their logs; the table is the point, split it and it stops being one table. The
//! signed-token and `Idempotency-Key` checks at the end use the same cluster.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_nats::jetstream;
use axum::body::Body as AxBody;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use kube::runtime::{reflector, watcher};
use openwop_crds::{Run, Workflow};
use openwop_nats::testing::NatsServer;
use openwop_operator::config::OperatorConfig;
use openwop_operator::discovery::{self, DiscoveryContent, DiscoveryState};
use openwop_operator::rest::{self, RestState};
use openwop_protocol::run::subjects::events_subject;
use openwop_protocol::run::token::{TokenIntent, TokenKey, TokenKeys, TokenRequest};
use openwop_protocol::workflow_check::NodeRegistry;
use serde_json::{Value, json};
use tower::ServiceExt;
use tower_test::mock;

/// Runs the API server stores, by name (created over REST), and the patches it was sent.
#[derive(Default)]
struct ApiServer {
    created: BTreeMap<String, Value>,
    patches: Vec<String>,
    /// The bodies of those patches, in order.
    patch_bodies: Vec<Value>,
}

/// The answer of the mocked API server to one request. Tokens are `system:serviceaccount:
/// team-a:<token>` except `bad` (not authenticated); RBAC: `writer` may do anything in
/// team-a, `reader` may get and list, anyone else nothing.
fn api_answer(store: &Mutex<ApiServer>, method: &Method, path: &str, body: Value) -> (u16, Value) {
    if path.ends_with("/tokenreviews") {
        let t = body["spec"]["token"].as_str().unwrap_or_default();
        let mut out = body.clone();
        out["status"] = if t == "bad" {
            json!({"authenticated": false, "error": "invalid bearer token"})
        } else {
            json!({"authenticated": true,
                   "user": {"username": format!("system:serviceaccount:team-a:{t}"), "uid": t}})
        };
        return (201, out);
    }
    if path.ends_with("/subjectaccessreviews") {
        let a = &body["spec"]["resourceAttributes"];
        let user = body["spec"]["user"].as_str().unwrap_or_default();
        let verb = a["verb"].as_str().unwrap_or_default();
        let allowed = a["namespace"] == "team-a"
            && (user.ends_with(":writer")
                || (user.ends_with(":reader") && ["get", "list"].contains(&verb)));
        let mut out = body.clone();
        out["status"] = json!({ "allowed": allowed });
        return (201, out);
    }
    let runs = "/apis/openwop.dev/v1alpha1/namespaces/team-a/runs";
    let mut st = store.lock().unwrap();
    if *method == Method::POST && path == runs {
        let mut run = body;
        let name = match run["metadata"]["name"].as_str() {
            Some(n) => n.to_owned(),
            None => format!(
                "{}{}",
                run["metadata"]["generateName"].as_str().unwrap_or("run-"),
                st.created.len()
            ),
        };
        if st.created.contains_key(&name) {
            return (
                409,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "message": format!("runs.openwop.dev \"{name}\" already exists"),
                       "reason": "AlreadyExists", "code": 409}),
            );
        }
        run["metadata"]["name"] = json!(name);
        run["metadata"]["uid"] = json!(format!("uid-created-{}", st.created.len()));
        st.created.insert(name, run.clone());
        return (201, run);
    }
    if let Some(name) = path.strip_prefix(&format!("{runs}/")) {
        if *method == Method::GET {
            // Created here, else one of the replica's cached runs (pause reads the Run fresh).
            let cached = || {
                cached_runs()
                    .into_iter()
                    .find(|r| r.metadata.name.as_deref() == Some(name))
                    .map(|r| serde_json::to_value(r).unwrap())
            };
            return match st.created.get(name).cloned().or_else(cached) {
                Some(r) => (200, r),
                None => (
                    404,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": "NotFound", "code": 404, "message": "not found"}),
                ),
            };
        }
        if *method == Method::PATCH {
            st.patches.push(name.to_owned());
            st.patch_bodies.push(body);
            return (200, run_value(name, &format!("uid-{name}"), "cancelling"));
        }
    }
    panic!("unexpected API request {method} {path}");
}

fn run_value(name: &str, uid: &str, phase: &str) -> Value {
    json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": name, "namespace": "team-a", "uid": uid,
                     "creationTimestamp": "2026-11-20T10:00:00Z"},
        "spec": {"workflowRef": {"name": "w"}},
        "status": {"phase": phase, "runId": uid},
    })
}

fn workflow() -> Workflow {
    serde_json::from_value(json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "w", "namespace": "team-a", "uid": "wuid"},
        "spec": {"id": "w", "name": "W", "version": "1",
                 "nodes": [{"id": "a", "typeId": "core.identity"}]}
    }))
    .unwrap()
}

/// The runs in the replica's cache: `live` is `running` by its status while its log already
/// holds `run.completed` (the status lags); `idle` and `wait` run with an empty log; `done`
/// completed; `gone` was cancelled; `gate` waits for an approval at node `gate`.
fn cached_runs() -> Vec<Run> {
    [
        ("live", "running"),
        ("idle", "running"),
        ("wait", "running"),
        ("done", "completed"),
        ("gone", "cancelled"),
        ("gate", "waiting-approval"),
        ("event", "waiting-external"),
        ("evans", "waiting-external"),
    ]
    .into_iter()
    .map(|(n, p)| {
        let mut v = run_value(n, &format!("uid-{n}"), p);
        if n == "gate" {
            v["status"]["pendingInterrupts"] = json!([{"interruptId": GATE_INTERRUPT,
                "nodeId": "gate", "kind": "approval"}]);
        }
        if n == "event" || n == "evans" {
            v["status"]["pendingInterrupts"] = json!([{"interruptId": EVENT_INTERRUPT,
                "nodeId": EVENT_NODE, "kind": "external-event",
                "correlation": {"orderId": "fixture-order-1", "status": "completed"}}]);
        }
        if n == "evans" {
            // Answered a moment ago; the worker has not resumed yet.
            v["spec"]["answers"] = json!([{"interruptId": EVENT_INTERRUPT, "nodeId": EVENT_NODE,
                "value": {"orderId": "fixture-order-1", "status": "completed"}}]);
        }
        serde_json::from_value(v).unwrap()
    })
    .collect()
}

/// The interrupt run `gate` waits on.
const GATE_INTERRUPT: &str = "gate/interrupt/0";

/// The external-event interrupt runs `event` and `evans` wait on (`evans` was answered).
const EVENT_NODE: &str = "wait-for-external";
const EVENT_INTERRUPT: &str = "wait-for-external/interrupt/0";

/// A resolve token for `run_id`'s external-event interrupt.
fn event_token(run_id: &str) -> String {
    TokenKeys::new(TokenKey::derive(SIGNING_KEY), []).mint(TokenRequest {
        run_id,
        node_id: EVENT_NODE,
        interrupt_id: EVENT_INTERRUPT,
        intent: TokenIntent::Resolve,
        expires_at: in_an_hour(),
    })
}

/// The signing key of the World's operator (what the chart's Secret mounts).
const SIGNING_KEY: &[u8] = b"0123456789abcdef0123456789abcdef-world";

/// A token of the World's operator for `run_id`'s interrupt at `gate`.
fn token(run_id: &str, intent: TokenIntent, expires_at: time::OffsetDateTime) -> String {
    TokenKeys::new(TokenKey::derive(SIGNING_KEY), []).mint(TokenRequest {
        run_id,
        node_id: "gate",
        interrupt_id: GATE_INTERRUPT,
        intent,
        expires_at,
    })
}

fn in_an_hour() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc() + time::Duration::hours(1)
}

/// The log of run `live`: run.started, node.started, log.appended, node.completed,
/// run.completed (sequences 0..=4).
const LIVE_LOG: [&str; 5] = [
    "run.started",
    "node.started",
    "log.appended",
    "node.completed",
    "run.completed",
];

struct World {
    app: axum::Router,
    discovery: axum::Router,
    store: Arc<Mutex<ApiServer>>,
    _nats: NatsServer,
    _key_dir: tempfile::TempDir,
}

impl World {
    async fn new(tweak: impl FnOnce(&mut OperatorConfig)) -> World {
        let nats = NatsServer::start();
        let mut cfg = OperatorConfig::default();
        cfg.events.nats_url = Some(nats.url());
        cfg.rest.max_body_bytes = 4096;
        // No worker runs here, so no answer is ever recorded in a log: each deciding answer
        // would wait the default 10 s for its `interrupt.resolved` before answering anyway.
        cfg.rest.interrupt_record_wait_seconds = 1;
        let key_dir = tempfile::tempdir().unwrap();
        let key_file = key_dir.path().join("signing-key");
        std::fs::write(&key_file, SIGNING_KEY).unwrap();
        cfg.rest.interrupt_tokens.key_file = key_file.display().to_string();
        tweak(&mut cfg);
        let js = jetstream::new(async_nats::connect(nats.url()).await.unwrap());
        openwop_nats::stream::ensure_stream(&js, &cfg.stream_spec())
            .await
            .unwrap();
        for (seq, ty) in LIVE_LOG.iter().enumerate() {
            let ev = json!({"eventId": format!("live-{seq}"), "runId": "uid-live", "type": ty,
                            "sequence": seq, "timestamp": format!("2026-11-20T10:00:0{seq}Z"),
                            "nodeId": "a", "payload": {"nodeId": "a"}});
            js.publish(events_subject("team-a", "uid-live"), ev.to_string().into())
                .await
                .unwrap()
                .await
                .unwrap();
        }

        let store = Arc::new(Mutex::new(ApiServer::default()));
        let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let answers = store.clone();
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                let (method, path) = (req.method().clone(), req.uri().path().to_owned());
                let bytes = req.into_body().collect().await.unwrap().to_bytes();
                let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let (status, out) = api_answer(&answers, &method, &path, body);
                send.send_response(
                    Response::builder()
                        .status(status)
                        .header(header::CONTENT_TYPE, "application/json")
                        .body(Body::from(serde_json::to_vec(&out).unwrap()))
                        .unwrap(),
                );
            }
        });
        let (runs, mut writer) = reflector::store::<Run>();
        for r in cached_runs() {
            writer.apply_watcher_event(&watcher::Event::Apply(r));
        }
        let (workflows, mut wf_writer) = reflector::store::<Workflow>();
        wf_writer.apply_watcher_event(&watcher::Event::Apply(workflow()));
        let cfg = Arc::new(cfg);
        let doc = discovery::capabilities(&cfg, &NodeRegistry::builtin()).unwrap();
        let disc = DiscoveryState::new(&cfg.discovery.cache_control);
        disc.set(DiscoveryContent::from_configmap(
            &discovery::discovery_configmap(&cfg, &doc),
        ));
        let state = RestState::new(Client::new(svc, "default"), cfg, runs, workflows)
            .with_discovery(disc.clone());
        World {
            app: rest::router(state, utoipa_axum::router::OpenApiRouter::new()),
            discovery: discovery::router(disc),
            store,
            _nats: nats,
            _key_dir: key_dir,
        }
    }

    fn patches(&self) -> Vec<String> {
        self.store.lock().unwrap().patches.clone()
    }
}

/// One request of the table.
struct Call {
    method: Method,
    uri: String,
    token: Option<&'static str>,
    headers: Vec<(&'static str, String)>,
    body: Option<String>,
}

fn call(method: Method, uri: &str) -> Call {
    Call {
        method,
        uri: uri.to_owned(),
        token: Some("writer"),
        headers: Vec::new(),
        body: None,
    }
}

impl Call {
    fn token(mut self, t: Option<&'static str>) -> Self {
        self.token = t;
        self
    }
    fn header(mut self, k: &'static str, v: &str) -> Self {
        self.headers.push((k, v.to_owned()));
        self
    }
    fn json(mut self, v: Value) -> Self {
        self.body = Some(v.to_string());
        self.header("content-type", "application/json")
    }
    fn raw(mut self, content_type: &str, body: String) -> Self {
        self.body = Some(body);
        self.header("content-type", content_type)
    }

    fn request(&self) -> Request<AxBody> {
        let mut r = Request::builder()
            .method(self.method.clone())
            .uri(&self.uri);
        if let Some(t) = self.token {
            r = r.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        for (k, v) in &self.headers {
            r = r.header(*k, v);
        }
        r.body(self.body.clone().map(AxBody::from).unwrap_or_default())
            .unwrap()
    }
}

/// What a request got: status, headers and body (JSON when it is JSON, else the text).
struct Got {
    status: StatusCode,
    headers: http::HeaderMap,
    text: String,
}

impl Got {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }
}

async fn send(app: &axum::Router, c: &Call) -> Got {
    let r = app.clone().oneshot(c.request()).await.unwrap();
    let (parts, body) = r.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    Got {
        status: parts.status,
        headers: parts.headers,
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// The status each row expects, the error code when it is an error, and the OpenAPI path
/// template it must be declared under (`None`: served outside `/v1/openapi.json`, or a
/// status every route shares — body limit, media type).
struct Row {
    what: &'static str,
    call: Call,
    status: u16,
    code: Option<&'static str>,
    declared_at: Option<&'static str>,
}

fn row(what: &'static str, call: Call, status: u16, code: Option<&'static str>) -> Row {
    Row {
        what,
        call,
        status,
        code,
        declared_at: None,
    }
}

impl Row {
    fn at(mut self, template: &'static str) -> Self {
        self.declared_at = Some(template);
        self
    }
}

#[tokio::test]
async fn every_endpoint_answers_each_status_of_the_spec_and_declares_it() {
    let w = World::new(|_| {}).await;
    let doc = rest::openapi();
    let (get, post) = (Method::GET, Method::POST);
    let create = |body: Value| call(post.clone(), "/v1/runs").json(body);
    let runs = "/v1/runs";
    let run = "/v1/runs/{runId}";
    let events = "/v1/runs/{runId}/events";
    let poll = "/v1/runs/{runId}/events/poll";
    let cancel = "/v1/runs/{runId}/cancel";
    let bulk = "/v1/runs:bulk-cancel";
    let wf = "/v1/workflows/{workflowId}";
    let tools = "/v1/tools";
    let tool = "/v1/tools/{toolId}";
    let resolve = "/v1/runs/{runId}/interrupts/{nodeId}";
    let by_token = "/v1/interrupts/{token}";
    let pause = "/v1/runs/{runId}:pause";
    let resume = "/v1/runs/{runId}:resume";
    // One request per line: the table reads as the spec's table.
    #[rustfmt::skip]
    let rows = vec![
        // Discovery and the API's own description need no token.
        row("discovery", call(get.clone(), "/.well-known/openwop").token(None), 200, None),
        row("openapi", call(get.clone(), "/v1/openapi.json").token(None), 200, None),
        // Workflows.
        row("workflow", call(get.clone(), "/v1/workflows/w"), 200, None).at(wf),
        row("workflow without a token", call(get.clone(), "/v1/workflows/w").token(None), 401, Some("unauthenticated")).at(wf),
        row("workflow with a bad token", call(get.clone(), "/v1/workflows/w").token(Some("bad")), 401, Some("unauthenticated")).at(wf),
        row("unknown workflow", call(get.clone(), "/v1/workflows/nope"), 404, Some("not_found")).at(wf),
        row("workflow the caller may not read", call(get.clone(), "/v1/workflows/w").token(Some("outsider")), 404, Some("not_found")).at(wf),
        // The tool catalog (no ToolServer in this world: an empty list).
        row("tools", call(get.clone(), "/v1/tools"), 200, None).at(tools),
        row("tools without a token", call(get.clone(), "/v1/tools").token(None), 401, Some("unauthenticated")).at(tools),
        row("tools of a bad source", call(get.clone(), "/v1/tools?source=plugins"), 400, Some("validation_error")).at(tools),
        row("tools of a tenant the caller may not read", call(get.clone(), "/v1/tools").token(Some("outsider")), 403, Some("forbidden")).at(tools),
        row("unknown tool", call(get.clone(), "/v1/tools/mcp:search%2Flookup"), 404, Some("not_found")).at(tool),
        row("tool without a token", call(get.clone(), "/v1/tools/mcp:search%2Flookup").token(None), 401, Some("unauthenticated")).at(tool),
        // Create (auth.test.ts: 401, never 403, for a missing or bad token).
        row("create", create(json!({"workflowId": "w", "scopeId": "batch-7"})), 201, None).at(runs),
        row("create without a token", create(json!({"workflowId": "w"})).token(None), 401, Some("unauthenticated")).at(runs),
        row("create with a bad token", create(json!({"workflowId": "w"})).token(Some("bad")), 401, Some("unauthenticated")).at(runs),
        row("create without RBAC", create(json!({"workflowId": "w"})).token(Some("reader")), 403, Some("forbidden")).at(runs),
        row("create of an unknown workflow", create(json!({"workflowId": "nope"})), 400, Some("validation_error")).at(runs),
        row("create with an unknown field", create(json!({"workflowId": "w", "colour": "red"})), 400, Some("validation_error")).at(runs),
        row("create, body not JSON", call(post.clone(), "/v1/runs").raw("application/json", "{".into()), 400, Some("validation_error")).at(runs),
        row("create, runTimeoutMs 0", create(json!({"workflowId": "w", "configurable": {"runTimeoutMs": 0}})), 400, Some("validation_error")).at(runs),
        row("create with a private callbackUrl", create(json!({"workflowId": "w", "callbackUrl": "https://10.0.0.1/cb"})), 400, Some("validation_error")).at(runs),
        row("create with a callbackUrl", create(json!({"workflowId": "w", "callbackUrl": "https://hooks.example.com/cb"})), 400, Some("capability_required")).at(runs),
        row("create with residency", create(json!({"workflowId": "w", "residency": {"region": "eu"}})), 400, Some("residency_unavailable")).at(runs),
        row("create of an eval run", create(json!({"workflowId": "w", "mode": "eval"})), 501, Some("capability_not_provided")).at(runs),
        row("create, key first used", create(json!({"workflowId": "w", "inputs": {"n": 1}})).header("idempotency-key", "k-1"), 201, None).at(runs),
        row("create, same key, other body", create(json!({"workflowId": "w", "inputs": {"n": 2}})).header("idempotency-key", "k-1"), 409, Some("idempotency_key_mismatch")).at(runs),
        row("create, body over rest.maxBodyBytes", create(json!({"workflowId": "w", "metadata": {"pad": "x".repeat(5000)}})), 413, Some("payload_too_large")),
        row("create, body not declared JSON", call(post.clone(), "/v1/runs").raw("text/plain", "{}".into()), 415, Some("unsupported_media_type")),
        // Read.
        row("snapshot", call(get.clone(), "/v1/runs/uid-done"), 200, None).at(run),
        row("snapshot without a token", call(get.clone(), "/v1/runs/uid-done").token(None), 401, Some("unauthenticated")).at(run),
        row("unknown run (runs-lifecycle.test.ts)", call(get.clone(), "/v1/runs/openwop-conformance-this-run-id-does-not-exist"), 404, Some("not_found")).at(run),
        row("run the caller may not see", call(get.clone(), "/v1/runs/uid-done").token(Some("outsider")), 404, Some("not_found")).at(run),
        // Events.
        row("events, SSE", call(get.clone(), "/v1/runs/uid-live/events"), 200, None).at(events),
        row("events, JSON", call(get.clone(), "/v1/runs/uid-live/events").header("accept", "application/json"), 200, None).at(events),
        row("events, unknown streamMode", call(get.clone(), "/v1/runs/uid-live/events?streamMode=firehose"), 400, Some("unsupported_stream_mode")).at(events),
        row("events, unknown streamMode asked as JSON", call(get.clone(), "/v1/runs/uid-live/events?streamMode=firehose").header("accept", "application/json"), 400, Some("unsupported_stream_mode")).at(events),
        row("events, values combined", call(get.clone(), "/v1/runs/uid-live/events?streamMode=values,updates"), 400, Some("unsupported_stream_mode")).at(events),
        row("events, bad bufferMs", call(get.clone(), "/v1/runs/uid-live/events?bufferMs=-1"), 400, Some("validation_error")).at(events),
        row("events without a token", call(get.clone(), "/v1/runs/uid-live/events").token(None), 401, Some("unauthenticated")).at(events),
        row("events of an unknown run", call(get.clone(), "/v1/runs/nope/events"), 404, Some("not_found")).at(events),
        row("poll", call(get.clone(), "/v1/runs/uid-live/events/poll?timeout=1"), 200, None).at(poll),
        row("poll, timeout 60", call(get.clone(), "/v1/runs/uid-live/events/poll?timeout=60"), 200, None).at(poll),
        row("poll, timeout 0", call(get.clone(), "/v1/runs/uid-live/events/poll?timeout=0"), 400, Some("validation_error")).at(poll),
        row("poll, timeout 61", call(get.clone(), "/v1/runs/uid-live/events/poll?timeout=61"), 400, Some("validation_error")).at(poll),
        row("poll without a token", call(get.clone(), "/v1/runs/uid-live/events/poll").token(None), 401, Some("unauthenticated")).at(poll),
        row("poll of an unknown run", call(get.clone(), "/v1/runs/nope/events/poll?timeout=1"), 404, Some("not_found")).at(poll),
        // Cancel (interruptRace.test.ts: an ended run answers 200).
        row("cancel", call(post.clone(), "/v1/runs/uid-idle/cancel"), 200, None).at(cancel),
        row("cancel of a completed run", call(post.clone(), "/v1/runs/uid-done/cancel"), 200, None).at(cancel),
        row("cancel of a cancelled run", call(post.clone(), "/v1/runs/uid-gone/cancel"), 200, None).at(cancel),
        row("cancel without a token", call(post.clone(), "/v1/runs/uid-idle/cancel").token(None), 401, Some("unauthenticated")).at(cancel),
        row("cancel without RBAC", call(post.clone(), "/v1/runs/uid-idle/cancel").token(Some("reader")), 403, Some("forbidden")).at(cancel),
        row("cancel of an unknown run", call(post.clone(), "/v1/runs/nope/cancel"), 404, Some("not_found")).at(cancel),
        // Bulk cancel (bulk-cancel.test.ts).
        row("bulk cancel", call(post.clone(), bulk).json(json!({"runIds": ["uid-wait", "nope"], "reason": "r"})), 200, None).at(bulk),
        row("bulk cancel of none", call(post.clone(), bulk).json(json!({"runIds": []})), 400, Some("validation_error")).at(bulk),
        row("bulk cancel of 101", call(post.clone(), bulk).json(json!({"runIds": (0..101).map(|i| format!("r{i}")).collect::<Vec<_>>()})), 400, Some("validation_error")).at(bulk),
        row("bulk cancel of a number", call(post.clone(), bulk).json(json!({"runIds": [7]})), 400, Some("validation_error")).at(bulk),
        row("bulk cancel without a token", call(post.clone(), bulk).json(json!({"runIds": ["uid-idle"]})).token(None), 401, Some("unauthenticated")).at(bulk),
        // Interrupts, run-scoped (interrupt-approval.test.ts) and by signed token
        // (interrupt-token-matrix.test.ts; no bearer: the token is the credential).
        row("resolve", call(post.clone(), "/v1/runs/uid-gate/interrupts/gate").json(json!({"resumeValue": {"action": "accept"}})), 200, None).at(resolve),
        row("resolve with an action the gate does not offer", call(post.clone(), "/v1/runs/uid-gate/interrupts/gate").json(json!({"resumeValue": {"action": "maybe"}})), 400, Some("validation_error")).at(resolve),
        row("resolve at a node with nothing waiting", call(post.clone(), "/v1/runs/uid-gate/interrupts/no-such-node").json(json!({"resumeValue": {"action": "accept"}})), 404, Some("interrupt_not_found")).at(resolve),
        row("resolve without a token", call(post.clone(), "/v1/runs/uid-gate/interrupts/gate").json(json!({"resumeValue": {"action": "accept"}})).token(None), 401, Some("unauthenticated")).at(resolve),
        row("resolve without RBAC", call(post.clone(), "/v1/runs/uid-gate/interrupts/gate").json(json!({"resumeValue": {"action": "accept"}})).token(Some("reader")), 403, Some("forbidden")).at(resolve),
        row("inspect by token", call(get.clone(), &format!("/v1/interrupts/{}", token("uid-gate", TokenIntent::Inspect, in_an_hour()))).token(None), 200, None).at(by_token),
        row("inspect, malformed token", call(get.clone(), "/v1/interrupts/%21%21%21not-a-valid-token%21%21%21").token(None), 404, Some("interrupt_not_found")).at(by_token),
        row("inspect, unknown token", call(get.clone(), "/v1/interrupts/tok_c29tZS1yYW5kb20tYnl0ZXMtb2YtbGVuZ3RoLTMy").token(None), 404, Some("interrupt_not_found")).at(by_token),
        row("inspect, expired token", call(get.clone(), &format!("/v1/interrupts/{}", token("uid-gate", TokenIntent::Resolve, time::OffsetDateTime::now_utc() - time::Duration::seconds(1)))).token(None), 410, Some("interrupt_expired")).at(by_token),
        row("inspect, the run ended", call(get.clone(), &format!("/v1/interrupts/{}", token("uid-done", TokenIntent::Resolve, in_an_hour()))).token(None), 409, Some("interrupt_already_resolved")).at(by_token),
        row("resolve by token", call(post.clone(), &format!("/v1/interrupts/{}", token("uid-gate", TokenIntent::Resolve, in_an_hour()))).token(None).json(json!({"resumeValue": {"action": "accept"}})), 200, None).at(by_token),
        row("resolve by an inspect token", call(post.clone(), &format!("/v1/interrupts/{}", token("uid-gate", TokenIntent::Inspect, in_an_hour()))).token(None).json(json!({"resumeValue": {"action": "accept"}})), 403, Some("forbidden")).at(by_token),
        row("resolve by token, body without resumeValue", call(post.clone(), &format!("/v1/interrupts/{}", token("uid-gate", TokenIntent::Resolve, in_an_hour()))).token(None).json(json!({"correlation": {"orderId": "x"}})), 400, Some("validation_error")).at(by_token),
        row("resolve by an unknown token", call(post.clone(), "/v1/interrupts/tok_c29tZS1yYW5kb20tYnl0ZXMtb2YtbGVuZ3RoLTMy").token(None).json(json!({"correlation": {"orderId": "noop"}})), 404, Some("interrupt_not_found")).at(by_token),
        row("resolve by token, the run ended", call(post.clone(), &format!("/v1/interrupts/{}", token("uid-gone", TokenIntent::Resolve, in_an_hour()))).token(None).json(json!({"resumeValue": {"action": "accept"}})), 409, Some("interrupt_already_resolved")).at(by_token),
        // External events (interrupt-external-event-correlation.test.ts): the correlation
        // decides, by token and run-scoped; extra members and INT's {eventPayload} are taken.
        row("event by token, correlation differs", call(post.clone(), &format!("/v1/interrupts/{}", event_token("uid-event"))).token(None).json(json!({"resumeValue": {"orderId": "different-order", "status": "completed"}})), 422, Some("correlation_mismatch")).at(by_token),
        row("event by token, correlation key missing", call(post.clone(), &format!("/v1/interrupts/{}", event_token("uid-event"))).token(None).json(json!({"resumeValue": {"eventPayload": {"orderId": "fixture-order-1"}}})), 422, Some("correlation_mismatch")).at(by_token),
        row("event by token, correlation matches", call(post.clone(), &format!("/v1/interrupts/{}", event_token("uid-event"))).token(None).json(json!({"resumeValue": {"orderId": "fixture-order-1", "status": "completed", "externalReference": "r-1"}})), 200, None).at(by_token),
        row("event by token, already answered", call(post.clone(), &format!("/v1/interrupts/{}", event_token("uid-evans"))).token(None).json(json!({"resumeValue": {"orderId": "fixture-order-1", "status": "completed"}})), 409, Some("interrupt_already_resolved")).at(by_token),
        row("event run-scoped, correlation differs", call(post.clone(), "/v1/runs/uid-event/interrupts/wait-for-external").json(json!({"resumeValue": {"orderId": "fixture-order-1", "status": "pending"}})), 422, Some("correlation_mismatch")).at(resolve),
        row("event run-scoped, as INT's eventPayload", call(post.clone(), "/v1/runs/uid-event/interrupts/wait-for-external").json(json!({"resumeValue": {"eventPayload": {"orderId": "fixture-order-1", "status": "completed"}}})), 200, None).at(resolve),
        row("resolve by an expired token", call(post.clone(), &format!("/v1/interrupts/{}", token("uid-gate", TokenIntent::Resolve, time::OffsetDateTime::now_utc() - time::Duration::seconds(1)))).token(None).json(json!({"resumeValue": {"action": "accept"}})), 410, Some("interrupt_expired")).at(by_token),
        // Pause and resume (pause-resume.test.ts; run_state_conflict is v2's name, v1 names only
        // run_terminal).
        row("pause of a run waiting for an answer", call(post.clone(), "/v1/runs/uid-gate:pause").json(json!({})), 409, Some("run_state_conflict")).at(pause),
        row("pause of a completed run", call(post.clone(), "/v1/runs/uid-done:pause").json(json!({})), 409, Some("run_terminal")).at(pause),
        row("pause with an unknown drainPolicy", call(post.clone(), "/v1/runs/uid-wait:pause").json(json!({"drainPolicy": "later"})), 400, Some("validation_error")).at(pause),
        row("pause with an unknown field", call(post.clone(), "/v1/runs/uid-wait:pause").json(json!({"colour": "red"})), 400, Some("validation_error")).at(pause),
        row("pause without a token", call(post.clone(), "/v1/runs/uid-wait:pause").json(json!({})).token(None), 401, Some("unauthenticated")).at(pause),
        row("pause without RBAC", call(post.clone(), "/v1/runs/uid-wait:pause").json(json!({})).token(Some("reader")), 403, Some("forbidden")).at(pause),
        row("pause of an unknown run", call(post.clone(), "/v1/runs/nope:pause").json(json!({})), 404, Some("not_found")).at(pause),
        row("pause", call(post.clone(), "/v1/runs/uid-wait:pause").json(json!({"reason": "maintenance", "drainPolicy": "immediate"})), 202, None).at(pause),
        row("resume of a run that is not paused", call(post.clone(), "/v1/runs/uid-idle:resume").json(json!({})), 409, Some("run_state_conflict")).at(resume),
        row("resume of a completed run", call(post.clone(), "/v1/runs/uid-done:resume").json(json!({})), 409, Some("run_terminal")).at(resume),
        row("resume without a token", call(post.clone(), "/v1/runs/uid-wait:resume").json(json!({})).token(None), 401, Some("unauthenticated")).at(resume),
        row("resume of an unknown run", call(post.clone(), "/v1/runs/nope:resume").json(json!({})), 404, Some("not_found")).at(resume),
        row("an operation that does not exist", call(post.clone(), "/v1/runs/uid-wait:rewind").json(json!({})), 405, Some("method_not_allowed")),
        // Idempotency-Key on the other mutations (idempotency.md).
        row("cancel, key first used", call(post.clone(), "/v1/runs/uid-done/cancel").header("idempotency-key", "c-1"), 200, None).at(cancel),
        row("cancel, same key, other run", call(post.clone(), "/v1/runs/uid-gone/cancel").header("idempotency-key", "c-1"), 409, Some("idempotency_key_mismatch")).at(cancel),
        row("cancel, key not URL-safe", call(post.clone(), "/v1/runs/uid-done/cancel").header("idempotency-key", "a b"), 400, Some("validation_error")).at(cancel),
        row("bulk cancel, key first used", call(post.clone(), bulk).header("idempotency-key", "b-1").json(json!({"runIds": ["uid-done"]})), 200, None).at(bulk),
        row("bulk cancel, same key, other body", call(post.clone(), bulk).header("idempotency-key", "b-1").json(json!({"runIds": ["uid-gone"]})), 409, Some("idempotency_key_mismatch")).at(bulk),
        row("resolve, key first used", call(post.clone(), "/v1/runs/uid-gate/interrupts/gate").header("idempotency-key", "r-1").json(json!({"resumeValue": {"action": "accept"}})), 200, None).at(resolve),
        row("resolve, key reused for another answer", call(post.clone(), "/v1/runs/uid-gate/interrupts/gate").header("idempotency-key", "r-1").json(json!({"resumeValue": {"action": "reject"}})), 409, Some("idempotency_key_mismatch")).at(resolve),
    ];
    for r in &rows {
        let app = if r.call.uri.starts_with("/.well-known") {
            &w.discovery
        } else {
            &w.app
        };
        let got = send(app, &r.call).await;
        assert_eq!(
            got.status.as_u16(),
            r.status,
            "{}: {} {} answered {}",
            r.what,
            r.call.method,
            r.call.uri,
            got.text
        );
        let body = got.json();
        match r.code {
            Some(code) => {
                assert_eq!(body["error"], code, "{}: {body}", r.what);
                // The error envelope is closed: {error, message, details?}.
                let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
                assert!(
                    keys.iter()
                        .all(|k| ["error", "message", "details"].contains(&k.as_str())),
                    "{}: {body}",
                    r.what
                );
                assert!(
                    !body["message"].as_str().unwrap_or("").is_empty(),
                    "{}",
                    r.what
                );
            }
            None => assert!(body.get("error").is_none(), "{}: {body}", r.what),
        }
        if let Some(template) = r.declared_at {
            let method = r.call.method.as_str().to_ascii_lowercase();
            let responses = &doc["paths"][template][&method]["responses"];
            assert!(
                responses.get(r.status.to_string()).is_some(),
                "{}: /v1/openapi.json does not declare {} for {method} {template}: {responses}",
                r.what,
                r.status
            );
        }
    }
    // Discovery: ETag → 304 (discovery.test.ts).
    let first = send(
        &w.discovery,
        &call(get.clone(), "/.well-known/openwop").token(None),
    )
    .await;
    assert!(first.headers.contains_key(header::CACHE_CONTROL));
    let etag = first.headers[header::ETAG].to_str().unwrap().to_owned();
    let again = send(
        &w.discovery,
        &call(get.clone(), "/.well-known/openwop")
            .token(None)
            .header("if-none-match", &etag),
    )
    .await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    assert_eq!(first.json()["protocolVersion"], "1.0");
    // The OpenAPI document is 3.1.
    let api = send(&w.app, &call(get.clone(), "/v1/openapi.json").token(None)).await;
    assert!(api.json()["openapi"].as_str().unwrap().starts_with("3.1"));
    // Cancels: the ended runs were left alone; the running one and the bulk one patched.
    // The gate: answered run-scoped, by token, and under an Idempotency-Key; the external
    // event: only the two matching events (by token, run-scoped). The pause: only
    // the one accepted (`wait`); every refused pause or resume patched nothing.
    assert_eq!(
        w.patches(),
        [
            "idle", "wait", "gate", "gate", "event", "event", "wait", "gate"
        ],
        "patched Runs"
    );
}

#[tokio::test]
async fn bodies_of_create_cancel_and_bulk_cancel_say_what_happened() {
    let w = World::new(|_| {}).await;
    let post = Method::POST;
    // scopeId is echoed and kept on the Run.
    let got = send(
        &w.app,
        &call(post.clone(), "/v1/runs").json(json!({"workflowId": "w", "scopeId": "batch-7"})),
    )
    .await;
    assert_eq!(got.status, StatusCode::CREATED, "{}", got.text);
    assert_eq!(got.json()["scopeId"], "batch-7");
    let created = w
        .store
        .lock()
        .unwrap()
        .created
        .values()
        .next()
        .cloned()
        .unwrap();
    assert_eq!(
        created["metadata"]["annotations"]["openwop.dev/scope-id"],
        "batch-7"
    );
    // An unknown field and an unknown workflow name the field.
    let got = send(
        &w.app,
        &call(post.clone(), "/v1/runs").json(json!({"workflowId": "w", "colour": "red"})),
    )
    .await;
    assert_eq!(got.json()["details"]["field"], "colour", "{}", got.text);
    let got = send(
        &w.app,
        &call(post.clone(), "/v1/runs").json(json!({"workflowId": "nope"})),
    )
    .await;
    assert_eq!(got.json()["details"]["field"], "workflowId", "{}", got.text);
    let got = send(
        &w.app,
        &call(post.clone(), "/v1/runs")
            .json(json!({"workflowId": "w", "configurable": {"runTimeoutMs": 1.5}})),
    )
    .await;
    assert_eq!(
        got.json()["details"]["field"],
        "configurable.runTimeoutMs",
        "{}",
        got.text
    );
    // Cancel of an ended run: its own status, nothing patched.
    let got = send(&w.app, &call(post.clone(), "/v1/runs/uid-done/cancel")).await;
    assert_eq!(
        got.json(),
        json!({"runId": "uid-done", "status": "completed"})
    );
    // Its log already ended the run (its status lags): ended too, as the snapshot says.
    let got = send(&w.app, &call(post.clone(), "/v1/runs/uid-live/cancel")).await;
    assert_eq!(
        got.json(),
        json!({"runId": "uid-live", "status": "completed"})
    );
    let got = send(&w.app, &call(post.clone(), "/v1/runs/uid-wait/cancel")).await;
    assert_eq!(
        got.json(),
        json!({"runId": "uid-wait", "status": "cancelling"})
    );
    // Bulk: one result per id, in request order.
    let got = send(
        &w.app,
        &call(post.clone(), "/v1/runs:bulk-cancel")
            .json(json!({"runIds": ["uid-idle", "run-does-not-exist-xxxxxxxx", "uid-done", "uid-gone", ""]})),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.text);
    let results = got.json()["results"].clone();
    let summary: Vec<(Value, Value, Value, Value)> = results
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["runId"].clone(),
                r["ok"].clone(),
                r["status"].clone(),
                r["error"]["code"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                json!("uid-idle"),
                json!(true),
                json!("cancelling"),
                Value::Null
            ),
            (
                json!("run-does-not-exist-xxxxxxxx"),
                json!(false),
                Value::Null,
                json!("not_found")
            ),
            (
                json!("uid-done"),
                json!(false),
                json!("completed"),
                json!("run_terminal")
            ),
            (
                json!("uid-gone"),
                json!(true),
                json!("cancelled"),
                Value::Null
            ),
            (
                json!(""),
                json!(false),
                Value::Null,
                json!("validation_error")
            ),
        ]
    );
    let got = send(
        &w.app,
        &call(post.clone(), "/v1/runs:bulk-cancel")
            .json(json!({"runIds": (0..101).map(|i| format!("r{i}")).collect::<Vec<_>>()})),
    )
    .await;
    assert_eq!(got.json()["details"]["maxRunIds"], 100);
    assert_eq!(w.patches(), ["wait", "idle"]);
}

#[tokio::test]
async fn the_429_body_names_the_delay_and_its_scope() {
    let w = World::new(|c| c.rest.max_in_flight = 1).await;
    // An open event stream of a run with nothing to send holds the one place.
    let held = w
        .app
        .clone()
        .oneshot(call(Method::GET, "/v1/runs/uid-idle/events").request())
        .await
        .unwrap();
    assert_eq!(held.status(), StatusCode::OK);
    let got = send(&w.app, &call(Method::GET, "/v1/runs/uid-done")).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(got.headers[header::RETRY_AFTER], "1");
    assert_eq!(
        got.json()["details"],
        json!({"retryAfter": 1, "retryAfterMs": 1000, "scope": "global"})
    );
    drop(held);
}

/// One SSE event: (id, event, data).
type Sse = (Option<String>, Option<String>, Value);

/// The events of an SSE body (comments skipped).
fn sse(text: &str) -> Vec<Sse> {
    text.split("\n\n")
        .filter_map(|block| {
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim_start().to_owned())
            };
            let data = field("data:")?;
            Some((
                field("id:"),
                field("event:"),
                serde_json::from_str(&data).unwrap(),
            ))
        })
        .collect()
}

async fn stream(w: &World, query: &str, last_event_id: Option<&str>) -> Vec<Sse> {
    let mut c = call(Method::GET, &format!("/v1/runs/uid-live/events{query}"));
    if let Some(id) = last_event_id {
        c = c.header("last-event-id", id);
    }
    let got = send(&w.app, &c).await;
    assert_eq!(got.status, StatusCode::OK, "{query}: {}", got.text);
    sse(&got.text)
}

fn ids(events: &[Sse]) -> Vec<String> {
    events.iter().filter_map(|e| e.0.clone()).collect()
}

#[tokio::test]
async fn stream_modes_filter_snapshot_and_batch_the_same_log() {
    let w = World::new(|_| {}).await;
    // updates (the default): no node.started, no log line; the stream ends after the
    // terminal event.
    let updates = stream(&w, "", None).await;
    assert_eq!(ids(&updates), ["0", "3", "4"]);
    let names: Vec<_> = updates.iter().map(|e| e.1.clone().unwrap()).collect();
    assert_eq!(names, ["run.started", "node.completed", "run.completed"]);
    assert_eq!(stream(&w, "?streamMode=updates", None).await, updates);
    // debug: everything.
    assert_eq!(
        ids(&stream(&w, "?streamMode=debug", None).await),
        ["0", "1", "2", "3", "4"]
    );
    // messages: no token chunks in this log; the stream still ends with the run.
    assert!(stream(&w, "?streamMode=messages", None).await.is_empty());
    // A mixed stream names the mode that admitted each event.
    let mixed = stream(&w, "?streamMode=messages,updates", None).await;
    assert_eq!(ids(&mixed), ["0", "3", "4"]);
    assert!(mixed.iter().all(|e| e.1.as_deref() == Some("updates")));
    // values: the RunSnapshot after each step (node.started included), the last completed.
    let values = stream(&w, "?streamMode=values", None).await;
    assert_eq!(ids(&values), ["0", "1", "3", "4"]);
    assert!(
        values
            .iter()
            .all(|e| e.1.as_deref() == Some("state.snapshot"))
    );
    assert_eq!(values[0].2["status"], "running");
    assert_eq!(values[0].2["runId"], "uid-live");
    assert_eq!(values[3].2["status"], "completed");
    assert_eq!(values[3].2["completedAt"], "2026-11-20T10:00:04Z");
    // values resumed: a baseline snapshot first, then what follows.
    let resumed = stream(&w, "?streamMode=values", Some("2")).await;
    assert_eq!(ids(&resumed), ["2", "3", "4"]);
    assert_eq!(resumed[0].2["metrics"]["lastSequence"], 2);
    // Last-Event-ID on updates: never the resumption point itself.
    assert_eq!(ids(&stream(&w, "", Some("3")).await), ["4"]);
    // bufferMs: one batch (the terminal event flushes it), id = its highest sequence.
    let batched = stream(&w, "?bufferMs=2000", None).await;
    assert_eq!(batched.len(), 1, "{batched:?}");
    assert_eq!(batched[0].0.as_deref(), Some("4"));
    assert_eq!(batched[0].1.as_deref(), Some("batch"));
    let seqs: Vec<_> = batched[0]
        .2
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence"].clone())
        .collect();
    assert_eq!(seqs, [json!(0), json!(3), json!(4)]);
    // JSON follows the mode too.
    let got = send(
        &w.app,
        &call(Method::GET, "/v1/runs/uid-live/events?streamMode=updates")
            .header("accept", "application/json"),
    )
    .await;
    let types: Vec<_> = got.json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].clone())
        .collect();
    assert_eq!(
        types,
        [
            json!("run.started"),
            json!("node.completed"),
            json!("run.completed")
        ]
    );
    assert_eq!(got.json()["isComplete"], true);
    // Without a mode, the JSON answer is the whole log (the suite reads envelope.* from it).
    let got = send(
        &w.app,
        &call(Method::GET, "/v1/runs/uid-live/events").header("accept", "application/json"),
    )
    .await;
    let all: Vec<_> = got.json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence"].clone())
        .collect();
    assert_eq!(all, [json!(0), json!(1), json!(2), json!(3), json!(4)]);
    // The refusal lists every mode (never a combination).
    let got = send(
        &w.app,
        &call(Method::GET, "/v1/runs/uid-live/events?streamMode=nope"),
    )
    .await;
    assert_eq!(
        got.json()["details"]["supported"],
        json!(["values", "updates", "messages", "debug"])
    );
    // poll is every event, whatever the mode.
    let got = send(
        &w.app,
        &call(Method::GET, "/v1/runs/uid-live/events/poll?timeout=1"),
    )
    .await;
    assert_eq!(got.json()["events"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn the_snapshot_is_never_behind_the_event_stream() {
    let w = World::new(|_| {}).await;
    // The cached status of `live` still says running; its log ends with run.completed.
    let events = stream(&w, "", None).await;
    assert_eq!(events.last().unwrap().1.as_deref(), Some("run.completed"));
    let got = send(&w.app, &call(Method::GET, "/v1/runs/uid-live")).await;
    let snap = got.json();
    assert_eq!(snap["status"], "completed", "{snap}");
    assert_eq!(snap["completedAt"], "2026-11-20T10:00:04Z", "{snap}");
    assert_eq!(snap["metrics"]["lastSequence"], 4, "{snap}");
    // A run whose log is empty is served from its status.
    let got = send(&w.app, &call(Method::GET, "/v1/runs/uid-idle")).await;
    assert_eq!(got.json()["status"], "running");
}

/// Log lines written while a test runs (a `tracing` subscriber at TRACE on this thread).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// `RunSnapshot.interrupt` carries a token (`resolve` for a caller who may answer the run,
/// `inspect` for a reader) that inspects and answers the gate without a bearer token, through
/// the same answer as the run-scoped route (recorded as answered by `callback-token`); and no
/// token reaches a log line, at any level, on any path (success, expiry, forgery, 4xx).
#[tokio::test]
async fn snapshot_tokens_answer_the_gate_and_never_reach_a_log() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(logs.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let w = World::new(|_| {}).await;
    let (get, post) = (Method::GET, Method::POST);
    let snap = send(&w.app, &call(get.clone(), "/v1/runs/uid-gate")).await;
    assert_eq!(snap.status, StatusCode::OK, "{}", snap.text);
    let interrupt = snap.json()["interrupt"].clone();
    assert_eq!(interrupt["kind"], "approval", "{interrupt}");
    assert_eq!(interrupt["nodeId"], "gate");
    assert_eq!(interrupt["interruptId"], GATE_INTERRUPT);
    let writer_token = interrupt["interruptToken"].as_str().unwrap().to_owned();
    assert_eq!(
        interrupt["callbackUrl"],
        format!("/v1/interrupts/{writer_token}")
    );
    assert!(interrupt["expiresAt"].as_str().unwrap().ends_with('Z'));
    // No interrupt on a run that waits for nothing.
    let idle = send(&w.app, &call(get.clone(), "/v1/runs/uid-done")).await;
    assert!(idle.json().get("interrupt").is_none(), "{}", idle.text);
    // A reader's token inspects but cannot answer.
    let reader = send(
        &w.app,
        &call(get.clone(), "/v1/runs/uid-gate").token(Some("reader")),
    )
    .await;
    let reader_token = reader.json()["interrupt"]["interruptToken"]
        .as_str()
        .unwrap()
        .to_owned();
    let by = |t: &str| format!("/v1/interrupts/{t}");
    let inspected = send(&w.app, &call(get.clone(), &by(&reader_token)).token(None)).await;
    assert_eq!(inspected.status, StatusCode::OK, "{}", inspected.text);
    assert_eq!(inspected.json()["intent"], "inspect");
    assert_eq!(inspected.json()["runId"], "uid-gate");
    assert_eq!(inspected.json()["status"], "waiting-approval");
    let accept = json!({"resumeValue": {"action": "accept"}});
    let refused = send(
        &w.app,
        &call(post.clone(), &by(&reader_token))
            .token(None)
            .json(accept.clone()),
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text);
    assert!(w.patches().is_empty());
    // The writer's token answers, as callback-token.
    let inspected = send(&w.app, &call(get.clone(), &by(&writer_token)).token(None)).await;
    assert_eq!(inspected.json()["intent"], "resolve", "{}", inspected.text);
    let answered = send(
        &w.app,
        &call(post.clone(), &by(&writer_token))
            .token(None)
            .json(accept.clone()),
    )
    .await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    assert_eq!(
        answered.json(),
        json!({"runId": "uid-gate", "nodeId": "gate", "status": "waiting-approval"})
    );
    let patch = w.store.lock().unwrap().patch_bodies[0].clone();
    let recorded = &patch["spec"]["answers"][0];
    assert_eq!(recorded["interruptId"], GATE_INTERRUPT, "{patch}");
    assert_eq!(recorded["answeredBy"], "callback-token", "{patch}");
    // Forged and expired tokens, and a token in a malformed request, on both routes.
    let (payload, mac) = writer_token.split_once('.').unwrap();
    let forged = format!("{payload}.{}", mac.chars().rev().collect::<String>());
    let expired = token(
        "uid-gate",
        TokenIntent::Resolve,
        time::OffsetDateTime::now_utc() - time::Duration::seconds(1),
    );
    let mut bodies = vec![snap.text, reader.text, inspected.text, answered.text];
    for t in [&forged, &expired, &writer_token] {
        for c in [
            call(get.clone(), &by(t)).token(None),
            call(post.clone(), &by(t))
                .token(None)
                .raw("application/json", "{".into()),
            call(post.clone(), &by(t))
                .token(None)
                .json(json!({"resumeValue": {"action": "maybe"}})),
        ] {
            let got = send(&w.app, &c).await;
            assert!(got.status.is_client_error() || got.status.is_success());
            bodies.push(got.text);
        }
    }
    let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(!logged.is_empty(), "the capture works");
    for t in [&writer_token, &reader_token, &forged, &expired] {
        let mac = t.split_once('.').unwrap().1;
        assert!(!logged.contains(mac), "a token reached the log:\n{logged}");
        for b in bodies.iter().filter(|b| b.contains("\"error\"")) {
            assert!(!b.contains(mac), "an error echoes a token: {b}");
        }
    }
}

/// An external event through the run's own token (interrupt-external-event-correlation):
/// the snapshot hands out the token, inspect shows the correlation and key, a mismatch is 422
/// naming the keys and records nothing, the match is recorded as sent, by `callback-token`.
#[tokio::test]
async fn an_external_event_resolves_through_the_snapshot_token_only_when_it_correlates() {
    let w = World::new(|_| {}).await;
    let (get, post) = (Method::GET, Method::POST);
    let snap = send(&w.app, &call(get.clone(), "/v1/runs/uid-event")).await;
    assert_eq!(snap.json()["status"], "waiting-external", "{}", snap.text);
    let interrupt = snap.json()["interrupt"].clone();
    assert_eq!(interrupt["kind"], "external-event", "{interrupt}");
    let url = interrupt["callbackUrl"].as_str().unwrap().to_owned();
    let inspected = send(&w.app, &call(get.clone(), &url).token(None)).await;
    assert_eq!(inspected.status, StatusCode::OK, "{}", inspected.text);
    assert_eq!(inspected.json()["kind"], "external-event");
    assert_eq!(inspected.json()["key"], "wait-for-external/interrupt");
    assert_eq!(
        inspected.json()["data"]["correlation"],
        json!({"orderId": "fixture-order-1", "status": "completed"})
    );
    let wrong = send(
        &w.app,
        &call(post.clone(), &url)
            .token(None)
            .json(json!({"resumeValue": {"orderId": "different-order"}})),
    )
    .await;
    assert_eq!(
        wrong.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        wrong.text
    );
    assert_eq!(wrong.json()["error"], "correlation_mismatch");
    assert_eq!(
        wrong.json()["details"],
        json!({"field": "resumeValue", "keys": ["orderId", "status"]})
    );
    assert!(w.patches().is_empty(), "a mismatch records nothing");
    let event = json!({"orderId": "fixture-order-1", "status": "completed", "externalReference": "conformance-test-123"});
    let ok = send(
        &w.app,
        &call(post.clone(), &url)
            .token(None)
            .json(json!({"resumeValue": event})),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    assert_eq!(ok.json()["nodeId"], "wait-for-external");
    let patch = w.store.lock().unwrap().patch_bodies[0].clone();
    let recorded = &patch["spec"]["answers"][0];
    assert_eq!(recorded["interruptId"], EVENT_INTERRUPT, "{patch}");
    assert_eq!(recorded["value"], event, "{patch}");
    assert_eq!(recorded["answeredBy"], "callback-token", "{patch}");
}

/// `Idempotency-Key` (`idempotency.md`): a repeated cancel, create or token resolve answers
/// the first answer again, marked `openwop-Idempotent-Replay: true`, and does the work once;
/// a key is the caller's own.
#[tokio::test]
async fn a_repeated_idempotency_key_replays_the_first_answer_and_acts_once() {
    let w = World::new(|_| {}).await;
    let post = Method::POST;
    let replayed = |g: &Got| {
        g.headers
            .get("openwop-idempotent-replay")
            .map(|v| v.to_str().unwrap().to_owned())
    };
    // Cancel.
    let cancel = call(post.clone(), "/v1/runs/uid-idle/cancel")
        .header("idempotency-key", "cancel-1")
        .json(json!({"reason": "r"}));
    let first = send(&w.app, &cancel).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    assert_eq!(replayed(&first), None);
    let again = send(&w.app, &cancel).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(replayed(&again).as_deref(), Some("true"));
    assert_eq!(again.json(), first.json());
    assert_eq!(w.patches(), ["idle"], "cancelled once");
    // Another caller's request under the same key replays nothing: it is authorized on its
    // own (403 here), and keys are kept per caller.
    let other = send(&w.app, &cancel.token(Some("reader"))).await;
    assert_eq!(other.status, StatusCode::FORBIDDEN, "{}", other.text);
    // Create.
    let create = call(post.clone(), "/v1/runs")
        .header("idempotency-key", "create-1")
        .json(json!({"workflowId": "w"}));
    let first = send(&w.app, &create).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    let again = send(&w.app, &create).await;
    assert_eq!(again.status, StatusCode::CREATED);
    assert_eq!(replayed(&again).as_deref(), Some("true"));
    assert_eq!(again.json()["runId"], first.json()["runId"]);
    assert_eq!(w.store.lock().unwrap().created.len(), 1, "created once");
    // A refusal that is not final (400 validation_error) is not kept: fixing the body with
    // the same key runs it.
    let bad = send(
        &w.app,
        &call(post.clone(), "/v1/runs")
            .header("idempotency-key", "create-2")
            .json(json!({"workflowId": "nope"})),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.text);
    let fixed = send(
        &w.app,
        &call(post.clone(), "/v1/runs")
            .header("idempotency-key", "create-2")
            .json(json!({"workflowId": "w"})),
    )
    .await;
    assert_eq!(fixed.status, StatusCode::CREATED, "{}", fixed.text);
    assert_eq!(replayed(&fixed), None);
    // A token resolve.
    let t = token("uid-gate", TokenIntent::Resolve, in_an_hour());
    let resolve = call(post.clone(), &format!("/v1/interrupts/{t}"))
        .token(None)
        .header("idempotency-key", "resolve-1")
        .json(json!({"resumeValue": {"action": "accept"}}));
    let first = send(&w.app, &resolve).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    let again = send(&w.app, &resolve).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    assert_eq!(replayed(&again).as_deref(), Some("true"));
    assert_eq!(w.patches(), ["idle", "gate"], "answered once");
}

/// Every mutation reads its body as the request type `/v1/openapi.json` publishes, naming the
/// member at fault, and an `Idempotency-Key` compares the body's canonical form
/// (`idempotency.md`: "a digest of the canonicalized request body"): the same body sent again
/// with its members in another order or other whitespace — or an optional body sent empty and
/// then as `{}` — is the same request; a changed value is not.
#[tokio::test]
async fn a_body_is_its_request_type_and_a_key_compares_its_canonical_form() {
    let w = World::new(|_| {}).await;
    let post = Method::POST;
    let replayed = |g: &Got| g.headers.get("openwop-idempotent-replay").is_some();
    let create = |body: &str| {
        call(post.clone(), "/v1/runs")
            .header("idempotency-key", "canon-1")
            .raw("application/json", body.to_owned())
    };
    let first = send(
        &w.app,
        &create(r#"{"workflowId":"w","tags":["a"],"scopeId":"s-1"}"#),
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    let again = send(
        &w.app,
        &create("{ \"scopeId\": \"s-1\",\n  \"tags\": [ \"a\" ], \"workflowId\": \"w\" }"),
    )
    .await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.text);
    assert!(replayed(&again), "re-serialized, the same request");
    assert_eq!(again.json()["runId"], first.json()["runId"]);
    let changed = send(
        &w.app,
        &create(r#"{"workflowId":"w","tags":["b"],"scopeId":"s-1"}"#),
    )
    .await;
    assert_eq!(changed.status, StatusCode::CONFLICT, "{}", changed.text);
    assert_eq!(changed.json()["error"], "idempotency_key_mismatch");
    assert_eq!(w.store.lock().unwrap().created.len(), 1, "created once");

    // Cancel: an empty body and `{}` are one request; a reason is kept on the Run, where the
    // controller takes it into run.cancelled.reason.
    let cancel = |body: &str| {
        call(post.clone(), "/v1/runs/uid-idle/cancel")
            .header("idempotency-key", "canon-2")
            .raw("application/json", body.to_owned())
    };
    let first = send(&w.app, &cancel("")).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    let again = send(&w.app, &cancel("{}")).await;
    assert!(replayed(&again), "{}", again.text);
    assert_eq!(w.patches(), ["idle"], "cancelled once");
    let reasoned = send(
        &w.app,
        &call(post.clone(), "/v1/runs/uid-wait/cancel").json(json!({"reason": "wrong inputs"})),
    )
    .await;
    assert_eq!(reasoned.status, StatusCode::OK, "{}", reasoned.text);
    let patch = w
        .store
        .lock()
        .unwrap()
        .patch_bodies
        .last()
        .cloned()
        .unwrap();
    assert_eq!(
        patch,
        json!({"metadata": {"annotations": {"openwop.dev/cancel-reason": "wrong inputs"}},
               "spec": {"cancel": true}})
    );

    // The member at fault, by its path in the body.
    for (what, uri, body, field) in [
        (
            "a reason too long",
            "/v1/runs/uid-wait/cancel",
            json!({"reason": "x".repeat(1025)}),
            "reason",
        ),
        (
            "a reason that is not text",
            "/v1/runs/uid-wait/cancel",
            json!({"reason": 7}),
            "reason",
        ),
        (
            "a drain policy of the wrong type",
            "/v1/runs/uid-wait:pause",
            json!({"drainPolicy": 7}),
            "drainPolicy",
        ),
        (
            "a pause member the spec does not have",
            "/v1/runs/uid-wait:pause",
            json!({"colour": 1}),
            "colour",
        ),
        (
            "a resume member the spec does not have",
            "/v1/runs/uid-wait:resume",
            json!({"colour": 1}),
            "colour",
        ),
        (
            "a runId that is not text",
            "/v1/runs:bulk-cancel",
            json!({"runIds": ["uid-idle", 7]}),
            "runIds[1]",
        ),
        (
            "an answer without its value",
            "/v1/runs/uid-gate/interrupts/gate",
            json!({}),
            "resumeValue",
        ),
    ] {
        let got = send(&w.app, &call(post.clone(), uri).json(body)).await;
        assert_eq!(got.status, StatusCode::BAD_REQUEST, "{what}: {}", got.text);
        assert_eq!(got.json()["error"], "validation_error", "{what}");
        assert_eq!(
            got.json()["details"]["field"],
            field,
            "{what}: {}",
            got.text
        );
        let message = got.json()["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.contains(field),
            "{what}: the message names it: {message}"
        );
    }
    assert_eq!(w.patches().len(), 2, "no refused body patched a run");
    // A refusal names the route's template, never the path as sent (it may hold a token).
    let got = send(
        &w.app,
        &call(post.clone(), "/v1/runs/uid-wait:pause").json(json!({"drainPolicy": 7})),
    )
    .await;
    let message = got.json()["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("POST /v1/runs/{runId}:pause") && !message.contains("uid-wait"),
        "{message}"
    );
}
