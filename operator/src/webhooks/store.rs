//! Where subscriptions live: one JetStream key-value bucket (`webhooks.bucket`), key
//! `<tenant>.<webhookId>`, shared by every replica and kept across restarts. A record holds
//! what delivery needs and the secret's fingerprint, never the secret (it is derived from the
//! signing key, `protocol::webhook::derive_secret`).

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

/// One subscription as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subscription {
    pub webhook_id: String,
    /// The namespace whose runs it receives.
    pub tenant: String,
    pub url: String,
    pub events: Vec<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    pub secret_fingerprint: String,
    /// RFC 3339.
    pub created_at: String,
}

impl Subscription {
    pub fn key(&self) -> String {
        key(&self.tenant, &self.webhook_id)
    }
}

/// The bucket key of a subscription.
pub fn key(tenant: &str, webhook_id: &str) -> String {
    format!("{tenant}.{webhook_id}")
}

/// A failed bucket operation.
#[derive(Debug, thiserror::Error)]
#[error("webhook subscriptions bucket {bucket}: {op}: {message}")]
pub struct StoreError {
    bucket: String,
    op: &'static str,
    message: String,
}

/// The subscriptions bucket.
#[derive(Clone)]
pub struct Store {
    kv: kv::Store,
    bucket: String,
}

impl Store {
    /// Opens the bucket, creating it on first use.
    pub async fn open(js: &jetstream::Context, bucket: &str) -> Result<Self, StoreError> {
        let err = |op, e: &dyn std::fmt::Display| StoreError {
            bucket: bucket.to_owned(),
            op,
            message: e.to_string(),
        };
        let kv = match js.get_key_value(bucket).await {
            Ok(kv) => kv,
            Err(_) => js
                .create_key_value(kv::Config {
                    bucket: bucket.to_owned(),
                    description: "openwop-operator webhook subscriptions".into(),
                    history: 1,
                    storage: jetstream::stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .map_err(|e| err("create", &e))?,
        };
        Ok(Store {
            kv,
            bucket: bucket.to_owned(),
        })
    }

    fn err(&self, op: &'static str, e: impl std::fmt::Display) -> StoreError {
        StoreError {
            bucket: self.bucket.clone(),
            op,
            message: e.to_string(),
        }
    }

    /// Stores a new subscription (its id is fresh: an existing key is an error).
    pub async fn create(&self, sub: &Subscription) -> Result<(), StoreError> {
        let value = serde_json::to_vec(sub).map_err(|e| self.err("encode", e))?;
        self.kv
            .create(sub.key(), Bytes::from(value))
            .await
            .map_err(|e| self.err("create", e))?;
        Ok(())
    }

    pub async fn get(
        &self,
        tenant: &str,
        webhook_id: &str,
    ) -> Result<Option<Subscription>, StoreError> {
        match self
            .kv
            .get(key(tenant, webhook_id))
            .await
            .map_err(|e| self.err("get", e))?
        {
            None => Ok(None),
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| self.err("decode", e)),
        }
    }

    /// Removes a subscription (its deliveries stop; the dispatcher sees the delete).
    pub async fn delete(&self, tenant: &str, webhook_id: &str) -> Result<(), StoreError> {
        self.kv
            .purge(key(tenant, webhook_id))
            .await
            .map_err(|e| self.err("delete", e))
    }

    /// How many subscriptions `tenant` holds.
    pub async fn count(&self, tenant: &str) -> Result<usize, StoreError> {
        let prefix = format!("{tenant}.");
        let mut keys = self.kv.keys().await.map_err(|e| self.err("keys", e))?;
        let mut n = 0;
        while let Some(k) = keys.next().await {
            if k.map_err(|e| self.err("keys", e))?.starts_with(&prefix) {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Every subscription now, then every change (`None` value = deleted), for the dispatcher.
    pub async fn watch(
        &self,
    ) -> Result<
        impl futures::Stream<Item = Result<(String, Option<Subscription>), StoreError>> + use<>,
        StoreError,
    > {
        let me = self.clone();
        // The last value of every key first (a plain watch would only report changes).
        let watch = self
            .kv
            .watch_with_history(">")
            .await
            .map_err(|e| self.err("watch", e))?;
        Ok(watch.map(move |entry| {
            let entry = entry.map_err(|e| me.err("watch", e))?;
            match entry.operation {
                kv::Operation::Put => serde_json::from_slice(&entry.value)
                    .map(|s| (entry.key.clone(), Some(s)))
                    .map_err(|e| me.err("decode", e)),
                kv::Operation::Delete | kv::Operation::Purge => Ok((entry.key, None)),
            }
        }))
    }
}
