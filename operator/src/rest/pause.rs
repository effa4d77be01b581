//! Pausing and resuming runs: `POST /v1/runs/{runId}:pause` and `POST /v1/runs/{runId}:resume`
//! (`rest-endpoints.md`), each a patch of the Run's `spec.pause` (the same field
//! `kubectl openwop pause|resume` and `kubectl patch` set), after which the controller asks
//! the worker to stop at a safe point or starts the one that resumes the run. What may be
//! paused or resumed is protocol's ([`openwop_protocol::run::pause`]). RBAC as for cancel:
//! `get` to see the run (else 404), `patch` on runs in its namespace (else 403).
//!
//! The router cannot match a parameter followed by `:pause` inside one path segment, so one
//! `POST /v1/runs/{runId}` handler ([`run_action`]) takes the suffix apart; the OpenAPI
//! document describes the two operations under their spec paths.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use openwop_crds::{PauseRequest, Run};
use openwop_protocol::run::RunPhase;
use openwop_protocol::run::pause::{MAX_REASON_CHARS, PauseConflict, check_pause, check_resume};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::auth::{Caller, Resource, Verb};
use super::error::{ApiError, ErrorBody};
use super::idempotency::{Scope, idempotent, op};
use super::json::{self, Json};
use super::state::RestState;
use super::support::{kube_error, phase, visible_run};
use super::types::{PauseRunRequest, PauseRunResponse, ResumeRunRequest};

/// `POST /v1/runs/{runId}:pause` or `:resume` (see the module docs).
pub async fn run_action(
    State(s): State<RestState>,
    caller: Caller,
    Path(target): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    match target.rsplit_once(':') {
        Some((run_id, "pause")) => pause(&s, &caller, run_id, &headers, &body).await,
        Some((run_id, "resume")) => resume(&s, &caller, run_id, &headers, &body).await,
        _ => Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!(
                "POST /v1/runs/{target} is not an operation: use POST /v1/runs/{{runId}}:pause, :resume or /cancel"
            ),
        )),
    }
}

/// Pause a run. The worker stops at a safe point (per `drainPolicy`), records `run.paused`
/// and exits; the run holds no pod until `:resume`.
#[utoipa::path(
    post, path = "/v1/runs/{runId}:pause", request_body = PauseRunRequest,
    params(
        ("runId" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "the same key and body answer the first request's answer again (`openwop-Idempotent-Replay: true`)")
    ),
    responses(
        (status = 202, body = PauseRunResponse, description = "`status: paused` and `pausedAt`: the pause is recorded and the run stops at its next safe point"),
        (status = 400, body = ErrorBody, description = "a body that is not `{reason?, drainPolicy?}`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`run_terminal` (the run ended) or `run_state_conflict` (already paused, waiting for an answer, being cancelled); `details.runStatus` says which")
    ),
    security(("bearer" = []))
)]
pub async fn pause_run() {}

/// Resume a paused run: a new worker replays its log and continues.
#[utoipa::path(
    post, path = "/v1/runs/{runId}:resume", request_body = ResumeRunRequest,
    params(
        ("runId" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "the same key and body answer the first request's answer again (`openwop-Idempotent-Replay: true`)")
    ),
    responses(
        (status = 202, body = PauseRunResponse, description = "`status: running` and `resumedAt`"),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "the run is not paused (`run_state_conflict`) or ended (`run_terminal`); `details.runStatus` says which")
    ),
    security(("bearer" = []))
)]
pub async fn resume_run() {}

/// The body as `T`; an empty body is `{}`.
fn body<T: DeserializeOwned>(raw: &Bytes, endpoint: &str) -> Result<T, ApiError> {
    let v: Value = if raw.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(raw).map_err(|e| {
            ApiError::validation(format!("the body of {endpoint} is not JSON: {e}"))
                .with_details(json!({"field": "body"}))
        })?
    };
    json::from_value(&v, endpoint)
}

/// The run as the API server has it now (its `spec.pause` may be newer than the cache's),
/// once the caller may see it (404) and patch runs in its namespace (403).
async fn patchable_run(s: &RestState, caller: &Caller, run_id: &str) -> Result<Run, ApiError> {
    let cached = visible_run(s, caller, run_id).await?;
    let ns = cached.namespace().unwrap_or_default();
    s.auth
        .authorize(caller, Verb::Patch, Resource::Runs, &ns)
        .await?;
    let api: Api<Run> = Api::namespaced(s.client.clone(), &ns);
    let current = match api.get_opt(&cached.name_any()).await.map_err(kube_error)? {
        Some(r) if r.uid() == cached.uid() => r,
        _ => return Err(ApiError::not_found(format!("run {run_id:?} not found"))),
    };
    // The phase as the run's log has it (the status may lag its stream).
    let mut fresh = super::view::fresh_run(s, &cached).await;
    fresh.spec = current.spec;
    fresh.metadata = current.metadata;
    Ok(fresh)
}

/// The 409 of a refused pause or resume, with the status it found.
fn conflict(e: PauseConflict, run: &Run) -> ApiError {
    let mut details = json!({"runStatus": e.run_status().as_str()});
    if let (PauseConflict::AlreadyPaused, Some(at)) = (
        e,
        run.spec
            .pause
            .as_ref()
            .and_then(|p| p.requested_at.as_deref()),
    ) {
        details["pausedAt"] = json!(at);
    }
    ApiError::conflict(e.code(), e.to_string()).with_details(details)
}

async fn patch_pause(run: &Run, s: &RestState, pause: Value) -> Result<(), ApiError> {
    let api: Api<Run> = Api::namespaced(s.client.clone(), &run.namespace().unwrap_or_default());
    api.patch(
        &run.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"pause": pause}})),
    )
    .await
    .map_err(kube_error)?;
    Ok(())
}

fn accepted(body: PauseRunResponse) -> Response {
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

/// Runs `work` once per `Idempotency-Key` (the one layer every mutation uses), after the
/// caller was found allowed to patch the run.
async fn once<F, Fut>(
    s: &RestState,
    caller: &Caller,
    run: &Run,
    operation: &'static str,
    headers: &HeaderMap,
    request: &[&[u8]],
    work: F,
) -> Result<Response, ApiError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Response, ApiError>>,
{
    let ns = run.namespace().unwrap_or_default();
    let scope = Scope {
        namespace: &ns,
        operation,
        principal: &caller.username,
    };
    idempotent(s, headers, scope, request, work).await
}

async fn pause(
    s: &RestState,
    caller: &Caller,
    run_id: &str,
    headers: &HeaderMap,
    raw: &Bytes,
) -> Result<Response, ApiError> {
    const ENDPOINT: &str = "POST /v1/runs/{runId}:pause";
    let req: PauseRunRequest = body(raw, ENDPOINT)?;
    if let Some(r) = &req.reason
        && r.chars().count() > MAX_REASON_CHARS
    {
        return Err(ApiError::validation(format!(
            "reason has {} characters; at most {MAX_REASON_CHARS}",
            r.chars().count()
        ))
        .with_details(json!({"field": "reason"})));
    }
    let run = patchable_run(s, caller, run_id).await?;
    let request = [run_id.as_bytes(), raw.as_ref()];
    once(
        s,
        caller,
        &run,
        op::PAUSE_RUN,
        headers,
        &request,
        || async {
            check_pause(phase(&run), run.spec.pause.is_some()).map_err(|e| conflict(e, &run))?;
            let now = Timestamp::now().to_string();
            let pause = PauseRequest {
                reason: req.reason,
                drain_policy: req.drain_policy.unwrap_or_default(),
                requested_at: Some(now.clone()),
            };
            patch_pause(&run, s, serde_json::to_value(&pause).unwrap_or_default()).await?;
            Ok(accepted(PauseRunResponse {
                run_id: run_id.to_owned(),
                status: RunPhase::Paused,
                paused_at: Some(now),
                resumed_at: None,
            }))
        },
    )
    .await
}

async fn resume(
    s: &RestState,
    caller: &Caller,
    run_id: &str,
    headers: &HeaderMap,
    raw: &Bytes,
) -> Result<Response, ApiError> {
    let _: ResumeRunRequest = body(raw, "POST /v1/runs/{runId}:resume")?;
    let run = patchable_run(s, caller, run_id).await?;
    let request = [run_id.as_bytes(), raw.as_ref()];
    once(
        s,
        caller,
        &run,
        op::RESUME_RUN,
        headers,
        &request,
        || async {
            check_resume(phase(&run), run.spec.pause.is_some()).map_err(|e| conflict(e, &run))?;
            patch_pause(&run, s, Value::Null).await?;
            Ok(accepted(PauseRunResponse {
                run_id: run_id.to_owned(),
                status: RunPhase::Running,
                paused_at: None,
                resumed_at: Some(Timestamp::now().to_string()),
            }))
        },
    )
    .await
}
