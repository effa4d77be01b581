//! The provider-neutral response the retry router consumes, and the vendor
//! stop-reason normalisation tables (RFC 0033 §A condition 1).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::events::StopReason as WireStopReason;

/// Token accounting of one provider call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Why the provider stopped, reduced to what the router routes on.
/// `raw` keeps the vendor's own spelling for telemetry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum StopReason {
    /// The model decided it was done (`stop`, `end_turn`, `STOP`).
    Clean,
    /// Output was cut off (`length`, `max_tokens`, `MAX_TOKENS`, `stop_sequence`, Responses `max_output_tokens`).
    Truncated { raw: String },
    /// Explicit refusal or safety block. `safety_category` is the vendor category when one is given.
    Refusal {
        raw: String,
        safety_category: Option<String>,
    },
    /// The model ended its turn with a (forced) tool call; its input is the structured payload.
    ToolUse,
    /// A stop reason this table does not know; never treated as a clean stop.
    Unknown { raw: String },
}

impl StopReason {
    /// Condition 1 of the completion criteria: did the model itself finish?
    pub fn is_clean(&self) -> bool {
        matches!(self, Self::Clean | Self::ToolUse)
    }

    /// The wire `stopReason` for `envelope.truncated`, for any non-clean, non-refusal stop.
    pub fn truncation_wire(&self) -> WireStopReason {
        match self {
            Self::Truncated { raw } => match raw.as_str() {
                "length" => WireStopReason::Length,
                "max_tokens" | "MAX_TOKENS" | "max_output_tokens" => WireStopReason::MaxTokens,
                "stop_sequence" => WireStopReason::StopSequence,
                _ => WireStopReason::Unknown,
            },
            _ => WireStopReason::Unknown,
        }
    }
}

/// A provider response after vendor decoding, before parsing and validation.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NormalizedResponse {
    pub stop: StopReason,
    /// Free text the model produced (JSON to be parsed leniently, or prose).
    pub text: Option<String>,
    /// An already-structured payload (tool input, vendor-parsed JSON); preferred over `text`.
    pub structured: Option<Value>,
    /// The vendor's refusal message; only ever emitted redacted and never copied into errors.
    pub refusal_text: Option<String>,
    /// The model's own thinking (Anthropic `thinking` blocks, OpenAI-compatible
    /// `reasoning_content`, Gemini `thought` parts): never the answer; hosts may show it on
    /// the reasoning-transparency stream, redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    /// Tools the model asked to call, in its order (`crate::tools`); empty when it asked for
    /// none. A recorded response carries them, so a replay asks for the same calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<crate::tools::ModelToolCall>,
    pub usage: Usage,
    pub provider: String,
    pub model: String,
}

impl NormalizedResponse {
    /// The `provider.usage` payload of this response to a call of node `node_id` (every
    /// provider call records one: the router's and a tool loop's model turns alike).
    pub fn usage_payload(&self, node_id: &str) -> serde_json::Value {
        serde_json::json!({
            "provider": self.provider,
            "model": self.model,
            "inputTokens": self.usage.input_tokens,
            "outputTokens": self.usage.output_tokens,
            "totalTokens": self.usage.input_tokens + self.usage.output_tokens,
            "nodeId": node_id,
        })
    }
}

// Model output may carry user data; Debug shows sizes, not content.
impl std::fmt::Debug for NormalizedResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NormalizedResponse")
            .field("stop", &self.stop)
            .field("text_bytes", &self.text.as_ref().map(String::len))
            .field("structured", &self.structured.is_some())
            .field(
                "refusal_text",
                &self.refusal_text.as_ref().map(|_| "<hidden>"),
            )
            .field("thinking_bytes", &self.thinking.as_ref().map(String::len))
            .field("tool_calls", &self.tool_calls.len())
            .field("usage", &self.usage)
            .field("provider", &self.provider)
            .field("model", &self.model)
            .finish()
    }
}

/// OpenAI Chat Completions: `choices[].finish_reason` plus `message.refusal`.
/// A non-empty `message.refusal` wins over any finish reason.
pub fn normalize_openai_chat(finish_reason: Option<&str>, refusal: Option<&str>) -> StopReason {
    if refusal.is_some_and(|r| !r.is_empty()) {
        return StopReason::Refusal {
            raw: "refusal".into(),
            safety_category: None,
        };
    }
    match finish_reason {
        Some("stop") => StopReason::Clean,
        Some("length") => StopReason::Truncated {
            raw: "length".into(),
        },
        Some("content_filter") => StopReason::Refusal {
            raw: "content_filter".into(),
            safety_category: Some("content_filter".into()),
        },
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some(other) => StopReason::Unknown { raw: other.into() },
        None => StopReason::Unknown {
            raw: "missing".into(),
        },
    }
}

/// OpenAI Responses API: `status` with `incomplete_details.reason`, plus a refusal content part.
pub fn normalize_openai_responses(
    status: &str,
    incomplete_reason: Option<&str>,
    has_refusal: bool,
) -> StopReason {
    if has_refusal {
        return StopReason::Refusal {
            raw: "refusal".into(),
            safety_category: None,
        };
    }
    match (status, incomplete_reason) {
        ("completed", _) => StopReason::Clean,
        ("incomplete", Some("max_output_tokens")) => StopReason::Truncated {
            raw: "max_output_tokens".into(),
        },
        ("incomplete", Some("content_filter")) => StopReason::Refusal {
            raw: "content_filter".into(),
            safety_category: Some("content_filter".into()),
        },
        (s, r) => StopReason::Unknown {
            raw: match r {
                Some(r) => format!("{s}:{r}"),
                None => s.to_string(),
            },
        },
    }
}

/// Anthropic Messages: `stop_reason`.
pub fn normalize_anthropic(stop_reason: Option<&str>) -> StopReason {
    match stop_reason {
        Some("end_turn") => StopReason::Clean,
        Some("tool_use") => StopReason::ToolUse,
        // The model did not choose to stop: a configured sequence cut it off.
        Some(r @ ("max_tokens" | "stop_sequence" | "model_context_window_exceeded")) => {
            StopReason::Truncated { raw: r.into() }
        }
        Some("refusal") => StopReason::Refusal {
            raw: "refusal".into(),
            safety_category: None,
        },
        Some(other) => StopReason::Unknown { raw: other.into() },
        None => StopReason::Unknown {
            raw: "missing".into(),
        },
    }
}

/// Gemini generateContent: `promptFeedback.blockReason` (prompt blocked, no candidate) or
/// `candidates[0].finishReason`. `blocked_category` is the category of a blocked safety rating.
pub fn normalize_gemini(
    finish_reason: Option<&str>,
    prompt_block_reason: Option<&str>,
    blocked_category: Option<&str>,
) -> StopReason {
    if let Some(block) = prompt_block_reason {
        return StopReason::Refusal {
            raw: block.into(),
            safety_category: Some(blocked_category.unwrap_or(block).to_string()),
        };
    }
    match finish_reason {
        Some("STOP") => StopReason::Clean,
        Some("MAX_TOKENS") => StopReason::Truncated {
            raw: "MAX_TOKENS".into(),
        },
        Some(
            r @ ("SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII"
            | "IMAGE_SAFETY"),
        ) => StopReason::Refusal {
            raw: r.into(),
            safety_category: Some(blocked_category.unwrap_or(r).to_string()),
        },
        Some(other) => StopReason::Unknown { raw: other.into() },
        None => StopReason::Unknown {
            raw: "missing".into(),
        },
    }
}

/// Any vendor's spelling → normalised stop (used by the mock provider's programs, which may
/// be written in any vendor's vocabulary). Unknown spellings stay `Unknown`.
pub fn normalize_any(stop_reason: &str) -> StopReason {
    match stop_reason {
        "stop" | "length" | "content_filter" | "tool_calls" | "function_call" => {
            normalize_openai_chat(Some(stop_reason), None)
        }
        "max_output_tokens" => StopReason::Truncated {
            raw: stop_reason.into(),
        },
        "end_turn" | "tool_use" | "max_tokens" | "stop_sequence" | "refusal" => {
            normalize_anthropic(Some(stop_reason))
        }
        s if s.chars().all(|c| c.is_ascii_uppercase() || c == '_') => {
            normalize_gemini(Some(s), None, None)
        }
        other => StopReason::Unknown { raw: other.into() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trunc(raw: &str) -> StopReason {
        StopReason::Truncated { raw: raw.into() }
    }

    #[test]
    fn openai_chat_table() {
        assert_eq!(normalize_openai_chat(Some("stop"), None), StopReason::Clean);
        assert_eq!(normalize_openai_chat(Some("length"), None), trunc("length"));
        assert_eq!(
            normalize_openai_chat(Some("content_filter"), None),
            StopReason::Refusal {
                raw: "content_filter".into(),
                safety_category: Some("content_filter".into())
            }
        );
        assert_eq!(
            normalize_openai_chat(Some("tool_calls"), None),
            StopReason::ToolUse
        );
        // message.refusal wins even over finish_reason "stop".
        assert!(matches!(
            normalize_openai_chat(Some("stop"), Some("I can't help with that")),
            StopReason::Refusal { .. }
        ));
        // An empty refusal string is not a refusal.
        assert_eq!(
            normalize_openai_chat(Some("stop"), Some("")),
            StopReason::Clean
        );
        assert_eq!(
            normalize_openai_chat(None, None),
            StopReason::Unknown {
                raw: "missing".into()
            }
        );
    }

    #[test]
    fn openai_responses_table() {
        assert_eq!(
            normalize_openai_responses("completed", None, false),
            StopReason::Clean
        );
        assert_eq!(
            normalize_openai_responses("incomplete", Some("max_output_tokens"), false),
            trunc("max_output_tokens")
        );
        assert_eq!(
            trunc("max_output_tokens").truncation_wire(),
            WireStopReason::MaxTokens
        );
        assert!(matches!(
            normalize_openai_responses("incomplete", Some("content_filter"), false),
            StopReason::Refusal { .. }
        ));
        assert!(matches!(
            normalize_openai_responses("completed", None, true),
            StopReason::Refusal { .. }
        ));
        assert_eq!(
            normalize_openai_responses("failed", None, false),
            StopReason::Unknown {
                raw: "failed".into()
            }
        );
    }

    #[test]
    fn anthropic_table() {
        assert_eq!(normalize_anthropic(Some("end_turn")), StopReason::Clean);
        assert_eq!(normalize_anthropic(Some("tool_use")), StopReason::ToolUse);
        assert_eq!(normalize_anthropic(Some("max_tokens")), trunc("max_tokens"));
        assert_eq!(
            normalize_anthropic(Some("stop_sequence")).truncation_wire(),
            WireStopReason::StopSequence
        );
        assert!(matches!(
            normalize_anthropic(Some("refusal")),
            StopReason::Refusal { .. }
        ));
        assert!(matches!(
            normalize_anthropic(Some("pause_turn")),
            StopReason::Unknown { .. }
        ));
    }

    #[test]
    fn gemini_table() {
        assert_eq!(
            normalize_gemini(Some("STOP"), None, None),
            StopReason::Clean
        );
        assert_eq!(
            normalize_gemini(Some("MAX_TOKENS"), None, None).truncation_wire(),
            WireStopReason::MaxTokens
        );
        for r in [
            "SAFETY",
            "RECITATION",
            "BLOCKLIST",
            "PROHIBITED_CONTENT",
            "SPII",
        ] {
            assert_eq!(
                normalize_gemini(Some(r), None, None),
                StopReason::Refusal {
                    raw: r.into(),
                    safety_category: Some(r.into())
                },
                "{r}"
            );
        }
        assert_eq!(
            normalize_gemini(
                Some("SAFETY"),
                None,
                Some("HARM_CATEGORY_DANGEROUS_CONTENT")
            ),
            StopReason::Refusal {
                raw: "SAFETY".into(),
                safety_category: Some("HARM_CATEGORY_DANGEROUS_CONTENT".into())
            }
        );
        // Prompt blocked: no candidate at all.
        assert_eq!(
            normalize_gemini(None, Some("BLOCKLIST"), None),
            StopReason::Refusal {
                raw: "BLOCKLIST".into(),
                safety_category: Some("BLOCKLIST".into())
            }
        );
        assert!(matches!(
            normalize_gemini(Some("OTHER"), None, None),
            StopReason::Unknown { .. }
        ));
    }

    #[test]
    fn any_vendor_spelling() {
        assert_eq!(normalize_any("end_turn"), StopReason::Clean);
        assert_eq!(normalize_any("STOP"), StopReason::Clean);
        assert_eq!(normalize_any("stop"), StopReason::Clean);
        assert_eq!(normalize_any("length"), trunc("length"));
        assert_eq!(normalize_any("MAX_TOKENS"), trunc("MAX_TOKENS"));
        assert!(matches!(normalize_any("SPII"), StopReason::Refusal { .. }));
        assert!(matches!(normalize_any("weird"), StopReason::Unknown { .. }));
        assert!(!normalize_any("weird").is_clean());
        assert!(normalize_any("tool_use").is_clean());
    }

    #[test]
    fn debug_hides_content() {
        let r = NormalizedResponse {
            stop: StopReason::Clean,
            text: Some("secret:payload".into()),
            structured: None,
            refusal_text: Some("refusal words".into()),
            thinking: Some("private musing".into()),
            tool_calls: vec![crate::tools::ModelToolCall {
                id: "c".into(),
                name: "t".into(),
                arguments: serde_json::json!({"q": "tool argument words"}),
                signature: None,
            }],
            usage: Usage::default(),
            provider: "mock".into(),
            model: "m".into(),
        };
        let d = format!("{r:?}");
        assert!(
            !d.contains("secret:payload")
                && !d.contains("refusal words")
                && !d.contains("private musing")
                && !d.contains("tool argument words"),
            "{d}"
        );
    }
}
