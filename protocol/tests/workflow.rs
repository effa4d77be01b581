//! Workflow definitions: round trips, refusals with pointers, graph helpers.

use openwop_protocol::pipeline::RefusalMode;
use openwop_protocol::workflow::{
    ConditionKind, PortValue, TriggerKind, TriggerRule, VariableKind, WorkflowDefinition,
    WorkflowError,
};
use serde_json::{Value, json};

/// Uses every member the schema defines, every port-value variant and explicit nulls.
fn full() -> Value {
    json!({
        "id": "prd-review",
        "name": "PRD review",
        "description": "Drafts a PRD and asks for approval",
        "version": "1.2.0",
        "nodes": [
            {"id": "draft", "typeId": "core.ai.callPrompt", "name": "Draft",
             "config": {"prompt": "Write a PRD", "temperature": 0.2},
             "inputs": {
                "topic": {"type": "variable", "variableName": "topic"},
                "style": {"type": "static", "value": null},
                "limits": {"type": "static", "value": {"words": 500}},
                "prior": {"type": "connection", "nodeId": "seed", "outputKey": "text", "optional": true},
                "when": {"type": "expression", "expression": "run.startedAt"}
             },
             "agent": {"agentId": "writer-1", "version": "2", "role": "author"},
             "envelopeContract": {"accepts": ["vendor.acme.prd.create"], "refusalMode": "discard-and-warn",
                "schemas": {"vendor.acme.prd.create": {"type": "object"}}},
             "settings": {"timeout": 30000, "maxRetries": 2, "custom": true},
             "disabled": false, "notes": "first", "position": {"x": 1, "y": 2.5}},
            {"id": "seed", "typeId": "core.identity"},
            {"id": "review", "typeId": "core.flow.noop"}
        ],
        "edges": [
            {"id": "e1", "sourceNodeId": "seed", "targetNodeId": "draft"},
            {"id": "e2", "sourceNodeId": "draft", "sourceOutput": "out", "targetNodeId": "review",
             "targetInput": "in", "label": "ok", "triggerRule": "none_failed",
             "condition": {"type": "equals", "left": "output.approved", "right": null}}
        ],
        "triggers": [{"id": "t1", "type": "chat-message", "name": "chat", "description": "d",
            "config": {"channel": "x"}, "enabled": true, "nodeId": "seed", "eventType": "msg"}],
        "variables": [{"name": "topic", "type": "string", "description": "d", "required": true,
            "defaultValue": null, "sensitive": false}],
        "configurableSchema": {"type": "object"},
        "outputSchema": {"type": "object", "properties": {"prd": {"type": "string"}}},
        "metadata": {"tags": ["a"]},
        "settings": {"timeout": 60000, "maxRetries": 1, "logLevel": "warn", "maxLoopbackIterations": 3}
    })
}

fn minimal() -> Value {
    json!({"id": "w", "nodes": [{"id": "a", "typeId": "core.identity"}]})
}

fn schema_pointers(e: &WorkflowError) -> Vec<String> {
    match e {
        WorkflowError::Schema { issues } => {
            issues.iter().map(|i| i.instance_path.clone()).collect()
        }
        other => panic!("expected a schema error, got {other:?}"),
    }
}

#[test]
fn examples_round_trip_exactly() {
    for v in [
        full(),
        minimal(),
        json!({"id": "x", "nodes": [{"id": "a", "typeId": "b"}], "edges": []}),
    ] {
        let def = WorkflowDefinition::from_value(v.clone()).unwrap();
        assert_eq!(def.to_value(), v);
    }
}

#[test]
fn typed_fields_read_as_expected() {
    let def = WorkflowDefinition::from_value(full()).unwrap();
    let draft = def.node("draft").unwrap();
    let inputs = draft.inputs.as_ref().unwrap();
    assert_eq!(
        inputs["topic"].typed().unwrap(),
        &PortValue::Variable {
            variable_name: "topic".into(),
            optional: None
        }
    );
    assert_eq!(
        inputs["style"].typed().unwrap(),
        &PortValue::Static { value: Value::Null }
    );
    assert_eq!(
        inputs["prior"].typed().unwrap(),
        &PortValue::Connection {
            node_id: "seed".into(),
            output_key: "text".into(),
            optional: Some(true)
        }
    );
    assert_eq!(
        inputs["when"].typed().unwrap(),
        &PortValue::Expression {
            expression: "run.startedAt".into()
        }
    );
    let contract = draft.envelope_contract.as_ref().unwrap();
    assert!(
        contract
            .schemas
            .as_ref()
            .unwrap()
            .contains_key("vendor.acme.prd.create")
    );
    let pc = contract.to_pipeline();
    assert_eq!(pc.accepts, ["vendor.acme.prd.create"]);
    assert_eq!(pc.refusal_mode, RefusalMode::DiscardAndWarn);
    let settings = draft.settings.as_ref().unwrap().typed().unwrap();
    assert_eq!(settings.timeout, Some(30000));
    assert_eq!(settings.other["custom"], true);
    let agent = draft.agent.as_ref().unwrap().typed().unwrap();
    assert_eq!(agent.agent_id, "writer-1");

    let e1 = &def.edges()[0];
    assert_eq!(
        e1.trigger_rule(),
        TriggerRule::AllSuccess,
        "default trigger rule"
    );
    assert_eq!((e1.source_output(), e1.target_input()), ("output", "input"));
    let e2 = &def.edges()[1];
    assert_eq!(e2.trigger_rule(), TriggerRule::NoneFailed);
    let c = e2.condition.as_ref().unwrap();
    assert_eq!(c.kind, ConditionKind::Equals);
    assert_eq!(
        c.right,
        Some(Value::Null),
        "explicit null kept apart from absent"
    );
    assert_eq!(
        def.triggers.as_ref().unwrap()[0].typed().unwrap().kind,
        TriggerKind::ChatMessage
    );
    assert_eq!(
        def.variables.as_ref().unwrap()[0].kind,
        VariableKind::String
    );
    assert_eq!(
        def.variables.as_ref().unwrap()[0].default_value,
        Some(Value::Null)
    );
    assert!(def.node("nope").is_none());
}

#[test]
fn schema_violations_are_refused_with_pointers() {
    let cases: Vec<(Value, &str)> = vec![
        (json!({"id": "w"}), ""),
        (
            json!({"id": "Bad Id", "nodes": [{"id": "a", "typeId": "b"}]}),
            "/id",
        ),
        (json!({"id": "w", "nodes": []}), "/nodes"),
        (
            json!({"id": "w", "nodes": [{"id": "a", "typeId": "b", "extra": 1}]}),
            "/nodes/0",
        ),
        (
            json!({"id": "w", "nodes": [{"id": "a", "typeId": "b",
            "inputs": {"p": {"type": "static"}}}]}),
            "/nodes/0/inputs/p",
        ),
        (
            json!({"id": "w", "nodes": [{"id": "a", "typeId": "b",
            "inputs": {"p": {"type": "telepathy", "value": 1}}}]}),
            "/nodes/0/inputs/p",
        ),
        (
            json!({"id": "w", "nodes": [{"id": "a", "typeId": "b"}],
            "edges": [{"id": "e", "sourceNodeId": "a", "targetNodeId": "a", "triggerRule": "sometimes"}]}),
            "/edges/0/triggerRule",
        ),
        (
            json!({"id": "w", "nodes": [{"id": "a", "typeId": "b"}], "settings": {"timeout": -1}}),
            "/settings/timeout",
        ),
        (
            json!({"id": "w", "nodes": [{"id": "a", "typeId": "b",
            "envelopeContract": {"refusalMode": "explode"}}]}),
            "/nodes/0/envelopeContract/refusalMode",
        ),
    ];
    for (v, pointer) in cases {
        let e = WorkflowDefinition::from_value(v.clone()).unwrap_err();
        let pointers = schema_pointers(&e);
        assert!(
            pointers.iter().any(|p| p == pointer),
            "{v}: expected {pointer:?} in {pointers:?}"
        );
        assert!(
            e.to_string()
                .starts_with("the workflow definition does not match the schema"),
            "{e}"
        );
    }
    let e = WorkflowDefinition::from_value(json!([1])).unwrap_err();
    assert_eq!(schema_pointers(&e), [""]);
}

#[test]
fn duplicate_ids_and_dangling_edges_are_refused() {
    let e = WorkflowDefinition::from_value(json!({"id": "w", "nodes": [
        {"id": "a", "typeId": "b"}, {"id": "c", "typeId": "b"}, {"id": "a", "typeId": "b"}]}))
    .unwrap_err();
    assert_eq!(
        e,
        WorkflowError::DuplicateNodeId {
            id: "a".into(),
            first: 0,
            pointer: "/nodes/2/id".into()
        }
    );
    assert!(e.to_string().contains("/nodes/2/id"), "{e}");
    let e =
        WorkflowDefinition::from_value(json!({"id": "w", "nodes": [{"id": "a", "typeId": "b"}],
        "edges": [{"id": "e1", "sourceNodeId": "a", "targetNodeId": "ghost"}]}))
        .unwrap_err();
    assert_eq!(
        e,
        WorkflowError::UnknownNode {
            edge_id: "e1".into(),
            node_id: "ghost".into(),
            pointer: "/edges/0/targetNodeId".into()
        }
    );
}

fn graph(nodes: &[&str], edges: &[(&str, &str)]) -> WorkflowDefinition {
    let nodes: Vec<Value> = nodes
        .iter()
        .map(|n| json!({"id": n, "typeId": "core.identity"}))
        .collect();
    let edges: Vec<Value> = edges
        .iter()
        .enumerate()
        .map(|(i, (s, t))| json!({"id": format!("e{i}"), "sourceNodeId": s, "targetNodeId": t}))
        .collect();
    WorkflowDefinition::from_value(json!({"id": "g", "nodes": nodes, "edges": edges})).unwrap()
}

fn ids<'a>(
    nodes: impl IntoIterator<Item = &'a openwop_protocol::workflow::WorkflowNode>,
) -> Vec<&'a str> {
    nodes.into_iter().map(|n| n.id.as_str()).collect()
}

#[test]
fn topological_order_respects_edges_and_definition_order() {
    // d → b → a, d → c, and e alone; ties go to definition order.
    let def = graph(
        &["a", "b", "c", "d", "e"],
        &[("d", "b"), ("b", "a"), ("d", "c")],
    );
    let order = def.topological_order().unwrap();
    assert_eq!(ids(order), ["d", "b", "a", "c", "e"]);
    assert_eq!(ids(def.entry_nodes()), ["d", "e"]);
    let out: Vec<&str> = def
        .outgoing_edges("d")
        .map(|e| e.target_node_id.as_str())
        .collect();
    assert_eq!(out, ["b", "c"]);
    let inc: Vec<&str> = def
        .incoming_edges("a")
        .map(|e| e.source_node_id.as_str())
        .collect();
    assert_eq!(inc, ["b"]);
    assert_eq!(def.incoming_edges("d").count(), 0);

    // Diamond: every node after all of its predecessors.
    let def = graph(
        &["join", "left", "right", "start"],
        &[
            ("start", "left"),
            ("start", "right"),
            ("left", "join"),
            ("right", "join"),
        ],
    );
    assert_eq!(
        ids(def.topological_order().unwrap()),
        ["start", "left", "right", "join"]
    );
}

#[test]
fn a_cycle_is_an_error_naming_it() {
    let def = graph(
        &["a", "b", "c", "d"],
        &[("a", "b"), ("b", "c"), ("c", "d"), ("d", "b")],
    );
    let e = def.topological_order().unwrap_err();
    let WorkflowError::Cycle { cycle } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(cycle.first(), cycle.last());
    let mut members: Vec<&str> = cycle[..cycle.len() - 1]
        .iter()
        .map(String::as_str)
        .collect();
    // Consecutive ids are joined by edges.
    for w in cycle.windows(2) {
        assert!(
            def.outgoing_edges(&w[0]).any(|e| e.target_node_id == w[1]),
            "{cycle:?}"
        );
    }
    members.sort_unstable();
    assert_eq!(members, ["b", "c", "d"]);
    assert!(e.to_string().contains(" → "), "{e}");

    let self_loop = graph(&["a"], &[("a", "a")]);
    assert_eq!(
        self_loop.topological_order().unwrap_err(),
        WorkflowError::Cycle {
            cycle: vec!["a".into(), "a".into()]
        }
    );
}

#[test]
fn long_chains_sort_without_recursion() {
    let names: Vec<String> = (0..20_000).map(|i| format!("n{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let edges: Vec<(&str, &str)> = refs.windows(2).map(|w| (w[1], w[0])).collect();
    let def = graph(&refs, &edges);
    let order = def.topological_order().unwrap();
    assert_eq!(order.first().unwrap().id, "n19999");
    assert_eq!(order.last().unwrap().id, "n0");
    // Close the chain into one long cycle: still found iteratively.
    let mut edges = edges;
    edges.push(("n0", "n19999"));
    let def = graph(&refs, &edges);
    let WorkflowError::Cycle { cycle } = def.topological_order().unwrap_err() else {
        panic!()
    };
    assert_eq!(cycle.len(), 20_001);
}
