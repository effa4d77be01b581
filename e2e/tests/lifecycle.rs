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
    // Kept on failure (for its logs); the guard stops the cluster however the test ends.
    let state = tempfile::Builder::new()
        .prefix("openwop-lifecycle-")
        .tempdir()
        .unwrap()
        .keep();
    let opts = ClusterOptions {
        state_dir: Some(state.clone()),
        port_offset: 1000,
        node_agent_bin: Some(env!("CARGO_BIN_EXE_openwop-node-agent").into()),
        // Its own mini-cluster, whatever OPENWOP_E2E_KUBECONFIG says.
        attach_kubeconfig: None,
        attach_nats_url: None,
    };
    let _guard = Down(opts.clone());
    let blocking = |sub: &'static str| {
        let opts = opts.clone();
        tokio::task::spawn_blocking(move || run(&opts, sub))
    };

    let out = blocking("up").await.unwrap().expect("first up");
    let kubeconfig = kubeconfig_from(&out);
    let first = pids(state.as_path());
    assert_eq!(first.len(), COMPONENTS.len());
    ready_node(&kubeconfig).await;

    // A second up is a no-op: same processes.
    let out = blocking("up").await.unwrap().expect("second up");
    assert_eq!(kubeconfig_from(&out), kubeconfig);
    let again = pids(state.as_path());
    // The agent is exempt: `up` restarts it when its binary was rebuilt meanwhile (a shared
    // target directory), by design.
    for (i, c) in COMPONENTS
        .iter()
        .enumerate()
        .filter(|(_, c)| **c != "node-agent")
    {
        if again.get(i) != first.get(i) {
            let log = std::fs::read_to_string(state.join("logs").join(format!("{c}.log")))
                .unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            panic!(
                "{c} was restarted by the second up; its log ends with:\n{}",
                tail.join("\n")
            );
        }
    }
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
    let second = pids(state.as_path());
    blocking("purge").await.unwrap().expect("purge");
    for pid in &second {
        assert!(!common::process_alive(*pid), "pid {pid} survived purge");
    }
    assert!(!state.as_path().exists());
}

struct Down(ClusterOptions);

impl Drop for Down {
    fn drop(&mut self) {
        if self.0.state_dir.as_ref().is_some_and(|d| d.exists()) {
            if let Err(err) = run(&self.0, "down") {
                eprintln!("cleanup: {err}");
            }
            eprintln!("state kept for inspection: {:?}", self.0.state_dir);
        }
    }
}
