//! What every reconcile is given ([`Context`]: the client, config, caches and the shared
//! per-namespace state) and how it fails ([`Error`], retried by [`error_policy`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::runtime::controller::Action;
use openwop_protocol::workflow_check::NodeRegistry;

use super::caches::{Caches, Superseded};
use super::slots::StartGate;
use crate::config::OperatorConfig;
use crate::metrics::Metrics;

/// Reconciler errors (retried with backoff by `error_policy`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("run snapshot: {0}")]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    #[error("finalizer: {0}")]
    Finalizer(String),
    #[error("{kind} {name} has no namespace")]
    NoNamespace { kind: &'static str, name: String },
    #[error("NATS credentials (natsCredentials.dir, chart nats.external.credentialsSecret): {0}")]
    NatsCredentials(#[from] openwop_nats::AuthError),
    #[error("run events: {0}")]
    Events(String),
}

impl Error {
    /// A 409 from the apiserver (stale resourceVersion), also when wrapped by the finalizer.
    pub fn is_conflict(&self) -> bool {
        match self {
            Error::Kube(kube::Error::Api(s)) => s.code == 409,
            Error::Finalizer(m) => m.contains("409"),
            _ => false,
        }
    }

    /// Metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "Kube",
            Error::Snapshot(_) => "Snapshot",
            Error::Finalizer(_) => "Finalizer",
            Error::NoNamespace { .. } => "NoNamespace",
            Error::NatsCredentials(_) => "NatsCredentials",
            Error::Events(_) => "Events",
        }
    }
}

/// Shared state of the reconcilers.
pub struct Context {
    pub client: Client,
    pub config: Arc<OperatorConfig>,
    pub registry: Arc<NodeRegistry>,
    pub metrics: Metrics,
    /// Where Kubernetes Events go (published off the reconcile's path).
    pub events: crate::kube_events::EventSink,
    /// Injected clock, so tests are deterministic.
    pub now: fn() -> Timestamp,
    /// The watch caches the Run reconciler reads (worker pods, snapshots, Workflows, worker
    /// ServiceAccounts, Runs), fed by the binary; `Caches::default()` reads from the API
    /// server instead.
    pub caches: Caches,
    /// The NATS credentials last applied per namespace (`natsCredentials`) and when, so a
    /// worker start does not re-apply an unchanged copy.
    pub nats_copies: NatsCopies,
    /// JetStream of the run events (set by the event consumer once connected), for the
    /// finalizer's purge of a deleted Run's subjects; `None` without `events.natsUrl`.
    pub jetstream: Option<crate::jetstream::JetStreamSlot>,
    /// The worker ServiceAccount applied per namespace (or being applied), and when.
    pub worker_accounts: WorkerAccounts,
    /// The worker slots reserved per namespace (the exact concurrency limit).
    pub starts: StartGate,
    /// Run copies this reconciler's status writes replaced (skipped when a cache delivers
    /// them late).
    pub superseded: Superseded,
    /// The Workflow definitions read so far (once per generation), shared with the REST API.
    pub definitions: crate::definitions::Definitions,
}

/// Per namespace: the worker ServiceAccount apply, once it succeeded, and when (one shared
/// apply for the concurrent first starts in a namespace).
pub type WorkerAccounts =
    std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::OnceCell<Instant>>>>;

/// Per namespace: the NATS credentials of the copy last applied, and when, behind a lock the
/// concurrent starts in the namespace take in turn (one apply for all of them).
pub type NatsCopies = std::sync::Mutex<
    std::collections::HashMap<
        String,
        Arc<tokio::sync::Mutex<Option<(openwop_nats::NatsAuth, Instant)>>>,
    >,
>;

/// Requeue policy after an error: log, count, retry later. Never crash-loops.
pub fn error_policy<K>(_obj: Arc<K>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed("controller", err.reason());
    if err.is_conflict() {
        // Someone wrote the object meanwhile; its watch event brings the fresh copy.
        tracing::debug!(error = %err, "reconcile raced a concurrent write");
        return Action::requeue(Duration::from_secs(1));
    }
    tracing::warn!(error = %err, "reconcile failed");
    Action::requeue(Duration::from_secs(15))
}
