//! `POST /v1/host/sample/test/llm-prompt-wrap` (`ai-envelope.md` §"Trust boundary"): the
//! text a downstream LLM node puts into its prompt for a run event — untrusted content
//! inside `<UNTRUSTED …>` markers, by the protocol crate's one wrap
//! ([`openwop_protocol::seams::PromptWrapRequest::prompt`]).

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use openwop_protocol::seams::PromptWrapRequest;
use serde_json::{Value, json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{SeamCaller, SeamError, body};
use crate::rest::{ErrorBody, RestState};

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new().routes(routes!(wrap))
}

/// Wrap a payload for a prompt (conformance-only test seam).
#[utoipa::path(
    post, path = "/v1/host/sample/test/llm-prompt-wrap",
    request_body(content = Object, description = "{payload, contentTrust?: trusted|untrusted, eventType?, source?, attributes?: {name: string|number|boolean}}"),
    responses(
        (status = 200, description = "{prompt}", body = Object),
        (status = 400, description = "unusable request: {error: {code, message}}"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
async fn wrap(
    State(s): State<RestState>,
    _caller: SeamCaller,
    raw: Body,
) -> Result<Json<Value>, SeamError> {
    let req: PromptWrapRequest = body(&s, raw).await?;
    Ok(Json(json!({"prompt": req.prompt()?})))
}
