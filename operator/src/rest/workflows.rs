//! `GET /v1/workflows/{workflowId}`: a Workflow's OpenWOP definition.

use axum::extract::{Path, Query, State};

use super::auth::{Caller, Resource, Verb};
use super::error::{ApiError, ErrorBody};
use super::json::Json;
use super::state::RestState;
use super::support::find_workflow;
use super::types::{TenantQuery, WorkflowDefinition};

/// Read a workflow definition.
#[utoipa::path(
    get,
    path = "/v1/workflows/{workflowId}",
    params(("workflowId" = String, Path, description = "OpenWOP workflow id"), TenantQuery),
    responses(
        (status = 200, body = WorkflowDefinition),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn get_workflow(
    State(s): State<RestState>,
    caller: Caller,
    Path(workflow_id): Path<String>,
    Query(q): Query<TenantQuery>,
) -> Result<Json<WorkflowDefinition>, ApiError> {
    let ns = s.tenant(&caller, q.tenant_id.as_deref())?;
    let missing =
        || ApiError::not_found(format!("workflow {workflow_id:?} not found in tenant {ns}"));
    // A caller who may not read workflows there learns nothing about what exists.
    if !s
        .auth
        .allowed(&caller, Verb::Get, Resource::Workflows, &ns)
        .await?
    {
        return Err(missing());
    }
    let wf = find_workflow(&s, &ns, &workflow_id).ok_or_else(missing)?;
    Ok(Json(WorkflowDefinition(
        s.definitions.of(&wf).document.clone(),
    )))
}
