//! The `webhooks` section of the operator config (chart `webhooks.*`).

use std::time::Duration;

use openwop_protocol::egress::EgressPolicy;
use openwop_protocol::webhook::DeliveryPolicy;
use serde::{Deserialize, Serialize};

#[cfg(test)]
use super::OperatorConfig;
use super::error::ConfigError;

use crate::signing_key::KeyError;

/// Bounds of `webhooks.maxAttempts`.
pub const MAX_ATTEMPTS: std::ops::RangeInclusive<u32> = 1..=20;
/// Bounds of `webhooks.timeoutSeconds` (the spec's per-attempt timeout is 5 s).
pub const TIMEOUT_SECONDS: std::ops::RangeInclusive<u64> = 1..=30;

/// Webhook subscriptions and their delivery.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct WebhooksConfig {
    /// Serve `POST/DELETE /v1/webhooks` and deliver (needs `events.natsUrl` and a signing
    /// key); advertised as `webhooks.supported` only then.
    pub enabled: bool,
    /// File holding the key every subscription's secret is derived from (a mounted Secret).
    pub signing_key_file: String,
    /// JetStream key-value bucket holding the subscriptions (shared by the replicas).
    pub bucket: String,
    /// Hosts, `*.suffixes`, addresses or CIDR blocks a subscription may target although they
    /// are internal (`protocol::egress`); https is required whatever this says.
    pub allow_hosts: Vec<String>,
    /// PEM file of extra CA certificates trusted for deliveries (e.g. an internal CA);
    /// empty: the system's roots only.
    pub ca_file: String,
    /// Subscriptions one tenant (namespace) may hold.
    pub max_per_tenant: usize,
    /// Attempts per delivery (1 = the spec's best effort, no retry).
    pub max_attempts: u32,
    /// Wait after the first failed attempt (each later wait is 4×, up to `maxBackoffSeconds`).
    pub initial_backoff_ms: u64,
    pub max_backoff_seconds: u64,
    /// Per-attempt timeout.
    pub timeout_seconds: u64,
    /// Consecutive failed deliveries that open a subscription's circuit.
    pub breaker_threshold: u32,
    /// How long an open circuit skips deliveries before probing again.
    pub breaker_open_seconds: u64,
    /// Failed deliveries within `failureWindowHours` that mark a subscription failed (spec:
    /// 100 in 7 days); it then gets nothing until it is registered again.
    pub failure_limit: u32,
    pub failure_window_hours: u64,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        let p = DeliveryPolicy::default();
        WebhooksConfig {
            enabled: false,
            signing_key_file: String::new(),
            bucket: "openwop-webhooks".into(),
            allow_hosts: Vec::new(),
            ca_file: String::new(),
            max_per_tenant: 50,
            max_attempts: p.max_attempts,
            initial_backoff_ms: p.initial_backoff.as_millis() as u64,
            max_backoff_seconds: p.max_backoff.as_secs(),
            timeout_seconds: p.timeout.as_secs(),
            breaker_threshold: p.breaker_threshold,
            breaker_open_seconds: p.breaker_open.as_secs(),
            failure_limit: p.failure_limit,
            failure_window_hours: p.failure_window.as_secs() / 3600,
        }
    }
}

impl WebhooksConfig {
    /// The egress policy of subscription URLs: https only, plus the allow list.
    pub fn egress(&self) -> EgressPolicy {
        // Validated at load: the entries parse.
        EgressPolicy::allowing(&self.allow_hosts)
            .unwrap_or_default()
            .https_only()
    }

    pub fn delivery_policy(&self) -> DeliveryPolicy {
        DeliveryPolicy {
            max_attempts: self.max_attempts,
            initial_backoff: Duration::from_millis(self.initial_backoff_ms),
            max_backoff: Duration::from_secs(self.max_backoff_seconds),
            timeout: Duration::from_secs(self.timeout_seconds),
            breaker_threshold: self.breaker_threshold,
            breaker_open: Duration::from_secs(self.breaker_open_seconds),
            failure_limit: self.failure_limit,
            failure_window: Duration::from_secs(self.failure_window_hours.saturating_mul(3600)),
        }
    }

    /// The signing key (read each time: a rotated Secret reaches the operator; rotating it
    /// changes every subscription's secret).
    pub fn signing_key(&self) -> Result<Vec<u8>, KeyError> {
        crate::signing_key::read("webhooks.signingKeyFile", &self.signing_key_file)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, message: String| Err(ConfigError::Invalid { field, message });
        if let Err(e) = EgressPolicy::allowing(&self.allow_hosts) {
            return invalid("webhooks.allowHosts", e.to_string());
        }
        if !MAX_ATTEMPTS.contains(&self.max_attempts) {
            return invalid(
                "webhooks.maxAttempts",
                format!("must be {}..{}", MAX_ATTEMPTS.start(), MAX_ATTEMPTS.end()),
            );
        }
        if !TIMEOUT_SECONDS.contains(&self.timeout_seconds) {
            return invalid(
                "webhooks.timeoutSeconds",
                format!(
                    "must be {}..{}",
                    TIMEOUT_SECONDS.start(),
                    TIMEOUT_SECONDS.end()
                ),
            );
        }
        if self.initial_backoff_ms == 0
            || self.max_backoff_seconds.saturating_mul(1000) < self.initial_backoff_ms
        {
            return invalid(
                "webhooks.initialBackoffMs",
                "must be > 0 and not above webhooks.maxBackoffSeconds".into(),
            );
        }
        if self.breaker_threshold == 0 || self.breaker_open_seconds == 0 {
            return invalid(
                "webhooks.breakerThreshold",
                "breakerThreshold and breakerOpenSeconds must be at least 1".into(),
            );
        }
        if self.failure_limit == 0 || self.failure_window_hours == 0 {
            return invalid(
                "webhooks.failureLimit",
                "failureLimit and failureWindowHours must be at least 1".into(),
            );
        }
        if self.max_per_tenant == 0 {
            return invalid("webhooks.maxPerTenant", "must be at least 1".into());
        }
        if self.bucket.is_empty()
            || !self
                .bucket
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return invalid(
                "webhooks.bucket",
                format!(
                    "{:?} is not a JetStream bucket name (letters, digits, '-' and '_')",
                    self.bucket
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_follow_the_protocol_policy() {
        let c = WebhooksConfig::default();
        c.validate().unwrap();
        assert_eq!(c.delivery_policy(), DeliveryPolicy::default());
        let mut op = OperatorConfig::default();
        assert!(!op.webhooks_active());
        op.webhooks.enabled = true;
        assert!(!op.webhooks_active(), "no NATS: nothing to deliver");
        op.events.nats_url = Some("nats://x".into());
        assert!(op.webhooks_active());
        op.rest.enabled = false;
        assert!(!op.webhooks_active(), "no REST API: nothing registers");
    }

    #[test]
    fn bad_settings_name_their_field() {
        for (c, field) in [
            (
                WebhooksConfig {
                    allow_hosts: vec!["http://x".into()],
                    ..Default::default()
                },
                "webhooks.allowHosts",
            ),
            (
                WebhooksConfig {
                    max_attempts: 0,
                    ..Default::default()
                },
                "webhooks.maxAttempts",
            ),
            (
                WebhooksConfig {
                    timeout_seconds: 60,
                    ..Default::default()
                },
                "webhooks.timeoutSeconds",
            ),
            (
                WebhooksConfig {
                    failure_window_hours: 0,
                    ..Default::default()
                },
                "webhooks.failureLimit",
            ),
            (
                WebhooksConfig {
                    bucket: "a.b".into(),
                    ..Default::default()
                },
                "webhooks.bucket",
            ),
        ] {
            match c.validate() {
                Err(ConfigError::Invalid { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_signing_key_is_read_trimmed_and_must_be_long_enough() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        let mut c = WebhooksConfig::default();
        assert!(matches!(c.signing_key(), Err(KeyError::Unset { .. })));
        c.signing_key_file = path.display().to_string();
        assert!(matches!(c.signing_key(), Err(KeyError::Read { .. })));
        std::fs::write(&path, "short\n").unwrap();
        assert!(matches!(
            c.signing_key(),
            Err(KeyError::Short { len: 5, .. })
        ));
        std::fs::write(&path, format!("{}\n", "k".repeat(40))).unwrap();
        assert_eq!(c.signing_key().unwrap(), "k".repeat(40).into_bytes());
    }
}
