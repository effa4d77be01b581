//! Webhook subscriptions (`spec/v1/webhooks.md`): what a registration may say, how a delivery
//! is signed and verified (`v1`: HMAC-SHA256 over `{timestamp}.{rawBody}`), the delivery body,
//! and the delivery policy (retries with backoff inside one delivery, a circuit breaker per
//! subscription across deliveries).
//!
//! Pure: the operator does the HTTP, the clock and the storage; this module decides.
//!
//! Retries: the spec's floor is best effort (one attempt per event, 5 s timeout). The issue
//! asks for retries, so a delivery here is up to [`DeliveryPolicy::max_attempts`] attempts
//! with exponential backoff (1 s, 4 s, 16 s, 60 s by default) on 3xx, 408, 425, 429, 5xx,
//! timeouts and connection errors; any other 4xx is the receiver refusing the delivery and is
//! not retried. The spec's circuit breaker then counts *deliveries*, not attempts: after
//! [`DeliveryPolicy::breaker_threshold`] consecutive failed deliveries the subscription's
//! deliveries are skipped for [`DeliveryPolicy::breaker_open`]; the first delivery after that
//! is a probe whose success closes the circuit and whose failure opens it again. A
//! subscription whose deliveries failed [`DeliveryPolicy::failure_limit`] times within
//! [`DeliveryPolicy::failure_window`] (spec: 100 in 7 days) is marked failed: no more
//! deliveries until it is registered again. The breaker's state is plain data over wall-clock
//! milliseconds ([`Breaker`] serializes), so every replica of a host can share one record per
//! subscription instead of each counting only what it saw. Receivers may see a delivery more
//! than once (at-least-once): they dedupe on [`headers::DELIVERY_ID`], one id per
//! (subscription, event).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::egress::{EgressPolicy, EgressRefusal, Target};
use crate::hmac::{constant_time_eq, hmac_sha256};

/// The signature scheme this host signs with (`X-openwop-Signature-Algorithm`).
pub const SIGNATURE_ALGORITHM: &str = "v1";
/// `User-Agent` of deliveries, followed by the host's version.
pub const USER_AGENT_PREFIX: &str = "openwop-webhook-dispatcher/";
/// Receivers reject a timestamp further than this from their clock (spec: ±5 minutes).
pub const MAX_CLOCK_SKEW_SECS: u64 = 300;
/// Prefix of subscription ids (`wh_a3b9c2` in the spec's examples).
pub const WEBHOOK_ID_PREFIX: &str = "wh_";

/// Request headers of a delivery.
pub mod headers {
    pub const WEBHOOK_ID: &str = "X-openwop-Webhook-Id";
    pub const EVENT_TYPE: &str = "X-openwop-Event-Type";
    pub const TIMESTAMP: &str = "X-openwop-Timestamp";
    pub const SIGNATURE: &str = "X-openwop-Signature";
    pub const SIGNATURE_ALGORITHM: &str = "X-openwop-Signature-Algorithm";
    /// Host extension: one id per (subscription, event), the same on every retry, so a
    /// receiver can drop a delivery it has already acted on.
    pub const DELIVERY_ID: &str = "X-openwop-Delivery-Id";
}

/// Bounds of a registration.
pub const MAX_URL_CHARS: usize = 2048;
pub const MAX_EVENT_TYPES: usize = 100;
pub const MAX_EVENT_TYPE_CHARS: usize = 128;
/// Same bounds as a run's `tags` (`RunOptions.tags`).
pub const MAX_TAGS: usize = 100;
pub const MAX_TAG_CHARS: usize = 256;

// ---------------------------------------------------------------------------
// Signing
// ---------------------------------------------------------------------------

/// `X-openwop-Signature` of `body` signed at `timestamp` (unix seconds):
/// `sha256=<hex HMAC-SHA256(secret, "{timestamp}.{body}")>`.
pub fn signature(secret: &str, timestamp: u64, body: &[u8]) -> String {
    format!("sha256={}", hex::encode(mac(secret, timestamp, body)))
}

fn mac(secret: &str, timestamp: u64, body: &[u8]) -> [u8; 32] {
    let mut signed = Vec::with_capacity(body.len() + 21);
    signed.extend_from_slice(timestamp.to_string().as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(body);
    hmac_sha256(secret.as_bytes(), &signed)
}

/// Why a delivery does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("signature algorithm {0:?} is not v1; this receiver verifies v1 only")]
    Algorithm(String),
    #[error("X-openwop-Timestamp {0:?} is not unix seconds")]
    Timestamp(String),
    #[error(
        "X-openwop-Timestamp is {skew} s from this clock (more than {MAX_CLOCK_SKEW_SECS} s): a replay or a wrong clock"
    )]
    Skew { skew: u64 },
    #[error("X-openwop-Signature is not `sha256=<64 hex>`")]
    Malformed,
    #[error("the signature does not match the body and timestamp under this secret")]
    Mismatch,
}

/// Checks a received delivery the way the spec's recipe does: algorithm `v1` (absent means
/// `v1`), timestamp within [`MAX_CLOCK_SKEW_SECS`] of `now` (unix seconds), and the signature
/// over the exact bytes received, compared in constant time.
pub fn verify(
    secret: &str,
    algorithm: Option<&str>,
    timestamp: &str,
    signature_header: &str,
    body: &[u8],
    now: u64,
) -> Result<(), VerifyError> {
    if let Some(a) = algorithm.filter(|a| *a != SIGNATURE_ALGORITHM) {
        return Err(VerifyError::Algorithm(a.to_owned()));
    }
    let ts: u64 = timestamp
        .trim()
        .parse()
        .map_err(|_| VerifyError::Timestamp(timestamp.to_owned()))?;
    let skew = ts.abs_diff(now);
    if skew > MAX_CLOCK_SKEW_SECS {
        return Err(VerifyError::Skew { skew });
    }
    let got = signature_header
        .trim()
        .strip_prefix("sha256=")
        .and_then(|h| hex::decode(h).ok())
        .filter(|b| b.len() == 32)
        .ok_or(VerifyError::Malformed)?;
    if constant_time_eq(&got, &mac(secret, ts, body)) {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

/// `secretFingerprint`: the first 8 hex characters of `sha256(secret)`. Logs name a
/// subscription's secret by this, never by the secret.
pub fn fingerprint(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))[..8].to_owned()
}

/// The signing secret of subscription `webhook_id` in `tenant` (64 hex characters), derived
/// from the host's signing key. Nothing secret is stored per subscription: every replica
/// recomputes it from the one key it mounts, and deleting the subscription retires it (ids
/// are random and never reused).
pub fn derive_secret(signing_key: &[u8], tenant: &str, webhook_id: &str) -> String {
    let info = format!("openwop-webhook-secret/v1\n{tenant}\n{webhook_id}");
    hex::encode(hmac_sha256(signing_key, info.as_bytes()))
}

/// The delivery id of `event_id` to `webhook_id`: the same for every attempt, different for
/// every (subscription, event).
pub fn delivery_id(webhook_id: &str, event_id: &str) -> String {
    let digest = Sha256::new()
        .chain_update(webhook_id.as_bytes())
        .chain_update([0u8])
        .chain_update(event_id.as_bytes())
        .finalize();
    format!("dlv_{}", &hex::encode(digest)[..32])
}

/// A subscription id from 12 random bytes (the caller draws them).
pub fn webhook_id(random: [u8; 12]) -> String {
    format!("{WEBHOOK_ID_PREFIX}{}", hex::encode(random))
}

/// Whether `s` can be a subscription id this host issued (a lookup key, never trusted text).
pub fn is_webhook_id(s: &str) -> bool {
    s.strip_prefix(WEBHOOK_ID_PREFIX).is_some_and(|h| {
        h.len() == 24
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The body of a delivery: `{runId, workspaceId, event}`, `event` the run's `RunEventDoc`
/// exactly as it is in the log.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryBody<'a> {
    pub run_id: &'a str,
    pub workspace_id: &'a str,
    pub event: &'a RawValue,
}

impl DeliveryBody<'_> {
    /// The bytes sent (and signed).
    pub fn to_bytes(&self) -> Vec<u8> {
        // A struct of strings and a RawValue always serialises.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------

/// A registration request that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub url: String,
    pub target: Target,
    /// Distinct event types, in the order given.
    pub events: Vec<String>,
    pub tenant_id: Option<String>,
    pub tags: Vec<String>,
}

/// Why a registration is refused: the wire code and a message saying what and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// `validation_error`: `field` is missing or malformed.
    #[error("{message}")]
    Invalid { field: String, message: String },
    /// `webhook_url_rejected`: the URL is well formed but may not be a delivery target.
    #[error("url rejected: {0}")]
    UrlRejected(EgressRefusal),
}

impl RegistrationError {
    pub fn code(&self) -> &'static str {
        match self {
            RegistrationError::Invalid { .. } => "validation_error",
            RegistrationError::UrlRejected(_) => "webhook_url_rejected",
        }
    }

    fn invalid(field: &str, message: impl Into<String>) -> Self {
        RegistrationError::Invalid {
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

/// `POST /v1/webhooks` body, as read: closed, so a member the spec does not define is
/// refused by name. [`parse_registration`] checks what the types cannot.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegisterWebhookRequest {
    /// `https://` URL deliveries are POSTed to (internal addresses are refused unless the
    /// host's allow list names them; at most 2048 characters).
    pub url: String,
    /// Run event types to deliver (1 to 64, e.g. `run.completed`).
    pub events: Vec<String>,
    /// Namespace of the runs to deliver; defaults to the caller's ServiceAccount namespace.
    #[serde(default)]
    pub tenant_id: Option<String>,
    /// Deliver only events of runs carrying one of these tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Read only to refuse it by name: this host generates every secret.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub secret: Option<serde::de::IgnoredAny>,
}

/// Checks a read `POST /v1/webhooks` body: `url` must pass `policy` (https only, no internal
/// address unless allow-listed); `events` is a non-empty list of run event types.
pub fn parse_registration(
    req: RegisterWebhookRequest,
    policy: &EgressPolicy,
) -> Result<Registration, RegistrationError> {
    if req.secret.is_some() {
        return Err(RegistrationError::invalid(
            "secret",
            "this host generates every subscription's secret; a caller-supplied secret is not accepted",
        ));
    }
    let url = req.url.trim().to_owned();
    if url.is_empty() {
        return Err(RegistrationError::invalid(
            "url",
            "url must be a non-empty string (an https:// URL)",
        ));
    }
    if url.chars().count() > MAX_URL_CHARS {
        return Err(RegistrationError::invalid(
            "url",
            format!("url is longer than {MAX_URL_CHARS} characters"),
        ));
    }
    let events = check_events(&req.events)?;
    let tags = check_tags(req.tags.as_deref().unwrap_or_default())?;
    let target = policy.check_url(&url).map_err(|e| match e {
        EgressRefusal::Malformed { .. } => RegistrationError::invalid("url", e.to_string()),
        other => RegistrationError::UrlRejected(other),
    })?;
    Ok(Registration {
        url,
        target,
        events,
        tenant_id: req.tenant_id,
        tags,
    })
}

fn check_events(list: &[String]) -> Result<Vec<String>, RegistrationError> {
    if list.is_empty() {
        return Err(RegistrationError::invalid(
            "events",
            "events is empty: name at least one run event type (e.g. run.completed)",
        ));
    }
    if list.len() > MAX_EVENT_TYPES {
        return Err(RegistrationError::invalid(
            "events",
            format!("events names more than {MAX_EVENT_TYPES} types"),
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for (i, t) in list.iter().enumerate() {
        if !is_event_type(t) {
            return Err(RegistrationError::invalid(
                &format!("events[{i}]"),
                format!(
                    "events[{i}] is not a run event type (dotted lower-camel words such as \
                     run.completed or node.failed, at most {MAX_EVENT_TYPE_CHARS} characters)"
                ),
            ));
        }
        if !out.contains(t) {
            out.push(t.clone());
        }
    }
    Ok(out)
}

fn check_tags(list: &[String]) -> Result<Vec<String>, RegistrationError> {
    if list.len() > MAX_TAGS {
        return Err(RegistrationError::invalid(
            "tags",
            format!("tags has more than {MAX_TAGS} entries"),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            if !t.is_empty() && t.chars().count() <= MAX_TAG_CHARS {
                Ok(t.clone())
            } else {
                Err(RegistrationError::invalid(
                    &format!("tags[{i}]"),
                    format!("tags[{i}] must be a string of 1..{MAX_TAG_CHARS} characters"),
                ))
            }
        })
        .collect()
}

/// A `RunEventType` spelling: dot-separated words of ASCII letters and digits starting with
/// a lower-case letter (`run.completed`, `agent.toolCalled`, `envelope.nlToFormat.engaged`).
pub fn is_event_type(t: &str) -> bool {
    t.len() <= MAX_EVENT_TYPE_CHARS
        && t.contains('.')
        && t.split('.').all(|w| {
            w.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
                && w.bytes().all(|b| b.is_ascii_alphanumeric())
        })
}

/// Whether a subscription for `events` (and `tags`, empty = any run) wants an event of
/// `event_type` from a run tagged `run_tags`.
pub fn wants(events: &[String], tags: &[String], event_type: &str, run_tags: &[String]) -> bool {
    events.iter().any(|e| e == event_type)
        && (tags.is_empty() || tags.iter().any(|t| run_tags.contains(t)))
}

// ---------------------------------------------------------------------------
// Delivery policy
// ---------------------------------------------------------------------------

/// How hard a delivery is tried, and when a subscription's circuit opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryPolicy {
    /// Attempts per delivery (1 = the spec's best effort).
    pub max_attempts: u32,
    /// Wait after the first failed attempt; each later wait is 4× the previous.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Per-attempt timeout (spec: 5 s).
    pub timeout: Duration,
    /// Consecutive failed deliveries that open the circuit (spec: 4).
    pub breaker_threshold: u32,
    /// How long an open circuit skips deliveries before a probe (spec: 1 h).
    pub breaker_open: Duration,
    /// Failed deliveries within [`Self::failure_window`] that mark the subscription failed
    /// (spec: 100).
    pub failure_limit: u32,
    /// The rolling window of [`Self::failure_limit`] (spec: 7 days).
    pub failure_window: Duration,
}

impl Default for DeliveryPolicy {
    fn default() -> Self {
        DeliveryPolicy {
            max_attempts: 5,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            timeout: Duration::from_secs(5),
            breaker_threshold: 4,
            breaker_open: Duration::from_secs(3600),
            failure_limit: 100,
            failure_window: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// 2xx.
    Delivered,
    /// Worth another attempt: 3xx (redirects are never followed), 408, 425, 429, 5xx, a
    /// timeout or a connection failure. The text is for logs.
    Transient(String),
    /// The receiver refused the delivery (another 4xx), or the target is no longer allowed:
    /// another attempt would get the same answer.
    Refused(String),
}

impl Attempt {
    /// The outcome of an HTTP response status.
    pub fn of_status(status: u16) -> Attempt {
        match status {
            200..=299 => Attempt::Delivered,
            300..=399 => Attempt::Transient(format!(
                "HTTP {status}: redirects are not followed; answer 2xx at the registered URL"
            )),
            408 | 425 | 429 | 500..=599 => Attempt::Transient(format!("HTTP {status}")),
            _ => Attempt::Refused(format!("HTTP {status}")),
        }
    }
}

/// What to do with a delivery after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Done (delivered).
    Done,
    /// Attempt again after this long.
    RetryAfter(Duration),
    /// Failed for good: no more attempts.
    Failed,
}

impl DeliveryPolicy {
    /// The wait before attempt `attempt + 1`, after `attempt` (≥ 1) failed.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 4u32.saturating_pow(attempt.saturating_sub(1));
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }

    /// After attempt number `attempt` (1-based) came to `outcome`.
    pub fn step(&self, attempt: u32, outcome: &Attempt) -> Step {
        match outcome {
            Attempt::Delivered => Step::Done,
            Attempt::Refused(_) => Step::Failed,
            Attempt::Transient(_) if attempt >= self.max_attempts => Step::Failed,
            Attempt::Transient(_) => Step::RetryAfter(self.backoff(attempt)),
        }
    }
}

/// Whether a subscription's next delivery is attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Circuit closed.
    Deliver,
    /// The open period is over: this delivery probes the receiver.
    Probe,
    /// Circuit open: skip the delivery (`remaining` until the next probe).
    Skip { remaining: Duration },
    /// The subscription failed for good: nothing is delivered until it is registered again.
    Retired,
}

/// Where a subscription stands after a failed delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Still delivering.
    Closed,
    /// The circuit is open: deliveries are skipped until a probe.
    Open,
    /// The failure limit of the window is reached: the subscription is failed (this is the
    /// failure that did it; report it once).
    Retired,
}

/// The circuit breaker and failure count of one subscription, over wall-clock Unix
/// milliseconds supplied by the caller. Serializable: the host keeps one record per
/// subscription that every replica reads and updates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Breaker {
    #[serde(default)]
    consecutive_failures: u32,
    /// While open: when the next probe may go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    open_until_ms: Option<u64>,
    /// When the failed deliveries still inside the window failed (oldest first; never more
    /// than the failure limit).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    failures_ms: Vec<u64>,
    /// When the subscription was marked failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retired_at_ms: Option<u64>,
}

impl Breaker {
    /// Whether a delivery starting at `now_ms` may be attempted.
    pub fn admit(&self, now_ms: u64) -> Admission {
        match (self.retired_at_ms, self.open_until_ms) {
            (Some(_), _) => Admission::Retired,
            (None, None) => Admission::Deliver,
            (None, Some(until)) if now_ms >= until => Admission::Probe,
            (None, Some(until)) => Admission::Skip {
                remaining: Duration::from_millis(until - now_ms),
            },
        }
    }

    /// A delivery succeeded: the circuit closes. Earlier failures stay counted in their
    /// window (the limit is on failures, not on consecutive ones).
    pub fn delivered(&mut self) {
        self.consecutive_failures = 0;
        self.open_until_ms = None;
    }

    /// A delivery failed for good at `now_ms`.
    pub fn failed(&mut self, now_ms: u64, policy: &DeliveryPolicy) -> AfterFailure {
        if self.retired_at_ms.is_some() {
            return AfterFailure::Open;
        }
        let window = policy.failure_window.as_millis() as u64;
        self.failures_ms
            .retain(|&t| now_ms.saturating_sub(t) < window);
        self.failures_ms.push(now_ms);
        let limit = policy.failure_limit.max(1) as usize;
        if self.failures_ms.len() > limit {
            let excess = self.failures_ms.len() - limit;
            self.failures_ms.drain(..excess);
        }
        if self.failures_ms.len() >= limit {
            self.retired_at_ms = Some(now_ms);
            self.open_until_ms = None;
            return AfterFailure::Retired;
        }
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        let probing = self.open_until_ms.is_some();
        if probing || self.consecutive_failures >= policy.breaker_threshold.max(1) {
            self.open_until_ms = Some(now_ms + policy.breaker_open.as_millis() as u64);
            AfterFailure::Open
        } else {
            AfterFailure::Closed
        }
    }

    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// Failed deliveries inside the window as of the last failure.
    pub fn recent_failures(&self) -> usize {
        self.failures_ms.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const SECRET: &str = "f8a3c0ffee0123456789abcdef0123456789abcdef0123456789abcdef012345";

    #[test]
    fn signature_and_secret_vectors() {
        // Computed independently with `openssl dgst -sha256 -hmac`.
        assert_eq!(
            signature(SECRET, 1_700_000_000, br#"{"a":1}"#),
            "sha256=606433009e983ec9528dd8cdfc9a27e9c734847ed5dc91bc03e7b30d53fc8929"
        );
        assert_eq!(
            derive_secret(b"key", "team-a", "wh_1"),
            "ff998f2599d732d3faccc71925ba84b195bf26b189ff877d8af03d15cfd2419a"
        );
    }

    #[test]
    fn verify_accepts_its_own_signature_and_refuses_every_alteration() {
        let body = br#"{"runId":"r1","workspaceId":"t","event":{}}"#;
        let now = 1_700_000_000;
        let sig = signature(SECRET, now, body);
        let ts = now.to_string();
        assert_eq!(verify(SECRET, Some("v1"), &ts, &sig, body, now), Ok(()));
        assert_eq!(verify(SECRET, None, &ts, &sig, body, now + 300), Ok(()));
        assert_eq!(
            verify(SECRET, Some("v2"), &ts, &sig, body, now),
            Err(VerifyError::Algorithm("v2".into()))
        );
        assert_eq!(
            verify(SECRET, None, &ts, &sig, body, now + 301),
            Err(VerifyError::Skew { skew: 301 })
        );
        assert_eq!(
            verify(SECRET, None, "soon", &sig, body, now),
            Err(VerifyError::Timestamp("soon".into()))
        );
        assert_eq!(
            verify(SECRET, None, &ts, &sig, b"{}", now),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(SECRET, None, &(now + 1).to_string(), &sig, body, now),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify("another", None, &ts, &sig, body, now),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(SECRET, None, &ts, &sig[7..], body, now),
            Err(VerifyError::Malformed)
        );
        assert_eq!(
            verify(SECRET, None, &ts, "sha256=abcd", body, now),
            Err(VerifyError::Malformed)
        );
    }

    #[test]
    fn secrets_fingerprints_and_ids() {
        let a = derive_secret(b"key", "team-a", "wh_1");
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(a, derive_secret(b"key", "team-a", "wh_1"));
        assert_ne!(a, derive_secret(b"key", "team-b", "wh_1"));
        assert_ne!(a, derive_secret(b"key", "team-a", "wh_2"));
        assert_ne!(a, derive_secret(b"other", "team-a", "wh_1"));
        // sha256("abc") = ba7816bf...
        assert_eq!(fingerprint("abc"), "ba7816bf");
        let d = delivery_id("wh_1", "ev-7");
        assert_eq!(d, delivery_id("wh_1", "ev-7"));
        assert_ne!(d, delivery_id("wh_2", "ev-7"));
        assert_ne!(d, delivery_id("wh_1", "ev-8"));
        assert!(d.starts_with("dlv_") && d.len() == 36);
        let id = webhook_id([0xab; 12]);
        assert_eq!(id, "wh_abababababababababababab");
        assert!(is_webhook_id(&id));
        for bad in [
            "wh-does-not-exist",
            "wh_",
            "wh_ABABABABABABABABABABABAB",
            "x",
        ] {
            assert!(!is_webhook_id(bad), "{bad}");
        }
    }

    #[test]
    fn the_body_carries_the_event_verbatim() {
        let raw =
            RawValue::from_string(r#"{"type":"run.completed", "sequence":3}"#.into()).unwrap();
        let body = DeliveryBody {
            run_id: "r1",
            workspace_id: "team-a",
            event: &raw,
        }
        .to_bytes();
        assert_eq!(
            String::from_utf8(body).unwrap(),
            r#"{"runId":"r1","workspaceId":"team-a","event":{"type":"run.completed", "sequence":3}}"#
        );
    }

    fn policy() -> EgressPolicy {
        EgressPolicy::default().https_only()
    }

    /// A body read and checked as the REST API does: read (naming the member at fault),
    /// then checked.
    fn register(body: &Value, policy: &EgressPolicy) -> Result<Registration, RegistrationError> {
        let req: RegisterWebhookRequest = crate::text::read_json(body)
            .map_err(|e| RegistrationError::invalid(&e.field, e.message))?;
        parse_registration(req, policy)
    }

    fn code_of(body: Value) -> (String, String) {
        match register(&body, &policy()) {
            Err(e @ RegistrationError::Invalid { .. }) => {
                let RegistrationError::Invalid { field, .. } = &e else {
                    unreachable!()
                };
                (e.code().to_owned(), field.clone())
            }
            Err(e) => (e.code().to_owned(), String::new()),
            Ok(r) => panic!("accepted {r:?}"),
        }
    }

    #[test]
    fn registration_errors_match_the_webhook_negative_scenario() {
        // Leg 1: loopback over http.
        assert_eq!(
            code_of(json!({"url": "http://127.0.0.1:65535/", "events": ["run.completed"]})).0,
            "webhook_url_rejected"
        );
        // Loopback over https is refused for the address, not the scheme.
        let e = register(
            &json!({"url": "https://127.0.0.1/", "events": ["run.completed"]}),
            &policy(),
        )
        .unwrap_err();
        assert!(matches!(
            e,
            RegistrationError::UrlRejected(EgressRefusal::Address { .. })
        ));
        // Leg 2: not a URL.
        assert_eq!(
            code_of(json!({"url": "not a url", "events": ["run.completed"]})),
            ("validation_error".into(), "url".into())
        );
        // Leg 3: no url (and a field the spec does not have).
        assert_eq!(code_of(json!({"events": ["run.completed"]})).1, "url");
        assert_eq!(
            code_of(json!({"eventTypes": ["run.completed"]})),
            ("validation_error".into(), "eventTypes".into())
        );
    }

    #[test]
    fn registration_field_checks_name_the_field() {
        let url = "https://hooks.example.com/openwop";
        for (body, field) in [
            (json!([]), ""),
            (json!({"url": url}), "events"),
            (json!({"url": url, "events": []}), "events"),
            (json!({"url": url, "events": "run.completed"}), "events"),
            (
                json!({"url": url, "events": ["run.completed", "Run Completed"]}),
                "events[1]",
            ),
            (
                json!({"url": url, "events": ["run.completed"], "tags": "x"}),
                "tags",
            ),
            (
                json!({"url": url, "events": ["run.completed"], "tags": [""]}),
                "tags[0]",
            ),
            (
                json!({"url": url, "events": ["run.completed"], "tenantId": 3}),
                "tenantId",
            ),
            (json!({"url": 7, "events": ["run.completed"]}), "url"),
            (
                json!({"url": url, "events": ["run.completed"], "secret": "mine"}),
                "secret",
            ),
        ] {
            assert_eq!(
                code_of(body.clone()),
                ("validation_error".into(), field.into()),
                "{body}"
            );
        }
        let r = register(
            &json!({"url": url, "events": ["run.completed", "node.failed", "run.completed"],
                    "tenantId": "team-a", "tags": ["prod"]}),
            &policy(),
        )
        .unwrap();
        assert_eq!(r.events, ["run.completed", "node.failed"]);
        assert_eq!(r.tenant_id.as_deref(), Some("team-a"));
        assert_eq!(r.tags, ["prod"]);
        assert_eq!(r.target.host, "hooks.example.com");
    }

    #[test]
    fn the_allow_list_admits_a_private_receiver_but_never_plain_http() {
        let p = EgressPolicy::allowing(["127.0.0.1"]).unwrap().https_only();
        let ok = json!({"url": "https://127.0.0.1:8443/hook", "events": ["run.completed"]});
        assert!(register(&ok, &p).unwrap().target.allowed);
        let http = json!({"url": "http://127.0.0.1:8443/hook", "events": ["run.completed"]});
        assert!(matches!(
            register(&http, &p),
            Err(RegistrationError::UrlRejected(EgressRefusal::Scheme { .. }))
        ));
    }

    #[test]
    fn event_types_and_filters() {
        for t in [
            "run.completed",
            "agent.toolCalled",
            "envelope.nlToFormat.engaged",
        ] {
            assert!(is_event_type(t), "{t}");
        }
        for t in [
            "run",
            "Run.completed",
            "run..x",
            "run.completed ",
            "run.comp-leted",
            "",
        ] {
            assert!(!is_event_type(t), "{t}");
        }
        let ev = vec!["run.completed".to_owned()];
        assert!(wants(&ev, &[], "run.completed", &[]));
        assert!(!wants(&ev, &[], "run.failed", &[]));
        let tags = vec!["prod".to_owned()];
        assert!(!wants(&ev, &tags, "run.completed", &[]));
        assert!(wants(
            &ev,
            &tags,
            "run.completed",
            &["dev".into(), "prod".into()]
        ));
    }

    #[test]
    fn attempts_retry_with_backoff_then_fail() {
        let p = DeliveryPolicy::default();
        assert_eq!(Attempt::of_status(204), Attempt::Delivered);
        assert!(matches!(Attempt::of_status(302), Attempt::Transient(_)));
        assert!(matches!(Attempt::of_status(429), Attempt::Transient(_)));
        assert!(matches!(Attempt::of_status(503), Attempt::Transient(_)));
        assert!(matches!(Attempt::of_status(401), Attempt::Refused(_)));
        let t = Attempt::Transient("HTTP 500".into());
        let waits: Vec<Step> = (1..=5).map(|a| p.step(a, &t)).collect();
        assert_eq!(
            waits,
            [
                Step::RetryAfter(Duration::from_secs(1)),
                Step::RetryAfter(Duration::from_secs(4)),
                Step::RetryAfter(Duration::from_secs(16)),
                Step::RetryAfter(Duration::from_secs(60)),
                Step::Failed,
            ]
        );
        assert_eq!(
            p.step(1, &Attempt::Refused("HTTP 400".into())),
            Step::Failed
        );
        assert_eq!(p.step(3, &Attempt::Delivered), Step::Done);
        let best_effort = DeliveryPolicy {
            max_attempts: 1,
            ..p
        };
        assert_eq!(best_effort.step(1, &t), Step::Failed);
    }

    #[test]
    fn the_breaker_opens_after_consecutive_failed_deliveries_and_probes() {
        let p = DeliveryPolicy {
            breaker_threshold: 4,
            breaker_open: Duration::from_secs(3600),
            ..DeliveryPolicy::default()
        };
        let mut b = Breaker::default();
        let t = |s: u64| s * 1000;
        for i in 0..3 {
            assert_eq!(b.admit(t(i)), Admission::Deliver);
            assert_eq!(b.failed(t(i), &p), AfterFailure::Closed);
        }
        // A success in between resets the count.
        b.delivered();
        for i in 0..3 {
            assert_eq!(b.failed(t(10 + i), &p), AfterFailure::Closed);
        }
        assert_eq!(b.failed(t(20), &p), AfterFailure::Open);
        assert_eq!(
            b.admit(t(21)),
            Admission::Skip {
                remaining: Duration::from_secs(3599)
            }
        );
        assert_eq!(b.admit(t(3620)), Admission::Probe);
        // A failed probe opens it again at once.
        assert_eq!(b.failed(t(3620), &p), AfterFailure::Open);
        assert!(matches!(b.admit(t(3621)), Admission::Skip { .. }));
        assert_eq!(b.admit(t(7220)), Admission::Probe);
        b.delivered();
        assert_eq!(b.admit(t(7221)), Admission::Deliver);
        assert_eq!(b.consecutive_failures(), 0);
        assert_eq!(
            b.recent_failures(),
            8,
            "a success does not forgive earlier failures"
        );
    }

    #[test]
    fn the_hundredth_failure_inside_seven_days_retires_the_subscription() {
        let p = DeliveryPolicy::default();
        assert_eq!(
            (p.failure_limit, p.failure_window.as_secs()),
            (100, 7 * 24 * 3600)
        );
        let hour = 3_600_000u64;
        let mut b = Breaker::default();
        // 99 failures, each followed by a success so the circuit never stays open.
        for i in 0..99 {
            assert_ne!(b.failed(i * hour, &p), AfterFailure::Retired, "failure {i}");
            b.delivered();
        }
        assert_eq!(b.recent_failures(), 99);
        assert_eq!(b.failed(99 * hour, &p), AfterFailure::Retired);
        assert_eq!(b.admit(99 * hour + 1), Admission::Retired);
        assert_eq!(
            b.admit(u64::MAX),
            Admission::Retired,
            "only a new registration helps"
        );
        b.delivered();
        assert_eq!(b.admit(100 * hour), Admission::Retired);
    }

    #[test]
    fn failures_older_than_the_window_do_not_count() {
        let p = DeliveryPolicy {
            failure_limit: 3,
            failure_window: Duration::from_secs(100),
            breaker_threshold: 10,
            ..DeliveryPolicy::default()
        };
        let mut b = Breaker::default();
        assert_eq!(b.failed(0, &p), AfterFailure::Closed);
        assert_eq!(b.failed(50_000, &p), AfterFailure::Closed);
        // The first one is out of the window by then: two in the window.
        assert_eq!(b.failed(100_001, &p), AfterFailure::Closed);
        assert_eq!(b.recent_failures(), 2);
        assert_eq!(b.failed(120_000, &p), AfterFailure::Retired);
    }

    #[test]
    fn the_breaker_record_round_trips_and_an_old_record_reads_as_closed() {
        let p = DeliveryPolicy {
            breaker_threshold: 1,
            ..DeliveryPolicy::default()
        };
        let mut b = Breaker::default();
        b.failed(5_000, &p);
        let json = serde_json::to_value(&b).unwrap();
        assert_eq!(
            json,
            json!({"consecutiveFailures": 1, "openUntilMs": 3_605_000u64, "failuresMs": [5000]})
        );
        assert_eq!(serde_json::from_value::<Breaker>(json).unwrap(), b);
        assert_eq!(
            serde_json::from_value::<Breaker>(json!({})).unwrap(),
            Breaker::default()
        );
    }
}
