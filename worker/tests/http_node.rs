//! The HTTP node (`core.openwop.http.fetch`) against a real local HTTP service: calls through
//! the egress guard's allow list, secret headers that never reach events or the worker's
//! log, refusals of internal targets, retries and the response bound, and exactly-once across
//! a worker SIGKILL at every event of the run.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use serde_json::{Value, json};

const SECRET: &str = "tok-9f3c1d2e7a6b5c4d";

/// Requests a [`Service`] got: (method and path, Idempotency-Key, Authorization).
type Seen = Arc<Mutex<Vec<(String, Option<String>, Option<String>)>>>;

/// A local service: `GET /items/{id}` (echoes the id, sets a cookie), `POST /orders`
/// (deduplicates by `Idempotency-Key`, as an idempotent API does, and echoes the
/// Authorization header it got), `GET /flaky` (503 twice, then 200), `GET /slow` (answers
/// after 5 s), `GET /big` (2 KiB).
struct Service {
    base: String,
    /// Every request: (method + path, Idempotency-Key, Authorization).
    requests: Seen,
    /// Orders created (one per distinct Idempotency-Key).
    orders: Arc<Mutex<BTreeSet<String>>>,
    _rt: tokio::runtime::Runtime,
}

impl Service {
    fn start() -> Service {
        use axum::http::{HeaderMap, StatusCode};
        use axum::routing::{get, post};
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let requests: Seen = Default::default();
        let orders: Arc<Mutex<BTreeSet<String>>> = Default::default();
        let flaky = Arc::new(AtomicUsize::new(0));
        let log = |what: &str, h: &HeaderMap, requests: &Mutex<Vec<_>>| {
            let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::to_owned);
            requests.lock().unwrap().push((
                what.to_owned(),
                get("idempotency-key"),
                get("authorization"),
            ));
        };
        let (r1, r2, r3, r4, r5) = (
            requests.clone(),
            requests.clone(),
            requests.clone(),
            requests.clone(),
            requests.clone(),
        );
        let o = orders.clone();
        let app = axum::Router::new()
            .route(
                "/items/{id}",
                get(
                    move |axum::extract::Path(id): axum::extract::Path<String>, h: HeaderMap| {
                        let r = r1.clone();
                        async move {
                            log(&format!("GET /items/{id}"), &h, &r);
                            (
                                [("set-cookie", "session=s3cr3t-session"), ("x-item", "yes")],
                                axum::Json(json!({"id": id, "ok": true})),
                            )
                        }
                    },
                ),
            )
            .route(
                "/orders",
                post(move |h: HeaderMap, body: String| {
                    let (r, o) = (r2.clone(), o.clone());
                    async move {
                        log("POST /orders", &h, &r);
                        let key = h
                            .get("idempotency-key")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        o.lock().unwrap().insert(key);
                        let auth = h
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        (
                            StatusCode::CREATED,
                            axum::Json(
                                json!({"created": true, "sawAuthorization": auth, "body": body}),
                            ),
                        )
                    }
                }),
            )
            .route(
                "/flaky",
                get(move |h: HeaderMap| {
                    let (r, n) = (r3.clone(), flaky.clone());
                    async move {
                        log("GET /flaky", &h, &r);
                        if n.fetch_add(1, Ordering::SeqCst) < 2 {
                            (StatusCode::SERVICE_UNAVAILABLE, "busy".to_owned())
                        } else {
                            (StatusCode::OK, "fine".to_owned())
                        }
                    }
                }),
            )
            .route(
                "/slow",
                get(move |h: HeaderMap| {
                    let r = r5.clone();
                    async move {
                        log("GET /slow", &h, &r);
                        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                        "late"
                    }
                }),
            )
            .route(
                "/big",
                get(move |h: HeaderMap| {
                    let r = r4.clone();
                    async move {
                        log("GET /big", &h, &r);
                        "x".repeat(2048)
                    }
                }),
            );
        rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
        Service {
            base,
            requests,
            orders,
            _rt: rt,
        }
    }

    fn count(&self, what: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.0 == what)
            .count()
    }
}

fn fetch(id: &str, config: Value, inputs: Value) -> Value {
    json!({"id": id, "typeId": "core.openwop.http.fetch", "config": config, "inputs": inputs})
}

/// `get` reads an item; `post` creates an order from it, authenticated with the secret.
fn order_workflow(base: &str) -> Value {
    json!({"id": "http-order", "nodes": [
        fetch("get", json!({"url": format!("{base}/items/{{{{id}}}}")}),
              json!({"variables": {"type": "static", "value": {"id": "a b"}}})),
        fetch("post", json!({"url": format!("{base}/orders"), "method": "POST",
                             "headers": {"Authorization": "Bearer {{secrets.api-token}}"}}),
              json!({"body": {"type": "connection", "nodeId": "get", "outputKey": "body"}})),
    ]})
}

/// A run of `workflow` allowed to reach loopback (the local service) and holding the secret.
fn files(name: &str, run_id: &str, workflow: Value, allow: &[&str]) -> RunFiles {
    let f = RunFiles::new(name, run_id, workflow, json!({}), json!({}));
    f.set_snapshot_field("host", json!({"http": {"allowHosts": allow}}));
    std::fs::write(f.path("api-token"), format!("{SECRET}\n")).unwrap();
    f.set_snapshot_field(
        "secrets",
        json!([{"name": "api-token", "path": f.path("api-token")}]),
    );
    f
}

fn completed<'a>(events: &'a [Value], node: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == "node.completed" && e["nodeId"] == node)
        .unwrap_or_else(|| panic!("no node.completed for {node}: {:?}", types(events)))
}

fn failed<'a>(events: &'a [Value], node: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == "node.failed" && e["nodeId"] == node)
        .unwrap_or_else(|| panic!("no node.failed for {node}: {:?}", types(events)))
}

#[test]
fn calls_reach_an_allowed_service_with_secret_headers_that_never_reach_events_or_logs() {
    let nats = NatsServer::start();
    let svc = Service::start();
    let f = files(
        "order",
        "run-http-order",
        order_workflow(&svc.base),
        &["127.0.0.1"],
    );
    let (code, stderr) = f.run_with(&nats.url(), |c| {
        c.env(openwop_protocol::run::env::LOG, "debug");
    });
    let events = read_raw(&nats.url(), &f.subject());
    assert_eq!(code, 0, "{stderr}\n{:?}", types(&events));
    assert_gap_free(&events);

    let get = &completed(&events, "get")["payload"]["outputs"];
    assert_eq!(get["status"], 200);
    assert_eq!(get["body"], json!({"id": "a b", "ok": true}), "{get}");
    assert_eq!(get["attempts"], 1);
    assert_eq!(get["headers"]["x-item"], "yes");
    assert!(get["headers"].get("set-cookie").is_none(), "{get}");
    assert!(get.get("idempotencyKey").is_none(), "GET sends no key");

    let post = &completed(&events, "post")["payload"]["outputs"];
    assert_eq!(post["status"], 201, "{post}");
    let key = post["idempotencyKey"].as_str().unwrap();
    assert!(key.starts_with("openwop-"), "{key}");
    // The service got the secret and the key; the body is the item the first call read.
    let reqs = svc.requests.lock().unwrap().clone();
    let order = reqs.iter().find(|r| r.0 == "POST /orders").unwrap();
    assert_eq!(order.1.as_deref(), Some(key));
    assert_eq!(
        order.2.as_deref(),
        Some(format!("Bearer {SECRET}").as_str())
    );
    assert_eq!(
        serde_json::from_str::<Value>(post["body"]["body"].as_str().unwrap()).unwrap(),
        json!({"id": "a b", "ok": true})
    );
    // The service echoed the secret: the log holds the marker, never the value.
    assert_eq!(
        post["body"]["sawAuthorization"],
        "Bearer [REDACTED:secrets.api-token]"
    );
    let all = serde_json::to_string(&events).unwrap();
    assert!(!all.contains(SECRET), "the secret reached the run's events");
    assert!(
        !all.contains("s3cr3t-session"),
        "a Set-Cookie value was recorded"
    );
    assert!(
        !stderr.contains(SECRET),
        "the secret reached the worker's log"
    );
    // Every attempt is recorded before its node completes.
    let records: Vec<&Value> = events
        .iter()
        .filter(|e| e["payload"]["fields"]["httpCall"].is_object())
        .collect();
    assert_eq!(records.len(), 2);
    for r in &records {
        let node = r["nodeId"].as_str().unwrap();
        let done = completed(&events, node)["sequence"].as_u64().unwrap();
        assert!(r["sequence"].as_u64().unwrap() < done);
    }
}

#[test]
fn internal_targets_are_refused_by_the_guard_before_any_request() {
    let nats = NatsServer::start();
    let svc = Service::start();
    let port = svc.base.rsplit(':').next().unwrap().to_owned();
    let wf = json!({"id": "http-refused", "nodes": [
        fetch("loopback", json!({"url": format!("{}/items/x", svc.base)}), json!({})),
        fetch("named", json!({"url": format!("http://localhost:{port}/items/x")}), json!({})),
        fetch("metadata", json!({"url": "http://169.254.169.254/latest/meta-data/"}), json!({})),
        fetch("cluster", json!({"url": "http://kubernetes.default.svc/api"}), json!({})),
    ]});
    // Nothing on the allow list: the host's defaults.
    let f = files("refused", "run-http-refused", wf, &[]);
    let (code, stderr) = f.run(&nats.url());
    assert_eq!(code, 0, "{stderr}");
    let events = read_raw(&nats.url(), &f.subject());
    for node in ["loopback", "named", "metadata", "cluster"] {
        let e = &failed(&events, node)["payload"]["error"];
        assert_eq!(e["code"], "http_url_rejected", "{node}: {e}");
        assert!(e["details"]["url"].is_string(), "{e}");
        assert!(e["message"].as_str().unwrap().contains("allow list"), "{e}");
    }
    assert_eq!(
        types(&events).last().map(String::as_str),
        Some("run.failed")
    );
    assert!(
        svc.requests.lock().unwrap().is_empty(),
        "a refused call reached the service"
    );
}

#[test]
fn server_errors_timeouts_and_refused_connections_are_retried_and_an_oversized_body_fails() {
    let nats = NatsServer::start();
    let svc = Service::start();
    let wf = json!({"id": "http-limits", "nodes": [
        fetch("flaky", json!({"url": format!("{}/flaky", svc.base),
            "retry": {"maxAttempts": 3, "initialDelayMs": 10, "maxDelayMs": 20}}), json!({})),
        fetch("big", json!({"url": format!("{}/big", svc.base)}), json!({})),
        fetch("slow", json!({"url": format!("{}/slow", svc.base), "timeoutMs": 200,
            "retry": {"maxAttempts": 2, "initialDelayMs": 0}}), json!({})),
        // A port nothing listens on: the connection is refused.
        fetch("down", json!({"url": format!("http://127.0.0.1:{}/", closed_port()),
            "retry": {"maxAttempts": 2, "initialDelayMs": 0}}), json!({})),
    ]});
    let f = files("limits", "run-http-limits", wf, &["127.0.0.1"]);
    f.set_snapshot_field(
        "host",
        json!({"http": {"allowHosts": ["127.0.0.1"], "maxResponseBytes": 1024}}),
    );
    let (code, stderr) = f.run(&nats.url());
    assert_eq!(code, 0, "{stderr}");
    let events = read_raw(&nats.url(), &f.subject());
    let flaky = &completed(&events, "flaky")["payload"]["outputs"];
    assert_eq!(
        (flaky["status"].clone(), flaky["attempts"].clone()),
        (json!(200), json!(3))
    );
    assert_eq!(flaky["body"], "fine");
    assert!(
        flaky["durationMs"].as_u64().unwrap() >= 30,
        "backoff counts: {flaky}"
    );
    assert_eq!(svc.count("GET /flaky"), 3);
    let big = &failed(&events, "big")["payload"]["error"];
    assert_eq!(big["code"], "http_response_too_large", "{big}");
    assert_eq!(big["details"]["maxBytes"], 1024);
    assert_eq!(svc.count("GET /big"), 1, "an oversized body is not retried");
    let slow = &failed(&events, "slow")["payload"]["error"];
    assert_eq!(
        (slow["code"].clone(), slow["retryable"].clone()),
        (json!("http_timeout"), json!(true)),
        "{slow}"
    );
    assert_eq!(svc.count("GET /slow"), 2, "a timeout is retried");
    let down = &failed(&events, "down")["payload"]["error"];
    assert_eq!(down["code"], "http_network_error", "{down}");
    assert_eq!(down["details"]["attempts"], 2, "{down}");
}

/// A local port with no listener.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `v` without what depends on the clock: durations and the service's `Date` header.
fn timeless(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("durationMs");
            m.remove("date");
            m.values_mut().for_each(timeless);
        }
        Value::Array(a) => a.iter_mut().for_each(timeless),
        _ => {}
    }
}

/// The run's events per node, without what depends on time (timestamps, durations).
fn per_node(events: &[Value]) -> BTreeMap<String, Vec<Value>> {
    let mut m: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for e in events {
        let mut e = essence(e);
        timeless(&mut e);
        let node = e["nodeId"].as_str().unwrap_or("(run)").to_owned();
        m.entry(node).or_default().push(e);
    }
    m
}

#[test]
fn killed_at_every_event_each_call_counts_once() {
    const RUN_ID: &str = "run-http-killed";
    let reference_nats = NatsServer::start();
    let reference_svc = Service::start();
    // The same base URL for every run would need one port; the URL is part of the events,
    // so each run's log is compared with the URL normalised.
    let norm = |events: Vec<Value>, base: &str| -> Vec<Value> {
        serde_json::from_str(
            &serde_json::to_string(&events)
                .unwrap()
                .replace(base, "BASE"),
        )
        .unwrap()
    };
    let reference = files(
        "reference",
        RUN_ID,
        order_workflow(&reference_svc.base),
        &["127.0.0.1"],
    );
    let (code, stderr) = reference.run(&reference_nats.url());
    assert_eq!(code, 0, "{stderr}");
    let want = norm(
        read_raw(&reference_nats.url(), &reference.subject()),
        &reference_svc.base,
    );
    let record_seq = |node: &str| {
        want.iter()
            .find(|e| e["nodeId"] == node && e["payload"]["fields"]["httpCall"].is_object())
            .and_then(|e| e["sequence"].as_u64())
            .unwrap()
    };
    let (get_record, post_record) = (record_seq("get"), record_seq("post"));
    let want = per_node(&want);
    let n = want.values().map(Vec::len).sum::<usize>() as u64;

    let (mut kills, mut repeated) = (0, 0);
    for pause in 0..n {
        let nats = NatsServer::start();
        let svc = Service::start();
        let f = files(
            &format!("killed-{pause}"),
            RUN_ID,
            order_workflow(&svc.base),
            &["127.0.0.1"],
        );
        let mut killed = false;
        for _ in 0..5 {
            let code = if killed {
                Some(f.run(&nats.url()).0)
            } else {
                run_until_paused(&f, &nats.url(), pause, |_| {})
            };
            match code {
                None => killed = true,
                Some(0) => break,
                Some(other) => panic!("kill point {pause}: worker exited with {other}"),
            }
        }
        assert!(killed, "kill point {pause} was never reached");
        kills += 1;
        let got = norm(read_raw(&nats.url(), &f.subject()), &svc.base);
        assert_gap_free(&got);
        assert_eq!(per_node(&got), want, "kill point {pause}");
        // A recorded call is never made again; only a call whose record the kill prevented
        // (the worker paused just before publishing it) is made twice — with the same
        // Idempotency-Key, so the service performs it once.
        let gets = svc.count("GET /items/a b");
        let posts = svc.count("POST /orders");
        assert_eq!(
            gets,
            if pause == get_record { 2 } else { 1 },
            "kill point {pause}: GETs"
        );
        assert_eq!(
            posts,
            if pause == post_record { 2 } else { 1 },
            "kill point {pause}: POSTs"
        );
        assert_eq!(
            svc.orders.lock().unwrap().len(),
            1,
            "kill point {pause}: orders created"
        );
        repeated += gets + posts - 2;
    }
    eprintln!(
        "HTTP node kill points: {kills} (before every event of a {n}-event run with a GET and a POST); requests made twice: {repeated}, both at the 2 kill points between a response and its record; orders created per run: 1"
    );
    assert_eq!(kills as u64, n);
    assert_eq!(repeated, 2);
}
