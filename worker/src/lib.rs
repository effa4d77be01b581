//! The OpenWOP run worker: executes one Run's workflow graph and makes every step a
//! `RunEventDoc` on NATS JetStream (deterministic ids, gap-free sequence, replay on restart).
//!
//! * [`snapshot`] — the run snapshot the operator mounts;
//! * [`graph`] — the workflow definition as an ordered graph (edges, conditions, trigger rules);
//! * [`eventlog`] — the run log: dedup by eventId, sequence stamping, redaction, durable publish;
//! * [`nats`] — JetStream stream, publisher with retry/backoff, ordered read-back;
//! * [`executor`] — node types, retry router + envelope pipeline, interrupts, replay;
//! * [`reasoning`] — the MEUP reasoning-transparency subject;
//! * [`stop`] — SIGTERM: stop at a safe point (and cancel);
//! * [`summary`] — the termination message the operator reads;
//! * [`telemetry`] — OTLP spans for run, node, provider call and envelope (off by default).

pub mod eventlog;
pub mod executor;
pub mod graph;
pub mod nats;
pub mod reasoning;
pub mod snapshot;
pub mod stop;
pub mod summary;
pub mod telemetry;

/// Exit code: the run is terminal and recorded in the stream.
pub const EXIT_TERMINAL: i32 = 0;
/// Exit code: the worker crashed (e.g. events could not be made durable); the operator retries.
pub const EXIT_CRASHED: i32 = 1;
/// Exit code: the snapshot or the worker's configuration is unusable.
pub const EXIT_BAD_INPUT: i32 = 2;
/// Exit code: suspended waiting for input or approval (operator `EXIT_SUSPENDED`).
pub const EXIT_SUSPENDED: i32 = 3;
/// Exit code: stopped by SIGTERM at a safe point (128 + SIGTERM); a later worker replays.
pub const EXIT_STOPPED: i32 = 143;
