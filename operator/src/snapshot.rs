//! The run snapshot: the resolved workflow frozen for one run, in a ConfigMap owned by the Run
//! (`<run>-snapshot`, key `snapshot.json`). Later edits to the Workflow never reach a running
//! run; only `answers` are refreshed when the run resumes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use openwop_crds::{CredentialMount, Run, Workflow};
use serde_json::{Value, json};

use crate::pod::{PROVIDERS_DIR, owner_ref, run_labels, snapshot_name};

/// Key of the snapshot document in the ConfigMap.
pub const SNAPSHOT_KEY: &str = "snapshot.json";

/// Why a stored snapshot could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot ConfigMap has no {SNAPSHOT_KEY} key")]
    Missing,
    #[error("snapshot.json is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// The snapshot document for `run` executing `workflow`.
pub fn snapshot_document(run: &Run, workflow: &Workflow) -> Value {
    let providers: Vec<Value> = workflow
        .spec
        .providers
        .iter()
        .map(|p| match p.mount_as {
            CredentialMount::File => json!({
                "provider": p.provider, "mountAs": "file",
                "path": format!("{PROVIDERS_DIR}/{}/{}", p.provider, p.secret_ref.key)
            }),
            CredentialMount::Env => json!({
                "provider": p.provider, "mountAs": "env", "envName": p.env_name
            }),
        })
        .collect();
    json!({
        "run": {
            "namespace": run.namespace(),
            "name": run.name_any(),
            "uid": run.uid(),
            "runId": run.uid(),
        },
        "workflowRef": {
            "name": workflow.name_any(),
            "uid": workflow.uid(),
            "generation": workflow.metadata.generation,
        },
        "workflow": workflow.spec.definition(),
        "providers": providers,
        "inputs": run.spec.inputs.clone().unwrap_or_else(|| json!({})),
        "configurable": run.spec.configurable.clone().map(|c| serde_json::to_value(c).unwrap_or(Value::Null)).unwrap_or_else(|| json!({})),
        "answers": answers(run),
    })
}

/// The run's answers, as written in the snapshot.
pub fn answers(run: &Run) -> Value {
    serde_json::to_value(&run.spec.answers).unwrap_or_else(|_| json!([]))
}

/// The ConfigMap holding `doc` for `run`.
pub fn snapshot_configmap(run: &Run, doc: &Value) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(snapshot_name(&run.name_any())),
            namespace: run.namespace(),
            labels: Some(run_labels(run)),
            owner_references: Some(vec![owner_ref(run)]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            SNAPSHOT_KEY.to_string(),
            doc.to_string(),
        )])),
        ..Default::default()
    }
}

/// Reads the snapshot document of a ConfigMap.
pub fn read_snapshot(cm: &ConfigMap) -> Result<Value, SnapshotError> {
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(SNAPSHOT_KEY))
        .ok_or(SnapshotError::Missing)?;
    Ok(serde_json::from_str(text)?)
}

/// The stored snapshot with its `answers` replaced by the run's current answers; the frozen
/// workflow is kept as it was.
pub fn with_current_answers(stored: &Value, run: &Run) -> Value {
    let mut doc = stored.clone();
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("answers".into(), answers(run));
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use openwop_crds::{InterruptAnswer, RunSpec, WorkflowRef};

    fn workflow(version: &str) -> Workflow {
        let mut w: Workflow = serde_json::from_value(json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "triage", "namespace": "ns", "uid": "wuid", "generation": 3},
            "spec": {"id": "triage_v2", "name": "Triage", "version": version,
                     "nodes": [{"id": "a", "typeId": "core.identity"}],
                     "providers": [{"provider": "openai", "secretRef": {"name": "llm", "key": "openai"}}]}
        }))
        .unwrap();
        w.metadata.namespace = Some("ns".into());
        w
    }

    fn run() -> Run {
        let mut r = Run::new(
            "r1",
            RunSpec {
                workflow_ref: WorkflowRef {
                    name: Some("triage".into()),
                    id: None,
                },
                inputs: Some(json!({"ticket": 42})),
                configurable: None,
                timeout_seconds: None,
                answers: vec![],
                cancel: None,
            },
        );
        r.metadata.namespace = Some("ns".into());
        r.metadata.uid = Some("ruid".into());
        r
    }

    #[test]
    fn snapshot_has_the_documented_shape() {
        let doc = snapshot_document(&run(), &workflow("1"));
        assert_eq!(
            doc["run"],
            json!({"namespace": "ns", "name": "r1", "uid": "ruid", "runId": "ruid"})
        );
        assert_eq!(doc["workflow"]["id"], "triage_v2");
        assert_eq!(doc["workflowRef"]["generation"], 3);
        assert_eq!(doc["inputs"], json!({"ticket": 42}));
        assert_eq!(doc["configurable"], json!({}));
        assert_eq!(doc["answers"], json!([]));
        assert_eq!(
            doc["providers"][0]["path"],
            "/var/run/openwop/providers/openai/openai"
        );
        let cm = snapshot_configmap(&run(), &doc);
        assert_eq!(cm.metadata.name.as_deref(), Some("r1-snapshot"));
        assert_eq!(read_snapshot(&cm).unwrap(), doc);
    }

    #[test]
    fn the_project_schema_accepts_the_frozen_definition() {
        let doc = snapshot_document(&run(), &workflow("1"));
        openwop_protocol::schema::validate(
            openwop_protocol::schema::Document::WorkflowDefinition,
            &doc["workflow"],
        )
        .expect("definition() output is a valid workflow definition");
    }

    #[test]
    fn resume_refreshes_answers_but_keeps_the_frozen_workflow() {
        let stored = snapshot_document(&run(), &workflow("1"));
        let mut later = run();
        later.spec.answers.push(InterruptAnswer {
            interrupt_id: "i1".into(),
            value: None,
            approved: Some(true),
            comment: None,
        });
        // The workflow was edited meanwhile; the snapshot must not follow.
        let doc = with_current_answers(&stored, &later);
        assert_eq!(doc["workflow"]["version"], "1");
        assert_eq!(
            doc["answers"],
            json!([{"interruptId": "i1", "approved": true}])
        );
    }

    #[test]
    fn unreadable_snapshot_is_a_clear_error() {
        let cm = ConfigMap::default();
        assert_eq!(
            read_snapshot(&cm).unwrap_err().to_string(),
            "snapshot ConfigMap has no snapshot.json key"
        );
    }
}
