//! `spec.cancel` and the finalizer against a mocked API server: the requests the Run
//! reconciler makes, scenario by scenario (`common`).

mod common;

use std::sync::Arc;

use common::fixtures::{
    apply_snapshot, create_pod, delete_pod, ended_pod, event, event_of, fixed_now_time, get_pod,
    get_snapshot, get_worker_service_account, get_workflow, remove_finalizer, run, run_status,
    snapshot_cm, workflow,
};
use common::{Scenario, TestContext};
use openwop_crds::Run;
use openwop_operator::config::OperatorConfig;
use openwop_operator::controller::RUN_FINALIZER;
use openwop_operator::controller::{Context, reconcile_run};
use openwop_operator::jetstream::JetStreamSlot;
use serde_json::{Value, json};

fn cancelled(status: Value) -> Run {
    let mut r = run(Some(status));
    r.spec.cancel = Some(true);
    r
}

/// The snapshot GET, and the apply that adds `cancel: true` to it (the frozen snapshot kept).
fn mark_snapshot_cancelled() -> Scenario {
    Scenario::new()
        .then(get_snapshot().reply(200, snapshot_cm(false)))
        .then(
            apply_snapshot()
                .body(|body| {
                    let doc: Value =
                        serde_json::from_str(body["data"]["snapshot.json"].as_str().unwrap())
                            .unwrap();
                    assert_eq!(doc["cancel"], true);
                    assert_eq!(
                        doc["workflow"]["id"], "triage",
                        "the frozen snapshot is kept"
                    );
                })
                .reply(200, snapshot_cm(true)),
        )
}

#[tokio::test]
async fn cancel_marks_the_snapshot_and_stops_the_running_worker() {
    let (ctx, mut api) = Context::test();
    let r = cancelled(
        json!({"phase": "running", "workerPod": "r1-w1", "attempts": 1, "runId": "ruid",
               "workflow": "triage", "observedGeneration": 1}),
    );
    let scenario = mark_snapshot_cancelled()
        .then(run_status(|st| {
            assert_eq!(st["phase"], "cancelling");
            assert!(st.get("workerPod").is_none());
            assert!(st.get("completionTime").is_none());
        }))
        .then(delete_pod("r1-w1"))
        .then(event("Cancelling"));
    api.play(scenario, reconcile_run(Arc::new(r), ctx))
        .await
        .expect("reconcile");
}

#[tokio::test]
async fn cancel_of_a_waiting_run_starts_a_cancel_worker() {
    let (ctx, mut api) = Context::test();
    let r = cancelled(
        json!({"phase": "waiting-approval", "attempts": 1, "runId": "ruid",
               "workflow": "triage", "observedGeneration": 1,
               "pendingInterrupts": [{"interruptId": "i1", "kind": "approval", "nodeId": "approve"}]}),
    );
    let scenario = mark_snapshot_cancelled()
        // The previous worker is gone.
        .then(get_pod("r1-w1").not_found())
        .then(get_workflow("triage").reply(
            200,
            serde_json::to_value(workflow("core.identity")).unwrap(),
        ))
        .then(get_worker_service_account())
        .then(create_pod().body(|pod| {
            assert_eq!(pod["metadata"]["name"], "r1-w2", "next attempt number");
            let vols = pod["spec"]["volumes"].as_array().unwrap();
            assert!(
                vols.iter().any(|v| v["configMap"]["name"] == "r1-snapshot"),
                "the cancel worker mounts the snapshot"
            );
        }))
        .then(run_status(|st| {
            assert_eq!(st["phase"], "cancelling");
            assert_eq!(st["workerPod"], "r1-w2");
            assert_eq!(st["attempts"], 2);
            assert!(st.get("pendingInterrupts").is_none());
        }))
        .then(event("CancelWorkerStarted"));
    api.play(scenario, reconcile_run(Arc::new(r), ctx))
        .await
        .expect("reconcile");
}

#[tokio::test]
async fn cancel_worker_exit_zero_finishes_cancelled_without_re_patching_the_snapshot() {
    let (ctx, mut api) = Context::test();
    let r = cancelled(
        json!({"phase": "cancelling", "workerPod": "r1-w2", "attempts": 2, "runId": "ruid",
               "workflow": "triage", "observedGeneration": 1}),
    );
    let summary = r#"{"phase":"cancelled","events":4,"lastSequence":4}"#;
    let scenario = Scenario::new()
        .then(get_snapshot().reply(200, snapshot_cm(true)))
        .then(get_pod("r1-w2").reply(200, ended_pod("r1-w2", "Succeeded", 0, summary)))
        .then(run_status(|st| {
            assert_eq!(st["phase"], "cancelled");
            assert_eq!(st["lastSequence"], 4);
            assert_eq!(st["completionTime"], "2025-06-15T15:06:40Z");
        }))
        .then(event_of("Run", "Normal", "Cancelled").body(|b| {
            assert_eq!(b["note"], "the worker recorded the run as cancelled");
        }));
    api.play(scenario, reconcile_run(Arc::new(r), ctx))
        .await
        .expect("reconcile");
}

/// The cancel worker's summary says the log ended otherwise (completed meanwhile): the run
/// ends as its log says and is reported so (reason `Completed`, not `Cancelled`).
#[tokio::test]
async fn a_cancel_worker_finding_the_run_completed_reports_it_completed() {
    let (ctx, mut api) = Context::test();
    let r = cancelled(
        json!({"phase": "cancelling", "workerPod": "r1-w2", "attempts": 2, "runId": "ruid",
               "workflow": "triage", "observedGeneration": 1}),
    );
    let summary = r#"{"phase":"completed","events":6,"lastSequence":5}"#;
    let scenario = Scenario::new()
        .then(get_snapshot().reply(200, snapshot_cm(true)))
        .then(get_pod("r1-w2").reply(200, ended_pod("r1-w2", "Succeeded", 0, summary)))
        .then(run_status(|st| {
            assert_eq!(st["phase"], "completed");
            let c = &st["conditions"][0];
            assert_eq!(
                (&c["type"], &c["reason"]),
                (&json!("Succeeded"), &json!("Completed"))
            );
        }))
        .then(event_of("Run", "Normal", "Completed"));
    api.play(scenario, reconcile_run(Arc::new(r), ctx))
        .await
        .expect("reconcile");
}

#[tokio::test]
async fn cancel_without_worker_nats_falls_back_and_says_so() {
    let mut cfg = OperatorConfig::default();
    cfg.worker.nats_url = String::new();
    let (ctx, mut api) = Context::test_with(cfg, |_| {});
    let r = cancelled(
        json!({"phase": "running", "workerPod": "r1-w1", "attempts": 1, "runId": "ruid",
               "workflow": "triage", "observedGeneration": 1}),
    );
    let scenario = Scenario::new()
        .then(run_status(|st| {
            assert_eq!(st["phase"], "cancelled");
            let c = &st["conditions"][0];
            assert_eq!(c["reason"], "Cancelled");
            assert!(
                c["message"]
                    .as_str()
                    .unwrap()
                    .contains("worker.natsUrl is not configured"),
                "{c}"
            );
        }))
        .then(delete_pod("r1-w1"))
        .then(event("Cancelled"));
    api.play(scenario, reconcile_run(Arc::new(r), ctx))
        .await
        .expect("reconcile");
}

/// A deleted Run is released even when its events cannot be purged (NATS unreachable): a
/// Warning Event says so and the stream's retention removes them later.
#[tokio::test]
async fn a_deleted_run_is_released_even_when_its_events_cannot_be_purged() {
    // NATS configured, but the consumer has not connected.
    let (ctx, mut api) = Context::test_with(OperatorConfig::default(), |c| {
        c.jetstream = Some(JetStreamSlot::default())
    });
    let mut r = run(Some(
        json!({"phase": "completed", "workerPod": "r1-w1", "runId": "ruid"}),
    ));
    r.metadata.deletion_timestamp = Some(fixed_now_time());
    // A Run of an earlier release: it still carries the finalizer.
    r.metadata.finalizers = Some(vec![RUN_FINALIZER.into()]);
    let scenario = Scenario::new()
        .then(delete_pod("r1-w1").not_found())
        .then(event_of("Run", "Warning", "EventsNotPurged").body(|b| {
            assert_eq!(
                b["note"],
                "could not purge the run's events (runId ruid) from stream OPENWOP_EVENTS: the operator is not connected to NATS; they expire with the stream's retention (168h)"
            );
        }))
        // The finalizer is removed all the same.
        .then(remove_finalizer());
    api.play(scenario, reconcile_run(Arc::new(r), ctx))
        .await
        .expect("reconcile");
}
