//! NATS JetStream: the stream (created idempotently, with a dedup window), the durable
//! publisher (publish with `Nats-Msg-Id`, await the ack, retry with backoff while NATS is
//! unreachable, never drop), and the ordered read-back of a run's events for replay.
//!
//! Subjects and the stream's settings are the run contract's (`openwop_protocol::run::subjects`):
//! one subject per runId, both families in one stream created or updated by
//! `openwop_nats::ensure_stream`.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, message::PublishMessage, stream};
use bytes::Bytes;
use openwop_nats::NatsAuth;
use openwop_protocol::events::RunEventDoc;
use openwop_protocol::run::subjects::StreamSpec;

use crate::eventlog::{LogError, Publisher};

/// How long to keep trying to make one message durable.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub deadline: Duration,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// How long to wait for one ack.
    pub ack_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            deadline: Duration::from_secs(120),
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            ack_timeout: Duration::from_secs(2),
        }
    }
}

/// Connects with unbounded reconnects; the first connection is retried in the background so
/// a worker started before NATS is up just waits (bounded by the publish deadline). A
/// server-side refusal of `auth` is logged by the shared callback (`openwop_nats`).
pub async fn connect(url: &str, auth: &NatsAuth) -> Result<async_nats::Client, LogError> {
    openwop_nats::connect_options(concat!("openwop-worker/", env!("CARGO_PKG_VERSION")), auth)
        .map_err(|e| LogError::Read(e.to_string()))?
        .retry_on_initial_connect()
        .max_reconnects(None)
        .connection_timeout(Duration::from_secs(2))
        .connect(url)
        .await
        .map_err(|e| LogError::Read(format!("cannot connect to NATS at {url}: {e}")))
}

/// A JetStream context whose requests time out after `ack_timeout`.
pub fn context(client: async_nats::Client, policy: &RetryPolicy) -> jetstream::Context {
    let mut js = jetstream::new(client);
    js.set_timeout(policy.ack_timeout);
    js
}

/// Creates the stream if missing, or brings its retention to `spec` (idempotent), retrying
/// until the deadline.
pub async fn ensure_stream(
    js: &jetstream::Context,
    spec: &StreamSpec,
    policy: &RetryPolicy,
) -> Result<stream::Stream, LogError> {
    retry(policy, &spec.name, || async {
        openwop_nats::stream::ensure_stream(js, spec)
            .await
            .map_err(|e| e.to_string())
    })
    .await
}

async fn retry<T, F, Fut>(policy: &RetryPolicy, what: &str, mut op: F) -> Result<T, LogError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    let mut backoff = policy.initial_backoff;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        match op().await {
            Ok(v) => return Ok(v),
            Err(last) => {
                if start.elapsed() + backoff > policy.deadline {
                    return Err(LogError::Undurable {
                        event_id: what.to_owned(),
                        attempts,
                        elapsed_ms: start.elapsed().as_millis() as u64,
                        last,
                    });
                }
                tracing::warn!(attempt = attempts, error = %last, "NATS not available; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(policy.max_backoff);
            }
        }
    }
}

/// Publishes to JetStream with acks, retrying each message (same `Nats-Msg-Id`, so a
/// message stored before its ack was lost is deduplicated) until the policy deadline.
#[derive(Clone)]
pub struct JetStreamPublisher {
    js: jetstream::Context,
    policy: RetryPolicy,
}

impl JetStreamPublisher {
    pub fn new(js: jetstream::Context, policy: RetryPolicy) -> Self {
        JetStreamPublisher { js, policy }
    }
}

impl Publisher for JetStreamPublisher {
    async fn publish(&mut self, subject: &str, msg_id: &str, body: Bytes) -> Result<(), LogError> {
        let js = &self.js;
        retry(&self.policy, msg_id, || {
            let publish = PublishMessage::build()
                .payload(body.clone())
                .message_id(msg_id);
            async move {
                let ack = js
                    .send_publish(subject.to_owned(), publish)
                    .await
                    .map_err(|e| e.to_string())?;
                ack.await.map(|_| ()).map_err(|e| e.to_string())
            }
        })
        .await
    }
}

/// Reads every message on `subject`, in stream order (`openwop_nats::stream::read_subject`, the
/// one read-back shared with the operator), retried under the worker's policy.
pub async fn read_subject(
    stream: &stream::Stream,
    subject: &str,
    policy: &RetryPolicy,
) -> Result<Vec<Bytes>, LogError> {
    retry(policy, subject, || async {
        openwop_nats::stream::read_subject(stream, subject, policy.ack_timeout * 5)
            .await
            .map(|messages| messages.into_iter().map(|m| m.payload).collect())
            .map_err(|e| e.to_string())
    })
    .await
}

/// Run `run_id`'s recorded events, validated: in order, sequences 0..n without gaps.
pub async fn read_run_events(
    stream: &stream::Stream,
    subject: &str,
    run_id: &str,
    policy: &RetryPolicy,
) -> Result<Vec<RunEventDoc>, LogError> {
    let raw = read_subject(stream, subject, policy).await?;
    let log = decode_log(&raw, run_id)?;
    if log.foreign > 0 {
        tracing::warn!(
            subject,
            refused = log.foreign,
            "events of another run on this run's subject were refused (never replayed)"
        );
    }
    Ok(log.events)
}

/// A run's log as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedLog {
    /// The run's own events, sequences 0..n.
    pub events: Vec<RunEventDoc>,
    /// Events of another run found on the subject: refused, never replayed.
    pub foreign: usize,
}

/// Decodes and checks a run log read from the stream: only events of `run_id` are the
/// run's (replay never takes another run's outputs), and they must be gapless.
pub fn decode_log(raw: &[Bytes], run_id: &str) -> Result<DecodedLog, LogError> {
    let mut events: Vec<RunEventDoc> = Vec::with_capacity(raw.len());
    let mut foreign = 0;
    for (i, b) in raw.iter().enumerate() {
        let doc: RunEventDoc = serde_json::from_slice(b).map_err(|e| {
            LogError::Read(format!(
                "message {i} of the run's subject is not a RunEventDoc ({e}); the stream was written by something else"
            ))
        })?;
        if doc.run_id != run_id {
            foreign += 1;
            continue;
        }
        if doc.sequence != events.len() as u64 {
            return Err(LogError::Read(format!(
                "event {} of run {run_id} carries sequence {}; the run's log has a gap",
                events.len(),
                doc.sequence
            )));
        }
        events.push(doc);
    }
    Ok(DecodedLog { events, foreign })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(run: &str, seq: u64, ty: &str) -> Bytes {
        Bytes::from(
            json!({"eventId": format!("evt-{run}-{seq}"), "runId": run, "type": ty, "sequence": seq,
                   "timestamp": "2025-01-01T00:00:00Z", "payload": {}})
            .to_string(),
        )
    }

    #[test]
    fn replay_refuses_events_of_another_run() {
        // A previous run's completed log on the same subject must never be replayed.
        let raw = vec![
            ev("old", 0, "run.started"),
            ev("old", 1, "run.completed"),
            ev("new", 0, "run.started"),
        ];
        let log = decode_log(&raw, "new").unwrap();
        assert_eq!(log.foreign, 2);
        assert_eq!(log.events.len(), 1);
        assert_eq!(log.events[0].run_id, "new");
        let gap = vec![ev("new", 0, "run.started"), ev("new", 2, "node.started")];
        let e = decode_log(&gap, "new").unwrap_err().to_string();
        assert!(e.contains("gap"), "{e}");
        let junk = vec![Bytes::from_static(b"not json")];
        assert!(decode_log(&junk, "new").is_err());
    }
}
