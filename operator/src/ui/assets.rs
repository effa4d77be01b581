//! The page's files, built from `operator/ui/` into `operator/ui/dist/` (committed, so a
//! fresh clone builds the operator without Node; `make ui-check` keeps it in sync) and
//! embedded in the binary by `rust-embed` (in debug builds too: `debug-embed`).
//!
//! Every file is served with a strong `ETag` (its SHA-256, `304` on `If-None-Match`) and
//! `Cache-Control: no-cache` (names carry no hash, so the browser revalidates); the build
//! writes a gzip copy beside each text file, served to clients that accept it. Any other
//! path under `/ui/` without a file extension is the app itself (client-side routes such
//! as `/ui/runs/{runId}`).

use axum::body::Body;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use rust_embed::RustEmbed;

#[derive(RustEmbed)]
#[folder = "ui/dist/"]
struct Dist;

/// The app's entry document.
const INDEX: &str = "index.html";

pub(super) fn redirect_to_app() -> Redirect {
    Redirect::permanent("/ui/")
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, e)| e) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        _ => "application/octet-stream",
    }
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|e| {
            let mut it = e.trim().split(';');
            it.next() == Some("gzip") && it.all(|p| p.trim() != "q=0")
        })
}

/// `GET /ui/` and `GET /ui/{*path}`.
pub(super) async fn serve(path: Option<Path<String>>, headers: HeaderMap) -> Response {
    let path = path.map(|Path(p)| p).unwrap_or_default();
    let last = path.rsplit('/').next().unwrap_or("");
    let file = if path.is_empty() || !last.contains('.') {
        INDEX
    } else {
        path.as_str()
    };
    if file.ends_with(".gz") {
        return not_found(&path);
    }
    let gz = format!("{file}.gz");
    let (asset, encoded) = match (accepts_gzip(&headers), Dist::get(&gz), Dist::get(file)) {
        (true, Some(z), Some(_)) => (z, true),
        (_, _, Some(f)) => (f, false),
        _ => return not_found(&path),
    };
    let etag = format!("\"{}\"", hex::encode(asset.metadata.sha256_hash()));
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut r = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        Body::from(asset.data.into_owned()).into_response()
    };
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(file)),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    if encoded {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    r
}

fn not_found(path: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("no such file in the web UI: /ui/{path}"),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_app_is_embedded() {
        let index = Dist::get(INDEX).expect("operator/ui/dist/index.html: run `make ui`");
        let html = std::str::from_utf8(&index.data).unwrap();
        assert!(html.contains("/ui/assets/app.js"), "{html}");
        // The CSP allows no inline script or style: the page must not need any.
        assert!(!html.contains("<script>"), "inline script in index.html");
        assert!(!html.contains("<style"), "inline style in index.html");
        assert!(
            !html.contains(" style="),
            "inline style attribute in index.html"
        );
        assert!(Dist::get("assets/app.js").is_some());
        assert!(Dist::get("assets/app.css").is_some());
        assert!(Dist::get("assets/app.js.gz").is_some());
    }

    #[test]
    fn gzip_is_offered_only_when_accepted() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            m
        };
        assert!(accepts_gzip(&h("gzip, deflate, br")));
        assert!(!accepts_gzip(&h("br")));
        assert!(!accepts_gzip(&h("gzip;q=0")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
