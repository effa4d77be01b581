//! The manifests under examples/ parse as our types; valid ones pass admission rules and the
//! operator's checks, invalid ones fail with the documented message.

use std::collections::BTreeSet;

use kube::core::cel::validate_cel;
use openwop_crds::{Run, Workflow};
use openwop_protocol::workflow_check::{
    CheckOptions, NodeRegistry, ProblemCode, Tier1Posture, check_workflow,
};
use serde::Deserialize;
use serde_json::Value;

fn docs(path: &str) -> Vec<Value> {
    let text =
        std::fs::read_to_string(format!("{}/../examples/{path}", env!("CARGO_MANIFEST_DIR")))
            .unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .collect()
}

fn check(wf: &Workflow) -> openwop_protocol::workflow_check::CheckReport {
    let reg = NodeRegistry::builtin();
    let kinds: BTreeSet<String> = openwop_operator::discovery::advertised_kinds()
        .into_iter()
        .collect();
    check_workflow(
        &wf.spec.definition.filled().to_value(),
        &CheckOptions {
            registry: &reg,
            advertised_kinds: &kinds,
            tier1: Tier1Posture::Warn,
            mock_agent_opt_in: false,
        },
    )
}

fn with_ns<T: for<'de> Deserialize<'de>>(mut v: Value) -> T {
    v["metadata"]["namespace"] = "default".into();
    serde_json::from_value(v).unwrap()
}

#[test]
fn valid_examples_are_accepted() {
    for f in [
        "01-hello-workflow.yaml",
        "02-conformance-mock-agent.yaml",
        "03-run-by-id.yaml",
    ] {
        for d in docs(f) {
            match d["kind"].as_str() {
                Some("Workflow") => {
                    let wf: Workflow = with_ns(d);
                    validate_cel(&wf).unwrap_or_else(|e| panic!("{f}: {e}"));
                    let r = check(&wf);
                    assert!(r.is_valid(), "{f}: {:?}", r.errors);
                }
                Some("Run") => {
                    let run: Run = with_ns(d);
                    validate_cel(&run).unwrap_or_else(|e| panic!("{f}: {e}"));
                }
                other => panic!("{f}: unexpected kind {other:?}"),
            }
        }
    }
}

#[test]
fn invalid_examples_fail_as_documented() {
    let wf: Workflow = with_ns(docs("invalid/mock-agent-not-allowed.yaml").remove(0));
    validate_cel(&wf).expect("admitted by the apiserver");
    let r = check(&wf);
    assert_eq!(r.errors[0].code, ProblemCode::MockAgentNotAllowed);
    assert_eq!(r.errors[0].node_id.as_deref(), Some("agent"));
    let run: Run = with_ns(docs("invalid/run-both-refs.yaml").remove(0));
    let e = validate_cel(&run).unwrap_err().to_string();
    assert!(e.contains("set exactly one of workflowRef.name"), "{e}");
}

/// The chart's conformance fixture workflows (rendered only with conformance.seams.enabled)
/// pass admission and the operator's checks, and their ids are the ones discovery advertises
/// (the `openwop.conformanceFixtures` helper).
#[test]
fn chart_conformance_fixtures_are_valid_and_advertised() {
    let chart = format!("{}/../charts/openwop/templates", env!("CARGO_MANIFEST_DIR"));
    let template = std::fs::read_to_string(format!("{chart}/conformance-fixtures.yaml")).unwrap();
    // Render the template's static body: drop the comment block and directive lines.
    let body = template
        .split_once("*/}}")
        .map_or(template.as_str(), |(_, rest)| rest)
        .lines()
        .filter(|l| !l.trim_start().starts_with("{{"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("{{ .Release.Namespace }}", "default");
    let mut ids = Vec::new();
    for d in serde_yaml::Deserializer::from_str(&body) {
        let v = Value::deserialize(d).unwrap();
        let wf: Workflow = serde_json::from_value(v).unwrap();
        validate_cel(&wf).unwrap_or_else(|e| panic!("{e}"));
        let r = check(&wf);
        assert!(r.is_valid(), "{:?}: {:?}", wf.spec.id, r.errors);
        ids.push(wf.spec.id.clone());
    }
    let helpers = std::fs::read_to_string(format!("{chart}/_helpers.tpl")).unwrap();
    let advertised = helpers
        .split("define \"openwop.conformanceFixtures\"")
        .nth(1)
        .and_then(|s| s.lines().find(|l| l.starts_with("conformance-")))
        .unwrap()
        .trim();
    assert_eq!(advertised, ids.join(","));
    assert_eq!(
        ids,
        [
            "conformance-noop",
            "conformance-idempotent",
            "conformance-multi-node",
            "conformance-agent-reasoning",
            "conformance-agent-low-confidence",
            "conformance-envelope-truncated",
            "conformance-envelope-retry-attempted",
            "conformance-envelope-truncation-cap-exhaustion",
            "conformance-envelope-refusal"
        ]
    );
}
