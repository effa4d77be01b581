//! A restarted worker never requests a provider response that is already recorded in the
//! run's log: the fake OpenAI-compatible server counts the requests itself.

mod common;

use std::collections::BTreeMap;

use common::*;
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
