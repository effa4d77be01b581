//! Pausing at a safe point ([`openwop_protocol::run::pause`]). The operator asks the live
//! worker over the run's control subject and repeats until the worker answers; the worker
//! then stops as the drain policy says — `immediate` through the same [`StopSignal`] as
//! SIGTERM (in-flight provider calls and sleeps are abandoned unrecorded), `drain-current-node`
//! by starting no node and not ending the run once the in-flight ones are recorded — and
//! records `run.paused` before exiting suspended. A worker started while the Run's
//! `spec.pause` is set only records the pause; the next worker started without it records
//! `run.resumed {fromStatus: paused}` and replays.

use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use openwop_protocol::events::DrainPolicy;
use openwop_protocol::events::EventType;
use openwop_protocol::run::pause::{CONTROL_ACK, FROM_PAUSED, PauseLog, PauseRequest};
use serde_json::json;

use crate::eventlog::{LogError, Publisher, RunLog, now_rfc3339};
use crate::stop::StopSignal;

/// The pause this worker was asked for (shared by the control listener, the executor and
/// the exit path).
#[derive(Debug, Clone, Default)]
pub struct PauseSignal {
    request: Arc<Mutex<Option<PauseRequest>>>,
    /// Requested under `drain-current-node`: start nothing new, do not end the run.
    drain: StopSignal,
}

impl PauseSignal {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes `req` (the first request wins: a repeat of the operator's message changes
    /// nothing) and stops as its drain policy says.
    pub fn request(&self, req: PauseRequest, stop: &StopSignal) {
        let policy = {
            let mut held = self.request.lock().unwrap_or_else(|e| e.into_inner());
            held.get_or_insert(req).drain_policy
        };
        match policy {
            DrainPolicy::Immediate => stop.request(),
            DrainPolicy::DrainCurrentNode => self.drain.request(),
        }
    }

    /// The pause asked for, if any.
    pub fn requested(&self) -> Option<PauseRequest> {
        self.request
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The signal the executor watches under `drain-current-node`.
    pub fn drain(&self) -> StopSignal {
        self.drain.clone()
    }
}

/// Subscribes to the run's control subject (registered at the server before it returns, so
/// a message sent after the worker started is not missed) and hands every pause request to
/// `pause` until the connection closes. A message that is not a pause request is answered
/// with why, never acted on.
pub async fn listen(
    client: async_nats::Client,
    subject: String,
    pause: PauseSignal,
    stop: StopSignal,
) -> Result<(), async_nats::Error> {
    let mut sub = client.subscribe(subject).await?;
    client.flush().await?;
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let answer = match serde_json::from_slice::<PauseRequest>(&msg.payload) {
                Ok(req) => {
                    tracing::info!(drain_policy = req.drain_policy.as_str(), "pause requested");
                    pause.request(req, &stop);
                    CONTROL_ACK.to_vec()
                }
                Err(e) => format!("not a pause request: {e}").into_bytes(),
            };
            if let Some(reply) = msg.reply {
                let _ = client.publish(reply, answer.into()).await;
            }
        }
    });
    Ok(())
}

/// Records `run.paused` for `req` unless the log already ends paused (a worker re-recording
/// the same pause after a crash writes nothing).
pub async fn record_paused<P: Publisher>(
    log: &mut RunLog<P>,
    req: &PauseRequest,
) -> Result<(), LogError> {
    let state = PauseLog::of(log.events());
    if state.paused {
        return Ok(());
    }
    let payload = req.paused_payload(&now_rfc3339());
    log.emit(&state.next_paused_step(), None, &payload).await
}

/// Records `run.resumed {fromStatus: paused}` when the log ends paused (the first step of a
/// worker started after a resume); whether it did.
pub async fn record_resumed<P: Publisher>(log: &mut RunLog<P>) -> Result<bool, LogError> {
    let state = PauseLog::of(log.events());
    if !state.paused {
        return Ok(false);
    }
    log.emit_value(
        &state.resumed_step(),
        None,
        EventType::RunResumed,
        json!({"fromStatus": FROM_PAUSED}),
    )
    .await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eventlog::MemoryPublisher;
    use openwop_protocol::redact::Redactor;

    fn block<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn the_first_request_decides_and_picks_the_stop() {
        let (p, stop) = (PauseSignal::new(), StopSignal::new());
        let drain = PauseRequest::default();
        p.request(drain.clone(), &stop);
        assert!(p.drain().is_requested() && !stop.is_requested());
        let immediate = PauseRequest {
            drain_policy: DrainPolicy::Immediate,
            ..Default::default()
        };
        p.request(immediate.clone(), &stop);
        assert_eq!(p.requested(), Some(drain), "a repeat changes nothing");
        let (p, stop) = (PauseSignal::new(), StopSignal::new());
        p.request(immediate, &stop);
        assert!(stop.is_requested() && !p.drain().is_requested());
    }

    #[test]
    fn pause_and_resume_are_recorded_once_each() {
        block(async {
            let red = Arc::new(Redactor::new(vec![]));
            let mut log = RunLog::new(MemoryPublisher::default(), "s", "r", red.clone(), vec![]);
            log.emit_value("run.started", None, EventType::RunStarted, json!({}))
                .await
                .unwrap();
            assert!(!record_resumed(&mut log).await.unwrap(), "not paused");
            let req = PauseRequest {
                reason: Some("maintenance".into()),
                ..Default::default()
            };
            record_paused(&mut log, &req).await.unwrap();
            record_paused(&mut log, &req).await.unwrap();
            let types: Vec<_> = log.events().iter().map(|e| e.event_type).collect();
            assert_eq!(types, [EventType::RunStarted, EventType::RunPaused]);
            let paused = &log.events()[1].payload;
            assert_eq!(
                (&paused["reason"], &paused["drainPolicy"]),
                (&json!("maintenance"), &json!("drain-current-node"))
            );
            // A crashed pause worker's successor replays the same log: nothing new.
            let mut again = RunLog::new(
                MemoryPublisher::default(),
                "s",
                "r",
                red,
                log.events().to_vec(),
            );
            record_paused(&mut again, &req).await.unwrap();
            assert_eq!(again.published_count(), 0);
            assert!(record_resumed(&mut again).await.unwrap());
            assert!(!record_resumed(&mut again).await.unwrap());
            // A second pause has its own event.
            record_paused(&mut again, &req).await.unwrap();
            let ids: Vec<_> = again.events().iter().map(|e| &e.event_id).collect();
            assert_eq!(ids.len(), 4);
            assert_ne!(ids[1], ids[3]);
        });
    }
}
