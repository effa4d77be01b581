//! Everything conformance-only in the operator, behind one boundary: the spec's host test
//! seams (`spec/v1/host-sample-test-seams.md`) under `/v1/host/sample/...`, the mock-ai
//! programs, the span store and their shared state.
//!
//! The production path reaches this module through two narrow hooks only, each a no-op with
//! the seams off: [`crate::config::seams`] (what discovery advertises, what a worker pod's env
//! carries) and the [`crate::rest::RunHooks`] that [`run_hooks`] gives `POST /v1/runs` (a
//! staged mock-ai program becomes the new Run's provider mock). No production module imports
//! anything else from here; `crate::app` mounts [`mounted`] and runs [`background`].
//!
//! Mounted only when `conformance.seams.enabled` is set (chart `conformance.seams.enabled`,
//! default false): otherwise none of these paths exists and each answers 404, as the spec asks
//! of production hosts. When mounted, every seam takes a [`seam::SeamCaller`]: an authenticated,
//! non-anonymous caller allowed to create Runs in the namespace the seam acts on. A seam's
//! state that several replicas must agree on lives in JetStream ([`seam::store`]), never in one
//! replica's memory.
//!
//! Each seam is a submodule exposing `routes() -> OpenApiRouter<RestState>`, merged in
//! [`router`].

mod capability_toggle;
mod debug_bundle;
mod emit_reliability;
mod envelope_accept;
mod mock_ai;
mod otel_spans;
mod prompt_wrap;
mod reset;
mod seam;
mod test_events;

use std::sync::Arc;

use utoipa_axum::router::OpenApiRouter;

use crate::config::{OperatorConfig, seams};
use crate::rest::{RestState, RunHooks};

/// Path prefix of every seam (`host-extensions.md` §"Canonical prefixes").
pub const PREFIX: &str = "/v1/host/sample";

/// The seams' routes, to pass to [`super::router`] as `extra` when the seams are enabled.
pub fn router() -> OpenApiRouter<RestState> {
    OpenApiRouter::new()
        .merge(envelope_accept::routes())
        .merge(test_events::routes())
        .merge(reset::routes())
        .merge(capability_toggle::routes())
        .merge(prompt_wrap::routes())
        .merge(emit_reliability::routes())
        .merge(mock_ai::routes())
        .merge(debug_bundle::routes())
        .merge(otel_spans::routes())
}

/// Work the seams need on every replica while the process lives (keeping the capability
/// overlay current); pending forever when the seams are off.
pub async fn background(state: RestState) {
    if seams::enabled(&state.config) {
        capability_toggle::watch_overlay(state).await;
    } else {
        std::future::pending::<()>().await;
    }
}

/// The routes to mount for `config`: the seams when enabled, nothing otherwise.
pub fn mounted(config: &OperatorConfig) -> OpenApiRouter<RestState> {
    if seams::enabled(config) {
        router()
    } else {
        OpenApiRouter::new()
    }
}

/// The run-creation hooks for `config` (`RestState::with_run_hooks`): a staged mock-ai
/// program becomes the new Run's provider mock. `None` with the seams off.
pub fn run_hooks(config: &OperatorConfig) -> Option<Arc<dyn RunHooks>> {
    seams::enabled(config).then(|| Arc::new(mock_ai::StagedPrograms) as Arc<dyn RunHooks>)
}
