//! The OpenWOP run worker: executes one Run's workflow graph and makes every step a
//! `RunEventDoc` on NATS JetStream (deterministic ids, gap-free sequence, replay on restart).
//! What it shares with the operator (the snapshot it reads, the host profile it enforces,
//! subjects, exit codes, the termination summary) is `openwop_protocol::run`.
//!
//! * [`eventlog`] — the run log: dedup by eventId, sequence stamping, redaction, durable publish;
//! * [`nats`] — JetStream stream, publisher with retry/backoff, ordered read-back;
//! * [`executor`] — the run loop and the node kinds (passthrough, mock agent, prompt);
//! * [`providers`] — one LLM client per provider and model;
//! * [`reasoning`] — the MEUP reasoning-transparency subject;
//! * [`stop`] — SIGTERM: stop at a safe point (and cancel);
//! * [`pause`] — the operator's pause: stop at a safe point, record `run.paused`;
//! * [`tools`] — the run's ToolServers and their MCP sessions;
//! * [`telemetry`] — OTLP spans for run, node, provider call and envelope (off by default);
//! * [`mod@run`] — one process's run, from its parsed environment to its exit code (the
//!   binary only parses [`openwop_protocol::run::env::WorkerEnv`] and calls [`run()`]).

pub mod eventlog;
pub mod executor;
pub mod nats;
pub mod pause;
pub mod providers;
pub mod reasoning;
pub mod run;
pub mod stop;
pub mod telemetry;
pub mod tools;

pub use openwop_protocol::run::exit;
pub use run::{RunError, run};
