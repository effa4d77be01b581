//! Scripted provider responses for the mock provider and `envelope simulate`.
//!
//! Program file format (JSON):
//! `{"responses": [{"stopReason": "max_tokens", "content": "{\"a\":", "refusalText": null,
//!   "outputTokens": 512, "inputTokens": 100, "thinking": "…"}, …]}` — one entry consumed per provider call.
//! `stopReason` may be any vendor's spelling (`stop`, `end_turn`, `MAX_TOKENS`, `refusal`, …).
//! `content` is a string (raw model text, parsed leniently) or any other JSON value (an
//! already-structured payload, as a tool call or vendor JSON mode returns it).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::response::{NormalizedResponse, Usage, normalize_any};
use crate::tools::MockToolCall;

// The schema annotations (lengths, ranges, `x-kubernetes-*`) are what the Run CRD's
// `spec.providerMocks` publishes: the CRD uses these types, so the mock the apiserver
// admits is exactly the mock the worker plays.

/// The program of one node (or of one clarification turn): one response per provider
/// call, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MockProgram {
    /// One response per provider call, in order.
    #[schemars(length(min = 1, max = 64))]
    pub responses: Vec<MockResponse>,
}

/// One scripted provider response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MockResponse {
    /// The vendor stop reason, in any vendor's spelling: `stop`, `end_turn`, `max_tokens`,
    /// `length`, `MAX_TOKENS`, `refusal`, `safety`, …
    #[schemars(length(min = 1, max = 64))]
    pub stop_reason: String,
    /// The model output: a string (raw text, parsed leniently) or any JSON value (an
    /// already-structured payload, as tool calls and JSON modes return it).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::lenient::option"
    )]
    #[schemars(schema_with = "any_json")]
    pub content: Option<Value>,
    /// Refusal text (with `stopReason: refusal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub refusal_text: Option<String>,
    /// Provider thinking returned beside the content (feeds the reasoning stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16384))]
    pub thinking: Option<String>,
    /// Reported output tokens.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = 10000000))]
    pub output_tokens: u64,
    /// Reported input tokens.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = 10000000))]
    pub input_tokens: u64,
    /// How long the call stays in flight before this response is returned (milliseconds),
    /// e.g. to disrupt a run mid-call in a test; ignored by `envelope simulate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600000))]
    pub delay_ms: Option<u64>,
    /// Tools the scripted model asks to call, in order, returned with the response as a real
    /// model's calls are (write `stopReason: tool_calls` or `tool_use` beside them, as a real
    /// model's turn ends). The next provider call plays the next response.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub tool_calls: Vec<MockToolCall>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Any JSON value, kept as written by the apiserver (a structural schema would prune it).
fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// Longest a scripted call may stay in flight (one hour).
pub const MAX_DELAY_MS: u64 = 3_600_000;

/// The scripted responses of one node (`Run.spec.providerMocks.<node>`): `responses` (one
/// program) or `turns` (one program per clarification turn; each answer starts a new
/// worker, which plays the next turn).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.responses) != has(self.turns)",
    "message": "set exactly one of responses (one program) or turns (one program per clarification turn)"
}]))]
pub struct ProviderMock {
    /// One response per provider call, in order (same as a single entry in `turns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub responses: Option<Vec<MockResponse>>,
    /// One program per clarification turn (turn 0 = before the first answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16))]
    pub turns: Option<Vec<MockProgram>>,
}

/// Why a node's mock cannot be played: where (JSON Pointer inside the mock) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{pointer}: {reason}")]
pub struct MockError {
    pub pointer: String,
    pub reason: String,
}

impl ProviderMock {
    /// One program per clarification turn, checked (exactly one of `responses`/`turns`,
    /// delays within [`MAX_DELAY_MS`]).
    pub fn programs(&self) -> Result<Vec<MockProgram>, MockError> {
        let err = |pointer: String, reason: &str| MockError {
            pointer,
            reason: reason.to_owned(),
        };
        let (programs, base): (Vec<MockProgram>, Vec<String>) = match (&self.responses, &self.turns)
        {
            (Some(r), None) => (
                vec![MockProgram {
                    responses: r.clone(),
                }],
                vec![String::new()],
            ),
            (None, Some(t)) if !t.is_empty() => (
                t.clone(),
                (0..t.len()).map(|i| format!("/turns/{i}")).collect(),
            ),
            (None, Some(_)) => return Err(err("/turns".into(), "needs at least one program")),
            _ => {
                return Err(err(
                    String::new(),
                    "set exactly one of `responses` (one program) or `turns` (one program per clarification turn)",
                ));
            }
        };
        for (p, at) in programs.iter().zip(&base) {
            for (i, r) in p.responses.iter().enumerate() {
                if r.delay_ms.is_some_and(|d| d > MAX_DELAY_MS) {
                    return Err(err(
                        format!("{at}/responses/{i}/delayMs"),
                        "exceeds the maximum of 3600000 ms",
                    ));
                }
            }
        }
        Ok(programs)
    }
}

impl MockResponse {
    pub fn to_normalized(&self, model: &str) -> NormalizedResponse {
        let (text, structured) = match &self.content {
            None | Some(Value::Null) => (None, None),
            Some(Value::String(s)) => (Some(s.clone()), None),
            Some(v) => (None, Some(v.clone())),
        };
        NormalizedResponse {
            stop: normalize_any(&self.stop_reason),
            text,
            structured,
            refusal_text: self.refusal_text.clone(),
            thinking: self.thinking.clone(),
            tool_calls: self
                .tool_calls
                .iter()
                .enumerate()
                .map(|(i, c)| c.to_model_call(i))
                .collect(),
            usage: Usage {
                input_tokens: self.input_tokens,
                output_tokens: self.output_tokens,
            },
            provider: "mock".into(),
            model: model.into(),
        }
    }
}

/// A program being played: hands out one response per call, then reports exhaustion.
#[derive(Debug, Clone)]
pub struct MockCursor {
    program: MockProgram,
    next: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "mock program exhausted: call {call} requested but the program has only {len} responses; add more entries to `responses`"
)]
pub struct MockExhausted {
    pub call: usize,
    pub len: usize,
}

impl MockCursor {
    pub fn new(program: MockProgram) -> Self {
        Self { program, next: 0 }
    }

    pub fn calls_made(&self) -> usize {
        self.next
    }

    pub fn next_response(&mut self, model: &str) -> Result<NormalizedResponse, MockExhausted> {
        let r = self.program.responses.get(self.next).ok_or(MockExhausted {
            call: self.next + 1,
            len: self.program.responses.len(),
        })?;
        self.next += 1;
        Ok(r.to_normalized(model))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::response::StopReason;
    use serde_json::json;

    #[test]
    fn program_is_consumed_in_order_then_exhausts() {
        let p: MockProgram = serde_json::from_value(json!({"responses": [
            {"stopReason": "max_tokens", "content": "{\"a\":", "outputTokens": 10, "inputTokens": 3},
            {"stopReason": "end_turn", "content": {"a": 1}, "thinking": "a is one"},
            {"stopReason": "refusal", "refusalText": "no"}
        ]}))
        .unwrap();
        let mut c = MockCursor::new(p);
        let r1 = c.next_response("m").unwrap();
        assert_eq!(
            r1.stop.truncation_wire(),
            crate::events::StopReason::MaxTokens
        );
        assert_eq!(r1.text.as_deref(), Some("{\"a\":"));
        assert_eq!(r1.usage.output_tokens, 10);
        let r2 = c.next_response("m").unwrap();
        assert_eq!(r2.stop, StopReason::Clean);
        assert_eq!(r2.structured, Some(json!({"a": 1})));
        assert_eq!(r2.thinking.as_deref(), Some("a is one"));
        assert_eq!(r1.thinking, None);
        let r3 = c.next_response("m").unwrap();
        assert!(matches!(r3.stop, StopReason::Refusal { .. }));
        assert_eq!(r3.refusal_text.as_deref(), Some("no"));
        assert_eq!(
            c.next_response("m").unwrap_err(),
            MockExhausted { call: 4, len: 3 }
        );
    }

    #[test]
    fn a_step_asks_for_tool_calls() {
        let p: MockProgram = serde_json::from_value(json!({"responses": [
            {"stopReason": "tool_calls", "toolCalls": [
                {"name": "search", "arguments": {"q": "rust"}},
                {"name": "fetch", "id": "call_b"}
            ]},
            {"stopReason": "stop", "content": "{\"answer\": \"done\"}"}
        ]}))
        .unwrap();
        let mut c = MockCursor::new(p.clone());
        let r1 = c.next_response("m").unwrap();
        assert_eq!(r1.stop, StopReason::ToolUse);
        let calls: Vec<(&str, &str, &serde_json::Value)> = r1
            .tool_calls
            .iter()
            .map(|t| (t.id.as_str(), t.name.as_str(), &t.arguments))
            .collect();
        assert_eq!(
            calls,
            vec![
                ("mock-call-0", "search", &json!({"q": "rust"})),
                ("call_b", "fetch", &serde_json::Value::Null)
            ]
        );
        let r2 = c.next_response("m").unwrap();
        assert!(r2.tool_calls.is_empty());
        // The program reads back as written (no empty `toolCalls` added).
        let v = serde_json::to_value(&p).unwrap();
        assert!(v["responses"][1].get("toolCalls").is_none());
        assert_eq!(
            v["responses"][0]["toolCalls"][1],
            json!({"name": "fetch", "id": "call_b"})
        );
        // A recorded response keeps its calls, so a replay asks for the same ones.
        let back: NormalizedResponse =
            serde_json::from_value(serde_json::to_value(&r1).unwrap()).unwrap();
        assert_eq!(back, r1);
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err = serde_json::from_value::<MockProgram>(
            json!({"responses": [{"stopReason": "stop", "stop_reason": "x"}]}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("stop_reason"), "{err}");
    }
}
