//! The mock provider: plays a scripted [`MockProgram`] (protocol's one mock type, as
//! `Run.spec.providerMocks` and `envelope simulate` write it) per node, one response per call
//! (each optionally held in flight for its `delayMs`), and records what it was asked (budget,
//! system prompt, schema) for tests and the conformance introspection hooks
//! (`lastReceivedMaxTokens`, `lastReceivedSystemPrompt`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use openwop_protocol::retry::MAX_DELAY_MS;
use openwop_protocol::retry::MockProgram;

use crate::{CompletionRequest, Provider, ProviderError, ProviderFuture};

/// What one call to the mock carried.
#[derive(Debug, Clone, PartialEq)]
pub struct MockCall {
    pub node_id: String,
    pub max_tokens: u32,
    pub system_prompt: String,
    pub schema_sent: bool,
    /// The names of the tools offered.
    pub tools: Vec<String>,
    /// The tool conversation sent (calls and results so far).
    pub turns: Vec<crate::tools::ToolTurn>,
}

#[derive(Debug)]
struct Cursor {
    program: MockProgram,
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
    /// `programs`: request `node_id` → program.
    pub fn new(
        model: impl Into<String>,
        ceiling: u32,
        programs: impl IntoIterator<Item = (String, MockProgram)>,
    ) -> Self {
        MockProvider {
            model: model.into(),
            ceiling,
            cursors: Mutex::new(
                programs
                    .into_iter()
                    .map(|(node, program)| (node, Cursor { program, next: 0 }))
                    .collect(),
            ),
            calls: Mutex::new(Vec::new()),
        }
    }

    /// Whether a program is registered under `key`.
    pub fn has_program(&self, key: &str) -> bool {
        self.cursors.lock().is_ok_and(|c| c.contains_key(key))
    }

    /// Moves `key`'s program past one step without a call: a worker that restores a
    /// recorded response plays the rest of the program from where the recorded run was.
    pub fn skip(&self, key: &str) {
        if let Ok(mut cursors) = self.cursors.lock()
            && let Some(c) = cursors.get_mut(key)
        {
            c.next += 1;
        }
    }

    /// Moves `key`'s program to step `made` unless it is already past it: a restarted
    /// worker resumes the program after the calls earlier node attempts made.
    pub fn advance_to(&self, key: &str, made: usize) {
        if let Ok(mut cursors) = self.cursors.lock()
            && let Some(c) = cursors.get_mut(key)
        {
            c.next = c.next.max(made);
        }
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
                    tools: request.tools.iter().map(|t| t.name.clone()).collect(),
                    turns: request.turns.clone(),
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
            let step = cursor.program.responses.get(cursor.next).ok_or_else(|| {
                ProviderError::Mock(format!(
                    "node '{}': mock program exhausted: call {} requested but the program has only {} responses; add more entries to `responses`",
                    request.node_id,
                    cursor.next + 1,
                    cursor.program.responses.len()
                ))
            })?;
            cursor.next += 1;
            let delay = Duration::from_millis(step.delay_ms.unwrap_or(0).min(MAX_DELAY_MS));
            Ok((step.to_normalized(&self.model), delay))
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
            tools: vec![],
            turns: vec![],
        }
    }

    #[tokio::test]
    async fn plays_programs_per_node_and_records_calls() {
        let p: MockProgram = serde_json::from_value(json!({"responses": [
            {"stopReason": "length", "content": "{", "outputTokens": 5},
            {"stopReason": "stop", "content": "{}"}
        ]}))
        .unwrap();
        let mock = MockProvider::new("mock-1", 4096, [("a".to_string(), p)]);
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

    /// A scripted step asks for tool calls; the next call plays the model's next turn.
    #[tokio::test]
    async fn a_program_asks_for_tool_calls() {
        let p: MockProgram = serde_json::from_value(json!({"responses": [
            {"stopReason": "tool_calls", "toolCalls": [
                {"name": "search", "arguments": {"q": "rust"}},
                {"name": "close", "arguments": {"id": 7}, "id": "call_2"}
            ]},
            {"stopReason": "stop", "content": "{\"answer\": \"ok\"}"}
        ]}))
        .unwrap();
        let mock = MockProvider::new("m", 4096, [("agent".to_string(), p)]);
        let first = mock.complete(&req("agent", 100)).await.unwrap();
        assert!(first.stop.is_clean());
        let calls: Vec<(&str, &str)> = first
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect();
        assert_eq!(calls, vec![("mock-call-0", "search"), ("call_2", "close")]);
        assert_eq!(first.tool_calls[1].arguments, json!({"id": 7}));
        let second = mock.complete(&req("agent", 100)).await.unwrap();
        assert!(second.tool_calls.is_empty());
        assert_eq!(second.text.as_deref(), Some("{\"answer\": \"ok\"}"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_delay_holds_the_call_in_flight() {
        let program: MockProgram = serde_json::from_value(json!({"responses": [
            {"stopReason": "stop", "content": "{}", "delayMs": 1500},
            {"stopReason": "stop", "content": "{}"}
        ]}))
        .unwrap();
        let mock = MockProvider::new("m", 4096, [("a".to_string(), program)]);
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
}
