//! A run's events from JetStream: `GET /v1/runs/{runId}/events` (SSE, or JSON with
//! `Accept: application/json`, both shaped by the stream modes of
//! `protocol::run::stream_modes`, with `bufferMs` batching on SSE) and
//! `GET /v1/runs/{runId}/events/poll` (long-poll, every event), over the readers of [`super::log`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use kube::Resource as _;
use openwop_crds::Run;
use openwop_nats::reader::RunLog;
use openwop_protocol::run::Projection;
use openwop_protocol::run::stream_modes::{
    BATCH_EVENT, STATE_SNAPSHOT, StreamMode, StreamModeError, StreamModes, UNSUPPORTED_STREAM_MODE,
    buffer_window, forces_flush, triggers_snapshot,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::json::Json;
use super::log::{decode, is_terminal_event, open_log, read_events};
use super::state::RestState;
use super::support::{find_run, phase, visible_run};
use super::types::{EventsQuery, EventsResponse, PollQuery};

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

/// The stream modes and batching window of an events request, or its 400: checked before
/// anything else is read, whatever shape (SSE or JSON) is asked for (`stream-modes.md`).
pub fn stream_request(q: &EventsQuery) -> Result<(StreamModes, Option<Duration>), ApiError> {
    let modes = StreamModes::parse(q.stream_mode.as_deref()).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            UNSUPPORTED_STREAM_MODE,
            e.to_string(),
        )
        .with_details(json!({ "supported": StreamModeError::supported() }))
    })?;
    let window = buffer_window(q.buffer_ms.as_deref()).map_err(|e| {
        ApiError::validation(e.to_string()).with_details(json!({"field": "bufferMs"}))
    })?;
    Ok((modes, window))
}

/// One message of the stream: an SSE event (`id:` = run sequence, `event:`, `data:`), or one
/// element of the JSON answer's `events`.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub id: u64,
    pub event: String,
    pub data: Value,
}

impl Frame {
    fn sse(&self) -> Event {
        Event::default()
            .id(self.id.to_string())
            .event(&self.event)
            .data(self.data.to_string())
    }

    /// One `event: batch` of `frames` (`bufferMs`): its id is the batch's highest sequence.
    fn batch(frames: Vec<Frame>) -> Event {
        let id = frames.iter().map(|f| f.id).max().unwrap_or_default();
        let data = Value::Array(frames.into_iter().map(|f| f.data).collect());
        Event::default()
            .id(id.to_string())
            .event(BATCH_EVENT)
            .data(data.to_string())
    }
}

/// Turns a run's log, read in order, into what a stream of `modes` sends after `after`:
/// the admitted events as they are, or (`values`) the run's snapshot after each step, a
/// first one as the baseline when the stream resumes.
pub struct Shaper<'a> {
    s: &'a RestState,
    run: &'a Run,
    modes: StreamModes,
    after: Option<u64>,
    /// `values`: the run as the events read so far make it.
    projection: Projection,
    ended_at: Option<String>,
    baseline_due: bool,
}

impl<'a> Shaper<'a> {
    pub fn new(s: &'a RestState, run: &'a Run, modes: StreamModes, after: Option<u64>) -> Self {
        Shaper {
            baseline_due: modes.is_values() && after.is_some(),
            s,
            run,
            modes,
            after,
            projection: Projection::default(),
            ended_at: None,
        }
    }

    fn snapshot(&self, id: u64) -> Frame {
        let doc =
            super::view::snapshot_with(self.s, self.run, &self.projection, self.ended_at.clone());
        Frame {
            id,
            event: STATE_SNAPSHOT.to_owned(),
            data: serde_json::to_value(doc).unwrap_or_default(),
        }
    }

    /// The frames to send for the next event of the log (sequence `seq`).
    pub fn feed(&mut self, doc: &Value, seq: u64) -> Vec<Frame> {
        let event_type = doc.get("type").and_then(Value::as_str).unwrap_or_default();
        let seen = self.after.is_some_and(|a| seq <= a);
        if !self.modes.is_values() {
            if seen {
                return Vec::new();
            }
            return self
                .modes
                .label(event_type)
                .map(|event| Frame {
                    id: seq,
                    event: event.to_owned(),
                    data: doc.clone(),
                })
                .into_iter()
                .collect();
        }
        let mut out = Vec::new();
        if self.baseline_due && !seen {
            // The resumption point is not in the log: the baseline is the run before this.
            self.baseline_due = false;
            out.push(self.snapshot(self.after.unwrap_or_default()));
        }
        self.projection.apply(doc);
        if is_terminal_event(doc) {
            self.ended_at = doc
                .get("timestamp")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        if seen {
            if self.baseline_due && Some(seq) == self.after {
                self.baseline_due = false;
                out.push(self.snapshot(seq));
            }
        } else if triggers_snapshot(event_type) {
            out.push(self.snapshot(seq));
        }
        out
    }
}

/// A run's events: SSE (`text/event-stream`), or `{events}` with `Accept: application/json`,
/// filtered by `streamMode` (SSE default `updates`; the JSON answer, without a mode, is the
/// whole log).
#[utoipa::path(
    get, path = "/v1/runs/{runId}/events",
    params(("runId" = String, Path), EventsQuery, ("Last-Event-ID" = Option<String>, Header, description = "resume after this event (run sequence)")),
    responses(
        (status = 200, description = "SSE stream (id = run sequence; event = the event's type, or on a mixed-mode stream the mode that admitted it, `state.snapshot` in `values` mode, `batch` with bufferMs; data = RunEventDoc, RunSnapshot or an array of them), or JSON", content((EventsResponse = "application/json"), (String = "text/event-stream"))),
        (status = 400, body = ErrorBody, description = "`unsupported_stream_mode` (`details.supported`), or a bad bufferMs or Last-Event-ID"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn run_events(
    State(s): State<RestState>,
    caller: Caller,
    Path(run_id): Path<String>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (modes, window) = stream_request(&q)?;
    let after = last_event_id(&headers)?;
    let run = visible_run(&s, &caller, &run_id).await?;
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if accept.contains("application/json") && !accept.contains("text/event-stream") {
        // The JSON answer is the run's log: every event unless a streamMode is asked for
        // (the suite's envelope scenarios read `envelope.*` from it with no mode; `updates`
        // is the default of the live stream).
        let modes = if q.stream_mode.as_deref().is_none_or(str::is_empty) {
            StreamModes::of(&[StreamMode::Debug])
        } else {
            modes
        };
        // Read from the start: `values` folds the whole log.
        let read = read_events(&s, &run, None, None).await?;
        let mut shaper = Shaper::new(&s, &run, modes, after);
        let events = read
            .events
            .iter()
            .filter_map(|doc| {
                let seq = doc.get("sequence").and_then(Value::as_u64)?;
                Some(shaper.feed(doc, seq))
            })
            .flatten()
            .map(|f| f.data)
            .collect();
        return Ok(Json(EventsResponse {
            events,
            is_complete: read.is_complete,
        })
        .into_response());
    }
    let log = open_log(&s, &run).await?;
    let keepalive = Duration::from_secs(s.config.rest.keepalive_seconds);
    let (tx, rx) = mpsc::channel::<Event>(64);
    tokio::spawn(pump(s.clone(), run, log, after, modes, window, tx));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(keepalive).text("keepalive"))
        .into_response())
}

/// Feeds an SSE stream the run's events after `after` as `modes` shape them, batched over
/// `window` when set; ends after the terminal event (or, when the run ended without one in
/// the log, once the log is read and the status is terminal), or when the client leaves.
async fn pump(
    s: RestState,
    run: Arc<Run>,
    log: RunLog,
    after: Option<u64>,
    modes: StreamModes,
    window: Option<Duration>,
    tx: mpsc::Sender<Event>,
) {
    let uid = run.meta().uid.clone().unwrap_or_default();
    let mut caught_up = log.pending_at_start == 0;
    let mut msgs = std::pin::pin!(log.messages());
    let mut shaper = Shaper::new(&s, &run, modes, after);
    let mut batch: Vec<Frame> = Vec::new();
    let mut flush_at: Option<tokio::time::Instant> = None;
    // Sends what is due; false when the client has gone.
    async fn send(tx: &mpsc::Sender<Event>, frames: Vec<Frame>, batched: bool) -> bool {
        if frames.is_empty() {
            return true;
        }
        if batched {
            return tx.send(Frame::batch(frames)).await.is_ok();
        }
        for f in frames {
            if tx.send(f.sse()).await.is_err() {
                return false;
            }
        }
        true
    }
    loop {
        // While caught up, check now and then whether the run ended without a terminal event
        // in its log (e.g. failed before its worker started).
        let wait = match flush_at {
            Some(t) => t.saturating_duration_since(tokio::time::Instant::now()),
            None if caught_up => Duration::from_secs(5),
            None => Duration::from_secs(3600),
        };
        let next = tokio::select! {
            _ = tx.closed() => return,
            n = tokio::time::timeout(wait, msgs.next()) => n,
        };
        let m = match next {
            Err(_) => {
                if flush_at.is_some_and(|t| tokio::time::Instant::now() >= t) {
                    flush_at = None;
                    if !send(&tx, std::mem::take(&mut batch), true).await {
                        return;
                    }
                }
                if caught_up {
                    let ended = s
                        .runs
                        .state()
                        .into_iter()
                        .find(|r| r.meta().uid.as_deref() == Some(uid.as_str()))
                        .is_none_or(|r| phase(&r).is_terminal());
                    if ended {
                        send(&tx, std::mem::take(&mut batch), true).await;
                        return;
                    }
                }
                continue;
            }
            Ok(None) => {
                send(&tx, batch, true).await;
                return;
            }
            Ok(Some(Err(e))) => {
                tracing::warn!(error = %e, "SSE: reading a run's events");
                send(&tx, batch, true).await;
                return;
            }
            Ok(Some(Ok(m))) => m,
        };
        caught_up = m.pending == 0;
        let Some(d) = decode(m) else { continue };
        let terminal = is_terminal_event(&d.doc);
        let flush_now = terminal
            || d.doc
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(forces_flush);
        let frames = shaper.feed(&d.doc, d.sequence);
        let sent = match window {
            None => send(&tx, frames, false).await,
            Some(w) => {
                batch.extend(frames);
                if flush_now {
                    flush_at = None;
                    send(&tx, std::mem::take(&mut batch), true).await
                } else {
                    if flush_at.is_none() && !batch.is_empty() {
                        flush_at = Some(tokio::time::Instant::now() + w);
                    }
                    true
                }
            }
        };
        if !sent || terminal {
            return;
        }
    }
}

/// Longest long-poll wait (`timeout` query, seconds; `pollRunEvents`).
const POLL_TIMEOUT_SECS: std::ops::RangeInclusive<u64> = 1..=60;
/// The wait when `timeout` is absent.
const DEFAULT_POLL_SECS: u64 = 30;

/// Long-poll for events after `lastSequence`.
#[utoipa::path(
    get, path = "/v1/runs/{runId}/events/poll",
    params(("runId" = String, Path), PollQuery),
    responses(
        (status = 200, body = EventsResponse),
        (status = 400, body = ErrorBody, description = "timeout outside 1..60"),
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
    let secs = q.timeout.unwrap_or(DEFAULT_POLL_SECS);
    if !POLL_TIMEOUT_SECS.contains(&secs) {
        return Err(ApiError::validation(format!(
            "timeout is {secs}: wait 1 to 60 seconds for new events (default {DEFAULT_POLL_SECS})"
        ))
        .with_details(json!({"field": "timeout"})));
    }
    let run = visible_run(&s, &caller, &run_id).await?;
    let mut resp = read_events(&s, &run, q.last_sequence, Some(Duration::from_secs(secs))).await?;
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
