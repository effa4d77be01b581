//! The run-events stream on a JetStream server, as the operator and the worker both create
//! or update it: one mapping from protocol's [`StreamSpec`] to the server's stream
//! configuration, [`ensure_stream`] (create, or bring an existing stream's retention and
//! dedup window to the spec), [`read_subject`] (a subject's messages in stream order) and
//! [`purge_run`] (drop one run's subjects, when its Run is deleted) and [`runs_in_stream`]
//! (the runs that have events, to find those no Run has any more).
//!
//! ```no_run
//! # async fn f(js: async_nats::jetstream::Context) -> Result<(), openwop_nats::stream::StreamError> {
//! use openwop_protocol::run::subjects::{DEFAULT_STREAM, StreamSpec};
//! let spec = StreamSpec::new(DEFAULT_STREAM, Some(std::time::Duration::from_secs(7 * 86_400)));
//! let stream = openwop_nats::stream::ensure_stream(&js, &spec).await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use crate::reader::{From, LogMessage, ReadError, RunLog};
use async_nats::jetstream::{self, stream};
use openwop_protocol::run::subjects::{
    RunSubject, STREAM_SUBJECTS, StreamSpec, parse_events_subject, run_subjects,
};

/// Why the stream could not be ensured or purged. Names the stream and what was attempted.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("JetStream stream {stream}: cannot {action}: {reason}")]
    Server {
        stream: String,
        action: &'static str,
        reason: String,
    },
}

fn server(stream: &str, action: &'static str, e: impl std::fmt::Display) -> StreamError {
    StreamError::Server {
        stream: stream.to_owned(),
        action,
        reason: e.to_string(),
    }
}

/// The server configuration of `spec`: both subject families ([`STREAM_SUBJECTS`]), file
/// storage, the dedup window, and `max_age` (0 = kept until purged).
pub fn stream_config(spec: &StreamSpec) -> stream::Config {
    stream::Config {
        name: spec.name.clone(),
        subjects: STREAM_SUBJECTS.iter().map(|s| (*s).to_owned()).collect(),
        storage: stream::StorageType::File,
        duplicate_window: spec.duplicate_window,
        max_age: spec.max_age.unwrap_or(Duration::ZERO),
        ..Default::default()
    }
}

/// Whether an existing stream's configuration differs from `spec` in what
/// [`ensure_stream`] manages (retention, dedup window, subjects).
pub fn needs_update(existing: &stream::Config, spec: &StreamSpec) -> bool {
    let want = stream_config(spec);
    let missing_subject = want.subjects.iter().any(|s| !existing.subjects.contains(s));
    existing.max_age != want.max_age
        || existing.duplicate_window != want.duplicate_window
        || missing_subject
}

/// Creates the stream of `spec`, or updates an existing one whose `max_age`, dedup window or
/// subjects differ (its other settings, e.g. replicas or limits an admin set, are kept).
/// Called by the operator when its event consumer starts and by every worker before it
/// publishes, so whichever comes first creates it and both agree on its settings.
pub async fn ensure_stream(
    js: &jetstream::Context,
    spec: &StreamSpec,
) -> Result<stream::Stream, StreamError> {
    let name = spec.name.as_str();
    let stream = js
        .get_or_create_stream(stream_config(spec))
        .await
        .map_err(|e| server(name, "create or read it", e))?;
    let existing = stream.cached_info().config.clone();
    if !needs_update(&existing, spec) {
        return Ok(stream);
    }
    let want = stream_config(spec);
    let mut subjects = existing.subjects.clone();
    for s in want.subjects {
        if !subjects.contains(&s) {
            subjects.push(s);
        }
    }
    let updated = stream::Config {
        subjects,
        max_age: want.max_age,
        duplicate_window: want.duplicate_window,
        ..existing
    };
    js.update_stream(&updated)
        .await
        .map_err(|e| server(name, "update its retention", e))?;
    tracing::info!(
        stream = name,
        max_age_seconds = want.max_age.as_secs(),
        duplicate_window_seconds = want.duplicate_window.as_secs(),
        "run events stream updated"
    );
    js.get_stream(name)
        .await
        .map_err(|e| server(name, "read it after the update", e))
}

/// Reads every message stored on `subject`, in stream order, with the run-log reader
/// ([`crate::reader::RunLog`]; one attempt: each message must arrive within `timeout`); an
/// empty subject without opening one. Used to read a run's log back: by a worker before it
/// records anything, and to fill a hole in the events a durable consumer delivered.
pub async fn read_subject(
    stream: &stream::Stream,
    subject: &str,
    timeout: Duration,
) -> Result<Vec<LogMessage>, StreamError> {
    use futures::StreamExt as _;
    let name = stream.cached_info().config.name.clone();
    // An empty subject (every run's first start reads its log) is answered by one look-up of
    // its last message; the ordered consumer costs the server a create, an info and a pull,
    // and lingers until its inactivity threshold.
    if last_message(stream, &name, subject).await?.is_none() {
        return Ok(Vec::new());
    }
    let failed = |e: ReadError| server(&name, "read a subject", e);
    let log = RunLog::open_on(stream, vec![subject.to_owned()], From::Start)
        .await
        .map_err(failed)?;
    let total = log.pending_at_start as usize;
    let mut out = Vec::with_capacity(total);
    let mut messages = std::pin::pin!(log.messages());
    while out.len() < total {
        match tokio::time::timeout(timeout, messages.next()).await {
            Err(_) => {
                return Err(server(
                    &name,
                    "read a subject",
                    format!(
                        "{subject}: timed out after {} of {total} messages",
                        out.len()
                    ),
                ));
            }
            Ok(Some(Ok(m))) => out.push(m),
            Ok(Some(Err(e))) => return Err(failed(e)),
            Ok(None) => {
                return Err(server(
                    &name,
                    "read a subject",
                    format!("{subject}: consumer closed early"),
                ));
            }
        }
    }
    Ok(out)
}

/// The runs that have events in `stream_name` (one per events subject matching `filter`, e.g.
/// [`openwop_protocol::run::subjects::events_filter`]), in no particular order. Subjects that
/// are not a run's events subject are skipped.
pub async fn runs_in_stream(
    js: &jetstream::Context,
    stream_name: &str,
    filter: &str,
) -> Result<Vec<RunSubject>, StreamError> {
    use futures::TryStreamExt;
    let stream = js
        .get_stream(stream_name)
        .await
        .map_err(|e| server(stream_name, "read it", e))?;
    let subjects: Vec<(String, usize)> = stream
        .info_with_subjects(filter)
        .await
        .map_err(|e| server(stream_name, "list its subjects", e))?
        .try_collect()
        .await
        .map_err(|e| server(stream_name, "list its subjects", e))?;
    Ok(subjects
        .into_iter()
        .filter_map(|(subject, _)| parse_events_subject(&subject).ok())
        .collect())
}

/// Purges both subjects of one run (its events and its reasoning) from `stream_name`.
/// Returns how many messages were removed.
pub async fn purge_run(
    js: &jetstream::Context,
    stream_name: &str,
    namespace: &str,
    run_id: &str,
) -> Result<u64, StreamError> {
    let stream = js
        .get_stream(stream_name)
        .await
        .map_err(|e| server(stream_name, "read it", e))?;
    let mut purged = 0;
    for subject in run_subjects(namespace, run_id) {
        purged += stream
            .purge()
            .filter(subject)
            .await
            .map_err(|e| server(stream_name, "purge a run's subjects", e))?
            .purged;
    }
    Ok(purged)
}

/// The last message of `subject` in `stream_name`: its stream sequence and payload, `None`
/// when the subject holds none.
pub async fn last_on_subject(
    js: &jetstream::Context,
    stream_name: &str,
    subject: &str,
) -> Result<Option<(u64, bytes::Bytes)>, StreamError> {
    let stream = js
        .get_stream_no_info(stream_name)
        .await
        .map_err(|e| server(stream_name, "read it", e))?;
    last_message(&stream, stream_name, subject).await
}

/// [`last_on_subject`] on a stream already looked up (`stream_name` names it in errors).
async fn last_message<I>(
    stream: &stream::Stream<I>,
    stream_name: &str,
    subject: &str,
) -> Result<Option<(u64, bytes::Bytes)>, StreamError> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(m) => Ok(Some((m.sequence, m.payload))),
        Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => Ok(None),
        Err(e) => Err(server(stream_name, "read a subject's last message", e)),
    }
}

/// What [`append_after`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// The message is in the stream (or was already: same `Nats-Msg-Id` within the window).
    Stored,
    /// Someone appended to the subject after `expected`: nothing was written; read again.
    Moved,
}

/// Publishes `body` on `subject` with dedup id `msg_id`, only if the subject's last stream
/// sequence is still `expected` (0: the subject is empty) — JetStream's
/// `Nats-Expected-Last-Subject-Sequence` — so it can never land after, or between, messages
/// someone else appended meanwhile. Waits for the durable ack.
pub async fn append_after(
    js: &jetstream::Context,
    subject: &str,
    msg_id: &str,
    expected: u64,
    body: bytes::Bytes,
) -> Result<Appended, StreamError> {
    use async_nats::jetstream::context::PublishErrorKind;
    use async_nats::jetstream::message::PublishMessage;
    let msg = PublishMessage::build()
        .payload(body)
        .message_id(msg_id)
        .expected_last_subject_sequence(expected);
    let ack = match js.send_publish(subject.to_owned(), msg).await {
        Ok(ack) => ack.await,
        Err(e) => Err(e),
    };
    match ack {
        Ok(_) => Ok(Appended::Stored),
        Err(e) if matches!(e.kind(), PublishErrorKind::WrongLastSequence) => Ok(Appended::Moved),
        Err(e) => Err(server(subject, "append to a run's subject", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openwop_protocol::run::subjects::DUPLICATE_WINDOW;

    #[test]
    fn the_spec_maps_to_one_server_config() {
        let week = Duration::from_secs(7 * 86_400);
        let c = stream_config(&StreamSpec::new("OPENWOP_EVENTS", Some(week)));
        assert_eq!(c.name, "OPENWOP_EVENTS");
        assert_eq!(c.subjects, ["openwop.events.>", "openwop.reasoning.>"]);
        assert_eq!(c.storage, stream::StorageType::File);
        assert_eq!((c.max_age, c.duplicate_window), (week, DUPLICATE_WINDOW));
        // Keep until purged: max_age 0 on the server.
        let c = stream_config(&StreamSpec::new("S", None));
        assert_eq!(
            (c.max_age, c.duplicate_window),
            (Duration::ZERO, DUPLICATE_WINDOW)
        );
        // A retention shorter than the dedup window bounds it (the server requires it).
        let c = stream_config(&StreamSpec::new("S", Some(Duration::from_secs(60))));
        assert_eq!(c.duplicate_window, Duration::from_secs(60));
    }

    #[test]
    fn only_retention_window_and_subjects_trigger_an_update() {
        let spec = StreamSpec::new("S", Some(Duration::from_secs(3600)));
        let mut existing = stream_config(&spec);
        existing.num_replicas = 3;
        assert!(!needs_update(&existing, &spec));
        existing.max_age = Duration::ZERO;
        assert!(needs_update(&existing, &spec));
        let mut existing = stream_config(&spec);
        existing.subjects = vec!["openwop.events.>".into()];
        assert!(needs_update(&existing, &spec));
    }
}
