//! `POST /v1/host/sample/envelope/accept` (RFC 0021 §A): one envelope through the accept
//! pipeline — the same request type and the same evaluation as `kubectl-openwop envelope
//! accept` ([`openwop_protocol::pipeline::request`]). `persistedDedup` decisions live in a
//! JetStream key-value bucket shared by every replica and kept across restarts;
//! `projectTo` appends the projected events to the named (synthetic) run's log, read back
//! with `test/runs/{runId}/events`.

use axum::extract::State;
use openwop_protocol::pipeline::request::{self, AcceptRequest};
use openwop_protocol::pipeline::{DedupEntry, InputLimits};
use openwop_protocol::seams::{AI_ENVELOPE_CAPABILITY, capability_required};
use serde_json::Value;
use sha2::{Digest, Sha256};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::otel_spans;
use super::seam::{DEDUP_BUCKET, SeamCaller, SeamJson, append_synthetic, invalid, now, store};
use crate::rest::{ApiError, ErrorBody, Json, RestState};
use openwop_protocol::run::telemetry::{ENVELOPE_SPAN, EnvelopeSpan, envelope_span_attributes};

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new().routes(routes!(accept))
}

/// Key of a persisted decision: `<namespace>.<sha256(runId)>.<sha256(correlationId)>`
/// (hashes keep any id within the key alphabet; the namespace prefix scopes `test/reset`).
pub fn dedup_key(namespace: &str, run_id: &str, correlation_id: &str) -> String {
    let h = |s: &str| hex::encode(Sha256::digest(s.as_bytes()));
    format!("{namespace}.{}.{}", h(run_id), h(correlation_id))
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    tracing::warn!(error = %e, "envelope-accept seam: dedup store");
    ApiError::unavailable(
        "the seam's dedup store is unavailable; retry shortly",
        std::time::Duration::from_secs(2),
    )
}

/// Evaluate one envelope (conformance-only test seam).
#[utoipa::path(
    post, path = "/v1/host/sample/envelope/accept",
    request_body(content = Object, description = "{envelope, hostSupportedEnvelopes?, nodeAllowedKinds?, runTrustBoundary?, counters?, schemaVersionFloor?, envelopeStrictness?, priorCorrelations?: [{correlationId, outcome, envelopeType}], byokCanaries?, projectTo?: {runId, nodeId?, refusalMode?}, persistedDedup?: {runId}, approvalGateContext?}"),
    responses(
        (status = 200, description = "the EnvelopeOutcome (accepted | gated | invalid | breached)", body = Object),
        (status = 400, description = "unusable request: {error: {code, message}}"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
async fn accept(
    State(s): State<RestState>,
    caller: SeamCaller,
    SeamJson(req): SeamJson<AcceptRequest>,
) -> Result<Json<Value>, ApiError> {
    req.validate().map_err(|e| invalid(e.to_string()))?;
    if s.discovery.overlay().get(AI_ENVELOPE_CAPABILITY) == Some(&false) {
        return Ok(Json(
            serde_json::to_value(capability_required()).unwrap_or_default(),
        ));
    }
    let ns = caller.namespace.clone();
    // persistedDedup: the decision for this correlationId, if one was stored.
    let mut kv_key = None;
    let persisted: Option<DedupEntry> = match (&req.persisted_dedup, req.dedup_key()) {
        (Some(p), Some(corr)) => {
            let kv = store(&s, DEDUP_BUCKET).await?;
            let key = dedup_key(&ns, &p.run_id, &corr);
            let found = kv.get(key.clone()).await.map_err(unavailable)?;
            kv_key = Some((kv, key));
            match found {
                Some(bytes) => Some(serde_json::from_slice(&bytes).map_err(unavailable)?),
                None => None,
            }
        }
        _ => None,
    };
    // The CLI's defaults: the request body is already bounded by the API's body limit.
    let limits = InputLimits::default();
    let ts = now();
    let evaluate = |first: u64| {
        request::evaluate(&req, persisted.clone(), limits, "seam", first, &ts)
            .map_err(|e| invalid(e.to_string()))
    };
    let evaluated = match &req.project_to {
        Some(p) => {
            append_synthetic(&s, &ns, &p.run_id, |first| {
                let ev = evaluate(first)?;
                let events = ev.processed.events.clone();
                Ok((ev, events))
            })
            .await?
        }
        None => evaluate(0)?,
    };
    if let Some(p) = &req.project_to {
        // The span the worker would record for this envelope, for `test/otel/spans`.
        let envelope = &req.envelope;
        let text = |k: &str| envelope.get(k).and_then(Value::as_str);
        let outcome = &evaluated.processed.outcome;
        let about = EnvelopeSpan {
            run_id: &p.run_id,
            node_id: p.node_id.as_deref().unwrap_or_default(),
            correlation_id: text("correlationId").unwrap_or_default(),
            envelope_type: text("type"),
            retry_attempt: 1,
        };
        let error = outcome
            .code()
            .map(|c| (c.as_str(), outcome.message().unwrap_or_default()));
        let span = otel_spans::seam_span(
            ENVELOPE_SPAN,
            &envelope_span_attributes(&about, outcome),
            error,
            &req.redactor(),
        );
        otel_spans::record(&s, &ns, &p.run_id, &[span]).await?;
    }
    if let (Some((kv, key)), Some(record)) = (kv_key, &evaluated.record) {
        let bytes = serde_json::to_vec(record).unwrap_or_default();
        kv.put(key, bytes.into()).await.map_err(unavailable)?;
    }
    Ok(Json(
        serde_json::to_value(&evaluated.processed.outcome).unwrap_or_default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedup_keys_are_scoped_and_in_the_key_alphabet() {
        let k = dedup_key("team-a", "run:1 x", "r:n:0:*>");
        assert!(k.starts_with("team-a."));
        assert!(
            k.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        );
        assert_ne!(k, dedup_key("team-b", "run:1 x", "r:n:0:*>"));
        assert_ne!(k, dedup_key("team-a", "run:2", "r:n:0:*>"));
    }
}
