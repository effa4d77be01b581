//! The worker start of a pause or a resume (`spec.pause`, see [`super::pause`]): whether the
//! worker about to start is one, and the snapshot it starts from. Read by [`super::start`].

use openwop_crds::{DrainPolicy, PauseRequest, RunPhase};

use super::context::Error;
use super::state::RunReconcile;
use crate::snapshot::{read_snapshot, snapshot_configmap, with_pause};

/// A worker start for a pause or a resume.
pub(super) struct PauseStart {
    /// The `pause` its snapshot must carry: the Run's `spec.pause` while it is set on a run
    /// not yet paused, none once a paused run is resumed.
    pub(super) pause: Option<PauseRequest>,
    /// Start it even if the run otherwise waits (a timer, a child run): an `immediate` pause
    /// or a resume. A drain of a run waiting on a timer waits for it (the woken worker lets
    /// the node finish, then pauses).
    pub(super) now: bool,
    /// For the start's Event.
    pub(super) note: &'static str,
}

/// Whether the worker about to start is for a pause or a resume.
pub(super) fn start_for(rr: &RunReconcile<'_>) -> Option<PauseStart> {
    let status = rr.status();
    let phase = status.phase.unwrap_or_default();
    let dormant = !status.timers.is_empty() || !status.child_waits.is_empty();
    match &rr.run.spec.pause {
        Some(req) if phase != RunPhase::Paused && !phase.is_waiting() => Some(PauseStart {
            pause: Some(req.clone()),
            now: !(dormant && req.drain_policy == DrainPolicy::DrainCurrentNode),
            note: "pause requested; a worker records run.paused",
        }),
        None if phase == RunPhase::Paused => Some(PauseStart {
            pause: None,
            now: true,
            note: "resumed from pause",
        }),
        _ => None,
    }
}

/// Writes `pause` into the run's snapshot (read afresh: the start may just have written
/// the answers) when it says otherwise.
pub(super) async fn prepare_snapshot(
    rr: &RunReconcile<'_>,
    pause: Option<PauseRequest>,
) -> Result<(), Error> {
    let Some(cm) = rr.snapshot().await? else {
        return Ok(());
    };
    let stored = read_snapshot(&cm)?;
    if stored.pause != pause {
        let doc = with_pause(&stored, pause);
        rr.apply_snapshot(&snapshot_configmap(rr.run, &doc)).await?;
    }
    Ok(())
}
