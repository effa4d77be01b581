//! Anthropic Messages API: JSON outputs (`output_config.format`) or a forced strict tool.

use openwop_protocol::retry::normalize_anthropic;
use openwop_protocol::retry::{NormalizedResponse, StopReason, Usage};
use openwop_protocol::tier1::Vendor;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use crate::transport::{Transport, TransportPolicy};
use crate::{ApiKey, CompletionRequest, Provider, ProviderError, ProviderFuture, lower_for};

pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// How the schema is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AnthropicMode {
    /// `output_config: {format: {type: json_schema, schema}}`: the answer is JSON text.
    #[default]
    JsonOutput,
    /// One tool with `strict: true` and `tool_choice` forcing it: the answer is the tool input.
    StrictTool,
}

#[derive(Debug)]
pub struct AnthropicProvider {
    base_url: String,
    model: String,
    key: ApiKey,
    ceiling: u32,
    mode: AnthropicMode,
    transport: Transport,
}

impl AnthropicProvider {
    /// `base_url` is the API root, e.g. `https://api.anthropic.com`.
    pub fn new(
        base_url: impl Into<String>,
        model: impl Into<String>,
        key: ApiKey,
        ceiling: u32,
        mode: AnthropicMode,
        policy: TransportPolicy,
    ) -> Result<Self, ProviderError> {
        Ok(AnthropicProvider {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            model: model.into(),
            key,
            ceiling,
            mode,
            transport: Transport::new("anthropic", policy)?,
        })
    }

    pub fn request_body(&self, request: &CompletionRequest) -> Result<Value, ProviderError> {
        let mut body = json!({
            "model": self.model,
            "max_tokens": request.max_tokens,
            "system": request.system_prompt,
            "messages": [{"role": "user", "content": request.user_prompt}],
        });
        if let Some(schema) = &request.schema {
            let lowered = lower_for(schema, Vendor::Anthropic, "anthropic")?;
            match self.mode {
                AnthropicMode::JsonOutput => {
                    body["output_config"] =
                        json!({"format": {"type": "json_schema", "schema": lowered}});
                }
                AnthropicMode::StrictTool => {
                    body["tools"] = json!([{
                        "name": request.schema_name,
                        "description": "Emit the structured result.",
                        "input_schema": lowered,
                        "strict": true,
                    }]);
                    // With tools offered the model must still answer through a tool, the
                    // schema tool or one it may call; forcing the schema tool would leave it
                    // no way to call the others.
                    body["tool_choice"] = if request.tools.is_empty() {
                        json!({"type": "tool", "name": request.schema_name})
                    } else {
                        json!({"type": "any"})
                    };
                }
            }
        }
        crate::tools::anthropic::with_tools(&mut body, &request.tools, &request.turns);
        Ok(body)
    }

    async fn call(&self, request: &CompletionRequest) -> Result<NormalizedResponse, ProviderError> {
        let body = self.request_body(request)?;
        let mut headers = HeaderMap::new();
        let mut key = HeaderValue::from_str(self.key.expose()).map_err(|_| {
            ProviderError::Config(
                "API key contains characters not allowed in an HTTP header".into(),
            )
        })?;
        key.set_sensitive(true);
        headers.insert(HeaderName::from_static("x-api-key"), key);
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        let url = format!("{}/v1/messages", self.base_url);
        let resp = self
            .transport
            .post_json(&url, headers, &body, Some(&self.key))
            .await?;
        decode_messages(&self.model, request.schema_name.as_str(), &resp)
    }
}

pub(crate) fn decode_messages(
    requested_model: &str,
    tool_name: &str,
    resp: &Value,
) -> Result<NormalizedResponse, ProviderError> {
    let blocks = resp
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ProviderError::Decode {
            provider: "anthropic".into(),
            message: "response has no `content` array".into(),
        })?;
    let mut text = String::new();
    let mut structured = None;
    let mut thinking: Vec<&str> = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            // Extended thinking; `redacted_thinking` blocks are encrypted and carry no text.
            Some("thinking") => thinking.extend(
                block
                    .get("thinking")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty()),
            ),
            Some("tool_use") if block.get("name").and_then(Value::as_str) == Some(tool_name) => {
                structured = block.get("input").cloned();
            }
            _ => {}
        }
    }
    let stop = normalize_anthropic(resp.get("stop_reason").and_then(Value::as_str));
    // On a refusal the text is the refusal message, not a payload.
    let (text, refusal_text) = match (&stop, text.is_empty()) {
        (StopReason::Refusal { .. }, false) => (None, Some(text)),
        (StopReason::Refusal { .. }, true) => (None, None),
        (_, true) => (None, None),
        (_, false) => (Some(text), None),
    };
    Ok(NormalizedResponse {
        stop,
        text,
        structured,
        refusal_text,
        thinking: (!thinking.is_empty()).then(|| thinking.join("\n")),
        tool_calls: crate::tools::anthropic::calls(resp, tool_name)?,
        usage: Usage {
            input_tokens: resp
                .pointer("/usage/input_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            output_tokens: resp
                .pointer("/usage/output_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        },
        provider: "anthropic".into(),
        model: resp
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or(requested_model)
            .to_string(),
    })
}

impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        "anthropic"
    }
    fn model(&self) -> &str {
        &self.model
    }
    fn output_ceiling(&self) -> u32 {
        self.ceiling
    }
    fn complete<'a>(&'a self, request: &'a CompletionRequest) -> ProviderFuture<'a> {
        Box::pin(self.call(request))
    }
}
