//! `POST /v1/host/sample/test/emit-envelope-reliability` (RFC 0032 §B): appends one
//! envelope-reliability event, checked by [`openwop_protocol::seams::ReliabilityEmitRequest`]
//! against the typed payloads and schemas the worker emits with, to a synthetic run's log
//! (read back with `test/runs/{runId}/events`). Answers `{event}`.

use axum::extract::State;
use openwop_protocol::seams::ReliabilityEmitRequest;
use serde_json::{Value, json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::seam::{SeamCaller, SeamJson, append_synthetic, now};
use crate::rest::{ApiError, ErrorBody, Json, RestState};

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new().routes(routes!(emit))
}

/// Emit one envelope-reliability event (conformance-only test seam).
#[utoipa::path(
    post, path = "/v1/host/sample/test/emit-envelope-reliability",
    request_body(content = Object, description = "{runId, type: envelope.retry.attempted|envelope.retry.exhausted|envelope.refusal|envelope.truncated|envelope.nlToFormat.engaged|envelope.recovery.applied, payload, nodeId?, correlationId?}"),
    responses(
        (status = 200, description = "{event: RunEventDoc}", body = Object),
        (status = 400, description = "invalid_argument | envelope_reliability_credential_leak | envelope_recovery_content_leak: {error: {code, message}}"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, description = "runId names a real Run, or the log moved: {error: {code, message}}")
    ),
    security(("bearer" = []))
)]
async fn emit(
    State(s): State<RestState>,
    caller: SeamCaller,
    SeamJson(req): SeamJson<ReliabilityEmitRequest>,
) -> Result<Json<Value>, ApiError> {
    // Checked before anything is written (append_synthetic builds after reading the tail).
    req.event(0, "1970-01-01T00:00:00Z")?;
    let ts = now();
    let event = append_synthetic(&s, &caller.namespace, &req.run_id, |first| {
        let ev = req.event(first, &ts)?;
        Ok((ev.clone(), vec![ev]))
    })
    .await?;
    Ok(Json(json!({"event": event})))
}
