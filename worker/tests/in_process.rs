//! The worker's run as a library call ([`openwop_worker::run`]) in the test's own process:
//! everything the binary does besides parsing its environment and installing its handlers.

mod common;

use common::*;
use openwop_protocol::run::env::{self as run_env, WorkerEnv};
use openwop_protocol::run::subjects;
use openwop_worker::exit::{BAD_INPUT, SUSPENDED, TERMINAL};
use openwop_worker::stop::StopSignal;
use openwop_worker::telemetry::Otel;
use serde_json::{Value, json};

/// The environment the operator gives the run's pod, as the binary would parse it.
fn worker_env(files: &RunFiles, url: &str, extra: &[(&str, &str)]) -> WorkerEnv {
    let path = |p: &str| files.path(p).display().to_string();
    let mut vars = vec![
        (run_env::SNAPSHOT.to_owned(), path("snapshot.json")),
        (run_env::NATS_URL.to_owned(), url.to_owned()),
        (
            run_env::EVENTS_STREAM.to_owned(),
            subjects::DEFAULT_STREAM.to_owned(),
        ),
        (
            run_env::TERMINATION_LOG.to_owned(),
            path("termination.json"),
        ),
        (run_env::SECRETS_DIR.to_owned(), path("secrets")),
    ];
    vars.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    WorkerEnv::from_vars(vars).unwrap()
}

/// One worker's run, in this process.
fn run_in_process(wenv: &WorkerEnv) -> i32 {
    rt().block_on(openwop_worker::run(StopSignal::new(), &Otel::off(), wenv))
        .unwrap()
}

/// A prompt node that asks one question, then emits its envelope.
fn clarifying(name: &str) -> RunFiles {
    RunFiles::new(
        name,
        &format!("in-process-{name}"),
        json!({"id": "clarify", "nodes": [{"id": "q", "typeId": "core.ai.callPrompt",
               "config": {"prompt": "plan", "envelopeType": "vendor.acme.plan"}}]}),
        json!({}),
        json!({"q": [
            {"responses": [{"stopReason": "stop", "content": {"type": "clarification.request",
              "payload": {"questions": [{"id": "region", "question": "Which region?"}]}}}]},
            {"responses": [{"stopReason": "stop", "content": {"type": "vendor.acme.plan", "payload": {"ok": true}}}]}]}),
    )
}

/// In process, a run suspends on its question and, answered, completes; the binary then
/// replays that log and publishes nothing more (same event ids from both).
#[test]
fn the_library_run_suspends_resumes_and_leaves_a_log_the_binary_replays() {
    let nats = NatsServer::start();
    let files = clarifying("ask");
    let wenv = worker_env(&files, &nats.url(), &[]);

    assert_eq!(run_in_process(&wenv), SUSPENDED);
    let t = files.termination();
    assert_eq!(t["phase"], "waiting-input", "{t}");
    let pending = t["pendingInterrupts"][0]["interruptId"].clone();
    assert!(pending.is_string(), "{t}");

    files.set_answers(json!([{"interruptId": pending, "value": {"region": "eu"}}]));
    assert_eq!(run_in_process(&wenv), TERMINAL);
    assert_eq!(files.termination()["phase"], "completed");
    let events = read_raw(&nats.url(), &files.subject());
    assert_gap_free(&events);
    let types = types(&events);
    for t in [
        "clarification.requested",
        "node.suspended",
        "clarification.resolved",
        "run.completed",
    ] {
        assert!(types.iter().any(|x| x == t), "{t} missing: {types:?}");
    }

    let (code, stderr) = files.run(&nats.url());
    assert_eq!(code, TERMINAL, "{stderr}");
    let again = read_raw(&nats.url(), &files.subject());
    let ids = |e: &[Value]| -> Vec<Value> { e.iter().map(|e| e["eventId"].clone()).collect() };
    assert_eq!(ids(&again), ids(&events));
}

/// The mounted snapshot is checked before the worker connects: another run's snapshot
/// exits with `BAD_INPUT` even when no NATS is reachable.
#[test]
fn another_runs_snapshot_is_refused_before_the_worker_connects() {
    let files = clarifying("other");
    let wenv = worker_env(
        &files,
        "nats://127.0.0.1:1",
        &[(run_env::RUN_ID, "in-process-other-re-created")],
    );
    assert_eq!(run_in_process(&wenv), BAD_INPUT);
}
