//! The condition types and the reasons the reconcilers write on conditions and Kubernetes
//! Events. The wire strings are the enums' `as_str`; users and scripts read them
//! (`kubectl get events`, `kubectl wait --for=condition=Ready`), so they never change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use openwop_protocol::run::status::EndReason;

/// A condition type on a Workflow, a Run or a ToolServer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionType {
    /// Workflow: the definition is valid. Run: its workflow is snapshotted. ToolServer: its
    /// tools are listed.
    Ready,
    /// Run: a worker pod was started (or why not).
    Scheduled,
    /// Run: how it ended.
    Succeeded,
}

impl ConditionType {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Ready => "Ready",
            ConditionType::Scheduled => "Scheduled",
            ConditionType::Succeeded => "Succeeded",
        }
    }
}

/// The reason of a condition or of a Kubernetes Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    // Ready (Run).
    Snapshotted,
    WorkflowNotFound,
    WorkflowNotReady,
    /// A ToolServer an LLM node names is absent, does not admit the Run's namespace, or a
    /// header Secret it names cannot be read: the Run waits for it.
    ToolServerUnavailable,
    // Scheduled.
    Queued,
    PreviousRunTerminating,
    PodRejected,
    WorkerStarted,
    CancelWorkerStarted,
    // Succeeded, and the Events of an ending.
    /// The run ended in this terminal phase (protocol's one mapping).
    Ended(EndReason),
    Timeout,
    WorkerInputInvalid,
    WorkerCrashed,
    /// A snapshot the operator refuses to build (`snapshot::Refused::reason`: the run is
    /// too deep to decode, too large, ...).
    Refused(&'static str),
    // Events only.
    Cancelling,
    Suspended,
    Resumed,
    /// `spec.pause` was set: the worker is asked to stop at a safe point.
    Pausing,
    /// The run is paused and holds no pod.
    Paused,
    /// A run waits without a pod for a timer (a long `core.delay`) or a child run.
    Waiting,
    /// The operator started a worker because a timer was due or a child run ended.
    Woken,
    /// A `core.subWorkflow` node's child Run was created.
    ChildRunCreated,
    /// A child Run ended; its outcome reached the parent.
    ChildRunEnded,
    /// Cancelling the run cancelled its child runs.
    ChildRunsCancelled,
    EventsNotPurged,
    /// A Workflow became valid.
    Validated,
    /// A Workflow is not valid.
    Invalid,
    // Ready (Workflow).
    Valid,
    /// A ToolServer's `Ready` reason (`crds::toolserver::REASON_*`), also the reason of the
    /// Event that reports its change.
    ToolServer(&'static str),
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Snapshotted => "Snapshotted",
            Reason::WorkflowNotFound => "WorkflowNotFound",
            Reason::WorkflowNotReady => "WorkflowNotReady",
            Reason::ToolServerUnavailable => "ToolServerUnavailable",
            Reason::Queued => "Queued",
            Reason::PreviousRunTerminating => "PreviousRunTerminating",
            Reason::PodRejected => "PodRejected",
            Reason::WorkerStarted => "WorkerStarted",
            Reason::CancelWorkerStarted => "CancelWorkerStarted",
            Reason::Ended(r) => r.as_str(),
            Reason::Timeout => "Timeout",
            Reason::WorkerInputInvalid => "WorkerInputInvalid",
            Reason::WorkerCrashed => "WorkerCrashed",
            Reason::Refused(r) => r,
            Reason::Cancelling => "Cancelling",
            Reason::Suspended => "Suspended",
            Reason::Resumed => "Resumed",
            Reason::Pausing => "Pausing",
            Reason::Paused => "Paused",
            Reason::Waiting => "Waiting",
            Reason::Woken => "Woken",
            Reason::ChildRunCreated => "ChildRunCreated",
            Reason::ChildRunEnded => "ChildRunEnded",
            Reason::ChildRunsCancelled => "ChildRunsCancelled",
            Reason::EventsNotPurged => "EventsNotPurged",
            Reason::Validated => "Validated",
            Reason::Invalid => "Invalid",
            Reason::Valid => "Valid",
            Reason::ToolServer(r) => r,
        }
    }
}

/// Condition `type_`, keeping the transition time of `old`'s condition of that type when its
/// status is unchanged. `reason` is a [`Reason`] or, for a Workflow, its check's error code, or a ToolServer's
/// `crds::toolserver::REASON_*`.
pub fn condition(
    type_: ConditionType,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
    old: &[Condition],
) -> Condition {
    let type_ = type_.as_str();
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

/// Replaces the condition of `c`'s type in `list` (kept sorted by type).
pub fn set_condition(list: &mut Vec<Condition>, c: Condition) {
    list.retain(|x| x.type_ != c.type_);
    list.push(c);
    list.sort_by(|a, b| a.type_.cmp(&b.type_));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire strings: a rename here would break `kubectl wait` and every script reading
    /// Events.
    #[test]
    fn wire_strings_are_stable() {
        assert_eq!(
            [
                ConditionType::Ready,
                ConditionType::Scheduled,
                ConditionType::Succeeded
            ]
            .map(ConditionType::as_str),
            ["Ready", "Scheduled", "Succeeded"]
        );
        let reasons = [
            (Reason::Snapshotted, "Snapshotted"),
            (Reason::WorkflowNotFound, "WorkflowNotFound"),
            (Reason::WorkflowNotReady, "WorkflowNotReady"),
            (Reason::ToolServerUnavailable, "ToolServerUnavailable"),
            (Reason::Queued, "Queued"),
            (Reason::PreviousRunTerminating, "PreviousRunTerminating"),
            (Reason::PodRejected, "PodRejected"),
            (Reason::WorkerStarted, "WorkerStarted"),
            (Reason::CancelWorkerStarted, "CancelWorkerStarted"),
            (Reason::Ended(EndReason::Failed), "Failed"),
            (Reason::Timeout, "Timeout"),
            (Reason::WorkerInputInvalid, "WorkerInputInvalid"),
            (Reason::WorkerCrashed, "WorkerCrashed"),
            (Reason::Refused("InputTooDeep"), "InputTooDeep"),
            (Reason::Cancelling, "Cancelling"),
            (Reason::Suspended, "Suspended"),
            (Reason::Resumed, "Resumed"),
            (Reason::Pausing, "Pausing"),
            (Reason::Paused, "Paused"),
            (Reason::Waiting, "Waiting"),
            (Reason::Woken, "Woken"),
            (Reason::ChildRunCreated, "ChildRunCreated"),
            (Reason::ChildRunEnded, "ChildRunEnded"),
            (Reason::ChildRunsCancelled, "ChildRunsCancelled"),
            (Reason::EventsNotPurged, "EventsNotPurged"),
            (Reason::Validated, "Validated"),
            (Reason::Invalid, "Invalid"),
            (Reason::Valid, "Valid"),
        ];
        for (r, s) in reasons {
            assert_eq!(r.as_str(), s);
        }
    }
}
