//! Reconcilers against a mocked API server (tower-test), asserting the exact requests.

use std::sync::Arc;

use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use kube::runtime::events::Reporter;
use openwop_crds::{Run, Workflow};
use openwop_operator::config::OperatorConfig;
use openwop_operator::controller::{Context, reconcile_run, reconcile_workflow};
use openwop_operator::metrics::Metrics;
use openwop_protocol::workflow_check::NodeRegistry;
use serde_json::{Value, json};
use tower_test::mock::{self, Handle};

type MockHandle = Handle<Request<Body>, Response<Body>>;

fn fixed_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_second(1_750_000_000).unwrap()
}

fn context() -> (Arc<Context>, MockHandle) {
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, "default");
    let ctx = Context {
        client,
        config: Arc::new(OperatorConfig::default()),
        registry: Arc::new(NodeRegistry::builtin()),
        metrics: Metrics::default(),
        reporter: Reporter {
            controller: "openwop-operator".into(),
            instance: None,
        },
        now: fixed_now,
        worker_pods: None,
        nats_copies: Default::default(),
        starts: Default::default(),
        jetstream: None,
    };
    (Arc::new(ctx), handle)
}

async fn next(
    handle: &mut MockHandle,
) -> (
    Method,
    String,
    Value,
    tower_test::mock::SendResponse<Response<Body>>,
) {
    let (req, send) = handle.next_request().await.expect("a request");
    let method = req.method().clone();
    let uri = req.uri().to_string();
    let bytes = req.into_body().collect().await.unwrap().to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (method, uri, body, send)
}

fn respond(send: tower_test::mock::SendResponse<Response<Body>>, status: u16, body: Value) {
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
}

fn workflow(type_id: &str) -> Workflow {
    serde_json::from_value(json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "triage", "namespace": "team-a", "uid": "wuid", "generation": 2},
        "spec": {"id": "triage", "name": "Triage", "version": "1",
                 "nodes": [{"id": "classify", "typeId": type_id}]}
    }))
    .unwrap()
}

#[tokio::test]
async fn invalid_workflow_gets_ready_false_naming_node_and_an_event() {
    let (ctx, mut handle) = context();
    let wf = Arc::new(workflow("core.unknown"));
    let echo = serde_json::to_value(wf.as_ref()).unwrap();
    let server = tokio::spawn(async move {
        let (m, uri, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        assert_eq!(
            uri,
            "/apis/openwop.dev/v1alpha1/namespaces/team-a/workflows/triage/status?&force=true&fieldManager=openwop-operator"
        );
        let cond = &body["status"]["conditions"][0];
        assert_eq!(cond["type"], "Ready");
        assert_eq!(cond["status"], "False");
        assert_eq!(cond["reason"], "UnknownTypeId");
        let msg = cond["message"].as_str().unwrap();
        assert!(
            msg.contains("node \"classify\" (/nodes/0/typeId): unknown typeId \"core.unknown\""),
            "{msg}"
        );
        assert_eq!(body["status"]["observedGeneration"], 2);
        respond(send, 200, echo);
        let (m, uri, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::POST);
        assert_eq!(uri, "/apis/events.k8s.io/v1/namespaces/team-a/events?");
        assert_eq!(body["reason"], "Invalid");
        assert_eq!(body["type"], "Warning");
        assert_eq!(body["regarding"]["kind"], "Workflow");
        respond(send, 201, body);
    });
    reconcile_workflow(wf, ctx).await.expect("reconcile");
    server.await.unwrap();
}

#[tokio::test]
async fn valid_workflow_with_unchanged_status_makes_no_request() {
    let (ctx, handle) = context();
    let mut wf = workflow("core.identity");
    wf.status = Some(serde_json::from_value(json!({
        "observedGeneration": 2, "nodeCount": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Valid", "message": "definition is valid (1 nodes)",
                        "observedGeneration": 2, "lastTransitionTime": "2025-06-15T15:06:40Z"}]
    })).unwrap());
    reconcile_workflow(Arc::new(wf), ctx)
        .await
        .expect("reconcile");
    drop(handle);
}

fn run(status: Option<Value>) -> Run {
    let mut v = json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "r1", "namespace": "team-a", "uid": "ruid", "generation": 1,
                     "finalizers": ["openwop.dev/cleanup"]},
        "spec": {"workflowRef": {"name": "triage"}}
    });
    if let Some(s) = status {
        v["status"] = s;
    }
    serde_json::from_value(v).unwrap()
}

#[tokio::test]
async fn run_with_missing_workflow_waits_with_a_clear_condition() {
    let (ctx, mut handle) = context();
    let server = tokio::spawn(async move {
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(
            (m, uri.as_str()),
            (
                Method::GET,
                "/api/v1/namespaces/team-a/configmaps/r1-snapshot"
            )
        );
        respond(
            send,
            404,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
        );
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(
            (m, uri.as_str()),
            (
                Method::GET,
                "/apis/openwop.dev/v1alpha1/namespaces/team-a/workflows/triage"
            )
        );
        respond(
            send,
            404,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
        );
        let (m, uri, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        assert_eq!(
            uri,
            "/apis/openwop.dev/v1alpha1/namespaces/team-a/runs/r1/status?&force=true&fieldManager=openwop-operator"
        );
        assert_eq!(body["status"]["phase"], "pending");
        let c = &body["status"]["conditions"][0];
        assert_eq!(
            (
                c["type"].as_str(),
                c["status"].as_str(),
                c["reason"].as_str()
            ),
            (Some("Ready"), Some("False"), Some("WorkflowNotFound"))
        );
        assert_eq!(
            c["message"],
            "Workflow triage not found in namespace team-a; the run starts when it is created"
        );
        respond(
            send,
            200,
            json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": "r1"}, "spec": {"workflowRef": {"name": "triage"}}}),
        );
    });
    reconcile_run(Arc::new(run(None)), ctx)
        .await
        .expect("reconcile");
    server.await.unwrap();
}

fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"})
}

fn run_echo() -> Value {
    json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": "r1"}, "spec": {"workflowRef": {"name": "triage"}}})
}

fn snapshot_cm(cancel: bool) -> Value {
    let mut doc = json!({"run": {"namespace": "team-a", "name": "r1", "uid": "ruid", "runId": "ruid"},
                         "workflow": {"id": "triage"}, "answers": []});
    if cancel {
        doc["cancel"] = json!(true);
    }
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "r1-snapshot", "namespace": "team-a",
                        "ownerReferences": [{"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
                                             "name": "r1", "uid": "ruid", "controller": true}]},
           "data": {"snapshot.json": doc.to_string()}})
}

/// Serves the snapshot GET and asserts the apply patch that adds `cancel: true`.
async fn expect_snapshot_cancel_patch(handle: &mut MockHandle) {
    let (m, uri, _, send) = next(handle).await;
    assert_eq!(
        (m, uri.as_str()),
        (
            Method::GET,
            "/api/v1/namespaces/team-a/configmaps/r1-snapshot"
        )
    );
    respond(send, 200, snapshot_cm(false));
    let (m, uri, body, send) = next(handle).await;
    assert_eq!(m, Method::PATCH);
    assert_eq!(
        uri,
        "/api/v1/namespaces/team-a/configmaps/r1-snapshot?&force=true&fieldManager=openwop-operator"
    );
    let doc: Value = serde_json::from_str(body["data"]["snapshot.json"].as_str().unwrap()).unwrap();
    assert_eq!(doc["cancel"], true);
    assert_eq!(
        doc["workflow"]["id"], "triage",
        "the frozen snapshot is kept"
    );
    respond(send, 200, snapshot_cm(true));
}

#[tokio::test]
async fn cancel_marks_the_snapshot_and_stops_the_running_worker() {
    let (ctx, mut handle) = context();
    let mut r = run(Some(
        json!({"phase": "running", "workerPod": "r1-w1", "attempts": 1, "runId": "ruid",
                                "workflow": "triage", "observedGeneration": 1}),
    ));
    r.spec.cancel = Some(true);
    let server = tokio::spawn(async move {
        expect_snapshot_cancel_patch(&mut handle).await;
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(m, Method::DELETE);
        assert_eq!(uri, "/api/v1/namespaces/team-a/pods/r1-w1?");
        respond(
            send,
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "r1-w1"}}),
        );
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        assert_eq!(body["status"]["phase"], "cancelling");
        assert!(body["status"].get("workerPod").is_none());
        assert!(body["status"].get("completionTime").is_none());
        respond(send, 200, run_echo());
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::POST);
        assert_eq!(body["reason"], "Cancelling");
        respond(send, 201, body);
    });
    reconcile_run(Arc::new(r), ctx).await.expect("reconcile");
    server.await.unwrap();
}

#[tokio::test]
async fn cancel_of_a_waiting_run_starts_a_cancel_worker() {
    let (ctx, mut handle) = context();
    let mut r = run(Some(
        json!({"phase": "waiting-approval", "attempts": 1, "runId": "ruid",
                                "workflow": "triage", "observedGeneration": 1,
                                "pendingInterrupts": [{"interruptId": "i1", "kind": "approval", "nodeId": "approve"}]}),
    ));
    r.spec.cancel = Some(true);
    let server = tokio::spawn(async move {
        expect_snapshot_cancel_patch(&mut handle).await;
        // The previous worker is gone.
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(
            (m, uri.as_str()),
            (Method::GET, "/api/v1/namespaces/team-a/pods/r1-w1")
        );
        respond(send, 404, not_found());
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(
            (m, uri.as_str()),
            (
                Method::GET,
                "/apis/openwop.dev/v1alpha1/namespaces/team-a/workflows/triage"
            )
        );
        respond(
            send,
            200,
            serde_json::to_value(workflow("core.identity")).unwrap(),
        );
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(
            (m, uri.as_str()),
            (
                Method::GET,
                "/api/v1/namespaces/team-a/serviceaccounts/openwop-worker"
            )
        );
        respond(
            send,
            200,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "openwop-worker"}}),
        );
        let (m, uri, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::POST);
        assert_eq!(
            uri,
            "/api/v1/namespaces/team-a/pods?&fieldManager=openwop-operator"
        );
        assert_eq!(body["metadata"]["name"], "r1-w2", "next attempt number");
        let vols = body["spec"]["volumes"].as_array().unwrap();
        assert!(
            vols.iter().any(|v| v["configMap"]["name"] == "r1-snapshot"),
            "the cancel worker mounts the snapshot"
        );
        respond(send, 201, body);
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        assert_eq!(body["status"]["phase"], "cancelling");
        assert_eq!(body["status"]["workerPod"], "r1-w2");
        assert_eq!(body["status"]["attempts"], 2);
        assert!(body["status"].get("pendingInterrupts").is_none());
        respond(send, 200, run_echo());
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::POST);
        assert_eq!(body["reason"], "CancelWorkerStarted");
        respond(send, 201, body);
    });
    reconcile_run(Arc::new(r), ctx).await.expect("reconcile");
    server.await.unwrap();
}

#[tokio::test]
async fn cancel_worker_exit_zero_finishes_cancelled_without_re_patching_the_snapshot() {
    let (ctx, mut handle) = context();
    let mut r = run(Some(
        json!({"phase": "cancelling", "workerPod": "r1-w2", "attempts": 2, "runId": "ruid",
                                "workflow": "triage", "observedGeneration": 1}),
    ));
    r.spec.cancel = Some(true);
    let server = tokio::spawn(async move {
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(
            (m, uri.as_str()),
            (
                Method::GET,
                "/api/v1/namespaces/team-a/configmaps/r1-snapshot"
            )
        );
        respond(send, 200, snapshot_cm(true));
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(
            (m, uri.as_str()),
            (Method::GET, "/api/v1/namespaces/team-a/pods/r1-w2")
        );
        respond(
            send,
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "r1-w2"},
                   "status": {"phase": "Succeeded", "containerStatuses": [{
                       "name": "worker", "ready": false, "restartCount": 0, "image": "w", "imageID": "",
                       "state": {"terminated": {"exitCode": 0,
                           "message": "{\"phase\":\"cancelled\",\"events\":4,\"lastSequence\":4}"}}}]}}),
        );
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        assert_eq!(body["status"]["phase"], "cancelled");
        assert_eq!(body["status"]["lastSequence"], 4);
        assert_eq!(body["status"]["completionTime"], "2025-06-15T15:06:40Z");
        respond(send, 200, run_echo());
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::POST);
        assert_eq!(body["reason"], "Cancelled");
        assert_eq!(body["note"], "the worker recorded the run as cancelled");
        respond(send, 201, body);
    });
    reconcile_run(Arc::new(r), ctx).await.expect("reconcile");
    server.await.unwrap();
}

#[tokio::test]
async fn cancel_without_worker_nats_falls_back_and_says_so() {
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let mut cfg = OperatorConfig::default();
    cfg.worker.nats_url = String::new();
    let ctx = Arc::new(Context {
        client: Client::new(svc, "default"),
        config: Arc::new(cfg),
        registry: Arc::new(NodeRegistry::builtin()),
        metrics: Metrics::default(),
        reporter: Reporter {
            controller: "openwop-operator".into(),
            instance: None,
        },
        now: fixed_now,
        worker_pods: None,
        nats_copies: Default::default(),
        starts: Default::default(),
        jetstream: None,
    });
    let mut r = run(Some(
        json!({"phase": "running", "workerPod": "r1-w1", "attempts": 1, "runId": "ruid",
                                "workflow": "triage", "observedGeneration": 1}),
    ));
    r.spec.cancel = Some(true);
    let server = tokio::spawn(async move {
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(m, Method::DELETE);
        assert_eq!(uri, "/api/v1/namespaces/team-a/pods/r1-w1?");
        respond(
            send,
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "r1-w1"}}),
        );
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        assert_eq!(body["status"]["phase"], "cancelled");
        let c = &body["status"]["conditions"][0];
        assert_eq!(c["reason"], "Cancelled");
        assert!(
            c["message"]
                .as_str()
                .unwrap()
                .contains("worker.natsUrl is not configured"),
            "{c}"
        );
        respond(send, 200, run_echo());
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::POST);
        assert_eq!(body["reason"], "Cancelled");
        respond(send, 201, body);
    });
    reconcile_run(Arc::new(r), ctx).await.expect("reconcile");
    server.await.unwrap();
}

/// A running worker's reconciles (one per change of its pod) read the pod only: the snapshot
/// it mounts exists, so no ConfigMap GET (issue 7: a round trip per reconcile at 200 runs).
#[tokio::test]
async fn a_running_worker_is_observed_without_reading_the_snapshot() {
    let (ctx, mut handle) = context();
    let r = run(Some(json!({
        "phase": "running", "workerPod": "r1-w1", "attempts": 1, "runId": "ruid",
        "workflow": "triage", "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Snapshotted",
                        "message": "workflow snapshotted in ConfigMap r1-snapshot",
                        "lastTransitionTime": "2025-06-15T15:00:00Z"}]
    })));
    let server = tokio::spawn(async move {
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(
            (m, uri.as_str()),
            (Method::GET, "/api/v1/namespaces/team-a/pods/r1-w1"),
            "the first request reads the worker pod, not the snapshot"
        );
        respond(
            send,
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "r1-w1"},
                   "status": {"phase": "Running"}}),
        );
    });
    let action = reconcile_run(Arc::new(r), ctx).await.expect("reconcile");
    server.await.unwrap();
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(60))
    );
}

/// A worker pod that ended with `exitCode` and a log tail as its termination message
/// (`FallbackToLogsOnError`).
fn ended_worker(exit_code: i32, tail: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "r1-w1"},
           "status": {"phase": "Failed", "containerStatuses": [{
               "name": "worker", "ready": false, "restartCount": 0, "image": "w", "imageID": "",
               "state": {"terminated": {"exitCode": exit_code, "message": tail}}}]}})
}

fn running_run() -> Run {
    run(Some(json!({
        "phase": "running", "workerPod": "r1-w1", "attempts": 1, "runId": "ruid",
        "workflow": "triage", "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Snapshotted",
                        "message": "workflow snapshotted in ConfigMap r1-snapshot",
                        "lastTransitionTime": "2025-06-15T15:00:00Z"}]
    })))
}

#[tokio::test]
async fn a_worker_refusing_its_input_fails_the_run_at_once_quoting_why() {
    let (ctx, mut handle) = context();
    let tail = concat!(
        r#"{"level":"INFO","fields":{"message":"event log read"},"target":"w"}"#,
        "\n",
        r#"{"level":"ERROR","fields":{"message":"provider configuration","error":"provider 'openai-compatible' needs a base URL"},"target":"w"}"#
    );
    let server = tokio::spawn(async move {
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(
            (m, uri.as_str()),
            (Method::GET, "/api/v1/namespaces/team-a/pods/r1-w1")
        );
        respond(send, 200, ended_worker(2, tail));
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(
            (m, uri.as_str()),
            (Method::DELETE, "/api/v1/namespaces/team-a/pods/r1-w1?")
        );
        respond(send, 200, ended_worker(2, tail));
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        let st = &body["status"];
        assert_eq!(st["phase"], "failed", "no retry: {st:#}");
        assert_eq!(st["error"]["code"], "worker_input_invalid");
        assert_eq!(
            st["error"]["message"],
            "the worker refused its input (exit 2): provider configuration: provider 'openai-compatible' needs a base URL; fix the Workflow or the operator configuration, then create a new Run"
        );
        assert!(
            st.get("failedAttempts").is_none_or(Value::is_null),
            "{st:#}"
        );
        respond(send, 200, run_echo());
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::POST);
        assert_eq!(body["reason"], "Failed");
        assert_eq!(body["type"], "Warning");
        respond(send, 201, body);
    });
    reconcile_run(Arc::new(running_run()), ctx)
        .await
        .expect("reconcile");
    server.await.unwrap();
}

#[tokio::test]
async fn a_crashed_worker_is_retried_and_its_last_error_quoted() {
    let (ctx, mut handle) = context();
    let tail = concat!(
        r#"{"level":"ERROR","fields":{"message":"worker crashed; the operator will retry","error":"event evt-1 not durable after 7 attempts"},"target":"w"}"#,
        "\n"
    );
    let server = tokio::spawn(async move {
        let (_, _, _, send) = next(&mut handle).await;
        respond(send, 200, ended_worker(1, tail));
        let (m, _, _, send) = next(&mut handle).await;
        assert_eq!(m, Method::DELETE);
        respond(send, 200, ended_worker(1, tail));
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        assert_eq!(body["status"]["failedAttempts"], 1, "{body:#}");
        assert_eq!(body["status"]["phase"], "running");
        respond(send, 200, run_echo());
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::POST);
        assert_eq!(body["reason"], "WorkerCrashed");
        let note = body["note"].as_str().unwrap();
        assert!(
            note.starts_with("worker exited with code 1 (worker crashed; the operator will retry: event evt-1 not durable after 7 attempts); retrying in"),
            "{note}"
        );
        respond(send, 201, body);
    });
    reconcile_run(Arc::new(running_run()), ctx)
        .await
        .expect("reconcile");
    server.await.unwrap();
}

fn crashed_again(last_sequence: u64, failed_at: u64, failed: u32) -> Run {
    let mut r = running_run();
    let st = r.status.as_mut().unwrap();
    st.attempts = Some(failed + 1);
    st.last_sequence = Some(last_sequence);
    st.failed_at_sequence = Some(failed_at);
    st.failed_attempts = Some(failed);
    r
}

/// The crash budget counts consecutive failures without progress: the default limit is 3,
/// and this is the 4th crash — but the worker appended events (sequence 4 → 9) since the last
/// counted failure, so the count starts again instead of failing the run.
#[tokio::test]
async fn a_crash_after_progress_restarts_the_budget() {
    let (ctx, mut handle) = context();
    let server = tokio::spawn(async move {
        let (_, _, _, send) = next(&mut handle).await;
        respond(send, 200, ended_worker(137, ""));
        let (m, _, _, send) = next(&mut handle).await;
        assert_eq!(m, Method::DELETE);
        respond(send, 200, ended_worker(137, ""));
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        let st = &body["status"];
        assert_eq!(st["phase"], "running", "retried, not failed: {st:#}");
        assert_eq!(
            (
                st["failedAttempts"].as_u64(),
                st["failedAtSequence"].as_u64()
            ),
            (Some(1), Some(9))
        );
        respond(send, 200, run_echo());
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(
            (m, body["reason"].as_str()),
            (Method::POST, Some("WorkerCrashed"))
        );
        assert!(
            body["note"]
                .as_str()
                .unwrap()
                .contains("failure 1 of 3 without progress"),
            "{body:#}"
        );
        respond(send, 201, body);
    });
    reconcile_run(Arc::new(crashed_again(9, 4, 3)), ctx)
        .await
        .expect("reconcile");
    server.await.unwrap();
}

/// Without new events since the last counted failure, the 4th consecutive crash exhausts the
/// budget and names it.
#[tokio::test]
async fn consecutive_crashes_without_progress_exhaust_the_budget() {
    let (ctx, mut handle) = context();
    let server = tokio::spawn(async move {
        let (_, _, _, send) = next(&mut handle).await;
        respond(send, 200, ended_worker(137, ""));
        let (_, _, _, send) = next(&mut handle).await;
        respond(send, 200, ended_worker(137, ""));
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        let st = &body["status"];
        assert_eq!(st["phase"], "failed", "{st:#}");
        assert_eq!(st["failedAttempts"], 4);
        assert_eq!(st["error"]["code"], "worker_crashed");
        let msg = st["error"]["message"].as_str().unwrap();
        assert!(
            msg.ends_with("4 consecutive worker failures without progress (limit 3, chart value runs.maxWorkerRetries)"),
            "{msg}"
        );
        respond(send, 200, run_echo());
        let (_, _, body, send) = next(&mut handle).await;
        respond(send, 201, body);
    });
    reconcile_run(Arc::new(crashed_again(9, 9, 3)), ctx)
        .await
        .expect("reconcile");
    server.await.unwrap();
}

/// A run that completes after crashes shows no stale failure count.
#[tokio::test]
async fn a_completed_run_clears_its_failure_count() {
    let (ctx, mut handle) = context();
    let mut r = crashed_again(9, 9, 2);
    r.status.as_mut().unwrap().phase = Some(openwop_crds::RunPhase::Completed);
    r.status.as_mut().unwrap().worker_pod = None;
    let server = tokio::spawn(async move {
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        let st = &body["status"];
        assert_eq!(st["phase"], "completed");
        assert!(
            st.get("failedAttempts").is_none_or(Value::is_null),
            "{st:#}"
        );
        assert!(
            st.get("failedAtSequence").is_none_or(Value::is_null),
            "{st:#}"
        );
        respond(send, 200, run_echo());
        let (_, _, body, send) = next(&mut handle).await;
        respond(send, 201, body);
    });
    reconcile_run(Arc::new(r), ctx).await.expect("reconcile");
    server.await.unwrap();
}

/// A deleted Run is released even when its events cannot be purged (NATS unreachable): a
/// Warning Event says so and the stream's retention removes them later.
#[tokio::test]
async fn a_deleted_run_is_released_even_when_its_events_cannot_be_purged() {
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let ctx = Arc::new(Context {
        client: Client::new(svc, "default"),
        config: Arc::new(OperatorConfig::default()),
        registry: Arc::new(NodeRegistry::builtin()),
        metrics: Metrics::default(),
        reporter: Reporter {
            controller: "openwop-operator".into(),
            instance: None,
        },
        now: fixed_now,
        worker_pods: None,
        nats_copies: Default::default(),
        starts: Default::default(),
        // NATS configured, but the consumer has not connected.
        jetstream: Some(openwop_operator::events::JetStreamSlot::default()),
    });
    let mut r = run(Some(
        json!({"phase": "completed", "workerPod": "r1-w1", "runId": "ruid"}),
    ));
    r.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        fixed_now(),
    ));
    let server = tokio::spawn(async move {
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(
            (m, uri.as_str()),
            (Method::DELETE, "/api/v1/namespaces/team-a/pods/r1-w1?")
        );
        respond(send, 404, not_found());
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::POST);
        assert_eq!(
            (body["type"].as_str(), body["reason"].as_str()),
            (Some("Warning"), Some("EventsNotPurged"))
        );
        let note = body["note"].as_str().unwrap();
        assert_eq!(
            note,
            "could not purge the run's events (runId ruid) from stream OPENWOP_EVENTS: the operator is not connected to NATS; they expire with the stream's retention (168h)"
        );
        respond(send, 201, body);
        // The finalizer is removed all the same.
        let (m, uri, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        assert_eq!(uri, "/apis/openwop.dev/v1alpha1/namespaces/team-a/runs/r1?");
        assert!(body.to_string().contains("finalizers"), "{body}");
        respond(send, 200, run_echo());
    });
    reconcile_run(Arc::new(r), ctx).await.expect("reconcile");
    server.await.unwrap();
}

fn run_with_uid(uid: &str, last_sequence: Option<u64>) -> Value {
    let mut r = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "r1", "namespace": "team-a", "uid": uid, "resourceVersion": "7"},
        "spec": {"workflowRef": {"name": "triage"}}});
    if let Some(seq) = last_sequence {
        r["status"] = json!({"phase": "running", "lastSequence": seq, "events": seq + 1});
    }
    r
}

fn event(run_id: &str, seq: u64, ty: &str) -> Value {
    json!({"eventId": format!("{run_id}-{seq}"), "runId": run_id, "type": ty, "sequence": seq,
           "timestamp": "2026-01-01T00:00:00Z", "payload": {}})
}

/// Run r1 was deleted and re-created: the old run's late events (its uid) never touch the
/// new Run of the same name; the new run's events do.
#[tokio::test]
async fn events_are_routed_by_uid_across_delete_and_recreate() {
    use openwop_operator::events::{EventError, RunLog, apply_to_run};
    /// Every event here continues its run's status: nothing is read back.
    struct NoReadBack;
    impl RunLog for NoReadBack {
        async fn read_run(&self, _: &str, _: &str) -> Result<Vec<Value>, EventError> {
            panic!("no hole in these events: the log must not be read back")
        }
    }
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, "default");
    let cfg = OperatorConfig::default();
    let server = tokio::spawn(async move {
        // Old uid, no cache: a LIST of the namespace finds only the new r1; nothing else.
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(m, Method::GET);
        assert_eq!(
            uri,
            "/apis/openwop.dev/v1alpha1/namespaces/team-a/runs?&labelSelector=%21openwop.dev%2Finstance"
        );
        respond(
            send,
            200,
            json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "RunList", "metadata": {},
                   "items": [run_with_uid("uid-new", Some(0))]}),
        );
        // New uid: found in the cache (no LIST), read fresh, patched.
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(
            (m, uri.as_str()),
            (
                Method::GET,
                "/apis/openwop.dev/v1alpha1/namespaces/team-a/runs/r1"
            )
        );
        respond(send, 200, run_with_uid("uid-new", Some(0)));
        let (m, uri, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        assert!(
            uri.starts_with("/apis/openwop.dev/v1alpha1/namespaces/team-a/runs/r1/status?"),
            "{uri}"
        );
        assert_eq!(body["status"]["phase"], "completed");
        assert_eq!(body["status"]["lastSequence"], 1);
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        respond(send, 200, run_with_uid("uid-new", Some(1)));
        // The cache still had the old Run: the GET shows the name now has another uid.
        let (m, _, _, send) = next(&mut handle).await;
        assert_eq!(m, Method::GET);
        respond(send, 200, run_with_uid("uid-new", Some(1)));
    });
    let old = [event("uid-old", 5, "run.failed")];
    assert!(
        !apply_to_run(&client, &cfg, None, &NoReadBack, "team-a", "uid-old", &old)
            .await
            .unwrap(),
        "dropped"
    );
    let (store, mut writer) = kube::runtime::reflector::store::<Run>();
    let new_run: Run = serde_json::from_value(run_with_uid("uid-new", Some(0))).unwrap();
    writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(new_run));
    let new = [event("uid-new", 1, "run.completed")];
    assert!(
        apply_to_run(
            &client,
            &cfg,
            Some(&store),
            &NoReadBack,
            "team-a",
            "uid-new",
            &new
        )
        .await
        .unwrap()
    );
    // A stale cache that still maps the old uid to r1 does not misroute either.
    let (stale, mut w) = kube::runtime::reflector::store::<Run>();
    let old_run: Run = serde_json::from_value(run_with_uid("uid-old", Some(3))).unwrap();
    w.apply_watcher_event(&kube::runtime::watcher::Event::Apply(old_run));
    assert!(
        !apply_to_run(
            &client,
            &cfg,
            Some(&stale),
            &NoReadBack,
            "team-a",
            "uid-old",
            &old
        )
        .await
        .unwrap()
    );
    server.await.unwrap();
}

/// Issue #14 item 8b: reconciles run concurrently, and the pod cache lags behind the pods
/// just created; the per-namespace limit must still be exact. Six snapshotted Runs reconciled
/// at once with a limit of 2 and an empty (ready) pod cache: exactly two worker pods are
/// created, the others are queued.
#[tokio::test]
async fn concurrent_starts_never_exceed_the_namespace_limit() {
    use kube::runtime::{reflector, watcher};
    let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let (store, mut writer) = reflector::store::<k8s_openapi::api::core::v1::Pod>();
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let mut cfg = OperatorConfig::default();
    cfg.runs.max_concurrent_per_namespace = 2;
    let ctx = Arc::new(Context {
        client: Client::new(svc, "default"),
        config: Arc::new(cfg),
        registry: Arc::new(NodeRegistry::builtin()),
        metrics: Metrics::default(),
        reporter: Reporter {
            controller: "openwop-operator".into(),
            instance: None,
        },
        now: fixed_now,
        worker_pods: Some(store),
        nats_copies: Default::default(),
        starts: Default::default(),
        jetstream: None,
    });
    let n = 6;
    let runs: Vec<Run> = (0..n)
        .map(|i| {
            serde_json::from_value(json!({
                "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
                "metadata": {"name": format!("r{i}"), "namespace": "team-a", "uid": format!("u{i}"),
                             "generation": 1, "finalizers": ["openwop.dev/cleanup"]},
                "spec": {"workflowRef": {"name": "triage"}},
                "status": {"phase": "pending", "runId": format!("u{i}"), "workflow": "triage",
                           "observedGeneration": 1,
                           "conditions": [{"type": "Ready", "status": "True", "reason": "Snapshotted",
                                           "message": "workflow snapshotted", "lastTransitionTime": "2025-06-15T15:00:00Z"}]}
            }))
            .unwrap()
        })
        .collect();
    let server = tokio::spawn(async move {
        let (mut created, mut queued) = (0, 0);
        while let Some((req, send)) = handle.next_request().await {
            let (m, path) = (req.method().clone(), req.uri().path().to_owned());
            let bytes = req.into_body().collect().await.unwrap().to_bytes();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            if m == Method::GET && path.ends_with("-snapshot") {
                let run = path
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .trim_end_matches("-snapshot");
                let uid = format!("u{}", &run[1..]);
                respond(
                    send,
                    200,
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("{run}-snapshot"), "namespace": "team-a",
                        "ownerReferences": [{"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
                                             "name": run, "uid": uid, "controller": true}]},
                    "data": {"snapshot.json": "{}"}}),
                );
            } else if m == Method::GET && path.contains("/serviceaccounts/") {
                respond(
                    send,
                    200,
                    json!({"apiVersion": "v1", "kind": "ServiceAccount",
                                          "metadata": {"name": "openwop-worker"}}),
                );
            } else if m == Method::GET {
                respond(send, 404, not_found());
            } else if m == Method::POST && path.ends_with("/pods") {
                created += 1;
                respond(send, 201, body);
            } else if m == Method::PATCH && path.ends_with("/status") {
                let c = body["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                if c.iter().any(|c| c["reason"] == "Queued") {
                    queued += 1;
                }
                respond(send, 200, run_echo());
            } else if m == Method::POST && path.ends_with("/events") {
                respond(send, 201, body);
            } else {
                panic!("unexpected request {m} {path}");
            }
        }
        (created, queued)
    });
    let all = runs
        .into_iter()
        .map(|r| reconcile_run(Arc::new(r), ctx.clone()));
    for r in futures::future::join_all(all).await {
        r.expect("reconcile");
    }
    drop(ctx);
    let (created, queued) = server.await.unwrap();
    assert_eq!(
        (created, queued),
        (2, n - 2),
        "worker pods created, runs queued"
    );
}

/// `[[[…1…]]]` 9,000 levels deep: the apiserver stores it, serde_json cannot decode it.
fn too_deep() -> String {
    format!("{}1{}", "[".repeat(9000), "]".repeat(9000))
}

#[tokio::test]
async fn a_run_too_deep_to_decode_is_failed_at_once_naming_the_limit() {
    let (ctx, mut handle) = context();
    // As the watch decodes it: from the apiserver's bytes.
    let text = format!(
        r#"{{"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {{"name": "r1", "namespace": "team-a", "uid": "ruid", "generation": 1,
                     "finalizers": ["openwop.dev/cleanup"]}},
        "spec": {{"workflowRef": {{"name": "triage"}}, "inputs": {{"x": {}}}}}}}"#,
        too_deep()
    );
    let deep: Run = serde_json::from_str(&text).expect("a deep Run decodes leniently");
    let server = tokio::spawn(async move {
        // No snapshot lookup, no Workflow read, no pod: the status write comes first.
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        let st = &body["status"];
        assert_eq!(st["phase"], "failed", "{st:#}");
        assert_eq!(st["error"]["code"], "input_too_deep");
        let msg = st["error"]["message"].as_str().unwrap();
        assert!(
            msg.starts_with("spec.inputs cannot be decoded: ")
                && msg.contains("nested deeper than 128 levels")
                && msg.contains("flatten the value"),
            "{msg}"
        );
        assert!(msg.len() < 600, "bounded: {msg}");
        for type_ in ["Ready", "Succeeded"] {
            let cond = st["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == type_)
                .expect("condition");
            assert_eq!(
                (&cond["status"], &cond["reason"]),
                (&json!("False"), &json!("InputTooDeep")),
                "{type_}"
            );
        }
        respond(send, 200, run_echo());
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::POST);
        assert_eq!(body["reason"], "InputTooDeep");
        assert_eq!(body["type"], "Warning");
        assert!(body["note"].as_str().unwrap().contains("128 levels"));
        respond(send, 201, body);
    });
    reconcile_run(Arc::new(deep), ctx).await.expect("reconcile");
    server.await.unwrap();
}

#[tokio::test]
async fn a_workflow_too_deep_to_decode_is_not_ready_naming_the_field() {
    let (ctx, mut handle) = context();
    let text = format!(
        r#"{{"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {{"name": "triage", "namespace": "team-a", "uid": "wuid", "generation": 2}},
        "spec": {{"id": "triage", "name": "Triage", "version": "1",
                 "nodes": [{{"id": "classify", "typeId": "core.identity", "settings": {{"x": {}}}}}]}}}}"#,
        too_deep()
    );
    let wf: Workflow = serde_json::from_str(&text).expect("a deep Workflow decodes leniently");
    let server = tokio::spawn(async move {
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        let cond = &body["status"]["conditions"][0];
        assert_eq!(cond["status"], "False");
        assert_eq!(cond["reason"], "WorkflowTooDeep");
        let msg = cond["message"].as_str().unwrap();
        assert!(
            msg.contains("spec.nodes[classify].settings cannot be decoded")
                && msg.contains("128 levels"),
            "{msg}"
        );
        respond(
            send,
            200,
            json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "triage", "namespace": "team-a"}, "spec": {"id": "triage", "name": "T", "version": "1", "nodes": []}}),
        );
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::POST);
        assert_eq!(body["reason"], "Invalid");
        respond(send, 201, body);
    });
    reconcile_workflow(Arc::new(wf), ctx)
        .await
        .expect("reconcile");
    server.await.unwrap();
}
