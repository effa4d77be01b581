//! The web UI's HTTP surface (`/ui/...`) against a mocked API server (tower-test): the
//! embedded app with its security headers, ETag and SPA fallback; login through TokenReview
//! (a refused token gets a specific message and is never echoed; an accepted one becomes an
//! HttpOnly cookie); the cookie then authenticates the REST API, with the CSRF proof required
//! on writes; logout ends it; `ui.enabled: false` serves nothing; event streams are marked
//! unbuffered for proxies.

use std::sync::Arc;

use axum::body::Body as AxBody;
use http::{Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use kube::runtime::reflector;
use openwop_crds::{Run, Workflow};
use openwop_operator::config::OperatorConfig;
use openwop_operator::rest::{self, RestState};
use openwop_operator::ui;
use serde_json::{Value, json};
use tower::ServiceExt;
use tower_test::mock::{self, Handle};

type MockHandle = Handle<Request<Body>, Response<Body>>;

fn app(cfg: OperatorConfig) -> (axum::Router, MockHandle) {
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, "default");
    let (runs, _) = reflector::store::<Run>();
    let (workflows, _) = reflector::store::<Workflow>();
    let state = RestState::new(client, Arc::new(cfg), runs, workflows);
    let api = rest::router(state.clone(), utoipa_axum::router::OpenApiRouter::new());
    (ui::mount(api, state), handle)
}

async fn call(app: &axum::Router, req: Request<AxBody>) -> (StatusCode, http::HeaderMap, String) {
    let r = app.clone().oneshot(req).await.unwrap();
    let (parts, body) = r.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

fn get(path: &str) -> Request<AxBody> {
    Request::get(path).body(AxBody::empty()).unwrap()
}

fn login(token: &str) -> Request<AxBody> {
    Request::post("/ui/api/login")
        .header(header::CONTENT_TYPE, "application/json")
        .body(AxBody::from(json!({"token": token}).to_string()))
        .unwrap()
}

/// Answers the next request to the mocked API server, which must be a TokenReview (and,
/// when `user` is set, accepts the token as that user).
async fn answer_token_review(handle: &mut MockHandle, user: Option<&str>) -> Value {
    let (req, send) = handle.next_request().await.expect("a TokenReview");
    assert!(req.uri().path().ends_with("/tokenreviews"), "{}", req.uri());
    let body: Value =
        serde_json::from_slice(&req.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let status = match user {
        Some(u) => {
            json!({"authenticated": true, "user": {"username": u, "uid": "u1", "groups": ["system:serviceaccounts"]}})
        }
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    let resp = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "metadata": {}, "spec": body["spec"], "status": status});
    send.send_response(
        Response::builder()
            .status(201)
            .body(Body::from(serde_json::to_vec(&resp).unwrap()))
            .unwrap(),
    );
    body
}

#[tokio::test]
async fn the_app_is_served_with_a_strict_policy_etag_and_spa_fallback() {
    let (app, _h) = app(OperatorConfig::default());
    for path in ["/ui/", "/ui/runs/3f1c?node=a&event=4"] {
        let (status, h, body) = call(&app, get(path)).await;
        assert_eq!(status, 200, "{path}");
        let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(csp.starts_with("default-src 'self'"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(h[header::X_FRAME_OPTIONS], "DENY");
        assert!(body.contains("<div id=\"app\">"), "{body}");
    }
    let (status, h, _) = call(&app, get("/ui")).await;
    assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(h[header::LOCATION], "/ui/");
    let (status, h, js) = call(&app, get("/ui/assets/app.js")).await;
    assert_eq!(status, 200);
    assert!(
        h[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    assert!(!js.is_empty());
    let etag = h[header::ETAG].clone();
    let again = Request::get("/ui/assets/app.js")
        .header(header::IF_NONE_MATCH, etag.clone())
        .body(AxBody::empty())
        .unwrap();
    let (status, h, body) = call(&app, again).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert_eq!(h[header::ETAG], etag);
    assert!(body.is_empty());
    let gz = Request::get("/ui/assets/app.js")
        .header(header::ACCEPT_ENCODING, "gzip, br")
        .body(AxBody::empty())
        .unwrap();
    let (status, h, _) = call(&app, gz).await;
    assert_eq!(status, 200);
    assert_eq!(h[header::CONTENT_ENCODING], "gzip");
    let (status, _, body) = call(&app, get("/ui/assets/missing.js")).await;
    assert_eq!(status, 404, "{body}");
    let (status, _, _) = call(&app, get("/ui/assets/app.js.gz")).await;
    assert_eq!(status, 404, "the gzip copies are not addressable");
}

#[tokio::test]
async fn the_ui_can_be_turned_off() {
    let mut cfg = OperatorConfig::default();
    cfg.ui.enabled = false;
    let (app, _h) = app(cfg);
    for path in ["/ui/", "/ui/assets/app.js", "/ui/api/session"] {
        let (status, _, _) = call(&app, get(path)).await;
        assert_eq!(status, 404, "{path}");
    }
    let (status, _, _) = call(&app, get("/v1/openapi.json")).await;
    assert_eq!(status, 200, "the API stays");
}

#[tokio::test]
async fn a_refused_token_gets_a_specific_message_and_is_never_echoed() {
    let (app, mut h) = app(OperatorConfig::default());
    let canary = "eyJhbGciOiJSUzI1NiJ9.CANARY-token.sig";
    let server = tokio::spawn(async move { answer_token_review(&mut h, None).await });
    let (status, headers, body) = call(&app, login(canary)).await;
    let review = server.await.unwrap();
    assert_eq!(
        review["spec"]["token"], canary,
        "the token goes to the TokenReview"
    );
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("did not accept this token"), "{body}");
    assert!(body.contains("kubectl create token"), "{body}");
    assert!(
        !body.contains("CANARY"),
        "the refusal echoes the token: {body}"
    );
    assert!(headers.get(header::SET_COOKIE).is_none());
    // Malformed: refused before any review, without echo.
    let (status, _, body) = call(&app, login("two words;CANARY")).await;
    assert_eq!(status, 400, "{body}");
    assert!(!body.contains("CANARY"), "{body}");
    // Not JSON (what a cross-site form could send): 415.
    let form = Request::post("/ui/api/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(AxBody::from("token=abc"))
        .unwrap();
    let (status, _, _) = call(&app, form).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

#[tokio::test]
async fn a_session_cookie_authenticates_reads_writes_need_the_csrf_proof_logout_ends_it() {
    let mut cfg = OperatorConfig::default();
    // Every request reviews the token again: each step below is seen by the API server.
    cfg.rest.review_cache_seconds = 0;
    let (app, mut h) = app(cfg);
    let token = "sa-token-for-session-test";
    let user = "system:serviceaccount:team-a:viewer";
    let server = tokio::spawn(async move {
        answer_token_review(&mut h, Some(user)).await;
        h
    });
    let (status, headers, body) = call(&app, login(token)).await;
    let mut h = server.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let cookie = headers[header::SET_COOKIE].to_str().unwrap().to_owned();
    for attr in [
        "openwop-session=",
        "HttpOnly",
        "Secure",
        "SameSite=Strict",
        "Max-Age=28800",
    ] {
        assert!(cookie.contains(attr), "{cookie}");
    }
    let session: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(session["username"], user);
    assert_eq!(session["defaultTenant"], "team-a");
    assert!(
        !body.contains(token),
        "the token is in the login answer: {body}"
    );
    let csrf = session["csrf"].as_str().unwrap().to_owned();
    let pair = cookie.split(';').next().unwrap().to_owned();

    // A read with the cookie alone reaches the API's auth (TokenReview) and is answered.
    let server = tokio::spawn(async move {
        answer_token_review(&mut h, Some(user)).await;
        h
    });
    let req = Request::get("/ui/api/session")
        .header(header::COOKIE, &pair)
        .body(AxBody::empty())
        .unwrap();
    let (status, _, body) = call(&app, req).await;
    let mut h = server.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["csrf"], csrf);

    // A write with the cookie but no proof is refused before anything else.
    let write = |proof: Option<&str>| {
        let mut b = Request::post("/v1/runs/some-run/cancel").header(header::COOKIE, &pair);
        if let Some(p) = proof {
            b = b.header("x-openwop-csrf", p);
        }
        b.body(AxBody::empty()).unwrap()
    };
    let (status, _, body) = call(&app, write(None)).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("x-openwop-csrf"), "{body}");
    let (status, _, _) = call(&app, write(Some("0123456789abcdef0123456789abcdef"))).await;
    assert_eq!(status, 403, "a wrong proof");
    // With the proof, the write goes on to the API's checks (here: TokenReview, then the
    // run is not in this replica's cache: 404 after the cache grace).
    let server = tokio::spawn(async move {
        answer_token_review(&mut h, Some(user)).await;
        h
    });
    let (status, _, body) = call(&app, write(Some(&csrf))).await;
    let mut h = server.await.unwrap();
    assert_eq!(status, 404, "{body}");

    // A bearer token wins over the cookie and needs no proof (API clients are unaffected).
    let server = tokio::spawn(async move {
        let review = answer_token_review(&mut h, Some(user)).await;
        (h, review)
    });
    let bearer = Request::post("/v1/runs/some-run/cancel")
        .header(header::COOKIE, &pair)
        .header(header::AUTHORIZATION, "Bearer another-token")
        .body(AxBody::empty())
        .unwrap();
    let (status, _, _) = call(&app, bearer).await;
    let (_h, review) = server.await.unwrap();
    assert_eq!(review["spec"]["token"], "another-token");
    assert_eq!(status, 404);

    // Logout (with the proof) clears the cookie, and this replica refuses it from then on.
    let out = Request::post("/ui/api/logout")
        .header(header::COOKIE, &pair)
        .header("x-openwop-csrf", &csrf)
        .body(AxBody::empty())
        .unwrap();
    let (status, headers, _) = call(&app, out).await;
    assert_eq!(status, 204);
    assert!(
        headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let req = Request::get("/ui/api/session")
        .header(header::COOKIE, &pair)
        .body(AxBody::empty())
        .unwrap();
    let (status, _, body) = call(&app, req).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("logged out"), "{body}");
}

#[tokio::test]
async fn event_streams_are_marked_unbuffered_for_proxies() {
    let (svc, _h) = mock::pair::<Request<Body>, Response<Body>>();
    let (runs, _) = reflector::store::<Run>();
    let (workflows, _) = reflector::store::<Workflow>();
    let state = RestState::new(
        Client::new(svc, "default"),
        Arc::new(OperatorConfig::default()),
        runs,
        workflows,
    );
    let sse = axum::Router::new().route(
        "/stream",
        axum::routing::get(|| async {
            ([(header::CONTENT_TYPE, "text/event-stream")], "data: x\n\n")
        }),
    );
    let app = ui::mount(sse, state);
    let (status, h, _) = call(&app, get("/stream")).await;
    assert_eq!(status, 200);
    assert_eq!(h["x-accel-buffering"], "no");
    let (_, h, _) = call(&app, get("/ui/")).await;
    assert!(h.get("x-accel-buffering").is_none());
}
