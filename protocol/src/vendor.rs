//! The LLM vendors this host's providers speak, named once: the operator validates its
//! configured providers against this list, the providers crate builds a client per vendor,
//! and the Tier-1 schema lowering picks its dialect from it (`tier1::Vendor::from`).

/// An LLM vendor (`providers[].vendor` in the operator config, a provider name in a node).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LlmVendor {
    OpenAi,
    Anthropic,
    Gemini,
    /// Any server with OpenAI's chat-completions API (vLLM, Ollama, ...); needs a base URL.
    OpenAiCompatible,
}

/// The scripted mock provider: a vendor only tests and conformance runs configure.
pub const MOCK_VENDOR: &str = "mock";

impl LlmVendor {
    /// Every vendor, in the order error messages list them.
    pub const ALL: [LlmVendor; 4] = [
        LlmVendor::OpenAi,
        LlmVendor::Anthropic,
        LlmVendor::Gemini,
        LlmVendor::OpenAiCompatible,
    ];

    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            LlmVendor::OpenAi => "openai",
            LlmVendor::Anthropic => "anthropic",
            LlmVendor::Gemini => "gemini",
            LlmVendor::OpenAiCompatible => "openai-compatible",
        }
    }

    /// The vendor of a configuration name (exact, lower case).
    pub fn parse(name: &str) -> Option<LlmVendor> {
        Self::ALL.into_iter().find(|v| v.as_str() == name)
    }

    /// `openai, anthropic, gemini, openai-compatible`: for messages listing the choices.
    pub fn names() -> String {
        Self::ALL.map(LlmVendor::as_str).join(", ")
    }
}

impl std::fmt::Display for LlmVendor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier1::Vendor as Dialect;

    #[test]
    fn names_parse_back_and_dialects_are_named_like_their_vendor() {
        for v in LlmVendor::ALL {
            assert_eq!(LlmVendor::parse(v.as_str()), Some(v));
        }
        assert_eq!(LlmVendor::parse("OpenAI"), None);
        assert_eq!(LlmVendor::parse(MOCK_VENDOR), None);
        assert_eq!(
            LlmVendor::names(),
            "openai, anthropic, gemini, openai-compatible"
        );
        for d in [Dialect::OpenAi, Dialect::Anthropic, Dialect::Gemini] {
            let v = LlmVendor::parse(d.as_str()).unwrap();
            assert_eq!(Dialect::from(v), d);
        }
    }
}
