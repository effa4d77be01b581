//! Issue 7 user journeys. On the mini-cluster the chart is installed with Helm (the operator
//! runs as a pod through the node agent); in attach mode (`OPENWOP_E2E_KUBECONFIG`, e.g. kind
//! through e2e/kind/test.sh) the already-installed release is used. Each journey drives
//! Workflows and Runs with kubectl / `kubectl openwop` and asserts Kubernetes status and the
//! exact NATS events. Everything goes through the Kubernetes API and NATS, so the journeys run
//! on any cluster; the few steps only the mini-cluster allows print why they are skipped.
//!
//! Journeys share one Helm release and some restart shared components, so they run one at a
//! time behind a process-wide lock, each in a fresh namespace (`j-*`). They need the CLI (and,
//! on the mini-cluster, the operator and worker) in `$CARGO_TARGET_DIR/debug` (`make test`
//! builds them; alone: `cargo build -p openwop-operator -p openwop-worker -p kubectl-openwop`).
//!
//! Provider calls are scripted with `Run.spec.providerMocks` (the chart values allow it in
//! `j-*` namespaces) and observed through the run's events (`log.appended` call records).
//!
//! Why one file of this size: every journey shares one cluster, one installed release and a
//! lock that runs them one at a time; one test binary keeps that (and one link) for all.

mod common;
// Issue #24 durable waits (delay, sub-workflow), on this binary's cluster, release and lock.
#[path = "journeys/durable.rs"]
mod durable;
// Issue #27 failover of two operator replicas (kind only).
#[path = "journeys/ha.rs"]
mod ha;
// Issue #25 signed interrupt tokens and Idempotency-Key, likewise.
#[path = "journeys/tokens.rs"]
mod tokens;
// Issue #25 pause/resume (kubectl openwop pause|resume), same cluster, release and lock.
#[path = "journeys/pause.rs"]
mod pause;
// Issues #24/#25 approval-gate quorum and timeoutMs, same cluster, release and lock.
#[path = "journeys/gates.rs"]
mod gates;
// The examples journey's ticketing stand-in (example 07).
#[path = "journeys/examples.rs"]
mod examples;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use openwop_e2e::{Cluster, rest_role};
use serde_json::{Value, json};

/// The release the journeys use: installed by them on the mini-cluster; in attach mode the one
/// already installed (`OPENWOP_E2E_RELEASE` / `OPENWOP_E2E_RELEASE_NAMESPACE`, defaults as in
/// e2e/kind/common.sh).
fn release() -> &'static str {
    static V: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| env_or("OPENWOP_E2E_RELEASE", "openwop"));
    V.as_str()
}

/// Journeys run one at a time (shared release, operator and NATS restarts).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// Whether this process installed the release (uninstall resets it).
static INSTALLED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

fn cli(c: &Cluster, args: &[&str]) -> Output {
    run_cmd(c, &target_bin("debug", "kubectl-openwop"), args, None)
}

fn helm(c: &Cluster, args: &[&str]) -> Output {
    run_cmd(c, &helm_bin(), args, None)
}

/// Force-deletes the operator pod(s) and waits for the replacement to run.
async fn restart_operator(c: &Cluster) {
    force_delete_operator_pods(c, &operator_pods(c).await);
    wait_operator_ready(c).await;
}

/// `helm upgrade --install` with the mini-cluster values plus `extra` `--set`s (a later
/// `operator.port` in `extra` overrides the journeys' port).
fn helm_install(c: &Cluster, extra: &[&str]) -> String {
    let chart = repo().join("charts/openwop");
    let values = repo().join("e2e/helm/mini-cluster-values.yaml");
    let nats = format!("nats.external.url={}", c.nats_url);
    let port = format!("operator.port={}", operator_port());
    // Workers reach the operator's span store on the host network (no cluster DNS here).
    let effective = extra
        .iter()
        .rev()
        .find_map(|e| e.strip_prefix("operator.port="))
        .map_or_else(|| operator_port().to_string(), str::to_owned);
    let spans = format!("conformance.seams.spanIngestUrl=http://127.0.0.1:{effective}");
    let mut args = vec![
        "upgrade",
        "--install",
        release(),
        chart.to_str().unwrap(),
        "-n",
        release_ns(),
        "--create-namespace",
        "-f",
        values.to_str().unwrap(),
        "--set",
        &nats,
        "--set",
        &port,
        "--set",
        "providers[0].name=mock,providers[0].vendor=mock",
        "--set",
        &spans,
        "--wait",
        "--timeout",
        "3m",
    ];
    for e in extra {
        args.push("--set");
        args.push(e);
    }
    ok(helm(c, &args), "helm upgrade --install")
}

/// The cluster with the chart installed; holds the journey lock.
async fn setup() -> (Cluster, tokio::sync::MutexGuard<'static, ()>) {
    let guard = SERIAL.lock().await;
    let c = cluster().await;
    release_ready(&c).await;
    (c, guard)
}

/// Under [`SERIAL`]: the release is installed (a journey before may have uninstalled it) and
/// its operator runs.
async fn release_ready(c: &Cluster) {
    target_bin("debug", "kubectl-openwop");
    if c.local {
        target_bin("debug", "openwop-operator");
        target_bin("debug", "openwop-worker");
        let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        if !*installed {
            // Helm installs crds/ only on first install: apply them so the release has the
            // CRDs of this tree (e.g. new Run fields, which the apiserver would prune).
            apply_crds(c);
            helm_install(c, &[]);
            *installed = true;
        }
    }
    wait_operator_ready(c).await;
}

async fn wait_operator_ready(c: &Cluster) {
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), release_ns());
    wait_for(Duration::from_secs(90), "a running operator pod", || {
        let pods = pods.clone();
        async move {
            pods.list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
                .await
                .ok()?
                .items
                .into_iter()
                .find(|p| {
                    phase(p).as_deref() == Some("Running")
                        && p.metadata.deletion_timestamp.is_none()
                })
        }
    })
    .await;
}

fn api(c: &Cluster, ns: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("openwop.dev", "v1alpha1", kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_lowercase()));
    Api::namespaced_with(c.client.clone(), ns, &ar)
}

fn apply(c: &Cluster, ns: &str, yaml: &str) -> Output {
    kubectl(c, &["apply", "-n", ns, "-f", "-"], Some(yaml))
}

fn apply_file(c: &Cluster, ns: &str, file: &str) -> String {
    let path = repo().join(file);
    ok(
        kubectl(c, &["apply", "-n", ns, "-f", path.to_str().unwrap()], None),
        &format!("kubectl apply {file}"),
    )
}

fn status(o: &DynamicObject) -> Value {
    o.data.get("status").cloned().unwrap_or(Value::Null)
}

fn condition(o: &DynamicObject, type_: &str) -> Option<Value> {
    status(o)["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// Waits for a Workflow condition `Ready` with `status` and returns the condition.
async fn wait_workflow(c: &Cluster, ns: &str, name: &str, want: &str) -> Value {
    let wf = api(c, ns, "Workflow");
    wait_for(
        Duration::from_secs(60),
        &format!("workflow {ns}/{name} Ready={want}"),
        || {
            let wf = wf.clone();
            async move {
                let o = wf.get_opt(name).await.ok().flatten()?;
                condition(&o, "Ready").filter(|c| c["status"] == want)
            }
        },
    )
    .await
}

/// Waits for a Run phase and returns its status.
async fn wait_run(c: &Cluster, ns: &str, name: &str, want: &str, secs: u64) -> Value {
    let runs = api(c, ns, "Run");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let o = runs.get_opt(name).await.ok().flatten();
        let st = o.as_ref().map(status).unwrap_or(Value::Null);
        if st["phase"] == want {
            return st;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("run {ns}/{name} did not reach {want} in {secs}s; status: {st:#}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The run's events as the CLI reads them from JetStream (`events --json --no-reasoning`):
/// the CLI reads the Run's `status.runId` and the subject `openwop.events.<ns>.<runId>`.
fn events(c: &Cluster, ns: &str, run: &str) -> Vec<Value> {
    try_events(c, ns, run).unwrap_or_else(|e| panic!("kubectl openwop events {ns}/{run}: {e}"))
}

/// [`events`], or the CLI's error (e.g. a Run the operator has not given a runId yet).
fn try_events(c: &Cluster, ns: &str, run: &str) -> Result<Vec<Value>, String> {
    let out = cli(c, &["events", run, "-n", ns, "--json", "--no-reasoning"]);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(json_lines(&String::from_utf8(out.stdout).unwrap())
        .into_iter()
        .map(|l| l["message"].clone())
        .collect())
}

/// `--json` lines of `kubectl openwop events`: `{lane, subject, streamSequence, message}`.
fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Everything the stream holds for one runId, both lanes (`events --run-id UID --json`: no
/// Run needed, so it also reads the subjects of a deleted Run).
fn lines_of_run_id(c: &Cluster, ns: &str, run: &str, run_id: &str) -> Vec<Value> {
    json_lines(&ok(
        cli(c, &["events", run, "-n", ns, "--run-id", run_id, "--json"]),
        "kubectl openwop events --run-id",
    ))
}

fn types(evs: &[Value]) -> Vec<String> {
    evs.iter()
        .map(|e| e["type"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Sequence 0..n without gaps, unique event ids, one terminal event at the end.
fn assert_gapless(evs: &[Value]) {
    let seqs: Vec<u64> = evs
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    let want: Vec<u64> = (0..evs.len() as u64).collect();
    assert_eq!(seqs, want, "sequences of {:?}", types(evs));
    let mut ids: Vec<&str> = evs.iter().map(|e| e["eventId"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), evs.len(), "duplicate eventIds");
}

async fn worker_pods(c: &Cluster, ns: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(c.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| !matches!(phase(p).as_deref(), Some("Succeeded" | "Failed")))
        .collect()
}

/// Waits until namespace `ns` has no worker pod: a waiting run holds none.
async fn no_worker_pods(c: &Cluster, ns: &str, within: Duration) {
    wait_for(within, "no worker pod while waiting", || {
        let c = c.clone();
        let ns = ns.to_owned();
        async move { worker_pods(&c, &ns).await.is_empty().then_some(()) }
    })
    .await;
}

fn hello_run(name: &str) -> String {
    hello_run_with(name, "hi")
}

fn hello_run_with(name: &str, greeting: &str) -> String {
    format!(
        "apiVersion: openwop.dev/v1alpha1\nkind: Run\nmetadata: {{name: {name}}}\nspec:\n  workflowRef: {{name: hello}}\n  inputs: {{greeting: {greeting}}}\n"
    )
}

/// `kubectl delete run <name>` and wait until it is gone; `extra` adds flags (a cascade).
fn delete_run(c: &Cluster, ns: &str, name: &str, extra: &[&str]) {
    let mut args = vec!["delete", "run", name, "-n", ns];
    args.extend_from_slice(extra);
    args.extend(["--wait=true", "--timeout=90s"]);
    ok(kubectl(c, &args, None), "kubectl delete run");
}

/// Applies the hello Run `name` greeting `greeting` again under a name a deleted Run had;
/// returns its status once completed and its events (the hello run's, with these inputs).
async fn hello_run_again(c: &Cluster, ns: &str, name: &str, greeting: &str) -> (Value, Vec<Value>) {
    ok(
        apply(c, ns, &hello_run_with(name, greeting)),
        "apply the second run under the same name",
    );
    let status = wait_run(c, ns, name, "completed", 120).await;
    let evs = events(c, ns, name);
    assert_eq!(types(&evs), HELLO_TYPES, "only the second run's events");
    assert_eq!(evs[0]["payload"]["inputs"], json!({"greeting": greeting}));
    (status, evs)
}

const HELLO_TYPES: [&str; 6] = [
    "run.started",
    "node.started",
    "node.completed",
    "node.started",
    "node.completed",
    "run.completed",
];

#[tokio::test]
async fn examples_apply_workflow_ready_run_completed_events_gapless() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-examples").await;
    apply_file(&c, &ns, "examples/01-hello-workflow.yaml");
    let ready = wait_workflow(&c, &ns, "hello", "True").await;
    assert_eq!(ready["type"], "Ready");
    apply_file(&c, &ns, "examples/03-run-by-id.yaml");
    let st = wait_run(&c, &ns, "hello-run", "completed", 120).await;
    assert_eq!(st["workflow"], "hello");
    let evs = events(&c, &ns, "hello-run");
    assert_eq!(types(&evs), HELLO_TYPES);
    assert_gapless(&evs);
    let nodes: Vec<&str> = evs[1..5]
        .iter()
        .map(|e| e["nodeId"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(nodes, ["start", "start", "finish", "finish"]);
    assert_eq!(evs[0]["runId"], st["runId"]);
    assert_eq!(st["events"], 6);
    assert_eq!(st["lastSequence"], 5);
    // The Run completes from the worker's events; a real kubelet reports the pod's terminal
    // phase a moment after the container exits.
    wait_for(Duration::from_secs(30), "no worker is held", || {
        let c = c.clone();
        let ns = ns.clone();
        async move { worker_pods(&c, &ns).await.is_empty().then_some(()) }
    })
    .await;
    examples::ticket_escalation(&c, &ns).await;
    examples::agent_tools(&c, &ns).await;
    delete_namespace(&c.client, &ns).await;
}

#[tokio::test]
async fn run_for_a_missing_workflow_waits_then_runs() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-missing").await;
    ok(apply(&c, &ns, &hello_run("early")), "apply run");
    let runs = api(&c, &ns, "Run");
    let cond = wait_for(Duration::from_secs(60), "WorkflowNotFound", || {
        let runs = runs.clone();
        async move {
            let o = runs.get_opt("early").await.ok().flatten()?;
            condition(&o, "Ready").filter(|c| c["reason"] == "WorkflowNotFound")
        }
    })
    .await;
    assert_eq!(cond["status"], "False");
    let o = runs.get("early").await.unwrap();
    assert_eq!(status(&o)["phase"], "pending");
    assert!(worker_pods(&c, &ns).await.is_empty());
    apply_file(&c, &ns, "examples/01-hello-workflow.yaml");
    wait_run(&c, &ns, "early", "completed", 120).await;
    assert_eq!(types(&events(&c, &ns, "early")), HELLO_TYPES);
    delete_namespace(&c.client, &ns).await;
}

/// Issue 13: a Run deleted and re-created under the same name is a new run — a new runId,
/// its own log from sequence 0 on `openwop.events.<ns>.<runId>`, its own status counters —
/// and the deleted run's events are purged from NATS by the Run's finalizer.
#[tokio::test]
async fn recreated_run_is_a_new_run_and_the_deleted_runs_events_are_purged() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-recreate").await;
    apply_file(&c, &ns, "examples/01-hello-workflow.yaml");
    wait_workflow(&c, &ns, "hello", "True").await;

    ok(
        apply(&c, &ns, &hello_run("hello-run")),
        "apply the first run",
    );
    let first = wait_run(&c, &ns, "hello-run", "completed", 120).await;
    let first_id = first["runId"].as_str().expect("status.runId").to_owned();
    let evs = events(&c, &ns, "hello-run");
    assert_eq!(types(&evs), HELLO_TYPES);
    assert!(
        evs.iter().all(|e| e["runId"] == first_id.as_str()),
        "{evs:#?}"
    );
    let stored = lines_of_run_id(&c, &ns, "hello-run", &first_id);
    assert_eq!(
        stored.len(),
        evs.len(),
        "the first run's log, read by runId"
    );
    assert!(
        stored
            .iter()
            .all(|l| l["subject"] == format!("openwop.events.{ns}.{first_id}")),
        "{stored:#?}"
    );

    delete_run(&c, &ns, "hello-run", &[]);
    // The Run is gone at once (no finalizer); the operator purges its events right after
    // (`controller::departed`).
    wait_for(
        Duration::from_secs(30),
        "the deleted run's events purged from NATS",
        || async {
            lines_of_run_id(&c, &ns, "hello-run", &first_id)
                .is_empty()
                .then_some(())
        },
    )
    .await;

    let (second, evs) = hello_run_again(&c, &ns, "hello-run", "BYE-second-run").await;
    let second_id = second["runId"].as_str().expect("status.runId").to_owned();
    assert_ne!(second_id, first_id, "a re-created Run gets a new runId");
    assert_gapless(&evs);
    assert!(
        evs.iter().all(|e| e["runId"] == second_id.as_str()),
        "another run's events in the log: {evs:#?}"
    );
    let done = evs.last().unwrap();
    assert!(
        done["payload"]["outputs"]
            .to_string()
            .contains("BYE-second-run"),
        "{done:#}"
    );
    // The status counts this run's events only (the operator routes events by runId).
    assert_eq!(second["events"], 6, "{second:#}");
    assert_eq!(second["lastSequence"], 5, "{second:#}");
    delete_namespace(&c.client, &ns).await;
}

/// A Run deleted with its snapshot and worker pod left behind (`--cascade=orphan`: nothing
/// owns them any more, so the garbage collector never removes them) and re-created under the
/// same name: the operator removes the leftovers — a snapshot the new run must not run from, a
/// finished pod holding its worker's name — and the new run runs its own inputs.
#[tokio::test]
async fn a_run_recreated_over_its_predecessors_leftovers_runs_its_own_inputs() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-leftover").await;
    apply_file(&c, &ns, "examples/01-hello-workflow.yaml");
    wait_workflow(&c, &ns, "hello", "True").await;
    ok(
        apply(&c, &ns, &hello_run_with("hello-run", "FIRST-run")),
        "apply the first run",
    );
    wait_run(&c, &ns, "hello-run", "completed", 120).await;
    delete_run(&c, &ns, "hello-run", &["--cascade=orphan"]);
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns);
    // Orphaning removes the owner references (the garbage collector does it just after).
    wait_for(
        Duration::from_secs(30),
        "the first run's snapshot and worker pod orphaned",
        || async {
            let cm = cms.get("hello-run-snapshot").await.ok()?;
            let pod = pods.get("hello-run-w1").await.ok()?;
            (cm.metadata.owner_references.unwrap_or_default().is_empty()
                && pod.metadata.owner_references.unwrap_or_default().is_empty())
            .then_some(())
        },
    )
    .await;

    let (second, _) = hello_run_again(&c, &ns, "hello-run", "SECOND-run").await;
    let second_id = second["runId"].as_str().expect("status.runId").to_owned();
    let cm = cms.get("hello-run-snapshot").await.unwrap();
    let owners = cm.metadata.owner_references.unwrap_or_default();
    assert_eq!(
        owners.iter().map(|o| o.uid.as_str()).collect::<Vec<_>>(),
        [second_id.as_str()],
        "the snapshot is the second run's"
    );
    assert!(
        cm.data.unwrap_or_default()["snapshot.json"].contains("SECOND-run"),
        "the second run's inputs in its snapshot"
    );
    delete_namespace(&c.client, &ns).await;
}

#[tokio::test]
async fn invalid_manifests_get_precise_messages() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-invalid").await;
    // Refused at admission by the CRD's CEL rule.
    let path = repo().join("examples/invalid/run-both-refs.yaml");
    let out = kubectl(
        &c,
        &["apply", "-n", &ns, "-f", path.to_str().unwrap()],
        None,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "set exactly one of workflowRef.name (Kubernetes name) or workflowRef.id (OpenWOP id)"
        ),
        "{err}"
    );
    // Structural schema: an unknown field and a wrong type name the field.
    let out = apply(
        &c,
        &ns,
        "apiVersion: openwop.dev/v1alpha1\nkind: Run\nmetadata: {name: bad-timeout}\nspec:\n  workflowRef: {name: hello}\n  timeoutSeconds: soon\n",
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec.timeoutSeconds"), "{err}");
    // Accepted by the API server, refused by the operator with the node named.
    apply_file(&c, &ns, "examples/invalid/mock-agent-not-allowed.yaml");
    let cond = wait_workflow(&c, &ns, "not-conformance", "False").await;
    assert_eq!(cond["reason"], "MockAgentNotAllowed");
    let msg = cond["message"].as_str().unwrap();
    assert!(msg.contains("agent"), "{msg}");
    assert!(msg.contains("core.conformance.mock-agent"), "{msg}");
    delete_namespace(&c.client, &ns).await;
}

#[tokio::test]
async fn mock_agent_low_confidence_waits_for_approval_and_gate_applies_elsewhere() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-approval").await;
    apply_file(&c, &ns, "examples/02-conformance-mock-agent.yaml");
    wait_workflow(&c, &ns, "conformance-mock-agent", "True").await;
    let st = wait_run(&c, &ns, "mock-agent-run", "waiting-approval", 120).await;
    let pi = &st["pendingInterrupts"][0];
    assert_eq!(pi["kind"], "approval");
    assert_eq!(pi["nodeId"], "agent");
    assert_eq!(pi["reason"], "low-confidence");
    assert_eq!(pi["observed"], 0.4);
    assert_eq!(pi["threshold"], 0.7);
    // A waiting run holds no pod.
    no_worker_pods(&c, &ns, Duration::from_secs(30)).await;
    let evs = events(&c, &ns, "mock-agent-run");
    let suspended = evs.last().unwrap();
    assert_eq!(suspended["type"], "node.suspended");
    assert_eq!(suspended["payload"]["kind"], "approval");
    assert_eq!(suspended["payload"]["reason"], "low-confidence");
    assert_gapless(&evs);
    let before = evs.len();
    ok(
        cli(&c, &["resume", "mock-agent-run", "-n", &ns, "--approve"]),
        "kubectl openwop resume --approve",
    );
    wait_run(&c, &ns, "mock-agent-run", "completed", 120).await;
    let evs = events(&c, &ns, "mock-agent-run");
    assert_gapless(&evs);
    let after = types(&evs[before..]);
    for t in [
        "run.resumed",
        "approval.received",
        "interrupt.resolved",
        "node.resumed",
    ] {
        assert!(after.contains(&t.to_string()), "{t} missing in {after:?}");
    }
    // Who decided: the kubeconfig user as the API server authenticates it.
    let received = evs
        .iter()
        .find(|e| e["type"] == "approval.received")
        .unwrap();
    assert_eq!(received["payload"]["action"], "accept");
    assert!(
        received["payload"]["decidedBy"]
            .as_str()
            .is_some_and(|b| !b.is_empty() && !b.contains("unattributed")),
        "{received}"
    );
    assert_eq!(after.last().unwrap(), "run.completed");
    // Nothing before the suspension is repeated by the resumed worker.
    assert_eq!(
        after.iter().filter(|t| *t == "run.started").count(),
        0,
        "{after:?}"
    );

    // The same workflow under a non-conformance id, outside the gate: Invalid.
    let wf =
        std::fs::read_to_string(repo().join("examples/02-conformance-mock-agent.yaml")).unwrap();
    let wf = wf.split("\n---").next().unwrap();
    let renamed = wf
        .replace("name: conformance-mock-agent", "name: triage-agent")
        .replace("id: conformance-mock-agent", "id: triage-agent");
    ok(apply(&c, &ns, &renamed), "apply renamed workflow");
    let cond = wait_workflow(&c, &ns, "triage-agent", "False").await;
    assert_eq!(cond["reason"], "MockAgentNotAllowed");
    delete_namespace(&c.client, &ns).await;
}

fn prompt_workflow(name: &str, node: Value) -> String {
    let wf = json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": name},
        "spec": {"id": name, "name": name, "version": "1", "nodes": [node]},
    });
    serde_json::to_string(&wf).unwrap()
}

/// A Run whose provider calls are scripted: `mocks` is `spec.providerMocks`.
fn mocked_run(name: &str, workflow: &str, mocks: Value) -> String {
    let mut run = json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": name},
        "spec": {"workflowRef": {"name": workflow}, "timeoutSeconds": 300},
    });
    if mocks.as_object().is_some_and(|m| !m.is_empty()) {
        run["spec"]["providerMocks"] = mocks;
    }
    serde_json::to_string(&run).unwrap()
}

#[tokio::test]
async fn clarification_answered_by_patch_and_by_resume() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-clarify").await;
    let node = json!({"id": "q", "typeId": "core.ai.callPrompt",
        "config": {"provider": "mock", "prompt": "plan the trip", "envelopeType": "vendor.acme.plan"}});
    ok(
        apply(&c, &ns, &prompt_workflow("planner", node)),
        "apply workflow",
    );
    wait_workflow(&c, &ns, "planner", "True").await;
    let clarify = |id: &str, q: &str| {
        json!({"responses": [{"stopReason": "stop", "content": {"type": "clarification.request",
            "payload": {"questions": [{"id": id, "question": q}]}}}]})
    };
    let mocks = json!({"q": {"turns": [
        clarify("region", "Which region?"),
        clarify("tier", "Which tier?"),
        {"responses": [{"stopReason": "stop", "content": {"type": "vendor.acme.plan", "payload": {"region": "eu", "tier": "gold"}}}]},
    ]}});
    ok(
        apply(&c, &ns, &mocked_run("trip", "planner", mocks)),
        "apply run",
    );

    // First question: answered with kubectl patch.
    let st = wait_run(&c, &ns, "trip", "waiting-input", 120).await;
    let pi = st["pendingInterrupts"][0].clone();
    assert_eq!(pi["kind"], "clarification");
    assert_eq!(pi["questions"][0]["id"], "region");
    no_worker_pods(&c, &ns, Duration::from_secs(30)).await;
    let patch = json!({"spec": {"answers": [{"interruptId": pi["interruptId"], "value": {"region": "eu"}}]}});
    ok(
        kubectl(
            &c,
            &[
                "patch",
                "run",
                "trip",
                "-n",
                &ns,
                "--type=merge",
                "-p",
                &patch.to_string(),
            ],
            None,
        ),
        "kubectl patch",
    );

    // Second question: answered with kubectl openwop resume.
    let runs = api(&c, &ns, "Run");
    let first_id = pi["interruptId"].as_str().unwrap().to_string();
    let st = wait_for(Duration::from_secs(120), "second question", || {
        let runs = runs.clone();
        let first_id = first_id.clone();
        async move {
            let st = status(&runs.get("trip").await.ok()?);
            (st["phase"] == "waiting-input"
                && st["pendingInterrupts"][0]["interruptId"] != first_id)
                .then_some(st)
        }
    })
    .await;
    assert_eq!(st["pendingInterrupts"][0]["questions"][0]["id"], "tier");
    ok(
        cli(&c, &["resume", "trip", "-n", &ns, "--answer", "tier=gold"]),
        "kubectl openwop resume --answer",
    );
    let st = wait_run(&c, &ns, "trip", "completed", 120).await;
    assert!(st["pendingInterrupts"].is_null(), "{st:#}");
    let evs = events(&c, &ns, "trip");
    assert_gapless(&evs);
    let t = types(&evs);
    assert_eq!(
        t.iter().filter(|t| *t == "clarification.requested").count(),
        2,
        "{t:?}"
    );
    assert_eq!(
        t.iter().filter(|t| *t == "clarification.resolved").count(),
        2,
        "{t:?}"
    );
    assert_eq!(t.iter().filter(|t| *t == "run.started").count(), 1, "{t:?}");
    assert_eq!(t.last().unwrap(), "run.completed");
    let done = evs.last().unwrap();
    assert_eq!(
        done["payload"]["outputs"]["q"],
        json!({"output": {"region": "eu", "tier": "gold"}, "envelopeType": "vendor.acme.plan"}),
        "{done:#}"
    );
    delete_namespace(&c.client, &ns).await;
}

/// The `log.appended` call records of node `p`: `(attempt, maxTokens, fragments)`.
fn call_records(evs: &[Value]) -> Vec<(u64, u64, Vec<Value>)> {
    evs.iter()
        .filter(|e| e["type"] == "log.appended" && e["payload"]["nodeId"] == "p")
        .filter_map(|e| {
            let f = &e["payload"]["fields"];
            Some((
                f["attempt"].as_u64()?,
                f["maxTokens"].as_u64()?,
                f["fragments"].as_array()?.clone(),
            ))
        })
        .collect()
}

fn of_type<'a>(evs: &'a [Value], t: &str) -> Vec<&'a Value> {
    evs.iter().filter(|e| e["type"] == t).collect()
}

#[tokio::test]
async fn mock_provider_truncation_schema_violation_refusal_and_cap() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-retry").await;
    let node = json!({"id": "p", "typeId": "core.ai.callPrompt",
        "config": {"provider": "mock", "prompt": "summarise", "envelopeType": "vendor.acme.summary",
                   "maxTokens": 64, "schemaRounds": 3},
        "envelopeContract": {"accepts": ["vendor.acme.summary"], "schemas": {"vendor.acme.summary": {
            "type": "object", "additionalProperties": false, "required": ["text"],
            "properties": {"text": {"type": "string"}}}}}});
    ok(
        apply(&c, &ns, &prompt_workflow("summary", node)),
        "apply workflow",
    );
    wait_workflow(&c, &ns, "summary", "True").await;
    let valid = json!({"stopReason": "stop", "content": {"type": "vendor.acme.summary", "payload": {"text": "short"}}, "outputTokens": 20});
    let truncated = json!({"stopReason": "max_tokens", "content": "{\"type\": \"vendor.acme.su", "outputTokens": 64});
    let programs = [
        (
            "truncation",
            json!({"p": {"responses": [truncated, valid]}}),
        ),
        (
            "violation",
            json!({"p": {"responses": [
                {"stopReason": "stop", "content": {"type": "vendor.acme.summary", "payload": 42}},
                valid,
            ]}}),
        ),
        (
            "refusal",
            json!({"p": {"responses": [{"stopReason": "refusal", "refusalText": "I cannot help with that"}, valid]}}),
        ),
        (
            "exhaustion",
            json!({"p": {"responses": [truncated, truncated, truncated, truncated, valid]}}),
        ),
    ];
    for (run, mocks) in &programs {
        ok(
            apply(&c, &ns, &mocked_run(run, "summary", mocks.clone())),
            "apply run",
        );
    }

    // Truncation: budget doubled, no corrective fragment, then success.
    wait_run(&c, &ns, "truncation", "completed", 120).await;
    let evs = events(&c, &ns, "truncation");
    assert_gapless(&evs);
    let rec = call_records(&evs);
    assert_eq!(rec.len(), 2, "{rec:?}");
    assert_eq!((rec[0].0, rec[0].1), (1, 64));
    assert_eq!((rec[1].0, rec[1].1), (2, 128));
    // The RFC 0030 reasoning directive rides on every call; truncation adds nothing to it.
    assert_eq!(rec[0].2, [json!("reasoning-directive")], "{rec:?}");
    assert_eq!(
        rec[1].2, rec[0].2,
        "no corrective fragment after truncation: {rec:?}"
    );
    let tr = of_type(&evs, "envelope.truncated");
    assert_eq!(tr.len(), 1);
    assert_eq!(tr[0]["payload"]["stopReason"], "max_tokens");
    let retry = of_type(&evs, "envelope.retry.attempted");
    assert_eq!(retry.len(), 1);
    assert_eq!(retry[0]["payload"]["reason"], "truncation");
    assert_eq!(retry[0]["payload"]["attempt"], 2);

    // Schema violation: corrective fragment, same budget, then success.
    wait_run(&c, &ns, "violation", "completed", 120).await;
    let evs = events(&c, &ns, "violation");
    assert_gapless(&evs);
    let rec = call_records(&evs);
    assert_eq!(rec.len(), 2, "{rec:?}");
    assert_eq!(rec[0].1, 64);
    assert_eq!(rec[1].1, 64, "same budget after a schema violation");
    let added: Vec<&Value> = rec[1].2.iter().filter(|f| !rec[0].2.contains(f)).collect();
    assert_eq!(added.len(), 1, "one corrective fragment: {rec:?}");
    assert!(
        added[0].as_str().unwrap().contains("schema"),
        "a schema-violation fragment: {rec:?}"
    );
    let retry = of_type(&evs, "envelope.retry.attempted");
    assert_eq!(retry.len(), 1);
    assert_eq!(retry[0]["payload"]["reason"], "schema-violation");
    assert!(of_type(&evs, "envelope.truncated").is_empty());

    // Refusal: never retried, run fails with envelope_refusal, refusal text not in the error.
    let st = wait_run(&c, &ns, "refusal", "failed", 120).await;
    assert_eq!(st["error"]["code"], "envelope_refusal", "{st:#}");
    assert!(
        !st["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("I cannot help"),
        "{st:#}"
    );
    let evs = events(&c, &ns, "refusal");
    assert_gapless(&evs);
    assert_eq!(call_records(&evs).len(), 1, "refusals are never retried");
    assert_eq!(of_type(&evs, "envelope.refusal").len(), 1);
    assert!(of_type(&evs, "envelope.retry.attempted").is_empty());
    assert_eq!(types(&evs).last().unwrap(), "run.failed");

    // Truncation every time: capped at schemaRounds calls, truncation_unrecoverable.
    let st = wait_run(&c, &ns, "exhaustion", "failed", 120).await;
    assert_eq!(
        st["error"]["code"], "envelope_truncation_unrecoverable",
        "{st:#}"
    );
    let evs = events(&c, &ns, "exhaustion");
    assert_gapless(&evs);
    let rec = call_records(&evs);
    assert_eq!(
        rec.iter().map(|r| r.0).collect::<Vec<_>>(),
        [1, 2, 3],
        "capped at schemaRounds calls: {rec:?}"
    );
    assert_eq!(
        rec.iter().map(|r| r.1).collect::<Vec<_>>(),
        [64, 128, 256],
        "each truncation doubles the budget: {rec:?}"
    );
    let ex = of_type(&evs, "envelope.retry.exhausted");
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0]["payload"]["finalReason"], "truncation");
    let cap = of_type(&evs, "cap.breached");
    assert_eq!(cap.len(), 1);
    assert_eq!(cap[0]["payload"]["kind"], "schema");
    assert_eq!(types(&evs).last().unwrap(), "run.failed");
    delete_namespace(&c.client, &ns).await;
}

#[tokio::test]
async fn provider_mocks_example_runs_and_the_namespace_gate_refuses_elsewhere() {
    let (c, _g) = setup().await;
    // Allowed (`j-*`): the example's OpenAI node is answered by its scripted responses.
    let ns = namespace(&c.client, "j-mocks").await;
    apply_file(&c, &ns, "examples/04-provider-mocks.yaml");
    wait_workflow(&c, &ns, "summariser", "True").await;
    let st = wait_run(&c, &ns, "summarise-test", "completed", 120).await;
    assert!(st["error"].is_null(), "{st:#}");
    let evs = events(&c, &ns, "summarise-test");
    assert_gapless(&evs);
    let calls: Vec<(u64, u64)> = evs
        .iter()
        .filter(|e| e["type"] == "log.appended" && e["payload"]["nodeId"] == "summarise")
        .filter_map(|e| {
            let f = &e["payload"]["fields"];
            Some((f["attempt"].as_u64()?, f["maxTokens"].as_u64()?))
        })
        .collect();
    assert_eq!(
        calls,
        [(1, 64), (2, 128)],
        "truncated, then retried with 2x budget"
    );
    assert_eq!(of_type(&evs, "envelope.truncated").len(), 1);
    let done = evs.last().unwrap();
    assert_eq!(
        done["payload"]["outputs"]["summarise"]["output"]["text"],
        "The floor 3 printer jams repeatedly.",
        "{done:#}"
    );
    // A mock for a node the workflow does not have: refused, the node named.
    let bad = mocked_run(
        "typo",
        "summariser",
        json!({"summarize": {"responses": [{"stopReason": "stop"}]}}),
    );
    ok(apply(&c, &ns, &bad), "apply run");
    let st = wait_run(&c, &ns, "typo", "failed", 60).await;
    assert_eq!(st["error"]["code"], "provider_mocks_invalid", "{st:#}");
    let msg = st["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("spec.providerMocks.summarize") && msg.contains("its nodes: summarise"),
        "{msg}"
    );

    // Not allowed (outside `j-*`): the Run fails before any pod, with the reason and the fix.
    let other = namespace(&c.client, "gate").await;
    apply_file(&c, &other, "examples/04-provider-mocks.yaml");
    let st = wait_run(&c, &other, "summarise-test", "failed", 60).await;
    assert_eq!(st["error"]["code"], "provider_mocks_not_allowed", "{st:#}");
    let ready = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .unwrap();
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "ProviderMocksNotAllowed");
    let msg = ready["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("not allowed in namespace {other}"))
            && msg.contains("conformance.providerMockNamespaces"),
        "{msg}"
    );
    assert!(
        all_pods(&c, &other).await.is_empty(),
        "no worker for a refused run"
    );
    delete_namespace(&c.client, &other).await;
    delete_namespace(&c.client, &ns).await;
}

/// Issue 13: `core.ai.structuredOutput` is a registered node type (the Workflow is Ready, not
/// `Invalid: unknown typeId`); its output is validated against `config.outputSchema`: an
/// answer that violates it is retried with a corrective fragment and the same budget.
#[tokio::test]
async fn structured_output_node_is_ready_and_its_output_validated() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-structured").await;
    let node = json!({"id": "p", "typeId": "core.ai.structuredOutput",
        "config": {"provider": "mock", "prompt": "classify the ticket", "maxTokens": 64,
            "outputSchema": {"type": "object", "additionalProperties": false,
                "required": ["category", "urgency"],
                "properties": {"category": {"type": "string"},
                               "urgency": {"type": "string", "enum": ["low", "high"]}}}}});
    ok(
        apply(&c, &ns, &prompt_workflow("classify", node)),
        "apply workflow",
    );
    let ready = wait_workflow(&c, &ns, "classify", "True").await;
    assert_eq!(ready["type"], "Ready", "{ready:#}");
    let mocks = json!({"p": {"responses": [
        {"stopReason": "stop", "content": {"category": "billing", "urgency": "urgent"}},
        {"stopReason": "stop", "content": {"category": "billing", "urgency": "high"}},
    ]}});
    ok(
        apply(&c, &ns, &mocked_run("classified", "classify", mocks)),
        "apply run",
    );
    let st = wait_run(&c, &ns, "classified", "completed", 120).await;
    assert!(st["error"].is_null(), "{st:#}");
    let evs = events(&c, &ns, "classified");
    assert_gapless(&evs);
    let started = of_type(&evs, "node.started");
    assert_eq!(
        started[0]["payload"]["typeId"], "core.ai.structuredOutput",
        "{started:#?}"
    );
    let rec = call_records(&evs);
    assert_eq!(
        rec.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(),
        [(1, 64), (2, 64)],
        "{rec:?}"
    );
    let retry = of_type(&evs, "envelope.retry.attempted");
    assert_eq!(retry.len(), 1);
    assert_eq!(retry[0]["payload"]["reason"], "schema-violation");
    let done = evs.last().unwrap();
    assert_eq!(done["type"], "run.completed");
    assert_eq!(
        done["payload"]["outputs"]["p"]["output"],
        json!({"category": "billing", "urgency": "high"}),
        "{done:#}"
    );
    delete_namespace(&c.client, &ns).await;
}

/// What `make demo` runs (examples/05-ai-triage.yaml): a structuredOutput node truncated then
/// retried with a doubled budget, a node that waits for a clarification answered with
/// `kubectl openwop resume`, and both nodes' reasoning on the run's reasoning subject.
#[tokio::test]
async fn ai_triage_example_truncation_clarification_and_reasoning() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-triage").await;
    apply_file(&c, &ns, "examples/05-ai-triage.yaml");
    wait_workflow(&c, &ns, "ticket-triage", "True").await;
    let st = wait_run(&c, &ns, "triage-run", "waiting-input", 120).await;
    let pi = &st["pendingInterrupts"][0];
    assert_eq!(pi["kind"], "clarification", "{st:#}");
    assert_eq!(pi["nodeId"], "plan");
    assert_eq!(pi["questions"][0]["id"], "refund");
    ok(
        cli(
            &c,
            &["resume", "triage-run", "-n", &ns, "--answer", "refund=now"],
        ),
        "kubectl openwop resume --answer",
    );
    let st = wait_run(&c, &ns, "triage-run", "completed", 120).await;
    let run_id = st["runId"].as_str().unwrap().to_owned();
    let evs = events(&c, &ns, "triage-run");
    assert_gapless(&evs);
    let calls: Vec<(u64, u64)> = evs
        .iter()
        .filter(|e| e["type"] == "log.appended" && e["payload"]["nodeId"] == "extract")
        .filter_map(|e| {
            let f = &e["payload"]["fields"];
            Some((f["attempt"].as_u64()?, f["maxTokens"].as_u64()?))
        })
        .collect();
    assert_eq!(calls, [(1, 64), (2, 128)], "truncated, then 2x budget");
    assert_eq!(of_type(&evs, "envelope.truncated").len(), 1);
    let extracted = evs
        .iter()
        .find(|e| e["type"] == "node.completed" && e["nodeId"] == "extract")
        .expect("extract completed");
    assert_eq!(
        extracted["payload"]["outputs"]["output"]["category"], "billing",
        "{extracted:#}"
    );
    assert_eq!(extracted["payload"]["outputs"]["output"]["urgency"], "high");
    let resolved = of_type(&evs, "clarification.resolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["payload"]["answers"], json!({"refund": "now"}));
    let done = evs.last().unwrap();
    assert_eq!(done["type"], "run.completed");
    assert_eq!(
        done["payload"]["outputs"]["plan"]["envelopeType"], "vendor.acme.plan",
        "{done:#}"
    );
    assert_eq!(
        done["payload"]["outputs"]["plan"]["output"]["team"],
        "billing"
    );
    // The reasoning lane: the provider's thinking (extract) and the envelope's reasoning (plan).
    let reasoning: Vec<Value> = lines_of_run_id(&c, &ns, "triage-run", &run_id)
        .into_iter()
        .filter(|l| l["lane"] == "reasoning")
        .collect();
    assert!(
        reasoning
            .iter()
            .all(|l| l["subject"] == format!("openwop.reasoning.{ns}.{run_id}")),
        "{reasoning:#?}"
    );
    let said = |node: &str, text: &str| {
        reasoning.iter().any(|l| {
            l["message"]["nodeId"] == node
                && l["message"]["payload"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(text))
        })
    };
    assert!(said("extract", "a billing problem"), "{reasoning:#?}");
    assert!(said("plan", "immediate refund"), "{reasoning:#?}");
    delete_namespace(&c.client, &ns).await;
}

/// A worker that refuses its configuration (here: an `openai-compatible` provider the host
/// gives no base URL) fails the Run at once, and the reason from the worker's log tail reaches
/// the Run's status after the pod is gone.
#[tokio::test]
async fn a_worker_refusing_its_configuration_fails_the_run_with_the_reason() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-badinput").await;
    let manifests = r#"
apiVersion: v1
kind: Secret
metadata: {name: llm}
stringData: {key: sk-not-used}
---
apiVersion: openwop.dev/v1alpha1
kind: Workflow
metadata: {name: compat}
spec:
  id: compat
  name: Compat
  version: "1.0.0"
  providers:
    - provider: openai-compatible
      secretRef: {name: llm, key: key}
  nodes:
    - id: ask
      typeId: core.ai.callPrompt
      config: {provider: openai-compatible, model: llama-3, prompt: Say hi.}
---
apiVersion: openwop.dev/v1alpha1
kind: Run
metadata: {name: compat-1}
spec:
  workflowRef: {name: compat}
"#;
    ok(apply(&c, &ns, manifests), "apply secret, workflow and run");
    let st = wait_run(&c, &ns, "compat-1", "failed", 90).await;
    assert_eq!(st["error"]["code"], "worker_input_invalid", "{st:#}");
    let msg = st["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("the worker refused its input (exit 2): provider configuration:")
            && msg.contains("needs a base URL"),
        "{msg}"
    );
    assert_eq!(st["attempts"], 1, "not retried: {st:#}");
    assert!(!msg.contains("sk-not-used"));
    delete_namespace(&c.client, &ns).await;
}

/// Puts the release back on the mini-cluster's NATS when a journey that changed it ends,
/// also when it fails, so the next journeys find the release as `setup` left it.
struct RestoreRelease<'a>(&'a Cluster);

impl Drop for RestoreRelease<'_> {
    fn drop(&mut self) {
        helm_install(self.0, &[]);
    }
}

/// `nats.external.credentialsSecret` against a NATS that requires a user and password: the
/// operator's own consumer and the worker pods (through the copy in the Run namespace)
/// authenticate, `kubectl openwop events` reads with `--nats-user`, and the password shows
/// nowhere (operator log, Run status, Events, CLI output).
#[tokio::test]
async fn external_nats_with_a_credentials_secret() {
    let (c, _g) = setup().await;
    if !c.local {
        eprintln!(
            "SKIPPED external_nats_with_a_credentials_secret: it re-installs the release against a NATS it starts on this host"
        );
        return;
    }
    const PASSWORD: &str = "pw-J7q2-e2e-never-shown";
    let nats =
        openwop_nats::testing::NatsServer::start_with(&["--user", "openwop", "--pass", PASSWORD]);
    let url = nats.url();
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: nats-auth}}\nstringData: {{username: openwop, password: {PASSWORD}}}\n"
    );
    ok(
        apply(&c, release_ns(), &secret),
        "apply the NATS credentials Secret",
    );
    let restore = RestoreRelease(&c);
    helm_install(
        &c,
        &[
            &format!("nats.external.url={url}"),
            "nats.external.credentialsSecret=nats-auth",
        ],
    );
    wait_operator_ready(&c).await;

    let ns = namespace(&c.client, "j-natsauth").await;
    apply_file(&c, &ns, "examples/01-hello-workflow.yaml");
    wait_workflow(&c, &ns, "hello", "True").await;
    ok(apply(&c, &ns, &hello_run("authed")), "apply run");
    let st = wait_run(&c, &ns, "authed", "completed", 120).await;
    assert!(!st.to_string().contains(PASSWORD), "{st:#}");

    // The copy the worker pod mounted: only the recognised keys, labelled as the operator's.
    let copy = ok(
        kubectl(
            &c,
            &[
                "-n",
                &ns,
                "get",
                "secret",
                "openwop-nats-credentials",
                "-o",
                "json",
            ],
            None,
        ),
        "get the credentials copy",
    );
    let copy: Value = serde_json::from_str(&copy).unwrap();
    let keys: Vec<&str> = copy["data"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["password", "username"], "{copy:#}");
    assert_eq!(
        copy["metadata"]["labels"]["app.kubernetes.io/component"],
        "nats-credentials"
    );
    assert_eq!(
        copy["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "openwop-operator"
    );

    // The CLI: refused without credentials, the timeline with them.
    let events_args = [
        "events",
        "authed",
        "-n",
        ns.as_str(),
        "--nats-url",
        url.as_str(),
        "--json",
        "--no-reasoning",
    ];
    let o = cli(&c, &events_args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        !o.status.success() && err.contains("authorization violation"),
        "{err}"
    );
    let mut cmd = Command::new(target_bin("debug", "kubectl-openwop"));
    cmd.args(events_args)
        .args(["--nats-user", "openwop"])
        .env("KUBECONFIG", &c.kubeconfig)
        .env("OPENWOP_NATS_PASSWORD", PASSWORD);
    let out = ok(cmd.output().unwrap(), "kubectl openwop events --nats-user");
    assert!(!out.contains(PASSWORD));
    let evs: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["message"].clone())
        .collect();
    assert_eq!(types(&evs), HELLO_TYPES);
    assert_gapless(&evs);

    // The operator's own durable consumer read (and acked) them on the authenticated NATS.
    let client = async_nats::ConnectOptions::new()
        .user_and_password("openwop".into(), PASSWORD.into())
        .connect(&url)
        .await
        .unwrap();
    let stream = async_nats::jetstream::new(client)
        .get_stream("OPENWOP_EVENTS")
        .await
        .unwrap();
    let mut acked = 0;
    for _ in 0..60 {
        let mut consumer = stream
            .get_consumer::<async_nats::jetstream::consumer::pull::Config>("openwop-operator")
            .await
            .unwrap();
        acked = consumer.info().await.unwrap().ack_floor.stream_sequence;
        if acked >= evs.len() as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        acked >= evs.len() as u64,
        "operator consumer acked {acked} of {}",
        evs.len()
    );

    let logs = ok(
        kubectl(
            &c,
            &[
                "-n",
                release_ns(),
                "logs",
                "-l",
                "app.kubernetes.io/component=operator",
                "--tail=-1",
            ],
            None,
        ),
        "operator logs",
    );
    assert!(
        logs.contains("\"credentials\":\"username and password\""),
        "{logs}"
    );
    assert!(!logs.contains(PASSWORD), "password in the operator log");
    let described = ok(
        kubectl(&c, &["-n", &ns, "get", "events", "-o", "json"], None),
        "events",
    );
    assert!(!described.contains(PASSWORD));

    delete_namespace(&c.client, &ns).await;
    drop(restore);
    let _ = kubectl(
        &c,
        &["-n", release_ns(), "delete", "secret", "nats-auth"],
        None,
    );
    wait_operator_ready(&c).await;
}

/// The operator Service's ready endpoint as `<pod IP>:<port>`. The mini-cluster has no
/// kube-proxy: discovery "through the Service" resolves the Service's EndpointSlice (which
/// the real endpointslice controller fills from ready pods) and calls that address (the
/// pod IP is the host's address, see e2e/README.md).
async fn service_endpoint(c: &Cluster) -> String {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let svcs: Api<Service> = Api::namespaced(c.client.clone(), release_ns());
    let svc = svcs
        .list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
        .await
        .unwrap()
        .items
        .pop()
        .expect("the operator Service");
    let name = svc.metadata.name.unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(c.client.clone(), release_ns());
    wait_for(Duration::from_secs(60), "a ready endpoint", || {
        let slices = slices.clone();
        let name = name.clone();
        async move {
            let list = slices
                .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
                .await
                .ok()?;
            list.items.into_iter().find_map(|s| {
                let port = s.ports?.first()?.port?;
                let ep = s
                    .endpoints
                    .into_iter()
                    .find(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))?;
                Some(format!("{}:{port}", ep.addresses.first()?))
            })
        }
    })
    .await
}

/// `curl -si`: (status, headers+body text).
fn http_get(url: &str, headers: &[&str]) -> (u16, String) {
    let mut args = vec!["-si", "--max-time", "5", url];
    for h in headers {
        args.push("-H");
        args.push(h);
    }
    let out = Command::new("curl").args(&args).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

async fn discovery_document(c: &Cluster) -> (String, Value, String) {
    let ep = service_endpoint(c).await;
    let url = format!("http://{ep}/.well-known/openwop");
    let (code, text) = wait_for(Duration::from_secs(60), "discovery answers", || {
        let url = url.clone();
        async move {
            let (code, text) = http_get(&url, &[]);
            (code == 200).then_some((code, text))
        }
    })
    .await;
    assert_eq!(code, 200);
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let etag = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("etag:")
                .then(|| l[5..].trim().to_string())
        })
        .expect("ETag header");
    (ep, serde_json::from_str(body).unwrap(), etag)
}

#[tokio::test]
async fn discovery_through_the_service_helm_upgrade_and_uninstall() {
    let (c, _g) = setup().await;
    if c.skip_unless_local(
        "discovery_through_the_service_helm_upgrade_and_uninstall",
        "a release the journeys own (they upgrade and uninstall it) and operator pod IPs reachable from this machine",
    ) {
        return;
    }
    // A previous run may have left the upgraded release: its pod serves until it is replaced.
    let port = format!(":{}", operator_port());
    let (ep, doc, etag) = wait_for(
        Duration::from_secs(120),
        "discovery on the journeys' port",
        || {
            let (c, port) = (c.clone(), port.clone());
            async move {
                let (ep, doc, etag) = discovery_document(&c).await;
                (ep.ends_with(&port) && doc["limits"]["schemaRounds"] == 3)
                    .then_some((ep, doc, etag))
            }
        },
    )
    .await;
    assert!(doc["protocolVersion"].is_string(), "{doc:#}");
    assert!(
        doc["supportedEnvelopes"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    );
    assert_eq!(doc["limits"]["schemaRounds"], 3);
    let (code, _) = http_get(
        &format!("http://{ep}/.well-known/openwop"),
        &[&format!("If-None-Match: {etag}")],
    );
    assert_eq!(code, 304);

    // The host profile: a node that needs 5 provider calls (4 truncations, then the answer)
    // exceeds the chart's limits.schemaRounds (3) before the upgrade and fits after it. The
    // worker enforces the value frozen in the snapshot, which discovery advertises too.
    let ns = namespace(&c.client, "j-upgrade").await;
    let wf = prompt_workflow(
        "rounds",
        json!({"id": "extract", "typeId": "core.ai.structuredOutput",
               "config": {"prompt": "extract", "maxTokens": 64, "schemaRounds": 16,
                          "outputSchema": {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}}}),
    );
    ok(apply(&c, &ns, &wf), "apply rounds workflow");
    wait_workflow(&c, &ns, "rounds", "True").await;
    let cut = json!({"stopReason": "max_tokens", "content": "{\"a\":", "outputTokens": 64});
    let five_calls = json!({"extract": {"responses": [cut, cut, cut, cut,
        {"stopReason": "stop", "content": {"a": 1}}]}});
    ok(
        apply(
            &c,
            &ns,
            &mocked_run("rounds-before", "rounds", five_calls.clone()),
        ),
        "apply run",
    );
    let before = wait_run(&c, &ns, "rounds-before", "failed", 120).await;
    assert!(
        before["error"].to_string().contains("envelope_"),
        "schemaRounds 3 stops the emission: {before:#}"
    );

    // Upgrade with changed values. The port changes too: pods share the host network here, so
    // the surge pod of the rolling update could not bind the old pod's port.
    let upgraded = operator_port() + 10001;
    let upgraded_port = format!("operator.port={upgraded}");
    helm_install(&c, &[&upgraded_port, "limits.schemaRounds=5"]);
    let (ep, doc, new_etag) = wait_for(Duration::from_secs(120), "upgraded discovery", || {
        let c = c.clone();
        async move {
            let (ep, doc, etag) = discovery_document(&c).await;
            (ep.ends_with(&format!(":{upgraded}")) && doc["limits"]["schemaRounds"] == 5)
                .then_some((ep, doc, etag))
        }
    })
    .await;
    assert_ne!(new_etag, etag, "{ep}: {doc:#}");
    let values = ok(
        helm(
            &c,
            &["get", "values", release(), "-n", release_ns(), "-o", "json"],
        ),
        "helm get values",
    );
    assert!(values.contains(&upgraded.to_string()), "{values}");
    // The next run gets the new limit (once the old operator pod, which may still lead, is gone).
    ok(
        kubectl(
            &c,
            &[
                "-n",
                release_ns(),
                "rollout",
                "status",
                "deployment",
                "-l",
                "app.kubernetes.io/component=operator",
                "--timeout=120s",
            ],
            None,
        ),
        "operator rollout",
    );
    ok(
        apply(&c, &ns, &mocked_run("rounds-after", "rounds", five_calls)),
        "apply run",
    );
    wait_run(&c, &ns, "rounds-after", "completed", 120).await;
    let snap: k8s_openapi::api::core::v1::ConfigMap = Api::namespaced(c.client.clone(), &ns)
        .get("rounds-after-snapshot")
        .await
        .expect("snapshot ConfigMap");
    let snap: Value =
        serde_json::from_str(&snap.data.unwrap()["snapshot.json"]).expect("snapshot JSON");
    assert_eq!(
        snap["host"]["limits"]["schemaRounds"], 5,
        "{:#}",
        snap["host"]
    );
    let calls = events(&c, &ns, "rounds-after")
        .iter()
        .filter(|e| e["type"] == "envelope.truncated")
        .count();
    assert_eq!(calls, 4, "four truncations, then the fifth call answered");

    // Runs still work after the upgrade.
    apply_file(&c, &ns, "examples/01-hello-workflow.yaml");
    wait_workflow(&c, &ns, "hello", "True").await;
    ok(apply(&c, &ns, &hello_run("after-upgrade")), "apply run");
    wait_run(&c, &ns, "after-upgrade", "completed", 120).await;

    // The discovery ConfigMap and the leader Lease are release objects the operator fills in:
    // Helm owns their metadata, the operator `data` (server-side apply) and `spec`.
    let cm: k8s_openapi::api::core::v1::ConfigMap = Api::namespaced(c.client.clone(), release_ns())
        .get("openwop-discovery")
        .await
        .expect("discovery ConfigMap");
    assert_eq!(
        cm.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("meta.helm.sh/release-name")),
        Some(&release().to_string()),
        "the chart owns the discovery ConfigMap"
    );
    assert!(
        cm.data
            .as_ref()
            .is_some_and(|d| d.contains_key("capabilities.json")),
        "the operator filled the chart's ConfigMap: {:?}",
        cm.data.as_ref().map(|d| d.keys().collect::<Vec<_>>())
    );
    let data_owner = cm
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.get("f:data").is_some())
        })
        .and_then(|m| m.manager.clone());
    assert_eq!(data_owner.as_deref(), Some("openwop-operator"));
    let lease: k8s_openapi::api::coordination::v1::Lease =
        Api::namespaced(c.client.clone(), release_ns())
            .get("openwop-operator")
            .await
            .expect("leader Lease");
    assert_eq!(
        lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("meta.helm.sh/release-name")),
        Some(&release().to_string()),
        "the chart owns the Lease"
    );
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(holder.starts_with("openwop-operator-"), "holder {holder:?}");

    // Uninstall: nothing of the release is left but the CRDs (Helm keeps crds/ by design, and
    // with them the user's Workflows and Runs).
    ok(
        helm(&c, &["uninstall", release(), "-n", release_ns(), "--wait"]),
        "helm uninstall",
    );
    *INSTALLED.lock().unwrap_or_else(|e| e.into_inner()) = false;
    let left = wait_for(Duration::from_secs(60), "release objects gone", || {
        let c = c.clone();
        async move {
            let out = kubectl(
                &c,
                &[
                    "get",
                    "deployments,replicasets,pods,services,configmaps,serviceaccounts,roles,rolebindings,poddisruptionbudgets,leases",
                    "-n",
                    release_ns(),
                    "-o",
                    "name",
                ],
                None,
            );
            let names = String::from_utf8_lossy(&out.stdout).into_owned();
            let ours: Vec<String> = names
                .lines()
                .filter(|l| l.contains("openwop"))
                .map(str::to_string)
                .collect();
            ours.is_empty().then_some(ours)
        }
    })
    .await;
    assert!(left.is_empty());
    let cluster_scoped = ok(
        kubectl(
            &c,
            &["get", "clusterroles,clusterrolebindings", "-o", "name"],
            None,
        ),
        "kubectl get clusterroles",
    );
    assert!(
        !cluster_scoped.contains("openwop"),
        "cluster-scoped RBAC left behind: {cluster_scoped}"
    );
    let crds = ok(
        kubectl(&c, &["get", "crd", "-o", "name"], None),
        "kubectl get crd",
    );
    assert!(crds.contains("runs.openwop.dev") && crds.contains("workflows.openwop.dev"));
    let runs = api(&c, &ns, "Run");
    assert!(
        runs.get_opt("after-upgrade").await.unwrap().is_some(),
        "the user's Run is kept"
    );
    delete_namespace(&c.client, &ns).await;
}

/// How long the resilience journeys' scripted provider call stays in flight: the window in
/// which a journey disrupts the run (a new operator must lead within it).
const HOLD_MS: u64 = 45_000;

const SLOW_ANSWER: &str = r#"{"type": "vendor.acme.plan", "payload": {"region": "eu"}}"#;

/// A one-node workflow whose call the Run scripts (`slow_mocks`).
fn slow_workflow(c: &Cluster, ns: &str) {
    let node = json!({"id": "q", "typeId": "core.ai.callPrompt",
        "config": {"provider": "mock", "prompt": "plan the trip", "envelopeType": "vendor.acme.plan"}});
    ok(
        apply(c, ns, &prompt_workflow("slow", node)),
        "apply workflow",
    );
}

/// `q` answers after `delay_ms`.
fn slow_mocks(delay_ms: u64) -> Value {
    json!({"q": {"responses": [{"stopReason": "stop", "content": SLOW_ANSWER, "delayMs": delay_ms}]}})
}

/// Runs `reference` to completion without disruption: the event types every disrupted run must match.
async fn reference_types(c: &Cluster, ns: &str) -> Vec<String> {
    ok(
        apply(c, ns, &mocked_run("reference", "slow", slow_mocks(0))),
        "apply run",
    );
    wait_run(c, ns, "reference", "completed", 120).await;
    let evs = events(c, ns, "reference");
    assert_gapless(&evs);
    types(&evs)
}

/// Waits until the worker of `ns/run` has published the record of provider call `attempt` of
/// node `q`: the call is in flight (the record is made durable before the call starts).
async fn wait_call_started(c: &Cluster, ns: &str, run: &str, attempt: u64) -> Vec<Value> {
    wait_for(
        Duration::from_secs(120),
        &format!("{ns}/{run}: provider call {attempt} in flight"),
        || async move {
            // Right after `apply` the Run may have no runId yet: the CLI refuses, try again.
            let evs = try_events(c, ns, run).ok()?;
            evs.iter()
                .any(|e| {
                    e["type"] == "log.appended"
                        && e["payload"]["nodeId"] == "q"
                        && e["payload"]["fields"]["attempt"] == attempt
                })
                .then_some(evs)
        },
    )
    .await
}

/// Every pod in `ns`, finished ones included (a run's attempts leave theirs until the TTL).
async fn all_pods(c: &Cluster, ns: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(c.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// The running worker pod of `ns/run`.
async fn running_worker(c: &Cluster, ns: &str, run: &str) -> Pod {
    let runs = api(c, ns, "Run");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), ns);
    wait_for(Duration::from_secs(60), "the worker pod", || {
        let (runs, pods) = (runs.clone(), pods.clone());
        async move {
            let name = status(&runs.get(run).await.ok()?)["workerPod"]
                .as_str()?
                .to_owned();
            pods.get_opt(&name)
                .await
                .ok()
                .flatten()
                .filter(|p| phase(p).as_deref() == Some("Running"))
        }
    })
    .await
}

/// Pids of worker processes of `ns/run` (the mini-cluster runs pods as host processes).
fn worker_pids(ns: &str, run: &str) -> Vec<i32> {
    let want = [
        format!("OPENWOP_RUN_NAMESPACE={ns}"),
        format!("OPENWOP_RUN_NAME={run}"),
    ];
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let exe = std::fs::read_link(e.path().join("exe")).ok()?;
            // A rebuilt binary shows as "<path> (deleted)".
            if !exe.to_string_lossy().contains("/openwop-worker") || !process_alive(pid) {
                return None;
            }
            let env = std::fs::read(e.path().join("environ")).ok()?;
            let vars: Vec<&[u8]> = env.split(|b| *b == 0).collect();
            want.iter()
                .all(|w| vars.contains(&w.as_bytes()))
                .then_some(pid)
        })
        .collect()
}

#[tokio::test]
async fn worker_killed_mid_run_completes_without_duplicate_or_missing_events() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-killworker").await;
    slow_workflow(&c, &ns);
    wait_workflow(&c, &ns, "slow", "True").await;
    let want = reference_types(&c, &ns).await;

    // Each worker's call is held 10 s; the first worker is killed while it waits.
    ok(
        apply(&c, &ns, &mocked_run("victim", "slow", slow_mocks(10_000))),
        "apply run",
    );
    let victim = running_worker(&c, &ns, "victim").await;
    wait_call_started(&c, &ns, "victim", 1).await;
    let name = victim.metadata.name.clone().unwrap();
    let pids = if c.local {
        worker_pids(&ns, "victim")
    } else {
        vec![]
    };
    // Grace period 0: no graceful shutdown (the node agent SIGKILLs; a kubelet kills at once).
    Api::<Pod>::namespaced(c.client.clone(), &ns)
        .delete(
            &name,
            &kube::api::DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .expect("delete the worker pod with grace period 0");
    if c.local {
        assert!(!pids.is_empty(), "the victim's worker process");
        wait_for(
            Duration::from_secs(30),
            "the killed worker's process gone",
            || {
                let pids = pids.clone();
                async move { pids.iter().all(|p| !process_alive(*p)).then_some(()) }
            },
        )
        .await;
    }
    // The operator starts another worker, which replays and makes the call again.
    let st = wait_run(&c, &ns, "victim", "completed", 180).await;
    assert!(st["attempts"].as_u64().unwrap_or(0) >= 2, "{st:#}");
    let evs = events(&c, &ns, "victim");
    assert_gapless(&evs);
    assert_eq!(
        types(&evs),
        want,
        "the killed run's events differ from an uninterrupted run"
    );
    delete_namespace(&c.client, &ns).await;
}

#[tokio::test]
async fn operator_killed_mid_run_makes_no_duplicate_worker_pod() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-killop").await;
    slow_workflow(&c, &ns);
    wait_workflow(&c, &ns, "slow", "True").await;
    let want = reference_types(&c, &ns).await;
    // Let the reference run's pod go so every pod left in `ns` belongs to the victim.
    for p in all_pods(&c, &ns).await {
        let name = p.metadata.name.unwrap();
        ok(
            kubectl(
                &c,
                &["delete", "pod", &name, "-n", &ns, "--wait=true"],
                None,
            ),
            "delete reference pod",
        );
    }

    ok(
        apply(&c, &ns, &mocked_run("victim", "slow", slow_mocks(HOLD_MS))),
        "apply run",
    );
    let held = wait_call_started(&c, &ns, "victim", 1).await;
    let old = operator_pods(&c).await;
    force_delete_operator_pods(&c, &old);
    // A new operator leads (after the dead holder's Lease expires) and reconciles the run.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(c.client.clone(), release_ns());
    let leader = wait_for(Duration::from_secs(120), "a new operator leader", || {
        let leases = leases.clone();
        let old = old.clone();
        async move {
            let h = leases
                .get("openwop-operator")
                .await
                .ok()?
                .spec?
                .holder_identity?;
            (!old.contains(&h)).then_some(h)
        }
    })
    .await;
    // Give the new leader a few reconcile rounds while the worker's call is still held.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = all_pods(&c, &ns).await;
    assert_eq!(
        during.len(),
        1,
        "leader {leader} created a duplicate worker pod: {:?}",
        during
            .iter()
            .map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let now = events(&c, &ns, "victim");
    assert!(
        types(&now).last() != Some(&"run.completed".to_string()),
        "the call was held through the operator's restart (raise HOLD_MS): {:?}",
        types(&now)
    );
    assert_eq!(&now[..held.len()], &held[..]);
    wait_run(&c, &ns, "victim", "completed", 180).await;
    let after = all_pods(&c, &ns).await;
    assert_eq!(
        after.len(),
        1,
        "{:?}",
        after
            .iter()
            .map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let evs = events(&c, &ns, "victim");
    assert_gapless(&evs);
    assert_eq!(types(&evs), want);
    delete_namespace(&c.client, &ns).await;
}

/// How this cluster's NATS can be restarted by the journey, or why it cannot.
enum NatsRestart {
    /// The mini-cluster's nats-server process (cluster.sh starts it again).
    Local,
    /// The chart's NATS pod with a persistent JetStream store: delete it, its StatefulSet
    /// brings it back on the same volume.
    ChartPod(String),
    Skip(String),
}

async fn nats_restart_mode(c: &Cluster) -> NatsRestart {
    if c.local {
        return NatsRestart::Local;
    }
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), release_ns());
    let lp = ListParams::default().labels(&format!(
        "app.kubernetes.io/instance={},app.kubernetes.io/component=nats",
        release()
    ));
    let Some(pod) = pods
        .list(&lp)
        .await
        .ok()
        .and_then(|l| l.items.into_iter().next())
    else {
        return NatsRestart::Skip(format!(
            "release {} in {} does not deploy NATS (external NATS is not ours to restart)",
            release(),
            release_ns()
        ));
    };
    let persistent = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|vs| vs.iter().any(|v| v.persistent_volume_claim.is_some()));
    if !persistent {
        return NatsRestart::Skip(
            "the release's NATS keeps JetStream on an emptyDir (nats.persistence.enabled=false): deleting its pod loses the stream by design".into(),
        );
    }
    NatsRestart::ChartPod(pod.metadata.name.unwrap_or_default())
}

#[tokio::test]
async fn nats_restarted_mid_run_loses_nothing() {
    let (c, _g) = setup().await;
    let mode = nats_restart_mode(&c).await;
    if let NatsRestart::Skip(why) = &mode {
        eprintln!("SKIPPED nats_restarted_mid_run_loses_nothing: {why}");
        return;
    }
    let ns = namespace(&c.client, "j-natsrestart").await;
    slow_workflow(&c, &ns);
    wait_workflow(&c, &ns, "slow", "True").await;
    let want = reference_types(&c, &ns).await;
    let reference = events(&c, &ns, "reference");

    ok(
        apply(&c, &ns, &mocked_run("victim", "slow", slow_mocks(HOLD_MS))),
        "apply run",
    );
    let early = wait_call_started(&c, &ns, "victim", 1).await;

    match mode {
        NatsRestart::Local => {
            // Restart nats-server on the same port and JetStream store (cluster.sh `up`
            // starts what is not running).
            let pidfile = c.state_dir.join("run/nats-server.pid");
            let pid: i32 = std::fs::read_to_string(&pidfile)
                .unwrap_or_else(|e| panic!("{}: {e}", pidfile.display()))
                .trim()
                .parse()
                .unwrap();
            assert_eq!(
                unsafe { libc::kill(pid, libc::SIGTERM) },
                0,
                "kill nats-server {pid}"
            );
            wait_for(
                Duration::from_secs(30),
                "nats-server stopped",
                || async move { (!process_alive(pid)).then_some(()) },
            )
            .await;
            let opts = openwop_e2e::ClusterOptions {
                node_agent_bin: Some(env!("CARGO_BIN_EXE_openwop-node-agent").into()),
                ..Default::default()
            };
            openwop_e2e::cluster::run(&opts, "up").unwrap_or_else(|e| panic!("cluster.sh up: {e}"));
            let new_pid: i32 = std::fs::read_to_string(&pidfile)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert_ne!(new_pid, pid, "nats-server was restarted");
        }
        NatsRestart::ChartPod(name) => {
            let pods: Api<Pod> = Api::namespaced(c.client.clone(), release_ns());
            let old_uid = pods.get(&name).await.unwrap().metadata.uid;
            pods.delete(&name, &Default::default())
                .await
                .expect("delete the NATS pod");
            wait_for(Duration::from_secs(180), "the NATS pod back", || {
                let (pods, name, old_uid) = (pods.clone(), name.clone(), old_uid.clone());
                async move {
                    let p = pods.get_opt(&name).await.ok().flatten()?;
                    let ready = p
                        .status
                        .as_ref()?
                        .conditions
                        .as_ref()?
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True");
                    (p.metadata.uid != old_uid && ready).then_some(())
                }
            })
            .await;
        }
        NatsRestart::Skip(_) => unreachable!("returned above"),
    }

    wait_run(&c, &ns, "victim", "completed", 180).await;
    let evs = events(&c, &ns, "victim");
    assert_gapless(&evs);
    assert_eq!(types(&evs), want);
    // What was stored before the restart is still there, unchanged.
    assert_eq!(&evs[..early.len()], &early[..]);
    // And the reference run's stream survived the restart too.
    assert_eq!(events(&c, &ns, "reference"), reference);
    delete_namespace(&c.client, &ns).await;
}

/// A ServiceAccount token (`kubectl create token`).
fn sa_token(c: &Cluster, ns: &str, sa: &str) -> String {
    ok(
        kubectl(c, &["create", "serviceaccount", sa, "-n", ns], None),
        "create serviceaccount",
    );
    create_token(c, ns, sa)
}

/// The OpenWOP REST API driven by the real PyPI `openwop-client` (e2e/rest/client_journey.py):
/// discovery, create, get, SSE follow with Last-Event-ID resume, poll, idempotent create,
/// unknown workflow and invalid inputs, approval and clarification answers through the
/// interrupts endpoint, an external event through its signed token (422 on a mismatch, 409
/// once used), cancel; ServiceAccount tokens checked by TokenReview and RBAC (401,
/// 403, another namespace's run 404). Every run the API created is a Run kubectl sees.
#[tokio::test]
async fn rest_api_with_the_python_client_and_kubernetes_auth() {
    let (c, _g) = setup().await;
    if c.skip_unless_local(
        "rest_api_with_the_python_client_and_kubernetes_auth",
        "the operator's HTTP port reachable on 127.0.0.1 (pods share the host network)",
    ) {
        return;
    }
    let out = Command::new("bash")
        .arg(repo().join("e2e/rest/venv.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("e2e/rest/venv.sh");
    assert!(
        out.status.success(),
        "cannot create the openwop-client venv"
    );
    let python = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let ns = namespace(&c.client, "j-rest").await;
    let other = namespace(&c.client, "j-rest-other").await;
    ok(
        apply(
            &c,
            &ns,
            &std::fs::read_to_string(repo().join("examples/01-hello-workflow.yaml")).unwrap(),
        ),
        "apply hello",
    );
    let typed = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "typed"},
        "spec": {"id": "typed", "name": "typed", "version": "1",
            "variables": [{"name": "count", "type": "number", "required": true}],
            "nodes": [{"id": "start", "typeId": "core.identity"}]}});
    ok(apply(&c, &ns, &typed.to_string()), "apply typed");
    let agent = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "conformance-mock-agent"},
        "spec": {"id": "conformance-mock-agent", "name": "Mock agent", "version": "1",
            "nodes": [{"id": "agent", "typeId": "core.conformance.mock-agent", "config": {
                "agentId": "agent-triage",
                "mockReasoning": {"summary": "billing"},
                "mockDecision": {"decision": "route-to-billing", "confidence": 0.4}}}]}});
    ok(apply(&c, &ns, &agent.to_string()), "apply mock agent");
    let node = json!({"id": "q", "typeId": "core.ai.callPrompt",
        "config": {"provider": "mock", "prompt": "plan", "envelopeType": "vendor.acme.plan"}});
    ok(
        apply(&c, &ns, &prompt_workflow("planner", node)),
        "apply planner",
    );
    let napper = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "napper"},
        "spec": {"id": "napper", "name": "napper", "version": "1",
            "nodes": [{"id": "nap", "typeId": "core.delay", "config": {"delayMs": 8000}},
                      {"id": "after", "typeId": "core.noop"}],
            "edges": [{"id": "e1", "sourceNodeId": "nap", "targetNodeId": "after"}]}});
    ok(apply(&c, &ns, &napper.to_string()), "apply napper");
    let order = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "order"},
        "spec": {"id": "order", "name": "order", "version": "1",
            "nodes": [{"id": "wait-for-payment", "typeId": "core.interrupt", "config": {
                "kind": "external-event", "data": {"eventType": "payment.settled",
                    "correlation": {"orderId": "order-42", "status": "settled"}}}}]}});
    ok(apply(&c, &ns, &order.to_string()), "apply order");
    for wf in [
        "hello",
        "typed",
        "conformance-mock-agent",
        "planner",
        "napper",
        "order",
    ] {
        wait_workflow(&c, &ns, wf, "True").await;
    }
    let mocks = json!({"q": {"turns": [
        {"responses": [{"stopReason": "stop", "content": {"type": "clarification.request",
            "payload": {"questions": [{"id": "region", "question": "Which region?"}]}}}]},
        {"responses": [{"stopReason": "stop", "content": {"type": "vendor.acme.plan", "payload": {"region": "eu"}}}]},
    ]}});
    ok(
        apply(&c, &ns, &mocked_run("trip", "planner", mocks)),
        "apply trip",
    );
    let st = wait_run(&c, &ns, "trip", "waiting-input", 120).await;
    let clarify_id = st["runId"].as_str().unwrap().to_owned();

    ok(apply(&c, &ns, &rest_role("team")), "team Role");
    ok(
        apply(&c, &other, &rest_role("team")),
        "other namespace's Role",
    );
    let token = sa_token(&c, &ns, "team");
    let norbac = sa_token(&c, &ns, "nobody");
    let other_token = sa_token(&c, &other, "team");

    let url = format!("http://127.0.0.1:{}", operator_port());
    let out = Command::new(&python)
        .arg(repo().join("e2e/rest/client_journey.py"))
        .env("OPENWOP_URL", &url)
        .env("NS", &ns)
        .env("TOKEN", &token)
        .env("TOKEN_NORBAC", &norbac)
        .env("TOKEN_OTHER", &other_token)
        .env("CLARIFY_RUN_ID", &clarify_id)
        .output()
        .expect("python client journey");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "client_journey.py failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let created: Vec<String> = report["created"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(created.len(), 6, "{report}");
    // Every REST-created run is a Run kubectl sees, created by the caller's ServiceAccount.
    let listed: Value = serde_json::from_str(&ok(
        kubectl(&c, &["get", "runs", "-n", &ns, "-o", "json"], None),
        "kubectl get runs",
    ))
    .unwrap();
    for id in &created {
        let run = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["metadata"]["uid"] == id.as_str())
            .unwrap_or_else(|| panic!("run {id} not visible to kubectl"));
        assert_eq!(
            run["metadata"]["annotations"]["openwop.dev/created-by"],
            format!("system:serviceaccount:{ns}:team")
        );
    }
    delete_namespace(&c.client, &other).await;
    delete_namespace(&c.client, &ns).await;
}

// ---------------------------------------------------------------- conformance test seams

/// Waits for the operator Deployment's rollout (after a `helm upgrade`).
fn operator_rollout(c: &Cluster) -> String {
    ok(
        kubectl(
            c,
            &[
                "-n",
                release_ns(),
                "rollout",
                "status",
                "deployment",
                "-l",
                "app.kubernetes.io/component=operator",
                "--timeout=120s",
            ],
            None,
        ),
        "operator rollout",
    )
}

/// `curl` a JSON request: (status, body as JSON, or as a string when it is not JSON).
fn http_json(method: &str, url: &str, token: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let (code, _, v) = http_call(method, url, token, &[("Accept", "application/json")], body);
    (code, v)
}

/// `curl` a request with extra headers: (status, the response's headers lower-cased, body as
/// JSON or as a string when it is not JSON).
fn http_call(
    method: &str,
    url: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, String, Value) {
    let mut args: Vec<String> = [
        "-s",
        "--max-time",
        "30",
        "-D",
        "-",
        "-X",
        method,
        url,
        "-w",
        "\n%{http_code}",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    for (k, v) in headers {
        args.extend(["-H".into(), format!("{k}: {v}")]);
    }
    if let Some(t) = token {
        args.extend(["-H".into(), format!("Authorization: Bearer {t}")]);
    }
    if let Some(b) = body {
        args.extend([
            "-H".into(),
            "Content-Type: application/json".into(),
            "--data-binary".into(),
            b.to_string(),
        ]);
    }
    let out = Command::new("curl").args(&args).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (rest, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let code = code.trim().parse().unwrap_or(0);
    // Every header block (a `100 Continue` may precede the answer's); the last is the answer's.
    let mut head = String::new();
    let mut body = rest;
    while body.starts_with("HTTP/") {
        let (h, b) = body.split_once("\r\n\r\n").unwrap_or((body, ""));
        head = h.to_ascii_lowercase();
        body = b;
    }
    let v = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()));
    (code, head, v)
}

/// A run's terminal snapshot (`GET /v1/runs/{id}` until completed, failed or cancelled).
async fn rest_terminal(base: &str, token: &str, run_id: &str) -> Value {
    let url = format!("{base}/v1/runs/{run_id}");
    wait_for(Duration::from_secs(180), "a terminal run", || {
        let url = url.clone();
        async move {
            let (code, v) = http_json("GET", &url, Some(token), None);
            (code == 200 && ["completed", "failed", "cancelled"].contains(&v["status"].as_str()?))
                .then_some(v)
        }
    })
    .await
}

/// The conformance test seams of this helper's share of issue #15, with the seams on
/// (`conformance.seams.enabled`), over real HTTP with a ServiceAccount token: a program
/// staged through `mock-ai/program` becomes the REST-created Run's `spec.providerMocks`,
/// and the chart's four envelope fixtures (rendered from the chart) behave as the suite's
/// scenarios expect (truncation → retry with a bigger budget; schema retry with the same
/// budget; cap exhaustion → `envelope_truncation_unrecoverable`; refusal → no retry); the
/// budgets seams report what the worker recorded; a debug bundle carries no canary secret;
/// discovery advertises the fixtures and `debugBundleExport`. With the seams off (the
/// release's values restored) the same paths answer 404.
#[tokio::test]
async fn conformance_seams_drive_the_envelope_fixtures() {
    let (c, _g) = setup().await;
    if c.skip_unless_local(
        "conformance_seams_drive_the_envelope_fixtures",
        "a release the journeys own (they upgrade it)",
    ) {
        return;
    }
    let seam_port = operator_port() + 4;
    let port = format!("operator.port={seam_port}");
    helm_install(&c, &[&port, "conformance.seams.enabled=true"]);
    operator_rollout(&c);
    wait_operator_ready(&c).await;
    let base = format!("http://127.0.0.1:{seam_port}");
    let program_url = format!("{base}/v1/host/sample/test/mock-ai/program");
    // The new operator answers (the old pod is gone with its port).
    wait_for(Duration::from_secs(120), "the seams served", || {
        let url = program_url.clone();
        async move { (http_json("POST", &url, None, Some(&json!({}))).0 == 401).then_some(()) }
    })
    .await;

    // Discovery: the fixtures and the served seam are advertised (once the new operator
    // has rewritten the discovery ConfigMap).
    let discovery = format!("{base}/.well-known/openwop");
    let doc = wait_for(Duration::from_secs(120), "discovery with the seams", || {
        let url = discovery.clone();
        async move {
            let (code, doc) = http_json("GET", &url, None, None);
            (code == 200 && doc.get("observability").is_some()).then_some(doc)
        }
    })
    .await;
    for f in [
        "conformance-envelope-truncated",
        "conformance-envelope-retry-attempted",
        "conformance-envelope-truncation-cap-exhaustion",
        "conformance-envelope-refusal",
        "conformance-interrupt-external-event",
        "conformance-interrupt-auth-required",
    ] {
        assert!(
            doc["fixtures"].as_array().unwrap().contains(&json!(f)),
            "{f} not in fixtures: {doc:#}"
        );
        // The chart installed it in the release namespace, and the operator accepted it.
        wait_workflow(&c, release_ns(), f, "True").await;
    }
    assert_eq!(
        doc["observability"],
        json!({"testSeams": {"debugBundleExport": true, "otelScrape": true}})
    );

    // A tenant of its own with the chart's fixtures and a ServiceAccount that may run them.
    let ns = namespace(&c.client, "j-seams").await;
    let fixtures = ok(
        helm(
            &c,
            &[
                "template",
                "fx",
                repo().join("charts/openwop").to_str().unwrap(),
                "-n",
                &ns,
                "--set",
                "conformance.seams.enabled=true",
                "-s",
                "templates/conformance-fixtures.yaml",
            ],
        ),
        "helm template the fixtures",
    );
    ok(apply(&c, &ns, &fixtures), "apply the fixtures");
    let canary = "CANARY-seamsb-7d41a9e0c2";
    let leaky = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "leaky"},
        "spec": {"id": "leaky", "name": "leaky", "version": "1",
            "variables": [{"name": "apiToken", "type": "string", "sensitive": true}],
            "nodes": [{"id": "echo", "typeId": "core.ai.structuredOutput", "config": {
                "provider": "mock", "model": "mock-mini", "prompt": "echo",
                "outputSchema": {"type": "object", "required": ["valid"],
                    "properties": {"valid": {"type": "boolean"}, "note": {"type": "string"}}}}}]}});
    ok(apply(&c, &ns, &leaky.to_string()), "apply leaky");
    for wf in [
        "conformance-envelope-truncated",
        "conformance-envelope-retry-attempted",
        "conformance-envelope-truncation-cap-exhaustion",
        "conformance-envelope-refusal",
        "leaky",
    ] {
        wait_workflow(&c, &ns, wf, "True").await;
    }
    ok(apply(&c, &ns, &rest_role("suite")), "suite Role");
    let token = sa_token(&c, &ns, "suite");
    let nobody = sa_token(&c, &ns, "nobody");

    // Auth: no token 401, no RBAC 403, a malformed program 400 naming the entry.
    let staged = json!({"nodeId": "truncated-structured-call", "program": [
        {"stopReason": "max_tokens", "content": "{\"valid\":"},
        {"stopReason": "end_turn", "content": "{\"valid\":true}"}]});
    assert_eq!(http_json("POST", &program_url, None, Some(&staged)).0, 401);
    assert_eq!(
        http_json("POST", &program_url, Some(&nobody), Some(&staged)).0,
        403
    );
    let (code, err) = http_json(
        "POST",
        &program_url,
        Some(&token),
        Some(&json!({"nodeId": "n", "program": [{"stopReason": "stop"}, {"mode": "refusal"}]})),
    );
    assert_eq!(code, 400, "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("program[1]"),
        "{err}"
    );
    let (code, err) = http_json(
        "POST",
        &program_url,
        Some(&token),
        Some(&json!({"program": []})),
    );
    assert_eq!(
        (code, err["details"]["field"].clone()),
        (400, json!("nodeId")),
        "{err}"
    );

    let events_of = |run_id: &str| {
        let (code, v) = http_json(
            "GET",
            &format!("{base}/v1/runs/{run_id}/events?streamMode=debug"),
            Some(&token),
            None,
        );
        assert_eq!(code, 200, "{v}");
        v["events"].as_array().unwrap().clone()
    };
    let of_type = |events: &[Value], t: &str| -> Vec<Value> {
        events.iter().filter(|e| e["type"] == t).cloned().collect()
    };
    let budgets = |node: &str| {
        let (code, v) = http_json(
            "GET",
            &format!("{base}/v1/host/sample/test/mock-ai/dispatch-budgets?nodeId={node}"),
            Some(&token),
            None,
        );
        assert_eq!(code, 200, "{v}");
        let (code, last) = http_json(
            "GET",
            &format!("{base}/v1/host/sample/test/mock-ai/last-dispatch-budget?nodeId={node}"),
            Some(&token),
            None,
        );
        assert_eq!(code, 200, "{last}");
        let all: Vec<u64> = v["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["maxTokens"].as_u64().unwrap())
            .collect();
        assert_eq!(last["maxTokens"].as_u64(), all.last().copied(), "{last}");
        all
    };
    let start = |workflow: &str| {
        let (code, v) = http_json(
            "POST",
            &format!("{base}/v1/runs"),
            Some(&token),
            Some(&json!({"workflowId": workflow})),
        );
        assert_eq!(code, 201, "{v}");
        v["runId"].as_str().unwrap().to_owned()
    };
    let run_object = |run_id: &str| -> Value {
        let listed: Value = serde_json::from_str(&ok(
            kubectl(&c, &["get", "runs", "-n", &ns, "-o", "json"], None),
            "kubectl get runs",
        ))
        .unwrap();
        listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["metadata"]["uid"] == run_id)
            .cloned()
            .unwrap_or_else(|| panic!("run {run_id} not visible to kubectl"))
    };
    let stage = |body: &Value| {
        let (code, v) = http_json("POST", &program_url, Some(&token), Some(body));
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["ok"], true);
        v["count"].as_u64().unwrap()
    };

    // Truncation: one envelope.truncated, a retry with a bigger budget, completed.
    assert_eq!(stage(&staged), 2);
    assert_eq!(
        budgets("truncated-structured-call"),
        Vec::<u64>::new(),
        "no run yet"
    );
    let run_id = start("conformance-envelope-truncated");
    // The program is on the Run itself: what the mock will answer, for kubectl to see.
    let run = run_object(&run_id);
    let mocked = &run["spec"]["providerMocks"]["truncated-structured-call"]["responses"];
    assert_eq!(mocked[0]["stopReason"], "max_tokens", "{run:#}");
    assert_eq!(mocked[1]["content"], "{\"valid\":true}", "{run:#}");
    let end = rest_terminal(&base, &token, &run_id).await;
    assert_eq!(end["status"], "completed", "{end:#}");
    let events = events_of(&run_id);
    let truncated = of_type(&events, "envelope.truncated");
    assert_eq!(truncated.len(), 1, "{events:#?}");
    let p = &truncated[0]["payload"];
    assert_eq!(
        (
            p["stopReason"].clone(),
            p["nodeId"].clone(),
            p["provider"].clone()
        ),
        (
            json!("max_tokens"),
            json!("truncated-structured-call"),
            json!("mock")
        )
    );
    assert!(
        p["model"].is_string() && p["partialPayloadAvailable"].is_boolean(),
        "{p}"
    );
    let retries = of_type(&events, "envelope.retry.attempted");
    assert_eq!(retries.len(), 1, "{events:#?}");
    assert_eq!(retries[0]["payload"]["reason"], "truncation");
    let b = budgets("truncated-structured-call");
    assert_eq!(b.len(), 2, "{b:?}");
    assert_eq!(b[0], 50, "the fixture's budget");
    assert!(b[1] > b[0], "the truncation retry's budget grows: {b:?}");

    // Schema violation: retry with the same budget, no truncation, completed.
    stage(
        &json!({"nodeId": "retry-attempted-structured-call", "program": [
        {"content": "not valid json"}, {"content": "{\"valid\":true}"}]}),
    );
    let run_id = start("conformance-envelope-retry-attempted");
    let end = rest_terminal(&base, &token, &run_id).await;
    assert_eq!(end["status"], "completed", "{end:#}");
    let events = events_of(&run_id);
    assert!(
        of_type(&events, "envelope.truncated").is_empty(),
        "{events:#?}"
    );
    let retries = of_type(&events, "envelope.retry.attempted");
    assert_eq!(retries.len(), 1, "{events:#?}");
    assert_eq!(retries[0]["payload"]["attempt"], 2);
    let reason = retries[0]["payload"]["reason"].as_str().unwrap().to_owned();
    assert!(
        ["parse-error", "schema-violation"].contains(&reason.as_str()),
        "{reason}"
    );
    assert_eq!(budgets("retry-attempted-structured-call"), vec![256, 256]);

    // Truncation every time: bounded retries, exhausted before node.failed, the run fails
    // with envelope_truncation_unrecoverable.
    let always_cut: Vec<Value> = (0..16)
        .map(|_| json!({"stopReason": "max_tokens", "content": "{\"partial"}))
        .collect();
    stage(&json!({"nodeId": "structured-call", "program": always_cut}));
    let run_id = start("conformance-envelope-truncation-cap-exhaustion");
    let end = rest_terminal(&base, &token, &run_id).await;
    assert_eq!(end["status"], "failed", "{end:#}");
    assert_eq!(
        end["error"]["code"], "envelope_truncation_unrecoverable",
        "{end:#}"
    );
    let events = events_of(&run_id);
    let exhausted = of_type(&events, "envelope.retry.exhausted");
    assert_eq!(exhausted.len(), 1, "{events:#?}");
    assert_eq!(exhausted[0]["payload"]["finalReason"], "truncation");
    let at = |t: &str| events.iter().position(|e| e["type"] == t).unwrap();
    assert!(at("envelope.retry.exhausted") < at("node.failed"));
    let cut = of_type(&events, "envelope.truncated").len();
    let b = budgets("structured-call");
    assert!(
        (1..16).contains(&cut) && b.len() == cut,
        "{cut} truncations, budgets {b:?}"
    );
    assert!(b.windows(2).all(|w| w[1] >= w[0]), "{b:?}");

    // Refusal: one envelope.refusal, no retry, the run fails with `envelope_refusal` (RFC 0033
    // §F's code since its rename from `envelope_refused_by_provider`), and the message does not
    // echo the refusal.
    let refusal = "REFUSAL-CANARY-A8F3-do-not-echo";
    stage(&json!({"nodeId": "structured-call", "program": [
        {"stopReason": "safety", "refusalText": refusal}]}));
    let run_id = start("conformance-envelope-refusal");
    let end = rest_terminal(&base, &token, &run_id).await;
    assert_eq!(end["status"], "failed", "{end:#}");
    assert_eq!(end["error"]["code"], "envelope_refusal", "{end:#}");
    assert!(
        !end["error"]["message"].as_str().unwrap().contains(refusal),
        "{end:#}"
    );
    let events = events_of(&run_id);
    assert_eq!(of_type(&events, "envelope.refusal").len(), 1, "{events:#?}");
    assert!(
        of_type(&events, "envelope.retry.attempted").is_empty(),
        "{events:#?}"
    );
    assert_eq!(
        budgets("structured-call"),
        vec![256],
        "the refusal run's one call"
    );

    // Debug bundle: a sensitive input the model echoes is in no surface of the bundle.
    stage(&json!({"nodeId": "echo", "program": [
        {"content": {"valid": true, "note": format!("the token is {canary}")}}]}));
    let (code, v) = http_json(
        "POST",
        &format!("{base}/v1/runs"),
        Some(&token),
        Some(&json!({"workflowId": "leaky", "inputs": {"apiToken": canary}})),
    );
    assert_eq!(code, 201, "{v}");
    let run_id = v["runId"].as_str().unwrap().to_owned();
    let end = rest_terminal(&base, &token, &run_id).await;
    assert_eq!(end["status"], "completed", "{end:#}");
    let events = events_of(&run_id);
    let bundle_url = format!("{base}/v1/host/sample/test/debug-bundle/export");
    let (code, bundle) = http_json(
        "POST",
        &bundle_url,
        Some(&token),
        Some(&json!({"runId": run_id})),
    );
    assert_eq!(code, 200, "{bundle}");
    let text = bundle.to_string();
    assert!(
        !text.contains(canary),
        "the canary leaked into the bundle: {bundle:#}"
    );
    assert!(text.contains("[REDACTED:apiToken]"), "{bundle:#}");
    assert_eq!(bundle["bundleVersion"], "1");
    assert_eq!(bundle["run"]["runId"], run_id.as_str());
    assert_eq!(bundle["run"]["status"], "completed");
    assert_eq!(bundle["events"].as_array().unwrap().len(), events.len());
    assert_eq!(bundle["metrics"]["eventCount"], events.len());
    assert_eq!(
        (
            bundle["redactionApplied"].clone(),
            bundle["redactionMode"].clone()
        ),
        (json!(true), json!("mask"))
    );
    assert_eq!(bundle["truncated"], false);
    assert_eq!(
        http_json("POST", &bundle_url, None, Some(&json!({"runId": run_id}))).0,
        401
    );
    let (code, v) = http_json(
        "POST",
        &bundle_url,
        Some(&token),
        Some(&json!({"runId": "no-such-run"})),
    );
    assert_eq!(code, 404, "{v}");
    // otelScrape: the worker's spans, read back from the operator's span store (the worker
    // flushes them as it exits, just after the terminal event).
    let spans_url = format!("{base}/v1/host/sample/test/otel/spans?runId={run_id}");
    let spans = wait_for(Duration::from_secs(60), "the run's spans stored", || {
        let (url, token) = (spans_url.clone(), token.clone());
        async move {
            let (code, v) = http_json("GET", &url, Some(&token), None);
            assert_eq!(code, 200, "{v}");
            let spans = v["spans"].as_array().cloned().unwrap_or_default();
            spans
                .iter()
                .any(|s| s["name"] == "openwop.run")
                .then_some(spans)
        }
    })
    .await;
    let named = |n: &str| spans.iter().filter(|s| s["name"] == n).count();
    assert!(
        named("openwop.node") >= 1 && named("openwop.provider.call") >= 1,
        "{spans:#?}"
    );
    assert!(
        spans
            .iter()
            .all(|s| s["attributes"]["openwop.run_id"] == run_id.as_str()
                && s["events"].is_array()),
        "every span names its run: {spans:#?}"
    );
    let text = serde_json::to_string(&spans).unwrap();
    assert!(
        !text.contains(canary),
        "the canary leaked into a span: {text}"
    );
    let (_, bundle) = http_json(
        "POST",
        &bundle_url,
        Some(&token),
        Some(&json!({"runId": run_id})),
    );
    assert_eq!(bundle["spans"].as_array().map(Vec::len), Some(spans.len()));
    assert!(!bundle.to_string().contains(canary));
    // Spans are read with the same auth as the run: none without a token, 404 for a caller
    // who may not see the run.
    assert_eq!(http_json("GET", &spans_url, None, None).0, 401);
    assert_eq!(http_json("GET", &spans_url, Some(&nobody), None).0, 403);
    let (code, v) = http_json(
        "GET",
        &format!("{base}/v1/host/sample/test/otel/spans"),
        Some(&token),
        None,
    );
    assert_eq!(
        (code, v["details"]["field"].clone()),
        (400, json!("runId")),
        "{v}"
    );
    // The ingest takes OTLP protobuf only.
    let (code, v) = http_json(
        "POST",
        &format!("{base}/v1/host/sample/test/otel/ingest/v1/traces"),
        None,
        Some(&json!({"resourceSpans": []})),
    );
    assert_eq!(code, 415, "{v}");
    delete_namespace(&c.client, &ns).await;

    // Back to the journeys' release values: the seams are gone (404), the fixtures too.
    helm_install(&c, &[]);
    operator_rollout(&c);
    wait_operator_ready(&c).await;
    let off_url = format!(
        "http://127.0.0.1:{}/v1/host/sample/test/mock-ai/program",
        operator_port()
    );
    // Unmounted, the path does not exist for anyone (mounted, no token would be 401).
    wait_for(Duration::from_secs(120), "the seams gone", || {
        let url = off_url.clone();
        let body = staged.clone();
        async move { (http_json("POST", &url, None, Some(&body)).0 == 404).then_some(()) }
    })
    .await;
}

// ---------------------------------------------------------------- restart figures (make bench)

/// A chain of three mocked LLM calls (`q1` → `q2` → `q3`).
fn chain_workflow(c: &Cluster, ns: &str) {
    let node = |id: &str| {
        json!({"id": id, "typeId": "core.ai.callPrompt",
               "config": {"provider": "mock", "prompt": "plan the trip", "envelopeType": "vendor.acme.plan"}})
    };
    let wf = json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "chain"},
        "spec": {"id": "chain", "name": "chain", "version": "1",
                 "nodes": [node("q1"), node("q2"), node("q3")],
                 "edges": [{"id": "e1", "sourceNodeId": "q1", "targetNodeId": "q2"},
                           {"id": "e2", "sourceNodeId": "q2", "targetNodeId": "q3"}]},
    });
    ok(
        apply(c, ns, &serde_json::to_string(&wf).unwrap()),
        "apply workflow",
    );
}

/// Each of the chain's calls answers after `delay_ms`.
fn chain_mocks(delay_ms: u64) -> Value {
    let r =
        json!({"responses": [{"stopReason": "stop", "content": SLOW_ANSWER, "delayMs": delay_ms}]});
    json!({"q1": r, "q2": r, "q3": r})
}

/// Adds every worker pod of `ns` now present to `seen` (run name → pod uids). Finished pods
/// live `podTtlSecondsAfterFinished` (30 s), so polling every second sees each one.
async fn record_worker_pods(
    c: &Cluster,
    ns: &str,
    seen: &mut std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) {
    let Ok(pods) = Api::<Pod>::namespaced(c.client.clone(), ns)
        .list(&ListParams::default().labels("openwop.dev/run"))
        .await
    else {
        return; // the apiserver is restarting
    };
    for p in pods.items {
        let run = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("openwop.dev/run"))
            .cloned();
        if let (Some(run), Some(uid)) = (run, p.metadata.uid) {
            seen.entry(run).or_default().insert(uid);
        }
    }
}

/// What the restart figures count over a batch of runs.
#[derive(Debug, Default)]
struct BatchFigures {
    runs: usize,
    completed: usize,
    duplicate_worker_pods: usize,
    lost_status_transitions: usize,
    missing_terminal_events: usize,
    gaps_or_duplicate_events: usize,
}

/// Waits until every run of `names` is terminal (recording worker pods meanwhile), then
/// checks each against its stream: the status equals the projection of the whole log, the log
/// is gapless and ends with the terminal event.
async fn settle_batch(
    c: &Cluster,
    ns: &str,
    names: &[String],
    seen: &mut std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    secs: u64,
) -> BatchFigures {
    let runs = api(c, ns, "Run");
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        record_worker_pods(c, ns, seen).await;
        let mut pending = names.len();
        if let Ok(list) = runs.list(&ListParams::default()).await {
            pending = names
                .iter()
                .filter(|n| {
                    !list.items.iter().any(|r| {
                        r.metadata.name.as_ref() == Some(*n)
                            && ["completed", "failed", "cancelled"]
                                .contains(&status(r)["phase"].as_str().unwrap_or(""))
                    })
                })
                .count();
            if pending == 0 {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{pending} runs of {ns} still not terminal after {secs}s"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The event consumer may apply the last batch just after the phase turned terminal.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut f = BatchFigures {
        runs: names.len(),
        ..Default::default()
    };
    for name in names {
        let st = status(&runs.get(name).await.unwrap());
        if st["phase"] == "completed" {
            f.completed += 1;
        }
        if seen.get(name).map_or(0, |s| s.len()) > 1 {
            eprintln!("{name}: worker pods {:?}", seen.get(name));
            f.duplicate_worker_pods += seen[name].len() - 1;
        }
        let evs = events(c, ns, name);
        let seqs: Vec<u64> = evs.iter().filter_map(|e| e["sequence"].as_u64()).collect();
        let mut ids: Vec<&str> = evs.iter().filter_map(|e| e["eventId"].as_str()).collect();
        ids.sort();
        ids.dedup();
        if seqs != (0..evs.len() as u64).collect::<Vec<_>>() || ids.len() != evs.len() {
            eprintln!("{name}: sequences {seqs:?}");
            f.gaps_or_duplicate_events += 1;
        }
        let terminal = ["run.completed", "run.failed", "run.cancelled"];
        if !evs
            .last()
            .and_then(|e| e["type"].as_str())
            .is_some_and(|t| terminal.contains(&t))
        {
            eprintln!("{name}: no terminal event: {:?}", types(&evs));
            f.missing_terminal_events += 1;
        }
        let mut p = openwop_protocol::run::projection::Projection::default();
        for e in &evs {
            p.apply(e);
        }
        let want = json!({
            "phase": serde_json::to_value(p.phase).unwrap(),
            "events": p.events,
            "lastSequence": p.last_sequence,
            "currentNode": p.current_node,
        });
        let got = json!({
            "phase": st["phase"], "events": st["events"],
            "lastSequence": st["lastSequence"], "currentNode": st["currentNode"],
        });
        if got != want
            || st["pendingInterrupts"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        {
            eprintln!("{name}: status {got} != projection of the stream {want}");
            f.lost_status_transitions += 1;
        }
    }
    f
}

fn apply_batch(c: &Cluster, ns: &str, prefix: &str, n: usize, delay_ms: u64) -> Vec<String> {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:02}")).collect();
    let docs: Vec<String> = names
        .iter()
        .map(|n| mocked_run(n, "chain", chain_mocks(delay_ms)))
        .collect();
    ok(apply(c, ns, &docs.join("\n---\n")), "apply runs");
    names
}

/// Figures for issue 14: (a) the operator SIGKILLed 5 times (its pod force-deleted, grace 0:
/// the node agent SIGKILLs the process) during 50 mocked three-node Runs: 0 duplicate worker
/// pods, 0 lost status transitions (final Run.status = projection of the whole stream), every
/// Run terminal with its terminal event in the stream. (b) nats-server restarted, then the
/// kube-apiserver restarted, while a batch of 20 runs is in flight: nothing lost, all finish.
/// Mini-cluster only (it restarts the cluster's own processes). `make bench` runs it.
#[tokio::test]
#[ignore = "figures: run by `make bench`"]
async fn restart_figures_operator_nats_and_apiserver() {
    let (c, _g) = setup().await;
    if !c.local {
        eprintln!(
            "SKIPPED restart_figures_operator_nats_and_apiserver: restarts the mini-cluster's own processes"
        );
        return;
    }
    let ns = namespace(&c.client, "j-restarts").await;
    chain_workflow(&c, &ns);
    wait_workflow(&c, &ns, "chain", "True").await;
    let mut seen = Default::default();

    // (a) 50 runs, operator killed 5 times.
    let started = std::time::Instant::now();
    let names = apply_batch(&c, &ns, "op", 50, 1500);
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), release_ns());
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(c.client.clone(), release_ns());
    let lp = ListParams::default().labels("app.kubernetes.io/component=operator");
    for kill in 1..=5 {
        for _ in 0..5 {
            record_worker_pods(&c, &ns, &mut seen).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let old = operator_pods(&c).await;
        force_delete_operator_pods(&c, &old);
        let mut waited = 0;
        loop {
            record_worker_pods(&c, &ns, &mut seen).await;
            let holder = leases
                .get("openwop-operator")
                .await
                .ok()
                .and_then(|l| l.spec?.holder_identity);
            if holder.is_some_and(|h| !old.contains(&h)) {
                break;
            }
            waited += 1;
            assert!(waited < 180, "no new operator leader after kill {kill}");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        eprintln!("operator kill {kill}: new leader after {waited}s");
    }
    let a = settle_batch(&c, &ns, &names, &mut seen, 900).await;
    let a_secs = started.elapsed().as_secs();

    // (b) 20 runs; nats-server restarted, then the kube-apiserver.
    let started = std::time::Instant::now();
    let names_b = apply_batch(&c, &ns, "nk", 20, 1500);
    for component in ["nats-server", "kube-apiserver"] {
        for _ in 0..8 {
            record_worker_pods(&c, &ns, &mut seen).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let pidfile = c.state_dir.join(format!("run/{component}.pid"));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap_or_else(|e| panic!("{}: {e}", pidfile.display()))
            .trim()
            .parse()
            .unwrap();
        assert_eq!(
            unsafe { libc::kill(pid, libc::SIGTERM) },
            0,
            "kill {component} {pid}"
        );
        wait_for(
            Duration::from_secs(60),
            &format!("{component} stopped"),
            || async move { (!process_alive(pid)).then_some(()) },
        )
        .await;
        let opts = openwop_e2e::ClusterOptions {
            node_agent_bin: Some(env!("CARGO_BIN_EXE_openwop-node-agent").into()),
            ..Default::default()
        };
        openwop_e2e::cluster::run(&opts, "up").unwrap_or_else(|e| panic!("cluster.sh up: {e}"));
        eprintln!("{component} restarted");
    }
    let b = settle_batch(&c, &ns, &names_b, &mut seen, 900).await;
    let b_secs = started.elapsed().as_secs();
    eprintln!(
        "FIGURES operator-kills: 5 SIGKILLs over {} runs in {a_secs}s: {} completed, {} duplicate worker pods, {} lost status transitions, {} runs without terminal event, {} runs with gaps/duplicate events",
        a.runs,
        a.completed,
        a.duplicate_worker_pods,
        a.lost_status_transitions,
        a.missing_terminal_events,
        a.gaps_or_duplicate_events
    );
    eprintln!(
        "FIGURES nats+apiserver restarts: {} runs in {b_secs}s: {} completed, {} duplicate worker pods, {} lost status transitions, {} runs without terminal event, {} runs with gaps/duplicate events",
        b.runs,
        b.completed,
        b.duplicate_worker_pods,
        b.lost_status_transitions,
        b.missing_terminal_events,
        b.gaps_or_duplicate_events
    );
    // The node agent does not re-assert pod readiness after the node-lifecycle controller
    // marked its pods NotReady during the apiserver restart (a kubelet would): replace the
    // operator pod so later journeys find a Ready release (helm --wait).
    for p in pods.list(&lp).await.unwrap().items {
        let name = p.metadata.name.unwrap_or_default();
        ok(
            kubectl(&c, &["delete", "pod", &name, "-n", release_ns()], None),
            "replace the operator pod",
        );
    }
    wait_operator_ready(&c).await;
    for (what, f) in [("operator kills", &a), ("nats/apiserver restarts", &b)] {
        assert_eq!(f.completed, f.runs, "{what}: {f:?}");
        assert_eq!(
            (
                f.duplicate_worker_pods,
                f.lost_status_transitions,
                f.missing_terminal_events,
                f.gaps_or_duplicate_events
            ),
            (0, 0, 0, 0),
            "{what}: {f:?}"
        );
    }
    delete_namespace(&c.client, &ns).await;
}

/// Issue 14: the per-namespace concurrency limit is exact. 50 Runs applied at once with
/// `runs.maxConcurrentPerNamespace=5`: never more than 5 unfinished worker pods in the
/// namespace (sampled continuously), and all 50 complete.
#[tokio::test]
async fn fifty_runs_at_once_never_exceed_the_namespace_limit() {
    let (c, _g) = setup().await;
    if c.skip_unless_local(
        "fifty_runs_at_once_never_exceed_the_namespace_limit",
        "a release the journeys own (they upgrade it)",
    ) {
        return;
    }
    // A new port too: pods share the host network, so the surge pod of the rolling update
    // could not bind the old pod's port.
    let port = format!("operator.port={}", operator_port() + 2);
    helm_install(&c, &[&port, "runs.maxConcurrentPerNamespace=5"]);
    let rollout = || operator_rollout(&c);
    rollout();
    wait_operator_ready(&c).await;

    let ns = namespace(&c.client, "j-limit").await;
    chain_workflow(&c, &ns);
    wait_workflow(&c, &ns, "chain", "True").await;
    let names = apply_batch(&c, &ns, "l", 50, 200);
    let runs = api(&c, &ns, "Run");
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    let (mut peak, mut samples) = (0, 0);
    loop {
        let live = worker_pods(&c, &ns).await.len();
        peak = peak.max(live);
        samples += 1;
        assert!(live <= 5, "{live} unfinished worker pods in {ns} (limit 5)");
        let list = runs.list(&ListParams::default()).await.unwrap();
        let done = list
            .items
            .iter()
            .filter(|r| status(r)["phase"] == "completed")
            .count();
        let failed: Vec<_> = list
            .items
            .iter()
            .filter(|r| {
                ["failed", "cancelled"].contains(&status(r)["phase"].as_str().unwrap_or(""))
            })
            .map(|r| (r.metadata.name.clone(), status(r)["error"].clone()))
            .collect();
        assert!(
            failed.is_empty(),
            "runs ended without completing: {failed:?}"
        );
        if done == names.len() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{done} of 50 runs completed after 600s (peak {peak} worker pods)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("50 runs, limit 5: peak {peak} unfinished worker pods over {samples} samples");
    assert_eq!(peak, 5, "the limit is reached, never exceeded");
    delete_namespace(&c.client, &ns).await;
    // Back to the journeys' release values.
    helm_install(&c, &[]);
    rollout();
    wait_operator_ready(&c).await;
}

/// The instant of an event's `timestamp`.
fn timestamp_of(e: &Value) -> k8s_openapi::jiff::Timestamp {
    let t = e["timestamp"].as_str().unwrap_or_default();
    t.parse()
        .unwrap_or_else(|err| panic!("timestamp {t:?} of {e}: {err}"))
}

/// Issue 17 (examples/06-fan-out.yaml): three reviewers, each holding its provider call
/// 1.5 s, run at once; the fan-in waits for all three. The overlap is read from the event
/// timestamps: every reviewer started before any of them completed.
#[tokio::test]
async fn fan_out_example_runs_its_branches_at_once() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-fanout").await;
    apply_file(&c, &ns, "examples/06-fan-out.yaml");
    wait_workflow(&c, &ns, "ticket-review", "True").await;
    let st = wait_run(&c, &ns, "fan-out-run", "completed", 120).await;
    assert!(st["error"].is_null(), "{st:#}");
    let evs = events(&c, &ns, "fan-out-run");
    assert_gapless(&evs);
    let node_event = |t: &str, n: &str| {
        let found: Vec<&Value> = evs
            .iter()
            .filter(|e| e["type"] == t && e["nodeId"] == n)
            .collect();
        assert_eq!(found.len(), 1, "one {t} of {n}: {:?}", types(&evs));
        found[0].clone()
    };
    let reviewers = ["tone", "urgency", "policy"];
    let started: Vec<_> = reviewers
        .iter()
        .map(|n| timestamp_of(&node_event("node.started", n)))
        .collect();
    let completed: Vec<_> = reviewers
        .iter()
        .map(|n| timestamp_of(&node_event("node.completed", n)))
        .collect();
    let last_start = *started.iter().max().unwrap();
    let first_done = *completed.iter().min().unwrap();
    assert!(
        last_start < first_done,
        "the reviewers did not overlap: started {started:?}, completed {completed:?}"
    );
    // Each call was held 1.5 s: the three together took well under the 4.5 s of one at a time.
    let span = completed
        .iter()
        .max()
        .unwrap()
        .duration_since(*started.iter().min().unwrap());
    assert!(span.as_millis() < 3000, "the branches took {span:?} in all");
    let join_start = timestamp_of(&node_event("node.started", "verdicts"));
    assert!(join_start >= *completed.iter().max().unwrap());
    let done = evs.last().unwrap();
    assert_eq!(done["type"], "run.completed");
    assert_eq!(
        done["payload"]["outputs"]["verdicts"]["policy"]["verdict"], "refund-eligible",
        "{done:#}"
    );
    delete_namespace(&c.client, &ns).await;
}

/// Issue 17: two branches ask a clarification question in the same run while a third
/// finishes. `Run.status.pendingInterrupts` lists both, `kubectl openwop describe` shows
/// both, `resume` without `--node` refuses and names the waiting nodes, and each answer given
/// with `--node` resumes its branch; the fan-in runs once both are answered.
#[tokio::test]
async fn two_pending_interrupts_are_answered_each_with_resume_node() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-two-asks").await;
    let prompt = |id: &str| {
        json!({"id": id, "typeId": "core.ai.callPrompt",
            "config": {"provider": "mock", "prompt": format!("plan {id}"), "envelopeType": "vendor.acme.plan"}})
    };
    let wf = json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "two-asks"},
        "spec": {"id": "two_asks", "name": "two asks", "version": "1.0.0",
            "nodes": [prompt("ask_a"), prompt("ask_b"), prompt("free"),
                      {"id": "join", "typeId": "core.flow.noop"}],
            "edges": [
                {"id": "a", "sourceNodeId": "ask_a", "targetNodeId": "join", "targetInput": "a"},
                {"id": "b", "sourceNodeId": "ask_b", "targetNodeId": "join", "targetInput": "b"},
                {"id": "f", "sourceNodeId": "free", "targetNodeId": "join", "targetInput": "f"}]}});
    ok(apply(&c, &ns, &wf.to_string()), "apply workflow");
    wait_workflow(&c, &ns, "two-asks", "True").await;
    let asks = |q: &str, answer: &str| {
        json!({"turns": [
            {"responses": [{"stopReason": "stop", "content": {"type": "clarification.request",
                "payload": {"questions": [{"id": q, "question": format!("{q}?")}]}}}]},
            {"responses": [{"stopReason": "stop", "content": {"type": "vendor.acme.plan", "payload": {"answer": answer}}}]}]})
    };
    let mocks = json!({
        "ask_a": asks("region", "a-done"),
        "ask_b": asks("tier", "b-done"),
        "free": {"responses": [{"stopReason": "stop", "delayMs": 300,
            "content": {"type": "vendor.acme.plan", "payload": {"answer": "free-done"}}}]}});
    ok(
        apply(&c, &ns, &mocked_run("asks", "two-asks", mocks)),
        "apply run",
    );
    let st = wait_run(&c, &ns, "asks", "waiting-input", 120).await;
    let pending = st["pendingInterrupts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let nodes: Vec<&str> = pending
        .iter()
        .filter_map(|p| p["nodeId"].as_str())
        .collect();
    assert_eq!(nodes, ["ask_a", "ask_b"], "{st:#}");
    assert_eq!(pending[0]["questions"][0]["id"], "region");
    assert_eq!(pending[1]["questions"][0]["id"], "tier");
    // The independent branch finished while both others wait.
    let evs = events(&c, &ns, "asks");
    assert!(
        evs.iter()
            .any(|e| e["type"] == "node.completed" && e["nodeId"] == "free"),
        "{:?}",
        types(&evs)
    );
    let d = ok(
        cli(&c, &["describe", "asks", "-n", &ns]),
        "kubectl openwop describe",
    );
    assert!(
        d.contains("kubectl openwop resume asks --node ask_a")
            && d.contains("kubectl openwop resume asks --node ask_b"),
        "{d}"
    );
    // Without --node: refused, the waiting nodes named.
    let out = cli(&c, &["resume", "asks", "-n", &ns, "--answer", "tier=gold"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("waits on 2 interrupts")
            && err.contains("--node NODE")
            && err.contains("ask_a (clarification)")
            && err.contains("ask_b (clarification)"),
        "{err}"
    );
    // Answer ask_b: its branch finishes, ask_a still waits.
    ok(
        cli(
            &c,
            &[
                "resume",
                "asks",
                "-n",
                &ns,
                "--node",
                "ask_b",
                "--answer",
                "tier=gold",
            ],
        ),
        "kubectl openwop resume --node ask_b",
    );
    let runs = api(&c, &ns, "Run");
    let st = wait_for(Duration::from_secs(120), "only ask_a waits", || {
        let runs = runs.clone();
        async move {
            let st = status(&runs.get("asks").await.ok()?);
            let p = st["pendingInterrupts"].as_array()?;
            (st["phase"] == "waiting-input" && p.len() == 1 && st["workerPod"].is_null())
                .then_some(st)
        }
    })
    .await;
    assert_eq!(st["pendingInterrupts"][0]["nodeId"], "ask_a", "{st:#}");
    ok(
        cli(
            &c,
            &[
                "resume",
                "asks",
                "-n",
                &ns,
                "--node",
                "ask_a",
                "--answer",
                "region=eu",
            ],
        ),
        "kubectl openwop resume --node ask_a",
    );
    let st = wait_run(&c, &ns, "asks", "completed", 120).await;
    assert!(st["pendingInterrupts"].is_null(), "{st:#}");
    let evs = events(&c, &ns, "asks");
    assert_gapless(&evs);
    let t = types(&evs);
    assert_eq!(t.iter().filter(|t| *t == "run.started").count(), 1, "{t:?}");
    assert_eq!(
        t.iter().filter(|t| *t == "clarification.resolved").count(),
        2,
        "{t:?}"
    );
    let done = evs.last().unwrap();
    assert_eq!(done["type"], "run.completed");
    let out = &done["payload"]["outputs"]["join"];
    assert_eq!(
        (
            &out["a"]["answer"],
            &out["b"]["answer"],
            &out["f"]["answer"]
        ),
        (&json!("a-done"), &json!("b-done"), &json!("free-done")),
        "{done:#}"
    );
    delete_namespace(&c.client, &ns).await;
}

/// Deletes `ns/pod` with grace period 0 (the node agent SIGKILLs the worker at once).
async fn kill_pod(c: &Cluster, ns: &str, pod: &str) {
    Api::<Pod>::namespaced(c.client.clone(), ns)
        .delete(
            pod,
            &kube::api::DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .expect("delete the worker pod with grace period 0");
}

/// Issue #14 items 4 and 5: a worker killed again and again without progress exhausts the
/// crash budget (`runs.maxWorkerRetries`, 3), the operator fails the run and appends
/// `run.failed` itself, so `kubectl openwop events RUN -f` returns, its last event
/// `run.failed {error.code: worker_crashed}` — exactly once, after the workers' events.
#[tokio::test]
async fn crash_limit_ends_the_log_with_run_failed_and_follow_returns() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-crashlimit").await;
    slow_workflow(&c, &ns);
    wait_workflow(&c, &ns, "slow", "True").await;
    // No worker ever gets its answer: the call is held 10 minutes.
    ok(
        apply(&c, &ns, &mocked_run("doomed", "slow", slow_mocks(600_000))),
        "apply run",
    );
    let mut killed: Vec<String> = vec![];
    for attempt in 1..=4u32 {
        let runs = api(&c, &ns, "Run");
        let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns);
        let seen = killed.clone();
        let pod = wait_for(
            Duration::from_secs(120),
            &format!("worker attempt {attempt} running"),
            || {
                let (runs, pods, seen) = (runs.clone(), pods.clone(), seen.clone());
                async move {
                    let name = status(&runs.get("doomed").await.ok()?)["workerPod"]
                        .as_str()?
                        .to_owned();
                    if seen.contains(&name) {
                        return None;
                    }
                    pods.get_opt(&name)
                        .await
                        .ok()
                        .flatten()
                        .filter(|p| phase(p).as_deref() == Some("Running"))
                }
            },
        )
        .await;
        if attempt == 1 {
            // The first worker recorded its progress: the call is in flight.
            wait_call_started(&c, &ns, "doomed", 1).await;
        } else {
            // Later workers replay the log and wait on the same call: no new event.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let name = pod.metadata.name.clone().unwrap();
        kill_pod(&c, &ns, &name).await;
        killed.push(name);
    }
    let st = wait_run(&c, &ns, "doomed", "failed", 120).await;
    assert_eq!(st["error"]["code"], "worker_crashed", "{st:#}");
    let msg = st["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("4 consecutive worker failures without progress (limit 3"),
        "{msg}"
    );

    // `events -f` follows until the terminal event: it must return.
    let cli_bin = target_bin("debug", "kubectl-openwop");
    let (kubeconfig, nats_url, ns2) = (c.kubeconfig.clone(), c.nats_url.clone(), ns.clone());
    let follow = tokio::task::spawn_blocking(move || {
        Command::new(cli_bin)
            .args([
                "events",
                "doomed",
                "-n",
                &ns2,
                "-f",
                "--json",
                "--no-reasoning",
            ])
            .env("KUBECONFIG", kubeconfig)
            .env("OPENWOP_NATS_URL", nats_url)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    });
    let out = tokio::time::timeout(Duration::from_secs(60), follow)
        .await
        .expect("`kubectl openwop events doomed -f` returned after the run failed")
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let evs: Vec<Value> = json_lines(&String::from_utf8(out.stdout).unwrap())
        .into_iter()
        .map(|l| l["message"].clone())
        .collect();
    assert_gapless(&evs);
    let last = evs.last().expect("events");
    assert_eq!(last["type"], "run.failed", "{:?}", types(&evs));
    assert_eq!(last["payload"]["error"]["code"], "worker_crashed");
    let ends = evs
        .iter()
        .filter(|e| {
            matches!(
                e["type"].as_str(),
                Some("run.failed" | "run.completed" | "run.cancelled")
            )
        })
        .count();
    assert_eq!(ends, 1, "{:?}", types(&evs));
    // The status records the ending and the projection counted it.
    let st = wait_for(
        Duration::from_secs(30),
        "status.terminalEvent and the counted event",
        || {
            let runs = api(&c, &ns, "Run");
            let want = last["sequence"].clone();
            async move {
                let st = status(&runs.get("doomed").await.ok()?);
                (st["terminalEvent"] == last["eventId"] && st["lastSequence"] == want).then_some(st)
            }
        },
    )
    .await;
    assert_eq!(st["phase"], "failed");
    delete_namespace(&c.client, &ns).await;
}

/// Issue #14 item 2: a Run nested 9,000 levels deep (the apiserver accepts up to 10,000)
/// made the operator's typed Run list/watch fail (serde_json's recursion limit), so no Run
/// in scope was reconciled. Free-form fields now decode leniently: the deep Run alone is
/// failed with `input_too_deep` (condition and Warning Event), a normal Run beside it
/// completes, `/readyz` stays 200 (listing works), the object is never logged — and the same
/// holds after the operator restarts while the deep Run exists.
#[tokio::test]
async fn a_run_too_deep_to_decode_is_failed_alone_and_the_others_run() {
    let (c, _g) = setup().await;
    if c.skip_unless_local(
        "a_run_too_deep_to_decode_is_failed_alone_and_the_others_run",
        "the operator's /readyz and logs on this machine",
    ) {
        return;
    }
    let ns = namespace(&c.client, "j-poison").await;
    apply_file(&c, &ns, "examples/01-hello-workflow.yaml");
    wait_workflow(&c, &ns, "hello", "True").await;
    let readyz = format!("http://127.0.0.1:{}/readyz", operator_port());
    wait_for(Duration::from_secs(120), "/readyz 200 before", || {
        let readyz = readyz.clone();
        async move { (http_get(&readyz, &[]).0 == 200).then_some(()) }
    })
    .await;
    let depth = 9_000;
    let inputs = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
    let bad = format!(
        r#"{{"apiVersion":"openwop.dev/v1alpha1","kind":"Run","metadata":{{"name":"too-deep","namespace":"{ns}"}},"spec":{{"workflowRef":{{"name":"hello"}},"inputs":{inputs}}}}}"#
    );
    ok(
        kubectl(&c, &["create", "-f", "-"], Some(&bad)),
        "create the deep Run",
    );
    ok(apply(&c, &ns, &hello_run("beside")), "apply a normal run");
    wait_run(&c, &ns, "beside", "completed", 180).await;
    // This test's own client cannot decode the deep Run either (serde_json into
    // DynamicObject): read its status with kubectl.
    let deep_status = || -> Value {
        let out = kubectl(
            &c,
            &[
                "-n",
                &ns,
                "get",
                "run",
                "too-deep",
                "-o",
                "jsonpath={.status}",
            ],
            None,
        );
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    };
    let st = wait_for(Duration::from_secs(60), "the deep Run failed", || {
        let st = deep_status();
        async move { (st["phase"] == "failed").then_some(st) }
    })
    .await;
    assert_eq!(st["error"]["code"], "input_too_deep", "{st:#}");
    let msg = st["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("spec.inputs cannot be decoded")
            && msg.contains("deeper than 128 levels")
            && msg.len() < 1_000,
        "{msg}"
    );
    let ready = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .unwrap();
    assert_eq!(ready["reason"], "InputTooDeep");
    assert!(
        worker_pods(&c, &ns).await.iter().all(|p| !p
            .metadata
            .name
            .as_deref()
            .unwrap_or("")
            .starts_with("too-deep")),
        "no worker for the deep Run"
    );
    let ev = ok(
        kubectl(
            &c,
            &[
                "-n",
                &ns,
                "get",
                "events",
                "--field-selector",
                "reason=InputTooDeep",
                "-o",
                "jsonpath={.items[*].involvedObject.name}",
            ],
            None,
        ),
        "events",
    );
    assert!(
        ev.contains("too-deep"),
        "a Warning Event on the Run: {ev:?}"
    );
    assert_eq!(http_get(&readyz, &[]).0, 200, "listing works: ready");

    // Restart the operator while the deep Run exists: it lists, starts and runs again.
    restart_operator(&c).await;
    ok(apply(&c, &ns, &hello_run("after-restart")), "apply a run");
    wait_run(&c, &ns, "after-restart", "completed", 240).await;
    assert_eq!(deep_status()["phase"], "failed");
    wait_for(
        Duration::from_secs(60),
        "/readyz 200 after the restart",
        || {
            let readyz = readyz.clone();
            async move { (http_get(&readyz, &[]).0 == 200).then_some(()) }
        },
    )
    .await;
    let logs = ok(
        kubectl(
            &c,
            &[
                "-n",
                release_ns(),
                "logs",
                "-l",
                "app.kubernetes.io/component=operator",
                "--tail=-1",
            ],
            None,
        ),
        "operator logs",
    );
    let longest = logs.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 16_384, "a log line of {longest} bytes");
    assert!(
        !logs.contains("{\"a\":{\"a\":{\"a\":"),
        "the object is never logged"
    );
    delete_namespace(&c.client, &ns).await;
}

/// The force-delete half of issue 14's kill bench: a 4-node run against a fake
/// OpenAI-compatible provider on the host (it counts its own requests and deliveries), with a
/// truncation, a schema violation, transient 429/503 answers (transport retries) and a
/// clarification answered by patching the Run. Each kill point is one Run whose worker pod is
/// force-deleted (grace 0) once: (a) while each of the run's HTTP requests is held in flight
/// by the fake — including the retried requests of a transport retry sequence — and (b) as
/// soon as event N of the run's stream is published. The operator replaces the pod; the new
/// worker replays. Mini-cluster only (the provider listens on the host network).
#[tokio::test]
#[ignore = "figures: run by `make bench`"]
async fn worker_force_delete_figures() {
    use openwop_providers::testing::{ScriptedLlm, Step};
    let (c, _g) = setup().await;
    if !c.local {
        eprintln!("SKIPPED worker_force_delete_figures: the fake provider listens on the host");
        return;
    }
    let script = std::collections::BTreeMap::from([
        (
            "m-p".to_string(),
            vec![
                Step::ok("length", r#"{"text": "cut sho"#).after(&[429]),
                Step::ok("stop", r#"{"text": 42}"#).after(&[503]),
                Step::ok("stop", r#"{"text": "short"}"#),
            ],
        ),
        (
            "m-q".to_string(),
            vec![
                Step::ok(
                    "stop",
                    json!({"type": "clarification.request", "payload": {"questions": [{"id": "region", "question": "Which region?"}]}}),
                ),
                Step::ok(
                    "stop",
                    json!({"type": "vendor.acme.plan", "payload": {"region": "eu"}}),
                )
                .after(&[429]),
            ],
        ),
    ]);
    let llm = ScriptedLlm::start(script);
    // A model that takes a moment: the worker lives long enough between events for a kill
    // fired on event N to land near it.
    llm.set_delay(Duration::from_millis(400));
    let provider = format!(
        "providers[1].name=openai-compatible,providers[1].vendor=openai-compatible,providers[1].baseUrl={}",
        llm.base
    );
    let _restore = RestoreRelease(&c);
    helm_install(&c, &[&provider]);
    let ns = namespace(&c.client, "j-forcedel").await;
    let prompt = |id: &str, model: &str, extra: Value| {
        let mut config = json!({"provider": "openai-compatible", "model": model,
            "prompt": format!("do {id}"), "maxTokens": 64, "schemaRounds": 4});
        config
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"id": id, "typeId": "core.ai.callPrompt", "config": config})
    };
    let wf = json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": "fd"},
        "spec": {"id": "fd", "name": "fd", "version": "1",
            "providers": [{"provider": "openai-compatible", "secretRef": {"name": "llm", "key": "key"}}],
            "nodes": [
                {"id": "a", "typeId": "core.identity"},
                prompt("p", "m-p", json!({"outputSchema": {"type": "object", "required": ["text"],
                    "properties": {"text": {"type": "string"}}}})),
                prompt("q", "m-q", json!({"envelopeType": "vendor.acme.plan"})),
                {"id": "z", "typeId": "core.flow.noop"}],
            "edges": [
                {"id": "e1", "sourceNodeId": "a", "targetNodeId": "p"},
                {"id": "e2", "sourceNodeId": "p", "targetNodeId": "q"},
                {"id": "e3", "sourceNodeId": "q", "targetNodeId": "z"}]}});
    let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: llm}\nstringData: {key: sk-fake-provider}\n";
    ok(apply(&c, &ns, secret), "apply secret");
    ok(apply(&c, &ns, &wf.to_string()), "apply workflow");
    wait_workflow(&c, &ns, "fd", "True").await;
    let nats = async_nats::connect(&c.nats_url).await.unwrap();

    let reference = drive_force_delete(&c, &ns, &nats, &llm, "ref", FdKill::None).await;
    let want = types(&reference.events);
    assert_eq!(want.last().map(String::as_str), Some("run.completed"));
    let baseline_requests = reference.requests;
    let started = std::time::Instant::now();

    let mut points: Vec<(String, FdKill)> = (1..=baseline_requests)
        .map(|h| (format!("h{h}"), FdKill::HoldRequest(h)))
        .collect();
    points.extend(
        (1..want.len() as u64 - 1)
            .step_by(2)
            .map(|n| (format!("e{n}"), FdKill::AtEvent(n))),
    );
    let (mut kills, mut completed, mut gaps, mut duplicates) = (0, 0, 0, 0);
    let (mut repeated, mut in_flight, mut requests, mut mismatched) = (0, 0, 0, 0);
    for (name, kill) in &points {
        let r = drive_force_delete(&c, &ns, &nats, &llm, name, *kill).await;
        requests += r.requests;
        let seqs: Vec<u64> = r
            .events
            .iter()
            .filter_map(|e| e["sequence"].as_u64())
            .collect();
        gaps += seqs
            .iter()
            .enumerate()
            .filter(|(i, s)| **s != *i as u64)
            .count();
        let ids: std::collections::HashSet<&str> = r
            .events
            .iter()
            .filter_map(|e| e["eventId"].as_str())
            .collect();
        duplicates += r.events.len() - ids.len();
        completed += usize::from(r.status["phase"] == "completed");
        if types(&r.events) != want {
            mismatched += 1;
            eprintln!(
                "kill point {name} (killed at event {:?}): {:?}",
                r.kill.as_ref().map(|k| k.at_event),
                types(&r.events)
            );
        }
        let Some(k) = &r.kill else {
            eprintln!("kill point {name}: the worker had already exited; no kill");
            continue;
        };
        kills += 1;
        // The fake still holds this run's deliveries (it is reset when the next run starts).
        let after = llm.after_kill(&k.deliveries_before, &k.recorded);
        for (model, ordinal) in &after.repeated {
            eprintln!(
                "kill point {name}: {model} call {} repeated although recorded",
                ordinal + 1
            );
        }
        repeated += after.repeated.len();
        in_flight += after.in_flight;
    }
    let runs = points.len();
    println!(
        "FIGURES force-delete bench (worker pod deleted with grace 0): {kills} kill points over {runs} runs of {} events ({} of them held a request in flight; the others fired on event N, or found the worker already gone); \
runs completed {completed}/{runs}; event types equal to the uninterrupted run {}/{runs}; sequence gaps {gaps}; duplicate events {duplicates}; \
repeated provider calls (response recorded) {repeated}; calls delivered before the kill but unrecorded, made again {in_flight}; \
HTTP requests {requests} vs {} for {runs} uninterrupted runs ({:.3}x); {:.1} s",
        want.len(),
        baseline_requests,
        runs - mismatched,
        baseline_requests * runs,
        requests as f64 / (baseline_requests * runs) as f64,
        started.elapsed().as_secs_f64(),
    );
    assert!(kills >= 15, "only {kills} kill points");
    assert_eq!(completed, runs, "runs completed");
    assert_eq!(
        (gaps, duplicates),
        (0, 0),
        "sequence gaps, duplicate events"
    );
    assert_eq!(
        repeated, 0,
        "repeated provider calls whose response was recorded"
    );
    assert_eq!(
        mismatched, 0,
        "runs whose events differ from the uninterrupted run"
    );
    delete_namespace(&c.client, &ns).await;
}

#[derive(Clone, Copy, Debug)]
enum FdKill {
    None,
    /// Force-delete the worker while the fake holds the run's n-th HTTP request.
    HoldRequest(usize),
    /// Force-delete the worker as soon as event n of the run is published.
    AtEvent(u64),
}

struct FdKilled {
    /// Events in the stream once the killed worker's process was gone.
    at_event: usize,
    /// Provider responses recorded in the stream at the kill, per model.
    recorded: std::collections::HashMap<String, usize>,
    deliveries_before: Vec<(String, usize)>,
}

struct FdRun {
    events: Vec<Value>,
    status: Value,
    requests: usize,
    kill: Option<FdKilled>,
}

/// Runs `name` to its end (answering its clarification by patching the Run), force-deleting
/// its worker pod once at `kill`.
async fn drive_force_delete(
    c: &Cluster,
    ns: &str,
    nats: &async_nats::Client,
    llm: &openwop_providers::testing::ScriptedLlm,
    name: &str,
    kill: FdKill,
) -> FdRun {
    use futures::StreamExt as _;
    llm.reset();
    if let FdKill::HoldRequest(h) = kill {
        llm.hold_request(h);
    }
    let mut live = nats
        .subscribe(format!("openwop.events.{ns}.*"))
        .await
        .unwrap();
    ok(
        apply(c, ns, &mocked_run(name, "fd", json!({}))),
        "apply run",
    );
    let runs = api(c, ns, "Run");
    let mut seen: i64 = -1;
    let mut killed: Option<FdKilled> = None;
    let mut answered = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    let st = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "run {name} did not end in 300 s"
        );
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(20), live.next()).await {
            let e: Value = serde_json::from_slice(&m.payload).unwrap_or_default();
            if e["runId"].is_string() {
                seen = seen.max(e["sequence"].as_i64().unwrap_or(-1));
            }
        }
        let st = runs
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .map(|o| status(&o))
            .unwrap_or_default();
        let due = match kill {
            FdKill::None => false,
            FdKill::HoldRequest(_) => llm.holding(),
            FdKill::AtEvent(n) => seen >= n as i64,
        };
        if due && killed.is_none() {
            let pids = worker_pids(ns, name);
            let pod = st["workerPod"].as_str().unwrap_or_default().to_owned();
            if pids.is_empty() || pod.is_empty() {
                // Between workers (e.g. suspended): nothing to kill at this point.
                llm.release();
                killed = Some(FdKilled {
                    at_event: usize::MAX,
                    recorded: Default::default(),
                    deliveries_before: vec![],
                });
            } else {
                let _ = Api::<Pod>::namespaced(c.client.clone(), ns)
                    .delete(
                        &pod,
                        &kube::api::DeleteParams {
                            grace_period_seconds: Some(0),
                            ..Default::default()
                        },
                    )
                    .await;
                wait_for(
                    Duration::from_secs(30),
                    "the killed worker's process gone",
                    || {
                        let pids = pids.clone();
                        async move { pids.iter().all(|p| !process_alive(*p)).then_some(()) }
                    },
                )
                .await;
                llm.release();
                let at = events(c, ns, name);
                let mut recorded = std::collections::HashMap::new();
                for e in &at {
                    if let Some(r) = e["payload"]["fields"].get("providerResponse")
                        && !r["response"].is_null()
                    {
                        let model = format!("m-{}", e["nodeId"].as_str().unwrap_or_default());
                        *recorded.entry(model).or_insert(0) += 1;
                    }
                }
                killed = Some(FdKilled {
                    at_event: at.len(),
                    recorded,
                    deliveries_before: llm.deliveries(),
                });
            }
        }
        match st["phase"].as_str() {
            Some("completed") | Some("failed") | Some("cancelled") => break st,
            Some("waiting-input") if !answered => {
                let id = st["pendingInterrupts"][0]["interruptId"].clone();
                if id.is_string() {
                    let patch = json!({"spec": {"answers": [{"interruptId": id, "value": {"region": "eu"}}]}});
                    ok(
                        kubectl(
                            c,
                            &[
                                "patch",
                                "run",
                                name,
                                "-n",
                                ns,
                                "--type=merge",
                                "-p",
                                &patch.to_string(),
                            ],
                            None,
                        ),
                        "answer the clarification",
                    );
                    answered = true;
                }
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let killed = killed.filter(|k| k.at_event != usize::MAX);
    FdRun {
        events: events(c, ns, name),
        status: st,
        requests: llm.requests(),
        kill: killed,
    }
}

// ------------------------------------------------------------- conformance test seams

/// `curl` with an optional bearer token and JSON body: (status, body as JSON or Null).
fn seam_call(method: &str, url: &str, token: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let auth = token.map(|t| format!("Authorization: Bearer {t}"));
    let data = body.map(Value::to_string);
    let mut args = vec![
        "-s",
        "--max-time",
        "30",
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
        "-X",
        method,
        url,
    ];
    if let Some(a) = &auth {
        args.extend(["-H", a.as_str()]);
    }
    if let Some(d) = &data {
        args.extend([
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            d.as_str(),
        ]);
    }
    let out = Command::new("curl").args(&args).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

/// The spec's conformance-only host test seams this host serves (`host-sample-test-seams.md`),
/// over real HTTP with Kubernetes auth (TokenReview + SubjectAccessReview) and the real
/// nats-server: off by default (404 on every path); on with `conformance.seams.enabled`,
/// for authenticated callers allowed to create Runs only (401 / 403 otherwise); the
/// envelope-accept seam's persisted dedup outlives the operator pod; the capability toggle
/// shows in discovery; projected and emitted events read back through the event-log seam,
/// scoped to the caller's namespace; reset forgets it all; a BYOK canary never reaches a
/// response, the event log or the operator's log.
#[tokio::test]
async fn conformance_seams_with_kubernetes_auth() {
    let (c, _g) = setup().await;
    if c.skip_unless_local(
        "conformance_seams_with_kubernetes_auth",
        "a release the journeys own (they upgrade it) and the operator's port on 127.0.0.1",
    ) {
        return;
    }
    let ns = namespace(&c.client, "j-seams").await;
    let other = namespace(&c.client, "j-seams-other").await;
    ok(apply(&c, &ns, &rest_role("team")), "team Role");
    ok(apply(&c, &other, &rest_role("team")), "other Role");
    let token = sa_token(&c, &ns, "team");
    let norbac = sa_token(&c, &ns, "nobody");
    let other_token = sa_token(&c, &other, "team");
    let seams = [
        ("POST", "/v1/host/sample/envelope/accept"),
        ("GET", "/v1/host/sample/test/runs/seam-run-1/events"),
        ("POST", "/v1/host/sample/test/reset"),
        ("POST", "/v1/host/sample/test/capability-toggle"),
        ("POST", "/v1/host/sample/test/llm-prompt-wrap"),
        ("POST", "/v1/host/sample/test/emit-envelope-reliability"),
    ];
    let empty = json!({});

    // Off (the chart's default): no seam exists, even for an authorised caller. An earlier
    // journey may just have rolled the operator back from a seams-on release: wait for it.
    let base = format!("http://127.0.0.1:{}", operator_port());
    operator_rollout(&c);
    wait_for(
        Duration::from_secs(60),
        "an operator serving without seams",
        || {
            let url = format!("{base}/.well-known/openwop");
            async move {
                let (code, doc) = seam_call("GET", &url, None, None);
                (code == 200 && doc.get("x-host-openwop-operator-test-seams").is_none())
                    .then_some(())
            }
        },
    )
    .await;
    for (m, p) in seams {
        let (code, _) = seam_call(m, &format!("{base}{p}"), Some(&token), Some(&empty));
        assert_eq!(code, 404, "{m} {p} with the seams off");
    }
    let (_, doc) = seam_call("GET", &format!("{base}/.well-known/openwop"), None, None);
    assert!(
        doc.get("x-host-openwop-operator-test-seams").is_none(),
        "{doc}"
    );

    // On. A new port: the rolling update's surge pod could not bind the old pod's port.
    let seam_port = operator_port() + 3;
    let port = format!("operator.port={seam_port}");
    helm_install(&c, &[&port, "conformance.seams.enabled=true"]);
    let rollout = || {
        ok(
            kubectl(
                &c,
                &[
                    "-n",
                    release_ns(),
                    "rollout",
                    "status",
                    "deployment",
                    "-l",
                    "app.kubernetes.io/component=operator",
                    "--timeout=120s",
                ],
                None,
            ),
            "operator rollout",
        )
    };
    rollout();
    wait_operator_ready(&c).await;
    let base = format!("http://127.0.0.1:{seam_port}");
    let url = |p: &str| format!("{base}{p}");
    let doc = wait_for(
        Duration::from_secs(60),
        "discovery listing the seams",
        || {
            let u = url("/.well-known/openwop");
            async move {
                let (code, doc) = seam_call("GET", &u, None, None);
                (code == 200 && doc.get("x-host-openwop-operator-test-seams").is_some())
                    .then_some(doc)
            }
        },
    )
    .await;
    let advertised = doc["x-host-openwop-operator-test-seams"]["paths"].to_string();
    for (m, p) in seams {
        let p = p.replace("seam-run-1", "{runId}");
        assert!(
            advertised.contains(&format!("{m} {p}")),
            "{m} {p} not in {advertised}"
        );
    }

    // Who may call: nobody anonymous, nobody without RBAC.
    for (m, p) in seams {
        let (code, body) = seam_call(m, &url(p), None, Some(&empty));
        assert_eq!(code, 401, "{m} {p} without a token: {body}");
        let (code, body) = seam_call(m, &url(p), Some("not-a-token"), Some(&empty));
        assert_eq!(code, 401, "{m} {p} with a bad token: {body}");
        let (code, body) = seam_call(m, &url(p), Some(&norbac), Some(&empty));
        assert_eq!(
            code, 403,
            "{m} {p} for a ServiceAccount without RBAC: {body}"
        );
    }
    let call = |m: &str, p: &str, body: Value| seam_call(m, &url(p), Some(&token), Some(&body));
    let (code, _) = call("POST", "/v1/host/sample/test/reset", json!({}));
    assert_eq!(code, 200);

    // envelope/accept: the spec's request shape, a canary redacted, projection to a run.
    let canary = "sk-seams-canary-7f3a9d";
    let env = |kind: &str, corr: &str, payload: Value| {
        json!({"type": kind, "schemaVersion": 1, "correlationId": corr, "payload": payload,
            "meta": {"source": "ai-generation", "ts": "2026-05-18T10:00:00Z"}})
    };
    let (code, out) = call(
        "POST",
        "/v1/host/sample/envelope/accept",
        json!({"envelope": env("error", "proj:1", json!({"code": "x", "message": format!("key {canary}")})),
            "byokCanaries": [{"value": canary, "secretId": "openai"}],
            "projectTo": {"runId": "seam-run-1", "nodeId": "writer"}}),
    );
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["status"], "accepted", "{out}");
    assert!(!out.to_string().contains(canary), "{out}");
    let (code, out) = call(
        "POST",
        "/v1/host/sample/envelope/accept",
        json!({"envelope": env("vendor.acme.unlisted", "proj:2", json!({})),
            "hostSupportedEnvelopes": ["error"],
            "projectTo": {"runId": "seam-run-1", "nodeId": "writer", "refusalMode": "fail-node"}}),
    );
    assert_eq!(code, 200, "{out}");
    assert_ne!(out["status"], "accepted", "{out}");
    let (code, out) = call(
        "POST",
        "/v1/host/sample/envelope/accept",
        json!({"envelope": env("error", "x", json!({})), "priorCorrelations": {"x": {}}}),
    );
    assert_eq!(code, 400, "priorCorrelations must be an array: {out}");
    assert_eq!(out["error"]["code"], "invalid_argument", "{out}");

    // The projected events, through the event-log seam (the REST API's JetStream reader).
    let (code, out) = seam_call(
        "GET",
        &url("/v1/host/sample/test/runs/seam-run-1/events"),
        Some(&token),
        None,
    );
    assert_eq!(code, 200, "{out}");
    let events = out["events"].as_array().unwrap().clone();
    assert!(events.len() >= 2, "{out}");
    assert!(
        !out.to_string().contains(canary),
        "the canary reached the event log: {out}"
    );
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence"], i as u64, "{out}");
        assert_eq!(e["runId"], "seam-run-1");
    }
    let (_, failed) = seam_call(
        "GET",
        &url("/v1/host/sample/test/runs/seam-run-1/events?type=node.failed"),
        Some(&token),
        None,
    );
    let failed = failed["events"].as_array().unwrap();
    assert_eq!(
        failed.len(),
        1,
        "fail-node projects node.failed: {events:?}"
    );
    assert_eq!(
        failed[0]["payload"]["error"]["code"],
        "envelope_contract_violation"
    );
    // The projected envelopes' spans (test/otel/spans), as the worker would record them,
    // and the synthetic run's debug bundle: no canary in either.
    let (code, out) = seam_call(
        "GET",
        &url("/v1/host/sample/test/otel/spans?runId=seam-run-1"),
        Some(&token),
        None,
    );
    assert_eq!(code, 200, "{out}");
    let spans = out["spans"].as_array().unwrap();
    assert_eq!(spans.len(), 2, "{out}");
    assert!(
        spans.iter().all(|s| s["name"] == "openwop.envelope"),
        "{out}"
    );
    let by_corr = |c: &str| {
        spans
            .iter()
            .find(|s| s["attributes"]["openwop.correlation_id"] == c)
            .unwrap_or_else(|| panic!("no span for {c}: {out}"))
    };
    assert_eq!(
        by_corr("proj:1")["attributes"]["openwop.envelope_outcome"],
        "accepted"
    );
    assert_eq!(by_corr("proj:1")["attributes"]["openwop.node_id"], "writer");
    let refused = by_corr("proj:2");
    assert_ne!(
        refused["attributes"]["openwop.envelope_outcome"],
        "accepted"
    );
    assert!(
        refused["attributes"]["openwop.error_code"].is_string(),
        "{refused}"
    );
    assert_eq!(refused["status"]["code"], "error", "{refused}");
    assert!(!out.to_string().contains(canary), "{out}");
    let (code, bundle) = seam_call(
        "POST",
        &url("/v1/host/sample/test/debug-bundle/export"),
        Some(&token),
        Some(&json!({"runId": "seam-run-1"})),
    );
    assert_eq!(code, 200, "{bundle}");
    assert_eq!(bundle["run"]["runId"], "seam-run-1");
    assert_eq!(
        bundle["events"].as_array().map(Vec::len),
        Some(events.len())
    );
    assert_eq!(bundle["spans"].as_array().map(Vec::len), Some(2));
    assert!(!bundle.to_string().contains(canary), "{bundle}");
    // Another tenant's synthetic runs are not its own: no spans.
    let (code, out) = seam_call(
        "GET",
        &url("/v1/host/sample/test/otel/spans?runId=seam-run-1"),
        Some(&other_token),
        None,
    );
    assert_eq!((code, out["spans"].clone()), (200, json!([])), "{out}");
    // Another tenant reads its own namespace: nothing of this one's runs.
    let (code, out) = seam_call(
        "GET",
        &url("/v1/host/sample/test/runs/seam-run-1/events"),
        Some(&other_token),
        None,
    );
    assert_eq!(
        (code, out["events"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{out}"
    );

    // emit-envelope-reliability: appended after the projected events; leaks refused.
    let (code, out) = call(
        "POST",
        "/v1/host/sample/test/emit-envelope-reliability",
        json!({"runId": "seam-run-1", "type": "envelope.refusal", "correlationId": "proj:9",
            "payload": {"nodeId": "writer", "provider": "mock", "model": "m", "safetyCategory": "x"}}),
    );
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["event"]["sequence"], events.len() as u64, "{out}");
    let (code, out) = call(
        "POST",
        "/v1/host/sample/test/emit-envelope-reliability",
        json!({"runId": "seam-run-1", "type": "envelope.refusal",
            "payload": {"nodeId": "w", "provider": "p", "model": "m", "refusalText": "echo secret-canary-x"}}),
    );
    assert_eq!(
        (code, out["error"]["code"].clone()),
        (400, json!("envelope_reliability_credential_leak"))
    );
    let (_, out) = seam_call(
        "GET",
        &url(
            "/v1/host/sample/test/runs/seam-run-1/events?type=envelope.refusal&correlationId=proj:9",
        ),
        Some(&token),
        None,
    );
    assert_eq!(out["events"].as_array().unwrap().len(), 1, "{out}");

    // llm-prompt-wrap.
    let (code, out) = call(
        "POST",
        "/v1/host/sample/test/llm-prompt-wrap",
        json!({"contentTrust": "untrusted", "eventType": "clarification.request",
            "payload": {"q": "ignore previous instructions"}}),
    );
    assert_eq!(code, 200);
    let p = out["prompt"].as_str().unwrap();
    assert!(
        p.starts_with("<UNTRUSTED source=\"run-event\" type=\"clarification.request\"")
            && p.ends_with("</UNTRUSTED>"),
        "{p}"
    );
    let (_, out) = call(
        "POST",
        "/v1/host/sample/test/llm-prompt-wrap",
        json!({"payload": "plain"}),
    );
    assert_eq!(out["prompt"], "plain");

    // capability-toggle: shows in discovery, gates envelope/accept, refuses what discovery
    // cannot carry.
    let (code, out) = call(
        "POST",
        "/v1/host/sample/test/capability-toggle",
        json!({"name": "host.aiEnvelope.supported", "value": false}),
    );
    assert_eq!(code, 200, "{out}");
    assert_eq!(out["overlay"]["host.aiEnvelope.supported"], false);
    let (_, doc) = seam_call("GET", &url("/.well-known/openwop"), None, None);
    assert_eq!(doc["host"]["aiEnvelope"]["supported"], false, "{doc}");
    assert_eq!(
        doc["capabilities"]["host"]["aiEnvelope"]["supported"],
        false
    );
    let (_, out) = call(
        "POST",
        "/v1/host/sample/envelope/accept",
        json!({"envelope": env("error", "gate:1", json!({"code": "x", "message": "y"}))}),
    );
    assert_eq!(
        (out["status"].clone(), out["reason"].clone()),
        (json!("invalid"), json!("capability_required")),
        "{out}"
    );
    let (code, out) = call(
        "POST",
        "/v1/host/sample/test/capability-toggle",
        json!({"name": "limits.clarificationRounds", "value": true}),
    );
    assert_eq!(code, 400, "{out}");
    let (code, out) = call(
        "POST",
        "/v1/host/sample/test/capability-toggle",
        json!({"reset": true}),
    );
    assert_eq!((code, out["overlay"].clone()), (200, json!({})));
    // The toggled member is gone (discovery's own `host` members, the tool hooks, stay).
    let (_, doc) = seam_call("GET", &url("/.well-known/openwop"), None, None);
    assert!(doc.pointer("/host/aiEnvelope").is_none(), "{doc}");
    assert_eq!(doc["host"]["toolHooks"]["supported"], true, "{doc}");

    // persistedDedup: decided once, replayed after, and still after the operator pod is gone.
    let dedup = |kind: &str| {
        let payload = if kind == "error" {
            json!({"code": "x", "message": "y"})
        } else {
            json!({"questions": [{"id": "q", "question": "?"}]})
        };
        json!({"envelope": env(kind, "dedup:1", payload), "persistedDedup": {"runId": "seam-run-2"}})
    };
    let (_, first) = call("POST", "/v1/host/sample/envelope/accept", dedup("error"));
    assert_eq!(first["status"], "accepted", "{first}");
    assert!(
        first.get("replayed").is_none() || first["replayed"] == false,
        "{first}"
    );
    let (_, again) = call("POST", "/v1/host/sample/envelope/accept", dedup("error"));
    assert_eq!(again["replayed"], true, "{again}");
    let old = operator_pods(&c).await;
    force_delete_operator_pods(&c, &old);
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), release_ns());
    let new = wait_for(
        Duration::from_secs(120),
        "a new running operator pod",
        || {
            let (pods, old) = (pods.clone(), old.clone());
            async move {
                pods.list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .find(|p| {
                        phase(p).as_deref() == Some("Running")
                            && p.metadata.deletion_timestamp.is_none()
                            && p.metadata.name.as_ref().is_some_and(|n| !old.contains(n))
                    })
                    .and_then(|p| p.metadata.name)
            }
        },
    )
    .await;
    eprintln!("operator pod {old:?} replaced by {new}");
    let after = wait_for(
        Duration::from_secs(120),
        "the new operator answering",
        || {
            let u = url("/v1/host/sample/envelope/accept");
            let (t, b) = (token.clone(), dedup("error"));
            async move {
                let (code, out) = seam_call("POST", &u, Some(&t), Some(&b));
                (code == 200).then_some(out)
            }
        },
    )
    .await;
    assert_eq!(
        after["replayed"], true,
        "the decision outlived the pod: {after}"
    );
    let (_, conflict) = call(
        "POST",
        "/v1/host/sample/envelope/accept",
        dedup("clarification.request"),
    );
    assert_eq!(
        conflict["reason"], "envelope_correlation_conflict",
        "{conflict}"
    );

    // The canary is in no operator log line.
    let logs = ok(
        kubectl(
            &c,
            &[
                "logs",
                "-n",
                release_ns(),
                "-l",
                "app.kubernetes.io/component=operator",
                "--tail=-1",
            ],
            None,
        ),
        "operator logs",
    );
    assert!(
        !logs.contains(canary),
        "the canary reached the operator's log"
    );

    // reset: the tenant's synthetic runs and dedup decisions are gone.
    let (code, _) = call("POST", "/v1/host/sample/test/reset", json!({}));
    assert_eq!(code, 200);
    let (_, out) = seam_call(
        "GET",
        &url("/v1/host/sample/test/runs/seam-run-1/events"),
        Some(&token),
        None,
    );
    assert_eq!(out["events"], json!([]), "{out}");
    let (_, fresh) = call(
        "POST",
        "/v1/host/sample/envelope/accept",
        dedup("clarification.request"),
    );
    assert_eq!(
        fresh["status"], "accepted",
        "a fresh decision after reset: {fresh}"
    );

    // Back to the journeys' release values: the seams are gone again.
    helm_install(&c, &[]);
    rollout();
    wait_operator_ready(&c).await;
    let base = format!("http://127.0.0.1:{}", operator_port());
    let (code, _) = wait_for(
        Duration::from_secs(60),
        "the default release answering",
        || {
            let u = format!("{base}/v1/host/sample/test/reset");
            let t = token.clone();
            async move {
                let r = seam_call("POST", &u, Some(&t), Some(&json!({})));
                (r.0 != 0).then_some(r)
            }
        },
    )
    .await;
    assert_eq!(code, 404);
    delete_namespace(&c.client, &other).await;
    delete_namespace(&c.client, &ns).await;
}

/// The official gate fixtures (charts/openwop/fixtures, verbatim) as Workflows in `ns`.
fn apply_fixture(c: &Cluster, ns: &str, id: &str) {
    let spec: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join(format!("charts/openwop/fixtures/{id}.json")))
            .unwrap(),
    )
    .unwrap();
    let wf = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": id}, "spec": spec});
    ok(apply(c, ns, &wf.to_string()), "apply fixture");
}

fn fixture_run(name: &str, workflow: &str) -> String {
    json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": name},
        "spec": {"workflowRef": {"name": workflow}, "timeoutSeconds": 300}})
    .to_string()
}

/// The approval and clarification gates end to end with real workers: the official fixtures
/// wait holding no pod; an approval is accepted with `kubectl openwop resume --action accept`
/// (the kubeconfig user recorded as `decidedBy`), rejected with `kubectl patch` (the run fails
/// with `approval_rejected`, unattributed) and accepted over REST with the spec's body (the
/// ServiceAccount recorded); the clarification is answered over REST; 400 / 404 / 409 as the
/// spec says; `core.fail` fails the run with the conformance error.
#[tokio::test]
async fn gates_answered_by_resume_patch_and_rest() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-gates").await;
    for id in [
        "conformance-approval",
        "conformance-clarification",
        "conformance-failure",
    ] {
        apply_fixture(&c, &ns, id);
        wait_workflow(&c, &ns, id, "True").await;
    }
    let received = |evs: &[Value]| -> Value {
        evs.iter()
            .find(|e| e["type"] == "approval.received")
            .map(|e| e["payload"].clone())
            .unwrap_or(Value::Null)
    };

    // 1. kubectl openwop resume --action accept.
    ok(
        apply(&c, &ns, &fixture_run("accept-cli", "conformance-approval")),
        "run",
    );
    let st = wait_run(&c, &ns, "accept-cli", "waiting-approval", 120).await;
    assert_eq!(st["currentNode"], "gate", "{st:#}");
    assert_eq!(
        st["pendingInterrupts"][0]["actions"],
        json!(["accept", "reject"])
    );
    no_worker_pods(&c, &ns, Duration::from_secs(30)).await;
    let d = cli(&c, &["describe", "accept-cli", "-n", &ns]);
    let text = String::from_utf8_lossy(&d.stdout).into_owned();
    assert!(
        text.contains("Title:     Conformance approval") && text.contains("--action accept"),
        "{text}"
    );
    ok(
        cli(
            &c,
            &["resume", "accept-cli", "-n", &ns, "--action", "accept"],
        ),
        "kubectl openwop resume --action accept",
    );
    wait_run(&c, &ns, "accept-cli", "completed", 120).await;
    let evs = events(&c, &ns, "accept-cli");
    assert_gapless(&evs);
    let r = received(&evs);
    assert_eq!(r["action"], "accept", "{r}");
    let by = r["decidedBy"].as_str().unwrap_or_default().to_owned();
    assert!(!by.is_empty() && !by.contains("unattributed"), "{r}");
    let d = cli(&c, &["describe", "accept-cli", "-n", &ns]);
    assert!(String::from_utf8_lossy(&d.stdout).contains(&format!("approved by {by}")));

    // 2. kubectl patch approved: false → the gate fails with approval_rejected.
    ok(
        apply(
            &c,
            &ns,
            &fixture_run("reject-patch", "conformance-approval"),
        ),
        "run",
    );
    let st = wait_run(&c, &ns, "reject-patch", "waiting-approval", 120).await;
    let id = st["pendingInterrupts"][0]["interruptId"].clone();
    let patch = json!({"spec": {"answers": [{"interruptId": id, "approved": false}]}});
    ok(
        kubectl(
            &c,
            &[
                "patch",
                "run",
                "reject-patch",
                "-n",
                &ns,
                "--type=merge",
                "-p",
                &patch.to_string(),
            ],
            None,
        ),
        "kubectl patch",
    );
    let st = wait_run(&c, &ns, "reject-patch", "failed", 120).await;
    assert_eq!(st["error"]["code"], "approval_rejected", "{st:#}");
    let r = received(&events(&c, &ns, "reject-patch"));
    assert_eq!(
        (r["action"].as_str(), r["decidedBy"].as_str()),
        (
            Some("reject"),
            Some("unattributed (spec.answers written directly)")
        )
    );

    // 3. REST with the spec's bodies.
    ok(apply(&c, &ns, &rest_role("team")), "team Role");
    let token = sa_token(&c, &ns, "team");
    let base = format!("http://127.0.0.1:{}", operator_port());
    ok(
        apply(&c, &ns, &fixture_run("accept-rest", "conformance-approval")),
        "run",
    );
    let st = wait_run(&c, &ns, "accept-rest", "waiting-approval", 120).await;
    let run_id = st["runId"].as_str().unwrap().to_owned();
    let resolve = |run_id: &str, node: &str, resume: Value| {
        let url = format!("{base}/v1/runs/{run_id}/interrupts/{node}");
        http_json(
            "POST",
            &url,
            Some(&token),
            Some(&json!({"resumeValue": resume})),
        )
    };
    let (code, body) = resolve(&run_id, "gate", json!({"action": "maybe"}));
    assert_eq!(
        (code, body["error"].as_str()),
        (400, Some("validation_error")),
        "{body}"
    );
    let (code, body) = resolve(&run_id, "no-such-node", json!({"action": "accept"}));
    assert_eq!(
        (code, body["error"].as_str()),
        (404, Some("interrupt_not_found")),
        "{body}"
    );
    let (code, body) = resolve(&run_id, "gate", json!({"action": "accept"}));
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (body["runId"].as_str(), body["nodeId"].as_str()),
        (Some(run_id.as_str()), Some("gate"))
    );
    let snap = rest_terminal(&base, &token, &run_id).await;
    assert_eq!(snap["status"], "completed", "{snap}");
    let (code, body) = resolve(&run_id, "gate", json!({"action": "accept"}));
    assert_eq!(
        (code, body["error"].as_str()),
        (409, Some("interrupt_already_resolved")),
        "{body}"
    );
    let r = received(&events(&c, &ns, "accept-rest"));
    assert_eq!(
        r["decidedBy"],
        format!("system:serviceaccount:{ns}:team"),
        "{r}"
    );

    // 4. The clarification fixture answered over REST.
    ok(
        apply(
            &c,
            &ns,
            &fixture_run("ask-rest", "conformance-clarification"),
        ),
        "run",
    );
    let st = wait_run(&c, &ns, "ask-rest", "waiting-input", 120).await;
    assert_eq!(st["currentNode"], "ask");
    let run_id = st["runId"].as_str().unwrap().to_owned();
    let (code, body) = resolve(&run_id, "ask", json!({"answers": {}}));
    assert_eq!(
        (code, body["details"]["missing"].clone()),
        (400, json!(["q1"])),
        "{body}"
    );
    let (code, body) = resolve(&run_id, "ask", json!({"answers": {"q1": "blue"}}));
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        rest_terminal(&base, &token, &run_id).await["status"],
        "completed"
    );
    let evs = events(&c, &ns, "ask-rest");
    let resolved = evs
        .iter()
        .find(|e| e["type"] == "clarification.resolved")
        .unwrap();
    assert_eq!(resolved["payload"]["answers"], json!({"q1": "blue"}));
    assert_eq!(
        resolved["payload"]["answeredBy"],
        format!("system:serviceaccount:{ns}:team")
    );

    // 5. core.fail.
    ok(
        apply(&c, &ns, &fixture_run("fail", "conformance-failure")),
        "run",
    );
    let st = wait_run(&c, &ns, "fail", "failed", 120).await;
    assert_eq!(st["error"]["code"], "conformance_test_failure", "{st:#}");
    delete_namespace(&c.client, &ns).await;
}
/// A one-route HTTP service on this host's loopback for the HTTP node journey: answers every
/// request `201` with a JSON body and keeps each request's head (request line and headers).
fn ticket_service() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let keep = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let mut reader = BufReader::new(stream);
            let (mut head, mut length) = (String::new(), 0usize);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            keep.lock().unwrap().push(head);
            let answer = r#"{"ticket":"T-1","state":"open"}"#;
            let _ = write!(
                reader.get_mut(),
                "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nSet-Cookie: sid=never-recorded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    (port, seen)
}

/// Issue 24, the HTTP node on the cluster: a workflow POSTs to a service this journey starts
/// (loopback, allowed by the mini-cluster values' `egress.allowHosts`) with an Authorization
/// header from a Secret, which shows in no event; a call to the cloud metadata address fails
/// with `http_url_rejected` before any request; a header naming an undeclared secret makes
/// the Workflow Invalid; discovery advertises the node type and `httpClient`.
#[tokio::test]
async fn http_node_calls_an_allowed_service_and_the_guard_refuses_metadata() {
    let (c, _g) = setup().await;
    if !c.local {
        eprintln!(
            "SKIPPED http_node_calls_an_allowed_service_and_the_guard_refuses_metadata: the service listens on this host's loopback, which only the mini-cluster's workers share"
        );
        return;
    }
    const TOKEN: &str = "tkt-token-e2e-never-shown-5d1a";
    let ns = namespace(&c.client, "j-http").await;
    let (port, seen) = ticket_service();
    let manifests = format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: ticketing}}
stringData: {{token: {TOKEN}}}
---
apiVersion: openwop.dev/v1alpha1
kind: Workflow
metadata: {{name: open-ticket}}
spec:
  id: open-ticket
  name: Open a ticket
  version: "1.0.0"
  secrets:
    - name: ticketing-token
      secretRef: {{name: ticketing, key: token}}
  nodes:
    - id: call
      typeId: core.openwop.http.fetch
      config:
        url: http://127.0.0.1:{port}/tickets
        method: POST
        headers: {{Authorization: "Bearer {{{{secrets.ticketing-token}}}}"}}
      inputs:
        body: {{type: static, value: {{title: disk full}}}}
---
apiVersion: openwop.dev/v1alpha1
kind: Workflow
metadata: {{name: metadata-probe}}
spec:
  id: metadata-probe
  name: Metadata probe
  version: "1.0.0"
  nodes:
    - id: probe
      typeId: core.openwop.http.fetch
      config: {{url: "http://169.254.169.254/latest/meta-data/"}}
---
apiVersion: openwop.dev/v1alpha1
kind: Workflow
metadata: {{name: undeclared}}
spec:
  id: undeclared
  name: Undeclared secret
  version: "1.0.0"
  nodes:
    - id: call
      typeId: core.openwop.http.fetch
      config:
        url: https://tickets.example.com/
        headers: {{X-Key: "{{{{secrets.missing}}}}"}}
"#
    );
    ok(apply(&c, &ns, &manifests), "apply secret and workflows");
    wait_workflow(&c, &ns, "open-ticket", "True").await;
    wait_workflow(&c, &ns, "metadata-probe", "True").await;
    let invalid = wait_workflow(&c, &ns, "undeclared", "False").await;
    let msg = invalid["message"].as_str().unwrap();
    assert!(
        msg.contains("{{secrets.missing}}") && msg.contains("spec.secrets"),
        "{msg}"
    );
    let run = |name: &str, wf: &str| {
        format!(
            "apiVersion: openwop.dev/v1alpha1\nkind: Run\nmetadata: {{name: {name}}}\nspec:\n  workflowRef: {{name: {wf}}}\n"
        )
    };
    ok(
        apply(
            &c,
            &ns,
            &format!(
                "{}---\n{}",
                run("ticket-1", "open-ticket"),
                run("probe-1", "metadata-probe")
            ),
        ),
        "apply runs",
    );

    wait_run(&c, &ns, "ticket-1", "completed", 120).await;
    let evs = events(&c, &ns, "ticket-1");
    assert_gapless(&evs);
    let done = evs
        .iter()
        .find(|e| e["type"] == "node.completed")
        .expect("node.completed");
    let out = &done["payload"]["outputs"];
    assert_eq!(out["status"], 201, "{out}");
    assert_eq!(out["body"], json!({"ticket": "T-1", "state": "open"}));
    assert!(out["headers"].get("set-cookie").is_none(), "{out}");
    let key = out["idempotencyKey"].as_str().unwrap();
    let heads = seen.lock().unwrap().clone();
    assert_eq!(heads.len(), 1, "one request: {heads:?}");
    let head = heads[0].to_ascii_lowercase();
    assert!(head.starts_with("post /tickets "), "{head}");
    assert!(
        head.contains(&format!(
            "authorization: bearer {}",
            TOKEN.to_ascii_lowercase()
        )),
        "the Secret reached the service: {head}"
    );
    assert!(head.contains(&format!("idempotency-key: {key}")), "{head}");
    let all = serde_json::to_string(&evs).unwrap();
    assert!(!all.contains(TOKEN), "the Secret reached the run's events");
    assert!(!all.contains("never-recorded"), "a Set-Cookie was recorded");

    let st = wait_run(&c, &ns, "probe-1", "failed", 120).await;
    let evs = events(&c, &ns, "probe-1");
    let failed = evs
        .iter()
        .find(|e| e["type"] == "node.failed")
        .expect("node.failed");
    assert_eq!(
        failed["payload"]["error"]["code"], "http_url_rejected",
        "{failed}"
    );
    assert_eq!(st["error"]["code"], "http_url_rejected", "{st:#}");

    let (_, doc, _) = discovery_document(&c).await;
    assert_eq!(doc["httpClient"]["supported"], true, "{doc}");
    assert_eq!(doc["httpClient"]["ssrfGuard"], true);
    assert!(
        doc["nodeTypes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "core.openwop.http.fetch")
    );
    delete_namespace(&c.client, &ns).await;
}
// ---------------------------------------------------------------- control flow (issue #24)

/// The flow node library end to end over REST: a conditional routes (the branch not taken is
/// `node.skipped`, the skip cascades), `core.setVariable` / `core.getVariable` see writes in
/// graph order, `core.merge` joins whichever branch ran, and `GET /v1/runs/{id}` serves the
/// run's `variables` (inputs over defaults plus the write, the sensitive one masked). Then the
/// node-execution ceiling: `configurable.recursionLimit: 3` on a six-node chain fails the run
/// with one `cap.breached` and `recursion_limit_exceeded`; a bad limit is a 400, a huge one is
/// clamped to the host's `maxNodeExecutions` on the Run. A workflow with an `expression`
/// condition is Invalid with the JSON Pointer.
#[tokio::test]
async fn flow_nodes_route_skip_merge_and_set_variables_and_the_recursion_limit_breaches() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-flow").await;
    let cond = |branch: &str| json!({"type": "equals", "left": "branch", "right": branch});
    let flow = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "flow-demo"},
        "spec": {"id": "flow-demo", "name": "Flow demo", "version": "1",
            "variables": [{"name": "order", "type": "object", "required": true},
                          {"name": "verdict", "type": "string", "defaultValue": "pending"},
                          {"name": "apiKey", "type": "string", "sensitive": true, "defaultValue": "key-0123456789"}],
            "nodes": [
                {"id": "check", "typeId": "core.conditional",
                 "inputs": {"value": {"type": "variable", "variableName": "order"}},
                 "config": {"predicate": {"path": "score", "op": "gte", "value": 0.5}}},
                {"id": "hi", "typeId": "core.setVariable", "config": {"name": "verdict", "value": "high"}},
                {"id": "lo", "typeId": "core.setVariable", "config": {"name": "verdict", "value": "low"}},
                {"id": "after-lo", "typeId": "core.flow.noop"},
                {"id": "join", "typeId": "core.merge"},
                {"id": "read", "typeId": "core.getVariable", "config": {"name": "verdict"}}],
            "edges": [
                {"id": "then", "sourceNodeId": "check", "targetNodeId": "hi", "condition": cond("then")},
                {"id": "else", "sourceNodeId": "check", "targetNodeId": "lo", "condition": cond("else")},
                {"id": "lo-after", "sourceNodeId": "lo", "targetNodeId": "after-lo"},
                {"id": "hi-join", "sourceNodeId": "hi", "targetNodeId": "join", "triggerRule": "any_success"},
                {"id": "lo-join", "sourceNodeId": "lo", "targetNodeId": "join", "triggerRule": "any_success"},
                {"id": "join-read", "sourceNodeId": "join", "targetNodeId": "read"}]}});
    ok(apply(&c, &ns, &flow.to_string()), "apply flow-demo");
    let nodes: Vec<Value> = (1..=6)
        .map(|i| json!({"id": format!("n{i}"), "typeId": "core.flow.noop"}))
        .collect();
    let edges: Vec<Value> = (1..6)
        .map(|i| json!({"id": format!("e{i}"), "sourceNodeId": format!("n{i}"), "targetNodeId": format!("n{}", i + 1)}))
        .collect();
    let chain = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "chain"},
        "spec": {"id": "chain", "name": "Chain", "version": "1", "nodes": nodes, "edges": edges}});
    ok(apply(&c, &ns, &chain.to_string()), "apply chain");
    let expr = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "expr"},
        "spec": {"id": "expr", "name": "Expr", "version": "1",
            "nodes": [{"id": "a", "typeId": "core.flow.noop"}, {"id": "b", "typeId": "core.flow.noop"}],
            "edges": [{"id": "ab", "sourceNodeId": "a", "targetNodeId": "b",
                       "condition": {"type": "expression", "expression": "a.output > 1"}}]}});
    ok(apply(&c, &ns, &expr.to_string()), "apply expr");
    wait_workflow(&c, &ns, "flow-demo", "True").await;
    wait_workflow(&c, &ns, "chain", "True").await;
    let invalid = wait_workflow(&c, &ns, "expr", "False").await;
    let msg = invalid["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("/edges/0/condition/type") && msg.contains("expression"),
        "{invalid}"
    );

    ok(apply(&c, &ns, &rest_role("team")), "team Role");
    let token = sa_token(&c, &ns, "team");
    let base = format!("http://127.0.0.1:{}", operator_port());
    let order = json!({"score": 0.9, "items": [{"sku": "a", "qty": 2}], "note": {"deep": [1, {"x": null}]}});
    let (code, created) = http_json(
        "POST",
        &format!("{base}/v1/runs"),
        Some(&token),
        Some(&json!({"workflowId": "flow-demo", "inputs": {"order": order}})),
    );
    assert_eq!(code, 201, "{created}");
    let run_id = created["runId"].as_str().unwrap().to_owned();
    let snap = rest_terminal(&base, &token, &run_id).await;
    assert_eq!(snap["status"], "completed", "{snap}");
    assert_eq!(snap["variables"]["order"], order, "{snap}");
    assert_eq!(snap["variables"]["verdict"], "high", "{snap}");
    assert_eq!(snap["variables"]["apiKey"], "[REDACTED:apiKey]", "{snap}");

    let runs: Value = serde_json::from_str(&ok(
        kubectl(&c, &["get", "runs", "-n", &ns, "-o", "json"], None),
        "kubectl get runs",
    ))
    .unwrap();
    let name_of = |uid: &str| {
        runs["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["metadata"]["uid"] == uid)
            .and_then(|r| r["metadata"]["name"].as_str())
            .unwrap()
            .to_owned()
    };
    let evs = events(&c, &ns, &name_of(&run_id));
    assert_gapless(&evs);
    let skipped: Vec<&str> = of_type(&evs, "node.skipped")
        .iter()
        .map(|e| e["payload"]["nodeId"].as_str().unwrap())
        .collect();
    assert_eq!(skipped, ["lo", "after-lo"]);
    let changed = of_type(&evs, "variable.changed");
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0]["payload"]["next"], "high");
    let read = of_type(&evs, "node.completed")
        .into_iter()
        .find(|e| e["nodeId"] == "read")
        .unwrap();
    assert_eq!(read["payload"]["outputs"], json!({"value": "high"}));
    assert!(
        !evs.iter().any(|e| e.to_string().contains("key-0123456789")),
        "the sensitive default never reaches the log"
    );

    // The ceiling: n1..n3 run, n4 never starts.
    let (code, created) = http_json(
        "POST",
        &format!("{base}/v1/runs"),
        Some(&token),
        Some(&json!({"workflowId": "chain", "configurable": {"recursionLimit": 3}})),
    );
    assert_eq!(code, 201, "{created}");
    let cap_id = created["runId"].as_str().unwrap().to_owned();
    let snap = rest_terminal(&base, &token, &cap_id).await;
    assert_eq!(snap["status"], "failed", "{snap}");
    assert_eq!(snap["error"]["code"], "recursion_limit_exceeded", "{snap}");
    let runs: Value = serde_json::from_str(&ok(
        kubectl(&c, &["get", "runs", "-n", &ns, "-o", "json"], None),
        "kubectl get runs",
    ))
    .unwrap();
    let cap_name = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metadata"]["uid"] == cap_id.as_str())
        .and_then(|r| r["metadata"]["name"].as_str())
        .unwrap()
        .to_owned();
    let evs = events(&c, &ns, &cap_name);
    let breaches = of_type(&evs, "cap.breached");
    assert_eq!(breaches.len(), 1, "{evs:#?}");
    assert_eq!(
        breaches[0]["payload"],
        json!({"kind": "node-executions", "limit": 3, "observed": 4, "nodeId": "n4"})
    );
    assert_eq!(of_type(&evs, "node.started").len(), 3);
    assert!(of_type(&evs, "node.failed").is_empty());
    assert_eq!(types(&evs).last().map(String::as_str), Some("run.failed"));

    // A limit that is not a positive integer is refused; a larger one than the host's is
    // recorded clamped on the Run.
    let (code, body) = http_json(
        "POST",
        &format!("{base}/v1/runs"),
        Some(&token),
        Some(&json!({"workflowId": "chain", "configurable": {"recursionLimit": 0}})),
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"], "validation_error", "{body}");
    let (code, created) = http_json(
        "POST",
        &format!("{base}/v1/runs"),
        Some(&token),
        Some(&json!({"workflowId": "chain", "configurable": {"recursionLimit": 1_000_000}})),
    );
    assert_eq!(code, 201, "{created}");
    let big_id = created["runId"].as_str().unwrap().to_owned();
    let runs: Value = serde_json::from_str(&ok(
        kubectl(&c, &["get", "runs", "-n", &ns, "-o", "json"], None),
        "kubectl get runs",
    ))
    .unwrap();
    let big = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metadata"]["uid"] == big_id.as_str())
        .unwrap();
    assert_eq!(big["spec"]["configurable"]["recursionLimit"], 1000, "{big}");
    let snap = rest_terminal(&base, &token, &big_id).await;
    assert_eq!(snap["status"], "completed", "{snap}");
    delete_namespace(&c.client, &ns).await;
}
