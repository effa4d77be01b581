//! The Run reconciler against a mocked API server — starting, observing the worker, crashes,
//! refusals, the namespace limit: the requests it makes, scenario by scenario (`common`).
//! `spec.cancel` and the finalizer are in `reconcile_cancel.rs`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::fixtures::{
    create_pod, create_snapshot, delete_pod, ended_worker, event, event_of, fixed_now_time,
    get_pod, get_snapshot, get_worker_service_account, get_workflow, list_worker_pods, not_found,
    pod, ready_workflow, run, run_echo, run_status, running_run, snapshot_cm, too_deep,
};
use common::{Expect, Scenario, TestContext};
use http::Method;
use kube::runtime::controller::Action;
use openwop_crds::Run;
use openwop_operator::config::OperatorConfig;
use openwop_operator::controller::{Context, reconcile_run};
use serde_json::{Value, json};

#[tokio::test]
async fn run_with_missing_workflow_waits_with_a_clear_condition() {
    let (ctx, mut api) = Context::test();
    let scenario = Scenario::new()
        .then(get_snapshot().not_found())
        .then(get_workflow("triage").not_found())
        .then(run_status(|st| {
            assert_eq!(st["phase"], "pending");
            let c = &st["conditions"][0];
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
        }));
    api.play(scenario, reconcile_run(Arc::new(run(None)), ctx))
        .await
        .expect("reconcile");
}

/// A new Run gets no finalizer (issue 27: its patch was one API request and one round trip
/// before every start; `controller::departed` purges a deleted Run's events instead): the
/// first request of its reconcile is the snapshot's, and its status write's precondition is
/// the applied copy's resourceVersion.
#[tokio::test]
async fn a_new_run_starts_without_a_finalizer() {
    let (ctx, mut api) = Context::test();
    let mut new_run = run(None);
    new_run.metadata.resource_version = Some("1".into());
    let scenario = Scenario::new()
        .then(get_snapshot().not_found())
        .then(get_workflow("triage").not_found())
        .then(
            run_status(|st| assert_eq!(st["phase"], "pending"))
                .body(|b| assert_eq!(b["metadata"]["resourceVersion"], "1", "{b}")),
        );
    api.play(scenario, reconcile_run(Arc::new(new_run), ctx))
        .await
        .expect("reconcile");
}

/// A Run being deleted without the finalizer of earlier releases (held by another
/// controller's finalizer) is left alone: no request at all.
#[tokio::test]
async fn a_run_being_deleted_is_left_to_the_garbage_collector() {
    let (ctx, mut api) = Context::test();
    let mut r = running_run();
    r.metadata.deletion_timestamp = Some(fixed_now_time());
    r.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let action = api
        .play(Scenario::new(), reconcile_run(Arc::new(r), ctx))
        .await
        .expect("reconcile");
    assert_eq!(action, Action::await_change());
}

/// A running worker's reconciles (one per change of its pod) read the pod only: the snapshot
/// it mounts exists, so no ConfigMap GET (issue 7: a round trip per reconcile at 200 runs).
#[tokio::test]
async fn a_running_worker_is_observed_without_reading_the_snapshot() {
    let (ctx, mut api) = Context::test();
    let scenario = Scenario::new().then(get_pod("r1-w1").reply(200, pod("r1-w1", "Running")));
    let action = api
        .play(scenario, reconcile_run(Arc::new(running_run()), ctx))
        .await
        .expect("reconcile");
    assert_eq!(action, Action::requeue(Duration::from_secs(60)));
}

#[tokio::test]
async fn a_worker_refusing_its_input_fails_the_run_at_once_quoting_why() {
    let (ctx, mut api) = Context::test();
    let tail = concat!(
        r#"{"level":"INFO","fields":{"message":"event log read"},"target":"w"}"#,
        "\n",
        r#"{"level":"ERROR","fields":{"message":"provider configuration","error":"provider 'openai-compatible' needs a base URL"},"target":"w"}"#
    );
    let scenario = Scenario::new()
        .then(get_pod("r1-w1").reply(200, ended_worker(2, tail)))
        .then(run_status(|st| {
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
        }))
        .then(delete_pod("r1-w1"))
        .then(event_of("Run", "Warning", "Failed"));
    api.play(scenario, reconcile_run(Arc::new(running_run()), ctx))
        .await
        .expect("reconcile");
}

#[tokio::test]
async fn a_crashed_worker_is_retried_and_its_last_error_quoted() {
    let (ctx, mut api) = Context::test();
    let tail = concat!(
        r#"{"level":"ERROR","fields":{"message":"worker crashed; the operator will retry","error":"event evt-1 not durable after 7 attempts"},"target":"w"}"#,
        "\n"
    );
    let scenario = Scenario::new()
        .then(get_pod("r1-w1").reply(200, ended_worker(1, tail)))
        .then(run_status(|st| {
            assert_eq!(st["failedAttempts"], 1, "{st:#}");
            assert_eq!(st["phase"], "running");
        }))
        .then(delete_pod("r1-w1"))
        .then(event("WorkerCrashed").body(|b| {
            let note = b["note"].as_str().unwrap();
            assert!(
                note.starts_with("worker exited with code 1 (worker crashed; the operator will retry: event evt-1 not durable after 7 attempts); retrying in"),
                "{note}"
            );
        }));
    api.play(scenario, reconcile_run(Arc::new(running_run()), ctx))
        .await
        .expect("reconcile");
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
    let (ctx, mut api) = Context::test();
    let scenario = Scenario::new()
        .then(get_pod("r1-w1").reply(200, ended_worker(137, "")))
        .then(run_status(|st| {
            assert_eq!(st["phase"], "running", "retried, not failed: {st:#}");
            assert_eq!(
                (
                    st["failedAttempts"].as_u64(),
                    st["failedAtSequence"].as_u64()
                ),
                (Some(1), Some(9))
            );
        }))
        .then(delete_pod("r1-w1"))
        .then(event("WorkerCrashed").body(|b| {
            assert!(
                b["note"]
                    .as_str()
                    .unwrap()
                    .contains("failure 1 of 3 without progress"),
                "{b:#}"
            );
        }));
    api.play(
        scenario,
        reconcile_run(Arc::new(crashed_again(9, 4, 3)), ctx),
    )
    .await
    .expect("reconcile");
}

/// Without new events since the last counted failure, the 4th consecutive crash exhausts the
/// budget and names it.
#[tokio::test]
async fn consecutive_crashes_without_progress_exhaust_the_budget() {
    let (ctx, mut api) = Context::test();
    let scenario = Scenario::new()
        .then(get_pod("r1-w1").reply(200, ended_worker(137, "")))
        .then(run_status(|st| {
            assert_eq!(st["phase"], "failed", "{st:#}");
            assert_eq!(st["failedAttempts"], 4);
            assert_eq!(st["error"]["code"], "worker_crashed");
            let msg = st["error"]["message"].as_str().unwrap();
            assert!(
                msg.ends_with("4 consecutive worker failures without progress (limit 3, chart value runs.maxWorkerRetries)"),
                "{msg}"
            );
        }))
        .then(delete_pod("r1-w1"))
        .then(event_of("Run", "Warning", "Failed"));
    api.play(
        scenario,
        reconcile_run(Arc::new(crashed_again(9, 9, 3)), ctx),
    )
    .await
    .expect("reconcile");
}

/// A run that completes after crashes shows no stale failure count.
#[tokio::test]
async fn a_completed_run_clears_its_failure_count() {
    let (ctx, mut api) = Context::test();
    let mut r = crashed_again(9, 9, 2);
    r.status.as_mut().unwrap().phase = Some(openwop_crds::RunPhase::Completed);
    r.status.as_mut().unwrap().worker_pod = None;
    let scenario = Scenario::new()
        .then(run_status(|st| {
            assert_eq!(st["phase"], "completed");
            assert!(
                st.get("failedAttempts").is_none_or(Value::is_null),
                "{st:#}"
            );
            assert!(
                st.get("failedAtSequence").is_none_or(Value::is_null),
                "{st:#}"
            );
        }))
        .then(event_of("Run", "Normal", "Completed").body(|b| {
            assert_eq!(b["note"], "the run completed");
        }));
    api.play(scenario, reconcile_run(Arc::new(r), ctx))
        .await
        .expect("reconcile");
}

/// A run the event stream ended `failed` without naming an error is reported `Failed`, never
/// `Completed` (the summary path once reported it so).
#[tokio::test]
async fn a_worker_summary_failed_without_an_error_is_reported_failed() {
    let (ctx, mut api) = Context::test();
    let summary = r#"{"phase":"failed","events":3,"lastSequence":2}"#;
    let scenario = Scenario::new()
        .then(get_pod("r1-w1").reply(
            200,
            common::fixtures::ended_pod("r1-w1", "Failed", 0, summary),
        ))
        .then(run_status(|st| {
            assert_eq!(st["phase"], "failed");
            let c = &st["conditions"][1];
            assert_eq!(
                (&c["type"], &c["reason"]),
                (&json!("Succeeded"), &json!("Failed"))
            );
        }))
        .then(event_of("Run", "Warning", "Failed").body(|b| {
            assert_eq!(b["note"], "the run failed");
        }));
    api.play(scenario, reconcile_run(Arc::new(running_run()), ctx))
        .await
        .expect("reconcile");
}

#[tokio::test]
async fn a_run_too_deep_to_decode_is_failed_at_once_naming_the_limit() {
    let (ctx, mut api) = Context::test();
    // As the watch decodes it: from the apiserver's bytes.
    let text = format!(
        r#"{{"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {{"name": "r1", "namespace": "team-a", "uid": "ruid", "generation": 1,
                     "resourceVersion": "41", "finalizers": ["openwop.dev/cleanup"]}},
        "spec": {{"workflowRef": {{"name": "triage"}}, "inputs": {{"x": {}}}}}}}"#,
        too_deep()
    );
    let deep: Run = serde_json::from_str(&text).expect("a deep Run decodes leniently");
    // No snapshot lookup, no Workflow read, no pod: the status write comes first.
    let scenario = Scenario::new()
        .then(run_status(|st| {
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
        }))
        .then(event_of("Run", "Warning", "InputTooDeep").body(|b| {
            assert!(b["note"].as_str().unwrap().contains("128 levels"));
        }));
    api.play(scenario, reconcile_run(Arc::new(deep), ctx))
        .await
        .expect("reconcile");
}

/// `n` Runs `r0`… of team-a, snapshotted and waiting for their first worker.
fn snapshotted_runs(n: usize) -> Vec<Run> {
    (0..n)
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
        .collect()
}

/// The snapshot ConfigMap a `GET …/configmaps/rN-snapshot` of [`snapshotted_runs`] answers.
fn snapshot_of(path: &str) -> Value {
    let run = path
        .rsplit('/')
        .next()
        .unwrap()
        .trim_end_matches("-snapshot");
    let uid = format!("u{}", &run[1..]);
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{run}-snapshot"), "namespace": "team-a",
            "ownerReferences": [{"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
                                 "name": run, "uid": uid, "controller": true}]},
        "data": {"snapshot.json": "{}"}})
}

/// A pod cache that is ready and holds no pod (it lags behind the pods just created).
fn empty_pod_cache() -> kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Pod> {
    use kube::runtime::{reflector, watcher};
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::InitDone);
    store
}

/// Reconciles `n` snapshotted Runs at once with `cfg` and an empty (ready) pod cache, against
/// a fake API server that answers what their starts send and panics at anything else. The
/// worker ServiceAccount exists unless `account_missing` (then its apply is answered); the
/// NATS credentials copy is answered only when `cfg` configures credentials. Returns the
/// worker pods created and the requests `counted` picked out (it sees every request first and
/// may check its body).
async fn starts_at_once(
    cfg: OperatorConfig,
    n: usize,
    account_missing: bool,
    counted: impl Fn(&Method, &str, &Value) -> bool + Send + 'static,
) -> (usize, usize) {
    let store = empty_pod_cache();
    let credentials = !cfg.nats_credentials.dir.is_empty();
    let (ctx, api) = Context::test_with(cfg, |c| c.caches.pods = Some(store));
    let server = api.answer_all((0, 0), move |(created, picked), m, path, body| {
        if counted(m, path, &body) {
            *picked += 1;
        }
        if *m == Method::GET && path.ends_with("-snapshot") {
            (200, snapshot_of(path))
        } else if *m == Method::GET && path.contains("/serviceaccounts/") && !account_missing {
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": "openwop-worker"}});
            (200, sa)
        } else if *m == Method::GET {
            // Nothing else is there (with `account_missing`, not the account either).
            (404, not_found())
        } else if *m == Method::PATCH
            && ((account_missing && path.contains("/serviceaccounts/openwop-worker"))
                || (credentials && path.contains("/secrets/openwop-nats-credentials")))
        {
            (200, body)
        } else if *m == Method::POST && path.ends_with("/pods") {
            *created += 1;
            (201, body)
        } else if *m == Method::PUT && path.ends_with("/status") {
            (200, run_echo())
        } else if *m == Method::POST && path.ends_with("/events") {
            (201, body)
        } else {
            panic!("unexpected request {m} {path}");
        }
    });
    let all = snapshotted_runs(n)
        .into_iter()
        .map(|r| reconcile_run(Arc::new(r), ctx.clone()));
    for r in futures::future::join_all(all).await {
        r.expect("reconcile");
    }
    drop(ctx);
    server.await.unwrap()
}

/// Issue #14 item 8b: reconciles run concurrently, and the pod cache lags behind the pods
/// just created; the per-namespace limit must still be exact. Six snapshotted Runs reconciled
/// at once with a limit of 2 and an empty (ready) pod cache: exactly two worker pods are
/// created, the others are queued.
#[tokio::test]
async fn concurrent_starts_never_exceed_the_namespace_limit() {
    let mut cfg = OperatorConfig::default();
    cfg.runs.max_concurrent_per_namespace = 2;
    let n = 6;
    let queued = |m: &Method, path: &str, body: &Value| {
        *m == Method::PUT
            && path.ends_with("/status")
            && body["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["reason"] == "Queued"))
    };
    assert_eq!(
        starts_at_once(cfg, n, false, queued).await,
        (2, n - 2),
        "worker pods created, runs queued"
    );
}

/// The first starts in a new namespace run at once and all find the worker ServiceAccount
/// missing (the cache shows it a moment after the apply): they share one apply, not one each
/// (the 1,000-Runs bench saw up to 32).
#[tokio::test]
async fn concurrent_first_starts_in_a_namespace_apply_the_worker_account_once() {
    let n = 6;
    let applied = |m: &Method, path: &str, _: &Value| {
        *m == Method::PATCH && path.contains("/serviceaccounts/openwop-worker")
    };
    assert_eq!(
        starts_at_once(OperatorConfig::default(), n, true, applied).await,
        (n, 1),
        "worker pods created, ServiceAccount applies"
    );
}

/// The same for the copy of the operator's NATS credentials (`natsCredentials`): the
/// concurrent first starts in a namespace make one apply of the Secret, not one each.
#[tokio::test]
async fn concurrent_first_starts_in_a_namespace_apply_the_nats_credentials_once() {
    let creds = tempfile::tempdir().unwrap();
    std::fs::write(creds.path().join("token"), "tok-123").unwrap();
    let mut cfg = OperatorConfig::default();
    cfg.nats_credentials.dir = creds.path().display().to_string();
    let n = 6;
    let applied = |m: &Method, path: &str, body: &Value| {
        let secret = *m == Method::PATCH && path.contains("/secrets/openwop-nats-credentials");
        if secret {
            assert_eq!(body["data"]["token"], "dG9rLTEyMw==", "{body}");
        }
        secret
    };
    assert_eq!(
        starts_at_once(cfg, n, false, applied).await,
        (n, 1),
        "worker pods created, Secret applies"
    );
}

/// A waiting run answered while its worker start backs off (a crash set `retryAfter`): the
/// answer is left unconsumed until the backoff ends. Consuming it first (recording it as
/// answered, dropping the pending interrupt) and then waiting left the run `waiting-input`
/// with nothing pending and no worker for ever: no later reconcile found a new answer.
#[tokio::test]
async fn an_answer_during_a_backoff_is_consumed_only_when_the_worker_starts() {
    let (ctx, mut api) = Context::test();
    // 1_750_000_000 is the test clock; the backoff ends 30 s later.
    let mut r = run(Some(json!({
        "phase": "waiting-input", "attempts": 1, "failedAttempts": 1, "runId": "ruid",
        "workflow": "triage", "observedGeneration": 1,
        "retryAfter": "2025-06-15T15:07:10Z",
        "pendingInterrupts": [{"interruptId": "i1", "kind": "clarification", "nodeId": "ask",
                               "questions": [{"id": "q1", "question": "which?"}]}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "Snapshotted",
                        "message": "workflow snapshotted in ConfigMap r1-snapshot",
                        "lastTransitionTime": "2025-06-15T15:00:00Z"}]
    })));
    r.spec.answers = vec![
        serde_json::from_value(json!({"interruptId": "i1", "value": {"q1": "this"}})).unwrap(),
    ];
    // The snapshot is read; nothing is written while the backoff runs.
    let scenario = Scenario::new().then(get_snapshot().reply(200, snapshot_cm(false)));
    let action = api
        .play(scenario, reconcile_run(Arc::new(r), ctx))
        .await
        .expect("reconcile");
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));
}

/// Issue #27: the snapshot cache holds metadata only. A snapshotted run without a worker reads
/// from it whether its snapshot exists, its owner and the Workflow it froze (the
/// `openwop.dev/snapshot-workflow` annotation): the snapshot itself is not fetched, and a run
/// that refers to its Workflow by id still names the frozen one.
#[tokio::test]
async fn a_start_reads_the_snapshot_metadata_from_the_cache_without_a_get() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PartialObjectMeta;
    use kube::runtime::{reflector, watcher};
    let mut run = snapshotted_runs(1).remove(0);
    run.spec.workflow_ref = serde_json::from_value(json!({"id": "triage-id"})).unwrap();
    run.status.as_mut().unwrap().workflow = None;
    let mut meta =
        snapshot_of("/api/v1/namespaces/team-a/configmaps/r0-snapshot")["metadata"].clone();
    meta["annotations"] = json!({openwop_crds::names::ANNOTATION_SNAPSHOT_WORKFLOW: "triage"});
    let cached: PartialObjectMeta<ConfigMap> =
        serde_json::from_value(json!({"metadata": meta})).unwrap();
    let (snapshots, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitApply(cached));
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let (ctx, api) = Context::test_with(OperatorConfig::default(), |c| {
        c.caches.pods = Some(empty_pod_cache());
        c.caches.snapshots = Some(snapshots);
    });
    // (GETs of the snapshot ConfigMap, worker pods created, the Workflow the status names)
    let server = api.answer_all((0, 0, None), |(gets, created, workflow), m, path, body| {
        if *m == Method::GET && path.contains("/configmaps/") {
            *gets += 1;
            (200, snapshot_of(path))
        } else if *m == Method::GET && path.contains("/serviceaccounts/") {
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": "openwop-worker"}});
            (200, sa)
        } else if *m == Method::GET {
            (404, not_found())
        } else if *m == Method::POST && path.ends_with("/pods") {
            *created += 1;
            (201, body)
        } else if *m == Method::PUT && path.ends_with("/status") {
            *workflow = body["status"]["workflow"].as_str().map(str::to_owned);
            (200, run_echo())
        } else if *m == Method::POST && path.ends_with("/events") {
            (201, body)
        } else {
            panic!("unexpected request {m} {path}");
        }
    });
    reconcile_run(Arc::new(run), ctx.clone())
        .await
        .expect("reconcile");
    drop(ctx);
    assert_eq!(
        server.await.unwrap(),
        (0, 1, Some("triage".to_owned())),
        "snapshot GETs, worker pods created, the Workflow named"
    );
}

/// What a new Run's first start reads before it writes: no snapshot yet, its Workflow (valid),
/// the namespace's worker pods (none), the worker ServiceAccount.
fn first_start() -> Scenario {
    Scenario::new()
        .then(get_snapshot().not_found())
        .then(get_workflow("triage").reply(200, ready_workflow("core.identity")))
        .then(list_worker_pods())
        .then(get_worker_service_account())
}

/// A `Status` failure answer.
fn failure(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
           "code": code, "message": format!("{reason} (test)")})
}

/// Asserts that written status `st` has condition `type_` with `status` and `reason`.
fn assert_condition(st: &Value, type_: &str, status: &str, reason: &str) {
    let found = st["conditions"].as_array().unwrap().iter().any(|c| {
        (&c["type"], &c["status"], &c["reason"]) == (&json!(type_), &json!(status), &json!(reason))
    });
    assert!(
        found,
        "no {type_}={status} ({reason}) in {:#}",
        st["conditions"]
    );
}

/// Issue #27: a run's first start creates its snapshot and its worker pod together — one
/// round trip, not two, while the start holds its reconcile slot — and then writes the status
/// and one Event naming both.
#[tokio::test]
async fn a_first_start_creates_its_snapshot_and_its_worker_pod_together() {
    let (ctx, mut api) = Context::test();
    let scenario = first_start()
        .together(
            create_snapshot().body(|cm| {
                let meta = &cm["metadata"];
                assert_eq!(meta["name"], "r1-snapshot", "{cm}");
                assert_eq!(meta["ownerReferences"][0]["uid"], "ruid", "{cm}");
                assert_eq!(
                    meta["annotations"][openwop_crds::names::ANNOTATION_SNAPSHOT_WORKFLOW],
                    "triage"
                );
                assert!(cm["data"]["snapshot.json"].is_string(), "{cm}");
            }),
            create_pod().body(|p| {
                assert_eq!(p["metadata"]["name"], "r1-w1");
                let volumes = p["spec"]["volumes"].as_array().unwrap();
                assert!(
                    volumes
                        .iter()
                        .any(|v| v["configMap"]["name"] == "r1-snapshot"),
                    "the pod mounts its snapshot: {p}"
                );
            }),
        )
        .then(run_status(|st| {
            assert_eq!(
                (&st["phase"], &st["workerPod"], &st["attempts"]),
                (&json!("running"), &json!("r1-w1"), &json!(1))
            );
            assert_condition(st, "Ready", "True", "Snapshotted");
            assert_condition(st, "Scheduled", "True", "WorkerStarted");
        }))
        .then(event("WorkerStarted").body(|b| {
            assert_eq!(
                b["note"],
                "workflow triage (generation 2) snapshotted in ConfigMap r1-snapshot; started worker pod r1-w1 (attempt 1)"
            );
        }));
    api.play(scenario, reconcile_run(Arc::new(run(None)), ctx))
        .await
        .expect("reconcile");
}

/// A first start whose snapshot cannot be written deletes the pod created with it (it would
/// hold a worker slot and never start) and writes nothing: the error retries the start.
#[tokio::test]
async fn a_first_start_whose_snapshot_fails_deletes_its_pod_and_writes_nothing() {
    let (ctx, mut api) = Context::test();
    let scenario = first_start()
        .together(
            create_snapshot().reply(500, failure(500, "InternalError")),
            create_pod(),
        )
        .then(delete_pod("r1-w1"));
    let err = api
        .play(scenario, reconcile_run(Arc::new(run(None)), ctx))
        .await
        .expect_err("the snapshot's error");
    assert!(!err.is_conflict(), "{err}");
    assert!(err.to_string().contains("InternalError"), "{err}");
}

/// The snapshot cache may not show yet the snapshot a deleted Run of the same name left: its
/// create answers 409. That ConfigMap is deleted, and so is the pod created with the
/// snapshot (it could mount the old one); the 409 retries the start shortly, nothing written.
#[tokio::test]
async fn a_deleted_runs_snapshot_met_at_a_first_start_is_removed_with_the_new_pod() {
    let (ctx, mut api) = Context::test();
    let mut old = snapshot_cm(false);
    old["metadata"]["ownerReferences"][0]["uid"] = json!("old-uid");
    old["metadata"]["labels"] = json!({"app.kubernetes.io/component": "worker",
                                       "app.kubernetes.io/managed-by": "openwop-operator"});
    let scenario = first_start()
        .together(
            create_snapshot().reply(409, failure(409, "AlreadyExists")),
            create_pod(),
        )
        .then(get_snapshot().reply(200, old))
        .then(
            Expect::new(
                Method::DELETE,
                "/api/v1/namespaces/team-a/configmaps/r1-snapshot?",
            )
            .reply(200, snapshot_cm(false)),
        )
        .then(delete_pod("r1-w1"));
    let err = api
        .play(scenario, reconcile_run(Arc::new(run(None)), ctx))
        .await
        .expect_err("the create's 409");
    assert!(err.is_conflict(), "retried shortly as a conflict: {err}");
}

/// A snapshot this run already has (an earlier start whose status write was lost, not yet in
/// the cache) is the run's: the start goes on with it.
#[tokio::test]
async fn a_first_start_adopts_its_own_snapshot_from_a_lost_attempt() {
    let (ctx, mut api) = Context::test();
    let scenario = first_start()
        .together(
            create_snapshot().reply(409, failure(409, "AlreadyExists")),
            create_pod(),
        )
        .then(get_snapshot().reply(200, snapshot_cm(false)))
        .then(run_status(|st| {
            assert_eq!(
                (&st["phase"], &st["workerPod"]),
                (&json!("running"), &json!("r1-w1"))
            );
        }))
        .then(event("WorkerStarted"));
    api.play(scenario, reconcile_run(Arc::new(run(None)), ctx))
        .await
        .expect("reconcile");
}

/// A first start that finds the namespace's worker slots taken writes its snapshot alone and
/// queues: the run is snapshotted while it waits (the Workflow it runs is fixed at apply).
#[tokio::test]
async fn a_queued_first_start_writes_its_snapshot_alone() {
    let mut cfg = OperatorConfig::default();
    cfg.runs.max_concurrent_per_namespace = 1;
    let (ctx, mut api) = Context::test_with(cfg, |_| {});
    let mut busy = pod("other-w1", "Running");
    busy["metadata"]["labels"] = json!({"app.kubernetes.io/component": "worker",
                                        "app.kubernetes.io/managed-by": "openwop-operator"});
    let scenario = Scenario::new()
        .then(get_snapshot().not_found())
        .then(get_workflow("triage").reply(200, ready_workflow("core.identity")))
        .then(list_worker_pods().reply(
            200,
            json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [busy]}),
        ))
        .then(create_snapshot())
        .then(run_status(|st| {
            assert_eq!(st["phase"], "pending");
            assert!(st["workerPod"].is_null(), "{st}");
            assert_condition(st, "Ready", "True", "Snapshotted");
            assert_condition(st, "Scheduled", "False", "Queued");
        }))
        .then(event("Snapshotted"));
    let action = api
        .play(scenario, reconcile_run(Arc::new(run(None)), ctx))
        .await
        .expect("reconcile");
    assert_eq!(action, Action::requeue(Duration::from_secs(15)));
}

/// The run's own worker pod of the same attempt still being deleted (discarded with a failed
/// snapshot write) is not adopted as its worker: the start waits until it is gone.
#[tokio::test]
async fn a_start_does_not_adopt_its_own_pod_being_deleted() {
    let (ctx, mut api) = Context::test();
    let mut leaving = pod("r1-w1", "Pending");
    leaving["metadata"]["ownerReferences"] = json!([{"apiVersion": "openwop.dev/v1alpha1",
        "kind": "Run", "name": "r1", "uid": "ruid", "controller": true}]);
    leaving["metadata"]["deletionTimestamp"] = json!("2025-06-15T15:06:30Z");
    let scenario = first_start()
        .together(
            create_snapshot(),
            create_pod().reply(409, failure(409, "AlreadyExists")),
        )
        .then(get_pod("r1-w1").reply(200, leaving))
        .then(run_status(|st| {
            assert_eq!(st["phase"], "pending");
            assert!(st["workerPod"].is_null(), "{st}");
            assert_condition(st, "Scheduled", "False", "PreviousRunTerminating");
        }))
        .then(event("Snapshotted"));
    let action = api
        .play(scenario, reconcile_run(Arc::new(run(None)), ctx))
        .await
        .expect("reconcile");
    assert_eq!(action, Action::requeue(Duration::from_secs(2)));
}

/// A run whose first status write was lost while the event consumer folded its worker's
/// events (here: waiting for an approval) has no snapshot in the cache and never had a worker
/// recorded, yet it is not a first start: its snapshot is applied alone and it keeps waiting
/// (a start would overwrite `waiting-approval` with `running`).
#[tokio::test]
async fn a_waiting_run_without_a_recorded_snapshot_is_not_started_again() {
    let (ctx, mut api) = Context::test();
    let waiting = run(Some(json!({
        "phase": "waiting-approval", "runId": "ruid", "observedGeneration": 1,
        "currentNode": "gate",
        "pendingInterrupts": [{"interruptId": "i1", "kind": "approval", "nodeId": "gate"}]
    })));
    let scenario = Scenario::new()
        .then(get_snapshot().not_found())
        .then(get_workflow("triage").reply(200, ready_workflow("core.identity")))
        .then(common::fixtures::apply_snapshot().echo(200))
        .then(run_status(|st| {
            assert_eq!(st["phase"], "waiting-approval");
            assert!(st["workerPod"].is_null(), "{st}");
            assert_condition(st, "Ready", "True", "Snapshotted");
        }))
        .then(event("Snapshotted"));
    api.play(scenario, reconcile_run(Arc::new(waiting), ctx))
        .await
        .expect("reconcile");
}
