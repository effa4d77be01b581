//! `GET /v1/host/sample/test/runs/{runId}/events`: a run's persisted events as
//! `{events: [...]}`, optionally filtered by `type`, `correlationId`, `causationId`,
//! `nodeId`. Read through the REST API's own JetStream reader, and only from the caller's
//! namespace (tenant): a run of another tenant reads as no events, never as its log.

use axum::extract::{Path, Query, State};
use openwop_protocol::run::subjects::events_subject;
use openwop_protocol::seams::{EventFilter, check_run_id};
use serde_json::{Value, json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::seam::{SeamCaller, invalid};
use crate::rest::{ApiError, ErrorBody, Json, RestState, log};

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new().routes(routes!(run_events))
}

/// Query of the seam: the filters, plus `tenantId` (read by [`SeamCaller`]).
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EventsQuery {
    #[serde(rename = "type")]
    event_type: Option<String>,
    correlation_id: Option<String>,
    causation_id: Option<String>,
    node_id: Option<String>,
    #[allow(dead_code)]
    tenant_id: Option<String>,
}

/// A run's persisted events (conformance-only test seam).
#[utoipa::path(
    get, path = "/v1/host/sample/test/runs/{runId}/events",
    params(("runId" = String, Path), EventsQuery),
    responses(
        (status = 200, description = "{events: RunEventDoc[]}", body = Object),
        (status = 400, description = "unusable runId or query: {error: {code, message}}"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
async fn run_events(
    State(s): State<RestState>,
    caller: SeamCaller,
    Path(run_id): Path<String>,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| invalid(e.body_text()))?;
    check_run_id("runId", &run_id)?;
    let filter = EventFilter {
        event_type: q.event_type,
        correlation_id: q.correlation_id,
        causation_id: q.causation_id,
        node_id: q.node_id,
    };
    let events: Vec<Value> =
        log::read_subject_events(&s, events_subject(&caller.namespace, &run_id))
            .await?
            .into_iter()
            .filter(|e| filter.matches(e))
            .collect();
    Ok(Json(json!({"events": events})))
}
