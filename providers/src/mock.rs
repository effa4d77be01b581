//! The mock provider: plays a scripted [`MockScript`] per node, one response per call
//! (each optionally held in flight for a delay), and records what it was asked (budget,
//! system prompt, schema) for tests and the conformance introspection hooks
//! (`lastReceivedMaxTokens`, `lastReceivedSystemPrompt`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use openwop_protocol::retry::{MockProgram, MockResponse};
use serde_json::Value;

use crate::{CompletionRequest, Provider, ProviderError, ProviderFuture};

/// What one call to the mock carried.
#[derive(Debug, Clone, PartialEq)]
pub struct MockCall {
    pub node_id: String,
    pub max_tokens: u32,
    pub system_prompt: String,
    pub schema_sent: bool,
}

/// One scripted response and how long the call stays in flight before it is returned.
#[derive(Debug, Clone, PartialEq)]
pub struct MockStep {
    pub response: MockResponse,
    pub delay: Duration,
}

/// A node's script: one step per provider call, in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MockScript {
    pub steps: Vec<MockStep>,
}

/// Longest delay a step may ask for (matches the Run CRD's `delayMs` maximum).
pub const MAX_MOCK_DELAY: Duration = Duration::from_secs(3600);

/// Why a script was refused: where (JSON Pointer inside the script) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{pointer}: {reason}")]
pub struct MockScriptError {
    pub pointer: String,
    pub reason: String,
}

impl From<MockProgram> for MockScript {
    fn from(p: MockProgram) -> Self {
        MockScript {
            steps: p
                .responses
                .into_iter()
                .map(|response| MockStep {
                    response,
                    delay: Duration::ZERO,
                })
                .collect(),
        }
    }
}

impl MockScript {
    /// Parses `{"responses": [MockResponse + optional "delayMs", ...]}`. Pointers in errors
    /// are relative to `v` (e.g. `/responses/1/delayMs`).
    pub fn from_json(v: &Value) -> Result<Self, MockScriptError> {
        let err = |pointer: String, reason: String| MockScriptError { pointer, reason };
        let obj = v.as_object().ok_or_else(|| {
            err(
                String::new(),
                "a mock program must be an object {\"responses\": [...]}".into(),
            )
        })?;
        if let Some(k) = obj.keys().find(|k| *k != "responses") {
            return Err(err(
                format!("/{k}"),
                "unknown field; a mock program has only `responses`".into(),
            ));
        }
        let list = obj
            .get("responses")
            .and_then(Value::as_array)
            .ok_or_else(|| err("/responses".into(), "must be a list of responses".into()))?;
        let mut steps = Vec::with_capacity(list.len());
        for (i, r) in list.iter().enumerate() {
            let mut r = r.clone();
            let delay = match r.as_object_mut().and_then(|o| o.remove("delayMs")) {
                None | Some(Value::Null) => Duration::ZERO,
                Some(d) => {
                    let ms = d.as_u64().ok_or_else(|| {
                        err(
                            format!("/responses/{i}/delayMs"),
                            "must be a whole number of milliseconds".into(),
                        )
                    })?;
                    let delay = Duration::from_millis(ms);
                    if delay > MAX_MOCK_DELAY {
                        return Err(err(
                            format!("/responses/{i}/delayMs"),
                            format!(
                                "{ms} ms exceeds the maximum of {} ms",
                                MAX_MOCK_DELAY.as_millis()
                            ),
                        ));
                    }
                    delay
                }
            };
            let response: MockResponse = serde_json::from_value(r)
                .map_err(|e| err(format!("/responses/{i}"), e.to_string()))?;
            steps.push(MockStep { response, delay });
        }
        Ok(MockScript { steps })
    }
}

#[derive(Debug)]
struct Cursor {
    script: MockScript,
    next: usize,
}

#[derive(Debug)]
pub struct MockProvider {
    model: String,
    ceiling: u32,
    cursors: Mutex<BTreeMap<String, Cursor>>,
    calls: Mutex<Vec<MockCall>>,
}

impl MockProvider {
    /// `scripts`: request `node_id` → script.
    pub fn new(
        model: impl Into<String>,
        ceiling: u32,
        scripts: impl IntoIterator<Item = (String, MockScript)>,
    ) -> Self {
        MockProvider {
            model: model.into(),
            ceiling,
            cursors: Mutex::new(
                scripts
                    .into_iter()
                    .map(|(node, script)| (node, Cursor { script, next: 0 }))
                    .collect(),
            ),
            calls: Mutex::new(Vec::new()),
        }
    }

    /// Whether a script is registered under `key`.
    pub fn has_script(&self, key: &str) -> bool {
        self.cursors.lock().is_ok_and(|c| c.contains_key(key))
    }

    /// Every call received so far, in order.
    pub fn calls(&self) -> Vec<MockCall> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    pub fn last_call(&self, node_id: &str) -> Option<MockCall> {
        self.calls()
            .into_iter()
            .rev()
            .find(|c| c.node_id == node_id)
    }
}

impl Provider for MockProvider {
    fn name(&self) -> &str {
        "mock"
    }
    fn model(&self) -> &str {
        &self.model
    }
    fn output_ceiling(&self) -> u32 {
        self.ceiling
    }
    fn complete<'a>(&'a self, request: &'a CompletionRequest) -> ProviderFuture<'a> {
        let step = (|| {
            if let Ok(mut calls) = self.calls.lock() {
                calls.push(MockCall {
                    node_id: request.node_id.clone(),
                    max_tokens: request.max_tokens,
                    system_prompt: request.system_prompt.clone(),
                    schema_sent: request.schema.is_some(),
                });
            }
            let mut cursors = self
                .cursors
                .lock()
                .map_err(|_| ProviderError::Mock("state poisoned by an earlier panic".into()))?;
            let cursor = cursors.get_mut(&request.node_id).ok_or_else(|| {
                ProviderError::Mock(format!(
                    "no program for node '{}'; add one to the mock provider's programs",
                    request.node_id
                ))
            })?;
            let step = cursor.script.steps.get(cursor.next).ok_or_else(|| {
                ProviderError::Mock(format!(
                    "node '{}': mock program exhausted: call {} requested but the program has only {} responses; add more entries to `responses`",
                    request.node_id,
                    cursor.next + 1,
                    cursor.script.steps.len()
                ))
            })?;
            cursor.next += 1;
            Ok((step.response.to_normalized(&self.model), step.delay))
        })();
        Box::pin(async move {
            let (response, delay) = step?;
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(node: &str, max_tokens: u32) -> CompletionRequest {
        CompletionRequest {
            node_id: node.into(),
            system_prompt: "sys".into(),
            user_prompt: "u".into(),
            max_tokens,
            schema: Some(json!({"type": "object"})),
            schema_name: "out".into(),
        }
    }

    #[tokio::test]
    async fn plays_programs_per_node_and_records_calls() {
        let p: MockProgram = serde_json::from_value(json!({"responses": [
            {"stopReason": "length", "content": "{", "outputTokens": 5},
            {"stopReason": "stop", "content": "{}"}
        ]}))
        .unwrap();
        let mock = MockProvider::new("mock-1", 4096, [("a".to_string(), p.into())]);
        let r1 = mock.complete(&req("a", 100)).await.unwrap();
        assert!(!r1.stop.is_clean());
        let r2 = mock.complete(&req("a", 200)).await.unwrap();
        assert!(r2.stop.is_clean());
        let err = mock.complete(&req("a", 200)).await.unwrap_err();
        assert!(err.to_string().contains("exhausted"), "{err}");
        let err = mock.complete(&req("b", 1)).await.unwrap_err();
        assert!(err.to_string().contains("no program for node 'b'"), "{err}");
        assert_eq!(mock.calls().len(), 4);
        assert_eq!(mock.last_call("a").unwrap().max_tokens, 200);
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_delay_holds_the_call_in_flight() {
        let script = MockScript::from_json(&json!({"responses": [
            {"stopReason": "stop", "content": "{}", "delayMs": 1500},
            {"stopReason": "stop", "content": "{}"}
        ]}))
        .unwrap();
        assert_eq!(script.steps[0].delay, Duration::from_millis(1500));
        assert_eq!(script.steps[1].delay, Duration::ZERO);
        let mock = MockProvider::new("m", 4096, [("a".to_string(), script)]);
        let start = tokio::time::Instant::now();
        let r = req("a", 10);
        let call = mock.complete(&r);
        tokio::pin!(call);
        // Not answered before the delay has passed.
        assert!(
            tokio::time::timeout(Duration::from_millis(1400), &mut call)
                .await
                .is_err()
        );
        call.await.unwrap();
        assert!(start.elapsed() >= Duration::from_millis(1500));
        let before = tokio::time::Instant::now();
        mock.complete(&req("a", 10)).await.unwrap();
        assert_eq!(before.elapsed(), Duration::ZERO);
    }

    #[test]
    fn script_errors_name_the_place() {
        let e = MockScript::from_json(&json!({"responses": [{"stopReason": "stop"}, {"stopReason": "stop", "delayMs": "soon"}]})).unwrap_err();
        assert_eq!(e.pointer, "/responses/1/delayMs");
        let e = MockScript::from_json(
            &json!({"responses": [{"stopReason": "stop", "delayMs": 3_600_001}]}),
        )
        .unwrap_err();
        assert!(e.reason.contains("maximum"), "{e}");
        let e = MockScript::from_json(&json!({"responses": [{"content": "x"}]})).unwrap_err();
        assert_eq!(e.pointer, "/responses/0");
        assert!(e.reason.contains("stopReason"), "{e}");
        let e = MockScript::from_json(&json!({"respones": []})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/respones: unknown field; a mock program has only `responses`"
        );
        assert!(MockScript::from_json(&json!([1])).is_err());
    }
}
