//! Shared by the reconcilers: conditions, the Run status being computed ([`Draft`]),
//! Kubernetes Events (queued on [`crate::kube_events::EventSink`]), time arithmetic and
//! deletes that tolerate a missing object.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Resource;
use kube::api::{Api, DeleteParams};
use kube::runtime::events::EventType;
use openwop_crds::{RunError, RunPhase, RunStatus};
use openwop_protocol::run::status::{RecordedBy, Severity, ending_report};

use super::context::{Context, Error};
use crate::config::OperatorConfig;
use crate::kube_events::Note;
use crate::reasons::{ConditionType, Reason};
// One definition for every resource's conditions (the ToolServer reconciler's too).
pub(super) use crate::reasons::{condition, set_condition};

/// Whether `list` has condition `type_` True (with `reason`, when given).
pub(super) fn has_condition(
    list: &[Condition],
    type_: ConditionType,
    reason: Option<Reason>,
) -> bool {
    list.iter().any(|c| {
        c.type_ == type_.as_str()
            && c.status == "True"
            && reason.is_none_or(|r| c.reason == r.as_str())
    })
}

/// The Kubernetes Event type of a report's severity.
pub(super) fn event_type(s: Severity) -> EventType {
    match s {
        Severity::Normal => EventType::Normal,
        Severity::Warning => EventType::Warning,
    }
}

/// Records a Kubernetes Event about `obj`; best effort (a failure is logged).
pub(super) async fn publish(
    ctx: &Context,
    obj: &impl Resource<DynamicType = ()>,
    type_: EventType,
    reason: Reason,
    note: String,
) {
    let n = Note {
        type_,
        reason,
        note,
    };
    ctx.events.record(obj.object_ref(&()), n).await;
}

pub(super) async fn delete_ignoring_missing<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub(super) fn plus(t: Timestamp, secs: u64) -> Timestamp {
    t.checked_add(SignedDuration::from_secs(secs.min(i64::MAX as u64) as i64))
        .unwrap_or(t)
}

pub(super) fn wait_until(now: Timestamp, at: Timestamp) -> Duration {
    let d = at.duration_since(now);
    Duration::from_secs(d.as_secs().clamp(1, 3600) as u64)
}

/// Worker crash backoff: base × 2^(failures-1), capped.
pub fn backoff_seconds(cfg: &OperatorConfig, failures: u32) -> u64 {
    let exp = failures.saturating_sub(1).min(20);
    cfg.runs
        .backoff_base_seconds
        .saturating_mul(1u64 << exp)
        .min(cfg.runs.backoff_max_seconds)
}

/// Records in `status` the ending of a run its event stream ended (the worker's terminal
/// event, folded in), exactly as a reconcile records it ([`Draft::end`], recorded by the
/// stream): completion time, `Succeeded`, the Event to record once the status is written
/// (returned). The event consumer writes it with the terminal event, so the reconcile its
/// write triggers has nothing left to write. `None`, and `status` unchanged, unless the phase
/// is terminal and no ending was recorded yet.
pub fn end_by_stream(
    status: &mut RunStatus,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Note> {
    let phase = status.phase.filter(|p| p.is_terminal())?;
    if status.completion_time.is_some() {
        return None;
    }
    let mut draft = Draft::new(std::mem::take(status), generation, now);
    draft.end(phase, RecordedBy::Stream);
    *status = draft.status;
    draft.notes.pop()
}

/// What one Run reconcile decided: the status to write, the Events to record after it, and
/// the deletes to make before it. Changing it has no effect until the reconcile acts
/// ([`super::state::RunReconcile::act`]).
pub(super) struct Draft {
    pub(super) status: RunStatus,
    pub(super) notes: Vec<Note>,
    /// Pods to delete (in order) before the status is written.
    pub(super) delete_pods: Vec<String>,
    /// The Run's TTL after it finished has passed: delete it.
    pub(super) delete_run: bool,
    /// The Run's `metadata.generation`, for conditions.
    generation: Option<i64>,
    /// The reconcile's clock.
    now: Timestamp,
}

impl Draft {
    pub(super) fn new(status: RunStatus, generation: Option<i64>, now: Timestamp) -> Self {
        Draft {
            status,
            notes: vec![],
            delete_pods: vec![],
            delete_run: false,
            generation,
            now,
        }
    }

    pub(super) fn now(&self) -> Timestamp {
        self.now
    }

    /// Sets condition `type_`, keeping its transition time when its status is unchanged.
    pub(super) fn set_condition(
        &mut self,
        type_: ConditionType,
        ok: bool,
        reason: Reason,
        message: String,
    ) {
        let c = condition(
            type_,
            ok,
            reason.as_str(),
            message,
            self.generation,
            self.now,
            &self.status.conditions,
        );
        set_condition(&mut self.status.conditions, c);
    }

    pub(super) fn event(&mut self, type_: EventType, reason: Reason, note: String) {
        self.notes.push(Note {
            type_,
            reason,
            note,
        });
    }

    /// Removes and returns the note of the Event `reason` recorded so far, to fold it into
    /// another one of the same change.
    pub(super) fn take_note(&mut self, reason: Reason) -> Option<String> {
        let i = self.notes.iter().position(|n| n.reason == reason)?;
        Some(self.notes.remove(i).note)
    }

    /// The current worker pod goes (deleted when the reconcile acts).
    pub(super) fn stop_worker(&mut self) {
        if let Some(p) = self.status.worker_pod.take() {
            self.delete_pods.push(p);
        }
    }

    /// Ends the run `failed` with `error.code` = `code`, condition reason `reason` and a
    /// Warning Event `event_reason`, all carrying `message`.
    pub(super) fn fail(
        &mut self,
        code: &str,
        (reason, event_reason): (Reason, Reason),
        message: String,
    ) {
        self.status.error = Some(RunError::new(code, &message));
        self.close(RunPhase::Failed, reason, message.clone());
        self.event(EventType::Warning, event_reason, message);
    }

    /// Ends the run failed because no snapshot can be built from it (`refused`: undecodable
    /// or too large): Ready=False with the refusal's reason, the error, a Warning Event.
    pub(super) fn refuse(&mut self, refused: &crate::snapshot::Refused) {
        let msg = refused.to_string();
        let reason = Reason::Refused(refused.reason());
        self.set_condition(ConditionType::Ready, false, reason, msg.clone());
        self.fail(refused.code(), (reason, reason), msg);
    }

    /// Ends the run in `phase` with condition reason `reason` and an Event of type `t` and
    /// the same reason, both carrying `message` (every ending is reported both ways).
    pub(super) fn finish(
        &mut self,
        phase: RunPhase,
        (t, reason): (EventType, Reason),
        message: String,
    ) {
        self.close(phase, reason, message.clone());
        self.event(t, reason, message);
    }

    /// Ends the run in terminal `phase`, recorded by `by`, reported as protocol's one
    /// mapping ([`ending_report`]) says. A phase that ends nothing changes nothing.
    pub(super) fn end(&mut self, phase: RunPhase, by: RecordedBy) {
        let Some(report) = ending_report(phase, self.status.error.as_ref(), by) else {
            debug_assert!(false, "{phase} is not a terminal phase");
            return;
        };
        let ending = (event_type(report.severity), Reason::Ended(report.reason));
        self.finish(phase, ending, report.message);
    }

    /// The terminal status: phase, completion time, `Succeeded` condition.
    fn close(&mut self, phase: RunPhase, reason: Reason, message: String) {
        self.status.phase = Some(phase);
        self.status.completion_time = Some(Time(self.now));
        self.status.retry_after = None;
        self.status.pending_interrupts.clear();
        self.status.recording_interrupts.clear();
        self.status.running_nodes.clear();
        let ok = phase == RunPhase::Completed;
        if ok {
            // A completed run has no failure streak: an old count would read as a problem.
            self.status.failed_attempts = None;
            self.status.failed_at_sequence = None;
        }
        self.set_condition(ConditionType::Succeeded, ok, reason, message);
    }
}
