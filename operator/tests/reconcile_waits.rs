//! Durable waits against a mocked API server: a worker that exits leaving a timer, the
//! requeue at `wakeAt` (no polling), the worker started when it is due, child Runs created
//! from the record and their outcome written back, and a parent's cancel reaching its child.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::fixtures::{
    apply_snapshot, create_pod, delete_pod, ended_pod, event, get_pod, get_snapshot,
    get_worker_service_account, get_workflow, list_worker_pods, run, run_status, running_run,
    snapshot_cm, workflow,
};
use common::{Expect, Scenario, TestContext};
use http::Method;
use kube::runtime::controller::Action;
use openwop_operator::controller::{Context, reconcile_run};
use serde_json::{Value, json};

/// The test clock plus `ms` milliseconds, RFC 3339.
fn at(ms: i64) -> String {
    let t = common::fixed_now()
        .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(ms))
        .unwrap();
    t.to_string()
}

/// `r1` waiting without a pod: snapshotted, no worker, the given status fields.
fn dormant(extra: Value) -> openwop_crds::Run {
    let mut st = json!({
        "phase": "running", "attempts": 1, "runId": "ruid", "workflow": "triage",
        "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Snapshotted",
                        "message": "workflow snapshotted in ConfigMap r1-snapshot",
                        "lastTransitionTime": "2025-06-15T15:00:00Z"}]});
    for (k, v) in extra.as_object().unwrap() {
        st[k] = v.clone();
    }
    run(Some(st))
}

fn timer(ms: i64) -> Value {
    json!({"timers": [{"nodeId": "wait", "wakeAt": at(ms)}], "wakeAt": at(ms)})
}

#[tokio::test]
async fn a_worker_leaving_a_timer_frees_its_pod_and_the_run_stays_running_until_wake_at() {
    let (ctx, mut api) = Context::test();
    let summary = json!({"phase": "running", "events": 5, "lastSequence": 4,
                         "timers": [{"nodeId": "wait", "wakeAt": at(60_000)}]})
    .to_string();
    let scenario = Scenario::new()
        .then(get_pod("r1-w1").reply(200, ended_pod("r1-w1", "Failed", 3, &summary)))
        .then(run_status(move |st| {
            assert_eq!(st["phase"], "running", "a delay is never waiting-*: {st:#}");
            assert_eq!(st["wakeAt"], at(60_000));
            assert_eq!(st["timers"][0]["nodeId"], "wait");
            assert!(st.get("workerPod").is_none(), "holds no pod");
        }))
        .then(delete_pod("r1-w1"))
        .then(event("Waiting").body(|b| {
            let note = b["note"].as_str().unwrap();
            assert!(note.contains("delay node(s) wait until"), "{note}");
        }));
    let action = api
        .play(scenario, reconcile_run(Arc::new(running_run()), ctx))
        .await
        .expect("reconcile");
    // Requeued at the wake time less the start-up lead, not polled.
    assert_eq!(action, Action::requeue(Duration::from_secs(59)));
}

#[tokio::test]
async fn a_waiting_run_before_its_wake_time_only_requeues() {
    let (ctx, mut api) = Context::test();
    let scenario = Scenario::new().then(get_snapshot().reply(200, snapshot_cm(false)));
    let action = api
        .play(
            scenario,
            reconcile_run(Arc::new(dormant(timer(30_000))), ctx),
        )
        .await
        .expect("reconcile");
    assert_eq!(action, Action::requeue(Duration::from_secs(29)));
}

#[tokio::test]
async fn a_due_timer_starts_a_worker() {
    let (ctx, mut api) = Context::test();
    let scenario = Scenario::new()
        .then(get_snapshot().reply(200, snapshot_cm(false)))
        .then(apply_snapshot().echo(200))
        .then(list_worker_pods())
        .then(
            get_workflow("triage")
                .reply(200, serde_json::to_value(workflow("core.delay")).unwrap()),
        )
        .then(get_worker_service_account())
        .then(create_pod().body(|pod| assert_eq!(pod["metadata"]["name"], "r1-w2")))
        .then(run_status(|st| {
            assert_eq!(st["phase"], "running");
            assert_eq!(st["workerPod"], "r1-w2");
            assert_eq!(
                st["timers"][0]["nodeId"], "wait",
                "kept until node.completed"
            );
        }))
        .then(event("Woken").body(|b| {
            assert_eq!(b["note"], "a timer is due; started worker pod r1-w2");
        }));
    api.play(scenario, reconcile_run(Arc::new(dormant(timer(500))), ctx))
        .await
        .expect("reconcile");
}

fn child_wait() -> Value {
    json!({"childWaits": [{"nodeId": "call", "childRunName": "r1-cabc", "childWorkflowId": "child-wf"}]})
}

fn get_child() -> Expect {
    Expect::new(
        Method::GET,
        "/apis/openwop.dev/v1alpha1/namespaces/team-a/runs/r1-cabc",
    )
}

fn child_workflow() -> Value {
    let mut w = serde_json::to_value(workflow("core.flow.noop")).unwrap();
    w["metadata"]["name"] = json!("child-wf");
    w["spec"]["id"] = json!("child-wf");
    w
}

#[tokio::test]
async fn a_recorded_dispatch_creates_the_child_run_once() {
    let (ctx, mut api) = Context::test();
    let scenario = Scenario::new()
        .then(get_snapshot().reply(200, snapshot_cm(false)))
        .then(get_child().not_found())
        .then(
            Expect::new(
                Method::GET,
                "/apis/openwop.dev/v1alpha1/namespaces/team-a/workflows?",
            )
            .reply(
                200,
                json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "WorkflowList",
                       "metadata": {}, "items": [child_workflow()]}),
            ),
        )
        .then(
            Expect::new(
                Method::POST,
                "/apis/openwop.dev/v1alpha1/namespaces/team-a/runs?&fieldManager=openwop-operator",
            )
            .body(|r| {
                assert_eq!(r["metadata"]["name"], "r1-cabc");
                assert_eq!(r["metadata"]["labels"]["openwop.dev/parent-run"], "ruid");
                assert_eq!(
                    r["metadata"]["annotations"]["openwop.dev/parent-node"],
                    "call"
                );
                assert_eq!(
                    r["metadata"]["annotations"]["openwop.dev/sub-workflow-depth"],
                    "1"
                );
                let owner = &r["metadata"]["ownerReferences"][0];
                assert_eq!(
                    (owner["kind"].as_str(), owner["uid"].as_str()),
                    (Some("Run"), Some("ruid"))
                );
                assert_eq!(r["spec"]["workflowRef"], json!({"id": "child-wf"}));
            })
            .reply(
                201,
                json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
                       "metadata": {"name": "r1-cabc", "uid": "cuid"},
                       "spec": {"workflowRef": {"id": "child-wf"}}}),
            ),
        )
        .then(run_status(|st| {
            assert_eq!(st["phase"], "running");
            assert_eq!(
                st["childRuns"],
                json!([{"nodeId": "call", "name": "r1-cabc", "runId": "cuid", "phase": "pending"}])
            );
        }))
        .then(event("ChildRunCreated"));
    let action = api
        .play(
            scenario,
            reconcile_run(Arc::new(dormant(child_wait())), ctx),
        )
        .await
        .expect("reconcile");
    assert_eq!(
        action,
        Action::await_change(),
        "the child's changes wake the parent"
    );
}

/// `r1-cabc`, created by `r1`, in `phase` with `status` fields added.
fn child_in(phase: &str, extra: Value) -> Value {
    let mut st = json!({"phase": phase});
    for (k, v) in extra.as_object().unwrap() {
        st[k] = v.clone();
    }
    json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "r1-cabc", "uid": "cuid",
                     "ownerReferences": [{"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
                                          "name": "r1", "uid": "ruid", "controller": true}]},
        "spec": {"workflowRef": {"id": "child-wf"}},
        "status": st})
}

#[tokio::test]
async fn a_parent_shows_its_childs_wait_and_runs_again_once_the_child_is_answered() {
    let gate = json!({"pendingInterrupts": [{"interruptId": "i1", "nodeId": "gate", "kind": "approval"}],
                      "currentNode": "gate"});
    let (ctx, mut api) = Context::test();
    let scenario = Scenario::new()
        .then(get_snapshot().reply(200, snapshot_cm(false)))
        .then(get_child().reply(200, child_in("waiting-approval", gate)))
        .then(run_status(|st| {
            assert_eq!(st["phase"], "waiting-approval");
            assert_eq!(
                st["childRuns"],
                json!([{"nodeId": "call", "name": "r1-cabc", "runId": "cuid",
                        "phase": "waiting-approval", "waitingNode": "gate"}])
            );
            assert!(
                st.get("workerPod").is_none(),
                "no worker while the child waits"
            );
        }));
    let action = api
        .play(
            scenario,
            reconcile_run(Arc::new(dormant(child_wait())), ctx),
        )
        .await
        .expect("reconcile");
    assert_eq!(
        action,
        Action::await_change(),
        "the child's answer wakes it"
    );

    // The child was answered and runs again: so does the parent's phase.
    let mut parent = child_wait();
    parent["phase"] = json!("waiting-approval");
    parent["childRuns"] = json!([{"nodeId": "call", "name": "r1-cabc", "runId": "cuid",
                                  "phase": "waiting-approval", "waitingNode": "gate"}]);
    let (ctx, mut api) = Context::test();
    let scenario = Scenario::new()
        .then(get_snapshot().reply(200, snapshot_cm(false)))
        .then(get_child().reply(200, child_in("running", json!({}))))
        .then(run_status(|st| {
            assert_eq!(st["phase"], "running");
            assert_eq!(
                st["childRuns"],
                json!([{"nodeId": "call", "name": "r1-cabc", "runId": "cuid", "phase": "running"}])
            );
        }));
    api.play(scenario, reconcile_run(Arc::new(dormant(parent)), ctx))
        .await
        .expect("reconcile");
}

#[tokio::test]
async fn an_ended_child_writes_its_outcome_into_the_parent_and_starts_its_worker() {
    let (ctx, mut api) = Context::test();
    let child = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "r1-cabc", "uid": "cuid",
                     "ownerReferences": [{"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
                                          "name": "r1", "uid": "ruid", "controller": true}]},
        "spec": {"workflowRef": {"id": "child-wf"}},
        "status": {"phase": "completed"}});
    let scenario = Scenario::new()
        .then(get_snapshot().reply(200, snapshot_cm(false)))
        .then(get_child().reply(200, child))
        .then(
            apply_snapshot()
                .body(|cm| {
                    let doc: Value =
                        serde_json::from_str(cm["data"]["snapshot.json"].as_str().unwrap())
                            .unwrap();
                    assert_eq!(
                        doc["children"],
                        json!([{"nodeId": "call", "childRunId": "cuid", "childRunName": "r1-cabc",
                        "childStatus": "completed"}])
                    );
                })
                .echo(200),
        )
        .then(list_worker_pods())
        .then(get_workflow("triage").reply(
            200,
            serde_json::to_value(workflow("core.subWorkflow")).unwrap(),
        ))
        .then(get_worker_service_account())
        .then(create_pod())
        .then(run_status(|st| {
            assert_eq!(st["workerPod"], "r1-w2");
            assert_eq!(st["childRuns"][0]["phase"], "completed");
        }))
        .then(event("ChildRunEnded"))
        .then(event("Woken"));
    api.play(
        scenario,
        reconcile_run(Arc::new(dormant(child_wait())), ctx),
    )
    .await
    .expect("reconcile");
}

#[tokio::test]
async fn cancelling_the_parent_cancels_its_running_child() {
    let (ctx, mut api) = Context::test();
    let mut r = dormant(
        json!({"childWaits": [{"nodeId": "call", "childRunName": "r1-cabc", "childWorkflowId": "child-wf"}],
                               "childRuns": [{"nodeId": "call", "name": "r1-cabc", "runId": "cuid", "phase": "running"}]}),
    );
    r.spec.cancel = Some(true);
    let child = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "r1-cabc", "uid": "cuid",
                     "ownerReferences": [{"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
                                          "name": "r1", "uid": "ruid", "controller": true}]},
        "spec": {"workflowRef": {"id": "child-wf"}},
        "status": {"phase": "running"}});
    let scenario = Scenario::new()
        .then(get_snapshot().reply(200, snapshot_cm(false)))
        .then(get_child().reply(200, child.clone()))
        .then(
            Expect::new(
                Method::PATCH,
                "/apis/openwop.dev/v1alpha1/namespaces/team-a/runs/r1-cabc?",
            )
            .body(|p| {
                assert_eq!(p["spec"]["cancel"], true);
                assert_eq!(
                    p["metadata"]["annotations"]["openwop.dev/cancel-reason"],
                    "parent-cancelled"
                );
            })
            .reply(200, child),
        )
        .then(apply_snapshot().echo(200))
        .then(get_pod("r1-w1").not_found())
        .then(get_workflow("triage").reply(
            200,
            serde_json::to_value(workflow("core.subWorkflow")).unwrap(),
        ))
        .then(get_worker_service_account())
        .then(create_pod())
        .then(run_status(|st| assert_eq!(st["phase"], "cancelling")))
        .then(event("ChildRunsCancelled"))
        .then(event("CancelWorkerStarted"));
    api.play(scenario, reconcile_run(Arc::new(r), ctx))
        .await
        .expect("reconcile");
}

/// `r1` waiting at a quorum gate (three accepts, majority reject) with these votes.
fn quorum_run(votes: &[(&str, &str)]) -> openwop_crds::Run {
    let mut r = dormant(json!({
        "phase": "waiting-approval", "currentNodeId": "gate",
        "pendingInterrupts": [{"interruptId": "i1", "nodeId": "gate", "kind": "approval",
                               "actions": ["accept", "reject"], "requiredApprovals": 3,
                               "rejectionPolicy": "majority"}]}));
    r.spec.answers = votes
        .iter()
        .map(|(voter, action)| {
            serde_json::from_value(
                json!({"interruptId": "i1", "nodeId": "gate", "action": action,
                "value": {"voter": voter}, "answeredBy": "system:serviceaccount:suite:suite"}),
            )
            .unwrap()
        })
        .collect();
    r
}

/// The requests that start `r1`'s next worker (`r1-w2`) at an approval gate.
fn gate_worker_started() -> Scenario {
    Scenario::new()
        .then(get_snapshot().reply(200, snapshot_cm(false)))
        .then(apply_snapshot().echo(200))
        .then(list_worker_pods())
        .then(get_workflow("triage").reply(
            200,
            serde_json::to_value(workflow("core.approvalGate")).unwrap(),
        ))
        .then(get_worker_service_account())
        .then(create_pod().body(|pod| assert_eq!(pod["metadata"]["name"], "r1-w2")))
}

/// Votes that do not decide a quorum gate start no worker: the run stays `waiting-approval`
/// without a pod (the snapshot is read, nothing is written, nothing is created).
#[tokio::test]
async fn partial_quorum_votes_start_no_worker() {
    for votes in [
        vec![("a1", "accept")],
        vec![("a1", "accept"), ("a2", "accept")],
        // The same voter three times is one vote.
        vec![("a1", "accept"), ("a1", "accept"), ("a1", "accept")],
        vec![("r1", "reject"), ("a1", "accept")],
    ] {
        let (ctx, mut api) = Context::test();
        let scenario = Scenario::new().then(get_snapshot().reply(200, snapshot_cm(false)));
        let action = api
            .play(scenario, reconcile_run(Arc::new(quorum_run(&votes)), ctx))
            .await
            .expect("reconcile");
        assert_eq!(action, Action::await_change(), "{votes:?}");
    }
}

/// The vote that decides the quorum (the third accept, or the second reject) starts the
/// worker that records it.
#[tokio::test]
async fn the_deciding_quorum_vote_starts_the_worker() {
    for votes in [
        vec![("a1", "accept"), ("a2", "accept"), ("a3", "accept")],
        vec![("r1", "reject"), ("r2", "reject")],
    ] {
        let (ctx, mut api) = Context::test();
        let scenario = gate_worker_started()
            .then(run_status(|st| {
                assert_eq!(st["workerPod"], "r1-w2");
                assert_eq!(st["answeredInterrupts"], json!(["i1"]));
            }))
            .then(event("Resumed"));
        api.play(scenario, reconcile_run(Arc::new(quorum_run(&votes)), ctx))
            .await
            .expect("reconcile");
    }
}

/// A gate with `timeoutMs` waits `waiting-approval` without a pod until its timer, then a
/// worker is started to record the timeout (the delay's wake machinery).
#[tokio::test]
async fn a_gate_timeout_keeps_the_run_waiting_until_due_then_starts_a_worker() {
    let gate = |ms: i64| {
        let mut extra = json!({
            "phase": "waiting-approval", "currentNodeId": "gate",
            "pendingInterrupts": [{"interruptId": "i1", "nodeId": "gate", "kind": "approval"}]});
        for (k, v) in json!({"timers": [{"nodeId": "gate", "wakeAt": at(ms)}], "wakeAt": at(ms)})
            .as_object()
            .unwrap()
        {
            extra[k] = v.clone();
        }
        dormant(extra)
    };
    let (ctx, mut api) = Context::test();
    let scenario = Scenario::new().then(get_snapshot().reply(200, snapshot_cm(false)));
    let action = api
        .play(scenario, reconcile_run(Arc::new(gate(30_000)), ctx))
        .await
        .expect("reconcile");
    assert_eq!(action, Action::requeue(Duration::from_secs(29)));

    let (ctx, mut api) = Context::test();
    let scenario = gate_worker_started()
        .then(run_status(|st| {
            assert_eq!(st["workerPod"], "r1-w2");
            assert!(st.get("answeredInterrupts").is_none(), "{st:#}");
        }))
        .then(event("Woken"));
    api.play(scenario, reconcile_run(Arc::new(gate(500)), ctx))
        .await
        .expect("reconcile");
}
