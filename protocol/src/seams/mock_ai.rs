//! The conformance seam `POST /v1/host/sample/test/mock-ai/program`'s program format
//! (`host-sample-test-seams.md`): the suite's per-call behaviour, turned into the Run's
//! `spec.providerMocks` entry ([`ProviderMock`]) that the worker plays like any other mock.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::retry::mock::{MockError, MockResponse, ProviderMock};

/// One entry of a program staged through the conformance seam
/// `POST /v1/host/sample/test/mock-ai/program` (`{nodeId, program: [..]}`): the suite's
/// mock behaviour, every field optional. It is played as a [`MockResponse`] in the created
/// Run's `spec.providerMocks`, so `kubectl get run -o yaml` shows what the mock answers.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProgrammedCall {
    /// `end_turn`, `max_tokens`, `length`, `stop_sequence`, `safety`, or any spelling
    /// [`MockResponse::stop_reason`] takes. Absent: a clean stop, or a refusal when
    /// `refusalText` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// The model text (or an already-structured JSON value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    /// Provider refusal text: the call is a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
}

/// Most entries a staged program may hold (the Run CRD's bound on `responses`).
pub const MAX_PROGRAMMED_CALLS: usize = 64;

impl ProgrammedCall {
    /// The scripted response this entry plays. The suite's `safety` stop (a safety filter)
    /// is refusal-class, as the conformance mock defines it; refusal text without a stop
    /// reason is a refusal too.
    pub fn to_mock_response(&self) -> MockResponse {
        let stop_reason = match (self.stop_reason.as_deref(), &self.refusal_text) {
            (Some("safety"), _) | (None, Some(_)) => "refusal".to_owned(),
            (Some(s), _) => s.to_owned(),
            (None, None) => "end_turn".to_owned(),
        };
        MockResponse {
            stop_reason,
            content: self.content.clone(),
            refusal_text: self.refusal_text.clone(),
            thinking: None,
            output_tokens: self.output_tokens.unwrap_or(0),
            input_tokens: self.input_tokens.unwrap_or(0),
            delay_ms: None,
            tool_calls: Vec::new(),
        }
    }
}

/// The node mock a staged program becomes (one program, one response per call), checked
/// like a Run's own `spec.providerMocks` entry.
pub fn staged_mock(program: &[ProgrammedCall]) -> Result<ProviderMock, MockError> {
    let err = |reason: String| MockError {
        pointer: "/program".into(),
        reason,
    };
    if program.is_empty() {
        return Err(err(
            "needs at least one entry (one per expected provider call)".into(),
        ));
    }
    if program.len() > MAX_PROGRAMMED_CALLS {
        return Err(err(format!(
            "has {} entries, more than the {MAX_PROGRAMMED_CALLS} a Run's providerMocks may hold",
            program.len()
        )));
    }
    for (i, c) in program.iter().enumerate() {
        let stop = c.stop_reason.as_deref().unwrap_or("end_turn");
        if stop.is_empty() || stop.len() > 64 {
            return Err(MockError {
                pointer: format!("/program/{i}/stopReason"),
                reason: "must be 1 to 64 characters".into(),
            });
        }
        if c.refusal_text
            .as_ref()
            .is_some_and(|t| t.chars().count() > 4096)
        {
            return Err(MockError {
                pointer: format!("/program/{i}/refusalText"),
                reason: "must be at most 4096 characters".into(),
            });
        }
        for (field, n) in [
            ("outputTokens", c.output_tokens),
            ("inputTokens", c.input_tokens),
        ] {
            if n.is_some_and(|n| n > 10_000_000) {
                return Err(MockError {
                    pointer: format!("/program/{i}/{field}"),
                    reason: "must be at most 10000000".into(),
                });
            }
        }
    }
    let mock = ProviderMock {
        responses: Some(
            program
                .iter()
                .map(ProgrammedCall::to_mock_response)
                .collect(),
        ),
        turns: None,
    };
    mock.programs()?;
    Ok(mock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::mock::{MockCursor, MockProgram};
    use crate::retry::response::StopReason;
    use serde_json::json;

    #[test]
    fn staged_programs_become_node_mocks() {
        let program: Vec<ProgrammedCall> = serde_json::from_value(json!([
            {"stopReason": "max_tokens", "content": "{\"valid\":"},
            {"content": "{\"valid\":true}"},
            {"stopReason": "safety", "refusalText": "no"},
            {"refusalText": "also no", "outputTokens": 3}
        ]))
        .unwrap();
        let mock = staged_mock(&program).unwrap();
        let r = mock.responses.unwrap();
        let stops: Vec<&str> = r.iter().map(|r| r.stop_reason.as_str()).collect();
        assert_eq!(stops, ["max_tokens", "end_turn", "refusal", "refusal"]);
        assert_eq!(r[1].content, Some(json!("{\"valid\":true}")));
        assert_eq!(r[3].output_tokens, 3);
        // Played by the mock: truncation, clean, refusal.
        let mut c = MockCursor::new(MockProgram { responses: r });
        assert_eq!(
            c.next_response("m").unwrap().stop.truncation_wire(),
            crate::events::StopReason::MaxTokens
        );
        assert_eq!(c.next_response("m").unwrap().stop, StopReason::Clean);
        assert!(matches!(
            c.next_response("m").unwrap().stop,
            StopReason::Refusal { .. }
        ));
    }

    #[test]
    fn staged_programs_are_bounded_and_checked() {
        assert_eq!(staged_mock(&[]).unwrap_err().pointer, "/program");
        let many = vec![ProgrammedCall::default(); MAX_PROGRAMMED_CALLS + 1];
        assert!(
            staged_mock(&many)
                .unwrap_err()
                .reason
                .contains("65 entries")
        );
        let bad = ProgrammedCall {
            stop_reason: Some(String::new()),
            ..Default::default()
        };
        assert_eq!(
            staged_mock(&[ProgrammedCall::default(), bad])
                .unwrap_err()
                .pointer,
            "/program/1/stopReason"
        );
        let err = serde_json::from_value::<Vec<ProgrammedCall>>(json!([{"mode": "refusal"}]))
            .unwrap_err();
        assert!(err.to_string().contains("mode"), "{err}");
    }
}
