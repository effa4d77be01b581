//! `POST /v1/host/sample/test/llm-prompt-wrap` (`ai-envelope.md` §"Trust boundary"): the
//! text a downstream LLM node puts into its prompt for a run event — untrusted content
//! inside `<UNTRUSTED …>` markers, by the protocol crate's one wrap
//! ([`openwop_protocol::seams::PromptWrapRequest::prompt`]).

use openwop_protocol::seams::PromptWrapRequest;
use serde_json::{Value, json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::seam::{SeamCaller, SeamJson};
use crate::rest::{ApiError, ErrorBody, Json, RestState};

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
    _caller: SeamCaller,
    SeamJson(req): SeamJson<PromptWrapRequest>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({"prompt": req.prompt()?})))
}
