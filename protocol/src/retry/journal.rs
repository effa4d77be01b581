//! The provider-call journal: the run's durable invocation log (OpenWOP `replay.md`
//! caveat 1, `idempotency.md` Layer 2), kept in the run's own event stream.
//!
//! Each provider response is recorded, redacted and bounded, in a `log.appended` debug event
//! (the spec's event types are closed and `provider.usage` must not carry response text;
//! `log.appended.fields` is the open object the spec allows) before the router routes it.
//! A restarted worker re-executes the emission from its first call, as the spec's resume
//! discipline requires: the router is deterministic, so every call it asks for again has the
//! same ordinal (`attempt`) and step key, and [`Journal::take`] hands back the recorded
//! response instead of calling the provider. Only a call whose response was never recorded
//! (in flight at the kill, or larger than [`MAX_RECORDED_RESPONSE_BYTES`]) is made again.
//!
//! The router always routes the *recorded* form of a response (redacted), live or restored,
//! so a restored emission yields exactly the events of an uninterrupted one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::response::NormalizedResponse;
use crate::events::{EventType, LogAppended, LogLevel, RunEventDoc};
use crate::redact::Redactor;

/// The key under `log.appended.fields` that marks a provider-response record.
pub const RESPONSE_RECORD_FIELD: &str = "providerResponse";

/// Largest recorded response (its serialized JSON, bytes). A larger one is recorded without
/// its content and is requested again after a restart; the bound keeps every event well
/// under NATS' default 1 MiB message size.
pub const MAX_RECORDED_RESPONSE_BYTES: usize = 512 * 1024;

/// One recorded call, as it rides in `fields.providerResponse`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseRecord {
    /// The emission's step key (`RouterConfig::step_key`).
    pub step_key: String,
    /// The call's ordinal within the emission (1-based, the router's `attempt`).
    pub attempt: u32,
    /// The budget the call was made with: a record only answers the same request.
    pub max_tokens: u32,
    /// The redacted response; `None` when it exceeded [`MAX_RECORDED_RESPONSE_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<NormalizedResponse>,
    /// Serialized size of the response, recorded or not.
    pub bytes: u64,
    /// The call got no response within the node's `settings.timeout`: the node attempt
    /// ended there. Recorded so a restarted worker knows the call was made (a scripted mock
    /// provider plays on from the next step, as the uninterrupted run did).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
}

impl ResponseRecord {
    /// The record of `response` to call `attempt` (budget `max_tokens`) of emission
    /// `step_key`, and the response to route: the redacted one.
    pub fn new(
        step_key: &str,
        attempt: u32,
        max_tokens: u32,
        response: &NormalizedResponse,
        redactor: &Redactor,
    ) -> (ResponseRecord, NormalizedResponse) {
        let redacted = redact(response, redactor);
        let bytes = serde_json::to_vec(&redacted).map_or(0, |v| v.len());
        let record = ResponseRecord {
            step_key: step_key.to_owned(),
            attempt,
            max_tokens,
            response: (bytes <= MAX_RECORDED_RESPONSE_BYTES).then(|| redacted.clone()),
            bytes: bytes as u64,
            timed_out: false,
        };
        (record, redacted)
    }

    /// The record of call `attempt` (budget `max_tokens`) of emission `step_key` that got no
    /// response before the node's timeout.
    pub fn timed_out(step_key: &str, attempt: u32, max_tokens: u32) -> ResponseRecord {
        ResponseRecord {
            step_key: step_key.to_owned(),
            attempt,
            max_tokens,
            response: None,
            bytes: 0,
            timed_out: true,
        }
    }

    /// The `log.appended` payload.
    pub fn to_payload(&self, node_id: &str) -> LogAppended {
        let message = if self.timed_out {
            format!(
                "provider call {} got no response before the node's timeout",
                self.attempt
            )
        } else {
            let what = if self.response.is_some() {
                "recorded"
            } else {
                "too large to record (made again after a restart)"
            };
            format!(
                "provider response to call {} ({} bytes) {what}",
                self.attempt, self.bytes
            )
        };
        LogAppended {
            level: LogLevel::Debug,
            message,
            node_id: Some(node_id.to_owned()),
            fields: Some(json!({ RESPONSE_RECORD_FIELD: self })),
        }
    }

    /// The record an event carries, if it is one.
    pub fn of_event(e: &RunEventDoc) -> Option<ResponseRecord> {
        if e.event_type != EventType::LogAppended {
            return None;
        }
        let v = e.payload.get("fields")?.get(RESPONSE_RECORD_FIELD)?;
        serde_json::from_value(v.clone()).ok()
    }
}

fn redact(r: &NormalizedResponse, redactor: &Redactor) -> NormalizedResponse {
    let mut r = r.clone();
    for s in [&mut r.text, &mut r.refusal_text, &mut r.thinking]
        .into_iter()
        .flatten()
    {
        redactor.redact_in_place(s);
    }
    if let Some(v) = &mut r.structured {
        redactor.redact_value(v);
    }
    // The arguments are model output like the rest: a tool is called with the redacted form
    // (what RFC 0064's argsHash covers), never with a secret the model echoed.
    for call in &mut r.tool_calls {
        redactor.redact_value(&mut call.arguments);
    }
    r
}

/// The step key of the emission of clarification turn `turn` in node attempt `node_attempt`
/// (0-based) of node `node_id`: what ties a record to the one emission that made the call.
pub fn step_key(node_id: &str, turn: u64, node_attempt: u32) -> String {
    if node_attempt == 0 {
        format!("{node_id}:t{turn}")
    } else {
        format!("{node_id}:t{turn}:r{node_attempt}")
    }
}

/// Provider calls recorded in `events` for clarification turn `turn` of node `node_id` in
/// the node attempts before `node_attempt`, answered or timed out. A scripted provider that
/// answers by position (the mock) continues after them in attempt `node_attempt`, as it did
/// in the uninterrupted run.
pub fn calls_in_earlier_attempts(
    events: &[RunEventDoc],
    node_id: &str,
    turn: u64,
    node_attempt: u32,
) -> usize {
    let keys: Vec<String> = (0..node_attempt)
        .map(|a| step_key(node_id, turn, a))
        .collect();
    events
        .iter()
        .filter(|e| e.node_id.as_deref() == Some(node_id))
        .filter_map(ResponseRecord::of_event)
        // The model turns of a tool loop are journaled under the emission's key
        // (`tools::record::rounds_key`): they were calls too.
        .filter(|r| {
            keys.iter().any(|k| {
                r.step_key == *k
                    || r.step_key
                        .strip_prefix(k.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            })
        })
        .count()
}

/// The output budget (`maxTokens`) of every provider call node `node_id` made, in call
/// order, from a run's log: what the conformance seams `mock-ai/dispatch-budgets` and
/// `last-dispatch-budget` report. Each call the worker makes is recorded once (answered or
/// timed out) before it is routed ([`ResponseRecord`]); a call restored from the journal
/// after a restart is not recorded again, so every call counts once.
pub fn dispatch_budgets(events: &[RunEventDoc], node_id: &str) -> Vec<u32> {
    let mut seen = std::collections::BTreeSet::new();
    events
        .iter()
        .filter(|e| e.node_id.as_deref() == Some(node_id))
        .filter_map(ResponseRecord::of_event)
        .filter(|r| seen.insert((r.step_key.clone(), r.attempt)))
        .map(|r| r.max_tokens)
        .collect()
}

/// The recorded responses of one emission, by call ordinal.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Journal {
    calls: BTreeMap<u32, ResponseRecord>,
}

impl Journal {
    /// The records of emission `step_key` of node `node_id` in `events` (a run's log).
    pub fn restore(events: &[RunEventDoc], node_id: &str, step_key: &str) -> Journal {
        let calls = events
            .iter()
            .filter(|e| e.node_id.as_deref() == Some(node_id))
            .filter_map(ResponseRecord::of_event)
            .filter(|r| r.step_key == step_key)
            .map(|r| (r.attempt, r))
            .collect();
        Journal { calls }
    }

    /// Calls recorded (with or without content).
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The recorded response to call `attempt` made with `max_tokens`, if there is one with
    /// content; the provider is then not called.
    pub fn take(&mut self, attempt: u32, max_tokens: u32) -> Option<NormalizedResponse> {
        let r = self.calls.remove(&attempt)?;
        if r.max_tokens != max_tokens {
            return None;
        }
        r.response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventFactory;
    use crate::retry::response::StopReason;

    fn record(f: &mut EventFactory, node: &str, key: &str, attempt: u32) -> RunEventDoc {
        let r = NormalizedResponse {
            stop: StopReason::Clean,
            text: Some("{}".into()),
            structured: None,
            refusal_text: None,
            thinking: None,
            tool_calls: vec![],
            usage: Default::default(),
            provider: "mock".into(),
            model: "m".into(),
        };
        let (rec, _) = ResponseRecord::new(key, attempt, 100, &r, &Redactor::default());
        let mut e = f.emit(&format!("{key}/{attempt}"), "t", &rec.to_payload(node));
        e.node_id = Some(node.to_owned());
        e
    }

    /// A restarted node attempt moves a scripted provider past every call the earlier
    /// attempts made, the model turns of their tool loops included; calls of the current
    /// attempt, another turn, another node or a key that merely starts alike do not count.
    #[test]
    fn earlier_attempts_count_their_tool_rounds() {
        let mut f = EventFactory::new("run-1", 0);
        let a0 = step_key("n", 0, 0);
        let a1 = step_key("n", 0, 1);
        let events = vec![
            record(&mut f, "n", &crate::tools::record::rounds_key(&a0, 1), 1),
            record(&mut f, "n", &crate::tools::record::rounds_key(&a0, 1), 2),
            record(&mut f, "n", &a0, 1),
            record(&mut f, "n", &a1, 1),
            record(&mut f, "n", &step_key("n", 1, 0), 1),
            record(&mut f, "m", &step_key("m", 0, 0), 1),
            record(&mut f, "n", &format!("{a0}0/tools"), 1),
        ];
        assert_eq!(calls_in_earlier_attempts(&events, "n", 0, 1), 3);
        assert_eq!(calls_in_earlier_attempts(&events, "n", 0, 2), 4);
        assert_eq!(calls_in_earlier_attempts(&events, "n", 0, 0), 0);
        // The router's journal of an emission reads only its own calls.
        assert_eq!(Journal::restore(&events, "n", &a0).len(), 1);
    }
}
