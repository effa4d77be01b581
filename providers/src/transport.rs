//! HTTP transport with bounded, logged retries for transient failures.
//!
//! 429 waits for `Retry-After` (delta-seconds, capped) or the backoff; 5xx, timeouts and
//! connection errors back off exponentially; other statuses fail at once. These retries
//! are never envelope retries: the router sees one response (or one error) per call.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use serde_json::Value;

use crate::ProviderError;
use crate::secret::ApiKey;

/// Bounds of the transport layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportPolicy {
    /// Whole-request timeout for one HTTP attempt.
    pub timeout: Duration,
    /// Retries after the first attempt (so at most `max_retries + 1` HTTP requests per call).
    pub max_retries: u32,
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    /// Longest `Retry-After` we honour; a longer one is clamped to this.
    pub max_retry_after: Duration,
    /// Largest response body read (the host profile's `maxProviderResponseBytes`); a larger
    /// one fails the call without being read whole.
    pub max_body_bytes: u64,
}

impl Default for TransportPolicy {
    fn default() -> Self {
        TransportPolicy {
            timeout: Duration::from_secs(120),
            max_retries: 3,
            base_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
            max_body_bytes: openwop_protocol::run::host::DEFAULT_MAX_PROVIDER_RESPONSE_BYTES,
        }
    }
}

impl TransportPolicy {
    fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(16)).unwrap_or(u32::MAX);
        self.base_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }

    fn retry_after(&self, headers: &HeaderMap, retry: u32) -> Duration {
        headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(|secs| Duration::from_secs(secs).min(self.max_retry_after))
            // An HTTP-date or missing header: fall back to our own backoff.
            .unwrap_or_else(|| self.backoff(retry))
    }
}

/// A shared HTTP client plus the policy it runs under.
#[derive(Debug, Clone)]
pub(crate) struct Transport {
    client: reqwest::Client,
    policy: TransportPolicy,
    provider: String,
}

const MAX_ERROR_MESSAGE: usize = 300;

impl Transport {
    pub(crate) fn new(provider: &str, policy: TransportPolicy) -> Result<Self, ProviderError> {
        let client = reqwest::Client::builder()
            .timeout(policy.timeout)
            .build()
            .map_err(|e| ProviderError::Config(format!("cannot build HTTP client: {e}")))?;
        Ok(Transport {
            client,
            policy,
            provider: provider.to_string(),
        })
    }

    /// POSTs `body` as JSON and returns the decoded JSON body of a 2xx answer.
    /// `headers` carries the auth header, already marked sensitive.
    pub(crate) async fn post_json(
        &self,
        url: &str,
        headers: HeaderMap,
        body: &Value,
        key: Option<&ApiKey>,
    ) -> Result<Value, ProviderError> {
        let scrub = |s: String| match key {
            Some(k) => k.scrub(&s),
            None => s,
        };
        let mut retry = 0u32;
        loop {
            let outcome = self
                .client
                .post(url)
                .headers(headers.clone())
                .json(body)
                .send()
                .await;
            let (delay, last) = match outcome {
                Ok(resp) => {
                    let status = resp.status();
                    if status.is_success() {
                        let bytes = match self.read_bounded(resp).await {
                            Ok(b) => b,
                            Err(Bounded::TooLarge) => {
                                return Err(ProviderError::ResponseTooLarge {
                                    provider: self.provider.clone(),
                                    limit: self.policy.max_body_bytes,
                                });
                            }
                            Err(Bounded::Read(e)) => {
                                return Err(ProviderError::Transport {
                                    provider: self.provider.clone(),
                                    message: scrub(without_url(&e)),
                                });
                            }
                        };
                        return serde_json::from_slice(&bytes).map_err(|e| ProviderError::Decode {
                            provider: self.provider.clone(),
                            message: format!("response body is not JSON: {e}"),
                        });
                    }
                    let transient =
                        status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error();
                    let delay = if status == StatusCode::TOO_MANY_REQUESTS {
                        self.policy.retry_after(resp.headers(), retry)
                    } else {
                        self.policy.backoff(retry)
                    };
                    // An error body is only quoted (truncated): read at most the same bound.
                    let text = match self.read_bounded(resp).await {
                        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                        Err(Bounded::TooLarge) => {
                            "error body larger than the response limit".into()
                        }
                        Err(Bounded::Read(_)) => String::new(),
                    };
                    let message = scrub(vendor_error_message(&text));
                    if !transient {
                        return Err(ProviderError::Http {
                            provider: self.provider.clone(),
                            status: status.as_u16(),
                            message,
                        });
                    }
                    (delay, format!("HTTP {}: {message}", status.as_u16()))
                }
                Err(e) if e.is_timeout() || e.is_connect() || e.is_request() => {
                    (self.policy.backoff(retry), scrub(without_url(&e)))
                }
                Err(e) => {
                    return Err(ProviderError::Transport {
                        provider: self.provider.clone(),
                        message: scrub(without_url(&e)),
                    });
                }
            };
            if retry >= self.policy.max_retries {
                return Err(ProviderError::RetriesExhausted {
                    provider: self.provider.clone(),
                    attempts: retry + 1,
                    last,
                });
            }
            retry += 1;
            tracing::warn!(
                provider = %self.provider,
                retry,
                max_retries = self.policy.max_retries,
                delay_ms = delay.as_millis() as u64,
                error = %last,
                "transient provider failure; transport retry (not an envelope retry)"
            );
            tokio::time::sleep(delay).await;
        }
    }
}

/// Why a body was not read whole.
enum Bounded {
    TooLarge,
    Read(reqwest::Error),
}

impl Transport {
    /// The body, read chunk by chunk and abandoned as soon as it exceeds the policy's
    /// `max_body_bytes` (a `Content-Length` above it is refused before reading anything).
    async fn read_bounded(&self, mut resp: reqwest::Response) -> Result<Vec<u8>, Bounded> {
        let limit = self.policy.max_body_bytes;
        if resp.content_length().is_some_and(|n| n > limit) {
            return Err(Bounded::TooLarge);
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(Bounded::Read)? {
            if (body.len() + chunk.len()) as u64 > limit {
                return Err(Bounded::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// reqwest errors print the URL; some vendors take keys in query strings, so drop it.
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "request timed out"
    } else if e.is_connect() {
        "connection failed"
    } else if e.is_body() || e.is_decode() {
        "response body could not be read"
    } else {
        "request failed"
    };
    let mut source = std::error::Error::source(e);
    let mut detail = String::new();
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() {
        kind.to_string()
    } else {
        format!("{kind} ({detail})")
    }
}

/// The vendor's `error.message` (all three vendors use that shape), else the body's start.
fn vendor_error_message(body: &str) -> String {
    let msg = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| body.to_string());
    openwop_protocol::text::truncate(&msg, MAX_ERROR_MESSAGE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let p = TransportPolicy {
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            ..TransportPolicy::default()
        };
        assert_eq!(p.backoff(0), Duration::from_millis(100));
        assert_eq!(p.backoff(1), Duration::from_millis(200));
        assert_eq!(p.backoff(2), Duration::from_millis(350));
        assert_eq!(p.backoff(40), Duration::from_millis(350));
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let p = TransportPolicy {
            max_retry_after: Duration::from_secs(5),
            base_backoff: Duration::from_millis(100),
            ..TransportPolicy::default()
        };
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("2"));
        assert_eq!(p.retry_after(&h, 0), Duration::from_secs(2));
        h.insert(RETRY_AFTER, HeaderValue::from_static("3600"));
        assert_eq!(p.retry_after(&h, 0), Duration::from_secs(5));
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(p.retry_after(&h, 1), Duration::from_millis(200));
    }

    #[test]
    fn vendor_messages_are_extracted_and_bounded() {
        assert_eq!(
            vendor_error_message(
                r#"{"error":{"message":"bad schema","type":"invalid_request_error"}}"#
            ),
            "bad schema"
        );
        let long = "x".repeat(1000);
        assert_eq!(
            vendor_error_message(&long).chars().count(),
            MAX_ERROR_MESSAGE + 1
        );
    }
}
