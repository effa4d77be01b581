//! The one error type of the operator's HTTP API, REST and conformance seams alike: the REST
//! body (`schemas/error-envelope.schema.json`) is exactly `{error, message, details}`, with
//! the spec's codes (`spec/v1/rest-endpoints.md` §Error response shape); a conformance seam's
//! refusal of its request is `{"error": {"code", "message"}}` (`host-sample-test-seams.md`),
//! chosen by [`ErrorShape`].

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

/// The wire body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// Machine-readable code (`unauthenticated`, `forbidden`, `not_found`,
    /// `validation_error`, `conflict`, `rate_limited`, `internal_error`, ...).
    pub error: String,
    /// What went wrong and what to do, for a person.
    pub message: String,
    /// Error-specific context (field paths, retry hints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
}

/// The wire shape an [`ApiError`] answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorShape {
    /// `{error, message, details?}`: every REST endpoint, and the seams' auth and
    /// availability errors.
    #[default]
    Rest,
    /// `{"error": {"code", "message"}}`: a conformance seam refusing its request, as the
    /// spec's seams answer (the official suite reads `error.code`).
    Seam,
}

/// An error response: status, body and (for 429/503) `Retry-After`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    /// Boxed: handlers return `Result<_, ApiError>` everywhere; a small error keeps them cheap.
    pub body: Box<ErrorBody>,
    pub retry_after: Option<Duration>,
    pub shape: ErrorShape,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: Box::new(ErrorBody {
                error: code.to_owned(),
                message: message.into(),
                details: None,
            }),
            retry_after: None,
            shape: ErrorShape::Rest,
        }
    }

    /// A conformance seam refusing its request: `{"error": {"code", "message"}}`.
    pub fn seam_refusal(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            shape: ErrorShape::Seam,
            ..Self::new(status, code, message)
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.body.details = Some(details);
        self
    }

    /// 401: no usable credentials.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
    }

    /// 403: authenticated, but RBAC does not allow the action.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404: the resource does not exist *or the caller cannot see it* (never leaks which).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 400: the request is malformed; `details` names the fields.
    pub fn validation(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "validation_error", message)
    }

    /// 413: the body is over `rest.maxBodyBytes`; `details.maxBytes` names the limit.
    pub fn payload_too_large(max: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the request body is larger than {max} bytes (rest.maxBodyBytes); send less"),
        )
        .with_details(serde_json::json!({ "maxBytes": max }))
    }

    /// 409.
    pub fn conflict(code: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// 429 with `Retry-After`; `details` carries the same delay in seconds (`retryAfter`) and
    /// milliseconds (`retryAfterMs`, `rest-endpoints.md` §429) and what the limit is
    /// counted over (`scope`: `tenant`, `route`, `global` or `key`).
    pub fn rate_limited(message: impl Into<String>, retry_after: Duration, scope: &str) -> Self {
        let secs = retry_after.as_secs().max(1);
        let mut e = Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", message).with_details(
            serde_json::json!({
                "retryAfter": secs,
                // Consistent with the header, which carries whole seconds.
                "retryAfterMs": secs * 1000,
                "scope": scope,
            }),
        );
        e.retry_after = Some(retry_after);
        e
    }

    /// 503 with `Retry-After`: a dependency (the Kubernetes API, JetStream) is unavailable.
    pub fn unavailable(message: impl Into<String>, retry_after: Duration) -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message);
        e.retry_after = Some(retry_after);
        e
    }

    /// Internal error (500); the message must already be free of secrets: callers pass
    /// their own wording, never a raw upstream body.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", message)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.body.error,
            self.body.message
        )
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = match self.shape {
            ErrorShape::Rest => (self.status, axum::Json(*self.body)).into_response(),
            ErrorShape::Seam => (
                self.status,
                axum::Json(serde_json::json!({
                    "error": {"code": self.body.error, "message": self.body.message}
                })),
            )
                .into_response(),
        };
        if let Some(d) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&d.as_secs().max(1).to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(e: ApiError) -> (StatusCode, Value) {
        let resp = e.into_response();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn one_error_type_answers_in_the_rest_or_the_seams_shape() {
        let (status, v) =
            body(ApiError::validation("bad").with_details(serde_json::json!({"field": "x"}))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            v,
            serde_json::json!({"error": "validation_error", "message": "bad", "details": {"field": "x"}})
        );
        let (status, v) = body(ApiError::seam_refusal(
            StatusCode::CONFLICT,
            "conflict",
            "taken",
        ))
        .await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(
            v,
            serde_json::json!({"error": {"code": "conflict", "message": "taken"}})
        );
    }
}
