//! Cancelling runs: `POST /v1/runs/{runId}/cancel` and `POST /v1/runs:bulk-cancel`, two
//! representations of one operation ([`cancel`]): a patch of the Run's spec
//! (`spec.cancel`), after which the controllers stop the run. A run that already ended is
//! left alone — no patch, no event. Both honour `Idempotency-Key` ([`super::idempotency`]).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use openwop_crds::Run;
use openwop_protocol::run::RunPhase;
use serde_json::{Value, json};

use super::auth::{Caller, Resource, Verb};
use super::error::{ApiError, ErrorBody};
use super::idempotency::{Scope, idempotent, op};
use super::json::{self, Json};
use super::state::RestState;
use super::support::{kube_error, phase, visible_run};
use super::types::{
    BulkCancelError, BulkCancelRequest, BulkCancelResponse, BulkCancelResult, RunStatusResponse,
};

/// Most runIds one bulk cancel may name (`rest-endpoints.md` recommends 100).
pub const MAX_BULK_CANCEL: usize = 100;

/// Bulk cancel works on this many runs at a time (each is a review and a patch).
const BULK_CONCURRENCY: usize = 8;

/// Error code of a bulk-cancel item whose run already completed or failed.
const RUN_TERMINAL: &str = "run_terminal";

/// What cancelling one run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// The cancel was requested now, or earlier (`cancelling` or `cancelled`).
    Now(RunPhase),
    /// The run had already completed or failed: nothing was changed.
    AlreadyEnded(RunPhase),
}

/// Cancels the run `run_id` for `caller`: 404 when the caller cannot see it, 403 without
/// `patch` on runs in its namespace.
pub async fn cancel(s: &RestState, caller: &Caller, run_id: &str) -> Result<Cancelled, ApiError> {
    // As its log has it: a run whose stream already ended is not cancelled.
    let cached = visible_run(s, caller, run_id).await?;
    let run = super::view::fresh_run(s, &cached).await;
    let ns = run.namespace().unwrap_or_default();
    s.auth
        .authorize(caller, Verb::Patch, Resource::Runs, &ns)
        .await?;
    let p = phase(&run);
    match p {
        RunPhase::Cancelled | RunPhase::Cancelling => return Ok(Cancelled::Now(p)),
        RunPhase::Completed | RunPhase::Failed => return Ok(Cancelled::AlreadyEnded(p)),
        _ => {}
    }
    let api: Api<Run> = Api::namespaced(s.client.clone(), &ns);
    api.patch(
        &run.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"cancel": true}})),
    )
    .await
    .map_err(kube_error)?;
    Ok(Cancelled::Now(RunPhase::Cancelling))
}

/// `POST /v1/runs/{runId}/cancel` body (optional; documentation: the body is not read, only
/// compared when an `Idempotency-Key` is repeated).
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct CancelRunRequest {
    /// Why the run is cancelled.
    pub reason: Option<String>,
}

/// Cancel a run. A run that already ended answers 200 with its terminal status, unchanged.
#[utoipa::path(
    post, path = "/v1/runs/{runId}/cancel", request_body(content = Option<CancelRunRequest>),
    params(
        ("runId" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "same key and body → the first answer again; same key, other run or body → 409")
    ),
    responses(
        (status = 200, body = RunStatusResponse, description = "`cancelling` or `cancelled`; a run that already completed or failed keeps (and answers) its status"),
        (status = 400, body = ErrorBody, description = "validation_error: an Idempotency-Key that is not 1..255 URL-safe characters"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "idempotency_key_mismatch, idempotency_in_flight")
    ),
    security(("bearer" = []))
)]
pub async fn cancel_run(
    State(s): State<RestState>,
    caller: Caller,
    headers: HeaderMap,
    Path(run_id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let run = visible_run(&s, &caller, &run_id).await?;
    let ns = run.namespace().unwrap_or_default();
    s.auth
        .authorize(&caller, Verb::Patch, Resource::Runs, &ns)
        .await?;
    let scope = Scope {
        namespace: &ns,
        operation: op::CANCEL_RUN,
        principal: &caller.username,
    };
    idempotent(&s, &headers, scope, &[run_id.as_bytes(), &body], || async {
        let status = match cancel(&s, &caller, &run_id).await? {
            Cancelled::Now(p) | Cancelled::AlreadyEnded(p) => p,
        };
        Ok(Json(RunStatusResponse {
            run_id: run_id.clone(),
            node_id: None,
            status,
        })
        .into_response())
    })
    .await
}

/// Cancel up to 100 runs: one result per runId, in request order, even when every one fails.
#[utoipa::path(
    post, path = "/v1/runs:bulk-cancel", request_body = BulkCancelRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "same key and body → the first answer again; same key, other body → 409")),
    responses(
        (status = 200, body = BulkCancelResponse),
        (status = 400, body = ErrorBody, description = "no runIds, more than 100 (`details.maxRunIds`), or one that is not a string"),
        (status = 401, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "idempotency_key_mismatch, idempotency_in_flight")
    ),
    security(("bearer" = []))
)]
pub async fn bulk_cancel(
    State(s): State<RestState>,
    caller: Caller,
    headers: HeaderMap,
    Json(raw): Json<Value>,
) -> Result<Response, ApiError> {
    let req: BulkCancelRequest = json::from_value(&raw, "POST /v1/runs:bulk-cancel")?;
    let ids = run_ids(&req.run_ids)?;
    // The runs may be in several namespaces: the record is the caller's across all of them
    // (`_any` is no namespace name).
    let scope = Scope {
        namespace: "_any",
        operation: op::BULK_CANCEL_RUNS,
        principal: &caller.username,
    };
    let body = raw.to_string();
    idempotent(&s, &headers, scope, &[body.as_bytes()], || async {
        let results: Vec<BulkCancelResult> = futures::stream::iter(ids)
            .map(|id| {
                let (s, caller) = (&s, &caller);
                async move { bulk_item(s, caller, id).await }
            })
            .buffered(BULK_CONCURRENCY)
            .collect()
            .await;
        Ok(Json(BulkCancelResponse { results }).into_response())
    })
    .await
}

/// The runIds of a bulk cancel, or why the request as a whole is refused.
fn run_ids(raw: &[Value]) -> Result<Vec<String>, ApiError> {
    if raw.is_empty() {
        return Err(
            ApiError::validation("runIds is empty: name at least one run to cancel")
                .with_details(json!({"field": "runIds", "maxRunIds": MAX_BULK_CANCEL})),
        );
    }
    if raw.len() > MAX_BULK_CANCEL {
        return Err(ApiError::validation(format!(
            "runIds names {} runs; one bulk cancel takes at most {MAX_BULK_CANCEL}: split the list",
            raw.len()
        ))
        .with_details(json!({"field": "runIds", "maxRunIds": MAX_BULK_CANCEL})));
    }
    raw.iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str().map(str::to_owned).ok_or_else(|| {
                ApiError::validation(format!(
                    "runIds[{i}] is {v}, not a string: runIds are the runIds of runs"
                ))
                .with_details(json!({"field": format!("runIds[{i}]")}))
            })
        })
        .collect()
}

async fn bulk_item(s: &RestState, caller: &Caller, run_id: String) -> BulkCancelResult {
    let refused = |code: &str, message: String| BulkCancelResult {
        run_id: run_id.clone(),
        ok: false,
        status: None,
        error: Some(BulkCancelError {
            code: code.to_owned(),
            message,
        }),
    };
    if run_id.is_empty() {
        return refused("validation_error", "an empty runId names no run".into());
    }
    match cancel(s, caller, &run_id).await {
        Ok(Cancelled::Now(p)) => BulkCancelResult {
            run_id,
            ok: true,
            status: Some(p),
            error: None,
        },
        Ok(Cancelled::AlreadyEnded(p)) => BulkCancelResult {
            status: Some(p),
            ..refused(
                RUN_TERMINAL,
                format!("run {run_id} already ended ({p}); there is nothing to cancel"),
            )
        },
        Err(e) => refused(&e.body.error, e.body.message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_run_ids_are_one_to_a_hundred_strings() {
        let e = run_ids(&[]).unwrap_err();
        assert_eq!(e.body.error, "validation_error");
        assert_eq!(e.body.details.as_ref().unwrap()["maxRunIds"], 100);
        let many: Vec<Value> = (0..101).map(|i| json!(format!("r{i}"))).collect();
        let e = run_ids(&many).unwrap_err();
        assert_eq!(e.body.details.as_ref().unwrap()["maxRunIds"], 100);
        assert!(e.body.message.contains("101"), "{e}");
        let e = run_ids(&[json!("a"), json!(7)]).unwrap_err();
        assert_eq!(
            e.body.details.as_ref().unwrap()["field"],
            json!("runIds[1]")
        );
        assert_eq!(run_ids(&many[..100]).unwrap().len(), 100);
    }
}
