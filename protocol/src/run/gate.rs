//! The nodes that wait for a person or an outside system — `core.approvalGate`,
//! `core.clarificationGate` and `core.interrupt` (kinds approval, clarification, custom,
//! external-event): what a gate waits for, read from
//! its config, the events that record the wait, and how an answer resolves it. Pure: the
//! worker emits what these return, under the step keys given here, so a replayed gate
//! publishes the same event ids.
//!
//! The wait (INT, FX): `node.suspended {kind, key}`, `interrupt.requested {kind, key, data,
//! requestedAt}`, then `approval.requested` or `clarification.requested`. The resolution:
//! `approval.received {action, decidedBy, decidedAt}` or `clarification.resolved {answers,
//! answeredBy}`, `interrupt.resolved`, `node.resumed`, then the node completes — or, for a
//! rejection, fails with `approval_rejected`.
//!
//! An external-event interrupt (`interrupt-profiles.md` §openwop-interrupt-external-event)
//! waits for an event whose body carries every key of its `data.correlation` with an equal
//! value ([`super::correlation`], the one rule the REST surface and the worker apply); the
//! node completes with the event as `outputs.eventPayload`.

use serde_json::{Map, Value, json};

use super::correlation::{EVENT_PAYLOAD, correlation_mismatch, external_event};
use super::nodes::{APPROVAL_GATE_TYPE_ID, CLARIFICATION_GATE_TYPE_ID, INTERRUPT_TYPE_ID};
use super::quorum::{self, Decision, Quorum};
use super::snapshot::Answer;
use super::status::DEFAULT_APPROVAL_ACTIONS;
use crate::envelope::ContentTrust;
use crate::events::{
    ApprovalReceived, ApprovalRequested, ClarificationRequested, ClarificationResolved, ErrorInfo,
    InterruptKind, InterruptRequested, InterruptResolved, NodeResumed, NodeSuspended, QuestionRef,
    event_id_for,
};

/// The error code of a rejected approval gate (spec silent; the node fails with it so an
/// `any_failed` / `all_complete` edge can route the rejection).
pub const APPROVAL_REJECTED: &str = "approval_rejected";

/// What a gate node waits for.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    pub kind: InterruptKind,
    /// `interrupt.requested.key` (default `{nodeId}/interrupt`).
    pub key: String,
    /// `interrupt.requested.data`: the approval data, the questions, or the custom kind.
    pub data: Value,
    pub approval: Option<ApprovalSpec>,
    pub questions: Vec<QuestionRef>,
    /// An approval's `timeoutMs`: unanswered this long after `requestedAt`, it times out
    /// rejected ([`Gate::timed_out`]).
    pub timeout_ms: Option<u64>,
}

/// What an approver is shown and may do.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalSpec {
    pub title: Option<String>,
    pub artifact_id: String,
    pub artifact_type: String,
    pub actions: Vec<String>,
    /// The accepts it needs and how rejects end it (`requiredApprovals`, `rejectionPolicy`).
    pub quorum: Quorum,
}

/// The reason recorded when an approval times out.
pub const TIMEOUT_REASON: &str = "timeout";

/// Members of an approval's config that say how the wait ends, not what the approver is
/// shown: they go to `interrupt.requested` (`timeoutMs`), not to its `data`.
const WAIT_CONFIG: [&str; 2] = ["timeoutMs", "onTimeout"];

/// Why a node's config names no gate (registration refuses these configs; the worker fails
/// the node with `node_config_invalid` should one reach it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("node type {0} is not a gate")]
    NotAGate(String),
    #[error("config.kind {0:?} is not one of approval, clarification, custom, external-event")]
    Kind(String),
    #[error("config{at} must list at least one question with an id and a question")]
    NoQuestions { at: &'static str },
}

/// The events that record a gate's wait.
#[derive(Debug, Clone, PartialEq)]
pub struct Wait {
    pub suspended: NodeSuspended,
    pub requested: InterruptRequested,
    pub approval: Option<ApprovalRequested>,
    pub clarification: Option<ClarificationRequested>,
}

/// The events that record an answer, and how the node ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    pub approval: Option<ApprovalReceived>,
    pub clarification: Option<ClarificationResolved>,
    pub resolved: InterruptResolved,
    pub resumed: NodeResumed,
    pub outcome: GateEnd,
}

/// How a resolved gate ends.
#[derive(Debug, Clone, PartialEq)]
pub enum GateEnd {
    /// It completes with these outputs.
    Completed(Value),
    /// It fails with this error (a rejection).
    Failed(ErrorInfo),
}

/// Why an answer in `spec.answers` cannot resolve a gate: the gate keeps waiting and the
/// worker records the reason (answers written to `spec.answers` by hand skip the REST and
/// `kubectl openwop resume` checks).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("untrusted_content_blocks_approval: an untrusted answer can never approve")]
    Untrusted,
    #[error("the answer names no approval action; this gate offers {}", .0.join(", "))]
    NoAction(Vec<String>),
    #[error("action {action:?} is not offered by this gate; it offers {}", allowed.join(", "))]
    ActionNotOffered {
        action: String,
        allowed: Vec<String>,
    },
    #[error("the answer must be an object answering every question ({})", .0.join(", "))]
    Answers(Vec<String>),
    #[error("correlation_mismatch: the event does not carry the correlation keys {} with the values this interrupt waits for", .0.join(", "))]
    Correlation(Vec<String>),
}

/// The interrupt id of a gate's wait at node attempt `attempt`: deterministic, so a replayed
/// worker waits on (and finds the answer to) the same interrupt.
pub fn interrupt_id(run_id: &str, node_id: &str, attempt: u32) -> String {
    event_id_for(run_id, &step(node_id, attempt, "")).replacen("evt-", "int-", 1)
}

/// The `artifactType` of a tool call's approval: the approver is shown the call itself.
pub const TOOL_CALL_ARTIFACT: &str = "tool-call";

/// The interrupt id of the approval a tool call at `step` waits for (deterministic, like a
/// gate's: a replayed node waits on, and finds the answer to, the same interrupt).
pub fn tool_call_interrupt_id(run_id: &str, step: &crate::tools::ToolStep) -> String {
    event_id_for(run_id, &format!("{}/approval", step.key())).replacen("evt-", "int-", 1)
}

/// The step key of one of a tool call approval's events.
pub fn tool_call_step(step: &crate::tools::ToolStep, suffix: &str) -> String {
    format!("{}/approval{suffix}", step.key())
}

/// The approval a call of a tool that needs one waits for (`needs_approval`): an approval
/// gate whose artifact is the call — the tool, its server, tier and the (redacted)
/// arguments the approver decides on — with the gates' actions (accept / reject). It
/// records and resolves like any approval gate, so every answer path (REST, `kubectl openwop
/// resume`, the web UI) answers it; accept makes the call, reject tells the model it was
/// refused. The tool's own output never reaches this gate: only a person's answer does.
pub fn tool_call_approval(node_id: &str, called: &crate::tools::ToolCalled) -> Gate {
    let tool = called.tool_id.as_deref().unwrap_or(&called.base.tool_name);
    let tier = called.safety_tier.map(|t| t.as_str());
    let mut data = json!({
        "title": format!("Call tool {tool}?"),
        "artifactId": called.base.call_id,
        "artifactType": TOOL_CALL_ARTIFACT,
        "toolCall": {
            "callId": called.base.call_id,
            "toolName": called.base.tool_name,
            "toolId": called.tool_id,
            "server": called.server,
            "safetyTier": tier,
            "arguments": called.base.inputs,
            "argsHash": called.args_hash,
        },
    });
    let approval = approval_spec(node_id, &data);
    data["actions"] = json!(approval.actions);
    Gate {
        kind: InterruptKind::Approval,
        key: format!("{node_id}/tool/{}", called.base.call_id),
        data,
        approval: Some(approval),
        questions: vec![],
        timeout_ms: None,
    }
}

/// The key of a gate's interrupt whose config names none (`interrupt.requested.key`).
pub fn default_key(node_id: &str) -> String {
    format!("{node_id}/interrupt")
}

/// The step key of one of a gate's events (`{nodeId}/interrupt/{attempt}{suffix}`).
pub fn step(node_id: &str, attempt: u32, suffix: &str) -> String {
    format!("{node_id}/interrupt/{attempt}{suffix}")
}

fn str_of<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn approval_spec(node_id: &str, data: &Value) -> ApprovalSpec {
    let actions: Vec<String> = data
        .get("actions")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| DEFAULT_APPROVAL_ACTIONS.map(str::to_owned).to_vec());
    ApprovalSpec {
        title: str_of(data, "title").map(str::to_owned),
        artifact_id: str_of(data, "artifactId").unwrap_or(node_id).to_owned(),
        artifact_type: str_of(data, "artifactType")
            .unwrap_or("approval")
            .to_owned(),
        actions,
        quorum: Quorum::of_data(data),
    }
}

fn questions_of(data: &Value, at: &'static str) -> Result<Vec<QuestionRef>, GateError> {
    let qs: Vec<QuestionRef> = data
        .get("questions")
        .and_then(Value::as_array)
        .map(|qs| {
            qs.iter()
                .filter_map(|q| {
                    Some(QuestionRef {
                        id: str_of(q, "id")?.to_owned(),
                        question: str_of(q, "question")?.to_owned(),
                        schema: q.get("schema").cloned(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    if qs.is_empty() {
        return Err(GateError::NoQuestions { at });
    }
    Ok(qs)
}

impl Gate {
    /// The gate a node of `type_id` with `config` is.
    pub fn of(node_id: &str, type_id: &str, config: &Value) -> Result<Gate, GateError> {
        let key = |c: &Value| {
            str_of(c, "key")
                .map(str::to_owned)
                .unwrap_or_else(|| default_key(node_id))
        };
        let (kind, data) = match type_id {
            APPROVAL_GATE_TYPE_ID => (InterruptKind::Approval, config),
            CLARIFICATION_GATE_TYPE_ID => (InterruptKind::Clarification, config),
            INTERRUPT_TYPE_ID => {
                let kind = match str_of(config, "kind").unwrap_or_default() {
                    "approval" => InterruptKind::Approval,
                    "clarification" => InterruptKind::Clarification,
                    "custom" => InterruptKind::Custom,
                    "external-event" => InterruptKind::ExternalEvent,
                    other => return Err(GateError::Kind(other.to_owned())),
                };
                const NULL: &Value = &Value::Null;
                (kind, config.get("data").unwrap_or(NULL))
            }
            other => return Err(GateError::NotAGate(other.to_owned())),
        };
        let at = if type_id == INTERRUPT_TYPE_ID {
            ".data.questions"
        } else {
            ".questions"
        };
        let mut timeout_ms = None;
        let (approval, questions, data) = match kind {
            InterruptKind::Approval => {
                let a = approval_spec(node_id, data);
                let mut d = data.as_object().cloned().unwrap_or_default();
                timeout_ms = d.get("timeoutMs").and_then(Value::as_u64);
                for k in WAIT_CONFIG {
                    d.remove(k);
                }
                d.insert("artifactId".into(), json!(a.artifact_id));
                d.insert("artifactType".into(), json!(a.artifact_type));
                d.insert("actions".into(), json!(a.actions));
                (Some(a), vec![], Value::Object(d))
            }
            InterruptKind::Clarification => {
                let qs = questions_of(data, at)?;
                (None, qs.clone(), json!({"questions": qs_json(&qs)}))
            }
            _ => (None, vec![], data.clone()),
        };
        Ok(Gate {
            kind,
            key: key(config),
            data,
            approval,
            questions,
            timeout_ms,
        })
    }

    /// The events that record the wait at `interrupt_id`, requested at `requested_at`.
    pub fn wait(&self, node_id: &str, interrupt_id: &str, requested_at: &str) -> Wait {
        Wait {
            suspended: NodeSuspended {
                node_id: node_id.to_owned(),
                interrupt_id: interrupt_id.to_owned(),
                kind: Some(self.kind),
                reason: None,
                agent_id: None,
                threshold: None,
                observed: None,
            },
            requested: InterruptRequested {
                interrupt_id: interrupt_id.to_owned(),
                node_id: node_id.to_owned(),
                kind: self.kind,
                payload: None,
                key: Some(self.key.clone()),
                data: Some(self.data.clone()),
                requested_at: Some(requested_at.to_owned()),
                timeout_ms: self.timeout_ms,
            },
            approval: self.approval.as_ref().map(|a| ApprovalRequested {
                node_id: node_id.to_owned(),
                interrupt_id: interrupt_id.to_owned(),
                artifact_id: a.artifact_id.clone(),
                artifact_type: a.artifact_type.clone(),
                title: a.title.clone(),
                actions: a.actions.clone(),
                required_approvals: Some(a.quorum.required),
                rejection_policy: a
                    .quorum
                    .is_quorum()
                    .then(|| a.quorum.policy.as_str().to_owned()),
            }),
            clarification: (self.kind == InterruptKind::Clarification).then(|| {
                ClarificationRequested {
                    node_id: node_id.to_owned(),
                    questions: self.questions.clone(),
                    interrupt_id: Some(interrupt_id.to_owned()),
                }
            }),
        }
    }

    /// How `answer` resolves the wait at `interrupt_id`, or why it cannot.
    pub fn resolve(
        &self,
        node_id: &str,
        interrupt_id: &str,
        answer: &Answer,
    ) -> Result<Resolution, Refusal> {
        let resolved_by = Some(answer.principal().to_owned());
        let resolved_at = answer.answered_at.clone();
        let (approval, clarification, resume_value, outcome) = match self.kind {
            InterruptKind::Approval => {
                let allowed = self
                    .approval
                    .as_ref()
                    .map(|a| a.actions.clone())
                    .unwrap_or_else(|| DEFAULT_APPROVAL_ACTIONS.map(str::to_owned).to_vec());
                let received = approval_received(node_id, interrupt_id, answer, &allowed)?;
                let outcome = approval_outcome(node_id, &received);
                let resume = json!({"action": received.action});
                (Some(received), None, resume, outcome)
            }
            InterruptKind::Clarification => {
                let ids: Vec<String> = self.questions.iter().map(|q| q.id.clone()).collect();
                let answers = answer
                    .value
                    .as_ref()
                    .and_then(Value::as_object)
                    .filter(|m| ids.iter().all(|id| m.contains_key(id)))
                    .ok_or_else(|| Refusal::Answers(ids.clone()))?;
                let answers = Value::Object(answers.clone());
                let resolved = ClarificationResolved {
                    node_id: node_id.to_owned(),
                    answers: answers.clone(),
                    interrupt_id: Some(interrupt_id.to_owned()),
                    answered_by: resolved_by.clone(),
                    answered_at: resolved_at.clone(),
                };
                let outcome = GateEnd::Completed(
                    json!({"answers": answers, "answeredBy": answer.principal()}),
                );
                (None, Some(resolved), json!({"answers": answers}), outcome)
            }
            InterruptKind::ExternalEvent => {
                let value = answer.value.clone().unwrap_or(Value::Object(Map::new()));
                let event = external_event(&value).clone();
                if let Some(c) = self.data.get("correlation").and_then(Value::as_object) {
                    let keys = correlation_mismatch(c, &event);
                    if !keys.is_empty() {
                        return Err(Refusal::Correlation(keys));
                    }
                }
                let mut out = Map::new();
                out.insert(EVENT_PAYLOAD.into(), event);
                if let Some(t) = self.data.get("eventType") {
                    out.insert("eventType".into(), t.clone());
                }
                out.insert("answeredBy".into(), json!(answer.principal()));
                (None, None, value, GateEnd::Completed(Value::Object(out)))
            }
            _ => {
                let value = answer.value.clone().unwrap_or(Value::Object(Map::new()));
                let outcome = GateEnd::Completed(
                    json!({"resumeValue": value, "answeredBy": answer.principal()}),
                );
                (None, None, value, outcome)
            }
        };
        let resolved = InterruptResolved {
            node_id: node_id.to_owned(),
            interrupt_id: interrupt_id.to_owned(),
            kind: Some(self.kind),
            resume_value: Some(resume_value.clone()),
            resolved_by,
            resolved_at,
            outcome: None,
            reason: None,
            action: None,
            refine_feedback: None,
            edited_artifact_data: None,
        };
        Ok(Resolution {
            resolved: match &approval {
                Some(received) => resolved.carrying(received),
                None => resolved,
            },
            approval,
            clarification,
            resumed: NodeResumed {
                node_id: node_id.to_owned(),
                interrupt_id: Some(interrupt_id.to_owned()),
                resume_value: Some(resume_value),
            },
            outcome,
        })
    }
}

/// How a quorum approval's votes resolved it: one `approval.received` per counted vote (with
/// its `voter`), then the resolution the deciding vote gives.
#[derive(Debug, Clone, PartialEq)]
pub struct QuorumResolution {
    pub votes: Vec<ApprovalReceived>,
    pub resolution: Resolution,
}

impl Gate {
    /// The quorum of an approval gate that needs more than one accept.
    pub fn quorum(&self) -> Option<Quorum> {
        self.approval
            .as_ref()
            .map(|a| a.quorum)
            .filter(Quorum::is_quorum)
    }

    /// How the votes among `answers` (the answers to `interrupt_id`, in `spec.answers`
    /// order) resolve this quorum approval, or `None` while they do not decide it
    /// ([`quorum::tally`]).
    pub fn resolve_votes<'a>(
        &self,
        node_id: &str,
        interrupt_id: &str,
        answers: impl IntoIterator<Item = &'a Answer>,
    ) -> Option<QuorumResolution> {
        let a = self.approval.as_ref()?;
        let t = quorum::tally(a.quorum, &a.actions, answers);
        let deciding = t.deciding()?;
        let votes = t
            .votes
            .iter()
            .filter_map(|v| {
                let mut r = approval_received(node_id, interrupt_id, v.answer, &a.actions).ok()?;
                r.voter = Some(v.voter.clone());
                Some(r)
            })
            .collect();
        let mut resolution = self.resolve(node_id, interrupt_id, deciding.answer).ok()?;
        let progress =
            json!({"approvals": t.accepts, "rejections": t.rejects, "required": a.quorum.required});
        if let Some(Value::Object(m)) = resolution.resolved.resume_value.as_mut() {
            m.insert("quorum".into(), progress.clone());
        }
        resolution.resumed.resume_value = resolution.resolved.resume_value.clone();
        match &mut resolution.outcome {
            GateEnd::Completed(Value::Object(out)) => {
                out.insert("quorum".into(), progress);
            }
            GateEnd::Failed(e) => {
                e.message = format!(
                    "the approval at node {node_id} was rejected by {} of its voters ({})",
                    t.rejects,
                    a.quorum.policy.as_str()
                );
                if let Some(Value::Object(d)) = e.details.as_mut() {
                    d.insert("quorum".into(), progress);
                }
            }
            GateEnd::Completed(_) => {}
        }
        debug_assert_eq!(
            t.decision == Some(Decision::Rejected),
            matches!(resolution.outcome, GateEnd::Failed(_))
        );
        resolution.approval = None;
        Some(QuorumResolution { votes, resolution })
    }

    /// When an approval with `timeoutMs` times out, given when it was requested (RFC 3339).
    pub fn wake_at(&self, requested_at: &str) -> Option<String> {
        let ms = self.timeout_ms?;
        let at = super::waits::parse_time(requested_at)?;
        Some(super::waits::rfc3339_ms(
            at + time::Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX)),
        ))
    }

    /// How an approval that nobody decided by `wake_at` ends (RFC 0093, RFC 0223): it
    /// resolves rejected with reason `timeout` — whatever `onTimeout` says, a timeout never
    /// grants — and the node fails with [`APPROVAL_REJECTED`].
    pub fn timed_out(&self, node_id: &str, interrupt_id: &str, wake_at: &str) -> Resolution {
        let resume = json!({"action": "timeout", "decision": "rejected", "reason": TIMEOUT_REASON});
        let received = ApprovalReceived {
            node_id: node_id.to_owned(),
            action: "timeout".into(),
            interrupt_id: Some(interrupt_id.to_owned()),
            decided_by: None,
            decided_at: Some(wake_at.to_owned()),
            comment: None,
            refine_feedback: None,
            edited_artifact_data: None,
            voter: None,
            decision: Some("rejected".into()),
            reason: Some(TIMEOUT_REASON.into()),
        };
        Resolution {
            clarification: None,
            resolved: InterruptResolved {
                node_id: node_id.to_owned(),
                interrupt_id: interrupt_id.to_owned(),
                kind: Some(self.kind),
                resume_value: Some(resume.clone()),
                resolved_by: None,
                resolved_at: Some(wake_at.to_owned()),
                outcome: Some("rejected".into()),
                reason: Some(TIMEOUT_REASON.into()),
                action: None,
                refine_feedback: None,
                edited_artifact_data: None,
            }
            .carrying(&received),
            approval: Some(received),
            resumed: NodeResumed {
                node_id: node_id.to_owned(),
                interrupt_id: Some(interrupt_id.to_owned()),
                resume_value: Some(resume),
            },
            outcome: GateEnd::Failed(ErrorInfo {
                code: APPROVAL_REJECTED.into(),
                message: format!(
                    "the approval at node {node_id} timed out after {} ms without a decision",
                    self.timeout_ms.unwrap_or_default()
                ),
                details: Some(json!({"reason": TIMEOUT_REASON, "timedOutAt": wake_at})),
                retryable: Some(false),
            }),
        }
    }
}

/// Whether `answer` counts against an approval that times out at `wake_at`: it was given
/// by then (an answer written by hand, with no time, always counts).
pub fn answered_in_time(answer: &Answer, wake_at: &str) -> bool {
    let (Some(at), Some(wake)) = (
        answer
            .answered_at
            .as_deref()
            .and_then(super::waits::parse_time),
        super::waits::parse_time(wake_at),
    ) else {
        return true;
    };
    at <= wake
}

fn qs_json(qs: &[QuestionRef]) -> Value {
    serde_json::to_value(qs).unwrap_or(Value::Null)
}

/// `approval.received` for `answer` to an approval that offers `allowed`, or why the answer
/// cannot decide it (no action, an action not offered, an untrusted approval). Shared by the
/// approval gates and CP-1's low-confidence approval.
pub fn approval_received(
    node_id: &str,
    interrupt_id: &str,
    answer: &Answer,
    allowed: &[String],
) -> Result<ApprovalReceived, Refusal> {
    let action = answer
        .approval_action()
        .ok_or_else(|| Refusal::NoAction(allowed.to_vec()))?;
    if !allowed.iter().any(|a| a == action) {
        return Err(Refusal::ActionNotOffered {
            action: action.to_owned(),
            allowed: allowed.to_vec(),
        });
    }
    let untrusted = answer.content_trust.as_deref() == Some(ContentTrust::Untrusted.as_str());
    if action != "reject"
        && crate::trust::blocks_approval(
            if untrusted {
                ContentTrust::Untrusted
            } else {
                ContentTrust::Trusted
            },
            true,
        )
    {
        return Err(Refusal::Untrusted);
    }
    let extra = |k: &str| answer.value.as_ref().and_then(|v| v.get(k)).cloned();
    Ok(ApprovalReceived {
        node_id: node_id.to_owned(),
        action: action.to_owned(),
        interrupt_id: Some(interrupt_id.to_owned()),
        decided_by: Some(answer.principal().to_owned()),
        decided_at: answer.answered_at.clone(),
        comment: answer.comment.clone(),
        refine_feedback: extra("refineFeedback"),
        edited_artifact_data: extra("editedArtifactData"),
        voter: None,
        decision: None,
        reason: None,
    })
}

/// How an approval gate ends once `received` is recorded: `reject` fails it with
/// [`APPROVAL_REJECTED`]; any other action completes it with the decision as its outputs.
pub fn approval_outcome(node_id: &str, received: &ApprovalReceived) -> GateEnd {
    let by = received.decided_by.as_deref().unwrap_or_default();
    if received.action == "reject" {
        return GateEnd::Failed(ErrorInfo {
            code: APPROVAL_REJECTED.into(),
            message: format!("the approval at node {node_id} was rejected by {by}"),
            details: Some(json!({"decidedBy": by, "comment": received.comment})),
            retryable: Some(false),
        });
    }
    let mut out = Map::new();
    out.insert("action".into(), json!(received.action));
    out.insert("decidedBy".into(), json!(by));
    for (k, v) in [
        ("decidedAt", received.decided_at.clone().map(Value::String)),
        ("comment", received.comment.clone().map(Value::String)),
        ("refineFeedback", received.refine_feedback.clone()),
        ("editedArtifactData", received.edited_artifact_data.clone()),
    ] {
        if let Some(v) = v {
            out.insert(k.into(), v);
        }
    }
    GateEnd::Completed(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema;

    fn fixture_gate() -> Gate {
        Gate::of(
            "gate",
            APPROVAL_GATE_TYPE_ID,
            &json!({"title": "Conformance approval", "description": "please accept", "actions": ["accept", "reject"]}),
        )
        .unwrap()
    }

    fn answer(v: Value) -> Answer {
        serde_json::from_value(v).unwrap()
    }

    /// Every payload a gate emits passes its event schema.
    fn valid(t: &str, p: &impl serde::Serialize) -> Value {
        let v = serde_json::to_value(p).unwrap();
        if let Some(Err(issues)) = schema::validate_event_payload(t, &v) {
            panic!("{t}: {issues:?} in {v}");
        }
        v
    }

    /// A tool call's approval shows the call (tool, server, tier, redacted arguments), waits
    /// like an approval gate under an id of its own step, and resolves like one: accept
    /// completes, reject fails, an untrusted answer never approves.
    #[test]
    fn a_tool_call_waits_for_an_approval_that_shows_the_call() {
        use crate::redact::Redactor;
        use crate::tools::policy::{OfferedTool, SafetyTier};
        use crate::tools::{ToolCalled, ToolStep};
        let offered = OfferedTool {
            model_name: "tickets__close".into(),
            server: "tickets".into(),
            tool: "close".into(),
            description: None,
            input_schema: json!({"type": "object"}),
            tier: SafetyTier::Write,
            needs_approval: true,
        };
        let step = ToolStep::new("agent:t0", 0, 1);
        let redactor = Redactor::new(vec![("k".into(), "s3cr3t-value".into())]);
        let called = ToolCalled::new(
            "host:agent",
            &step,
            "tickets__close",
            &json!({"id": 7, "note": "token s3cr3t-value"}),
            &redactor,
            Some(&offered),
        );
        let g = tool_call_approval("agent", &called);
        let id = tool_call_interrupt_id("run-1", &step);
        assert!(id.starts_with("int-"));
        assert_ne!(
            id,
            tool_call_interrupt_id("run-1", &ToolStep::new("agent:t0", 0, 0))
        );
        let w = g.wait("agent", &id, "2026-12-08T10:00:00Z");
        let requested = valid("interrupt.requested", &w.requested);
        assert_eq!(requested["data"]["artifactType"], TOOL_CALL_ARTIFACT);
        assert_eq!(requested["data"]["toolCall"]["toolId"], "mcp:tickets/close");
        assert_eq!(requested["data"]["toolCall"]["safetyTier"], "write");
        assert_eq!(requested["data"]["toolCall"]["arguments"]["id"], 7);
        assert!(
            !requested.to_string().contains("s3cr3t-value"),
            "the approver sees redacted arguments: {requested}"
        );
        let approval = valid("approval.requested", w.approval.as_ref().unwrap());
        assert_eq!(approval["title"], "Call tool mcp:tickets/close?");
        assert_eq!(approval["actions"], json!(["accept", "reject"]));
        let accept = answer(json!({"interruptId": id, "action": "accept", "answeredBy": "ana"}));
        assert!(matches!(
            g.resolve("agent", &id, &accept).unwrap().outcome,
            GateEnd::Completed(_)
        ));
        let reject = answer(json!({"interruptId": id, "action": "reject"}));
        assert!(matches!(
            g.resolve("agent", &id, &reject).unwrap().outcome,
            GateEnd::Failed(_)
        ));
        let untrusted =
            answer(json!({"interruptId": id, "action": "accept", "contentTrust": "untrusted"}));
        assert_eq!(
            g.resolve("agent", &id, &untrusted).unwrap_err(),
            Refusal::Untrusted
        );
    }

    #[test]
    fn an_approval_gate_waits_with_the_spec_events() {
        let g = fixture_gate();
        let id = interrupt_id("run-1", "gate", 0);
        assert!(id.starts_with("int-") && id != interrupt_id("run-1", "gate", 1));
        let w = g.wait("gate", &id, "2026-05-18T10:00:00Z");
        assert_eq!(
            valid("node.suspended", &w.suspended),
            json!({"nodeId": "gate", "interruptId": id, "kind": "approval"})
        );
        assert_eq!(
            valid("interrupt.requested", &w.requested),
            json!({"interruptId": id, "nodeId": "gate", "kind": "approval", "key": "gate/interrupt",
                   "requestedAt": "2026-05-18T10:00:00Z",
                   "data": {"title": "Conformance approval", "description": "please accept",
                            "actions": ["accept", "reject"], "artifactId": "gate", "artifactType": "approval"}})
        );
        assert_eq!(
            valid("approval.requested", w.approval.as_ref().unwrap()),
            json!({"nodeId": "gate", "interruptId": id, "artifactId": "gate", "artifactType": "approval",
                   "title": "Conformance approval", "actions": ["accept", "reject"], "requiredApprovals": 1})
        );
        assert!(w.clarification.is_none());
    }

    #[test]
    fn accept_completes_with_who_decided_and_reject_fails() {
        let g = fixture_gate();
        let r = g
            .resolve(
                "gate",
                "i1",
                &answer(json!({"interruptId": "i1", "action": "accept", "answeredBy": "alice", "answeredAt": "2026-05-18T10:01:00Z", "comment": "ok"})),
            )
            .unwrap();
        assert_eq!(
            valid("approval.received", r.approval.as_ref().unwrap()),
            json!({"nodeId": "gate", "interruptId": "i1", "action": "accept", "decidedBy": "alice",
                   "decidedAt": "2026-05-18T10:01:00Z", "comment": "ok"})
        );
        assert_eq!(
            valid("interrupt.resolved", &r.resolved),
            json!({"nodeId": "gate", "interruptId": "i1", "kind": "approval", "resumeValue": {"action": "accept"},
                   "resolvedBy": "alice", "resolvedAt": "2026-05-18T10:01:00Z", "action": "accept"})
        );
        valid("node.resumed", &r.resumed);
        assert_eq!(
            r.outcome,
            GateEnd::Completed(
                json!({"action": "accept", "decidedBy": "alice", "decidedAt": "2026-05-18T10:01:00Z", "comment": "ok"})
            )
        );
        // A hand-written `approved: false` (kubectl patch) rejects, unattributed.
        let r = g
            .resolve(
                "gate",
                "i1",
                &answer(json!({"interruptId": "i1", "approved": false})),
            )
            .unwrap();
        let GateEnd::Failed(e) = r.outcome else {
            panic!("{:?}", r.outcome)
        };
        assert_eq!(
            (e.code.as_str(), e.retryable),
            (APPROVAL_REJECTED, Some(false))
        );
        assert!(e.message.contains("unattributed"), "{}", e.message);
        assert_eq!(r.approval.unwrap().action, "reject");
    }

    /// RFC 0183: the resolution records the action the approver took and, for `refine` /
    /// `edit-accept`, the data that action means nothing without.
    #[test]
    fn refine_and_edit_accept_are_recorded_on_the_resolution_with_their_data() {
        let g = Gate::of(
            "gate",
            APPROVAL_GATE_TYPE_ID,
            &json!({"title": "t", "actions": ["accept", "reject", "refine", "edit-accept"]}),
        )
        .unwrap();
        let feedback = json!({"scope": "whole", "text": "tighten the summary"});
        let r = g
            .resolve(
                "gate",
                "i1",
                &answer(
                    json!({"interruptId": "i1", "action": "refine", "answeredBy": "bob",
                               "value": {"refineFeedback": feedback}}),
                ),
            )
            .unwrap();
        let resolved = valid("interrupt.resolved", &r.resolved);
        assert_eq!(
            (&resolved["action"], &resolved["refineFeedback"]),
            (&json!("refine"), &feedback)
        );
        let received = valid("approval.received", r.approval.as_ref().unwrap());
        assert_eq!(received["refineFeedback"], feedback);
        let GateEnd::Completed(out) = &r.outcome else {
            panic!("{:?}", r.outcome)
        };
        assert_eq!(out["refineFeedback"], feedback);
        let r = g
            .resolve(
                "gate",
                "i1",
                &answer(json!({"interruptId": "i1", "action": "edit-accept",
                               "value": {"editedArtifactData": {"summary": "short"}}})),
            )
            .unwrap();
        let resolved = valid("interrupt.resolved", &r.resolved);
        assert_eq!(
            (&resolved["action"], &resolved["editedArtifactData"]),
            (&json!("edit-accept"), &json!({"summary": "short"}))
        );
        // The event schema holds the pairing: a refine recorded without its feedback is invalid.
        let bare = json!({"nodeId": "gate", "interruptId": "i1", "action": "refine"});
        assert!(matches!(
            schema::validate_event_payload("interrupt.resolved", &bare),
            Some(Err(_))
        ));
    }

    #[test]
    fn answers_that_cannot_decide_keep_the_gate_waiting() {
        let g = fixture_gate();
        let refused = |v: Value| g.resolve("gate", "i1", &answer(v)).unwrap_err();
        assert_eq!(
            refused(json!({"interruptId": "i1", "value": {"q": 1}})),
            Refusal::NoAction(vec!["accept".into(), "reject".into()])
        );
        assert!(matches!(
            refused(json!({"interruptId": "i1", "action": "refine"})),
            Refusal::ActionNotOffered { .. }
        ));
        assert_eq!(
            refused(json!({"interruptId": "i1", "action": "accept", "contentTrust": "untrusted"})),
            Refusal::Untrusted
        );
        // An untrusted rejection is still a rejection.
        assert!(
            g.resolve(
                "gate",
                "i1",
                &answer(
                    json!({"interruptId": "i1", "action": "reject", "contentTrust": "untrusted"})
                )
            )
            .is_ok()
        );
    }

    fn quorum_gate() -> Gate {
        Gate::of(
            "gate",
            APPROVAL_GATE_TYPE_ID,
            &json!({"title": "q", "actions": ["accept", "reject"], "requiredApprovals": 3, "rejectionPolicy": "majority"}),
        )
        .unwrap()
    }

    fn vote(voter: &str, action: &str) -> Answer {
        answer(
            json!({"interruptId": "i1", "action": action, "value": {"voter": voter},
                      "answeredBy": "system:serviceaccount:suite:suite", "answeredAt": "2026-05-18T10:01:00Z"}),
        )
    }

    #[test]
    fn a_quorum_gate_says_so_and_resolves_once_its_votes_decide() {
        let g = quorum_gate();
        assert_eq!(
            g.quorum(),
            Some(Quorum {
                required: 3,
                policy: quorum::RejectionPolicy::Majority
            })
        );
        let w = g.wait("gate", "i1", "2026-05-18T10:00:00Z");
        let req = valid("approval.requested", w.approval.as_ref().unwrap());
        assert_eq!(
            (&req["requiredApprovals"], &req["rejectionPolicy"]),
            (&json!(3), &json!("majority"))
        );
        let two = [vote("a1", "accept"), vote("a2", "accept")];
        assert_eq!(g.resolve_votes("gate", "i1", &two), None);
        let three = [two[0].clone(), two[1].clone(), vote("a3", "accept")];
        let q = g.resolve_votes("gate", "i1", &three).unwrap();
        let voters: Vec<_> = q.votes.iter().map(|v| v.voter.clone().unwrap()).collect();
        assert_eq!(voters, ["a1", "a2", "a3"]);
        for v in &q.votes {
            valid("approval.received", v);
        }
        assert_eq!(q.resolution.approval, None);
        assert_eq!(
            valid("interrupt.resolved", &q.resolution.resolved)["resumeValue"],
            json!({"action": "accept", "quorum": {"approvals": 3, "rejections": 0, "required": 3}})
        );
        let GateEnd::Completed(out) = &q.resolution.outcome else {
            panic!("{:?}", q.resolution.outcome)
        };
        assert_eq!(out["quorum"]["approvals"], 3);
        // Two rejects of three: majority rejection fails the gate as a plain reject does.
        let r = [
            vote("r1", "reject"),
            vote("a1", "accept"),
            vote("r2", "reject"),
        ];
        let q = g.resolve_votes("gate", "i1", &r).unwrap();
        let GateEnd::Failed(e) = &q.resolution.outcome else {
            panic!("{:?}", q.resolution.outcome)
        };
        assert_eq!(e.code, APPROVAL_REJECTED);
        assert!(
            e.message.contains("2 of its voters (majority)"),
            "{}",
            e.message
        );
        // A plain gate is no quorum.
        assert_eq!(fixture_gate().quorum(), None);
    }

    #[test]
    fn an_approval_with_timeout_ms_records_it_and_times_out_rejected() {
        let g = Gate::of(
            "gate",
            APPROVAL_GATE_TYPE_ID,
            &json!({"title": "t", "actions": ["accept", "reject"], "timeoutMs": 1500, "onTimeout": "approve"}),
        )
        .unwrap();
        let w = g.wait("gate", "i1", "2026-05-18T10:00:00Z");
        let req = valid("interrupt.requested", &w.requested);
        assert_eq!(req["timeoutMs"], 1500);
        // How the wait ends is not what the approver is shown.
        assert!(req["data"].get("timeoutMs").is_none() && req["data"].get("onTimeout").is_none());
        let at = g.wake_at("2026-05-18T10:00:00Z").unwrap();
        assert_eq!(at, "2026-05-18T10:00:01.5Z");
        assert_eq!(fixture_gate().wake_at("2026-05-18T10:00:00Z"), None);
        let r = g.timed_out("gate", "i1", &at);
        assert_eq!(
            valid("approval.received", r.approval.as_ref().unwrap()),
            json!({"nodeId": "gate", "interruptId": "i1", "action": "timeout", "decidedAt": at,
                   "decision": "rejected", "reason": "timeout"})
        );
        valid("interrupt.resolved", &r.resolved);
        let GateEnd::Failed(e) = r.outcome else {
            panic!()
        };
        assert_eq!(
            (e.code.as_str(), e.details.unwrap()["reason"].clone()),
            (APPROVAL_REJECTED, json!("timeout"))
        );
        // An answer given by the wake time counts; one after it does not.
        let mut a = vote("a", "accept");
        a.answered_at = Some("2026-05-18T10:00:01.400Z".into());
        assert!(answered_in_time(&a, &at));
        a.answered_at = Some("2026-05-18T10:00:01.600Z".into());
        assert!(!answered_in_time(&a, &at));
        a.answered_at = None;
        assert!(answered_in_time(&a, &at));
    }

    #[test]
    fn a_clarification_gate_asks_and_completes_with_the_answers() {
        let g = Gate::of(
            "ask",
            CLARIFICATION_GATE_TYPE_ID,
            &json!({"questions": [{"id": "q1", "question": "What is your favorite color?"}]}),
        )
        .unwrap();
        let w = g.wait("ask", "i2", "t");
        assert_eq!(w.requested.kind, InterruptKind::Clarification);
        assert_eq!(
            valid("clarification.requested", w.clarification.as_ref().unwrap()),
            json!({"nodeId": "ask", "interruptId": "i2", "questions": [{"id": "q1", "question": "What is your favorite color?"}]})
        );
        let r = g
            .resolve(
                "ask",
                "i2",
                &answer(json!({"interruptId": "i2", "value": {"q1": "blue"}, "answeredBy": "bob"})),
            )
            .unwrap();
        assert_eq!(
            valid("clarification.resolved", r.clarification.as_ref().unwrap()),
            json!({"nodeId": "ask", "interruptId": "i2", "answers": {"q1": "blue"}, "answeredBy": "bob"})
        );
        assert_eq!(
            r.outcome,
            GateEnd::Completed(json!({"answers": {"q1": "blue"}, "answeredBy": "bob"}))
        );
        assert_eq!(
            g.resolve(
                "ask",
                "i2",
                &answer(json!({"interruptId": "i2", "value": {}}))
            )
            .unwrap_err(),
            Refusal::Answers(vec!["q1".into()])
        );
    }

    #[test]
    fn core_interrupt_reads_its_kind_and_data() {
        let g = Gate::of(
            "i",
            INTERRUPT_TYPE_ID,
            &json!({"kind": "custom", "key": "order-42", "data": {"customKind": "payment", "payload": {"amount": 3}}}),
        )
        .unwrap();
        assert_eq!(
            (g.kind, g.key.as_str()),
            (InterruptKind::Custom, "order-42")
        );
        let r = g
            .resolve(
                "i",
                "i3",
                &answer(json!({"interruptId": "i3", "value": {"paid": true}})),
            )
            .unwrap();
        assert_eq!(
            r.outcome,
            GateEnd::Completed(
                json!({"resumeValue": {"paid": true}, "answeredBy": crate::run::snapshot::UNATTRIBUTED})
            )
        );
        let a = Gate::of(
            "i",
            INTERRUPT_TYPE_ID,
            &json!({"kind": "approval", "data": {"title": "ship?", "actions": ["accept", "reject", "refine"]}}),
        )
        .unwrap();
        assert_eq!(
            a.approval.unwrap().actions,
            ["accept", "reject", "refine"].map(String::from)
        );
        assert_eq!(
            Gate::of(
                "i",
                INTERRUPT_TYPE_ID,
                &json!({"kind": "clarification", "data": {}})
            ),
            Err(GateError::NoQuestions {
                at: ".data.questions"
            })
        );
        assert_eq!(
            Gate::of(
                "i",
                INTERRUPT_TYPE_ID,
                &json!({"kind": "conversation.start", "data": {}})
            ),
            Err(GateError::Kind("conversation.start".into()))
        );
        assert_eq!(
            Gate::of("i", "core.noop", &json!({})),
            Err(GateError::NotAGate("core.noop".into()))
        );
    }

    fn order_gate() -> Gate {
        Gate::of(
            "wait-for-external",
            INTERRUPT_TYPE_ID,
            &json!({"kind": "external-event", "data": {"eventType": "order.updated",
                    "correlation": {"orderId": "fixture-order-1", "status": "completed"}}}),
        )
        .unwrap()
    }

    #[test]
    fn an_external_event_waits_for_a_matching_event_and_completes_with_it() {
        let g = order_gate();
        assert_eq!(g.kind, InterruptKind::ExternalEvent);
        let w = g.wait("wait-for-external", "i4", "t");
        assert_eq!(
            valid("node.suspended", &w.suspended)["kind"],
            "external-event"
        );
        assert_eq!(
            valid("interrupt.requested", &w.requested)["data"],
            json!({"eventType": "order.updated", "correlation": {"orderId": "fixture-order-1", "status": "completed"}})
        );
        assert!(w.approval.is_none() && w.clarification.is_none());
        let event = json!({"orderId": "fixture-order-1", "status": "completed", "externalReference": "r-1"});
        for value in [event.clone(), json!({"eventPayload": event.clone()})] {
            let r = g
                .resolve(
                    "wait-for-external",
                    "i4",
                    &answer(json!({"interruptId": "i4", "value": value.clone(), "answeredBy": "callback-token"})),
                )
                .unwrap();
            assert_eq!(
                r.outcome,
                GateEnd::Completed(
                    json!({"eventPayload": event, "eventType": "order.updated", "answeredBy": "callback-token"})
                )
            );
            assert_eq!(
                valid("interrupt.resolved", &r.resolved)["kind"],
                "external-event"
            );
            assert_eq!(r.resolved.resume_value.as_ref(), Some(&value));
            valid("node.resumed", &r.resumed);
        }
        assert_eq!(
            g.resolve(
                "wait-for-external",
                "i4",
                &answer(json!({"interruptId": "i4", "value": {"orderId": "different-order", "status": "completed"}}))
            )
            .unwrap_err(),
            Refusal::Correlation(vec!["orderId".into()])
        );
    }
}
