//! `POST /v1/runs/{runId}/cancel`: a patch of the Run's spec (`spec.cancel`); the
//! controllers stop the run.

use axum::extract::{Path, State};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use openwop_crds::Run;
use openwop_protocol::run::RunPhase;
use serde_json::json;

use super::json::Json;
use super::support::{kube_error, phase, visible_run};
use super::types::RunStatusResponse;
use super::{ApiError, Caller, ErrorBody, Resource, RestState, Verb};

/// Cancel a run.
#[utoipa::path(
    post, path = "/v1/runs/{runId}/cancel",
    params(("runId" = String, Path)),
    responses(
        (status = 200, body = RunStatusResponse),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn cancel_run(
    State(s): State<RestState>,
    caller: Caller,
    Path(run_id): Path<String>,
) -> Result<Json<RunStatusResponse>, ApiError> {
    let run = visible_run(&s, &caller, &run_id).await?;
    let ns = run.namespace().unwrap_or_default();
    s.auth
        .authorize(&caller, Verb::Patch, Resource::Runs, &ns)
        .await?;
    let p = phase(&run);
    match p {
        RunPhase::Cancelled | RunPhase::Cancelling => {
            return Ok(Json(RunStatusResponse {
                run_id,
                node_id: None,
                status: p,
            }));
        }
        RunPhase::Completed | RunPhase::Failed => {
            return Err(ApiError::conflict(
                "run_terminal",
                format!("run {run_id} already ended ({p}); there is nothing to cancel"),
            )
            .with_details(json!({"runStatus": p.as_str()})));
        }
        _ => {}
    }
    let api: Api<Run> = Api::namespaced(s.client.clone(), &ns);
    api.patch(
        &run.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"cancel": true}})),
    )
    .await
    .map_err(kube_error)?;
    Ok(Json(RunStatusResponse {
        run_id,
        node_id: None,
        status: RunPhase::Cancelling,
    }))
}
