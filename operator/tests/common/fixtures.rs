//! The objects of the reconcile tests (Run `r1` and Workflow `triage` in namespace `team-a`)
//! and the requests reconciling them makes, by name.

use http::Method;
use openwop_crds::{Run, Workflow};
use serde_json::{Value, json};

use super::Expect;

/// The field manager the operator writes as.
const APPLY: &str = "?&force=true&fieldManager=openwop-operator";
/// Where `r1`'s status is written (a replace of the status subresource).
pub const RUN_STATUS: &str =
    "/apis/openwop.dev/v1alpha1/namespaces/team-a/runs/r1/status?&fieldManager=openwop-operator";

pub fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"})
}

/// Workflow `triage` (generation 2) with one node of type `type_id`.
pub fn workflow(type_id: &str) -> Workflow {
    serde_json::from_value(json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "triage", "namespace": "team-a", "uid": "wuid", "generation": 2},
        "spec": {"id": "triage", "name": "Triage", "version": "1",
                 "nodes": [{"id": "classify", "typeId": type_id}]}
    }))
    .unwrap()
}

/// [`workflow`] validated: `Ready`, for the generation it has (a run may start from it).
pub fn ready_workflow(type_id: &str) -> Value {
    let mut wf = serde_json::to_value(workflow(type_id)).unwrap();
    wf["status"] = json!({"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True",
        "reason": "Valid", "message": "definition is valid (1 nodes)",
        "lastTransitionTime": "2025-06-15T15:00:00Z"}]});
    wf
}

/// Run `r1` (uid `ruid`, generation 1, resourceVersion 41) of Workflow `triage`, with `status`.
pub fn run(status: Option<Value>) -> Run {
    let mut v = json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "r1", "namespace": "team-a", "uid": "ruid", "generation": 1,
                     "resourceVersion": "41"},
        "spec": {"workflowRef": {"name": "triage"}}
    });
    if let Some(s) = status {
        v["status"] = s;
    }
    serde_json::from_value(v).unwrap()
}

/// `r1` running in worker pod `r1-w1` (attempt 1), its workflow snapshotted.
pub fn running_run() -> Run {
    run(Some(json!({
        "phase": "running", "workerPod": "r1-w1", "attempts": 1, "runId": "ruid",
        "workflow": "triage", "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Snapshotted",
                        "message": "workflow snapshotted in ConfigMap r1-snapshot",
                        "lastTransitionTime": "2025-06-15T15:00:00Z"}]
    })))
}

/// What the API server answers to a Run status write.
pub fn run_echo() -> Value {
    json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": "r1"}, "spec": {"workflowRef": {"name": "triage"}}})
}

/// `r1`'s snapshot ConfigMap (owned by `r1`), with `cancel: true` when `cancel`.
pub fn snapshot_cm(cancel: bool) -> Value {
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

/// Pod `name` in phase `phase`, no container status.
pub fn pod(name: &str, phase: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "status": {"phase": phase}})
}

/// Worker pod `name` that ended in `phase` with `exit_code` and termination message `message`.
pub fn ended_pod(name: &str, phase: &str, exit_code: i32, message: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "status": {"phase": phase, "containerStatuses": [{
               "name": "worker", "ready": false, "restartCount": 0, "image": "w", "imageID": "",
               "state": {"terminated": {"exitCode": exit_code, "message": message}}}]}})
}

/// Worker pod `r1-w1` that ended with `exit_code` and a log tail as its termination message
/// (`FallbackToLogsOnError`).
pub fn ended_worker(exit_code: i32, tail: &str) -> Value {
    ended_pod("r1-w1", "Failed", exit_code, tail)
}

/// `[[[…1…]]]` 9,000 levels deep: the apiserver stores it, serde_json cannot decode it.
pub fn too_deep() -> String {
    format!("{}1{}", "[".repeat(9000), "]".repeat(9000))
}

// The requests, by name.

/// GET `r1`'s snapshot ConfigMap.
pub fn get_snapshot() -> Expect {
    Expect::new(
        Method::GET,
        "/api/v1/namespaces/team-a/configmaps/r1-snapshot",
    )
}

/// Server-side apply of `r1`'s snapshot ConfigMap.
pub fn apply_snapshot() -> Expect {
    Expect::new(
        Method::PATCH,
        format!("/api/v1/namespaces/team-a/configmaps/r1-snapshot{APPLY}"),
    )
}

/// Creation of `r1`'s first snapshot ConfigMap (answered with itself).
pub fn create_snapshot() -> Expect {
    Expect::new(
        Method::POST,
        "/api/v1/namespaces/team-a/configmaps?&fieldManager=openwop-operator",
    )
    .echo(201)
}

/// LIST the worker pods of team-a (the concurrency limit's count without a pod cache);
/// answers none.
pub fn list_worker_pods() -> Expect {
    Expect::new(
        Method::GET,
        "/api/v1/namespaces/team-a/pods?&labelSelector=app.kubernetes.io%2Fcomponent%3Dworker%2Capp.kubernetes.io%2Fmanaged-by%3Dopenwop-operator",
    )
    .reply(200, json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []}))
}

/// GET Workflow `name`.
pub fn get_workflow(name: &str) -> Expect {
    Expect::new(
        Method::GET,
        format!("/apis/openwop.dev/v1alpha1/namespaces/team-a/workflows/{name}"),
    )
}

/// Server-side apply of Workflow `name`'s status.
pub fn workflow_status(name: &str) -> Expect {
    Expect::new(
        Method::PATCH,
        format!("/apis/openwop.dev/v1alpha1/namespaces/team-a/workflows/{name}/status{APPLY}"),
    )
}

/// GET pod `name`.
pub fn get_pod(name: &str) -> Expect {
    Expect::new(
        Method::GET,
        format!("/api/v1/namespaces/team-a/pods/{name}"),
    )
}

/// DELETE pod `name`.
pub fn delete_pod(name: &str) -> Expect {
    Expect::new(
        Method::DELETE,
        format!("/api/v1/namespaces/team-a/pods/{name}?"),
    )
    .reply(200, pod(name, "Running"))
}

/// Creation of a pod (answered with itself).
pub fn create_pod() -> Expect {
    Expect::new(
        Method::POST,
        "/api/v1/namespaces/team-a/pods?&fieldManager=openwop-operator",
    )
    .echo(201)
}

/// GET the default worker ServiceAccount (it exists).
pub fn get_worker_service_account() -> Expect {
    Expect::new(
        Method::GET,
        "/api/v1/namespaces/team-a/serviceaccounts/openwop-worker",
    )
    .reply(
        200,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "openwop-worker"}}),
    )
}

/// The replace of `r1`'s status, under the read copy's resourceVersion; `check` reads the
/// written status.
pub fn run_status(check: impl FnOnce(&Value) + 'static) -> Expect {
    Expect::new(Method::PUT, RUN_STATUS)
        .body(move |b| {
            assert!(
                b["metadata"]["resourceVersion"].is_string(),
                "a status write without its precondition: {b:#}"
            );
            check(&b["status"])
        })
        .reply(200, run_echo())
}

/// A Kubernetes Event with `reason` (recorded: answered with itself).
pub fn event(reason: &'static str) -> Expect {
    Expect::new(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/team-a/events?",
    )
    .body(move |b| assert_eq!(b["reason"], reason, "{b:#}"))
    .echo(201)
}

/// A Kubernetes Event with `reason`, of `type_` (`Normal`, `Warning`), about a `kind`.
pub fn event_of(kind: &'static str, type_: &'static str, reason: &'static str) -> Expect {
    event(reason).body(move |b| {
        assert_eq!(b["type"], type_, "{b:#}");
        assert_eq!(b["regarding"]["kind"], kind, "{b:#}");
    })
}

/// The finalizer's removal from `r1`.
pub fn remove_finalizer() -> Expect {
    Expect::new(
        Method::PATCH,
        "/apis/openwop.dev/v1alpha1/namespaces/team-a/runs/r1?",
    )
    .body(|b| assert!(b.to_string().contains("finalizers"), "{b}"))
    .reply(200, run_echo())
}

/// The test clock as a Kubernetes time.
pub fn fixed_now_time() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(super::fixed_now())
}
