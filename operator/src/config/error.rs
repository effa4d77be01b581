//! Why the operator configuration was refused: the one error every section's check returns.

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid YAML/JSON for the operator config: {message}")]
    Parse { path: String, message: String },
    #[error("config field {field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
}
