//! OpenAI Chat Completions with `response_format: json_schema` (strict), and the same wire
//! format against any OpenAI-compatible base URL (Ollama, vLLM, llama.cpp server).

use openwop_protocol::retry::normalize_openai_chat;
use openwop_protocol::retry::{NormalizedResponse, Usage};
use openwop_protocol::tier1::Vendor;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::{Value, json};

use crate::transport::{Transport, TransportPolicy};
use crate::{ApiKey, CompletionRequest, Provider, ProviderError, ProviderFuture, lower_for};

/// Which server speaks the chat-completions dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenAiFlavor {
    /// api.openai.com: `max_completion_tokens`, key required.
    OpenAi,
    /// Any compatible server: `max_tokens` (what Ollama, vLLM and llama.cpp read), key optional.
    Compatible,
}

#[derive(Debug)]
pub struct OpenAiProvider {
    flavor: OpenAiFlavor,
    base_url: String,
    model: String,
    key: Option<ApiKey>,
    ceiling: u32,
    transport: Transport,
}

impl OpenAiProvider {
    /// `base_url` is the API root including `/v1`, e.g. `https://api.openai.com/v1` or
    /// `http://localhost:11434/v1`.
    pub fn new(
        flavor: OpenAiFlavor,
        base_url: impl Into<String>,
        model: impl Into<String>,
        key: Option<ApiKey>,
        ceiling: u32,
        policy: TransportPolicy,
    ) -> Result<Self, ProviderError> {
        let name = flavor_name(flavor);
        if flavor == OpenAiFlavor::OpenAi && key.is_none() {
            return Err(ProviderError::Config(format!(
                "provider '{name}' needs an API key"
            )));
        }
        Ok(OpenAiProvider {
            flavor,
            base_url: base_url.into().trim_end_matches('/').to_string(),
            model: model.into(),
            key,
            ceiling,
            transport: Transport::new(name, policy)?,
        })
    }

    /// The exact JSON body sent for `request` (public so tests and dry runs can show it).
    pub fn request_body(&self, request: &CompletionRequest) -> Result<Value, ProviderError> {
        let mut body = json!({
            "model": self.model,
            "messages": [
                {"role": "system", "content": request.system_prompt},
                {"role": "user", "content": request.user_prompt},
            ],
        });
        let budget_field = match self.flavor {
            OpenAiFlavor::OpenAi => "max_completion_tokens",
            OpenAiFlavor::Compatible => "max_tokens",
        };
        body[budget_field] = json!(request.max_tokens);
        if let Some(schema) = &request.schema {
            let lowered = lower_for(schema, Vendor::OpenAi, self.name())?;
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": {"name": request.schema_name, "schema": lowered, "strict": true},
            });
        }
        crate::tools::openai::with_tools(&mut body, &request.tools, &request.turns);
        Ok(body)
    }

    async fn call(&self, request: &CompletionRequest) -> Result<NormalizedResponse, ProviderError> {
        let body = self.request_body(request)?;
        let mut headers = HeaderMap::new();
        if let Some(key) = &self.key {
            let mut v =
                HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| {
                    ProviderError::Config(
                        "API key contains characters not allowed in an HTTP header".into(),
                    )
                })?;
            v.set_sensitive(true);
            headers.insert(AUTHORIZATION, v);
        }
        let url = format!("{}/chat/completions", self.base_url);
        let resp = self
            .transport
            .post_json(&url, headers, &body, self.key.as_ref())
            .await?;
        decode_chat(self.name(), &self.model, &resp)
    }
}

fn flavor_name(flavor: OpenAiFlavor) -> &'static str {
    match flavor {
        OpenAiFlavor::OpenAi => "openai",
        OpenAiFlavor::Compatible => "openai-compatible",
    }
}

/// Decodes a chat-completions response body.
pub(crate) fn decode_chat(
    provider: &str,
    requested_model: &str,
    resp: &Value,
) -> Result<NormalizedResponse, ProviderError> {
    let choice = resp
        .pointer("/choices/0")
        .ok_or_else(|| ProviderError::Decode {
            provider: provider.to_string(),
            message: "response has no `choices[0]`".into(),
        })?;
    let message = choice.get("message").unwrap_or(&Value::Null);
    let content = message.get("content").and_then(Value::as_str);
    let refusal = message.get("refusal").and_then(Value::as_str);
    // OpenAI-compatible servers (vLLM, DeepSeek, llama.cpp) return the model's thinking as
    // `reasoning_content`; some (OpenRouter, newer vLLM) as `reasoning`.
    let thinking = ["reasoning_content", "reasoning"]
        .iter()
        .find_map(|k| message.get(*k).and_then(Value::as_str))
        .filter(|t| !t.is_empty());
    let finish = choice.get("finish_reason").and_then(Value::as_str);
    let stop = normalize_openai_chat(finish, refusal);
    let usage = Usage {
        input_tokens: resp
            .pointer("/usage/prompt_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        output_tokens: resp
            .pointer("/usage/completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    };
    Ok(NormalizedResponse {
        stop,
        text: content.map(str::to_string),
        structured: None,
        refusal_text: refusal.filter(|r| !r.is_empty()).map(str::to_string),
        thinking: thinking.map(str::to_string),
        tool_calls: crate::tools::openai::calls(resp).map_err(|e| match e {
            // The same decoder serves OpenAI-compatible servers: name the one that answered.
            ProviderError::Decode { message, .. } => ProviderError::Decode {
                provider: provider.to_string(),
                message,
            },
            other => other,
        })?,
        usage,
        provider: provider.to_string(),
        model: resp
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or(requested_model)
            .to_string(),
    })
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        flavor_name(self.flavor)
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
