//! OpenWOP v1 wire types and the pure protocol logic of openwop-operator.
//!
//! This crate performs no I/O: no Kubernetes, no NATS, no HTTP, no clock reads
//! except where a caller passes a timestamp in. Binaries wire it to the world.
pub mod capabilities;
pub mod emission;
pub mod envelope;
pub mod events;
pub mod graph;
pub mod lenient;
pub mod outcome;
pub mod pipeline;
pub mod recovery;
pub mod redact;
pub mod retry;
pub mod run;
pub mod schedule;
pub mod schema;
pub mod seams;
pub mod text;
pub mod tier1;
pub mod trust;
pub mod vendor;
pub mod workflow;
pub mod workflow_check;
