//! The run's event log as the executor sees it: the events already durable (read back on
//! start) plus the ones this worker publishes. Every event goes through [`RunLog::append`],
//! which
//! * drops an event whose deterministic `eventId` is already in the log (a re-executed step),
//!   and reports `replay.diverged` when the re-executed event differs from the recorded one;
//! * stamps the per-run `sequence` (recorded events + 1, so there is never a gap);
//! * redacts the whole document (last line of SR-1 defence);
//! * publishes it and waits for the durable ack before the next one, so the stream holds a
//!   gap-free prefix of the run's deterministic event sequence at every instant.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use openwop_protocol::events::{EventFactory, EventPayload, EventType, RunEventDoc};
use openwop_protocol::redact::Redactor;
use serde_json::{Value, json};

use crate::stop::StopSignal;

/// Why events could not be made durable. The worker exits non-zero on it so the operator
/// retries; a run whose events were lost is never reported finished.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    #[error(
        "event {event_id} could not be made durable after {attempts} attempts over {elapsed_ms} ms (last error: {last}); the worker exits so the operator retries"
    )]
    Undurable {
        event_id: String,
        attempts: u32,
        elapsed_ms: u64,
        last: String,
    },
    #[error("the run's event log cannot be read: {0}")]
    Read(String),
    /// A stop was requested (SIGTERM); nothing partial was published.
    #[error(
        "the worker was asked to stop; the stream holds a consistent prefix and a later worker replays it"
    )]
    Stopped,
}

/// Somewhere events are made durable: JetStream in production, memory in unit tests.
pub trait Publisher {
    /// Publishes `body` on `subject` with dedup id `msg_id`; resolves once it is durable.
    fn publish(
        &mut self,
        subject: &str,
        msg_id: &str,
        body: Bytes,
    ) -> impl Future<Output = Result<(), LogError>>;
}

/// A recorded event that a re-executed step produced differently.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    pub event_id: String,
    pub recorded_type: String,
    pub replayed_type: String,
    pub field: &'static str,
}

/// The current UTC time as RFC 3339.
pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

pub struct RunLog<P: Publisher> {
    publisher: P,
    subject: String,
    redactor: Arc<Redactor>,
    factory: EventFactory,
    recorded: Vec<RunEventDoc>,
    known: HashMap<String, usize>,
    /// The position of the last event of each type per node, so the executor's per-node
    /// look-ups ("is this node's completion recorded?") do not scan the log.
    last_by_node: HashMap<(EventType, String), usize>,
    replayed: usize,
    published: u64,
    divergences: Vec<Divergence>,
    stop: Option<StopSignal>,
    /// `env::FAULT_PAUSE_AT_SEQUENCE`: never set in production.
    fault_pause: Option<u64>,
}

impl<P: Publisher> std::fmt::Debug for RunLog<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLog")
            .field("subject", &self.subject)
            .field("recorded", &self.recorded.len())
            .field("published", &self.published)
            .finish_non_exhaustive()
    }
}

impl<P: Publisher> RunLog<P> {
    /// `existing` is the run's log as read from the stream, in order.
    pub fn new(
        publisher: P,
        subject: impl Into<String>,
        run_id: &str,
        redactor: Arc<Redactor>,
        existing: Vec<RunEventDoc>,
    ) -> Self {
        let known = existing
            .iter()
            .enumerate()
            .map(|(i, e)| (e.event_id.clone(), i))
            .collect();
        let last_by_node = existing
            .iter()
            .enumerate()
            .filter_map(|(i, e)| Some(((e.event_type, e.node_id.clone()?), i)))
            .collect();
        RunLog {
            publisher,
            subject: subject.into(),
            redactor,
            factory: EventFactory::new(run_id, existing.len() as u64)
                .with_engine_version(concat!("openwop-worker/", env!("CARGO_PKG_VERSION"))),
            replayed: existing.len(),
            recorded: existing,
            known,
            last_by_node,
            published: 0,
            divergences: Vec::new(),
            stop: None,
            fault_pause: None,
        }
    }

    /// Refuse to start a publish once `stop` is requested (`None` lifts the guard, e.g. to
    /// record `run.cancelled` after stopping).
    pub fn set_stop(&mut self, stop: Option<StopSignal>) {
        self.stop = stop;
    }

    /// `Err(Stopped)` once a stop is requested: call before starting any publish.
    pub fn check_stop(&self) -> Result<(), LogError> {
        match &self.stop {
            Some(s) if s.is_requested() => Err(LogError::Stopped),
            _ => Ok(()),
        }
    }

    /// Fault injection (`env::FAULT_PAUSE_AT_SEQUENCE`): wait forever instead of publishing
    /// the event of `sequence`, so a test kills the worker at an exact point.
    pub fn set_fault_pause(&mut self, sequence: Option<u64>) {
        self.fault_pause = sequence;
    }

    pub fn stop_signal(&self) -> Option<StopSignal> {
        self.stop.clone()
    }

    pub fn run_id(&self) -> &str {
        self.factory.run_id()
    }

    /// The factory the protocol state machines stamp their events with; sequences are
    /// re-stamped by [`Self::append`].
    pub fn factory(&mut self) -> &mut EventFactory {
        &mut self.factory
    }

    pub fn publisher(&mut self) -> &mut P {
        &mut self.publisher
    }

    pub fn events(&self) -> &[RunEventDoc] {
        &self.recorded
    }

    /// Events that were in the log when this worker started.
    pub fn replayed_count(&self) -> usize {
        self.replayed
    }

    /// Events this worker published.
    pub fn published_count(&self) -> u64 {
        self.published
    }

    /// The last recorded event of type `t` about node `node_id`.
    pub fn last_of_node(&self, t: EventType, node_id: &str) -> Option<&RunEventDoc> {
        self.last_by_node
            .get(&(t, node_id.to_owned()))
            .map(|&i| &self.recorded[i])
    }

    pub fn contains(&self, event_id: &str) -> bool {
        self.known.contains_key(event_id)
    }

    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Builds one event (not yet appended).
    pub fn build<T: EventPayload>(
        &mut self,
        step_key: &str,
        node: Option<&str>,
        p: &T,
    ) -> RunEventDoc {
        let doc = self.factory.emit(step_key, &now_rfc3339(), p);
        match node {
            Some(n) => doc.with_node(n),
            None => doc,
        }
    }

    pub fn build_value(
        &mut self,
        step_key: &str,
        node: Option<&str>,
        t: EventType,
        payload: Value,
    ) -> RunEventDoc {
        let doc = self
            .factory
            .emit_value(step_key, &now_rfc3339(), t, payload);
        match node {
            Some(n) => doc.with_node(n),
            None => doc,
        }
    }

    /// Builds and appends one typed event.
    pub async fn emit<T: EventPayload>(
        &mut self,
        step_key: &str,
        node: Option<&str>,
        p: &T,
    ) -> Result<(), LogError> {
        let doc = self.build(step_key, node, p);
        self.append(vec![doc]).await
    }

    /// Builds and appends one untyped event.
    pub async fn emit_value(
        &mut self,
        step_key: &str,
        node: Option<&str>,
        t: EventType,
        payload: Value,
    ) -> Result<(), LogError> {
        let doc = self.build_value(step_key, node, t, payload);
        self.append(vec![doc]).await
    }

    /// Appends events in order; see the module docs.
    pub async fn append(&mut self, docs: Vec<RunEventDoc>) -> Result<(), LogError> {
        for mut doc in docs {
            self.redactor.redact_value(&mut doc.payload);
            for s in [&mut doc.node_id, &mut doc.causation_id]
                .into_iter()
                .flatten()
            {
                self.redactor.redact_in_place(s);
            }
            if let Some(&i) = self.known.get(&doc.event_id) {
                self.check_divergence(i, &doc);
                continue;
            }
            self.check_stop()?;
            doc.sequence = self.recorded.len() as u64;
            if self.fault_pause == Some(doc.sequence) {
                tracing::warn!(
                    sequence = doc.sequence,
                    event_type = doc.event_type.as_str(),
                    "fault pause: waiting to be killed"
                );
                std::future::pending::<()>().await;
            }
            let body = serde_json::to_vec(&doc).map_err(|e| LogError::Read(e.to_string()))?;
            self.publisher
                .publish(&self.subject, &doc.event_id, Bytes::from(body))
                .await?;
            self.known.insert(doc.event_id.clone(), self.recorded.len());
            if let Some(n) = &doc.node_id {
                self.last_by_node
                    .insert((doc.event_type, n.clone()), self.recorded.len());
            }
            self.recorded.push(doc);
            self.published += 1;
        }
        self.flush_divergences().await
    }

    fn check_divergence(&mut self, i: usize, doc: &RunEventDoc) {
        let rec = &self.recorded[i];
        let field = if rec.event_type != doc.event_type {
            "type"
        } else if rec.payload != doc.payload {
            "payload"
        } else if rec.node_id != doc.node_id {
            "nodeId"
        } else {
            return;
        };
        self.divergences.push(Divergence {
            event_id: doc.event_id.clone(),
            recorded_type: rec.event_type.as_str().to_owned(),
            replayed_type: doc.event_type.as_str().to_owned(),
            field,
        });
    }

    /// Publishes one `replay.diverged` per divergent event; the recorded event stays the truth.
    async fn flush_divergences(&mut self) -> Result<(), LogError> {
        while let Some(d) = self.divergences.pop() {
            let key = format!("replay.diverged/{}", d.event_id);
            let doc = self.build_value(
                &key,
                None,
                EventType::ReplayDiverged,
                json!({"eventId": d.event_id, "recordedType": d.recorded_type,
                       "replayedType": d.replayed_type, "field": d.field,
                       "resolution": "recorded-event-kept"}),
            );
            if self.known.contains_key(&doc.event_id) {
                continue;
            }
            Box::pin(self.append(vec![doc])).await?;
        }
        Ok(())
    }
}

/// An in-memory publisher: what unit tests and benches use instead of JetStream.
#[derive(Debug, Default, Clone)]
pub struct MemoryPublisher {
    pub messages: Vec<(String, String, Bytes)>,
}

impl Publisher for MemoryPublisher {
    async fn publish(&mut self, subject: &str, msg_id: &str, body: Bytes) -> Result<(), LogError> {
        self.messages
            .push((subject.to_owned(), msg_id.to_owned(), body));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openwop_protocol::events::{LogAppended, LogLevel};

    fn log_msg(m: &str) -> LogAppended {
        LogAppended {
            level: LogLevel::Info,
            message: m.into(),
            node_id: None,
            fields: None,
        }
    }

    fn block<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn re_executed_steps_are_dropped_and_sequences_stay_gap_free() {
        block(async {
            let red = Arc::new(Redactor::default());
            let mut first = RunLog::new(MemoryPublisher::default(), "s", "r", red.clone(), vec![]);
            first.emit("a", None, &log_msg("one")).await.unwrap();
            first.emit("b", None, &log_msg("two")).await.unwrap();
            let existing = first.events().to_vec();
            let mut second = RunLog::new(MemoryPublisher::default(), "s", "r", red, existing);
            // The same two steps again, then a new one.
            second.emit("a", None, &log_msg("one")).await.unwrap();
            second.emit("b", None, &log_msg("two")).await.unwrap();
            second.emit("c", None, &log_msg("three")).await.unwrap();
            assert_eq!(second.published_count(), 1);
            let seqs: Vec<u64> = second.events().iter().map(|e| e.sequence).collect();
            assert_eq!(seqs, [0, 1, 2]);
            assert_eq!(second.publisher().messages.len(), 1);
            assert_eq!(
                second.publisher().messages[0].1,
                event_id_for_test("r", "c")
            );
        });
    }

    fn event_id_for_test(run: &str, key: &str) -> String {
        openwop_protocol::events::event_id_for(run, key)
    }

    #[test]
    fn a_differing_re_execution_emits_replay_diverged() {
        block(async {
            let red = Arc::new(Redactor::default());
            let mut first = RunLog::new(MemoryPublisher::default(), "s", "r", red.clone(), vec![]);
            first.emit("a", None, &log_msg("one")).await.unwrap();
            let mut second = RunLog::new(
                MemoryPublisher::default(),
                "s",
                "r",
                red,
                first.events().to_vec(),
            );
            second.emit("a", None, &log_msg("changed")).await.unwrap();
            let types: Vec<&str> = second
                .events()
                .iter()
                .map(|e| e.event_type.as_str())
                .collect();
            assert_eq!(types, ["log.appended", "replay.diverged"]);
            assert_eq!(second.events()[1].payload["field"], "payload");
            assert_eq!(second.events()[0].payload["message"], "one");
        });
    }

    #[test]
    fn secrets_are_redacted_before_publishing() {
        block(async {
            let red = Arc::new(Redactor::new([(
                "k".to_string(),
                "sk-canary-123456".to_string(),
            )]));
            let mut log = RunLog::new(MemoryPublisher::default(), "s", "r", red, vec![]);
            log.emit(
                "a",
                Some("sk-canary-123456"),
                &log_msg("key sk-canary-123456"),
            )
            .await
            .unwrap();
            let body = String::from_utf8(log.publisher().messages[0].2.to_vec()).unwrap();
            assert!(!body.contains("sk-canary-123456"), "{body}");
            assert!(body.contains("[REDACTED:k]"));
        });
    }
}
