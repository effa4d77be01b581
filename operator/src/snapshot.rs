//! The run snapshot: the resolved workflow frozen for one run
//! ([`openwop_protocol::run::snapshot::RunSnapshot`]), in a ConfigMap owned by the Run
//! (`<run>-snapshot`, key `snapshot.json`). Later edits to the Workflow or to the operator's
//! configuration never reach a started run; only `answers` (on resume) and `cancel` are
//! refreshed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use openwop_crds::names::ANNOTATION_SNAPSHOT_WORKFLOW;
use openwop_crds::{CredentialMount, PauseRequest, Run, Workflow};
use openwop_protocol::retry::mock::ProviderMock;
use openwop_protocol::run::host::HostProfile;
use openwop_protocol::run::snapshot::{
    Answer, KeyMount, ProviderMount, RunRef, RunSnapshot, SecretMount, WorkflowOrigin,
};
use openwop_protocol::run::waits::ParentRef;
use serde_json::json;

use crate::definitions::StoredDefinition;
use crate::names::{owner_ref, run_labels, snapshot_name};
use crate::pod::{PROVIDERS_DIR, WORKFLOW_SECRETS_DIR};

/// Key of the snapshot document in the ConfigMap.
pub const SNAPSHOT_KEY: &str = openwop_protocol::run::env::SNAPSHOT_FILE;

/// Why a stored snapshot could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot ConfigMap has no {SNAPSHOT_KEY} key")]
    Missing,
    #[error("{0}")]
    Invalid(#[from] openwop_protocol::run::snapshot::SnapshotError),
}

/// Kubernetes' limit on the data of one ConfigMap (bytes): the whole snapshot must fit.
pub const CONFIGMAP_DATA_LIMIT: usize = 1024 * 1024;

/// Why a Run cannot be snapshotted: the Run fails with [`Refused::reason`] and the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "the run snapshot is {bytes} bytes (spec.inputs {inputs} bytes, answers {answers} bytes, the workflow and the rest {rest} bytes), more than the {CONFIGMAP_DATA_LIMIT}-byte (1 MiB) limit of the ConfigMap that holds it; pass large data by reference (e.g. a URL or object-store key the workflow reads) and keep spec.inputs and answers small, then create a new Run"
    )]
    TooLarge {
        bytes: usize,
        inputs: usize,
        answers: usize,
        rest: usize,
    },
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
    #[error("{field} cannot be decoded: {why}; then create a new Run")]
    RunUndecodable { field: String, why: String },
    #[error(
        "Workflow {workflow}: {field} cannot be decoded: {why}; fix the Workflow, then create a new Run"
    )]
    WorkflowUndecodable {
        workflow: String,
        field: String,
        why: String,
    },
    #[error("spec.providerMocks.{node}{pointer}: {reason}")]
    InvalidMock {
        node: String,
        pointer: String,
        reason: String,
    },
}

impl Refused {
    /// A Run holding a value too deep to decode (`openwop_protocol::lenient`): it is failed
    /// before anything is built from it.
    pub fn undecodable_run(run: &Run) -> Option<Refused> {
        let (field, why) = run.spec.undecodable()?;
        Some(Refused::RunUndecodable {
            field,
            why: why.to_owned(),
        })
    }

    /// The same for the Workflow a run would be snapshotted from.
    pub fn undecodable_workflow(wf: &Workflow) -> Option<Refused> {
        let (field, why) = wf.spec.undecodable()?;
        Some(Refused::WorkflowUndecodable {
            workflow: wf.name_any(),
            field,
            why: why.to_owned(),
        })
    }

    /// Condition reason and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::TooLarge { .. } => "SnapshotTooLarge",
            Refused::MocksNotAllowed { .. } => "ProviderMocksNotAllowed",
            Refused::UnknownNode { .. } | Refused::InvalidMock { .. } => "ProviderMocksInvalid",
            Refused::RunUndecodable { .. } => "InputTooDeep",
            Refused::WorkflowUndecodable { .. } => "WorkflowTooDeep",
        }
    }

    /// `status.error.code`.
    pub fn code(&self) -> &'static str {
        match self {
            Refused::TooLarge { .. } => "snapshot_too_large",
            Refused::MocksNotAllowed { .. } => "provider_mocks_not_allowed",
            Refused::UnknownNode { .. } | Refused::InvalidMock { .. } => "provider_mocks_invalid",
            Refused::RunUndecodable { .. } => "input_too_deep",
            Refused::WorkflowUndecodable { .. } => "workflow_too_deep",
        }
    }
}

/// `spec.providerMocks` (protocol's mock types) for the snapshot, checked against the
/// namespace gate and the workflow's nodes, each playable (exactly one of
/// `responses`/`turns`, bounded delays).
pub fn provider_mocks(
    run: &Run,
    workflow: &Workflow,
    allowed: bool,
) -> Result<BTreeMap<String, ProviderMock>, Refused> {
    let mocks = &run.spec.provider_mocks;
    if mocks.is_empty() {
        return Ok(BTreeMap::new());
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
    mocks
        .iter()
        .map(|(node, m)| {
            let invalid = |pointer: String, reason: String| Refused::InvalidMock {
                node: node.clone(),
                pointer,
                reason,
            };
            // The CRD's mock type is protocol's: only the playability check remains.
            m.programs()
                .map_err(|e| invalid(e.pointer.replace('/', "."), e.reason))?;
            Ok((node.clone(), m.clone()))
        })
        .collect()
}

/// The snapshot of `run` executing `workflow` (whose definition was read as `definition`)
/// under `host`. `mocks_allowed`: whether the operator allows `spec.providerMocks` in the
/// run's namespace.
pub fn build_snapshot(
    run: &Run,
    workflow: &Workflow,
    definition: &StoredDefinition,
    host: &HostProfile,
    mocks_allowed: bool,
) -> Result<RunSnapshot, Refused> {
    if let Some(refused) =
        Refused::undecodable_run(run).or_else(|| Refused::undecodable_workflow(workflow))
    {
        return Err(refused);
    }
    let provider_mocks = provider_mocks(run, workflow, mocks_allowed)?;
    let mut doc = snapshot_of(run, workflow, definition, host, provider_mocks);
    // Checked here (once per Workflow generation, with the validator this process compiled
    // once) rather than compiled again by every worker (each is a new process). A document
    // that did not read is left unmarked: the worker reads it and fails the run with why.
    if definition.read.is_ok() {
        doc.record_workflow_checked();
    }
    fits(&doc)?;
    Ok(doc)
}

/// `Err(TooLarge)` when `doc` cannot be stored in one ConfigMap (the apiserver would refuse
/// it, and every retry alike): checked before each write of the snapshot.
pub fn fits(doc: &RunSnapshot) -> Result<(), Refused> {
    let bytes = doc.to_json().len();
    if bytes + SNAPSHOT_KEY.len() <= CONFIGMAP_DATA_LIMIT {
        return Ok(());
    }
    let size = |v: &serde_json::Value| serde_json::to_vec(v).map_or(0, |b| b.len());
    let inputs = size(&doc.inputs);
    let answers = serde_json::to_vec(&doc.answers).map_or(0, |b| b.len());
    Err(Refused::TooLarge {
        bytes,
        inputs,
        answers,
        rest: bytes.saturating_sub(inputs + answers),
    })
}

fn snapshot_of(
    run: &Run,
    workflow: &Workflow,
    definition: &StoredDefinition,
    host: &HostProfile,
    provider_mocks: BTreeMap<String, ProviderMock>,
) -> RunSnapshot {
    // Only the credentials the worker pod mounts (none for providers only mocked nodes use).
    let providers = crate::pod::needed_credentials(run, &workflow.spec)
        .into_iter()
        .map(|p| ProviderMount {
            key: match p.mount_as {
                CredentialMount::File => KeyMount::File {
                    path: format!("{PROVIDERS_DIR}/{}/{}", p.provider, p.secret_ref.key),
                },
                CredentialMount::Env => KeyMount::Env {
                    env_name: p.env_name.unwrap_or_default(),
                },
            },
            provider: p.provider,
        })
        .collect();
    RunSnapshot {
        run: RunRef {
            namespace: run.namespace().unwrap_or_default(),
            name: run.name_any(),
            run_id: run.uid().unwrap_or_default(),
        },
        workflow_ref: WorkflowOrigin {
            name: workflow.name_any(),
            uid: workflow.uid(),
            generation: workflow.metadata.generation,
        },
        workflow: definition.document.clone(),
        providers,
        secrets: workflow
            .spec
            .secrets
            .iter()
            .map(|s| SecretMount {
                name: s.name.clone(),
                path: format!("{WORKFLOW_SECRETS_DIR}/{}/{}", s.name, s.secret_ref.key),
            })
            .collect(),
        // Resolved against the API by the run controller (`controller::tools`).
        tool_servers: vec![],
        inputs: run.spec.inputs.clone().unwrap_or_else(|| json!({})),
        configurable: run
            .spec
            .configurable
            .as_ref()
            .and_then(|c| serde_json::to_value(c).ok())
            .unwrap_or_else(|| json!({})),
        answers: answers(run),
        cancel: false,
        pause: None,
        provider_mocks,
        host: host.clone(),
        parent: parent_of(run),
        children: Vec::new(),
        cancel_reason: None,
        workflow_checked: None,
    }
}

/// Where a child Run comes from (`core.subWorkflow`): its owner Run, the parent-run label,
/// the parent-node and depth annotations the operator wrote when it created the child.
pub fn parent_of(run: &Run) -> Option<ParentRef> {
    use openwop_crds::names::{
        ANNOTATION_PARENT_NODE, ANNOTATION_SUB_WORKFLOW_DEPTH, LABEL_PARENT_RUN,
    };
    let run_id = run.labels().get(LABEL_PARENT_RUN)?.clone();
    let owner = run
        .owner_references()
        .iter()
        .find(|o| o.kind == "Run" && o.uid == run_id)?;
    let ann = run.annotations();
    Some(ParentRef {
        run_id,
        run_name: owner.name.clone(),
        node_id: ann.get(ANNOTATION_PARENT_NODE)?.clone(),
        depth: ann
            .get(ANNOTATION_SUB_WORKFLOW_DEPTH)
            .and_then(|d| d.parse().ok())
            .unwrap_or(1),
    })
}

/// The run's answers, as written in the snapshot (the CRD's answer type is protocol's).
pub fn answers(run: &Run) -> Vec<Answer> {
    run.spec.answers.clone()
}

/// The ConfigMap holding `snapshot` for `run`.
pub fn snapshot_configmap(run: &Run, snapshot: &RunSnapshot) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(snapshot_name(&run.name_any())),
            namespace: run.namespace(),
            labels: Some(run_labels(run)),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_SNAPSHOT_WORKFLOW.to_string(),
                snapshot.workflow_ref.name.clone(),
            )])),
            owner_references: Some(vec![owner_ref(run)]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            SNAPSHOT_KEY.to_string(),
            snapshot.to_json(),
        )])),
        ..Default::default()
    }
}

/// Reads the snapshot of a ConfigMap.
pub fn read_snapshot(cm: &ConfigMap) -> Result<RunSnapshot, SnapshotError> {
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(SNAPSHOT_KEY))
        .ok_or(SnapshotError::Missing)?;
    Ok(RunSnapshot::from_json(text, SNAPSHOT_KEY)?)
}

/// The stored snapshot with its `answers` replaced by the run's current answers; the frozen
/// workflow (and host profile) is kept as it was.
pub fn with_current_answers(stored: &RunSnapshot, run: &Run) -> RunSnapshot {
    RunSnapshot {
        answers: answers(run),
        ..stored.clone()
    }
}

/// The stored snapshot with `pause` set to `pause` (the Run's `spec.pause` for a worker that
/// only records the pause; `None` for the worker that resumes the run).
pub fn with_pause(stored: &RunSnapshot, pause: Option<PauseRequest>) -> RunSnapshot {
    RunSnapshot {
        pause,
        ..stored.clone()
    }
}

/// The stored snapshot with `cancel` set.
pub fn with_cancel(stored: &RunSnapshot) -> RunSnapshot {
    RunSnapshot {
        cancel: true,
        ..stored.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openwop_crds::{InterruptAnswer, RunSpec, WorkflowRef};
    use serde_json::Value;

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
                pause: None,
                provider_mocks: Default::default(),
            },
        );
        r.metadata.namespace = Some("ns".into());
        r.metadata.uid = Some("ruid".into());
        r
    }

    fn snapshot(r: &Run, mocks_allowed: bool) -> Result<RunSnapshot, Refused> {
        {
            let w = workflow("1");
            build_snapshot(
                r,
                &w,
                &StoredDefinition::read(&w),
                &HostProfile::default(),
                mocks_allowed,
            )
        }
    }

    fn doc(s: &RunSnapshot) -> Value {
        serde_json::to_value(s).unwrap()
    }

    #[test]
    fn snapshot_has_the_documented_shape() {
        let s = snapshot(&run(), false).unwrap();
        let d = doc(&s);
        assert_eq!(
            d["run"],
            json!({"namespace": "ns", "name": "r1", "runId": "ruid"})
        );
        assert_eq!(d["workflow"]["id"], "triage_v2");
        assert_eq!(d["workflowRef"]["generation"], 3);
        assert_eq!(d["inputs"], json!({"ticket": 42}));
        assert_eq!(d["configurable"], json!({}));
        assert_eq!(d["answers"], json!([]));
        assert_eq!(
            d["providers"][0],
            json!({"provider": "openai", "mountAs": "file", "path": "/var/run/openwop/providers/openai/openai"})
        );
        assert_eq!(d["host"]["limits"]["clarificationRounds"], 3);
        assert!(d.get("cancel").is_none() && d.get("providerMocks").is_none());
        let cm = snapshot_configmap(&run(), &s);
        assert_eq!(cm.metadata.name.as_deref(), Some("r1-snapshot"));
        assert_eq!(read_snapshot(&cm).unwrap(), s);
        // The operator's snapshot cache holds metadata only: the frozen Workflow is named there.
        assert_eq!(
            cm.metadata.annotations.unwrap()[ANNOTATION_SNAPSHOT_WORKFLOW],
            s.workflow_ref.name
        );
        assert!(!s.workflow_ref.name.is_empty());
    }

    #[test]
    fn the_snapshot_carries_the_configured_host_profile() {
        let cfg = crate::config::OperatorConfig::from_yaml("limits:\n  clarificationRounds: 1\n")
            .unwrap();
        let w1 = workflow("1");
        let s = build_snapshot(
            &run(),
            &w1,
            &StoredDefinition::read(&w1),
            &cfg.host_profile(),
            false,
        )
        .unwrap();
        assert_eq!(s.host.limits.clarification_rounds, 1);
        assert_eq!(doc(&s)["host"]["limits"]["clarificationRounds"], 1);
    }

    #[test]
    fn workflow_secrets_reach_the_snapshot_as_mounted_paths() {
        let mut w = workflow("1");
        assert!(
            doc(&snapshot(&run(), false).unwrap())
                .get("secrets")
                .is_none()
        );
        w.spec.secrets = serde_json::from_value(
            json!([{"name": "ticketing-token", "secretRef": {"name": "ticketing", "key": "token"}}]),
        )
        .unwrap();
        let s = build_snapshot(
            &run(),
            &w,
            &StoredDefinition::read(&w),
            &HostProfile::default(),
            false,
        )
        .unwrap();
        assert_eq!(
            doc(&s)["secrets"],
            json!([{"name": "ticketing-token", "path": "/var/run/openwop/workflow-secrets/ticketing-token/token"}])
        );
    }

    #[test]
    fn the_project_schema_accepts_the_frozen_definition() {
        let s = snapshot(&run(), false).unwrap();
        openwop_protocol::schema::validate(
            openwop_protocol::schema::Document::WorkflowDefinition,
            &s.workflow,
        )
        .expect("the filled definition is a valid workflow definition");
        // Recorded as checked, so the worker reads it without compiling the schema again.
        assert!(s.workflow_checked.is_some());
        let read = RunSnapshot::from_json(&s.to_json(), SNAPSHOT_KEY).unwrap();
        assert_eq!(read.workflow_checked, s.workflow_checked);
        read.workflow_definition()
            .expect("the worker reads the definition");
    }

    #[test]
    fn resume_refreshes_answers_and_cancel_keeps_the_frozen_workflow() {
        let stored = snapshot(&run(), false).unwrap();
        let mut later = run();
        later.spec.answers.push(InterruptAnswer {
            interrupt_id: "i1".into(),
            value: None,
            approved: Some(true),
            ..Default::default()
        });
        // The workflow was edited meanwhile; the snapshot must not follow.
        let s = with_current_answers(&stored, &later);
        assert_eq!(s.workflow["version"], "1");
        assert_eq!(
            doc(&s)["answers"],
            json!([{"interruptId": "i1", "approved": true}])
        );
        let c = with_cancel(&s);
        assert!(c.cancel);
        assert_eq!((c.answers.len(), &c.workflow), (1, &stored.workflow));
    }

    #[test]
    fn a_snapshot_beyond_one_configmap_is_refused_naming_the_limit_and_what_to_do() {
        let mut r = run();
        r.spec.inputs = Some(json!({"blob": "x".repeat(CONFIGMAP_DATA_LIMIT)}));
        let e = snapshot(&r, false).unwrap_err();
        assert!(matches!(e, Refused::TooLarge { inputs, .. } if inputs > CONFIGMAP_DATA_LIMIT));
        assert_eq!(
            (e.reason(), e.code()),
            ("SnapshotTooLarge", "snapshot_too_large")
        );
        let msg = e.to_string();
        for want in [
            "1048576-byte (1 MiB) limit",
            "ConfigMap",
            "spec.inputs",
            "by reference",
        ] {
            assert!(msg.contains(want), "{want}: {msg}");
        }
        // Just under the limit still fits; answers that push it over are refused too.
        let fitting = snapshot(&run(), false).unwrap();
        let room = CONFIGMAP_DATA_LIMIT - fitting.to_json().len() - SNAPSHOT_KEY.len() - 64;
        let mut r = run();
        r.spec.inputs = Some(json!({"ticket": 42, "blob": "y".repeat(room)}));
        let s = snapshot(&r, false).expect("fits");
        r.spec.answers = vec![InterruptAnswer {
            interrupt_id: "i1".into(),
            value: Some(json!("z".repeat(128))),
            ..Default::default()
        }];
        let e = fits(&with_current_answers(&s, &r)).unwrap_err();
        assert!(
            matches!(e, Refused::TooLarge { answers, .. } if answers > 128),
            "{e}"
        );
    }

    #[test]
    fn unreadable_snapshot_is_a_clear_error() {
        let cm = ConfigMap::default();
        assert_eq!(
            read_snapshot(&cm).unwrap_err().to_string(),
            "snapshot ConfigMap has no snapshot.json key"
        );
        let cm = ConfigMap {
            data: Some(BTreeMap::from([(SNAPSHOT_KEY.into(), "{}".into())])),
            ..Default::default()
        };
        let e = read_snapshot(&cm).unwrap_err().to_string();
        assert!(e.contains("missing field `run`"), "{e}");
    }

    #[test]
    fn provider_mocks_are_copied_only_where_allowed() {
        let mut r = run();
        r.spec.provider_mocks = serde_json::from_value(json!({
            "a": {"turns": [{"responses": [{"stopReason": "stop", "content": {"k": 1}, "delayMs": 100}]}]}
        }))
        .unwrap();
        let s = snapshot(&r, true).unwrap();
        let step = &doc(&s)["providerMocks"]["a"]["turns"][0]["responses"][0];
        assert_eq!(
            (&step["stopReason"], &step["content"], &step["delayMs"]),
            (&json!("stop"), &json!({"k": 1}), &json!(100))
        );
        let programs = s.mock_programs().unwrap();
        assert_eq!(programs["a"].len(), 1);
        assert_eq!(programs["a"][0].responses[0].delay_ms, Some(100));
        // Without mocks the key is absent.
        let plain = snapshot(&run(), true).unwrap();
        assert!(doc(&plain).get("providerMocks").is_none());

        let e = snapshot(&r, false).unwrap_err();
        assert_eq!(e.reason(), "ProviderMocksNotAllowed");
        assert_eq!(e.code(), "provider_mocks_not_allowed");
        assert!(
            e.to_string().starts_with(
                "spec.providerMocks is not allowed in namespace ns: the operator's conformance.providerMockNamespaces"
            ),
            "{e}"
        );
        // A run without mocks is never refused by the gate.
        assert!(snapshot(&run(), false).is_ok());
    }

    #[test]
    fn provider_mocks_for_an_unknown_node_are_refused_with_the_known_ones() {
        let mut r = run();
        r.spec.provider_mocks = serde_json::from_value(json!({
            "b": {"responses": [{"stopReason": "stop"}]}
        }))
        .unwrap();
        let e = snapshot(&r, true).unwrap_err();
        assert_eq!(e.reason(), "ProviderMocksInvalid");
        assert_eq!(
            e.to_string(),
            "spec.providerMocks.b: workflow triage has no node `b` (its nodes: a); mock only nodes of the workflow"
        );
    }

    #[test]
    fn an_unplayable_mock_is_refused_naming_where() {
        let mut r = run();
        r.spec.provider_mocks = serde_json::from_value(json!({
            "a": {"responses": [{"stopReason": "stop", "delayMs": 4000000}]}
        }))
        .unwrap();
        let e = snapshot(&r, true).unwrap_err();
        assert_eq!(
            (e.reason(), e.code()),
            ("ProviderMocksInvalid", "provider_mocks_invalid")
        );
        assert_eq!(
            e.to_string(),
            "spec.providerMocks.a.responses.0.delayMs: exceeds the maximum of 3600000 ms"
        );
    }
}
