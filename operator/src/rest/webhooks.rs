//! `POST /v1/webhooks` and `DELETE /v1/webhooks/{webhookId}` (`spec/v1/webhooks.md`).
//!
//! A subscription belongs to a tenant (namespace): the caller needs RBAC `create` /
//! `delete` on `webhooks.openwop.dev` there, and sees and deletes only that tenant's
//! subscriptions. The body is checked first (`protocol::webhook::parse_registration`:
//! `validation_error`, `webhook_url_rejected`), so a malformed request is answered without
//! an access review. The secret is returned once, here, and appears nowhere else.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use openwop_protocol::webhook::{self, RegistrationError};
use serde::Serialize;
use serde_json::{Value, json};

use super::json::Json;
use super::types::TenantQuery;
use super::{ApiError, Caller, ErrorBody, Resource, RestState, Verb};
use crate::webhooks::{deliver, dispatch};

/// Longest wait for the DNS answer that checks a new subscription's host.
const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
use crate::webhooks::store::{Store, Subscription};

/// `POST /v1/webhooks` body (documentation; the handler checks the JSON itself so every
/// refusal names its field).
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct RegisterWebhookRequest {
    /// `https://` URL deliveries are POSTed to (internal addresses are refused unless the
    /// host's allow list names them).
    pub url: String,
    /// Run event types to deliver (at least one).
    pub events: Vec<String>,
    /// Namespace of the runs to deliver; defaults to the caller's ServiceAccount namespace.
    pub tenant_id: Option<String>,
    /// Deliver only events of runs carrying one of these tags.
    pub tags: Option<Vec<String>>,
}

/// `201` body: the secret is shown this once.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookCreated {
    pub webhook_id: String,
    /// 64 hex characters; verifies `X-openwop-Signature`. Store it: it is never shown again.
    pub secret: String,
    /// First 8 hex characters of sha256(secret).
    pub secret_fingerprint: String,
}

/// A refused registration: its code (`validation_error`, `webhook_url_rejected`) and field.
fn refused(e: RegistrationError) -> ApiError {
    let field = match &e {
        RegistrationError::Invalid { field, .. } => field.clone(),
        RegistrationError::UrlRejected(_) => "url".into(),
    };
    ApiError::new(StatusCode::BAD_REQUEST, e.code(), e.to_string())
        .with_details(json!({ "field": field }))
}

fn not_enabled() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "capability_required",
        "webhooks are not enabled on this host (chart webhooks.enabled, with run events on NATS); \
         discovery advertises webhooks.supported when they are",
    )
}

fn store_unavailable(e: impl std::fmt::Display) -> ApiError {
    tracing::warn!(error = %e, "webhook subscriptions store");
    ApiError::unavailable(
        "webhook subscriptions are unavailable right now; retry shortly",
        std::time::Duration::from_secs(2),
    )
}

async fn open_store(s: &RestState) -> Result<(async_nats::jetstream::Context, Store), ApiError> {
    let js = s.jetstream().await?;
    let store = Store::open(&js, &s.config.webhooks.bucket)
        .await
        .map_err(store_unavailable)?;
    Ok((js, store))
}

/// Register a webhook subscription.
#[utoipa::path(
    post, path = "/v1/webhooks",
    operation_id = "registerWebhook",
    request_body = RegisterWebhookRequest,
    responses(
        (status = 201, body = WebhookCreated),
        (status = 400, body = ErrorBody, description = "validation_error, webhook_url_rejected"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "webhook_limit_reached"),
        (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn register_webhook(
    State(s): State<RestState>,
    caller: Caller,
    Json(body): Json<Value>,
) -> Result<(StatusCode, Json<WebhookCreated>), ApiError> {
    let cfg = &s.config.webhooks;
    if !crate::webhooks::active(&s.config) {
        return Err(not_enabled());
    }
    let policy = cfg.egress();
    let reg = webhook::parse_registration(&body, &policy).map_err(refused)?;
    let tenant = s.tenant(&caller, reg.tenant_id.as_deref())?;
    s.auth
        .authorize(&caller, Verb::Create, Resource::Webhooks, &tenant)
        .await?;
    // Only for an authorized caller: the name must resolve to allowed addresses now as well
    // (delivery checks again at every attempt: DNS may change).
    match tokio::time::timeout(
        RESOLVE_TIMEOUT,
        deliver::resolve_checked(&policy, &reg.target),
    )
    .await
    {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(refused(RegistrationError::UrlRejected(e))),
        Err(_) => {
            return Err(ApiError::unavailable(
                format!(
                    "resolving {} took longer than {RESOLVE_TIMEOUT:?}; retry",
                    reg.target.host
                ),
                std::time::Duration::from_secs(2),
            ));
        }
    }
    let key = cfg.signing_key().map_err(store_unavailable)?;
    let (js, store) = open_store(&s).await?;
    if store.count(&tenant).await.map_err(store_unavailable)? >= cfg.max_per_tenant {
        return Err(ApiError::conflict(
            "webhook_limit_reached",
            format!(
                "tenant {tenant} already has {} webhook subscriptions (webhooks.maxPerTenant); \
                 delete one first",
                cfg.max_per_tenant
            ),
        )
        .with_details(json!({ "maxPerTenant": cfg.max_per_tenant })));
    }
    let mut random = [0u8; 12];
    getrandom::fill(&mut random)
        .map_err(|e| ApiError::internal(format!("no randomness for a webhook id: {e}")))?;
    let webhook_id = webhook::webhook_id(random);
    let secret = webhook::derive_secret(&key, &tenant, &webhook_id);
    let sub = Subscription {
        webhook_id: webhook_id.clone(),
        tenant: tenant.clone(),
        url: reg.url,
        events: reg.events,
        tags: reg.tags,
        secret_fingerprint: webhook::fingerprint(&secret),
        created_at: k8s_openapi::jiff::Timestamp::now().to_string(),
    };
    // The consumer first: events from this moment on are kept for the subscription even
    // before a dispatcher picks it up.
    dispatch::create_consumer(&js, &s.config, &sub)
        .await
        .map_err(store_unavailable)?;
    if let Err(e) = store.create(&sub).await {
        let _ = dispatch::delete_consumer(&js, &s.config, &webhook_id).await;
        return Err(store_unavailable(e));
    }
    tracing::info!(
        %webhook_id,
        %tenant,
        secret_fingerprint = %sub.secret_fingerprint,
        events = sub.events.len(),
        "webhook registered"
    );
    Ok((
        StatusCode::CREATED,
        Json(WebhookCreated {
            webhook_id,
            secret,
            secret_fingerprint: sub.secret_fingerprint,
        }),
    ))
}

/// Unregister a webhook subscription.
#[utoipa::path(
    delete, path = "/v1/webhooks/{webhookId}",
    operation_id = "unregisterWebhook",
    params(("webhookId" = String, Path), TenantQuery),
    responses(
        (status = 204, description = "deleted; deliveries stop"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "subscription_not_found"),
        (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn unregister_webhook(
    State(s): State<RestState>,
    caller: Caller,
    Path(webhook_id): Path<String>,
    Query(q): Query<TenantQuery>,
) -> Result<StatusCode, ApiError> {
    if !crate::webhooks::active(&s.config) {
        return Err(not_enabled());
    }
    let missing = |tenant: &str| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "subscription_not_found",
            format!("no webhook subscription {webhook_id:?} in tenant {tenant}"),
        )
    };
    // An id this host never issues cannot exist anywhere: no tenant or access review needed.
    if !webhook::is_webhook_id(&webhook_id) {
        return Err(missing(q.tenant_id.as_deref().unwrap_or("(any)")));
    }
    let tenant = s.tenant(&caller, q.tenant_id.as_deref())?;
    s.auth
        .authorize(&caller, Verb::Delete, Resource::Webhooks, &tenant)
        .await?;
    let (js, store) = open_store(&s).await?;
    let Some(sub) = store
        .get(&tenant, &webhook_id)
        .await
        .map_err(store_unavailable)?
    else {
        return Err(missing(&tenant));
    };
    // The record first: dispatchers stop on its deletion; then the queue it left.
    store
        .delete(&tenant, &webhook_id)
        .await
        .map_err(store_unavailable)?;
    if let Err(e) = dispatch::delete_consumer(&js, &s.config, &webhook_id).await {
        tracing::warn!(%webhook_id, error = %e, "webhook consumer left behind");
    }
    tracing::info!(
        %webhook_id,
        %tenant,
        secret_fingerprint = %sub.secret_fingerprint,
        "webhook unregistered"
    );
    Ok(StatusCode::NO_CONTENT)
}
