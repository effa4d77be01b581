//! Where subscriptions live: one JetStream key-value bucket (`webhooks.bucket`), key
//! `<tenant>.<webhookId>`, shared by every replica and kept across restarts. A record holds
//! what delivery needs and the secret's fingerprint, never the secret (it is derived from the
//! signing key, `protocol::webhook::derive_secret`).
//!
//! Beside it, `<bucket>-health` holds each subscription's circuit breaker and failure count
//! (`protocol::webhook::Breaker`) under the same key, so the replicas share one breaker: a
//! receiver that fails on one replica is not tried afresh on the next. Updates are
//! compare-and-set on the key's revision.

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures::StreamExt;
use openwop_protocol::webhook::Breaker;
use serde::{Deserialize, Serialize};

/// Whether a subscription still gets deliveries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SubscriptionStatus {
    #[default]
    Active,
    /// Too many failed deliveries (`webhooks.failureLimit` within `failureWindowHours`):
    /// nothing more is delivered or kept for it; registering the URL again starts afresh.
    Failed,
}

impl SubscriptionStatus {
    fn is_active(&self) -> bool {
        *self == SubscriptionStatus::Active
    }
}

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
    #[serde(default, skip_serializing_if = "SubscriptionStatus::is_active")]
    pub status: SubscriptionStatus,
    /// RFC 3339, when it was marked failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<String>,
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

/// The subscriptions bucket (and the breakers' bucket beside it).
#[derive(Clone)]
pub struct Store {
    kv: kv::Store,
    health: kv::Store,
    bucket: String,
}

/// Rounds of a compare-and-set update before giving up (another replica keeps winning).
const CAS_ROUNDS: usize = 5;

/// Opens a key-value bucket, creating it on first use.
async fn open_bucket(
    js: &jetstream::Context,
    bucket: &str,
    description: &str,
) -> Result<kv::Store, StoreError> {
    match js.get_key_value(bucket).await {
        Ok(kv) => Ok(kv),
        Err(_) => js
            .create_key_value(kv::Config {
                bucket: bucket.to_owned(),
                description: description.to_owned(),
                history: 1,
                storage: jetstream::stream::StorageType::File,
                ..Default::default()
            })
            .await
            .map_err(|e| StoreError {
                bucket: bucket.to_owned(),
                op: "create",
                message: e.to_string(),
            }),
    }
}

impl Store {
    /// Opens the buckets, creating them on first use.
    pub async fn open(js: &jetstream::Context, bucket: &str) -> Result<Self, StoreError> {
        let kv = open_bucket(js, bucket, "openwop-operator webhook subscriptions").await?;
        let health = open_bucket(
            js,
            &format!("{bucket}-health"),
            "openwop-operator webhook circuit breakers",
        )
        .await?;
        Ok(Store {
            kv,
            health,
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
        let key = key(tenant, webhook_id);
        self.kv
            .purge(&key)
            .await
            .map_err(|e| self.err("delete", e))?;
        self.health
            .purge(&key)
            .await
            .map_err(|e| self.err("delete breaker", e))
    }

    /// Marks a subscription failed at `at` (RFC 3339); false when it is gone. Compare-and-set:
    /// a concurrent delete wins.
    pub async fn mark_failed(
        &self,
        tenant: &str,
        webhook_id: &str,
        at: &str,
    ) -> Result<bool, StoreError> {
        let key = key(tenant, webhook_id);
        for _ in 0..CAS_ROUNDS {
            let Some(entry) = self.kv.entry(&key).await.map_err(|e| self.err("get", e))? else {
                return Ok(false);
            };
            if !matches!(entry.operation, kv::Operation::Put) {
                return Ok(false);
            }
            let mut sub: Subscription =
                serde_json::from_slice(&entry.value).map_err(|e| self.err("decode", e))?;
            if sub.status == SubscriptionStatus::Failed {
                return Ok(true);
            }
            sub.status = SubscriptionStatus::Failed;
            sub.failed_at = Some(at.to_owned());
            let value = serde_json::to_vec(&sub).map_err(|e| self.err("encode", e))?;
            if self
                .kv
                .update(&key, Bytes::from(value), entry.revision)
                .await
                .is_ok()
            {
                return Ok(true);
            }
        }
        Err(self.err("mark failed", "the record kept changing"))
    }

    /// The subscription's shared breaker (closed when it has none yet).
    pub async fn breaker(&self, sub: &Subscription) -> Result<Breaker, StoreError> {
        Ok(self.breaker_entry(&sub.key()).await?.0)
    }

    async fn breaker_entry(&self, key: &str) -> Result<(Breaker, Option<u64>), StoreError> {
        match self
            .health
            .entry(key)
            .await
            .map_err(|e| self.err("get breaker", e))?
        {
            Some(e) if matches!(e.operation, kv::Operation::Put) => Ok((
                // A record this version cannot read starts closed rather than blocking
                // deliveries.
                serde_json::from_slice(&e.value).unwrap_or_default(),
                Some(e.revision),
            )),
            Some(e) => Ok((Breaker::default(), Some(e.revision))),
            None => Ok((Breaker::default(), None)),
        }
    }

    /// Applies `change` to the subscription's shared breaker (compare-and-set, re-read and
    /// re-applied when another replica wrote in between) and returns what it returned.
    /// Nothing is written when `change` leaves the breaker as it was.
    pub async fn update_breaker<R>(
        &self,
        sub: &Subscription,
        change: impl Fn(&mut Breaker) -> R,
    ) -> Result<R, StoreError> {
        let key = sub.key();
        for _ in 0..CAS_ROUNDS {
            let (before, revision) = self.breaker_entry(&key).await?;
            let mut after = before.clone();
            let out = change(&mut after);
            if after == before {
                return Ok(out);
            }
            let value = Bytes::from(serde_json::to_vec(&after).map_err(|e| self.err("encode", e))?);
            let written = match revision {
                Some(rev) => self.health.update(&key, value, rev).await.is_ok(),
                None => self.health.create(&key, value).await.is_ok(),
            };
            if written {
                return Ok(out);
            }
        }
        Err(self.err("update breaker", "the record kept changing"))
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
