//! A run as the API shows it: the RunSnapshot of a Run (`GET /v1/runs/{runId}`, the list,
//! the event stream's state snapshots) and the Run brought up to its event log, which every
//! request that must agree with that view checks against.

use std::time::Duration;

use kube::{Resource as _, ResourceExt};
use openwop_crds::Run;
use openwop_crds::names::{ANNOTATION_METADATA, ANNOTATION_SCOPE_ID, ANNOTATION_TAGS};
use openwop_protocol::run::projection::merge;
use openwop_protocol::run::{Projection, RunFacts, RunSnapshotDoc};
use serde_json::Value;

use super::state::RestState;

/// How long `GET /v1/runs/{runId}` reads the run's log for events its status has not taken in
/// yet before answering from the status alone.
const FRESHNESS_READ: Duration = Duration::from_secs(3);

/// The RunSnapshot of a Run: its status through protocol's one mapping, with the OpenWOP
/// workflow id (from the Workflow in the cache when the Run names it by Kubernetes name).
pub fn snapshot_of(s: &RestState, run: &Run) -> RunSnapshotDoc {
    let st = run.status.clone().unwrap_or_default();
    snapshot_with(s, run, &st.projection(), None)
}

/// The RunSnapshot of a Run whose event-derived state is `p` (its status's projection, or
/// that with newer events folded in); `ended_at`: when `p` ended the run, if the status does
/// not know yet.
pub fn snapshot_with(
    s: &RestState,
    run: &Run,
    p: &Projection,
    ended_at: Option<String>,
) -> RunSnapshotDoc {
    let st = run.status.clone().unwrap_or_default();
    let ts = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.as_ref().map(|t| t.0.to_string())
    };
    let tenant = run.namespace().unwrap_or_default();
    let by_name =
        st.workflow
            .as_deref()
            .or(run.spec.workflow_ref.name.as_deref())
            .and_then(|n| {
                s.workflows.state().into_iter().find(|w| {
                    w.namespace().as_deref() == Some(tenant.as_str()) && w.name_any() == n
                })
            })
            .map(|w| w.spec.id.clone());
    let workflow_id = run
        .spec
        .workflow_ref
        .id
        .clone()
        .or(by_name)
        .or_else(|| st.workflow.clone())
        .or_else(|| run.spec.workflow_ref.name.clone())
        .unwrap_or_default();
    let run_id = run.meta().uid.clone().unwrap_or_default();
    let mut doc = RunSnapshotDoc::from_projection(
        p,
        RunFacts {
            run_id: &run_id,
            workflow_id: &workflow_id,
            tenant: &tenant,
            started_at: ts(&st.start_time).or_else(|| {
                run.meta()
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
            }),
            completed_at: ts(&st.completion_time).or(ended_at),
            attempts: st.attempts,
        },
    );
    let ann = run.annotations();
    doc.tags = ann
        .get(ANNOTATION_TAGS)
        .and_then(|t| serde_json::from_str(t).ok());
    doc.metadata = ann
        .get(ANNOTATION_METADATA)
        .and_then(|t| serde_json::from_str(t).ok());
    doc.scope_id = ann.get(ANNOTATION_SCOPE_ID).cloned();
    doc.configurable = run
        .spec
        .configurable
        .as_ref()
        .and_then(|c| serde_json::to_value(c).ok());
    if let Some(parent) = crate::snapshot::parent_of(run) {
        doc.parent_run_id = Some(parent.run_id);
        doc.parent_node_id = Some(parent.node_id);
    }
    doc.child_runs = st
        .child_runs
        .iter()
        .filter_map(|c| {
            Some(openwop_protocol::run::api::ChildRunRef {
                run_id: c.run_id.clone()?,
                status: c.phase.unwrap_or_default(),
                node_id: c.node_id.clone(),
                waiting_node_id: c.waiting_node.clone(),
            })
        })
        .collect();
    doc
}

/// The RunSnapshot at least as new as the run's event log (see [`fresh_projection`]): a
/// client that saw the terminal event on the stream never reads an older run here.
pub async fn fresh_snapshot(s: &RestState, run: &Run) -> RunSnapshotDoc {
    let (p, ended_at) = fresh_projection(s, run).await;
    snapshot_with(s, run, &p, ended_at)
}

/// A copy of `run` whose status is brought up to its event log, for the checks of a request
/// that must agree with what `GET /v1/runs/{runId}` showed (an interrupt the snapshot shows
/// waiting can be answered at once).
pub async fn fresh_run(s: &RestState, run: &Run) -> Run {
    let (p, _) = fresh_projection(s, run).await;
    let mut run = run.clone();
    run.status
        .get_or_insert_with(Default::default)
        .set_projection(p);
    run
}

/// The run's event-derived state at least as new as its log: the status, with the events it
/// has not taken in yet (the operator's consumer writes the status a little after the events
/// are stored) folded in by the consumer's own merge rule; and when the folded events ended
/// the run, the terminal event's time. When the log cannot be read in time, the status alone.
pub async fn fresh_projection(s: &RestState, run: &Run) -> (Projection, Option<String>) {
    let stored = run.status.clone().unwrap_or_default().projection();
    if stored.phase.is_some_and(|p| p.is_terminal()) {
        return (stored, None);
    }
    let read = super::log::read_events(s, run, stored.last_sequence, None);
    let newer = match tokio::time::timeout(FRESHNESS_READ, read).await {
        Ok(Ok(r)) => r.events,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "run snapshot: the event log is not readable; serving the status");
            Vec::new()
        }
        Err(_) => {
            tracing::debug!("run snapshot: the event log read timed out; serving the status");
            Vec::new()
        }
    };
    if newer.is_empty() {
        return (stored, None);
    }
    let mut folded = stored.clone();
    let mut ended_at = None;
    for e in &newer {
        folded.apply(e);
        if super::log::is_terminal_event(e) {
            ended_at = e
                .get("timestamp")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
    }
    (merge(&stored, &folded), ended_at)
}
