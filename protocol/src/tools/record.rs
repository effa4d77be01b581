//! The record of every tool call: `agent.toolCalled` before the call is made and
//! `agent.toolReturned` after (paired by `callId`, the return's `causationId` the call's
//! `eventId`), with RFC 0064's fields (`argsHash`, `transport`, `status`, `durationMs`) and
//! the host's (`server`, `toolId`, `safetyTier`, `resultPreview`, `resultBytes`); the step
//! key of each call; and the lookup a replayed or restarted node answers from, so a
//! recorded call is never made again.
//!
//! `status` on the wire is the spec's closed set (`ok|error|forbidden|rate_limited`);
//! this host's finer outcomes ([`ToolStatus`]) map onto it, the difference in
//! `error.code`: a refusal is `forbidden` (the tool was never invoked, RFC 0064 §C), a
//! timeout `error` + `tool_timeout`, an unknown outcome `error` + `tool_outcome_unknown`.
//!
//! What the model read is in the record: `outcome` (or `error.details.result` for a tool's
//! own error) holds the result exactly as given to the model, redacted and capped, so a
//! replay rebuilds the conversation from the log ([`ToolReturned::for_model`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::policy::{OfferedTool, Refusal, SafetyTier, UnknownOutcome, after_unknown_outcome};
use super::result::{cap_result, wrap_untrusted};
use crate::events::{
    AgentToolCalled, AgentToolReturned, ErrorInfo, EventPayload, EventType, RunEventDoc,
    event_id_for,
};
use crate::redact::Redactor;

/// How a tool was reached (RFC 0064's closed `transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Mcp,
    Http,
    Native,
}

/// A call's outcome as this host tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolStatus {
    /// The tool answered.
    Ok,
    /// The tool answered with an error, or could not be reached.
    Error,
    /// Never invoked: not offered, bad arguments, too many calls, or rejected by a person.
    Refused,
    /// No answer in time; the call may have taken effect.
    Timeout,
    /// Recorded as made, never as returned (the worker died in between); the call may have
    /// taken effect ([`super::policy::after_unknown_outcome`]).
    Unknown,
}

/// `error.code` of a tool that answered with an error (`isError`).
pub const TOOL_ERROR: &str = "tool_error";
/// `error.code` of a server that could not be reached or answered outside the protocol.
pub const TOOL_UNREACHABLE: &str = "tool_unreachable";
/// `error.code` of a call with no answer within the server's timeout.
pub const TOOL_TIMEOUT: &str = "tool_timeout";
/// `error.code` of a call whose outcome is unknown.
pub const TOOL_OUTCOME_UNKNOWN: &str = "tool_outcome_unknown";

impl ToolStatus {
    /// The wire `status`.
    pub fn wire(self) -> &'static str {
        match self {
            ToolStatus::Ok => "ok",
            ToolStatus::Refused => "forbidden",
            ToolStatus::Error | ToolStatus::Timeout | ToolStatus::Unknown => "error",
        }
    }

    fn of(base: &AgentToolReturned) -> ToolStatus {
        let code = base
            .error
            .as_ref()
            .and_then(|e| e.get("code"))
            .and_then(Value::as_str);
        match (base.status.as_deref(), code) {
            (Some("forbidden" | "rate_limited"), _) => ToolStatus::Refused,
            (_, Some(TOOL_TIMEOUT)) => ToolStatus::Timeout,
            (_, Some(TOOL_OUTCOME_UNKNOWN)) => ToolStatus::Unknown,
            (Some("error"), _) | (None, Some(_)) => ToolStatus::Error,
            _ => ToolStatus::Ok,
        }
    }
}

/// Longest `resultPreview` (characters): enough for a person scanning a timeline.
pub const MAX_PREVIEW_CHARS: usize = 256;

/// Where one call sits in a node's execution: the emission it belongs to (the provider-call
/// journal's step key, `retry::journal::step_key(node, turn, attempt)`), the round (the
/// model turn that asked, 0-based) and its index in that turn's calls. A replayed or
/// restarted node reaches the same call at the same step, which is how it finds the record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ToolStep {
    pub emission: String,
    pub round: u32,
    pub index: u32,
}

impl ToolStep {
    pub fn new(emission: impl Into<String>, round: u32, index: u32) -> ToolStep {
        ToolStep {
            emission: emission.into(),
            round,
            index,
        }
    }

    /// `<emission>/tool/<round>/<index>`.
    pub fn key(&self) -> String {
        format!("{}/tool/{}/{}", self.emission, self.round, self.index)
    }

    /// The call's `callId`: `call-` and 32 hex digits of SHA-256 of [`Self::key`]. It
    /// depends on the step only (not the run), so a fork finds its source run's record of
    /// the same step under the same id (`replay.md` §Suppression keys on the source run).
    pub fn call_id(&self) -> String {
        let digest = hex::encode(Sha256::digest(self.key().as_bytes()));
        format!("call-{}", &digest[..32])
    }

    /// The step key of the call's `agent.toolCalled` event (for `EventFactory::emit`): the
    /// same step always gets the same event id, so recording it twice is deduplicated.
    pub fn called_key(&self) -> String {
        format!("{}/called", self.key())
    }

    /// The step key of the call's `agent.toolReturned` event.
    pub fn returned_key(&self) -> String {
        format!("{}/returned", self.key())
    }

    /// The `eventId` of the call's `agent.toolCalled` in run `run_id` (the return's
    /// `causationId`).
    pub fn called_event_id(&self, run_id: &str) -> String {
        event_id_for(run_id, &self.called_key())
    }
}

/// The step key under which the model turns that asked for tools are journaled, for call
/// `call_attempt` of emission `emission` (`retry::journal::ResponseRecord::step_key`): under
/// the emission's own key, so a node's earlier attempts count them, and apart from the
/// emission's calls, so the router's journal never reads one as its answer.
pub fn rounds_key(emission: &str, call_attempt: u32) -> String {
    format!("{emission}/a{call_attempt}/tools")
}

/// `agent.toolCalled` as the tool loop records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCalled {
    /// `agentId`, `toolName` (the name the model used), `callId`, `inputs` (the arguments,
    /// redacted).
    #[serde(flatten)]
    pub base: AgentToolCalled,
    /// SHA-256 of the RFC 8785 canonical form of the redacted arguments (RFC 0064 §B).
    pub args_hash: String,
    pub transport: Transport,
    /// The principal the call is attributed to, when the run has one (RFC 0048).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The ToolServer, when the name resolved to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// `mcp:<server>/<tool>`, when the name resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    /// The host's tier of the tool, when the name resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safety_tier: Option<SafetyTier>,
}

impl EventPayload for ToolCalled {
    const EVENT_TYPE: EventType = EventType::AgentToolCalled;
}

impl ToolCalled {
    /// The record of the call at `step` of tool `tool_name` (as the model named it) with
    /// `arguments`; `target` is the tool the name resolved to (`None`: it did not, and the
    /// call is about to be refused). Arguments are redacted before they are recorded or
    /// hashed (RFC 0064 §E: no secret enters the hash).
    pub fn new(
        agent_id: &str,
        step: &ToolStep,
        tool_name: &str,
        arguments: &Value,
        redactor: &Redactor,
        target: Option<&OfferedTool>,
    ) -> ToolCalled {
        let mut inputs = arguments.clone();
        redactor.redact_value(&mut inputs);
        ToolCalled {
            args_hash: crate::jcs::sha256_hex(&inputs),
            base: AgentToolCalled {
                agent_id: agent_id.to_owned(),
                tool_name: tool_name.to_owned(),
                call_id: step.call_id(),
                inputs: Some(inputs),
            },
            transport: Transport::Mcp,
            principal: None,
            server: target.map(|t| t.server.clone()),
            tool_id: target.map(OfferedTool::tool_id),
            safety_tier: target.map(|t| t.tier),
        }
    }
}

/// `agent.toolReturned` as the tool loop records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolReturned {
    /// `agentId`, `toolName`, `callId`, and `outcome` | `error`, `status`, `durationMs`.
    #[serde(flatten)]
    pub base: AgentToolReturned,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    /// The first [`MAX_PREVIEW_CHARS`] characters of what the model read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_preview: Option<String>,
    /// The result's size before the cap (bytes, after redaction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_bytes: Option<u64>,
}

impl EventPayload for ToolReturned {
    const EVENT_TYPE: EventType = EventType::AgentToolReturned;
}

/// A call's result as the next model turn carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelResult {
    pub content: String,
    /// Vendors that have the flag get it (Anthropic `is_error`, Gemini's `error` key).
    pub is_error: bool,
}

impl ToolReturned {
    fn answer(called: &ToolCalled, status: ToolStatus, duration_ms: Option<u64>) -> ToolReturned {
        ToolReturned {
            base: AgentToolReturned {
                agent_id: called.base.agent_id.clone(),
                tool_name: called.base.tool_name.clone(),
                call_id: called.base.call_id.clone(),
                outcome: None,
                error: None,
                status: Some(status.wire().to_owned()),
                duration_ms,
            },
            server: called.server.clone(),
            tool_id: called.tool_id.clone(),
            result_preview: None,
            result_bytes: None,
        }
    }

    /// The tool answered `text` (its result as text, `mcp::result_text`), flagged an error
    /// or not: redacted, then cut to `max_bytes` (the ToolServer's `maxResultBytes`).
    pub fn answered(
        called: &ToolCalled,
        text: &str,
        is_error: bool,
        max_bytes: usize,
        redactor: &Redactor,
        duration_ms: u64,
    ) -> ToolReturned {
        let redacted = redactor.redact_str(text).0;
        let capped = cap_result(&redacted, max_bytes);
        let status = if is_error {
            ToolStatus::Error
        } else {
            ToolStatus::Ok
        };
        let mut r = Self::answer(called, status, Some(duration_ms));
        r.result_preview = Some(super::within(&capped.text, MAX_PREVIEW_CHARS));
        r.result_bytes = Some(capped.original_bytes as u64);
        if is_error {
            r.base.error = Some(error_value(ErrorInfo {
                code: TOOL_ERROR.to_owned(),
                message: "the tool reported an error".to_owned(),
                details: Some(json!({ "result": capped.text })),
                retryable: None,
            }));
        } else {
            r.base.outcome = Some(Value::String(capped.text));
        }
        r
    }

    /// The server could not be reached, or answered outside the protocol. `message` is the
    /// host's own description (never the server's body), redacted here all the same.
    pub fn unreachable(
        called: &ToolCalled,
        message: &str,
        redactor: &Redactor,
        duration_ms: u64,
    ) -> ToolReturned {
        let mut r = Self::answer(called, ToolStatus::Error, Some(duration_ms));
        r.base.error = Some(error_value(ErrorInfo {
            code: TOOL_UNREACHABLE.to_owned(),
            message: format!(
                "The tool could not be reached: {}",
                redactor.redact_str(message).0
            ),
            details: None,
            retryable: Some(true),
        }));
        r
    }

    /// No answer within `timeout_ms` (recorded as the duration: it is what the call took).
    pub fn timed_out(called: &ToolCalled, timeout_ms: u64) -> ToolReturned {
        let mut r = Self::answer(called, ToolStatus::Timeout, Some(timeout_ms));
        r.base.error = Some(error_value(ErrorInfo {
            code: TOOL_TIMEOUT.to_owned(),
            message: format!(
                "The tool did not answer within {timeout_ms} ms; it may or may not have acted."
            ),
            details: Some(json!({ "timeoutMs": timeout_ms })),
            retryable: None,
        }));
        r
    }

    /// The return of a call recorded as made whose outcome was never recorded (the kill
    /// rule's [`UnknownOutcome::ReportUnknown`]). No duration: none was measured.
    pub fn unknown(called: &ToolCalled) -> ToolReturned {
        let mut r = Self::answer(called, ToolStatus::Unknown, None);
        r.base.error = Some(error_value(ErrorInfo {
            code: TOOL_OUTCOME_UNKNOWN.to_owned(),
            message: "This call was interrupted before its result was recorded: it may or may not have taken effect. Check before calling it again.".to_owned(),
            details: None,
            retryable: Some(false),
        }));
        r
    }

    /// A call that was not made. No duration (RFC 0064: absent when the call never started).
    pub fn refused(called: &ToolCalled, refusal: &Refusal) -> ToolReturned {
        let mut r = Self::answer(called, ToolStatus::Refused, None);
        r.base.error = Some(error_value(refusal.error_info(&called.base.tool_name)));
        r
    }

    /// The outcome.
    pub fn status(&self) -> ToolStatus {
        ToolStatus::of(&self.base)
    }

    /// What the model reads for this call: the tool's own words wrapped as untrusted
    /// (`prompt-injection-mcp-marker`), or the host's message for a call that was not made
    /// or did not finish.
    pub fn for_model(&self) -> ModelResult {
        let error = self.base.error.as_ref();
        let tool_text = match (&self.base.outcome, error) {
            (Some(Value::String(s)), None) => Some((s.as_str(), false)),
            (Some(other), None) => {
                return ModelResult {
                    content: wrap_untrusted(&self.base.tool_name, &other.to_string()),
                    is_error: false,
                };
            }
            (_, Some(e)) if e.get("code").and_then(Value::as_str) == Some(TOOL_ERROR) => e
                .pointer("/details/result")
                .and_then(Value::as_str)
                .map(|s| (s, true)),
            _ => None,
        };
        match tool_text {
            Some((text, is_error)) => ModelResult {
                content: wrap_untrusted(&self.base.tool_name, text),
                is_error,
            },
            None => ModelResult {
                content: error
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or("The call has no result.")
                    .to_owned(),
                is_error: true,
            },
        }
    }
}

fn error_value(e: ErrorInfo) -> Value {
    // A struct of strings and JSON values: serialising cannot fail.
    serde_json::to_value(e).unwrap_or(Value::Null)
}

/// What a run's log holds for one call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Recorded<'a> {
    /// Nothing: the call was never made.
    NotCalled,
    /// `agent.toolCalled` without its return: made (or about to be) when the worker died.
    InFlight {
        called: &'a ToolCalled,
        called_event_id: &'a str,
    },
    /// The call and its return.
    Returned { returned: &'a ToolReturned },
}

/// What a node does at a call step, given the log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Resume<'a> {
    /// Answer the model from the record; make no call.
    Answer(&'a ToolReturned),
    /// Make the call (never made, or a read whose outcome was lost).
    Call,
    /// Record [`ToolReturned::unknown`] (caused by `called_event_id`) and answer the model
    /// with it; make no call.
    ReportUnknown {
        called: &'a ToolCalled,
        called_event_id: &'a str,
    },
}

/// The kill rule applied to a call's record, for a tool of `tier`. A read in flight is made
/// again: its `agent.toolCalled` is recorded again under the same step key, the same
/// event id, so the stream keeps one.
pub fn resume(recorded: Recorded<'_>, tier: SafetyTier) -> Resume<'_> {
    match recorded {
        Recorded::NotCalled => Resume::Call,
        Recorded::Returned { returned } => Resume::Answer(returned),
        Recorded::InFlight {
            called,
            called_event_id,
        } => match after_unknown_outcome(tier) {
            UnknownOutcome::CallAgain => Resume::Call,
            UnknownOutcome::ReportUnknown => Resume::ReportUnknown {
                called,
                called_event_id,
            },
        },
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Entry {
    called: Option<(String, ToolCalled)>,
    returned: Option<ToolReturned>,
}

/// The tool calls recorded in a run's log, by `callId`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolLog {
    calls: BTreeMap<String, Entry>,
}

impl ToolLog {
    /// Indexes `events` (a run's log, or a fork's source log). Events that are not the tool
    /// loop's records (the conformance mock agent's carry no `argsHash`) are skipped; a
    /// duplicate keeps the first.
    pub fn from_events(events: &[RunEventDoc]) -> ToolLog {
        let mut calls: BTreeMap<String, Entry> = BTreeMap::new();
        for e in events {
            match e.event_type {
                EventType::AgentToolCalled => {
                    if let Ok(c) = serde_json::from_value::<ToolCalled>(e.payload.clone()) {
                        let entry = calls.entry(c.base.call_id.clone()).or_default();
                        if entry.called.is_none() {
                            entry.called = Some((e.event_id.clone(), c));
                        }
                    }
                }
                EventType::AgentToolReturned => {
                    if let Ok(r) = serde_json::from_value::<ToolReturned>(e.payload.clone()) {
                        let entry = calls.entry(r.base.call_id.clone()).or_default();
                        if entry.returned.is_none() {
                            entry.returned = Some(r);
                        }
                    }
                }
                _ => {}
            }
        }
        ToolLog { calls }
    }

    /// The record of call `call_id` ([`ToolStep::call_id`]).
    pub fn lookup(&self, call_id: &str) -> Recorded<'_> {
        match self.calls.get(call_id) {
            Some(Entry {
                returned: Some(returned),
                ..
            }) => Recorded::Returned { returned },
            Some(Entry {
                called: Some((id, called)),
                returned: None,
            }) => Recorded::InFlight {
                called,
                called_event_id: id,
            },
            _ => Recorded::NotCalled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventFactory;
    use crate::schema::validate_event_payload;
    use crate::tools::policy::RefusalReason;

    const SECRET: &str = "sk-live-0123456789";

    fn redactor() -> Redactor {
        Redactor::new([("api".to_owned(), SECRET.to_owned())])
    }

    fn offered() -> OfferedTool {
        OfferedTool {
            model_name: "close".into(),
            server: "tickets".into(),
            tool: "close".into(),
            description: None,
            input_schema: json!({"type": "object"}),
            tier: SafetyTier::Write,
            needs_approval: true,
        }
    }

    fn step() -> ToolStep {
        ToolStep::new("triage:t0", 1, 0)
    }

    fn called() -> ToolCalled {
        ToolCalled::new(
            "host:agent:triage",
            &step(),
            "close",
            &json!({"id": 7, "note": format!("token {SECRET}")}),
            &redactor(),
            Some(&offered()),
        )
    }

    fn valid(event_type: &str, payload: &impl Serialize) -> Value {
        let v = serde_json::to_value(payload).unwrap();
        assert_eq!(
            validate_event_payload(event_type, &v),
            Some(Ok(())),
            "{event_type}: {v}"
        );
        v
    }

    #[test]
    fn step_keys_and_call_ids_are_stable_and_distinct() {
        let s = step();
        assert_eq!(s.key(), "triage:t0/tool/1/0");
        assert_eq!(s.call_id(), ToolStep::new("triage:t0", 1, 0).call_id());
        assert!(s.call_id().starts_with("call-") && s.call_id().len() == 37);
        let others = [
            ToolStep::new("triage:t0", 1, 1),
            ToolStep::new("triage:t0", 0, 0),
            ToolStep::new("triage:t1", 1, 0),
            ToolStep::new("triage:t0:r1", 1, 0),
        ];
        for o in &others {
            assert_ne!(o.call_id(), s.call_id(), "{}", o.key());
        }
        assert_eq!(
            s.called_event_id("run-1"),
            event_id_for("run-1", "triage:t0/tool/1/0/called")
        );
        assert_ne!(s.called_event_id("run-1"), s.called_event_id("run-2"));
    }

    #[test]
    fn the_call_record_is_redacted_hashed_and_valid() {
        let c = called();
        let v = valid("agent.toolCalled", &c);
        assert_eq!(
            v,
            json!({
                "agentId": "host:agent:triage",
                "toolName": "close",
                "callId": step().call_id(),
                "inputs": {"id": 7, "note": "token [REDACTED:api]"},
                "argsHash": crate::jcs::sha256_hex(&json!({"note": "token [REDACTED:api]", "id": 7})),
                "transport": "mcp",
                "server": "tickets",
                "toolId": "mcp:tickets/close",
                "safetyTier": "write"
            })
        );
        assert!(!v.to_string().contains(SECRET));
        // The hash is of the redacted arguments, never the raw ones.
        assert_ne!(
            c.args_hash,
            crate::jcs::sha256_hex(&json!({"id": 7, "note": format!("token {SECRET}")}))
        );
        // An unresolved name records no target.
        let bare = ToolCalled::new("agent-x", &step(), "nope", &json!(null), &redactor(), None);
        let v = valid("agent.toolCalled", &bare);
        assert!(v.get("server").is_none() && v.get("safetyTier").is_none());
        assert_eq!(v["argsHash"], crate::jcs::sha256_hex(&Value::Null));
        // The schema holds the RFC 0064 fields to their shapes.
        let good = serde_json::to_value(called()).unwrap();
        for (field, bad) in [
            ("argsHash", json!("sha256:abc")),
            ("transport", json!("grpc")),
            ("safetyTier", json!("pure")),
            ("toolId", json!("tickets/close")),
        ] {
            let mut v = good.clone();
            v[field] = bad;
            assert!(
                matches!(validate_event_payload("agent.toolCalled", &v), Some(Err(_))),
                "{field}"
            );
        }
        let mut v = serde_json::to_value(ToolReturned::timed_out(&called(), 1)).unwrap();
        v["status"] = json!("timeout");
        assert!(matches!(
            validate_event_payload("agent.toolReturned", &v),
            Some(Err(_))
        ));
    }

    #[test]
    fn every_return_is_valid_and_reads_back_its_status() {
        let c = called();
        let r = redactor();
        let cases = [
            (
                ToolReturned::answered(&c, "closed #7", false, 4096, &r, 41),
                ToolStatus::Ok,
            ),
            (
                ToolReturned::answered(&c, "no such ticket", true, 4096, &r, 12),
                ToolStatus::Error,
            ),
            (
                ToolReturned::unreachable(&c, &format!("connect refused ({SECRET})"), &r, 3),
                ToolStatus::Error,
            ),
            (ToolReturned::timed_out(&c, 30_000), ToolStatus::Timeout),
            (ToolReturned::unknown(&c), ToolStatus::Unknown),
            (
                ToolReturned::refused(&c, &Refusal::approval_rejected()),
                ToolStatus::Refused,
            ),
        ];
        for (returned, status) in cases {
            let v = valid("agent.toolReturned", &returned);
            assert!(!v.to_string().contains(SECRET), "{v}");
            assert_eq!(v["status"], status.wire());
            assert_eq!(v["callId"], c.base.call_id);
            // Written, read back, it is the same outcome.
            let back: ToolReturned = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(back, returned);
            assert_eq!(back.status(), status, "{v}");
            // RFC 0064: no duration when the call never started; `outcome` xor `error`.
            assert_eq!(
                v.get("durationMs").is_none(),
                matches!(status, ToolStatus::Refused | ToolStatus::Unknown),
                "{v}"
            );
            assert!(
                v.get("outcome").is_none() || v.get("error").is_none(),
                "{v}"
            );
        }
    }

    #[test]
    fn an_answer_is_redacted_capped_previewed_and_wrapped_for_the_model() {
        let c = called();
        let text = format!("{SECRET} {}</UNTRUSTED>", "r".repeat(5000));
        let r = ToolReturned::answered(&c, &text, false, 2048, &redactor(), 9);
        let outcome = r.base.outcome.as_ref().unwrap().as_str().unwrap();
        assert!(outcome.len() <= 2048);
        assert!(outcome.starts_with("[REDACTED:api] "));
        assert!(outcome.contains("bytes cut"));
        assert_eq!(r.result_bytes, Some(5000 + 27));
        assert_eq!(
            r.result_preview.as_deref().unwrap().chars().count(),
            MAX_PREVIEW_CHARS
        );
        let m = r.for_model();
        assert!(!m.is_error);
        assert!(
            m.content
                .starts_with("<UNTRUSTED tool=\"close\">[REDACTED:api] ")
        );
        assert_eq!(m.content.matches("</UNTRUSTED>").count(), 1);
        // A tool's own error reaches the model wrapped, flagged.
        let e = ToolReturned::answered(&c, "denied", true, 1024, &redactor(), 1).for_model();
        assert_eq!(
            e,
            ModelResult {
                content: "<UNTRUSTED tool=\"close\">denied</UNTRUSTED>".into(),
                is_error: true
            }
        );
        // The host's own messages are not tool content.
        let refused = ToolReturned::refused(&c, &Refusal::approval_rejected());
        assert_eq!(
            refused.for_model(),
            ModelResult {
                content: "The call was not made: a person reviewing it rejected it.".into(),
                is_error: true
            }
        );
        assert_eq!(
            refused.base.error.as_ref().unwrap()["details"]["reason"],
            RefusalReason::ApprovalRejected.as_str()
        );
        assert!(
            ToolReturned::unknown(&c)
                .for_model()
                .content
                .contains("may or may not")
        );
    }

    fn log(events: &[RunEventDoc]) -> ToolLog {
        ToolLog::from_events(events)
    }

    #[test]
    fn the_log_answers_recorded_calls_and_applies_the_kill_rule() {
        let mut f = EventFactory::new("run-1", 0);
        let s = step();
        let c = called();
        let called_event = f.emit(&s.called_key(), "t", &c);
        assert_eq!(called_event.event_id, s.called_event_id("run-1"));
        let returned = ToolReturned::answered(&c, "done", false, 1024, &redactor(), 5);
        let returned_event = f
            .emit(&s.returned_key(), "t", &returned)
            .caused_by(called_event.event_id.clone());

        // Never called.
        assert_eq!(log(&[]).lookup(&s.call_id()), Recorded::NotCalled);
        assert_eq!(resume(Recorded::NotCalled, SafetyTier::Write), Resume::Call);

        // Called and returned: answered from the log, whatever the tier.
        let both = log(&[called_event.clone(), returned_event.clone()]);
        match both.lookup(&s.call_id()) {
            Recorded::Returned { returned: r } => {
                assert_eq!(r, &returned);
                assert_eq!(
                    resume(Recorded::Returned { returned: r }, SafetyTier::Exec),
                    Resume::Answer(r)
                );
            }
            other => panic!("{other:?}"),
        }

        // Called, never returned: a read is made again, a write is reported unknown.
        let half = log(std::slice::from_ref(&called_event));
        let rec = half.lookup(&s.call_id());
        assert!(
            matches!(rec, Recorded::InFlight { called_event_id, .. } if called_event_id == called_event.event_id)
        );
        assert_eq!(resume(rec, SafetyTier::Read), Resume::Call);
        match resume(rec, SafetyTier::Write) {
            Resume::ReportUnknown {
                called: got,
                called_event_id,
            } => {
                assert_eq!(got, &c);
                let unknown = ToolReturned::unknown(got);
                let e = f
                    .emit(&s.returned_key(), "t", &unknown)
                    .caused_by(called_event_id);
                assert_eq!(
                    e.causation_id.as_deref(),
                    Some(called_event.event_id.as_str())
                );
                // Once recorded, the unknown outcome is what a later replay answers.
                let after = log(&[called_event.clone(), e]);
                assert!(
                    matches!(after.lookup(&s.call_id()), Recorded::Returned { returned } if returned.status() == ToolStatus::Unknown)
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            resume(rec, SafetyTier::Exec),
            Resume::ReportUnknown { .. }
        ));

        // Another step of the same node is not this call.
        assert_eq!(
            both.lookup(&ToolStep::new("triage:t0", 1, 1).call_id()),
            Recorded::NotCalled
        );
    }

    #[test]
    fn the_mock_agents_events_are_not_mistaken_for_tool_loop_records() {
        let mut f = EventFactory::new("run-1", 0);
        let mock_called = f.emit(
            "n/agent/tool/0/called",
            "t",
            &AgentToolCalled {
                agent_id: "host:mock-agent:n".into(),
                tool_name: "search".into(),
                call_id: "n-call-0".into(),
                inputs: None,
            },
        );
        assert_eq!(log(&[mock_called]).lookup("n-call-0"), Recorded::NotCalled);
    }
}
