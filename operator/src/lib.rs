//! openwop-operator: Workflow and Run controllers, the discovery endpoint, metrics and leader
//! election. [`app::run`] wires these to a cluster; the binary (`main.rs`) only parses its
//! command line and config and calls it.

pub mod app;
pub mod config;
/// Conformance-only: the spec's host test seams, behind one boundary.
pub mod conformance;
pub mod controller;
pub mod definitions;
pub mod discovery;
pub mod events;
pub mod jetstream;
pub mod kube_events;
pub mod leader;
pub mod metrics;
pub mod names;
pub mod pod;
pub mod projection;
pub mod reasons;
pub mod rest;
pub mod signing_key;
pub mod snapshot;
pub mod status;
pub mod toolservers;
pub mod ui;
pub mod versioning;
pub mod webhooks;
