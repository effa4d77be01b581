//! Issue 17 figures: a fan-out of 10 mocked LLM nodes, each holding its provider call 500 ms,
//! then a fan-in, run by the worker binary against a nats-server started here (JetStream acks
//! included). Printed beside, measured in the same session with the same worker:
//! * the sequential bound: the same workflow with `settings.maxConcurrency: 1` (10 × 500 ms
//!   plus overhead);
//! * the parallel bound: one such node and the fan-in (500 ms plus the same overhead).
//!
//! And the worker's peak RSS (VmHWM) for the fan-out beside the one-node run. Goal: the
//! fan-out within 1.3 × the parallel bound.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;

const HOLD_MS: u64 = 500;

/// `branches` mocked LLM nodes from `start`, joined by `join`, at most `limit` at once.
fn snapshot(name: &str, branches: usize, limit: usize) -> Value {
    let mut nodes = vec![json!({"id": "start", "typeId": "core.identity"})];
    let mut edges = vec![];
    let mut mocks = serde_json::Map::new();
    for i in 0..branches {
        let id = format!("llm{i}");
        nodes.push(json!({"id": id, "typeId": "core.ai.callPrompt",
            "config": {"provider": "mock", "prompt": "review", "envelopeType": "vendor.acme.note"}}));
        edges.push(json!({"id": format!("s{i}"), "sourceNodeId": "start", "targetNodeId": id}));
        edges.push(json!({"id": format!("j{i}"), "sourceNodeId": id, "targetNodeId": "join", "targetInput": id}));
        mocks.insert(
            id,
            json!({"responses": [{"stopReason": "stop", "delayMs": HOLD_MS,
            "content": {"type": "vendor.acme.note", "payload": {"text": "ok"}}}]}),
        );
    }
    nodes.push(json!({"id": "join", "typeId": "core.flow.noop"}));
    json!({"run": {"namespace": "bench", "name": name, "runId": format!("{name}-run")},
        "workflow": {"id": "fanout", "nodes": nodes, "edges": edges, "settings": {"maxConcurrency": limit}},
        "inputs": {"doc": "x"}, "providerMocks": mocks})
}

/// (wall time, VmHWM KiB) of one worker run to completion.
fn run(url: &str, snap: &Value) -> (Duration, u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshot.json");
    std::fs::write(&path, snap.to_string()).unwrap();
    let started = Instant::now();
    // Reaped by `wait_sampling_rss` (polled, so VmHWM can be sampled while it runs).
    #[allow(clippy::zombie_processes)]
    let child = Command::new(env!("CARGO_BIN_EXE_openwop-worker"))
        .env("OPENWOP_SNAPSHOT", &path)
        .env("OPENWOP_NATS_URL", url)
        .env("OPENWOP_EVENTS_STREAM", "BENCH_FANOUT")
        .env("OPENWOP_TERMINATION_LOG", dir.path().join("t.json"))
        .env_remove("OPENWOP_RUN_NAMESPACE")
        .env_remove("OPENWOP_RUN_NAME")
        .env_remove("OPENWOP_RUN_ID")
        .env_remove("OPENWOP_EVENTS_SUBJECT")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let hwm = common::wait_sampling_rss(&child, "worker");
    let wall = started.elapsed();
    let t: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("t.json")).unwrap()).unwrap();
    assert_eq!(t["phase"], "completed", "{t}");
    (wall, hwm)
}

/// The median wall time (and the largest VmHWM) of `n` runs.
fn measure(url: &str, name: &str, branches: usize, limit: usize, n: usize) -> (Duration, u64) {
    let mut walls = vec![];
    let mut hwm = 0;
    for i in 0..n {
        let (w, h) = run(url, &snapshot(&format!("{name}-{i}"), branches, limit));
        walls.push(w);
        hwm = hwm.max(h);
    }
    walls.sort();
    (walls[n / 2], hwm)
}

fn main() {
    if common::filtered_out("fanout") {
        return;
    }
    let srv = common::nats_with_stream("BENCH_FANOUT");
    let url = srv.url();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    // A warm-up run (page cache, nats-server JIT of the stream).
    run(&url, &snapshot("warmup", 1, 1));
    let (fan, fan_rss) = measure(&url, "fan", 10, 10, 5);
    let (par, one_rss) = measure(&url, "one", 1, 10, 5);
    let (seq, _) = measure(&url, "seq", 10, 1, 3);
    println!(
        "fan-out of 10 mocked LLM nodes x {HOLD_MS} ms, then a fan-in (worker binary, real JetStream; median wall time):"
    );
    println!("  concurrent (maxConcurrency 10): {:>7.0} ms", ms(fan));
    println!(
        "  parallel bound, 1 node:         {:>7.0} ms   (ideal {HOLD_MS} ms)  -> fan-out / parallel bound = {:.2} (goal <= 1.30)",
        ms(par),
        ms(fan) / ms(par)
    );
    println!(
        "  sequential (maxConcurrency 1):  {:>7.0} ms   (ideal {} ms)  -> sequential / fan-out = {:.1}x",
        ms(seq),
        10 * HOLD_MS,
        ms(seq) / ms(fan)
    );
    println!(
        "  worker peak RSS (VmHWM): fan-out {fan_rss} KiB; 1-node run {one_rss} KiB; +{} KiB for 9 more concurrent branches",
        fan_rss.saturating_sub(one_rss)
    );
}
