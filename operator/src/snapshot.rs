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

/// Why a Run cannot be snapshotted: the Run fails with [`Refused::reason`] and the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "spec.providerMocks is not allowed in namespace {namespace}: the operator's conformance.providerMockNamespaces (chart value conformance.providerMockNamespaces) does not list it; remove spec.providerMocks, or allow the namespace for testing"
    )]
    MocksNotAllowed { namespace: String },
    #[error(
        "spec.providerMocks.{node}: workflow {workflow} has no node `{node}` (its nodes: {known}); mock only nodes of the workflow"
    )]
    UnknownNode {
        node: String,
        workflow: String,
        known: String,
    },
}

impl Refused {
    /// Condition reason and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::MocksNotAllowed { .. } => "ProviderMocksNotAllowed",
            Refused::UnknownNode { .. } => "ProviderMocksInvalid",
        }
    }

    /// `status.error.code`.
    pub fn code(&self) -> &'static str {
        match self {
            Refused::MocksNotAllowed { .. } => "provider_mocks_not_allowed",
            Refused::UnknownNode { .. } => "provider_mocks_invalid",
        }
    }
}

/// Checks `spec.providerMocks` against the namespace gate and the workflow's nodes.
fn check_provider_mocks(run: &Run, workflow: &Workflow, allowed: bool) -> Result<(), Refused> {
    let mocks = &run.spec.provider_mocks;
    if mocks.is_empty() {
        return Ok(());
    }
    if !allowed {
        return Err(Refused::MocksNotAllowed {
            namespace: run.namespace().unwrap_or_default(),
        });
    }
    let ids: Vec<&str> = workflow.spec.nodes.iter().map(|n| n.id.as_str()).collect();
    if let Some(node) = mocks.keys().find(|k| !ids.contains(&k.as_str())) {
        let mut known: Vec<&str> = ids.iter().copied().take(10).collect();
        if ids.len() > 10 {
            known.push("…");
        }
        return Err(Refused::UnknownNode {
            node: node.clone(),
            workflow: workflow.name_any(),
            known: known.join(", "),
        });
    }
    Ok(())
}

/// The snapshot document for `run` executing `workflow`. `mocks_allowed`: whether the
/// operator allows `spec.providerMocks` in the run's namespace.
pub fn snapshot_document(
    run: &Run,
    workflow: &Workflow,
    mocks_allowed: bool,
) -> Result<Value, Refused> {
    check_provider_mocks(run, workflow, mocks_allowed)?;
    // Only the credentials the worker pod mounts (none for providers only mocked nodes use).
    let providers: Vec<Value> = crate::pod::needed_credentials(run, &workflow.spec)
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
    let mut doc = json!({
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
    });
    if !run.spec.provider_mocks.is_empty()
        && let Some(obj) = doc.as_object_mut()
    {
        obj.insert(
            "providerMocks".into(),
            serde_json::to_value(&run.spec.provider_mocks).unwrap_or(Value::Null),
        );
    }
    Ok(doc)
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
                provider_mocks: Default::default(),
            },
        );
        r.metadata.namespace = Some("ns".into());
        r.metadata.uid = Some("ruid".into());
        r
    }

    #[test]
    fn snapshot_has_the_documented_shape() {
        let doc = snapshot_document(&run(), &workflow("1"), false).unwrap();
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
        let doc = snapshot_document(&run(), &workflow("1"), false).unwrap();
        openwop_protocol::schema::validate(
            openwop_protocol::schema::Document::WorkflowDefinition,
            &doc["workflow"],
        )
        .expect("definition() output is a valid workflow definition");
    }

    #[test]
    fn resume_refreshes_answers_but_keeps_the_frozen_workflow() {
        let stored = snapshot_document(&run(), &workflow("1"), false).unwrap();
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

    #[test]
    fn provider_mocks_are_copied_only_where_allowed() {
        let mut r = run();
        r.spec.provider_mocks = serde_json::from_value(json!({
            "a": {"turns": [{"responses": [{"stopReason": "stop", "content": {"k": 1}, "delayMs": 100}]}]}
        }))
        .unwrap();
        let doc = snapshot_document(&r, &workflow("1"), true).unwrap();
        assert_eq!(
            doc["providerMocks"],
            json!({"a": {"turns": [{"responses": [{"stopReason": "stop", "content": {"k": 1}, "delayMs": 100}]}]}})
        );
        // Without mocks the key is absent.
        let plain = snapshot_document(&run(), &workflow("1"), true).unwrap();
        assert!(plain.get("providerMocks").is_none());

        let e = snapshot_document(&r, &workflow("1"), false).unwrap_err();
        assert_eq!(e.reason(), "ProviderMocksNotAllowed");
        assert_eq!(e.code(), "provider_mocks_not_allowed");
        assert!(
            e.to_string().starts_with(
                "spec.providerMocks is not allowed in namespace ns: the operator's conformance.providerMockNamespaces"
            ),
            "{e}"
        );
        // A run without mocks is never refused by the gate.
        assert!(snapshot_document(&run(), &workflow("1"), false).is_ok());
    }

    #[test]
    fn provider_mocks_for_an_unknown_node_are_refused_with_the_known_ones() {
        let mut r = run();
        r.spec.provider_mocks = serde_json::from_value(json!({
            "b": {"responses": [{"stopReason": "stop"}]}
        }))
        .unwrap();
        let e = snapshot_document(&r, &workflow("1"), true).unwrap_err();
        assert_eq!(e.reason(), "ProviderMocksInvalid");
        assert_eq!(
            e.to_string(),
            "spec.providerMocks.b: workflow triage has no node `b` (its nodes: a); mock only nodes of the workflow"
        );
    }
}
