//! The run snapshot: the resolved workflow frozen for one run, with everything the worker
//! needs and nothing it must look up — run identity, credentials mounts, inputs, answers,
//! provider mocks and the host profile. The operator writes it (a ConfigMap owned by the
//! Run), the worker reads it; later edits to the Workflow or the operator's configuration
//! never reach a started run (only `answers` and `cancel` are refreshed).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::host::HostProfile;
use super::status::{APPROVAL_ACTIONS, AnswerMismatch, PendingInterrupt};
use super::waits::{ChildResult, ParentRef};
use crate::retry::mock::{MockError, MockProgram, ProviderMock};
use crate::workflow::{WorkflowDefinition, WorkflowError};

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

/// A Workflow secret (`spec.secrets[]`) the worker pod mounts as a file: the HTTP node fills
/// `{{secrets.<name>}}` in header values from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretMount {
    pub name: String,
    /// The file holding the value (trailing whitespace is not part of it).
    pub path: String,
}

/// A ToolServer a node of the run names (`tools[].server`), as the worker reaches it: the
/// operator resolved it (namespace allowed, spec read) when it built the snapshot, and
/// mounted its `headersFrom` values as files of the run's tool-credentials Secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolServerMount {
    /// The ToolServer's `metadata.name` (what `tools[].server` names).
    pub name: String,
    pub namespace: String,
    pub url: String,
    /// Each header's name and the file holding its value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<SecretMount>,
    pub timeout_seconds: u32,
    pub max_result_bytes: u32,
    #[serde(default)]
    pub protocol_version: crate::tools::mcp::RevisionPolicy,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_tiers: Vec<crate::tools::policy::TierAssignment>,
}

/// An answer to an interrupt.
// An item of the Run CRD's `spec.answers` (hence the schema annotations, with the Kubernetes
// CEL rule as a plain schema keyword), copied as is into the snapshot the worker reads. Built
// from what a person replied with `Answer::from_user_input`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.value) || has(self.approved) || has(self.action)",
    "message": "an answer needs value (clarification answers), action (approval action) or approved (approval decision)"
}]))]
pub struct Answer {
    /// The interrupt answered (an id in `status.pendingInterrupts`).
    #[schemars(length(min = 1, max = 128))]
    pub interrupt_id: String,
    /// Clarification answers: an object keyed by question id (values are any JSON); for a
    /// `custom` interrupt the resume value; for an approval the action's extra data
    /// (`refineFeedback`, `editedArtifactData`).
    // Typed `object` (not untyped JSON) so the CEL rule above can test `has(self.value)`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::lenient::option"
    )]
    #[schemars(schema_with = "crate::structural::free_object")]
    pub value: Option<Value>,
    /// Approval decision (`true`: accept, `false`: reject) when no `action` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved: Option<bool>,
    /// Approval action: `accept`, `reject`, `refine` or `edit-accept` (one the gate offers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(accept|reject|refine|edit-accept)$"))]
    pub action: Option<String>,
    /// Free-text comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub comment: Option<String>,
    /// Trust of the answer's content: `untrusted` when a relay forwards content it did not
    /// author (e.g. the REST API on a caller's say-so). An untrusted answer never approves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(trusted|untrusted)$"))]
    pub content_trust: Option<String>,
    /// The suspended node (as `status.pendingInterrupts` named it when the answer was given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub node_id: Option<String>,
    /// Who answered: the authenticated user of the REST API, or the kubeconfig user of
    /// `kubectl openwop resume`. Absent when the answer was written to `spec.answers`
    /// directly (the worker then records [`UNATTRIBUTED`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub answered_by: Option<String>,
    /// When it was answered (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub answered_at: Option<String>,
}

/// The principal recorded for an answer that names none (written to `spec.answers` by hand).
pub const UNATTRIBUTED: &str = "unattributed (spec.answers written directly)";

/// What a person replied to an interrupt, before it is checked against the interrupt.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// An approval decision: `true` accepts, `false` rejects.
    Decision(bool),
    /// An approval action (`accept`, `reject`, `refine`, `edit-accept`).
    Action(String),
    /// Answers keyed by question id.
    Answers(Map<String, Value>),
    /// A `resumeValue` of the spec's interrupt resolution: for an approval
    /// `{action, comment?, feedback?, refineFeedback?, editedArtifactData?}` (or the legacy
    /// `{decision: "approved" | "rejected"}`); for a clarification `{answers: {id: answer}}`
    /// or `{answers: [{id, answer}]}`; for a custom interrupt any object.
    ResumeValue(Value),
}

/// Why a reply cannot become an [`Answer`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerError {
    /// `contentTrust` is neither `trusted` nor `untrusted`.
    #[error("contentTrust {0:?} must be trusted or untrusted")]
    ContentTrust(String),
    /// A `resumeValue` for an approval that names no action.
    #[error(
        "this interrupt waits for an approval: resumeValue must be {{\"action\": ACTION}} with ACTION one of {}",
        allowed.join(", ")
    )]
    NotADecision { allowed: Vec<String> },
    /// An action the approval does not offer.
    #[error("action {action:?} is not offered by this approval; use one of {}", allowed.join(", "))]
    ActionNotOffered {
        action: String,
        allowed: Vec<String>,
    },
    /// An action that needs data the reply lacks (`refine` → `refineFeedback {scope}`,
    /// `edit-accept` → `editedArtifactData`).
    #[error("action {action:?} needs resumeValue.{field}{}", if field.ends_with(".scope") { " (whole, section or items)" } else { "" })]
    ActionData { action: String, field: &'static str },
    /// A quorum vote whose `voter` is not a name.
    #[error(
        "resumeValue.voter must be a string of 1 to {} characters naming who votes",
        MAX_VOTER_CHARS
    )]
    Voter,
    /// A `resumeValue` for a question interrupt that is not `{answers: ...}`.
    #[error(
        "this interrupt asks questions: resumeValue must be {{\"answers\": {{QUESTION_ID: ANSWER}}}} or {{\"answers\": [{{\"id\": QUESTION_ID, \"answer\": ANSWER}}]}}"
    )]
    NotAnswers,
    /// A `resumeValue` for a custom interrupt that is not an object.
    #[error("this interrupt waits for an object: resumeValue must be a JSON object")]
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

/// What a reply resolves to once read: an approval action (with its extra data) or answers.
enum Resolved {
    Action(String, Option<Map<String, Value>>),
    Answers(Map<String, Value>),
}

impl Answer {
    /// The answer to interrupt `interrupt_id` from what a person replied. `pending` is the
    /// interrupt as the Run's status lists it: the reply is checked against it (an action it
    /// offers for an approval, exactly one answer per listed question otherwise); `None` when
    /// the caller names an interrupt the status does not list (yet), which is taken unchecked.
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
        let allowed = || {
            pending.map_or_else(
                || APPROVAL_ACTIONS.map(str::to_owned).to_vec(),
                PendingInterrupt::offered_actions,
            )
        };
        let mut comment = comment;
        let resolved = match reply {
            Reply::Decision(b) => {
                Resolved::Action(if b { "accept" } else { "reject" }.into(), None)
            }
            Reply::Action(a) => Resolved::Action(a, None),
            Reply::Answers(m) => Resolved::Answers(m),
            Reply::ResumeValue(v) => {
                let questions = pending.is_some_and(|p| !p.questions.is_empty())
                    || pending.is_some_and(|p| p.kind == "clarification");
                // An event body is kept whole: its members (even `action` or `answers`) are
                // the event's, checked against the correlation below.
                let event = pending.is_some_and(PendingInterrupt::is_external_event);
                match (approval, v) {
                    (_, Value::Object(o)) if event => Resolved::Answers(o),
                    (Some(true), v) => approval_of(v, allowed(), &mut comment)?,
                    (None, Value::Object(o))
                        if o.contains_key("action") || o.contains_key("decision") =>
                    {
                        approval_of(Value::Object(o), allowed(), &mut comment)?
                    }
                    (_, Value::Object(mut o)) if questions || o.contains_key("answers") => {
                        match o.remove("answers") {
                            Some(a) => Resolved::Answers(answers_of(a)?),
                            None => return Err(AnswerError::NotAnswers),
                        }
                    }
                    (_, Value::Object(o)) => Resolved::Answers(o),
                    (_, _) if questions => return Err(AnswerError::NotAnswers),
                    (_, _) => return Err(AnswerError::NotAnObject),
                }
            }
        };
        let (value, approved, action) = match resolved {
            Resolved::Action(action, extra) => {
                if let Some(p) = pending.filter(|p| !p.is_approval()) {
                    return Err(AnswerMismatch::NotAnApproval {
                        interrupt_id: p.interrupt_id.clone(),
                        kind: p.kind.clone(),
                    }
                    .into());
                }
                let allowed = allowed();
                if !allowed.contains(&action) {
                    return Err(AnswerError::ActionNotOffered { action, allowed });
                }
                let needs = match action.as_str() {
                    "refine" => Some("refineFeedback"),
                    "edit-accept" => Some("editedArtifactData"),
                    _ => None,
                };
                if let Some(field) = needs
                    && !extra.as_ref().is_some_and(|e| e.contains_key(field))
                {
                    return Err(AnswerError::ActionData { action, field });
                }
                let approved = match action.as_str() {
                    "accept" => Some(true),
                    "reject" => Some(false),
                    _ => None,
                };
                (extra.map(Value::Object), approved, Some(action))
            }
            Resolved::Answers(m) => {
                if let Some(p) = pending {
                    p.check_answer(Some(&m))?;
                }
                (Some(Value::Object(m)), None, None)
            }
        };
        Ok(Answer {
            interrupt_id,
            value,
            approved,
            action,
            comment,
            content_trust,
            node_id: pending.map(|p| p.node_id.clone()),
            answered_by: None,
            answered_at: None,
        })
    }

    /// This answer recorded as given by `by` at `at` (RFC 3339).
    pub fn answered(mut self, by: impl Into<String>, at: impl Into<String>) -> Self {
        self.answered_by = Some(by.into());
        self.answered_at = Some(at.into());
        self
    }

    /// The approval action this answer takes: its `action`, else its `approved` decision.
    pub fn approval_action(&self) -> Option<&str> {
        self.action.as_deref().or(match self.approved {
            Some(true) => Some("accept"),
            Some(false) => Some("reject"),
            None => None,
        })
    }

    /// Who answered, as recorded in events: [`UNATTRIBUTED`] when the answer names no one.
    pub fn principal(&self) -> &str {
        self.answered_by.as_deref().unwrap_or(UNATTRIBUTED)
    }
}

/// What a `refineFeedback` may be about (`interrupt.md` §RefineFeedback): the whole
/// artifact, a section of it, or some of its items.
pub const REFINE_SCOPES: [&str; 3] = ["whole", "section", "items"];

/// The member of an approval's `resumeValue` naming who votes (`run::quorum` counts by it).
pub const VOTER: &str = "voter";

/// Longest voter name kept.
pub const MAX_VOTER_CHARS: usize = 256;

/// Members of an approval's `resumeValue` besides `action` that are kept with the answer
/// (`voter`: who a quorum vote counts for, `run::quorum`).
const APPROVAL_DATA: [&str; 3] = ["refineFeedback", "editedArtifactData", VOTER];

/// The action an approval's `resumeValue` takes, with its extra data; a `comment` or legacy
/// `feedback` in it becomes the answer's comment unless one was given beside it.
fn approval_of(
    v: Value,
    allowed: Vec<String>,
    comment: &mut Option<String>,
) -> Result<Resolved, AnswerError> {
    let Value::Object(mut o) = v else {
        return Err(AnswerError::NotADecision { allowed });
    };
    let action = match (o.get("action"), o.get("decision")) {
        (Some(Value::String(a)), _) => a.clone(),
        // INT's legacy spelling, normalised.
        (None, Some(Value::String(d))) if d == "approved" => "accept".into(),
        (None, Some(Value::String(d))) if d == "rejected" => "reject".into(),
        _ => return Err(AnswerError::NotADecision { allowed }),
    };
    for k in ["comment", "feedback"] {
        if comment.is_none()
            && let Some(Value::String(c)) = o.get(k)
        {
            *comment = Some(c.clone());
        }
    }
    if let Some(f) = o.get("refineFeedback")
        && !f
            .get("scope")
            .and_then(Value::as_str)
            .is_some_and(|s| REFINE_SCOPES.contains(&s))
    {
        return Err(AnswerError::ActionData {
            action,
            field: "refineFeedback.scope",
        });
    }
    if let Some(v) = o.get(VOTER)
        && !v
            .as_str()
            .is_some_and(|v| (1..=MAX_VOTER_CHARS).contains(&v.chars().count()))
    {
        return Err(AnswerError::Voter);
    }
    let extra: Map<String, Value> = APPROVAL_DATA
        .iter()
        .filter_map(|k| o.remove(*k).map(|v| ((*k).to_owned(), v)))
        .collect();
    Ok(Resolved::Action(
        action,
        (!extra.is_empty()).then_some(extra),
    ))
}

/// Clarification answers from `{id: answer}` or `[{id, answer}]`, as an object keyed by id.
fn answers_of(a: Value) -> Result<Map<String, Value>, AnswerError> {
    match a {
        Value::Object(m) => Ok(m),
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::Object(mut o) => match (o.remove("id"), o.remove("answer")) {
                    (Some(Value::String(id)), Some(answer)) => Ok((id, answer)),
                    _ => Err(AnswerError::NotAnswers),
                },
                _ => Err(AnswerError::NotAnswers),
            })
            .collect(),
        _ => Err(AnswerError::NotAnswers),
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
    /// The Workflow's `spec.secrets`, as mounted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretMount>,
    /// The ToolServers the Workflow's LLM nodes name, resolved by the operator.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_servers: Vec<ToolServerMount>,
    #[serde(default = "empty_object")]
    pub inputs: Value,
    #[serde(default = "empty_object")]
    pub configurable: Value,
    #[serde(default)]
    pub answers: Vec<Answer>,
    /// The worker records `run.cancelled` and nothing else.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel: bool,
    /// The Run's `spec.pause` when this worker was started: the worker records `run.paused`
    /// (unless its log already ends paused) and exits suspended. Absent on a resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<super::pause::PauseRequest>,
    /// Node id → scripted provider responses (copied only where the operator allows mocks).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub provider_mocks: BTreeMap<String, ProviderMock>,
    /// What the host enforces.
    #[serde(default)]
    pub host: HostProfile,
    /// Set on a child run (`core.subWorkflow`): the run and node that called it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRef>,
    /// How this run's child runs ended (written by the operator, like answers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildResult>,
    /// `run.cancelled.reason` when the cancel has a reason other than `spec.cancel` (a child
    /// cancelled with its parent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_reason: Option<String>,
    /// Present when the operator found `workflow` valid against the workflow-definition
    /// schema: the schemas' digest and the document's ([`RunSnapshot::check_workflow`]). A
    /// worker whose schemas and reading of `workflow` give the same value does not check it
    /// again; any other value (other schemas during an upgrade, a hand-edited `workflow`) or
    /// none (an older operator) and it checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_checked: Option<String>,
}

/// The record that `workflow` passed these schemas: their digest, then the document's (its
/// JSON as written and as read back: key order is kept, numbers round-trip).
fn check_record(workflow: &Value) -> String {
    use crate::schema::{FNV_OFFSET, SCHEMAS_DIGEST, fnv1a};
    let text = serde_json::to_vec(workflow).unwrap_or_default();
    format!("{SCHEMAS_DIGEST:016x}-{:016x}", fnv1a(FNV_OFFSET, &text))
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
    /// Checks `workflow` against the workflow-definition schema and records on the snapshot
    /// that it passed (`workflow_checked`); clears the record when it did not, so the worker
    /// checks it and fails the run with the schema's issues.
    pub fn check_workflow(&mut self) {
        self.workflow_checked =
            crate::schema::validate(crate::schema::Document::WorkflowDefinition, &self.workflow)
                .is_ok()
                .then(|| check_record(&self.workflow));
    }

    /// Records that `workflow` passed the schema, as [`Self::check_workflow`] does, for a
    /// caller that has just validated this very document (the operator reads each Workflow
    /// generation once, `operator::definitions`).
    pub fn record_workflow_checked(&mut self) {
        self.workflow_checked = Some(check_record(&self.workflow));
    }

    /// The workflow definition to run: read as [`WorkflowDefinition::from_value`] does,
    /// without the schema check when `workflow_checked` says these schemas passed this very
    /// document (compiling the schema was most of a worker's start-up CPU).
    pub fn workflow_definition(&self) -> Result<WorkflowDefinition, WorkflowError> {
        // No record (an older operator, a workflow the schema refused): nothing to compare.
        let checked = self
            .workflow_checked
            .as_deref()
            .is_some_and(|record| record == check_record(&self.workflow));
        let value = self.workflow.clone();
        if checked {
            WorkflowDefinition::from_checked_value(value)
        } else {
            WorkflowDefinition::from_value(value)
        }
    }

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

    /// How the child run of node `node_id` ended, once the operator wrote it.
    pub fn child_result(&self, node_id: &str) -> Option<&ChildResult> {
        self.children.iter().rev().find(|c| c.node_id == node_id)
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

    /// A workflow that fits the types but not the schema (the id's pattern is lowercase).
    fn off_schema() -> Value {
        json!({"id": "Triage", "nodes": [{"id": "a", "typeId": "core.identity"}]})
    }

    fn with_workflow(workflow: Value) -> RunSnapshot {
        let mut d = doc();
        d["workflow"] = workflow;
        RunSnapshot::from_json(&d.to_string(), "s.json").unwrap()
    }

    #[test]
    fn a_workflow_checked_by_these_schemas_is_read_back_as_checked_through_the_configmap_text() {
        // Key order, floats and non-ASCII text survive the operator's write and the worker's
        // read, so the record still matches the document the worker reads.
        let mut s = with_workflow(json!({
            "version": "1.0.0", "name": "Tri\u{e4}ge \u{2014} \u{1f600}", "id": "w",
            "nodes": [{"id": "a", "typeId": "core.identity",
                       "config": {"z": 0.1, "a": 1e300, "m": -0.0, "q": "\"\\\u{7}"}}]}));
        s.check_workflow();
        let record = s
            .workflow_checked
            .clone()
            .expect("a valid workflow is recorded");
        assert!(record.starts_with(&format!("{:016x}-", crate::schema::SCHEMAS_DIGEST)));
        let read = RunSnapshot::from_json(&s.to_json(), "s.json").unwrap();
        assert_eq!(read.workflow_checked.as_deref(), Some(record.as_str()));
        assert_eq!(
            read.workflow_checked.as_deref(),
            Some(check_record(&read.workflow).as_str()),
            "the record matches the document as the worker reads it"
        );
        assert_eq!(
            read.workflow_definition().unwrap(),
            WorkflowDefinition::from_value(read.workflow.clone()).unwrap()
        );
    }

    #[test]
    fn only_a_record_of_these_schemas_and_this_document_skips_the_schema() {
        let schema_error = |s: &RunSnapshot| {
            matches!(
                s.workflow_definition(),
                Err(WorkflowError::Schema { ref issues }) if issues.iter().any(|i| i.instance_path == "/id")
            )
        };
        // The operator does not record a workflow the schema refuses: the worker checks it.
        let mut s = with_workflow(off_schema());
        s.check_workflow();
        assert_eq!(s.workflow_checked, None);
        assert!(schema_error(&s));

        // A matching record is trusted: the schema is not run (this document would fail it).
        let mut trusted = with_workflow(off_schema());
        trusted.workflow_checked = Some(check_record(&trusted.workflow));
        assert_eq!(trusted.workflow_definition().unwrap().id, "Triage");

        // Other schemas (an operator of another version): checked.
        let mut other = trusted.clone();
        let record = trusted.workflow_checked.clone().unwrap();
        let (_, document) = record.split_once('-').unwrap();
        other.workflow_checked = Some(format!(
            "{:016x}-{document}",
            !crate::schema::SCHEMAS_DIGEST
        ));
        assert!(schema_error(&other));

        // The workflow edited after the check (a hand-edited ConfigMap): checked.
        let mut edited =
            with_workflow(json!({"id": "w", "nodes": [{"id": "a", "typeId": "core.identity"}]}));
        edited.check_workflow();
        assert!(edited.workflow_checked.is_some());
        edited.workflow = off_schema();
        assert!(schema_error(&edited));

        // An older operator's snapshot has no record: checked.
        let mut old = trusted;
        old.workflow_checked = None;
        assert!(schema_error(&old));
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
    fn a_resume_value_for_an_approval_takes_the_spec_actions() {
        let p = pending("approval", &[]);
        for (v, action, approved) in [
            (json!({"action": "accept"}), "accept", Some(true)),
            (json!({"action": "reject"}), "reject", Some(false)),
            // INT's legacy spelling is normalised.
            (json!({"decision": "approved"}), "accept", Some(true)),
            (json!({"decision": "rejected"}), "reject", Some(false)),
        ] {
            let a = answer(Some(&p), Reply::ResumeValue(v.clone())).unwrap();
            assert_eq!(
                (
                    a.action.as_deref(),
                    a.approved,
                    a.value.clone(),
                    a.node_id.as_deref()
                ),
                (Some(action), approved, None, Some("n")),
                "{v}"
            );
            assert_eq!(a.approval_action(), Some(action));
        }
        // Not spelled as the spec does, or not an action the gate offers: named.
        for v in [
            json!(true),
            json!("approve"),
            json!({"approved": true}),
            json!({"region": "eu"}),
        ] {
            let e = answer(Some(&p), Reply::ResumeValue(v.clone())).unwrap_err();
            assert_eq!(
                e,
                AnswerError::NotADecision {
                    allowed: vec!["accept".into(), "reject".into()]
                },
                "{v}"
            );
            assert!(e.to_string().contains("{\"action\": ACTION}"), "{e}");
        }
        let e = answer(Some(&p), Reply::ResumeValue(json!({"action": "maybe"}))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "action \"maybe\" is not offered by this approval; use one of accept, reject"
        );
        let e = answer(Some(&p), Reply::Action("refine".into())).unwrap_err();
        assert!(matches!(e, AnswerError::ActionNotOffered { .. }), "{e}");
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
    fn refine_and_edit_accept_carry_their_data_and_a_comment_is_read_from_the_value() {
        let mut p = pending("approval", &[]);
        p.actions = vec!["accept".into(), "refine".into(), "edit-accept".into()];
        let a = answer(
            Some(&p),
            Reply::ResumeValue(json!({"action": "refine", "refineFeedback": {"scope": "whole", "text": "shorter"}, "feedback": "too long", "other": 1})),
        )
        .unwrap();
        assert_eq!(
            (a.action.as_deref(), a.approved, a.comment.as_deref()),
            (Some("refine"), None, Some("too long"))
        );
        assert_eq!(
            a.value,
            Some(json!({"refineFeedback": {"scope": "whole", "text": "shorter"}}))
        );
        for (v, field) in [
            (json!({"action": "refine"}), "refineFeedback"),
            (
                json!({"action": "refine", "refineFeedback": {}}),
                "refineFeedback.scope",
            ),
            (
                json!({"action": "refine", "refineFeedback": {"scope": "everything"}}),
                "refineFeedback.scope",
            ),
            (json!({"action": "edit-accept"}), "editedArtifactData"),
        ] {
            let e = answer(Some(&p), Reply::ResumeValue(v)).unwrap_err();
            assert!(
                matches!(&e, AnswerError::ActionData { field: f, .. } if *f == field),
                "{e}"
            );
        }
        let a = answer(
            Some(&p),
            Reply::ResumeValue(json!({"action": "edit-accept", "editedArtifactData": {"x": 1}})),
        )
        .unwrap();
        assert_eq!(a.value, Some(json!({"editedArtifactData": {"x": 1}})));
    }

    #[test]
    fn clarification_answers_come_as_an_object_or_a_list_and_must_be_exactly_the_questions() {
        let p = pending("clarification", &["region", "tier"]);
        for v in [
            json!({"answers": {"region": "eu", "tier": "gold"}}),
            json!({"answers": [{"id": "tier", "answer": "gold"}, {"id": "region", "answer": "eu"}]}),
        ] {
            let a = answer(Some(&p), Reply::ResumeValue(v.clone())).unwrap();
            assert_eq!(
                a.value,
                Some(json!({"region": "eu", "tier": "gold"})),
                "{v}"
            );
            assert_eq!(
                (a.interrupt_id.as_str(), a.approved, a.action),
                ("i1", None, None)
            );
        }
        // The bare object is not the spec's body.
        for v in [
            json!({"region": "eu", "tier": "gold"}),
            json!("eu"),
            json!({"answers": "eu"}),
            json!({"answers": [{"id": "region"}]}),
        ] {
            let e = answer(Some(&p), Reply::ResumeValue(v.clone())).unwrap_err();
            assert_eq!(e, AnswerError::NotAnswers, "{v}");
            assert_eq!(e.field(), "resumeValue");
        }
        let e = answer(
            Some(&p),
            Reply::ResumeValue(json!({"answers": {"region": "eu", "zone": 1}})),
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
        // A custom interrupt takes any object as its resume value.
        let c = pending("custom", &[]);
        let a = answer(Some(&c), Reply::ResumeValue(json!({"done": true}))).unwrap();
        assert_eq!(a.value, Some(json!({"done": true})));
        assert_eq!(
            answer(Some(&c), Reply::ResumeValue(json!(1))).unwrap_err(),
            AnswerError::NotAnObject
        );
    }

    #[test]
    fn an_external_event_is_kept_whole_and_must_carry_the_correlation() {
        let mut p = pending("external-event", &[]);
        p.correlation = json!({"orderId": "o-1", "status": "completed"})
            .as_object()
            .cloned();
        // The body as sent, or the spec's {eventPayload}; members named like an approval or
        // clarification are the event's own.
        for v in [
            json!({"orderId": "o-1", "status": "completed", "action": "x", "answers": 1}),
            json!({"eventPayload": {"orderId": "o-1", "status": "completed"}}),
        ] {
            let a = answer(Some(&p), Reply::ResumeValue(v.clone())).unwrap();
            assert_eq!((a.value, a.approved, a.action), (Some(v), None, None));
        }
        assert_eq!(
            answer(
                Some(&p),
                Reply::ResumeValue(json!({"orderId": "different-order", "status": "completed"}))
            )
            .unwrap_err(),
            AnswerError::Mismatch(AnswerMismatch::Correlation {
                interrupt_id: "i1".into(),
                keys: vec!["orderId".into()]
            })
        );
        assert_eq!(
            answer(Some(&p), Reply::ResumeValue(json!("settled"))).unwrap_err(),
            AnswerError::NotAnObject
        );
        assert!(matches!(
            answer(Some(&p), Reply::Action("accept".into())),
            Err(AnswerError::Mismatch(AnswerMismatch::NotAnApproval { .. }))
        ));
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
            json!({"interruptId": "i1", "approved": false, "action": "reject", "comment": "too risky", "contentTrust": "untrusted", "nodeId": "n"})
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
        assert_eq!((a.value, a.node_id), (Some(json!({})), None));
        let a = answer(None, Reply::ResumeValue(json!({"action": "accept"}))).unwrap();
        assert_eq!(a.approved, Some(true));
        let a = answer(None, Reply::ResumeValue(json!({"answers": {"q": 1}}))).unwrap();
        assert_eq!(a.value, Some(json!({"q": 1})));
        assert_eq!(
            answer(None, Reply::ResumeValue(json!("yes"))).unwrap_err(),
            AnswerError::NotAnObject
        );
    }

    #[test]
    fn an_answer_records_who_and_when_and_an_unattributed_one_says_so() {
        let p = pending("approval", &[]);
        let a = answer(Some(&p), Reply::Decision(true))
            .unwrap()
            .answered("alice", "2026-05-18T10:00:00Z");
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            json!({"interruptId": "i1", "approved": true, "action": "accept", "nodeId": "n",
                   "answeredBy": "alice", "answeredAt": "2026-05-18T10:00:00Z"})
        );
        assert_eq!(a.principal(), "alice");
        // Written to spec.answers by hand (kubectl patch): no principal, and the old shape reads.
        let b: Answer =
            serde_json::from_value(json!({"interruptId": "i1", "approved": false})).unwrap();
        assert_eq!(
            (b.principal(), b.approval_action()),
            (UNATTRIBUTED, Some("reject"))
        );
    }
}
