//! Worker kill-point fault bench (`make bench`; ignored in `cargo test`): a multi-node run
//! with truncations, a schema violation, transient 429/503 answers and a clarification
//! interrupt, SIGKILLed at every event boundary of its log (the worker pauses just before
//! publishing event N, `OPENWOP_FAULT_PAUSE_AT_SEQUENCE`, and is killed there). Each point
//! is one run: killed once, restarted until it ends, answered like the reference run. The
//! fake OpenAI-compatible provider counts requests and deliveries itself.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};

use common::*;
use openwop_providers::testing::{ScriptedLlm, Step};
use serde_json::{Value, json};

const RUN_ID: &str = "fb00c0de-fault-bench";

fn workflow() -> Value {
    let prompt = |id: &str, model: &str, extra: Value| {
        let mut config = json!({"provider": "openai-compatible", "model": model,
            "prompt": format!("do {id}"), "maxTokens": 64, "schemaRounds": 4});
        config
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"id": id, "typeId": "core.ai.callPrompt", "config": config})
    };
    json!({"id": "fault-bench", "nodes": [
        {"id": "a", "typeId": "core.identity"},
        prompt("p", "m-p", json!({"outputSchema": {"type": "object", "required": ["text"],
            "properties": {"text": {"type": "string"}}}})),
        prompt("q", "m-q", json!({"envelopeType": "vendor.acme.plan"})),
        prompt("r", "m-r", json!({"envelopeType": "vendor.acme.note"})),
        {"id": "z", "typeId": "core.flow.noop"}],
     "edges": [
        {"id": "e1", "sourceNodeId": "a", "targetNodeId": "p"},
        {"id": "e2", "sourceNodeId": "p", "targetNodeId": "q"},
        {"id": "e3", "sourceNodeId": "q", "targetNodeId": "r"},
        {"id": "e4", "sourceNodeId": "r", "targetNodeId": "z"}]})
}

/// p: truncated (after a 429), schema violation (after a 503), valid; q: a clarification,
/// then (after the answer, and a 429) its plan; r: truncated, then valid after a 429.
fn script() -> BTreeMap<String, Vec<Step>> {
    BTreeMap::from([
        (
            "m-p".to_string(),
            vec![
                Step::ok("length", r#"{"text": "cut sho"#).after(&[429]),
                Step::ok("stop", r#"{"text": 42}"#).after(&[503]),
                Step::ok("stop", r#"{"text": "short"}"#),
            ],
        ),
        (
            "m-q".to_string(),
            vec![
                Step::ok(
                    "stop",
                    json!({"type": "clarification.request", "payload": {"questions": [{"id": "region", "question": "Which region?"}]}}),
                ),
                Step::ok(
                    "stop",
                    json!({"type": "vendor.acme.plan", "payload": {"region": "eu"}}),
                )
                .after(&[429]),
            ],
        ),
        (
            "m-r".to_string(),
            vec![
                Step::ok("length", r#"{"type": "vendor.acme.note", "payload": {"te"#),
                Step::ok(
                    "stop",
                    json!({"type": "vendor.acme.note", "payload": {"text": "done"}}),
                )
                .after(&[429]),
            ],
        ),
    ])
}

fn files(name: &str) -> RunFiles {
    let f = RunFiles::new(name, RUN_ID, workflow(), json!({"doc": "hello"}), json!({}));
    f.set_snapshot_field(
        "providers",
        json!([{"provider": "openai-compatible", "mountAs": "env", "envName": "OPENWOP_TEST_NO_KEY"}]),
    );
    f
}

fn base(llm: &ScriptedLlm) -> impl FnOnce(&mut std::process::Command) + '_ {
    |c| {
        c.env("OPENWOP_PROVIDER_OPENAI_COMPATIBLE_BASE_URL", &llm.base);
    }
}

/// Answers the pending interrupts named in the termination summary (once per interrupt).
fn answer(files: &RunFiles, answers: &mut Vec<Value>) {
    let t = files.termination();
    let pending = t["pendingInterrupts"]
        .as_array()
        .unwrap_or_else(|| panic!("suspended without pending interrupts: {t}"));
    for pi in pending {
        let id = pi["interruptId"].as_str().unwrap();
        if !answers.iter().any(|a| a["interruptId"] == id) {
            answers.push(json!({"interruptId": id, "value": {"region": "eu"}}));
        }
    }
    files.set_answers(json!(answers));
}

/// Runs the worker until the run ends, answering interrupts.
fn finish(files: &RunFiles, url: &str, llm: &ScriptedLlm, answers: &mut Vec<Value>) {
    for _ in 0..10 {
        let (code, stderr) = files.run_with(url, base(llm));
        match code {
            0 => return,
            3 => answer(files, answers),
            other => panic!("worker exited with {other}: {stderr}"),
        }
    }
    panic!("the run did not end after 10 workers");
}

/// Records with content per node in `events`.
fn recorded_per_model(events: &[Value]) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for e in events {
        if let Some(r) = e["payload"]["fields"].get("providerResponse")
            && !r["response"].is_null()
        {
            let model = format!("m-{}", e["nodeId"].as_str().unwrap());
            *n.entry(model).or_default() += 1;
        }
    }
    n
}

#[test]
#[ignore = "fault bench: run by `make bench`"]
fn worker_kill_points_repeat_no_recorded_provider_call() {
    let nats = NatsServer::start();
    let url = nats.url();
    // The uninterrupted reference (its provider calls are the baseline).
    let ref_llm = ScriptedLlm::start(script());
    let ref_files = files("ref");
    let mut answers = vec![];
    finish(&ref_files, &url, &ref_llm, &mut answers);
    let reference: Vec<Value> = read_raw(&url, &ref_files.subject())
        .iter()
        .map(essence)
        .collect();
    assert_eq!(reference.last().unwrap()["type"], "run.completed");
    let baseline_requests = ref_llm.requests();
    let baseline_calls = ref_llm.deliveries().len();
    let started = std::time::Instant::now();

    let (mut kills, mut completed, mut gaps, mut duplicates) = (0, 0, 0, 0);
    let (mut repeated, mut in_flight, mut requests, mut mismatched) = (0, 0, 0, 0);
    let mut between_response_and_record = 0;
    let points: Vec<u64> = (1..reference.len() as u64).collect();
    for &point in &points {
        // Event ids are deterministic per run, and JetStream dedups them stream-wide: each
        // run gets its own nats-server.
        let nats = NatsServer::start();
        let url = nats.url();
        let ns = format!("k{point}");
        let llm = ScriptedLlm::start(script());
        let f = files(&ns);
        let mut answers = vec![];
        // Up to the kill: suspensions are answered and the pause stays armed.
        let mut killed = false;
        for _ in 0..10 {
            match run_until_paused(&f, &url, point, base(&llm)) {
                None => {
                    killed = true;
                    break;
                }
                Some(3) => answer(&f, &mut answers),
                Some(other) => panic!("kill point {point}: worker exited with {other}"),
            }
        }
        assert!(killed, "kill point {point} was never reached");
        kills += 1;
        let at_kill = read_raw(&url, &f.subject());
        if reference[point as usize]["payload"]["fields"]
            .get("providerResponse")
            .is_some()
        {
            between_response_and_record += 1;
        }
        let recorded = recorded_per_model(&at_kill);
        let before = llm.deliveries();
        finish(&f, &url, &llm, &mut answers);
        let after = llm.after_kill(&before, &recorded);
        for (model, ordinal) in &after.repeated {
            eprintln!(
                "kill point {point}: call {} of {model} repeated although recorded",
                ordinal + 1
            );
        }
        repeated += after.repeated.len();
        in_flight += after.in_flight;
        requests += llm.requests();
        let events = read_raw(&url, &f.subject());
        let mut ids = HashSet::new();
        for (i, e) in events.iter().enumerate() {
            if e["sequence"].as_u64() != Some(i as u64) {
                gaps += 1;
            }
            if !ids.insert(e["eventId"].as_str().unwrap().to_owned()) {
                duplicates += 1;
            }
        }
        if events.last().map(|e| e["type"] == "run.completed") == Some(true) {
            completed += 1;
        }
        let essences: Vec<Value> = events.iter().map(essence).collect();
        if essences != reference {
            mismatched += 1;
            let at = essences
                .iter()
                .zip(&reference)
                .position(|(a, b)| a != b)
                .unwrap_or(essences.len().min(reference.len()));
            eprintln!(
                "kill point {point}: the log differs from the uninterrupted one at {at}: {} vs {}",
                essences.get(at).cloned().unwrap_or_default(),
                reference.get(at).cloned().unwrap_or_default()
            );
        }
    }
    let runs = points.len();
    println!(
        "fault bench (worker SIGKILL): {kills} kill points over {runs} runs of {} events ({between_response_and_record} between a provider response and its record); \
runs completed {completed}/{runs} ({:.0}%); logs equal to the uninterrupted run {}/{runs}; sequence gaps {gaps}; duplicate events {duplicates}; \
repeated provider calls (response recorded) {repeated}; calls in flight at the kill and made again {in_flight}; \
HTTP requests {requests} vs {} for {runs} uninterrupted runs ({:.3}x; baseline {baseline_requests} requests, {baseline_calls} calls per run); {:.1} s",
        reference.len(),
        100.0 * completed as f64 / runs as f64,
        runs - mismatched,
        baseline_requests * runs,
        requests as f64 / (baseline_requests * runs) as f64,
        started.elapsed().as_secs_f64(),
    );
    assert!(kills >= 50, "only {kills} kill points");
    assert_eq!(completed, runs, "runs completed");
    assert_eq!(gaps, 0, "sequence gaps");
    assert_eq!(duplicates, 0, "duplicate events");
    assert_eq!(
        repeated, 0,
        "repeated provider calls whose response was recorded"
    );
    assert_eq!(mismatched, 0, "logs that differ from the uninterrupted run");
}
