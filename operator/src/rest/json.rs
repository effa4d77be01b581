//! The API's one JSON body extractor and response wrapper ([`Json`]): axum's `Json`, with
//! every rejection answered as an [`ApiError`] (what is wrong, where, what to do) instead of
//! axum's plain text — 415 without a JSON content type, 413 over `rest.maxBodyBytes`, 400
//! for a body that is not JSON or does not fit the endpoint's request type.

use axum::extract::rejection::{BytesRejection, FailedToBufferBody, JsonRejection};
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{ApiError, RestState};

/// A JSON request body (extractor) or response body.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T> FromRequest<RestState> for Json<T>
where
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &RestState) -> Result<Self, Self::Rejection> {
        let endpoint = format!("{} {}", req.method(), req.uri().path());
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Json(v)),
            Err(r) => Err(rejection(r, &endpoint, state.config.rest.max_body_bytes)),
        }
    }
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// axum's reason for refusing a JSON body, as the API's error.
fn rejection(r: JsonRejection, endpoint: &str, max: usize) -> ApiError {
    // axum's text is "<what axum tried>: <serde's reason, with the path inside the body>".
    let text = r.body_text();
    let reason = text.split_once(": ").map_or(text.as_str(), |(_, r)| r);
    match r {
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("{endpoint} takes a JSON body: send it with `Content-Type: application/json`"),
        )
        .with_details(json!({"contentType": "application/json"})),
        JsonRejection::BytesRejection(BytesRejection::FailedToBufferBody(
            FailedToBufferBody::LengthLimitError(_),
        )) => ApiError::payload_too_large(max),
        JsonRejection::JsonSyntaxError(_) => ApiError::validation(format!(
            "the body of {endpoint} is not valid JSON ({reason}); send one JSON object"
        ))
        .with_details(json!({"field": "body"})),
        JsonRejection::JsonDataError(_) => ApiError::validation(format!(
            "the body of {endpoint} does not fit its request type: {reason}; the request \
             schemas are in /v1/openapi.json"
        ))
        .with_details(json!({"field": "body"})),
        _ => ApiError::validation(format!(
            "the body of {endpoint} could not be read ({reason}); send it again"
        ))
        .with_details(json!({"field": "body"})),
    }
}

/// `raw` (a body already read as JSON) as `T`, refused like a body [`Json`] could not
/// read: for handlers that need the body as sent as well (e.g. to hash it).
pub fn from_value<T: DeserializeOwned>(raw: &Value, endpoint: &str) -> Result<T, ApiError> {
    T::deserialize(raw).map_err(|e| {
        ApiError::validation(format!(
            "the body of {endpoint} does not fit its request type: {e}; the request schemas \
             are in /v1/openapi.json"
        ))
        .with_details(json!({"field": "body"}))
    })
}
