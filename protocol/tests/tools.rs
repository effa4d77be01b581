//! A Workflow's LLM nodes are refused at registration when their tool members are wrong,
//! with the member's place and what to do; other node types are not concerned.

use openwop_protocol::tier1::Tier1Posture;
use openwop_protocol::workflow_check::{CheckOptions, NodeRegistry, ProblemCode, check_workflow};
use serde_json::{Value, json};

fn problems(registry: &NodeRegistry, type_id: &str, config: Value) -> Vec<(ProblemCode, String)> {
    let kinds = Default::default();
    let opts = CheckOptions {
        registry,
        advertised_kinds: &kinds,
        tier1: Tier1Posture::Warn,
        mock_agent_opt_in: false,
    };
    let wf = json!({"id": "w", "name": "w", "version": "1", "nodes": [
        {"id": "agent", "typeId": type_id, "name": "agent", "position": {"x": 0, "y": 0},
         "config": config, "inputs": {}}]});
    check_workflow(&wf, &opts)
        .errors
        .iter()
        .map(|p| (p.code, p.to_string()))
        .collect()
}

#[test]
fn llm_nodes_with_bad_tool_members_are_refused_precisely() {
    let registry = NodeRegistry::builtin();
    for type_id in ["core.ai.callPrompt", "core.ai.structuredOutput"] {
        // Well-formed: admitted (the ToolServers are resolved when a run starts).
        assert_eq!(
            problems(
                &registry,
                type_id,
                json!({"systemPrompt": "s", "tools": [{"server": "search", "names": ["web"]}], "maxToolRounds": 4}),
            ),
            vec![],
            "{type_id}"
        );
        assert_eq!(
            problems(
                &registry,
                type_id,
                json!({"systemPrompt": "s", "tools": []})
            ),
            vec![],
            "{type_id}: no tools, nothing refused"
        );
        let p = problems(
            &registry,
            type_id,
            json!({"tools": [{"server": "search"}, {"server": "search"}]}),
        );
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].0, ProblemCode::NodeConfigInvalid);
        assert!(
            p[0].1.contains("/nodes/0/config/tools/1/server")
                && p[0].1.contains(type_id)
                && p[0].1.contains("merge the two entries"),
            "{}",
            p[0].1
        );
        let p = problems(
            &registry,
            type_id,
            json!({"tools": [{"server": "search", "url": "https://x"}]}),
        );
        assert!(
            p.iter().any(|(c, m)| *c == ProblemCode::NodeConfigInvalid
                && m.contains("/nodes/0/config/tools/0")),
            "{p:?}"
        );
    }
    // `tools` means nothing to a node that calls no model.
    assert_eq!(
        problems(&registry, "core.identity", json!({"tools": 1})),
        vec![]
    );
}

#[test]
fn an_operator_config_schema_does_not_replace_the_tool_check() {
    let mut registry = NodeRegistry::builtin();
    registry
        .register_with_schema(
            "core.ai.callPrompt",
            &json!({"type": "object", "required": ["provider"]}),
        )
        .unwrap();
    let p = problems(
        &registry,
        "core.ai.callPrompt",
        json!({"provider": "openai", "maxToolRounds": 1000}),
    );
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].1.contains("/nodes/0/config/maxToolRounds"),
        "{}",
        p[0].1
    );
    // The operator's own schema still applies.
    assert!(
        problems(&registry, "core.ai.callPrompt", json!({}))
            .iter()
            .any(|(_, m)| m.contains("provider"))
    );
}

/// A provider response's tool calls are recorded with the rest of it, their arguments
/// redacted, and a restarted node gets them back from the journal instead of calling again.
#[test]
fn recorded_responses_keep_redacted_tool_calls() {
    use openwop_protocol::events::EventFactory;
    use openwop_protocol::redact::Redactor;
    use openwop_protocol::retry::{Journal, MockProgram, MockResponse, ResponseRecord, step_key};

    let secret = "sk-live-0123456789";
    let step: MockResponse = serde_json::from_value(json!({
        "stopReason": "tool_use",
        "toolCalls": [{"name": "search", "arguments": {"q": format!("key {secret}")}}]
    }))
    .unwrap();
    let live = step.to_normalized("m");
    let redactor = Redactor::new([("api".to_owned(), secret.to_owned())]);
    let key = step_key("agent", 0, 0);
    let (record, routed) = ResponseRecord::new(&key, 1, 256, &live, &redactor);
    assert_eq!(
        routed.tool_calls[0].arguments,
        json!({"q": "key [REDACTED:api]"})
    );
    let event = EventFactory::new("run-1", 0)
        .emit("r", "t", &record.to_payload("agent"))
        .with_node("agent");
    assert!(!event.payload.to_string().contains(secret));
    let mut journal = Journal::restore(&[event], "agent", &key);
    assert_eq!(journal.take(1, 256), Some(routed));
    // The program format itself is unchanged for steps without calls.
    let p: MockProgram =
        serde_json::from_value(json!({"responses": [{"stopReason": "stop", "content": "x"}]}))
            .unwrap();
    assert!(p.responses[0].to_normalized("m").tool_calls.is_empty());
}
