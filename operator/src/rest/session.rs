//! The web UI's session, a credential the API accepts (the [`super::Caller`] extractor reads
//! it when there is no `Authorization` header): the caller's own Kubernetes token kept in an `HttpOnly; Secure;
//! SameSite=Strict` cookie, so the page (and its `EventSource`) is authenticated by exactly
//! the same TokenReview and SubjectAccessReview as a bearer caller of the API.
//!
//! * The cookie holds the token itself, not a server-side session id: every operator replica
//!   serves the UI and none of them shares state with the others, so a replica that never saw
//!   the login must still accept the cookie.
//! * CSRF: a cookie-authenticated request with an unsafe method must carry
//!   [`CSRF_HEADER`] with [`csrf_for`] of the session's token (a one-way digest the page
//!   learns from `GET /ui/api/session`). A cross-site page can neither read it nor, for
//!   `SameSite=Strict`, make the browser send the cookie; bearer callers are unaffected.
//! * Logout expires the cookie and refuses the token's session on this replica until the
//!   cookie's own expiry ([`logged_out`]); the token itself stays valid for the cluster
//!   (it is the caller's, e.g. from `kubectl create token`, and expires on its own).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, header};
use sha2::{Digest, Sha256};

use super::error::ApiError;

/// Name of the session cookie (HttpOnly: no script reads it).
pub const SESSION_COOKIE: &str = "openwop-session";
/// Header carrying the CSRF proof on cookie-authenticated unsafe requests.
pub const CSRF_HEADER: &str = "x-openwop-csrf";
/// Longest token accepted at login: ServiceAccount JWTs are ~1 KiB, OIDC tokens a few.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// Logged-out sessions remembered at once; beyond, expired ones and then those nearest their
/// expiry are forgotten first.
const MAX_LOGGED_OUT: usize = 10_000;

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The CSRF proof of a session: derived from its token one way, so any replica can check it
/// and it reveals nothing of the token.
pub fn csrf_for(token: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"openwop-ui-csrf\0");
    h.update(token.as_bytes());
    hex::encode(&h.finalize()[..16])
}

/// `Set-Cookie` value starting a session of `max_age`.
pub fn session_cookie(token: &str, max_age: Duration) -> String {
    format!(
        "{SESSION_COOKIE}={token}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age={}",
        max_age.as_secs()
    )
}

/// `Set-Cookie` value ending the session in the browser.
pub fn cleared_cookie() -> String {
    format!("{SESSION_COOKIE}=; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=0")
}

/// Whether a token may be a cookie value and a bearer token (visible ASCII, no `;` or `,`).
pub fn plausible_token(token: &str) -> bool {
    !token.is_empty()
        && token.len() <= MAX_TOKEN_BYTES
        && token
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b';' && b != b',' && b != b'"' && b != b'\\')
}

/// The session token in the request's cookies, if any.
pub fn session_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, v)| *k == SESSION_COOKIE && !v.is_empty())
        .map(|(_, v)| v)
}

/// Logged-out sessions (token digest → until when the cookie could still be alive), bounded.
#[derive(Default)]
struct LoggedOut(HashMap<[u8; 32], Instant>);

impl LoggedOut {
    /// Remembers `key` until `until`. When full, expired entries go first, then the ones
    /// closest to expiry: forgetting everything at once would revive every logged-out
    /// session still within its cookie's lifetime.
    fn insert(&mut self, key: [u8; 32], until: Instant, now: Instant) {
        if self.0.len() >= MAX_LOGGED_OUT && !self.0.contains_key(&key) {
            self.0.retain(|_, u| *u > now);
            while self.0.len() >= MAX_LOGGED_OUT {
                let Some(soonest) = self.0.iter().min_by_key(|(_, u)| **u).map(|(k, _)| *k) else {
                    break;
                };
                self.0.remove(&soonest);
            }
        }
        self.0.insert(key, until);
    }

    fn contains(&self, key: &[u8; 32], now: Instant) -> bool {
        self.0.get(key).is_some_and(|until| *until > now)
    }
}

static LOGGED_OUT: LazyLock<Mutex<LoggedOut>> = LazyLock::new(Mutex::default);

/// Refuses the session of `token` on this replica for `for_how_long` (the cookie's lifetime).
pub fn log_out(token: &str, for_how_long: Duration) {
    let mut m = LOGGED_OUT.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    m.insert(digest(token), now + for_how_long, now);
}

/// Whether the session of `token` was logged out here (and the cookie could still be alive).
pub fn logged_out(token: &str) -> bool {
    let m = LOGGED_OUT.lock().unwrap_or_else(|p| p.into_inner());
    m.contains(&digest(token), Instant::now())
}

fn safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The caller's token from the session cookie, for the API's auth extractor when there is no
/// `Authorization` header: `None` without a cookie; 401 for a logged-out session; 403 for an
/// unsafe method without the session's CSRF proof.
pub fn cookie_token(parts: &Parts) -> Result<Option<String>, ApiError> {
    let Some(token) = session_token(&parts.headers) else {
        return Ok(None);
    };
    if logged_out(token) {
        return Err(ApiError::unauthenticated(
            "this web session was logged out; log in again with a token",
        ));
    }
    if !safe(&parts.method) {
        let proof = parts
            .headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !constant_time_eq(proof.as_bytes(), csrf_for(token).as_bytes()) {
            return Err(ApiError::forbidden(format!(
                "a request authenticated by the web session cookie must carry the session's \
                 {CSRF_HEADER} header (the page sends it; other clients use \
                 `Authorization: Bearer <token>`)"
            ))
            .with_details(serde_json::json!({"header": CSRF_HEADER})));
        }
    }
    Ok(Some(token.to_owned()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: Method, cookie: Option<&str>, csrf: Option<&str>) -> Parts {
        let mut b = axum::http::Request::builder()
            .method(method)
            .uri("/v1/runs");
        if let Some(c) = cookie {
            b = b.header(header::COOKIE, c);
        }
        if let Some(c) = csrf {
            b = b.header(CSRF_HEADER, c);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn a_full_logout_list_forgets_the_sessions_nearest_expiry_not_all() {
        let now = Instant::now();
        let key = |i: usize| {
            let mut k = [0u8; 32];
            k[..8].copy_from_slice(&(i as u64).to_le_bytes());
            k
        };
        let mut list = LoggedOut::default();
        // Entry i is refused until now + (i + 10) s: entry 0 expires first.
        for i in 0..MAX_LOGGED_OUT {
            list.insert(key(i), now + Duration::from_secs(i as u64 + 10), now);
        }
        let newest = key(MAX_LOGGED_OUT);
        list.insert(newest, now + Duration::from_secs(3600), now);
        assert_eq!(list.0.len(), MAX_LOGGED_OUT);
        assert!(
            !list.contains(&key(0), now),
            "the entry nearest expiry goes"
        );
        for i in 1..MAX_LOGGED_OUT {
            assert!(list.contains(&key(i), now), "entry {i} was forgotten");
        }
        assert!(list.contains(&newest, now));
        // Expired entries go before live ones.
        let later = now + Duration::from_secs(20);
        list.insert(
            key(MAX_LOGGED_OUT + 1),
            later + Duration::from_secs(60),
            later,
        );
        assert!(list.contains(&key(MAX_LOGGED_OUT - 1), later));
        assert!(list.0.len() < MAX_LOGGED_OUT);
    }

    #[test]
    fn reads_are_authenticated_by_the_cookie_alone() {
        let p = parts(Method::GET, Some("a=b; openwop-session=tok-1; c=d"), None);
        assert_eq!(cookie_token(&p).unwrap().as_deref(), Some("tok-1"));
        assert_eq!(
            cookie_token(&parts(Method::GET, Some("a=b"), None)).unwrap(),
            None
        );
        assert_eq!(cookie_token(&parts(Method::GET, None, None)).unwrap(), None);
    }

    #[test]
    fn writes_need_the_sessions_csrf_proof() {
        let cookie = Some("openwop-session=tok-2");
        let e = cookie_token(&parts(Method::POST, cookie, None)).unwrap_err();
        assert_eq!(e.status, 403);
        assert!(e.body.message.contains(CSRF_HEADER), "{}", e.body.message);
        assert!(!e.body.message.contains("tok-2"));
        let other = csrf_for("another-token");
        let e = cookie_token(&parts(Method::POST, cookie, Some(&other))).unwrap_err();
        assert_eq!(e.status, 403);
        let ok = csrf_for("tok-2");
        assert_eq!(
            cookie_token(&parts(Method::POST, cookie, Some(&ok)))
                .unwrap()
                .as_deref(),
            Some("tok-2")
        );
        assert_ne!(csrf_for("tok-2"), "tok-2");
        assert_eq!(csrf_for("tok-2").len(), 32);
    }

    #[test]
    fn a_logged_out_session_is_refused() {
        log_out("tok-3", Duration::from_secs(60));
        let e = cookie_token(&parts(Method::GET, Some("openwop-session=tok-3"), None)).unwrap_err();
        assert_eq!(e.status, 401);
        log_out("tok-4", Duration::ZERO);
        assert!(
            !logged_out("tok-4"),
            "the refusal ends with the cookie's lifetime"
        );
    }

    #[test]
    fn cookies_are_http_only_secure_and_strict() {
        let c = session_cookie("t", Duration::from_secs(3600));
        for attr in [
            "HttpOnly",
            "Secure",
            "SameSite=Strict",
            "Path=/",
            "Max-Age=3600",
        ] {
            assert!(c.contains(attr), "{c}");
        }
        assert!(cleared_cookie().contains("Max-Age=0"));
        assert!(plausible_token("eyJhbGciOi.abc-_"));
        for bad in ["", "a b", "a;b", "é", &"a".repeat(MAX_TOKEN_BYTES + 1)] {
            assert!(!plausible_token(bad), "{bad}");
        }
    }
}
