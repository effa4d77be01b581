//! `POST /v1/runs` (a `Run` object) and `GET /v1/runs/{runId}` (the RunSnapshot from
//! `Run.status`). Every run is a normal `Run`: `kubectl get runs` shows what the API created.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Resource as _, ResourceExt};
use openwop_crds::{Run, RunSpec, WorkflowRef};
use openwop_protocol::run::snapshot::clamp_recursion_limit;
use openwop_protocol::run::{
    IDEMPOTENCY_KEY_MISMATCH, IDEMPOTENT_REPLAY_HEADER, RunFacts, RunSnapshotDoc, check_inputs,
};
use openwop_protocol::workflow::WorkflowDefinition;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::json::{self, Json};
use super::support::{find_workflow, kube_error, phase, visible_run};
use super::types::{CreateRunRequest, CreateRunResponse};
use super::{ApiError, Caller, ErrorBody, Resource, RestState, Verb};
use crate::config::LABEL_INSTANCE;

pub use openwop_crds::names::{
    ANNOTATION_CREATED_BY, ANNOTATION_METADATA, ANNOTATION_REQUEST_HASH, ANNOTATION_TAGS,
};

fn hash_hex(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())
}

/// The RunSnapshot of a Run: its status through protocol's one mapping, with the OpenWOP
/// workflow id (from the Workflow in the cache when the Run names it by Kubernetes name).
pub fn snapshot_of(s: &RestState, run: &Run) -> RunSnapshotDoc {
    let st = run.status.clone().unwrap_or_default();
    let ts = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.as_ref().map(|t| t.0.to_string())
    };
    let tenant = run.namespace().unwrap_or_default();
    let by_name =
        st.workflow
            .as_deref()
            .or(run.spec.workflow_ref.name.as_deref())
            .and_then(|n| {
                s.workflows.state().into_iter().find(|w| {
                    w.namespace().as_deref() == Some(tenant.as_str()) && w.name_any() == n
                })
            })
            .map(|w| w.spec.id.clone());
    let workflow_id = run
        .spec
        .workflow_ref
        .id
        .clone()
        .or(by_name)
        .or_else(|| st.workflow.clone())
        .or_else(|| run.spec.workflow_ref.name.clone())
        .unwrap_or_default();
    let run_id = run.meta().uid.clone().unwrap_or_default();
    let mut doc = RunSnapshotDoc::from_projection(
        &st.projection(),
        RunFacts {
            run_id: &run_id,
            workflow_id: &workflow_id,
            tenant: &tenant,
            started_at: ts(&st.start_time).or_else(|| {
                run.meta()
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
            }),
            completed_at: ts(&st.completion_time),
            attempts: st.attempts,
        },
    );
    let ann = run.annotations();
    doc.tags = ann
        .get(ANNOTATION_TAGS)
        .and_then(|t| serde_json::from_str(t).ok());
    doc.metadata = ann
        .get(ANNOTATION_METADATA)
        .and_then(|t| serde_json::from_str(t).ok());
    doc.configurable = run
        .spec
        .configurable
        .as_ref()
        .and_then(|c| serde_json::to_value(c).ok());
    doc
}

/// Create a run.
#[utoipa::path(
    post, path = "/v1/runs", request_body = CreateRunRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "same key and body → same run; same key, other body → 409")),
    responses(
        (status = 201, body = CreateRunResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 429, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn create_run(
    State(s): State<RestState>,
    caller: Caller,
    headers: HeaderMap,
    Json(raw): Json<Value>,
) -> Result<Response, ApiError> {
    // Read as sent first: the idempotency hash covers the body, not our reading of it.
    let req: CreateRunRequest = json::from_value(&raw, "POST /v1/runs")?;
    let ns = s.tenant(&caller, req.tenant_id.as_deref())?;
    s.auth
        .authorize(&caller, Verb::Create, Resource::Runs, &ns)
        .await?;
    let wf = find_workflow(&s, &ns, &req.workflow_id).ok_or_else(|| {
        ApiError::not_found(format!(
            "workflow {:?} not found in tenant {ns}",
            req.workflow_id
        ))
        .with_details(json!({"workflowId": req.workflow_id}))
    })?;
    let def =
        WorkflowDefinition::from_value(wf.spec.definition.filled().to_value()).map_err(|e| {
            ApiError::validation(format!(
                "workflow {:?} has an invalid definition ({e}); fix the Workflow first",
                req.workflow_id
            ))
        })?;
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
        Some(c) => Some({
            // The node-execution ceiling is recorded clamped: the run carries what it gets.
            let mut c = c.clone();
            clamp_recursion_limit(&mut c, s.config.limits.max_node_executions).map_err(|e| {
                ApiError::validation(e.to_string())
                    .with_details(json!({"field": "configurable.recursionLimit"}))
            })?;
            serde_json::from_value(Value::Object(c)).map_err(|e| {
                ApiError::validation(format!("configurable: {e}"))
                    .with_details(json!({"field": "configurable"}))
            })?
        }),
    };
    let request_hash = hash_hex(&[raw.to_string().as_bytes(), ns.as_bytes()]);
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty());
    let mut annotations = BTreeMap::from([
        (ANNOTATION_REQUEST_HASH.to_owned(), request_hash.clone()),
        (ANNOTATION_CREATED_BY.to_owned(), caller.username.clone()),
    ]);
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
    let mut labels = BTreeMap::new();
    if !s.config.instance_id.is_empty() {
        labels.insert(LABEL_INSTANCE.to_owned(), s.config.instance_id.clone());
    }
    let wf_name = wf.name_any();
    // An Idempotency-Key names the Run (per caller): a replay on any replica meets the same
    // object, and the API server arbitrates races.
    let (name, generate_name) = match key {
        Some(k) => (
            Some(format!(
                "run-{}",
                &hash_hex(&[caller.username.as_bytes(), k.as_bytes()])[..24]
            )),
            None,
        ),
        None => (None, Some(format!("{}-", truncate_name(&wf_name, 40)))),
    };
    // The run hooks (the conformance seams, when on) may give the Run provider mocks,
    // visible on the Run itself.
    let provider_mocks = match &s.run_hooks {
        Some(h) => {
            let nodes: Vec<String> = wf.spec.nodes.iter().map(|n| n.id.clone()).collect();
            h.provider_mocks(&s, &ns, &nodes).await?
        }
        None => Default::default(),
    };
    let run = Run {
        metadata: ObjectMeta {
            name,
            generate_name,
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
            provider_mocks,
        },
        status: None,
    };
    let api: Api<Run> = Api::namespaced(s.client.clone(), &ns);
    // True when the Idempotency-Key met the Run an earlier identical request created.
    let mut replayed = false;
    let created = match api.create(&PostParams::default(), &run).await {
        Ok(r) => r,
        Err(kube::Error::Api(e)) if e.code == 409 && key.is_some() => {
            let existing = api
                .get(run.metadata.name.as_deref().unwrap_or_default())
                .await
                .map_err(kube_error)?;
            let same = existing
                .annotations()
                .get(ANNOTATION_REQUEST_HASH)
                .is_some_and(|h| *h == request_hash);
            if !same {
                // The spec's code (`idempotency.md` §"Record shape, digest, and lease"), and
                // nothing of the earlier run: a mismatch never hands back the cached answer.
                return Err(ApiError::conflict(
                    IDEMPOTENCY_KEY_MISMATCH,
                    "this Idempotency-Key was already used with a different request body; use a new key",
                ));
            }
            replayed = true;
            existing
        }
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
        h.run_created(&s, &ns, &created).await;
    }
    let body = CreateRunResponse {
        status: phase(&created),
        events_url: format!("/v1/runs/{run_id}/events"),
        status_url: format!("/v1/runs/{run_id}"),
        run_id,
    };
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    if replayed {
        // `rest-endpoints.md`: a response served for a repeated Idempotency-Key says so.
        response
            .headers_mut()
            .insert(IDEMPOTENT_REPLAY_HEADER, HeaderValue::from_static("true"));
    }
    Ok(response)
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
    let mut doc = snapshot_of(&s, &run);
    doc.variables = super::variables::variables_of(&s, &run).await;
    Ok(Json(doc))
}
