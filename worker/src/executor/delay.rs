//! `core.delay`: waits in the pod up to the host's durable-wait threshold
//! (`runs.durableWaitThresholdMs`, frozen in the snapshot's host profile). A longer wait is
//! recorded once — `log.appended {fields.timer: {nodeId, wakeAt, delayMs}}` at step
//! `{node}/timer` — and the node goes dormant: the worker exits suspended, the run stays
//! `running`, and the operator starts a worker at `wakeAt`. A replaying worker takes the
//! recorded `wakeAt` (never the inputs again), so a kill or a late start neither lengthens
//! nor shortens the delay; it sleeps the rest in the pod once that is below the threshold.
//! Every sleep ends at once on a stop (SIGTERM, e.g. a cancel) or when the run abandons its
//! branches (run timeout).

use std::time::Duration;

use openwop_protocol::events::EventType;
use openwop_protocol::graph::Node;
use openwop_protocol::run::waits::{
    self, delay_ms, parse_time, remaining_ms, rfc3339_ms, timer_of, timer_record, timer_step,
};
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::{Executor, NodeOutcome};
use crate::eventlog::{LogError, Publisher};

impl<P: Publisher> Executor<'_, P> {
    pub(super) async fn delay(&self, node: &Node, inputs: &Value) -> Result<NodeOutcome, LogError> {
        let id = node.id.as_str();
        let threshold = self.snap.host.durable_wait_threshold_ms;
        let now = OffsetDateTime::now_utc();
        let (wake_at, delayed) = match self.recorded_timer(id).await {
            Some(armed) => armed,
            None => {
                let ms = match delay_ms(id, inputs, &node.config, now) {
                    Ok(ms) => ms,
                    Err(e) => return Ok(NodeOutcome::Failed(*e)),
                };
                if ms <= threshold {
                    return self.sleep_then_complete(ms, ms).await;
                }
                let at = rfc3339_ms(now + time::Duration::milliseconds(ms as i64));
                self.emit(&timer_step(id), Some(id), &timer_record(id, &at, ms))
                    .await?;
                // What the log holds wins (a record made by an earlier worker that this one
                // missed would have been returned above; this re-read is the same value).
                self.recorded_timer(id)
                    .await
                    .unwrap_or((parse_time(&at).unwrap_or(now), ms))
            }
        };
        let rest = remaining_ms(wake_at, OffsetDateTime::now_utc());
        if rest > threshold {
            return Ok(NodeOutcome::Dormant);
        }
        self.sleep_then_complete(rest, delayed).await
    }

    /// The wake time and total delay of `node`'s recorded timer.
    async fn recorded_timer(&self, node: &str) -> Option<(OffsetDateTime, u64)> {
        let w = self.writer.lock().await;
        w.log.events().iter().rev().find_map(|e| {
            if e.event_type != EventType::LogAppended || e.node_id.as_deref() != Some(node) {
                return None;
            }
            let t = timer_of(&e.payload)?;
            let ms = e.payload["fields"][waits::TIMER_FIELD]["delayMs"]
                .as_u64()
                .unwrap_or(0);
            Some((parse_time(&t.wake_at)?, ms))
        })
    }

    /// Sleeps `ms`, ending at once on a stop (`Err(Stopped)`) or when the run abandons its
    /// branches (`Some(the node's failure)`); `None` once slept. Shared with the gate timeout.
    pub(super) async fn sleep_cancellable(&self, ms: u64) -> Result<Option<NodeOutcome>, LogError> {
        if ms == 0 {
            return Ok(None);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(None),
            _ = crate::stop::wait(self.stop.clone()) => Err(LogError::Stopped),
            why = self.abandoned() => why.map(|e| Some(NodeOutcome::Failed(e))),
        }
    }

    /// Sleeps `ms` (cancellable) and completes with `{delayedMs, resumedAt}`.
    async fn sleep_then_complete(&self, ms: u64, delayed: u64) -> Result<NodeOutcome, LogError> {
        if let Some(stopped) = self.sleep_cancellable(ms).await? {
            return Ok(stopped);
        }
        Ok(NodeOutcome::Completed(json!({
            "delayedMs": delayed,
            "resumedAt": rfc3339_ms(OffsetDateTime::now_utc()),
        })))
    }
}
