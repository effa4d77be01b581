//! Run events (engine → clients): `RunEventDoc`, the event-type names, typed
//! payloads for every event this project emits, and `EventFactory`, which
//! stamps run id, per-run sequence and deterministic event ids.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::envelope::ContentTrust;

/// One event of a run's log, as published on the stream and served over REST.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEventDoc {
    /// 1..128 characters; deterministic (see [`event_id_for`]) so a re-executed
    /// step publishes the same id and the stream's dedup drops the copy.
    pub event_id: String,
    pub run_id: String,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub payload: Value,
    /// RFC 3339 date-time supplied by the caller (this crate reads no clock).
    pub timestamp: String,
    /// Per-run, starting at 0.
    pub sequence: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_trust: Option<ContentTrust>,
}

impl RunEventDoc {
    pub fn with_node(mut self, node_id: impl Into<String>) -> Self {
        self.node_id = Some(node_id.into());
        self
    }
    pub fn caused_by(mut self, causation_id: impl Into<String>) -> Self {
        self.causation_id = Some(causation_id.into());
        self
    }
    pub fn with_trust(mut self, trust: ContentTrust) -> Self {
        self.content_trust = Some(trust);
        self
    }
}

macro_rules! event_types {
    ($($variant:ident => $wire:literal,)*) => {
        /// Every run-event type this project emits, with its wire name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum EventType { $($variant,)* }

        impl EventType {
            /// All event types, in declaration order.
            pub const ALL: &'static [EventType] = &[$(EventType::$variant,)*];

            /// The wire name, e.g. `"envelope.retry.attempted"`.
            pub fn as_str(self) -> &'static str {
                match self { $(EventType::$variant => $wire,)* }
            }

            /// Parses a wire name; `None` for types this project does not emit.
            pub fn from_wire(s: &str) -> Option<EventType> {
                match s { $($wire => Some(EventType::$variant),)* _ => None }
            }
        }
    };
}

event_types! {
    RunStarted => "run.started",
    RunCompleted => "run.completed",
    RunFailed => "run.failed",
    RunCancelled => "run.cancelled",
    RunResumed => "run.resumed",
    RunPaused => "run.paused",
    NodeStarted => "node.started",
    NodeCompleted => "node.completed",
    NodeFailed => "node.failed",
    NodeSuspended => "node.suspended",
    NodeResumed => "node.resumed",
    NodeSkipped => "node.skipped",
    VariableChanged => "variable.changed",
    NodeDispatched => "node.dispatched",
    ClarificationRequested => "clarification.requested",
    ClarificationResolved => "clarification.resolved",
    InterruptRequested => "interrupt.requested",
    InterruptResolved => "interrupt.resolved",
    ApprovalRequested => "approval.requested",
    ApprovalGranted => "approval.granted",
    ApprovalRejected => "approval.rejected",
    ApprovalReceived => "approval.received",
    LogAppended => "log.appended",
    CapBreached => "cap.breached",
    PromptComposed => "prompt.composed",
    ProviderUsage => "provider.usage",
    AgentReasoned => "agent.reasoned",
    AgentReasoningDelta => "agent.reasoning.delta",
    AgentToolCalled => "agent.toolCalled",
    AgentToolReturned => "agent.toolReturned",
    AgentHandoff => "agent.handoff",
    AgentDecided => "agent.decided",
    EnvelopeRetryAttempted => "envelope.retry.attempted",
    EnvelopeRetryExhausted => "envelope.retry.exhausted",
    EnvelopeRefusal => "envelope.refusal",
    EnvelopeTruncated => "envelope.truncated",
    EnvelopeNlToFormatEngaged => "envelope.nlToFormat.engaged",
    EnvelopeRecoveryApplied => "envelope.recovery.applied",
    ReplayDiverged => "replay.diverged",
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EventType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        EventType::from_wire(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown run event type '{s}'")))
    }
}

/// A typed event payload: knows its event type.
pub trait EventPayload: Serialize {
    const EVENT_TYPE: EventType;
}

macro_rules! payload_type {
    ($t:ty => $v:ident) => {
        impl EventPayload for $t {
            const EVENT_TYPE: EventType = EventType::$v;
        }
    };
}

/// Why a provider attempt is retried or why retrying stopped.
/// Host-specific reasons are spelled `x-host-<host>-<reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryReason {
    SchemaViolation,
    Truncation,
    TypeDrift,
    TypeMismatch,
    Refusal,
    ParseError,
    Unknown,
    /// The full `x-host-...` string.
    Host(String),
}

impl RetryReason {
    pub fn as_str(&self) -> &str {
        match self {
            RetryReason::SchemaViolation => "schema-violation",
            RetryReason::Truncation => "truncation",
            RetryReason::TypeDrift => "type-drift",
            RetryReason::TypeMismatch => "type-mismatch",
            RetryReason::Refusal => "refusal",
            RetryReason::ParseError => "parse-error",
            RetryReason::Unknown => "unknown",
            RetryReason::Host(s) => s,
        }
    }

    pub fn parse(s: &str) -> Option<RetryReason> {
        Some(match s {
            "schema-violation" => RetryReason::SchemaViolation,
            "truncation" => RetryReason::Truncation,
            "type-drift" => RetryReason::TypeDrift,
            "type-mismatch" => RetryReason::TypeMismatch,
            "refusal" => RetryReason::Refusal,
            "parse-error" => RetryReason::ParseError,
            "unknown" => RetryReason::Unknown,
            s if s.starts_with("x-host-") && s.len() > "x-host-".len() => {
                RetryReason::Host(s.to_owned())
            }
            _ => return None,
        })
    }
}

impl Serialize for RetryReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RetryReason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        RetryReason::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(
                "expected schema-violation|truncation|type-drift|type-mismatch|refusal|parse-error|unknown or x-host-<host>-<reason>",
            )
        })
    }
}

/// `envelope.retry.attempted`; the first attempt emits nothing, so `attempt` is 2..=16.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvelopeRetryAttempted {
    pub node_id: String,
    pub attempt: u32,
    pub reason: RetryReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_error: Option<String>,
}
payload_type!(EnvelopeRetryAttempted => EnvelopeRetryAttempted);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvelopeRetryExhausted {
    pub node_id: String,
    pub total_attempts: u32,
    pub final_reason: RetryReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_error: Option<String>,
}
payload_type!(EnvelopeRetryExhausted => EnvelopeRetryExhausted);

/// `envelope.refusal`; `refusal_text` must already be redacted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvelopeRefusal {
    pub node_id: String,
    pub provider: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safety_category: Option<String>,
}
payload_type!(EnvelopeRefusal => EnvelopeRefusal);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    MaxTokens,
    Length,
    StopSequence,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvelopeTruncated {
    pub node_id: String,
    pub provider: String,
    pub model: String,
    pub stop_reason: StopReason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_payload_available: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_token_count: Option<u64>,
}
payload_type!(EnvelopeTruncated => EnvelopeTruncated);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvelopeNlToFormatEngaged {
    pub node_id: String,
    pub original_envelope_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_calls: Option<u32>,
}
payload_type!(EnvelopeNlToFormatEngaged => EnvelopeNlToFormatEngaged);

/// The wire name of a lenient-recovery path in `envelope.recovery.applied`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecoveryPathName {
    Direct,
    Jsonrepair,
    MarkdownFence,
    BraceWalker,
    Custom,
}

/// `envelope.recovery.applied`: never carries any pre-recovery text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvelopeRecoveryApplied {
    pub node_id: String,
    pub path: RecoveryPathName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub byte_offset: Option<u64>,
}
payload_type!(EnvelopeRecoveryApplied => EnvelopeRecoveryApplied);

/// Which limit a `cap.breached` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapKind {
    Clarification,
    Schema,
    Envelopes,
    NodeExecutions,
    RunDuration,
    LoopIterations,
}

impl CapKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CapKind::Clarification => "clarification",
            CapKind::Schema => "schema",
            CapKind::Envelopes => "envelopes",
            CapKind::NodeExecutions => "node-executions",
            CapKind::RunDuration => "run-duration",
            CapKind::LoopIterations => "loop-iterations",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapBreached {
    pub kind: CapKind,
    pub limit: u64,
    pub observed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}
payload_type!(CapBreached => CapBreached);

/// The `error` object of `node.failed` and of run snapshots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorInfo {
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFailed {
    pub node_id: String,
    pub error: ErrorInfo,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
}
payload_type!(NodeFailed => NodeFailed);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InterruptKind {
    Approval,
    Clarification,
    ExternalEvent,
    Custom,
}

impl InterruptKind {
    /// The wire name (as serialised).
    pub fn as_str(self) -> &'static str {
        match self {
            InterruptKind::Approval => "approval",
            InterruptKind::Clarification => "clarification",
            InterruptKind::ExternalEvent => "external-event",
            InterruptKind::Custom => "custom",
        }
    }
}

/// `node.suspended`; CP-1 low confidence adds `reason: "low-confidence"`,
/// `agentId`, `threshold`, `observed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSuspended {
    pub node_id: String,
    pub interrupt_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<InterruptKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<f64>,
}
payload_type!(NodeSuspended => NodeSuspended);

/// `node.skipped`: the node did not run (`reason`: `disabled`, `trigger-rule-not-met`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSkipped {
    pub node_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
payload_type!(NodeSkipped => NodeSkipped);

/// `variable.changed`: a node wrote a workflow variable (`previous` absent when unset).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VariableChanged {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}
payload_type!(VariableChanged => VariableChanged);

/// A question as projected into `clarification.requested`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuestionRef {
    pub id: String,
    pub question: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClarificationRequested {
    pub node_id: String,
    pub questions: Vec<QuestionRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_id: Option<String>,
}
payload_type!(ClarificationRequested => ClarificationRequested);

/// `interrupt.requested` (INT's field set): the LLM clarification path names its envelope
/// data `payload`; a gate names it `data` (suspend-request.schema.json) with its `key` and
/// `requestedAt`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptRequested {
    pub interrupt_id: String,
    pub node_id: String,
    pub kind: InterruptKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<String>,
    /// How long the interrupt waits before it times out (ms after `requestedAt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}
payload_type!(InterruptRequested => InterruptRequested);

/// `approval.requested`: the approval-specific companion of `interrupt.requested`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequested {
    pub node_id: String,
    pub interrupt_id: String,
    pub artifact_id: String,
    pub artifact_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub actions: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_approvals: Option<u32>,
    /// How rejects end a quorum approval (`single-veto`, `majority`); set with a quorum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejection_policy: Option<String>,
}
payload_type!(ApprovalRequested => ApprovalRequested);

/// `approval.received`: an approval action recorded, with who decided and when. (Not
/// `approval.granted` / `approval.rejected`: those are RFC 0051's closed governance events.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalReceived {
    pub node_id: String,
    /// `accept`, `reject`, `refine`, `edit-accept` (or `timeout`).
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_id: Option<String>,
    /// The principal that decided (opaque; always set for a non-timeout action).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// RFC 3339 time of the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refine_feedback: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited_artifact_data: Option<Value>,
    /// Who this vote counts for, on a quorum approval (`resumeValue.voter`, else who answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voter: Option<String>,
    /// `rejected` for a timeout (a timeout never grants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Why the approval was decided without a person (`timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
payload_type!(ApprovalReceived => ApprovalReceived);

/// `clarification.resolved`: the answers, keyed by question id, and who gave them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClarificationResolved {
    pub node_id: String,
    pub answers: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_at: Option<String>,
}
payload_type!(ClarificationResolved => ClarificationResolved);

/// `interrupt.resolved` (any kind).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptResolved {
    pub node_id: String,
    pub interrupt_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<InterruptKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<String>,
    /// `rejected` when the interrupt resolved without a person (RFC 0093: a timed-out
    /// approval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Why it resolved without a person (`timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// An approval's resume action (`accept`, `reject`, `refine`, `edit-accept`, `timeout`):
    /// RFC 0183 §A.1 makes recording it on the resolution a MUST for approval kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The structured feedback a `refine` carries (RFC 0183 §A.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refine_feedback: Option<Value>,
    /// The edited artifact an `edit-accept` carries (RFC 0183 §A.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited_artifact_data: Option<Value>,
}
payload_type!(InterruptResolved => InterruptResolved);

impl InterruptResolved {
    /// The resolution of an approval, carrying what the approver did (RFC 0183: the action,
    /// and the feedback or edited artifact that action needs to mean anything).
    pub fn carrying(mut self, received: &ApprovalReceived) -> Self {
        self.action = Some(received.action.clone());
        self.refine_feedback = received.refine_feedback.clone();
        self.edited_artifact_data = received.edited_artifact_data.clone();
        self
    }
}

/// `node.resumed`: a suspended node got its resume value and continues.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeResumed {
    pub node_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_value: Option<Value>,
}
payload_type!(NodeResumed => NodeResumed);

/// `run.paused`: the run stopped at a safe point because it was paused
/// ([`crate::run::pause`]); the same payload whoever records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunPaused {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub drain_policy: DrainPolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<String>,
}
payload_type!(RunPaused => RunPaused);

/// How a pause treats the nodes executing when it lands.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum DrainPolicy {
    /// Stop now: in-flight nodes (an LLM call, a delay) are abandoned unrecorded and run
    /// again from the start, as a fresh attempt, after the resume.
    Immediate,
    /// The spec's default: in-flight nodes finish and are recorded; no node starts after them.
    #[default]
    DrainCurrentNode,
}

impl DrainPolicy {
    /// Every policy this host implements (advertised as `runs.pauseResume.drainPolicies`).
    pub const ALL: [DrainPolicy; 2] = [DrainPolicy::Immediate, DrainPolicy::DrainCurrentNode];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DrainPolicy::Immediate => "immediate",
            DrainPolicy::DrainCurrentNode => "drain-current-node",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogAppended {
    pub level: LogLevel,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Value>,
}
payload_type!(LogAppended => LogAppended);

/// `agent.reasoned`; `agent_id` is 3..256 characters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentReasoned {
    pub agent_id: String,
    pub reasoning: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<String>,
}
payload_type!(AgentReasoned => AgentReasoned);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentToolCalled {
    pub agent_id: String,
    pub tool_name: String,
    pub call_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Value>,
}
payload_type!(AgentToolCalled => AgentToolCalled);

/// `agent.toolReturned`; its event's `causationId` is the toolCalled `eventId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentToolReturned {
    pub agent_id: String,
    pub tool_name: String,
    pub call_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}
payload_type!(AgentToolReturned => AgentToolReturned);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentHandoff {
    pub from_agent_id: String,
    pub to_agent_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
payload_type!(AgentHandoff => AgentHandoff);

/// `agent.decided`; `confidence` is 0..=1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentDecided {
    pub agent_id: String,
    pub decision: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
}
payload_type!(AgentDecided => AgentDecided);

/// Deterministic event id from `(runId, stepKey)`: `evt-` + 40 hex chars of
/// SHA-256. The step key names the logical step (e.g. `corr-1/clarification.requested`),
/// so re-executing the step after a crash yields the same id.
pub fn event_id_for(run_id: &str, step_key: &str) -> String {
    event_id_for_parts(run_id, &[step_key])
}

/// [`event_id_for`] with the step key given as consecutive parts (the same
/// id as their concatenation), so hot callers need not build the key.
pub(crate) fn event_id_for_parts(run_id: &str, step_key: &[&str]) -> String {
    let mut h = Sha256::new();
    h.update(run_id.as_bytes());
    h.update([0u8]);
    for part in step_key {
        h.update(part.as_bytes());
    }
    hex_id("evt-", &h.finalize(), 40)
}

/// `prefix` + the first `chars` lowercase hex digits of `digest`, in one allocation
/// (ids are built several times per envelope).
pub(crate) fn hex_id(prefix: &str, digest: &[u8], chars: usize) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(prefix.len() + chars);
    out.push_str(prefix);
    for b in digest.iter().take(chars.div_ceil(2)) {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out.truncate(prefix.len() + chars.min(2 * digest.len()));
    out
}

/// Stamps run id, the per-run sequence and deterministic ids onto events.
/// The worker restores it from the log (`first_sequence` = events so far).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFactory {
    run_id: String,
    next_sequence: u64,
    engine_version: Option<String>,
}

impl EventFactory {
    pub fn new(run_id: impl Into<String>, first_sequence: u64) -> Self {
        EventFactory {
            run_id: run_id.into(),
            next_sequence: first_sequence,
            engine_version: None,
        }
    }

    /// Stamp `engineVersion` on every event built from now on.
    pub fn with_engine_version(mut self, version: impl Into<String>) -> Self {
        self.engine_version = Some(version.into());
        self
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The sequence the next event will carry.
    pub fn next_sequence(&self) -> u64 {
        self.next_sequence
    }

    /// Builds the next event from a typed payload.
    pub fn emit<P: EventPayload>(
        &mut self,
        step_key: &str,
        timestamp: &str,
        payload: &P,
    ) -> RunEventDoc {
        self.emit_at(&[step_key], timestamp, payload)
    }

    /// [`Self::emit`] with the step key in parts (see [`event_id_for_parts`]).
    pub(crate) fn emit_at<P: EventPayload>(
        &mut self,
        step_key: &[&str],
        timestamp: &str,
        payload: &P,
    ) -> RunEventDoc {
        // Payload types are plain structs of strings, numbers and Values: serialising cannot fail.
        let value = serde_json::to_value(payload).unwrap_or(Value::Null);
        self.emit_value_at(step_key, timestamp, P::EVENT_TYPE, value)
    }

    /// Builds the next event from an untyped payload (for types without a payload struct).
    pub fn emit_value(
        &mut self,
        step_key: &str,
        timestamp: &str,
        event_type: EventType,
        payload: Value,
    ) -> RunEventDoc {
        self.emit_value_at(&[step_key], timestamp, event_type, payload)
    }

    /// [`Self::emit_value`] with the step key in parts (see [`event_id_for_parts`]).
    pub(crate) fn emit_value_at(
        &mut self,
        step_key: &[&str],
        timestamp: &str,
        event_type: EventType,
        payload: Value,
    ) -> RunEventDoc {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        RunEventDoc {
            event_id: event_id_for_parts(&self.run_id, step_key),
            run_id: self.run_id.clone(),
            event_type,
            payload,
            timestamp: timestamp.to_owned(),
            sequence,
            node_id: None,
            schema_version: None,
            engine_version: self.engine_version.clone(),
            causation_id: None,
            content_trust: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn event_type_names_round_trip() {
        for t in EventType::ALL {
            assert_eq!(EventType::from_wire(t.as_str()), Some(*t));
            let v = serde_json::to_value(t).unwrap();
            assert_eq!(serde_json::from_value::<EventType>(v).unwrap(), *t);
        }
        assert_eq!(EventType::ALL.len(), 39);
        assert_eq!(EventType::AgentToolCalled.as_str(), "agent.toolCalled");
        assert!(serde_json::from_value::<EventType>(json!("no.such")).is_err());
    }

    #[test]
    fn factory_stamps_sequence_and_deterministic_ids() {
        let mut f = EventFactory::new("run-1", 0).with_engine_version("0.1.0");
        let a = f.emit(
            "c1/log",
            "2026-05-18T10:00:00Z",
            &LogAppended {
                level: LogLevel::Debug,
                message: "m".into(),
                node_id: None,
                fields: None,
            },
        );
        let b = f.emit_value(
            "c1/other",
            "2026-05-18T10:00:01Z",
            EventType::NodeStarted,
            json!({"nodeId": "n"}),
        );
        assert_eq!((a.sequence, b.sequence), (0, 1));
        assert_ne!(a.event_id, b.event_id);
        assert_eq!(a.event_id, event_id_for("run-1", "c1/log"));
        assert_eq!(
            a.event_id,
            EventFactory::new("run-1", 7)
                .emit_value("c1/log", "t", EventType::LogAppended, Value::Null)
                .event_id
        );
        assert_ne!(a.event_id, event_id_for("run-2", "c1/log"));
        assert!(a.event_id.len() <= 128);
        let doc = serde_json::to_value(
            a.with_node("n1")
                .caused_by("corr")
                .with_trust(ContentTrust::Untrusted),
        )
        .unwrap();
        assert_eq!(doc["type"], "log.appended");
        assert_eq!(doc["runId"], "run-1");
        assert_eq!(doc["nodeId"], "n1");
        assert_eq!(doc["causationId"], "corr");
        assert_eq!(doc["contentTrust"], "untrusted");
        assert_eq!(doc["engineVersion"], "0.1.0");
        assert_eq!(doc["payload"], json!({"level": "debug", "message": "m"}));
    }

    #[test]
    fn retry_reason_accepts_host_extensions_only_with_prefix() {
        assert_eq!(
            RetryReason::parse("x-host-acme-quota"),
            Some(RetryReason::Host("x-host-acme-quota".into()))
        );
        assert_eq!(RetryReason::parse("x-host-"), None);
        assert_eq!(RetryReason::parse("bogus"), None);
        let p = EnvelopeRetryAttempted {
            node_id: "n".into(),
            attempt: 2,
            reason: RetryReason::SchemaViolation,
            previous_error: None,
        };
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!({"nodeId": "n", "attempt": 2, "reason": "schema-violation"})
        );
    }

    #[test]
    fn payload_wire_names() {
        let cb = CapBreached {
            kind: CapKind::NodeExecutions,
            limit: 3,
            observed: 3,
            node_id: None,
        };
        assert_eq!(
            serde_json::to_value(&cb).unwrap(),
            json!({"kind": "node-executions", "limit": 3, "observed": 3})
        );
        let r = EnvelopeRecoveryApplied {
            node_id: "n".into(),
            path: RecoveryPathName::MarkdownFence,
            byte_offset: Some(4),
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"nodeId": "n", "path": "markdown-fence", "byteOffset": 4})
        );
        let t = EnvelopeTruncated {
            node_id: "n".into(),
            provider: "p".into(),
            model: "m".into(),
            stop_reason: StopReason::MaxTokens,
            partial_payload_available: None,
            output_token_count: None,
        };
        assert_eq!(
            serde_json::to_value(&t).unwrap()["stopReason"],
            "max_tokens"
        );
        let h = AgentHandoff {
            from_agent_id: "a".into(),
            to_agent_id: "b".into(),
            reason: None,
        };
        assert_eq!(
            serde_json::to_value(&h).unwrap(),
            json!({"fromAgentId": "a", "toAgentId": "b"})
        );
        let i = InterruptRequested {
            interrupt_id: "i".into(),
            node_id: "n".into(),
            kind: InterruptKind::ExternalEvent,
            payload: None,
            key: None,
            data: None,
            requested_at: None,
            timeout_ms: None,
        };
        assert_eq!(serde_json::to_value(&i).unwrap()["kind"], "external-event");
    }
}
