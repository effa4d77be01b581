//! The `ui` section of the operator config: the web run viewer.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// `ui` of the operator config: the web run viewer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct UiConfig {
    /// Serve the web UI at `/ui/` (needs the REST API).
    pub enabled: bool,
    /// Lifetime of a login's session cookie; the token's own expiry applies as well.
    pub session_seconds: u64,
}

impl Default for UiConfig {
    fn default() -> Self {
        UiConfig {
            enabled: true,
            session_seconds: 8 * 3600,
        }
    }
}

/// Allowed `ui.sessionSeconds`: a minute to a day (a stolen cookie lives no longer).
pub const SESSION_SECONDS: std::ops::RangeInclusive<u64> = 60..=86_400;

impl UiConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !SESSION_SECONDS.contains(&self.session_seconds) {
            return Err(ConfigError::Invalid {
                field: "ui.sessionSeconds",
                message: format!(
                    "must be {}..{}, got {} (the lifetime of a web UI login)",
                    SESSION_SECONDS.start(),
                    SESSION_SECONDS.end(),
                    self.session_seconds
                ),
            });
        }
        Ok(())
    }
}
