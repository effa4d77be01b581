//! Reading one run's log from JetStream: the one reader behind `kubectl openwop events`, the
//! REST API's `/v1/runs/{runId}/events` (JSON, SSE, poll) and the read-backs of the worker and
//! the operator's event consumer (`stream::read_subject`).
//!
//! An ordered consumer (ephemeral, flow-controlled, recreated by the client on gaps) on the
//! run's subjects, from the first message or from a stream sequence. Each message says how
//! many more were pending when it was delivered, so a reader that does not follow stops when
//! it is caught up; a follower keeps reading as the worker publishes.

use async_nats::jetstream::{self, consumer};
use futures::{Stream, StreamExt};

/// Why the run's log cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(
        "JetStream stream {stream} not found (no run has published yet, or the stream name is wrong): {reason}"
    )]
    NoStream { stream: String, reason: String },
    #[error("JetStream stream {stream}: cannot {action}: {reason}")]
    Server {
        stream: String,
        action: &'static str,
        reason: String,
    },
}

/// Where reading starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum From {
    /// The run's first message.
    #[default]
    Start,
    /// The first message at or after this stream sequence.
    StreamSequence(u64),
}

/// One message of a run's log.
#[derive(Debug, Clone)]
pub struct LogMessage {
    pub subject: String,
    pub stream_sequence: u64,
    /// Messages of the run's subjects still to deliver after this one (0: caught up).
    pub pending: u64,
    pub payload: bytes::Bytes,
}

/// A run's log being read.
pub struct RunLog {
    /// Messages matching the subjects when reading started (0: nothing to read yet).
    pub pending_at_start: u64,
    stream: String,
    messages: consumer::pull::Ordered,
}

impl RunLog {
    /// Opens the run's log: `subjects` of stream `stream` (e.g. the run's events subject and
    /// optionally its reasoning subject), from `from`.
    pub async fn open(
        js: &jetstream::Context,
        stream: &str,
        subjects: Vec<String>,
        from: From,
    ) -> Result<RunLog, ReadError> {
        let s = js
            .get_stream(stream)
            .await
            .map_err(|e| ReadError::NoStream {
                stream: stream.to_owned(),
                reason: e.to_string(),
            })?;
        RunLog::open_on(&s, subjects, from).await
    }

    /// [`RunLog::open`] on a stream already looked up.
    pub async fn open_on(
        s: &jetstream::stream::Stream,
        subjects: Vec<String>,
        from: From,
    ) -> Result<RunLog, ReadError> {
        let stream = s.cached_info().config.name.clone();
        let server = |action, e: &dyn std::fmt::Display| ReadError::Server {
            stream: stream.clone(),
            action,
            reason: e.to_string(),
        };
        let deliver_policy = match from {
            From::Start => consumer::DeliverPolicy::All,
            From::StreamSequence(n) => consumer::DeliverPolicy::ByStartSequence {
                start_sequence: n.max(1),
            },
        };
        let mut c = s
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subjects: subjects,
                deliver_policy,
                ..Default::default()
            })
            .await
            .map_err(|e| server("create an ordered consumer on the run's subjects", &e))?;
        let pending_at_start = c
            .info()
            .await
            .map_err(|e| server("read the consumer's state", &e))?
            .num_pending;
        let messages = c
            .messages()
            .await
            .map_err(|e| server("start reading the run's subjects", &e))?;
        Ok(RunLog {
            pending_at_start,
            stream,
            messages,
        })
    }

    /// The messages, in stream order. Ends only on a server error; a reader that does not
    /// follow stops at the first message with `pending == 0` (or at once when
    /// `pending_at_start == 0`).
    pub fn messages(self) -> impl Stream<Item = Result<LogMessage, ReadError>> + Send {
        let stream = self.stream;
        self.messages.map(move |m| {
            let m = m.map_err(|e| ReadError::Server {
                stream: stream.clone(),
                action: "read the run's subjects",
                reason: e.to_string(),
            })?;
            let info = m.info().map_err(|e| ReadError::Server {
                stream: stream.clone(),
                action: "read message metadata",
                reason: e.to_string(),
            })?;
            let (stream_sequence, pending) = (info.stream_sequence, info.pending);
            Ok(LogMessage {
                subject: m.subject.to_string(),
                stream_sequence,
                pending,
                payload: m.payload.clone(),
            })
        })
    }
}
