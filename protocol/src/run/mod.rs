//! The run contract: everything the operator, the worker and the CLI must agree on about
//! one Run, defined once.
//!
//! * [`subjects`] — run identity on NATS: subject and stream names, keyed by the runId;
//! * [`snapshot`] — the run snapshot the operator writes and the worker reads;
//! * [`host`] — the host profile: limits and postures served as capabilities and enforced by
//!   the worker;
//! * [`status`] — the status values a Run shows (phase, pending interrupt, error);
//! * [`projection`] — the event → status projection (the operator's live status and the
//!   worker's termination summary are the same fold);
//! * [`sequence`] — applying a run's events strictly in sequence order (holes are read back,
//!   never skipped);
//! * [`exit`] — the worker's exit codes;
//! * [`ending`] — the terminal event, as the worker or the operator appends it;
//! * [`nodes`] — the node-type registry: validation, dispatch and discovery read one list;
//! * [`telemetry`] — the span attributes naming a run, read back by the operator;
//! * [`stream_modes`] — which events each `streamMode` of the event stream admits;
//! * [`options`] — the reserved `configurable` keys the host honours (`runTimeoutMs`);
//! * [`pause`] — pausing a run: the request, what the log says;
//! * [`gate`] — the nodes that wait for a person: what they wait for, the events of the
//!   wait and of its resolution;
//! * [`quorum`] — approvals that need several accepts: the one fold of the votes;
//! * [`variables`] — a run's workflow variables: seeding, per-node visibility, the served bag;
//! * [`token`] — signed interrupt tokens (`/v1/interrupts/{token}`): mint and verify;
//! * [`waits`] — durable waits (long delays, child runs): what the worker records and the
//!   operator wakes the run on.
//!
//! Run identity is the runId: the Run object's uid, unique per object and never reused. A
//! Run deleted and re-created under the same name is a new run with its own subject, its own
//! event ids and its own log.

pub mod api;
pub mod correlation;
pub mod debug_bundle;
pub mod ending;
pub mod env;
pub mod exit;
pub mod gate;
pub mod host;
pub mod nodes;
pub mod options;
pub mod pause;
pub mod projection;
pub mod quorum;
pub mod sequence;
pub mod snapshot;
pub mod status;
pub mod stream_modes;
pub mod subjects;
pub mod telemetry;
pub mod token;
pub mod variables;
pub mod waits;

// What other crates name most, one level deep (`openwop_protocol::run::RunPhase`).
pub use api::{
    IDEMPOTENCY_IN_FLIGHT, IDEMPOTENCY_KEY_MISMATCH, IDEMPOTENT_REPLAY_HEADER, RunFacts,
    RunSnapshotDoc, check_inputs,
};
pub use debug_bundle::{BundleHost, BundleInput, MAX_BUNDLE_BYTES, debug_bundle};
pub use projection::Projection;
pub use status::{AnswerMismatch, PendingInterrupt, PendingQuestion, RunPhase};
pub use subjects::events_subject;
