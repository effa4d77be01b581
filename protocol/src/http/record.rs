//! The HTTP call journal: every attempt of an HTTP node is recorded in the run's log before
//! its result counts, and a restarted worker answers from the record instead of calling
//! again — the same discipline as the provider-call journal (`crate::retry::journal`).
//!
//! Each attempt's outcome rides in a `log.appended` debug event under
//! `fields.`[`HTTP_CALL_FIELD`] (the spec's event types are closed; `log.appended.fields` is
//! the open object it allows). [`next`] is the whole decision: given the attempts recorded
//! so far it says whether to call (and after which wait), complete with outputs, or fail.
//! The worker feeds it the *recorded* (redacted) form of every attempt, live or restored, so a
//! replayed node yields exactly the events and outputs of an uninterrupted one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::config::{HttpConfig, Method};
use crate::events::{ErrorInfo, EventType, LogAppended, LogLevel, RunEventDoc};

/// The key under `log.appended.fields` that marks an HTTP call record.
pub const HTTP_CALL_FIELD: &str = "httpCall";

/// The egress guard refused the target (`details.url`); never retried.
pub const URL_REJECTED: &str = "http_url_rejected";
/// No complete response within `timeoutMs`, after every attempt.
pub const TIMEOUT: &str = "http_timeout";
/// No response at all, after every attempt.
pub const NETWORK_ERROR: &str = "http_network_error";
/// An answer outside `expectStatus` (`core.http.request`).
pub const UNEXPECTED_STATUS: &str = "http_unexpected_status";
/// The body passed the host's bound (`details.maxBytes`).
pub const RESPONSE_TOO_LARGE: &str = "http_response_too_large";
/// The call cannot be built: a URL variable or a header's secret is missing, or a secret
/// cannot be redacted.
pub const REQUEST_INVALID: &str = "validation_error";

/// Response headers never recorded or reported: they carry credentials or session state.
const UNRECORDED_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "set-cookie2",
];

/// Whether a response header (lower-case name) is recorded and reported.
pub fn is_recorded_header(name: &str) -> bool {
    !UNRECORDED_HEADERS.contains(&name)
}

/// What one attempt got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Outcome {
    /// An HTTP response (any status), its body within the host's bound.
    #[serde(rename_all = "camelCase")]
    Response {
        status: u16,
        /// Lower-case names; credentials headers are never recorded ([`is_recorded_header`]).
        headers: BTreeMap<String, String>,
        /// JSON when the response says JSON and parses as an object, array or string; else
        /// the text (invalid UTF-8 replaced); `null` when empty.
        body: Value,
        /// Body size in bytes.
        bytes: u64,
    },
    /// No response: connection refused, reset, TLS failure, DNS failure.
    #[serde(rename_all = "camelCase")]
    NetworkError { message: String },
    /// No complete response within `timeoutMs`.
    #[serde(rename_all = "camelCase")]
    Timeout { timeout_ms: u64 },
    /// The body passed the host's bound; the rest was not read.
    #[serde(rename_all = "camelCase")]
    TooLarge { max_bytes: u64 },
}

/// One recorded attempt, as it rides in `fields.httpCall`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRecord {
    /// The node attempt's step key ([`step_key`]).
    pub step_key: String,
    /// The attempt (1-based) within the node's retry policy.
    pub attempt: u32,
    pub method: String,
    /// The URL called (templates filled; the log redacts any secret in it).
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Wall time of the attempt.
    pub duration_ms: u64,
    pub outcome: Outcome,
}

/// The step key of node attempt `node_attempt` (0-based) of HTTP node `node_id`.
pub fn step_key(node_id: &str, node_attempt: u32) -> String {
    if node_attempt == 0 {
        format!("{node_id}:http")
    } else {
        format!("{node_id}:http:r{node_attempt}")
    }
}

impl CallRecord {
    /// The step key of the `log.appended` event that records this attempt.
    pub fn event_step(&self) -> String {
        format!("{}/call/{}", self.step_key, self.attempt)
    }

    /// The `log.appended` payload.
    pub fn to_payload(&self, node_id: &str) -> LogAppended {
        let what = match &self.outcome {
            Outcome::Response { status, bytes, .. } => format!("status {status}, {bytes} bytes"),
            Outcome::NetworkError { .. } => "network error".to_owned(),
            Outcome::Timeout { timeout_ms } => format!("no response within {timeout_ms} ms"),
            Outcome::TooLarge { max_bytes } => format!("body over {max_bytes} bytes"),
        };
        LogAppended {
            level: LogLevel::Debug,
            message: format!(
                "HTTP {} attempt {}: {what} (recorded; a restarted worker does not call again)",
                self.method, self.attempt
            ),
            node_id: Some(node_id.to_owned()),
            fields: Some(json!({ HTTP_CALL_FIELD: self })),
        }
    }

    /// The record an event carries, if it is one.
    pub fn of_event(e: &RunEventDoc) -> Option<CallRecord> {
        if e.event_type != EventType::LogAppended {
            return None;
        }
        let v = e.payload.get("fields")?.get(HTTP_CALL_FIELD)?;
        serde_json::from_value(v.clone()).ok()
    }
}

/// The recorded attempts of step `step_key` of node `node_id` in `events`, by attempt.
pub fn restore(events: &[RunEventDoc], node_id: &str, step_key: &str) -> BTreeMap<u32, CallRecord> {
    events
        .iter()
        .filter(|e| e.node_id.as_deref() == Some(node_id))
        .filter_map(CallRecord::of_event)
        .filter(|r| r.step_key == step_key)
        .map(|r| (r.attempt, r))
        .collect()
}

/// Every HTTP attempt node `node_id` made, over all its node attempts, in log order.
pub fn calls_of(events: &[RunEventDoc], node_id: &str) -> Vec<CallRecord> {
    events
        .iter()
        .filter(|e| e.node_id.as_deref() == Some(node_id))
        .filter_map(CallRecord::of_event)
        .collect()
}

/// The response as the node reports it: `Content-Type` decides between JSON and text.
pub fn shape_response(status: u16, headers: &[(String, String)], body: &[u8]) -> Outcome {
    let mut kept: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        if !is_recorded_header(&name) {
            continue;
        }
        kept.entry(name)
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(value);
            })
            .or_insert_with(|| value.clone());
    }
    let json = kept
        .get("content-type")
        .is_some_and(|t| t.to_ascii_lowercase().contains("json"));
    let body_value = if body.is_empty() {
        Value::Null
    } else {
        let parsed = json
            .then(|| serde_json::from_slice::<Value>(body).ok())
            .flatten()
            .filter(|v| v.is_object() || v.is_array() || v.is_string());
        parsed.unwrap_or_else(|| Value::String(String::from_utf8_lossy(body).into_owned()))
    };
    Outcome::Response {
        status,
        headers: kept,
        body: body_value,
        bytes: body.len() as u64,
    }
}

/// What the node does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Make attempt `attempt` after waiting `delay_ms` (the wait is skipped when the attempt
    /// is already recorded).
    Call { attempt: u32, delay_ms: u64 },
    /// The node completes with these outputs.
    Complete(Value),
    /// The node fails.
    Fail(ErrorInfo),
}

fn fail(code: &str, message: String, details: Value, retryable: bool) -> Next {
    Next::Fail(ErrorInfo {
        code: code.to_owned(),
        message,
        details: Some(details),
        retryable: Some(retryable),
    })
}

/// The decision after the attempts in `done` (attempts 1..=n in order, as recorded):
/// 5xx answers, network errors and timeouts are retried up to `retry.maxAttempts`; any other
/// answer completes (or fails with `http_unexpected_status` outside `expectStatus`); a body
/// over the bound fails at once. `durationMs` counts every attempt and every wait, from the
/// records, so a replayed node reports the same duration.
pub fn next(cfg: &HttpConfig, idempotency_key: Option<&str>, done: &[CallRecord]) -> Next {
    let Some(last) = done.last() else {
        return Next::Call {
            attempt: 1,
            delay_ms: 0,
        };
    };
    let attempts = done.len() as u32;
    let retry = || Next::Call {
        attempt: attempts + 1,
        delay_ms: cfg.retry.delay_before(attempts + 1),
    };
    let more = attempts < cfg.retry.max_attempts;
    let duration_ms: u64 = done.iter().map(|r| r.duration_ms).sum::<u64>()
        + (2..=attempts)
            .map(|a| cfg.retry.delay_before(a))
            .sum::<u64>();
    let where_ = json!({"method": cfg.method.as_str(), "url": last.url, "attempts": attempts});
    // "GET https://…": how every failure message names the call.
    let call = format!("{} {}", cfg.method.as_str(), last.url);
    match &last.outcome {
        Outcome::Response { status, .. } if *status >= 500 && more => retry(),
        Outcome::NetworkError { .. } | Outcome::Timeout { .. } if more => retry(),
        Outcome::Response {
            status,
            headers,
            body,
            ..
        } => {
            if let Some(expected) = &cfg.expect_status
                && !expected.contains(status)
            {
                return fail(
                    UNEXPECTED_STATUS,
                    format!(
                        "{call} answered {status}; the node expects {}",
                        expected
                            .iter()
                            .map(u16::to_string)
                            .collect::<Vec<_>>()
                            .join(" or ")
                    ),
                    json!({"status": status, "expected": expected, "url": last.url}),
                    false,
                );
            }
            let mut out = Map::new();
            out.insert("status".into(), json!(status));
            out.insert("headers".into(), json!(headers));
            out.insert("body".into(), body.clone());
            out.insert("durationMs".into(), json!(duration_ms));
            out.insert("attempts".into(), json!(attempts));
            if let Some(k) = idempotency_key {
                out.insert("idempotencyKey".into(), json!(k));
            }
            Next::Complete(Value::Object(out))
        }
        Outcome::NetworkError { message } => fail(
            NETWORK_ERROR,
            format!("{call} got no response in {attempts} attempt(s): {message}"),
            where_,
            true,
        ),
        Outcome::Timeout { timeout_ms } => fail(
            TIMEOUT,
            format!(
                "{call} gave no complete response within {timeout_ms} ms in {attempts} attempt(s); raise config.timeoutMs if the service is slow"
            ),
            where_,
            true,
        ),
        Outcome::TooLarge { max_bytes } => fail(
            RESPONSE_TOO_LARGE,
            format!(
                "{call} sent a body larger than {max_bytes} bytes (the host's limits.maxHttpResponseBytes); it was not read"
            ),
            json!({"maxBytes": max_bytes, "url": last.url}),
            false,
        ),
    }
}

/// Whether `method`'s calls carry the idempotency key under `cfg`.
pub fn sends_idempotency_key(cfg: &HttpConfig, method: Method) -> bool {
    cfg.idempotency_key && !method.is_idempotent_by_definition()
}

#[cfg(test)]
mod tests {
    use super::super::config::Dialect;
    use super::*;
    use crate::events::RunEventDoc;

    fn cfg(extra: Value) -> HttpConfig {
        let mut c = json!({"url": "https://api.example.com/x", "retry": {"maxAttempts": 3, "initialDelayMs": 100, "maxDelayMs": 150}});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        HttpConfig::parse(Dialect::Fetch, &c).unwrap()
    }

    fn rec(attempt: u32, outcome: Outcome) -> CallRecord {
        CallRecord {
            step_key: step_key("n", 0),
            attempt,
            method: "GET".into(),
            url: "https://api.example.com/x".into(),
            idempotency_key: None,
            duration_ms: 10,
            outcome,
        }
    }

    fn status(s: u16) -> Outcome {
        shape_response(s, &[], b"")
    }

    #[test]
    fn five_hundreds_and_network_errors_retry_with_backoff_then_settle() {
        let c = cfg(json!({}));
        assert_eq!(
            next(&c, None, &[]),
            Next::Call {
                attempt: 1,
                delay_ms: 0
            }
        );
        let one = [rec(1, status(503))];
        assert_eq!(
            next(&c, None, &one),
            Next::Call {
                attempt: 2,
                delay_ms: 100
            }
        );
        let two = [
            rec(1, status(503)),
            rec(
                2,
                Outcome::NetworkError {
                    message: "connection refused".into(),
                },
            ),
        ];
        assert_eq!(
            next(&c, None, &two),
            Next::Call {
                attempt: 3,
                delay_ms: 150
            }
        );
        // The last attempt's 5xx is the node's answer: the workflow branches on `status`.
        let three = [two[0].clone(), two[1].clone(), rec(3, status(502))];
        let Next::Complete(out) = next(&c, None, &three) else {
            panic!()
        };
        assert_eq!(out["status"], 502);
        assert_eq!(out["attempts"], 3);
        assert_eq!(out["durationMs"], 30 + 100 + 150);
        // Network errors to the end fail the node.
        let dead: Vec<CallRecord> = (1..=3)
            .map(|a| {
                rec(
                    a,
                    Outcome::NetworkError {
                        message: "reset".into(),
                    },
                )
            })
            .collect();
        let Next::Fail(e) = next(&c, None, &dead) else {
            panic!()
        };
        assert_eq!(
            (e.code.as_str(), e.retryable),
            ("http_network_error", Some(true))
        );
        let Next::Fail(e) = next(
            &c,
            None,
            &[
                rec(1, Outcome::Timeout { timeout_ms: 100 }),
                rec(2, Outcome::Timeout { timeout_ms: 100 }),
                rec(3, Outcome::Timeout { timeout_ms: 100 }),
            ],
        ) else {
            panic!()
        };
        assert_eq!(e.code, "http_timeout");
    }

    #[test]
    fn four_hundreds_are_answers_and_too_large_fails_at_once() {
        let c = cfg(json!({}));
        let Next::Complete(out) =
            next(&c, Some("openwop-0123456789abcdef"), &[rec(1, status(404))])
        else {
            panic!()
        };
        assert_eq!(out["status"], 404);
        assert_eq!(out["idempotencyKey"], "openwop-0123456789abcdef");
        let Next::Fail(e) = next(&c, None, &[rec(1, Outcome::TooLarge { max_bytes: 1024 })]) else {
            panic!()
        };
        assert_eq!(e.code, "http_response_too_large");
        assert_eq!(e.details.unwrap()["maxBytes"], 1024);
        assert_eq!(e.retryable, Some(false));
    }

    #[test]
    fn expect_status_turns_other_answers_into_failures() {
        let c = HttpConfig::parse(
            Dialect::Request,
            &json!({"url": "https://api.example.com/x", "expectStatus": [200, 201]}),
        )
        .unwrap();
        assert!(matches!(
            next(&c, None, &[rec(1, status(201))]),
            Next::Complete(_)
        ));
        let Next::Fail(e) = next(&c, None, &[rec(1, status(500))]) else {
            panic!()
        };
        assert_eq!(e.code, "http_unexpected_status");
        assert_eq!(e.details.unwrap()["status"], 500);
    }

    #[test]
    fn responses_keep_json_text_and_no_credentials() {
        let headers = vec![
            (
                "Content-Type".to_owned(),
                "application/json; charset=utf-8".to_owned(),
            ),
            ("Set-Cookie".to_owned(), "session=abc".to_owned()),
            ("X-Trace".to_owned(), "a".to_owned()),
            ("x-trace".to_owned(), "b".to_owned()),
        ];
        let Outcome::Response {
            headers: h,
            body,
            bytes,
            ..
        } = shape_response(200, &headers, br#"{"ok": true}"#)
        else {
            panic!()
        };
        assert_eq!(body, json!({"ok": true}));
        assert_eq!(bytes, 12);
        assert_eq!(h.get("x-trace").map(String::as_str), Some("a, b"));
        assert!(!h.contains_key("set-cookie"));
        let Outcome::Response { body, .. } = shape_response(200, &headers, b"not json") else {
            panic!()
        };
        assert_eq!(body, json!("not json"));
        let Outcome::Response { body, .. } = shape_response(200, &headers, b"42") else {
            panic!()
        };
        assert_eq!(body, json!("42"), "a JSON number is reported as its text");
        let Outcome::Response { body, .. } = shape_response(200, &[], b"plain") else {
            panic!()
        };
        assert_eq!(body, json!("plain"));
    }

    #[test]
    fn records_round_trip_through_the_log_and_restore_by_step() {
        let r = CallRecord {
            idempotency_key: Some("openwop-00".into()),
            ..rec(2, status(503))
        };
        let payload = r.to_payload("n");
        let doc = RunEventDoc {
            event_id: "e".into(),
            run_id: "run".into(),
            event_type: EventType::LogAppended,
            node_id: Some("n".into()),
            payload: serde_json::to_value(&payload).unwrap(),
            timestamp: "2026-01-01T00:00:00Z".into(),
            sequence: 3,
            schema_version: None,
            engine_version: None,
            causation_id: None,
            content_trust: None,
        };
        assert_eq!(CallRecord::of_event(&doc), Some(r.clone()));
        let restored = restore(std::slice::from_ref(&doc), "n", &step_key("n", 0));
        assert_eq!(restored.get(&2), Some(&r));
        assert!(restore(std::slice::from_ref(&doc), "n", &step_key("n", 1)).is_empty());
        assert!(restore(std::slice::from_ref(&doc), "m", &step_key("n", 0)).is_empty());
        assert_eq!(r.event_step(), "n:http/call/2");
        assert_eq!(calls_of(&[doc], "n").len(), 1);
    }
}
