//! The terminal event the operator appends when it ends a run itself: a mocked API server
//! (tower-test) and a real nats-server.

use std::sync::Arc;

use async_nats::jetstream;
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use kube::runtime::events::Reporter;
use openwop_crds::Run;
use openwop_nats::testing::NatsServer;
use openwop_operator::config::OperatorConfig;
use openwop_operator::controller::{Context, reconcile_run};
use openwop_operator::events::{JetStreamSlot, fold};
use openwop_operator::metrics::Metrics;
use openwop_protocol::events::event_id_for;
use openwop_protocol::run::ending::RUN_FAILED_STEP;
use openwop_protocol::run::subjects::events_subject;
use openwop_protocol::workflow_check::NodeRegistry;
use serde_json::{Value, json};
use tower_test::mock::{self, Handle, SendResponse};

type MockHandle = Handle<Request<Body>, Response<Body>>;

fn fixed_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_second(1_750_000_000).unwrap()
}

async fn nats_context() -> (Arc<Context>, MockHandle, jetstream::Context, NatsServer) {
    let nats = NatsServer::start();
    let js = jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let cfg = OperatorConfig::default();
    openwop_nats::stream::ensure_stream(&js, &cfg.stream_spec())
        .await
        .unwrap();
    let slot = JetStreamSlot::default();
    slot.set(js.clone());
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let ctx = Context {
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
        jetstream: Some(slot),
    };
    (Arc::new(ctx), handle, js, nats)
}

async fn next(handle: &mut MockHandle) -> (Method, String, Value, SendResponse<Response<Body>>) {
    let (req, send) = handle.next_request().await.expect("a request");
    let method = req.method().clone();
    let uri = req.uri().to_string();
    let bytes = req.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (method, uri, body, send)
}

fn respond(send: SendResponse<Response<Body>>, status: u16, body: Value) {
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
}

fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"})
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
                     "finalizers": ["openwop.dev/cleanup"]},
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

/// After the crash limit the operator appends `run.failed` once, after the worker's last
/// event and only when no worker can append any more; the projection accepts it; a second
/// reconcile (its status write lost) records the ending without appending again.
#[tokio::test]
async fn the_operator_ends_a_run_it_failed_with_run_failed_exactly_once() {
    let (ctx, mut handle, js, _nats) = nats_context().await;
    for (i, t) in ["run.started", "node.started", "log.appended"]
        .iter()
        .enumerate()
    {
        worker_event(&js, i as u64, t).await;
    }

    // The last worker pod is still running (e.g. terminating): nothing is appended yet.
    let c = ctx.clone();
    let server = tokio::spawn(async move {
        let (m, uri, _, send) = next(&mut handle).await;
        assert_eq!(
            (m, uri.as_str()),
            (Method::GET, "/api/v1/namespaces/team-a/pods/r1-w4")
        );
        respond(send, 200, owned_pod("Running"));
        handle
    });
    reconcile_run(Arc::new(failed_by_the_operator()), c)
        .await
        .unwrap();
    let mut handle = server.await.unwrap();
    assert_eq!(
        log(&js).await.len(),
        3,
        "no event while a worker may still append"
    );

    // The pod is gone: run.failed is appended at sequence 3 and recorded in the status.
    let c = ctx.clone();
    let server = tokio::spawn(async move {
        let (_, _, _, send) = next(&mut handle).await;
        respond(send, 404, not_found());
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        assert_eq!(
            body["status"]["terminalEvent"],
            event_id_for("ruid", RUN_FAILED_STEP)
        );
        respond(
            send,
            200,
            serde_json::to_value(failed_by_the_operator()).unwrap(),
        );
        handle
    });
    reconcile_run(Arc::new(failed_by_the_operator()), c)
        .await
        .unwrap();
    let mut handle = server.await.unwrap();
    let events = log(&js).await;
    assert_eq!(events.len(), 4);
    let end = &events[3];
    assert_eq!(
        (end["type"].as_str(), end["sequence"].as_u64()),
        (Some("run.failed"), Some(3))
    );
    assert_eq!(end["runId"], "ruid");
    assert_eq!(end["payload"]["error"]["code"], "worker_crashed");
    assert_eq!(end["eventId"], event_id_for("ruid", RUN_FAILED_STEP));

    // The event consumer's projection accepts the operator's own event: counters move, the
    // operator's terminal phase and error stay.
    let st = failed_by_the_operator().status.unwrap();
    let next_st = fold(&st, &events[3..]).expect("the event is applied");
    assert_eq!((next_st.last_sequence, next_st.events), (Some(3), Some(4)));
    assert_eq!(next_st.phase, st.phase);
    assert_eq!(next_st.error, st.error);

    // The status write was lost: the next reconcile finds the log ended and only records it.
    let server = tokio::spawn(async move {
        let (_, _, _, send) = next(&mut handle).await;
        respond(send, 404, not_found());
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        assert_eq!(
            body["status"]["terminalEvent"],
            event_id_for("ruid", RUN_FAILED_STEP)
        );
        respond(
            send,
            200,
            serde_json::to_value(failed_by_the_operator()).unwrap(),
        );
    });
    reconcile_run(Arc::new(failed_by_the_operator()), ctx)
        .await
        .unwrap();
    server.await.unwrap();
    assert_eq!(log(&js).await.len(), 4, "appended exactly once");
}

/// A log the worker already ended (here `run.completed` raced the operator's decision) gets
/// no second terminal event.
#[tokio::test]
async fn a_log_the_worker_ended_gets_no_second_terminal_event() {
    let (ctx, mut handle, js, _nats) = nats_context().await;
    worker_event(&js, 0, "run.started").await;
    worker_event(&js, 1, "run.failed").await;
    let server = tokio::spawn(async move {
        let (_, _, _, send) = next(&mut handle).await;
        respond(send, 200, owned_pod("Failed"));
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH);
        assert_eq!(body["status"]["terminalEvent"], "w1");
        respond(
            send,
            200,
            serde_json::to_value(failed_by_the_operator()).unwrap(),
        );
    });
    reconcile_run(Arc::new(failed_by_the_operator()), ctx)
        .await
        .unwrap();
    server.await.unwrap();
    assert_eq!(log(&js).await.len(), 2);
}

/// A run that never had a worker (refused snapshot) gets `run.failed` at sequence 0, so its
/// (otherwise empty) log ends too; a run whose log retention already removed gets nothing.
#[tokio::test]
async fn a_run_without_events_gets_run_failed_at_sequence_zero_unless_its_log_expired() {
    let (ctx, mut handle, js, _nats) = nats_context().await;
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
    let c = ctx.clone();
    let server = tokio::spawn(async move {
        let (m, _, body, send) = next(&mut handle).await;
        assert_eq!(m, Method::PATCH, "no pod to wait for");
        assert_eq!(
            body["status"]["terminalEvent"],
            event_id_for("ruid", RUN_FAILED_STEP)
        );
        respond(
            send,
            200,
            serde_json::to_value(failed_by_the_operator()).unwrap(),
        );
        handle
    });
    reconcile_run(Arc::new(never_started), c).await.unwrap();
    let mut handle = server.await.unwrap();
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
    let server = tokio::spawn(async move {
        let (m, _, _, send) = next(&mut handle).await;
        assert_eq!(m, Method::GET);
        respond(send, 404, not_found());
    });
    reconcile_run(Arc::new(expired), ctx).await.unwrap();
    server.await.unwrap();
    assert_eq!(
        log(&js).await.len(),
        1,
        "nothing appended to an expired log"
    );
}
