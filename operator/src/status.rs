//! Writing a Run's status: the one write both writers (the reconciler and the event
//! consumer) make.

use kube::Resource;
use kube::api::{Api, PostParams};
use openwop_crds::{Run, RunStatus};

use crate::names::MANAGER;

/// Writes a Run's whole status, as computed from the version `resource_version` names: a 409
/// when the Run changed since (the caller folds again from the fresh copy), a 404 when it is
/// gone. Both writers of a Run's status (the reconciler and the event consumer) write through
/// here.
///
/// Why a replace of the status subresource and not a server-side apply: the status has one
/// writer identity ([`MANAGER`]) and each write carries all of it under the precondition, which
/// is what a replace means; the API server spends less CPU on it (no managed-fields merge):
/// 0.5-1.3 ms less per write on the mini-cluster (docs/bench-log.md, "The API server's cost per request").
pub async fn write_run_status(
    runs: &Api<Run>,
    name: &str,
    resource_version: Option<String>,
    status: &RunStatus,
) -> kube::Result<Run> {
    let body = serde_json::json!({
        "apiVersion": Run::api_version(&()), "kind": Run::kind(&()),
        "metadata": {"name": name, "resourceVersion": resource_version},
        "status": status,
    });
    let body = serde_json::to_vec(&body).map_err(kube::Error::SerdeError)?;
    let params = PostParams {
        dry_run: false,
        field_manager: Some(MANAGER.to_owned()),
    };
    // `Api::replace_status` wants a whole Run; the status subresource takes only the status
    // from the body (the API server keeps the stored spec and metadata), so send just that.
    let request = kube::core::Request::new(runs.resource_url())
        .replace_subresource("status", name, &params, body)
        .map_err(kube::Error::BuildRequest)?;
    runs.clone().into_client().request::<Run>(request).await
}
