//! `/v1/runs...`: create (a `Run` object), read (the RunSnapshot from `Run.status`), events
//! (JetStream, as JSON, SSE or long-poll), cancel and interrupt answers (patches of the Run's
//! spec). Every run is a normal `Run`: `kubectl get runs` shows what the API created.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Resource as _, ResourceExt};
use openwop_crds::{InterruptAnswer, Run, RunSpec, WorkflowRef};
use openwop_nats::reader::{From, LogMessage, RunLog};
use openwop_protocol::run::api::{
    IDEMPOTENCY_KEY_MISMATCH, IDEMPOTENT_REPLAY_HEADER, RunFacts, RunSnapshotDoc, check_inputs,
};
use openwop_protocol::run::projection::Projection;
use openwop_protocol::run::status::{AnswerMismatch, RunPhase};
use openwop_protocol::run::subjects::events_subject;
use openwop_protocol::workflow::WorkflowDefinition;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::{ApiError, Caller, ErrorBody, Resource, RestState, Verb, find_workflow};
use crate::config::LABEL_INSTANCE;

pub use openwop_crds::names::{
    ANNOTATION_CREATED_BY, ANNOTATION_METADATA, ANNOTATION_REQUEST_HASH, ANNOTATION_TAGS,
};
/// How long a reader waits for this replica's cache to see a Run just created elsewhere.
const CACHE_GRACE: Duration = Duration::from_secs(2);
/// Longest long-poll wait (`timeout` query).
const MAX_POLL: Duration = Duration::from_secs(30);

/// `POST /v1/runs` body (`RunOptions`).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateRunRequest {
    /// OpenWOP id (or Kubernetes name) of a Workflow in the tenant's namespace.
    pub workflow_id: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub inputs: Option<Map<String, Value>>,
    /// Per-run options (e.g. `escalationThreshold`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub configurable: Option<Map<String, Value>>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    /// The Kubernetes namespace of the run; defaults to the caller's ServiceAccount namespace.
    #[serde(default)]
    pub tenant_id: Option<String>,
}

/// `201` body of `POST /v1/runs`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateRunResponse {
    pub run_id: String,
    #[schema(value_type = String)]
    pub status: RunPhase,
    pub events_url: String,
    pub status_url: String,
}

/// Body of cancel and interrupt answers.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStatusResponse {
    pub run_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    #[schema(value_type = String)]
    pub status: RunPhase,
}

/// `POST /v1/runs/{runId}/interrupts/{nodeId}` body.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolveInterruptRequest {
    /// Clarification: an object of question id → answer. Approval: `true` / `false`,
    /// `"approve"` / `"reject"`, or `{"approved": bool}`.
    #[schema(value_type = Object)]
    pub resume_value: Value,
    /// `untrusted` when the answer relays content the caller did not author; an untrusted
    /// answer is recorded but can never approve.
    #[serde(default)]
    pub content_trust: Option<String>,
    #[serde(default)]
    pub comment: Option<String>,
}

/// `{events: [...]}` (JSON events and long-poll).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventsResponse {
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<Value>,
    /// The run's terminal event is among the events read.
    pub is_complete: bool,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
pub struct PollQuery {
    /// Return events after this run sequence.
    pub last_sequence: Option<u64>,
    /// Seconds to wait for a first new event (at most 30).
    pub timeout: Option<u64>,
}

/// Reads a JSON body with the size bound, as spec errors (400 / 413).
pub async fn json_body<T: serde::de::DeserializeOwned>(
    body: Body,
    max: usize,
) -> Result<T, ApiError> {
    let bytes: Bytes = axum::body::to_bytes(body, max).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the request body is larger than {max} bytes"),
        )
        .with_details(json!({"maxBytes": max}))
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::validation(format!(
            "the request body is not valid JSON for this endpoint: {e}"
        ))
        .with_details(json!({"line": e.line(), "column": e.column()}))
    })
}

fn hash_hex(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())
}

/// A Run in this replica's cache by runId (its uid), waiting briefly for a Run just created.
pub(crate) async fn find_run(s: &RestState, run_id: &str) -> Option<Arc<Run>> {
    let deadline = tokio::time::Instant::now() + CACHE_GRACE;
    loop {
        if let Some(r) = s
            .runs
            .state()
            .into_iter()
            .find(|r| r.meta().uid.as_deref() == Some(run_id))
        {
            return Some(r);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The run if the caller may `get` runs in its namespace; otherwise the same 404 as for a
/// run that does not exist.
pub(crate) async fn visible_run(
    s: &RestState,
    caller: &Caller,
    run_id: &str,
) -> Result<Arc<Run>, ApiError> {
    let missing = || ApiError::not_found(format!("run {run_id:?} not found"));
    let run = find_run(s, run_id).await.ok_or_else(missing)?;
    let ns = run.namespace().unwrap_or_default();
    if !s
        .auth
        .allowed(caller, Verb::Get, Resource::Runs, &ns)
        .await?
    {
        return Err(missing());
    }
    Ok(run)
}

fn phase(run: &Run) -> RunPhase {
    run.status
        .as_ref()
        .and_then(|s| s.phase)
        .unwrap_or_default()
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
    body: Body,
) -> Result<Response, ApiError> {
    let max = s.config.rest.max_body_bytes;
    let raw: Value = json_body(body, max).await?;
    let req: CreateRunRequest = serde_json::from_value(raw.clone()).map_err(|e| {
        ApiError::validation(format!("invalid run request: {e}"))
            .with_details(json!({"field": "body"}))
    })?;
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
    let def = WorkflowDefinition::from_value(wf.spec.definition()).map_err(|e| {
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
        Some(c) => Some(
            serde_json::from_value(Value::Object(c.clone())).map_err(|e| {
                ApiError::validation(format!("configurable: {e}"))
                    .with_details(json!({"field": "configurable"}))
            })?,
        ),
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
    // Conformance seams: a program staged for a node of this workflow
    // (`mock-ai/program`) becomes the Run's provider mock, visible on the Run itself.
    let provider_mocks = if s.config.conformance.seams.enabled {
        let nodes: Vec<String> = wf.spec.nodes.iter().map(|n| n.id.clone()).collect();
        super::seams::mock_ai::provider_mocks_for(&s, &ns, &nodes).await?
    } else {
        Default::default()
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
    // The run exists whatever happens here: a failed record only leaves the budgets seams
    // reading the previous run, so it is logged, not returned.
    if !created.spec.provider_mocks.is_empty()
        && s.config.conformance.seams.enabled
        && let Err(e) =
            super::seams::mock_ai::record_run(&s, &ns, &created.spec.provider_mocks, &run_id).await
    {
        tracing::warn!(run_id = %run_id, error = %e.body.message, "test seams: recording the run of a mock-ai program");
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
        response.headers_mut().insert(
            IDEMPOTENT_REPLAY_HEADER,
            axum::http::HeaderValue::from_static("true"),
        );
    }
    Ok(response)
}

fn truncate_name(s: &str, max: usize) -> &str {
    let cut = s.len().min(max);
    s[..cut].trim_end_matches(['-', '.'])
}

fn kube_error(e: kube::Error) -> ApiError {
    tracing::warn!(error = %e, "Kubernetes API request failed");
    match e {
        kube::Error::Api(ae) if ae.code == 409 => {
            ApiError::conflict("conflict", "the run changed meanwhile; retry the request")
        }
        _ => ApiError::unavailable(
            "the Kubernetes API did not answer; retry shortly",
            Duration::from_secs(2),
        ),
    }
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
    Ok(Json(snapshot_of(&s, &run)))
}

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

/// Answer a pending interrupt (clarification answers, approve / reject).
#[utoipa::path(
    post, path = "/v1/runs/{runId}/interrupts/{nodeId}",
    request_body = ResolveInterruptRequest,
    params(("runId" = String, Path), ("nodeId" = String, Path)),
    responses(
        (status = 202, body = RunStatusResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn resolve_interrupt(
    State(s): State<RestState>,
    caller: Caller,
    Path((run_id, node_id)): Path<(String, String)>,
    body: Body,
) -> Result<Response, ApiError> {
    let req: ResolveInterruptRequest = json_body(body, s.config.rest.max_body_bytes).await?;
    let cached = visible_run(&s, &caller, &run_id).await?;
    let ns = cached.namespace().unwrap_or_default();
    s.auth
        .authorize(&caller, Verb::Patch, Resource::Runs, &ns)
        .await?;
    let api: Api<Run> = Api::namespaced(s.client.clone(), &ns);
    let mut run = (*cached).clone();
    // The patch is conditional on the version read, so a concurrent answer is never
    // overwritten; when this replica's cache lagged (the operator just wrote the status),
    // the Run is read again from the API server and the answer re-checked against it.
    let mut attempt = 0;
    loop {
        attempt += 1;
        let answers = answers_with(&run, &run_id, &node_id, req.clone())?;
        match api
            .patch(
                &run.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"resourceVersion": run.resource_version()},
                    "spec": {"answers": answers},
                })),
            )
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 4 => {
                run = api.get(&run.name_any()).await.map_err(kube_error)?;
            }
            Err(e) => return Err(kube_error(e)),
        }
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(RunStatusResponse {
            run_id,
            node_id: Some(node_id),
            status: phase(&run),
        }),
    )
        .into_response())
}

/// The Run's answers with the answer to its interrupt at `node_id` appended, or why not.
fn answers_with(
    run: &Run,
    run_id: &str,
    node_id: &str,
    req: ResolveInterruptRequest,
) -> Result<Vec<InterruptAnswer>, ApiError> {
    // Several branches may wait at once (and others still run): any pending one can be answered.
    let pending = run
        .status
        .as_ref()
        .filter(|_| !phase(run).is_terminal())
        .and_then(|st| st.pending_interrupts.iter().find(|p| p.node_id == node_id))
        .cloned();
    let Some(pending) = pending else {
        return Err(ApiError::conflict(
            "interrupt_not_pending",
            format!("run {run_id} has no interrupt waiting at node {node_id:?}"),
        )
        .with_details(json!({"runStatus": phase(run).as_str()})));
    };
    let answer = build_answer(&pending, req)?;
    if run
        .spec
        .answers
        .iter()
        .any(|a| a.interrupt_id == answer.interrupt_id)
    {
        return Err(ApiError::conflict(
            "interrupt_already_answered",
            format!("interrupt {} is already answered", answer.interrupt_id),
        ));
    }
    let mut answers = run.spec.answers.clone();
    answers.push(answer);
    Ok(answers)
}

/// The answer to append for `pending`, or 400 naming what is wrong.
pub fn build_answer(
    pending: &openwop_protocol::run::status::PendingInterrupt,
    req: ResolveInterruptRequest,
) -> Result<InterruptAnswer, ApiError> {
    let trust = match req.content_trust.as_deref() {
        None => None,
        Some(t @ ("trusted" | "untrusted")) => Some(t.to_owned()),
        Some(other) => {
            return Err(ApiError::validation(format!(
                "contentTrust {other:?} must be trusted or untrusted"
            ))
            .with_details(json!({"field": "contentTrust"})));
        }
    };
    let base = InterruptAnswer {
        interrupt_id: pending.interrupt_id.clone(),
        value: None,
        approved: None,
        comment: req.comment,
        content_trust: trust,
    };
    if pending.is_approval() {
        let approved = match &req.resume_value {
            Value::Bool(b) => Some(*b),
            Value::String(s) => match s.as_str() {
                "approve" | "approved" => Some(true),
                "reject" | "rejected" => Some(false),
                _ => None,
            },
            Value::Object(o) => o.get("approved").and_then(Value::as_bool).or_else(|| {
                match o.get("decision").and_then(Value::as_str) {
                    Some("approve" | "approved") => Some(true),
                    Some("reject" | "rejected") => Some(false),
                    _ => None,
                }
            }),
            _ => None,
        };
        let Some(approved) = approved else {
            return Err(ApiError::validation(
                "this interrupt waits for an approval: resumeValue must be true / false, \
                 \"approve\" / \"reject\" or {\"approved\": bool}",
            )
            .with_details(json!({"field": "resumeValue"})));
        };
        return Ok(InterruptAnswer {
            approved: Some(approved),
            ..base
        });
    }
    let Value::Object(value) = req.resume_value else {
        return Err(ApiError::validation(
            "this interrupt asks questions: resumeValue must be an object of question id → answer",
        )
        .with_details(json!({"field": "resumeValue"})));
    };
    if let Err(AnswerMismatch::Questions {
        known,
        unknown,
        missing,
        ..
    }) = pending.check_answer(Some(&value))
    {
        return Err(ApiError::validation(format!(
            "resumeValue must answer exactly the questions {}",
            known.join(", ")
        ))
        .with_details(json!({"field": "resumeValue", "missing": missing, "unknown": unknown})));
    }
    Ok(InterruptAnswer {
        value: Some(Value::Object(value)),
        ..base
    })
}

/// Where a run's events are.
fn run_subject(run: &Run) -> String {
    events_subject(
        &run.namespace().unwrap_or_default(),
        run.meta().uid.as_deref().unwrap_or_default(),
    )
}

/// Whether a run event ends the run (the projection says its phase is terminal).
pub fn is_terminal_event(doc: &Value) -> bool {
    let mut p = Projection::default();
    p.apply(doc);
    p.phase.is_some_and(RunPhase::is_terminal)
}

/// Decoded run events after `after` (run sequence), in order.
struct Decoded {
    doc: Value,
    sequence: u64,
    pending: u64,
}

fn decode(m: LogMessage) -> Option<Decoded> {
    let doc: Value = serde_json::from_slice(&m.payload).ok()?;
    let sequence = doc.get("sequence").and_then(Value::as_u64)?;
    Some(Decoded {
        doc,
        sequence,
        pending: m.pending,
    })
}

async fn open_log(s: &RestState, run: &Run) -> Result<RunLog, ApiError> {
    open_subject_log(s, run_subject(run)).await
}

async fn open_subject_log(s: &RestState, subject: String) -> Result<RunLog, ApiError> {
    let js = s.jetstream().await?;
    match RunLog::open(
        &js,
        &s.config.worker.events_stream,
        vec![subject],
        From::Start,
    )
    .await
    {
        Ok(l) => Ok(l),
        Err(openwop_nats::reader::ReadError::NoStream { .. }) => Err(ApiError::not_found(
            "no events yet: the run-events stream does not exist",
        )),
        Err(e) => {
            tracing::warn!(error = %e, "reading a run's events");
            Err(ApiError::unavailable(
                "the event stream is unavailable; retry shortly",
                Duration::from_secs(2),
            ))
        }
    }
}

/// Events after `after`, read until caught up, then (with `wait`) until a first new one.
pub(crate) async fn read_events(
    s: &RestState,
    run: &Run,
    after: Option<u64>,
    wait: Option<Duration>,
) -> Result<EventsResponse, ApiError> {
    let log = open_log(s, run).await?;
    let mut out = Vec::new();
    let mut complete = false;
    let deadline = wait.map(|w| tokio::time::Instant::now() + w);
    if log.pending_at_start == 0 && wait.is_none() {
        return Ok(EventsResponse {
            events: out,
            is_complete: false,
        });
    }
    let mut msgs = std::pin::pin!(log.messages());
    loop {
        let next = match deadline {
            Some(d) if out.is_empty() => match tokio::time::timeout_at(d, msgs.next()).await {
                Ok(n) => n,
                Err(_) => break,
            },
            // Caught up and not waiting: a short bound in case the count moved under us.
            _ => match tokio::time::timeout(Duration::from_secs(5), msgs.next()).await {
                Ok(n) => n,
                Err(_) => break,
            },
        };
        let Some(m) = next else { break };
        let m = m.map_err(|e| {
            tracing::warn!(error = %e, "reading a run's events");
            ApiError::unavailable("the event stream failed; retry", Duration::from_secs(2))
        })?;
        let left = m.pending;
        if let Some(d) = decode(m)
            && after.is_none_or(|a| d.sequence > a)
        {
            complete |= is_terminal_event(&d.doc);
            out.push(d.doc);
        }
        if left == 0 && (!out.is_empty() || deadline.is_none() || complete) {
            break;
        }
    }
    Ok(EventsResponse {
        events: out,
        is_complete: complete || phase(run).is_terminal() && wait.is_none(),
    })
}

/// Every event stored on `subject` (a run's events subject), in order, read once to the end
/// (the conformance event-log seam's read; no stream yet reads as no events).
pub async fn read_subject_events(s: &RestState, subject: String) -> Result<Vec<Value>, ApiError> {
    let log = match open_subject_log(s, subject).await {
        Ok(l) => l,
        Err(e) if e.status == StatusCode::NOT_FOUND => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    if log.pending_at_start == 0 {
        return Ok(out);
    }
    let mut msgs = std::pin::pin!(log.messages());
    // A short bound per message in case the count moved under us.
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(5), msgs.next()).await {
        let m = m.map_err(|e| {
            tracing::warn!(error = %e, "reading a run's events");
            ApiError::unavailable("the event stream failed; retry", Duration::from_secs(2))
        })?;
        let left = m.pending;
        if let Some(d) = decode(m) {
            out.push(d.doc);
        }
        if left == 0 {
            break;
        }
    }
    Ok(out)
}

fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    match headers.get("last-event-id").and_then(|v| v.to_str().ok()) {
        None | Some("") => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| {
            ApiError::validation(format!(
                "Last-Event-ID {v:?} is not an event id of this stream (the run sequence numbers sent as `id:`)"
            ))
        }),
    }
}

/// A run's events: SSE (`text/event-stream`), or `{events}` with `Accept: application/json`.
#[utoipa::path(
    get, path = "/v1/runs/{runId}/events",
    params(("runId" = String, Path), ("Last-Event-ID" = Option<String>, Header, description = "resume after this event (run sequence)")),
    responses(
        (status = 200, description = "SSE stream (id = run sequence, event = type, data = RunEventDoc), or JSON", content((EventsResponse = "application/json"), (String = "text/event-stream"))),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn run_events(
    State(s): State<RestState>,
    caller: Caller,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let run = visible_run(&s, &caller, &run_id).await?;
    let after = last_event_id(&headers)?;
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if accept.contains("application/json") && !accept.contains("text/event-stream") {
        return Ok(Json(read_events(&s, &run, after, None).await?).into_response());
    }
    let log = open_log(&s, &run).await?;
    let keepalive = Duration::from_secs(s.config.rest.keepalive_seconds);
    let stream = sse_stream(s.clone(), run, log, after);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(keepalive).text("keepalive"))
        .into_response())
}

/// SSE events of the run after `after`, ending after the terminal event (or, when the run
/// ended without one in the log, once the log is read and the status is terminal).
fn sse_stream(
    s: RestState,
    run: Arc<Run>,
    log: RunLog,
    after: Option<u64>,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    let empty = log.pending_at_start == 0;
    let uid = run.meta().uid.clone().unwrap_or_default();
    let msgs = Box::pin(log.messages());
    futures::stream::unfold(
        (msgs, false, empty),
        move |(mut msgs, done, mut caught_up)| {
            let s = s.clone();
            let uid = uid.clone();
            async move {
                if done {
                    return None;
                }
                loop {
                    // While caught up, check now and then whether the run ended without a
                    // terminal event in its log (e.g. failed before its worker started).
                    let next = if caught_up {
                        match tokio::time::timeout(Duration::from_secs(5), msgs.next()).await {
                            Ok(n) => n,
                            Err(_) => {
                                let ended = s
                                    .runs
                                    .state()
                                    .into_iter()
                                    .find(|r| r.meta().uid.as_deref() == Some(uid.as_str()))
                                    .is_none_or(|r| phase(&r).is_terminal());
                                if ended {
                                    return None;
                                }
                                continue;
                            }
                        }
                    } else {
                        msgs.next().await
                    };
                    let m = match next? {
                        Ok(m) => m,
                        Err(e) => {
                            tracing::warn!(error = %e, "SSE: reading a run's events");
                            return None;
                        }
                    };
                    caught_up = m.pending == 0;
                    let Some(d) = decode(m) else { continue };
                    if after.is_some_and(|a| d.sequence <= a) {
                        continue;
                    }
                    let terminal = is_terminal_event(&d.doc);
                    let t = d
                        .doc
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("message")
                        .to_owned();
                    let ev = Event::default()
                        .id(d.sequence.to_string())
                        .event(t)
                        .data(d.doc.to_string());
                    let _ = d.pending;
                    return Some((Ok(ev), (msgs, terminal, caught_up)));
                }
            }
        },
    )
}

/// Long-poll for events after `lastSequence`.
#[utoipa::path(
    get, path = "/v1/runs/{runId}/events/poll",
    params(("runId" = String, Path), PollQuery),
    responses(
        (status = 200, body = EventsResponse),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn poll_events(
    State(s): State<RestState>,
    caller: Caller,
    Path(run_id): Path<String>,
    Query(q): Query<PollQuery>,
) -> Result<Json<EventsResponse>, ApiError> {
    let run = visible_run(&s, &caller, &run_id).await?;
    let wait = Duration::from_secs(q.timeout.unwrap_or(25)).min(MAX_POLL);
    let mut resp = read_events(&s, &run, q.last_sequence, Some(wait)).await?;
    if resp.events.is_empty() {
        // Nothing new within the wait: complete only if the run has ended.
        resp.is_complete = find_run(&s, &run_id)
            .await
            .is_some_and(|r| phase(&r).is_terminal());
    }
    Ok(Json(resp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use openwop_protocol::run::status::{PendingInterrupt, PendingQuestion};

    fn pending(kind: &str, qs: &[&str]) -> PendingInterrupt {
        serde_json::from_value(json!({
            "interruptId": "i1", "nodeId": "n", "kind": kind,
            "questions": qs.iter().map(|q| json!({"id": q, "question": "?"})).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    fn req(v: Value, trust: Option<&str>) -> ResolveInterruptRequest {
        ResolveInterruptRequest {
            resume_value: v,
            content_trust: trust.map(str::to_owned),
            comment: None,
        }
    }

    #[test]
    fn approvals_accept_the_usual_spellings_and_record_trust() {
        let p = pending("approval", &[]);
        for (v, want) in [
            (json!(true), true),
            (json!("reject"), false),
            (json!({"approved": true}), true),
            (json!({"decision": "approve"}), true),
        ] {
            assert_eq!(
                build_answer(&p, req(v.clone(), None)).unwrap().approved,
                Some(want),
                "{v}"
            );
        }
        let a = build_answer(&p, req(json!(true), Some("untrusted"))).unwrap();
        assert_eq!(a.content_trust.as_deref(), Some("untrusted"));
        let e = build_answer(&p, req(json!({"region": "eu"}), None)).unwrap_err();
        assert_eq!(e.body.error, "validation_error");
        let e = build_answer(&p, req(json!(true), Some("maybe"))).unwrap_err();
        assert!(e.body.message.contains("contentTrust"), "{e}");
    }

    #[test]
    fn clarification_answers_must_match_the_questions() {
        let p = pending("clarification", &["region", "tier"]);
        let a = build_answer(&p, req(json!({"region": "eu", "tier": "gold"}), None)).unwrap();
        assert_eq!(a.value, Some(json!({"region": "eu", "tier": "gold"})));
        assert_eq!(a.interrupt_id, "i1");
        let e = build_answer(&p, req(json!({"region": "eu", "zone": 1}), None)).unwrap_err();
        assert_eq!(e.body.details.as_ref().unwrap()["missing"], json!(["tier"]));
        assert_eq!(e.body.details.as_ref().unwrap()["unknown"], json!(["zone"]));
        let e = build_answer(&p, req(json!("eu"), None)).unwrap_err();
        assert!(e.body.message.contains("object"), "{e}");
        let _ = PendingQuestion {
            id: String::new(),
            question: String::new(),
        };
    }

    #[test]
    fn terminal_events_follow_the_projection() {
        assert!(is_terminal_event(
            &json!({"type": "run.completed", "sequence": 3, "payload": {}})
        ));
        assert!(!is_terminal_event(
            &json!({"type": "node.completed", "sequence": 2, "payload": {}})
        ));
    }
}
