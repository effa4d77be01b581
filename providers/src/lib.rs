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
mod error;
mod gemini;
pub mod mcp;
mod mock;
mod openai;
mod secret;
pub mod tools;
mod transport;

pub use anthropic::{AnthropicMode, AnthropicProvider};
pub use config::{ProviderConfig, ProviderKind, VendorDefaults, build_provider};
pub use error::ProviderError;
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
    /// Tools the model may call (an LLM node's `tools`); empty: none are offered.
    pub tools: Vec<tools::ToolSpec>,
    /// The tool conversation after the user prompt: the model's earlier calls and their
    /// results, in order (rebuilt from the run's log on a replay).
    pub turns: Vec<tools::ToolTurn>,
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
