//! The nodes that wait for a person: `core.approvalGate`, `core.clarificationGate` and
//! `core.interrupt`. What a gate waits for, its events and how an answer resolves it are
//! protocol's (`openwop_protocol::run::gate`); this file records them. The wait holds no pod:
//! the node returns `Suspended`, the worker exits, and an answer in `spec.answers` starts a
//! new worker whose replay reaches this node again, finds the answer and resolves it.
//!
//! A quorum approval (`requiredApprovals` > 1) resolves once its votes decide
//! (`openwop_protocol::run::quorum`; the operator starts no worker before that). An approval
//! with `timeoutMs` records the delay's timer at `requestedAt + timeoutMs`; the operator
//! wakes the run then, and a gate still undecided times out rejected.

use openwop_protocol::run::gate::{self, Gate, GateEnd};
use openwop_protocol::run::snapshot::Answer;
use openwop_protocol::run::waits;
use time::OffsetDateTime;

use super::*;
use crate::eventlog::now_rfc3339;

impl<P: Publisher> Executor<'_, P> {
    pub(super) async fn gate(&self, node: &Node, attempt: u32) -> Result<NodeOutcome, LogError> {
        let id = node.id.as_str();
        let g = match Gate::of(id, &node.type_id, &node.config) {
            Ok(g) => g,
            // Registration refuses these configs; a definition that skipped it fails here.
            Err(e) => {
                return Ok(NodeOutcome::Failed(error(
                    "node_config_invalid",
                    format!("node {id}: {e}"),
                    false,
                )));
            }
        };
        let interrupt_id = gate::interrupt_id(self.run_id(), id, attempt);
        let key = |suffix: &str| gate::step(id, attempt, suffix);
        // Recorded once: a replay publishes the same ids and payloads, which the log drops
        // (so a replay reuses the recorded request time; a new one would be a divergence).
        let requested_at = self
            .recorded_at_step(&key("/requested"))
            .await
            .and_then(|p| p.get("requestedAt")?.as_str().map(str::to_owned))
            .unwrap_or_else(now_rfc3339);
        let w = g.wait(id, &interrupt_id, &requested_at);
        self.emit(&key("/suspended"), Some(id), &w.suspended)
            .await?;
        self.emit(&key("/requested"), Some(id), &w.requested)
            .await?;
        if let Some(a) = &w.approval {
            self.emit(&key("/approval.requested"), Some(id), a).await?;
        }
        if let Some(c) = &w.clarification {
            self.emit(&key("/clarification.requested"), Some(id), c)
                .await?;
        }
        // An approval with `timeoutMs`: the timer is recorded once, at requestedAt + timeoutMs
        // (the delay's record, so the operator wakes the run at it without a pod meanwhile).
        let wake = match g.wake_at(&requested_at) {
            Some(at) => {
                let step = key("/timer");
                let armed_before = self.recorded_at_step(&step).await.is_some();
                let ms = g.timeout_ms.unwrap_or_default();
                self.emit(&step, Some(id), &waits::timer_record(id, &at, ms))
                    .await?;
                Some((at, armed_before))
            }
            None => None,
        };
        // Answers given after the timeout do not count (the timeout won).
        let mine: Vec<&Answer> = self
            .snap
            .answers
            .iter()
            .filter(|a| a.interrupt_id == interrupt_id)
            .filter(|a| {
                wake.as_ref()
                    .is_none_or(|(at, _)| gate::answered_in_time(a, at))
            })
            .collect();
        if g.quorum().is_some() {
            // A quorum: the votes decide, or the gate keeps waiting (`run::quorum`).
            if let Some(q) = g.resolve_votes(id, &interrupt_id, mine.iter().copied()) {
                self.run_resumed(&interrupt_id).await?;
                for (i, v) in q.votes.iter().enumerate() {
                    self.emit(&key(&format!("/vote/{i}")), Some(id), v).await?;
                }
                return self.record_resolution(id, attempt, q.resolution).await;
            }
        } else if let Some(answer) = mine.last() {
            match g.resolve(id, &interrupt_id, answer) {
                Ok(r) => {
                    self.run_resumed(&interrupt_id).await?;
                    return self.record_resolution(id, attempt, r).await;
                }
                Err(refusal) => {
                    // An answer written to spec.answers by hand that cannot decide: the gate
                    // keeps waiting for one that can.
                    self.emit(
                        &key("/answer-refused"),
                        Some(id),
                        &LogAppended {
                            level: LogLevel::Warn,
                            message: format!("node {id}: answer refused: {refusal}"),
                            node_id: Some(id.to_owned()),
                            fields: Some(json!({"interruptId": interrupt_id})),
                        },
                    )
                    .await?;
                }
            }
        }
        let Some((at, armed_before)) = wake else {
            return Ok(NodeOutcome::Suspended(interrupt_id, g.kind));
        };
        let due = waits::parse_time(&at).unwrap_or_else(OffsetDateTime::now_utc);
        let rest = waits::remaining_ms(due, OffsetDateTime::now_utc());
        // Due, or nearly (the operator starts a worker a moment early): time out. A worker
        // that just armed the timer exits instead: the wait holds no pod.
        if rest > 0 && !(armed_before && rest <= self.snap.host.durable_wait_threshold_ms) {
            return Ok(NodeOutcome::Suspended(interrupt_id, g.kind));
        }
        if let Some(stopped) = self.sleep_cancellable(rest).await? {
            return Ok(stopped);
        }
        self.run_resumed(&interrupt_id).await?;
        let r = g.timed_out(id, &interrupt_id, &at);
        self.record_resolution(id, attempt, r).await
    }

    /// The payload recorded at `step` of this run, if any.
    pub(super) async fn recorded_at_step(&self, step: &str) -> Option<Value> {
        let event_id = openwop_protocol::events::event_id_for(self.run_id(), step);
        self.writer
            .lock()
            .await
            .log
            .events()
            .iter()
            .find(|e| e.event_id == event_id)
            .map(|e| e.payload.clone())
    }

    /// Records how a gate was resolved and ends the node as it says.
    async fn record_resolution(
        &self,
        id: &str,
        attempt: u32,
        r: gate::Resolution,
    ) -> Result<NodeOutcome, LogError> {
        let key = |suffix: &str| gate::step(id, attempt, suffix);
        if let Some(a) = &r.approval {
            self.emit(&key("/received"), Some(id), a).await?;
        }
        if let Some(c) = &r.clarification {
            self.emit(&key("/received"), Some(id), c).await?;
        }
        self.emit(&key("/resolved"), Some(id), &r.resolved).await?;
        self.emit(&key("/resumed"), Some(id), &r.resumed).await?;
        Ok(match r.outcome {
            GateEnd::Completed(outputs) => NodeOutcome::Completed(outputs),
            GateEnd::Failed(e) => NodeOutcome::Failed(e),
        })
    }
}
