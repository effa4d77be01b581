//! A run's event log as the API reads it from JetStream: read to the end, waited on, or read
//! whole by subject. The readers behind the events endpoints, the fresh run view and the
//! interrupt answers.

use std::time::Duration;

use axum::http::StatusCode;
use futures::StreamExt;
use kube::{Resource as _, ResourceExt};
use openwop_crds::Run;
use openwop_nats::reader::{From, LogMessage, RunLog};
use openwop_protocol::run::events_subject;
use serde_json::Value;

use super::error::ApiError;
use super::state::RestState;
use super::support::phase;
use super::types::EventsResponse;

/// Where a run's events are.
fn run_subject(run: &Run) -> String {
    events_subject(
        &run.namespace().unwrap_or_default(),
        run.meta().uid.as_deref().unwrap_or_default(),
    )
}

/// Whether a run event ends the run (the projection says its phase is terminal).
pub use openwop_protocol::run::projection::is_terminal as is_terminal_event;

/// A run event read from the log, with its run sequence.
pub(super) struct Decoded {
    pub(super) doc: Value,
    pub(super) sequence: u64,
}

pub(super) fn decode(m: LogMessage) -> Option<Decoded> {
    let doc: Value = serde_json::from_slice(&m.payload).ok()?;
    let sequence = doc.get("sequence").and_then(Value::as_u64)?;
    Some(Decoded { doc, sequence })
}

pub(super) async fn open_log(s: &RestState, run: &Run) -> Result<RunLog, ApiError> {
    open_subject_log(s, run_subject(run)).await
}

pub(super) async fn open_subject_log(s: &RestState, subject: String) -> Result<RunLog, ApiError> {
    let js = s.jetstream().await?;
    match RunLog::open(
        &js,
        &s.config.worker.events_stream,
        vec![subject],
        From::Start,
    )
    .await
    {
        Ok(l) => Ok(l),
        Err(openwop_nats::reader::ReadError::NoStream { .. }) => Err(ApiError::not_found(
            "no events yet: the run-events stream does not exist",
        )),
        Err(e) => {
            tracing::warn!(error = %e, "reading a run's events");
            Err(ApiError::unavailable(
                "the event stream is unavailable; retry shortly",
                Duration::from_secs(2),
            ))
        }
    }
}

/// Events after `after`, read until caught up, then (with `wait`) until a first new one.
pub async fn read_events(
    s: &RestState,
    run: &Run,
    after: Option<u64>,
    wait: Option<Duration>,
) -> Result<EventsResponse, ApiError> {
    let log = open_log(s, run).await?;
    let mut out = Vec::new();
    let mut complete = false;
    let deadline = wait.map(|w| tokio::time::Instant::now() + w);
    if log.pending_at_start == 0 && wait.is_none() {
        return Ok(EventsResponse {
            events: out,
            is_complete: false,
        });
    }
    let mut msgs = std::pin::pin!(log.messages());
    loop {
        let next = match deadline {
            Some(d) if out.is_empty() => match tokio::time::timeout_at(d, msgs.next()).await {
                Ok(n) => n,
                Err(_) => break,
            },
            // Caught up and not waiting: a short bound in case the count moved under us.
            _ => match tokio::time::timeout(Duration::from_secs(5), msgs.next()).await {
                Ok(n) => n,
                Err(_) => break,
            },
        };
        let Some(m) = next else { break };
        let m = m.map_err(|e| {
            tracing::warn!(error = %e, "reading a run's events");
            ApiError::unavailable("the event stream failed; retry", Duration::from_secs(2))
        })?;
        let left = m.pending;
        if let Some(d) = decode(m)
            && after.is_none_or(|a| d.sequence > a)
        {
            complete |= is_terminal_event(&d.doc);
            out.push(d.doc);
        }
        if left == 0 && (!out.is_empty() || deadline.is_none() || complete) {
            break;
        }
    }
    Ok(EventsResponse {
        events: out,
        is_complete: complete || phase(run).is_terminal() && wait.is_none(),
    })
}

/// Waits up to `wait` for the run's log to hold an event `matches` accepts, stored already or
/// appended meanwhile; whether it did (an unreadable log counts as not, at once).
pub async fn await_event(
    s: &RestState,
    run: &Run,
    wait: Duration,
    matches: impl Fn(&Value) -> bool,
) -> bool {
    let follow = async {
        let Ok(log) = open_log(s, run).await else {
            return false;
        };
        let mut msgs = std::pin::pin!(log.messages());
        while let Some(Ok(m)) = msgs.next().await {
            if decode(m).is_some_and(|d| matches(&d.doc)) {
                return true;
            }
        }
        false
    };
    tokio::time::timeout(wait, follow).await.unwrap_or(false)
}

/// Every event stored on `subject` (a run's events subject), in order, read once to the end
/// (the conformance event-log seam's read; no stream yet reads as no events).
pub async fn read_subject_events(s: &RestState, subject: String) -> Result<Vec<Value>, ApiError> {
    read_subject(s, subject, usize::MAX, |m| decode(m).map(|d| d.doc)).await
}

/// What `parse` makes of each message stored on `subject`, in stream order, read once to the
/// end or until `max` are kept (no stream yet: none).
pub(super) async fn read_subject<T>(
    s: &RestState,
    subject: String,
    max: usize,
    parse: impl Fn(LogMessage) -> Option<T>,
) -> Result<Vec<T>, ApiError> {
    let log = match open_subject_log(s, subject).await {
        Ok(l) => l,
        Err(e) if e.status == StatusCode::NOT_FOUND => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    if log.pending_at_start == 0 {
        return Ok(out);
    }
    let mut msgs = std::pin::pin!(log.messages());
    // A short bound per message in case the count moved under us.
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(5), msgs.next()).await {
        let m = m.map_err(|e| {
            tracing::warn!(error = %e, "reading a run's events");
            ApiError::unavailable("the event stream failed; retry", Duration::from_secs(2))
        })?;
        let left = m.pending;
        if let Some(v) = parse(m) {
            out.push(v);
        }
        if left == 0 || out.len() >= max {
            break;
        }
    }
    Ok(out)
}
