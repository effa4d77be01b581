//! LLM provider clients. Each turns a vendor response into the retry router's
//! [`NormalizedResponse`]; the router (in `openwop-protocol`) decides what happens next.
//!
//! Transport retries (429 honouring `Retry-After`, 5xx and timeouts with bounded
//! exponential backoff) live here and are logged; they are separate from, and invisible
//! to, the envelope retries of RFC 0033, which only the router performs.

use std::future::Future;
use std::pin::Pin;

use openwop_protocol::retry::NormalizedResponse;
use serde_json::Value;

mod anthropic;
mod config;
mod gemini;
pub mod mcp;
mod mock;
mod openai;
mod secret;
pub mod tools;
mod transport;

pub use anthropic::{AnthropicMode, AnthropicProvider};
pub use config::{ProviderConfig, ProviderKind, VendorDefaults, build_provider};
pub use gemini::GeminiProvider;
#[cfg(feature = "testing")]
pub mod testing;

pub use mock::{MockCall, MockProvider};
pub use openai::{OpenAiFlavor, OpenAiProvider};
pub use secret::{ApiKey, KeySource};
pub use transport::TransportPolicy;

/// One provider call as the router asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    /// The node this call serves (the mock provider keys its programs by it).
    pub node_id: String,
    /// The composed system prompt (base prompt + reasoning directive + corrective fragment).
    pub system_prompt: String,
    pub user_prompt: String,
    /// Output-token budget for this attempt.
    pub max_tokens: u32,
    /// The full JSON Schema of the expected output; the provider sends its vendor-lowered
    /// form. `None` asks for free text (the NL-to-Format fallback's first call).
    pub schema: Option<Value>,
    /// Name the vendor shows for the schema (OpenAI `json_schema.name`, Anthropic tool name).
    pub schema_name: String,
}

pub type ProviderFuture<'a> =
    Pin<Box<dyn Future<Output = Result<NormalizedResponse, ProviderError>> + Send + 'a>>;

/// An LLM provider. Object-safe so the worker can hold `Box<dyn Provider>`.
pub trait Provider: Send + Sync {
    /// Provider name as it appears in events (`openai`, `anthropic`, `gemini`, `openai-compatible`, `mock`).
    fn name(&self) -> &str;
    fn model(&self) -> &str;
    /// The largest output budget this provider/model accepts per call; the router clamps to it.
    fn output_ceiling(&self) -> u32;
    fn complete<'a>(&'a self, request: &'a CompletionRequest) -> ProviderFuture<'a>;
}

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

/// The vendor-lowered form of the full schema (Tier-1 module); local validation in the
/// router always uses the full schema.
pub(crate) fn lower_for(
    schema: &Value,
    vendor: openwop_protocol::tier1::Vendor,
    provider: &str,
) -> Result<Value, ProviderError> {
    openwop_protocol::tier1::lower(schema, vendor).map_err(|e| ProviderError::Lowering {
        provider: provider.to_string(),
        message: e.to_string(),
    })
}
