//! Shared by the Run reconciler's steps: conditions, the status being computed ([`Step`]),
//! Kubernetes Events, time arithmetic and deletes that tolerate a missing object.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Resource;
use kube::api::{Api, DeleteParams};
use kube::runtime::events::{Event, EventType};
use openwop_crds::{RunError, RunPhase, RunStatus};
use openwop_protocol::run::projection::Projection;

use super::{Context, Error};
use crate::config::OperatorConfig;

pub(super) fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
    old: &[Condition],
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let since = old
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: since,
    }
}

pub(super) fn set_condition(list: &mut Vec<Condition>, c: Condition) {
    list.retain(|x| x.type_ != c.type_);
    list.push(c);
    list.sort_by(|a, b| a.type_.cmp(&b.type_));
}

pub(super) async fn publish(
    ctx: &Context,
    obj: &impl Resource<DynamicType = ()>,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: None,
    };
    // Events are best-effort: failing to record one must not fail the reconcile.
    if let Err(e) = ctx.recorder().publish(&ev, &obj.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "could not publish Kubernetes Event");
    }
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

pub(super) struct Step {
    pub(super) status: RunStatus,
    pub(super) events: Vec<(EventType, &'static str, String)>,
}

impl Step {
    /// Sets condition `type_`, keeping its transition time when its status is unchanged.
    pub(super) fn set_condition(
        &mut self,
        type_: &str,
        ok: bool,
        reason: &str,
        message: String,
        generation: Option<i64>,
        now: Timestamp,
    ) {
        let c = condition(
            type_,
            ok,
            reason,
            message,
            generation,
            now,
            &self.status.conditions,
        );
        set_condition(&mut self.status.conditions, c);
    }

    pub(super) fn event(&mut self, t: EventType, reason: &'static str, note: String) {
        self.events.push((t, reason, note));
    }

    /// Ends the run `failed` with `error.code` = `code`, condition reason `reason` and a
    /// Warning Event `event_reason`, all carrying `message`.
    pub(super) fn fail(
        &mut self,
        now: Timestamp,
        generation: Option<i64>,
        code: &str,
        (reason, event_reason): (&str, &'static str),
        message: String,
    ) {
        self.status.error = Some(RunError::new(code, &message));
        self.close(RunPhase::Failed, now, generation, reason, message.clone());
        self.event(EventType::Warning, event_reason, message);
    }

    /// Ends the run failed because no snapshot can be built from it (`refused`: undecodable
    /// or too large): Ready=False with the refusal's reason, the error, a Warning Event.
    pub(super) fn refuse(
        &mut self,
        refused: &crate::snapshot::Refused,
        now: Timestamp,
        generation: Option<i64>,
    ) {
        let msg = refused.to_string();
        let reason = refused.reason();
        self.set_condition("Ready", false, reason, msg.clone(), generation, now);
        self.fail(now, generation, refused.code(), (reason, reason), msg);
    }

    /// Ends the run in `phase` with condition reason `reason` and an Event of type `t` and
    /// the same reason, both carrying `message` (every ending is reported both ways).
    pub(super) fn finish(
        &mut self,
        phase: RunPhase,
        now: Timestamp,
        generation: Option<i64>,
        (t, reason): (EventType, &'static str),
        message: String,
    ) {
        self.close(phase, now, generation, reason, message.clone());
        self.event(t, reason, message);
    }

    /// The terminal status: phase, completion time, `Succeeded` condition.
    fn close(
        &mut self,
        phase: RunPhase,
        now: Timestamp,
        generation: Option<i64>,
        reason: &str,
        message: String,
    ) {
        let old = self.status.conditions.clone();
        self.status.phase = Some(phase);
        self.status.completion_time = Some(Time(now));
        self.status.retry_after = None;
        self.status.pending_interrupts.clear();
        self.status.running_nodes.clear();
        let ok = phase == RunPhase::Completed;
        if ok {
            // A completed run has no failure streak: an old count would read as a problem.
            self.status.failed_attempts = None;
            self.status.failed_at_sequence = None;
        }
        set_condition(
            &mut self.status.conditions,
            condition("Succeeded", ok, reason, message, generation, now, &old),
        );
    }
}

pub(super) fn apply_projection(st: &mut RunStatus, p: &Projection) {
    st.phase = p.phase.or(st.phase);
    if p.current_node.is_some() {
        st.current_node = p.current_node.clone();
    }
    // Counters never go backwards (the event consumer may have seen more than the summary).
    if p.events > st.events.unwrap_or(0) {
        st.events = Some(p.events);
    }
    if p.last_sequence > st.last_sequence {
        st.last_sequence = p.last_sequence;
    }
    st.pending_interrupts = p.pending_interrupts.clone();
    st.running_nodes = p.running_nodes.clone();
    if p.error.is_some() {
        st.error = p.error.clone();
    }
}
