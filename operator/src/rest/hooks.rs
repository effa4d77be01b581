//! What `POST /v1/runs` asks of an optional extension at run creation — the conformance
//! seams (`crate::conformance`) are the one implementation. The REST API knows this trait
//! only: with no hooks (the seams off) a run is created exactly as without this module.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use openwop_crds::{ProviderMock, Run};

use super::{ApiError, RestState};

/// Run-creation hooks, installed with [`RestState::with_run_hooks`].
pub trait RunHooks: Send + Sync {
    /// The `spec.providerMocks` a new Run of a workflow with `node_ids` gets in `namespace`
    /// (empty: none).
    fn provider_mocks<'a>(
        &'a self,
        state: &'a RestState,
        namespace: &'a str,
        node_ids: &'a [String],
    ) -> BoxFuture<'a, Result<BTreeMap<String, ProviderMock>, ApiError>>;

    /// The Run exists (created, or met again by an idempotent replay). Cannot fail the
    /// request: the run is there whatever the hook does.
    fn run_created<'a>(
        &'a self,
        state: &'a RestState,
        namespace: &'a str,
        run: &'a Run,
    ) -> BoxFuture<'a, ()>;
}
