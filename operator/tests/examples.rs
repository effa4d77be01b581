//! The manifests under examples/ parse as our types; valid ones pass admission rules and the
//! operator's checks, invalid ones fail with the documented message.

use std::collections::BTreeSet;

use kube::core::cel::validate_cel;
use openwop_crds::{Run, Workflow};
use openwop_protocol::tier1::Tier1Posture;
use openwop_protocol::workflow_check::{CheckOptions, NodeRegistry, ProblemCode, check_workflow};
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
        "07-ticket-escalation.yaml",
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
                // The example's own Secret (the ticketing token): nothing of ours to check.
                Some("Secret") => {}
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
/// pass admission and the operator's checks, the official ones are the spec's JSON unchanged
/// (`fixtures/*.json`, the Workflow's spec verbatim), and their ids are the ones the
/// `openwop.conformanceFixtures` helper lists for discovery.
#[test]
fn chart_conformance_fixtures_are_valid_and_advertised() {
    let chart = format!("{}/../charts/openwop", env!("CARGO_MANIFEST_DIR"));
    let template =
        std::fs::read_to_string(format!("{chart}/templates/conformance-fixtures.yaml")).unwrap();
    // The official fixtures: one Workflow per JSON file, its spec the file.
    let mut official: Vec<String> = std::fs::read_dir(format!("{chart}/fixtures"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| f.strip_suffix(".json").map(str::to_owned))
        .collect();
    official.sort();
    let mut ids = Vec::new();
    for id in &official {
        let text = std::fs::read_to_string(format!("{chart}/fixtures/{id}.json")).unwrap();
        let spec: Value = serde_json::from_str(&text).unwrap();
        let v = serde_json::json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": id, "namespace": "default"}, "spec": spec});
        let wf: Workflow = serde_json::from_value(v).unwrap();
        assert_eq!(
            serde_json::to_value(&wf.spec).unwrap(),
            spec,
            "{id}: the Workflow keeps the fixture verbatim"
        );
        validate_cel(&wf).unwrap_or_else(|e| panic!("{id}: {e}"));
        // Node types another part of the host has not registered yet (core.delay) are the
        // only problems allowed; discovery leaves those fixtures out.
        let r = check(&wf);
        assert!(
            r.errors
                .iter()
                .all(|p| p.code == ProblemCode::UnknownTypeId),
            "{id}: {:?}",
            r.errors
        );
        ids.push(wf.spec.id.clone());
    }
    // The host's own fixtures: the static YAML documents after the official ones' loop.
    let body = template
        .split_once("| nindent 2 }}")
        .map(|(_, rest)| rest)
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with("{{"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("{{ .Release.Namespace }}", "default");
    for d in serde_yaml::Deserializer::from_str(&body) {
        let v = Value::deserialize(d).unwrap();
        let wf: Workflow = serde_json::from_value(v).unwrap();
        validate_cel(&wf).unwrap_or_else(|e| panic!("{e}"));
        let r = check(&wf);
        assert!(r.is_valid(), "{:?}: {:?}", wf.spec.id, r.errors);
        ids.push(wf.spec.id.clone());
    }
    let helpers = std::fs::read_to_string(format!("{chart}/templates/_helpers.tpl")).unwrap();
    // The host's own ids: a plain list line, and lines that each append a list as a quoted
    // string (`{{- ",id,..." }}`, so additions stay on their own lines).
    let block = helpers
        .split("define \"openwop.conformanceFixtures\"")
        .nth(1)
        .and_then(|s| s.split("{{- end -}}").next())
        .unwrap();
    let own: Vec<String> = block
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            if l.starts_with("conformance-") {
                Some(l)
            } else {
                l.strip_prefix("{{- \",")?.strip_suffix("\" }}")
            }
        })
        .flat_map(|l| l.split(','))
        .map(str::to_owned)
        .collect();
    let advertised: Vec<String> = official.iter().cloned().chain(own.clone()).collect();
    assert_eq!(advertised, ids);
    // The operator embeds exactly the chart's files (discovery reads its copy).
    let embedded: Vec<&str> = openwop_protocol::seams::fixtures::OFFICIAL
        .iter()
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(official, embedded);
    assert_eq!(
        own.join(","),
        "conformance-agent-reasoning,conformance-agent-low-confidence,conformance-envelope-truncated,conformance-envelope-retry-attempted,conformance-envelope-truncation-cap-exhaustion,conformance-envelope-refusal,conformance-interrupt-external-event,conformance-interrupt-auth-required,conformance-interrupt-quorum,conformance-interrupt-parent-child-cancel,conformance-interrupt-parent-child-cancel-child,conformance-approval-refine,conformance-approval-edit-accept"
    );
}
