//! JetStream handles shared across the operator's layers.

use std::sync::{Arc, RwLock};

use async_nats::jetstream;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_is_empty_until_the_consumer_connects() {
        assert!(JetStreamSlot::default().get().is_none());
    }
}
