//! Leader election through a `coordination.k8s.io/v1` Lease: only the holder runs the
//! controllers, so two replicas are safe. Writes use the Lease's resourceVersion, so two
//! candidates can never both win the same term.
//!
//! Fencing: a leader that cannot renew must stop acting before another replica may take the
//! lease. [`Elector::keep`] renews every `renewIntervalSeconds` and returns as soon as the
//! last successful renewal is `renewDeadlineSeconds` old (each round is cut off at that
//! deadline too, so a hung apiserver connection cannot hold it up); the deadline is below
//! `leaseDurationSeconds`, measured from the moment before the renewing request was sent,
//! so the leader has stopped before the lease it wrote can expire for the others.
//!
//! Renewals never wait for the controllers: [`Elector::keep_apart`] renews from its own OS
//! thread, on its own single-threaded runtime, through its own client (its own connection).
//! Sharing the controllers' runtime and client, a renewal took more than 10 s while 200 Runs
//! were reconciled at once (the runtime's two threads busy with reconciles and watch
//! decoding, the connection busy with their requests), and the leader lost its lease because
//! it was busy, not because it could not reach the API server.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Outcome of one election round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// We hold the lease (acquired or renewed).
    Leading,
    /// Someone else holds a valid lease.
    Following { holder: String },
}

/// Why a leader stops leading.
#[derive(Debug, thiserror::Error)]
pub enum LeaseLost {
    #[error("lost the leader lease to {holder}")]
    Taken { holder: String },
    #[error(
        "the leader lease was not renewed for {deadline_seconds}s (leaderElection.renewDeadlineSeconds; \
         the lease lasts {lease_seconds}s); last error: {last_error}"
    )]
    NotRenewed {
        deadline_seconds: u64,
        lease_seconds: u32,
        last_error: String,
    },
}

/// How a leader keeps its lease.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Between two renewals.
    pub renew_interval: Duration,
    /// Longest time without a successful renewal before the leader stops acting; below the
    /// lease duration.
    pub renew_deadline: Duration,
}

/// A candidate for the lease `name` in `namespace`.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration_seconds: i32,
}

/// Decides whether `identity` may take `lease` at `now`: free, expired or already ours.
pub fn may_take(lease: &LeaseSpec, identity: &str, now: Timestamp) -> bool {
    let holder = lease.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() || holder == identity {
        return true;
    }
    let renewed = lease
        .renew_time
        .as_ref()
        .or(lease.acquire_time.as_ref())
        .map(|t| t.0);
    let duration = i64::from(lease.lease_duration_seconds.unwrap_or(15));
    match renewed {
        None => true,
        Some(r) => r
            .checked_add(SignedDuration::from_secs(duration))
            .is_ok_and(|expiry| now >= expiry),
    }
}

impl Elector {
    pub fn new(api: Api<Lease>, name: &str, identity: &str, duration_seconds: u32) -> Self {
        Self {
            api,
            name: name.into(),
            identity: identity.into(),
            duration_seconds: i32::try_from(duration_seconds).unwrap_or(15),
        }
    }

    /// One acquire-or-renew attempt.
    pub async fn round(&self, now: Timestamp) -> Result<Round, kube::Error> {
        let existing = self.api.get_opt(&self.name).await?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Round::Leading),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Round::Following {
                    holder: "unknown".into(),
                }),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if !may_take(&spec, &self.identity, now) {
            return Ok(Round::Following {
                holder: spec.holder_identity.unwrap_or_default(),
            });
        }
        let ours = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        let acquired = if ours {
            spec.acquire_time.map_or(now, |t| t.0)
        } else {
            now
        };
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        lease.spec = Some(self.spec(acquired, now, transitions));
        // `replace` carries the resourceVersion we read: a concurrent winner makes this a 409.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Round::Leading),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Round::Following {
                holder: "unknown".into(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Keeps the lease we hold since the round that started at `renewed`; returns when we
    /// must stop acting: the lease was taken, or not renewed within the deadline.
    pub async fn keep(&self, timing: Timing, mut renewed: Instant) -> LeaseLost {
        let mut last_error = String::from("none");
        loop {
            let deadline = renewed + timing.renew_deadline;
            let wake = (Instant::now() + timing.renew_interval).min(deadline);
            tokio::time::sleep_until(wake).await;
            let started = Instant::now();
            if started >= deadline {
                return self.not_renewed(timing, last_error);
            }
            // Taken before the request: the lease we write says "renewed now", so our
            // deadline is never later than what the other replicas see.
            let now = Timestamp::now();
            match tokio::time::timeout_at(deadline, self.round(now)).await {
                Ok(Ok(Round::Leading)) => renewed = started,
                Ok(Ok(Round::Following { holder })) => return LeaseLost::Taken { holder },
                Ok(Err(e)) => {
                    last_error = e.to_string();
                    tracing::warn!(
                        error = %last_error,
                        stop_in_ms = deadline.saturating_duration_since(Instant::now()).as_millis() as u64,
                        "lease renewal failed"
                    );
                }
                Err(_) => {
                    last_error = "the renewal request did not finish before the deadline".into()
                }
            }
        }
    }

    /// [`Elector::keep`] on a thread of its own, with its own runtime and a client of its own
    /// built from `config`: a busy runtime or a connection queued with controller requests
    /// never delays a renewal. Returns when we must stop acting, as `keep` does; dropping the
    /// returned future stops the thread at its next renewal.
    pub fn keep_apart(
        &self,
        config: kube::Config,
        timing: Timing,
        renewed: Instant,
    ) -> impl Future<Output = LeaseLost> + Send + 'static {
        let namespace = self.api.namespace().unwrap_or("default").to_owned();
        let (name, identity) = (self.name.clone(), self.identity.clone());
        let duration = u32::try_from(self.duration_seconds).unwrap_or(15);
        let not_renewed = move |why: String| LeaseLost::NotRenewed {
            deadline_seconds: timing.renew_deadline.as_secs(),
            lease_seconds: duration,
            last_error: why,
        };
        let (lost_tx, lost_rx) = oneshot::channel();
        // Dropped with the returned future: the thread's `keep` ends at once.
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let failed = not_renewed;
        let spawned = std::thread::Builder::new()
            .name("leader-lease".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = lost_tx.send(failed(format!(
                            "cannot start the lease renewal runtime: {e}"
                        )));
                        return;
                    }
                };
                let lost = runtime.block_on(async move {
                    // Built here: the client's connection tasks run on this runtime.
                    let client = match Client::try_from(config) {
                        Ok(c) => c,
                        Err(e) => {
                            return Some(failed(format!(
                                "cannot build the lease renewal client: {e}"
                            )));
                        }
                    };
                    let own = Elector::new(
                        Api::namespaced(client, &namespace),
                        &name,
                        &identity,
                        duration,
                    );
                    tokio::select! {
                        lost = own.keep(timing, renewed) => Some(lost),
                        _ = stop_rx => None,
                    }
                });
                if let Some(lost) = lost {
                    let _ = lost_tx.send(lost);
                }
            });
        async move {
            let _stop = stop_tx;
            if let Err(e) = spawned {
                return not_renewed(format!("cannot start the lease renewal thread: {e}"));
            }
            match lost_rx.await {
                Ok(lost) => lost,
                Err(_) => not_renewed("the lease renewal thread ended".into()),
            }
        }
    }

    /// Gives the lease up at shutdown, after the controllers have stopped: another replica
    /// may take it at its next round instead of waiting `leaseDurationSeconds` for it to
    /// expire. Only our own lease is touched; the write carries the resourceVersion read,
    /// so a replica that took it meanwhile wins (409, nothing to do).
    pub async fn release(&self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(false);
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(false);
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn not_renewed(&self, timing: Timing, last_error: String) -> LeaseLost {
        LeaseLost::NotRenewed {
            deadline_seconds: timing.renew_deadline.as_secs(),
            lease_seconds: u32::try_from(self.duration_seconds).unwrap_or(0),
            last_error,
        }
    }

    fn spec(&self, acquired: Timestamp, renewed: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration_seconds),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    #[test]
    fn lease_rules() {
        let held = LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(ts(0))),
            ..Default::default()
        };
        assert!(may_take(&held, "a", ts(1)), "holder renews");
        assert!(!may_take(&held, "b", ts(14)), "valid lease is respected");
        assert!(may_take(&held, "b", ts(15)), "expired lease can be taken");
        assert!(may_take(&LeaseSpec::default(), "b", ts(0)), "free lease");
    }

    /// An API server on a thread of its own that serves one Lease held by `holder` (renewed
    /// now) and counts the renewals (PUTs) it is sent.
    fn lease_server(holder: &'static str) -> (kube::Config, Arc<AtomicUsize>) {
        use axum::routing::get;
        let puts = Arc::new(AtomicUsize::new(0));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let counted = puts.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let lease = move || {
                    axum::Json(serde_json::json!({
                        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": "lease", "namespace": "ns", "resourceVersion": "1"},
                        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                                 "renewTime": MicroTime(Timestamp::now())}
                    }))
                };
                let app = axum::Router::new().route(
                    "/apis/coordination.k8s.io/v1/namespaces/ns/leases/lease",
                    get(move || async move { lease() }).put(move || {
                        counted.fetch_add(1, AtomicOrdering::SeqCst);
                        async move { lease() }
                    }),
                );
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        (config, puts)
    }

    fn elector(config: &kube::Config) -> Elector {
        let client = Client::try_from(config.clone()).unwrap();
        Elector::new(Api::namespaced(client, "ns"), "lease", "me", 15)
    }

    const FAST: Timing = Timing {
        renew_interval: Duration::from_millis(100),
        renew_deadline: Duration::from_secs(1),
    };

    /// The failure seen under load: the controllers' runtime too busy to run the renewal
    /// until the deadline had passed. Here that runtime (the test's one thread) is blocked
    /// outright for three renewal deadlines; the lease must be renewed throughout.
    #[tokio::test(flavor = "current_thread")]
    async fn renewals_go_on_while_the_controllers_runtime_is_blocked() {
        let (config, puts) = lease_server("me");
        let keep = elector(&config).keep_apart(config, FAST, Instant::now());
        tokio::pin!(keep);
        std::thread::sleep(Duration::from_secs(3));
        let renewed = puts.load(AtomicOrdering::SeqCst);
        assert!(
            renewed >= 10,
            "only {renewed} renewals in 3 s at one per 100 ms while the runtime was blocked"
        );
        tokio::select! {
            lost = &mut keep => panic!("lost the lease while busy: {lost}"),
            _ = tokio::time::sleep(Duration::from_millis(300)) => {}
        }
    }

    #[tokio::test]
    async fn a_lease_taken_by_another_replica_ends_keep_apart() {
        let (config, _) = lease_server("other");
        let keep = elector(&config).keep_apart(config, FAST, Instant::now());
        match tokio::time::timeout(Duration::from_secs(5), keep).await {
            Ok(LeaseLost::Taken { holder }) => assert_eq!(holder, "other"),
            other => panic!("expected the lease taken by other, got {other:?}"),
        }
    }
}
