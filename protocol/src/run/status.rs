//! The status values of a Run as Kubernetes and OpenWOP clients see them: the phase, the
//! pending interrupt and the terminal error, with the bounds that keep a status small
//! (detail stays in the event stream, never in etcd).

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::text::truncate;

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

/// How a run's end is reported to people: a Kubernetes Event and the reason and message of
/// its `Succeeded` condition. One mapping, whichever way the operator learnt the run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndingReport {
    pub reason: EndReason,
    pub severity: Severity,
    pub message: String,
}

/// The reason of a run's end: its terminal phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    Completed,
    Failed,
    Cancelled,
}

impl EndReason {
    /// The wire string (a Kubernetes reason).
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Completed => "Completed",
            EndReason::Failed => "Failed",
            EndReason::Cancelled => "Cancelled",
        }
    }
}

/// Whether a report calls for attention (a Kubernetes `Warning` Event) or not (`Normal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Normal,
    Warning,
}

/// Who recorded the terminal phase the operator reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordedBy {
    /// The run's event stream (the status already shows the phase).
    Stream,
    /// The worker, in its termination summary.
    Worker,
    /// The cancel worker `spec.cancel` started: a cancellation someone asked for.
    CancelWorker,
}

/// The report of a run that ended in `phase` with `error`, as `by` recorded it; `None` for a
/// phase that ends nothing. Completed is `Normal`; failed is a `Warning` quoting the error;
/// cancelled is a `Warning` unless it is the cancellation `spec.cancel` asked for.
pub fn ending_report(
    phase: RunPhase,
    error: Option<&RunError>,
    by: RecordedBy,
) -> Option<EndingReport> {
    let (reason, severity, message) = match phase {
        RunPhase::Completed => (
            EndReason::Completed,
            Severity::Normal,
            "the run completed".to_owned(),
        ),
        RunPhase::Failed => (
            EndReason::Failed,
            Severity::Warning,
            error.map_or_else(
                || "the run failed".to_owned(),
                |e| format!("{}: {}", e.code, e.message),
            ),
        ),
        RunPhase::Cancelled => {
            let message = match by {
                RecordedBy::Stream => "the run was cancelled",
                RecordedBy::Worker | RecordedBy::CancelWorker => {
                    "the worker recorded the run as cancelled"
                }
            };
            let severity = if by == RecordedBy::CancelWorker {
                Severity::Normal
            } else {
                Severity::Warning
            };
            (EndReason::Cancelled, severity, message.to_owned())
        }
        _ => return None,
    };
    Some(EndingReport {
        reason,
        severity,
        message,
    })
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

/// The approval actions this host resolves: `reject` fails the gate, the others complete it
/// (`ask`, which does not leave the suspension, and the retired `edit` are not offered).
pub const APPROVAL_ACTIONS: [&str; 4] = ["accept", "reject", "refine", "edit-accept"];
/// The actions an approval offers when it names none (CP-1, a gate without `actions`).
pub const DEFAULT_APPROVAL_ACTIONS: [&str; 2] = ["accept", "reject"];
/// Longest approval title kept in status (characters).
pub const MAX_TITLE_CHARS: usize = 512;
/// Longest interrupt key kept in status (characters; the gate config's own bound).
pub const MAX_KEY_CHARS: usize = 256;

/// An interrupt waiting for an answer.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
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
    /// Actions an approval offers (empty: accept or reject).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4))]
    pub actions: Vec<String>,
    /// What the approver is asked (truncated to 512 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the event must carry (external-event): each key with an equal value. Kept from
    /// `interrupt.requested.data.correlation`, so the REST surfaces refuse a mismatch before
    /// the answer is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::structural::free_object")]
    pub correlation: Option<serde_json::Map<String, serde_json::Value>>,
    /// The interrupt's key (`interrupt.requested.key`), shown by `GET /v1/interrupts/{token}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub key: Option<String>,
    /// Accepts a quorum approval needs (absent: one answer decides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2, max = 100))]
    pub required_approvals: Option<u32>,
    /// How rejects end a quorum approval: `single-veto` or `majority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(single-veto|majority)$"))]
    pub rejection_policy: Option<String>,
}

/// Why an answer does not fit the interrupt it names (the REST interrupts endpoint and
/// `kubectl openwop resume` word it for their callers).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerMismatch {
    /// An approval (or rejection) for an interrupt that asks questions.
    #[error("interrupt {interrupt_id} is a {kind} interrupt, not an approval")]
    NotAnApproval { interrupt_id: String, kind: String },
    /// Answers for an interrupt that waits for an approval.
    #[error("interrupt {interrupt_id} waits for an approval, not answers")]
    WantsApproval { interrupt_id: String },
    /// Answers that are not exactly the interrupt's questions.
    #[error("interrupt {interrupt_id} must get exactly one answer per question ({}); unknown: {unknown:?}, missing: {missing:?}", known.join(", "))]
    Questions {
        interrupt_id: String,
        known: Vec<String>,
        unknown: Vec<String>,
        missing: Vec<String>,
    },
    /// An event for an external-event interrupt that does not carry its correlation
    /// (`keys`: the correlation keys missing or unequal, see `gate::correlation_mismatch`).
    #[error("correlation_mismatch: the event for interrupt {interrupt_id} must carry the correlation keys {} with the values it waits for", keys.join(", "))]
    Correlation {
        interrupt_id: String,
        keys: Vec<String>,
    },
}

impl PendingInterrupt {
    pub fn is_approval(&self) -> bool {
        self.kind == "approval"
    }

    /// An external-event interrupt: its answer is the event body, taken as sent.
    pub fn is_external_event(&self) -> bool {
        self.kind == "external-event"
    }

    /// The actions an answer to this approval may take.
    pub fn offered_actions(&self) -> Vec<String> {
        if self.actions.is_empty() {
            DEFAULT_APPROVAL_ACTIONS.map(str::to_owned).to_vec()
        } else {
            self.actions.clone()
        }
    }

    /// Whether an approval (`answers: None`) or these answers (question id → answer) fit
    /// what this interrupt waits for. An interrupt that lists questions takes exactly one
    /// answer for each; an external event must carry the interrupt's correlation; one that
    /// lists neither takes any answers.
    pub fn check_answer(
        &self,
        answers: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<(), AnswerMismatch> {
        let Some(answers) = answers else {
            return if self.is_approval() {
                Ok(())
            } else {
                Err(AnswerMismatch::NotAnApproval {
                    interrupt_id: self.interrupt_id.clone(),
                    kind: self.kind.clone(),
                })
            };
        };
        if self.is_approval() {
            return Err(AnswerMismatch::WantsApproval {
                interrupt_id: self.interrupt_id.clone(),
            });
        }
        if let Some(c) = &self.correlation {
            let answer = serde_json::Value::Object(answers.clone());
            let keys = super::correlation::correlation_mismatch(
                c,
                super::correlation::external_event(&answer),
            );
            if !keys.is_empty() {
                return Err(AnswerMismatch::Correlation {
                    interrupt_id: self.interrupt_id.clone(),
                    keys,
                });
            }
        }
        if self.questions.is_empty() {
            return Ok(());
        }
        let known: Vec<String> = self.questions.iter().map(|q| q.id.clone()).collect();
        let unknown: Vec<String> = answers
            .keys()
            .filter(|k| !known.contains(k))
            .cloned()
            .collect();
        let missing: Vec<String> = known
            .iter()
            .filter(|k| !answers.contains_key(*k))
            .cloned()
            .collect();
        if unknown.is_empty() && missing.is_empty() {
            Ok(())
        } else {
            Err(AnswerMismatch::Questions {
                interrupt_id: self.interrupt_id.clone(),
                known,
                unknown,
                missing,
            })
        }
    }

    /// Applies the status bounds (question count and length).
    pub fn bounded(mut self) -> Self {
        self.questions.truncate(MAX_QUESTIONS);
        self.actions.truncate(APPROVAL_ACTIONS.len());
        self.title = self.title.map(|t| truncate(&t, MAX_TITLE_CHARS));
        self.key = self.key.map(|k| truncate(&k, MAX_KEY_CHARS));
        for q in &mut self.questions {
            q.question = truncate(&q.question, MAX_QUESTION_CHARS);
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
            message: truncate(message, MAX_MESSAGE_CHARS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(kind: &str, questions: &[&str]) -> PendingInterrupt {
        PendingInterrupt {
            interrupt_id: "i1".into(),
            node_id: "n".into(),
            kind: kind.into(),
            questions: questions
                .iter()
                .map(|q| PendingQuestion {
                    id: (*q).into(),
                    question: "?".into(),
                })
                .collect(),
            ..PendingInterrupt::default()
        }
    }

    #[test]
    fn an_answer_must_fit_its_interrupt() {
        let map = |keys: &[&str]| -> serde_json::Map<String, serde_json::Value> {
            keys.iter()
                .map(|k| ((*k).to_owned(), serde_json::json!("v")))
                .collect()
        };
        let ask = pending("clarification", &["q1", "q2"]);
        assert_eq!(ask.check_answer(Some(&map(&["q2", "q1"]))), Ok(()));
        assert_eq!(
            ask.check_answer(Some(&map(&["q1", "q9"]))),
            Err(AnswerMismatch::Questions {
                interrupt_id: "i1".into(),
                known: vec!["q1".into(), "q2".into()],
                unknown: vec!["q9".into()],
                missing: vec!["q2".into()],
            })
        );
        assert!(matches!(
            ask.check_answer(None),
            Err(AnswerMismatch::NotAnApproval { kind, .. }) if kind == "clarification"
        ));
        // Without listed questions any answers fit.
        assert_eq!(
            pending("custom", &[]).check_answer(Some(&map(&["x"]))),
            Ok(())
        );
        let approval = pending("approval", &[]);
        assert_eq!(approval.check_answer(None), Ok(()));
        assert!(matches!(
            approval.check_answer(Some(&map(&[]))),
            Err(AnswerMismatch::WantsApproval { .. })
        ));
    }

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

    /// The one terminal phase → report mapping. The rows marked (*) changed when the three
    /// copies became this one: the summary path reported a failed run without an error as
    /// `Completed`; the cancel worker's path reported any phase as `Cancelled` (Normal).
    /// (phase, error, recorded by, the report as (reason, severity, message)).
    type Row<'a> = (
        RunPhase,
        Option<&'a RunError>,
        RecordedBy,
        Option<(EndReason, Severity, &'a str)>,
    );

    #[test]
    fn ending_report_table() {
        use EndReason as R;
        use RecordedBy::*;
        use Severity::*;
        let err = RunError::new("envelope_invalid", "bad envelope");
        let rows: Vec<Row> = vec![
            (
                RunPhase::Completed,
                None,
                Stream,
                Some((R::Completed, Normal, "the run completed")),
            ),
            (
                RunPhase::Completed,
                None,
                Worker,
                Some((R::Completed, Normal, "the run completed")),
            ),
            // (*) was reason Cancelled, "the worker recorded the run as completed"
            (
                RunPhase::Completed,
                None,
                CancelWorker,
                Some((R::Completed, Normal, "the run completed")),
            ),
            (
                RunPhase::Failed,
                Some(&err),
                Stream,
                Some((R::Failed, Warning, "envelope_invalid: bad envelope")),
            ),
            (
                RunPhase::Failed,
                Some(&err),
                Worker,
                Some((R::Failed, Warning, "envelope_invalid: bad envelope")),
            ),
            (
                RunPhase::Failed,
                None,
                Stream,
                Some((R::Failed, Warning, "the run failed")),
            ),
            // (*) was reason Completed, "the run completed"
            (
                RunPhase::Failed,
                None,
                Worker,
                Some((R::Failed, Warning, "the run failed")),
            ),
            (
                RunPhase::Cancelled,
                None,
                Stream,
                Some((R::Cancelled, Warning, "the run was cancelled")),
            ),
            (
                RunPhase::Cancelled,
                None,
                Worker,
                Some((
                    R::Cancelled,
                    Warning,
                    "the worker recorded the run as cancelled",
                )),
            ),
            (
                RunPhase::Cancelled,
                None,
                CancelWorker,
                Some((
                    R::Cancelled,
                    Normal,
                    "the worker recorded the run as cancelled",
                )),
            ),
            (RunPhase::Running, None, Worker, None),
            (RunPhase::Cancelling, None, CancelWorker, None),
        ];
        for (phase, error, by, want) in rows {
            let got = ending_report(phase, error, by).map(|r| (r.reason, r.severity, r.message));
            let want = want.map(|(r, s, m)| (r, s, m.to_owned()));
            assert_eq!(got, want, "{phase} recorded by {by:?}");
        }
        assert_eq!(
            [R::Completed, R::Failed, R::Cancelled].map(R::as_str),
            ["Completed", "Failed", "Cancelled"]
        );
    }
}
