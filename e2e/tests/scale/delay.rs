//! Issue #24 figure: how late a durable delay wakes. 20 Runs of a 4 s `core.delay` (above the
//! install's 2 s `runs.durableWaitThresholdMs`, e2e/helm/mini-cluster-values.yaml) at once:
//! each records its `wakeAt`, its worker exits, and the operator starts a worker at the wake
//! time (less its 1 s start-up lead). Lateness = the delay's `node.completed` timestamp minus
//! the recorded `wakeAt`; prints p50 / p99 / max.

use super::*;

const RUNS: usize = 20;

pub(super) async fn delay_wake_lateness(c: &Cluster) {
    let ns = namespace(&c.client, "scale-delay").await;
    let wf = json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "nap", "labels": {LABEL_INSTANCE: INSTANCE}},
        "spec": {"id": "nap", "name": "nap", "version": "1",
                 "nodes": [{"id": "wait", "typeId": "core.delay",
                            "inputs": {"delayMs": {"type": "static", "value": 4000}}}]}});
    let dyn_api = |kind: &str| -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("openwop.dev", "v1alpha1", kind);
        Api::namespaced_with(c.client.clone(), &ns, &ApiResource::from_gvk(&gvk))
    };
    let (wfs, runs) = (dyn_api("Workflow"), dyn_api("Run"));
    let pp = PostParams::default();
    wfs.create(&pp, &serde_json::from_value(wf).unwrap())
        .await
        .expect("create workflow nap");
    wait_workflow_ready(&wfs, "nap").await;
    for i in 0..RUNS {
        let run = json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": format!("nap{i:02}"), "labels": {LABEL_INSTANCE: INSTANCE}},
            "spec": {"workflowRef": {"name": "nap"}}});
        runs.create(&pp, &serde_json::from_value(run).unwrap())
            .await
            .expect("create Run");
    }
    wait_for(Duration::from_secs(300), "20 delay Runs completed", || {
        let runs = runs.clone();
        async move {
            let items = runs.list(&ListParams::default()).await.ok()?.items;
            let done = items
                .iter()
                .filter(|r| r.data["status"]["phase"] == "completed")
                .count();
            assert!(
                items.iter().all(|r| r.data["status"]["phase"] != "failed"),
                "a delay run failed"
            );
            (done == RUNS).then_some(())
        }
    })
    .await;
    let cli = target_bin("debug", "kubectl-openwop");
    let mut late = Vec::new();
    let mut started = Vec::new();
    for i in 0..RUNS {
        let name = format!("nap{i:02}");
        let out = ok(
            run_cmd(
                c,
                &cli,
                &["events", &name, "-n", &ns, "--json", "--no-reasoning"],
            ),
            "kubectl openwop events",
        );
        let evs: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["message"].clone())
            .collect();
        let ts = |v: &Value| v.as_str().unwrap().parse::<Timestamp>().unwrap();
        let wake = evs
            .iter()
            .find_map(|e| e["payload"]["fields"]["timer"].get("wakeAt"))
            .map(ts)
            .expect("a recorded timer");
        let done = evs
            .iter()
            .find(|e| e["type"] == "node.completed")
            .map(|e| ts(&e["timestamp"]))
            .expect("the delay completed");
        late.push(done.duration_since(wake).as_secs_f64() * 1000.0);
        // When the operator created the waking worker (second resolution): what of the
        // lateness is the operator's, what the worker's start and replay.
        let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns);
        if let Some(created) = pods
            .get_opt(&format!("{name}-w2"))
            .await
            .ok()
            .flatten()
            .and_then(|p| p.metadata.creation_timestamp)
        {
            started.push(created.0.duration_since(wake).as_secs_f64() * 1000.0);
        }
    }
    started.sort_by(f64::total_cmp);
    if !started.is_empty() {
        println!(
            "FIGURES delay wake: waking worker pod created p50 {:.0} ms, max {:.0} ms after wakeAt (creationTimestamp, 1 s resolution; the operator starts it 1 s ahead)",
            percentile(&started, 50.0),
            started[started.len() - 1]
        );
    }
    late.sort_by(f64::total_cmp);
    println!(
        "FIGURES delay wake lateness ({RUNS} Runs, 4 s delay, threshold 2 s, {} builds): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms, min {:.0} ms",
        build_profile(),
        percentile(&late, 50.0),
        percentile(&late, 99.0),
        late[RUNS - 1],
        late[0]
    );
    assert!(late[0] >= 0.0, "a delay woke before its wakeAt: {late:?}");
    delete_namespace(&c.client, &ns).await;
}
