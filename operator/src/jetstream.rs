//! JetStream handles shared across the operator's layers: the event consumer's connection
//! lent to the reconcilers ([`JetStreamSlot`]), and the connection the REST API and the
//! webhook dispatcher of a replica open on first use ([`LazyJetStream`]).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_nats::jetstream;

use crate::config::OperatorConfig;

/// A JetStream context the reconcilers can use (the finalizer purges a deleted Run's
/// subjects): set by the event consumer each time it connects, empty until then.
#[derive(Clone, Default)]
pub struct JetStreamSlot(Arc<RwLock<Option<jetstream::Context>>>);

impl JetStreamSlot {
    pub fn set(&self, js: jetstream::Context) {
        if let Ok(mut s) = self.0.write() {
            *s = Some(js);
        }
    }

    /// The current context, `None` while the consumer has not connected.
    pub fn get(&self) -> Option<jetstream::Context> {
        self.0.read().ok().and_then(|s| s.clone())
    }
}

/// Why [`LazyJetStream::get`] has no JetStream.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("events.natsUrl is not set: run events are not available")]
    NotConfigured,
    /// The credentials could not be read or the server not reached (retried at the next use).
    #[error("{0}")]
    Connect(String),
}

/// JetStream connected on first use, one connection for every clone: the REST API and the
/// webhook dispatcher of a replica share it (every replica reads run events itself). A
/// failed connect is tried again at the next use.
#[derive(Clone)]
pub struct LazyJetStream {
    config: Arc<OperatorConfig>,
    cell: Arc<tokio::sync::OnceCell<jetstream::Context>>,
}

impl LazyJetStream {
    pub fn new(config: Arc<OperatorConfig>) -> Self {
        LazyJetStream {
            config,
            cell: Default::default(),
        }
    }

    /// The connection (`events.natsUrl`, `natsCredentials`), made now if it is not yet.
    pub async fn get(&self) -> Result<jetstream::Context, ConnectError> {
        let Some(url) = self.config.events.nats_url.clone() else {
            return Err(ConnectError::NotConfigured);
        };
        let cfg = self.config.clone();
        self.cell
            .get_or_try_init(|| async move {
                let auth = cfg.nats_credentials.load().map_err(|e| e.to_string())?;
                let nats = openwop_nats::connect_options(
                    concat!("openwop-operator-rest/", env!("CARGO_PKG_VERSION")),
                    &auth,
                )
                .map_err(|e| e.to_string())?
                .connection_timeout(Duration::from_secs(5))
                .connect(&url)
                .await
                .map_err(|e| format!("cannot connect to {url}: {e}"))?;
                Ok::<_, String>(jetstream::new(nats))
            })
            .await
            .cloned()
            .map_err(ConnectError::Connect)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_is_empty_until_the_consumer_connects() {
        assert!(JetStreamSlot::default().get().is_none());
    }

    #[tokio::test]
    async fn no_nats_url_is_not_configured() {
        let lazy = LazyJetStream::new(Arc::new(OperatorConfig::default()));
        assert!(matches!(lazy.get().await, Err(ConnectError::NotConfigured)));
    }
}
