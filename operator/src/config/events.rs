//! The `events` and `natsCredentials` sections of the operator config: the run event
//! stream's consumer and retention, and the credentials of an external NATS.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// The operator's consumer of the run event stream (`worker.eventsStream`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EventsConfig {
    /// NATS URL the operator reads run events from. Unset: no live status; the operator
    /// follows runs from pod state and the worker's termination message only.
    pub nats_url: Option<String>,
    /// Name of the durable JetStream consumer (shared by the replicas; only the leader reads).
    pub consumer: String,
    /// Longest wait before a batch of events is written to the Runs' status.
    pub flush_interval_ms: u64,
    /// How long the stream keeps a run's events and reasoning (JetStream `max_age`): a
    /// duration such as `168h`, `7d`, `90m`, `3600s`, or whole seconds (`3600`); `0` keeps
    /// them until purged. A deleted Run's subjects are purged whatever this says.
    pub retention: String,
}

/// Default `events.retention`: 7 days.
pub const DEFAULT_RETENTION: &str = "168h";

impl EventsConfig {
    /// The consumer's name, the flush interval and the retention.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, message: String| Err(ConfigError::Invalid { field, message });
        if self.consumer.is_empty()
            || !self
                .consumer
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return invalid(
                "events.consumer",
                "must be a non-empty name of letters, digits, `-` or `_`".into(),
            );
        }
        if !(10..=10_000).contains(&self.flush_interval_ms) {
            return invalid("events.flushIntervalMs", "must be 10..10000".into());
        }
        if let Err(message) = parse_retention(&self.retention) {
            return invalid("events.retention", message);
        }
        Ok(())
    }
}

impl Default for EventsConfig {
    fn default() -> Self {
        Self {
            nats_url: None,
            consumer: "openwop-operator".into(),
            flush_interval_ms: 250,
            retention: DEFAULT_RETENTION.into(),
        }
    }
}

/// Parses a retention: whole seconds (`3600`), or one or more `<n><unit>` groups with unit
/// `s`, `m`, `h` or `d` (`168h`, `1d12h`). `0` (or `0s`, …) = keep until purged (`None`).
pub fn parse_retention(text: &str) -> Result<Option<Duration>, String> {
    let t = text.trim();
    let bad = || {
        format!(
            "{text:?} is not a duration: use whole seconds (`3600`) or <n><unit> groups with unit s, m, h or d (`168h`, `7d`, `1d12h`); `0` keeps events until purged"
        )
    };
    if t.is_empty() {
        return Err(bad());
    }
    let secs: u64 = if t.bytes().all(|b| b.is_ascii_digit()) {
        t.parse().map_err(|_| bad())?
    } else {
        let mut total: u64 = 0;
        let mut digits = String::new();
        for c in t.chars() {
            if c.is_ascii_digit() {
                digits.push(c);
                continue;
            }
            let unit = match c {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86_400,
                _ => return Err(bad()),
            };
            let n: u64 = digits.parse().map_err(|_| bad())?;
            digits.clear();
            total = n
                .checked_mul(unit)
                .and_then(|v| total.checked_add(v))
                .ok_or_else(bad)?;
        }
        if !digits.is_empty() {
            return Err(bad());
        }
        total
    };
    // JetStream keeps max_age in nanoseconds (i64): about 292 years.
    if secs > MAX_RETENTION_SECONDS {
        return Err(format!(
            "{text:?} is longer than the 100 years JetStream can keep; use `0` to keep events until purged"
        ));
    }
    Ok((secs > 0).then(|| Duration::from_secs(secs)))
}

/// Longest retention accepted (100 years).
pub const MAX_RETENTION_SECONDS: u64 = 100 * 365 * 86_400;

/// NATS credentials (chart `nats.external.credentialsSecret`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NatsCredentialsConfig {
    /// Directory with the operator's credentials (the Secret mounted as files: `nats.creds`,
    /// or `token`, or `username` + `password`). Empty: NATS without authentication.
    pub dir: String,
    /// Secret the operator keeps in each Run namespace with a copy of those credentials;
    /// worker pods mount it (a pod cannot mount a Secret of another namespace).
    pub worker_secret: String,
}

impl Default for NatsCredentialsConfig {
    fn default() -> Self {
        Self {
            dir: String::new(),
            worker_secret: "openwop-nats-credentials".into(),
        }
    }
}

impl NatsCredentialsConfig {
    /// With credentials, the workers' copy needs a Secret name.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let secret = &self.worker_secret;
        if !self.dir.is_empty() && !is_dns_subdomain(secret) {
            return Err(ConfigError::Invalid {
                field: "natsCredentials.workerSecret",
                message: format!(
                    "{secret:?} is not a Secret name (lower-case DNS subdomain, at most 253 characters)"
                ),
            });
        }
        Ok(())
    }

    /// The configured credentials, read now (so a rotated Secret is picked up).
    pub fn load(&self) -> Result<openwop_nats::NatsAuth, openwop_nats::AuthError> {
        if self.dir.is_empty() {
            return Ok(openwop_nats::NatsAuth::None);
        }
        openwop_nats::NatsAuth::from_dir(Path::new(&self.dir))
    }
}

/// A Kubernetes object name of the DNS-subdomain kind (Secrets, ConfigMaps).
fn is_dns_subdomain(v: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    v.len() <= 253
        && v.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
        && edge(v.chars().next())
        && edge(v.chars().last())
}
