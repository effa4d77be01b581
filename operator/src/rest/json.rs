//! The API's one JSON body extractor and response wrapper ([`Json`]): axum's `Json`, with
//! every rejection answered as an [`ApiError`] (what is wrong, where, what to do) instead of
//! axum's plain text — 415 for a body declared as something other than JSON, 413 over
//! `rest.maxBodyBytes`, 400 for a body that is not JSON or does not fit the endpoint's
//! request type. A body sent without `Content-Type` is read as JSON: the API always took
//! such bodies, and OpenWOP clients exist that omit the header.
//!
//! A mutation's body is read with [`Sent`]: the request type and, beside it, the body's
//! canonical form (RFC 8785), which is what an `Idempotency-Key` compares.

use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, FailedToBufferBody, JsonRejection};
use axum::extract::{FromRequest, MatchedPath, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use openwop_protocol::jcs;
use openwop_protocol::text::read_json;
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

    async fn from_request(req: Request, state: &RestState) -> Result<Self, Self::Rejection> {
        let (body, endpoint) = read_body(req, state, false).await?;
        Ok(Json(from_value(&body, &endpoint)?))
    }
}

/// A mutation's JSON body (extractor): read as the request type `T`, and kept in its
/// canonical form (RFC 8785 JCS), which the `Idempotency-Key` digest covers —
/// `idempotency.md` compares "a digest of the canonicalized request body", so a retry that
/// re-serializes the same body (other member order, other whitespace) is the same request,
/// and one that changes a value is not. An empty body, or `null`, reads as `{}`: the bodies
/// of cancel, pause and resume are optional. Refusals are [`Json`]'s, naming the field at fault.
#[derive(Debug, Clone)]
pub struct Sent<T> {
    pub value: T,
    /// The body's JCS form (`{}` for an empty body).
    pub canonical: String,
}

impl<T> FromRequest<RestState> for Sent<T>
where
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &RestState) -> Result<Self, Self::Rejection> {
        let (body, endpoint) = read_body(req, state, true).await?;
        Ok(Sent {
            value: from_value(&body, &endpoint)?,
            canonical: jcs::canonical(&body),
        })
    }
}

/// The body of `req` as JSON — refused with a specific [`ApiError`] over the size limit, for a
/// declared non-JSON type, or when it is not JSON — and the endpoint a refusal names. When
/// `optional`, an empty body or `null` reads as `{}`.
async fn read_body(
    req: Request,
    state: &RestState,
    optional: bool,
) -> Result<(Value, String), ApiError> {
    let endpoint = endpoint_of(&req);
    let max = state.config.rest.max_body_bytes;
    let req = assume_json_when_undeclared(req);
    let content_type = req.headers().get(CONTENT_TYPE).cloned();
    let raw = Bytes::from_request(req, state)
        .await
        .map_err(|r| rejection(JsonRejection::from(r), &endpoint, max))?;
    if optional && raw.iter().all(u8::is_ascii_whitespace) {
        return Ok((json!({}), endpoint));
    }
    // axum's reading of the bytes, for its content-type and syntax refusals.
    let mut again = Request::new(Body::from(raw));
    if let Some(ct) = content_type {
        again.headers_mut().insert(CONTENT_TYPE, ct);
    }
    let body = axum::Json::<Value>::from_request(again, &())
        .await
        .map_err(|r| rejection(r, &endpoint, max))?
        .0;
    Ok(match body {
        Value::Null if optional => (json!({}), endpoint),
        body => (body, endpoint),
    })
}

/// The endpoint a refusal names: the method and the route's template
/// (`POST /v1/interrupts/{token}`), never the path as sent — a path can carry a secret (a
/// signed interrupt token) — with the `:operation` of a custom method (`…/{runId}:pause`).
fn endpoint_of(req: &Request) -> String {
    let Some(template) = req
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str)
    else {
        return format!("{} request", req.method());
    };
    let operation = req
        .uri()
        .path()
        .rsplit('/')
        .next()
        .and_then(|last| last.rsplit_once(':'))
        .map(|(_, op)| op)
        .filter(|op| !template.ends_with(&format!(":{op}")));
    match operation {
        Some(op) => format!("{} {template}:{op}", req.method()),
        None => format!("{} {template}", req.method()),
    }
}

/// A request without `Content-Type` is taken as JSON; a declared non-JSON type is still refused.
fn assume_json_when_undeclared(mut req: Request) -> Request {
    if !req.headers().contains_key(CONTENT_TYPE) {
        req.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    req
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
        _ => ApiError::validation(format!(
            "the body of {endpoint} could not be read ({reason}); send it again"
        ))
        .with_details(json!({"field": "body"})),
    }
}

/// `raw` (a body already read as JSON) as `T`, refused like a body [`Json`] could not
/// read, with `details.field` the member at fault (`events[1]`, `tenantId`; `body` when it
/// is the body as a whole).
pub fn from_value<T: DeserializeOwned>(raw: &Value, endpoint: &str) -> Result<T, ApiError> {
    read_json(raw).map_err(|e| {
        let (at, field) = if e.field.is_empty() {
            (String::new(), "body".to_owned())
        } else {
            (format!(" at `{}`", e.field), e.field)
        };
        ApiError::validation(format!(
            "the body of {endpoint} does not fit its request type{at}: {}; the request schemas \
             are in /v1/openapi.json",
            e.message
        ))
        .with_details(json!({ "field": field }))
    })
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
        let req = assume_json_when_undeclared(req.body(Body::from(body)).unwrap());
        let r = axum::Json::<Value>::from_request(req, &())
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

        // Read, but not of the request type: the member at fault is named.
        let e = from_value::<Req>(&json!({"workflowId": 7}), "POST /v1/runs").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST, "never axum's 422");
        assert!(
            e.body.message.contains("/v1/openapi.json"),
            "{}",
            e.body.message
        );
        assert_eq!(e.body.details, Some(json!({"field": "workflowId"})));

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
        let req = assume_json_when_undeclared(
            Request::post("/v1/runs")
                .body(Body::from(r#"{"workflowId": "w"}"#))
                .unwrap(),
        );
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
