//! A restarted worker never requests a provider response that is already recorded in the
//! run's log: the fake OpenAI-compatible server counts the requests itself.

mod common;

use std::collections::BTreeMap;

use common::*;
use openwop_providers::testing::{ScriptedLlm, Step};
use serde_json::{Value, json};

const RUN_ID: &str = "7a6b5c4d-replay";
const CUT: &str = r#"{"type": "vendor.acme.note", "payload": {"te"#;
const NOTE: &str = r#"{"type": "vendor.acme.note", "payload": {"text": "noted"}}"#;

fn files(name: &str) -> RunFiles {
    let workflow = json!({"id": "replay", "nodes": [
        {"id": "p", "typeId": "core.ai.callPrompt", "config": {"provider": "openai-compatible",
         "model": "fake-a", "prompt": "note it", "envelopeType": "vendor.acme.note",
         "maxTokens": 64, "schemaRounds": 3}}]});
    let f = RunFiles::new(name, RUN_ID, workflow, json!({"doc": "hello"}), json!({}));
    f.set_snapshot_field(
        "providers",
        json!([{"provider": "openai-compatible", "mountAs": "env", "envName": "OPENWOP_TEST_NO_KEY"}]),
    );
    f
}

fn fake_llm() -> ScriptedLlm {
    ScriptedLlm::start(BTreeMap::from([(
        "fake-a".to_string(),
        vec![Step::ok("length", CUT), Step::ok("stop", NOTE)],
    )]))
}

fn base(llm: &ScriptedLlm) -> impl FnOnce(&mut std::process::Command) + '_ {
    |c| {
        c.env("OPENWOP_PROVIDER_OPENAI_COMPATIBLE_BASE_URL", &llm.base);
    }
}

/// The sequence of the record of call `attempt`'s response in `events`.
fn record_seq(events: &[Value], attempt: u64) -> u64 {
    events
        .iter()
        .find(|e| {
            e["type"] == "log.appended"
                && e["payload"]["fields"]["providerResponse"]["attempt"] == attempt
        })
        .and_then(|e| e["sequence"].as_u64())
        .expect("a provider-response record")
}

fn essences(events: &[Value]) -> Vec<Value> {
    events.iter().map(essence).collect()
}

#[test]
fn a_killed_worker_never_requests_a_recorded_provider_response_again() {
    // The uninterrupted run: max_tokens, then stop.
    let (ref_nats, ref_llm, ref_files) = (NatsServer::start(), fake_llm(), files("ref"));
    let (code, stderr) = ref_files.run_with(&ref_nats.url(), base(&ref_llm));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(ref_llm.requests(), 2);
    let reference = read_raw(&ref_nats.url(), &ref_files.subject());
    let recorded = record_seq(&reference, 1);
    let record = &reference[recorded as usize]["payload"]["fields"]["providerResponse"];
    assert_eq!(record["maxTokens"], 64);
    assert_eq!(record["response"]["text"], CUT);

    // Killed (SIGKILL) right after the first response is recorded, before anything else.
    let (nats, llm, f) = (NatsServer::start(), fake_llm(), files("killed"));
    assert_eq!(
        run_until_paused(&f, &nats.url(), recorded + 1, base(&llm)),
        None
    );
    assert_eq!(llm.requests(), 1);
    let (code, stderr) = f.run_with(&nats.url(), base(&llm));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        llm.requests(),
        2,
        "the recorded response to call 1 was requested again"
    );
    assert!(stderr.contains("provider response restored from the run's log"));
    let events = read_raw(&nats.url(), &f.subject());
    assert_gap_free(&events);
    assert_eq!(essences(&events), essences(&reference));

    // Killed between the response and its record: that call is necessarily made again
    // (nothing of it is durable), and the log still ends as the uninterrupted one.
    let (nats, llm, f) = (NatsServer::start(), fake_llm(), files("in-flight"));
    assert_eq!(
        run_until_paused(&f, &nats.url(), recorded, base(&llm)),
        None
    );
    assert_eq!(llm.deliveries().len(), 1, "the response was delivered");
    let (code, stderr) = f.run_with(&nats.url(), base(&llm));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(llm.requests(), 3, "only the unrecorded call is made again");
    let events = read_raw(&nats.url(), &f.subject());
    assert_eq!(essences(&events), essences(&reference));
}

/// Killed inside the clarification's event batch (after `clarification.requested`, before
/// `interrupt.requested`): the restart re-drives the turn from the journal, with no provider
/// call, and publishes the rest instead of skipping to `node.suspended`.
#[test]
fn a_kill_inside_the_clarification_batch_loses_no_event() {
    let run = |name: &str, pause: Option<u64>| {
        let nats = NatsServer::start();
        let llm = ScriptedLlm::start(BTreeMap::from([(
            "fake-q".to_string(),
            vec![Step::ok(
                "stop",
                json!({"type": "clarification.request", "payload": {"questions": [{"id": "region", "question": "Which region?"}]}}),
            )],
        )]));
        let workflow = json!({"id": "ask", "nodes": [{"id": "q", "typeId": "core.ai.callPrompt",
            "config": {"provider": "openai-compatible", "model": "fake-q", "prompt": "plan",
                       "envelopeType": "vendor.acme.plan"}}]});
        let f = RunFiles::new(name, RUN_ID, workflow, json!({}), json!({}));
        f.set_snapshot_field(
            "providers",
            json!([{"provider": "openai-compatible", "mountAs": "env", "envName": "OPENWOP_TEST_NO_KEY"}]),
        );
        if let Some(p) = pause {
            assert_eq!(run_until_paused(&f, &nats.url(), p, base(&llm)), None);
        }
        let (code, stderr) = f.run_with(&nats.url(), base(&llm));
        assert_eq!(code, 3, "{stderr}");
        (llm.requests(), read_raw(&nats.url(), &f.subject()))
    };
    let (requests, reference) = run("ask-ref", None);
    assert_eq!(requests, 1);
    let at = reference
        .iter()
        .position(|e| e["type"] == "interrupt.requested")
        .unwrap();
    assert_eq!(reference[at - 1]["type"], "clarification.requested");
    let (requests, events) = run("ask-killed", Some(at as u64));
    assert_eq!(
        requests, 1,
        "the recorded clarification was requested again"
    );
    assert_eq!(essences(&events), essences(&reference));
}

/// A mocked node whose first call times out (node `settings.timeout`) and whose node-level
/// retry then succeeds, killed before each event of its log: the restarted worker's mock
/// plays on after the timed-out call, as the uninterrupted run did (it used to replay the
/// timed-out step, time out again and fail the run).
#[test]
fn a_node_retry_after_a_timeout_plays_on_after_a_kill() {
    let workflow = json!({"id": "timeout-retry", "nodes": [
        {"id": "t", "typeId": "core.ai.callPrompt",
         "config": {"provider": "mock", "prompt": "note it", "envelopeType": "vendor.acme.note", "maxTokens": 64},
         "settings": {"timeout": 300, "maxRetries": 1}}]});
    let note = |text: &str, delay: u64| {
        json!({"stopReason": "stop", "delayMs": delay,
               "content": {"type": "vendor.acme.note", "payload": {"text": text}}})
    };
    let programs = json!({"t": {"responses": [note("late", 3_000), note("on time", 50)]}});
    let files = |name: &str| {
        RunFiles::new(
            name,
            "3c2b1a09-timeout-retry",
            workflow.clone(),
            json!({}),
            programs.clone(),
        )
    };
    let drive = |f: &RunFiles, url: &str| {
        for _ in 0..5 {
            match f.run(url).0 {
                0 => return,
                other => assert_eq!(other, 1, "worker exit code"),
            }
        }
        panic!("the run did not end in 5 workers");
    };
    let nats = NatsServer::start();
    let reference = files("ref");
    drive(&reference, &nats.url());
    let want = read_raw(&nats.url(), &reference.subject());
    assert_gap_free(&want);
    let t = types(&want);
    assert_eq!(t.last().map(String::as_str), Some("run.completed"), "{t:?}");
    assert!(
        want.iter()
            .any(|e| e["payload"]["fields"]["providerResponse"]["timedOut"] == true),
        "the timed-out call is recorded: {t:?}"
    );
    // `node.started.attempt` is zero-based (REP `nodeStarted`): the retry is attempt 1.
    let attempts: Vec<&Value> = want
        .iter()
        .filter(|e| e["type"] == "node.started")
        .map(|e| &e["payload"]["attempt"])
        .collect();
    assert_eq!(attempts, [&json!(0), &json!(1)]);
    let want = essences(&want);
    let mut kills = 0;
    for pause in 1..want.len() as u64 {
        let nats = NatsServer::start();
        let f = files(&format!("killed-{pause}"));
        if run_until_paused(&f, &nats.url(), pause, |_| {}).is_none() {
            kills += 1;
            drive(&f, &nats.url());
        }
        let got = read_raw(&nats.url(), &f.subject());
        assert_gap_free(&got);
        assert_eq!(essences(&got), want, "killed before event {pause}");
        // At most the call in flight at the kill is made again.
        assert!(
            f.calls().len() <= reference.calls().len() + 1,
            "killed before event {pause}: {:?}",
            f.calls()
        );
    }
    assert!(kills >= 8, "only {kills} kills");
}
