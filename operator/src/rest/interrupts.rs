//! Answering interrupts, by two surfaces and one path ([`answer`]):
//!
//! * `POST /v1/runs/{runId}/interrupts/{nodeId}` (`resolveInterruptByRun`): a bearer caller
//!   with `patch` on the run's namespace;
//! * `GET` / `POST /v1/interrupts/{token}` (`inspectInterruptByToken`,
//!   `resolveInterruptByToken`): the holder of a signed token (`protocol::run::token`), no
//!   bearer. Tokens are minted on read into `RunSnapshot.interrupt` ([`snapshot_interrupt`]):
//!   `resolve` for a reader who may also answer the run, `inspect` for one who may only read
//!   it. A token is never logged or echoed in an error.
//!
//! The answer — an approval action or clarification answers, normalised by
//! `Answer::from_user_input` — is appended to the Run's `spec.answers` with who answered (the
//! TokenReview username, or `callback-token`) and when, and a new worker resumes the run.
//! Both surfaces honour `Idempotency-Key` ([`super::idempotency`]).
//!
//! Answers (INT, `rest-endpoints.md`): **200** `{runId, nodeId, status}`; 400
//! `validation_error` (a body that does not fit the interrupt, naming the allowed actions or
//! the missing questions); 403 `forbidden` (an inspect token used to resolve); 404
//! `interrupt_not_found` (nothing waits at the node; a token this host did not sign); 409
//! `interrupt_already_resolved` (the interrupt is answered, or the token's interrupt is no
//! longer pending: resolved, or its run ended); 410 `interrupt_expired` (a token past its
//! `expiresAt`); 422 `correlation_mismatch` (an external event that does not carry the
//! interrupt's correlation, `details.keys` naming the keys; the run keeps waiting).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use openwop_crds::{InterruptAnswer, Run};
use openwop_protocol::events::EventType;
use openwop_protocol::run::api::SnapshotInterrupt;
use openwop_protocol::run::correlation::{CORRELATION_MISMATCH, redelivers};
use openwop_protocol::run::gate;
use openwop_protocol::run::projection::open_when_ended;
use openwop_protocol::run::quorum;
use openwop_protocol::run::snapshot::{AnswerError, Reply};
use openwop_protocol::run::token::{
    CALLBACK_TOKEN_PRINCIPAL, TokenClaims, TokenError, TokenIntent, TokenKeys, TokenRequest,
    token_expiry,
};
use openwop_protocol::run::{AnswerMismatch, PendingInterrupt, RunSnapshotDoc};
use serde::Serialize;
use serde_json::{Value, json};

use super::auth::{Caller, Resource, Verb};
use super::error::{ApiError, ErrorBody};
use super::idempotency::{Scope, idempotent, op};
use super::json::{Json, Sent};
use super::state::RestState;
use super::support::{find_run, kube_error, phase, visible_run};
use super::types::{ResolveInterruptRequest, RunStatusResponse};

/// The keys, or 503 when the mounted key cannot be read (the detail goes to the log).
fn token_keys(s: &RestState) -> Result<Option<TokenKeys>, ApiError> {
    s.config.rest.interrupt_tokens.keys().map_err(|e| {
        tracing::warn!(error = %e, "interrupt token signing key");
        ApiError::unavailable(
            "interrupt tokens are unavailable right now; retry shortly",
            Duration::from_secs(5),
        )
    })
}

/// `RunSnapshot.interrupt` of a run `doc` shows waiting: its first pending interrupt not yet
/// answered, with a token minted now for `caller` (`resolve` if they may answer the run,
/// else `inspect`).
pub async fn snapshot_interrupt(
    s: &RestState,
    caller: &Caller,
    run: &Run,
    doc: &RunSnapshotDoc,
) -> Option<SnapshotInterrupt> {
    let pending = doc
        .pending_interrupts
        .iter()
        .find(|p| !quorum::decided(p, &run.spec.answers))?;
    let mut out = SnapshotInterrupt {
        kind: pending.kind.clone(),
        node_id: pending.node_id.clone(),
        interrupt_id: pending.interrupt_id.clone(),
        interrupt_token: None,
        callback_url: None,
        expires_at: None,
    };
    let keys = match token_keys(s) {
        Ok(Some(k)) => k,
        // No tokens on this host, or the key unreadable (logged): the interrupt without one.
        _ => return Some(out),
    };
    let ns = run.namespace().unwrap_or_default();
    // Fails closed: a review that cannot be made gives the read-only token.
    let may_answer = s
        .auth
        .allowed(caller, Verb::Patch, Resource::Runs, &ns)
        .await
        .unwrap_or(false);
    let now = time::OffsetDateTime::now_utc();
    let lifetime = Duration::from_secs(s.config.rest.interrupt_tokens.lifetime_seconds);
    // Our gates carry no deadline of their own yet: the lifetime alone bounds the token.
    let expires_at = token_expiry(now, lifetime, None);
    let token = keys.mint(TokenRequest {
        run_id: &doc.run_id,
        node_id: &pending.node_id,
        interrupt_id: &pending.interrupt_id,
        intent: if may_answer {
            TokenIntent::Resolve
        } else {
            TokenIntent::Inspect
        },
        expires_at,
    });
    out.callback_url = Some(format!("/v1/interrupts/{token}"));
    out.interrupt_token = Some(token);
    out.expires_at = Some(
        expires_at
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
    );
    Some(out)
}

/// Answer a pending interrupt (an approval action, clarification answers, or an external event).
#[utoipa::path(
    post, path = "/v1/runs/{runId}/interrupts/{nodeId}",
    operation_id = "resolveInterruptByRun",
    request_body = ResolveInterruptRequest,
    params(
        ("runId" = String, Path), ("nodeId" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "same key and body → the first answer again; same key, other body → 409")
    ),
    responses(
        (status = 200, body = RunStatusResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "interrupt_already_resolved, idempotency_key_mismatch, idempotency_in_flight"),
        (status = 422, body = ErrorBody, description = "correlation_mismatch: the external event does not carry the interrupt's correlation"),
        (status = 503, body = ErrorBody, description = "unavailable: the run's status does not show the external event's correlation yet (retry)")
    ),
    security(("bearer" = []))
)]
pub async fn resolve_interrupt(
    State(s): State<RestState>,
    caller: Caller,
    headers: HeaderMap,
    Path((run_id, node_id)): Path<(String, String)>,
    body: Sent<ResolveInterruptRequest>,
) -> Result<Response, ApiError> {
    let req = body.value;
    let cached = visible_run(&s, &caller, &run_id).await?;
    let ns = cached.namespace().unwrap_or_default();
    s.auth
        .authorize(&caller, Verb::Patch, Resource::Runs, &ns)
        .await?;
    let scope = Scope {
        namespace: &ns,
        operation: op::RESOLVE_INTERRUPT_BY_RUN,
        principal: &caller.username,
    };
    let parts: [&[u8]; 3] = [
        run_id.as_bytes(),
        node_id.as_bytes(),
        body.canonical.as_bytes(),
    ];
    idempotent(&s, &headers, scope, &parts, || async {
        let st = answer(&s, &cached, &node_id, None, req, &caller.username).await?;
        Ok((StatusCode::OK, Json(st)).into_response())
    })
    .await
}

/// The one answer path of both surfaces: appends the answer to the Run's `spec.answers`,
/// checked against the run as its log has it (like the snapshot the caller read). `expect`:
/// the interrupt a token names (another interrupt now pending at the node means the token's
/// was resolved). `by`: who answered.
async fn answer(
    s: &RestState,
    cached: &Run,
    node_id: &str,
    expect: Option<&str>,
    req: ResolveInterruptRequest,
    by: &str,
) -> Result<RunStatusResponse, ApiError> {
    let ns = cached.namespace().unwrap_or_default();
    let run_id = cached.uid().unwrap_or_default();
    let api: Api<Run> = Api::namespaced(s.client.clone(), &ns);
    let mut run = super::view::fresh_run(s, cached).await;
    // Stamped here, so a caller cannot claim to be someone else.
    let answered_at = Timestamp::now().to_string();
    // The patch is conditional on the version read, so a concurrent answer is never
    // overwritten; when this replica's cache lagged (the operator just wrote the status),
    // the Run is read again from the API server and the answer re-checked against it.
    let mut attempt = 0;
    let (interrupt_id, decides) = loop {
        attempt += 1;
        let answer = match answer_for(&run, &run_id, node_id, expect, req.clone()) {
            // The run ended while the node waited (cancelled, or another branch ended it):
            // its status forgot the interrupt, its log did not. One code for that state.
            Err(e) if e.status == StatusCode::NOT_FOUND && phase(&run).is_terminal() => {
                let log = super::log::read_events(s, &run, None, None).await?;
                if open_when_ended(&log.events)
                    .iter()
                    .any(|p| p.node_id == node_id)
                {
                    return Err(already_resolved(
                        &run,
                        format!(
                            "the interrupt at node {node_id:?} of run {run_id} was still waiting \
                             when the run ended ({}); it can no longer be answered",
                            phase(&run).as_str()
                        ),
                    ));
                }
                return Err(e);
            }
            Ok(Some(a)) => a.answered(by, &answered_at),
            // The event that resolved it, delivered again: answered as the first time.
            Ok(None) => {
                return Ok(RunStatusResponse {
                    run_id,
                    node_id: Some(node_id.to_owned()),
                    status: phase(&run),
                });
            }
            Err(e) => return Err(e),
        };
        let interrupt_id = answer.interrupt_id.clone();
        let mut answers = run.spec.answers.clone();
        answers.push(answer);
        let decides = resumes(&run, node_id, &answers);
        match api
            .patch(
                &run.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"resourceVersion": run.resource_version()},
                    "spec": {"answers": answers},
                })),
            )
            .await
        {
            Ok(_) => break (interrupt_id, decides),
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 4 => {
                run =
                    super::view::fresh_run(s, &api.get(&run.name_any()).await.map_err(kube_error)?)
                        .await;
            }
            Err(e) => return Err(kube_error(e)),
        }
    };
    // The answer is stored; the worker that resumes the run records the resolution. The 200
    // waits (bounded) until the log holds it, so a client that reads the run's events next
    // finds the resolution there (RFC 0183 §A.1: the action an approver took is recorded).
    let wait = Duration::from_secs(s.config.rest.interrupt_record_wait_seconds);
    let mut status = phase(&run);
    if decides && !wait.is_zero() {
        let resolved = |doc: &Value| {
            doc.get("type").and_then(Value::as_str) == Some(EventType::InterruptResolved.as_str())
                && doc.pointer("/payload/interruptId").and_then(Value::as_str)
                    == Some(interrupt_id.as_str())
        };
        if super::log::await_event(s, &run, wait, resolved).await {
            if let Some(now) = super::support::find_run(s, &run_id).await {
                status = phase(&super::view::fresh_run(s, &now).await);
            }
        } else {
            tracing::info!(namespace = %ns, run = %run.name_any(), node = node_id,
                "the answer is stored but its resolution was not recorded within rest.interruptRecordWaitSeconds; answering 200 (the run resumes when its worker starts)");
        }
    }
    Ok(RunStatusResponse {
        run_id,
        node_id: Some(node_id.to_owned()),
        status,
    })
}

/// The interrupt the Run's status shows waiting at `node_id`.
/// Whether `answers` (the Run's with a new one appended) decide the interrupt pending at
/// `node_id`, so the run resumes: a vote that leaves a quorum undecided resumes nothing, nor
/// does any answer to a paused run.
fn resumes(run: &Run, node_id: &str, answers: &[InterruptAnswer]) -> bool {
    run.spec.pause.is_none()
        && pending_at(run, node_id).is_some_and(|p| quorum::decided(p, answers))
}

/// Whether the interrupt at `node_id` is still being recorded (not answerable yet).
fn recording_at(run: &Run, node_id: &str) -> bool {
    !phase(run).is_terminal()
        && run
            .status
            .as_ref()
            .is_some_and(|s| s.recording_interrupts.iter().any(|p| p.node_id == node_id))
}

fn pending_at<'a>(run: &'a Run, node_id: &str) -> Option<&'a PendingInterrupt> {
    run.status
        .as_ref()?
        .pending_interrupts
        .iter()
        .find(|p| p.node_id == node_id)
}

/// The resolve token of `POST /v1/interrupts/{token}`, verified, and its run (extractor).
/// It runs before the body is read: a request with a token this host did not sign learns
/// nothing else, not even whether its body would do.
pub struct ResolveToken {
    claims: TokenClaims,
    run: Arc<Run>,
}

impl FromRequestParts<RestState> for ResolveToken {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, s: &RestState) -> Result<Self, ApiError> {
        let Path(token) = Path::<String>::from_request_parts(parts, s)
            .await
            .map_err(|e| ApiError::validation(format!("the token in the path: {e}")))?;
        let (claims, run) = verified(s, &token).await?;
        if claims.intent == TokenIntent::Inspect {
            return Err(ApiError::forbidden(
                "this token may only inspect the interrupt (intent inspect); resolve it with a \
                 resolve token, or at POST /v1/runs/{runId}/interrupts/{nodeId} with a bearer token",
            ));
        }
        Ok(ResolveToken { claims, run })
    }
}

/// A token's claims and its run, or the error the spec gives: 404 for anything this host did
/// not sign (malformed, unknown key, bad signature) or whose run is gone; 410 when expired.
async fn verified(s: &RestState, token: &str) -> Result<(TokenClaims, Arc<Run>), ApiError> {
    let unknown = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "interrupt_not_found",
            "no pending interrupt answers to this token",
        )
    };
    let Some(keys) = token_keys(s)? else {
        return Err(unknown());
    };
    let claims = match keys.verify(token, time::OffsetDateTime::now_utc()) {
        Ok(c) => c,
        Err(TokenError::Expired(c)) => {
            return Err(ApiError::new(
                StatusCode::GONE,
                "interrupt_expired",
                format!(
                    "this token expired at {}; read the run again for a new one",
                    c.expires_at
                ),
            ));
        }
        Err(_) => return Err(unknown()),
    };
    let run = find_run(s, &claims.run_id).await.ok_or_else(unknown)?;
    Ok((claims, run))
}

/// 409: the token's interrupt is no longer pending (resolved, or its run ended).
fn invalidated(run: &Run) -> ApiError {
    ApiError::conflict(
        "interrupt_already_resolved",
        "the interrupt this token names is no longer pending: it was resolved, or its run ended",
    )
    .with_details(json!({"runStatus": phase(run).as_str()}))
}

/// `GET /v1/interrupts/{token}` body: the pending interrupt the token names.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InspectedInterrupt {
    pub run_id: String,
    pub node_id: String,
    pub interrupt_id: String,
    /// `approval`, `clarification`, `external-event` or `custom`.
    pub kind: String,
    /// The interrupt's key (`suspend-request.schema.json`; default `{nodeId}/interrupt`).
    pub key: String,
    /// What the interrupt asks (questions, actions, title, reason; an external event's
    /// correlation).
    #[schema(value_type = Object)]
    pub data: Value,
    /// The run's status.
    pub status: String,
    /// When the token stops working (RFC 3339).
    pub expires_at: String,
    /// `resolve` (this token may answer) or `inspect` (read only).
    #[schema(value_type = String)]
    pub intent: TokenIntent,
}

/// Inspect the interrupt a signed token names (no bearer: the token is the credential).
#[utoipa::path(
    get, path = "/v1/interrupts/{token}",
    operation_id = "inspectInterruptByToken",
    params(("token" = String, Path, description = "the signed token of `RunSnapshot.interrupt.interruptToken`")),
    responses(
        (status = 200, body = InspectedInterrupt),
        (status = 404, body = ErrorBody, description = "interrupt_not_found: not a token of this host, or its run is gone"),
        (status = 409, body = ErrorBody, description = "interrupt_already_resolved"),
        (status = 410, body = ErrorBody, description = "interrupt_expired")
    ),
    security(())
)]
pub async fn inspect_interrupt_by_token(
    State(s): State<RestState>,
    Path(token): Path<String>,
) -> Result<Json<InspectedInterrupt>, ApiError> {
    let (claims, cached) = verified(&s, &token).await?;
    let run = super::view::fresh_run(&s, &cached).await;
    let pending = pending_of(&run, &claims).ok_or_else(|| invalidated(&run))?;
    let mut data = serde_json::to_value(&pending).unwrap_or_default();
    if let Some(m) = data.as_object_mut() {
        for k in ["interruptId", "nodeId", "kind", "key"] {
            m.remove(k);
        }
    }
    Ok(Json(InspectedInterrupt {
        run_id: claims.run_id,
        key: pending
            .key
            .clone()
            .unwrap_or_else(|| gate::default_key(&pending.node_id)),
        node_id: pending.node_id,
        interrupt_id: pending.interrupt_id,
        kind: pending.kind,
        data,
        status: phase(&run).as_str().to_owned(),
        expires_at: claims.expires_at,
        intent: claims.intent,
    }))
}

/// The interrupt `claims` names if it is still pending and unanswered on `run`.
fn pending_of(run: &Run, claims: &TokenClaims) -> Option<PendingInterrupt> {
    if phase(run).is_terminal() {
        return None;
    }
    run.status
        .as_ref()?
        .pending_interrupts
        .iter()
        .find(|p| p.interrupt_id == claims.interrupt_id && p.node_id == claims.node_id)
        .filter(|p| !quorum::decided(p, &run.spec.answers))
        .cloned()
}

/// Resolve the interrupt a signed token names (no bearer: the token is the credential).
#[utoipa::path(
    post, path = "/v1/interrupts/{token}",
    operation_id = "resolveInterruptByToken",
    request_body = ResolveInterruptRequest,
    params(
        ("token" = String, Path, description = "the signed token of `RunSnapshot.interrupt.interruptToken`"),
        ("Idempotency-Key" = Option<String>, Header, description = "same key and body → the first answer again; same key, other body → 409")
    ),
    responses(
        (status = 200, body = RunStatusResponse),
        (status = 400, body = ErrorBody, description = "validation_error: the body does not fit the interrupt"),
        (status = 403, body = ErrorBody, description = "forbidden: an inspect-only token"),
        (status = 404, body = ErrorBody, description = "interrupt_not_found: not a token of this host, or its run is gone"),
        (status = 409, body = ErrorBody, description = "interrupt_already_resolved, idempotency_key_mismatch, idempotency_in_flight"),
        (status = 410, body = ErrorBody, description = "interrupt_expired"),
        (status = 422, body = ErrorBody, description = "correlation_mismatch: the external event does not carry the interrupt's correlation"),
        (status = 503, body = ErrorBody, description = "unavailable: the run's status does not show the external event's correlation yet (retry)")
    ),
    security(())
)]
pub async fn resolve_interrupt_by_token(
    State(s): State<RestState>,
    headers: HeaderMap,
    ResolveToken {
        claims,
        run: cached,
    }: ResolveToken,
    body: Sent<ResolveInterruptRequest>,
) -> Result<Response, ApiError> {
    let req = body.value;
    let ns = cached.namespace().unwrap_or_default();
    let scope = Scope {
        namespace: &ns,
        operation: op::RESOLVE_INTERRUPT_BY_TOKEN,
        principal: CALLBACK_TOKEN_PRINCIPAL,
    };
    let parts: [&[u8]; 3] = [
        claims.run_id.as_bytes(),
        claims.interrupt_id.as_bytes(),
        body.canonical.as_bytes(),
    ];
    idempotent(&s, &headers, scope, &parts, || async {
        let run = super::view::fresh_run(&s, &cached).await;
        if pending_of(&run, &claims).is_none() {
            if redelivered(
                &run,
                &claims.node_id,
                Some(&claims.interrupt_id),
                &req.resume_value,
            ) {
                let status = phase(&run);
                return Ok((
                    StatusCode::OK,
                    Json(RunStatusResponse {
                        run_id: claims.run_id.clone(),
                        node_id: Some(claims.node_id.clone()),
                        status,
                    }),
                )
                    .into_response());
            }
            return Err(invalidated(&run));
        }
        let st = answer(
            &s,
            &cached,
            &claims.node_id,
            Some(&claims.interrupt_id),
            req,
            CALLBACK_TOKEN_PRINCIPAL,
        )
        .await?;
        Ok((StatusCode::OK, Json(st)).into_response())
    })
    .await
}

/// `409 interrupt_already_resolved`: the one code for an interrupt that was answered, or whose
/// run ended while it waited (v2 `errors.md` §One code per state; the cascade-cancel profile
/// accepts it for a child's interrupt its parent's cancel invalidated).
fn already_resolved(run: &Run, message: String) -> ApiError {
    ApiError::conflict("interrupt_already_resolved", message)
        .with_details(json!({"runStatus": phase(run).as_str()}))
}

/// Whether `resume_value` delivers again the external event an answer of the Run already
/// holds for `node_id` (and interrupt `interrupt`, when named): the same `eventId`
/// (`correlation::redelivers`).
fn redelivered(run: &Run, node_id: &str, interrupt: Option<&str>, resume_value: &Value) -> bool {
    run.spec.answers.iter().any(|a| {
        a.node_id.as_deref() == Some(node_id)
            && interrupt.is_none_or(|id| a.interrupt_id == id)
            && redelivers(a.value.as_ref(), resume_value)
    })
}

/// The answer to append for the Run's interrupt at `node_id` (`None`: the request delivers
/// again the external event that answered it, so nothing is appended), or the error the spec
/// gives.
fn answer_for(
    run: &Run,
    run_id: &str,
    node_id: &str,
    expect: Option<&str>,
    req: ResolveInterruptRequest,
) -> Result<Option<InterruptAnswer>, ApiError> {
    let already = || {
        already_resolved(
            run,
            format!("the interrupt at node {node_id:?} of run {run_id} is already answered"),
        )
    };
    // Several branches may wait at once (and others still run): any pending one can be
    // answered. A node waits on one interrupt at a time; an earlier one it was answered for
    // no longer blocks a new one.
    let pending = pending_at(run, node_id)
        .filter(|_| !phase(run).is_terminal())
        .cloned();
    let Some(pending) = pending else {
        // The event that answered it, again: nothing to append. Answered before (the worker
        // may have resolved it since): 409; still being recorded: 503; never waited: 404.
        if redelivered(run, node_id, expect, &req.resume_value) {
            return Ok(None);
        }
        if recording_at(run, node_id) {
            return Err(ApiError::unavailable(
                format!(
                    "the interrupt at node {node_id:?} of run {run_id} is still being recorded \
                     (its approval or questions are not in the run's status yet); retry shortly"
                ),
                Duration::from_secs(1),
            ));
        }
        if run
            .spec
            .answers
            .iter()
            .any(|a| a.node_id.as_deref() == Some(node_id))
        {
            return Err(already());
        }
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "interrupt_not_found",
            format!("run {run_id} has no interrupt waiting at node {node_id:?}"),
        )
        .with_details(json!({"runStatus": phase(run).as_str()})));
    };
    // A quorum approval takes votes until they decide it (`quorum::decided`).
    if quorum::decided(&pending, &run.spec.answers)
        || expect.is_some_and(|id| id != pending.interrupt_id)
    {
        if redelivered(run, node_id, expect, &req.resume_value) {
            return Ok(None);
        }
        return Err(already());
    }
    if pending.is_external_event() && pending.correlation.is_none() {
        // Unchecked, a wrong event would be recorded, refused by the worker and block the
        // right one: the status lacks the correlation (its CRD predates the field, or the
        // wait is still being recorded).
        return Err(ApiError::unavailable(
            "this run's status does not show the correlation its external event must carry \
             yet; retry shortly (if this persists, apply this release's CRDs: \
             status.pendingInterrupts[].correlation)",
            Duration::from_secs(2),
        ));
    }
    build_answer(&pending, req).map(Some)
}

/// The answer to append for `pending`, or 400 naming what is wrong.
pub fn build_answer(
    pending: &PendingInterrupt,
    req: ResolveInterruptRequest,
) -> Result<InterruptAnswer, ApiError> {
    InterruptAnswer::from_user_input(
        pending.interrupt_id.clone(),
        Some(pending),
        Reply::ResumeValue(req.resume_value),
        req.comment,
        req.content_trust,
    )
    .map_err(|e| {
        let field = e.field();
        match e {
            AnswerError::Mismatch(AnswerMismatch::Questions {
                known,
                unknown,
                missing,
                ..
            }) => ApiError::validation(format!(
                "resumeValue.answers must answer exactly the questions {}",
                known.join(", ")
            ))
            .with_details(json!({"field": field, "missing": missing, "unknown": unknown})),
            // The event is well formed but not the one awaited: 422 (interrupt-profiles.md),
            // naming the keys; nothing is recorded and the run keeps waiting.
            AnswerError::Mismatch(AnswerMismatch::Correlation { keys, .. }) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                CORRELATION_MISMATCH,
                format!(
                    "the event does not match the interrupt's correlation: resumeValue (or \
                     resumeValue.eventPayload) must carry {} with the values the interrupt \
                     waits for",
                    keys.join(", ")
                ),
            )
            .with_details(json!({"field": field, "keys": keys})),
            AnswerError::NotADecision { ref allowed }
            | AnswerError::ActionNotOffered { ref allowed, .. } => {
                let allowed = allowed.clone();
                ApiError::validation(e.to_string())
                    .with_details(json!({"field": field, "allowed": allowed}))
            }
            e => ApiError::validation(e.to_string()).with_details(json!({"field": field})),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use openwop_protocol::run::{PendingInterrupt, PendingQuestion};
    use serde_json::Value;

    fn pending(kind: &str, qs: &[&str]) -> PendingInterrupt {
        serde_json::from_value(json!({
            "interruptId": "i1", "nodeId": "n", "kind": kind,
            "questions": qs.iter().map(|q| json!({"id": q, "question": "?"})).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    fn req(v: Value, trust: Option<&str>) -> ResolveInterruptRequest {
        ResolveInterruptRequest {
            resume_value: v,
            content_trust: trust.map(str::to_owned),
            comment: None,
        }
    }

    #[test]
    fn approvals_take_the_spec_actions_and_record_trust() {
        let p = pending("approval", &[]);
        for (v, want) in [
            (json!({"action": "accept"}), true),
            (json!({"action": "reject"}), false),
            (json!({"decision": "approved"}), true),
        ] {
            assert_eq!(
                build_answer(&p, req(v.clone(), None)).unwrap().approved,
                Some(want),
                "{v}"
            );
        }
        let a = build_answer(&p, req(json!({"action": "accept"}), Some("untrusted"))).unwrap();
        assert_eq!(a.content_trust.as_deref(), Some("untrusted"));
        // The suite's `{action: "maybe"}`: 400 naming the actions the gate offers.
        for v in [
            json!({"action": "maybe"}),
            json!(true),
            json!({"region": "eu"}),
        ] {
            let e = build_answer(&p, req(v.clone(), None)).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{v}");
            assert_eq!(e.body.error, "validation_error");
            assert_eq!(
                e.body.details.as_ref().unwrap()["allowed"],
                json!(["accept", "reject"]),
                "{v}"
            );
        }
        let e = build_answer(&p, req(json!({"action": "accept"}), Some("maybe"))).unwrap_err();
        assert!(e.body.message.contains("contentTrust"), "{e}");
    }

    #[test]
    fn clarification_answers_must_match_the_questions() {
        let p = pending("clarification", &["region", "tier"]);
        let a = build_answer(
            &p,
            req(json!({"answers": {"region": "eu", "tier": "gold"}}), None),
        )
        .unwrap();
        assert_eq!(a.value, Some(json!({"region": "eu", "tier": "gold"})));
        assert_eq!(a.interrupt_id, "i1");
        let e = build_answer(
            &p,
            req(json!({"answers": {"region": "eu", "zone": 1}}), None),
        )
        .unwrap_err();
        assert_eq!(e.body.details.as_ref().unwrap()["missing"], json!(["tier"]));
        assert_eq!(e.body.details.as_ref().unwrap()["unknown"], json!(["zone"]));
        let e = build_answer(&p, req(json!({"region": "eu"}), None)).unwrap_err();
        assert!(e.body.message.contains("\"answers\""), "{e}");
        let _ = PendingQuestion {
            id: String::new(),
            question: String::new(),
        };
    }

    fn run(phase: &str, pending: Value, answers: Value) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {"workflowRef": {"name": "w"}, "answers": answers},
            "status": {"phase": phase, "pendingInterrupts": pending},
        }))
        .unwrap()
    }

    /// The spec's codes (INT): nothing waiting → 404 interrupt_not_found; answered (still
    /// pending, or resolved since) → 409 interrupt_already_resolved.
    #[test]
    fn not_waiting_is_404_and_answered_is_409() {
        let gate = json!([{"interruptId": "i1", "nodeId": "gate", "kind": "approval"}]);
        let accept = || req(json!({"action": "accept"}), None);
        let code = |r: &Run, node: &str| {
            answer_for(r, "run-1", node, None, accept())
                .map(|a| a.unwrap().node_id)
                .map_err(|e| (e.status.as_u16(), e.body.error))
        };
        let waiting = run("waiting-approval", gate.clone(), json!([]));
        assert_eq!(code(&waiting, "gate"), Ok(Some("gate".into())));
        assert_eq!(
            code(&waiting, "no-such-node"),
            Err((404, "interrupt_not_found".into()))
        );
        let answered = run(
            "waiting-approval",
            gate,
            json!([{"interruptId": "i1", "action": "accept", "nodeId": "gate"}]),
        );
        assert_eq!(
            code(&answered, "gate"),
            Err((409, "interrupt_already_resolved".into()))
        );
        let resolved = run(
            "completed",
            json!([]),
            json!([{"interruptId": "i1", "action": "accept", "nodeId": "gate"}]),
        );
        assert_eq!(
            code(&resolved, "gate"),
            Err((409, "interrupt_already_resolved".into()))
        );
        assert_eq!(
            code(&run("completed", json!([]), json!([])), "gate"),
            Err((404, "interrupt_not_found".into()))
        );
    }

    /// An external event is checked against the correlation the status shows: 422 naming
    /// the keys; without a correlation in status (CRDs predating the field) 503, never an
    /// unchecked answer.
    #[test]
    fn an_external_event_must_correlate_and_is_never_taken_unchecked() {
        let wait = |correlation: Value| {
            let mut p = json!({"interruptId": "i1", "nodeId": "w", "kind": "external-event"});
            if !correlation.is_null() {
                p["correlation"] = correlation;
            }
            run("waiting-external", json!([p]), json!([]))
        };
        let code = |r: &Run, v: Value| {
            answer_for(r, "run-1", "w", None, req(v, None))
                .map(|a| a.unwrap().value)
                .map_err(|e| (e.status.as_u16(), e.body.error, e.body.details))
        };
        let r = wait(json!({"orderId": "o-1"}));
        assert_eq!(
            code(&r, json!({"orderId": "o-1", "more": true})),
            Ok(Some(json!({"orderId": "o-1", "more": true})))
        );
        assert_eq!(
            code(&r, json!({"orderId": "o-2"})),
            Err((
                422,
                "correlation_mismatch".into(),
                Some(json!({"field": "resumeValue", "keys": ["orderId"]}))
            ))
        );
        let pruned = wait(Value::Null);
        assert_eq!(code(&pruned, json!({"orderId": "o-1"})).unwrap_err().0, 503);

        // Idempotent ingestion: once an event answered it, the same eventId again (either
        // form) appends nothing and is no error, while a new event is 409.
        let first = json!({"orderId": "o-1", "eventId": "evt-1"});
        let answered = run(
            "running",
            json!([]),
            json!([{"interruptId": "i1", "nodeId": "w", "value": first}]),
        );
        let again = |v: Value| {
            answer_for(&answered, "run-1", "w", None, req(v, None))
                .map(|a| a.is_none())
                .map_err(|e| (e.status.as_u16(), e.body.error))
        };
        assert_eq!(again(first.clone()), Ok(true));
        assert_eq!(
            again(json!({"eventPayload": {"eventId": "evt-1"}})),
            Ok(true)
        );
        assert_eq!(
            again(json!({"orderId": "o-1", "eventId": "evt-2"})),
            Err((409, "interrupt_already_resolved".into()))
        );
        assert_eq!(
            again(json!({"orderId": "o-1"})),
            Err((409, "interrupt_already_resolved".into()))
        );
    }

    /// A quorum gate takes votes (200, the voter kept with the answer) until they decide it;
    /// then 409 like any answered interrupt. A non-string voter is 400.
    #[test]
    fn a_quorum_gate_takes_votes_until_they_decide() {
        let gate = json!([{"interruptId": "i1", "nodeId": "gate", "kind": "approval",
                           "requiredApprovals": 3, "rejectionPolicy": "majority"}]);
        let vote = |v: &str| req(json!({"action": "accept", "voter": v}), None);
        let code = |answers: Value, v: &str| {
            answer_for(
                &run("waiting-approval", gate.clone(), answers),
                "run-1",
                "gate",
                None,
                vote(v),
            )
            .map(|a| a.unwrap().value)
            .map_err(|e| (e.status.as_u16(), e.body.error))
        };
        let cast = |v: &str| json!({"interruptId": "i1", "nodeId": "gate", "action": "accept", "value": {"voter": v}});
        assert_eq!(code(json!([]), "a1"), Ok(Some(json!({"voter": "a1"}))));
        assert_eq!(
            code(json!([cast("a1"), cast("a1")]), "a2"),
            Ok(Some(json!({"voter": "a2"})))
        );
        assert_eq!(
            code(json!([cast("a1"), cast("a2"), cast("a3")]), "a4"),
            Err((409, "interrupt_already_resolved".into()))
        );
        let bad = answer_for(
            &run("waiting-approval", gate.clone(), json!([])),
            "run-1",
            "gate",
            None,
            req(json!({"action": "accept", "voter": 7}), None),
        )
        .unwrap_err();
        assert_eq!(bad.status.as_u16(), 400);
        assert!(bad.body.message.contains("voter"), "{}", bad.body.message);
    }

    /// The quorum gate's recording, vote by vote: a status may be written after any of its
    /// events, and each of three voters may send their vote at any of those moments (a vote
    /// refused with 503 while the gate is being recorded is sent again at the next one, as
    /// a client honouring Retry-After does). Whatever the moments, the run resumes only on
    /// the third accept: never decided by fewer votes than the gate requires.
    #[test]
    fn votes_at_every_moment_of_a_quorum_gates_recording_decide_only_at_the_quorum() {
        use openwop_protocol::run::nodes::APPROVAL_GATE_TYPE_ID;
        use openwop_protocol::run::projection::Projection;
        let g = gate::Gate::of(
            "gate",
            APPROVAL_GATE_TYPE_ID,
            &json!({"title": "Ship?", "requiredApprovals": 3}),
        )
        .unwrap();
        let w = g.wait("gate", "i1", "2026-12-07T10:00:00Z");
        let mut events = vec![
            ("node.started", json!({"nodeId": "gate"})),
            (
                "node.suspended",
                serde_json::to_value(&w.suspended).unwrap(),
            ),
            (
                "interrupt.requested",
                serde_json::to_value(&w.requested).unwrap(),
            ),
        ];
        events.push((
            "approval.requested",
            serde_json::to_value(w.approval.as_ref().unwrap()).unwrap(),
        ));
        let prefixes = events.len() + 1;
        let status_after = |k: usize| {
            let mut p = Projection::default();
            for (seq, (ty, payload)) in events[..k].iter().enumerate() {
                p.apply(
                    &json!({"type": ty, "sequence": seq, "nodeId": "gate", "payload": payload}),
                );
            }
            p
        };
        let mut tried = 0;
        // The moment (prefix) at which each of the three voters first sends their vote.
        for a in 0..prefixes {
            for b in a..prefixes {
                for c in b..prefixes {
                    let mut want = [a, b, c];
                    let mut answers: Vec<InterruptAnswer> = Vec::new();
                    for k in 0..prefixes {
                        let mut r = run("running", json!([]), json!([]));
                        r.status.as_mut().unwrap().set_projection(status_after(k));
                        r.spec.answers = answers.clone();
                        for (voter, at) in want.iter_mut().enumerate() {
                            if *at != k {
                                continue;
                            }
                            tried += 1;
                            let v = req(
                                json!({"action": "accept", "voter": format!("v{voter}")}),
                                None,
                            );
                            match answer_for(&r, "run-1", "gate", None, v) {
                                Ok(Some(answer)) => {
                                    answers.push(answer.answered("sa", "2026-12-07T10:01:00Z"));
                                    r.spec.answers = answers.clone();
                                    assert_eq!(
                                        resumes(&r, "gate", &answers),
                                        answers.len() >= 3,
                                        "votes first sent at {:?}: {} vote(s) in after event {k}",
                                        [a, b, c],
                                        answers.len()
                                    );
                                }
                                // Not suspended yet (404), or still being recorded (503): sent
                                // again at the next moment.
                                Err(e) if matches!(e.status.as_u16(), 404 | 503) => {
                                    assert_eq!(
                                        e.status == StatusCode::SERVICE_UNAVAILABLE,
                                        k == 2 || k == 3,
                                        "after event {k}: {e}"
                                    );
                                    *at = k + 1;
                                }
                                other => panic!("after event {k}: {other:?}"),
                            }
                        }
                    }
                    assert_eq!(
                        answers.len(),
                        3,
                        "every voter got their vote in once the gate was recorded"
                    );
                }
            }
        }
        assert!(tried >= 35, "{tried}");
    }
}
