//! API keys: read from the environment or from a mounted Secret file, never printed.

use std::fmt;
use std::path::PathBuf;

use crate::ProviderError;

/// Where a provider's key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    Env(String),
    /// A file mounted from a Kubernetes Secret; surrounding whitespace is trimmed.
    File(PathBuf),
}

impl KeySource {
    fn describe(&self) -> String {
        match self {
            KeySource::Env(var) => format!("environment variable {var}"),
            KeySource::File(p) => format!("key file {}", p.display()),
        }
    }
}

/// A secret API key. `Debug`/`Display` never show it; use [`ApiKey::expose`] only to build
/// the request header.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(value: impl Into<String>) -> Self {
        ApiKey(value.into())
    }

    pub fn load(source: &KeySource, provider: &str) -> Result<ApiKey, ProviderError> {
        let value = match source {
            KeySource::Env(var) => std::env::var(var).unwrap_or_default(),
            KeySource::File(path) => {
                std::fs::read_to_string(path).map_err(|e| ProviderError::KeyFile {
                    path: path.display().to_string(),
                    reason: e.kind().to_string(),
                })?
            }
        };
        let value = value.trim();
        if value.is_empty() {
            return Err(ProviderError::MissingKey {
                provider: provider.to_string(),
                source_description: source.describe(),
            });
        }
        Ok(ApiKey(value.to_string()))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Removes every occurrence of the key from text that came back from a vendor
    /// (some echo the key they rejected) before it goes into an error or a log.
    pub fn scrub(&self, text: &str) -> String {
        if self.0.is_empty() {
            text.to_string()
        } else {
            text.replace(&self.0, "[REDACTED:api-key]")
        }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([REDACTED])")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_hide_the_key() {
        let k = ApiKey::new("sk-very-secret-123");
        assert_eq!(format!("{k:?}"), "ApiKey([REDACTED])");
        assert_eq!(format!("{k}"), "[REDACTED]");
        assert_eq!(k.expose(), "sk-very-secret-123");
        assert_eq!(
            k.scrub("Incorrect API key provided: sk-very-secret-123."),
            "Incorrect API key provided: [REDACTED:api-key]."
        );
    }

    #[test]
    fn loads_from_file_trimmed_and_reports_missing() {
        let dir = std::env::temp_dir().join(format!("openwop-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key");
        std::fs::write(&path, "  sk-file-key\n").unwrap();
        let k = ApiKey::load(&KeySource::File(path.clone()), "openai").unwrap();
        assert_eq!(k.expose(), "sk-file-key");
        std::fs::write(&path, "\n").unwrap();
        let err = ApiKey::load(&KeySource::File(path.clone()), "openai").unwrap_err();
        assert!(matches!(err, ProviderError::MissingKey { .. }), "{err}");
        let err = ApiKey::load(&KeySource::File(dir.join("absent")), "openai").unwrap_err();
        assert!(err.to_string().contains("absent"), "{err}");
        let err = ApiKey::load(
            &KeySource::Env("OPENWOP_TEST_SURELY_UNSET_VAR".into()),
            "gemini",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("environment variable OPENWOP_TEST_SURELY_UNSET_VAR"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
