//! `POST /v1/host/sample/test/mock-ai/program`, `GET .../mock-ai/last-dispatch-budget` and
//! `GET .../mock-ai/dispatch-budgets` (`host-sample-test-seams.md`; RFC 0032 / 0033).
//!
//! The suite stages a program for a node id BEFORE it creates the run. The program is kept
//! in the JetStream key-value bucket [`BUCKET`] (every replica sees it), keyed by tenant
//! (namespace) and node id, and applied by `POST /v1/runs` ([`super::super::runs`]) to
//! every Run it creates for a workflow with that node: the Run's `spec.providerMocks`
//! carries it, so `kubectl get run -o yaml` shows exactly what the mock will answer, and
//! the worker plays it like any other provider mock. A program stays until it is staged
//! again for the node (the suite restages before every run) or the bucket is cleared.
//!
//! The budgets are not recorded by the seam: the worker records every provider call's
//! `maxTokens` in the run's log (`log.appended` `fields.providerResponse`), and the seams
//! read the log of the last run the program was applied to and project it
//! ([`openwop_protocol::retry::journal::dispatch_budgets`]).

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use futures::future::BoxFuture;
use openwop_crds::{ProviderMock, Run};
use openwop_protocol::events::RunEventDoc;
use openwop_protocol::retry::dispatch_budgets;
use openwop_protocol::seams::{ProgrammedCall, staged_mock};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::seam::{SeamCaller, store};
use crate::rest::log::read_events;
use crate::rest::{ApiError, ErrorBody, Json, RestState, RunHooks, find_run};

/// The key-value bucket of staged programs (`test/reset` clears it).
pub const BUCKET: &str = "openwop-seam-mock-ai";

/// Longest node id a program may name.
const MAX_NODE_ID_CHARS: usize = 256;

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new()
        .routes(routes!(program))
        .routes(routes!(last_dispatch_budget))
        .routes(routes!(dispatch_budgets_of))
}

/// `POST .../mock-ai/program` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgramRequest {
    /// The node whose provider calls the program answers (the fixture's node id).
    pub node_id: String,
    /// One entry per expected provider call: `{stopReason?, content?, refusalText?,
    /// outputTokens?, inputTokens?}`.
    #[schema(value_type = Vec<Object>)]
    pub program: Vec<ProgrammedCall>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProgramResponse {
    pub ok: bool,
    /// Entries staged.
    pub count: usize,
}

/// What the bucket holds per (tenant, node).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Staged {
    node_id: String,
    mock: ProviderMock,
    /// The last Run (uid) the program was applied to: the budgets seams read its log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_run_id: Option<String>,
}

/// Key of (namespace, node): node ids may hold any character, bucket keys may not.
fn key(namespace: &str, node_id: &str) -> String {
    format!("{namespace}.{}", hex::encode(node_id.as_bytes()))
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    tracing::warn!(error = %e, bucket = BUCKET, "test seams: the mock-ai program store");
    ApiError::unavailable(
        "the mock-ai program store is unavailable; retry shortly",
        std::time::Duration::from_secs(2),
    )
}

async fn get_staged(
    kv: &async_nats::jetstream::kv::Store,
    namespace: &str,
    node_id: &str,
) -> Result<Option<Staged>, ApiError> {
    let Some(raw) = kv.get(key(namespace, node_id)).await.map_err(unavailable)? else {
        return Ok(None);
    };
    // Written only by this module; an entry another version wrote is treated as absent.
    Ok(serde_json::from_slice(&raw).ok())
}

async fn put_staged(
    kv: &async_nats::jetstream::kv::Store,
    namespace: &str,
    staged: &Staged,
) -> Result<(), ApiError> {
    let bytes = serde_json::to_vec(staged).map_err(unavailable)?;
    kv.put(key(namespace, &staged.node_id), bytes.into())
        .await
        .map_err(unavailable)?;
    Ok(())
}

/// Stage a mock-provider program for a node, before the run is created.
#[utoipa::path(
    post, path = "/v1/host/sample/test/mock-ai/program", request_body = ProgramRequest,
    params(("tenantId" = Option<String>, Query, description = "namespace; defaults to the caller's ServiceAccount namespace")),
    responses((status = 200, body = ProgramResponse), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = []))
)]
async fn program(
    State(s): State<RestState>,
    caller: SeamCaller,
    Json(req): Json<ProgramRequest>,
) -> Result<Json<ProgramResponse>, ApiError> {
    let ProgramRequest {
        node_id,
        program: calls,
    } = req;
    if node_id.is_empty() || node_id.chars().count() > MAX_NODE_ID_CHARS {
        return Err(ApiError::validation(format!(
            "nodeId must be a non-empty string of at most {MAX_NODE_ID_CHARS} characters: the id of the workflow node whose provider calls the program answers"
        ))
        .with_details(json!({"field": "nodeId"})));
    }
    let mock = staged_mock(&calls).map_err(|e| {
        ApiError::validation(format!(
            "program{}: {}",
            e.pointer.trim_start_matches("/program"),
            e.reason
        ))
        .with_details(json!({"field": e.pointer.trim_start_matches('/')}))
    })?;
    let kv = store(&s, BUCKET).await?;
    put_staged(
        &kv,
        &caller.namespace,
        &Staged {
            node_id: node_id.clone(),
            mock,
            last_run_id: None,
        },
    )
    .await?;
    tracing::info!(namespace = %caller.namespace, node_id = %node_id, calls = calls.len(), caller = %caller.caller.username, "test seam: mock-ai program staged");
    Ok(Json(ProgramResponse {
        ok: true,
        count: calls.len(),
    }))
}

/// `POST /v1/runs`'s hook while the seams are on ([`super::run_hooks`]): the programs
/// staged for a workflow's nodes become the new Run's `spec.providerMocks`, and the Run is
/// recorded as the one the budgets seams read.
pub struct StagedPrograms;

impl RunHooks for StagedPrograms {
    fn provider_mocks<'a>(
        &'a self,
        state: &'a RestState,
        namespace: &'a str,
        node_ids: &'a [String],
    ) -> BoxFuture<'a, Result<BTreeMap<String, ProviderMock>, ApiError>> {
        Box::pin(provider_mocks_for(state, namespace, node_ids))
    }

    fn run_created<'a>(
        &'a self,
        state: &'a RestState,
        namespace: &'a str,
        run: &'a Run,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mocks = &run.spec.provider_mocks;
            let run_id = run.metadata.uid.as_deref().unwrap_or_default();
            if mocks.is_empty() {
                return;
            }
            // The run exists whatever happens here: a failed record only leaves the budgets
            // seams reading the previous run, so it is logged, not returned.
            if let Err(e) = record_run(state, namespace, mocks, run_id).await {
                tracing::warn!(run_id = %run_id, error = %e.body.message, "test seams: recording the run of a mock-ai program");
            }
        })
    }
}

/// The programs staged for the nodes of a workflow in `namespace`, as `spec.providerMocks`.
async fn provider_mocks_for(
    s: &RestState,
    namespace: &str,
    node_ids: &[String],
) -> Result<BTreeMap<String, ProviderMock>, ApiError> {
    let kv = store(s, BUCKET).await?;
    let mut out = BTreeMap::new();
    for n in node_ids {
        if let Some(staged) = get_staged(&kv, namespace, n).await? {
            out.insert(n.clone(), staged.mock);
        }
    }
    Ok(out)
}

/// Records that run `run_id` plays the programs of `node_ids`: the budgets seams read its
/// log. A program restaged meanwhile keeps its own (empty) record.
async fn record_run(
    s: &RestState,
    namespace: &str,
    mocks: &BTreeMap<String, ProviderMock>,
    run_id: &str,
) -> Result<(), ApiError> {
    let kv = store(s, BUCKET).await?;
    for (node, mock) in mocks {
        if let Some(mut staged) = get_staged(&kv, namespace, node).await?
            && staged.mock == *mock
        {
            staged.last_run_id = Some(run_id.to_owned());
            put_staged(&kv, namespace, &staged).await?;
        }
    }
    Ok(())
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
pub struct BudgetQuery {
    /// The programmed node.
    pub node_id: Option<String>,
    /// Namespace; defaults to the caller's ServiceAccount namespace.
    // Documented here, read by `SeamCaller`.
    #[allow(dead_code)]
    pub tenant_id: Option<String>,
}

/// Per-call budgets of the last run the node's program was applied to (empty when none).
async fn budgets(
    s: &RestState,
    caller: &SeamCaller,
    q: &BudgetQuery,
) -> Result<Vec<u32>, ApiError> {
    let Some(node_id) = q.node_id.as_deref().filter(|n| !n.is_empty()) else {
        return Err(ApiError::validation(
            "the nodeId query parameter is required: the node whose program's calls to report",
        )
        .with_details(json!({"field": "nodeId"})));
    };
    let kv = store(s, BUCKET).await?;
    let Some(run_id) = get_staged(&kv, &caller.namespace, node_id)
        .await?
        .and_then(|st| st.last_run_id)
    else {
        return Ok(Vec::new());
    };
    // A run deleted since has no budgets to report.
    let Some(run) = find_run(s, &run_id).await else {
        return Ok(Vec::new());
    };
    let events: Vec<RunEventDoc> = read_events(s, &run, None, None)
        .await?
        .events
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect();
    Ok(dispatch_budgets(&events, node_id))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastBudgetResponse {
    /// `maxTokens` of the node's most recent provider call; null before any call.
    pub max_tokens: Option<u32>,
}

/// The output budget of the programmed node's most recent provider call.
#[utoipa::path(
    get, path = "/v1/host/sample/test/mock-ai/last-dispatch-budget", params(BudgetQuery),
    responses((status = 200, body = LastBudgetResponse), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = []))
)]
async fn last_dispatch_budget(
    State(s): State<RestState>,
    caller: SeamCaller,
    Query(q): Query<BudgetQuery>,
) -> Result<Json<LastBudgetResponse>, ApiError> {
    let b = budgets(&s, &caller, &q).await?;
    Ok(Json(LastBudgetResponse {
        max_tokens: b.last().copied(),
    }))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DispatchBudget {
    pub max_tokens: Option<u32>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DispatchBudgetsResponse {
    pub node_id: String,
    /// Every provider call of the node, in call order.
    pub attempts: Vec<DispatchBudget>,
}

/// The output budget of every provider call of the programmed node, in call order.
#[utoipa::path(
    get, path = "/v1/host/sample/test/mock-ai/dispatch-budgets", params(BudgetQuery),
    responses((status = 200, body = DispatchBudgetsResponse), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = []))
)]
async fn dispatch_budgets_of(
    State(s): State<RestState>,
    caller: SeamCaller,
    Query(q): Query<BudgetQuery>,
) -> Result<Json<DispatchBudgetsResponse>, ApiError> {
    let b = budgets(&s, &caller, &q).await?;
    Ok(Json(DispatchBudgetsResponse {
        node_id: q.node_id.unwrap_or_default(),
        attempts: b
            .into_iter()
            .map(|m| DispatchBudget {
                max_tokens: Some(m),
            })
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This helper's seams are in the OpenAPI document the seams router contributes, with
    /// every schema they reference, the bearer requirement and their query parameters.
    #[test]
    fn the_seams_are_documented_with_their_schemas() {
        let (_, doc) = crate::conformance::router().split_for_parts();
        let doc = serde_json::to_value(&doc).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        for (path, method) in [
            ("/v1/host/sample/test/mock-ai/program", "post"),
            ("/v1/host/sample/test/mock-ai/last-dispatch-budget", "get"),
            ("/v1/host/sample/test/mock-ai/dispatch-budgets", "get"),
            ("/v1/host/sample/test/debug-bundle/export", "post"),
        ] {
            let op = &paths[path][method];
            assert!(
                op.is_object(),
                "{method} {path} missing: {:?}",
                paths.keys()
            );
            assert_eq!(op["security"], json!([{"bearer": []}]), "{path}");
        }
        let params = &paths["/v1/host/sample/test/mock-ai/dispatch-budgets"]["get"]["parameters"];
        assert!(
            params
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "nodeId" && p["in"] == "query"),
            "{params}"
        );
        let text = doc.to_string();
        for name in [
            "ProgramRequest",
            "ProgramResponse",
            "LastBudgetResponse",
            "DispatchBudgetsResponse",
            "ExportRequest",
        ] {
            assert!(
                text.contains(&format!("#/components/schemas/{name}")),
                "{name} not referenced"
            );
            assert!(
                doc["components"]["schemas"][name].is_object(),
                "{name} not defined"
            );
        }
    }

    #[test]
    fn keys_hold_any_node_id_and_keep_tenants_apart() {
        assert_eq!(
            key("team-a", "structured-call"),
            "team-a.737472756374757265642d63616c6c"
        );
        assert_ne!(key("team-a", "n"), key("team-b", "n"));
        // Dots, spaces and wildcards in a node id never reach the bucket key.
        let k = key("t", "a.b *>");
        assert!(k[2..].chars().all(|c| c.is_ascii_hexdigit()), "{k}");
    }
}
