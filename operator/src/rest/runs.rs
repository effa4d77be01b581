//! `POST /v1/runs` (a `Run` object) and `GET /v1/runs/{runId}` (the RunSnapshot from
//! `Run.status`, brought up to the run's event log). Every run is a normal `Run`:
//! `kubectl get runs` shows what the API created.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Resource as _, ResourceExt};
use openwop_crds::{Run, RunSpec, WorkflowRef};
use openwop_protocol::egress::EgressPolicy;
use openwop_protocol::run::options::run_timeout_ms;
use openwop_protocol::run::snapshot::clamp_recursion_limit;
use openwop_protocol::run::{RunSnapshotDoc, check_inputs};
use serde_json::{Value, json};

use super::auth::{Caller, Resource, Verb};
use super::error::{ApiError, ErrorBody};
use super::idempotency::{Scope, idempotent, op};
use super::json::{Json, Sent};
use super::state::RestState;
use super::support::{find_workflow, kube_error, phase, visible_run};
use super::types::{CreateRunRequest, CreateRunResponse};
use openwop_crds::names::LABEL_INSTANCE;

pub use openwop_crds::names::{
    ANNOTATION_CREATED_BY, ANNOTATION_METADATA, ANNOTATION_SCOPE_ID, ANNOTATION_TAGS,
};

/// Longest `scopeId` kept (an annotation value; the id is opaque to this host).
const MAX_SCOPE_ID: usize = 256;

/// Create a run.
#[utoipa::path(
    post, path = "/v1/runs", request_body = CreateRunRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "same key and body → the same answer again (`openwop-Idempotent-Replay: true`); same key, other body → 409 `idempotency_key_mismatch`; while the first is served → 409 `idempotency_in_flight`")),
    responses(
        (status = 201, body = CreateRunResponse),
        (status = 400, body = ErrorBody, description = "`validation_error` (malformed or unknown field, unknown workflowId, inputs, configurable.runTimeoutMs), `capability_required` (callbackUrl), `residency_unavailable`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 429, body = ErrorBody),
        (status = 501, body = ErrorBody, description = "`capability_not_provided`: mode, evalSuiteRef or agentId")
    ),
    security(("bearer" = []))
)]
pub async fn create_run(
    State(s): State<RestState>,
    caller: Caller,
    headers: HeaderMap,
    body: Sent<CreateRunRequest>,
) -> Result<Response, ApiError> {
    let req = body.value;
    refuse_unserved_options(&req)?;
    let ns = s.tenant(&caller, req.tenant_id.as_deref())?;
    s.auth
        .authorize(&caller, Verb::Create, Resource::Runs, &ns)
        .await?;
    let scope = Scope {
        namespace: &ns,
        operation: op::CREATE_RUN,
        principal: &caller.username,
    };
    idempotent(&s, &headers, scope, &[body.canonical.as_bytes()], || {
        create(&s, &caller, &ns, &req)
    })
    .await
}

/// Creates the Run `req` asks for in `ns` (checked and authorized).
async fn create(
    s: &RestState,
    caller: &Caller,
    ns: &str,
    req: &CreateRunRequest,
) -> Result<Response, ApiError> {
    let ns = ns.to_owned();
    // `rest-endpoints.md`: an unknown workflowId is a bad request, not a missing resource.
    let wf = find_workflow(s, &ns, &req.workflow_id).ok_or_else(|| {
        ApiError::validation(format!(
            "workflowId {:?} names no workflow in tenant {ns}; list the tenant's workflows \
             (kubectl get workflows -n {ns}) and use one's id",
            req.workflow_id
        ))
        .with_details(json!({"field": "workflowId", "workflowId": req.workflow_id}))
    })?;
    let stored = s.definitions.of(&wf);
    if let Err(e) = &stored.read {
        return Err(ApiError::validation(format!(
            "workflow {:?} has an invalid definition ({e}); fix the Workflow first",
            req.workflow_id
        )));
    }
    let def = &stored.definition;
    let inputs = req.inputs.clone().unwrap_or_default();
    let problems = check_inputs(def.variables.as_deref().unwrap_or(&[]), &inputs);
    if !problems.is_empty() {
        return Err(ApiError::validation(format!(
            "the inputs do not match workflow {:?}: {}",
            req.workflow_id,
            problems
                .iter()
                .map(|p| p.problem.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ))
        .with_details(json!({"fields": problems})));
    }
    let configurable = match &req.configurable {
        None => None,
        Some(c) => {
            // Refused here, never at run time (`run-options.md`, RFC 0058); the worker caps
            // the value at the host's limits.maxRunDurationMs.
            run_timeout_ms(&Value::Object(c.clone())).map_err(|e| {
                ApiError::validation(e.to_string())
                    .with_details(json!({"field": format!("configurable.{}", e.key())}))
            })?;
            // The node-execution ceiling is recorded clamped: the run carries what it gets.
            let mut c = c.clone();
            clamp_recursion_limit(&mut c, s.config.limits.max_node_executions).map_err(|e| {
                ApiError::validation(e.to_string())
                    .with_details(json!({"field": "configurable.recursionLimit"}))
            })?;
            Some(serde_json::from_value(Value::Object(c)).map_err(|e| {
                ApiError::validation(format!("configurable: {e}"))
                    .with_details(json!({"field": "configurable"}))
            })?)
        }
    };
    let mut annotations =
        BTreeMap::from([(ANNOTATION_CREATED_BY.to_owned(), caller.username.clone())]);
    if let Some(t) = &req.tags {
        annotations.insert(
            ANNOTATION_TAGS.into(),
            serde_json::to_string(t).unwrap_or_default(),
        );
    }
    if let Some(m) = &req.metadata {
        annotations.insert(
            ANNOTATION_METADATA.into(),
            Value::Object(m.clone()).to_string(),
        );
    }
    if let Some(scope) = &req.scope_id {
        annotations.insert(ANNOTATION_SCOPE_ID.into(), scope.clone());
    }
    let mut labels = BTreeMap::new();
    if !s.config.instance_id.is_empty() {
        labels.insert(LABEL_INSTANCE.to_owned(), s.config.instance_id.clone());
    }
    let wf_name = wf.name_any();
    // The run hooks (the conformance seams, when on) may give the Run provider mocks,
    // visible on the Run itself.
    let provider_mocks = match &s.run_hooks {
        Some(h) => {
            let nodes: Vec<String> = wf.spec.nodes.iter().map(|n| n.id.clone()).collect();
            h.provider_mocks(s, &ns, &nodes).await?
        }
        None => Default::default(),
    };
    let run = Run {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", truncate_name(&wf_name, 40))),
            namespace: Some(ns.clone()),
            labels: Some(labels).filter(|l| !l.is_empty()),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: RunSpec {
            workflow_ref: WorkflowRef {
                name: Some(wf_name),
                id: None,
            },
            inputs: req.inputs.clone().map(Value::Object),
            configurable,
            timeout_seconds: None,
            answers: Vec::new(),
            cancel: None,
            pause: None,
            provider_mocks,
        },
        status: None,
    };
    let api: Api<Run> = Api::namespaced(s.client.clone(), &ns);
    let created = match api.create(&PostParams::default(), &run).await {
        Ok(r) => r,
        Err(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => {
            return Err(ApiError::validation(format!(
                "the Run was refused: {}",
                e.message
            )));
        }
        Err(e) => return Err(kube_error(e)),
    };
    let run_id = created.meta().uid.clone().unwrap_or_default();
    tracing::info!(run_id = %run_id, namespace = %ns, run = %created.name_any(), caller = %caller.username, "run created through the REST API");
    if let Some(h) = &s.run_hooks {
        h.run_created(s, &ns, &created).await;
    }
    let body = CreateRunResponse {
        status: phase(&created),
        events_url: format!("/v1/runs/{run_id}/events"),
        status_url: format!("/v1/runs/{run_id}"),
        run_id,
        scope_id: created.annotations().get(ANNOTATION_SCOPE_ID).cloned(),
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// Refuses what the create request asks for that this host cannot honour, by the spec's
/// code, before anything is created: a field the spec defines is never silently ignored.
fn refuse_unserved_options(req: &CreateRunRequest) -> Result<(), ApiError> {
    if let Some(scope) = &req.scope_id
        && !(1..=MAX_SCOPE_ID).contains(&scope.chars().count())
    {
        return Err(ApiError::validation(format!(
            "scopeId is {} characters long; use 1 to {MAX_SCOPE_ID}",
            scope.chars().count()
        ))
        .with_details(json!({"field": "scopeId"})));
    }
    if let Some(url) = &req.callback_url {
        // A URL the egress guard refuses is a bad request whatever this host supports.
        EgressPolicy::default()
            .https_only()
            .check_url(url)
            .map_err(|e| {
                ApiError::validation(format!("callbackUrl is refused: {e}"))
                    .with_details(json!({"field": "callbackUrl"}))
            })?;
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "capability_required",
            "callbackUrl asks this host to deliver the signed token of an external-event \
             interrupt, which it does not do yet: leave callbackUrl out and read the token \
             from the run's snapshot (GET /v1/runs/{runId})",
        )
        .with_details(json!({"field": "callbackUrl"})));
    }
    if req.residency.is_some() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "residency_unavailable",
            "this host pins runs to no region (it advertises no dataResidency): leave \
             residency out, or run where the region is offered",
        )
        .with_details(json!({"field": "residency"})));
    }
    for (field, set) in [
        ("mode", req.mode.is_some()),
        ("evalSuiteRef", req.eval_suite_ref.is_some()),
        ("agentId", req.agent_id.is_some()),
    ] {
        if set {
            return Err(ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "capability_not_provided",
                format!(
                    "{field} asks for an eval or agent-rooted run, which this host does not \
                     serve: start a workflow run (workflowId) instead"
                ),
            )
            .with_details(json!({"field": field})));
        }
    }
    Ok(())
}

fn truncate_name(s: &str, max: usize) -> &str {
    let cut = s.len().min(max);
    s[..cut].trim_end_matches(['-', '.'])
}

/// Read a run's state.
#[utoipa::path(
    get, path = "/v1/runs/{runId}",
    params(("runId" = String, Path, description = "the Run's runId (its uid)")),
    responses(
        (status = 200, body = RunSnapshotDoc),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn get_run(
    State(s): State<RestState>,
    caller: Caller,
    Path(run_id): Path<String>,
) -> Result<Json<RunSnapshotDoc>, ApiError> {
    let run = visible_run(&s, &caller, &run_id).await?;
    let mut doc = super::view::fresh_snapshot(&s, &run).await;
    doc.variables = super::variables::variables_of(&s, &run).await;
    doc.interrupt = super::interrupts::snapshot_interrupt(&s, &caller, &run, &doc).await;
    Ok(Json(doc))
}
