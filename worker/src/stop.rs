//! Stopping at a safe point. SIGTERM (what the kubelet sends when the operator deletes the
//! pod) requests a stop: the run log refuses to start another publish, an in-flight provider
//! call is abandoned, and the executor returns [`crate::eventlog::LogError::Stopped`]. What
//! the stream holds is then a gap-free prefix of the run's deterministic events, so a later
//! worker replays and continues exactly as after a crash — only sooner and cleaner.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// A cheap, cloneable stop request shared by the signal handler, the log and the executor.
#[derive(Debug, Clone, Default)]
pub struct StopSignal {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    requested: AtomicBool,
    notify: Notify,
}

impl StopSignal {
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every holder to stop at its next safe point.
    pub fn request(&self) {
        self.inner.requested.store(true, Ordering::SeqCst);
        self.inner.notify.notify_waiters();
    }

    pub fn is_requested(&self) -> bool {
        self.inner.requested.load(Ordering::SeqCst)
    }

    /// Resolves once a stop is requested (at once if it already was).
    pub async fn requested(&self) {
        loop {
            let notified = self.inner.notify.notified();
            if self.is_requested() {
                return;
            }
            notified.await;
        }
    }
}

/// Waits for a stop on `signal`, or forever when there is none.
pub async fn wait(signal: Option<StopSignal>) {
    match signal {
        Some(s) => s.requested().await,
        None => std::future::pending().await,
    }
}

/// Requests a stop on the first SIGTERM or SIGINT.
pub fn on_termination_signals(stop: StopSignal) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::warn!("SIGTERM: stopping at the next safe point"),
            _ = int.recv() => tracing::warn!("SIGINT: stopping at the next safe point"),
        }
        stop.request();
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_wake_on_request_and_late_waiters_return_at_once() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let s = StopSignal::new();
            let w = tokio::spawn(wait(Some(s.clone())));
            tokio::task::yield_now().await;
            assert!(!w.is_finished());
            s.request();
            tokio::time::timeout(std::time::Duration::from_secs(1), w)
                .await
                .expect("woken")
                .unwrap();
            // Already requested: returns without a notification.
            tokio::time::timeout(std::time::Duration::from_millis(50), s.requested())
                .await
                .expect("immediate");
            assert!(
                tokio::time::timeout(std::time::Duration::from_millis(20), wait(None))
                    .await
                    .is_err()
            );
        });
    }
}
