//! The stream modes of a run's event stream (`stream-modes.md`): the `streamMode` query of
//! `GET /v1/runs/{runId}/events` — which events each mode admits, the `values` snapshots, the
//! `bufferMs` batching hint and its forced flushes — defined once for every reader (the REST
//! API's SSE and JSON answers, and any client that filters the same way).
//!
//! * `updates` (the default): run and node transitions, suspensions, the human steps, artifacts
//!   — the spec's table, exactly; never `node.started`, `log.appended` or a vendor event;
//! * `values`: one `state.snapshot` (the RunSnapshot) after each event `updates` admits and
//!   after `node.started`, and first of all when the stream resumes;
//! * `messages`: LLM token chunks (`ai.message.chunk`) only;
//! * `debug`: every event of the log.
//!
//! Modes combine with commas (an event passes when any listed mode admits it), except
//! `values`, which owns its stream alone.

use std::fmt;
use std::time::Duration;

/// Error code of a `streamMode` this host cannot serve (400, with `details.supported`).
pub const UNSUPPORTED_STREAM_MODE: &str = "unsupported_stream_mode";

/// The event type of a `values`-mode snapshot.
pub const STATE_SNAPSHOT: &str = "state.snapshot";

/// The SSE event name of a `bufferMs` batch (its data is a JSON array of events).
pub const BATCH_EVENT: &str = "batch";

/// Largest `bufferMs` honoured; larger values are clamped to it.
pub const MAX_BUFFER_MS: u64 = 5000;

/// The event types `updates` admits (`stream-modes.md` §"Mode-to-event mapping").
pub const UPDATES_EVENTS: &[&str] = &[
    "run.started",
    "run.completed",
    "run.failed",
    "run.cancelled",
    "run.paused",
    "run.resumed",
    "run.annotated",
    "workspace.updated",
    "node.completed",
    "node.failed",
    "node.skipped",
    "node.suspended",
    "node.dispatched",
    "approval.requested",
    "approval.received",
    "clarification.requested",
    "clarification.resolved",
    "interrupt.requested",
    "interrupt.resolved",
    "artifact.created",
    "eval.started",
    "eval.scored",
    "eval.completed",
    "deployment.promoted",
    "deployment.rolledBack",
    "deployment.canaryAdjusted",
    "deployment.stateChanged",
];

/// The event type `messages` admits.
pub const MESSAGE_CHUNK: &str = "ai.message.chunk";

/// The events that end a run's stream (`run.completed`, `run.failed`, `run.cancelled`).
pub const TERMINAL_EVENTS: &[&str] = &["run.completed", "run.failed", "run.cancelled"];

/// One stream mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamMode {
    Values,
    Updates,
    Messages,
    Debug,
}

impl StreamMode {
    /// Every mode, as `details.supported` lists them.
    pub const ALL: [StreamMode; 4] = [
        StreamMode::Values,
        StreamMode::Updates,
        StreamMode::Messages,
        StreamMode::Debug,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StreamMode::Values => "values",
            StreamMode::Updates => "updates",
            StreamMode::Messages => "messages",
            StreamMode::Debug => "debug",
        }
    }

    fn from_wire(s: &str) -> Option<StreamMode> {
        StreamMode::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// Whether this mode passes a log event of `event_type` on as it is (`values` passes
    /// none: it sends snapshots, see [`triggers_snapshot`]).
    pub fn admits(self, event_type: &str) -> bool {
        match self {
            StreamMode::Values => false,
            StreamMode::Updates => UPDATES_EVENTS.contains(&event_type),
            StreamMode::Messages => event_type == MESSAGE_CHUNK,
            StreamMode::Debug => true,
        }
    }
}

impl fmt::Display for StreamMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether `values` sends a snapshot after an event of `event_type`: after each `updates`
/// event, and after `node.started`.
pub fn triggers_snapshot(event_type: &str) -> bool {
    event_type == "node.started" || StreamMode::Updates.admits(event_type)
}

/// Whether an event of `event_type` must be sent at once, whatever `bufferMs` has gathered:
/// a terminal run event or a suspension (closing the stream flushes too).
pub fn forces_flush(event_type: &str) -> bool {
    event_type == "node.suspended" || TERMINAL_EVENTS.contains(&event_type)
}

/// A `streamMode` this host cannot serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamModeError {
    #[error(
        "streamMode {requested:?} names {unknown:?}, which is not a stream mode; use values, updates, messages or debug, or a comma-separated combination"
    )]
    Unknown { requested: String, unknown: String },
    #[error(
        "streamMode {0:?} combines values with another mode; values sends whole snapshots and must be the only mode of its stream"
    )]
    ValuesCombined(String),
}

impl StreamModeError {
    /// `details.supported`: every single mode (combinations are never listed).
    pub fn supported() -> Vec<&'static str> {
        StreamMode::ALL.iter().map(|m| m.as_str()).collect()
    }
}

/// A valid `streamMode`: one mode, or several without `values`, in request order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamModes(Vec<StreamMode>);

impl Default for StreamModes {
    /// `updates`, the spec's default.
    fn default() -> Self {
        StreamModes(vec![StreamMode::Updates])
    }
}

impl StreamModes {
    /// Reads the `streamMode` query (absent or empty: `updates`). Repeated names count once.
    pub fn parse(raw: Option<&str>) -> Result<StreamModes, StreamModeError> {
        let Some(raw) = raw.filter(|r| !r.is_empty()) else {
            return Ok(StreamModes::default());
        };
        let mut modes = Vec::new();
        for name in raw.split(',') {
            let mode =
                StreamMode::from_wire(name.trim()).ok_or_else(|| StreamModeError::Unknown {
                    requested: raw.to_owned(),
                    unknown: name.to_owned(),
                })?;
            if !modes.contains(&mode) {
                modes.push(mode);
            }
        }
        if modes.len() > 1 && modes.contains(&StreamMode::Values) {
            return Err(StreamModeError::ValuesCombined(raw.to_owned()));
        }
        Ok(StreamModes(modes))
    }

    /// Exactly these modes (tests, clients building a query).
    pub fn of(modes: &[StreamMode]) -> StreamModes {
        StreamModes(modes.to_vec())
    }

    pub fn modes(&self) -> &[StreamMode] {
        &self.0
    }

    /// `values`: the stream carries snapshots, not log events.
    pub fn is_values(&self) -> bool {
        self.0 == [StreamMode::Values]
    }

    /// The mode that passes an event of `event_type` on: the first listed one that admits
    /// it (`None`: filtered out).
    pub fn admitting(&self, event_type: &str) -> Option<StreamMode> {
        self.0.iter().copied().find(|m| m.admits(event_type))
    }

    /// The SSE `event:` name of an admitted event: its type on a one-mode stream; on a mixed
    /// stream, the mode that admitted it (`stream-modes.md` §"Mixed mode").
    pub fn label<'a>(&self, event_type: &'a str) -> Option<&'a str> {
        let mode = self.admitting(event_type)?;
        Some(if self.0.len() > 1 {
            mode.as_str()
        } else {
            event_type
        })
    }

    /// The query value that selects these modes (`updates,messages`).
    pub fn to_query(&self) -> String {
        self.0
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A `bufferMs` that is not a whole number of milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bufferMs {0:?} is not a whole number of milliseconds from 0 to {MAX_BUFFER_MS} (0 or absent: every event is sent at once)"
)]
pub struct BufferMsError(pub String);

/// Reads the `bufferMs` query: absent or 0 is no batching (`None`); above
/// [`MAX_BUFFER_MS`] is clamped to it.
pub fn buffer_window(raw: Option<&str>) -> Result<Option<Duration>, BufferMsError> {
    let Some(raw) = raw else { return Ok(None) };
    let ms: u64 = raw
        .trim()
        .parse()
        .map_err(|_| BufferMsError(raw.to_owned()))?;
    Ok((ms > 0).then(|| Duration::from_millis(ms.min(MAX_BUFFER_MS))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_updates_and_combinations_keep_request_order() {
        assert_eq!(StreamModes::parse(None).unwrap(), StreamModes::default());
        assert_eq!(StreamModes::parse(Some("")).unwrap().to_query(), "updates");
        let m = StreamModes::parse(Some("messages,updates,messages")).unwrap();
        assert_eq!(m.modes(), &[StreamMode::Messages, StreamMode::Updates]);
        assert_eq!(m.label("node.completed"), Some("updates"));
        assert_eq!(m.label(MESSAGE_CHUNK), Some("messages"));
        assert_eq!(m.label("log.appended"), None);
        // One mode: the event keeps its own type as the SSE event name.
        let u = StreamModes::parse(Some("updates")).unwrap();
        assert_eq!(u.label("node.completed"), Some("node.completed"));
        assert!(StreamModes::parse(Some("values")).unwrap().is_values());
        assert_eq!(
            StreamModes::parse(Some("debug,updates"))
                .unwrap()
                .label("node.started"),
            Some("debug")
        );
    }

    #[test]
    fn unknown_modes_and_values_in_a_combination_are_refused() {
        for bad in [
            "firehose",
            "updates,",
            ",updates",
            "UPDATES",
            "updates,nope",
        ] {
            let e = StreamModes::parse(Some(bad)).unwrap_err();
            assert!(matches!(e, StreamModeError::Unknown { .. }), "{bad}: {e}");
            assert!(e.to_string().contains("values, updates, messages or debug"));
        }
        for bad in ["values,updates", "debug,values"] {
            assert_eq!(
                StreamModes::parse(Some(bad)).unwrap_err(),
                StreamModeError::ValuesCombined(bad.into())
            );
        }
        assert_eq!(
            StreamModeError::supported(),
            ["values", "updates", "messages", "debug"]
        );
    }

    #[test]
    fn each_mode_admits_its_rows_of_the_spec_table() {
        let admits = |m: StreamMode, t: &str| m.admits(t);
        for t in [
            "run.started",
            "node.completed",
            "node.suspended",
            "run.cancelled",
        ] {
            assert!(admits(StreamMode::Updates, t), "{t}");
            assert!(triggers_snapshot(t), "{t}");
        }
        for t in [
            "node.started",
            "log.appended",
            "variable.changed",
            "agent.reasoned",
            "x-host-acme-thing",
            MESSAGE_CHUNK,
        ] {
            assert!(!admits(StreamMode::Updates, t), "{t}");
        }
        assert!(triggers_snapshot("node.started"));
        assert!(!triggers_snapshot("log.appended"));
        assert!(admits(StreamMode::Messages, MESSAGE_CHUNK));
        assert!(!admits(StreamMode::Messages, "run.completed"));
        assert!(admits(StreamMode::Debug, "x-host-acme-thing"));
        assert!(!admits(StreamMode::Values, "run.started"));
    }

    #[test]
    fn buffer_windows_clamp_and_bad_values_are_refused() {
        assert_eq!(buffer_window(None), Ok(None));
        assert_eq!(buffer_window(Some("0")), Ok(None));
        assert_eq!(
            buffer_window(Some("250")),
            Ok(Some(Duration::from_millis(250)))
        );
        assert_eq!(
            buffer_window(Some("99999")),
            Ok(Some(Duration::from_millis(MAX_BUFFER_MS)))
        );
        for bad in ["-1", "1.5", "soon", ""] {
            assert_eq!(buffer_window(Some(bad)), Err(BufferMsError(bad.into())));
        }
        assert!(forces_flush("run.failed") && forces_flush("node.suspended"));
        assert!(!forces_flush("node.completed"));
    }
}
