//! `OpenWOP-Version` on the protocol's paths (`headers.md`, `versioning.md` §1): every request
//! to `/v1/…`, to discovery, or to an unversioned path of the v2 path manifest is negotiated
//! ([`openwop_protocol::v2::negotiate`]) before any handler runs, and every answer names the
//! version it is given in (`OpenWOP-Version: <major>.<minor>`, with `Vary: OpenWOP-Version`
//! where the header may select). The host's own paths (`/ui`, `/metrics`, probes) are not
//! negotiated.
//!
//! This host advertises what its discovery document says (`protocolVersions`,
//! `preferredVersion`: [`PROTOCOL_VERSION`]). A v2 client is therefore told so at once — `406
//! protocol_version_unsupported` naming the versions served when it asks for major 2, and
//! `404` naming them for an unversioned path without the header (which is v2's) — instead of
//! meeting an unexplained 404. `OpenWOP-Client-Version` never fails a request.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::VARY;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use openwop_protocol::capabilities::PROTOCOL_VERSION;
use openwop_protocol::v2::negotiate::{Advertised, PathClass, negotiate};
use openwop_protocol::v2::version::ProtocolVersion;

/// The response and request header naming the protocol version.
pub const VERSION_HEADER: HeaderName = HeaderName::from_static("openwop-version");

/// What this host advertises: the discovery document's one version.
pub fn advertised() -> Arc<Advertised> {
    let v: ProtocolVersion = PROTOCOL_VERSION
        .parse()
        .expect("PROTOCOL_VERSION is a <major>.<minor> (protocol's capabilities test)");
    Arc::new(Advertised::new(&[v], v).expect("one version, preferred: a valid advertisement"))
}

/// The negotiation middleware (`axum::middleware::from_fn_with_state(advertised(), negotiate_version)`).
pub async fn negotiate_version(
    State(host): State<Arc<Advertised>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(class) = PathClass::of_protocol(req.uri().path()) else {
        return next.run(req).await;
    };
    let header = joined(req.headers());
    match negotiate(class, header.as_deref(), &host) {
        Ok(served) => {
            let mut resp = next.run(req).await;
            stamp(resp.headers_mut(), &served.header_value(), served.vary);
            resp
        }
        Err(refusal) => {
            let rendered = refusal.problem().render(refusal.major());
            let status = StatusCode::from_u16(rendered.status).unwrap_or(StatusCode::BAD_REQUEST);
            let mut resp = (status, axum::Json(rendered.body)).into_response();
            stamp(
                resp.headers_mut(),
                &refusal.version.to_string(),
                refusal.vary,
            );
            resp
        }
    }
}

/// Every `OpenWOP-Version` value of the request, joined by `", "` (several are no version).
fn joined(headers: &HeaderMap) -> Option<Vec<u8>> {
    let mut values = headers.get_all(&VERSION_HEADER).iter();
    let first = values.next()?.as_bytes().to_vec();
    Some(values.fold(first, |mut all, v| {
        all.extend_from_slice(b", ");
        all.extend_from_slice(v.as_bytes());
        all
    }))
}

/// Names the version of the answer, and that it varies on the request's header.
fn stamp(headers: &mut HeaderMap, version: &str, vary: bool) {
    if let Ok(v) = HeaderValue::from_str(version) {
        headers.insert(VERSION_HEADER, v);
    }
    if vary {
        headers.append(VARY, HeaderValue::from_static("OpenWOP-Version"));
    }
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use serde_json::Value;
    use tower::ServiceExt;

    use super::*;

    fn app() -> Router {
        Router::new()
            .route("/v1/runs", get(|| async { "runs" }))
            .route("/.well-known/openwop", get(|| async { "discovery" }))
            .route("/ui/", get(|| async { "ui" }))
            .route("/metrics", get(|| async { "metrics" }))
            .layer(axum::middleware::from_fn_with_state(
                advertised(),
                negotiate_version,
            ))
    }

    async fn send(path: &str, versions: &[&str]) -> (StatusCode, HeaderMap, Value) {
        let mut req = Request::get(path);
        for v in versions {
            req = req.header("OpenWOP-Version", *v);
        }
        req = req.header("OpenWOP-Client-Version", "not a version");
        let resp = app()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let (parts, body) = resp.into_parts();
        let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        let json = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        (parts.status, parts.headers, json)
    }

    #[tokio::test]
    async fn v1_is_served_and_named_and_v2_is_refused_naming_what_is_served() {
        let (status, h, body) = send("/v1/runs", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, Some("runs")));
        assert_eq!(h["openwop-version"], PROTOCOL_VERSION);
        assert!(h.get(VARY).is_none(), "a /v1/ answer does not vary");
        let (status, h, _) = send("/v1/runs", &["1"]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(h["openwop-version"], PROTOCOL_VERSION);

        let (status, _, body) = send("/v1/runs", &["2.0"]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["error"], "protocol_version_mismatch", "{body}");

        let (status, h, body) = send("/.well-known/openwop", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, Some("discovery")));
        assert_eq!(h["openwop-version"], PROTOCOL_VERSION);
        assert_eq!(h[VARY], "OpenWOP-Version");
        for asked in [&["2"][..], &["2.0"], &["banana"], &["1", "2"]] {
            let (status, h, body) = send("/.well-known/openwop", asked).await;
            assert_eq!(status, StatusCode::NOT_ACCEPTABLE, "{asked:?}: {body}");
            assert_eq!(body["error"], "protocol_version_unsupported");
            assert_eq!(
                body["details"]["protocolVersions"],
                serde_json::json!([PROTOCOL_VERSION])
            );
            assert_eq!(h["openwop-version"], PROTOCOL_VERSION);
        }

        // An unversioned manifest path is v2's: not served here, and said so.
        for path in ["/runs", "/runs/r1/events", "/runs:bulk-cancel"] {
            let (status, _, body) = send(path, &[]).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
            assert!(
                body["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(PROTOCOL_VERSION),
                "{path}: {body}"
            );
            let (status, _, body) = send(path, &["2.0"]).await;
            assert_eq!(status, StatusCode::NOT_ACCEPTABLE, "{path}: {body}");
        }

        // The host's own paths are not negotiated.
        for path in ["/ui/", "/metrics"] {
            let (status, h, _) = send(path, &["2.0"]).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert!(h.get("openwop-version").is_none(), "{path}");
        }
    }
}
