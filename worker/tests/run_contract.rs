//! The run contract, end to end through the worker binary with a real nats-server and a
//! fake OpenAI-compatible server: each node calls the model it names; `sensitive` variables
//! never leave the prompt; the host profile in the snapshot is what the worker enforces; a
//! re-created Run (same name, new runId) never replays the previous run's log.

mod common;

use common::*;
use serde_json::{Value, json};

const CANARY: &str = "canary-7f3a-sensitive-value";

fn llm_snapshot(files: &RunFiles) {
    files.set_snapshot_field(
        "providers",
        json!([{"provider": "openai-compatible", "mountAs": "env", "envName": "OPENWOP_TEST_NO_KEY"}]),
    );
}

#[test]
fn each_node_calls_the_model_it_names_and_sensitive_values_stay_in_the_prompt() {
    let nats = NatsServer::start();
    let llm = FakeLlm::start(json!({"type": "vendor.acme.note", "payload": {"text": "noted"}}));
    let node = |id: &str, model: &str| {
        json!({"id": id, "typeId": "core.ai.callPrompt", "config": {"provider": "openai-compatible",
               "model": model, "prompt": "note the token", "envelopeType": "vendor.acme.note"}})
    };
    let workflow = json!({"id": "models", "variables": [{"name": "apiToken", "type": "string", "sensitive": true}],
        "nodes": [node("first", "fake-a"), node("second", "fake-b")],
        "edges": [{"id": "e", "sourceNodeId": "first", "targetNodeId": "second"}]});
    let files = RunFiles::new(
        "models",
        "run-contract-models",
        workflow,
        json!({"apiToken": CANARY}),
        json!({}),
    );
    llm_snapshot(&files);
    let (code, stderr) = files.run_with(&nats.url(), |c| {
        c.env("OPENWOP_PROVIDER_OPENAI_COMPATIBLE_BASE_URL", &llm.base);
    });
    assert_eq!(code, 0, "{stderr}");
    let bodies = llm.bodies.lock().unwrap().clone();
    let models: Vec<&str> = bodies
        .iter()
        .map(|b| b["model"].as_str().unwrap())
        .collect();
    assert_eq!(
        models,
        ["fake-a", "fake-b"],
        "one request per node, each with its own model"
    );
    // The workflow puts the variable in the first prompt (its inputs): the provider gets it.
    assert!(bodies[0].to_string().contains(CANARY));
    let events = read_raw(&nats.url(), &files.subject());
    let all = serde_json::to_string(&events).unwrap();
    assert!(
        !all.contains(CANARY),
        "a sensitive value reached the event stream"
    );
    assert!(
        all.contains("[REDACTED:apiToken]"),
        "masked with the variable's name"
    );
    assert!(
        !stderr.contains(CANARY),
        "a sensitive value reached the worker's log"
    );
    assert!(
        !std::fs::read_to_string(files.path("termination.json"))
            .unwrap()
            .contains(CANARY)
    );
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "run.started")
        .collect();
    assert_eq!(
        started[0]["payload"]["inputs"]["apiToken"],
        "[REDACTED:apiToken]"
    );
    assert_eq!(
        types(&events).last().map(String::as_str),
        Some("run.completed")
    );
}

fn clarifying_run(name: &str, limit: u32) -> RunFiles {
    let ask = |q: &str| {
        json!({"responses": [{"stopReason": "stop", "content": {"type": "clarification.request",
               "payload": {"questions": [{"id": q, "question": format!("{q}?")}]}}}]})
    };
    let files = RunFiles::new(
        name,
        &format!("run-contract-{name}"),
        json!({"id": "clarify", "nodes": [{"id": "q", "typeId": "core.ai.callPrompt",
               "config": {"prompt": "plan", "envelopeType": "vendor.acme.plan", "clarificationRounds": 5, "model": "planner-9"}}]}),
        json!({}),
        json!({"q": [ask("region"), ask("size"),
                     {"responses": [{"stopReason": "stop", "content": {"type": "vendor.acme.plan", "payload": {"ok": true}}}]}]}),
    );
    files.set_snapshot_field("host", json!({"limits": {"clarificationRounds": limit, "schemaRounds": 3, "envelopesPerTurn": 32}}));
    files
}

/// Answers each clarification as it comes; returns the final exit code and the events.
fn run_answering(files: &RunFiles, url: &str) -> (i32, Vec<Value>) {
    let mut answers = vec![];
    for _ in 0..5 {
        let (code, stderr) = files.run(url);
        let events = read_raw(url, &files.subject());
        if code != openwop_worker::exit::SUSPENDED {
            return (code, events);
        }
        let pending = files.termination()["pendingInterrupts"][0]["interruptId"].clone();
        assert!(pending.is_string(), "{stderr}");
        answers.push(json!({"interruptId": pending, "value": {"answer": "x"}}));
        files.set_answers(json!(answers));
    }
    panic!("the run never ended");
}

#[test]
fn the_host_profile_in_the_snapshot_is_what_the_worker_enforces() {
    let nats = NatsServer::start();
    // Host limit 3 (the default): two questions, then the answer.
    let roomy = clarifying_run("roomy", 3);
    let (code, events) = run_answering(&roomy, &nats.url());
    assert_eq!(code, 0);
    // The mock stands in for the node's model: its calls are reported under that name.
    let usage: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "provider.usage")
        .collect();
    assert!(!usage.is_empty());
    assert!(
        usage.iter().all(|e| e["payload"]["model"] == "planner-9"),
        "{usage:?}"
    );
    assert_eq!(
        types(&events).last().map(String::as_str),
        Some("run.completed")
    );
    // Host limit 1: the node's own clarificationRounds (5) cannot raise it; the second
    // question fails the node with cap_breached.
    let tight = clarifying_run("tight", 1);
    let (code, events) = run_answering(&tight, &nats.url());
    assert_eq!(code, 0);
    let cap = events
        .iter()
        .find(|e| e["type"] == "cap.breached")
        .expect("cap.breached");
    assert_eq!(cap["payload"]["kind"], "clarification");
    assert_eq!(cap["payload"]["limit"], 1);
    let failed = events.iter().find(|e| e["type"] == "run.failed").unwrap();
    assert_eq!(failed["payload"]["error"]["code"], "cap_breached");
    assert_eq!(tight.termination()["phase"], "failed");
}

#[test]
fn a_recreated_run_never_replays_the_previous_runs_log() {
    let nats = NatsServer::start();
    let workflow = json!({"id": "hello", "nodes": [{"id": "greet", "typeId": "core.identity"}]});
    let first = RunFiles::new(
        "hello-run",
        "uid-first",
        workflow.clone(),
        json!({"greeting": "hi"}),
        json!({}),
    );
    assert_eq!(first.run(&nats.url()).0, 0);
    // Same namespace and name, new object (new uid), other inputs.
    let second = RunFiles::new(
        "hello-run",
        "uid-second",
        workflow,
        json!({"greeting": "BYE-second-run"}),
        json!({}),
    );
    assert_ne!(
        first.subject(),
        second.subject(),
        "subjects are keyed by runId"
    );
    assert_eq!(second.run(&nats.url()).0, 0);
    let events = read_raw(&nats.url(), &second.subject());
    assert!(events.iter().all(|e| e["runId"] == "uid-second"));
    assert_eq!(events[0]["sequence"], 0);
    let done = events
        .iter()
        .find(|e| e["type"] == "run.completed")
        .unwrap();
    assert_eq!(
        done["payload"]["outputs"]["greet"]["output"]["greeting"],
        "BYE-second-run"
    );
    // Even a foreign event on the subject (a misconfigured publisher) is never replayed.
    let third = RunFiles::new(
        "other",
        "uid-first",
        json!({"id": "x", "nodes": [{"id": "greet", "typeId": "core.identity"}]}),
        json!({"greeting": "third"}),
        json!({}),
    );
    third.set_snapshot_field(
        "run",
        json!({"namespace": "ns", "name": "other", "runId": "uid-third"}),
    );
    let (code, stderr) = third.run_with(&nats.url(), |c| {
        c.env("OPENWOP_EVENTS_SUBJECT", first.subject());
    });
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("events of another run"), "{stderr}");
    let mine: Vec<Value> = read_raw(&nats.url(), &first.subject())
        .into_iter()
        .filter(|e| e["runId"] == "uid-third")
        .collect();
    assert_eq!(mine[0]["sequence"], 0);
    let done = mine.iter().find(|e| e["type"] == "run.completed").unwrap();
    assert_eq!(
        done["payload"]["outputs"]["greet"]["output"]["greeting"],
        "third"
    );
}

#[test]
fn every_registered_node_type_executes() {
    use openwop_protocol::run::nodes::{BUILTIN_NODES, Executor, MOCK_AGENT_TYPE_ID};
    let nats = NatsServer::start();
    let answer = json!({"responses": [{"stopReason": "stop", "content": {"type": "vendor.acme.note", "payload": {"text": "ok"}}}]});
    let mut nodes = vec![];
    let mut mocks = serde_json::Map::new();
    // HTTP nodes call a local service (loopback, allowed in the host profile below) that
    // answers every request with 204.
    let service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let service_url = format!("http://{}/", service.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut s in service.incoming().map_while(Result::ok) {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
        }
    });
    for (i, n) in BUILTIN_NODES.iter().enumerate() {
        let id = format!("n{i}");
        let config = match n.executor {
            Executor::Prompt => {
                mocks.insert(id.clone(), answer.clone());
                json!({"prompt": "p", "envelopeType": "vendor.acme.note"})
            }
            Executor::MockAgent => json!({"mockConfidence": 0.95}),
            Executor::Http => json!({"url": service_url}),
            Executor::Passthrough
            | Executor::Noop
            | Executor::Fail
            | Executor::Iterator
            | Executor::Merge
            | Executor::ArrayMerge => json!({}),
            // Gates wait for an answer (given below).
            Executor::Gate => match n.type_id {
                "core.clarificationGate" => json!({"questions": [{"id": "q", "question": "?"}]}),
                "core.interrupt" => json!({"kind": "custom", "data": {"customKind": "k"}}),
                _ => json!({}),
            },
            Executor::Conditional => json!({"predicate": {"path": "", "op": "exists"}}),
            Executor::Router => json!({"routes": [{"label": "all"}]}),
            Executor::SetVariable => json!({"name": "v", "value": 1}),
            Executor::GetVariable => json!({"name": "v"}),
            Executor::Delay => json!({"delayMs": 1}),
            // Completes only once the operator ran its child Run: the executor's durable
            // tests and the e2e journey cover it.
            Executor::SubWorkflow => continue,
            // A read of the fake MCP server declared below.
            Executor::ToolCall => {
                json!({"server": "kb", "tool": "lookup", "arguments": {"query": "q"}})
            }
        };
        let mut node = json!({"id": id, "typeId": n.type_id, "config": config});
        if n.executor == Executor::Iterator {
            node["inputs"] = json!({"array": {"type": "static", "value": [1, 2]}});
        }
        nodes.push(node);
    }
    assert!(
        BUILTIN_NODES
            .iter()
            .any(|n| n.type_id == MOCK_AGENT_TYPE_ID)
    );
    let files = RunFiles::new(
        "all-types",
        "run-contract-all-types",
        json!({"id": "conformance-all-types", "nodes": nodes,
               "variables": [{"name": "v", "type": "number"}]}),
        json!({}),
        Value::Object(mocks),
    );
    files.set_snapshot_field("host", json!({"http": {"allowHosts": ["127.0.0.1"]}}));
    let kb = openwop_providers::testing::mcp::FakeMcp::start(Default::default());
    files.set_snapshot_field(
        "toolServers",
        json!([{"name": "kb", "namespace": "ns", "url": kb.url, "timeoutSeconds": 5,
                "maxResultBytes": 4096, "toolTiers": [{"name": "lookup", "tier": "read"}]}]),
    );
    // The gates wait; everything else settles (core.fail fails, by design).
    let (code, stderr) = files.run(&nats.url());
    assert_eq!(code, 3, "suspended: {stderr}");
    let events = read_raw(&nats.url(), &files.subject());
    let answers: Vec<Value> = events
        .iter()
        .filter(|e| e["type"] == "node.suspended")
        .map(|e| {
            let id = &e["payload"]["interruptId"];
            match e["payload"]["kind"].as_str() {
                Some("approval") => json!({"interruptId": id, "action": "accept"}),
                Some("clarification") => json!({"interruptId": id, "value": {"q": "a"}}),
                _ => json!({"interruptId": id, "value": {}}),
            }
        })
        .collect();
    let gates = BUILTIN_NODES
        .iter()
        .filter(|n| n.executor == Executor::Gate)
        .count();
    assert_eq!(answers.len(), gates, "{stderr}");
    files.set_answers(Value::Array(answers));
    let (code, stderr) = files.run(&nats.url());
    assert_eq!(code, 0, "{stderr}");
    let events = read_raw(&nats.url(), &files.subject());
    let ended = |t: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["type"] == t)
            .map(|e| e["nodeId"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let (completed, failed) = (ended("node.completed"), ended("node.failed"));
    for (i, n) in BUILTIN_NODES.iter().enumerate() {
        if n.executor == Executor::SubWorkflow {
            continue;
        }
        let id = format!("n{i}");
        let want = if n.executor == Executor::Fail {
            &failed
        } else {
            &completed
        };
        assert!(
            want.contains(&id),
            "{} ({id}): {completed:?} {failed:?}",
            n.type_id
        );
    }
    // The failed node is the run's one unhandled failure.
    assert_eq!(
        types(&events).last().map(String::as_str),
        Some("run.failed")
    );
}

/// The mock-agent opt-in the operator checks a Workflow against (its namespace is in
/// `conformance.mockAgentNamespaces`) reaches the worker in the snapshot's host profile: a
/// mock-agent workflow whose id does not start with `conformance-` runs where the host opted
/// in, and fails with `capability_required` where it did not.
#[test]
fn the_mock_agent_runs_where_the_snapshot_says_the_host_opted_in() {
    let nats = NatsServer::start();
    let workflow = json!({"id": "team-agent", "nodes": [{"id": "m", "typeId": "core.conformance.mock-agent",
        "config": {"mockReasoning": true, "mockDecision": {"decision": "ship", "confidence": 0.95}}}]});
    let opted_in = RunFiles::new(
        "agent-opted-in",
        "run-contract-agent-in",
        workflow.clone(),
        json!({}),
        json!({}),
    );
    opted_in.set_snapshot_field("host", json!({"mockAgent": true}));
    let (code, stderr) = opted_in.run(&nats.url());
    assert_eq!(code, 0, "{stderr}");
    let events = read_raw(&nats.url(), &opted_in.subject());
    let t = types(&events);
    assert!(t.iter().any(|t| t == "agent.decided"), "{t:?}");
    assert_eq!(t.last().map(String::as_str), Some("run.completed"), "{t:?}");

    let not_opted = RunFiles::new(
        "agent-not-opted",
        "run-contract-agent-out",
        workflow,
        json!({}),
        json!({}),
    );
    let (code, stderr) = not_opted.run(&nats.url());
    assert_eq!(code, 0, "{stderr}");
    let events = read_raw(&nats.url(), &not_opted.subject());
    let failed = events.iter().find(|e| e["type"] == "run.failed").unwrap();
    assert_eq!(failed["payload"]["error"]["code"], "capability_required");
    assert!(
        events
            .iter()
            .all(|e| !e["type"].as_str().unwrap().starts_with("agent.")),
        "a refused mock agent emits nothing"
    );
}

/// The operator's record that it checked the workflow (`workflowChecked`) spares the worker
/// the schema only for that very document: a workflow edited in the snapshot afterwards is
/// checked, and its run fails with the schema's issue.
#[test]
fn a_workflow_edited_after_the_operators_check_is_checked_by_the_worker() {
    let nats = NatsServer::start();
    let checked = json!({"id": "hello", "nodes": [{"id": "greet", "typeId": "core.identity"}]});
    let files = RunFiles::new(
        "checked",
        "uid-checked",
        checked,
        json!({"greeting": "hi"}),
        json!({}),
    );
    let path = files.path("snapshot.json");
    let mut snap = openwop_protocol::run::snapshot::RunSnapshot::from_json(
        &std::fs::read_to_string(&path).unwrap(),
        "snapshot.json",
    )
    .unwrap();
    snap.check_workflow();
    let record = snap
        .workflow_checked
        .clone()
        .expect("the operator's record");
    std::fs::write(&path, snap.to_json()).unwrap();
    let (code, stderr) = files.run(&nats.url());
    assert_eq!(code, 0, "{stderr}");
    let events = read_raw(&nats.url(), &files.subject());
    assert!(
        types(&events).contains(&"run.completed".to_string()),
        "{events:?}"
    );

    // The same record on an edited workflow (an id the schema refuses).
    let edited = RunFiles::new(
        "edited",
        "uid-edited",
        json!({"id": "Hello", "nodes": [{"id": "greet", "typeId": "core.identity"}]}),
        json!({"greeting": "hi"}),
        json!({}),
    );
    edited.set_snapshot_field("workflowChecked", json!(record));
    let (_, stderr) = edited.run(&nats.url());
    assert!(stderr.contains("workflow definition invalid"), "{stderr}");
    let events = read_raw(&nats.url(), &edited.subject());
    let failed = events
        .iter()
        .find(|e| e["type"] == "run.failed")
        .unwrap_or_else(|| panic!("run.failed expected: {events:?}"));
    assert!(failed.to_string().contains("/id"), "{failed}");
    assert!(
        !types(&events).contains(&"node.started".to_string()),
        "{events:?}"
    );
}
