//! The mock provider: plays a scripted [`MockProgram`] per node, one response per call,
//! and records what it was asked (budget, system prompt, schema) for tests and the
//! conformance introspection hooks (`lastReceivedMaxTokens`, `lastReceivedSystemPrompt`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use openwop_protocol::retry::{MockCursor, MockProgram};

use crate::{CompletionRequest, Provider, ProviderError, ProviderFuture};

/// What one call to the mock carried.
#[derive(Debug, Clone, PartialEq)]
pub struct MockCall {
    pub node_id: String,
    pub max_tokens: u32,
    pub system_prompt: String,
    pub schema_sent: bool,
}

#[derive(Debug)]
pub struct MockProvider {
    model: String,
    ceiling: u32,
    cursors: Mutex<BTreeMap<String, MockCursor>>,
    calls: Mutex<Vec<MockCall>>,
}

impl MockProvider {
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
                    .map(|(node, p)| (node, MockCursor::new(p)))
                    .collect(),
            ),
            calls: Mutex::new(Vec::new()),
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
        let result = (|| {
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
            cursor
                .next_response(&self.model)
                .map_err(|e| ProviderError::Mock(format!("node '{}': {e}", request.node_id)))
        })();
        Box::pin(async move { result })
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
}
