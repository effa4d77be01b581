//! The Workflow and Run reconcilers.
//!
//! * [`workflow`] — Workflow validation (`Ready` / `Invalid`);
//! * [`state`] — one Run reconcile as a value: what it reads, the status it drafts, the one
//!   place where it acts;
//! * [`run`] — the Run entry point: the finalizer of earlier releases, the step a reconcile takes, terminal phases and TTLs, timeout;
//! * [`start`] — snapshot, workflow resolution, the concurrency queue and worker start;
//! * [`slots`] — the exact per-namespace concurrency limit: slots reserved in memory, pods
//!   created outside the lock;
//! * [`caches`] — the watch caches the reconciler reads instead of GETs, and the queue order;
//! * [`feed`] — the process's one Run and one Workflow watch, read by the REST API and the
//!   controllers alike;
//! * [`triggers`] — which watch events start a reconcile, and what the caches keep;
//! * [`observe`] — the running worker: exit codes, termination summary, crashes and backoff;
//! * [`cancel`] — `spec.cancel` (and its cascade to child runs);
//! * [`pause`] — `spec.pause`: the live worker asked to stop at a safe point, no pod while
//!   paused;
//! * [`pause_start`] — the snapshot a pause-recording or resuming worker starts from;
//! * [`waits`] — durable waits: timers woken at their time, child runs created and their
//!   outcomes written back;
//! * [`tools`] — the ToolServers a run's LLM nodes name, resolved for its snapshot, and the
//!   run's copy of their header values;
//! * [`namespace`] — what a Run namespace needs: the worker ServiceAccount and the NATS
//!   credentials copy;
//! * [`ending`] — the terminal event of a run the operator ended itself;
//! * [`departed`] — a deleted Run's events purged once it is gone (Runs carry no finalizer);
//! * [`context`] — what every reconcile is given ([`Context`]) and its [`Error`];
//! * [`common`] — conditions, the status draft [`common::Draft`], Events.
//!
//! Condition types and reasons are [`crate::reasons`].

mod caches;
mod cancel;
mod common;
mod context;
pub mod departed;
mod ending;
mod feed;
mod namespace;
mod observe;
mod pause;
mod pause_start;
mod run;
mod slots;
mod start;
mod state;
mod tools;
mod triggers;
mod waits;
mod workflow;

pub use caches::{CacheWriters, Caches, Superseded, pod_triggers, slim_pod};
pub use common::{backoff_seconds, end_by_stream};
pub use context::{Context, Error, NatsCopies, WorkerAccounts, error_policy};
pub use feed::Feed;
pub use run::reconcile_run;
pub use slots::StartGate;
pub use triggers::{changes, pod_key, run_key, slim};
pub use workflow::reconcile_workflow;

pub use openwop_crds::names::RUN_FINALIZER;
