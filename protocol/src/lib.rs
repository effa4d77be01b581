//! OpenWOP v1 wire types and the pure protocol logic of openwop-operator.
//!
//! This crate performs no I/O: no Kubernetes, no NATS, no HTTP, no clock reads
//! except where a caller passes a timestamp in. Binaries wire it to the world.
pub mod as_written;
pub mod capabilities;
pub mod egress;
pub mod emission;
pub mod envelope;
pub mod events;
pub mod graph;
pub mod hmac;
pub mod http;
pub mod jcs;
pub mod lenient;
pub mod limits;
pub mod outcome;
pub mod pipeline;
pub mod recovery;
pub mod redact;
pub mod retry;
pub mod run;
pub mod schedule;
pub mod schema;
// The pure logic of the conformance-only host test seams: built only with the `conformance`
// feature (the operator, whose seams are a runtime option of the shipped binary, and the
// CLI's `envelope accept`).
#[cfg(feature = "conformance")]
pub mod seams;
pub mod structural;
pub mod text;
pub mod tier1;
pub mod tools;
pub mod trust;
pub mod v2;
pub mod vendor;
pub mod webhook;
pub mod workflow;
pub mod workflow_check;
