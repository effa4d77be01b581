//! The nodes that wait for a person: `core.approvalGate`, `core.clarificationGate` and
//! `core.interrupt`. What a gate waits for, its events and how an answer resolves it are
//! protocol's (`openwop_protocol::run::gate`); this file records them. The wait holds no pod:
//! the node returns `Suspended`, the worker exits, and an answer in `spec.answers` starts a
//! new worker whose replay reaches this node again, finds the answer and resolves it.

use openwop_protocol::run::gate::{self, Gate, GateEnd};

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
        let requested_id =
            openwop_protocol::events::event_id_for(self.run_id(), &key("/requested"));
        let requested_at = self
            .writer
            .lock()
            .await
            .log
            .events()
            .iter()
            .find(|e| e.event_id == requested_id)
            .and_then(|e| e.payload.get("requestedAt")?.as_str().map(str::to_owned))
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
        let Some(answer) = self.snap.answer(&interrupt_id).cloned() else {
            return Ok(NodeOutcome::Suspended(interrupt_id, g.kind));
        };
        let r = match g.resolve(id, &interrupt_id, &answer) {
            Ok(r) => r,
            Err(refusal) => {
                // An answer written to spec.answers by hand that cannot decide: the gate keeps
                // waiting for one that can.
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
                return Ok(NodeOutcome::Suspended(interrupt_id, g.kind));
            }
        };
        self.run_resumed(&interrupt_id).await?;
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
