//! The node agent against the real API server: Deployments, exit codes, restarts, env,
//! deletion, logs, service-account credentials, unmappable images.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use serde_json::json;

fn sh_pod(name: &str, script: &str, restart: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "local/sh", "command": ["sh", "-c", script]}],
        },
    })
}

#[tokio::test]
async fn deployment_runs_a_process_and_gc_ends_it() {
    let Some(c) = local_cluster("pods").await else {
        return;
    };
    let ns = namespace(&c.client, "e2e-deploy").await;
    // `$$$$`: Kubernetes reduces `$$` to `$` in commands, so the shell sees `$$` (its pid).
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("pid");
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "hello"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "hello"}},
            "template": {
                "metadata": {"labels": {"app": "hello"}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "main", "image": "local/sh",
                        "command": ["sh", "-c", format!("echo $$$$ > {}; exec sleep 3600", marker.display())],
                    }],
                },
            },
        },
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), &ns);
    deployments
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();

    // Deployment → ReplicaSet (owned by it) → Pod (owned by the ReplicaSet) → Running.
    let rss: Api<ReplicaSet> = Api::namespaced(c.client.clone(), &ns);
    let rs = wait_for(Duration::from_secs(30), "replicaset", || {
        let rss = rss.clone();
        async move { rss.list(&ListParams::default()).await.ok()?.items.pop() }
    })
    .await;
    let owner = &rs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.kind, "Deployment");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns);
    let pod = wait_for(Duration::from_secs(60), "running pod", || {
        let pods = pods.clone();
        async move {
            pods.list(&ListParams::default().labels("app=hello"))
                .await
                .ok()?
                .items
                .into_iter()
                .find(|p| phase(p).as_deref() == Some("Running"))
        }
    })
    .await;
    assert_eq!(
        pod.metadata.owner_references.as_ref().unwrap()[0].kind,
        "ReplicaSet"
    );
    let status = pod.status.clone().unwrap();
    // This machine's non-loopback address (Kubernetes refuses loopback endpoints).
    assert_eq!(
        status.pod_ip.as_deref(),
        Some(openwop_e2e::agent::status::pod_ip())
    );
    let cs = &status.container_statuses.unwrap()[0];
    assert!(cs.ready);
    assert!(cs.state.as_ref().unwrap().running.is_some());
    assert_eq!(
        pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some("openwop-node")
    );

    let pid: i32 = wait_for(Duration::from_secs(10), "pid marker", || {
        let m = marker.clone();
        async move { std::fs::read_to_string(m).ok()?.trim().parse().ok() }
    })
    .await;
    assert!(process_alive(pid), "the container process {pid} runs");
    wait_for(Duration::from_secs(30), "deployment available", || {
        let d = deployments.clone();
        async move {
            let d = d.get("hello").await.ok()?;
            (d.status?.available_replicas? == 1).then_some(())
        }
    })
    .await;

    // Deleting the Deployment: the garbage collector removes RS and Pod, the agent ends the process.
    deployments
        .delete("hello", &DeleteParams::background())
        .await
        .unwrap();
    wait_for(Duration::from_secs(60), "pods garbage-collected", || {
        let pods = pods.clone();
        async move {
            pods.list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        }
    })
    .await;
    wait_for(Duration::from_secs(10), "process ended", || async move {
        (!process_alive(pid)).then_some(())
    })
    .await;
    assert!(
        rss.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    delete_namespace(&c.client, &ns).await;
}

#[tokio::test]
async fn exit_1_fails_the_pod_with_its_exit_code_and_logs() {
    let Some(c) = local_cluster("pods").await else {
        return;
    };
    let ns = namespace(&c.client, "e2e-fail").await;
    create_pod(&c.client, &ns, sh_pod("fail", "echo boom; exit 1", "Never")).await;
    let pod = wait_phase(&c.client, &ns, "fail", "Failed", 60).await;
    let cs = &pod.status.unwrap().container_statuses.unwrap()[0];
    let t = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(t.exit_code, 1);
    assert_eq!(t.reason.as_deref(), Some("Error"));
    assert!(t.started_at.is_some() && t.finished_at.is_some());
    assert!(!cs.ready);
    assert_eq!(cs.restart_count, 0);

    // kubectl logs path: API server → kubelet API of the agent.
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns);
    let logs = pods.logs("fail", &LogParams::default()).await.unwrap();
    assert_eq!(logs, "boom\n");
    delete_namespace(&c.client, &ns).await;
}

#[tokio::test]
async fn on_failure_restarts_until_success() {
    let Some(c) = local_cluster("pods").await else {
        return;
    };
    let ns = namespace(&c.client, "e2e-restart").await;
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("count");
    // Fails twice, then succeeds.
    let script = format!(
        "n=$(cat {f} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {f}; echo run $n; [ $n -ge 3 ]",
        f = count.display()
    );
    create_pod(&c.client, &ns, sh_pod("flaky", &script, "OnFailure")).await;
    let pod = wait_phase(&c.client, &ns, "flaky", "Succeeded", 90).await;
    let cs = &pod.status.unwrap().container_statuses.unwrap()[0];
    assert_eq!(cs.restart_count, 2);
    let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(last.exit_code, 1);
    let now = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(now.exit_code, 0);
    assert_eq!(now.reason.as_deref(), Some("Completed"));

    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns);
    let logs = pods.logs("flaky", &LogParams::default()).await.unwrap();
    assert_eq!(logs, "run 3\n");
    let previous = LogParams {
        previous: true,
        ..Default::default()
    };
    assert_eq!(pods.logs("flaky", &previous).await.unwrap(), "run 2\n");

    // restartPolicy Always keeps restarting a process that keeps failing.
    create_pod(&c.client, &ns, sh_pod("crash", "exit 3", "Always")).await;
    let api = pods.clone();
    wait_for(Duration::from_secs(60), "restartCount >= 2", || {
        let api = api.clone();
        async move {
            let p = api.get("crash").await.ok()?;
            let cs = p.status?.container_statuses?.pop()?;
            (cs.restart_count >= 2
                && cs.last_state?.terminated?.exit_code == 3
                && phase_is_running(&api, "crash").await)
                .then_some(())
        }
    })
    .await;
    delete_namespace(&c.client, &ns).await;
}

async fn phase_is_running(api: &Api<Pod>, name: &str) -> bool {
    api.get(name).await.ok().and_then(|p| phase(&p)).as_deref() == Some("Running")
}

#[tokio::test]
async fn env_from_values_secrets_config_maps_and_fields() {
    let Some(c) = local_cluster("pods").await else {
        return;
    };
    let ns = namespace(&c.client, "e2e-env").await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds"}, "stringData": {"token": "s3cr3t", "extra": "x"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(c.client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "settings"}, "data": {"mode": "fast", "level": "3"},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(c.client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let pod = json!({
        "metadata": {"name": "env"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "main", "image": "local/sh",
                "command": ["sh", "-c"],
                "args": ["echo \"$GREETING|$TOKEN|$MODE|$POD_NAME|$POD_NS|$CFG_level|$MISSING\""],
                "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
                "env": [
                    {"name": "WHO", "value": "world"},
                    {"name": "GREETING", "value": "hello $(WHO)"},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                    {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "MISSING", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": true}}},
                ],
            }],
        },
    });
    create_pod(&c.client, &ns, pod).await;
    wait_phase(&c.client, &ns, "env", "Succeeded", 60).await;
    let logs = Api::<Pod>::namespaced(c.client.clone(), &ns)
        .logs("env", &LogParams::default())
        .await
        .unwrap();
    assert_eq!(logs, format!("hello world|s3cr3t|fast|env|{ns}|3|\n"));
    delete_namespace(&c.client, &ns).await;
}

#[tokio::test]
async fn deletion_sends_sigterm_then_sigkill_after_the_grace_period() {
    let Some(c) = local_cluster("pods").await else {
        return;
    };
    let ns = namespace(&c.client, "e2e-delete").await;
    let dir = tempfile::tempdir().unwrap();
    let term = dir.path().join("term");
    let pidf = dir.path().join("pid");
    // Records SIGTERM, then ignores it: only SIGKILL after the grace period ends it.
    let script = format!(
        "echo $$$$ > {p}; trap 'echo TERM > {t}' TERM; while true; do sleep 0.2; done",
        p = pidf.display(),
        t = term.display()
    );
    let mut pod = sh_pod("stubborn", &script, "Always");
    pod["spec"]["terminationGracePeriodSeconds"] = json!(3);
    create_pod(&c.client, &ns, pod).await;
    wait_phase(&c.client, &ns, "stubborn", "Running", 60).await;
    let pid: i32 = wait_for(Duration::from_secs(10), "pid", || {
        let p = pidf.clone();
        async move { std::fs::read_to_string(p).ok()?.trim().parse().ok() }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns);
    let started = std::time::Instant::now();
    pods.delete("stubborn", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(Duration::from_secs(30), "pod removed", || {
        let pods = pods.clone();
        async move { pods.get_opt("stubborn").await.ok()?.is_none().then_some(()) }
    })
    .await;
    let took = started.elapsed();
    assert!(term.exists(), "the process received SIGTERM");
    assert!(
        took >= Duration::from_secs(3),
        "the pod was removed only after the grace period ({took:?})"
    );
    assert!(!process_alive(pid), "SIGKILL ended the process");
    delete_namespace(&c.client, &ns).await;
}

#[tokio::test]
async fn unmappable_image_stays_pending_with_a_warning_event() {
    let Some(c) = local_cluster("pods").await else {
        return;
    };
    let ns = namespace(&c.client, "e2e-unmapped").await;
    create_pod(
        &c.client,
        &ns,
        json!({
            "metadata": {"name": "nginx"},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
        }),
    )
    .await;
    let events: Api<Event> = Api::namespaced(c.client.clone(), &ns);
    let ev = wait_for(Duration::from_secs(60), "ImageNotMapped event", || {
        let events = events.clone();
        async move {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("ImageNotMapped"))
        }
    })
    .await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(ev.involved_object.name.as_deref(), Some("nginx"));
    let msg = ev.message.unwrap_or_default();
    assert!(
        msg.contains("nginx:1.27") && msg.contains("node-agent.yaml"),
        "{msg}"
    );
    let pod = Api::<Pod>::namespaced(c.client.clone(), &ns)
        .get("nginx")
        .await
        .unwrap();
    assert_eq!(phase(&pod).as_deref(), Some("Pending"));
    let cs = &pod.status.unwrap().container_statuses.unwrap()[0];
    assert_eq!(
        cs.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("ImageNotMapped")
    );
    // Deleting a pod that never ran completes at once.
    Api::<Pod>::namespaced(c.client.clone(), &ns)
        .delete("nginx", &DeleteParams::default())
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns);
    wait_for(Duration::from_secs(20), "pending pod removed", || {
        let pods = pods.clone();
        async move { pods.get_opt("nginx").await.ok()?.is_none().then_some(()) }
    })
    .await;
    delete_namespace(&c.client, &ns).await;
}

#[tokio::test]
async fn pods_reach_the_api_server_as_their_service_account() {
    let Some(c) = local_cluster("pods").await else {
        return;
    };
    let ns = namespace(&c.client, "e2e-sa").await;
    // KUBECONFIG points at the pod's kubeconfig with its bound service-account token.
    create_pod(
        &c.client,
        &ns,
        sh_pod(
            "whoami",
            "kubectl auth whoami -o jsonpath='{.status.userInfo.username}'",
            "Never",
        ),
    )
    .await;
    wait_phase(&c.client, &ns, "whoami", "Succeeded", 60).await;
    let logs = Api::<Pod>::namespaced(c.client.clone(), &ns)
        .logs("whoami", &LogParams::default())
        .await
        .unwrap();
    assert_eq!(logs.trim(), format!("system:serviceaccount:{ns}:default"));
    delete_namespace(&c.client, &ns).await;
}
