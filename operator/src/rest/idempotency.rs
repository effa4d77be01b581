//! `Idempotency-Key` on every mutation (`spec/v1/idempotency.md`, RFC 0150): one layer every
//! mutating handler runs its work through ([`idempotent`]).
//!
//! A record per (namespace, operation, caller, key) lives in a JetStream key-value bucket
//! shared by the replicas (`rest.idempotency.bucket`, entries kept
//! `rest.idempotency.retentionSeconds` ≥ 24 h). The bucket key is
//! `<namespace>.<operation>.<sha256(caller NUL key)>`: the caller's key never leaves this
//! module in clear (not in NATS, not in logs), and two callers cannot meet each other's
//! answers. A record holds the request's digest and, once the work is done, its final
//! response:
//!
//! * first request: a `pending` record is created atomically (one execution however many
//!   replicas the retries reach), the work runs, its final response is stored;
//! * same key, same request: the stored response, with `openwop-Idempotent-Replay: true`;
//! * same key, another request: 409 `idempotency_key_mismatch`, nothing of the first answer;
//! * same key while the first is still running: 409 `idempotency_in_flight` with
//!   `details.retryAfter` (and `Retry-After`); a pending record whose lease ran out (its
//!   replica died mid-request) is taken over;
//! * outcomes that are not final — 5xx, 429, 401, 403, 400 `validation_error`, a lost
//!   concurrent write (409 `conflict`) — are not kept: the record is dropped and a retry with
//!   the same key runs again.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::kv;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use openwop_protocol::run::{
    IDEMPOTENCY_IN_FLIGHT, IDEMPOTENCY_KEY_MISMATCH, IDEMPOTENT_REPLAY_HEADER,
};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::error::ApiError;
use super::state::RestState;

/// The request header.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// Longest key accepted (`idempotency.md`: ≤ 255 characters).
pub const MAX_KEY_CHARS: usize = 255;

/// How long a request holds its key before another replica may take the key over (longer
/// than any mutation takes; a replica that died mid-request frees the key after this).
const LEASE: Duration = Duration::from_secs(60);

/// Largest response kept for replay (the API's mutation answers are a few hundred bytes).
const MAX_STORED_RESPONSE: usize = 256 * 1024;

/// Top-level fields of an answer never written to the records bucket: a secret shown once
/// (`POST /v1/webhooks`) stays out of NATS, and the handler re-derives it on a replay.
pub const NEVER_STORED: &[&str] = &["secret"];

/// The mutations that honour the key (the spec's operation ids).
pub mod op {
    pub const CREATE_RUN: &str = "createRun";
    pub const CANCEL_RUN: &str = "cancelRun";
    pub const BULK_CANCEL_RUNS: &str = "bulkCancelRuns";
    pub const PAUSE_RUN: &str = "pauseRun";
    pub const RESUME_RUN: &str = "resumeRun";
    pub const RESOLVE_INTERRUPT_BY_RUN: &str = "resolveInterruptByRun";
    pub const RESOLVE_INTERRUPT_BY_TOKEN: &str = "resolveInterruptByToken";
    pub const REGISTER_WEBHOOK: &str = "registerWebhook";
    pub const UNREGISTER_WEBHOOK: &str = "unregisterWebhook";
}

/// Whose request it is: the record is theirs alone.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// The tenant the mutation acts in.
    pub namespace: &'a str,
    /// One of [`op`].
    pub operation: &'static str,
    /// The authenticated caller (the TokenReview username, or the callback-token principal).
    pub principal: &'a str,
}

/// What a record holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "state"
)]
enum Record {
    /// Being served; another request may take it over after `leaseUntilMs`.
    Pending { digest: String, lease_until_ms: u64 },
    /// Served: the final answer, replayed as it was.
    Completed {
        digest: String,
        status: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content_type: Option<String>,
        /// base64.
        body: String,
    },
}

impl Record {
    fn digest(&self) -> &str {
        match self {
            Record::Pending { digest, .. } | Record::Completed { digest, .. } => digest,
        }
    }
}

/// SHA-256 of length-prefixed parts, hex (no two part lists share a digest).
pub fn digest(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())
}

/// The caller's key from `headers`: `None` without one; 400 when it is not 1..255 URL-safe
/// characters (letters, digits, `-`, `_`, `.`, `~`, `:`).
pub fn key_of(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(IDEMPOTENCY_KEY_HEADER) else {
        return Ok(None);
    };
    let ok = v.to_str().ok().filter(|k| {
        (1..=MAX_KEY_CHARS).contains(&k.len())
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.~:".contains(c))
    });
    match ok {
        Some(k) => Ok(Some(k.to_owned())),
        // The value is not echoed: it may be anything.
        None => Err(ApiError::validation(format!(
            "Idempotency-Key must be 1 to {MAX_KEY_CHARS} URL-safe characters (letters, digits, \
             '-', '_', '.', '~', ':'); send a UUID"
        ))
        .with_details(json!({"field": "Idempotency-Key"}))),
    }
}

/// The bucket key of `scope` and the caller's `key`.
fn record_key(scope: &Scope<'_>, key: &str) -> String {
    let h = digest(&[scope.principal.as_bytes(), key.as_bytes()]);
    format!("{}.{}.{h}", scope.namespace, scope.operation)
}

/// Whether an answer is final (kept and replayed) by its status and error code.
fn is_final(status: StatusCode, code: Option<&str>) -> bool {
    if status.is_success() || status.is_redirection() {
        return true;
    }
    if status.is_server_error()
        || matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
        )
    {
        return false;
    }
    !matches!(
        (status, code),
        (StatusCode::BAD_REQUEST, Some("validation_error"))
            | (StatusCode::CONFLICT, Some("conflict"))
            | (StatusCode::CONFLICT, Some(IDEMPOTENCY_IN_FLIGHT))
            | (StatusCode::CONFLICT, Some(IDEMPOTENCY_KEY_MISMATCH))
    )
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

fn mismatch() -> ApiError {
    // The spec's code, and nothing of the first answer.
    ApiError::conflict(
        IDEMPOTENCY_KEY_MISMATCH,
        "this Idempotency-Key was already used with a different request; use a new key",
    )
}

fn in_flight(lease_until_ms: u64) -> ApiError {
    let secs = lease_until_ms
        .saturating_sub(now_ms())
        .div_ceil(1000)
        .max(1);
    let mut e = ApiError::conflict(
        IDEMPOTENCY_IN_FLIGHT,
        "a request with this Idempotency-Key is still being served; retry after the indicated delay",
    )
    .with_details(json!({"retryAfter": secs}));
    e.retry_after = Some(Duration::from_secs(secs));
    e
}

fn store_failed(e: impl std::fmt::Display) -> ApiError {
    tracing::warn!(error = %e, "idempotency records");
    ApiError::unavailable(
        "the Idempotency-Key records are unavailable right now; retry shortly",
        Duration::from_secs(2),
    )
}

/// The records bucket, opened (and created) on first use.
async fn bucket(s: &RestState) -> Result<kv::Store, ApiError> {
    let js = s.jetstream().await?;
    let cfg = s.config.rest.idempotency.clone();
    s.idempotency
        .get_or_try_init(|| async move {
            match js.get_key_value(&cfg.bucket).await {
                Ok(kv) => Ok(kv),
                Err(_) => js
                    .create_key_value(kv::Config {
                        bucket: cfg.bucket.clone(),
                        description: "openwop-operator Idempotency-Key records".into(),
                        history: 1,
                        max_age: Duration::from_secs(cfg.retention_seconds),
                        storage: async_nats::jetstream::stream::StorageType::File,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| e.to_string()),
            }
        })
        .await
        .cloned()
        .map_err(store_failed)
}

/// What [`begin`] found.
enum Begun {
    /// The key is now this request's: run the work.
    Fresh,
    /// The key's final answer, to replay.
    Replay(Response),
}

/// Claims `key` for a request whose digest is `dig`, or says what the key already holds.
async fn begin(kv: &kv::Store, key: &str, dig: &str) -> Result<Begun, ApiError> {
    let pending = || {
        serde_json::to_vec(&Record::Pending {
            digest: dig.to_owned(),
            lease_until_ms: now_ms() + LEASE.as_millis() as u64,
        })
        .map(Bytes::from)
        .expect("a record serializes")
    };
    // A few rounds: the record may change between reading it and taking it over.
    for _ in 0..3 {
        match kv.create(key, pending()).await {
            Ok(_) => return Ok(Begun::Fresh),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
            Err(e) => return Err(store_failed(e)),
        }
        let Some(entry) = kv.entry(key).await.map_err(store_failed)? else {
            continue;
        };
        if !matches!(entry.operation, kv::Operation::Put) {
            continue;
        }
        let record: Record = match serde_json::from_slice(&entry.value) {
            Ok(r) => r,
            // Unreadable (another version wrote it): treat as expired.
            Err(_) => Record::Pending {
                digest: dig.to_owned(),
                lease_until_ms: 0,
            },
        };
        if record.digest() != dig {
            return Err(mismatch());
        }
        match record {
            Record::Completed {
                status,
                content_type,
                body,
                ..
            } => return Ok(Begun::Replay(replay(status, content_type, &body))),
            Record::Pending { lease_until_ms, .. } if lease_until_ms > now_ms() => {
                return Err(in_flight(lease_until_ms));
            }
            // The request that held it is gone: take it over (one taker wins the revision).
            Record::Pending { .. } => match kv.update(key, pending(), entry.revision).await {
                Ok(_) => return Ok(Begun::Fresh),
                Err(_) => continue,
            },
        }
    }
    Err(in_flight(now_ms() + 1000))
}

/// The stored answer, marked as a replay.
fn replay(status: u16, content_type: Option<String>, body: &str) -> Response {
    let bytes = B64.decode(body).unwrap_or_default();
    let mut r = Response::new(Body::from(bytes));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    if let Some(ct) = content_type.and_then(|c| HeaderValue::from_str(&c).ok()) {
        r.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    r.headers_mut()
        .insert(IDEMPOTENT_REPLAY_HEADER, HeaderValue::from_static("true"));
    r
}

/// Runs `work` at most once per (scope, `Idempotency-Key`) and answers repeats with its
/// final answer. `request` is what makes two requests the same (the path's ids and the raw
/// body): a repeat with other parts is a key mismatch. Without a key, `work` just runs.
///
/// Call it after authenticating and authorizing the caller (a replay is still a request of
/// theirs) and before any side effect.
pub async fn idempotent<F, Fut>(
    s: &RestState,
    headers: &HeaderMap,
    scope: Scope<'_>,
    request: &[&[u8]],
    work: F,
) -> Result<Response, ApiError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Response, ApiError>>,
{
    let Some(key) = key_of(headers)? else {
        return work().await;
    };
    let kv = bucket(s).await?;
    let rkey = record_key(&scope, &key);
    let mut parts = vec![scope.operation.as_bytes()];
    parts.extend_from_slice(request);
    let dig = digest(&parts);
    if let Begun::Replay(r) = begin(&kv, &rkey, &dig).await? {
        return Ok(r);
    }
    let answer = match work().await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    let (parts, body) = answer.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_STORED_RESPONSE).await {
        Ok(b) => b,
        Err(e) => {
            // Too large to keep: answered once, never replayed; the key is freed.
            tracing::warn!(operation = scope.operation, error = %e, "response not kept for Idempotency-Key replay");
            let _ = kv.delete(&rkey).await;
            return Err(ApiError::internal(
                "the response could not be recorded for Idempotency-Key replay",
            ));
        }
    };
    let code = (!parts.status.is_success())
        .then(|| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .flatten()
        .and_then(|v| v.get("error").and_then(|c| c.as_str()).map(str::to_owned));
    if is_final(parts.status, code.as_deref()) {
        let record = Record::Completed {
            digest: dig,
            status: parts.status.as_u16(),
            content_type: parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body: B64.encode(stored_body(&bytes)),
        };
        let value = serde_json::to_vec(&record).expect("a record serializes");
        if let Err(e) = kv.put(&rkey, value.into()).await {
            // The work is done and answered; a repeat after the lease runs it again.
            tracing::warn!(operation = scope.operation, error = %e, "Idempotency-Key answer not recorded");
        }
    } else if let Err(e) = kv.delete(&rkey).await {
        tracing::warn!(operation = scope.operation, error = %e, "Idempotency-Key record not released");
    }
    Ok(Response::from_parts(parts, Body::from(bytes)))
}

/// `bytes` as kept: a JSON object without its [`NEVER_STORED`] fields; anything else as is.
fn stored_body(bytes: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(mut m)) if NEVER_STORED.iter().any(|f| m.contains_key(*f)) => {
            for f in NEVER_STORED {
                m.remove(*f);
            }
            serde_json::to_vec(&m).unwrap_or_default()
        }
        _ => bytes.to_vec(),
    }
}

/// Whether `r` is a replayed answer (it may lack the [`NEVER_STORED`] fields).
pub fn is_replay(r: &Response) -> bool {
    r.headers().contains_key(IDEMPOTENT_REPLAY_HEADER)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(k: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(IDEMPOTENCY_KEY_HEADER, HeaderValue::from_str(k).unwrap());
        h
    }

    #[test]
    fn keys_are_short_url_safe_strings() {
        assert_eq!(key_of(&HeaderMap::new()).unwrap(), None);
        let k = "openwop-conformance-1764140000-ab12-replay";
        assert_eq!(key_of(&headers(k)).unwrap().as_deref(), Some(k));
        assert!(key_of(&headers("3f0c1d52-7d4e-4a8e-9a63-1b2d7d5b0c11")).is_ok());
        for bad in ["", "has space", "a/b", &"k".repeat(256)] {
            let e = key_of(&headers(bad)).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad:?}");
            assert_eq!(e.body.error, "validation_error");
            assert!(!e.body.message.contains(bad) || bad.is_empty(), "echoed");
        }
    }

    #[test]
    fn the_record_key_hides_the_caller_key_and_separates_callers() {
        let scope = |principal| Scope {
            namespace: "team-a",
            operation: op::CANCEL_RUN,
            principal,
        };
        let a = record_key(&scope("alice"), "secret-key-1");
        assert!(a.starts_with("team-a.cancelRun."), "{a}");
        assert!(!a.contains("secret-key-1"));
        assert_ne!(a, record_key(&scope("bob"), "secret-key-1"));
        assert_eq!(a, record_key(&scope("alice"), "secret-key-1"));
    }

    #[test]
    fn only_final_answers_are_kept() {
        let kept = |s: u16, c: Option<&str>| is_final(StatusCode::from_u16(s).unwrap(), c);
        assert!(kept(200, None) && kept(201, None) && kept(204, None));
        assert!(kept(404, Some("not_found")));
        assert!(kept(409, Some("interrupt_already_resolved")));
        assert!(kept(410, Some("interrupt_expired")));
        assert!(kept(400, Some("webhook_url_rejected")));
        for (s, c) in [
            (400, Some("validation_error")),
            (401, Some("unauthenticated")),
            (403, Some("forbidden")),
            (409, Some("conflict")),
            (409, Some(IDEMPOTENCY_IN_FLIGHT)),
            (429, Some("rate_limited")),
            (500, Some("internal")),
            (502, None),
            (503, Some("unavailable")),
        ] {
            assert!(!kept(s, c), "{s} {c:?}");
        }
    }

    #[test]
    fn a_secret_shown_once_is_never_kept() {
        let kept = stored_body(br#"{"webhookId":"wh_1","secret":"abc","secretFingerprint":"12"}"#);
        let v: serde_json::Value = serde_json::from_slice(&kept).unwrap();
        assert_eq!(v, json!({"webhookId": "wh_1", "secretFingerprint": "12"}));
        assert_eq!(stored_body(b"{\"runId\":\"r\"}"), b"{\"runId\":\"r\"}");
        assert_eq!(stored_body(b""), b"");
    }

    #[test]
    fn digests_differ_by_part_boundaries() {
        assert_ne!(digest(&[b"ab", b"c"]), digest(&[b"a", b"bc"]));
        assert_eq!(digest(&[b"ab", b"c"]), digest(&[b"ab", b"c"]));
    }

    /// One request holds a key; a second one waits (409 in flight) or is refused (another
    /// request: mismatch); a dead request's lease runs out and is taken over; a final answer
    /// replays as it was; a released key is free again. Against a real nats-server.
    #[tokio::test]
    async fn a_key_is_held_taken_over_replayed_and_released() {
        let nats = openwop_nats::testing::NatsServer::start();
        let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
        let kv = js
            .create_key_value(kv::Config {
                bucket: "idem".into(),
                history: 1,
                ..Default::default()
            })
            .await
            .unwrap();
        let fresh = |b: &Result<Begun, ApiError>| matches!(b, Ok(Begun::Fresh));
        assert!(fresh(&begin(&kv, "k", "d1").await));
        let busy = begin(&kv, "k", "d1").await.err().unwrap();
        assert_eq!(
            (busy.status, busy.body.error.as_str()),
            (StatusCode::CONFLICT, IDEMPOTENCY_IN_FLIGHT)
        );
        let wait = busy.body.details.as_ref().unwrap()["retryAfter"]
            .as_u64()
            .unwrap();
        assert!((1..=LEASE.as_secs()).contains(&wait), "{wait}");
        assert!(busy.retry_after.is_some());
        let other = begin(&kv, "k", "d2").await.err().unwrap();
        assert_eq!(other.body.error, IDEMPOTENCY_KEY_MISMATCH);
        // The request holding it died: its lease ran out.
        let dead = Record::Pending {
            digest: "d1".into(),
            lease_until_ms: now_ms() - 1,
        };
        kv.put("k", serde_json::to_vec(&dead).unwrap().into())
            .await
            .unwrap();
        assert!(fresh(&begin(&kv, "k", "d1").await));
        // Its final answer replays, marked.
        let done = Record::Completed {
            digest: "d1".into(),
            status: 201,
            content_type: Some("application/json".into()),
            body: B64.encode(br#"{"runId":"r-1"}"#),
        };
        kv.put("k", serde_json::to_vec(&done).unwrap().into())
            .await
            .unwrap();
        let Ok(Begun::Replay(r)) = begin(&kv, "k", "d1").await else {
            panic!("no replay")
        };
        assert_eq!(r.status(), StatusCode::CREATED);
        assert_eq!(r.headers()[IDEMPOTENT_REPLAY_HEADER], "true");
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
        let body = axum::body::to_bytes(r.into_body(), 1024).await.unwrap();
        assert_eq!(&body[..], br#"{"runId":"r-1"}"#);
        assert_eq!(
            begin(&kv, "k", "d2").await.err().unwrap().body.error,
            IDEMPOTENCY_KEY_MISMATCH
        );
        // Released (a refusal that is not final): the key is free.
        kv.delete("k").await.unwrap();
        assert!(fresh(&begin(&kv, "k", "d3").await));
    }
}
