//! The terminal event the operator appends when it ends a run itself: a mocked API server
//! (tower-test) and a real nats-server.

mod common;

use std::sync::Arc;

use async_nats::jetstream;
use common::fixtures::get_pod;
use common::{ApiServerVerifier, Scenario, TestContext};
use openwop_crds::Run;
use openwop_nats::testing::NatsServer;
use openwop_operator::config::OperatorConfig;
use openwop_operator::controller::{Context, reconcile_run};
use openwop_operator::events::fold;
use openwop_operator::jetstream::JetStreamSlot;
use openwop_protocol::events::event_id_for;
use openwop_protocol::run::ending::RUN_FAILED_STEP;
use openwop_protocol::run::subjects::events_subject;
use serde_json::{Value, json};

async fn nats_context() -> (
    Arc<Context>,
    ApiServerVerifier,
    jetstream::Context,
    NatsServer,
) {
    let nats = NatsServer::start();
    let js = jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let cfg = OperatorConfig::default();
    openwop_nats::stream::ensure_stream(&js, &cfg.stream_spec())
        .await
        .unwrap();
    let slot = JetStreamSlot::default();
    slot.set(js.clone());
    let (ctx, api) = Context::test_with(cfg, |c| c.jetstream = Some(slot));
    (ctx, api, js, nats)
}

fn owned_pod(phase: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "r1-w4", "ownerReferences": [{"apiVersion": "openwop.dev/v1alpha1",
               "kind": "Run", "name": "r1", "uid": "ruid", "controller": true}]},
           "status": {"phase": phase}})
}

/// A Run the operator failed at the crash limit (its status written, no terminal event yet).
fn failed_by_the_operator() -> Run {
    serde_json::from_value(json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "r1", "namespace": "team-a", "uid": "ruid", "generation": 1,
                     "resourceVersion": "41", "finalizers": ["openwop.dev/cleanup"]},
        "spec": {"workflowRef": {"name": "triage"}},
        "status": {"phase": "failed", "attempts": 4, "failedAttempts": 4, "runId": "ruid",
                   "workflow": "triage", "observedGeneration": 1, "events": 3, "lastSequence": 2,
                   "completionTime": "2025-06-15T15:00:00Z",
                   "error": {"code": "worker_crashed", "message": "worker pod disappeared; 4 consecutive worker failures without progress (limit 3)"}}
    }))
    .unwrap()
}

async fn worker_event(js: &jetstream::Context, seq: u64, ty: &str) {
    let body = json!({"eventId": format!("w{seq}"), "runId": "ruid", "type": ty, "sequence": seq,
                      "timestamp": "2025-06-15T14:00:00Z", "payload": {}});
    js.publish(events_subject("team-a", "ruid"), body.to_string().into())
        .await
        .unwrap()
        .await
        .unwrap();
}

async fn log(js: &jetstream::Context) -> Vec<Value> {
    let stream = js.get_stream("OPENWOP_EVENTS").await.unwrap();
    let mut out = vec![];
    let mut seq = 1;
    loop {
        match stream.get_raw_message(seq).await {
            Ok(m) => out.push(serde_json::from_slice(&m.payload).unwrap()),
            Err(_) => break,
        }
        seq += 1;
    }
    out
}

/// The status write recording the log's terminal event `event_id`.
fn records_terminal_event(event_id: String) -> common::Expect {
    common::fixtures::run_status(move |st| assert_eq!(st["terminalEvent"], event_id))
}

/// After the crash limit the operator appends `run.failed` once, after the worker's last
/// event and only when no worker can append any more; the projection accepts it; a second
/// reconcile (its status write lost) records the ending without appending again.
#[tokio::test]
async fn the_operator_ends_a_run_it_failed_with_run_failed_exactly_once() {
    let (ctx, mut api, js, _nats) = nats_context().await;
    for (i, t) in ["run.started", "node.started", "log.appended"]
        .iter()
        .enumerate()
    {
        worker_event(&js, i as u64, t).await;
    }

    // The last worker pod is still running (e.g. terminating): nothing is appended yet.
    let still_running = Scenario::new().then(get_pod("r1-w4").reply(200, owned_pod("Running")));
    api.play(
        still_running,
        reconcile_run(Arc::new(failed_by_the_operator()), ctx.clone()),
    )
    .await
    .unwrap();
    assert_eq!(
        log(&js).await.len(),
        3,
        "no event while a worker may still append"
    );

    // The pod is gone: run.failed is appended at sequence 3 and recorded in the status.
    let failed_id = event_id_for("ruid", RUN_FAILED_STEP);
    let gone = Scenario::new()
        .then(get_pod("r1-w4").not_found())
        .then(records_terminal_event(failed_id.clone()));
    api.play(
        gone,
        reconcile_run(Arc::new(failed_by_the_operator()), ctx.clone()),
    )
    .await
    .unwrap();
    let events = log(&js).await;
    assert_eq!(events.len(), 4);
    let end = &events[3];
    assert_eq!(
        (end["type"].as_str(), end["sequence"].as_u64()),
        (Some("run.failed"), Some(3))
    );
    assert_eq!(end["runId"], "ruid");
    assert_eq!(end["payload"]["error"]["code"], "worker_crashed");
    assert_eq!(end["eventId"], failed_id.as_str());

    // The event consumer's projection accepts the operator's own event: counters move, the
    // operator's terminal phase and error stay.
    let st = failed_by_the_operator().status.unwrap();
    let next_st = fold(&st, &events[3..]).expect("the event is applied");
    assert_eq!((next_st.last_sequence, next_st.events), (Some(3), Some(4)));
    assert_eq!(next_st.phase, st.phase);
    assert_eq!(next_st.error, st.error);

    // The status write was lost: the next reconcile (of a newer copy: the copy the lost write
    // was computed from counts as superseded) finds the log ended and only records it.
    let again = Scenario::new()
        .then(get_pod("r1-w4").not_found())
        .then(records_terminal_event(failed_id));
    let mut newer = failed_by_the_operator();
    newer.metadata.resource_version = Some("42".into());
    api.play(again, reconcile_run(Arc::new(newer), ctx))
        .await
        .unwrap();
    assert_eq!(log(&js).await.len(), 4, "appended exactly once");
}

/// A log the worker already ended (here `run.completed` raced the operator's decision) gets
/// no second terminal event.
#[tokio::test]
async fn a_log_the_worker_ended_gets_no_second_terminal_event() {
    let (ctx, mut api, js, _nats) = nats_context().await;
    worker_event(&js, 0, "run.started").await;
    worker_event(&js, 1, "run.failed").await;
    let scenario = Scenario::new()
        .then(get_pod("r1-w4").reply(200, owned_pod("Failed")))
        .then(records_terminal_event("w1".into()));
    api.play(
        scenario,
        reconcile_run(Arc::new(failed_by_the_operator()), ctx),
    )
    .await
    .unwrap();
    assert_eq!(log(&js).await.len(), 2);
}

/// A run that never had a worker (refused snapshot) gets `run.failed` at sequence 0, so its
/// (otherwise empty) log ends too; a run whose log retention already removed gets nothing.
#[tokio::test]
async fn a_run_without_events_gets_run_failed_at_sequence_zero_unless_its_log_expired() {
    let (ctx, mut api, js, _nats) = nats_context().await;
    let mut never_started = failed_by_the_operator();
    {
        let st = never_started.status.as_mut().unwrap();
        st.attempts = None;
        st.events = None;
        st.last_sequence = None;
        st.error = Some(openwop_crds::RunError::new(
            "snapshot_too_large",
            "the run snapshot is 2097152 bytes",
        ));
    }
    // No pod to wait for.
    let scenario = Scenario::new().then(records_terminal_event(event_id_for(
        "ruid",
        RUN_FAILED_STEP,
    )));
    api.play(
        scenario,
        reconcile_run(Arc::new(never_started), ctx.clone()),
    )
    .await
    .unwrap();
    let events = log(&js).await;
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0]["type"].as_str(), events[0]["sequence"].as_u64()),
        (Some("run.failed"), Some(0))
    );
    assert_eq!(events[0]["payload"]["error"]["code"], "snapshot_too_large");

    // Another run whose events expired (status saw sequence 2, the subject is empty).
    let mut expired = failed_by_the_operator();
    expired.metadata.uid = Some("old-uid".into());
    expired.status.as_mut().unwrap().run_id = Some("old-uid".into());
    let scenario = Scenario::new().then(get_pod("r1-w4").not_found());
    api.play(scenario, reconcile_run(Arc::new(expired), ctx))
        .await
        .unwrap();
    assert_eq!(
        log(&js).await.len(),
        1,
        "nothing appended to an expired log"
    );
}

/// `r1`'s worker pod `r1-w1`, still `Running`.
fn owned_running_worker() -> Value {
    let mut p = owned_pod("Running");
    p["metadata"]["name"] = json!("r1-w1");
    p
}

/// The event consumer folded the worker's `run.completed` before its pod exited: the log
/// ends already, so the reconcile records its terminal event now; waiting for the pod's exit
/// cost a second reconcile and status write per run (issue 27).
#[tokio::test]
async fn a_log_the_worker_ended_is_recorded_while_its_pod_still_exits() {
    let (ctx, mut api, js, _nats) = nats_context().await;
    worker_event(&js, 0, "run.started").await;
    worker_event(&js, 1, "run.completed").await;
    let mut completed = common::fixtures::running_run();
    {
        let st = completed.status.as_mut().unwrap();
        st.phase = Some(openwop_crds::RunPhase::Completed);
        st.last_sequence = Some(1);
        st.events = Some(2);
    }
    let scenario = Scenario::new()
        .then(get_pod("r1-w1").reply(200, owned_running_worker()))
        .then(common::fixtures::run_status(|st| {
            assert_eq!(st["terminalEvent"], "w1", "{st:#}");
            assert!(st["completionTime"].is_string(), "{st:#}");
        }))
        .then(common::fixtures::event("Completed"));
    api.play(scenario, reconcile_run(Arc::new(completed), ctx))
        .await
        .unwrap();
    assert_eq!(log(&js).await.len(), 2, "nothing appended");
}

/// A worker that exited 0 after its `run.completed`: the reconcile that sees the exit ends
/// the run and records the log's terminal event in one status write, instead of leaving the
/// ending to a reconcile its own write triggers (issue 27).
#[tokio::test]
async fn a_worker_that_exited_ends_the_run_and_records_its_ending_in_one_reconcile() {
    let (ctx, mut api, js, _nats) = nats_context().await;
    worker_event(&js, 0, "run.started").await;
    worker_event(&js, 1, "run.completed").await;
    let summary = r#"{"phase":"completed","events":2,"lastSequence":1}"#;
    let exited = common::fixtures::ended_pod("r1-w1", "Succeeded", 0, summary);
    let scenario = Scenario::new()
        .then(get_pod("r1-w1").reply(200, exited.clone()))
        .then(get_pod("r1-w1").reply(200, exited))
        .then(common::fixtures::run_status(|st| {
            assert_eq!(st["phase"], "completed", "{st:#}");
            assert_eq!(st["terminalEvent"], "w1", "{st:#}");
        }))
        .then(common::fixtures::event("Completed"));
    api.play(
        scenario,
        reconcile_run(Arc::new(common::fixtures::running_run()), ctx),
    )
    .await
    .unwrap();
    assert_eq!(log(&js).await.len(), 2, "nothing appended");
}

/// A run the operator ends itself (here its worker refused its input): the status that ends
/// it is written first, and the operator's `run.failed` follows in the next reconcile. Appended
/// before the write, the event consumer could fold it into a status without the ending's
/// conditions (and the write would then lose to the consumer's).
#[tokio::test]
async fn the_operators_terminal_event_follows_the_status_write_that_ends_the_run() {
    let (ctx, mut api, js, _nats) = nats_context().await;
    worker_event(&js, 0, "run.started").await;
    let refused = common::fixtures::ended_worker(2, "bad input");
    let scenario = Scenario::new()
        .then(get_pod("r1-w1").reply(200, refused.clone()))
        .then(get_pod("r1-w1").reply(200, refused))
        .then(common::fixtures::run_status(|st| {
            assert_eq!(st["phase"], "failed", "{st:#}");
            assert!(st["conditions"].is_array(), "{st:#}");
            assert!(st.get("terminalEvent").is_none(), "{st:#}");
        }))
        .then(common::fixtures::delete_pod("r1-w1"))
        .then(common::fixtures::event("Failed"));
    api.play(
        scenario,
        reconcile_run(Arc::new(common::fixtures::running_run()), ctx),
    )
    .await
    .unwrap();
    assert_eq!(
        log(&js).await.len(),
        1,
        "run.failed is appended by the next reconcile, after this status write"
    );
}
