//! Live Run status from the run event stream.
//!
//! Workers publish each `RunEventDoc` on JetStream stream `worker.eventsStream`, subject
//! `openwop.events.<namespace>.<run>`. The leader reads the stream with one durable pull
//! consumer (`events.consumer`), folds each run's new events into its status with
//! [`Projection`], and writes the whole (small) status back with server-side apply under the
//! reconciler's field manager and a resourceVersion precondition, so neither writer can
//! overwrite the other with stale data.
//!
//! Idempotent and monotonic: an event at or below the Run's `status.lastSequence` changes
//! nothing, so redeliveries after a restart (the durable consumer resumes from its ack floor)
//! or after a failover never move a status backwards. A terminal phase is never revived.
//! Malformed subjects or payloads are logged and acknowledged as terminated (never retried,
//! never fatal).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::pull, stream};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use openwop_crds::{Run, RunPhase, RunStatus};
use serde_json::{Value, json};

use crate::config::OperatorConfig;
use crate::pod::MANAGER;
use crate::projection::Projection;

/// Prefix of run event subjects.
pub const SUBJECT_PREFIX: &str = "openwop.events.";
/// Subjects of the stream when the operator has to create it (same as the worker's).
pub const STREAM_SUBJECTS: [&str; 2] = ["openwop.events.>", "openwop.reasoning.>"];
/// Largest event accepted (a RunEventDoc is small; anything bigger is not one).
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// Conflicting writes retried before the batch is redelivered later.
const MAX_CONFLICT_RETRIES: u32 = 5;

/// Why an event message was skipped or a write failed.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("subject {0:?} is not openwop.events.<namespace>.<run>")]
    Subject(String),
    #[error("event on {subject} is not a RunEventDoc: {reason}")]
    Payload { subject: String, reason: String },
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("NATS: {0}")]
    Nats(String),
    #[error("NATS credentials: {0}")]
    Credentials(#[from] openwop_nats::AuthError),
}

/// `(namespace, run)` of a subject `openwop.events.<namespace>.<run>`. A namespace is a DNS
/// label (no dots); a Run name may contain dots, so the rest of the subject is the name.
pub fn parse_subject(subject: &str) -> Result<(String, String), EventError> {
    let rest = subject
        .strip_prefix(SUBJECT_PREFIX)
        .ok_or_else(|| EventError::Subject(subject.into()))?;
    match rest.split_once('.') {
        Some((ns, run)) if !ns.is_empty() && !run.is_empty() => Ok((ns.into(), run.into())),
        _ => Err(EventError::Subject(subject.into())),
    }
}

/// Decodes one message: a JSON object with a string `type` and an unsigned `sequence`.
pub fn decode_event(subject: &str, payload: &[u8]) -> Result<Value, EventError> {
    let bad = |reason: String| EventError::Payload {
        subject: subject.into(),
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
    Ok(v)
}

/// The Run status after `events`, or `None` when none of them is new.
///
/// Starts from the stored status (so the fold resumes at `status.lastSequence`), applies the
/// events in order, and keeps a terminal phase set by the operator (cancel, timeout) terminal and `cancelling`
/// until a terminal event.
pub fn fold(status: &RunStatus, events: &[Value]) -> Option<RunStatus> {
    let mut p = Projection {
        phase: status.phase,
        current_node: status.current_node.clone(),
        events: status.events.unwrap_or(0),
        last_sequence: status.last_sequence,
        pending_interrupt: status.pending_interrupt.clone(),
        error: status.error.clone(),
    };
    let mut applied = false;
    for e in events {
        applied |= p.apply(e);
    }
    if !applied {
        return None;
    }
    let mut next = status.clone();
    let was_terminal = status.phase.is_some_and(|ph| ph.is_terminal());
    // A cancelling run stays cancelling until the stream says it ended (late events of
    // the stopped worker must not make it look running again).
    let cancelling =
        status.phase == Some(RunPhase::Cancelling) && !p.phase.is_some_and(|ph| ph.is_terminal());
    if !was_terminal && !cancelling {
        next.phase = p.phase;
        next.pending_interrupt = p.pending_interrupt;
        next.error = p.error;
    }
    next.current_node = p.current_node;
    next.events = Some(p.events);
    next.last_sequence = p.last_sequence;
    Some(next)
}

/// Applies a run's new events to its status. Returns whether the status changed. A Run that
/// no longer exists is not an error (its events are simply dropped).
pub async fn apply_to_run(
    client: &Client,
    cfg: &OperatorConfig,
    namespace: &str,
    name: &str,
    events: &[Value],
) -> Result<bool, EventError> {
    let api: Api<Run> = Api::namespaced(client.clone(), namespace);
    for _ in 0..MAX_CONFLICT_RETRIES {
        let Some(run) = api.get_opt(name).await? else {
            tracing::debug!(
                namespace,
                run = name,
                "events for a Run that does not exist"
            );
            return Ok(false);
        };
        // Another operator instance (`instanceId`) owns this Run's status.
        if !cfg.handles(run.labels()) {
            return Ok(false);
        }
        let current = run.status.clone().unwrap_or_default();
        let Some(next) = fold(&current, events) else {
            return Ok(false);
        };
        let patch = json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
            // Precondition: a concurrent write by the reconciler makes this a 409, and we fold
            // again from the fresh status instead of overwriting it.
            "metadata": {"resourceVersion": run.resource_version()},
            "status": next,
        });
        match api
            .patch_status(
                name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
    Err(EventError::Nats(format!(
        "Run {namespace}/{name}: status kept changing during {MAX_CONFLICT_RETRIES} attempts; events will be redelivered"
    )))
}

/// Filter subject of the consumer: every namespace, or the one the operator watches.
pub fn filter_subject(cfg: &OperatorConfig) -> String {
    if cfg.watch_namespace.is_empty() {
        format!("{SUBJECT_PREFIX}>")
    } else {
        format!("{SUBJECT_PREFIX}{}.>", cfg.watch_namespace)
    }
}

/// Runs the consumer until the process ends; reconnects with backoff on any NATS failure.
/// Returns immediately when no NATS URL is configured.
pub async fn run_consumer(client: Client, cfg: Arc<OperatorConfig>) {
    let Some(url) = cfg.events.nats_url.clone() else {
        tracing::info!("events.natsUrl not set: Run status follows pod state only");
        return;
    };
    let mut backoff = Duration::from_millis(500);
    loop {
        match consume(&client, &cfg, &url).await {
            Ok(()) => backoff = Duration::from_millis(500),
            Err(e) => {
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "run event consumer failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

async fn consume(client: &Client, cfg: &OperatorConfig, url: &str) -> Result<(), EventError> {
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
    let stream_name = &cfg.worker.events_stream;
    let stream = js
        .get_or_create_stream(stream::Config {
            name: stream_name.clone(),
            subjects: STREAM_SUBJECTS.iter().map(|s| s.to_string()).collect(),
            duplicate_window: Duration::from_secs(15 * 60),
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|e| EventError::Nats(format!("stream {stream_name}: {e}")))?;
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
    let consumer = stream
        .get_or_create_consumer(
            &durable,
            pull::Config {
                durable_name: Some(durable.clone()),
                filter_subject: filter_subject(cfg),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                deliver_policy: jetstream::consumer::DeliverPolicy::All,
                ack_wait: Duration::from_secs(30),
                max_ack_pending: 10_000,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| EventError::Nats(format!("consumer {durable}: {e}")))?;
    tracing::info!(stream = %stream_name, consumer = %durable, "reading run events");
    let flush = Duration::from_millis(cfg.events.flush_interval_ms);
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
        // Group per run, keeping stream order within each run.
        let mut groups: BTreeMap<(String, String), (Vec<Value>, Vec<usize>)> = BTreeMap::new();
        for (i, m) in messages.iter().enumerate() {
            let subject = m.subject.as_str();
            match parse_subject(subject).and_then(|k| Ok((k, decode_event(subject, &m.payload)?))) {
                Ok((key, ev)) => {
                    let g = groups.entry(key).or_default();
                    g.0.push(ev);
                    g.1.push(i);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "skipping a malformed run event");
                    ack(&messages[i], AckKind::Term).await;
                }
            }
        }
        for ((ns, run), (events, idx)) in groups {
            let kind = match apply_to_run(client, cfg, &ns, &run, &events).await {
                Ok(changed) => {
                    if changed {
                        tracing::debug!(namespace = %ns, run = %run, events = events.len(), "run status updated from events");
                    }
                    AckKind::Ack
                }
                Err(e) => {
                    tracing::warn!(namespace = %ns, run = %run, error = %e, "could not apply run events; redelivering");
                    AckKind::Nak(Some(Duration::from_secs(5)))
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
mod tests {
    use super::*;

    fn ev(seq: u64, ty: &str, payload: Value) -> Value {
        json!({"eventId": format!("e{seq}"), "runId": "r", "type": ty, "sequence": seq,
               "timestamp": "2026-01-01T00:00:00Z", "payload": payload})
    }

    #[test]
    fn subjects_name_namespace_and_run() {
        assert_eq!(
            parse_subject("openwop.events.team-a.r1").unwrap(),
            ("team-a".into(), "r1".into())
        );
        assert_eq!(
            parse_subject("openwop.events.team-a.my.run").unwrap().1,
            "my.run"
        );
        for bad in [
            "openwop.reasoning.a.b",
            "openwop.events.a",
            "openwop.events..b",
        ] {
            assert!(parse_subject(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn malformed_payloads_are_refused_with_the_reason() {
        let s = "openwop.events.a.b";
        let e = decode_event(s, b"not json").unwrap_err().to_string();
        assert!(e.contains("not JSON"), "{e}");
        let e = decode_event(s, br#"{"type":"run.started"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/sequence"), "{e}");
        let e = decode_event(s, br#"[1]"#).unwrap_err().to_string();
        assert!(e.contains("not a JSON object"), "{e}");
        let big = vec![b' '; MAX_EVENT_BYTES + 1];
        assert!(
            decode_event(s, &big)
                .unwrap_err()
                .to_string()
                .contains("limit")
        );
        assert!(decode_event(s, br#"{"type":"run.started","sequence":0}"#).is_ok());
    }

    #[test]
    fn fold_resumes_from_last_sequence_and_never_goes_back() {
        let st = RunStatus {
            phase: Some(RunPhase::Running),
            events: Some(2),
            last_sequence: Some(1),
            attempts: Some(1),
            ..Default::default()
        };
        assert_eq!(
            fold(
                &st,
                &[
                    ev(0, "run.started", json!({})),
                    ev(1, "node.started", json!({"nodeId": "a"}))
                ]
            ),
            None,
            "replays change nothing"
        );
        let next = fold(
            &st,
            &[
                ev(1, "node.started", json!({"nodeId": "a"})),
                ev(
                    2,
                    "clarification.requested",
                    json!({"nodeId": "a", "interruptId": "i1",
                    "questions": [{"id": "q1", "question": "Which colour?"}]}),
                ),
                ev(
                    3,
                    "node.suspended",
                    json!({"nodeId": "a", "interruptId": "i1", "kind": "clarification"}),
                ),
            ],
        )
        .unwrap();
        assert_eq!(next.phase, Some(RunPhase::WaitingInput));
        assert_eq!((next.events, next.last_sequence), (Some(4), Some(3)));
        assert_eq!(
            next.attempts,
            Some(1),
            "fields outside the projection are kept"
        );
        let pi = next.pending_interrupt.clone().unwrap();
        assert_eq!(
            (pi.interrupt_id.as_str(), pi.questions[0].id.as_str()),
            ("i1", "q1")
        );
    }

    #[test]
    fn terminal_phase_set_by_the_operator_is_not_revived() {
        let st = RunStatus {
            phase: Some(RunPhase::Cancelled),
            last_sequence: Some(0),
            events: Some(1),
            ..Default::default()
        };
        let next = fold(&st, &[ev(1, "node.started", json!({"nodeId": "b"}))]).unwrap();
        assert_eq!(next.phase, Some(RunPhase::Cancelled));
        assert_eq!(next.last_sequence, Some(1));
    }

    #[test]
    fn cancelling_holds_until_the_stream_records_run_cancelled() {
        let st = RunStatus {
            phase: Some(RunPhase::Cancelling),
            last_sequence: Some(0),
            events: Some(1),
            ..Default::default()
        };
        let late = fold(&st, &[ev(1, "node.started", json!({"nodeId": "b"}))]).unwrap();
        assert_eq!(late.phase, Some(RunPhase::Cancelling));
        let done = fold(
            &late,
            &[ev(
                2,
                "run.cancelled",
                json!({"reason": "cancelled by spec.cancel", "cancelledBy": "operator"}),
            )],
        )
        .unwrap();
        assert_eq!(done.phase, Some(RunPhase::Cancelled));
    }

    #[test]
    fn filter_follows_the_watched_namespace() {
        let mut cfg = OperatorConfig::default();
        assert_eq!(filter_subject(&cfg), "openwop.events.>");
        cfg.watch_namespace = "team-a".into();
        assert_eq!(filter_subject(&cfg), "openwop.events.team-a.>");
    }

    #[test]
    fn instance_selector_and_ownership() {
        let mut cfg = OperatorConfig::default();
        let labelled: BTreeMap<String, String> =
            [("openwop.dev/instance".to_string(), "blue".to_string())].into();
        assert_eq!(cfg.instance_selector(), "!openwop.dev/instance");
        assert!(cfg.handles(&BTreeMap::new()));
        assert!(!cfg.handles(&labelled));
        cfg.instance_id = "blue".into();
        assert_eq!(cfg.instance_selector(), "openwop.dev/instance=blue");
        assert!(cfg.handles(&labelled));
        assert!(!cfg.handles(&BTreeMap::new()));
        assert!(cfg.validate().is_ok());
        cfg.instance_id = "-bad".into();
        assert!(cfg.validate().is_err());
    }
}
