//! What several REST resources share: finding a run or a workflow in this replica's caches
//! (with the visibility rule), a run's phase, and Kubernetes API failures as API errors.

use std::sync::Arc;
use std::time::Duration;

use kube::{Resource as _, ResourceExt};
use openwop_crds::{Run, Workflow};
use openwop_protocol::run::RunPhase;
use openwop_protocol::run::pause::MAX_REASON_CHARS;

use super::auth::{Caller, Resource, Verb};
use super::error::ApiError;
use super::state::RestState;

/// How long a reader waits for this replica's cache to see a Run just created elsewhere.
const CACHE_GRACE: Duration = Duration::from_secs(2);

/// A Run in this replica's cache by runId (its uid), waiting briefly for a Run just created.
pub async fn find_run(s: &RestState, run_id: &str) -> Option<Arc<Run>> {
    let deadline = tokio::time::Instant::now() + CACHE_GRACE;
    loop {
        if let Some(r) = s
            .runs
            .state()
            .into_iter()
            .find(|r| r.meta().uid.as_deref() == Some(run_id))
        {
            return Some(r);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The run if the caller may `get` runs in its namespace; otherwise the same 404 as for a
/// run that does not exist.
pub async fn visible_run(
    s: &RestState,
    caller: &Caller,
    run_id: &str,
) -> Result<Arc<Run>, ApiError> {
    let missing = || ApiError::not_found(format!("run {run_id:?} not found"));
    let run = find_run(s, run_id).await.ok_or_else(missing)?;
    let ns = run.namespace().unwrap_or_default();
    if !s
        .auth
        .allowed(caller, Verb::Get, Resource::Runs, &ns)
        .await?
    {
        return Err(missing());
    }
    Ok(run)
}

/// Finds a Workflow by OpenWOP id (or Kubernetes name) in one namespace of the cache.
pub fn find_workflow(state: &RestState, namespace: &str, id: &str) -> Option<Arc<Workflow>> {
    state
        .workflows
        .state()
        .into_iter()
        .filter(|w| w.namespace().as_deref() == Some(namespace))
        .find(|w| w.spec.id == id)
        .or_else(|| {
            state
                .workflows
                .state()
                .into_iter()
                .find(|w| w.namespace().as_deref() == Some(namespace) && w.name_any() == id)
        })
}

/// The phase of a Run (pending before its first status).
pub fn phase(run: &Run) -> RunPhase {
    run.status
        .as_ref()
        .and_then(|s| s.phase)
        .unwrap_or_default()
}

/// A failed Kubernetes API request as the API error to answer (the detail goes to the log).
pub fn kube_error(e: kube::Error) -> ApiError {
    tracing::warn!(error = %e, "Kubernetes API request failed");
    match e {
        kube::Error::Api(ae) if ae.code == 409 => {
            ApiError::conflict("conflict", "the run changed meanwhile; retry the request")
        }
        _ => ApiError::unavailable(
            "the Kubernetes API did not answer; retry shortly",
            Duration::from_secs(2),
        ),
    }
}

/// A `reason` (of a cancel, bulk cancel or pause) of at most [`MAX_REASON_CHARS`] characters,
/// else `400` naming the field.
pub fn check_reason(reason: Option<&str>) -> Result<(), ApiError> {
    match reason.map(|r| r.chars().count()) {
        Some(n) if n > MAX_REASON_CHARS => Err(ApiError::validation(format!(
            "reason has {n} characters; at most {MAX_REASON_CHARS}"
        ))
        .with_details(serde_json::json!({"field": "reason"}))),
        _ => Ok(()),
    }
}
