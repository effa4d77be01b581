//! Issue #25 pause/resume (G12) with `kubectl openwop pause|resume`: a paused run holds no
//! worker pod, and resumed it completes with the same nodes and outputs as the same run never
//! paused; its log is gapless and carries `run.paused` then `run.resumed {fromStatus: paused}`.

use super::*;

/// Workflow `name`: two in-pod delays (below the install's 2 s durable threshold) then a noop.
fn two_delays(name: &str) -> String {
    let delay = |id: &str| {
        json!({"id": id, "typeId": "core.delay",
               "inputs": {"delayMs": {"type": "variable", "variableName": "delayMs"}}})
    };
    serde_json::to_string(&json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": name},
        "spec": {"id": name, "name": name, "version": "1",
                 "variables": [{"name": "delayMs", "type": "number", "defaultValue": 1500}],
                 "nodes": [delay("first"), delay("second"), {"id": "after", "typeId": "core.flow.noop"}],
                 "edges": [{"id": "e1", "sourceNodeId": "first", "targetNodeId": "second"},
                           {"id": "e2", "sourceNodeId": "second", "targetNodeId": "after"}]}}))
    .unwrap()
}

fn run_of(name: &str, workflow: &str) -> String {
    serde_json::to_string(&json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": name},
        "spec": {"workflowRef": {"name": workflow}}}))
    .unwrap()
}

/// Each completed node with the keys of its outputs, in log order.
fn completed(evs: &[Value]) -> Vec<(String, Vec<String>)> {
    of_type(evs, "node.completed")
        .into_iter()
        .map(|e| {
            let keys = e["payload"]["outputs"]
                .as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            (e["nodeId"].as_str().unwrap_or_default().to_owned(), keys)
        })
        .collect()
}

#[tokio::test]
async fn a_paused_run_holds_no_pod_and_resumes_to_the_unpaused_outcome() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-pause").await;
    ok(apply(&c, &ns, &two_delays("naps")), "apply workflow");
    wait_workflow(&c, &ns, "naps", "True").await;
    ok(apply(&c, &ns, &run_of("plain", "naps")), "apply run");
    ok(apply(&c, &ns, &run_of("paused", "naps")), "apply run");
    wait_run(&c, &ns, "paused", "running", 60).await;

    // drain-current-node (the default): the delay in flight finishes, nothing else starts.
    ok(
        cli(&c, &["pause", "paused", "-n", &ns, "--reason", "journey"]),
        "kubectl openwop pause",
    );
    wait_run(&c, &ns, "paused", "paused", 60).await;
    no_worker_pods(&c, &ns, Duration::from_secs(30)).await;
    let evs = events(&c, &ns, "paused");
    let paused = of_type(&evs, "run.paused");
    assert_eq!(paused.len(), 1, "{:?}", types(&evs));
    assert_eq!(paused[0]["payload"]["drainPolicy"], "drain-current-node");
    assert_eq!(paused[0]["payload"]["reason"], "journey");
    assert_eq!(
        types(&evs).last().map(String::as_str),
        Some("run.paused"),
        "a drained run's last event is run.paused"
    );
    // Pausing again is refused with the status it found.
    let again = cli(&c, &["pause", "paused", "-n", &ns]);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already paused"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    ok(
        cli(&c, &["resume", "paused", "-n", &ns]),
        "kubectl openwop resume",
    );
    wait_run(&c, &ns, "paused", "completed", 90).await;
    wait_run(&c, &ns, "plain", "completed", 90).await;
    let resumed = events(&c, &ns, "paused");
    assert_gapless(&resumed);
    let plain = events(&c, &ns, "plain");
    assert_eq!(completed(&resumed), completed(&plain));
    assert_eq!(
        completed(&resumed)
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["first", "second", "after"]
    );
    let back = of_type(&resumed, "run.resumed");
    assert_eq!(back.len(), 1);
    assert_eq!(back[0]["payload"]["fromStatus"], "paused");
    let t = types(&resumed);
    let at = |ty: &str| t.iter().position(|x| x == ty).unwrap();
    assert!(at("run.paused") < at("run.resumed") && at("run.resumed") < at("run.completed"));
}
