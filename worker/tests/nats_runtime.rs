//! The worker against a real nats-server: sequence/dedup, interrupts and resume, crash safety
//! under SIGKILL, NATS restarts, and the secret canary.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

const RUN_ID: &str = "0f1e2d3c-run";

/// a (identity) → p (callPrompt: truncation, then valid) → m (mock agent, low confidence →
/// approval) → q (callPrompt: clarification, then answer) → z (noop).
fn workflow() -> Value {
    json!({"id": "conformance-crash", "nodes": [
        {"id": "a", "typeId": "core.identity"},
        {"id": "p", "typeId": "core.ai.callPrompt", "config": {"provider": "mock", "prompt": "summarise", "envelopeType": "vendor.acme.summary", "maxTokens": 64, "schemaRounds": 3},
         "inputs": {"doc": {"type": "connection", "nodeId": "a", "outputKey": "output"}}},
        {"id": "m", "typeId": "core.conformance.mock-agent", "config": {"agentId": "agent-m",
            "mockReasoning": {"summary": "weighing it", "trace": "step one\nstep two"},
            "mockToolCalls": [{"toolId": "search", "arguments": {"q": "x"}, "result": {"hits": 2}, "durationMs": 5}],
            "mockHandoff": {"toAgentId": "agent-n", "reason": "specialist"},
            "mockDecision": {"decision": "ship", "confidence": 0.4}}},
        {"id": "q", "typeId": "core.ai.callPrompt", "config": {"provider": "mock", "prompt": "ask", "envelopeType": "vendor.acme.plan"}},
        {"id": "z", "typeId": "core.flow.noop"}],
     "edges": [
        {"id": "e1", "sourceNodeId": "a", "targetNodeId": "p"},
        {"id": "e2", "sourceNodeId": "p", "targetNodeId": "m"},
        {"id": "e3", "sourceNodeId": "m", "targetNodeId": "q"},
        {"id": "e4", "sourceNodeId": "q", "targetNodeId": "z"}]})
}

fn programs() -> Value {
    json!({
        "p": {"responses": [
            {"stopReason": "max_tokens", "content": "{\"type\": \"vendor.acme.su", "outputTokens": 64},
            {"stopReason": "stop", "content": "{\"type\": \"vendor.acme.summary\", \"payload\": {\"text\": \"short\", \"reasoning\": \"read it\\nsummed it\"}}", "outputTokens": 20}]},
        "q": [
            {"responses": [{"stopReason": "stop", "content": {"type": "clarification.request", "payload": {"questions": [{"id": "region", "question": "Which region?"}]}}}]},
            {"responses": [{"stopReason": "stop", "content": {"type": "vendor.acme.plan", "payload": {"region": "eu"}}}]}]
    })
}

/// Runs to the end, answering each interrupt as it appears: approve CP-1, answer the clarification.
/// `kill_after` (ms) SIGKILLs successive worker processes until one ends by itself.
fn drive(
    files: &RunFiles,
    url: &str,
    mut kill_after: impl FnMut() -> Option<u64>,
) -> (usize, usize) {
    let mut answers: Vec<Value> = vec![];
    let (mut kills, mut starts) = (0, 0);
    loop {
        // Emissions already finished before this process starts: it must not call the provider for them.
        let before = read_raw(url, &files.subject());
        let mut finished: HashSet<String> = HashSet::new();
        for e in &before {
            match e["type"].as_str().unwrap() {
                "node.completed" => {
                    let n = e["nodeId"].as_str().unwrap();
                    finished.insert(format!("{n}#0"));
                    finished.insert(format!("{n}#1"));
                }
                "clarification.requested" => {
                    finished.insert(format!("{}#0", e["nodeId"].as_str().unwrap()));
                }
                _ => {}
            }
        }
        starts += 1;
        let mut child = files.command(url).spawn().unwrap();
        // Drained on a thread so a chatty worker never blocks on a full pipe.
        let mut pipe = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut pipe, &mut s);
            s
        });
        let code = match kill_after() {
            Some(ms) => {
                std::thread::sleep(Duration::from_millis(ms));
                match child.try_wait().unwrap() {
                    Some(status) => status.code(),
                    None => {
                        child.kill().unwrap(); // SIGKILL
                        child.wait().unwrap();
                        kills += 1;
                        None
                    }
                }
            }
            None => child.wait().unwrap().code(),
        };
        let stderr = reader.join().unwrap();
        for c in files.record_calls(&stderr) {
            let key = c["key"].as_str().unwrap();
            assert!(
                !finished.contains(key),
                "provider call for finished emission {key} repeated"
            );
        }
        match code {
            None => continue,
            Some(0) => return (kills, starts),
            Some(3) => {
                let t = files.termination();
                let pi = &t["pendingInterrupts"][0];
                let id = pi["interruptId"].as_str().unwrap().to_owned();
                if answers.iter().any(|a| a["interruptId"] == id.as_str()) {
                    continue; // a killed attempt left the same suspension behind
                }
                answers.push(match pi["kind"].as_str().unwrap() {
                    "approval" => json!({"interruptId": id, "approved": true}),
                    _ => json!({"interruptId": id, "value": {"region": "eu"}}),
                });
                files.set_answers(json!(answers));
            }
            Some(other) => panic!("worker exited with {other}"),
        }
    }
}

#[test]
fn sequence_interrupts_and_dedup_against_real_jetstream() {
    let nats = NatsServer::start();
    let files = RunFiles::new(
        "ref",
        RUN_ID,
        workflow(),
        json!({"doc": "hello"}),
        programs(),
    );
    // First worker: stops at the CP-1 approval.
    let (code, _) = files.run(&nats.url());
    assert_eq!(code, 3);
    let t = files.termination();
    assert_eq!(t["phase"], "waiting-approval");
    assert_eq!(t["pendingInterrupts"][0]["reason"], "low-confidence");
    assert_eq!(t["pendingInterrupts"][0]["agentId"], "agent-m");
    let first = read_raw(&nats.url(), &files.subject());
    let tys = types(&first);
    let agent: Vec<&str> = tys
        .iter()
        .map(String::as_str)
        .filter(|t| t.starts_with("agent."))
        .collect();
    assert_eq!(
        agent,
        [
            "agent.reasoned",
            "agent.toolCalled",
            "agent.toolReturned",
            "agent.handoff",
            "agent.decided"
        ]
    );
    assert_eq!(tys.last().unwrap(), "node.suspended");
    assert!(
        tys.contains(&"envelope.truncated".to_string())
            && tys.contains(&"envelope.retry.attempted".to_string())
    );
    // Passthrough nodes never emit agent.* events.
    assert!(
        first
            .iter()
            .all(|e| !(e["nodeId"] == "a" && e["type"].as_str().unwrap().starts_with("agent.")))
    );
    // A worker restarted without an answer publishes nothing new.
    assert_eq!(files.run(&nats.url()).0, 3);
    assert_eq!(read_raw(&nats.url(), &files.subject()).len(), first.len());
    // An untrusted answer cannot approve.
    let id = t["pendingInterrupts"][0]["interruptId"]
        .as_str()
        .unwrap()
        .to_owned();
    files.set_answers(json!([{"interruptId": id, "approved": true, "contentTrust": "untrusted"}]));
    assert_eq!(files.run(&nats.url()).0, 3);
    let after = read_raw(&nats.url(), &files.subject());
    assert_eq!(
        after.last().unwrap()["payload"]["message"]
            .as_str()
            .unwrap()
            .split(':')
            .next(),
        Some("untrusted_content_blocks_approval")
    );
    // Approve → clarification → answer → completed.
    files.set_answers(json!([{"interruptId": id, "approved": true}]));
    assert_eq!(files.run(&nats.url()).0, 3);
    let t = files.termination();
    assert_eq!(t["phase"], "waiting-input");
    assert_eq!(t["pendingInterrupts"][0]["questions"][0]["id"], "region");
    let qid = t["pendingInterrupts"][0]["interruptId"]
        .as_str()
        .unwrap()
        .to_owned();
    files.set_answers(json!([{"interruptId": id, "approved": true}, {"interruptId": qid, "value": {"region": "eu"}}]));
    assert_eq!(files.run(&nats.url()).0, 0);
    assert_eq!(files.termination()["phase"], "completed");
    let all = read_raw(&nats.url(), &files.subject());
    assert_gap_free(&all);
    let tys = types(&all);
    assert_eq!(tys.first().unwrap(), "run.started");
    assert_eq!(tys.last().unwrap(), "run.completed");
    for t in [
        "approval.received",
        "interrupt.resolved",
        "node.resumed",
        "clarification.requested",
        "interrupt.requested",
        "clarification.resolved",
        "run.resumed",
    ] {
        assert!(tys.iter().any(|x| x == t), "missing {t}");
    }
    assert_eq!(
        all.last().unwrap()["payload"]["outputs"]["z"]["output"]["region"],
        "eu"
    );
    // Each provider call happened exactly once: p twice (truncation + retry), q once per turn.
    let keys: Vec<String> = files
        .calls()
        .iter()
        .map(|c| c["key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys, ["p#0", "p#0", "q#0", "q#1"]);
    // Republishing a recorded event with its id is dropped by JetStream's dedup window.
    rt().block_on(async {
        let client = async_nats::connect(nats.url()).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let e = &all[3];
        let ack = js
            .send_publish(
                files.subject(),
                async_nats::jetstream::message::PublishMessage::build()
                    .payload(serde_json::to_vec(e).unwrap().into())
                    .message_id(e["eventId"].as_str().unwrap()),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(ack.duplicate);
    });
    assert_eq!(read_raw(&nats.url(), &files.subject()).len(), all.len());
    // The reasoning subject carries start → thoughts (incl. a nested tool context) → conclusion.
    let rs = read_raw(&nats.url(), &files.reasoning_subject());
    let m_msgs: Vec<&Value> = rs.iter().filter(|m| m["nodeId"] == "m").collect();
    assert_eq!(m_msgs[0]["kind"], "reasoning.start");
    let start = m_msgs[0]["id"].as_str().unwrap();
    assert!(m_msgs.iter().any(|m| {
        m["context"]
            .as_str()
            .is_some_and(|c| c.starts_with(&format!("{start}/")))
    }));
    assert_eq!(m_msgs.last().unwrap()["kind"], "reasoning.conclusion");
    assert!(
        rs.iter()
            .any(|m| m["nodeId"] == "p" && m["payload"]["message"] == "summed it")
    );
}

#[test]
fn sigkill_at_many_points_yields_the_uninterrupted_log() {
    let nats = NatsServer::start();
    let reference = RunFiles::new(
        "reference",
        RUN_ID,
        workflow(),
        json!({"doc": "hello"}),
        programs(),
    );
    drive(&reference, &nats.url(), || None);
    let want: Vec<Value> = read_raw(&nats.url(), &reference.subject())
        .iter()
        .map(essence)
        .collect();

    // Same run id, so the same event ids: the killed run gets its own server, since
    // JetStream's dedup window is per stream.
    let nats = NatsServer::start();
    let killed = RunFiles::new(
        "reference",
        RUN_ID,
        workflow(),
        json!({"doc": "hello"}),
        programs(),
    );
    let mut delay = 0u64;
    let (kills, starts) = drive(&killed, &nats.url(), || {
        delay += 7;
        Some(delay)
    });
    eprintln!("{kills} SIGKILLs over {starts} worker starts");
    let got: Vec<Value> = read_raw(&nats.url(), &killed.subject())
        .iter()
        .map(essence)
        .collect();
    assert_gap_free(&got);
    assert!(
        kills >= 3,
        "only {kills} kills in {starts} starts; the run is too fast for the schedule"
    );
    assert_eq!(types(&got), types(&want));
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w);
    }
}

#[test]
fn nats_restart_mid_run_loses_nothing() {
    let mut nats = NatsServer::start();
    let nodes: Vec<Value> = (0..150)
        .map(|i| json!({"id": format!("n{i}"), "typeId": "core.identity"}))
        .collect();
    let edges: Vec<Value> = (1..150).map(|i| json!({"id": format!("e{i}"), "sourceNodeId": format!("n{}", i - 1), "targetNodeId": format!("n{i}")})).collect();
    let wf = json!({"id": "chain", "nodes": nodes, "edges": edges});
    let files = RunFiles::new("restart", RUN_ID, wf, json!({"x": 1}), json!({}));
    let mut child = files
        .command(&nats.url())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for(
        || read_raw_quick(&nats.url(), &files.subject()) >= 20,
        Duration::from_secs(20)
    ));
    nats.stop();
    std::thread::sleep(Duration::from_millis(1500));
    nats.restart();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let all = read_raw(&nats.url(), &files.subject());
    assert_gap_free(&all);
    // run.started + 150 × (node.started, node.completed) + run.completed
    assert_eq!(all.len(), 302);
    assert_eq!(all.last().unwrap()["type"], "run.completed");
}

fn read_raw_quick(url: &str, subject: &str) -> usize {
    read_raw(url, subject).len()
}

#[test]
fn the_secret_canary_never_reaches_nats_or_logs() {
    const CANARY: &str = "canary-7f3a9c1e5b";
    let nats = NatsServer::start();
    let wf = json!({"id": "conformance-canary", "nodes": [
        {"id": "p", "typeId": "core.ai.callPrompt", "config": {"provider": "mock", "prompt": format!("use {CANARY}"), "systemPrompt": format!("never say {CANARY}"), "envelopeType": "vendor.acme.note"}},
        {"id": "r", "typeId": "core.ai.callPrompt", "config": {"provider": "mock", "prompt": "x", "envelopeType": "vendor.acme.note"}},
        {"id": "m", "typeId": "core.conformance.mock-agent", "config": {"mockReasoning": {"summary": format!("I saw {CANARY}"), "trace": format!("line {CANARY}")},
            "mockDecision": {"decision": CANARY, "confidence": 0.99}}}],
     "edges": [{"id": "e1", "sourceNodeId": "p", "targetNodeId": "m"}]});
    let programs = json!({
        "p": {"responses": [{"stopReason": "stop", "content": {"type": "vendor.acme.note", "payload": {"text": format!("secret is {CANARY}"), "reasoning": format!("found {CANARY}")}},
            "thinking": format!("thinking about {CANARY}\nsecond thought")}]},
        "r": {"responses": [{"stopReason": "refusal", "refusalText": format!("I will not reveal {CANARY}")}]}
    });
    let files = RunFiles::new(
        "canary",
        RUN_ID,
        wf,
        json!({"doc": format!("input {CANARY}")}),
        programs,
    );
    std::fs::write(files.path("secrets/canary"), CANARY).unwrap();
    let (code, stderr) = files.run(&nats.url());
    assert_eq!(code, 0, "{stderr}");
    let events = read_raw(&nats.url(), &files.subject());
    let reasoning = read_raw(&nats.url(), &files.reasoning_subject());
    assert!(types(&events).contains(&"envelope.refusal".to_string()));
    assert!(!reasoning.is_empty());
    // Provider thinking reaches the reasoning subject as its own block, redacted.
    let thinking: Vec<&Value> = reasoning
        .iter()
        .filter(|m| m["nodeId"] == "p" && m["from"] == "host:mock:p")
        .filter(|m| {
            m["kind"] == "reasoning.start"
                && m["payload"]["message"]
                    .as_str()
                    .is_some_and(|t| t.contains("thinking"))
                || m["kind"] == "reasoning.thought"
        })
        .collect();
    let start = thinking
        .iter()
        .find(|m| m["payload"]["message"] == "mock thinking (call 1)")
        .expect("a thinking block");
    let thoughts: Vec<&Value> = thinking
        .iter()
        .filter(|m| m["context"] == start["id"])
        .map(|m| &m["payload"]["message"])
        .collect();
    assert_eq!(
        thoughts,
        [
            &json!("thinking about [REDACTED:canary]"),
            &json!("second thought")
        ]
    );
    let everything = format!(
        "{events:?}{reasoning:?}{stderr}{}",
        std::fs::read_to_string(files.path("termination.json")).unwrap()
    );
    assert!(!everything.contains(CANARY), "canary leaked");
    assert!(everything.contains("[REDACTED:canary]"));
}

/// An external NATS that requires a user and password: the worker reads them from
/// OPENWOP_NATS_CREDENTIALS_DIR (the operator's copy of the chart's Secret), and wrong or
/// half-configured credentials fail clearly without printing the password.
#[test]
fn credentials_directory_authenticates_the_worker() {
    const PASSWORD: &str = "pw-Kd93-worker-secret";
    let nats = NatsServer::start_with(&["--user", "openwop", "--pass", PASSWORD]);
    let workflow = json!({"id": "auth", "nodes": [
        {"id": "a", "typeId": "core.identity"},
        {"id": "z", "typeId": "core.flow.noop"}],
     "edges": [{"id": "e1", "sourceNodeId": "a", "targetNodeId": "z"}]});
    let f = RunFiles::new("auth-run", "run-auth", workflow, json!({"x": 1}), json!({}));
    let creds = f.path("nats-credentials");
    std::fs::create_dir_all(&creds).unwrap();
    std::fs::write(creds.join("username"), "openwop").unwrap();
    std::fs::write(creds.join("password"), format!("{PASSWORD}\n")).unwrap();
    let run = |deadline_ms: &str| {
        let out = f
            .command(&nats.url())
            .env("OPENWOP_NATS_CREDENTIALS_DIR", &creds)
            .env("OPENWOP_PUBLISH_DEADLINE_MS", deadline_ms)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !stderr.contains(PASSWORD),
            "password in the worker log: {stderr}"
        );
        (out.status.code(), stderr)
    };

    let (code, stderr) = run("20000");
    assert_eq!(code, Some(0), "{stderr}");
    let auth = openwop_nats::NatsAuth::from_dir(&creds).unwrap();
    let events = read_raw_with(&nats.url(), &f.subject(), &auth);
    assert_eq!(
        types(&events).last().map(String::as_str),
        Some("run.completed")
    );
    assert_gap_free(&events);

    // Wrong password: nothing is durable, the worker gives up at its deadline and says why.
    std::fs::write(creds.join("password"), "wrong-password").unwrap();
    let (code, stderr) = run("1500");
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("authorization violation"),
        "{stderr}"
    );

    // Half-configured: refused before connecting, exit 2 (bad input), the file named.
    std::fs::remove_file(creds.join("password")).unwrap();
    let (code, stderr) = run("1500");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("has `username` but no `password`"),
        "{stderr}"
    );
}
