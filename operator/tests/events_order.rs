//! The event consumer against a real nats-server: status writes fail on demand (the
//! batch is NAK'd and redelivered later), later events are delivered first, and the status
//! must still be the projection of the run's whole log — every transition applied once, in
//! sequence order, none skipped. Statuses live in memory here (the apiserver side of the
//! consumer is covered by `events_routing` and the cluster tests).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream;
use k8s_openapi::jiff::Timestamp;
use openwop_crds::{RunPhase, RunStatus};
use openwop_nats::testing::NatsServer;
use openwop_operator::events::{
    Current, EventError, RunStatuses, Stored, StreamLog, consume_loop, events_consumer, fold,
    settle,
};
use openwop_operator::kube_events::Note;
use openwop_protocol::run::projection::Projection;
use openwop_protocol::run::subjects::{StreamSpec, events_filter, events_subject};
use serde_json::{Value, json};

const NS: &str = "team-a";
const RUN: &str = "uid-1";
const NAK: Duration = Duration::from_secs(2);

/// One Run's status; the next `fail` writes fail (the consumer NAKs the run's batch).
#[derive(Default)]
struct Memory {
    status: Mutex<RunStatus>,
    fail: AtomicUsize,
    failed: AtomicUsize,
    /// The reasons of the Events recorded (a run's ending).
    announced: Mutex<Vec<String>>,
}

/// The consumer's clock here.
fn now() -> Timestamp {
    "2026-01-01T00:00:05Z".parse().unwrap()
}

impl RunStatuses for Memory {
    async fn read(&self, _: &str, _: &str) -> Result<Option<Current>, EventError> {
        Ok(Some(Current {
            name: "r1".into(),
            status: self.status.lock().unwrap().clone(),
            resource_version: None,
            generation: Some(1),
        }))
    }

    async fn write(
        &self,
        _: &str,
        _: &str,
        _: &Current,
        next: &RunStatus,
    ) -> Result<Stored, EventError> {
        if self
            .fail
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(EventError::Nats("injected write failure".into()));
        }
        *self.status.lock().unwrap() = next.clone();
        Ok(Stored::Written)
    }

    async fn announce(&self, _: &str, _: &str, _: &Current, note: Note) {
        let reason = note.reason.as_str().to_owned();
        self.announced.lock().unwrap().push(reason);
    }

    fn now(&self) -> Timestamp {
        now()
    }
}

/// A run with every kind of transition: waiting for input, resumed, two nodes, completed.
fn log() -> Vec<Value> {
    let types: [(&str, Value); 15] = [
        ("run.started", json!({})),
        ("node.started", json!({"nodeId": "a"})),
        (
            "clarification.requested",
            json!({"nodeId": "a", "interruptId": "i1", "questions": [{"id": "q", "question": "Which?"}]}),
        ),
        (
            "node.suspended",
            json!({"nodeId": "a", "interruptId": "i1", "kind": "clarification"}),
        ),
        ("interrupt.resolved", json!({"interruptId": "i1"})),
        ("node.completed", json!({"nodeId": "a"})),
        ("node.started", json!({"nodeId": "b"})),
        ("node.completed", json!({"nodeId": "b"})),
        ("node.started", json!({"nodeId": "c"})),
        (
            "node.suspended",
            json!({"nodeId": "c", "interruptId": "i2", "kind": "approval"}),
        ),
        ("approval.granted", json!({"interruptId": "i2"})),
        ("node.completed", json!({"nodeId": "c"})),
        ("node.started", json!({"nodeId": "d"})),
        ("node.completed", json!({"nodeId": "d"})),
        ("run.completed", json!({})),
    ];
    types
        .into_iter()
        .enumerate()
        .map(|(i, (ty, payload))| {
            json!({"eventId": format!("{RUN}-{i}"), "runId": RUN, "type": ty, "sequence": i,
                   "timestamp": "2026-01-01T00:00:00Z", "payload": payload})
        })
        .collect()
}

async fn publish(js: &jetstream::Context, events: &[Value]) {
    for e in events {
        let publish = jetstream::message::PublishMessage::build()
            .payload(serde_json::to_vec(e).unwrap().into())
            .message_id(e["eventId"].as_str().unwrap());
        js.send_publish(events_subject(NS, RUN), publish)
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

/// The status the whole log projects to (from an empty status), its ending recorded.
fn expected(events: &[Value]) -> RunStatus {
    let mut st = fold(&RunStatus::default(), events).unwrap();
    settle(&mut st, events, Some(1), now());
    st
}

async fn wait_until(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {secs}s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Setup {
    _server: NatsServer,
    js: jetstream::Context,
    memory: std::sync::Arc<Memory>,
    task: tokio::task::JoinHandle<Result<(), EventError>>,
}

/// A nats-server, its stream holding `first`, and the consumer running on it.
async fn setup(fail: usize, first: &[Value]) -> Setup {
    let server = NatsServer::start();
    let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    let stream = openwop_nats::stream::ensure_stream(&js, &StreamSpec::new("EVENTS_ORDER", None))
        .await
        .unwrap();
    let consumer = events_consumer(&stream, "operator", events_filter(None))
        .await
        .unwrap();
    publish(&js, first).await;
    let memory = std::sync::Arc::new(Memory::default());
    memory.fail.store(fail, Ordering::SeqCst);
    let m = memory.clone();
    let task = tokio::spawn(async move {
        consume_loop(
            &consumer,
            &*m,
            &StreamLog(&stream),
            Duration::from_millis(100),
            NAK,
        )
        .await
    });
    Setup {
        _server: server,
        js,
        memory,
        task,
    }
}

/// A NAK'd batch comes back after later events were delivered: the later events must not
/// be applied first (their redelivered predecessors would then be discarded as already
/// seen, losing the waiting-input and approval transitions and the event count).
#[tokio::test]
async fn a_nakd_batch_overtaken_by_later_events_loses_no_transition() {
    let events = log();
    let s = setup(1, &events[..10]).await;
    wait_until(10, "the injected write failure", || {
        s.memory.failed.load(Ordering::SeqCst) == 1
    })
    .await;
    // Delivered before the NAK'd 0..=9 come back.
    publish(&s.js, &events[10..]).await;
    let want = expected(&events);
    wait_until(20, "the status to reach the end of the log", || {
        s.memory.status.lock().unwrap().last_sequence == Some(14)
    })
    .await;
    // Let the redelivery of the NAK'd batch arrive and be handled as well.
    tokio::time::sleep(NAK + Duration::from_secs(2)).await;
    let got = s.memory.status.lock().unwrap().clone();
    assert_eq!(got, want, "status = projection of the whole log");
    assert_eq!(got.events, Some(15));
    assert_eq!(got.phase, Some(RunPhase::Completed));
    assert_eq!(got.terminal_event.as_deref(), Some("uid-1-14"));
    assert!(got.completion_time.is_some());
    assert_eq!(
        *s.memory.announced.lock().unwrap(),
        ["Completed"],
        "the ending's Event, once, whatever was redelivered"
    );
    let p = events.iter().fold(Projection::default(), |mut p, e| {
        p.apply(e);
        p
    });
    assert_eq!(
        (got.events, got.last_sequence),
        (Some(p.events), p.last_sequence)
    );
    assert!(!s.task.is_finished(), "the consumer keeps running");
    s.task.abort();
}

/// Events 5 and 6 are not in the stream yet (their publisher is retrying): 7..=9 are held,
/// never applied past the hole; once 5 and 6 arrive, everything is applied in order.
#[tokio::test]
async fn a_hole_the_stream_cannot_fill_holds_later_events_until_it_is_filled() {
    let events = log();
    let s = setup(0, &events[..5]).await;
    wait_until(10, "events 0..=4 applied", || {
        s.memory.status.lock().unwrap().last_sequence == Some(4)
    })
    .await;
    publish(&s.js, &events[7..10]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = s.memory.status.lock().unwrap().clone();
    assert_eq!(held.last_sequence, Some(4), "nothing applied past the hole");
    assert_eq!(held.phase, Some(RunPhase::Running));
    publish(&s.js, &events[5..7]).await;
    publish(&s.js, &events[10..]).await;
    wait_until(20, "the status to reach the end of the log", || {
        s.memory.status.lock().unwrap().last_sequence == Some(14)
    })
    .await;
    assert_eq!(*s.memory.status.lock().unwrap(), expected(&events));
    s.task.abort();
}
