//! Second clusters (own state directory and ports), so the shared test cluster used by the
//! other tests is never disturbed: cluster.sh up/down/up, and an operator started on a cluster
//! that has no CRDs yet.

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

/// The tests of this file take turns: they use the same ports.
static SECOND_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Options of a second mini-cluster in a new state directory (kept on failure, for its logs).
fn second_cluster(prefix: &str) -> (std::path::PathBuf, ClusterOptions) {
    let state = tempfile::Builder::new()
        .prefix(prefix)
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
    (state, opts)
}

#[tokio::test]
async fn up_up_down_up_down_leaves_nothing_running() {
    let _turn = SECOND_CLUSTER.lock().await;
    // The guard stops the cluster however the test ends.
    let (state, opts) = second_cluster("openwop-lifecycle-");
    let _guard = Down(opts.clone());
    let blocking = |sub: &'static str| script(&opts, sub);

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

/// `helm install` creates the CRDs and starts the operator at once: the operator's first
/// lists fail until the API server serves the new resources. Its controllers must still act
/// on the first Workflow and Run (they once waited forever: `controller::Feed`).
#[tokio::test]
async fn an_operator_started_before_its_crds_are_served_acts_once_they_are() {
    let _turn = SECOND_CLUSTER.lock().await;
    let (state, opts) = second_cluster("openwop-before-crds-");
    let _guard = Down(opts.clone());
    let kubeconfig = kubeconfig_from(&script(&opts, "up").await.unwrap().expect("up"));
    let kubectl = |args: &[&str], stdin: Option<&str>| {
        common::ok(
            common::run_with_kubeconfig(&kubeconfig, std::path::Path::new("kubectl"), args, stdin),
            &format!("kubectl {}", args.join(" ")),
        )
    };

    let port = openwop_nats::testing::free_port();
    let config = state.join("operator.yaml");
    std::fs::write(
        &config,
        format!(
            "watchNamespace: default\nlisten: 127.0.0.1:{port}\ndiscovery: {{namespace: default}}\n\
             leaderElection: {{leaseNamespace: default}}\n\
             worker: {{image: 'openwop.test/unmapped-worker:1'}}\n"
        ),
    )
    .unwrap();
    let log = state.join("operator.log");
    let out = std::fs::File::create(&log).unwrap();
    let operator = Child(
        std::process::Command::new(common::target_bin("debug", "openwop-operator"))
            .arg("--config")
            .arg(&config)
            .arg("--identity")
            .arg("before-crds")
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info,kube=warn,openwop_operator=debug")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start openwop-operator"),
    );
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    common::wait_for(
        Duration::from_secs(30),
        "the operator to lead without its CRDs",
        || {
            let text = log_text();
            async move {
                (text.contains("leading: starting controllers")
                    && text.contains("cannot list or watch Runs"))
                .then_some(())
            }
        },
    )
    .await;

    let crds = common::repo().join("charts/openwop/crds/openwop.dev_crds.yaml");
    kubectl(
        &["apply", "--server-side", "-f", crds.to_str().unwrap()],
        None,
    );
    kubectl(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            "crd/runs.openwop.dev",
            "crd/workflows.openwop.dev",
        ],
        None,
    );
    kubectl(
        &["apply", "-n", "default", "-f", "-"],
        Some(
            r#"{"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "w"},
                "spec": {"id": "w", "name": "w", "version": "1",
                         "nodes": [{"id": "a", "typeId": "core.identity"}]}}"#,
        ),
    );
    kubectl(
        &["apply", "-n", "default", "-f", "-"],
        Some(
            r#"{"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": "r"},
                "spec": {"workflowRef": {"name": "w"}}}"#,
        ),
    );
    let jsonpath = |what: &str, path: &str| {
        kubectl(
            &[
                "get",
                "-n",
                "default",
                what,
                "-o",
                &format!("jsonpath={path}"),
            ],
            None,
        )
    };
    let ready = r#"{.status.conditions[?(@.type=="Ready")].status}"#;
    let status = common::wait_for(
        Duration::from_secs(60),
        "the Workflow's Ready condition",
        || {
            let status = jsonpath("workflow.openwop.dev/w", ready);
            async move { (!status.is_empty()).then_some(status) }
        },
    )
    .await;
    assert_eq!(status, "True", "{}", log_text());
    // The Run is reconciled: its worker pod is created (the image is not one the node agent
    // runs, so it stays there).
    common::wait_for(Duration::from_secs(60), "the Run's worker pod", || {
        let pod = jsonpath("run.openwop.dev/r", "{.status.workerPod}");
        async move { (!pod.is_empty()).then_some(()) }
    })
    .await;
    drop(operator);
    // Passed: nothing to keep (the guard then finds no state directory).
    script(&opts, "purge").await.unwrap().expect("purge");
}

/// `cluster.sh sub` for the cluster of `opts`, off the async runtime.
fn script(
    opts: &ClusterOptions,
    sub: &'static str,
) -> tokio::task::JoinHandle<Result<String, openwop_e2e::ClusterError>> {
    let opts = opts.clone();
    tokio::task::spawn_blocking(move || run(&opts, sub))
}

/// A child process killed when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
