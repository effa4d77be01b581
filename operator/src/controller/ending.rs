//! The terminal event of a run the operator ended itself (crash limit, timeout, cancel
//! without a worker, a refused snapshot or input): appended to the run's event subject once,
//! so every log ends with `run.completed`, `run.failed` or `run.cancelled` and a follower
//! (`kubectl openwop events -f`, SSE) returns.
//!
//! Exactly once and never interleaved with a worker:
//! * only when no worker pod of the run can still append (none, or its container ended);
//! * built by protocol's [`host_ending`] with the worker's step keys, so its eventId (the
//!   `Nats-Msg-Id`) is the one a worker would use and the stream's dedup drops a second copy;
//! * published with `Nats-Expected-Last-Subject-Sequence` = the subject's last message read
//!   just before: if anything was appended meanwhile nothing is written and the next
//!   reconcile reads again; a log that already ends is only recorded (`status.terminalEvent`),
//!   also while the worker's pod is still exiting.

use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use openwop_nats::stream::{Appended, append_after, last_on_subject};
use openwop_protocol::run::ending::host_ending;
use openwop_protocol::run::projection::is_terminal;
use openwop_protocol::run::subjects::events_subject;
use serde_json::Value;

use super::context::Error;
use super::state::{RunReconcile, WorkerState};
use crate::names::pod_name;

/// Longest wait for NATS while recording the ending.
const NATS_TIMEOUT: Duration = Duration::from_secs(5);
/// `engineVersion` of the events the operator appends.
const ENGINE: &str = concat!("openwop-operator/", env!("CARGO_PKG_VERSION"));

/// Makes sure the terminal run's log ends with its terminal event. `None`: done (or nothing
/// to do: no event stream configured); `Some(action)`: try again then (a worker may still
/// append, NATS is not reachable yet, or the log moved while we read it).
///
/// `append: false` (the reconcile that ends the run, before its status says so): a log that
/// already ends is recorded, nothing is appended — the operator's terminal event follows
/// the status write that ends the run, or the event consumer could fold it into a status
/// that lacks the ending's conditions (the next reconcile appends it; `RunReconcile::act`).
pub(super) async fn record_ending(
    rr: &mut RunReconcile<'_>,
    append: bool,
) -> Result<Option<Action>, Error> {
    let (run, ctx) = (rr.run, rr.ctx);
    if rr.status().terminal_event.is_some() {
        return Ok(None);
    }
    let (Some(slot), Some(run_id)) = (&ctx.jetstream, run.uid()) else {
        return Ok(None);
    };
    let soon = |s| Ok(Some(Action::requeue(Duration::from_secs(s))));
    // A worker that may still append: the log is only read, in case it ends already (the
    // worker's own terminal event, folded by the event consumer before its pod ended); then
    // that event is recorded now instead of after the pod's end, which would cost one more
    // reconcile and status write.
    let worker_may_append = worker_may_append(rr).await?;
    let Some(js) = slot.get() else {
        tracing::debug!(run = %run.name_any(), "not connected to NATS yet; the run's terminal event is recorded later");
        return soon(if worker_may_append { 2 } else { 5 });
    };
    let ns = run.namespace().unwrap_or_default();
    let subject = events_subject(&ns, &run_id);
    let stream = &ctx.config.worker.events_stream;
    let nats = |e: String| {
        Error::Events(format!(
            "recording the terminal event of run {ns}/{}: {e}",
            run.name_any()
        ))
    };
    let last = match within_timeout(last_on_subject(&js, stream, &subject)).await {
        Ok(last) => last,
        // The worker may append anyway: looked at again soon, as without the read.
        Err(_) if worker_may_append => return soon(2),
        Err(e) => return Err(nats(e)),
    };
    if !last.as_ref().is_some_and(|(_, body)| ends_log(body)) {
        if worker_may_append {
            return soon(2);
        }
        if !append {
            return Ok(None);
        }
    }
    let (expected, next) = match &last {
        // The run had events but its subject is empty: retention removed the log (a run
        // that ended long ago, e.g. before an upgrade); there is nothing left to end.
        None if rr.draft.status.last_sequence.is_some() => return Ok(None),
        None => (0, 0),
        Some((stream_seq, body)) => {
            let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            if is_terminal(&v) {
                rr.draft.status.terminal_event =
                    v.get("eventId").and_then(Value::as_str).map(str::to_owned);
                return Ok(None);
            }
            let seq = v.get("sequence").and_then(Value::as_u64);
            let next = seq.or(rr.draft.status.last_sequence).map_or(0, |s| s + 1);
            (*stream_seq, next)
        }
    };
    let phase = rr.draft.status.phase.unwrap_or_default();
    let timestamp = (ctx.now)().to_string();
    let Some(doc) = host_ending(
        &run_id,
        next,
        &timestamp,
        phase,
        rr.draft.status.error.as_ref(),
        ENGINE,
    ) else {
        return Ok(None);
    };
    let body = serde_json::to_vec(&doc).map_err(|e| nats(e.to_string()))?;
    let appended = within_timeout(append_after(
        &js,
        &subject,
        &doc.event_id,
        expected,
        body.into(),
    ))
    .await
    .map_err(nats)?;
    match appended {
        Appended::Stored => {
            tracing::info!(namespace = %ns, run = %run.name_any(), event = %doc.event_type, sequence = next, "the operator recorded the run's terminal event");
            rr.draft.status.terminal_event = Some(doc.event_id);
            Ok(None)
        }
        Appended::Moved => soon(1),
    }
}

/// Whether `body` (the last message of a run's subject) is a terminal event.
fn ends_log(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|v| is_terminal(&v))
}

/// Whether a worker pod of the run may still publish: its current pod, or the pod of its
/// last attempt (a timed-out or cancelled run's pod is still terminating), exists and its
/// container has not ended.
async fn worker_may_append(rr: &RunReconcile<'_>) -> Result<bool, Error> {
    let status = rr.status();
    let last = status
        .attempts
        .filter(|a| *a > 0)
        .map(|a| pod_name(&rr.name, a));
    let mut names: Vec<String> = status.worker_pod.iter().cloned().collect();
    names.extend(last.filter(|l| !names.contains(l)));
    for name in names {
        let Some(pod) = rr.pod(&name).await? else {
            continue;
        };
        if !crate::names::owned_by(&pod.metadata, rr.run) {
            continue;
        }
        if !WorkerState::of(Some(&pod)).ended() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A NATS call bounded by [`NATS_TIMEOUT`]; its error or the timeout as words.
pub(super) async fn within_timeout<T, E: std::fmt::Display>(
    call: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(NATS_TIMEOUT, call).await {
        Err(_) => Err(format!(
            "no answer from NATS within {}s",
            NATS_TIMEOUT.as_secs()
        )),
        Ok(r) => r.map_err(|e| e.to_string()),
    }
}
