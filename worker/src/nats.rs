//! NATS JetStream: the stream (created idempotently, with a dedup window), the durable
//! publisher (publish with `Nats-Msg-Id`, await the ack, retry with backoff while NATS is
//! unreachable, never drop), and the ordered read-back of a run's events for replay.
//!
//! One stream holds both subject families: `openwop.events.<ns>.<run>` (RunEventDocs) and
//! `openwop.reasoning.<ns>.<run>` (MEUP reasoning messages), so one dedup window and one
//! retention policy cover a run.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, message::PublishMessage, stream};
use bytes::Bytes;
use futures::StreamExt;
use openwop_nats::NatsAuth;
use openwop_protocol::events::RunEventDoc;

use crate::eventlog::{LogError, Publisher};

/// Dedup window: a re-executed step within it is dropped by the server itself; beyond it the
/// worker's own replay (which skips every recorded eventId) still prevents duplicates.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(15 * 60);

/// Subjects of the run-events stream.
pub const STREAM_SUBJECTS: [&str; 2] = ["openwop.events.>", "openwop.reasoning.>"];

/// `openwop.events.<namespace>.<run>`.
pub fn events_subject(namespace: &str, run: &str) -> String {
    format!("openwop.events.{namespace}.{run}")
}

/// `openwop.reasoning.<namespace>.<run>`.
pub fn reasoning_subject(namespace: &str, run: &str) -> String {
    format!("openwop.reasoning.{namespace}.{run}")
}

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

/// Creates the stream if missing (idempotent), retrying until the deadline.
pub async fn ensure_stream(
    js: &jetstream::Context,
    name: &str,
    policy: &RetryPolicy,
) -> Result<stream::Stream, LogError> {
    let config = stream::Config {
        name: name.to_owned(),
        subjects: STREAM_SUBJECTS.iter().map(|s| s.to_string()).collect(),
        duplicate_window: DUPLICATE_WINDOW,
        storage: stream::StorageType::File,
        ..Default::default()
    };
    retry(policy, name, || async {
        js.get_or_create_stream(config.clone())
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

/// Reads every message on `subject`, in stream order, with an ordered consumer.
pub async fn read_subject(
    stream: &stream::Stream,
    subject: &str,
    policy: &RetryPolicy,
) -> Result<Vec<Bytes>, LogError> {
    retry(policy, subject, || async {
        let consumer = stream
            .create_consumer(pull::OrderedConfig {
                filter_subject: subject.to_owned(),
                deliver_policy: jetstream::consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        let total = consumer.cached_info().num_pending as usize;
        let mut out = Vec::with_capacity(total);
        if total == 0 {
            return Ok(out);
        }
        let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
        while out.len() < total {
            let next = tokio::time::timeout(policy.ack_timeout * 5, messages.next())
                .await
                .map_err(|_| format!("timed out after {} of {total} messages", out.len()))?;
            match next {
                Some(Ok(m)) => out.push(m.payload.clone()),
                Some(Err(e)) => return Err(e.to_string()),
                None => return Err("consumer closed early".into()),
            }
        }
        Ok(out)
    })
    .await
}

/// The run's recorded events, validated: in order, sequences 0..n without gaps.
pub async fn read_run_events(
    stream: &stream::Stream,
    subject: &str,
    policy: &RetryPolicy,
) -> Result<Vec<RunEventDoc>, LogError> {
    let raw = read_subject(stream, subject, policy).await?;
    decode_log(&raw)
}

/// Decodes and checks a run log read from the stream.
pub fn decode_log(raw: &[Bytes]) -> Result<Vec<RunEventDoc>, LogError> {
    let mut out: Vec<RunEventDoc> = Vec::with_capacity(raw.len());
    for (i, b) in raw.iter().enumerate() {
        let doc: RunEventDoc = serde_json::from_slice(b).map_err(|e| {
            LogError::Read(format!(
                "message {i} of the run's subject is not a RunEventDoc ({e}); the stream was written by something else"
            ))
        })?;
        if doc.sequence != i as u64 {
            return Err(LogError::Read(format!(
                "message {i} carries sequence {}; the run's log has a gap or a foreign event",
                doc.sequence
            )));
        }
        out.push(doc);
    }
    Ok(out)
}
