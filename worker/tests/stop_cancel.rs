//! SIGTERM and cancel against a real nats-server: a stop mid provider call publishes nothing
//! partial and a later worker replays to the same log; `cancel: true` (at start, or in the
//! refreshed snapshot when SIGTERM arrives) records `run.cancelled` and nothing else.

mod common;

use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const RUN_ID: &str = "5a6b7c-stop";

/// a (identity) → p (callPrompt on an openai-compatible server) → z (noop).
fn workflow() -> Value {
    json!({"id": "stop-test", "nodes": [
        {"id": "a", "typeId": "core.identity"},
        {"id": "p", "typeId": "core.ai.callPrompt", "config": {"provider": "openai-compatible", "model": "fake-1", "prompt": "note it", "envelopeType": "vendor.acme.note"}},
        {"id": "z", "typeId": "core.flow.noop"}],
     "edges": [
        {"id": "e1", "sourceNodeId": "a", "targetNodeId": "p"},
        {"id": "e2", "sourceNodeId": "p", "targetNodeId": "z"}]})
}

// Each run has its own id: event ids derive from it and JetStream dedups by id stream-wide.
fn setup(name: &str) -> (RunFiles, FakeLlm) {
    let llm = FakeLlm::start(json!({"type": "vendor.acme.note", "payload": {"text": "noted"}}));
    let files = RunFiles::new(
        name,
        &format!("{RUN_ID}-{name}"),
        workflow(),
        json!({"doc": "d"}),
        json!({}),
    );
    files.set_snapshot_field(
        "providers",
        json!([{"provider": "openai-compatible", "mountAs": "env", "envName": "OPENWOP_TEST_NO_KEY"}]),
    );
    (files, llm)
}

/// Starts a worker whose provider call hangs, waits until the call is in flight, then
/// sends SIGTERM; returns (exit code, seconds from SIGTERM to exit, events before SIGTERM).
fn sigterm_mid_call(
    files: &RunFiles,
    llm: &FakeLlm,
    url: &str,
    before: impl FnOnce(),
) -> (i32, f64, Vec<Value>) {
    llm.slow.store(true, Ordering::SeqCst);
    let calls = llm.request_count();
    let mut child = files
        .command(url)
        .env("OPENWOP_PROVIDER_OPENAI_COMPATIBLE_BASE_URL", &llm.base)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_for(|| llm.request_count() > calls, Duration::from_secs(20)),
        "the provider call never started"
    );
    let events = read_raw(url, &files.subject());
    before();
    let t = Instant::now();
    // SAFETY: signalling our own child process by its pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    (
        status.code().unwrap_or(-1),
        t.elapsed().as_secs_f64(),
        events,
    )
}

#[test]
fn sigterm_mid_provider_call_stops_cleanly_and_a_later_worker_replays() {
    let nats = NatsServer::start();
    let (files, llm) = setup("stop");
    let (code, secs, before) = sigterm_mid_call(&files, &llm, &nats.url(), || {});
    assert_eq!(code, openwop_worker::exit::STOPPED);
    assert!(secs < 3.0, "took {secs}s to stop");
    // Nothing was published after the signal, and p never completed.
    let after = read_raw(&nats.url(), &files.subject());
    assert_eq!(after, before);
    assert_gap_free(&after);
    let tys = types(&after);
    assert!(tys.contains(&"node.started".to_string()));
    assert!(
        !after
            .iter()
            .any(|e| e["type"] == "node.completed" && e["nodeId"] == "p")
    );
    // A later worker replays and finishes; the stopped prefix is kept as it was.
    llm.slow.store(false, Ordering::SeqCst);
    let out = files
        .command(&nats.url())
        .env("OPENWOP_PROVIDER_OPENAI_COMPATIBLE_BASE_URL", &llm.base)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = read_raw(&nats.url(), &files.subject());
    assert_gap_free(&all);
    assert_eq!(&all[..after.len()], &after[..]);
    assert_eq!(types(&all).last().unwrap(), "run.completed");
    assert_eq!(
        all.last().unwrap()["payload"]["outputs"]["z"]["output"]["text"],
        "noted"
    );
    assert_eq!(llm.request_count(), 2);
}

#[test]
fn cancel_while_running_and_at_start_records_run_cancelled_only() {
    let nats = NatsServer::start();
    // While running: the refreshed snapshot says cancel when SIGTERM arrives.
    let (files, llm) = setup("cancel-live");
    let (code, secs, before) = sigterm_mid_call(&files, &llm, &nats.url(), || {
        files.set_snapshot_field("cancel", json!(true))
    });
    assert_eq!(code, 0);
    assert!(secs < 3.0, "took {secs}s to cancel");
    let after = read_raw(&nats.url(), &files.subject());
    assert_gap_free(&after);
    assert_eq!(after.len(), before.len() + 1);
    assert_eq!(after[..before.len()], before[..]);
    let last = after.last().unwrap();
    assert_eq!(last["type"], "run.cancelled");
    assert_eq!(last["payload"]["reason"], "cancelled by spec.cancel");
    assert_eq!(files.termination()["phase"], "cancelled");
    // Another worker with cancel set publishes nothing new and calls no provider.
    let calls = llm.request_count();
    assert_eq!(files.run(&nats.url()).0, 0);
    assert_eq!(read_raw(&nats.url(), &files.subject()).len(), after.len());
    assert_eq!(llm.request_count(), calls);

    // At start: a suspended run with a partial log, then cancel: one new event, exit 0.
    let wf = json!({"id": "conformance-cancel", "nodes": [
        {"id": "m", "typeId": "core.conformance.mock-agent", "config": {"mockDecision": {"decision": "x", "confidence": 0.1}}},
        {"id": "z", "typeId": "core.flow.noop"}],
     "edges": [{"id": "e", "sourceNodeId": "m", "targetNodeId": "z"}]});
    let files = RunFiles::new("cancel-start", "5a6b7c-start", wf, json!({}), json!({}));
    assert_eq!(files.run(&nats.url()).0, 3);
    let suspended = read_raw(&nats.url(), &files.subject());
    files.set_snapshot_field("cancel", json!(true));
    let (code, stderr) = files.run(&nats.url());
    assert_eq!(code, 0, "{stderr}");
    let all = read_raw(&nats.url(), &files.subject());
    assert_gap_free(&all);
    assert_eq!(types(&all[suspended.len()..]), ["run.cancelled"]);
    assert_eq!(files.termination()["phase"], "cancelled");
    // A run cancelled before it ever started has exactly one event.
    let files = RunFiles::new(
        "cancel-fresh",
        "5a6b7c-fresh",
        workflow(),
        json!({}),
        json!({}),
    );
    files.set_snapshot_field("cancel", json!(true));
    assert_eq!(files.run(&nats.url()).0, 0);
    let only = read_raw(&nats.url(), &files.subject());
    assert_eq!(types(&only), ["run.cancelled"]);
    assert_eq!(only[0]["sequence"], 0);
}

#[test]
fn provider_mocks_replace_the_configured_provider_and_delay_holds_the_call() {
    let nats = NatsServer::start();
    let (files, llm) = setup("mocked");
    files.set_snapshot_field(
        "providerMocks",
        json!({"p": {"responses": [{"stopReason": "stop", "delayMs": 60000,
            "content": {"type": "vendor.acme.note", "payload": {"text": "mocked"}}}]}}),
    );
    // The delayed step holds the call in flight: SIGTERM stops it there (exit 143).
    let mut child = files
        .command(&nats.url())
        .env("OPENWOP_PROVIDER_OPENAI_COMPATIBLE_BASE_URL", &llm.base)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_for(
            || read_raw(&nats.url(), &files.subject())
                .iter()
                .any(|e| e["type"] == "log.appended" && e["payload"]["fields"]["attempt"] == 1),
            Duration::from_secs(20)
        ),
        "the mocked call never started"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the delay holds the call"
    );
    // SAFETY: signalling our own child process by its pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    assert_eq!(
        child.wait().unwrap().code(),
        Some(openwop_worker::exit::STOPPED)
    );
    // Without the delay the run completes from the mock; the real endpoint is never called.
    files.set_snapshot_field(
        "providerMocks",
        json!({"p": {"responses": [{"stopReason": "stop",
            "content": {"type": "vendor.acme.note", "payload": {"text": "mocked"}}}]}}),
    );
    let out = files
        .command(&nats.url())
        .env("OPENWOP_PROVIDER_OPENAI_COMPATIBLE_BASE_URL", &llm.base)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = read_raw(&nats.url(), &files.subject());
    assert_eq!(
        all.last().unwrap()["payload"]["outputs"]["z"]["output"]["text"],
        "mocked"
    );
    assert_eq!(llm.request_count(), 0, "the configured provider was called");
    let calls = files.record_calls(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        calls,
        [json!({"key": "p#0", "attempt": 1, "maxTokens": 1024})]
    );

    // Unusable mocks: refused before anything is published, with the JSON Pointer.
    let (bad, _llm) = setup("bad-mocks");
    bad.set_snapshot_field(
        "providerMocks",
        json!({"p": {"responses": [{"stopReason": "stop", "delayMs": "soon"}]}}),
    );
    let (code, stderr) = bad.run(&nats.url());
    assert_eq!(code, openwop_worker::exit::BAD_INPUT);
    assert!(
        stderr.contains("/providerMocks/p") && stderr.contains("expected u64"),
        "{stderr}"
    );
}

/// A pod that mounted a deleted Run's snapshot of the same name (the operator creates a
/// run's first snapshot and pod at the same time): the worker refuses it before it publishes
/// anything or calls a provider, on its own run's subject or the other's.
#[test]
fn a_snapshot_of_another_run_is_refused_before_anything_is_published() {
    let nats = NatsServer::start();
    let (files, llm) = setup("other-run");
    let own = format!("{RUN_ID}-re-created");
    let (code, stderr) = files.run_with(&nats.url(), |c| {
        c.env(openwop_protocol::run::env::RUN_ID, &own);
    });
    assert_eq!(code, openwop_worker::exit::BAD_INPUT, "{stderr}");
    assert!(stderr.contains("another run's"), "{stderr}");
    let own_subject = openwop_protocol::run::subjects::events_subject(&files.namespace, &own);
    assert!(read_raw(&nats.url(), &own_subject).is_empty());
    assert!(read_raw(&nats.url(), &files.subject()).is_empty());
    assert_eq!(llm.request_count(), 0);
}
