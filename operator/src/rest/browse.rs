//! Reads the web UI needs that OpenWOP's REST API lacks, documented in `/v1/openapi.json` like
//! the rest (and usable by any client that would otherwise read `Run` objects or NATS):
//!
//! * `GET /v1/runs`: a tenant's runs, newest first, filtered and paginated from this replica's
//!   cache; each item is the run's RunSnapshot exactly as `GET /v1/runs/{runId}` serves it.
//! * `GET /v1/tenants`: the namespaces whose runs the caller may list, with what it may do there.
//! * `GET /v1/runs/{runId}/reasoning`: the run's reasoning lane (`openwop.reasoning.<ns>.<runId>`),
//!   kept apart from its events as everywhere else.

use std::collections::BTreeSet;

use axum::Json;
use axum::extract::{Path, Query, State};
use k8s_openapi::jiff::Timestamp;
use kube::{Resource as _, ResourceExt};
use openwop_crds::Run;
use openwop_protocol::run::api::RunSnapshotDoc;
use openwop_protocol::run::status::RunPhase;
use serde::{Deserialize, Serialize};
use serde_json::json;

use openwop_protocol::run::subjects::reasoning_subject;

use super::auth::{Caller, Resource, Verb};
use super::error::{ApiError, ErrorBody};
use super::state::RestState;
use super::support::{phase, visible_run};
use super::view::snapshot_of;

/// Default page size of `GET /v1/runs`.
pub const DEFAULT_PAGE: usize = 50;
/// Largest page size of `GET /v1/runs`.
pub const MAX_PAGE: usize = 500;
/// Most reasoning-lane messages one read returns (the lane is rate-limited at the source).
pub const MAX_LANE_ENTRIES: usize = 10_000;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
pub struct ListRunsQuery {
    /// Namespace to list; defaults to the caller's ServiceAccount namespace.
    pub tenant_id: Option<String>,
    /// Only runs in this status (e.g. `running`, `waiting-input`, `failed`); comma-separated
    /// for several.
    pub status: Option<String>,
    /// Only runs of this workflow (OpenWOP id).
    pub workflow_id: Option<String>,
    /// Page size (1..500, default 50).
    pub limit: Option<usize>,
    /// `nextCursor` of the previous page.
    pub cursor: Option<String>,
}

/// A run of `GET /v1/runs`: its RunSnapshot, with the Kubernetes name and creation time.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunListItem {
    #[serde(flatten)]
    pub snapshot: RunSnapshotDoc,
    /// The `Run` object's name (`kubectl get run <name>`).
    pub name: String,
    pub created_at: String,
}

/// `GET /v1/runs` body.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunList {
    pub runs: Vec<RunListItem>,
    /// Runs matching the filters, all pages together.
    pub total: usize,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The order key of a run: newest first, then by uid (a cursor is the key of the last item
/// of a page, so pages stay consistent while runs are created).
fn key(run: &Run) -> (Timestamp, String) {
    (
        run.meta()
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH),
        run.meta().uid.clone().unwrap_or_default(),
    )
}

fn cursor_of(k: &(Timestamp, String)) -> String {
    format!("{}~{}", k.0.as_millisecond(), k.1)
}

fn parse_cursor(c: &str) -> Result<(Timestamp, String), ApiError> {
    let bad = || {
        ApiError::validation(format!(
            "cursor {c:?} is not a nextCursor of this endpoint; start again without a cursor"
        ))
        .with_details(json!({"field": "cursor"}))
    };
    let (ms, uid) = c.split_once('~').ok_or_else(bad)?;
    let ms: i64 = ms.parse().map_err(|_| bad())?;
    Ok((
        Timestamp::from_millisecond(ms).map_err(|_| bad())?,
        uid.to_owned(),
    ))
}

/// List a tenant's runs.
#[utoipa::path(
    get, path = "/v1/runs",
    params(ListRunsQuery),
    responses(
        (status = 200, body = RunList),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn list_runs(
    State(s): State<RestState>,
    caller: Caller,
    Query(q): Query<ListRunsQuery>,
) -> Result<Json<RunList>, ApiError> {
    let ns = s.tenant(&caller, q.tenant_id.as_deref())?;
    s.auth
        .authorize(&caller, Verb::List, Resource::Runs, &ns)
        .await?;
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(
            ApiError::validation(format!("limit {limit} must be from 1 to {MAX_PAGE}"))
                .with_details(json!({"field": "limit"})),
        );
    }
    let statuses: Option<BTreeSet<String>> = q
        .status
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(|s| s.split(',').map(|p| p.trim().to_owned()).collect());
    if let Some(st) = &statuses
        && let Some(bad) = st
            .iter()
            .find(|p| !RunPhase::ALL.iter().any(|k| k.as_str() == p.as_str()))
    {
        let known: Vec<&str> = RunPhase::ALL.iter().map(|k| k.as_str()).collect();
        return Err(ApiError::validation(format!(
            "status {bad:?} is not a run status ({})",
            known.join(", ")
        ))
        .with_details(json!({"field": "status"})));
    }
    let after = q.cursor.as_deref().map(parse_cursor).transpose()?;
    let workflow = q.workflow_id.as_deref().filter(|w| !w.is_empty());
    let mut matching: Vec<_> = s
        .runs
        .state()
        .into_iter()
        .filter(|r| r.namespace().as_deref() == Some(ns.as_str()))
        .filter(|r| {
            statuses
                .as_ref()
                .is_none_or(|st| st.contains(phase(r).as_str()))
        })
        .map(|r| (key(&r), r))
        .collect();
    // Newest first.
    matching.sort_by(|a, b| b.0.cmp(&a.0));
    // The workflow id comes from the snapshot (one mapping); computed only while filtering.
    let mut items = Vec::new();
    let mut total = 0;
    let mut next_cursor = None;
    for (k, run) in &matching {
        let snap = if workflow.is_some() {
            let snap = snapshot_of(&s, run);
            if Some(snap.workflow_id.as_str()) != workflow {
                continue;
            }
            Some(snap)
        } else {
            None
        };
        total += 1;
        if after.as_ref().is_some_and(|a| k >= a) {
            continue;
        }
        if items.len() == limit {
            next_cursor.get_or_insert_with(|| {
                items
                    .last()
                    .map(|i: &(String, RunListItem)| i.0.clone())
                    .unwrap_or_default()
            });
            continue;
        }
        let snapshot = snap.unwrap_or_else(|| snapshot_of(&s, run));
        items.push((
            cursor_of(k),
            RunListItem {
                snapshot,
                name: run.name_any(),
                created_at: k.0.to_string(),
            },
        ));
    }
    Ok(Json(RunList {
        runs: items.into_iter().map(|(_, i)| i).collect(),
        total,
        next_cursor,
    }))
}

/// A namespace of `GET /v1/tenants`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tenant {
    pub tenant_id: String,
    /// The caller may create runs here.
    pub can_create_runs: bool,
    /// The caller may answer interrupts and cancel runs here (RBAC `patch` on runs).
    pub can_update_runs: bool,
}

/// `GET /v1/tenants` body.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantList {
    pub tenants: Vec<Tenant>,
}

/// The tenants (namespaces with workflows or runs of this operator, and the caller's own
/// ServiceAccount namespace) whose runs the caller may list.
#[utoipa::path(
    get, path = "/v1/tenants",
    responses((status = 200, body = TenantList), (status = 401, body = ErrorBody)),
    security(("bearer" = []))
)]
pub async fn list_tenants(
    State(s): State<RestState>,
    caller: Caller,
) -> Result<Json<TenantList>, ApiError> {
    let mut names: BTreeSet<String> = s
        .runs
        .state()
        .iter()
        .filter_map(|r| r.namespace())
        .chain(s.workflows.state().iter().filter_map(|w| w.namespace()))
        .collect();
    names.extend(caller.service_account_namespace.clone());
    if !s.config.watch_namespace.is_empty() {
        names.retain(|n| *n == s.config.watch_namespace);
    }
    let mut tenants = Vec::new();
    for ns in names {
        if !s
            .auth
            .allowed(&caller, Verb::List, Resource::Runs, &ns)
            .await?
        {
            continue;
        }
        tenants.push(Tenant {
            can_create_runs: s
                .auth
                .allowed(&caller, Verb::Create, Resource::Runs, &ns)
                .await?,
            can_update_runs: s
                .auth
                .allowed(&caller, Verb::Patch, Resource::Runs, &ns)
                .await?,
            tenant_id: ns,
        });
    }
    Ok(Json(TenantList { tenants }))
}

/// `GET /v1/runs/{runId}/reasoning` body.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningLane {
    /// The lane's messages in order (`{nodeId, payload: {message, ...}, ...}` as the worker
    /// publishes them, redacted like the run's events).
    #[schema(value_type = Vec<Object>)]
    pub entries: Vec<serde_json::Value>,
}

/// Read a run's reasoning lane.
#[utoipa::path(
    get, path = "/v1/runs/{runId}/reasoning",
    params(("runId" = String, Path, description = "the Run's runId (its uid)")),
    responses(
        (status = 200, body = ReasoningLane),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn run_reasoning(
    State(s): State<RestState>,
    caller: Caller,
    Path(run_id): Path<String>,
) -> Result<Json<ReasoningLane>, ApiError> {
    let run = visible_run(&s, &caller, &run_id).await?;
    let subject = reasoning_subject(&run.namespace().unwrap_or_default(), &run_id);
    Ok(Json(ReasoningLane {
        entries: read_lane(&s, subject).await?,
    }))
}

/// Every message stored on a reasoning subject, in order (no stream yet: none). Unlike run
/// events, lane messages carry no run sequence, so they are kept in stream order as read.
async fn read_lane(s: &RestState, subject: String) -> Result<Vec<serde_json::Value>, ApiError> {
    super::log::read_subject(s, subject, MAX_LANE_ENTRIES, |m| {
        serde_json::from_slice(&m.payload).ok()
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_bad_ones_are_named() {
        let k = (
            Timestamp::from_millisecond(1_700_000_000_123).unwrap(),
            "u-1".to_owned(),
        );
        assert_eq!(parse_cursor(&cursor_of(&k)).unwrap(), k);
        let e = parse_cursor("nonsense").unwrap_err();
        assert_eq!(e.body.error, "validation_error");
        assert!(e.body.message.contains("nonsense"));
    }

    #[test]
    fn the_listing_is_in_the_openapi_document() {
        let doc = super::super::openapi();
        assert!(doc["paths"]["/v1/runs"]["get"].is_object(), "GET /v1/runs");
        assert!(
            doc["paths"]["/v1/runs"]["post"].is_object(),
            "POST /v1/runs"
        );
        assert!(doc["paths"]["/v1/tenants"]["get"].is_object());
        assert!(doc["paths"]["/v1/runs/{runId}/reasoning"]["get"].is_object());
        assert!(doc["components"]["schemas"]["RunList"].is_object());
    }
}
