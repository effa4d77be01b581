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

#[tokio::test]
async fn cancel_deletes_the_worker_and_records_cancelled() {
    let (ctx, mut handle) = context();
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
        assert!(body["status"].get("workerPod").is_none());
        assert_eq!(body["status"]["completionTime"], "2025-06-15T15:06:40Z");
        let c = &body["status"]["conditions"][0];
        assert_eq!(
            (c["type"].as_str(), c["reason"].as_str()),
            (Some("Succeeded"), Some("Cancelled"))
        );
        respond(
            send,
            200,
            json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": "r1"}, "spec": {"workflowRef": {"name": "triage"}}}),
        );
        let (m, uri, body, send) = next(&mut handle).await;
        assert_eq!(
            (m, uri.as_str()),
            (
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/team-a/events?"
            )
        );
        assert_eq!(body["reason"], "Cancelled");
        respond(send, 201, body);
    });
    reconcile_run(Arc::new(r), ctx).await.expect("reconcile");
    server.await.unwrap();
}
