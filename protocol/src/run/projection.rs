//! The event → status projection: folds a run's `RunEventDoc`s into the few fields a Run's
//! status shows. The operator applies it to the live stream; the worker applies it to its
//! log to write its termination summary; both therefore agree on every phase.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::status::{
    APPROVAL_ACTIONS, MAX_KEY_CHARS, MAX_PENDING_INTERRUPTS, MAX_QUESTION_CHARS, MAX_QUESTIONS,
    MAX_TITLE_CHARS, PendingInterrupt, PendingQuestion, RunError, RunPhase, suspension,
    waiting_phase,
};
use super::waits::{ArmedTimer, ChildWait, MAX_WAITS, child_of, timer_of};
use crate::text::truncate;

/// Largest termination message the kubelet keeps (bytes).
pub const TERMINATION_MESSAGE_BYTES: usize = 4096;

/// The status fields the event stream determines. Serialized, it is the worker's termination
/// summary: `{phase, currentNode?, runningNodes?, events, lastSequence?, pendingInterrupts?, error?}`.
///
/// Concurrent branches: a node that suspends while others run leaves the run `running`; the
/// run waits (`waiting-input`, ...) only once no node is running and at least one interrupt
/// is pending, i.e. when nothing else can run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Projection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RunPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_node: Option<String>,
    #[serde(default)]
    pub events: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sequence: Option<u64>,
    /// Nodes started and not yet completed, failed or suspended.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub running_nodes: BTreeSet<String>,
    /// Every interrupt waiting for an answer, oldest first (at most
    /// [`MAX_PENDING_INTERRUPTS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_interrupts: Vec<PendingInterrupt>,
    /// Interrupts whose request events are still being recorded: a gate records
    /// `node.suspended` first, then `interrupt.requested` and `approval.requested` /
    /// `clarification.requested`, and a status may be written between any two of them. Such
    /// an interrupt is neither waited on nor answerable until the last of its request events
    /// moves it to `pending_interrupts`, so no reader ever sees an approval without its
    /// quorum, actions and title, or a clarification without its questions (a quorum judged
    /// without its `requiredApprovals` would be decided by one vote).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recording_interrupts: Vec<PendingInterrupt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// Delay nodes waiting for their wake time (durable waits, `run::waits`): the run stays
    /// `running` and the operator starts a worker at the earliest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timers: Vec<ArmedTimer>,
    /// Sub-workflow nodes waiting for their child run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildWait>,
}

/// The parts of one event the projection reads.
#[derive(Debug, Clone, Copy)]
pub struct EventView<'a> {
    pub event_type: &'a str,
    pub sequence: Option<u64>,
    pub node_id: Option<&'a str>,
    pub payload: &'a Value,
}

impl<'a> EventView<'a> {
    /// The view of a `RunEventDoc` as JSON.
    pub fn of_json(event: &'a Value) -> Self {
        const NULL: &Value = &Value::Null;
        EventView {
            event_type: s(event, "type").unwrap_or(""),
            sequence: event.get("sequence").and_then(Value::as_u64),
            node_id: s(event, "nodeId"),
            payload: event.get("payload").unwrap_or(NULL),
        }
    }

    /// The view of a typed `RunEventDoc`.
    pub fn of_doc(e: &'a crate::events::RunEventDoc) -> Self {
        EventView {
            event_type: e.event_type.as_str(),
            sequence: Some(e.sequence),
            node_id: e.node_id.as_deref(),
            payload: &e.payload,
        }
    }
}

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn questions_of(payload: &Value) -> Vec<PendingQuestion> {
    payload
        .get("questions")
        .and_then(Value::as_array)
        .map(|qs| {
            qs.iter()
                .take(MAX_QUESTIONS)
                .map(|q| PendingQuestion {
                    id: s(q, "id").unwrap_or_default().to_owned(),
                    question: truncate(s(q, "question").unwrap_or_default(), MAX_QUESTION_CHARS),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `event` (a `RunEventDoc` as JSON) ends its run: the projection's own answer, so
/// the operator, the worker and the CLI agree.
pub fn is_terminal(event: &Value) -> bool {
    let mut p = Projection::default();
    p.apply(event);
    p.phase.is_some_and(RunPhase::is_terminal)
}

/// The interrupts that were still open when the log `events` ended its run: the ones its
/// terminal event cut off (the projection itself clears them at the end). An answer to one of
/// them is answered as already resolved, not as unknown.
pub fn open_when_ended<'a>(events: impl IntoIterator<Item = &'a Value>) -> Vec<PendingInterrupt> {
    let mut p = Projection::default();
    for e in events {
        if !is_terminal(e) {
            p.apply(e);
        }
    }
    p.pending_interrupts.extend(p.recording_interrupts);
    p.pending_interrupts
}

impl Projection {
    /// The projection of a whole log.
    pub fn of_docs<'a>(events: impl IntoIterator<Item = &'a crate::events::RunEventDoc>) -> Self {
        let mut p = Projection::default();
        for e in events {
            p.apply_view(EventView::of_doc(e));
        }
        p
    }

    /// Applies one `RunEventDoc` (as JSON). See [`Projection::apply_view`].
    pub fn apply(&mut self, event: &Value) -> bool {
        self.apply_view(EventView::of_json(event))
    }

    /// Applies one event. Events at or below the last applied sequence are replays and
    /// change nothing. Returns whether the event was applied.
    pub fn apply_view(&mut self, e: EventView<'_>) -> bool {
        if let (Some(seq), Some(last)) = (e.sequence, self.last_sequence)
            && seq <= last
        {
            return false;
        }
        self.events += 1;
        if e.sequence.is_some() {
            self.last_sequence = e.sequence;
        }
        let payload = e.payload;
        let node = e.node_id.or_else(|| s(payload, "nodeId"));
        match e.event_type {
            "run.started" | "run.resumed" => self.phase = Some(RunPhase::Running),
            // The worker stopped at a safe point: nothing runs until the resume; abandoned
            // nodes (`immediate`) run again as fresh attempts.
            "run.paused" => {
                self.phase = Some(RunPhase::Paused);
                self.running_nodes.clear();
            }
            "node.started" | "node.resumed" => {
                if let Some(n) = node
                    && self.running_nodes.len() < crate::schedule::MAX_NODE_CONCURRENCY as usize
                {
                    self.running_nodes.insert(n.to_owned());
                }
                if e.event_type == "node.resumed" {
                    self.resolve(s(payload, "interruptId"), node);
                }
                self.phase = Some(RunPhase::Running);
                self.current_node = node.map(str::to_owned);
            }
            "node.completed" | "node.failed" | "node.cancelled" => {
                if let Some(n) = node {
                    self.running_nodes.remove(n);
                    self.timers.retain(|t| t.node_id != n);
                    self.children.retain(|c| c.node_id != n);
                }
                self.settle();
            }
            "log.appended" => {
                if let Some(t) = timer_of(payload) {
                    // The node waits without a pod: no longer running.
                    self.running_nodes.remove(&t.node_id);
                    self.timers.retain(|o| o.node_id != t.node_id);
                    if self.timers.len() < MAX_WAITS {
                        self.timers.push(t);
                    }
                    self.settle();
                }
            }
            "node.dispatched" => {
                if let Some(c) = child_of(node, payload) {
                    self.running_nodes.remove(&c.node_id);
                    self.children.retain(|o| o.node_id != c.node_id);
                    if self.children.len() < MAX_WAITS {
                        self.children.push(c);
                    }
                    self.settle();
                }
            }
            "node.suspended" => {
                let (_, kind) = suspension(s(payload, "kind"), s(payload, "reason"));
                let interrupt_id = s(payload, "interruptId").unwrap_or_default();
                let node_id = node.unwrap_or_default();
                self.running_nodes.remove(node_id);
                // What a companion event already said (a pipeline's clarification comes first).
                let earlier = self.take_any(interrupt_id, node_id);
                // A gate's request events follow its suspension; a low-confidence escalation
                // has none, and a pipeline's clarification recorded them before it.
                let recording = earlier.is_none() && s(payload, "reason") != Some("low-confidence");
                let earlier = earlier.map(|(p, _)| p).unwrap_or_default();
                let p = PendingInterrupt {
                    interrupt_id: interrupt_id.to_owned(),
                    node_id: node_id.to_owned(),
                    kind: kind.to_owned(),
                    questions: earlier.questions,
                    reason: s(payload, "reason").map(str::to_owned),
                    agent_id: s(payload, "agentId").map(str::to_owned),
                    threshold: payload.get("threshold").and_then(Value::as_f64),
                    observed: payload.get("observed").and_then(Value::as_f64),
                    actions: earlier.actions,
                    title: earlier.title,
                    correlation: earlier.correlation,
                    key: earlier.key,
                    required_approvals: earlier.required_approvals,
                    rejection_policy: earlier.rejection_policy,
                };
                self.put(p, recording);
                self.current_node = node.map(str::to_owned);
                self.settle();
            }
            "clarification.requested" => {
                // A clarification's last request event.
                let interrupt_id = s(payload, "interruptId").unwrap_or_default();
                let node_id = node.unwrap_or_default();
                let mut p = self
                    .take_any(interrupt_id, node_id)
                    .map(|(p, _)| p)
                    .unwrap_or_else(|| PendingInterrupt {
                        interrupt_id: interrupt_id.to_owned(),
                        node_id: node_id.to_owned(),
                        kind: "clarification".into(),
                        ..PendingInterrupt::default()
                    });
                p.questions = questions_of(payload);
                self.put(p, false);
                self.settle();
            }
            "interrupt.requested" => {
                // The key, and the correlation an external event must carry (its
                // node.suspended came first). The last request event of an external-event or
                // custom interrupt; an approval's or a clarification's companion follows.
                let interrupt_id = s(payload, "interruptId").unwrap_or_default();
                let node_id = node.unwrap_or_default();
                if let Some((mut p, recording)) = self.take_any(interrupt_id, node_id) {
                    p.key = s(payload, "key").map(|k| truncate(k, MAX_KEY_CHARS));
                    if s(payload, "kind") == Some("external-event") {
                        p.correlation = payload
                            .pointer("/data/correlation")
                            .and_then(Value::as_object)
                            .cloned();
                    }
                    let companion_follows = matches!(p.kind.as_str(), "approval" | "clarification");
                    self.put(p, recording && companion_follows);
                }
                self.settle();
            }
            "approval.requested" => {
                // The actions, title and quorum of a gate's approval: its last request event
                // (its node.suspended came first).
                let interrupt_id = s(payload, "interruptId").unwrap_or_default();
                let node_id = node.unwrap_or_default();
                if let Some((mut p, _)) = self.take_any(interrupt_id, node_id) {
                    p.actions = payload
                        .get("actions")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_str)
                                .take(APPROVAL_ACTIONS.len())
                                .map(str::to_owned)
                                .collect()
                        })
                        .unwrap_or_default();
                    p.title = s(payload, "title").map(|t| truncate(t, MAX_TITLE_CHARS));
                    // A quorum approval: the operator and the REST surface decide from
                    // `spec.answers` whether its votes resolve it (`run::quorum`).
                    let q = super::quorum::Quorum::of_data(payload);
                    if q.is_quorum() {
                        p.required_approvals =
                            Some(q.required.min(super::quorum::MAX_REQUIRED_APPROVALS));
                        p.rejection_policy = Some(q.policy.as_str().to_owned());
                    }
                    self.put(p, false);
                }
                self.settle()
            }
            // `approval.granted` resolved CP-1 approvals in logs written before
            // `approval.received` (it is RFC 0051's governance event now).
            "interrupt.resolved"
            | "clarification.resolved"
            | "approval.received"
            | "approval.granted" => {
                self.resolve(s(payload, "interruptId"), node);
                self.phase = Some(RunPhase::Running);
            }
            "run.completed" => self.end(RunPhase::Completed),
            "run.cancelled" => self.end(RunPhase::Cancelled),
            "run.failed" => {
                self.end(RunPhase::Failed);
                let err = payload.get("error").unwrap_or(payload);
                self.error = Some(RunError::new(
                    s(err, "code").unwrap_or("run_failed"),
                    s(err, "message").unwrap_or("the run failed"),
                ));
            }
            _ => {}
        }
        true
    }

    /// The phase once nothing else can run: the waiting phase of the pending interrupts.
    /// The worker stamps it on its summary when it exits suspended.
    /// Everything the worker records for its waits is in its log by then: an interrupt still
    /// being recorded (a log written by a worker that recorded no request events) is pending.
    pub fn suspend(&mut self) {
        self.running_nodes.clear();
        let recorded = std::mem::take(&mut self.recording_interrupts);
        for p in recorded {
            self.push_pending(p);
        }
        self.settle();
    }

    fn end(&mut self, phase: RunPhase) {
        self.phase = Some(phase);
        self.pending_interrupts.clear();
        self.recording_interrupts.clear();
        self.running_nodes.clear();
        self.timers.clear();
        self.children.clear();
    }

    /// The earliest wake time of the armed timers (RFC 3339), if any.
    pub fn wake_at(&self) -> Option<&str> {
        self.timers
            .iter()
            .filter_map(|t| Some((super::waits::parse_time(&t.wake_at)?, t.wake_at.as_str())))
            .min_by_key(|(at, _)| *at)
            .map(|(_, s)| s)
    }

    /// Whether a node waits without a pod (a timer or a child run).
    pub fn dormant(&self) -> bool {
        !self.timers.is_empty() || !self.children.is_empty()
    }

    /// Waiting only when no node runs and something is pending; running otherwise.
    fn settle(&mut self) {
        if self.running_nodes.is_empty()
            && let Some(phase) = waiting_phase(&self.pending_interrupts)
        {
            self.phase = Some(phase);
        } else if self.phase.is_none_or(RunPhase::is_waiting) {
            self.phase = Some(RunPhase::Running);
        }
    }

    /// Removes the pending interrupt `id` (or, without an id, the one of `node`; with
    /// neither, all: an older log's resolution names nothing).
    fn resolve(&mut self, id: Option<&str>, node: Option<&str>) {
        for list in [&mut self.pending_interrupts, &mut self.recording_interrupts] {
            match (id, node) {
                (Some(id), _) => list.retain(|p| p.interrupt_id != id),
                (None, Some(n)) => list.retain(|p| p.node_id != n),
                (None, None) => list.clear(),
            }
        }
    }

    /// Takes the entry of interrupt `id`, or an entry of `node` without an id yet, from the
    /// pending or the recording interrupts; `true` when it was still being recorded.
    fn take_any(&mut self, id: &str, node: &str) -> Option<(PendingInterrupt, bool)> {
        let matches = |p: &PendingInterrupt| {
            (!id.is_empty() && p.interrupt_id == id)
                || (p.interrupt_id.is_empty() && p.node_id == node)
        };
        if let Some(i) = self.recording_interrupts.iter().position(matches) {
            return Some((self.recording_interrupts.remove(i), true));
        }
        let i = self.pending_interrupts.iter().position(matches)?;
        Some((self.pending_interrupts.remove(i), false))
    }

    /// Files `p` as still being recorded or as pending.
    fn put(&mut self, p: PendingInterrupt, recording: bool) {
        if !recording {
            self.push_pending(p);
        } else if self.recording_interrupts.len() < MAX_PENDING_INTERRUPTS {
            self.recording_interrupts.push(p);
        }
    }

    fn push_pending(&mut self, p: PendingInterrupt) {
        if self.pending_interrupts.len() < MAX_PENDING_INTERRUPTS {
            self.pending_interrupts.push(p);
        }
    }

    /// The termination message: this projection as JSON within
    /// [`TERMINATION_MESSAGE_BYTES`] (question texts shortened, then dropped, if needed).
    pub fn to_termination_message(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        if text.len() <= TERMINATION_MESSAGE_BYTES {
            return text;
        }
        let mut p = self.clone();
        for pi in &mut p.pending_interrupts {
            for q in &mut pi.questions {
                q.question = truncate(&q.question, 64);
            }
        }
        let text = serde_json::to_string(&p).unwrap_or_default();
        if text.len() <= TERMINATION_MESSAGE_BYTES {
            return text;
        }
        for pi in &mut p.pending_interrupts {
            pi.questions.clear();
        }
        p.running_nodes.clear();
        if let Some(e) = &mut p.error {
            e.message = truncate(&e.message, 256);
        }
        serde_json::to_string(&p).unwrap_or_default()
    }

    /// Parses a worker termination message; `None` when absent or not a summary (e.g. the
    /// log tail the kubelet substitutes after a crash). Bounds are applied again: the message
    /// is untrusted input.
    pub fn from_termination_message(text: &str) -> Option<Projection> {
        let mut p: Projection = serde_json::from_str(text.trim()).ok()?;
        p.phase?;
        p.pending_interrupts.truncate(MAX_PENDING_INTERRUPTS);
        p.pending_interrupts = p
            .pending_interrupts
            .into_iter()
            .map(PendingInterrupt::bounded)
            .collect();
        p.recording_interrupts.truncate(MAX_PENDING_INTERRUPTS);
        p.recording_interrupts = p
            .recording_interrupts
            .into_iter()
            .map(PendingInterrupt::bounded)
            .collect();
        p.error = p.error.map(|e| RunError::new(e.code, &e.message));
        p.timers.truncate(MAX_WAITS);
        p.timers
            .retain(|t| super::waits::parse_time(&t.wake_at).is_some() && t.node_id.len() <= 256);
        p.children.truncate(MAX_WAITS);
        p.children
            .retain(|c| c.node_id.len() <= 256 && c.child_run_name.len() <= 253);
        Some(p)
    }
}

/// The status a run shows once `newer` is known: the stored projection (`stored`, what the
/// Run's status says) merged with a projection that knows more — the stored one with the
/// run's new events folded in (the operator's event consumer), or the worker's termination
/// summary (the reconciler). Field by field:
///
/// * **phase** — a terminal phase never changes (a run the operator failed or cancelled
///   stays so, whatever late events say); `cancelling` holds until `newer` is terminal (late
///   events of the stopped worker must not make it look running again); otherwise `newer`'s,
///   else the stored one;
/// * **pending and recording interrupts, running nodes, timers, child waits, error** — they belong to the phase: the stored ones
///   while the phase is held, else `newer`'s (the error: `newer`'s, else the stored one);
/// * **current node** — `newer`'s, else the stored one (informational: the last node named);
/// * **events, lastSequence** — the larger: counters never go backwards (the consumer may
///   have seen more than a summary, or the other way round).
pub fn merge(stored: &Projection, newer: &Projection) -> Projection {
    let newer_ends = newer.phase.is_some_and(RunPhase::is_terminal);
    let held = stored.phase.is_some_and(RunPhase::is_terminal)
        || (stored.phase == Some(RunPhase::Cancelling) && !newer_ends);
    let from = if held { stored } else { newer };
    Projection {
        phase: if held {
            stored.phase
        } else {
            newer.phase.or(stored.phase)
        },
        current_node: newer
            .current_node
            .clone()
            .or_else(|| stored.current_node.clone()),
        events: stored.events.max(newer.events),
        last_sequence: stored.last_sequence.max(newer.last_sequence),
        running_nodes: from.running_nodes.clone(),
        pending_interrupts: from.pending_interrupts.clone(),
        recording_interrupts: from.recording_interrupts.clone(),
        timers: from.timers.clone(),
        children: from.children.clone(),
        error: if held {
            stored.error.clone()
        } else {
            newer.error.clone().or_else(|| stored.error.clone())
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(seq: u64, ty: &str, payload: Value) -> Value {
        json!({"eventId": format!("e{seq}"), "runId": "r", "type": ty, "sequence": seq,
               "timestamp": "2025-01-01T00:00:00Z", "payload": payload})
    }

    #[test]
    fn happy_path_ends_completed_with_counters() {
        let mut p = Projection::default();
        p.apply(&ev(0, "run.started", json!({})));
        p.apply(&ev(1, "node.started", json!({"nodeId": "a"})));
        assert_eq!(
            (p.phase, p.current_node.as_deref()),
            (Some(RunPhase::Running), Some("a"))
        );
        p.apply(&ev(2, "node.completed", json!({"nodeId": "a"})));
        p.apply(&ev(3, "run.completed", json!({})));
        assert_eq!(p.phase, Some(RunPhase::Completed));
        assert_eq!((p.events, p.last_sequence), (4, Some(3)));
    }

    #[test]
    fn replayed_events_are_ignored() {
        let mut p = Projection::default();
        assert!(p.apply(&ev(0, "run.started", json!({}))));
        assert!(p.apply(&ev(1, "node.started", json!({"nodeId": "a"}))));
        assert!(!p.apply(&ev(1, "node.started", json!({"nodeId": "a"}))));
        assert!(!p.apply(&ev(0, "run.started", json!({}))));
        assert_eq!(p.events, 2);
    }

    #[test]
    fn low_confidence_suspension_waits_for_approval() {
        let mut p = Projection::default();
        p.apply(&ev(
            0,
            "node.suspended",
            json!({"nodeId": "m", "interruptId": "i1",
            "reason": "low-confidence", "agentId": "agent-x", "threshold": 0.7, "observed": 0.4}),
        ));
        assert_eq!(p.phase, Some(RunPhase::WaitingApproval));
        let pi = p.pending_interrupts[0].clone();
        assert_eq!(
            (pi.interrupt_id.as_str(), pi.kind.as_str(), pi.observed),
            ("i1", "approval", Some(0.4))
        );
        p.apply(&ev(1, "interrupt.resolved", json!({})));
        assert_eq!(
            (p.phase, p.pending_interrupts.is_empty()),
            (Some(RunPhase::Running), true)
        );
    }

    #[test]
    fn an_external_event_waits_external_with_its_correlation() {
        let mut p = Projection::default();
        p.apply(&ev(
            0,
            "node.suspended",
            json!({"nodeId": "w", "interruptId": "i1", "kind": "external-event"}),
        ));
        p.apply(&ev(
            1,
            "interrupt.requested",
            json!({"nodeId": "w", "interruptId": "i1", "kind": "external-event",
                   "data": {"eventType": "order.updated", "correlation": {"orderId": "o-1"}}}),
        ));
        assert_eq!(p.phase, Some(RunPhase::WaitingExternal));
        let pi = &p.pending_interrupts[0];
        assert_eq!(pi.kind, "external-event");
        assert_eq!(
            serde_json::to_value(&pi.correlation).unwrap(),
            json!({"orderId": "o-1"})
        );
        // The status round trip keeps it (the REST surfaces read it from there).
        let back = Projection::from_termination_message(&p.to_termination_message()).unwrap();
        assert_eq!(back.pending_interrupts[0].correlation, pi.correlation);
    }

    #[test]
    fn an_approval_gate_waits_with_its_actions_and_approval_received_resolves_it() {
        let mut p = Projection::default();
        p.apply(&ev(0, "node.started", json!({"nodeId": "gate"})));
        p.apply(&ev(
            1,
            "node.suspended",
            json!({"nodeId": "gate", "interruptId": "i1", "kind": "approval"}),
        ));
        p.apply(&ev(
            2,
            "interrupt.requested",
            json!({"nodeId": "gate", "interruptId": "i1", "kind": "approval", "data": {}}),
        ));
        p.apply(&ev(
            3,
            "approval.requested",
            json!({"nodeId": "gate", "interruptId": "i1", "artifactId": "gate", "artifactType": "approval",
                   "title": "t".repeat(600), "actions": ["accept", "reject", "refine"]}),
        ));
        assert_eq!(
            (p.phase, p.current_node.as_deref()),
            (Some(RunPhase::WaitingApproval), Some("gate"))
        );
        let pi = &p.pending_interrupts[0];
        assert_eq!(pi.actions, ["accept", "reject", "refine"]);
        assert!(pi.title.as_ref().unwrap().chars().count() <= MAX_TITLE_CHARS + 1);
        p.apply(&ev(
            4,
            "approval.received",
            json!({"nodeId": "gate", "interruptId": "i1", "action": "accept", "decidedBy": "alice"}),
        ));
        assert_eq!(
            (p.phase, p.pending_interrupts.is_empty()),
            (Some(RunPhase::Running), true)
        );
    }

    /// A run cancelled while its gate waited: the status forgets the interrupt, the log keeps
    /// it open at the end; one answered before the end is not open.
    #[test]
    fn the_interrupts_a_cancel_cut_off_are_read_from_the_log() {
        let waiting = |seq: u64, node: &str, id: &str| {
            ev(
                seq,
                "node.suspended",
                json!({"nodeId": node, "interruptId": id, "kind": "approval"}),
            )
        };
        let log = vec![
            ev(0, "run.started", json!({})),
            waiting(1, "a", "ia"),
            waiting(2, "b", "ib"),
            ev(
                3,
                "interrupt.resolved",
                json!({"nodeId": "a", "interruptId": "ia"}),
            ),
            ev(4, "run.cancelled", json!({"reason": "parent-cancelled"})),
        ];
        let open: Vec<String> = open_when_ended(&log)
            .into_iter()
            .map(|p| p.node_id)
            .collect();
        assert_eq!(open, ["b"]);
        let mut p = Projection::default();
        log.iter().for_each(|e| {
            p.apply(e);
        });
        assert!(p.pending_interrupts.is_empty(), "the status clears them");
    }

    #[test]
    fn clarification_waits_for_input_with_bounded_questions() {
        let mut p = Projection::default();
        let long = "q".repeat(2000);
        let qs: Vec<Value> = (0..40)
            .map(|i| json!({"id": format!("q{i}"), "question": long}))
            .collect();
        p.apply(&ev(
            0,
            "clarification.requested",
            json!({"nodeId": "n", "questions": qs, "interruptId": "i9"}),
        ));
        p.apply(&ev(
            1,
            "node.suspended",
            json!({"nodeId": "n", "interruptId": "i9", "kind": "clarification"}),
        ));
        assert_eq!(p.phase, Some(RunPhase::WaitingInput));
        let pi = p.pending_interrupts[0].clone();
        assert_eq!(pi.questions.len(), MAX_QUESTIONS);
        assert!(pi.questions[0].question.chars().count() <= MAX_QUESTION_CHARS + 1);
        assert_eq!(pi.interrupt_id, "i9");
        // The summary of this state fits a termination message and parses back.
        let msg = p.to_termination_message();
        assert!(msg.len() <= TERMINATION_MESSAGE_BYTES, "{}", msg.len());
        let back = Projection::from_termination_message(&msg).unwrap();
        assert_eq!(back.phase, Some(RunPhase::WaitingInput));
        assert_eq!(back.pending_interrupts[0].interrupt_id, "i9");
    }

    #[test]
    fn an_older_interrupts_questions_are_not_carried_to_a_new_one() {
        let mut p = Projection::default();
        p.apply(&ev(
            0,
            "clarification.requested",
            json!({"nodeId": "n", "questions": [{"id": "a", "question": "A?"}], "interruptId": "i1"}),
        ));
        p.apply(&ev(
            1,
            "node.suspended",
            json!({"nodeId": "m", "interruptId": "i2", "kind": "approval"}),
        ));
        // Its approval's last request event (the gate records it after the suspension).
        p.apply(&ev(
            2,
            "approval.requested",
            json!({"nodeId": "m", "interruptId": "i2", "actions": ["accept", "reject"]}),
        ));
        // Two interrupts of two nodes: each keeps its own questions.
        assert_eq!(p.pending_interrupts.len(), 2);
        assert_eq!(p.pending_interrupts[0].questions.len(), 1);
        assert!(p.pending_interrupts[1].questions.is_empty());
    }

    #[test]
    fn failure_keeps_code_and_bounded_message() {
        let mut p = Projection::default();
        p.apply(&ev(
            0,
            "run.failed",
            json!({"error": {"code": "envelope_invalid", "message": "x".repeat(5000)}}),
        ));
        assert_eq!(p.phase, Some(RunPhase::Failed));
        let e = p.error.clone().unwrap();
        assert_eq!(e.code, "envelope_invalid");
        assert!(e.message.chars().count() <= super::super::status::MAX_MESSAGE_CHARS + 1);
        assert!(p.to_termination_message().len() <= TERMINATION_MESSAGE_BYTES);
    }

    #[test]
    fn termination_message_parses_or_is_ignored() {
        let s = Projection::from_termination_message(r#"{"phase":"waiting-input","currentNode":"n","events":7,"lastSequence":6,
            "pendingInterrupts":[{"interruptId":"i1","nodeId":"n","kind":"clarification","questions":[{"id":"q","question":"Which?"}]}]}"#).unwrap();
        assert_eq!(s.phase, Some(RunPhase::WaitingInput));
        assert_eq!(s.last_sequence, Some(6));
        assert_eq!(s.pending_interrupts[0].questions[0].id, "q");
        assert!(Projection::from_termination_message("panic: boom").is_none());
        assert!(Projection::from_termination_message(r#"{"phase":"exploded"}"#).is_none());
        assert!(Projection::from_termination_message(r#"{"events":3}"#).is_none());
    }

    #[test]
    fn concurrent_branches_wait_only_when_nothing_else_runs() {
        let mut p = Projection::default();
        let suspended = |node: &str, id: &str| json!({"nodeId": node, "interruptId": id, "kind": "clarification"});
        let node = |n: &str| json!({"nodeId": n});
        p.apply(&ev(0, "run.started", json!({})));
        for (i, n) in ["q1", "q2", "free"].iter().enumerate() {
            p.apply(&ev(1 + i as u64, "node.started", node(n)));
        }
        p.apply(&ev(4, "clarification.requested", json!({"nodeId": "q1", "interruptId": "i1", "questions": [{"id": "a", "question": "A?"}]})));
        p.apply(&ev(5, "node.suspended", suspended("q1", "i1")));
        // q2 and free still run: the run is running, with q1's interrupt listed.
        assert_eq!(p.phase, Some(RunPhase::Running));
        assert_eq!(p.pending_interrupts.len(), 1);
        p.apply(&ev(6, "node.suspended", suspended("q2", "i2")));
        // A gate records its questions after its suspension: not waited on before them.
        assert_eq!(p.recording_interrupts.len(), 1);
        p.apply(&ev(7, "clarification.requested", json!({"nodeId": "q2", "interruptId": "i2", "questions": [{"id": "b", "question": "B?"}]})));
        assert_eq!(p.phase, Some(RunPhase::Running));
        p.apply(&ev(8, "node.completed", node("free")));
        // Nothing else can run: waiting for input, both interrupts listed in order.
        assert_eq!(p.phase, Some(RunPhase::WaitingInput));
        let ids: Vec<&str> = p
            .pending_interrupts
            .iter()
            .map(|p| p.interrupt_id.as_str())
            .collect();
        assert_eq!(ids, ["i1", "i2"]);
        assert_eq!(p.pending_interrupts[0].questions[0].id, "a");
        // q2 answered (a new worker): q2 runs again, then finishes; q1 still waits.
        p.apply(&ev(9, "run.resumed", json!({"interruptId": "i2"})));
        p.apply(&ev(
            10,
            "clarification.resolved",
            json!({"nodeId": "q2", "interruptId": "i2"}),
        ));
        p.apply(&ev(
            11,
            "node.resumed",
            json!({"nodeId": "q2", "interruptId": "i2"}),
        ));
        assert_eq!(p.phase, Some(RunPhase::Running));
        p.apply(&ev(12, "node.completed", node("q2")));
        assert_eq!(p.phase, Some(RunPhase::WaitingInput));
        assert_eq!(p.pending_interrupts.len(), 1);
        assert_eq!(p.pending_interrupts[0].node_id, "q1");
        // The list is bounded.
        for i in 0..(MAX_PENDING_INTERRUPTS as u64 + 5) {
            let (n, x) = (format!("n{i}"), format!("x{i}"));
            p.apply(&ev(13 + 2 * i, "node.suspended", suspended(&n, &x)));
            p.apply(&ev(
                14 + 2 * i,
                "clarification.requested",
                json!({"nodeId": n, "interruptId": x, "questions": [{"id": "q", "question": "Q?"}]}),
            ));
        }
        assert_eq!(p.pending_interrupts.len(), MAX_PENDING_INTERRUPTS);
        assert!(p.recording_interrupts.is_empty());
        assert!(p.to_termination_message().len() <= TERMINATION_MESSAGE_BYTES);
    }

    /// A projection for the merge table: `phase`, `node`, `(events, lastSequence)`, pending
    /// interrupt ids, running nodes, error code.
    fn pj(
        phase: Option<RunPhase>,
        node: Option<&str>,
        (events, last): (u64, Option<u64>),
        pending: &[&str],
        running: &[&str],
        error: Option<&str>,
    ) -> Projection {
        Projection {
            phase,
            current_node: node.map(str::to_owned),
            events,
            last_sequence: last,
            running_nodes: running.iter().map(|n| (*n).to_owned()).collect(),
            pending_interrupts: pending
                .iter()
                .map(|id| PendingInterrupt {
                    interrupt_id: (*id).into(),
                    node_id: "n".into(),
                    kind: "clarification".into(),
                    ..PendingInterrupt::default()
                })
                .collect(),
            error: error.map(|c| RunError::new(c, "m")),
            ..Projection::default()
        }
    }

    /// The merge rule, case by case. The rows marked (*) are where the operator's two earlier
    /// merges disagreed: the reconciler's (a worker summary overwrote phase, interrupts and
    /// running nodes) and the event consumer's (which held terminal and cancelling phases,
    /// but took the fold's counters and current node as they were).
    #[test]
    fn merge_table() {
        use RunPhase::*;
        let rows: Vec<(&str, Projection, Projection, Projection)> = vec![
            (
                "(*) a terminal phase the operator set is never revived by a later summary or event",
                pj(
                    Some(Failed),
                    Some("a"),
                    (3, Some(2)),
                    &[],
                    &[],
                    Some("run_timeout"),
                ),
                pj(
                    Some(Running),
                    Some("b"),
                    (5, Some(4)),
                    &["i1"],
                    &["b"],
                    None,
                ),
                pj(
                    Some(Failed),
                    Some("b"),
                    (5, Some(4)),
                    &[],
                    &[],
                    Some("run_timeout"),
                ),
            ),
            (
                "(*) a terminal phase is not replaced by another terminal phase either",
                pj(Some(Cancelled), None, (2, Some(1)), &[], &[], None),
                pj(Some(Failed), None, (3, Some(2)), &[], &[], Some("boom")),
                pj(Some(Cancelled), None, (3, Some(2)), &[], &[], None),
            ),
            (
                "(*) cancelling holds against a non-terminal projection (late events of the stopped worker)",
                pj(Some(Cancelling), Some("a"), (2, Some(1)), &[], &[], None),
                pj(
                    Some(WaitingInput),
                    Some("a"),
                    (3, Some(2)),
                    &["i1"],
                    &[],
                    None,
                ),
                pj(Some(Cancelling), Some("a"), (3, Some(2)), &[], &[], None),
            ),
            (
                "cancelling ends when the projection is terminal",
                pj(
                    Some(Cancelling),
                    Some("a"),
                    (2, Some(1)),
                    &["i0"],
                    &[],
                    None,
                ),
                pj(Some(Cancelled), Some("a"), (3, Some(2)), &[], &[], None),
                pj(Some(Cancelled), Some("a"), (3, Some(2)), &[], &[], None),
            ),
            (
                "a running run follows the projection: phase, interrupts, running nodes",
                pj(Some(Running), Some("a"), (2, Some(1)), &[], &["a"], None),
                pj(
                    Some(WaitingInput),
                    Some("a"),
                    (4, Some(3)),
                    &["i1"],
                    &[],
                    None,
                ),
                pj(
                    Some(WaitingInput),
                    Some("a"),
                    (4, Some(3)),
                    &["i1"],
                    &[],
                    None,
                ),
            ),
            (
                "(*) counters never go backwards: a summary that saw fewer events than the consumer",
                pj(Some(Running), Some("a"), (10, Some(9)), &[], &["a"], None),
                pj(Some(Completed), Some("a"), (4, Some(3)), &[], &[], None),
                pj(Some(Completed), Some("a"), (10, Some(9)), &[], &[], None),
            ),
            (
                "(*) a projection naming no node keeps the stored current node",
                pj(Some(Running), Some("a"), (2, Some(1)), &[], &["a"], None),
                pj(Some(Running), None, (3, Some(2)), &[], &[], None),
                pj(Some(Running), Some("a"), (3, Some(2)), &[], &[], None),
            ),
            (
                "the error is the projection's, else the stored one",
                pj(Some(Running), None, (1, Some(0)), &[], &[], Some("earlier")),
                pj(
                    Some(Failed),
                    None,
                    (2, Some(1)),
                    &[],
                    &[],
                    Some("envelope_invalid"),
                ),
                pj(
                    Some(Failed),
                    None,
                    (2, Some(1)),
                    &[],
                    &[],
                    Some("envelope_invalid"),
                ),
            ),
            (
                "a projection without a phase or error keeps the stored ones",
                pj(Some(Pending), None, (0, None), &[], &[], Some("earlier")),
                pj(None, None, (0, None), &[], &[], None),
                pj(Some(Pending), None, (0, None), &[], &[], Some("earlier")),
            ),
        ];
        for (case, stored, newer, want) in rows {
            assert_eq!(merge(&stored, &newer), want, "{case}");
        }
    }

    #[test]
    fn a_timer_or_child_wait_keeps_the_run_running_without_a_node_running() {
        let mut p = Projection::default();
        p.apply(&ev(0, "run.started", json!({})));
        p.apply(&ev(1, "node.started", json!({"nodeId": "wait"})));
        let rec = serde_json::to_value(crate::run::waits::timer_record(
            "wait",
            "2026-01-01T00:01:00.000Z",
            60000,
        ))
        .unwrap();
        p.apply(&ev(2, "log.appended", rec));
        p.apply(&ev(3, "node.started", json!({"nodeId": "sub"})));
        p.apply(&ev(
            4,
            "node.dispatched",
            json!({"nodeId": "sub", "childRunName": "p-c1", "childWorkflowId": "child"}),
        ));
        assert_eq!(p.phase, Some(RunPhase::Running));
        assert!(p.running_nodes.is_empty());
        assert!(p.dormant());
        assert_eq!(p.wake_at(), Some("2026-01-01T00:01:00.000Z"));
        assert_eq!(p.children[0].child_run_name, "p-c1");
        // The worker exits: nothing runs, yet nothing needs an answer.
        let mut summary = p.clone();
        summary.suspend();
        assert_eq!(summary.phase, Some(RunPhase::Running));
        let back = Projection::from_termination_message(&summary.to_termination_message());
        assert_eq!(back.as_ref().map(|b| &b.timers), Some(&p.timers));
        // Beside a pending interrupt the run waits for the answer (and the timer).
        p.apply(&ev(
            5,
            "node.suspended",
            json!({"nodeId": "gate", "interruptId": "i1", "kind": "approval"}),
        ));
        assert_eq!(
            p.phase,
            Some(RunPhase::Running),
            "its approval is still being recorded"
        );
        p.apply(&ev(
            6,
            "approval.requested",
            json!({"nodeId": "gate", "interruptId": "i1", "actions": ["accept", "reject"]}),
        ));
        assert_eq!(p.phase, Some(RunPhase::WaitingApproval));
        p.apply(&ev(7, "node.completed", json!({"nodeId": "wait"})));
        p.apply(&ev(8, "node.failed", json!({"nodeId": "sub"})));
        assert!(!p.dormant() && p.wake_at().is_none());
        let merged = merge(&Projection::default(), &summary);
        assert_eq!((merged.timers.len(), merged.children.len()), (1, 1));
        p.apply(&ev(9, "run.cancelled", json!({})));
        assert!(p.timers.is_empty());
    }
}
