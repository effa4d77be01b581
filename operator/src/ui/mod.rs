//! The web run viewer, served by every operator replica at `/ui/` beside the REST API
//! (docs/web-ui.md).
//!
//! The page is a static single-page app ([`assets`], built from `operator/ui/` and embedded in
//! the binary) that reads and writes runs only through the REST API (`/v1/...`). This module
//! adds what a browser needs around it and nothing that reads runs:
//!
//! * `POST /ui/api/login` checks a token with the API's own TokenReview and keeps it in the
//!   session cookie ([`crate::rest::session`], which the API's auth reads); `POST /ui/api/logout` ends it; `GET /ui/api/session` tells
//!   the page who it is and the CSRF proof its writes must carry. The API's auth extractor
//!   accepts the cookie when there is no `Authorization` header ([`session::cookie_token`]).
//! * Every `/ui` response carries a strict Content-Security-Policy (no inline script or
//!   style, nothing from elsewhere) and no-sniff / no-framing headers.
//! * Event streams get `X-Accel-Buffering: no` so ingress proxies pass them on at once.

pub mod assets;

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::rest::{ApiError, Caller, RestState, session};

/// The policy of every `/ui` page: scripts, styles, images and connections from this origin
/// only; no inline script or style, no plugins, no framing, no `<base>` rewriting.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/// The REST API router with the UI mounted beside it when `ui.enabled` (and, either way,
/// event streams marked unbuffered for proxies).
pub fn mount(api: axum::Router, state: RestState) -> axum::Router {
    let api = api.layer(middleware::map_response(unbuffered_streams));
    if state.config.ui.enabled {
        api.merge(router(state))
    } else {
        api
    }
}

/// `/ui`, `/ui/...` (assets, SPA fallback) and `/ui/api/{login,logout,session}`.
pub fn router(state: RestState) -> axum::Router {
    axum::Router::new()
        .route("/ui", get(|| async { assets::redirect_to_app() }))
        .route("/ui/api/login", post(login))
        .route("/ui/api/logout", post(logout))
        .route("/ui/api/session", get(session_info))
        .route("/ui/", get(assets::serve))
        .route("/ui/{*path}", get(assets::serve))
        .layer(middleware::from_fn(security_headers))
        .with_state(state)
}

async fn unbuffered_streams(mut r: Response) -> Response {
    let is_stream = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if is_stream {
        r.headers_mut()
            .insert("x-accel-buffering", HeaderValue::from_static("no"));
    }
    r
}

async fn security_headers(req: Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

/// `POST /ui/api/login` body.
#[derive(Deserialize)]
struct LoginRequest {
    token: String,
}

/// Who the session is, and the CSRF proof the page sends with its writes.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SessionInfo {
    username: String,
    csrf: String,
    /// A ServiceAccount's namespace: the page's default tenant.
    #[serde(skip_serializing_if = "Option::is_none")]
    default_tenant: Option<String>,
    session_seconds: u64,
}

fn info(caller: &Caller, token: &str, s: &RestState) -> SessionInfo {
    SessionInfo {
        username: caller.username.clone(),
        csrf: session::csrf_for(token),
        default_tenant: caller.service_account_namespace.clone(),
        session_seconds: s.config.ui.session_seconds,
    }
}

/// Starts a session: the token is checked by the API's TokenReview and, if the cluster
/// accepts it, kept in the HttpOnly cookie. The token is never logged nor echoed.
async fn login(
    State(s): State<RestState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json_body {
        // A cross-site form cannot send JSON without a CORS preflight, which is never granted.
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "login takes a JSON body {\"token\": \"...\"} with Content-Type: application/json",
        ));
    }
    if body.len() > session::MAX_TOKEN_BYTES + 1024 {
        return Err(ApiError::validation(format!(
            "the login body is larger than {} bytes; a token is at most {} bytes",
            session::MAX_TOKEN_BYTES + 1024,
            session::MAX_TOKEN_BYTES
        )));
    }
    let req: LoginRequest = serde_json::from_slice(&body).map_err(|_| {
        ApiError::validation("login takes a JSON body {\"token\": \"...\"}")
            .with_details(json!({"field": "token"}))
    })?;
    let token = req.token.trim();
    if !session::plausible_token(token) {
        return Err(ApiError::validation(format!(
            "the token is empty, longer than {} bytes, or has characters no Kubernetes token \
             has (spaces, quotes, ';'); paste the output of `kubectl create token \
             <serviceaccount> -n <namespace>`",
            session::MAX_TOKEN_BYTES
        ))
        .with_details(json!({"field": "token"})));
    }
    let caller = s.auth.authenticate(token).await.map_err(|e| {
        if e.status == StatusCode::UNAUTHORIZED {
            ApiError::unauthenticated(
                "the cluster did not accept this token (expired, revoked or not a token of \
                 this cluster); create a new one, e.g. `kubectl create token <serviceaccount> \
                 -n <namespace>`",
            )
            .with_details(json!({"field": "token"}))
        } else {
            e
        }
    })?;
    if caller.is_anonymous {
        return Err(ApiError::unauthenticated(
            "the cluster authenticated this token as anonymous; log in with a token of a \
             user or ServiceAccount",
        )
        .with_details(json!({"field": "token"})));
    }
    tracing::info!(user = %caller.username, "web UI login");
    let max_age = Duration::from_secs(s.config.ui.session_seconds);
    let cookie = session::session_cookie(token, max_age);
    let mut r = Json(info(&caller, token, &s)).into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(|_| ApiError::internal("cookie"))?,
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(r)
}

/// Ends the session: the cookie is expired in the browser and refused by this replica for
/// as long as it could have lived. A cookie session must show its CSRF proof to log out.
async fn logout(State(s): State<RestState>, req: Request) -> Result<Response, ApiError> {
    let (parts, _) = req.into_parts();
    if let Some(token) = session::cookie_token(&parts)? {
        session::log_out(&token, Duration::from_secs(s.config.ui.session_seconds));
    }
    let mut r = StatusCode::NO_CONTENT.into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&session::cleared_cookie())
            .map_err(|_| ApiError::internal("cookie"))?,
    );
    Ok(r)
}

/// The session's user and CSRF proof (401 without a live session).
async fn session_info(State(s): State<RestState>, req: Request) -> Result<Response, ApiError> {
    let (parts, _) = req.into_parts();
    let token = session::cookie_token(&parts)?
        .ok_or_else(|| ApiError::unauthenticated("no web session: log in with a token"))?;
    let caller = s.auth.authenticate(&token).await?;
    let mut r = Json(info(&caller, &token, &s)).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(r)
}
