//! The cluster side of the web UI tests: the chart installed as the journeys install it (same
//! release and values, so running after journeys.rs changes nothing), Workflows and Runs
//! applied with kubectl, ServiceAccount tokens, plain HTTP with curl.

use std::process::Command;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use openwop_e2e::Cluster;
use serde_json::Value;

use crate::common::*;

pub fn base_url() -> String {
    format!("http://127.0.0.1:{}", operator_port())
}

pub fn apply(c: &Cluster, ns: &str, yaml: &str) {
    ok(
        kubectl(c, &["apply", "-n", ns, "-f", "-"], Some(yaml)),
        "kubectl apply",
    );
}

/// Installs (or re-applies) the release exactly as the journeys do: one operator on the
/// host network at [`operator_port`], the mock provider, mocks allowed in `j-*` namespaces.
pub fn install(c: &Cluster) {
    install_with(c, &[]);
}

/// [`install`] with more helm arguments (e.g. `--set`, `--set-file`).
pub fn install_with(c: &Cluster, extra: &[String]) {
    let helm = helm_bin();
    apply_crds(c);
    let chart = repo().join("charts/openwop");
    let values = repo().join("e2e/helm/mini-cluster-values.yaml");
    let port = operator_port();
    let sets = [
        format!("nats.external.url={}", c.nats_url),
        format!("operator.port={port}"),
        "providers[0].name=mock,providers[0].vendor=mock".into(),
        format!("conformance.seams.spanIngestUrl=http://127.0.0.1:{port}"),
    ];
    let release = env_or("OPENWOP_E2E_RELEASE", "openwop");
    let release_ns = env_or("OPENWOP_E2E_RELEASE_NAMESPACE", "openwop-system");
    let mut args: Vec<&str> = vec![
        "upgrade",
        "--install",
        &release,
        chart.to_str().unwrap(),
        "-n",
        &release_ns,
        "--create-namespace",
        "-f",
        values.to_str().unwrap(),
        "--wait",
        "--timeout",
        "3m",
    ];
    for s in &sets {
        args.push("--set");
        args.push(s);
    }
    args.extend(extra.iter().map(String::as_str));
    ok(run_cmd(c, &helm, &args, None), "helm upgrade --install");
}

/// The cluster with the release installed and its operator answering on the host.
pub async fn setup() -> Cluster {
    let c = cluster().await;
    target_bin("debug", "openwop-operator");
    target_bin("debug", "openwop-worker");
    install(&c);
    let url = format!("{}/healthz", base_url());
    wait_for(Duration::from_secs(120), "the operator's HTTP port", || {
        let url = url.clone();
        async move { (http("GET", &url, &[], None).0 == 200).then_some(()) }
    })
    .await;
    c
}

fn runs(c: &Cluster, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("openwop.dev", "v1alpha1", "Run");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "runs");
    Api::namespaced_with(c.client.clone(), ns, &ar)
}

/// Waits for a Run's phase and returns its status.
pub async fn wait_run(c: &Cluster, ns: &str, name: &str, want: &str, secs: u64) -> Value {
    let api = runs(c, ns);
    wait_for(
        Duration::from_secs(secs),
        &format!("run {ns}/{name} {want}"),
        || {
            let api = api.clone();
            async move {
                let o = api.get_opt(name).await.ok().flatten()?;
                let st = o.data.get("status").cloned().unwrap_or(Value::Null);
                (st["phase"] == want).then_some(st)
            }
        },
    )
    .await
}

/// A Run's runId once the operator has given it one.
pub async fn run_id(c: &Cluster, ns: &str, name: &str) -> String {
    let api = runs(c, ns);
    wait_for(
        Duration::from_secs(60),
        &format!("runId of {ns}/{name}"),
        || {
            let api = api.clone();
            async move {
                let o = api.get_opt(name).await.ok().flatten()?;
                o.metadata.uid.clone()
            }
        },
    )
    .await
}

/// A ServiceAccount `sa` in `ns` bound to `rules` (a Role's rules as YAML), and a token of it.
pub fn sa_with_role(c: &Cluster, ns: &str, sa: &str, rules: &str) -> String {
    let yaml = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {sa}}}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: {sa}}}\nrules:\n{rules}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {sa}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {sa}}}\nsubjects:\n  - {{kind: ServiceAccount, name: {sa}}}\n"
    );
    apply(c, ns, &yaml);
    create_token(c, ns, sa)
}

/// What a team needs of the UI: read, answer and cancel runs; read workflows.
pub const TEAM_RULES: &str = "  - apiGroups: [openwop.dev]\n    resources: [runs]\n    verbs: [get, list, create, patch]\n  - apiGroups: [openwop.dev]\n    resources: [workflows]\n    verbs: [get, list]\n";
/// Read-only: follow runs, change nothing.
pub const VIEWER_RULES: &str =
    "  - apiGroups: [openwop.dev]\n    resources: [runs, workflows]\n    verbs: [get, list]\n";

/// `curl`: (status, headers, body).
pub fn http(
    method: &str,
    url: &str,
    headers: &[&str],
    body: Option<&str>,
) -> (u16, String, String) {
    let mut args: Vec<String> = ["-s", "-D", "-", "--max-time", "20", "-X", method, url]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for h in headers {
        args.extend(["-H".into(), h.to_string()]);
    }
    if let Some(b) = body {
        args.extend(["--data-binary".into(), b.to_owned()]);
    }
    let out = Command::new("curl").args(&args).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head.to_ascii_lowercase(), body.to_owned())
}
