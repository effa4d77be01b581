//! The API's one JSON body extractor and response wrapper ([`Json`]): axum's `Json`, with
//! every rejection answered as an [`ApiError`] (what is wrong, where, what to do) instead of
//! axum's plain text — 415 for a body declared as something other than JSON, 413 over
//! `rest.maxBodyBytes`, 400 for a body that is not JSON or does not fit the endpoint's
//! request type. A body sent without `Content-Type` is read as JSON: the API always took
//! such bodies, and OpenWOP clients exist that omit the header.

use axum::extract::rejection::{BytesRejection, FailedToBufferBody, JsonRejection};
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::error::ApiError;
use super::state::RestState;

/// A JSON request body (extractor) or response body.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T> FromRequest<RestState> for Json<T>
where
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request(mut req: Request, state: &RestState) -> Result<Self, Self::Rejection> {
        let endpoint = format!("{} {}", req.method(), req.uri().path());
        assume_json_when_undeclared(&mut req);
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Json(v)),
            Err(r) => Err(rejection(r, &endpoint, state.config.rest.max_body_bytes)),
        }
    }
}

/// A request without `Content-Type` is taken as JSON; a declared non-JSON type is still refused.
fn assume_json_when_undeclared(req: &mut Request) {
    use axum::http::{HeaderValue, header::CONTENT_TYPE};
    if !req.headers().contains_key(CONTENT_TYPE) {
        req.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
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
        let e = e.to_string();
        // A closed body names the field it does not know, so the caller can drop it.
        let field = unknown_field(&e).unwrap_or("body");
        ApiError::validation(format!(
            "the body of {endpoint} does not fit its request type: {e}; the request schemas \
             are in /v1/openapi.json"
        ))
        .with_details(json!({ "field": field }))
    })
}

/// The field serde names in its "unknown field `x`, expected ..." refusal of a closed body.
fn unknown_field(serde_message: &str) -> Option<&str> {
    serde_message
        .strip_prefix("unknown field `")?
        .split_once('`')
        .map(|(field, _)| field)
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::header::CONTENT_TYPE;

    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Req {
        workflow_id: String,
    }

    /// axum's default body limit (no `DefaultBodyLimit` layer in these tests).
    const MAX: usize = 2 * 1024 * 1024;

    /// What the API answers when `body`, sent as `content_type`, is refused, as (status,
    /// JSON body).
    async fn refused(content_type: Option<&str>, body: String) -> (StatusCode, Value) {
        let mut req = Request::post("/v1/runs");
        if let Some(ct) = content_type {
            req = req.header(CONTENT_TYPE, ct);
        }
        let mut req = req.body(Body::from(body)).unwrap();
        assume_json_when_undeclared(&mut req);
        let r = axum::Json::<Req>::from_request(req, &())
            .await
            .expect_err("refused");
        let resp = rejection(r, "POST /v1/runs", MAX).into_response();
        let status = resp.status();
        assert_eq!(resp.headers()[CONTENT_TYPE], "application/json");
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn every_refused_body_is_an_api_error_naming_what_to_do() {
        let json = Some("application/json");
        let (status, body) = refused(Some("text/plain"), r#"{"workflowId": "w"}"#.into()).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(body["error"], "unsupported_media_type");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("Content-Type: application/json"),
            "{body}"
        );

        let (status, body) = refused(json, r#"{"workflowId": "#.into()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["error"], "validation_error");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .starts_with("the body of POST /v1/runs is not valid JSON"),
            "{body}"
        );

        let (status, body) = refused(json, r#"{"workflowId": 7}"#.into()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "never axum's 422");
        let msg = body["message"].as_str().unwrap();
        assert!(
            msg.contains("workflowId") && msg.contains("/v1/openapi.json"),
            "{body}"
        );
        assert_eq!(body["details"], json!({"field": "body"}));

        let big = format!(r#"{{"workflowId": "{}"}}"#, "x".repeat(MAX));
        let (status, body) = refused(json, big).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(body["error"], "payload_too_large");
        assert_eq!(body["details"]["maxBytes"], MAX);
        // Exactly the error envelope's keys.
        assert!(
            body.as_object()
                .unwrap()
                .keys()
                .all(|k| ["error", "message", "details"].contains(&k.as_str()))
        );
    }

    #[tokio::test]
    async fn a_body_without_content_type_is_read_as_json() {
        let mut req = Request::post("/v1/runs")
            .body(Body::from(r#"{"workflowId": "w"}"#))
            .unwrap();
        assume_json_when_undeclared(&mut req);
        let axum::Json(r) = axum::Json::<Req>::from_request(req, &()).await.unwrap();
        assert_eq!(r.workflow_id, "w");
        // Still refused with a specific error when the body is not JSON.
        let (status, body) = refused(None, "workflowId=w".into()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["error"], "validation_error");
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    #[allow(dead_code)]
    struct Closed {
        workflow_id: String,
    }

    #[test]
    fn a_closed_body_names_the_field_it_does_not_know() {
        let e = from_value::<Closed>(&json!({"workflowId": "w", "colour": 1}), "POST /v1/runs")
            .unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.body.details, Some(json!({"field": "colour"})));
        assert!(e.body.message.contains("unknown field `colour`"), "{e}");
    }

    #[test]
    fn a_parsed_body_of_the_wrong_shape_is_refused_like_an_unread_one() {
        let e = from_value::<Req>(&json!({"workflowId": ["w"]}), "POST /v1/runs").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.body.error, "validation_error");
        assert!(e.body.message.contains("POST /v1/runs"), "{e}");
    }
}
