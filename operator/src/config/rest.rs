//! The `rest` section of the operator config: the OpenWOP REST API, its signed interrupt
//! tokens and its `Idempotency-Key` records.

use openwop_protocol::run::token::{DEFAULT_TOKEN_SECONDS, TokenKey, TokenKeys};
use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use crate::signing_key::{self, KeyError};

/// The OpenWOP REST API (`/v1/...`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct RestConfig {
    /// Serve the API (discovery is served either way).
    pub enabled: bool,
    /// How long a TokenReview or SubjectAccessReview result is reused (0: never). A revoked
    /// token or removed RoleBinding takes effect after at most this long.
    pub review_cache_seconds: u64,
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Requests served at once by one replica (including open event streams); beyond, 429
    /// with `Retry-After`.
    pub max_in_flight: usize,
    /// Interval of SSE `:keepalive` comments (the spec requires at most 30 s).
    pub keepalive_seconds: u64,
    /// Signed interrupt tokens (`/v1/interrupts/{token}`).
    pub interrupt_tokens: InterruptTokensConfig,
    /// `Idempotency-Key` records.
    pub idempotency: IdempotencyConfig,
    /// How long an answer that resolves an interrupt waits for the run's log to record the
    /// resolution before the 200 (0: answer once the answer is stored).
    pub interrupt_record_wait_seconds: u64,
}

/// Longest `rest.interruptRecordWaitSeconds`: a resolve is an HTTP request.
pub const MAX_INTERRUPT_RECORD_WAIT_SECONDS: u64 = 60;

/// Longest SSE keepalive interval (`rest.keepaliveSeconds`): the spec's 30 s.
pub const MAX_KEEPALIVE_SECONDS: u64 = 30;
/// Smallest `rest.maxBodyBytes`: below, ordinary run requests would not fit.
pub const MIN_BODY_BYTES: usize = 1024;
/// Longest `rest.reviewCacheSeconds`: how long a revoked token or RoleBinding may still work.
pub const MAX_REVIEW_CACHE_SECONDS: u64 = 300;

impl RestConfig {
    /// Interrupt tokens, idempotency records, and the API's own bounds.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, message: String| Err(ConfigError::Invalid { field, message });
        self.interrupt_tokens.validate()?;
        self.idempotency.validate()?;
        if !(1..=MAX_KEEPALIVE_SECONDS).contains(&self.keepalive_seconds) {
            return invalid(
                "rest.keepaliveSeconds",
                format!(
                    "must be 1..{MAX_KEEPALIVE_SECONDS}, got {} (the spec requires an SSE keepalive at least every 30 s)",
                    self.keepalive_seconds
                ),
            );
        }
        if self.interrupt_record_wait_seconds > MAX_INTERRUPT_RECORD_WAIT_SECONDS {
            return invalid(
                "rest.interruptRecordWaitSeconds",
                format!(
                    "must be 0..{MAX_INTERRUPT_RECORD_WAIT_SECONDS}, got {} (an interrupt resolve is an HTTP request; 0 answers once the answer is stored)",
                    self.interrupt_record_wait_seconds
                ),
            );
        }
        if self.max_body_bytes < MIN_BODY_BYTES {
            return invalid(
                "rest.maxBodyBytes",
                format!(
                    "must be at least {MIN_BODY_BYTES} bytes, got {} (every run request would be refused with 413)",
                    self.max_body_bytes
                ),
            );
        }
        if self.max_in_flight == 0 {
            return invalid(
                "rest.maxInFlight",
                "must be at least 1, got 0 (every request would be refused with 429)".into(),
            );
        }
        if self.review_cache_seconds > MAX_REVIEW_CACHE_SECONDS {
            return invalid(
                "rest.reviewCacheSeconds",
                format!(
                    "must be 0..{MAX_REVIEW_CACHE_SECONDS}, got {} (a revoked token or removed RoleBinding keeps working this long)",
                    self.review_cache_seconds
                ),
            );
        }
        Ok(())
    }
}

impl Default for RestConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            review_cache_seconds: 10,
            max_body_bytes: 1024 * 1024,
            max_in_flight: 1024,
            keepalive_seconds: 15,
            interrupt_tokens: Default::default(),
            idempotency: Default::default(),
            interrupt_record_wait_seconds: 10,
        }
    }
}

/// Bounds of `rest.interruptTokens.lifetimeSeconds`.
pub const TOKEN_LIFETIME_SECONDS: std::ops::RangeInclusive<u64> = 60..=86_400;

/// `rest.interruptTokens` (chart: the operator's signing-key Secret, `rest.interruptTokens.*`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct InterruptTokensConfig {
    /// The signing key tokens are derived from (the mounted Secret's `signing-key`); empty:
    /// no tokens are minted and every token is unknown (404).
    pub key_file: String,
    /// The key before the last rotation (the Secret's `previous-signing-key`): tokens it
    /// signed keep verifying until they expire. A missing file is no previous key.
    pub previous_key_file: String,
    /// How long a minted token works (the spec's default is 30 minutes).
    pub lifetime_seconds: u64,
}

impl Default for InterruptTokensConfig {
    fn default() -> Self {
        InterruptTokensConfig {
            key_file: String::new(),
            previous_key_file: String::new(),
            lifetime_seconds: DEFAULT_TOKEN_SECONDS,
        }
    }
}

impl InterruptTokensConfig {
    pub fn enabled(&self) -> bool {
        !self.key_file.is_empty()
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !TOKEN_LIFETIME_SECONDS.contains(&self.lifetime_seconds) {
            return Err(ConfigError::Invalid {
                field: "rest.interruptTokens.lifetimeSeconds",
                message: format!(
                    "must be {}..{}, got {}",
                    TOKEN_LIFETIME_SECONDS.start(),
                    TOKEN_LIFETIME_SECONDS.end(),
                    self.lifetime_seconds
                ),
            });
        }
        Ok(())
    }

    /// The keys tokens are signed and verified with (read at each use, so a rotated Secret
    /// reaches the operator); `None` when tokens are off.
    pub fn keys(&self) -> Result<Option<TokenKeys>, KeyError> {
        if !self.enabled() {
            return Ok(None);
        }
        let current = TokenKey::derive(&signing_key::read(
            "rest.interruptTokens.keyFile",
            &self.key_file,
        )?);
        let previous = if self.previous_key_file.is_empty()
            || !std::path::Path::new(&self.previous_key_file).exists()
        {
            None
        } else {
            Some(TokenKey::derive(&signing_key::read(
                "rest.interruptTokens.previousKeyFile",
                &self.previous_key_file,
            )?))
        };
        Ok(Some(TokenKeys::new(current, previous)))
    }
}

/// Shortest retention accepted: the spec's 24 hours.
pub const MIN_RETENTION_SECONDS: u64 = 24 * 60 * 60;

/// `rest.idempotency` (chart `rest.idempotency.*`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct IdempotencyConfig {
    /// JetStream key-value bucket of the records (shared by the replicas).
    pub bucket: String,
    /// How long a final answer is replayed (at least 24 h).
    pub retention_seconds: u64,
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        IdempotencyConfig {
            bucket: "openwop-idempotency".into(),
            retention_seconds: MIN_RETENTION_SECONDS,
        }
    }
}

impl IdempotencyConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, message: String| Err(ConfigError::Invalid { field, message });
        if self.bucket.is_empty()
            || !self
                .bucket
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return invalid(
                "rest.idempotency.bucket",
                format!(
                    "{:?} is not a JetStream bucket name (letters, digits, '-' and '_')",
                    self.bucket
                ),
            );
        }
        if self.retention_seconds < MIN_RETENTION_SECONDS {
            return invalid(
                "rest.idempotency.retentionSeconds",
                format!(
                    "must be at least {MIN_RETENTION_SECONDS} (the spec keeps answers 24 h), got {}",
                    self.retention_seconds
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
    fn retention_is_at_least_a_day() {
        assert!(IdempotencyConfig::default().validate().is_ok());
        let short = IdempotencyConfig {
            retention_seconds: 3600,
            ..Default::default()
        };
        assert!(short.validate().is_err());
        let bad = IdempotencyConfig {
            bucket: "a.b".into(),
            ..Default::default()
        };
        assert!(bad.validate().is_err());
    }
}
