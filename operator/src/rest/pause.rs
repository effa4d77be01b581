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

use axum::extract::{FromRequestParts, Path, Request, State};
use axum::handler::Handler;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use openwop_crds::{PauseRequest, Run};
use openwop_protocol::run::RunPhase;
use openwop_protocol::run::pause::{PauseConflict, check_pause, check_resume};
use serde_json::{Value, json};

use super::auth::{Caller, Resource, Verb};
use super::error::{ApiError, ErrorBody};
use super::idempotency::{Scope, idempotent, op};
use super::json::{Json, Sent};
use super::state::RestState;
use super::support::{check_reason, kube_error, phase, visible_run};
use super::types::{PauseRunRequest, PauseRunResponse, ResumeRunRequest};

/// `POST /v1/runs/{runId}:pause` or `:resume` (see the module docs): hands the request to
/// [`pause_run`] or [`resume_run`], whose [`Action`] extractor reads the run id.
pub async fn run_action(
    State(s): State<RestState>,
    Path(target): Path<String>,
    req: Request,
) -> Response {
    match target.rsplit_once(':') {
        Some((_, "pause")) => pause_run.call(req, s).await,
        Some((_, "resume")) => resume_run.call(req, s).await,
        _ => ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!(
                "POST /v1/runs/{target} is not an operation: use POST /v1/runs/{{runId}}:pause, :resume or /cancel"
            ),
        )
        .into_response(),
    }
}

/// The `{runId}` of `POST /v1/runs/{runId}:<operation>` (extractor): the router's one path
/// parameter holds both.
pub struct Action(pub String);

impl FromRequestParts<RestState> for Action {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &RestState) -> Result<Self, ApiError> {
        let Path(target) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::validation(format!("the run id in the path: {e}")))?;
        Ok(Action(
            target
                .rsplit_once(':')
                .map_or(target.as_str(), |(run_id, _)| run_id)
                .to_owned(),
        ))
    }
}

/// Pause a run. The worker stops at a safe point (per `drainPolicy`), records `run.paused`
/// and exits; the run holds no pod until `:resume`.
#[utoipa::path(
    post, path = "/v1/runs/{runId}:pause", request_body(content = Option<PauseRunRequest>),
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
pub async fn pause_run(
    State(s): State<RestState>,
    caller: Caller,
    Action(run_id): Action,
    headers: HeaderMap,
    body: Sent<PauseRunRequest>,
) -> Result<Response, ApiError> {
    let req = body.value;
    check_reason(req.reason.as_deref())?;
    let run = patchable_run(&s, &caller, &run_id).await?;
    let request = [run_id.as_bytes(), body.canonical.as_bytes()];
    once(
        &s,
        &caller,
        &run,
        op::PAUSE_RUN,
        &headers,
        &request,
        || async {
            check_pause(phase(&run), run.spec.pause.is_some()).map_err(|e| conflict(e, &run))?;
            let now = Timestamp::now().to_string();
            let pause = PauseRequest {
                reason: req.reason,
                drain_policy: req.drain_policy.unwrap_or_default(),
                requested_at: Some(now.clone()),
            };
            patch_pause(&run, &s, serde_json::to_value(&pause).unwrap_or_default()).await?;
            Ok(accepted(PauseRunResponse {
                run_id: run_id.clone(),
                status: RunPhase::Paused,
                paused_at: Some(now),
                resumed_at: None,
            }))
        },
    )
    .await
}

/// Resume a paused run: a new worker replays its log and continues.
#[utoipa::path(
    post, path = "/v1/runs/{runId}:resume", request_body(content = Option<ResumeRunRequest>),
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
pub async fn resume_run(
    State(s): State<RestState>,
    caller: Caller,
    Action(run_id): Action,
    headers: HeaderMap,
    body: Sent<ResumeRunRequest>,
) -> Result<Response, ApiError> {
    let run = patchable_run(&s, &caller, &run_id).await?;
    let request = [run_id.as_bytes(), body.canonical.as_bytes()];
    once(
        &s,
        &caller,
        &run,
        op::RESUME_RUN,
        &headers,
        &request,
        || async {
            check_resume(phase(&run), run.spec.pause.is_some()).map_err(|e| conflict(e, &run))?;
            patch_pause(&run, &s, Value::Null).await?;
            Ok(accepted(PauseRunResponse {
                run_id: run_id.clone(),
                status: RunPhase::Running,
                paused_at: None,
                resumed_at: Some(Timestamp::now().to_string()),
            }))
        },
    )
    .await
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
