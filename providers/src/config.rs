//! Provider configuration and construction (what the worker reads from its environment).

use std::path::PathBuf;

use crate::{
    AnthropicMode, AnthropicProvider, ApiKey, GeminiProvider, KeySource, OpenAiFlavor,
    OpenAiProvider, Provider, ProviderError, TransportPolicy,
};

/// The vendor a client speaks: protocol's one list of LLM vendors.
pub use openwop_protocol::vendor::LlmVendor as ProviderKind;

/// What a client of each vendor assumes when nothing is configured.
pub trait VendorDefaults {
    /// The vendor's public API root; none for an OpenAI-compatible server.
    fn default_base_url(self) -> Option<&'static str>;
    /// Environment variable read when no key source is configured.
    fn default_key_env(self) -> &'static str;
    /// Conservative per-call output ceiling used when none is configured; set
    /// `max_output_tokens` to the model's documented maximum to allow larger retries.
    fn default_ceiling(self) -> u32;
}

impl VendorDefaults for ProviderKind {
    fn default_base_url(self) -> Option<&'static str> {
        match self {
            Self::OpenAi => Some("https://api.openai.com/v1"),
            Self::Anthropic => Some("https://api.anthropic.com"),
            Self::Gemini => Some("https://generativelanguage.googleapis.com/v1beta"),
            Self::OpenAiCompatible => None,
        }
    }

    fn default_key_env(self) -> &'static str {
        match self {
            Self::OpenAi => "OPENAI_API_KEY",
            Self::Anthropic => "ANTHROPIC_API_KEY",
            Self::Gemini => "GEMINI_API_KEY",
            Self::OpenAiCompatible => "OPENAI_COMPATIBLE_API_KEY",
        }
    }

    fn default_ceiling(self) -> u32 {
        match self {
            Self::OpenAi => 16_384,
            Self::Anthropic => 8_192,
            Self::Gemini => 8_192,
            Self::OpenAiCompatible => 4_096,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    pub model: String,
    pub base_url: Option<String>,
    /// `None` → the kind's default environment variable.
    pub key: Option<KeySource>,
    pub max_output_tokens: Option<u32>,
    pub anthropic_mode: AnthropicMode,
    pub transport: TransportPolicy,
}

impl ProviderConfig {
    pub fn new(kind: ProviderKind, model: impl Into<String>) -> Self {
        ProviderConfig {
            kind,
            model: model.into(),
            base_url: None,
            key: None,
            max_output_tokens: None,
            anthropic_mode: AnthropicMode::default(),
            transport: TransportPolicy::default(),
        }
    }

    pub fn with_key_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.key = Some(KeySource::File(path.into()));
        self
    }
}

/// Builds the configured provider, loading its key now so a missing key fails at start-up.
pub fn build_provider(config: &ProviderConfig) -> Result<Box<dyn Provider>, ProviderError> {
    let kind = config.kind;
    let base_url = config
        .base_url
        .clone()
        .or_else(|| kind.default_base_url().map(str::to_string))
        .ok_or_else(|| {
            ProviderError::Config(format!(
                "provider '{kind}' needs a base URL, e.g. http://localhost:11434/v1"
            ))
        })?;
    if config.model.trim().is_empty() {
        return Err(ProviderError::Config("model name is empty".into()));
    }
    let ceiling = config
        .max_output_tokens
        .unwrap_or_else(|| kind.default_ceiling());
    if ceiling == 0 {
        return Err(ProviderError::Config(
            "max_output_tokens must be at least 1".into(),
        ));
    }
    let source = config
        .key
        .clone()
        .unwrap_or_else(|| KeySource::Env(kind.default_key_env().to_string()));
    let key = ApiKey::load(&source, kind.as_str());
    let policy = config.transport.clone();
    Ok(match kind {
        ProviderKind::OpenAi => Box::new(OpenAiProvider::new(
            OpenAiFlavor::OpenAi,
            base_url,
            &config.model,
            Some(key?),
            ceiling,
            policy,
        )?),
        // Local servers usually need no key: a missing one is fine, an unreadable file is not.
        ProviderKind::OpenAiCompatible => {
            let key = match key {
                Ok(k) => Some(k),
                Err(ProviderError::MissingKey { .. }) => None,
                Err(e) => return Err(e),
            };
            Box::new(OpenAiProvider::new(
                OpenAiFlavor::Compatible,
                base_url,
                &config.model,
                key,
                ceiling,
                policy,
            )?)
        }
        ProviderKind::Anthropic => Box::new(AnthropicProvider::new(
            base_url,
            &config.model,
            key?,
            ceiling,
            config.anthropic_mode,
            policy,
        )?),
        ProviderKind::Gemini => Box::new(GeminiProvider::new(
            base_url,
            &config.model,
            key?,
            ceiling,
            policy,
        )?),
    })
}
