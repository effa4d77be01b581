//! Live Run status from the run event stream.
//!
//! Workers publish each `RunEventDoc` on JetStream stream `worker.eventsStream`, subject
//! `openwop.events.<namespace>.<runId>` ([`openwop_protocol::run::subjects`]), where the runId
//! is the Run's uid: a Run deleted and re-created under the same name is a new run, and the
//! events of the old one can never reach the new one. The leader ensures the stream (with the
//! configured retention, [`openwop_nats::stream::ensure_stream`]), reads it with one durable
//! pull consumer (`events.consumer`), finds each run's Run **by uid** (the Run controller's
//! cache, else a LIST of the namespace), folds the run's new events into its status with
//! protocol's [`Projection`](openwop_protocol::run::projection::Projection), and writes the whole (small) status back with server-side apply
//! under the reconciler's field manager and a resourceVersion precondition, so neither writer
//! can overwrite the other with stale data.
//!
//! Exact and in order: a run's events are applied strictly in `sequence` order, continuing at
//! `status.lastSequence + 1` ([`openwop_protocol::run::sequence`]). An event at or below it
//! changes nothing, so redeliveries after a restart (the durable consumer resumes from its
//! ack floor) or after a failover never move a status backwards. Events delivered after a
//! hole (a batch NAK'd because its status write failed comes back after later ones) are
//! never applied past it: the run's log is read back from the stream and folded in order;
//! a hole the stream cannot fill yet keeps the later events unacknowledged (redelivered)
//! until it is filled. A terminal phase is never revived.
//! Malformed subjects or payloads, and events whose own `runId` is not their subject's, are
//! logged (bounded) and acknowledged as terminated (never retried, never fatal). Events of a
//! runId no Run has (a deleted Run) are acknowledged and dropped.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::pull};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use openwop_crds::{Run, RunStatus};
use openwop_protocol::run::projection::is_terminal;
use openwop_protocol::run::sequence;
use openwop_protocol::run::subjects::{
    RunSubject, SubjectError, events_filter, events_subject, parse_events_subject,
};
use openwop_protocol::text::truncate;
use serde_json::Value;

use crate::config::OperatorConfig;
use crate::controller::end_by_stream;
use crate::jetstream::JetStreamSlot;
use crate::kube_events::{EventSink, Note};
use crate::status::write_run_status;

/// Largest event accepted (a RunEventDoc is small; anything bigger is not one).
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// Conflicting writes retried before the batch is redelivered later.
const MAX_CONFLICT_RETRIES: u32 = 5;
/// Refused messages logged one by one per batch; the rest are counted in one line.
const MAX_LOGGED_REFUSALS: usize = 5;
/// Longest piece of untrusted text (a subject, a runId) quoted in a log line.
const MAX_QUOTED_CHARS: usize = 80;

/// Why an event message was skipped or a write failed.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("{0}")]
    Subject(#[from] SubjectError),
    #[error("event on {subject} is not a RunEventDoc: {reason}")]
    Payload { subject: String, reason: String },
    #[error(
        "event on {subject} carries runId {payload_run_id:?}, not its subject's {subject_run_id}; refused"
    )]
    ForeignRunId {
        subject: String,
        subject_run_id: String,
        payload_run_id: String,
    },
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("NATS: {0}")]
    Nats(String),
    #[error("NATS credentials: {0}")]
    Credentials(#[from] openwop_nats::AuthError),
    #[error("{0}")]
    Stream(#[from] openwop_nats::stream::StreamError),
    #[error(
        "run {namespace}/{run_id}: events {from}..{to} are missing from the stream; later events are held (redelivered) until they arrive"
    )]
    Gap {
        namespace: String,
        run_id: String,
        from: u64,
        to: u64,
    },
}

/// Decodes one message of `subject` (already parsed): a JSON object with a string `type`, an
/// unsigned `sequence` and a `runId` equal to the subject's (an event cannot speak for
/// another run).
pub fn decode_event(
    subject: &RunSubject,
    raw_subject: &str,
    payload: &[u8],
) -> Result<Value, EventError> {
    let quoted = truncate(raw_subject, MAX_QUOTED_CHARS);
    let bad = |reason: String| EventError::Payload {
        subject: quoted.clone(),
        reason,
    };
    if payload.len() > MAX_EVENT_BYTES {
        return Err(bad(format!(
            "{} bytes, more than the {MAX_EVENT_BYTES}-byte limit",
            payload.len()
        )));
    }
    let v: Value = serde_json::from_slice(payload).map_err(|e| bad(format!("not JSON ({e})")))?;
    if !v.is_object() {
        return Err(bad("not a JSON object".into()));
    }
    if v.get("type").and_then(Value::as_str).is_none() {
        return Err(bad("/type is missing or not a string".into()));
    }
    if v.get("sequence").and_then(Value::as_u64).is_none() {
        return Err(bad("/sequence is missing or not an unsigned integer".into()));
    }
    let Some(run_id) = v.get("runId").and_then(Value::as_str) else {
        return Err(bad("/runId is missing or not a string".into()));
    };
    if run_id != subject.run_id {
        return Err(EventError::ForeignRunId {
            subject: quoted,
            subject_run_id: truncate(&subject.run_id, MAX_QUOTED_CHARS),
            payload_run_id: truncate(run_id, MAX_QUOTED_CHARS),
        });
    }
    Ok(v)
}

/// Parses and decodes one message: where it goes and the event.
pub fn decode_message(subject: &str, payload: &[u8]) -> Result<(RunSubject, Value), EventError> {
    let s = parse_events_subject(subject)
        .map_err(|e| EventError::Subject(SubjectError(truncate(&e.0, MAX_QUOTED_CHARS))))?;
    let v = decode_event(&s, subject, payload)?;
    Ok((s, v))
}

/// The Run a run's events belong to: the one in `namespace` whose uid is `run_id`. A Run of
/// the same name with another uid (re-created) is a different run and never matches.
pub fn route<'a, R>(
    runs: impl IntoIterator<Item = &'a R>,
    namespace: &str,
    run_id: &str,
) -> Option<&'a R>
where
    R: ResourceExt + 'a,
{
    runs.into_iter().find(|r| {
        r.meta().namespace.as_deref() == Some(namespace) && r.meta().uid.as_deref() == Some(run_id)
    })
}

/// The Run status after `events`, or `None` when none of them is new.
///
/// Folds the events into the stored status's projection (so the fold resumes at
/// `status.lastSequence`) and merges the result back by protocol's one rule
/// ([`openwop_protocol::run::projection::merge`]): a terminal phase set by the operator
/// (cancel, timeout) stays terminal and `cancelling` holds until a terminal event.
pub fn fold(status: &RunStatus, events: &[Value]) -> Option<RunStatus> {
    let mut p = status.projection();
    let mut applied = false;
    for e in events {
        applied |= p.apply(e);
    }
    if !applied {
        return None;
    }
    let mut next = status.clone();
    next.merge_projection(&p);
    Some(next)
}

/// A run whose log the folded `events` end (the last of them is its terminal event): that
/// event recorded as the log's ending (`status.terminalEvent`) and, unless the operator ended
/// the run already, the ending itself — completion time, `Succeeded` and the Event to record
/// after the write (returned) — by the reconciler's rule ([`end_by_stream`]). Written with
/// the terminal event, the reconcile this write triggers has nothing left to write: one status
/// write per run less than recording it there.
pub fn settle(
    status: &mut RunStatus,
    events: &[Value],
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Note> {
    let last = events.last().filter(|e| is_terminal(e))?;
    if status.terminal_event.is_none() {
        status.terminal_event = last
            .get("eventId")
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
    end_by_stream(status, generation, now)
}

/// The name of the Run whose uid is `run_id` in `namespace`: from the Run controller's cache
/// when it has it, else from a LIST of the namespace (authoritative). `None`: no such Run.
pub async fn find_run_name(
    client: &Client,
    cfg: &OperatorConfig,
    runs: Option<&Store<Run>>,
    namespace: &str,
    run_id: &str,
) -> Result<Option<String>, EventError> {
    if let Some(store) = runs
        && let Some(r) = store.find(|r| {
            r.namespace().as_deref() == Some(namespace) && r.uid().as_deref() == Some(run_id)
        })
    {
        return Ok(Some(r.name_any()));
    }
    let api: Api<Run> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&ListParams::default().labels(&cfg.instance_selector()))
        .await?;
    Ok(route(&list.items, namespace, run_id).map(|r| r.name_any()))
}

/// A Run's status as read for one update.
#[derive(Debug, Clone)]
pub struct Current {
    /// The Run's name (events name its uid).
    pub name: String,
    pub status: RunStatus,
    /// The write precondition: a write against another version is a [`Stored::Conflict`].
    pub resource_version: Option<String>,
    /// The Run's `metadata.generation` (the ending's condition observes it).
    pub generation: Option<i64>,
}

/// Outcome of one status write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    Written,
    /// The Run changed since it was read: read again and fold again.
    Conflict,
    /// The Run is gone (or is another run now): its events are dropped.
    Gone,
}

/// Where run statuses are read and written: the apiserver ([`KubeStatuses`]); a map in tests.
pub trait RunStatuses {
    /// The status of the Run whose uid is `run_id` in `namespace`, `None` when no Run this
    /// operator handles has it (deleted, re-created under a new uid, another instance's).
    fn read(
        &self,
        namespace: &str,
        run_id: &str,
    ) -> impl Future<Output = Result<Option<Current>, EventError>> + Send;
    /// Writes `next` over `current` unless the Run changed meanwhile.
    fn write(
        &self,
        namespace: &str,
        run_id: &str,
        current: &Current,
        next: &RunStatus,
    ) -> impl Future<Output = Result<Stored, EventError>> + Send;
    /// Records the Kubernetes Event of the ending a write of `current`'s run just stored
    /// (best effort, once: only after that write succeeded).
    fn announce(
        &self,
        namespace: &str,
        run_id: &str,
        current: &Current,
        note: Note,
    ) -> impl Future<Output = ()> + Send;
    /// The clock of the endings recorded.
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// Run statuses on the apiserver: found by uid (the Run controller's cache, else a LIST),
/// written with server-side apply under the reconciler's field manager and a
/// resourceVersion precondition, so neither writer overwrites the other with stale data.
pub struct KubeStatuses<'a> {
    pub client: &'a Client,
    pub cfg: &'a OperatorConfig,
    pub runs: Option<&'a Store<Run>>,
    /// Runs (uid) whose last write from a cached copy met a newer version: read from the API
    /// server until a write succeeds. Otherwise the cached copy is read (its resourceVersion
    /// is the write's precondition, so a stale one costs a 409, never a lost update); a GET
    /// per delivered batch was two requests per run at 200 Runs at once.
    pub stale: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Records the Kubernetes Event of a run's ending the consumer writes.
    events: EventSink,
    /// Runs no Run has (found in neither the cache nor a LIST): their later events are dropped
    /// without another LIST (a deleted Run's unread events came in several batches, each a
    /// LIST of its namespace). Exact: a uid is never reused.
    gone: std::sync::Mutex<GoneRuns>,
}

/// The runIds last found without a Run, at most [`GoneRuns::CAPACITY`] (the oldest forgotten
/// first).
#[derive(Default)]
pub struct GoneRuns {
    order: std::collections::VecDeque<String>,
    set: std::collections::HashSet<String>,
}

impl GoneRuns {
    const CAPACITY: usize = 4096;

    pub fn contains(&self, run_id: &str) -> bool {
        self.set.contains(run_id)
    }

    pub fn insert(&mut self, run_id: &str) {
        if !self.set.insert(run_id.to_owned()) {
            return;
        }
        self.order.push_back(run_id.to_owned());
        if self.order.len() > Self::CAPACITY
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
    }
}

impl<'a> KubeStatuses<'a> {
    pub fn new(
        client: &'a Client,
        cfg: &'a OperatorConfig,
        runs: Option<&'a Store<Run>>,
        events: EventSink,
    ) -> Self {
        Self {
            client,
            cfg,
            runs,
            stale: Default::default(),
            events,
            gone: Default::default(),
        }
    }

    fn stale(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.stale.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn gone(&self) -> std::sync::MutexGuard<'_, GoneRuns> {
        self.gone.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached copy of the Run `run_id`, unless its last write from the cache conflicted.
    fn cached(&self, namespace: &str, run_id: &str) -> Option<std::sync::Arc<Run>> {
        if self.stale().contains(run_id) {
            return None;
        }
        self.runs?.find(|r| {
            r.namespace().as_deref() == Some(namespace) && r.uid().as_deref() == Some(run_id)
        })
    }
}

impl RunStatuses for KubeStatuses<'_> {
    async fn read(&self, namespace: &str, run_id: &str) -> Result<Option<Current>, EventError> {
        if let Some(run) = self.cached(namespace, run_id)
            && self.cfg.handles(run.labels())
        {
            return Ok(Some(Current {
                name: run.name_any(),
                resource_version: run.resource_version(),
                generation: run.metadata.generation,
                status: run.status.clone().unwrap_or_default(),
            }));
        }
        if self.gone().contains(run_id) {
            return Ok(None);
        }
        let Some(name) = find_run_name(self.client, self.cfg, self.runs, namespace, run_id).await?
        else {
            tracing::debug!(
                namespace,
                run_id,
                "events of a run that no Run has (deleted?); dropped"
            );
            self.gone().insert(run_id);
            return Ok(None);
        };
        let api: Api<Run> = Api::namespaced(self.client.clone(), namespace);
        let Some(run) = api.get_opt(&name).await? else {
            tracing::debug!(namespace, run = %name, run_id, "the Run of these events is gone; dropped");
            self.gone().insert(run_id);
            return Ok(None);
        };
        // Same name, another run (deleted and re-created meanwhile).
        if run.uid().as_deref() != Some(run_id) {
            tracing::debug!(namespace, run = %name, run_id, "the Run was re-created under the same name; events of the old run dropped");
            self.gone().insert(run_id);
            return Ok(None);
        }
        // Another operator instance (`instanceId`) owns this Run's status.
        if !self.cfg.handles(run.labels()) {
            return Ok(None);
        }
        Ok(Some(Current {
            name,
            resource_version: run.resource_version(),
            generation: run.metadata.generation,
            status: run.status.unwrap_or_default(),
        }))
    }

    async fn write(
        &self,
        namespace: &str,
        run_id: &str,
        current: &Current,
        next: &RunStatus,
    ) -> Result<Stored, EventError> {
        let api: Api<Run> = Api::namespaced(self.client.clone(), namespace);
        // Precondition: a concurrent write by the reconciler makes this a 409, and we fold
        // again from the fresh status instead of overwriting it (a Run re-created between the
        // read and the write has another resourceVersion too).
        match write_run_status(&api, &current.name, current.resource_version.clone(), next).await {
            Ok(_) => {
                self.stale().remove(run_id);
                Ok(Stored::Written)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                self.stale().insert(run_id.to_owned());
                Ok(Stored::Conflict)
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.stale().remove(run_id);
                Ok(Stored::Gone)
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn announce(&self, namespace: &str, run_id: &str, current: &Current, note: Note) {
        let regarding = ObjectReference {
            api_version: Some(Run::api_version(&()).into_owned()),
            kind: Some(Run::kind(&()).into_owned()),
            namespace: Some(namespace.to_owned()),
            name: Some(current.name.clone()),
            uid: Some(run_id.to_owned()),
            ..Default::default()
        };
        self.events.record(regarding, note).await;
    }
}

/// A run's whole log as stored: read back when the delivered events have a hole.
pub trait RunLog {
    fn read_run(
        &self,
        namespace: &str,
        run_id: &str,
    ) -> impl Future<Output = Result<Vec<Value>, EventError>> + Send;
}

/// Reads a run's events subject from the stream with an ordered consumer.
pub struct StreamLog<'a>(pub &'a jetstream::stream::Stream);

/// Longest wait for the next message while reading a run's log back.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(10);

impl RunLog for StreamLog<'_> {
    async fn read_run(&self, namespace: &str, run_id: &str) -> Result<Vec<Value>, EventError> {
        let subject = events_subject(namespace, run_id);
        let messages =
            openwop_nats::stream::read_subject(self.0, &subject, READ_BACK_TIMEOUT).await?;
        // Malformed messages were refused when delivered; here they are simply not events.
        Ok(messages
            .iter()
            .filter_map(|m| decode_message(m.subject.as_str(), &m.payload).ok())
            .map(|(_, v)| v)
            .collect())
    }
}

/// What applying a run's delivered events did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The status now includes them (and any hole before them, read back from the log).
    Changed,
    /// Nothing new (replays), or no Run for them: acknowledge.
    Unchanged,
}

/// Applies a run's delivered events to its status, strictly in `sequence` order
/// ([`openwop_protocol::run::sequence`]): duplicates change nothing; when the events after
/// the last applied sequence have a hole (an earlier batch was NAK'd and will come back
/// later), the run's log is read back from the stream and folded in order instead, so no
/// transition is ever skipped. A hole the stored log cannot fill either is an error (the
/// events are redelivered and tried again later), never skipped.
pub async fn apply_events<S: RunStatuses, L: RunLog>(
    statuses: &S,
    log: &L,
    namespace: &str,
    run_id: &str,
    events: &[Value],
) -> Result<Applied, EventError> {
    let mut read_back: Option<Vec<Value>> = None;
    for _ in 0..MAX_CONFLICT_RETRIES {
        let Some(current) = statuses.read(namespace, run_id).await? else {
            return Ok(Applied::Unchanged);
        };
        let last = current.status.last_sequence;
        let with_seq = |es: &[Value]| -> Vec<(u64, Value)> {
            es.iter()
                .filter_map(|e| Some((e.get("sequence")?.as_u64()?, e.clone())))
                .collect()
        };
        let mut ordered = sequence::order(last, with_seq(events));
        if let Some(hole) = ordered.missing.clone() {
            if read_back.is_none() {
                tracing::info!(
                    namespace,
                    run_id,
                    missing_from = hole.start,
                    missing_to = hole.end,
                    "run events arrived with a hole; reading the run's log back from the stream"
                );
                read_back = Some(log.read_run(namespace, run_id).await?);
            }
            let all = read_back.as_deref().unwrap_or_default();
            ordered = sequence::order(last, with_seq(events).into_iter().chain(with_seq(all)));
            if let Some(hole) = ordered.missing {
                return Err(EventError::Gap {
                    namespace: namespace.to_owned(),
                    run_id: run_id.to_owned(),
                    from: hole.start,
                    to: hole.end,
                });
            }
        }
        let Some(mut next) = fold(&current.status, &ordered.ready) else {
            return Ok(Applied::Unchanged);
        };
        let ending = settle(
            &mut next,
            &ordered.ready,
            current.generation,
            statuses.now(),
        );
        match statuses.write(namespace, run_id, &current, &next).await? {
            Stored::Written => {
                if let Some(note) = ending {
                    statuses.announce(namespace, run_id, &current, note).await;
                }
                return Ok(Applied::Changed);
            }
            Stored::Gone => return Ok(Applied::Unchanged),
            Stored::Conflict => continue,
        }
    }
    Err(EventError::Nats(format!(
        "Run of run {namespace}/{run_id}: status kept changing during {MAX_CONFLICT_RETRIES} attempts; events will be redelivered"
    )))
}

/// Filter subject of the consumer: every namespace, or the one the operator watches.
pub fn filter_subject(cfg: &OperatorConfig) -> String {
    events_filter((!cfg.watch_namespace.is_empty()).then_some(cfg.watch_namespace.as_str()))
}

/// Runs the consumer until the process ends; reconnects with backoff on any NATS failure.
/// Returns immediately when no NATS URL is configured. `runs`: the Run controller's cache
/// (events are routed by uid); `slot` receives the JetStream context at each connect.
pub async fn run_consumer(
    client: Client,
    cfg: Arc<OperatorConfig>,
    runs: Option<Store<Run>>,
    slot: JetStreamSlot,
    events: EventSink,
) {
    let Some(url) = cfg.events.nats_url.clone() else {
        tracing::info!("events.natsUrl not set: Run status follows pod state only");
        return;
    };
    let mut backoff = Duration::from_millis(500);
    loop {
        match consume(&client, &cfg, &url, runs.as_ref(), &slot, &events).await {
            Ok(()) => backoff = Duration::from_millis(500),
            Err(e) => {
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "run event consumer failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

async fn consume(
    client: &Client,
    cfg: &OperatorConfig,
    url: &str,
    runs: Option<&Store<Run>>,
    slot: &JetStreamSlot,
    events: &EventSink,
) -> Result<(), EventError> {
    // Read at each (re)connect, so rotated credentials are picked up.
    let auth = cfg.nats_credentials.load()?;
    let nats = openwop_nats::connect_options(
        concat!("openwop-operator/", env!("CARGO_PKG_VERSION")),
        &auth,
    )?
    .connection_timeout(Duration::from_secs(5))
    .connect(url)
    .await
    .map_err(|e| {
        EventError::Nats(format!(
            "cannot connect to {url} (credentials: {}): {e}",
            auth.kind()
        ))
    })?;
    let js = jetstream::new(nats);
    let spec = cfg.stream_spec();
    let stream = openwop_nats::stream::ensure_stream(&js, &spec).await?;
    slot.set(js.clone());
    // Before reading: events of Runs deleted while no leader read them are purged instead of
    // each looked up and dropped.
    crate::controller::departed::sweep(client, cfg, &js).await;
    let stream_name = &spec.name;
    // Each operator instance needs its own durable consumer: a shared one would split the
    // messages between instances, and one would drop (ack) the other's events.
    let durable = if cfg.instance_id.is_empty() {
        cfg.events.consumer.clone()
    } else {
        format!(
            "{}-{}",
            cfg.events.consumer,
            cfg.instance_id.replace('.', "_")
        )
    };
    let consumer = events_consumer(&stream, &durable, filter_subject(cfg)).await?;
    tracing::info!(stream = %stream_name, consumer = %durable, max_age_seconds = spec.max_age.map_or(0, |a| a.as_secs()), "reading run events");
    let flush = Duration::from_millis(cfg.events.flush_interval_ms);
    let statuses = KubeStatuses::new(client, cfg, runs, events.clone());
    consume_loop(&consumer, &statuses, &StreamLog(&stream), flush, NAK_DELAY).await
}

/// The durable pull consumer `durable` of `stream` on `filter`: from the start of the
/// stream, explicit acks (a run's events are acknowledged once its status includes them).
pub async fn events_consumer(
    stream: &jetstream::stream::Stream,
    durable: &str,
    filter: String,
) -> Result<jetstream::consumer::Consumer<pull::Config>, EventError> {
    stream
        .get_or_create_consumer(
            durable,
            pull::Config {
                durable_name: Some(durable.to_owned()),
                filter_subject: filter,
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                deliver_policy: jetstream::consumer::DeliverPolicy::All,
                ack_wait: Duration::from_secs(30),
                max_ack_pending: 10_000,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| EventError::Nats(format!("consumer {durable}: {e}")))
}

/// Redelivery delay of the events of a run whose status could not be written.
pub const NAK_DELAY: Duration = Duration::from_secs(5);

/// Fetches batches from `consumer` until an error, applies each run's events
/// ([`apply_events`]) and acknowledges them; a run whose events could not be applied has its
/// messages NAK'd (redelivered after `nak_delay`).
pub async fn consume_loop<S: RunStatuses, L: RunLog>(
    consumer: &jetstream::consumer::Consumer<pull::Config>,
    statuses: &S,
    log: &L,
    flush: Duration,
    nak_delay: Duration,
) -> Result<(), EventError> {
    loop {
        let mut batch = consumer
            .fetch()
            .max_messages(256)
            .expires(flush.max(Duration::from_millis(100)))
            .messages()
            .await
            .map_err(|e| EventError::Nats(format!("fetch: {e}")))?;
        let mut messages = Vec::new();
        while let Some(m) = batch.next().await {
            messages.push(m.map_err(|e| EventError::Nats(format!("fetch: {e}")))?);
        }
        if messages.is_empty() {
            continue;
        }
        // Group per run (order within a run is restored by sequence when applying).
        let mut groups: BTreeMap<(String, String), (Vec<Value>, Vec<usize>)> = BTreeMap::new();
        let mut refused = 0usize;
        for (i, m) in messages.iter().enumerate() {
            match decode_message(m.subject.as_str(), &m.payload) {
                Ok((s, ev)) => {
                    let g = groups.entry((s.namespace, s.run_id)).or_default();
                    g.0.push(ev);
                    g.1.push(i);
                }
                Err(e) => {
                    refused += 1;
                    if refused <= MAX_LOGGED_REFUSALS {
                        tracing::warn!(error = %e, "skipping a malformed run event");
                    }
                    ack(&messages[i], AckKind::Term).await;
                }
            }
        }
        if refused > MAX_LOGGED_REFUSALS {
            tracing::warn!(
                more = refused - MAX_LOGGED_REFUSALS,
                "skipping more malformed run events in this batch"
            );
        }
        for ((ns, run_id), (events, idx)) in groups {
            let kind = match apply_events(statuses, log, &ns, &run_id, &events).await {
                Ok(applied) => {
                    if applied == Applied::Changed {
                        tracing::debug!(namespace = %ns, run_id = %run_id, events = events.len(), "run status updated from events");
                    }
                    AckKind::Ack
                }
                Err(e) => {
                    tracing::warn!(namespace = %ns, run_id = %run_id, error = %e, "could not apply run events; redelivering");
                    AckKind::Nak(Some(nak_delay))
                }
            };
            for i in idx {
                ack(&messages[i], kind).await;
            }
        }
    }
}

async fn ack(m: &jetstream::Message, kind: AckKind) {
    if let Err(e) = m.ack_with(kind).await {
        tracing::warn!(error = %e, subject = %m.subject, "could not acknowledge a run event");
    }
}

#[cfg(test)]
mod tests;
