//! `GET /v1/tools` and `GET /v1/tools/{toolId}` (`tool-catalog.md` v1 §B): the tools of the
//! Ready ToolServers a tenant's Workflows may use ([`crate::toolservers::usable_in`]), read
//! from this replica's ToolServer cache, each as a `ToolDescriptor` whose tier and policies
//! the host assigned ([`ToolDescriptor::of`]).
//!
//! Tenant-scoped like the rest of the API: the caller must be allowed to read Workflows in
//! the tenant's namespace (the tools are what its Workflows may call). The list answers 403
//! otherwise; one tool answers 404, as for a tool that does not exist, so the catalog
//! discloses nothing to a caller who may not see it.
//!
//! A `toolId` (`mcp:<server>/<tool>`) holds a `/`: send it percent-encoded in the path
//! (`/v1/tools/mcp:search%2Flookup`; axum matches the encoded segment and decodes it). The
//! unencoded form (`/v1/tools/mcp:search/lookup`) is accepted too.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::Api;
use openwop_protocol::tools::catalog::{ToolDescriptor, ToolSource, parse_tool_id};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::auth::{Caller, Resource, Verb};
use super::error::{ApiError, ErrorBody};
use super::json::Json;
use super::state::RestState;
use crate::toolservers::{needs_labels, usable_in};

/// Query of `GET /v1/tools`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
pub struct ToolsQuery {
    /// Namespace whose Workflows' tools to list; defaults to the caller's ServiceAccount
    /// namespace.
    pub tenant_id: Option<String>,
    /// Only tools of this source (`mcp`, `host-extension`; the spec's other sources are
    /// valid and list nothing here).
    pub source: Option<String>,
}

/// `GET /v1/tools` body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ToolList {
    /// Sorted by `toolId`.
    pub tools: Vec<ToolDescriptor>,
}

/// The spec's closed `source` vocabulary (`tool-descriptor.schema.json`).
const SOURCES: [&str; 5] = [
    "node-pack",
    "workflow",
    "mcp",
    "connector",
    "host-extension",
];

/// List the tools a tenant's workflows may call.
#[utoipa::path(
    get, path = "/v1/tools",
    params(ToolsQuery),
    responses(
        (status = 200, body = ToolList),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn list_tools(
    State(s): State<RestState>,
    caller: Caller,
    Query(q): Query<ToolsQuery>,
) -> Result<Json<ToolList>, ApiError> {
    let ns = s.tenant(&caller, q.tenant_id.as_deref())?;
    let source = match q.source.as_deref() {
        None => None,
        Some(src) if SOURCES.contains(&src) => Some(src),
        Some(other) => {
            return Err(ApiError::validation(format!(
                "source {other:?} is not a tool source; use one of {}",
                SOURCES.join(", ")
            ))
            .with_details(json!({"field": "source"})));
        }
    };
    s.auth
        .authorize(&caller, Verb::Get, Resource::Workflows, &ns)
        .await?;
    let mut tools = catalog(&s, &ns).await?;
    if let Some(src) = source {
        tools.retain(|t| source_name(t.source) == src);
    }
    Ok(Json(ToolList { tools }))
}

/// Read one tool of the catalog.
#[utoipa::path(
    get, path = "/v1/tools/{toolId}",
    params(
        ("toolId" = String, Path, description = "`mcp:<server>/<tool>`, percent-encoded (`mcp:search%2Flookup`)"),
        ("tenantId" = Option<String>, Query, description = "Namespace whose Workflows' tools to read; defaults to the caller's ServiceAccount namespace")
    ),
    responses(
        (status = 200, body = ToolDescriptor),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn get_tool(
    State(s): State<RestState>,
    caller: Caller,
    Path(tool_id): Path<String>,
    Query(q): Query<super::types::TenantQuery>,
) -> Result<Json<ToolDescriptor>, ApiError> {
    one_tool(&s, &caller, &tool_id, q.tenant_id.as_deref()).await
}

/// `GET /v1/tools/mcp:<server>/<tool>` with the `/` unencoded: the same answer as
/// [`get_tool`] (a second route, not in the OpenAPI document).
pub async fn get_tool_unencoded(
    State(s): State<RestState>,
    caller: Caller,
    Path((scope_server, tool)): Path<(String, String)>,
    Query(q): Query<super::types::TenantQuery>,
) -> Result<Json<ToolDescriptor>, ApiError> {
    let tool_id = format!("{scope_server}/{tool}");
    one_tool(&s, &caller, &tool_id, q.tenant_id.as_deref()).await
}

async fn one_tool(
    s: &RestState,
    caller: &Caller,
    tool_id: &str,
    tenant_id: Option<&str>,
) -> Result<Json<ToolDescriptor>, ApiError> {
    let ns = s.tenant(caller, tenant_id)?;
    let missing = || {
        ApiError::not_found(format!(
            "tool {:?} not found for tenant {ns} (ids look like mcp:<server>/<tool>; GET /v1/tools lists them)",
            openwop_protocol::text::truncate(tool_id, 300)
        ))
    };
    // Not an id this catalog could hold: the same 404 as an unknown one.
    if parse_tool_id(tool_id).is_none() {
        return Err(missing());
    }
    if !s
        .auth
        .allowed(caller, Verb::Get, Resource::Workflows, &ns)
        .await?
    {
        return Err(missing());
    }
    catalog(s, &ns)
        .await?
        .into_iter()
        .find(|t| t.tool_id == tool_id)
        .map(Json)
        .ok_or_else(missing)
}

fn source_name(source: ToolSource) -> &'static str {
    match source {
        ToolSource::Mcp => "mcp",
        ToolSource::HostExtension => "host-extension",
    }
}

/// The tenant `ns`'s catalog, sorted by `toolId`.
async fn catalog(s: &RestState, ns: &str) -> Result<Vec<ToolDescriptor>, ApiError> {
    let servers = s.tool_servers.state();
    let labels = if needs_labels(ns, &servers) {
        namespace_labels(s, ns).await?
    } else {
        BTreeMap::new()
    };
    let mut tools: Vec<ToolDescriptor> = usable_in(ns, &labels, &servers)
        .into_iter()
        .flat_map(|ts| {
            let name = ts.name_any();
            let credentials = !ts.spec.headers_from.is_empty();
            ts.status
                .iter()
                .flat_map(|st| st.tools.iter())
                .map(move |t| ToolDescriptor::of(&name, t, credentials))
                .collect::<Vec<_>>()
        })
        .collect();
    tools.sort_by(|a, b| a.tool_id.cmp(&b.tool_id));
    Ok(tools)
}

/// The labels of namespace `ns` (a ToolServer elsewhere admits namespaces by selector).
async fn namespace_labels(s: &RestState, ns: &str) -> Result<BTreeMap<String, String>, ApiError> {
    let api: Api<Namespace> = Api::all(s.client.clone());
    match api.get_opt(ns).await {
        Ok(found) => Ok(found.map(|n| n.labels().clone()).unwrap_or_default()),
        Err(e) => {
            tracing::warn!(error = %e, namespace = ns, "tool catalog: reading the namespace's labels");
            Err(ApiError::unavailable(
                "cannot read the tenant namespace's labels to decide which shared ToolServers it may use; retry shortly",
                Duration::from_secs(2),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_catalog_is_in_the_openapi_document() {
        let doc = super::super::openapi();
        let list = &doc["paths"]["/v1/tools"]["get"];
        assert!(list.is_object());
        assert!(doc["paths"]["/v1/tools/{toolId}"]["get"].is_object());
        let schemas = &doc["components"]["schemas"];
        for s in [
            "ToolList",
            "ToolDescriptor",
            "ToolSource",
            "Approval",
            "ReplayPolicy",
        ] {
            assert!(schemas.get(s).is_some(), "{s}");
        }
        assert_eq!(
            schemas["ToolDescriptor"]["properties"]["safetyTier"]["type"],
            "string"
        );
    }
}
