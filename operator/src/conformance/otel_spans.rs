//! `GET /v1/host/sample/test/otel/spans?runId=<id>` (`host-sample-test-seams.md` §2,
//! RFC 0034): the OpenTelemetry spans a run's worker produced, as the spec's
//! `{spans: [{name, attributes, events}]}`.
//!
//! Workers export spans over OTLP/HTTP to the collector the cluster configures; the operator
//! cannot read those back. So with the seams on, every worker pod also gets
//! `OPENWOP_TEST_OTEL_SCRAPE_ENDPOINT` ([`crate::config::seams::span_ingest_traces_url`]) and exports the same
//! spans, protobuf-encoded exactly as a collector receives them, to this operator's span
//! store: `POST /v1/host/sample/test/otel/ingest/v1/traces`. Each batch is filed under the
//! run its resource names (`openwop.run_id` + `openwop.namespace`, which must be a Run this
//! operator knows); the store is the JetStream key-value bucket [`BUCKET`], so every replica
//! answers the seam whichever replica a worker reached. Per run at most [`MAX_STORED_BYTES`]
//! of spans are kept; later ones are counted in `droppedSpans`.
//!
//! For a synthetic run of the seams (`envelope/accept` with `projectTo`), the seams record
//! the `openwop.envelope` span of each projected envelope themselves, with the worker's
//! attributes ([`telemetry::envelope_span_attributes`]).
//!
//! The ingest path is not authenticated (worker pods hold no Kubernetes token): it only
//! accepts spans for an existing Run, named by its uid, and exists only with the seams on —
//! one more reason never to enable them in production.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kube::ResourceExt;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{Span, status::StatusCode as OtelStatus};
use openwop_protocol::redact::Redactor;
use openwop_protocol::run::telemetry::{self, AttrValue};
use prost::Message;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::seam::{SeamCaller, is_synthetic, store};
use crate::rest::{ApiError, ErrorBody, Json, RestState, find_run, visible_run};

/// The key-value bucket of stored spans, keyed `<namespace>.<runId>` (`test/reset` clears
/// the caller's namespace's).
pub const BUCKET: &str = "openwop-seam-otel-spans";
/// Spans kept per run, in bytes of their JSON (a key-value entry must stay under NATS's
/// 1 MiB message limit).
pub const MAX_STORED_BYTES: usize = 768 * 1024;
/// Largest OTLP request the store takes (the worker's batches are up to 512 spans).
pub const MAX_INGEST_BYTES: usize = 4 * 1024 * 1024;

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new()
        .routes(routes!(ingest))
        .routes(routes!(spans))
}

/// What the bucket holds per run.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    spans: Vec<Value>,
    #[serde(default)]
    dropped_spans: u64,
}

fn key(namespace: &str, run_id: &str) -> String {
    format!("{namespace}.{run_id}")
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    tracing::warn!(error = %e, bucket = BUCKET, "test seams: the span store");
    ApiError::unavailable(
        "the span store is unavailable; retry shortly",
        std::time::Duration::from_secs(2),
    )
}

/// An OTLP attribute value as JSON (bytes as hex).
fn any_json(v: &AnyValue) -> Value {
    match &v.value {
        None => Value::Null,
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        Some(any_value::Value::BytesValue(b)) => json!(hex::encode(b)),
        Some(any_value::Value::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(any_json).collect())
        }
        Some(any_value::Value::KvlistValue(l)) => Value::Object(attributes(&l.values)),
        Some(_) => Value::Null,
    }
}

fn attributes(kvs: &[KeyValue]) -> Map<String, Value> {
    kvs.iter()
        .map(|kv| {
            let v = kv.value.as_ref().map_or(Value::Null, any_json);
            (kv.key.clone(), v)
        })
        .collect()
}

/// One span in the seam's shape; the resource's `openwop.*` attributes (which run) are
/// added where the span has none of its own.
fn span_json(span: &Span, resource: &Map<String, Value>) -> Value {
    let mut attrs = attributes(&span.attributes);
    for (k, v) in resource.iter().filter(|(k, _)| k.starts_with("openwop.")) {
        attrs.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let status = span.status.as_ref().map(|s| {
        let code = match OtelStatus::try_from(s.code) {
            Ok(OtelStatus::Ok) => "ok",
            Ok(OtelStatus::Error) => "error",
            _ => "unset",
        };
        json!({"code": code, "message": s.message})
    });
    let mut out = json!({
        "name": span.name,
        "traceId": hex::encode(&span.trace_id),
        "spanId": hex::encode(&span.span_id),
        "startTimeUnixNano": span.start_time_unix_nano.to_string(),
        "endTimeUnixNano": span.end_time_unix_nano.to_string(),
        "attributes": attrs,
        "events": span.events.iter().map(|e| json!({
            "name": e.name,
            "timeUnixNano": e.time_unix_nano.to_string(),
            "attributes": attributes(&e.attributes),
        })).collect::<Vec<_>>(),
    });
    if !span.parent_span_id.is_empty() {
        out["parentSpanId"] = json!(hex::encode(&span.parent_span_id));
    }
    if let Some(s) = status {
        out["status"] = s;
    }
    out
}

/// Adds `spans` to the run's entry (compare-and-set, so concurrent batches from several
/// replicas never overwrite each other), keeping at most [`MAX_STORED_BYTES`].
async fn append(
    kv: &async_nats::jetstream::kv::Store,
    key: &str,
    spans: &[Value],
) -> Result<(), ApiError> {
    for _ in 0..16 {
        let entry = kv.entry(key).await.map_err(unavailable)?;
        let live = entry
            .as_ref()
            .filter(|e| e.operation == async_nats::jetstream::kv::Operation::Put);
        let mut stored: Stored = live
            .and_then(|e| serde_json::from_slice(&e.value).ok())
            .unwrap_or_default();
        let mut size = serde_json::to_vec(&stored).map_or(0, |b| b.len());
        for s in spans {
            let n = serde_json::to_vec(s).map_or(0, |b| b.len()) + 1;
            if size + n > MAX_STORED_BYTES {
                stored.dropped_spans += 1;
            } else {
                size += n;
                stored.spans.push(s.clone());
            }
        }
        let bytes = bytes::Bytes::from(serde_json::to_vec(&stored).map_err(unavailable)?);
        let done = match entry {
            None => kv.create(key, bytes).await.is_ok(),
            Some(e) => kv.update(key, bytes, e.revision).await.is_ok(),
        };
        if done {
            return Ok(());
        }
    }
    Err(unavailable(format!(
        "{key}: too many concurrent writers, gave up"
    )))
}

/// OTLP/HTTP traces export from worker pods (protobuf), into the span store.
#[utoipa::path(
    post, path = "/v1/host/sample/test/otel/ingest/v1/traces",
    request_body(content = Vec<u8>, content_type = "application/x-protobuf",
                 description = "OTLP ExportTraceServiceRequest"),
    responses((status = 200, description = "OTLP ExportTraceServiceResponse (protobuf)"),
              (status = 400, body = ErrorBody), (status = 413, body = ErrorBody),
              (status = 415, body = ErrorBody))
)]
async fn ingest(
    State(s): State<RestState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !content_type.starts_with("application/x-protobuf") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "the span store takes OTLP/HTTP protobuf (Content-Type: application/x-protobuf), not {content_type:?}"
            ),
        ));
    }
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("an OTLP export to the span store is limited to {MAX_INGEST_BYTES} bytes"),
        )
    };
    // A declared length over the bound is refused before any of the body is read.
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_INGEST_BYTES) {
        return Err(too_large());
    }
    let bytes = axum::body::to_bytes(body, MAX_INGEST_BYTES)
        .await
        .map_err(|_| too_large())?;
    let request = ExportTraceServiceRequest::decode(bytes.as_ref()).map_err(|e| {
        ApiError::validation(format!(
            "the body is not an OTLP ExportTraceServiceRequest: {e}"
        ))
    })?;
    // Spans grouped by the run their resource names.
    let mut by_run: BTreeMap<(String, String), Vec<Value>> = BTreeMap::new();
    let mut rejected: Vec<String> = Vec::new();
    let mut rejected_spans = 0i64;
    for rs in &request.resource_spans {
        let resource = rs
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let named = |k: &str| resource.get(k).and_then(Value::as_str).map(str::to_owned);
        let spans: Vec<&Span> = rs.scope_spans.iter().flat_map(|ss| &ss.spans).collect();
        let (Some(run_id), Some(namespace)) =
            (named(telemetry::RUN_ID), named(telemetry::NAMESPACE))
        else {
            rejected_spans += spans.len() as i64;
            rejected.push(format!(
                "a resource without {} and {}",
                telemetry::RUN_ID,
                telemetry::NAMESPACE
            ));
            continue;
        };
        let known = find_run(&s, &run_id)
            .await
            .is_some_and(|r| r.namespace().as_deref() == Some(namespace.as_str()));
        if !known {
            rejected_spans += spans.len() as i64;
            rejected.push(format!(
                "no Run with uid {run_id:?} in namespace {namespace:?}"
            ));
            continue;
        }
        by_run
            .entry((namespace, run_id))
            .or_default()
            .extend(spans.into_iter().map(|sp| span_json(sp, &resource)));
    }
    if !by_run.is_empty() {
        let kv = store(&s, BUCKET).await?;
        for ((namespace, run_id), spans) in &by_run {
            append(&kv, &key(namespace, run_id), spans).await?;
        }
    }
    let partial_success = (rejected_spans > 0).then(|| {
        tracing::info!(rejected_spans, reasons = ?rejected, "test seams: spans refused by the span store");
        ExportTracePartialSuccess {
            rejected_spans,
            error_message: format!("spans refused: {}", rejected.join("; ")),
        }
    });
    let response = ExportTraceServiceResponse { partial_success };
    Ok((
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        response.encode_to_vec(),
    )
        .into_response())
}

/// A span the seams record themselves for a synthetic run (the `openwop.envelope` span of
/// an envelope `envelope/accept` projected), in the stored shape; string attributes and the
/// status message pass through `redactor`.
pub fn seam_span(
    name: &str,
    attrs: &[(&'static str, AttrValue)],
    error: Option<(&str, &str)>,
    redactor: &Redactor,
) -> Value {
    let red = |v: &str| redactor.redact_str(v).0.into_owned();
    let attributes: Map<String, Value> = attrs
        .iter()
        .map(|(k, v)| {
            let v = match v {
                AttrValue::Str(s) => json!(red(s)),
                AttrValue::Int(i) => json!(i),
                AttrValue::Bool(b) => json!(b),
            };
            ((*k).to_owned(), v)
        })
        .collect();
    let mut span = json!({"name": name, "attributes": attributes, "events": []});
    if let Some((_, message)) = error {
        span["status"] = json!({"code": "error", "message": red(message)});
    }
    span
}

/// Adds spans the seams recorded to a (synthetic) run's entry.
pub async fn record(
    s: &RestState,
    namespace: &str,
    run_id: &str,
    spans: &[Value],
) -> Result<(), ApiError> {
    let kv = store(s, BUCKET).await?;
    append(&kv, &key(namespace, run_id), spans).await
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
pub struct SpansQuery {
    /// The run (its `runId`).
    pub run_id: Option<String>,
}

/// The stored spans of a run, or none yet.
pub async fn stored_spans(
    s: &RestState,
    namespace: &str,
    run_id: &str,
) -> Result<(Vec<Value>, u64), ApiError> {
    let kv = store(s, BUCKET).await?;
    let raw = kv.get(key(namespace, run_id)).await.map_err(unavailable)?;
    let stored: Stored = raw
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    Ok((stored.spans, stored.dropped_spans))
}

/// The OpenTelemetry spans a run's worker produced (conformance-only test seam).
#[utoipa::path(
    get, path = "/v1/host/sample/test/otel/spans", params(SpansQuery),
    responses((status = 200, description = "{spans: [{name, attributes, events, ...}], droppedSpans} (none for a run the caller cannot see)", body = Object),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody)),
    security(("bearer" = []))
)]
async fn spans(
    State(s): State<RestState>,
    caller: SeamCaller,
    Query(q): Query<SpansQuery>,
) -> Result<Json<Value>, ApiError> {
    let Some(run_id) = q.run_id.filter(|r| !r.is_empty()) else {
        return Err(ApiError::validation(
            "the runId query parameter is required: the run whose spans to read (`runId` of POST /v1/runs)",
        )
        .with_details(json!({"field": "runId"})));
    };
    // A synthetic run of the caller's tenant (the seams' own spans), else a Run the caller
    // may see. Any other id has no spans: `{spans: []}`, as for a run that produced none
    // yet (the suite probes the seam that way), revealing nothing of other tenants' runs.
    let namespace = if is_synthetic(&s, &caller.namespace, &run_id).await? {
        Some(caller.namespace.clone())
    } else {
        match visible_run(&s, &caller.caller, &run_id).await {
            Ok(run) => run.namespace(),
            Err(e) if e.status == StatusCode::NOT_FOUND => None,
            Err(e) => return Err(e),
        }
    };
    let (spans, dropped) = match namespace {
        Some(ns) => stored_spans(&s, &ns, &run_id).await?,
        None => (Vec::new(), 0),
    };
    Ok(Json(json!({"spans": spans, "droppedSpans": dropped})))
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::trace::v1::{Status, span::Event};

    fn kv(k: &str, v: any_value::Value) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..Default::default()
        }
    }

    #[test]
    fn a_span_keeps_its_attributes_and_events_and_names_its_run() {
        let span = Span {
            name: "openwop.node".into(),
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            parent_span_id: vec![3; 8],
            attributes: vec![
                kv("openwop.node_id", any_value::Value::StringValue("p".into())),
                kv("openwop.attempt", any_value::Value::IntValue(2)),
                kv(
                    "openwop.run_id",
                    any_value::Value::StringValue("own".into()),
                ),
            ],
            events: vec![Event {
                name: "retry".into(),
                attributes: vec![kv("ok", any_value::Value::BoolValue(false))],
                ..Default::default()
            }],
            status: Some(Status {
                code: OtelStatus::Error as i32,
                message: "boom".into(),
            }),
            ..Default::default()
        };
        let resource: Map<String, Value> = serde_json::from_value(json!({
            "openwop.run_id": "r-1", "openwop.namespace": "team-a", "service.name": "openwop-worker"
        }))
        .unwrap();
        let v = span_json(&span, &resource);
        assert_eq!(v["name"], "openwop.node");
        assert_eq!(v["attributes"]["openwop.node_id"], "p");
        assert_eq!(v["attributes"]["openwop.attempt"], 2);
        // The span's own value wins; the resource fills in what it lacks, openwop.* only.
        assert_eq!(v["attributes"]["openwop.run_id"], "own");
        assert_eq!(v["attributes"]["openwop.namespace"], "team-a");
        assert!(v["attributes"].get("service.name").is_none());
        assert_eq!(v["events"][0]["name"], "retry");
        assert_eq!(v["events"][0]["attributes"]["ok"], false);
        assert_eq!(v["status"], json!({"code": "error", "message": "boom"}));
        assert_eq!(v["parentSpanId"], "0303030303030303");
        assert_eq!(v["traceId"], "01".repeat(16));
    }
}
