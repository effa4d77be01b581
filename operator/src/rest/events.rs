//! A run's events from JetStream: `GET /v1/runs/{runId}/events` (SSE, or JSON with
//! `Accept: application/json`) and `GET /v1/runs/{runId}/events/poll` (long-poll), and the
//! readers behind them.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use kube::{Resource as _, ResourceExt};
use openwop_crds::Run;
use openwop_nats::reader::{From, LogMessage, RunLog};
use openwop_protocol::run::{Projection, RunPhase, events_subject};
use serde_json::Value;

use super::json::Json;
use super::support::{find_run, phase, visible_run};
use super::types::{EventsResponse, PollQuery};
use super::{ApiError, Caller, ErrorBody, RestState};

/// Longest long-poll wait (`timeout` query).
const MAX_POLL: Duration = Duration::from_secs(30);

/// Where a run's events are.
fn run_subject(run: &Run) -> String {
    events_subject(
        &run.namespace().unwrap_or_default(),
        run.meta().uid.as_deref().unwrap_or_default(),
    )
}

/// Whether a run event ends the run (the projection says its phase is terminal).
pub fn is_terminal_event(doc: &Value) -> bool {
    let mut p = Projection::default();
    p.apply(doc);
    p.phase.is_some_and(RunPhase::is_terminal)
}

/// Decoded run events after `after` (run sequence), in order.
struct Decoded {
    doc: Value,
    sequence: u64,
    pending: u64,
}

fn decode(m: LogMessage) -> Option<Decoded> {
    let doc: Value = serde_json::from_slice(&m.payload).ok()?;
    let sequence = doc.get("sequence").and_then(Value::as_u64)?;
    Some(Decoded {
        doc,
        sequence,
        pending: m.pending,
    })
}

async fn open_log(s: &RestState, run: &Run) -> Result<RunLog, ApiError> {
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

/// Every event stored on `subject` (a run's events subject), in order, read once to the end
/// (the conformance event-log seam's read; no stream yet reads as no events).
pub async fn read_subject_events(s: &RestState, subject: String) -> Result<Vec<Value>, ApiError> {
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
        if let Some(d) = decode(m) {
            out.push(d.doc);
        }
        if left == 0 {
            break;
        }
    }
    Ok(out)
}

fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    match headers.get("last-event-id").and_then(|v| v.to_str().ok()) {
        None | Some("") => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| {
            ApiError::validation(format!(
                "Last-Event-ID {v:?} is not an event id of this stream (the run sequence numbers sent as `id:`)"
            ))
        }),
    }
}

/// A run's events: SSE (`text/event-stream`), or `{events}` with `Accept: application/json`.
#[utoipa::path(
    get, path = "/v1/runs/{runId}/events",
    params(("runId" = String, Path), ("Last-Event-ID" = Option<String>, Header, description = "resume after this event (run sequence)")),
    responses(
        (status = 200, description = "SSE stream (id = run sequence, event = type, data = RunEventDoc), or JSON", content((EventsResponse = "application/json"), (String = "text/event-stream"))),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn run_events(
    State(s): State<RestState>,
    caller: Caller,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let run = visible_run(&s, &caller, &run_id).await?;
    let after = last_event_id(&headers)?;
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if accept.contains("application/json") && !accept.contains("text/event-stream") {
        return Ok(Json(read_events(&s, &run, after, None).await?).into_response());
    }
    let log = open_log(&s, &run).await?;
    let keepalive = Duration::from_secs(s.config.rest.keepalive_seconds);
    let stream = sse_stream(s.clone(), run, log, after);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(keepalive).text("keepalive"))
        .into_response())
}

/// SSE events of the run after `after`, ending after the terminal event (or, when the run
/// ended without one in the log, once the log is read and the status is terminal).
fn sse_stream(
    s: RestState,
    run: Arc<Run>,
    log: RunLog,
    after: Option<u64>,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    let empty = log.pending_at_start == 0;
    let uid = run.meta().uid.clone().unwrap_or_default();
    let msgs = Box::pin(log.messages());
    futures::stream::unfold(
        (msgs, false, empty),
        move |(mut msgs, done, mut caught_up)| {
            let s = s.clone();
            let uid = uid.clone();
            async move {
                if done {
                    return None;
                }
                loop {
                    // While caught up, check now and then whether the run ended without a
                    // terminal event in its log (e.g. failed before its worker started).
                    let next = if caught_up {
                        match tokio::time::timeout(Duration::from_secs(5), msgs.next()).await {
                            Ok(n) => n,
                            Err(_) => {
                                let ended = s
                                    .runs
                                    .state()
                                    .into_iter()
                                    .find(|r| r.meta().uid.as_deref() == Some(uid.as_str()))
                                    .is_none_or(|r| phase(&r).is_terminal());
                                if ended {
                                    return None;
                                }
                                continue;
                            }
                        }
                    } else {
                        msgs.next().await
                    };
                    let m = match next? {
                        Ok(m) => m,
                        Err(e) => {
                            tracing::warn!(error = %e, "SSE: reading a run's events");
                            return None;
                        }
                    };
                    caught_up = m.pending == 0;
                    let Some(d) = decode(m) else { continue };
                    if after.is_some_and(|a| d.sequence <= a) {
                        continue;
                    }
                    let terminal = is_terminal_event(&d.doc);
                    let t = d
                        .doc
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("message")
                        .to_owned();
                    let ev = Event::default()
                        .id(d.sequence.to_string())
                        .event(t)
                        .data(d.doc.to_string());
                    let _ = d.pending;
                    return Some((Ok(ev), (msgs, terminal, caught_up)));
                }
            }
        },
    )
}

/// Long-poll for events after `lastSequence`.
#[utoipa::path(
    get, path = "/v1/runs/{runId}/events/poll",
    params(("runId" = String, Path), PollQuery),
    responses(
        (status = 200, body = EventsResponse),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn poll_events(
    State(s): State<RestState>,
    caller: Caller,
    Path(run_id): Path<String>,
    Query(q): Query<PollQuery>,
) -> Result<Json<EventsResponse>, ApiError> {
    let run = visible_run(&s, &caller, &run_id).await?;
    let wait = Duration::from_secs(q.timeout.unwrap_or(25)).min(MAX_POLL);
    let mut resp = read_events(&s, &run, q.last_sequence, Some(wait)).await?;
    if resp.events.is_empty() {
        // Nothing new within the wait: complete only if the run has ended.
        resp.is_complete = find_run(&s, &run_id)
            .await
            .is_some_and(|r| phase(&r).is_terminal());
    }
    Ok(Json(resp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn terminal_events_follow_the_projection() {
        assert!(is_terminal_event(
            &json!({"type": "run.completed", "sequence": 3, "payload": {}})
        ));
        assert!(!is_terminal_event(
            &json!({"type": "node.completed", "sequence": 2, "payload": {}})
        ));
    }
}
