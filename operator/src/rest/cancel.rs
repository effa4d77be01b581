//! Cancelling runs: `POST /v1/runs/{runId}/cancel` and `POST /v1/runs:bulk-cancel`, two
//! representations of one operation ([`cancel`]): a patch of the Run's spec
//! (`spec.cancel`), after which the controllers stop the run. A run that already ended is
//! left alone — no patch, no event. Both honour `Idempotency-Key` ([`super::idempotency`]).

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use openwop_crds::Run;
use openwop_crds::names::ANNOTATION_CANCEL_REASON;
use openwop_protocol::run::RunPhase;
use serde_json::{Value, json};

use super::auth::{Caller, Resource, Verb};
use super::error::{ApiError, ErrorBody};
use super::idempotency::{Scope, idempotent, op};
use super::json::{Json, Sent};
use super::state::RestState;
use super::support::{check_reason, kube_error, phase, visible_run};
use super::types::{
    BulkCancelError, BulkCancelRequest, BulkCancelResponse, BulkCancelResult, CancelRunRequest,
    RunStatusResponse,
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
/// `patch` on runs in its namespace. A `reason` is kept on the Run
/// ([`ANNOTATION_CANCEL_REASON`]) and becomes its `run.cancelled.reason`.
pub async fn cancel(
    s: &RestState,
    caller: &Caller,
    run_id: &str,
    reason: Option<&str>,
) -> Result<Cancelled, ApiError> {
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
        &Patch::Merge(cancel_patch(reason)),
    )
    .await
    .map_err(kube_error)?;
    Ok(Cancelled::Now(RunPhase::Cancelling))
}

/// The merge patch that cancels a run, with its reason when one was given.
fn cancel_patch(reason: Option<&str>) -> Value {
    match reason {
        Some(r) => json!({
            "metadata": {"annotations": {ANNOTATION_CANCEL_REASON: r}},
            "spec": {"cancel": true},
        }),
        None => json!({"spec": {"cancel": true}}),
    }
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
    body: Sent<CancelRunRequest>,
) -> Result<Response, ApiError> {
    let reason = body.value.reason.as_deref();
    check_reason(reason)?;
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
    let request = [run_id.as_bytes(), body.canonical.as_bytes()];
    idempotent(&s, &headers, scope, &request, || async {
        let status = match cancel(&s, &caller, &run_id, reason).await? {
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
    body: Sent<BulkCancelRequest>,
) -> Result<Response, ApiError> {
    let req = body.value;
    check_reason(req.reason.as_deref())?;
    check_count(req.run_ids.len())?;
    // The runs may be in several namespaces: the record is the caller's across all of them
    // (`_any` is no namespace name).
    let scope = Scope {
        namespace: "_any",
        operation: op::BULK_CANCEL_RUNS,
        principal: &caller.username,
    };
    idempotent(
        &s,
        &headers,
        scope,
        &[body.canonical.as_bytes()],
        || async {
            let reason = req.reason.as_deref();
            let results: Vec<BulkCancelResult> = futures::stream::iter(req.run_ids.clone())
                .map(|id| {
                    let (s, caller) = (&s, &caller);
                    async move { bulk_item(s, caller, id, reason).await }
                })
                .buffered(BULK_CONCURRENCY)
                .collect()
                .await;
            Ok(Json(BulkCancelResponse { results }).into_response())
        },
    )
    .await
}

/// How many runIds a bulk cancel may name: 1 to [`MAX_BULK_CANCEL`].
fn check_count(n: usize) -> Result<(), ApiError> {
    if n == 0 {
        return Err(
            ApiError::validation("runIds is empty: name at least one run to cancel")
                .with_details(json!({"field": "runIds", "maxRunIds": MAX_BULK_CANCEL})),
        );
    }
    if n > MAX_BULK_CANCEL {
        return Err(ApiError::validation(format!(
            "runIds names {n} runs; one bulk cancel takes at most {MAX_BULK_CANCEL}: split the list"
        ))
        .with_details(json!({"field": "runIds", "maxRunIds": MAX_BULK_CANCEL})));
    }
    Ok(())
}

async fn bulk_item(
    s: &RestState,
    caller: &Caller,
    run_id: String,
    reason: Option<&str>,
) -> BulkCancelResult {
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
    match cancel(s, caller, &run_id, reason).await {
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
    use crate::rest::json::from_value;

    #[test]
    fn bulk_run_ids_are_one_to_a_hundred_strings() {
        let e = check_count(0).unwrap_err();
        assert_eq!(e.body.error, "validation_error");
        assert_eq!(e.body.details.as_ref().unwrap()["maxRunIds"], 100);
        let e = check_count(101).unwrap_err();
        assert_eq!(e.body.details.as_ref().unwrap()["maxRunIds"], 100);
        assert!(e.body.message.contains("101"), "{e}");
        assert!(check_count(100).is_ok());
        let e = from_value::<BulkCancelRequest>(
            &json!({"runIds": ["a", 7]}),
            "POST /v1/runs:bulk-cancel",
        )
        .unwrap_err();
        assert_eq!(
            e.body.details.as_ref().unwrap()["field"],
            json!("runIds[1]")
        );
    }

    #[test]
    fn a_reason_is_kept_on_the_run_and_bounded() {
        assert_eq!(cancel_patch(None), json!({"spec": {"cancel": true}}));
        assert_eq!(
            cancel_patch(Some("wrong inputs")),
            json!({"metadata": {"annotations": {"openwop.dev/cancel-reason": "wrong inputs"}},
                   "spec": {"cancel": true}})
        );
        let max = openwop_protocol::run::pause::MAX_REASON_CHARS;
        assert!(check_reason(Some(&"x".repeat(max))).is_ok());
        let e = check_reason(Some(&"x".repeat(max + 1))).unwrap_err();
        assert_eq!(e.body.details, Some(json!({"field": "reason"})));
    }
}
