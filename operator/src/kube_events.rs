//! Kubernetes Events of the reconcilers and of the event consumer (a run's ending): queued
//! after the status write that records them, published off the caller's path, one lane per
//! object.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::{mpsc, oneshot};

use crate::reasons::Reason;

/// Lanes that publish Kubernetes Events.
const EVENT_LANES: usize = 4;
/// Events a lane holds before a recorder waits for room.
const EVENT_LANE_CAPACITY: usize = 256;

/// Where the reconcilers and the event consumer (a run's ending) record their Kubernetes Events.
/// Events are published off the caller's path, as client-go's event broadcaster does: a
/// reconcile holds one of the `runs.reconcileConcurrency` slots only for the writes whose
/// answers decide what it does next, not for an Event's round trip. The Events of one object
/// keep their order (one lane per object); a full lane makes the recorder wait, so memory is
/// bounded and nothing is dropped. Events are best effort: a failed publish is logged, and
/// [`EventSink::flush`] waits for the queued ones (the binary's shutdown does, for a while).
#[derive(Clone)]
pub struct EventSink {
    lanes: Arc<[mpsc::Sender<Queued>]>,
}

/// What a lane publishes, in order.
enum Queued {
    /// Boxed: a queued Event is ~30 times the size of a flush.
    Event(Box<(ObjectReference, Note)>),
    /// Answered once every Event queued before it is published (or failed).
    Flush(oneshot::Sender<()>),
}

impl EventSink {
    /// Starts the publishing lanes on the current Tokio runtime; they end when every clone of
    /// the sink is dropped.
    pub fn start(client: Client, reporter: Reporter) -> Self {
        let lanes = (0..EVENT_LANES)
            .map(|_| {
                let (tx, mut rx) = mpsc::channel::<Queued>(EVENT_LANE_CAPACITY);
                let (client, reporter) = (client.clone(), reporter.clone());
                tokio::spawn(async move {
                    while let Some(q) = rx.recv().await {
                        match q {
                            Queued::Event(ev) => {
                                let (regarding, n) = *ev;
                                // A recorder per Event: kube's recorder would fold a second
                                // Event of the same reason and action into the first one's
                                // series ("attempt 2" counted as a repeat of "attempt 1");
                                // each of ours is one change.
                                let recorder = Recorder::new(client.clone(), reporter.clone());
                                publish_now(&recorder, &regarding, n).await;
                            }
                            Queued::Flush(done) => {
                                let _ = done.send(());
                            }
                        }
                    }
                });
                tx
            })
            .collect();
        EventSink { lanes }
    }

    /// Queues the Event `n` about `regarding`; waits only while its lane is full.
    pub async fn record(&self, regarding: ObjectReference, n: Note) {
        let lane = &self.lanes[lane_of(&regarding, self.lanes.len())];
        if lane
            .send(Queued::Event(Box::new((regarding, n))))
            .await
            .is_err()
        {
            // Only when the runtime is shutting down (the lane's task is gone).
            tracing::warn!("a Kubernetes Event was not published: shutting down");
        }
    }

    /// Returns once every Event queued before the call is published (or its publish failed).
    pub async fn flush(&self) {
        for lane in self.lanes.iter() {
            let (tx, rx) = oneshot::channel();
            if lane.send(Queued::Flush(tx)).await.is_ok() {
                let _ = rx.await;
            }
        }
    }
}

/// The lane of the object `regarding` (its namespace and name): the same lane every time.
fn lane_of(regarding: &ObjectReference, lanes: usize) -> usize {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&regarding.namespace, &regarding.name).hash(&mut h);
    (h.finish() % lanes as u64) as usize
}

async fn publish_now(recorder: &Recorder, regarding: &ObjectReference, n: Note) {
    let reason = n.reason.as_str();
    let ev = Event {
        type_: n.type_,
        reason: reason.into(),
        note: Some(n.note),
        action: reason.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, regarding).await {
        tracing::warn!(error = %e, reason, "could not publish Kubernetes Event");
    }
}

/// A Kubernetes Event to record once the status is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    pub type_: EventType,
    pub reason: Reason,
    pub note: String,
}
