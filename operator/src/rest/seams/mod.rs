//! The spec's conformance-only host test seams (`spec/v1/host-sample-test-seams.md`) under
//! `/v1/host/sample/...`.
//!
//! Mounted only when `conformance.seams.enabled` is set (chart `conformance.seams.enabled`,
//! default false): otherwise none of these paths exists and each answers 404, as the spec asks
//! of production hosts. When mounted, every seam takes a [`SeamCaller`]: an authenticated,
//! non-anonymous caller allowed to create Runs in the namespace the seam acts on. A seam's
//! state that several replicas must agree on lives in JetStream ([`store`]), never in one
//! replica's memory.
//!
//! Each seam is a submodule exposing `routes() -> OpenApiRouter<RestState>`, merged in
//! [`router`].

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;

use super::{ApiError, Caller, Resource, RestState, Verb};

pub mod debug_bundle;
pub mod mock_ai;

/// Path prefix of every seam (`host-extensions.md` §"Canonical prefixes").
pub const PREFIX: &str = "/v1/host/sample";

/// The seams' routes, to pass to [`super::router`] as `extra` when the seams are enabled.
pub fn router() -> OpenApiRouter<RestState> {
    OpenApiRouter::new()
        .merge(mock_ai::routes())
        .merge(debug_bundle::routes())
}

/// The routes to mount for `config`: the seams when enabled, nothing otherwise.
pub fn mounted(config: &crate::config::OperatorConfig) -> OpenApiRouter<RestState> {
    if config.conformance.seams.enabled {
        router()
    } else {
        OpenApiRouter::new()
    }
}

/// The caller of a seam: authenticated, not anonymous, and allowed to create Runs in
/// `namespace` (the seam's tenant: the `tenantId` query parameter, else the caller's
/// ServiceAccount namespace).
#[derive(Debug, Clone)]
pub struct SeamCaller {
    pub caller: Caller,
    pub namespace: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TenantQuery {
    tenant_id: Option<String>,
}

impl FromRequestParts<RestState> for SeamCaller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &RestState,
    ) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        if caller.is_anonymous {
            return Err(ApiError::forbidden(
                "the conformance test seams are served only to authenticated, non-anonymous \
                 callers; send a ServiceAccount token (`kubectl create token <sa> -n <ns>`)",
            ));
        }
        let tenant = Query::<TenantQuery>::try_from_uri(&parts.uri)
            .map(|q| q.0.tenant_id)
            .unwrap_or(None);
        let namespace = state.tenant(&caller, tenant.as_deref())?;
        state
            .auth
            .authorize(&caller, Verb::Create, Resource::Runs, &namespace)
            .await?;
        Ok(SeamCaller { caller, namespace })
    }
}

/// A JetStream key-value bucket holding seam state shared by every replica (created on first
/// use; one history entry per key, file storage so a restarted nats-server keeps it).
pub async fn store(
    state: &RestState,
    bucket: &str,
) -> Result<async_nats::jetstream::kv::Store, ApiError> {
    let js = state.jetstream().await?;
    if let Ok(kv) = js.get_key_value(bucket).await {
        return Ok(kv);
    }
    js.create_key_value(async_nats::jetstream::kv::Config {
        bucket: bucket.to_owned(),
        history: 1,
        storage: async_nats::jetstream::stream::StorageType::File,
        ..Default::default()
    })
    .await
    .map_err(|e| {
        tracing::warn!(bucket, error = %e, "test seams: creating the key-value bucket");
        ApiError::unavailable(
            format!("the seam store {bucket} is unavailable; retry shortly"),
            std::time::Duration::from_secs(2),
        )
    })
}
