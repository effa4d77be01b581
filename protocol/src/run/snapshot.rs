//! The run snapshot: the resolved workflow frozen for one run, with everything the worker
//! needs and nothing it must look up — run identity, credentials mounts, inputs, answers,
//! provider mocks and the host profile. The operator writes it (a ConfigMap owned by the
//! Run), the worker reads it; later edits to the Workflow or the operator's configuration
//! never reach a started run (only `answers` and `cancel` are refreshed).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::host::HostProfile;
use super::status::{AnswerMismatch, PendingInterrupt};
use crate::retry::mock::{MockError, MockProgram, ProviderMock};

/// Where the run lives and who it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRef {
    pub namespace: String,
    pub name: String,
    /// The runId: the Run object's uid, unique per object and never reused.
    pub run_id: String,
}

/// The Workflow the snapshot was taken from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowOrigin {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
}

/// How a provider key reaches the worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "mountAs")]
pub enum KeyMount {
    /// A file of the mounted Secret.
    #[serde(rename = "file")]
    File { path: String },
    /// An environment variable set from the Secret.
    #[serde(rename = "env", rename_all = "camelCase")]
    Env { env_name: String },
}

/// A provider credential the worker pod mounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderMount {
    pub provider: String,
    #[serde(flatten)]
    pub key: KeyMount,
}

/// An answer to an interrupt.
// An item of the Run CRD's `spec.answers` (hence the schema annotations, with the Kubernetes
// CEL rule as a plain schema keyword), copied as is into the snapshot the worker reads. Built
// from what a person replied with `Answer::from_user_input`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.value) || has(self.approved)",
    "message": "an answer needs value (clarification answers) or approved (approval decision)"
}]))]
pub struct Answer {
    /// The interrupt answered (an id in `status.pendingInterrupts`).
    #[schemars(length(min = 1, max = 128))]
    pub interrupt_id: String,
    /// Clarification answers: an object keyed by question id (values are any JSON).
    // Typed `object` (not untyped JSON) so the CEL rule above can test `has(self.value)`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::lenient::option"
    )]
    #[schemars(schema_with = "crate::structural::free_object")]
    pub value: Option<Value>,
    /// Approval decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved: Option<bool>,
    /// Free-text comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub comment: Option<String>,
    /// Trust of the answer's content: `untrusted` when a relay forwards content it did not
    /// author (e.g. the REST API on a caller's say-so). An untrusted answer never approves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(trusted|untrusted)$"))]
    pub content_trust: Option<String>,
}

/// What a person replied to an interrupt, before it is checked against the interrupt.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// An approval decision: `true` approves, `false` rejects.
    Decision(bool),
    /// Answers keyed by question id.
    Answers(Map<String, Value>),
    /// A `resumeValue` as the REST API takes it: for an approval `true` / `false`,
    /// `"approve"` / `"reject"` (or `"approved"` / `"rejected"`), `{"approved": bool}` or
    /// `{"decision": "approve" | "reject"}`; for any other interrupt an object of answers.
    ResumeValue(Value),
}

/// Why a reply cannot become an [`Answer`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerError {
    /// `contentTrust` is neither `trusted` nor `untrusted`.
    #[error("contentTrust {0:?} must be trusted or untrusted")]
    ContentTrust(String),
    /// A `resumeValue` for an approval that spells no decision.
    #[error(
        "this interrupt waits for an approval: resumeValue must be true / false, \"approve\" / \"reject\" or {{\"approved\": bool}}"
    )]
    NotADecision,
    /// A `resumeValue` for a question interrupt that is not an object.
    #[error("this interrupt asks questions: resumeValue must be an object of question id → answer")]
    NotAnObject,
    /// The reply does not fit what the interrupt waits for.
    #[error(transparent)]
    Mismatch(#[from] AnswerMismatch),
}

impl AnswerError {
    /// The request member at fault (`contentTrust` or `resumeValue`).
    pub fn field(&self) -> &'static str {
        match self {
            AnswerError::ContentTrust(_) => "contentTrust",
            _ => "resumeValue",
        }
    }
}

impl Answer {
    /// The answer to interrupt `interrupt_id` from what a person replied. `pending` is the
    /// interrupt as the Run's status lists it: the reply is checked against it (a decision
    /// for an approval, exactly one answer per listed question otherwise); `None` when the
    /// caller names an interrupt the status does not list (yet), which is taken unchecked.
    pub fn from_user_input(
        interrupt_id: String,
        pending: Option<&PendingInterrupt>,
        reply: Reply,
        comment: Option<String>,
        content_trust: Option<String>,
    ) -> Result<Answer, AnswerError> {
        if let Some(t) = content_trust
            .as_deref()
            .filter(|t| !matches!(*t, "trusted" | "untrusted"))
        {
            return Err(AnswerError::ContentTrust(t.to_owned()));
        }
        let approval = pending.map(PendingInterrupt::is_approval);
        // Answers (`Some`) or a decision.
        let (answers, approved) = match reply {
            Reply::Decision(b) => (None, Some(b)),
            Reply::Answers(m) => (Some(m), None),
            Reply::ResumeValue(v) if approval == Some(true) => {
                (None, Some(decision(&v).ok_or(AnswerError::NotADecision)?))
            }
            Reply::ResumeValue(Value::Object(m)) => (Some(m), None),
            Reply::ResumeValue(Value::Bool(b)) if approval.is_none() => (None, Some(b)),
            Reply::ResumeValue(_) => return Err(AnswerError::NotAnObject),
        };
        if let Some(p) = pending {
            p.check_answer(answers.as_ref())?;
        }
        let value = answers.map(Value::Object);
        Ok(Answer {
            interrupt_id,
            value,
            approved,
            comment,
            content_trust,
        })
    }
}

/// The decision a `resumeValue` spells for an approval, if any.
fn decision(v: &Value) -> Option<bool> {
    let word = |s: &str| match s {
        "approve" | "approved" => Some(true),
        "reject" | "rejected" => Some(false),
        _ => None,
    };
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => word(s),
        Value::Object(o) => o
            .get("approved")
            .and_then(Value::as_bool)
            .or_else(|| o.get("decision").and_then(Value::as_str).and_then(word)),
        _ => None,
    }
}

/// The snapshot document (`snapshot.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSnapshot {
    pub run: RunRef,
    #[serde(default)]
    pub workflow_ref: WorkflowOrigin,
    /// The OpenWOP workflow definition (read with
    /// [`crate::workflow::WorkflowDefinition::from_value`]).
    pub workflow: Value,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<ProviderMount>,
    #[serde(default = "empty_object")]
    pub inputs: Value,
    #[serde(default = "empty_object")]
    pub configurable: Value,
    #[serde(default)]
    pub answers: Vec<Answer>,
    /// The worker records `run.cancelled` and nothing else.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel: bool,
    /// Node id → scripted provider responses (copied only where the operator allows mocks).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub provider_mocks: BTreeMap<String, ProviderMock>,
    /// What the host enforces.
    #[serde(default)]
    pub host: HostProfile,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// Why a snapshot cannot be used (the worker exits with [`super::exit::BAD_INPUT`]).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "snapshot {path} is not a valid run snapshot at line {line}, column {column}: {reason}"
    )]
    Parse {
        path: String,
        line: usize,
        column: usize,
        reason: String,
    },
    #[error("snapshot providerMocks at /providerMocks/{node}{}: {}", .error.pointer, .error.reason)]
    Mocks { node: String, error: MockError },
}

pub use crate::text::escape_pointer;

/// The first mock of `text` that is not a valid [`ProviderMock`], as an error naming its node.
fn bad_mock(text: &str) -> Option<SnapshotError> {
    let doc: Value = serde_json::from_str(text).ok()?;
    doc.get("providerMocks")?
        .as_object()?
        .iter()
        .find_map(|(node, mock)| {
            let e = serde_json::from_value::<ProviderMock>(mock.clone()).err()?;
            Some(SnapshotError::Mocks {
                node: escape_pointer(node),
                error: MockError {
                    pointer: String::new(),
                    reason: e.to_string(),
                },
            })
        })
}

/// The `configurable` key of the per-run node-execution ceiling (run-options.md).
pub const RECURSION_LIMIT_KEY: &str = "recursionLimit";

/// The error code of a run ended by its node-execution ceiling (`configurable.recursionLimit`
/// or the host's `limits.maxNodeExecutions`, whichever binds).
pub const RECURSION_LIMIT_EXCEEDED: &str = "recursion_limit_exceeded";

/// A `configurable.recursionLimit` that is not a positive integer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "configurable.recursionLimit must be an integer of at least 1 (the most node executions of the run), got {0}"
)]
pub struct RecursionLimitError(pub String);

/// The node-execution ceiling of a run: `configurable.recursionLimit` clamped to the host's
/// `maxNodeExecutions` (run-options.md: clamp, never refuse, a value above it), else the
/// host's. `None` when neither is set.
pub fn node_execution_limit(
    configurable: &Value,
    host_max: Option<u32>,
) -> Result<Option<u32>, RecursionLimitError> {
    match configurable.get(RECURSION_LIMIT_KEY) {
        None => Ok(host_max),
        Some(v) => clamped(v, host_max).map(Some),
    }
}

/// `recursionLimit` value `v`, checked and clamped to `host_max`.
fn clamped(v: &Value, host_max: Option<u32>) -> Result<u32, RecursionLimitError> {
    let asked = v
        .as_u64()
        .or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 1.0)
                .map(|f| f.min(u64::MAX as f64) as u64)
        })
        .filter(|n| *n >= 1)
        .ok_or_else(|| RecursionLimitError(crate::text::truncate(&v.to_string(), 64)))?;
    let asked = u32::try_from(asked).unwrap_or(u32::MAX);
    Ok(host_max.map_or(asked, |h| asked.min(h)))
}

/// Checks `configurable.recursionLimit` and records its clamped value in place, so the run
/// (and its snapshot) carries the limit it gets. `POST /v1/runs` calls it; on error nothing
/// changes.
pub fn clamp_recursion_limit(
    configurable: &mut Map<String, Value>,
    host_max: Option<u32>,
) -> Result<(), RecursionLimitError> {
    if let Some(v) = configurable.get(RECURSION_LIMIT_KEY) {
        let limit = clamped(v, host_max)?;
        configurable.insert(RECURSION_LIMIT_KEY.into(), Value::from(limit));
    }
    Ok(())
}

/// Default escalation threshold (CP-1).
pub const DEFAULT_ESCALATION_THRESHOLD: f64 = 0.7;

impl RunSnapshot {
    /// Parses a snapshot document; errors name the place and never a value.
    pub fn from_json(text: &str, path: &str) -> Result<RunSnapshot, SnapshotError> {
        serde_json::from_str(text).map_err(|e| {
            // A mock that does not parse is named by its node.
            if let Some(bad) = bad_mock(text) {
                return bad;
            }
            SnapshotError::Parse {
                path: path.to_owned(),
                line: e.line(),
                column: e.column(),
                reason: e.to_string(),
            }
        })
    }

    /// The document as stored.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The answer to `interrupt_id`, the last one when several were given.
    pub fn answer(&self, interrupt_id: &str) -> Option<&Answer> {
        self.answers
            .iter()
            .rev()
            .find(|a| a.interrupt_id == interrupt_id)
    }

    /// `configurable.escalationThreshold` (CP-1), default 0.7.
    pub fn escalation_threshold(&self) -> f64 {
        self.configurable
            .get("escalationThreshold")
            .and_then(Value::as_f64)
            .filter(|t| (0.0..=1.0).contains(t))
            .unwrap_or(DEFAULT_ESCALATION_THRESHOLD)
    }

    /// The run's node-execution ceiling ([`node_execution_limit`] of its `configurable` and
    /// the host profile).
    pub fn node_execution_limit(&self) -> Result<Option<u32>, RecursionLimitError> {
        node_execution_limit(&self.configurable, self.host.limits.max_node_executions)
    }

    /// The provider mocks as programs: node id → one program per clarification turn.
    pub fn mock_programs(&self) -> Result<BTreeMap<String, Vec<MockProgram>>, SnapshotError> {
        self.provider_mocks
            .iter()
            .map(|(node, m)| {
                m.programs()
                    .map(|p| (node.clone(), p))
                    .map_err(|error| SnapshotError::Mocks {
                        node: escape_pointer(node),
                        error,
                    })
            })
            .collect()
    }

    /// `(variable name, value)` of every workflow variable marked `sensitive` that has a
    /// value ([`sensitive_values`]).
    pub fn sensitive_values(&self) -> Vec<(String, String)> {
        sensitive_values(&self.workflow, &self.inputs)
    }
}

/// `(variable name, value)` of every variable of `workflow` (a definition) marked
/// `sensitive` that has a value (from `inputs`, else its default). Strings are masked as
/// they are; other values as their JSON text. The worker redacts these in everything it
/// emits; the operator in everything it exports (the debug bundle).
pub fn sensitive_values(workflow: &Value, inputs: &Value) -> Vec<(String, String)> {
    let Some(vars) = workflow.get("variables").and_then(Value::as_array) else {
        return vec![];
    };
    vars.iter()
        .filter(|v| v.get("sensitive").and_then(Value::as_bool) == Some(true))
        .filter_map(|v| {
            let name = v.get("name")?.as_str()?;
            let value = inputs.get(name).or_else(|| v.get("defaultValue"))?;
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Null => return None,
                other => other.to_string(),
            };
            (!text.is_empty()).then(|| (name.to_owned(), text))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({"run": {"namespace": "ns", "name": "r1", "runId": "u-1"},
               "workflowRef": {"name": "w", "generation": 2},
               "workflow": {"id": "w", "nodes": [{"id": "a", "typeId": "core.identity"}],
                            "variables": [{"name": "token", "type": "string", "sensitive": true},
                                          {"name": "n", "type": "number", "sensitive": true, "defaultValue": 42},
                                          {"name": "plain", "type": "string"}]},
               "providers": [{"provider": "openai", "mountAs": "file", "path": "/p/openai/key"},
                             {"provider": "anthropic", "mountAs": "env", "envName": "ANTHROPIC_API_KEY"}],
               "inputs": {"token": "s3cr3t", "plain": "x"},
               "configurable": {"escalationThreshold": 0.5},
               "answers": [{"interruptId": "i1", "approved": false}, {"interruptId": "i1", "approved": true}],
               "cancel": true,
               "host": {"limits": {"clarificationRounds": 1, "schemaRounds": 5, "envelopesPerTurn": 8}}})
    }

    #[test]
    fn the_operator_shape_round_trips() {
        let s = RunSnapshot::from_json(&doc().to_string(), "s.json").unwrap();
        assert_eq!(s.run.run_id, "u-1");
        assert_eq!(s.answer("i1").unwrap().approved, Some(true));
        assert!(s.answer("i2").is_none());
        assert_eq!(s.escalation_threshold(), 0.5);
        assert_eq!(
            s.providers[0].key,
            KeyMount::File {
                path: "/p/openai/key".into()
            }
        );
        assert_eq!(
            s.providers[1].key,
            KeyMount::Env {
                env_name: "ANTHROPIC_API_KEY".into()
            }
        );
        assert!(s.cancel);
        assert_eq!(s.host.limits.clarification_rounds, 1);
        let back = RunSnapshot::from_json(&s.to_json(), "s.json").unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn the_recursion_limit_is_clamped_to_the_hosts_ceiling() {
        let table = [
            (json!({}), Some(1000), Ok(Some(1000))),
            (json!({}), None, Ok(None)),
            (json!({"recursionLimit": 3}), Some(1000), Ok(Some(3))),
            (json!({"recursionLimit": 3.0}), Some(1000), Ok(Some(3))),
            (json!({"recursionLimit": 5000}), Some(1000), Ok(Some(1000))),
            (json!({"recursionLimit": 5000}), None, Ok(Some(5000))),
            (json!({"recursionLimit": 1e12}), None, Ok(Some(u32::MAX))),
        ];
        for (c, host, want) in table {
            assert_eq!(node_execution_limit(&c, host), want, "{c} {host:?}");
        }
        for bad in [json!(0), json!(-1), json!(2.5), json!("3"), json!(null)] {
            let e = node_execution_limit(&json!({"recursionLimit": bad}), Some(10)).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("configurable.recursionLimit must be"),
                "{e}"
            );
        }
        let mut c = json!({"recursionLimit": 5000, "other": 1})
            .as_object()
            .unwrap()
            .clone();
        clamp_recursion_limit(&mut c, Some(1000)).unwrap();
        assert_eq!(
            Value::Object(c),
            json!({"recursionLimit": 1000, "other": 1})
        );
        let mut c = json!({"recursionLimit": "x"}).as_object().unwrap().clone();
        assert!(clamp_recursion_limit(&mut c, Some(1000)).is_err());
        assert_eq!(c.len(), 1, "nothing is lost on error");
        let mut s = RunSnapshot::from_json(&doc().to_string(), "s.json").unwrap();
        s.configurable = json!({"recursionLimit": 3});
        assert_eq!(s.node_execution_limit(), Ok(Some(3)));
    }

    #[test]
    fn sensitive_variables_are_listed_with_their_values() {
        let s = RunSnapshot::from_json(&doc().to_string(), "s.json").unwrap();
        assert_eq!(
            s.sensitive_values(),
            vec![("token".into(), "s3cr3t".into()), ("n".into(), "42".into())]
        );
    }

    #[test]
    fn a_broken_snapshot_names_the_field_and_place() {
        let e = RunSnapshot::from_json(r#"{"workflow":{}}"#, "s.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing field `run`") && e.contains("s.json"),
            "{e}"
        );
        let e = RunSnapshot::from_json(
            r#"{"run":{"namespace":"n","name":"r","runId":"u"},"workflow":{},"providers":[{"provider":"x","mountAs":"carrier-pigeon"}]}"#,
            "s.json",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn provider_mocks_become_one_program_per_turn_or_name_the_pointer() {
        let mut d = doc();
        d["providerMocks"] = json!({
            "q": {"responses": [{"stopReason": "stop", "content": "{}", "delayMs": 250}]},
            "p": {"turns": [{"responses": [{"stopReason": "stop"}]}, {"responses": [{"stopReason": "max_tokens"}, {"stopReason": "stop"}]}]}});
        let s = RunSnapshot::from_json(&d.to_string(), "s").unwrap();
        let m = s.mock_programs().unwrap();
        assert_eq!(m["q"][0].responses[0].delay_ms, Some(250));
        assert_eq!((m["p"].len(), m["p"][1].responses.len()), (2, 2));

        d["providerMocks"] = json!({"a/b": {"turns": [{"responses": [{"stopReason": "stop"}]}, {"responses": [{"stopReason": "stop", "delayMs": 4000000}]}]}});
        let s = RunSnapshot::from_json(&d.to_string(), "s").unwrap();
        assert_eq!(
            s.mock_programs().unwrap_err().to_string(),
            "snapshot providerMocks at /providerMocks/a~1b/turns/1/responses/0/delayMs: exceeds the maximum of 3600000 ms"
        );
        d["providerMocks"] = json!({"q": {}});
        let s = RunSnapshot::from_json(&d.to_string(), "s").unwrap();
        assert!(
            s.mock_programs()
                .unwrap_err()
                .to_string()
                .contains("/providerMocks/q: set exactly one of")
        );
        d["providerMocks"] = json!({"q": {"responses": [{"stopReason": "stop", "bogus": 1}]}});
        let e = RunSnapshot::from_json(&d.to_string(), "s")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus"), "{e}");
    }

    fn pending(kind: &str, questions: &[&str]) -> PendingInterrupt {
        serde_json::from_value(json!({
            "interruptId": "i1", "nodeId": "n", "kind": kind,
            "questions": questions.iter().map(|q| json!({"id": q, "question": "?"})).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    fn answer(p: Option<&PendingInterrupt>, reply: Reply) -> Result<Answer, AnswerError> {
        Answer::from_user_input("i1".into(), p, reply, None, None)
    }

    #[test]
    fn a_resume_value_for_an_approval_takes_the_usual_spellings() {
        let p = pending("approval", &[]);
        for (v, want) in [
            (json!(true), true),
            (json!(false), false),
            (json!("approve"), true),
            (json!("rejected"), false),
            (json!({"approved": true}), true),
            (json!({"decision": "reject"}), false),
        ] {
            let a = answer(Some(&p), Reply::ResumeValue(v.clone())).unwrap();
            assert_eq!((a.approved, a.value), (Some(want), None), "{v}");
        }
        for v in [json!({"region": "eu"}), json!("maybe"), json!(1)] {
            assert_eq!(
                answer(Some(&p), Reply::ResumeValue(v)).unwrap_err(),
                AnswerError::NotADecision
            );
        }
        // Answers for an approval do not fit it.
        let e = answer(Some(&p), Reply::Answers(Map::new())).unwrap_err();
        assert!(
            matches!(
                e,
                AnswerError::Mismatch(AnswerMismatch::WantsApproval { .. })
            ),
            "{e}"
        );
    }

    #[test]
    fn answers_must_be_an_object_with_exactly_the_questions() {
        let p = pending("clarification", &["region", "tier"]);
        let a = answer(
            Some(&p),
            Reply::ResumeValue(json!({"region": "eu", "tier": "gold"})),
        )
        .unwrap();
        assert_eq!(a.value, Some(json!({"region": "eu", "tier": "gold"})));
        assert_eq!((a.interrupt_id.as_str(), a.approved), ("i1", None));
        let e = answer(Some(&p), Reply::ResumeValue(json!("eu"))).unwrap_err();
        assert_eq!(e, AnswerError::NotAnObject);
        assert_eq!(e.field(), "resumeValue");
        let e = answer(
            Some(&p),
            Reply::ResumeValue(json!({"region": "eu", "zone": 1})),
        )
        .unwrap_err();
        let AnswerError::Mismatch(AnswerMismatch::Questions {
            unknown, missing, ..
        }) = e
        else {
            panic!("{e}")
        };
        assert_eq!(
            (unknown, missing),
            (vec!["zone".into()], vec!["tier".into()])
        );
        let e = answer(Some(&p), Reply::Decision(true)).unwrap_err();
        assert!(e.to_string().contains("not an approval"), "{e}");
    }

    #[test]
    fn trust_and_comment_are_kept_and_a_bad_trust_is_named() {
        let p = pending("approval", &[]);
        let a = Answer::from_user_input(
            "i1".into(),
            Some(&p),
            Reply::Decision(false),
            Some("too risky".into()),
            Some("untrusted".into()),
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            json!({"interruptId": "i1", "approved": false, "comment": "too risky", "contentTrust": "untrusted"})
        );
        let e = Answer::from_user_input(
            "i1".into(),
            Some(&p),
            Reply::Decision(true),
            None,
            Some("maybe".into()),
        )
        .unwrap_err();
        assert_eq!(
            (e.to_string().as_str(), e.field()),
            (
                "contentTrust \"maybe\" must be trusted or untrusted",
                "contentTrust"
            )
        );
    }

    #[test]
    fn an_interrupt_the_status_does_not_list_is_answered_unchecked() {
        let a = answer(None, Reply::Answers(Map::new())).unwrap();
        assert_eq!(a.value, Some(json!({})));
        let a = answer(None, Reply::ResumeValue(json!(true))).unwrap();
        assert_eq!(a.approved, Some(true));
        assert_eq!(
            answer(None, Reply::ResumeValue(json!("yes"))).unwrap_err(),
            AnswerError::NotAnObject
        );
    }
}
