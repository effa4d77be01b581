//! The HTTP call node (`core.openwop.http.fetch`, alias `core.http.request`): its config
//! ([`config`]), its call journal and retry fold ([`record`]), and what the host enforces on
//! every call ([`HttpClientProfile`]: the egress allow list and the response bound). Pure; the
//! worker does the I/O through [`crate::egress`]'s guard: check the URL, resolve, check every
//! address, connect to the checked one.

pub mod config;
pub mod record;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::egress::{BadAllowEntry, EgressPolicy};

pub use config::{Dialect, HttpConfig, Method, RetryPolicy, TemplateError};
pub use record::{
    CallRecord, NETWORK_ERROR, Next, Outcome, REQUEST_INVALID, RESPONSE_TOO_LARGE, TIMEOUT,
    UNEXPECTED_STATUS, URL_REJECTED, is_recorded_header,
};

/// The published pack's node type.
pub const FETCH_TYPE_ID: &str = "core.openwop.http.fetch";
/// The reference Postgres host's node type (its config names).
pub const REQUEST_TYPE_ID: &str = "core.http.request";

/// Default bound of one HTTP node response body (256 KiB): the body is recorded in the run's
/// log and reported in `node.completed`, so it must fit a NATS message with room to spare.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 256 * 1024;
/// Highest allowed bound: the journal's record bound, so every accepted body is recorded
/// and never fetched twice.
pub const MAX_RESPONSE_BYTES_CEILING: u64 =
    crate::retry::journal::MAX_RECORDED_RESPONSE_BYTES as u64;
/// Methods the node sends (advertised in `httpClient.methods`).
pub const METHODS: [Method; 7] = Method::ALL;

/// What the host enforces on every HTTP node call. Part of the host profile (frozen in each
/// run's snapshot), so the worker enforces exactly what the operator was configured with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HttpClientProfile {
    /// Chart `egress.allowHosts`: host names, `*.suffix`, addresses or CIDR blocks the guard
    /// lets through although they are internal (an in-cluster service the platform admin
    /// vouches for).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
    /// Chart `limits.maxHttpResponseBytes`: the largest response body read.
    pub max_response_bytes: u64,
}

impl Default for HttpClientProfile {
    fn default() -> Self {
        HttpClientProfile {
            allow_hosts: Vec::new(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

impl HttpClientProfile {
    /// The egress guard for the node's calls.
    pub fn egress_policy(&self) -> Result<EgressPolicy, BadAllowEntry> {
        EgressPolicy::allowing(&self.allow_hosts)
    }
}

/// The `Idempotency-Key` of a non-idempotent call: `openwop-` and 16 hex digits of
/// SHA-256(runId ␀ nodeId ␀ body), the derivation of the spec's reference
/// `core.openwop.http.fetch` pack (and, for a JSON body, the conformance suite's canonical
/// `sha256(runId\0nodeId\0JSON(payload))`), so the same call gets the same key on any
/// conforming host. The same run, node and body give the same key, so a call repeated after a
/// kill (in flight, unrecorded) is deduplicated by a server that honours the header.
pub fn idempotency_key(run_id: &str, node_id: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(run_id.as_bytes());
    h.update([0]);
    h.update(node_id.as_bytes());
    h.update([0]);
    h.update(body);
    let digest = hex::encode(h.finalize());
    format!("openwop-{}", &digest[..16])
}

/// The request body and its default `Content-Type`: POST, PUT and PATCH send the `body`
/// input (else the config's `body`); a string as text, anything else but `null` as JSON.
pub fn request_body(cfg: &HttpConfig, input: Option<&Value>) -> Option<(Vec<u8>, &'static str)> {
    if !cfg.method.carries_body() {
        return None;
    }
    match input.or(cfg.body.as_ref())? {
        Value::Null => None,
        Value::String(s) => Some((s.as_bytes().to_vec(), "text/plain; charset=utf-8")),
        v => Some((
            serde_json::to_vec(v).unwrap_or_default(),
            "application/json",
        )),
    }
}

/// The redaction id of a Workflow secret (`[REDACTED:secrets.NAME]` in events and logs).
pub fn secret_redaction_id(name: &str) -> String {
    format!("secrets.{name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_idempotency_key_is_stable_per_run_node_and_body() {
        let k = idempotency_key("run-1", "post", br#"{"a":1}"#);
        assert!(k.starts_with("openwop-") && k.len() == 24, "{k}");
        assert_eq!(k, idempotency_key("run-1", "post", br#"{"a":1}"#));
        assert_ne!(k, idempotency_key("run-2", "post", br#"{"a":1}"#));
        assert_ne!(k, idempotency_key("run-1", "other", br#"{"a":1}"#));
        assert_ne!(k, idempotency_key("run-1", "post", br#"{"a":2}"#));
        // The conformance suite's cross-implementation vectors
        // (idempotency-key-determinism.test.ts, canonicalCompositeKey), computed here with
        // Python's hashlib: a JSON body, and no body (payload null).
        assert_eq!(
            idempotency_key(
                "run-A",
                "node-1",
                br#"{"task":"create-charge","amount":100}"#
            ),
            "openwop-75a686dfa6709126"
        );
        assert_eq!(idempotency_key("r", "n", b""), "openwop-5daa03dfdcf03945");
    }

    #[test]
    fn only_body_methods_send_a_body_and_json_is_typed() {
        let post = HttpConfig::parse(
            Dialect::Fetch,
            &json!({"url": "https://x.example/", "method": "POST"}),
        )
        .unwrap();
        assert_eq!(
            request_body(&post, Some(&json!({"a": 1}))),
            Some((br#"{"a":1}"#.to_vec(), "application/json"))
        );
        assert_eq!(
            request_body(&post, Some(&json!("hi"))).unwrap().1,
            "text/plain; charset=utf-8"
        );
        assert_eq!(request_body(&post, Some(&Value::Null)), None);
        assert_eq!(request_body(&post, None), None);
        let get = HttpConfig::parse(Dialect::Fetch, &json!({"url": "https://x.example/"})).unwrap();
        assert_eq!(request_body(&get, Some(&json!({"a": 1}))), None);
        let req = HttpConfig::parse(
            Dialect::Request,
            &json!({"url": "https://x.example/", "method": "PUT", "body": {"b": 2}}),
        )
        .unwrap();
        assert_eq!(request_body(&req, None).unwrap().0, br#"{"b":2}"#.to_vec());
    }

    #[test]
    fn the_profile_defaults_and_builds_the_guard() {
        let p = HttpClientProfile::default();
        assert_eq!(p.max_response_bytes, 256 * 1024);
        assert!(MAX_RESPONSE_BYTES_CEILING >= p.max_response_bytes);
        assert!(
            serde_json::to_value(&p)
                .unwrap()
                .get("allowHosts")
                .is_none()
        );
        let p: HttpClientProfile =
            serde_json::from_value(json!({"allowHosts": ["svc.tools.svc", "10.0.0.0/8"]})).unwrap();
        assert_eq!(p.max_response_bytes, DEFAULT_MAX_RESPONSE_BYTES);
        let guard = p.egress_policy().unwrap();
        assert!(guard.check_url("http://svc.tools.svc/").unwrap().allowed);
        assert!(guard.check_url("http://localhost/").is_err());
        let bad = HttpClientProfile {
            allow_hosts: vec!["http://x".into()],
            ..HttpClientProfile::default()
        };
        assert!(bad.egress_policy().is_err());
    }

    #[test]
    fn credentials_headers_are_never_recorded() {
        for h in [
            "authorization",
            "set-cookie",
            "cookie",
            "proxy-authorization",
        ] {
            assert!(!is_recorded_header(h), "{h}");
        }
        assert!(is_recorded_header("content-type"));
    }
}
