//! Pod volumes through the node agent: ConfigMap, Secret, emptyDir, projected and downward API
//! volumes at their mount paths, read-only mounts, subPath, per-pod isolation of the same
//! mount path, live ConfigMap updates, termination messages, missing sources.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use kube::api::{Api, ListParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::json;

async fn create_config_map(c: &kube::Client, ns: &str, name: &str, data: serde_json::Value) {
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
    Api::<ConfigMap>::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
}

async fn logs(c: &kube::Client, ns: &str, pod: &str) -> String {
    Api::<Pod>::namespaced(c.clone(), ns)
        .logs(pod, &LogParams::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn config_map_secret_and_empty_dir_are_mounted_at_their_paths() {
    let Some(c) = local_cluster("volumes").await else {
        return;
    };
    let ns = namespace(&c.client, "e2e-vol").await;
    create_config_map(
        &c.client,
        &ns,
        "cfg",
        json!({"key": "from-config-map", "other": "second"}),
    )
    .await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds"},
        "stringData": {"token": "s3cr3t", "unused": "x"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(c.client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let base = format!("/var/run/openwop-e2e/{ns}");
    let script = format!(
        r#"set -u
cat {base}/cfg/key; echo
cat {base}/cfg/other; echo
cat {base}/single.txt; echo
cat {base}/sec/dir/tok; echo
stat -L -c %a {base}/sec/dir/tok
ls {base}/sec/dir
echo scratch > {base}/scratch/f && cat {base}/scratch/f
cat {base}/scratch-ro/f
touch {base}/cfg/new 2>/dev/null && echo cfg-writable || echo cfg-readonly
touch {base}/scratch-ro/new 2>/dev/null && echo ro-writable || echo ro-readonly
printf 'all good' > /dev/termination-log
"#
    );
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "reader"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "main", "image": "local/sh", "command": ["sh", "-c", script],
                "volumeMounts": [
                    {"name": "cfg", "mountPath": format!("{base}/cfg")},
                    {"name": "cfg", "mountPath": format!("{base}/single.txt"), "subPath": "other"},
                    {"name": "sec", "mountPath": format!("{base}/sec")},
                    {"name": "scratch", "mountPath": format!("{base}/scratch")},
                    {"name": "scratch", "mountPath": format!("{base}/scratch-ro"), "readOnly": true},
                ],
            }],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o400,
                    "items": [{"key": "token", "path": "dir/tok"}]}},
                {"name": "scratch", "emptyDir": {}},
            ],
        },
    });
    create_pod(&c.client, &ns, pod).await;
    let done = wait_phase(&c.client, &ns, "reader", "Succeeded", 60).await;
    assert_eq!(
        logs(&c.client, &ns, "reader").await,
        "from-config-map\nsecond\nsecond\ns3cr3t\n400\ntok\nscratch\nscratch\ncfg-readonly\nro-readonly\n"
    );
    // The termination-message file reaches the container status, as with the kubelet.
    let term = done.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(term.exit_code, 0);
    assert_eq!(term.message.as_deref(), Some("all good"));
    // The mounts lived in the container's namespace only: the host mountpoint is empty.
    let host_cfg = std::path::Path::new(&base).join("cfg");
    assert!(host_cfg.is_dir());
    assert_eq!(std::fs::read_dir(&host_cfg).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(&base);
    delete_namespace(&c.client, &ns).await;
}

#[tokio::test]
async fn two_pods_mount_different_config_maps_at_the_same_path() {
    let Some(c) = local_cluster("volumes").await else {
        return;
    };
    let ns = namespace(&c.client, "e2e-vol-iso").await;
    let path = "/var/run/openwop-e2e-shared/cfg";
    for who in ["a", "b"] {
        create_config_map(&c.client, &ns, &format!("cfg-{who}"), json!({"who": who})).await;
    }
    // Both pods are alive at once (each waits for the other's marker), so the two mounts of the
    // same path coexist.
    let marks = tempfile::tempdir().unwrap();
    for (who, other) in [("a", "b"), ("b", "a")] {
        let script = format!(
            "touch {m}/{who}; i=0; while [ ! -e {m}/{other} ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; cat {path}/who; sleep 1; cat {path}/who",
            m = marks.path().display()
        );
        create_pod(
            &c.client,
            &ns,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("pod-{who}")},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "local/sh", "command": ["sh", "-c", script],
                        "volumeMounts": [{"name": "cfg", "mountPath": path}]}],
                    "volumes": [{"name": "cfg", "configMap": {"name": format!("cfg-{who}")}}],
                },
            }),
        )
        .await;
    }
    for who in ["a", "b"] {
        let name = format!("pod-{who}");
        wait_phase(&c.client, &ns, &name, "Succeeded", 60).await;
        assert_eq!(logs(&c.client, &ns, &name).await, format!("{who}{who}"));
    }
    delete_namespace(&c.client, &ns).await;
}

#[tokio::test]
async fn config_map_volume_follows_updates_while_the_pod_runs() {
    let Some(c) = local_cluster("volumes").await else {
        return;
    };
    let ns = namespace(&c.client, "e2e-vol-upd").await;
    create_config_map(&c.client, &ns, "live", json!({"v": "one"})).await;
    let path = "/var/run/openwop-e2e-live";
    let script = format!("while true; do cat {path}/v; echo; sleep 0.5; done");
    create_pod(
        &c.client,
        &ns,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "watcher"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "local/sh", "command": ["sh", "-c", script],
                    "volumeMounts": [{"name": "live", "mountPath": path}]}],
                "volumes": [{"name": "live", "configMap": {"name": "live"}}],
            },
        }),
    )
    .await;
    wait_phase(&c.client, &ns, "watcher", "Running", 60).await;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns);
    wait_for(Duration::from_secs(20), "first value in the log", || {
        let pods = pods.clone();
        async move {
            let l = pods.logs("watcher", &LogParams::default()).await.ok()?;
            l.contains("one\n").then_some(())
        }
    })
    .await;
    Api::<ConfigMap>::namespaced(c.client.clone(), &ns)
        .patch(
            "live",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "two"}})),
        )
        .await
        .unwrap();
    // The agent re-reads volumes every 10 s.
    wait_for(Duration::from_secs(40), "updated value in the log", || {
        let pods = pods.clone();
        async move {
            let l = pods.logs("watcher", &LogParams::default()).await.ok()?;
            l.lines()
                .last()
                .is_some_and(|last| last == "two")
                .then_some(())
        }
    })
    .await;
    delete_namespace(&c.client, &ns).await;
}

#[tokio::test]
async fn projected_and_downward_api_volumes() {
    let Some(c) = local_cluster("volumes").await else {
        return;
    };
    let ns = namespace(&c.client, "e2e-vol-proj").await;
    create_config_map(&c.client, &ns, "settings", json!({"mode": "fast"})).await;
    let path = "/var/run/openwop-e2e-proj";
    let script = format!(
        "cat {path}/all/mode; echo; cat {path}/all/meta/ns; echo; wc -c < {path}/all/token | tr -d ' '; cat {path}/info/labels; echo"
    );
    create_pod(
        &c.client,
        &ns,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "proj", "labels": {"app": "proj"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "local/sh", "command": ["sh", "-c", script],
                    "volumeMounts": [
                        {"name": "all", "mountPath": format!("{path}/all")},
                        {"name": "info", "mountPath": format!("{path}/info")},
                    ]}],
                "volumes": [
                    {"name": "all", "projected": {"sources": [
                        {"configMap": {"name": "settings"}},
                        {"downwardAPI": {"items": [{"path": "meta/ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 600, "audience": "openwop-e2e"}},
                    ]}},
                    {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                ],
            },
        }),
    )
    .await;
    wait_phase(&c.client, &ns, "proj", "Succeeded", 60).await;
    let out = logs(&c.client, &ns, "proj").await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "fast");
    assert_eq!(lines[1], ns);
    let token_len: usize = lines[2].parse().unwrap();
    assert!(token_len > 100, "a signed JWT, got {token_len} bytes");
    assert_eq!(lines[3], "app=\"proj\"");
    delete_namespace(&c.client, &ns).await;
}

#[tokio::test]
async fn missing_config_map_blocks_the_pod_unless_optional() {
    let Some(c) = local_cluster("volumes").await else {
        return;
    };
    let ns = namespace(&c.client, "e2e-vol-miss").await;
    for (name, optional) in [("strict", false), ("lenient", true)] {
        create_pod(
            &c.client,
            &ns,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "local/sh",
                        "command": ["sh", "-c", "ls /var/run/openwop-e2e-missing | wc -l"],
                        "volumeMounts": [{"name": "v", "mountPath": "/var/run/openwop-e2e-missing"}]}],
                    "volumes": [{"name": "v", "configMap": {"name": "absent", "optional": optional}}],
                },
            }),
        )
        .await;
    }
    wait_phase(&c.client, &ns, "lenient", "Succeeded", 60).await;
    assert_eq!(logs(&c.client, &ns, "lenient").await.trim(), "0");
    let events: Api<Event> = Api::namespaced(c.client.clone(), &ns);
    let ev = wait_for(Duration::from_secs(30), "FailedMount event", || {
        let events = events.clone();
        async move {
            events
                .list(&ListParams::default().fields("involvedObject.name=strict"))
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("FailedMount"))
        }
    })
    .await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(
        ev.message.as_deref(),
        Some(format!("volume \"v\": ConfigMap {ns}/absent not found").as_str())
    );
    let pod = Api::<Pod>::namespaced(c.client.clone(), &ns)
        .get("strict")
        .await
        .unwrap();
    assert_eq!(phase(&pod).as_deref(), Some("Pending"));
    let waiting = pod.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("FailedMount"));
    // Creating the ConfigMap unblocks it.
    create_config_map(&c.client, &ns, "absent", json!({"a": "1", "b": "2"})).await;
    wait_phase(&c.client, &ns, "strict", "Succeeded", 60).await;
    assert_eq!(logs(&c.client, &ns, "strict").await.trim(), "2");
    delete_namespace(&c.client, &ns).await;
}
