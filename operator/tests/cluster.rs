//! The operator against the real mini-cluster (kube-apiserver, etcd, kube-controller-manager,
//! node agent, nats-server): CRDs accepted, examples applied, CEL refusals, Workflow
//! validation, worker pods, deletion, missing workflows, leader election, discovery over
//! HTTP, live status from the JetStream event stream, and a ToolServer listed into its status
//! and served by the tool catalog.
//!
//! Each test uses a fresh namespace and its own operator process restricted to it
//! (`watchNamespace`), so the tests run in parallel with each other and with other suites.
//!
//! Why one file of this size: these tests share one mini-cluster and their fixtures (operator
//! launcher, namespaces, NATS helpers); one test binary keeps one cluster handle and one link.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use openwop_crds::{Run, Workflow};
use openwop_nats::testing::free_port;
use serde_json::{Value, json};

#[path = "cluster/rest.rs"]
mod rest;
#[path = "cluster/webhooks.rs"]
mod webhooks;

const TEST_MANAGER: &str = "openwop-operator-tests";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The mini-cluster, or `None` (skip printed) in attach mode: these tests run their own
/// operator processes on this host, which would fight an installed release.
async fn cluster(test: &str) -> Option<openwop_e2e::Cluster> {
    let c = match openwop_e2e::cluster().await {
        Ok(c) => c,
        Err(e) => panic!("mini-cluster unavailable: {e}"),
    };
    (!c.skip_unless_local(test, "its own operator processes on this host (an installed release would reconcile the same Runs)"))
        .then_some(c)
}

async fn wait_for<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {secs}s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Applies the CRDs from the Rust types (server-side apply) and waits until Established.
async fn ensure_crds(client: &Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in openwop_crds::crds() {
        api.patch(
            &crd.name_any(),
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("CRD applies");
    }
    for crd in openwop_crds::crds() {
        wait_established(&api, &crd.name_any()).await;
    }
}

async fn wait_established(api: &Api<CustomResourceDefinition>, name: &str) {
    wait_for(30, &format!("CRD {name} Established"), || async {
        let crd = api.get(name).await.ok()?;
        crd.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await
}

/// A fresh namespace, deleted (in the background) when dropped.
struct Namespace {
    name: String,
    kubeconfig: PathBuf,
}

impl Namespace {
    async fn new(c: &openwop_e2e::Cluster, prefix: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let name = format!("{prefix}-{:x}", nanos ^ std::process::id());
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<k8s_openapi::api::core::v1::Namespace>::all(c.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
        Namespace {
            name,
            kubeconfig: c.kubeconfig.clone(),
        }
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // The test's operator is gone by now: drop the cleanup finalizer of a Run that carries
        // one (a test of earlier releases' Runs) ourselves, or the namespace would stay
        // Terminating forever.
        let kc = self.kubeconfig.display().to_string();
        let ns = &self.name;
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "kubectl --kubeconfig '{kc}' -n {ns} get runs.openwop.dev -o name | \
                 xargs -r kubectl --kubeconfig '{kc}' -n {ns} patch --type=merge \
                 -p '{{\"metadata\":{{\"finalizers\":null}}}}'"
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["delete", "namespace", &self.name, "--wait=false"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// An operator process restricted to one namespace; killed when dropped.
struct Operator {
    child: Child,
    log: PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Operator {
    fn start(c: &openwop_e2e::Cluster, ns: &str, identity: &str, extra: &str) -> Self {
        Self::start_with_kubeconfig(&c.kubeconfig, ns, identity, extra)
    }

    fn start_with_kubeconfig(kubeconfig: &Path, ns: &str, identity: &str, extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let cfg = dir.path().join("config.yaml");
        // An image the node agent does not map; tests that must keep the worker from running
        // also use `held_workflow`. A short lease (fast failover tests) unless `extra` sets one.
        let lease = if extra.contains("leaderElection:") {
            ""
        } else {
            "leaderElection: {leaseDurationSeconds: 4, renewDeadlineSeconds: 3, renewIntervalSeconds: 1}\n"
        };
        let text = format!(
            "watchNamespace: {ns}\nlisten: 127.0.0.1:{port}\ndiscovery: {{namespace: {ns}}}\n\
             worker: {{image: 'openwop.test/unmapped-worker:1'}}\n{lease}{extra}"
        );
        std::fs::write(&cfg, text).unwrap();
        let log = dir.path().join(format!("{identity}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_openwop-operator"))
            .arg("--config")
            .arg(&cfg)
            .arg("--identity")
            .arg(identity)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,kube=warn,openwop_operator=debug")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start openwop-operator");
        Operator {
            child,
            log,
            port,
            _dir: dir,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let text = self.log_text();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            let mut err = std::io::stderr();
            let _ = writeln!(err, "--- operator log tail ({}) ---", self.log.display());
            for l in tail.into_iter().rev() {
                let _ = writeln!(err, "{l}");
            }
        }
    }
}

fn workflow(name: &str, id: &str, nodes: Value) -> Value {
    json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
           "metadata": {"name": name},
           "spec": {"id": id, "name": name, "version": "1", "nodes": nodes}})
}

/// A workflow whose worker can never start: its provider key names a Secret that does not
/// exist, so the kubelet (node agent) holds the pod, whatever image mapping it uses. Tests
/// that assert the pod object or feed crafted events need a worker that stays out of the way.
fn held_workflow(name: &str, id: &str, nodes: Value) -> Value {
    let mut wf = workflow(name, id, nodes);
    wf["spec"]["providers"] = json!([{"provider": "openai", "mountAs": "env", "envName": "OPENAI_API_KEY",
        "secretRef": {"name": "no-such-secret", "key": "api-key"}}]);
    wf
}

async fn create<K>(api: &Api<K>, v: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(v).expect("manifest");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create")
}

fn ready_condition(wf: &Workflow) -> Option<(String, String, String)> {
    let st = wf.status.as_ref()?;
    (st.observed_generation == wf.metadata.generation).then_some(())?;
    st.conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn wait_ready(api: &Api<Workflow>, name: &str) -> (String, String, String) {
    wait_for(30, &format!("Workflow {name} Ready condition"), || async {
        ready_condition(&api.get(name).await.ok()?)
    })
    .await
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

// ---------------------------------------------------------------- CRDs, examples, CEL

#[tokio::test]
async fn crd_yaml_is_accepted_and_examples_apply_or_are_refused_precisely() {
    let Some(c) = cluster("crd_yaml_is_accepted_and_examples_apply_or_are_refused_precisely").await
    else {
        return;
    };
    let crd_file = repo().join("crds/openwop.dev_crds.yaml");
    // kubectl's YAML 1.1 reader is what users run: it must read the generated file right.
    let (ok, out) = kubectl(
        &c.kubeconfig,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            TEST_MANAGER,
            "-f",
            crd_file.to_str().unwrap(),
        ],
    );
    assert!(ok, "CRDs refused by the apiserver: {out}");
    let crds: Api<CustomResourceDefinition> = Api::all(c.client.clone());
    for name in ["workflows.openwop.dev", "runs.openwop.dev"] {
        wait_established(&crds, name).await;
    }
    let served = crds.get("workflows.openwop.dev").await.unwrap();
    let schema = serde_json::to_value(&served.spec.versions[0].schema).unwrap();
    let position = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["nodes"]["items"]
        ["properties"]["position"];
    assert_eq!(position["required"], json!(["x", "y"]), "{position}");

    let ns = Namespace::new(&c, "opi-crd").await;
    for f in [
        "01-hello-workflow.yaml",
        "02-conformance-mock-agent.yaml",
        "03-run-by-id.yaml",
        "invalid/mock-agent-not-allowed.yaml",
    ] {
        let path = repo().join("examples").join(f);
        let (ok, out) = kubectl(
            &c.kubeconfig,
            &[
                "apply",
                "--server-side",
                "-n",
                &ns.name,
                "-f",
                path.to_str().unwrap(),
            ],
        );
        assert!(ok, "{f} refused: {out}");
    }
    let bad = repo().join("examples/invalid/run-both-refs.yaml");
    let (ok, out) = kubectl(
        &c.kubeconfig,
        &[
            "apply",
            "--server-side",
            "-n",
            &ns.name,
            "-f",
            bad.to_str().unwrap(),
        ],
    );
    assert!(!ok, "run-both-refs.yaml was accepted");
    assert!(
        out.contains("spec.workflowRef")
            && out.contains(
                "set exactly one of workflowRef.name (Kubernetes name) or workflowRef.id (OpenWOP id)"
            ),
        "{out}"
    );

    // Transition rules (oldSelf) run on update.
    let runs: Api<Run> = Api::namespaced(c.client.clone(), &ns.name);
    create(
        &runs,
        json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": "c1"},
               "spec": {"workflowRef": {"name": "hello"}, "cancel": true,
                        "answers": [{"interruptId": "i1", "value": {"q1": "blue"}}]}}),
    )
    .await;
    let refuse = |patch: Value| {
        let runs = runs.clone();
        async move {
            match runs
                .patch("c1", &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Err(kube::Error::Api(s)) => (s.code, s.message),
                other => panic!("update accepted: {other:?}"),
            }
        }
    };
    let (code, msg) = refuse(json!({"spec": {"cancel": false}})).await;
    assert_eq!(code, 422);
    assert!(msg.contains("cancel cannot be reverted once set"), "{msg}");
    let (_, msg) = refuse(json!({"spec": {"workflowRef": {"name": "other"}}})).await;
    assert!(msg.contains("workflowRef is immutable"), "{msg}");
    let (_, msg) = refuse(json!({"spec": {"answers": []}})).await;
    assert!(msg.contains("answers are append-only"), "{msg}");
    let (_, msg) = refuse(json!({"spec": {"answers": [{"interruptId": "i1"}]}})).await;
    assert!(msg.contains("an answer needs value"), "{msg}");
}

// ---------------------------------------------------------------- Workflow and Run controllers

#[tokio::test]
async fn workflows_are_validated_and_a_run_gets_a_restricted_owned_pod_removed_with_it() {
    let Some(c) =
        cluster("workflows_are_validated_and_a_run_gets_a_restricted_owned_pod_removed_with_it")
            .await
    else {
        return;
    };
    ensure_crds(&c.client).await;
    let ns = Namespace::new(&c, "opi-run").await;
    let _op = Operator::start(&c, &ns.name, "op-run", "");
    let wfs: Api<Workflow> = Api::namespaced(c.client.clone(), &ns.name);
    create(
        &wfs,
        held_workflow(
            "hello",
            "hello_world",
            json!([{"id": "start", "typeId": "core.identity"},
                   {"id": "finish", "typeId": "core.flow.noop",
                    "inputs": {"in": {"type": "connection", "nodeId": "start", "outputKey": "output"}}}]),
        ),
    )
    .await;
    create(
        &wfs,
        workflow(
            "not-conformance",
            "support-triage",
            json!([{"id": "agent", "typeId": "core.conformance.mock-agent"}]),
        ),
    )
    .await;
    create(
        &wfs,
        workflow(
            "static-without-value",
            "static_without_value",
            json!([{"id": "n1", "typeId": "core.identity", "inputs": {"in": {"type": "static"}}}]),
        ),
    )
    .await;

    let (status, reason, msg) = wait_ready(&wfs, "hello").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Valid"),
        "{msg}"
    );
    let (status, reason, msg) = wait_ready(&wfs, "not-conformance").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "MockAgentNotAllowed")
    );
    assert!(
        msg.contains(r#"node "agent" (/nodes/0/typeId)"#) && msg.contains("conformance-"),
        "{msg}"
    );
    let (status, reason, msg) = wait_ready(&wfs, "static-without-value").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "DefinitionInvalid")
    );
    assert!(msg.contains("/nodes/0/inputs/in"), "{msg}");

    let runs: Api<Run> = Api::namespaced(c.client.clone(), &ns.name);
    let run = create(
        &runs,
        json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": "r1"},
               "spec": {"workflowRef": {"id": "hello_world"}, "inputs": {"greeting": "hi"}}}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns.name);
    let pod = wait_for(60, "worker pod r1-w1", || async {
        pods.get_opt("r1-w1").await.ok().flatten()
    })
    .await;
    let spec = pod.spec.as_ref().unwrap();
    let psc = spec.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert!(psc.run_as_user.is_some_and(|u| u != 0));
    assert_eq!(
        psc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );
    assert_eq!(spec.automount_service_account_token, Some(false));
    let sc = spec.containers[0].security_context.as_ref().unwrap();
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_string()])
    );
    let owner = &pod.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Run", "r1", Some(true))
    );
    assert_eq!(Some(owner.uid.clone()), run.uid());

    let r = wait_for(30, "Run r1 running with its workflow resolved", || async {
        let r = runs.get("r1").await.ok()?;
        let st = r.status.clone()?;
        (st.phase == Some(openwop_crds::RunPhase::Running)
            && st.workflow.as_deref() == Some("hello")
            && st.worker_pod.as_deref() == Some("r1-w1"))
        .then_some(r)
    })
    .await;
    assert!(r.finalizers().is_empty(), "Runs carry no finalizer");
    let events: Api<Event> = Api::namespaced(c.client.clone(), &ns.name);
    let reasons: Vec<String> = wait_for(30, "WorkerStarted Event on r1", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        let reasons: Vec<String> = list
            .items
            .iter()
            .filter(|e| e.regarding.as_ref().and_then(|o| o.name.as_deref()) == Some("r1"))
            .filter_map(|e| e.reason.clone())
            .collect();
        reasons
            .iter()
            .any(|r| r == "WorkerStarted")
            .then_some(reasons)
    })
    .await;
    // Snapshotted and started in the same reconcile: one Event naming both.
    let started = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|e| {
            e.regarding.as_ref().and_then(|o| o.name.as_deref()) == Some("r1")
                && e.reason.as_deref() == Some("WorkerStarted")
        })
        .and_then(|e| e.note)
        .unwrap_or_default();
    assert!(
        started.contains("snapshotted in ConfigMap") && started.contains("started worker pod"),
        "{started:?}"
    );
    assert!(!reasons.iter().any(|r| r == "Snapshotted"), "{reasons:?}");

    runs.delete("r1", &DeleteParams::background())
        .await
        .unwrap();
    wait_for(60, "Run r1 and its pod to be gone", || async {
        let run_gone = runs.get_opt("r1").await.ok()?.is_none();
        let pod_gone = pods.get_opt("r1-w1").await.ok()?.is_none();
        (run_gone && pod_gone).then_some(())
    })
    .await;
}

/// Issue #23's defect: a namespace in `conformance.mockAgentNamespaces` makes a mock-agent
/// Workflow with a non-`conformance-` id Ready, and its Run's snapshot carries that opt-in
/// (`host.mockAgent`), which the worker obeys (worker/tests/run_contract.rs runs it). The
/// pod's environment is the typed worker contract, and it points at the mounted snapshot.
#[tokio::test]
async fn an_opted_in_namespace_gives_its_runs_the_mock_agent_in_the_snapshot() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use openwop_protocol::run::env::WorkerEnv;
    use openwop_protocol::run::snapshot::RunSnapshot;
    let Some(c) =
        cluster("an_opted_in_namespace_gives_its_runs_the_mock_agent_in_the_snapshot").await
    else {
        return;
    };
    ensure_crds(&c.client).await;
    let ns = Namespace::new(&c, "opi-agent").await;
    // Its own instance: an operator installed in the cluster without the opt-in (the journeys'
    // Helm release watches every namespace) must not judge these objects too.
    let _op = Operator::start(
        &c,
        &ns.name,
        "op-agent",
        &format!(
            "instanceId: opt-in\nconformance: {{mockAgentNamespaces: [{}]}}\n",
            ns.name
        ),
    );
    let instance = json!({"openwop.dev/instance": "opt-in"});
    let wfs: Api<Workflow> = Api::namespaced(c.client.clone(), &ns.name);
    let mut wf = held_workflow(
        "team-agent",
        "team-agent",
        json!([{"id": "agent", "typeId": "core.conformance.mock-agent",
                "config": {"mockDecision": {"decision": "ship", "confidence": 0.95}}}]),
    );
    wf["metadata"]["labels"] = instance.clone();
    create(&wfs, wf).await;
    let (status, reason, msg) = wait_ready(&wfs, "team-agent").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Valid"),
        "{msg}"
    );
    let runs: Api<Run> = Api::namespaced(c.client.clone(), &ns.name);
    create(
        &runs,
        json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
               "metadata": {"name": "a1", "labels": instance},
               "spec": {"workflowRef": {"name": "team-agent"}}}),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), &ns.name);
    let cm = wait_for(60, "snapshot ConfigMap a1-snapshot", || async {
        cms.get_opt("a1-snapshot").await.ok().flatten()
    })
    .await;
    let text = cm.data.unwrap()["snapshot.json"].clone();
    let snap = RunSnapshot::from_json(&text, "a1-snapshot").unwrap();
    assert!(snap.host.mock_agent, "{text}");
    assert!(snap.host.mock_agent_allowed("team-agent"));
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns.name);
    let pod = wait_for(60, "worker pod a1-w1", || async {
        pods.get_opt("a1-w1").await.ok().flatten()
    })
    .await;
    let container = &pod.spec.unwrap().containers[0];
    let env = WorkerEnv::from_vars(
        container
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default())),
    )
    .unwrap();
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "snapshot")
        .unwrap();
    assert_eq!(env.snapshot, format!("{}/snapshot.json", mount.mount_path));
    assert_eq!(env.run_name.as_deref(), Some("a1"));
}

#[tokio::test]
async fn run_for_a_missing_workflow_waits_with_a_clear_condition_then_proceeds() {
    let Some(c) =
        cluster("run_for_a_missing_workflow_waits_with_a_clear_condition_then_proceeds").await
    else {
        return;
    };
    ensure_crds(&c.client).await;
    let ns = Namespace::new(&c, "opi-miss").await;
    let _op = Operator::start(&c, &ns.name, "op-miss", "");
    let runs: Api<Run> = Api::namespaced(c.client.clone(), &ns.name);
    create(
        &runs,
        json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": "early"},
               "spec": {"workflowRef": {"name": "later"}}}),
    )
    .await;
    let (reason, message) = wait_for(30, "Run early to report its missing workflow", || async {
        let st = runs.get("early").await.ok()?.status?;
        let c = st.conditions.iter().find(|c| c.type_ == "Ready")?;
        (st.phase == Some(openwop_crds::RunPhase::Pending) && c.status == "False")
            .then(|| (c.reason.clone(), c.message.clone()))
    })
    .await;
    assert_eq!(reason, "WorkflowNotFound");
    assert!(
        message.contains(&format!(
            "Workflow later not found in namespace {}",
            ns.name
        )) && message.contains("starts when it is created"),
        "{message}"
    );
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns.name);
    assert!(pods.get_opt("early-w1").await.unwrap().is_none());

    let wfs: Api<Workflow> = Api::namespaced(c.client.clone(), &ns.name);
    create(
        &wfs,
        workflow(
            "later",
            "later",
            json!([{"id": "a", "typeId": "core.identity"}]),
        ),
    )
    .await;
    // Proceeds on the Workflow's watch event, well before the 30s requeue.
    wait_for(
        20,
        "worker pod early-w1 once the Workflow exists",
        || async { pods.get_opt("early-w1").await.ok().flatten() },
    )
    .await;
    // The status write may lose a race (409) and land on the next reconcile.
    wait_for(10, "Run early Ready=True Snapshotted", || async {
        let st = runs.get("early").await.ok()?.status?;
        st.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True" && c.reason == "Snapshotted")
            .then_some(())
    })
    .await;
}

// ---------------------------------------------------------------- tool servers

#[tokio::test]
async fn a_tool_server_is_listed_into_its_status_with_one_event_and_its_secret_nowhere() {
    let Some(c) =
        cluster("a_tool_server_is_listed_into_its_status_with_one_event_and_its_secret_nowhere")
            .await
    else {
        return;
    };
    use openwop_providers::testing::mcp::{FakeMcp, Knobs};
    const TOKEN: &str = "Bearer tok-7c2e90d1";
    ensure_crds(&c.client).await;
    let ns = Namespace::new(&c, "opi-tools").await;
    // The operator runs on this host: the fake server on loopback is reachable.
    let mcp = FakeMcp::start(Knobs {
        authorization: Some(TOKEN.into()),
        ..Knobs::default()
    });
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(c.client.clone(), &ns.name);
    create(
        &secrets,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mcp-auth"},
               "stringData": {"token": TOKEN}}),
    )
    .await;
    let servers: Api<openwop_crds::ToolServer> = Api::namespaced(c.client.clone(), &ns.name);
    create(
        &servers,
        json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "ToolServer", "metadata": {"name": "search"},
               "spec": {"url": mcp.url,
                        "headersFrom": [{"name": "Authorization", "secretKeyRef": {"name": "mcp-auth", "key": "token"}}],
                        "toolTiers": [{"name": "lookup", "tier": "read"}]}}),
    )
    .await;
    let op = Operator::start(&c, &ns.name, "op-tools", "");
    let status = wait_for(30, "ToolServer search Ready", || async {
        let st = servers.get("search").await.ok()?.status?;
        st.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(st)
    })
    .await;
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason, "Listed", "{ready:?}");
    assert_eq!(status.protocol_version.as_deref(), Some("2025-06-18"));
    assert_eq!(status.tool_count, Some(5));
    let lookup = status.tools.iter().find(|t| t.name == "lookup").unwrap();
    assert_eq!(lookup.tier.as_str(), "read");
    let events: Api<Event> = Api::namespaced(c.client.clone(), &ns.name);
    let notes: Vec<String> = wait_for(30, "the Listed Event on ToolServer search", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        let mine: Vec<&Event> = list
            .items
            .iter()
            .filter(|e| e.regarding.as_ref().and_then(|o| o.kind.as_deref()) == Some("ToolServer"))
            .collect();
        mine.iter()
            .any(|e| e.reason.as_deref() == Some("Listed"))
            .then(|| mine.iter().filter_map(|e| e.note.clone()).collect())
    })
    .await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    let written = serde_json::to_string(&servers.get("search").await.unwrap()).unwrap();
    for (what, text) in [
        ("status", written),
        ("Events", notes.join("\n")),
        ("log", op.log_text()),
    ] {
        assert!(
            !text.contains("tok-7c2e90d1"),
            "the header's Secret value in the {what}: {text}"
        );
    }
    assert_eq!(mcp.log(|l| l.sessions), 1);

    // The catalog over real HTTP, for a ServiceAccount with the Role of docs/rest-api.md.
    let (ok, out) = kubectl(
        &c.kubeconfig,
        &["create", "serviceaccount", "team", "-n", &ns.name],
    );
    assert!(ok, "create serviceaccount: {out}");
    let role = std::env::temp_dir().join(format!("{}-role.yaml", ns.name));
    std::fs::write(&role, openwop_e2e::rest_role("team")).unwrap();
    let (ok, out) = kubectl(
        &c.kubeconfig,
        &["apply", "-n", &ns.name, "-f", role.to_str().unwrap()],
    );
    let _ = std::fs::remove_file(&role);
    assert!(ok, "apply the team Role: {out}");
    let (ok, token) = kubectl(
        &c.kubeconfig,
        &[
            "create",
            "token",
            "team",
            "-n",
            &ns.name,
            "--duration",
            "1h",
        ],
    );
    assert!(ok, "kubectl create token: {token}");
    let http = reqwest::Client::new();
    let get = |path: String| {
        http.get(op.url(&path))
            .bearer_auth(token.trim())
            .timeout(Duration::from_secs(30))
            .send()
    };
    let list: Value = wait_for(30, "GET /v1/tools to list the server's tools", || async {
        let r = get("/v1/tools".into()).await.ok()?;
        let v: Value = r.json().await.ok()?;
        (v["tools"].as_array()?.len() == 5).then_some(v)
    })
    .await;
    assert_eq!(list["tools"][2]["toolId"], "mcp:search/lookup", "{list:#}");
    assert_eq!(list["tools"][2]["safetyTier"], "read");
    assert_eq!(list["tools"][2]["auth"], json!({"credentialRef": true}));
    assert!(!list.to_string().contains("tok-7c2e90d1"));
    let one = get("/v1/tools/mcp:search%2Flookup".into()).await.unwrap();
    assert_eq!(one.status(), reqwest::StatusCode::OK);
    let missing = get("/v1/tools/mcp:search%2Fnope".into()).await.unwrap();
    assert_eq!(missing.status(), reqwest::StatusCode::NOT_FOUND);
}

// ---------------------------------------------------------------- leader election

#[tokio::test]
async fn two_replicas_elect_one_leader_and_the_other_takes_over() {
    let Some(c) = cluster("two_replicas_elect_one_leader_and_the_other_takes_over").await else {
        return;
    };
    ensure_crds(&c.client).await;
    let ns = Namespace::new(&c, "opi-lead").await;
    let mut a = Operator::start(&c, &ns.name, "replica-a", "");
    let mut b = Operator::start(&c, &ns.name, "replica-b", "");
    let holder = wait_for(30, "a Lease holder", || async {
        openwop_e2e::lease_holder(&c.client, &ns.name).await
    })
    .await;
    assert!(holder == "replica-a" || holder == "replica-b", "{holder}");
    // Both replicas had time for several rounds: only the holder runs controllers.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (leader, follower) = if holder == "replica-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert!(leader.log_text().contains("leading: starting controllers"));
    let f = follower.log_text();
    assert!(!f.contains("leading: starting controllers"), "{f}");
    assert!(f.contains("standing by: another replica leads"), "{f}");

    // Exactly one reconciles: the Workflow is validated (by the leader), once.
    let wfs: Api<Workflow> = Api::namespaced(c.client.clone(), &ns.name);
    create(
        &wfs,
        workflow("w", "w", json!([{"id": "a", "typeId": "core.identity"}])),
    )
    .await;
    assert_eq!(wait_ready(&wfs, "w").await.0, "True");
    assert!(
        !follower
            .log_text()
            .contains("leading: starting controllers")
    );

    // The leader dies; the follower takes the expired lease and starts reconciling.
    leader.kill();
    let new_holder = wait_for(30, "the follower to take the Lease", || async {
        openwop_e2e::lease_holder(&c.client, &ns.name)
            .await
            .filter(|h| *h != holder)
    })
    .await;
    wait_for(10, "the new leader to start its controllers", || async {
        follower
            .log_text()
            .contains("leading: starting controllers")
            .then_some(())
    })
    .await;
    create(
        &wfs,
        workflow("w2", "w2", json!([{"id": "a", "typeId": "core.identity"}])),
    )
    .await;
    assert_eq!(
        wait_ready(&wfs, "w2").await.0,
        "True",
        "new leader {new_holder} reconciles"
    );
}

/// A rollout or a deleted pod: SIGTERM. The leader stops its controllers, gives its Lease up
/// (the follower leads at its next round, long before the 30 s lease could expire) and keeps
/// answering HTTP, not ready, for `shutdownDrainSeconds`, then exits cleanly.
#[tokio::test]
async fn a_terminated_leader_releases_the_lease_and_drains_http() {
    let Some(c) = cluster("a_terminated_leader_releases_the_lease_and_drains_http").await else {
        return;
    };
    ensure_crds(&c.client).await;
    let ns = Namespace::new(&c, "opi-drain").await;
    let extra = "leaderElection: {leaseDurationSeconds: 30, renewDeadlineSeconds: 20, renewIntervalSeconds: 1}\n\
                 shutdownDrainSeconds: 3\n";
    let mut a = Operator::start(&c, &ns.name, "replica-a", extra);
    let mut b = Operator::start(&c, &ns.name, "replica-b", extra);
    let holder = wait_for(30, "a Lease holder", || async {
        openwop_e2e::lease_holder(&c.client, &ns.name).await
    })
    .await;
    let (leader, follower) = if holder == "replica-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let http = reqwest::Client::new();
    wait_for(30, "the leader ready", || async {
        let r = http.get(leader.url("/readyz")).send().await.ok()?;
        r.status().is_success().then_some(())
    })
    .await;

    let pid = leader.child.id().to_string();
    let sent = std::time::Instant::now();
    let term = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(term.success(), "kill -TERM {pid}");
    // Draining: not ready, still answering.
    let why = wait_for(5, "readiness failing during the drain", || async {
        let r = http.get(leader.url("/readyz")).send().await.ok()?;
        (r.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE).then_some(r.text().await.ok()?)
    })
    .await;
    assert_eq!(why, "shutting down");
    let discovery = http
        .get(leader.url("/.well-known/openwop"))
        .send()
        .await
        .expect("discovery answers during the drain");
    assert_eq!(discovery.status(), 200);
    let new_holder = wait_for(10, "the follower to take the released Lease", || async {
        openwop_e2e::lease_holder(&c.client, &ns.name)
            .await
            .filter(|h| *h != holder)
    })
    .await;
    let took = sent.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "{new_holder} led {took:?} after SIGTERM: the lease (30 s) was not released"
    );
    let log = leader.log_text();
    assert!(log.contains("released the leader lease"), "{log}");
    // The process exits by itself once the drain is over, with success.
    let status = loop {
        if let Some(st) = leader.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(20),
            "the old leader still runs 20 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let lived = sent.elapsed();
    assert!(
        status.success(),
        "exit status {status}: {}",
        leader.log_text()
    );
    assert!(
        lived >= Duration::from_millis(2900),
        "exited {lived:?} after SIGTERM: the 3 s drain was cut short"
    );
    wait_for(10, "the new leader to start its controllers", || async {
        follower
            .log_text()
            .contains("leading: starting controllers")
            .then_some(())
    })
    .await;
}

/// A TCP proxy to the apiserver that the test can cut (open connections reset, new ones
/// refused) and restore: the apiserver as seen by one operator replica.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(target: std::net::SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (c, cs) = (cut.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if c.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is closed at once
                }
                let h = tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                cs.lock().unwrap().push(h.abort_handle());
            }
        });
        Proxy {
            port,
            cut,
            conns,
            accept,
        }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for h in self.conns.lock().unwrap().drain(..) {
            h.abort();
        }
    }

    /// A copy of `kubeconfig` whose apiserver is this proxy, and the apiserver's address.
    fn kubeconfig(kubeconfig: &Path, dir: &Path) -> (PathBuf, std::net::SocketAddr, String) {
        let text = std::fs::read_to_string(kubeconfig).unwrap();
        let server = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: https://"))
            .expect("kubeconfig has an https server")
            .trim()
            .to_owned();
        let addr: std::net::SocketAddr = server.parse().expect("server is IP:port");
        (dir.join("kubeconfig-proxied"), addr, text)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

/// The `timestamp` of the first log line whose message starts with `message`.
fn logged_at(log: &str, message: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    log.lines().find_map(|l| {
        let v: Value = serde_json::from_str(l).ok()?;
        v["fields"]["message"]
            .as_str()?
            .starts_with(message)
            .then_some(())?;
        v["timestamp"].as_str()?.parse().ok()
    })
}

/// Fencing: the leader reaches the apiserver through a proxy; the proxy is cut. The old
/// leader must stop its controllers and event consumer, and exit, before its lease can
/// expire — i.e. before the other replica acquires the lease and starts leading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_apiserver_stops_before_the_other_replica_leads() {
    let Some(c) =
        cluster("a_leader_cut_off_from_the_apiserver_stops_before_the_other_replica_leads").await
    else {
        return;
    };
    ensure_crds(&c.client).await;
    let ns = Namespace::new(&c, "opi-fence").await;
    let dir = tempfile::tempdir().unwrap();
    let (path, apiserver, text) = Proxy::kubeconfig(&c.kubeconfig, dir.path());
    let proxy = Proxy::start(apiserver).await;
    std::fs::write(
        &path,
        text.replace(
            &format!("server: https://{apiserver}"),
            &format!("server: https://127.0.0.1:{}", proxy.port),
        ),
    )
    .unwrap();
    let leases: Api<Lease> = Api::namespaced(c.client.clone(), &ns.name);
    let holder = || async { leases.get_opt("openwop-operator").await.ok()??.spec };
    // A leads (through the proxy); B, direct, stands by.
    let mut a = Operator::start_with_kubeconfig(&path, &ns.name, "replica-a", "");
    wait_for(30, "replica-a to lead", || async {
        (holder().await?.holder_identity? == "replica-a"
            && a.log_text().contains("leading: starting controllers"))
        .then_some(())
    })
    .await;
    let b = Operator::start(&c, &ns.name, "replica-b", "");
    wait_for(20, "replica-b to stand by", || async {
        b.log_text()
            .contains("standing by: another replica leads")
            .then_some(())
    })
    .await;
    // A acts: it validates a Workflow.
    let wfs: Api<Workflow> = Api::namespaced(c.client.clone(), &ns.name);
    create(
        &wfs,
        workflow("w", "w", json!([{"id": "a", "typeId": "core.identity"}])),
    )
    .await;
    assert_eq!(wait_ready(&wfs, "w").await.0, "True");

    let cut_at = k8s_openapi::jiff::Timestamp::now();
    proxy.cut();
    // A stops (and exits) on its own; B takes the lease once it expired.
    let status = {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = a.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "replica-a did not stop leading and exit within 30s of the cut:\n{}",
                a.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert!(
        !status.success(),
        "exits non-zero so it is restarted: {status}"
    );
    let a_log = a.log_text();
    let stopped = logged_at(&a_log, "stopped leading").unwrap_or_else(|| panic!("{a_log}"));
    assert!(
        a_log.contains("was not renewed for 3s (leaderElection.renewDeadlineSeconds"),
        "{a_log}"
    );
    let taken = wait_for(30, "replica-b to take the lease", || async {
        let spec = holder().await?;
        (spec.holder_identity.as_deref() == Some("replica-b")).then_some(spec)
    })
    .await;
    wait_for(10, "replica-b to start its controllers", || async {
        b.log_text()
            .contains("leading: starting controllers")
            .then_some(())
    })
    .await;
    let b_leads = logged_at(&b.log_text(), "leading: starting controllers").unwrap();
    let acquired = taken.acquire_time.unwrap().0;
    assert!(
        stopped < acquired && stopped < b_leads,
        "old leader stopped at {stopped}, new leader acquired at {acquired} and started at {b_leads}"
    );
    // Within the renew deadline (3 s) of its last renewal, so before the 4 s lease ran out.
    let after_cut = stopped.duration_since(cut_at).as_secs_f64();
    assert!(after_cut < 3.5, "stopped {after_cut:.2}s after the cut");
    eprintln!(
        "fencing: cut at {cut_at}; old leader stopped {after_cut:.2}s later at {stopped}; new leader acquired {:.2}s after the cut",
        acquired.duration_since(cut_at).as_secs_f64()
    );
    // The new leader acts.
    create(
        &wfs,
        workflow("w2", "w2", json!([{"id": "a", "typeId": "core.identity"}])),
    )
    .await;
    assert_eq!(wait_ready(&wfs, "w2").await.0, "True");
    drop(a);
}

// ---------------------------------------------------------------- discovery

#[tokio::test]
async fn discovery_answers_over_http_from_the_operator_process() {
    let Some(c) = cluster("discovery_answers_over_http_from_the_operator_process").await else {
        return;
    };
    ensure_crds(&c.client).await;
    let ns = Namespace::new(&c, "opi-disc").await;
    let op = Operator::start(&c, &ns.name, "op-disc", "");
    let http = reqwest::Client::new();
    wait_for(30, "/readyz to answer 200", || async {
        let r = http.get(op.url("/readyz")).send().await.ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
    let r = http
        .get(op.url("/.well-known/openwop"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(h["cache-control"], "public, max-age=60");
    assert!(
        h["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let etag = h["etag"].to_str().unwrap().to_owned();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    let doc: Value = r.json().await.unwrap();
    assert!(doc.is_object(), "{doc}");
    assert!(
        doc.to_string().contains("clarification.request"),
        "advertises the universal kinds: {doc}"
    );
    let r = http
        .get(op.url("/.well-known/openwop"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    assert_eq!(r.headers()["etag"].to_str().unwrap(), etag);

    let r = http
        .get(op.url("/schemas/envelopes/clarification.request.schema.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/schema+json");
    assert_eq!(r.headers()["cache-control"], "public, max-age=300");
    let schema: Value = r.json().await.unwrap();
    assert!(schema.is_object());

    let r = http
        .get(op.url("/schemas/envelopes/no.such.kind.schema.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let body: Value = r.json().await.unwrap();
    assert!(body.to_string().contains("unknown_envelope_kind"), "{body}");
}

// ---------------------------------------------------------------- live status from NATS

async fn publish(js: &async_nats::jetstream::Context, subject: &str, body: Vec<u8>) {
    js.publish(subject.to_owned(), body.into())
        .await
        .expect("publish")
        .await
        .expect("stored by JetStream");
}

/// JetStream of the mini-cluster with the run-events stream (created as workers would).
async fn events_jetstream(c: &openwop_e2e::Cluster) -> async_nats::jetstream::Context {
    let nats = async_nats::connect(&c.nats_url).await.expect("NATS");
    let js = async_nats::jetstream::new(nats);
    js.get_or_create_stream(async_nats::jetstream::stream::Config {
        name: "OPENWOP_EVENTS".into(),
        subjects: vec!["openwop.events.>".into(), "openwop.reasoning.>".into()],
        duplicate_window: Duration::from_secs(15 * 60),
        ..Default::default()
    })
    .await
    .expect("stream");
    js
}

fn event(run_id: &str, seq: u64, ty: &str, payload: Value) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"eventId": format!("ev-{seq}"), "runId": run_id, "type": ty,
        "sequence": seq, "timestamp": "2026-01-01T00:00:00Z", "payload": payload}),
    )
    .unwrap()
}

#[tokio::test]
async fn run_status_follows_the_event_stream_and_resumes_after_a_restart() {
    let Some(c) = cluster("run_status_follows_the_event_stream_and_resumes_after_a_restart").await
    else {
        return;
    };
    assert!(
        !c.nats_url.is_empty(),
        "the mini-cluster exports no OPENWOP_NATS_URL"
    );
    ensure_crds(&c.client).await;
    let ns = Namespace::new(&c, "opi-nats").await;
    let consumer = format!("test-{}", ns.name);
    let extra = format!(
        "events: {{natsUrl: '{}', consumer: '{consumer}', flushIntervalMs: 100}}\n",
        c.nats_url
    );
    let mut op = Operator::start(&c, &ns.name, "op-nats", &extra);
    let wfs: Api<Workflow> = Api::namespaced(c.client.clone(), &ns.name);
    create(
        &wfs,
        held_workflow("w", "w", json!([{"id": "ask", "typeId": "core.identity"}])),
    )
    .await;
    let runs: Api<Run> = Api::namespaced(c.client.clone(), &ns.name);
    create(
        &runs,
        json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": "live"},
               "spec": {"workflowRef": {"name": "w"}}}),
    )
    .await;
    wait_for(60, "Run live to hold a worker", || async {
        runs.get("live").await.ok()?.status?.worker_pod
    })
    .await;

    let js = events_jetstream(&c).await;
    // Keyed by the runId (the Run's uid), never by the name.
    let uid = runs.get("live").await.unwrap().metadata.uid.unwrap();
    let subject = openwop_protocol::run::subjects::events_subject(&ns.name, &uid);
    let ev = |seq, ty, payload| event(&uid, seq, ty, payload);
    let status = |runs: Api<Run>| async move {
        runs.get("live")
            .await
            .ok()
            .and_then(|r| r.status)
            .unwrap_or_default()
    };

    publish(&js, &subject, ev(0, "run.started", json!({}))).await;
    publish(
        &js,
        &subject,
        ev(1, "node.started", json!({"nodeId": "ask"})),
    )
    .await;
    wait_for(30, "running on node ask at sequence 1", || async {
        let st = status(runs.clone()).await;
        (st.phase == Some(openwop_crds::RunPhase::Running)
            && st.current_node.as_deref() == Some("ask")
            && st.last_sequence == Some(1))
        .then_some(())
    })
    .await;

    // Malformed messages are skipped, never fatal.
    publish(&js, &subject, b"{not json".to_vec()).await;
    publish(&js, &subject, br#"{"type":"node.started"}"#.to_vec()).await;
    // An event speaking for another run is refused, even on this run's subject.
    publish(
        &js,
        &subject,
        event("someone-else", 4, "run.failed", json!({})),
    )
    .await;
    publish(
        &js,
        &format!("openwop.events.{}", ns.name),
        ev(9, "run.failed", json!({})),
    )
    .await;
    publish(
        &js,
        &subject,
        ev(
            2,
            "clarification.requested",
            json!({"nodeId": "ask", "interruptId": "i1",
                   "questions": [{"id": "colour", "question": "Which colour?"}]}),
        ),
    )
    .await;
    publish(
        &js,
        &subject,
        ev(
            3,
            "node.suspended",
            json!({"nodeId": "ask", "interruptId": "i1", "kind": "clarification"}),
        ),
    )
    .await;
    let st = wait_for(30, "waiting-input with the pending question", || async {
        let st = status(runs.clone()).await;
        (st.phase == Some(openwop_crds::RunPhase::WaitingInput) && st.last_sequence == Some(3))
            .then_some(st)
    })
    .await;
    let pi = st
        .pending_interrupts
        .first()
        .cloned()
        .expect("pending interrupt");
    assert_eq!(
        (pi.interrupt_id.as_str(), pi.kind.as_str()),
        ("i1", "clarification")
    );
    assert_eq!(pi.questions.len(), 1);
    assert_eq!(
        (
            pi.questions[0].id.as_str(),
            pi.questions[0].question.as_str()
        ),
        ("colour", "Which colour?")
    );
    assert_eq!((st.events, st.last_sequence), (Some(4), Some(3)));
    assert!(
        op.log_text().contains("skipping a malformed run event"),
        "malformed events are logged"
    );

    // The operator goes away; events keep coming; the restarted operator resumes.
    op.kill();
    publish(
        &js,
        &subject,
        ev(4, "node.resumed", json!({"nodeId": "ask"})),
    )
    .await;
    publish(
        &js,
        &subject,
        ev(5, "node.completed", json!({"nodeId": "ask"})),
    )
    .await;
    publish(&js, &subject, ev(6, "run.completed", json!({}))).await;
    let op2 = Operator::start(&c, &ns.name, "op-nats-2", &extra);
    let st = wait_for(30, "completed at sequence 6", || async {
        let st = status(runs.clone()).await;
        (st.phase == Some(openwop_crds::RunPhase::Completed) && st.last_sequence == Some(6))
            .then_some(st)
    })
    .await;
    assert_eq!((st.events, st.last_sequence), (Some(7), Some(6)));
    assert!(st.pending_interrupts.is_empty());

    // A replayed (older) event never moves the status backwards.
    publish(
        &js,
        &subject,
        ev(2, "node.started", json!({"nodeId": "ask"})),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = status(runs.clone()).await;
    assert_eq!(after.phase, Some(openwop_crds::RunPhase::Completed));
    assert_eq!((after.events, after.last_sequence), (Some(7), Some(6)));
    // The consumer wrote the whole ending with the terminal event.
    assert_eq!(after.terminal_event.as_deref(), Some("ev-6"));
    assert!(after.completion_time.is_some(), "{after:?}");

    // Runs carry no finalizer; a deleted Run's events are purged once it is gone.
    let in_stream = || async {
        let filter = openwop_protocol::run::subjects::events_filter(Some(&ns.name));
        openwop_nats::stream::runs_in_stream(&js, "OPENWOP_EVENTS", &filter)
            .await
            .expect("list the stream's runs")
            .into_iter()
            .map(|s| s.run_id)
            .collect::<Vec<_>>()
    };
    let live = runs.get("live").await.unwrap();
    assert!(live.finalizers().is_empty(), "{:?}", live.finalizers());
    runs.delete("live", &Default::default()).await.unwrap();
    wait_for(30, "the deleted Run's events purged", || async {
        (!in_stream().await.contains(&uid)).then_some(())
    })
    .await;
    drop(op2);

    // While no operator runs: a Run is deleted (its events stay), another one is kept.
    let orphan = format!("orphan-{}", ns.name);
    publish(
        &js,
        &openwop_protocol::run::subjects::events_subject(&ns.name, &orphan),
        event(&orphan, 0, "run.started", json!({})),
    )
    .await;
    let kept = create(
        &runs,
        json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "metadata": {"name": "kept"},
               "spec": {"workflowRef": {"name": "w"}}}),
    )
    .await
    .metadata
    .uid
    .unwrap();
    publish(
        &js,
        &openwop_protocol::run::subjects::events_subject(&ns.name, &kept),
        event(&kept, 0, "run.started", json!({})),
    )
    .await;
    assert!(in_stream().await.contains(&orphan));
    // The next leader purges the runs no Run has, and only those.
    let op3 = Operator::start(&c, &ns.name, "op-nats-3", &extra);
    wait_for(
        30,
        "the events of the Run deleted meanwhile purged",
        || async { (!in_stream().await.contains(&orphan)).then_some(()) },
    )
    .await;
    assert!(
        in_stream().await.contains(&kept),
        "a live Run's events kept"
    );

    // A Run of an earlier release still carries the finalizer: deleting it cleans up and
    // releases it.
    create::<Run>(
        &runs,
        json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
               "metadata": {"name": "legacy", "finalizers": ["openwop.dev/cleanup"]},
               "spec": {"workflowRef": {"name": "w"}}}),
    )
    .await;
    wait_for(30, "Run legacy to hold a worker", || async {
        runs.get("legacy").await.ok()?.status?.worker_pod
    })
    .await;
    let legacy = runs.get("legacy").await.unwrap();
    assert_eq!(legacy.finalizers(), ["openwop.dev/cleanup"]);
    runs.delete("legacy", &Default::default()).await.unwrap();
    wait_for(
        30,
        "Run legacy released by the operator and gone",
        || async {
            runs.get_opt("legacy")
                .await
                .ok()
                .and_then(|r| r.is_none().then_some(()))
        },
    )
    .await;
    drop(op3);

    if let Ok(stream) = js.get_stream("OPENWOP_EVENTS").await {
        let _ = stream.delete_consumer(&consumer).await;
        for id in [&uid, &kept] {
            let subject = openwop_protocol::run::subjects::events_subject(&ns.name, id);
            let _ = stream.purge().filter(&subject).await;
        }
    }
}
