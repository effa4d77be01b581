//! The RFC 0033 retry router: a pure state machine over provider responses.
//!
//! ```text
//! start() ─► Call(attempt 1) ─► on_response() ─► Call(attempt n+1) | Accept | Fail
//! ```
//! Routing, per response:
//! * refusal (stop reason or refusal text) → `envelope.refusal`, `node.failed envelope_refusal`; never retried;
//! * not a clean stop → truncation, whatever the payload looks like (a repaired truncation
//!   is still a truncation; recovery is not even attempted) → `envelope.truncated`, retry
//!   with budget × multiplier clamped to the ceiling, no corrective fragment; a truncation
//!   at the ceiling is terminal;
//! * clean stop → lenient parse (recovery emits `envelope.recovery.applied`, consumes no
//!   attempt) → validation; failure → same budget + corrective fragment built from the
//!   validator output (`schema-violation`) or a fixed parse-error fragment (`parse-error`);
//! * every path is bounded by `limits.schemaRounds` total provider calls; exhaustion →
//!   `envelope.retry.exhausted` + `cap.breached {kind: schema}` + `node.failed`;
//! * NL-to-Format (opt-in): the last two calls of the cap are reserved for one free-text
//!   call and one formatting call after the structured attempts fail on shape.
//!
//! Every call is announced by `prompt.composed` (redacted system prompt, hash) and a
//! `log.appended` debug record carrying `attempt`, `maxTokens` and the fragment kinds;
//! every response by `provider.usage`.
//!
//! Why one file of this size: every RFC 0033 path (truncation, schema violation, parse error,
//! refusal, recovery, exhaustion) is a branch of one state machine and they must be read
//! together to check that each response is routed exactly once.

use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::fragment::{issues_summary, parse_error_fragment, schema_violation_fragment};
use super::journal::{Journal, ResponseRecord};
use super::reasoning::ReasoningPosture;
use super::response::{NormalizedResponse, StopReason, Usage};
use crate::events::{
    CapBreached, CapKind, EnvelopeNlToFormatEngaged, EnvelopeRecoveryApplied, EnvelopeRefusal,
    EnvelopeRetryAttempted, EnvelopeRetryExhausted, EnvelopeTruncated, ErrorInfo, EventFactory,
    EventPayload, EventType, LogAppended, LogLevel, NodeFailed, RecoveryPathName, RetryReason,
    RunEventDoc,
};
use crate::limits::{DEFAULT_SCHEMA_ROUNDS, DEFAULT_TRUNCATION_BUDGET_MULTIPLIER};
use crate::recovery::{ParseLimits, RecoveryPath, parse_lenient};
use crate::redact::Redactor;
use crate::schema::{CompiledSchema, ValidationIssue};

/// Wire attempt numbers are 2..16, so a node never makes more than 16 calls per emission.
pub const MAX_ATTEMPTS: u32 = 16;

/// Anything that can validate a parsed payload: a compiled user schema, or the envelope
/// pipeline when the node expects an `envelopeType`.
pub trait PayloadValidator {
    fn validate(&self, payload: &Value) -> Result<(), Vec<ValidationIssue>>;
}

impl PayloadValidator for CompiledSchema {
    fn validate(&self, payload: &Value) -> Result<(), Vec<ValidationIssue>> {
        CompiledSchema::validate(self, payload)
    }
}

impl<F: Fn(&Value) -> Result<(), Vec<ValidationIssue>>> PayloadValidator for F {
    fn validate(&self, payload: &Value) -> Result<(), Vec<ValidationIssue>> {
        self(payload)
    }
}

/// NL-to-Format fallback settings (opt-in per node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlToFormat {
    /// Reported as `originalEnvelopeType` (the envelope type or output-schema name).
    pub envelope_type: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RouterConfig {
    pub node_id: String,
    /// Prefix of every step key, unique per emission (e.g. `"{nodeId}:{turn}"`); event ids
    /// derive from it, so a replayed emission yields the same ids.
    pub step_key: String,
    pub provider: String,
    pub model: String,
    pub system_prompt: String,
    pub user_prompt: String,
    /// `limits.schemaRounds`: total provider calls for this emission, all paths together.
    /// 0 behaves as 1 (retries disabled); values above [`MAX_ATTEMPTS`] are clamped.
    pub schema_rounds: u32,
    /// Truncation budget multiplier, 1..=8.
    pub multiplier: f64,
    /// Output budget of the first call.
    pub max_tokens: u32,
    /// Provider/model per-call output maximum.
    pub ceiling: u32,
    pub posture: ReasoningPosture,
    pub nl_to_format: Option<NlToFormat>,
    pub parse_limits: ParseLimits,
}

impl RouterConfig {
    /// Defaults: schemaRounds 3, multiplier 2, advisory reasoning, no NL-to-Format.
    pub fn new(
        node_id: impl Into<String>,
        provider: impl Into<String>,
        model: impl Into<String>,
        max_tokens: u32,
        ceiling: u32,
    ) -> Self {
        let node_id = node_id.into();
        RouterConfig {
            step_key: node_id.clone(),
            node_id,
            provider: provider.into(),
            model: model.into(),
            system_prompt: String::new(),
            user_prompt: String::new(),
            schema_rounds: DEFAULT_SCHEMA_ROUNDS,
            multiplier: DEFAULT_TRUNCATION_BUDGET_MULTIPLIER,
            max_tokens,
            ceiling,
            posture: ReasoningPosture::default(),
            nl_to_format: None,
            parse_limits: ParseLimits::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RouterConfigError {
    #[error("truncation multiplier {0} is out of range: use a number from 1 to 8")]
    Multiplier(f64),
    #[error("max_tokens must be at least 1")]
    ZeroBudget,
    #[error("the provider output ceiling must be at least 1")]
    ZeroCeiling,
    #[error("node id is empty; the router needs it for every event")]
    EmptyNodeId,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouterError {
    #[error("on_response called before start(); call start() and make the first call")]
    NotStarted,
    #[error("the emission already ended ({0}); start a new router for a new emission")]
    Finished(&'static str),
}

/// What the next call is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallPurpose {
    /// A structured attempt (first call or an envelope retry).
    Structured,
    /// NL-to-Format step 1: answer in prose, no schema sent.
    FreeText,
    /// NL-to-Format step 2: turn the prose (the user prompt) into the schema.
    Formatting,
}

/// Kinds of system fragment, as listed in the call's log record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FragmentKind {
    ReasoningDirective,
    SchemaCorrection,
    ParseCorrection,
    NlFreeText,
    NlFormatting,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemFragment {
    pub kind: FragmentKind,
    pub text: String,
}

/// A provider call to make.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRequest {
    /// 1-based call number within the emission.
    pub attempt: u32,
    pub max_tokens: u32,
    pub purpose: CallPurpose,
    /// Appended to the base system prompt, in order.
    pub system_fragments: Vec<SystemFragment>,
    /// Full system prompt to send (base + fragments), unredacted.
    pub system_prompt: String,
    pub user_prompt: String,
    /// Whether the output schema is sent (false only for the NL free-text call).
    pub send_schema: bool,
}

impl CallRequest {
    pub fn has_fragment(&self, kind: FragmentKind) -> bool {
        self.system_fragments.iter().any(|f| f.kind == kind)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    EnvelopeInvalid,
    EnvelopeTruncationUnrecoverable,
    EnvelopeRefusal,
}

impl FailureCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EnvelopeInvalid => "envelope_invalid",
            Self::EnvelopeTruncationUnrecoverable => "envelope_truncation_unrecoverable",
            Self::EnvelopeRefusal => "envelope_refusal",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    pub payload: Value,
    pub attempts: u32,
    /// Token usage summed over every call of this emission.
    pub usage: Usage,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub code: FailureCode,
    /// Safe to show: never contains refusal text or model output.
    pub message: String,
    pub reason: RetryReason,
    pub attempts: u32,
    pub usage: Usage,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Call(CallRequest),
    Accept(Accepted),
    Fail(Failure),
}

/// One transition: the action to take and the events to publish, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub action: Action,
    pub events: Vec<RunEventDoc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Awaiting(CallPurpose),
    Done(&'static str),
}

/// What went wrong with a response, for routing.
enum Shape {
    Parse,
    Schema(Vec<ValidationIssue>),
}

/// The retry router for one emission of one node.
pub struct Router<V: PayloadValidator> {
    cfg: RouterConfig,
    validator: V,
    redactor: Redactor,
    cap: u32,
    phase: Phase,
    /// Calls made so far (= attempt number of the call in flight).
    calls: u32,
    budget: u32,
    usage: Usage,
    free_text: Option<String>,
}

impl<V: PayloadValidator> std::fmt::Debug for Router<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("node_id", &self.cfg.node_id)
            .field("cap", &self.cap)
            .field("calls", &self.calls)
            .field("budget", &self.budget)
            .field("phase", &self.phase)
            .finish_non_exhaustive()
    }
}

/// Events of one transition, stamped as they are pushed.
struct Emitter<'a> {
    factory: &'a mut EventFactory,
    timestamp: &'a str,
    node_id: String,
    prefix: String,
    events: Vec<RunEventDoc>,
}

impl Emitter<'_> {
    fn push<P: EventPayload>(&mut self, suffix: &str, payload: &P) {
        let key = format!("{}/{suffix}", self.prefix);
        let doc = self
            .factory
            .emit(&key, self.timestamp, payload)
            .with_node(self.node_id.as_str());
        self.events.push(doc);
    }

    fn push_value(&mut self, suffix: &str, event_type: EventType, payload: Value) {
        let key = format!("{}/{suffix}", self.prefix);
        let doc = self
            .factory
            .emit_value(&key, self.timestamp, event_type, payload)
            .with_node(self.node_id.as_str());
        self.events.push(doc);
    }
}

impl<V: PayloadValidator> Router<V> {
    pub fn new(
        cfg: RouterConfig,
        validator: V,
        redactor: Redactor,
    ) -> Result<Self, RouterConfigError> {
        if !(1.0..=8.0).contains(&cfg.multiplier) {
            return Err(RouterConfigError::Multiplier(cfg.multiplier));
        }
        if cfg.max_tokens == 0 {
            return Err(RouterConfigError::ZeroBudget);
        }
        if cfg.ceiling == 0 {
            return Err(RouterConfigError::ZeroCeiling);
        }
        if cfg.node_id.is_empty() {
            return Err(RouterConfigError::EmptyNodeId);
        }
        let cap = cfg.schema_rounds.clamp(1, MAX_ATTEMPTS);
        let budget = cfg.max_tokens.min(cfg.ceiling);
        Ok(Router {
            cfg,
            validator,
            redactor,
            cap,
            phase: Phase::Idle,
            calls: 0,
            budget,
            usage: Usage::default(),
            free_text: None,
        })
    }

    /// The effective cap on provider calls for this emission.
    pub fn cap(&self) -> u32 {
        self.cap
    }

    /// Usage summed over the calls so far.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Calls reserved for NL-to-Format at the end of the cap (0 when it cannot engage).
    fn nl_reserve(&self) -> u32 {
        if self.cfg.nl_to_format.is_some() && self.cap >= 3 {
            2
        } else {
            0
        }
    }

    fn emitter<'a>(&self, factory: &'a mut EventFactory, timestamp: &'a str) -> Emitter<'a> {
        Emitter {
            factory,
            timestamp,
            node_id: self.cfg.node_id.clone(),
            prefix: String::new(),
            events: Vec::new(),
        }
    }

    /// The first call.
    pub fn start(
        &mut self,
        factory: &mut EventFactory,
        timestamp: &str,
    ) -> Result<Step, RouterError> {
        if self.phase != Phase::Idle {
            return Err(self.finished_or_running());
        }
        let call = self.next_call(CallPurpose::Structured, None, self.cfg.user_prompt.clone());
        let mut events = Vec::new();
        self.announce(&call, factory, timestamp, &mut events);
        self.phase = Phase::Awaiting(CallPurpose::Structured);
        Ok(Step {
            action: Action::Call(call),
            events,
        })
    }

    /// The journal record of `response` to the call in flight (a `log.appended` event to
    /// publish before routing) and the response to route: the recorded, redacted form, so a
    /// live emission and one restored from the log route the same bytes.
    pub fn record(
        &self,
        response: &NormalizedResponse,
        factory: &mut EventFactory,
        timestamp: &str,
    ) -> (RunEventDoc, NormalizedResponse) {
        let (record, routed) = ResponseRecord::new(
            &self.cfg.step_key,
            self.calls,
            self.budget,
            response,
            &self.redactor,
        );
        let mut em = self.emitter(factory, timestamp);
        em.prefix = format!("{}/a{}", self.cfg.step_key, self.calls);
        em.push("response", &record.to_payload(&self.cfg.node_id));
        let doc = em.events.pop().expect("one event was pushed");
        (doc, routed)
    }

    /// The record of the call in flight that got no response before the node's timeout (the
    /// node attempt ends with it; nothing is routed).
    pub fn record_timeout(&self, factory: &mut EventFactory, timestamp: &str) -> RunEventDoc {
        let record = ResponseRecord::timed_out(&self.cfg.step_key, self.calls, self.budget);
        let mut em = self.emitter(factory, timestamp);
        em.prefix = format!("{}/a{}", self.cfg.step_key, self.calls);
        em.push("timeout", &record.to_payload(&self.cfg.node_id));
        em.events.pop().expect("one event was pushed")
    }

    /// The responses of this emission already recorded in `events` (the run's log).
    pub fn restore(&self, events: &[RunEventDoc]) -> Journal {
        Journal::restore(events, &self.cfg.node_id, &self.cfg.step_key)
    }

    fn finished_or_running(&self) -> RouterError {
        match self.phase {
            Phase::Done(why) => RouterError::Finished(why),
            _ => RouterError::Finished("a call is already in flight"),
        }
    }

    /// Routes one provider response.
    pub fn on_response(
        &mut self,
        response: &NormalizedResponse,
        factory: &mut EventFactory,
        timestamp: &str,
    ) -> Result<Step, RouterError> {
        let purpose = match self.phase {
            Phase::Idle => return Err(RouterError::NotStarted),
            Phase::Done(why) => return Err(RouterError::Finished(why)),
            Phase::Awaiting(p) => p,
        };
        let attempt = self.calls;
        self.usage.input_tokens += response.usage.input_tokens;
        self.usage.output_tokens += response.usage.output_tokens;
        let mut events = Vec::new();
        let action = {
            let mut em = self.emitter(factory, timestamp);
            em.prefix = format!("{}/a{attempt}", self.cfg.step_key);
            em.push_value(
                "usage",
                EventType::ProviderUsage,
                response.usage_payload(&self.cfg.node_id),
            );
            let decision = self.route(response, purpose, &mut em);
            events.append(&mut em.events);
            decision
        };
        let action = match action {
            Decision::Call(purpose, fragment, user) => {
                let call = self.next_call(purpose, fragment, user);
                self.announce(&call, factory, timestamp, &mut events);
                self.phase = Phase::Awaiting(purpose);
                Action::Call(call)
            }
            Decision::Accept(payload) => {
                self.phase = Phase::Done("accepted");
                Action::Accept(Accepted {
                    payload,
                    attempts: attempt,
                    usage: self.usage,
                })
            }
            Decision::Fail(mut failure) => {
                self.phase = Phase::Done("failed");
                failure.usage = self.usage;
                Action::Fail(failure)
            }
        };
        Ok(Step { action, events })
    }

    fn route(
        &mut self,
        r: &NormalizedResponse,
        purpose: CallPurpose,
        em: &mut Emitter<'_>,
    ) -> Decision {
        let attempt = self.calls;
        let refusal_text = r.refusal_text.as_deref().filter(|t| !t.is_empty());
        // Refusal: never retried, on any path.
        if matches!(r.stop, StopReason::Refusal { .. }) || refusal_text.is_some() {
            let safety_category = match &r.stop {
                StopReason::Refusal {
                    safety_category, ..
                } => safety_category.clone(),
                _ => None,
            };
            em.push(
                "refusal",
                &EnvelopeRefusal {
                    node_id: self.cfg.node_id.clone(),
                    provider: r.provider.clone(),
                    model: r.model.clone(),
                    refusal_text: refusal_text.map(|t| self.redactor.redact_str(t).0.into_owned()),
                    safety_category: safety_category.clone(),
                },
            );
            let message = match &safety_category {
                Some(c) => format!(
                    "the provider refused to produce this output (safety category {c}); refusals are not retried"
                ),
                None => "the provider refused to produce this output; refusals are not retried"
                    .to_string(),
            };
            return self.fail(
                em,
                FailureCode::EnvelopeRefusal,
                RetryReason::Refusal,
                message,
                false,
            );
        }

        // Condition 1: a clean stop. Anything else is truncation, whatever the payload.
        if !r.stop.is_clean() {
            let partial =
                r.structured.is_some() || r.text.as_deref().is_some_and(|t| !t.is_empty());
            let stop_reason = r.stop.truncation_wire();
            em.push(
                "truncated",
                &EnvelopeTruncated {
                    node_id: self.cfg.node_id.clone(),
                    provider: r.provider.clone(),
                    model: r.model.clone(),
                    stop_reason,
                    partial_payload_available: Some(partial),
                    output_token_count: Some(r.usage.output_tokens),
                },
            );
            let what = format!(
                "output truncated at a budget of {} tokens (stop reason {})",
                self.budget,
                wire_stop(stop_reason)
            );
            if purpose == CallPurpose::Structured
                && attempt < self.cap
                && self.budget < self.cfg.ceiling
            {
                em.push(
                    "retry",
                    &EnvelopeRetryAttempted {
                        node_id: self.cfg.node_id.clone(),
                        attempt: attempt + 1,
                        reason: RetryReason::Truncation,
                        previous_error: Some(what),
                    },
                );
                self.budget = grow(self.budget, self.cfg.multiplier, self.cfg.ceiling);
                return Decision::Call(CallPurpose::Structured, None, self.cfg.user_prompt.clone());
            }
            let message = if self.budget >= self.cfg.ceiling && attempt < self.cap {
                format!(
                    "{what}; the budget is already at the provider ceiling of {} tokens, so a retry cannot help",
                    self.cfg.ceiling
                )
            } else {
                format!("{what}; no attempts left after {attempt} call(s)")
            };
            let cap_hit = attempt >= self.cap;
            return self.exhaust(
                em,
                FailureCode::EnvelopeTruncationUnrecoverable,
                RetryReason::Truncation,
                message,
                cap_hit,
            );
        }

        // NL-to-Format step 1 answered: format it next, whatever the prose looks like.
        if purpose == CallPurpose::FreeText {
            return match r.text.as_deref().filter(|t| !t.trim().is_empty()) {
                Some(text) => {
                    self.free_text = Some(text.to_string());
                    Decision::Call(CallPurpose::Formatting, None, text.to_string())
                }
                None => self.exhaust(
                    em,
                    FailureCode::EnvelopeInvalid,
                    RetryReason::ParseError,
                    "the NL-to-Format free-text call returned no text".to_string(),
                    true,
                ),
            };
        }

        // Condition 2: parses (with recovery) and validates.
        let shape = match self.parse(r, em) {
            Ok(payload) => match self.validator.validate(&payload) {
                Ok(()) => return Decision::Accept(payload),
                Err(issues) => Shape::Schema(issues),
            },
            Err(()) => Shape::Parse,
        };
        let (reason, summary, fragment) = match &shape {
            Shape::Parse => (
                RetryReason::ParseError,
                "the response was not parseable JSON after recovery".to_string(),
                SystemFragment {
                    kind: FragmentKind::ParseCorrection,
                    text: parse_error_fragment(),
                },
            ),
            Shape::Schema(issues) => {
                let mut text = schema_violation_fragment(issues);
                self.redactor.redact_in_place(&mut text);
                let mut summary = issues_summary(issues);
                self.redactor.redact_in_place(&mut summary);
                (
                    RetryReason::SchemaViolation,
                    summary,
                    SystemFragment {
                        kind: FragmentKind::SchemaCorrection,
                        text,
                    },
                )
            }
        };
        if purpose == CallPurpose::Structured && attempt < self.cap - self.nl_reserve() {
            em.push(
                "retry",
                &EnvelopeRetryAttempted {
                    node_id: self.cfg.node_id.clone(),
                    attempt: attempt + 1,
                    reason,
                    previous_error: Some(summary),
                },
            );
            return Decision::Call(
                CallPurpose::Structured,
                Some(fragment),
                self.cfg.user_prompt.clone(),
            );
        }
        if purpose == CallPurpose::Structured
            && self.nl_reserve() > 0
            && let Some(nl) = &self.cfg.nl_to_format
        {
            em.push(
                "nl",
                &EnvelopeNlToFormatEngaged {
                    node_id: self.cfg.node_id.clone(),
                    original_envelope_type: nl.envelope_type.clone(),
                    fallback_calls: Some(2),
                },
            );
            return Decision::Call(CallPurpose::FreeText, None, self.cfg.user_prompt.clone());
        }
        let message = format!("{summary}; no attempts left after {attempt} call(s)");
        self.exhaust(em, FailureCode::EnvelopeInvalid, reason, message, true)
    }

    /// Parses a clean-stop payload. Structured payloads need no parsing.
    fn parse(&self, r: &NormalizedResponse, em: &mut Emitter<'_>) -> Result<Value, ()> {
        if let Some(v) = &r.structured {
            return Ok(v.clone());
        }
        let text = r.text.as_deref().ok_or(())?;
        let recovered = parse_lenient(text, &self.cfg.parse_limits).map_err(|_| ())?;
        if let Some(path) = recovery_path_name(recovered.path) {
            em.push(
                "recovery",
                &EnvelopeRecoveryApplied {
                    node_id: self.cfg.node_id.clone(),
                    path,
                    byte_offset: recovered.byte_offset.map(|o| o as u64),
                },
            );
        }
        Ok(recovered.value)
    }

    /// Exhaustion of a retry path: `envelope.retry.exhausted` (+ `cap.breached` when the
    /// cap is what stopped us) + `node.failed`.
    fn exhaust(
        &mut self,
        em: &mut Emitter<'_>,
        code: FailureCode,
        reason: RetryReason,
        message: String,
        cap_hit: bool,
    ) -> Decision {
        em.push(
            "exhausted",
            &EnvelopeRetryExhausted {
                node_id: self.cfg.node_id.clone(),
                total_attempts: self.calls,
                final_reason: reason.clone(),
                final_error: Some(message.clone()),
            },
        );
        if cap_hit {
            em.push(
                "cap",
                &CapBreached {
                    kind: CapKind::Schema,
                    limit: u64::from(self.cap),
                    observed: u64::from(self.calls),
                    node_id: Some(self.cfg.node_id.clone()),
                },
            );
        }
        self.fail(em, code, reason, message, true)
    }

    fn fail(
        &mut self,
        em: &mut Emitter<'_>,
        code: FailureCode,
        reason: RetryReason,
        message: String,
        with_totals: bool,
    ) -> Decision {
        let details = with_totals.then(|| {
            json!({"totalAttempts": self.calls, "finalReason": reason.as_str(), "schemaRounds": self.cap})
        });
        em.push(
            "failed",
            &NodeFailed {
                node_id: self.cfg.node_id.clone(),
                error: ErrorInfo {
                    code: code.as_str().to_string(),
                    message: message.clone(),
                    details,
                    retryable: Some(false),
                },
                attempts: Some(self.calls),
            },
        );
        Decision::Fail(Failure {
            code,
            message,
            reason,
            attempts: self.calls,
            usage: Usage::default(),
        })
    }

    fn next_call(
        &mut self,
        purpose: CallPurpose,
        correction: Option<SystemFragment>,
        user_prompt: String,
    ) -> CallRequest {
        self.calls += 1;
        let mut fragments = Vec::new();
        if let Some(d) = self.cfg.posture.directive() {
            fragments.push(SystemFragment {
                kind: FragmentKind::ReasoningDirective,
                text: d.to_string(),
            });
        }
        match purpose {
            CallPurpose::Structured => fragments.extend(correction),
            CallPurpose::FreeText => fragments.push(SystemFragment {
                kind: FragmentKind::NlFreeText,
                text: "Answer in plain prose. Do not produce JSON or code fences.".to_string(),
            }),
            CallPurpose::Formatting => fragments.push(SystemFragment {
                kind: FragmentKind::NlFormatting,
                text: "The user message is a draft answer. Convert it into exactly one JSON value \
                       that matches the required output schema, using only information in the draft."
                    .to_string(),
            }),
        }
        let base = match purpose {
            // The formatter must not see the original task, only the draft to convert.
            CallPurpose::Formatting => "",
            _ => self.cfg.system_prompt.as_str(),
        };
        let mut system_prompt = base.to_string();
        for f in &fragments {
            if !system_prompt.is_empty() {
                system_prompt.push_str("\n\n");
            }
            system_prompt.push_str(&f.text);
        }
        CallRequest {
            attempt: self.calls,
            max_tokens: self.budget,
            purpose,
            system_fragments: fragments,
            system_prompt,
            user_prompt,
            send_schema: purpose != CallPurpose::FreeText,
        }
    }

    /// `prompt.composed` (redacted, hashed) and a debug record with the budget.
    fn announce(
        &self,
        call: &CallRequest,
        factory: &mut EventFactory,
        timestamp: &str,
        events: &mut Vec<RunEventDoc>,
    ) {
        let mut em = self.emitter(factory, timestamp);
        em.prefix = format!("{}/a{}", self.cfg.step_key, call.attempt);
        let system = self.redactor.redact_str(&call.system_prompt).0.into_owned();
        let user = self.redactor.redact_str(&call.user_prompt).0.into_owned();
        let mut h = Sha256::new();
        h.update(system.as_bytes());
        h.update([0u8]);
        h.update(user.as_bytes());
        em.push_value(
            "prompt",
            EventType::PromptComposed,
            json!({
                "nodeId": self.cfg.node_id,
                "refs": [],
                "kind": "system+user",
                "hash": format!("sha256:{}", hex::encode(h.finalize())),
                "systemPrompt": system,
            }),
        );
        let fragments: Vec<FragmentKind> = call.system_fragments.iter().map(|f| f.kind).collect();
        em.push(
            "call",
            &LogAppended {
                level: LogLevel::Debug,
                message: format!(
                    "provider call {} of at most {} ({} tokens)",
                    call.attempt, self.cap, call.max_tokens
                ),
                node_id: Some(self.cfg.node_id.clone()),
                fields: Some(json!({
                    "attempt": call.attempt,
                    "maxTokens": call.max_tokens,
                    "ceiling": self.cfg.ceiling,
                    "clamped": call.max_tokens == self.cfg.ceiling,
                    "purpose": call.purpose,
                    "fragments": fragments,
                    "schemaSent": call.send_schema,
                })),
            },
        );
        events.append(&mut em.events);
    }
}

enum Decision {
    Call(CallPurpose, Option<SystemFragment>, String),
    Accept(Value),
    Fail(Failure),
}

fn grow(budget: u32, multiplier: f64, ceiling: u32) -> u32 {
    let next = (f64::from(budget) * multiplier).ceil();
    if next >= f64::from(ceiling) {
        ceiling
    } else {
        next as u32
    }
}

fn wire_stop(s: crate::events::StopReason) -> &'static str {
    use crate::events::StopReason as W;
    match s {
        W::MaxTokens => "max_tokens",
        W::Length => "length",
        W::StopSequence => "stop_sequence",
        W::Unknown => "unknown",
    }
}

fn recovery_path_name(path: RecoveryPath) -> Option<RecoveryPathName> {
    match path {
        RecoveryPath::Direct => None,
        RecoveryPath::Jsonrepair => Some(RecoveryPathName::Jsonrepair),
        RecoveryPath::MarkdownFence => Some(RecoveryPathName::MarkdownFence),
        RecoveryPath::BraceWalker => Some(RecoveryPathName::BraceWalker),
    }
}
