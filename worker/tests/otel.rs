//! OTLP span export against a real local receiver (axum, `POST /v1/traces`, protobuf):
//! span names, parent/child structure, `openwop.*` attributes, redaction, and the flush on
//! the suspended exit path.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

const CANARY: &str = "canary-otel-51c0ffee";

struct Receiver {
    url: String,
    bodies: Arc<Mutex<Vec<Bytes>>>,
    _rt: tokio::runtime::Runtime,
}

fn receiver() -> Receiver {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let bodies: Arc<Mutex<Vec<Bytes>>> = Arc::default();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let b = bodies.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: Bytes| {
            let b = b.clone();
            async move {
                assert_eq!(headers["content-type"], "application/x-protobuf");
                b.lock().unwrap().push(body);
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
    Receiver {
        url,
        bodies,
        _rt: rt,
    }
}

fn attrs(s: &Span) -> HashMap<String, Any> {
    s.attributes
        .iter()
        .filter_map(|kv| Some((kv.key.clone(), kv.value.clone()?.value?)))
        .collect()
}

fn str_attr(s: &Span, k: &str) -> String {
    match attrs(s).get(k) {
        Some(Any::StringValue(v)) => v.clone(),
        other => panic!("span {} attribute {k}: {other:?}", s.name),
    }
}

fn int_attr(s: &Span, k: &str) -> i64 {
    match attrs(s).get(k) {
        Some(Any::IntValue(v)) => *v,
        other => panic!("span {} attribute {k}: {other:?}", s.name),
    }
}

#[test]
fn spans_for_run_node_provider_call_and_envelope_are_exported_redacted() {
    let nats = NatsServer::start();
    let otlp = receiver();
    // a → p (truncation, then a valid note) → m (low confidence: suspends); a → r (refusal).
    let wf = json!({"id": "conformance-otel", "nodes": [
        {"id": "a", "typeId": "core.identity"},
        {"id": "p", "typeId": "core.ai.callPrompt", "config": {"provider": "mock", "model": format!("mock-{CANARY}"), "prompt": "note", "envelopeType": "vendor.acme.note", "maxTokens": 64}},
        {"id": "r", "typeId": "core.ai.callPrompt", "config": {"provider": "mock", "prompt": "x", "envelopeType": "vendor.acme.note"}},
        {"id": "m", "typeId": "core.conformance.mock-agent", "config": {"mockDecision": {"decision": "ship", "confidence": 0.2}}}],
     "edges": [
        {"id": "e1", "sourceNodeId": "a", "targetNodeId": "p"},
        {"id": "e2", "sourceNodeId": "p", "targetNodeId": "m"},
        {"id": "e3", "sourceNodeId": "a", "targetNodeId": "r"}]});
    let programs = json!({
        "p": {"responses": [
            {"stopReason": "max_tokens", "content": "{\"type\": \"vendor.ac", "outputTokens": 64, "inputTokens": 10},
            {"stopReason": "stop", "content": {"type": "vendor.acme.note", "payload": {"text": format!("has {CANARY}")}}, "outputTokens": 9, "inputTokens": 10}]},
        "r": {"responses": [{"stopReason": "refusal", "refusalText": format!("no {CANARY}")}]}
    });
    let files = RunFiles::new("otel", "run-otel-1", wf, json!({"doc": CANARY}), programs);
    std::fs::write(files.path("secrets/canary"), CANARY).unwrap();
    let out = files
        .command(&nats.url())
        .env("OPENWOP_OTLP_ENDPOINT", &otlp.url)
        .output()
        .unwrap();
    // Suspended: the spans must still have been flushed before the exit.
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bodies = otlp.bodies.lock().unwrap().clone();
    assert!(!bodies.is_empty(), "no OTLP export received");
    let raw: Vec<u8> = bodies.iter().flat_map(|b| b.to_vec()).collect();
    assert!(
        !raw.windows(CANARY.len()).any(|w| w == CANARY.as_bytes()),
        "canary leaked into OTLP"
    );
    let mut spans: Vec<Span> = vec![];
    for b in &bodies {
        let req = ExportTraceServiceRequest::decode(b.as_ref()).unwrap();
        for rs in req.resource_spans {
            let service = rs
                .resource
                .unwrap()
                .attributes
                .into_iter()
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value?.value);
            assert_eq!(service, Some(Any::StringValue("openwop-worker".into())));
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
    }
    let named = |n: &str| -> Vec<&Span> { spans.iter().filter(|s| s.name == n).collect() };
    let runs = named("openwop.run");
    assert_eq!(runs.len(), 1);
    let run = runs[0];
    assert!(run.parent_span_id.is_empty());
    assert_eq!(str_attr(run, "openwop.run_id"), "run-otel-1");
    assert_eq!(str_attr(run, "openwop.workflow_id"), "conformance-otel");
    assert_eq!(str_attr(run, "openwop.run_outcome"), "waiting-approval");
    assert!(spans.iter().all(|s| s.trace_id == run.trace_id));

    let nodes = named("openwop.node");
    let node = |id: &str| -> &Span {
        nodes
            .iter()
            .find(|s| str_attr(s, "openwop.node_id") == id)
            .unwrap_or_else(|| panic!("no node span for {id}"))
    };
    assert_eq!(nodes.len(), 4);
    for n in &nodes {
        assert_eq!(n.parent_span_id, run.span_id, "node under run");
    }
    assert_eq!(
        str_attr(node("p"), "openwop.node_type"),
        "core.ai.callPrompt"
    );
    assert_eq!(str_attr(node("p"), "openwop.node_outcome"), "completed");
    assert_eq!(str_attr(node("m"), "openwop.node_outcome"), "suspended");
    assert_eq!(str_attr(node("r"), "openwop.node_outcome"), "failed");
    assert_eq!(
        str_attr(node("r"), "openwop.error_code"),
        "envelope_refusal"
    );
    // status code 2 = ERROR
    assert_eq!(node("r").status.as_ref().map(|s| s.code), Some(2));

    let calls: Vec<&Span> = named("openwop.provider.call")
        .into_iter()
        .filter(|s| s.parent_span_id == node("p").span_id)
        .collect();
    assert_eq!(calls.len(), 2);
    let first = calls
        .iter()
        .find(|s| int_attr(s, "openwop.call_attempt") == 1)
        .unwrap();
    assert_eq!(str_attr(first, "openwop.provider"), "mock");
    assert_eq!(str_attr(first, "openwop.model"), "mock-[REDACTED:canary]");
    assert_eq!(str_attr(first, "openwop.stop_reason"), "max_tokens");
    assert_eq!(int_attr(first, "openwop.output_tokens"), 64);
    assert_eq!(int_attr(first, "openwop.input_tokens"), 10);
    assert_eq!(int_attr(first, "openwop.max_tokens"), 64);
    let second = calls
        .iter()
        .find(|s| int_attr(s, "openwop.call_attempt") == 2)
        .unwrap();
    assert_eq!(
        int_attr(second, "openwop.max_tokens"),
        128,
        "budget doubled"
    );

    let envs = named("openwop.envelope");
    let env_p = envs
        .iter()
        .find(|s| s.parent_span_id == node("p").span_id)
        .expect("envelope span under p");
    assert_eq!(str_attr(env_p, "openwop.envelope_type"), "vendor.acme.note");
    assert_eq!(str_attr(env_p, "openwop.envelope_outcome"), "accepted");
    assert_eq!(int_attr(env_p, "openwop.envelope_retry_attempt"), 2);
    assert_eq!(
        attrs(env_p).get("envelope_schema_version_drift"),
        Some(&Any::BoolValue(false))
    );
    assert!(str_attr(env_p, "openwop.correlation_id").starts_with("run-otel-1:p:0"));
    let env_r = envs
        .iter()
        .find(|s| s.parent_span_id == node("r").span_id)
        .expect("envelope span under r");
    assert_eq!(str_attr(env_r, "openwop.envelope_outcome"), "failed");
    assert_eq!(str_attr(env_r, "openwop.error_code"), "envelope_refusal");
}

/// Span names per resource `openwop.run_id` in everything a receiver got.
fn spans_by_run(r: &Receiver) -> HashMap<String, Vec<String>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for b in r.bodies.lock().unwrap().iter() {
        for rs in ExportTraceServiceRequest::decode(b.as_ref())
            .unwrap()
            .resource_spans
        {
            let resource = rs.resource.unwrap();
            let attr = |k: &str| {
                resource
                    .attributes
                    .iter()
                    .find(|kv| kv.key == k)
                    .and_then(|kv| kv.value.clone()?.value)
            };
            assert_eq!(
                attr("openwop.namespace"),
                Some(Any::StringValue("team-otel".into()))
            );
            let run = match attr("openwop.run_id") {
                Some(Any::StringValue(r)) => r,
                other => panic!("resource without openwop.run_id: {other:?}"),
            };
            let names = out.entry(run).or_default();
            names.extend(
                rs.scope_spans
                    .into_iter()
                    .flat_map(|ss| ss.spans)
                    .map(|s| s.name),
            );
        }
    }
    for names in out.values_mut() {
        names.sort();
    }
    out
}

#[test]
fn the_span_store_gets_the_same_spans_as_the_collector_under_the_run() {
    let nats = NatsServer::start();
    let collector = receiver();
    let store = receiver();
    let wf = json!({"id": "w", "nodes": [
        {"id": "a", "typeId": "core.identity"}, {"id": "b", "typeId": "core.identity"}],
        "edges": [{"id": "e", "sourceNodeId": "a", "targetNodeId": "b"}]});
    let files = RunFiles::new("otel-two", "run-otel-two", wf, json!({}), json!({}));
    let out = files
        .command(&nats.url())
        .env("OPENWOP_OTLP_ENDPOINT", &collector.url)
        .env(
            "OPENWOP_TEST_OTEL_SCRAPE_ENDPOINT",
            format!("{}/v1/traces", store.url),
        )
        .env("OPENWOP_RUN_ID", "run-otel-two")
        .env("OPENWOP_RUN_NAMESPACE", "team-otel")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = spans_by_run(&store);
    assert_eq!(
        got.get("run-otel-two").map(Vec::as_slice),
        Some(
            ["openwop.node", "openwop.node", "openwop.run"]
                .map(String::from)
                .as_slice()
        ),
        "{got:?}"
    );
    assert_eq!(
        spans_by_run(&collector),
        got,
        "both exporters got the same spans"
    );
}

#[test]
fn the_span_store_alone_turns_export_on() {
    let nats = NatsServer::start();
    let store = receiver();
    let wf = json!({"id": "w", "nodes": [{"id": "a", "typeId": "core.identity"}]});
    let files = RunFiles::new("otel-store", "run-otel-store", wf, json!({}), json!({}));
    let out = files
        .command(&nats.url())
        .env_remove("OPENWOP_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env(
            "OPENWOP_TEST_OTEL_SCRAPE_ENDPOINT",
            format!("{}/v1/traces", store.url),
        )
        .env("OPENWOP_RUN_ID", "run-otel-store")
        .env("OPENWOP_RUN_NAMESPACE", "team-otel")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        spans_by_run(&store).get("run-otel-store").map(Vec::len),
        Some(2),
        "openwop.run + one openwop.node"
    );
}

#[test]
fn without_an_endpoint_nothing_is_exported() {
    let nats = NatsServer::start();
    let otlp = receiver();
    let wf = json!({"id": "w", "nodes": [{"id": "a", "typeId": "core.identity"}]});
    let files = RunFiles::new("otel-off", "run-otel-off", wf, json!({}), json!({}));
    let out = files
        .command(&nats.url())
        .env_remove("OPENWOP_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OPENWOP_TEST_OTEL_SCRAPE_ENDPOINT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(otlp.bodies.lock().unwrap().is_empty());
}
