//! The Workflow reconciler against a mocked API server: the requests it makes, scenario by
//! scenario (`common`).

mod common;

use std::sync::Arc;

use common::fixtures::{event_of, too_deep, workflow, workflow_status};
use common::{Scenario, TestContext};
use openwop_crds::Workflow;
use openwop_operator::controller::{Context, reconcile_workflow};
use serde_json::json;

#[tokio::test]
async fn invalid_workflow_gets_ready_false_naming_node_and_an_event() {
    let (ctx, mut api) = Context::test();
    let wf = Arc::new(workflow("core.unknown"));
    let echo = serde_json::to_value(wf.as_ref()).unwrap();
    let scenario = Scenario::new()
        .then(
            workflow_status("triage")
                .body(|body| {
                    let cond = &body["status"]["conditions"][0];
                    assert_eq!(cond["type"], "Ready");
                    assert_eq!(cond["status"], "False");
                    assert_eq!(cond["reason"], "UnknownTypeId");
                    let msg = cond["message"].as_str().unwrap();
                    assert!(
                        msg.contains(
                            "node \"classify\" (/nodes/0/typeId): unknown typeId \"core.unknown\""
                        ),
                        "{msg}"
                    );
                    assert_eq!(body["status"]["observedGeneration"], 2);
                })
                .reply(200, echo),
        )
        .then(event_of("Workflow", "Warning", "Invalid"));
    api.play(scenario, reconcile_workflow(wf, ctx))
        .await
        .expect("reconcile");
}

#[tokio::test]
async fn valid_workflow_with_unchanged_status_makes_no_request() {
    let (ctx, mut api) = Context::test();
    let mut wf = workflow("core.identity");
    wf.status = Some(serde_json::from_value(json!({
        "observedGeneration": 2, "nodeCount": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Valid", "message": "definition is valid (1 nodes)",
                        "observedGeneration": 2, "lastTransitionTime": "2025-06-15T15:06:40Z"}]
    })).unwrap());
    api.play(Scenario::new(), reconcile_workflow(Arc::new(wf), ctx))
        .await
        .expect("reconcile");
}

#[tokio::test]
async fn a_workflow_too_deep_to_decode_is_not_ready_naming_the_field() {
    let (ctx, mut api) = Context::test();
    let text = format!(
        r#"{{"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {{"name": "triage", "namespace": "team-a", "uid": "wuid", "generation": 2}},
        "spec": {{"id": "triage", "name": "Triage", "version": "1",
                 "nodes": [{{"id": "classify", "typeId": "core.identity", "settings": {{"x": {}}}}}]}}}}"#,
        too_deep()
    );
    let wf: Workflow = serde_json::from_str(&text).expect("a deep Workflow decodes leniently");
    let scenario = Scenario::new()
        .then(
            workflow_status("triage")
                .body(|body| {
                    let cond = &body["status"]["conditions"][0];
                    assert_eq!(cond["status"], "False");
                    assert_eq!(cond["reason"], "WorkflowTooDeep");
                    let msg = cond["message"].as_str().unwrap();
                    assert!(
                        msg.contains("spec.nodes[classify].settings cannot be decoded")
                            && msg.contains("128 levels"),
                        "{msg}"
                    );
                })
                .reply(
                    200,
                    json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
                    "metadata": {"name": "triage", "namespace": "team-a"}, "spec": {"id": "triage", "name": "T", "version": "1", "nodes": []}}),
                ),
        )
        .then(event_of("Workflow", "Warning", "Invalid"));
    api.play(scenario, reconcile_workflow(Arc::new(wf), ctx))
        .await
        .expect("reconcile");
}
