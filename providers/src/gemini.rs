//! Gemini `models/{model}:generateContent` with `responseSchema` (the Tier-1 module lowers to its OpenAPI subset).

use openwop_protocol::retry::normalize_gemini;
use openwop_protocol::retry::{NormalizedResponse, StopReason, Usage};
use openwop_protocol::tier1::Vendor;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use crate::transport::{Transport, TransportPolicy};
use crate::{ApiKey, CompletionRequest, Provider, ProviderError, ProviderFuture, lower_for};

#[derive(Debug)]
pub struct GeminiProvider {
    base_url: String,
    model: String,
    key: ApiKey,
    ceiling: u32,
    transport: Transport,
}

impl GeminiProvider {
    /// `base_url` is the API root including the version, e.g.
    /// `https://generativelanguage.googleapis.com/v1beta`.
    pub fn new(
        base_url: impl Into<String>,
        model: impl Into<String>,
        key: ApiKey,
        ceiling: u32,
        policy: TransportPolicy,
    ) -> Result<Self, ProviderError> {
        Ok(GeminiProvider {
            base_url: base_url.into().trim_end_matches('/').to_string(),
            model: model.into(),
            key,
            ceiling,
            transport: Transport::new("gemini", policy)?,
        })
    }

    pub fn request_body(&self, request: &CompletionRequest) -> Result<Value, ProviderError> {
        let mut generation = json!({"maxOutputTokens": request.max_tokens});
        if let Some(schema) = &request.schema {
            generation["responseMimeType"] = json!("application/json");
            generation["responseSchema"] = lower_for(schema, Vendor::Gemini, "gemini")?;
        }
        let mut body = json!({
            "systemInstruction": {"parts": [{"text": request.system_prompt}]},
            "contents": [{"role": "user", "parts": [{"text": request.user_prompt}]}],
            "generationConfig": generation,
        });
        crate::tools::gemini::with_tools(&mut body, &request.tools, &request.turns);
        Ok(body)
    }

    async fn call(&self, request: &CompletionRequest) -> Result<NormalizedResponse, ProviderError> {
        let body = self.request_body(request)?;
        let mut headers = HeaderMap::new();
        // Header, not `?key=`: keys must not appear in URLs (proxies and error texts log URLs).
        let mut key = HeaderValue::from_str(self.key.expose()).map_err(|_| {
            ProviderError::Config(
                "API key contains characters not allowed in an HTTP header".into(),
            )
        })?;
        key.set_sensitive(true);
        headers.insert(HeaderName::from_static("x-goog-api-key"), key);
        let url = format!("{}/models/{}:generateContent", self.base_url, self.model);
        let resp = self
            .transport
            .post_json(&url, headers, &body, Some(&self.key))
            .await?;
        decode_generate(&self.model, &resp)
    }
}

pub(crate) fn decode_generate(
    requested_model: &str,
    resp: &Value,
) -> Result<NormalizedResponse, ProviderError> {
    let block_reason = resp
        .pointer("/promptFeedback/blockReason")
        .and_then(Value::as_str);
    let candidate = resp.pointer("/candidates/0");
    if candidate.is_none() && block_reason.is_none() {
        return Err(ProviderError::Decode {
            provider: "gemini".into(),
            message: "response has neither `candidates[0]` nor `promptFeedback.blockReason`".into(),
        });
    }
    let finish = candidate
        .and_then(|c| c.get("finishReason"))
        .and_then(Value::as_str);
    // The category of the rating that caused the block, from the candidate or the prompt.
    let blocked_category = candidate
        .and_then(|c| c.get("safetyRatings"))
        .or_else(|| resp.pointer("/promptFeedback/safetyRatings"))
        .and_then(Value::as_array)
        .and_then(|ratings| {
            ratings
                .iter()
                .find(|r| r.get("blocked").and_then(Value::as_bool) == Some(true))
        })
        .and_then(|r| r.get("category"))
        .and_then(Value::as_str);
    let stop = normalize_gemini(finish, block_reason, blocked_category);
    let text: String = candidate
        .and_then(|c| c.pointer("/content/parts"))
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                // Thought summaries are not the answer.
                .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    // Thought summaries (`includeThoughts`) are parts flagged `thought: true`.
    let thinking: Vec<&str> = candidate
        .and_then(|c| c.pointer("/content/parts"))
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter(|p| p.get("thought").and_then(Value::as_bool) == Some(true))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .filter(|t| !t.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let usage = Usage {
        input_tokens: resp
            .pointer("/usageMetadata/promptTokenCount")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        // Thinking tokens count against maxOutputTokens too.
        output_tokens: resp
            .pointer("/usageMetadata/candidatesTokenCount")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            + resp
                .pointer("/usageMetadata/thoughtsTokenCount")
                .and_then(Value::as_u64)
                .unwrap_or(0),
    };
    let refusal = matches!(stop, StopReason::Refusal { .. });
    Ok(NormalizedResponse {
        text: (!text.is_empty() && !refusal).then_some(text),
        structured: None,
        refusal_text: None,
        thinking: (!thinking.is_empty()).then(|| thinking.join("\n")),
        tool_calls: crate::tools::gemini::calls(resp)?,
        stop,
        usage,
        provider: "gemini".into(),
        model: resp
            .get("modelVersion")
            .and_then(Value::as_str)
            .unwrap_or(requested_model)
            .to_string(),
    })
}

impl Provider for GeminiProvider {
    fn name(&self) -> &str {
        "gemini"
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
