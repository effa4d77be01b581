//! The dispatcher: every replica runs it; it follows the subscriptions bucket and, per
//! subscription, pulls the run events of the subscription's tenant from one durable JetStream
//! consumer and delivers the ones it asked for.
//!
//! Why this shape:
//! * **Nothing is lost.** The consumer is durable and created at registration
//!   (`DeliverPolicy::New`), so every event from then on waits in JetStream until it is
//!   acknowledged — after it was delivered, skipped by an open circuit, not wanted, or failed
//!   for good. An operator restart or pod deletion mid-delivery leaves the message unacked;
//!   JetStream redelivers it after the attempt timeout plus [`ACK_MARGIN`] to whichever
//!   replica pulls next.
//! * **In order, per subscription.** `max_ack_pending = 1`: the next event is not handed out
//!   before the current one is settled, whichever replica holds it, so a receiver sees a
//!   run's events in sequence order (a retry holds the ones after it).
//! * **Retries are durable.** A failed attempt is NAK'd with the backoff as its delay;
//!   JetStream counts the deliveries of the message, and that count is the attempt number, so
//!   a restart neither resets nor repeats the schedule.
//! * **A slow receiver never slows runs.** Workers publish to the stream whatever the
//!   consumers do; a slow or dead receiver holds back only its own subscription.
//! * **Tenant isolation.** A subscription's consumer filters on its namespace's subjects
//!   (`openwop.events.<tenant>.>`): another tenant's events never reach it.
//!
//! * **One breaker per subscription, shared by the replicas.** Its state lives in the
//!   store's breaker bucket and is updated compare-and-set after each delivery, so a receiver
//!   that failed on one replica is skipped on the others too. After `webhooks.failureLimit`
//!   failed deliveries within `failureWindowHours` the subscription is marked failed: every
//!   replica stops its delivery task and the consumer is deleted (nothing piles up for it).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use async_nats::jetstream::{self, AckKind};
use futures::StreamExt;
use kube::ResourceExt;
use kube::runtime::reflector::Store as RunStore;
use openwop_crds::Run;
use openwop_crds::names::ANNOTATION_TAGS;
use openwop_protocol::run::subjects::{events_filter, parse_events_subject};
use openwop_protocol::webhook::{
    self, Admission, AfterFailure, Attempt, DeliveryBody, DeliveryPolicy, Step,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::task::JoinHandle;

use super::deliver::{Deliverer, Outgoing};
use super::store::{Store, Subscription, SubscriptionStatus};
use crate::config::OperatorConfig;
use crate::events::MAX_EVENT_BYTES;
use crate::jetstream::LazyJetStream;

/// How much longer than one attempt's timeout a delivery may stay unsettled before
/// JetStream hands it out again (a replica that died mid-attempt delays the subscription by
/// the attempt timeout plus this).
const ACK_MARGIN: Duration = Duration::from_secs(10);
/// Pause before reconnecting after the bucket, the stream or NATS failed.
const RECONNECT: Duration = Duration::from_secs(5);

/// The durable consumer of a subscription.
pub fn consumer_name(webhook_id: &str) -> String {
    format!("openwop-webhook-{webhook_id}")
}

fn consumer_config(cfg: &OperatorConfig, sub: &Subscription) -> pull::Config {
    pull::Config {
        durable_name: Some(consumer_name(&sub.webhook_id)),
        description: Some(format!(
            "webhook {} of tenant {}",
            sub.webhook_id, sub.tenant
        )),
        filter_subject: events_filter(Some(&sub.tenant)),
        deliver_policy: DeliverPolicy::New,
        ack_policy: AckPolicy::Explicit,
        ack_wait: Duration::from_secs(cfg.webhooks.timeout_seconds) + ACK_MARGIN,
        max_ack_pending: 1,
        ..Default::default()
    }
}

/// The run events stream.
async fn events_stream(
    js: &jetstream::Context,
    cfg: &OperatorConfig,
) -> Result<jetstream::stream::Stream, String> {
    js.get_stream(&cfg.worker.events_stream)
        .await
        .map_err(|e| format!("stream {}: {e}", cfg.worker.events_stream))
}

/// The subscription's consumer, created when missing.
async fn consumer(
    js: &jetstream::Context,
    cfg: &OperatorConfig,
    sub: &Subscription,
) -> Result<jetstream::consumer::PullConsumer, String> {
    events_stream(js, cfg)
        .await?
        .get_or_create_consumer(&consumer_name(&sub.webhook_id), consumer_config(cfg, sub))
        .await
        .map_err(|e| format!("consumer for {}: {e}", sub.webhook_id))
}

/// Creates the subscription's consumer (registration does this before storing it, so events
/// published from then on are kept even before a dispatcher picks the subscription up).
pub async fn create_consumer(
    js: &jetstream::Context,
    cfg: &OperatorConfig,
    sub: &Subscription,
) -> Result<(), String> {
    consumer(js, cfg, sub).await.map(|_| ())
}

/// Removes the subscription's consumer (and whatever it still held).
pub async fn delete_consumer(
    js: &jetstream::Context,
    cfg: &OperatorConfig,
    webhook_id: &str,
) -> Result<(), String> {
    let stream = events_stream(js, cfg).await?;
    match stream.delete_consumer(&consumer_name(webhook_id)).await {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().contains("not found") => Ok(()),
        Err(e) => Err(format!("consumer for {webhook_id}: {e}")),
    }
}

/// What every subscription's loop shares.
struct Shared {
    cfg: Arc<OperatorConfig>,
    js: jetstream::Context,
    signing_key: Vec<u8>,
    deliverer: Deliverer,
    policy: DeliveryPolicy,
    runs: RunStore<Run>,
    store: Store,
}

/// Runs the dispatcher for the life of the process (never returns; idle when webhooks are
/// off). `nats`: the replica's JetStream connection (the REST API's); `runs`: its Run cache.
pub async fn run(cfg: Arc<OperatorConfig>, nats: LazyJetStream, runs: RunStore<Run>) {
    if !cfg.webhooks_active() {
        return std::future::pending().await;
    }
    loop {
        let result = match nats.get().await {
            Ok(js) => follow(cfg.clone(), js, runs.clone()).await,
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "webhook dispatcher stopped; restarting");
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

/// Follows the subscriptions bucket on `js`: a delivery task per subscription, stopped when
/// it is deleted. Returns only on failure. `runs` resolves a run's tags (tag filters).
pub async fn follow(
    cfg: Arc<OperatorConfig>,
    js: jetstream::Context,
    runs: RunStore<Run>,
) -> Result<(), String> {
    let signing_key = cfg.webhooks.signing_key().map_err(|e| e.to_string())?;
    let deliverer = Deliverer::new(&cfg.webhooks).map_err(|e| e.to_string())?;
    let store = Store::open(&js, &cfg.webhooks.bucket)
        .await
        .map_err(|e| e.to_string())?;
    let shared = Arc::new(Shared {
        policy: cfg.webhooks.delivery_policy(),
        cfg,
        js,
        signing_key,
        deliverer,
        runs,
        store: store.clone(),
    });
    // Dropped (on return, or when this future is cancelled): every delivery task stops.
    let mut tasks = Tasks::default();
    let mut changes = Box::pin(store.watch().await.map_err(|e| e.to_string())?);
    while let Some(change) = changes.next().await {
        match change {
            Ok((key, Some(sub))) if sub.status == SubscriptionStatus::Failed => {
                if let Some(t) = tasks.0.remove(&key) {
                    t.abort();
                }
                // Every replica sees the record; deleting a deleted consumer is a no-op.
                if let Err(e) = delete_consumer(&shared.js, &shared.cfg, &sub.webhook_id).await {
                    tracing::warn!(webhook_id = %sub.webhook_id, error = %e, "failed webhook subscription: consumer not deleted");
                }
                tracing::info!(
                    webhook_id = %sub.webhook_id,
                    tenant = %sub.tenant,
                    secret_fingerprint = %sub.secret_fingerprint,
                    "webhook subscription failed: not delivering (register it again to resume)"
                );
            }
            Ok((key, Some(sub))) => {
                if tasks.0.get(&key).is_none_or(JoinHandle::is_finished) {
                    tracing::info!(
                        webhook_id = %sub.webhook_id,
                        tenant = %sub.tenant,
                        secret_fingerprint = %sub.secret_fingerprint,
                        "webhook subscription: delivering"
                    );
                    let task = tokio::spawn(subscription_loop(shared.clone(), sub));
                    if let Some(old) = tasks.0.insert(key, task) {
                        old.abort();
                    }
                }
            }
            Ok((key, None)) => {
                if let Some(t) = tasks.0.remove(&key) {
                    t.abort();
                    tracing::info!(subscription = %key, "webhook subscription deleted: delivery stopped");
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("the subscriptions watch ended".into())
}

/// The delivery task of each subscription (by bucket key); aborted together when dropped.
#[derive(Default)]
struct Tasks(HashMap<String, JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        self.0.drain().for_each(|(_, t)| t.abort());
    }
}

/// Delivers one subscription's events until aborted.
async fn subscription_loop(shared: Arc<Shared>, sub: Subscription) {
    let secret = webhook::derive_secret(&shared.signing_key, &sub.tenant, &sub.webhook_id);
    loop {
        if let Err(e) = consume(&shared, &sub, &secret).await {
            tracing::warn!(
                webhook_id = %sub.webhook_id,
                error = %e,
                "webhook consumer failed; retrying"
            );
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

async fn consume(shared: &Shared, sub: &Subscription, secret: &str) -> Result<(), String> {
    let consumer = consumer(&shared.js, &shared.cfg, sub).await?;
    let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
    while let Some(msg) = messages.next().await {
        let msg = msg.map_err(|e| e.to_string())?;
        let settle = handle(shared, sub, secret, &msg).await;
        msg.ack_with(settle).await.map_err(|e| e.to_string())?;
    }
    Err("the consumer's message stream ended".into())
}

/// The fields of a RunEventDoc the dispatcher reads (the body carries the whole event).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EventHead {
    event_id: String,
    run_id: String,
    #[serde(rename = "type")]
    type_: String,
}

/// Delivers (or skips) one message; returns how to settle it.
async fn handle(
    shared: &Shared,
    sub: &Subscription,
    secret: &str,
    msg: &jetstream::Message,
) -> AckKind {
    let attempt = msg
        .info()
        .map(|i| u32::try_from(i.delivered).unwrap_or(1).max(1))
        .unwrap_or(1);
    let Ok(subject) = parse_events_subject(&msg.subject) else {
        return AckKind::Term;
    };
    if msg.payload.len() > MAX_EVENT_BYTES {
        return AckKind::Term;
    }
    let (Ok(head), Ok(raw)) = (
        serde_json::from_slice::<EventHead>(&msg.payload),
        serde_json::from_slice::<&RawValue>(&msg.payload),
    ) else {
        return AckKind::Term;
    };
    // An event cannot speak for another run (or another tenant).
    if head.run_id != subject.run_id || subject.namespace != sub.tenant {
        return AckKind::Term;
    }
    let run_tags = if sub.tags.is_empty() {
        Vec::new()
    } else {
        run_tags(&shared.runs, &head.run_id)
    };
    if !webhook::wants(&sub.events, &sub.tags, &head.type_, &run_tags) {
        return AckKind::Ack;
    }
    let delivery_id = webhook::delivery_id(&sub.webhook_id, &head.event_id);
    // The breaker bucket unreadable: deliver (the breaker protects the receiver; losing an
    // event would be worse).
    let breaker = shared.store.breaker(sub).await.unwrap_or_else(|e| {
        tracing::warn!(webhook_id = %sub.webhook_id, error = %e, "webhook breaker unreadable; delivering");
        Default::default()
    });
    match breaker.admit(unix_now_ms()) {
        Admission::Skip { remaining } => {
            tracing::info!(
                webhook_id = %sub.webhook_id,
                %delivery_id,
                retry_in_seconds = remaining.as_secs(),
                "webhook circuit open: delivery skipped"
            );
            return AckKind::Ack;
        }
        Admission::Retired => {
            // Another replica retired it and this one has not seen the record yet.
            retire(shared, sub).await;
            return AckKind::Ack;
        }
        Admission::Deliver | Admission::Probe => {}
    }
    let body = DeliveryBody {
        run_id: &head.run_id,
        workspace_id: &sub.tenant,
        event: raw,
    }
    .to_bytes();
    let outcome = shared
        .deliverer
        .attempt(Outgoing {
            url: &sub.url,
            webhook_id: &sub.webhook_id,
            delivery_id: &delivery_id,
            event_type: &head.type_,
            secret,
            body,
            timestamp: unix_now(),
        })
        .await;
    match shared.policy.step(attempt, &outcome) {
        Step::Done => {
            // Most deliveries find the circuit closed and leave it so: no second read of the
            // record. (Deliveries of one subscription are serialized, `max_ack_pending = 1`,
            // so the breaker read above is still the stored one.)
            let mut closed = breaker.clone();
            closed.delivered();
            if closed != breaker
                && let Err(e) = shared.store.update_breaker(sub, |b| b.delivered()).await
            {
                tracing::warn!(webhook_id = %sub.webhook_id, error = %e, "webhook breaker not updated");
            }
            tracing::debug!(webhook_id = %sub.webhook_id, %delivery_id, attempt, "webhook delivered");
            AckKind::Ack
        }
        Step::RetryAfter(wait) => {
            tracing::info!(
                webhook_id = %sub.webhook_id,
                %delivery_id,
                attempt,
                reason = %reason(&outcome),
                retry_in_ms = wait.as_millis() as u64,
                "webhook attempt failed; retrying"
            );
            AckKind::Nak(Some(wait))
        }
        Step::Failed => {
            let now = unix_now_ms();
            let after = shared
                .store
                .update_breaker(sub, |b| b.failed(now, &shared.policy))
                .await;
            tracing::warn!(
                webhook_id = %sub.webhook_id,
                secret_fingerprint = %sub.secret_fingerprint,
                %delivery_id,
                attempt,
                reason = %reason(&outcome),
                circuit_open = matches!(after, Ok(AfterFailure::Open)),
                "webhook delivery failed"
            );
            match after {
                Ok(AfterFailure::Retired) => retire(shared, sub).await,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(webhook_id = %sub.webhook_id, error = %e, "webhook breaker not updated")
                }
            }
            AckKind::Term
        }
    }
}

/// Marks the subscription failed; every replica's dispatcher then stops it (see [`follow`]).
async fn retire(shared: &Shared, sub: &Subscription) {
    let at = k8s_openapi::jiff::Timestamp::now().to_string();
    match shared
        .store
        .mark_failed(&sub.tenant, &sub.webhook_id, &at)
        .await
    {
        Ok(true) => tracing::warn!(
            webhook_id = %sub.webhook_id,
            tenant = %sub.tenant,
            secret_fingerprint = %sub.secret_fingerprint,
            failure_limit = shared.policy.failure_limit,
            failure_window_hours = shared.policy.failure_window.as_secs() / 3600,
            "webhook subscription failed: too many failed deliveries; register it again to resume"
        ),
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(webhook_id = %sub.webhook_id, error = %e, "webhook subscription not marked failed")
        }
    }
}

fn reason(a: &Attempt) -> &str {
    match a {
        Attempt::Delivered => "delivered",
        Attempt::Transient(r) | Attempt::Refused(r) => r,
    }
}

/// The `tags` of the run with this runId (the Run's uid), from the REST API's cache.
fn run_tags(runs: &RunStore<Run>, run_id: &str) -> Vec<String> {
    runs.state()
        .iter()
        .find(|r| r.uid().as_deref() == Some(run_id))
        .and_then(|r| r.annotations().get(ANNOTATION_TAGS).cloned())
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn unix_now() -> u64 {
    unix_now_ms() / 1000
}

fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
