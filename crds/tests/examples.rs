//! Every Workflow under examples/ read as the CRD type gives, through protocol's definition
//! with its defaults filled, exactly the document the v1alpha1 hand-written converter gave
//! (`WorkflowSpec::definition()`, recorded in `example_definitions.json` before it was
//! removed), and that document reads back with `WorkflowDefinition::from_value` to the same
//! definition.

use openwop_crds::Workflow;
use openwop_crds::workflow::WorkflowDefinition;
use serde::Deserialize;
use serde_json::{Map, Value};

/// `file#document index` → the Workflow of that document.
fn example_workflows() -> Vec<(String, Workflow)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .chain(std::fs::read_dir(format!("{dir}/invalid")).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(&p).unwrap();
        for (i, d) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let v = Value::deserialize(d).unwrap();
            if v["kind"] == "Workflow" {
                let name = format!("{}#{i}", p.file_name().unwrap().to_str().unwrap());
                let wf = serde_json::from_value(v).unwrap_or_else(|e| panic!("{name}: {e}"));
                out.push((name, wf));
            }
        }
    }
    out
}

#[test]
fn every_example_gives_the_document_the_converter_gave() {
    let recorded: Map<String, Value> =
        serde_json::from_str(include_str!("example_definitions.json")).unwrap();
    let workflows = example_workflows();
    let mut names: Vec<&str> = workflows.iter().map(|(n, _)| n.as_str()).collect();
    let mut known: Vec<&str> = recorded.keys().map(String::as_str).collect();
    names.sort();
    known.sort();
    assert_eq!(names, known, "every example Workflow is recorded");
    for (name, wf) in &workflows {
        let filled = wf.spec.definition.filled();
        assert_eq!(&filled.to_value(), &recorded[name], "{name}");
        let read = WorkflowDefinition::from_value(filled.to_value())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(read, filled, "{name}");
        // The spec round-trips through the CRD type as written.
        let back: Workflow = serde_json::from_value(serde_json::to_value(wf).unwrap()).unwrap();
        assert_eq!(&back, wf, "{name}");
    }
}
