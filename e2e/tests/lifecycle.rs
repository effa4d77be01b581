//! cluster.sh up/down/up on a second cluster (own state directory and ports), so the shared
//! test cluster used by the other tests is never disturbed.

mod common;

use std::path::Path;
use std::time::Duration;

use common::wait_for;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use openwop_e2e::ClusterOptions;
use openwop_e2e::cluster::{client_for, run};

const COMPONENTS: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "nats-server",
    "node-agent",
];

fn pids(state: &Path) -> Vec<i32> {
    COMPONENTS
        .iter()
        .filter_map(|c| std::fs::read_to_string(state.join("run").join(format!("{c}.pid"))).ok())
        .filter_map(|p| p.trim().parse().ok())
        .collect()
}

async fn ready_node(kubeconfig: &Path) -> Node {
    let client = client_for(kubeconfig).await.expect("client");
    let nodes: Api<Node> = Api::all(client);
    wait_for(Duration::from_secs(30), "a Ready node", || {
        let nodes = nodes.clone();
        async move {
            nodes
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                })
        }
    })
    .await
}

fn kubeconfig_from(stdout: &str) -> std::path::PathBuf {
    let last = stdout.lines().last().unwrap_or_default();
    let path = last
        .strip_prefix("export KUBECONFIG=")
        .unwrap_or_else(|| panic!("last line of `up` is not the KUBECONFIG export: {last:?}"));
    path.into()
}

#[tokio::test]
async fn up_up_down_up_down_leaves_nothing_running() {
    let state = tempfile::tempdir().unwrap();
    let opts = ClusterOptions {
        state_dir: Some(state.path().to_owned()),
        port_offset: 1000,
        node_agent_bin: Some(env!("CARGO_BIN_EXE_openwop-node-agent").into()),
    };
    let blocking = |sub: &'static str| {
        let opts = opts.clone();
        tokio::task::spawn_blocking(move || run(&opts, sub))
    };

    let out = blocking("up").await.unwrap().expect("first up");
    let kubeconfig = kubeconfig_from(&out);
    let first = pids(state.path());
    assert_eq!(first.len(), COMPONENTS.len());
    ready_node(&kubeconfig).await;

    // A second up is a no-op: same processes.
    let out = blocking("up").await.unwrap().expect("second up");
    assert_eq!(kubeconfig_from(&out), kubeconfig);
    assert_eq!(pids(state.path()), first);
    blocking("status").await.unwrap().expect("status");

    blocking("down").await.unwrap().expect("down");
    for pid in &first {
        assert!(!common::process_alive(*pid), "pid {pid} survived down");
    }
    assert!(
        blocking("status").await.unwrap().is_err(),
        "status fails when stopped"
    );

    // Up after down: a fresh cluster with the same kubeconfig.
    let out = blocking("up").await.unwrap().expect("up after down");
    assert_eq!(kubeconfig_from(&out), kubeconfig);
    ready_node(&kubeconfig).await;
    let second = pids(state.path());
    blocking("purge").await.unwrap().expect("purge");
    for pid in &second {
        assert!(!common::process_alive(*pid), "pid {pid} survived purge");
    }
    assert!(!state.path().exists());
}
