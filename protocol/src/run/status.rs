//! The status values of a Run as Kubernetes and OpenWOP clients see them: the phase, the
//! pending interrupt and the terminal error, with the bounds that keep a status small
//! (detail stays in the event stream, never in etcd).

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most questions of one interrupt kept in status.
pub const MAX_QUESTIONS: usize = 16;
/// Longest question text kept in status (characters).
pub const MAX_QUESTION_CHARS: usize = 512;
/// Most pending interrupts kept in status (each branch of a run may wait on one).
pub const MAX_PENDING_INTERRUPTS: usize = 16;
/// Longest error message kept in status (characters).
pub const MAX_MESSAGE_CHARS: usize = 1024;

/// OpenWOP run status values.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RunPhase {
    #[default]
    Pending,
    Running,
    Paused,
    WaitingApproval,
    WaitingInput,
    WaitingExternal,
    Completed,
    Failed,
    Cancelling,
    Cancelled,
}

impl RunPhase {
    /// All phases, in wire order.
    pub const ALL: [RunPhase; 10] = [
        RunPhase::Pending,
        RunPhase::Running,
        RunPhase::Paused,
        RunPhase::WaitingApproval,
        RunPhase::WaitingInput,
        RunPhase::WaitingExternal,
        RunPhase::Completed,
        RunPhase::Failed,
        RunPhase::Cancelling,
        RunPhase::Cancelled,
    ];

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            RunPhase::Pending => "pending",
            RunPhase::Running => "running",
            RunPhase::Paused => "paused",
            RunPhase::WaitingApproval => "waiting-approval",
            RunPhase::WaitingInput => "waiting-input",
            RunPhase::WaitingExternal => "waiting-external",
            RunPhase::Completed => "completed",
            RunPhase::Failed => "failed",
            RunPhase::Cancelling => "cancelling",
            RunPhase::Cancelled => "cancelled",
        }
    }

    /// Completed, failed or cancelled: nothing more happens.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunPhase::Completed | RunPhase::Failed | RunPhase::Cancelled
        )
    }

    /// Suspended until someone answers (no worker pod is held).
    pub fn is_waiting(self) -> bool {
        matches!(
            self,
            RunPhase::WaitingApproval | RunPhase::WaitingInput | RunPhase::WaitingExternal
        )
    }
}

impl fmt::Display for RunPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The phase and the interrupt kind of a suspension (`node.suspended`): a low-confidence
/// decision waits for approval whatever kind the event names; a clarification waits for
/// input; anything else waits for an external event.
pub fn suspension(kind: Option<&str>, reason: Option<&str>) -> (RunPhase, &'static str) {
    if reason == Some("low-confidence") {
        return (RunPhase::WaitingApproval, "approval");
    }
    match kind {
        Some("approval") => (RunPhase::WaitingApproval, "approval"),
        Some("clarification") => (RunPhase::WaitingInput, "clarification"),
        Some("external-event") => (RunPhase::WaitingExternal, "external-event"),
        _ => (RunPhase::WaitingExternal, "custom"),
    }
}

/// The phase of a run that waits on `pending` (none: not waiting): the first pending
/// interrupt's.
pub fn waiting_phase(pending: &[PendingInterrupt]) -> Option<RunPhase> {
    let p = pending.first()?;
    Some(suspension(Some(&p.kind), p.reason.as_deref()).0)
}

/// An interrupt waiting for an answer.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PendingInterrupt {
    /// Interrupt id, to quote in `spec.answers[].interruptId`.
    pub interrupt_id: String,
    /// Suspended node.
    pub node_id: String,
    /// `clarification`, `approval`, `external-event` or `custom`.
    pub kind: String,
    /// Questions to answer (clarification).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub questions: Vec<PendingQuestion>,
    /// Why the run waits, e.g. `low-confidence`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Agent awaiting approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Escalation threshold (low-confidence approvals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// Observed confidence (low-confidence approvals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<f64>,
}

impl PendingInterrupt {
    /// Applies the status bounds (question count and length).
    pub fn bounded(mut self) -> Self {
        self.questions.truncate(MAX_QUESTIONS);
        for q in &mut self.questions {
            q.question = super::truncate(&q.question, MAX_QUESTION_CHARS);
        }
        self
    }
}

/// A clarification question.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PendingQuestion {
    /// Question id (answer key).
    pub id: String,
    /// Question text (truncated to 512 characters in status).
    pub question: String,
}

/// Terminal error of a run.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RunError {
    /// OpenWOP error code, e.g. `envelope_invalid`, `run_timeout`, `worker_crashed`.
    pub code: String,
    /// Human-readable message.
    pub message: String,
}

impl RunError {
    /// An error with its message bounded for status.
    pub fn new(code: impl Into<String>, message: &str) -> Self {
        RunError {
            code: code.into(),
            message: super::truncate(message, MAX_MESSAGE_CHARS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspension_maps_kind_and_low_confidence() {
        assert_eq!(
            suspension(Some("clarification"), None),
            (RunPhase::WaitingInput, "clarification")
        );
        assert_eq!(
            suspension(Some("clarification"), Some("low-confidence")),
            (RunPhase::WaitingApproval, "approval")
        );
        assert_eq!(
            suspension(Some("approval"), None),
            (RunPhase::WaitingApproval, "approval")
        );
        assert_eq!(
            suspension(None, None),
            (RunPhase::WaitingExternal, "custom")
        );
    }

    #[test]
    fn phases_round_trip_their_wire_names() {
        for p in RunPhase::ALL {
            let v = serde_json::to_value(p).unwrap();
            assert_eq!(v, p.as_str());
            assert_eq!(serde_json::from_value::<RunPhase>(v).unwrap(), p);
        }
    }
}
