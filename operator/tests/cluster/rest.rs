//! The REST API's limits over real HTTP against the operator process, with ServiceAccount
//! tokens checked by the mini-cluster's kube-apiserver (TokenReview, SubjectAccessReview) and
//! run events in its nats-server: `rest.maxBodyBytes` (413), `rest.maxInFlight` (429 while
//! SSE streams are open), `rest.keepaliveSeconds` and `rest.reviewCacheSeconds`. Plus the
//! REST figures `make bench` prints (JSON events of a 1,000-event run; 100 SSE followers),
//! each beside a direct JetStream reader in the same run.
//!
//! Why one file of this size: these limit tests and the REST figures share one operator
//! launcher, its tokens and the JetStream fixtures; each test is one limit.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt as _;
use openwop_nats::reader::{From, RunLog};
use reqwest::StatusCode;

use super::*;

/// One namespace with its own operator (REST config `rest`), a held Run `live` (its worker
/// never starts, so only the test writes its events) and a ServiceAccount `team` with the
/// Role of docs/rest-api.md.
struct RestFixture {
    c: openwop_e2e::Cluster,
    ns: Namespace,
    op: Operator,
    consumer: String,
    token: String,
    js: async_nats::jetstream::Context,
    http: reqwest::Client,
}

impl RestFixture {
    /// `extra`: more operator config lines.
    async fn start(test: &str, prefix: &str, rest: &str, extra: &str) -> Option<Self> {
        let c = cluster(test).await?;
        assert!(
            !c.nats_url.is_empty(),
            "the mini-cluster exports no OPENWOP_NATS_URL"
        );
        ensure_crds(&c.client).await;
        let ns = Namespace::new(&c, prefix).await;
        let js = events_jetstream(&c).await;
        let consumer = format!("test-{}", ns.name);
        let extra = format!(
            "events: {{natsUrl: '{}', consumer: '{consumer}', flushIntervalMs: 100}}\nrest: {rest}\n{extra}",
            c.nats_url
        );
        let op = Operator::start(&c, &ns.name, prefix, &extra);
        let wfs: Api<Workflow> = Api::namespaced(c.client.clone(), &ns.name);
        create(
            &wfs,
            held_workflow("w", "w", json!([{"id": "ask", "typeId": "core.identity"}])),
        )
        .await;
        let (ok, out) = kubectl(
            &c.kubeconfig,
            &["create", "serviceaccount", "team", "-n", &ns.name],
        );
        assert!(ok, "create serviceaccount: {out}");
        let role = std::env::temp_dir().join(format!("{}-role.yaml", ns.name));
        std::fs::write(&role, openwop_e2e::rest_role("team")).unwrap();
        let (ok, out) = kubectl(
            &c.kubeconfig,
            &["apply", "-n", &ns.name, "-f", role.to_str().unwrap()],
        );
        let _ = std::fs::remove_file(&role);
        assert!(ok, "apply the team Role: {out}");
        let (ok, token) = kubectl(
            &c.kubeconfig,
            &[
                "create",
                "token",
                "team",
                "-n",
                &ns.name,
                "--duration",
                "1h",
            ],
        );
        assert!(ok, "kubectl create token: {token}");
        Some(RestFixture {
            c,
            ns,
            op,
            consumer,
            token: token.trim().to_owned(),
            js,
            http: reqwest::Client::new(),
        })
    }

    /// Creates held Run `name` and waits until the operator's REST API serves it; its runId.
    async fn run(&self, name: &str) -> String {
        let runs: Api<Run> = Api::namespaced(self.c.client.clone(), &self.ns.name);
        let run = create(
            &runs,
            json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": name},
                   "spec": {"workflowRef": {"name": "w"}}}),
        )
        .await;
        let uid = run.metadata.uid.unwrap();
        wait_for(60, &format!("GET /v1/runs/{uid} to answer 200"), || async {
            let r = self.get(&format!("/v1/runs/{uid}")).send().await.ok()?;
            (r.status() == StatusCode::OK).then_some(())
        })
        .await;
        uid
    }

    fn subject(&self, run_id: &str) -> String {
        openwop_protocol::run::subjects::events_subject(&self.ns.name, run_id)
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .get(self.op.url(path))
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(30))
    }

    /// An SSE request of a run's events, answered (headers read) and left open.
    async fn sse(&self, run_id: &str) -> reqwest::Response {
        let r = self
            .http
            .get(
                self.op
                    .url(&format!("/v1/runs/{run_id}/events?streamMode=debug")),
            )
            .bearer_auth(&self.token)
            .header("accept", "text/event-stream")
            .send()
            .await
            .expect("SSE request");
        assert_eq!(r.status(), StatusCode::OK, "SSE stream refused");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        r
    }

    async fn cleanup(self) {
        if let Ok(stream) = self.js.get_stream("OPENWOP_EVENTS").await {
            let _ = stream.delete_consumer(&self.consumer).await;
            let _ = stream
                .purge()
                .filter(format!("openwop.events.{}.>", self.ns.name))
                .await;
        }
    }
}

/// An error response in the spec's shape `{error, message, details?}` (nothing else); its
/// code and body.
async fn spec_error(r: reqwest::Response) -> (String, Value) {
    let body: Value = r.json().await.expect("a JSON error body");
    let keys = body.as_object().expect("an object").keys();
    assert!(
        keys.into_iter()
            .all(|k| ["error", "message", "details"].contains(&k.as_str())),
        "{body}"
    );
    assert!(!body["message"].as_str().unwrap().is_empty(), "{body}");
    (body["error"].as_str().unwrap().to_owned(), body)
}

#[tokio::test]
async fn rest_limits_body_size_concurrency_and_sse_keepalive_over_real_http() {
    let Some(f) = RestFixture::start(
        "rest_limits_body_size_concurrency_and_sse_keepalive_over_real_http",
        "opi-rest-limits",
        "{maxBodyBytes: 2048, maxInFlight: 2, keepaliveSeconds: 1}",
        "",
    )
    .await
    else {
        return;
    };
    let run_id = f.run("live").await;
    let post = |path: &str, body: String| {
        f.http
            .post(f.op.url(path))
            .bearer_auth(&f.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let padded = |n: usize| json!({"workflowId": "w", "metadata": {"pad": "x".repeat(n)}});

    // maxBodyBytes: a body over it is 413 in the spec's shape; one under it is served.
    let big = padded(4096).to_string();
    let r = post("/v1/runs", big).await.unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let (code, body) = spec_error(r).await;
    assert_eq!(code, "payload_too_large", "{body}");
    assert_eq!(
        body["details"]["maxBytes"], 2048,
        "details name the limit: {body}"
    );
    let r = post(
        &format!("/v1/runs/{run_id}/interrupts/ask"),
        json!({"resumeValue": {"pad": "x".repeat(4096)}}).to_string(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(spec_error(r).await.0, "payload_too_large");
    let small = padded(1500).to_string();
    assert!(small.len() < 2048);
    let r = post("/v1/runs", small).await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED, "{:?}", r.text().await);

    // keepaliveSeconds: an idle stream (no events) carries `:` comments at that interval.
    let mut first = f.sse(&run_id).await;
    let mut text = String::new();
    let comments = |t: &str| t.lines().filter(|l| l.starts_with(':')).count();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while comments(&text) < 2 {
        let chunk = tokio::time::timeout_at(deadline, first.chunk())
            .await
            .expect("two SSE keepalive comments within 10 s (keepaliveSeconds: 1)")
            .expect("SSE stream read")
            .expect("SSE stream still open");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        !text.contains("data:"),
        "an idle run sends no events: {text}"
    );

    // maxInFlight: two open event streams are the limit; a third request is 429 with
    // Retry-After, in the spec's shape.
    let second = f.sse(&run_id).await;
    let r = f.get(&format!("/v1/runs/{run_id}")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .expect("Retry-After in seconds");
    assert!(retry >= 1);
    let (code, body) = spec_error(r).await;
    assert_eq!(code, "rate_limited", "{body}");
    assert_eq!(body["details"]["retryAfter"], retry, "{body}");
    // `rest-endpoints.md` §429: the delay in milliseconds too, and the limit's scope.
    assert_eq!(body["details"]["retryAfterMs"], retry * 1000, "{body}");
    assert_eq!(body["details"]["scope"], "global", "{body}");
    let r = f
        .get(&format!("/v1/runs/{run_id}/events?streamMode=debug"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "a third stream");

    // A stream the client closes frees its place (noticed at the next keepalive write).
    drop(first);
    wait_for(
        15,
        "a request served again after a stream closed",
        || async {
            let r = f.get(&format!("/v1/runs/{run_id}")).send().await.ok()?;
            (r.status() == StatusCode::OK).then_some(())
        },
    )
    .await;
    // ...and only one: with the second stream still open, a second new stream fills the limit.
    let _third = f.sse(&run_id).await;
    let r = f.get(&format!("/v1/runs/{run_id}")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    drop(second);
    f.cleanup().await;
}

/// `POST /v1/runs` with an `Idempotency-Key` (`idempotency.md` Layer 1): the same key and
/// body answer the same run again with `OpenWOP-Idempotent-Replay`, and another body under the
/// key is `409 idempotency_key_mismatch` naming no run.
#[tokio::test]
async fn rest_idempotent_create_marks_the_replay_and_a_changed_body_is_a_mismatch() {
    use openwop_protocol::run::api::{IDEMPOTENCY_KEY_MISMATCH, IDEMPOTENT_REPLAY_HEADER};
    let Some(f) = RestFixture::start(
        "rest_idempotent_create_marks_the_replay_and_a_changed_body_is_a_mismatch",
        "opi-rest-idem",
        "{}",
        "",
    )
    .await
    else {
        return;
    };
    let create = |body: Value| {
        f.http
            .post(f.op.url("/v1/runs"))
            .bearer_auth(&f.token)
            .header("idempotency-key", "key-1")
            .json(&body)
            .timeout(Duration::from_secs(30))
            .send()
    };
    let body = json!({"workflowId": "w", "tags": ["first"]});
    let first = create(body.clone()).await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(first.headers().get(IDEMPOTENT_REPLAY_HEADER).is_none());
    let first: Value = first.json().await.unwrap();
    let again = create(body).await.unwrap();
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(again.headers()[IDEMPOTENT_REPLAY_HEADER], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["runId"], first["runId"], "{again}");
    let other = create(json!({"workflowId": "w", "tags": ["second"]}))
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::CONFLICT);
    let (code, err) = spec_error(other).await;
    assert_eq!(code, IDEMPOTENCY_KEY_MISMATCH, "{err}");
    let run_id = first["runId"].as_str().unwrap();
    assert!(
        !err.to_string().contains(run_id),
        "the 409 names the earlier run: {err}"
    );
    f.cleanup().await;
}

#[tokio::test]
async fn rest_review_cache_expires_and_a_removed_role_binding_is_refused() {
    let Some(f) = RestFixture::start(
        "rest_review_cache_expires_and_a_removed_role_binding_is_refused",
        "opi-rest-cache",
        "{reviewCacheSeconds: 3}",
        "",
    )
    .await
    else {
        return;
    };
    const TTL: Duration = Duration::from_secs(3);
    let run_id = f.run("live").await;
    let path = format!("/v1/runs/{run_id}");
    // `f.run` polled this same path, so a review is already cached from some moment during
    // that poll. Let every such entry expire, so that the next GET reviews afresh and its
    // entry's clock starts no earlier than `cached_at`: both checks below are then measured
    // from the real insertion moment, not from a later one (which made the lower bound flaky).
    tokio::time::sleep(TTL + Duration::from_millis(200)).await;
    let cached_at = Instant::now();
    let r = f.get(&path).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let (ok, out) = kubectl(
        &f.c.kubeconfig,
        &["delete", "rolebinding", "team", "-n", &f.ns.name],
    );
    assert!(ok, "delete the RoleBinding: {out}");
    // Within the cache TTL the earlier review still answers (the point of the cache)...
    let r = f.get(&path).send().await.unwrap();
    if cached_at.elapsed() < Duration::from_millis(2500) {
        assert_eq!(r.status(), StatusCode::OK, "a cached review is reused");
    } else {
        eprintln!(
            "the cache-hit check was skipped: the machine took {:?} to delete the RoleBinding",
            cached_at.elapsed()
        );
    }
    // ...and once it expired the removed RoleBinding is in force: the run reads as missing.
    let refused = wait_for(60, "the run refused after the cache expired", || async {
        let r = f.get(&path).send().await.ok()?;
        (r.status() == StatusCode::NOT_FOUND).then_some(r)
    })
    .await;
    assert!(
        cached_at.elapsed() >= TTL,
        "refused {:?} after the review was cached, before its {TTL:?} expiry",
        cached_at.elapsed()
    );
    assert_eq!(spec_error(refused).await.0, "not_found");
    f.cleanup().await;
}

/// An OTLP export of `spans` span names whose resource names `run_id` in `namespace`.
fn otlp_export(run_id: &str, namespace: &str, names: &[String]) -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;
    let kv = |k: &str, v: &str| KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("openwop.run_id", run_id),
                    kv("openwop.namespace", namespace),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: names
                    .iter()
                    .map(|n| Span {
                        name: n.clone(),
                        trace_id: vec![7; 16],
                        span_id: vec![1; 8],
                        attributes: vec![kv("openwop.node_id", "a")],
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// The span store behind `test/otel/spans` over real HTTP: OTLP protobuf in (from several
/// writers at once), the spec's `{spans}` out for the run's tenant only; spans naming no Run
/// refused as an OTLP partial success; other media types, undecodable bodies and bodies
/// over the bound refused with a reason; the per-run cap counted in `droppedSpans`.
#[tokio::test]
async fn the_span_store_files_otlp_spans_under_their_run() {
    // Workers would export to spanIngestUrl; here the test itself is the exporter.
    let Some(f) = RestFixture::start(
        "the_span_store_files_otlp_spans_under_their_run",
        "opi-rest-spans",
        "{}",
        "conformance: {seams: {enabled: true, spanIngestUrl: 'http://operator.invalid'}}",
    )
    .await
    else {
        return;
    };
    let run_id = f.run("live").await;
    let ingest = f.op.url("/v1/host/sample/test/otel/ingest/v1/traces");
    let post = |body: Vec<u8>, content_type: &'static str| {
        f.http
            .post(&ingest)
            .header("content-type", content_type)
            .body(body)
            .timeout(Duration::from_secs(30))
            .send()
    };
    let decode = |b: &[u8]| {
        use prost::Message;
        opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse::decode(b)
            .expect("an OTLP ExportTraceServiceResponse")
    };
    let fr = &f;
    let spans_of = |run: &str| {
        let url = format!("/v1/host/sample/test/otel/spans?runId={run}");
        async move {
            let r = fr.get(&url).send().await.unwrap();
            let code = r.status();
            (code, r.json::<Value>().await.unwrap())
        }
    };
    assert_eq!(
        spans_of(&run_id).await.1,
        json!({"spans": [], "droppedSpans": 0})
    );

    // Eight writers at once (as batches from several exporters): none overwrites another.
    let batches: Vec<Vec<String>> = (0..8)
        .map(|w| (0..5).map(|i| format!("span-{w}-{i}")).collect())
        .collect();
    let sent = futures::future::join_all(batches.iter().map(|names| {
        post(
            otlp_export(&run_id, &f.ns.name, names),
            "application/x-protobuf",
        )
    }))
    .await;
    for r in sent {
        let r = r.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["content-type"], "application/x-protobuf");
        assert_eq!(decode(&r.bytes().await.unwrap()).partial_success, None);
    }
    let (code, v) = spans_of(&run_id).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    let mut got: Vec<String> = v["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    got.sort();
    let mut want: Vec<String> = batches.concat();
    want.sort();
    assert_eq!(got, want);
    let one = &v["spans"][0];
    assert_eq!(
        one["attributes"]["openwop.run_id"],
        run_id.as_str(),
        "{one}"
    );
    assert_eq!(one["attributes"]["openwop.node_id"], "a", "{one}");
    assert_eq!(one["events"], json!([]));

    // A run that does not exist, or a real run claimed for another namespace: refused as a
    // partial success naming why, nothing stored.
    for (run, ns) in [
        ("no-such-run", f.ns.name.as_str()),
        (run_id.as_str(), "elsewhere"),
    ] {
        let r = post(
            otlp_export(run, ns, &["x".into(), "y".into()]),
            "application/x-protobuf",
        )
        .await
        .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let partial = decode(&r.bytes().await.unwrap())
            .partial_success
            .expect("partial success");
        assert_eq!(partial.rejected_spans, 2);
        assert!(
            partial.error_message.contains("no Run with uid"),
            "{}",
            partial.error_message
        );
    }
    assert_eq!(
        spans_of(&run_id).await.1["spans"].as_array().unwrap().len(),
        40
    );

    // Refusals with a reason: JSON, garbage, too large.
    let r = post(b"{}".to_vec(), "application/json").await.unwrap();
    assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (code, body) = spec_error(r).await;
    assert_eq!(code, "unsupported_media_type", "{body}");
    let r = post(vec![0xff; 64], "application/x-protobuf")
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let (code, body) = spec_error(r).await;
    assert_eq!(code, "validation_error", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("ExportTraceServiceRequest"),
        "{body}"
    );
    // Over the bound: refused on its declared length, before the body is sent (a raw
    // request, since an HTTP client would see the server close while it still writes).
    let mut conn = tokio::net::TcpStream::connect(
        ingest
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap(),
    )
    .await
    .unwrap();
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    conn.write_all(
        format!(
            "POST /v1/host/sample/test/otel/ingest/v1/traces HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            5 * 1024 * 1024
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut head = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut head))
        .await
        .expect("an answer before the body")
        .unwrap();
    let head = String::from_utf8_lossy(&head[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");

    // The per-run cap: spans beyond it are counted, not stored.
    let long: Vec<String> = (0..3000)
        .map(|i| format!("{i:04}-{}", "n".repeat(300)))
        .collect();
    let r = post(
        otlp_export(&run_id, &f.ns.name, &long),
        "application/x-protobuf",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let (_, v) = spans_of(&run_id).await;
    let stored = v["spans"].as_array().unwrap().len();
    let dropped = v["droppedSpans"].as_u64().unwrap();
    assert!(
        stored > 40 && dropped > 0,
        "stored {stored}, dropped {dropped}"
    );
    assert_eq!(stored as u64 + dropped, 3040);
    assert!(serde_json::to_vec(&v["spans"]).unwrap().len() <= 768 * 1024);

    // Read with the run's auth: no token 401.
    let r = f
        .http
        .get(f.op.url(&format!("/v1/host/sample/test/otel/spans?runId={run_id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // Any other id has no spans (how the suite probes the seam), revealing nothing.
    assert_eq!(
        spans_of("__probe__").await,
        (StatusCode::OK, json!({"spans": [], "droppedSpans": 0}))
    );
    f.cleanup().await;
}

// ---------------------------------------------------------------- figures (make bench)

/// `p` (0..=100) percentile of sorted `v`.
fn pct(v: &[f64], p: f64) -> f64 {
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[i]
}

/// CPU seconds (user + system) process `pid` has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the `(comm)`: state is field 3, utime 14 and stime 15 (clock ticks).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        f.get(i - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(14) + ticks(15)) / 100.0
}

/// Issue 25 item 7: a client that has seen a run's terminal event over SSE never reads an
/// older snapshot from `GET /v1/runs/{id}`, though the operator writes the Run's status a
/// moment after the events are stored (`flushIntervalMs: 100` here). 100 runs: publish each
/// one's events through `run.completed`, follow its SSE stream until the server closes it,
/// then read the snapshot at once — it must be `completed` every time.
#[tokio::test]
async fn rest_snapshot_read_after_the_terminal_event_is_never_older() {
    let Some(f) = RestFixture::start(
        "rest_snapshot_read_after_the_terminal_event_is_never_older",
        "opi-rest-fresh",
        "{}",
        "",
    )
    .await
    else {
        return;
    };
    const ROUNDS: usize = 100;
    let mut stale = Vec::new();
    for i in 0..ROUNDS {
        let run_id = f.run(&format!("fresh-{i}")).await;
        let subject = f.subject(&run_id);
        for (seq, ty) in [
            "run.started",
            "node.started",
            "node.completed",
            "run.completed",
        ]
        .into_iter()
        .enumerate()
        {
            publish(
                &f.js,
                &subject,
                event(&run_id, seq as u64, ty, json!({"nodeId": "ask"})),
            )
            .await;
        }
        let sse = f.sse(&run_id).await;
        let text = tokio::time::timeout(Duration::from_secs(30), sse.text())
            .await
            .expect("the stream closes after the terminal event")
            .expect("SSE body");
        assert!(text.contains("run.completed"), "round {i}: {text}");
        let r = f.get(&format!("/v1/runs/{run_id}")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let snap: Value = r.json().await.unwrap();
        if snap["status"] != "completed" {
            stale.push((i, snap["status"].clone()));
        }
    }
    assert!(
        stale.is_empty(),
        "{} of {ROUNDS} snapshots read right after the terminal event were older than the stream: {stale:?}",
        stale.len()
    );
    f.cleanup().await;
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// A run event as a worker writes it, with a payload of realistic size; `publishedAtUs` is
/// the publisher's wall clock (same host as every reader).
fn bench_event(run_id: &str, seq: u64) -> Vec<u8> {
    let ty = if seq.is_multiple_of(2) {
        "node.started"
    } else {
        "node.completed"
    };
    event(
        run_id,
        seq,
        ty,
        json!({"nodeId": format!("n{}", seq / 2), "publishedAtUs": now_us(),
               "output": {"summary": "x".repeat(160)}}),
    )
}

/// Reads every event of a run straight from JetStream (the reader the API uses), decoding
/// each as the API does; the number read.
async fn read_direct(js: &async_nats::jetstream::Context, subject: &str) -> usize {
    let log = RunLog::open(js, "OPENWOP_EVENTS", vec![subject.to_owned()], From::Start)
        .await
        .expect("open the run log");
    let mut n = 0;
    let mut msgs = std::pin::pin!(log.messages());
    while let Some(m) = msgs.next().await {
        let m = m.expect("read");
        let _: Value = serde_json::from_slice(&m.payload).expect("event JSON");
        n += 1;
        if m.pending == 0 {
            break;
        }
    }
    n
}

/// The `publishedAtUs` of every complete SSE event in `buf` (consumed), by sequence id.
fn sse_events(buf: &mut String, out: &mut Vec<(u64, u64)>) {
    while let Some(end) = buf.find("\n\n") {
        let block: String = buf.drain(..end + 2).collect();
        let id = block.lines().find_map(|l| l.strip_prefix("id:"));
        let data = block.lines().find_map(|l| l.strip_prefix("data:"));
        if let (Some(id), Some(data)) = (id, data) {
            let doc: Value = serde_json::from_str(data.trim()).expect("SSE data is JSON");
            out.push((
                id.trim().parse().expect("id is the sequence"),
                doc["payload"]["publishedAtUs"].as_u64().unwrap(),
            ));
        }
    }
}

/// Figures for issue 15: (a) `GET /v1/runs/{id}/events` with `Accept: application/json` of a
/// 1,000-event run, latency p50/p99 over 50 requests and bytes, beside reading the same
/// events straight from JetStream; (b) 100 SSE followers of one live run while 200 events
/// are published at 20/s: publish → delivery latency p50/p99 over all followers, beside one
/// direct JetStream subscriber of the same run. Real operator process, real HTTP, tokens
/// checked by the cluster's TokenReview and RBAC. `make bench` runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "figures: run by `make bench`"]
async fn rest_figures_json_events_and_sse_followers() {
    let Some(f) = RestFixture::start(
        "rest_figures_json_events_and_sse_followers",
        "opi-rest-bench",
        "{}",
        // The chart's lease: the tests' 3 s renew deadline is for failover tests, and a
        // loaded machine serving 100 streams from a debug build can miss it.
        "leaderElection: {leaseDurationSeconds: 15, renewDeadlineSeconds: 10, renewIntervalSeconds: 2}\n",
    )
    .await
    else {
        return;
    };
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };

    // (a) JSON events of a 1,000-event run.
    const EVENTS: u64 = 1000;
    const REQUESTS: usize = 50;
    let big = f.run("big").await;
    let subject = f.subject(&big);
    for seq in 0..EVENTS {
        f.js.publish(subject.clone(), bench_event(&big, seq).into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let json_events = || async {
        let r = f
            .get(&format!("/v1/runs/{big}/events?streamMode=debug"))
            .header("accept", "application/json")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let body = r.bytes().await.unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        (v["events"].as_array().unwrap().len(), body.len())
    };
    let (n, bytes) = json_events().await;
    assert_eq!(n as u64, EVENTS, "the API returns every event");
    let (mut api, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..REQUESTS {
        let t = Instant::now();
        assert_eq!(json_events().await.0 as u64, EVENTS);
        api.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        assert_eq!(read_direct(&f.js, &subject).await as u64, EVENTS);
        direct.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    api.sort_by(f64::total_cmp);
    direct.sort_by(f64::total_cmp);
    println!(
        "FIGURES rest-json-events ({profile}): {EVENTS} events, {bytes} bytes per response; \
         GET /v1/runs/{{id}}/events (Accept: application/json) over {REQUESTS} requests: \
         p50 {:.1} ms, p99 {:.1} ms; direct JetStream read of the same events: p50 {:.1} ms, \
         p99 {:.1} ms; ratio p50 {:.2}x",
        pct(&api, 50.0),
        pct(&api, 99.0),
        pct(&direct, 50.0),
        pct(&direct, 99.0),
        pct(&api, 50.0) / pct(&direct, 50.0)
    );

    // (b) 100 SSE followers of one live run, beside one direct JetStream subscriber.
    const FOLLOWERS: usize = 100;
    const LIVE: u64 = 200;
    const RATE_PER_S: u64 = 20;
    let live = f.run("follow").await;
    let subject = f.subject(&live);
    let mut streams = Vec::new();
    for _ in 0..FOLLOWERS {
        streams.push(f.sse(&live));
    }
    let streams = futures::future::join_all(streams).await;
    let followers: Vec<_> = streams
        .into_iter()
        .map(|mut r| {
            tokio::spawn(async move {
                let (mut buf, mut got) = (String::new(), Vec::new());
                let mut lat = Vec::new();
                while (got.len() as u64) < LIVE {
                    let chunk = r.chunk().await.expect("SSE read").expect("SSE open");
                    let at = now_us();
                    buf.push_str(&String::from_utf8_lossy(&chunk));
                    let before = got.len();
                    sse_events(&mut buf, &mut got);
                    lat.extend(
                        got[before..]
                            .iter()
                            .map(|(_, p)| at.saturating_sub(*p) as f64 / 1000.0),
                    );
                }
                let seqs: Vec<u64> = got.iter().map(|(s, _)| *s).collect();
                assert_eq!(seqs, (0..LIVE).collect::<Vec<_>>(), "in order, none lost");
                lat
            })
        })
        .collect();
    let log = RunLog::open(&f.js, "OPENWOP_EVENTS", vec![subject.clone()], From::Start)
        .await
        .unwrap();
    let direct = tokio::spawn(async move {
        let mut msgs = std::pin::pin!(log.messages());
        let mut lat = Vec::new();
        while (lat.len() as u64) < LIVE {
            let m = msgs.next().await.unwrap().unwrap();
            let at = now_us();
            let doc: Value = serde_json::from_slice(&m.payload).unwrap();
            let p = doc["payload"]["publishedAtUs"].as_u64().unwrap();
            lat.push(at.saturating_sub(p) as f64 / 1000.0);
        }
        lat
    });
    let (op_cpu, test_cpu) = (
        cpu_seconds(f.op.child.id()),
        cpu_seconds(std::process::id()),
    );
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / RATE_PER_S));
    for seq in 0..LIVE {
        tick.tick().await;
        f.js.publish(subject.clone(), bench_event(&live, seq).into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let mut sse = Vec::new();
    for h in followers {
        sse.extend(
            tokio::time::timeout(Duration::from_secs(120), h)
                .await
                .expect("every follower got every event")
                .unwrap(),
        );
    }
    let mut direct = direct.await.unwrap();
    let wall = started.elapsed().as_secs_f64();
    let (op_cpu, test_cpu) = (
        cpu_seconds(f.op.child.id()) - op_cpu,
        cpu_seconds(std::process::id()) - test_cpu,
    );
    sse.sort_by(f64::total_cmp);
    direct.sort_by(f64::total_cmp);
    println!(
        "FIGURES rest-sse-followers ({profile}): {FOLLOWERS} SSE followers x {LIVE} events at \
         {RATE_PER_S}/s ({} deliveries): publish -> delivery p50 {:.1} ms, p99 {:.1} ms, max \
         {:.1} ms; one direct JetStream subscriber: p50 {:.1} ms, p99 {:.1} ms; ratio p50 {:.2}x; \
         over {wall:.1} s the operator used {op_cpu:.1} CPU s, this test process (followers, \
         publisher, subscriber) {test_cpu:.1} CPU s; load average {}",
        sse.len(),
        pct(&sse, 50.0),
        pct(&sse, 99.0),
        sse[sse.len() - 1],
        pct(&direct, 50.0),
        pct(&direct, 99.0),
        pct(&sse, 50.0) / pct(&direct, 50.0),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or("?"),
    );
    f.cleanup().await;
}

/// The spec's run-scoped interrupt resolution over real HTTP (INT, core-standard G4–G6): a
/// gate's wait (events as a worker records them) shows in status with its actions; a body that
/// does not fit is 400 naming the allowed actions or the missing questions, a node with
/// nothing waiting 404 `interrupt_not_found`, an accepted answer 200 `{runId, nodeId, status}`
/// recorded in `spec.answers` with the caller the TokenReview authenticated, a second answer
/// 409 `interrupt_already_resolved`.
#[tokio::test]
async fn rest_interrupt_resolution_speaks_the_spec_and_records_who_answered() {
    let Some(f) = RestFixture::start(
        "rest_interrupt_resolution_speaks_the_spec_and_records_who_answered",
        "opi-rest-gates",
        "{}",
        "",
    )
    .await
    else {
        return;
    };
    let runs: Api<Run> = Api::namespaced(f.c.client.clone(), &f.ns.name);
    let post = |run_id: &str, node: &str, body: Value| {
        f.http
            .post(f.op.url(&format!("/v1/runs/{run_id}/interrupts/{node}")))
            .bearer_auth(&f.token)
            .json(&body)
            .timeout(Duration::from_secs(30))
            .send()
    };
    let status_of = |name: &'static str| {
        let runs = runs.clone();
        async move { runs.get(name).await.ok()?.status }
    };

    // An approval gate waits.
    let approve = f.run("approve").await;
    let subject = f.subject(&approve);
    let ev = |seq, ty, payload| event(&approve, seq, ty, payload);
    publish(&f.js, &subject, ev(0, "run.started", json!({}))).await;
    publish(
        &f.js,
        &subject,
        ev(1, "node.started", json!({"nodeId": "gate"})),
    )
    .await;
    publish(
        &f.js,
        &subject,
        ev(
            2,
            "node.suspended",
            json!({"nodeId": "gate", "interruptId": "int-a", "kind": "approval"}),
        ),
    )
    .await;
    publish(
        &f.js,
        &subject,
        ev(3, "approval.requested", json!({"nodeId": "gate", "interruptId": "int-a",
            "artifactId": "gate", "artifactType": "approval", "title": "Ship?", "actions": ["accept", "reject"]})),
    )
    .await;
    let st = wait_for(30, "waiting-approval with the gate's actions", || async {
        let st = status_of("approve").await?;
        (st.phase == Some(openwop_crds::RunPhase::WaitingApproval)
            && st
                .pending_interrupts
                .first()
                .is_some_and(|p| !p.actions.is_empty()))
        .then_some(st)
    })
    .await;
    assert_eq!(st.current_node.as_deref(), Some("gate"));
    assert_eq!(st.pending_interrupts[0].title.as_deref(), Some("Ship?"));

    // {action: "maybe"} → 400 naming the allowed actions; an unknown node → 404.
    let r = post(
        &approve,
        "gate",
        json!({"resumeValue": {"action": "maybe"}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let (code, body) = spec_error(r).await;
    assert_eq!(code, "validation_error", "{body}");
    assert_eq!(
        body["details"]["allowed"],
        json!(["accept", "reject"]),
        "{body}"
    );
    let r = post(
        &approve,
        "no-such-node",
        json!({"resumeValue": {"action": "accept"}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(spec_error(r).await.0, "interrupt_not_found");

    // Accept → 200 {runId, nodeId, status}; the answer names the caller and the time.
    let r = post(
        &approve,
        "gate",
        json!({"resumeValue": {"action": "accept"}, "comment": "ship it"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        (&body["runId"], &body["nodeId"], &body["status"]),
        (&json!(approve), &json!("gate"), &json!("waiting-approval")),
        "{body}"
    );
    let answers = serde_json::to_value(runs.get("approve").await.unwrap().spec.answers).unwrap();
    assert_eq!(answers[0]["interruptId"], "int-a");
    assert_eq!(answers[0]["action"], "accept");
    assert_eq!(answers[0]["nodeId"], "gate");
    assert_eq!(answers[0]["comment"], "ship it");
    assert_eq!(
        answers[0]["answeredBy"],
        format!("system:serviceaccount:{}:team", f.ns.name)
    );
    assert!(
        answers[0]["answeredAt"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{answers}"
    );
    // Answered already: 409, before and after the worker resolves it.
    let r = post(
        &approve,
        "gate",
        json!({"resumeValue": {"action": "reject"}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(spec_error(r).await.0, "interrupt_already_resolved");
    publish(
        &f.js,
        &subject,
        ev(4, "run.resumed", json!({"interruptId": "int-a"})),
    )
    .await;
    publish(
        &f.js,
        &subject,
        ev(
            5,
            "approval.received",
            json!({"nodeId": "gate", "interruptId": "int-a", "action": "accept",
            "decidedBy": format!("system:serviceaccount:{}:team", f.ns.name)}),
        ),
    )
    .await;
    wait_for(30, "running once approval.received is recorded", || async {
        let st = status_of("approve").await?;
        (st.phase == Some(openwop_crds::RunPhase::Running) && st.pending_interrupts.is_empty())
            .then_some(())
    })
    .await;
    let r = post(
        &approve,
        "gate",
        json!({"resumeValue": {"action": "accept"}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(spec_error(r).await.0, "interrupt_already_resolved");

    // A clarification gate: every question answered, object or list form.
    let ask = f.run("ask").await;
    let subject = f.subject(&ask);
    let ev = |seq, ty, payload| event(&ask, seq, ty, payload);
    publish(&f.js, &subject, ev(0, "run.started", json!({}))).await;
    publish(
        &f.js,
        &subject,
        ev(
            1,
            "node.suspended",
            json!({"nodeId": "ask", "interruptId": "int-q", "kind": "clarification"}),
        ),
    )
    .await;
    publish(
        &f.js,
        &subject,
        ev(
            2,
            "clarification.requested",
            json!({"nodeId": "ask", "interruptId": "int-q",
            "questions": [{"id": "q1", "question": "What is your favorite color?"}]}),
        ),
    )
    .await;
    wait_for(30, "waiting-input with q1", || async {
        let st = status_of("ask").await?;
        (st.phase == Some(openwop_crds::RunPhase::WaitingInput)
            && st
                .pending_interrupts
                .first()
                .is_some_and(|p| p.questions.len() == 1))
        .then_some(())
    })
    .await;
    for bad in [json!({"q1": "blue"}), json!({"answers": {"q2": "blue"}})] {
        let r = post(&ask, "ask", json!({"resumeValue": bad}))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(spec_error(r).await.0, "validation_error");
    }
    let r = post(
        &ask,
        "ask",
        json!({"resumeValue": {"answers": [{"id": "q1", "answer": "blue"}]}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let answers = serde_json::to_value(runs.get("ask").await.unwrap().spec.answers).unwrap();
    assert_eq!(answers[0]["value"], json!({"q1": "blue"}));
    assert_eq!(
        answers[0]["answeredBy"],
        format!("system:serviceaccount:{}:team", f.ns.name)
    );
    f.cleanup().await;
}

#[tokio::test]
async fn rest_pause_and_resume_set_spec_pause_and_refuse_with_the_status_they_found() {
    use openwop_protocol::run::api::IDEMPOTENT_REPLAY_HEADER;
    let Some(f) = RestFixture::start(
        "rest_pause_and_resume_set_spec_pause_and_refuse_with_the_status_they_found",
        "opi-rest-pause",
        "{}",
        "",
    )
    .await
    else {
        return;
    };
    let post = |path: String, body: Value, key: Option<&str>| {
        let mut r = f
            .http
            .post(f.op.url(&path))
            .bearer_auth(&f.token)
            .json(&body)
            .timeout(Duration::from_secs(30));
        if let Some(k) = key {
            r = r.header("idempotency-key", k);
        }
        r.send()
    };
    let runs: Api<Run> = Api::namespaced(f.c.client.clone(), &f.ns.name);
    let id = f.run("p1").await;
    // Resuming a run that is not paused: 409 with the status it has.
    let r = post(format!("/v1/runs/{id}:resume"), json!({}), None)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let (code, err) = spec_error(r).await;
    assert_eq!(code, "run_state_conflict", "{err}");
    assert!(err["details"]["runStatus"].is_string(), "{err}");
    // A body that is not the spec's: 400 naming the field.
    let r = post(
        format!("/v1/runs/{id}:pause"),
        json!({"drainPolicy": "later"}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = post(format!("/v1/runs/{id}:pause"), json!({"why": "x"}), None)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(spec_error(r).await.1["details"]["field"], "why");
    // Pause: 202, and spec.pause is what kubectl would show.
    let r = post(
        format!("/v1/runs/{id}:pause"),
        json!({"reason": "maintenance", "drainPolicy": "immediate"}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        (&body["runId"], &body["status"]),
        (&json!(id), &json!("paused"))
    );
    let paused_at = body["pausedAt"].as_str().expect("pausedAt").to_owned();
    let spec = runs
        .get("p1")
        .await
        .unwrap()
        .spec
        .pause
        .expect("spec.pause");
    assert_eq!(spec.reason.as_deref(), Some("maintenance"));
    assert_eq!(spec.drain_policy, openwop_crds::DrainPolicy::Immediate);
    // Again without the key: 409, paused since then.
    let r = post(format!("/v1/runs/{id}:pause"), json!({}), None)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let (code, err) = spec_error(r).await;
    assert_eq!(code, "run_state_conflict", "{err}");
    assert_eq!(err["details"]["runStatus"], "paused", "{err}");
    assert_eq!(err["details"]["pausedAt"], json!(paused_at), "{err}");
    // Resume: 202 and spec.pause gone.
    let r = post(format!("/v1/runs/{id}:resume"), json!({}), None)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "running");
    assert!(body["resumedAt"].is_string(), "{body}");
    assert!(runs.get("p1").await.unwrap().spec.pause.is_none());
    // The same Idempotency-Key answers the first 202 again, marked as a replay.
    let id2 = f.run("p2").await;
    let first = post(format!("/v1/runs/{id2}:pause"), json!({}), Some("k-1"))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let first: Value = first.json().await.unwrap();
    let again = post(format!("/v1/runs/{id2}:pause"), json!({}), Some("k-1"))
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::ACCEPTED);
    assert_eq!(again.headers()[IDEMPOTENT_REPLAY_HEADER], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["pausedAt"], first["pausedAt"]);
    let other = post(format!("/v1/runs/{id2}:pause"), json!({}), Some("k-2"))
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::CONFLICT);
    // No such run, no such operation.
    let r = post("/v1/runs/no-such-run:pause".into(), json!({}), None)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = post(format!("/v1/runs/{id2}"), json!({}), None)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    f.cleanup().await;
}
