//! `kubectl-openwop runs / describe / resume` against the local mini-cluster (a real
//! kube-apiserver with the openwop CRDs), in a fresh namespace.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use openwop_crds::{Run, RunSpec, WorkflowRef};
use serde_json::{Value, json};

async fn ensure_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in openwop_crds::crds() {
        let name = crd.name_any();
        if crds.get_opt(&name).await.unwrap().is_none() {
            crds.patch(
                &name,
                &PatchParams::apply("kubectl-openwop-tests"),
                &Patch::Apply(&crd),
            )
            .await
            .unwrap();
        }
    }
    // Established: the Run API answers.
    let deadline = Instant::now() + Duration::from_secs(30);
    let runs: Api<Run> = Api::all(client.clone());
    while runs.list(&Default::default()).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "runs.openwop.dev never became usable"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn make_run(api: &Api<Run>, name: &str, status: serde_json::Value) {
    let mut run = Run::new(
        name,
        RunSpec {
            workflow_ref: WorkflowRef {
                name: Some("wf".into()),
                id: None,
            },
            inputs: None,
            configurable: None,
            timeout_seconds: None,
            answers: vec![],
            cancel: None,
            pause: None,
            provider_mocks: Default::default(),
        },
    );
    // An operator instance id no operator runs with: an operator installed on the shared
    // cluster (e2e journeys) must leave these hand-written statuses alone.
    run.metadata.labels = Some(
        [(
            openwop_crds::names::LABEL_INSTANCE.to_string(),
            "cli-views-test".to_string(),
        )]
        .into(),
    );
    api.create(&PostParams::default(), &run).await.unwrap();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap();
}

fn cli(kubeconfig: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-openwop"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test]
async fn runs_describe_and_resume_on_a_real_apiserver() {
    let c = openwop_e2e::cluster().await.expect("mini-cluster");
    // An installed operator would reconcile the hand-made Runs this test drives.
    if c.skip_unless_local(
        "runs_describe_and_resume_on_a_real_apiserver",
        "an API server without an installed operator",
    ) {
        return;
    }
    ensure_crds(&c.client).await;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let ns = format!("cli-views-{}-{nanos}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(c.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    let api: Api<Run> = Api::namespaced(c.client.clone(), &ns);
    make_run(
        &api,
        "ask",
        json!({"phase": "waiting-input", "workflow": "wf", "currentNode": "ask-node",
        "pendingInterrupts": [{"interruptId": "i1", "nodeId": "ask-node", "kind": "clarification",
            "questions": [{"id": "region", "question": "Which region?"}]}]}),
    )
    .await;
    make_run(
        &api,
        "gate",
        json!({"phase": "waiting-approval", "workflow": "wf", "currentNode": "decide",
        "pendingInterrupts": [{"interruptId": "i7", "nodeId": "decide", "kind": "approval",
            "reason": "low-confidence", "agentId": "agent-1", "threshold": 0.7, "observed": 0.4}]}),
    )
    .await;
    let kc = c.kubeconfig.as_path();

    let o = cli(kc, &["runs", "-n", &ns]);
    assert!(o.status.success(), "{}", err(&o));
    let table = out(&o);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["NAME", "WORKFLOW", "PHASE", "NODE", "AGE"]);
    assert_eq!(&lines[1][..4], ["ask", "wf", "waiting-input", "ask-node"]);
    assert_eq!(&lines[2][..4], ["gate", "wf", "waiting-approval", "decide"]);
    let o = cli(kc, &["runs", "-A"]);
    assert!(
        out(&o)
            .lines()
            .any(|l| l.starts_with(&ns) && l.contains("gate")),
        "{}",
        out(&o)
    );

    let o = cli(kc, &["describe", "gate", "-n", &ns]);
    assert!(o.status.success(), "{}", err(&o));
    let d = out(&o);
    assert!(
        d.contains("Kind:      approval") && d.contains("Confidence: 0.4 (threshold 0.7)"),
        "{d}"
    );
    assert!(d.contains("--action accept"), "{d}");

    // Answer the clarification: spec.answers gets exactly one entry.
    let o = cli(
        kc,
        &["resume", "ask", "-n", &ns, "--answer", "region=eu-west-1"],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).contains("answered by "), "{}", out(&o));
    // Who answered: the kubeconfig user as the API server authenticated it (SelfSubjectReview),
    // and when; the rest of the answer as built.
    let attributed = |run: &Run| -> (Value, String) {
        let mut answers = serde_json::to_value(&run.spec.answers).unwrap();
        let a = answers[0].as_object_mut().unwrap();
        let who = a.remove("answeredBy").unwrap().as_str().unwrap().to_owned();
        assert!(!who.is_empty() && !who.contains("unverified"), "{who}");
        assert!(a.remove("answeredAt").is_some());
        (answers, who)
    };
    let (answers, _) = attributed(&api.get("ask").await.unwrap());
    assert_eq!(
        answers,
        json!([{"interruptId": "i1", "value": {"region": "eu-west-1"}, "nodeId": "ask-node"}])
    );
    let o = cli(kc, &["resume", "ask", "-n", &ns, "--answer", "region=us"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("already answered"), "{}", err(&o));

    // Reject the approval with a reason.
    let o = cli(
        kc,
        &[
            "resume",
            "gate",
            "-n",
            &ns,
            "--reject",
            "--reason",
            "needs a human",
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    let (answers, who) = attributed(&api.get("gate").await.unwrap());
    assert_eq!(
        answers,
        json!([{"interruptId": "i7", "approved": false, "action": "reject", "comment": "needs a human", "nodeId": "decide"}])
    );
    let o = cli(kc, &["describe", "gate", "-n", &ns]);
    assert!(
        out(&o).contains(&format!("i7 at decide: rejected by {}", who))
            && out(&o).contains("(needs a human) [not yet consumed]"),
        "{}",
        out(&o)
    );

    let o = cli(kc, &["describe", "missing", "-n", &ns]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains("Run \"missing\" not found in namespace"),
        "{}",
        err(&o)
    );

    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}
