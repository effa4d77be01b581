//! Provider failures (a leaf: every client and the tool wire formats name it).

/// Provider failures. Messages never contain API keys (see `secret`), and vendor error
/// bodies are shortened and scrubbed before they are kept.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error(
        "no API key for provider '{provider}': {source_description} is not set or empty; set it (or mount the key file) and restart"
    )]
    MissingKey {
        provider: String,
        source_description: String,
    },
    #[error("cannot read API key file {path}: {reason}; check the Secret is mounted at that path")]
    KeyFile { path: String, reason: String },
    #[error("provider '{provider}' rejected the request with HTTP {status}: {message}")]
    Http {
        provider: String,
        status: u16,
        message: String,
    },
    #[error(
        "provider '{provider}' still failing after {attempts} attempts (transport retries exhausted); last error: {last}"
    )]
    RetriesExhausted {
        provider: String,
        attempts: u32,
        last: String,
    },
    #[error("provider '{provider}' transport error: {message}")]
    Transport { provider: String, message: String },
    #[error("provider '{provider}' returned a response we cannot decode: {message}")]
    Decode { provider: String, message: String },
    #[error("schema cannot be lowered for provider '{provider}': {message}")]
    Lowering { provider: String, message: String },
    #[error(
        "provider '{provider}' sent a response body larger than {limit} bytes (the host's maxProviderResponseBytes); it was not read. Raise the chart value limits.maxProviderResponseBytes for new runs if the answers are legitimately this large"
    )]
    ResponseTooLarge { provider: String, limit: u64 },
    #[error("invalid provider configuration: {0}")]
    Config(String),
    #[error("mock provider: {0}")]
    Mock(String),
}

impl ProviderError {
    /// Transport-level retries do not apply to these; they reach the caller at once.
    pub fn is_permanent(&self) -> bool {
        !matches!(self, Self::RetriesExhausted { .. } | Self::Transport { .. })
    }
}
