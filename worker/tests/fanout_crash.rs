//! Issue 17, replay under concurrency: a fan-out/fan-in run with an envelope retry and a
//! clarification interrupt, its worker SIGKILLed at many points (an
//! exact event sequence each, through the fault seam) and restarted until the run ends. The
//! final log, compared per node with an uninterrupted run: the same events per node in the
//! same order within each node, no gaps, no duplicates; and no finished emission's provider
//! call is made again.

mod common;

use std::collections::{BTreeMap, HashSet};

use common::*;
use serde_json::{Value, json};

const RUN_ID: &str = "5e1f0a2b-fanout-crash";

/// `a` fans out to `trunc` (truncated, then retried with twice the budget), `slow` and `ask`
/// (a clarification question), all held in flight a little; `join` fans them in.
///
/// A node-level retry after a provider timeout is covered by `provider_replay.rs`.
fn workflow() -> Value {
    let llm = |id: &str, extra: Value| {
        let mut config = json!({"provider": "mock", "prompt": format!("node {id}"), "envelopeType": "vendor.acme.note", "maxTokens": 64});
        config
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"id": id, "typeId": "core.ai.callPrompt", "config": config})
    };
    let slow = llm("slow", json!({}));
    json!({"id": "fanout-crash", "nodes": [
        {"id": "a", "typeId": "core.identity"},
        llm("trunc", json!({"schemaRounds": 3})), slow, llm("ask", json!({})),
        {"id": "join", "typeId": "core.flow.noop"}],
     "edges": [
        {"id": "at", "sourceNodeId": "a", "targetNodeId": "trunc"},
        {"id": "af", "sourceNodeId": "a", "targetNodeId": "slow"},
        {"id": "aa", "sourceNodeId": "a", "targetNodeId": "ask"},
        {"id": "tj", "sourceNodeId": "trunc", "targetNodeId": "join", "targetInput": "trunc"},
        {"id": "sj", "sourceNodeId": "slow", "targetNodeId": "join", "targetInput": "slow"},
        {"id": "aj", "sourceNodeId": "ask", "targetNodeId": "join", "targetInput": "ask"}]})
}

fn note(text: &str, delay_ms: u64) -> Value {
    json!({"stopReason": "stop", "delayMs": delay_ms,
           "content": {"type": "vendor.acme.note", "payload": {"text": text}}})
}

fn programs() -> Value {
    json!({
        "trunc": {"responses": [
            {"stopReason": "max_tokens", "content": "{\"type\": \"vendor.acme.no", "outputTokens": 64, "delayMs": 40},
            note("trunc", 40)]},
        "slow": {"responses": [note("slow", 60)]},
        "ask": [
            {"responses": [{"stopReason": "stop", "delayMs": 30, "content": {"type": "clarification.request",
                "payload": {"questions": [{"id": "region", "question": "Which region?"}]}}}]},
            {"responses": [note("ask", 30)]}]
    })
}

fn files(name: &str) -> RunFiles {
    RunFiles::new(
        name,
        RUN_ID,
        workflow(),
        json!({"doc": "hello"}),
        programs(),
    )
}

/// Runs workers until the run ends, answering every pending interrupt; the first worker
/// start(s) pause at `pause` and are SIGKILLed there. Returns whether a kill happened.
fn drive(f: &RunFiles, url: &str, pause: Option<u64>) -> bool {
    let mut killed = false;
    let mut answers: Vec<Value> = vec![];
    for _ in 0..20 {
        // Emissions finished before this start must not call the provider again.
        let finished: HashSet<String> = read_raw(url, &f.subject())
            .iter()
            .filter(|e| e["type"] == "node.completed")
            .flat_map(|e| {
                let n = e["nodeId"].as_str().unwrap().to_owned();
                [format!("{n}#0"), format!("{n}#1")]
            })
            .collect();
        let before = f.calls().len();
        let code = match pause.filter(|_| !killed) {
            Some(p) => run_until_paused(f, url, p, |_| {}),
            None => Some(f.run(url).0),
        };
        for c in &f.calls()[before..] {
            let key = c["key"].as_str().unwrap();
            assert!(
                !finished.contains(key),
                "provider call of finished emission {key} repeated"
            );
        }
        match code {
            None => killed = true,
            Some(0) => return killed,
            Some(3) => {
                let t = f.termination();
                let pending = t["pendingInterrupts"].as_array();
                for pi in
                    pending.unwrap_or_else(|| panic!("suspended without pending interrupts: {t}"))
                {
                    let id = pi["interruptId"].as_str().unwrap();
                    if !answers.iter().any(|a| a["interruptId"] == id) {
                        answers.push(json!({"interruptId": id, "value": {"region": "eu"}}));
                    }
                }
                f.set_answers(json!(answers));
            }
            Some(other) => panic!("worker exited with {other}"),
        }
    }
    panic!("the run did not end in 20 worker starts")
}

/// Each node's events (run-level ones under `(run)`), in log order, without what depends on
/// the interleaving (sequence, timestamp).
fn per_node(events: &[Value]) -> BTreeMap<String, Vec<Value>> {
    let mut m: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for e in events {
        let mut e = essence(e);
        e.as_object_mut().unwrap().remove("sequence");
        let node = e["nodeId"].as_str().unwrap_or("(run)").to_owned();
        m.entry(node).or_default().push(e);
    }
    m
}

#[test]
fn killed_at_many_points_of_a_fan_out_the_log_per_node_is_the_uninterrupted_one() {
    let nats = NatsServer::start();
    let reference = files("reference");
    assert!(!drive(&reference, &nats.url(), None));
    let want = read_raw(&nats.url(), &reference.subject());
    assert_gap_free(&want);
    let t = types(&want);
    assert_eq!(t.last().map(String::as_str), Some("run.completed"), "{t:?}");
    for expected in ["envelope.truncated", "clarification.resolved"] {
        assert!(t.iter().any(|x| x == expected), "no {expected} in {t:?}");
    }
    // The branches overlapped: all three started before any of them completed.
    let first = |ty: &str, n: &str| {
        want.iter()
            .position(|e| e["type"] == ty && e["nodeId"] == n)
            .unwrap()
    };
    let branches = ["trunc", "slow", "ask"];
    let last_start = branches.iter().map(|n| first("node.started", n)).max();
    let first_done = ["trunc", "slow"]
        .iter()
        .map(|n| first("node.completed", n))
        .min();
    assert!(last_start < first_done, "{t:?}");
    let want = per_node(&want);

    // A kill point every few events across the whole log (both worker phases).
    let n = want.values().map(Vec::len).sum::<usize>() as u64;
    let step = (n / 14).max(1);
    let mut kills = 0;
    for pause in (1..n).step_by(step as usize) {
        // The same run id means the same event ids: each kill point gets its own server,
        // since JetStream's dedup window is per stream.
        let nats = NatsServer::start();
        let f = files(&format!("killed-{pause}"));
        kills += usize::from(drive(&f, &nats.url(), Some(pause)));
        let got = read_raw(&nats.url(), &f.subject());
        assert_gap_free(&got);
        let got = per_node(&got);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "killed at sequence {pause}"
        );
        for (node, evs) in &want {
            assert_eq!(&got[node], evs, "node {node}, killed at sequence {pause}");
        }
    }
    assert!(kills >= 10, "only {kills} kills");
}
