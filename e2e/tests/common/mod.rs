//! Shared helpers for the mini-cluster integration tests.
#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use openwop_e2e::{Cluster, ClusterOptions, cluster_with};
use serde_json::json;

/// The shared test cluster, started on first use, running the agent cargo built for this test;
/// in attach mode (`OPENWOP_E2E_KUBECONFIG`) the cluster it names.
pub async fn cluster() -> Cluster {
    let opts = ClusterOptions {
        node_agent_bin: Some(env!("CARGO_BIN_EXE_openwop-node-agent").into()),
        ..Default::default()
    };
    match cluster_with(opts).await {
        Ok(c) => c,
        Err(err) => panic!("test cluster unavailable: {err}"),
    }
}

/// The local mini-cluster, for tests of the node agent itself; `None` (reason printed) in
/// attach mode, where the test returns early.
pub async fn local_cluster(test: &str) -> Option<Cluster> {
    let c = cluster().await;
    (!c.skip_unless_local(test, "the node agent (pods run as host processes)")).then_some(c)
}

/// Polls `f` until it returns `Some`, or panics with `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A fresh namespace (with its default ServiceAccount, which pod admission needs).
pub async fn namespace(client: &Client, prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let name = format!("{prefix}-{:x}", nanos ^ std::process::id());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
    wait_for(Duration::from_secs(30), "default service account", || {
        let sas = sas.clone();
        async move { sas.get_opt("default").await.ok().flatten() }
    })
    .await;
    name
}

pub async fn delete_namespace(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::background())
        .await;
}

pub async fn create_pod(client: &Client, ns: &str, pod: serde_json::Value) -> Pod {
    let pod: Pod = serde_json::from_value(pod).expect("pod manifest");
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod")
}

pub fn phase(p: &Pod) -> Option<String> {
    p.status.as_ref().and_then(|s| s.phase.clone())
}

/// Waits until the pod reaches `want` and returns it.
pub async fn wait_phase(client: &Client, ns: &str, name: &str, want: &str, secs: u64) -> Pod {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_for(
        Duration::from_secs(secs),
        &format!("pod {ns}/{name} to be {want}"),
        || {
            let api = api.clone();
            async move {
                let p = api.get_opt(name).await.ok().flatten()?;
                (phase(&p).as_deref() == Some(want)).then_some(p)
            }
        },
    )
    .await
}

pub fn process_alive(pid: i32) -> bool {
    // A zombie has exited; only a live process counts.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// Runs `program` against the cluster (its kubeconfig and NATS URL in the environment).
pub fn run_cmd(c: &Cluster, program: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(program);
    cmd.env("OPENWOP_NATS_URL", &c.nats_url);
    output_of(cmd, &c.kubeconfig, args, stdin)
}

/// [`run_cmd`] against a cluster known by its kubeconfig only (a second mini-cluster).
pub fn run_with_kubeconfig(
    kubeconfig: &Path,
    program: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> Output {
    output_of(Command::new(program), kubeconfig, args, stdin)
}

fn output_of(mut cmd: Command, kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let program = cmd.get_program().to_owned();
    let mut child = cmd
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

pub fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub fn kubectl(c: &Cluster, args: &[&str], stdin: Option<&str>) -> Output {
    run_cmd(c, Path::new("kubectl"), args, stdin)
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .into()
}

/// `name` from the environment, `default` when unset or empty.
pub fn env_or(name: &str, default: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.into())
}

/// A binary of the given cargo profile (`debug` or `release`) in `$CARGO_TARGET_DIR`.
pub fn target_bin(profile: &str, name: &str) -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"));
    let p = dir.join(profile).join(name);
    assert!(
        p.is_file(),
        "{} is missing: build it first (cargo build -p openwop-operator -p openwop-worker -p kubectl-openwop)",
        p.display()
    );
    p
}

/// The operator's port on the host: pods share the host network on the mini-cluster, so a
/// second mini-cluster beside the first (`OPENWOP_PORT_OFFSET`) needs its own
/// (`OPENWOP_E2E_OPERATOR_PORT`).
pub fn operator_port() -> u16 {
    env_or("OPENWOP_E2E_OPERATOR_PORT", "8080")
        .parse()
        .unwrap_or(8080)
}

/// The mini-cluster's helm (built or found by e2e/cluster/build-binaries.sh).
pub fn helm_bin() -> PathBuf {
    let repo = repo();
    let out = Command::new("bash")
        .arg(repo.join("e2e/cluster/build-binaries.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("build-binaries.sh");
    assert!(out.status.success(), "build-binaries.sh failed");
    let dir = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(dir.lines().last().unwrap().trim()).join("helm")
}

/// Applies this tree's CRDs (server-side): Helm installs `crds/` only on first install, so
/// a release installed earlier would otherwise keep older CRDs (and the apiserver would prune
/// new fields).
pub fn apply_crds(c: &Cluster) {
    let crds = repo().join("charts/openwop/crds/openwop.dev_crds.yaml");
    ok(
        kubectl(
            c,
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                crds.to_str().unwrap(),
            ],
            None,
        ),
        "kubectl apply CRDs",
    );
}

/// A token of ServiceAccount `sa` (`kubectl create token`, valid for an hour).
pub fn create_token(c: &Cluster, ns: &str, sa: &str) -> String {
    ok(
        kubectl(
            c,
            &["create", "token", sa, "-n", ns, "--duration", "1h"],
            None,
        ),
        "kubectl create token",
    )
    .trim()
    .to_owned()
}

/// Namespace of the Helm release the journeys install (`OPENWOP_E2E_RELEASE_NAMESPACE`).
pub fn release_ns() -> &'static str {
    static V: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| env_or("OPENWOP_E2E_RELEASE_NAMESPACE", "openwop-system"));
    V.as_str()
}

/// The release's operator pods that are not already being deleted.
pub async fn operator_pods(c: &Cluster) -> Vec<String> {
    Api::<Pod>::namespaced(c.client.clone(), release_ns())
        .list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// Force-deletes (grace 0, as a SIGKILL would) the release's pods `names`.
pub fn force_delete_operator_pods(c: &Cluster, names: &[String]) {
    for name in names {
        let args = [
            "delete",
            "pod",
            name,
            "-n",
            release_ns(),
            "--grace-period=0",
            "--force",
        ];
        ok(kubectl(c, &args, None), "force-delete the operator pod");
    }
}
