//! `POST /v1/webhooks` and `DELETE /v1/webhooks/{webhookId}` (`spec/v1/webhooks.md`).
//!
//! A subscription belongs to a tenant (namespace): the caller needs RBAC `create` /
//! `delete` on `webhooks.openwop.dev` there, and sees and deletes only that tenant's
//! subscriptions. The body is read and checked first (`RegisterWebhookRequest`,
//! `protocol::webhook::parse_registration`: `validation_error`, `webhook_url_rejected`), so
//! a malformed request is answered without an access review. The secret is returned once, here, and appears nowhere else.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use openwop_protocol::webhook::{self, RegisterWebhookRequest, RegistrationError};
use serde::Serialize;
use serde_json::{Value, json};

use super::auth::{Caller, Resource, Verb};
use super::error::{ApiError, ErrorBody};
use super::idempotency::{Scope, idempotent, is_replay, op};
use super::json::{Json, Sent};
use super::state::RestState;
use super::types::TenantQuery;
use crate::webhooks::{deliver, dispatch};

/// Longest wait for the DNS answer that checks a new subscription's host.
const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
use crate::webhooks::store::{Store, Subscription};

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
    params(("Idempotency-Key" = Option<String>, Header, description = "same key and body → the same subscription again (its secret derived anew, never stored with the answer); same key, other body → 409")),
    responses(
        (status = 201, body = WebhookCreated),
        (status = 400, body = ErrorBody, description = "validation_error, webhook_url_rejected"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "webhook_limit_reached, idempotency_key_mismatch, idempotency_in_flight"),
        (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn register_webhook(
    State(s): State<RestState>,
    caller: Caller,
    headers: HeaderMap,
    body: Sent<RegisterWebhookRequest>,
) -> Result<Response, ApiError> {
    if !s.config.webhooks_active() {
        return Err(not_enabled());
    }
    let policy = s.config.webhooks.egress();
    let reg = webhook::parse_registration(body.value, &policy).map_err(refused)?;
    let tenant = s.tenant(&caller, reg.tenant_id.as_deref())?;
    s.auth
        .authorize(&caller, Verb::Create, Resource::Webhooks, &tenant)
        .await?;
    let scope = Scope {
        namespace: &tenant,
        operation: op::REGISTER_WEBHOOK,
        principal: &caller.username,
    };
    let answer = idempotent(&s, &headers, scope, &[body.canonical.as_bytes()], || {
        register(&s, &tenant, reg, &policy)
    })
    .await?;
    if !is_replay(&answer) {
        return Ok(answer);
    }
    // The secret is never kept with the recorded answer: derived again, as at registration.
    restore_secret(&s, &tenant, answer).await
}

/// A replayed registration with its secret put back.
async fn restore_secret(
    s: &RestState,
    tenant: &str,
    answer: Response,
) -> Result<Response, ApiError> {
    let (mut parts, body) = answer.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map_err(|e| ApiError::internal(format!("reading the recorded answer: {e}")))?;
    let mut v: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => return Ok(Response::from_parts(parts, bytes.into())),
    };
    if let Some(id) = v
        .get("webhookId")
        .and_then(Value::as_str)
        .map(str::to_owned)
    {
        let key = s.config.webhooks.signing_key().map_err(store_unavailable)?;
        v["secret"] = json!(webhook::derive_secret(&key, tenant, &id));
    }
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Ok(Response::from_parts(parts, v.to_string().into()))
}

/// Registers `reg` for `tenant` (checked and authorized).
async fn register(
    s: &RestState,
    tenant: &str,
    reg: webhook::Registration,
    policy: &openwop_protocol::egress::EgressPolicy,
) -> Result<Response, ApiError> {
    let cfg = &s.config.webhooks;
    let tenant = tenant.to_owned();
    // Only for an authorized caller: the name must resolve to allowed addresses now as well
    // (delivery checks again at every attempt: DNS may change).
    match tokio::time::timeout(
        RESOLVE_TIMEOUT,
        deliver::resolve_checked(policy, &reg.target),
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
    let (js, store) = open_store(s).await?;
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
        status: Default::default(),
        failed_at: None,
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
    )
        .into_response())
}

/// Unregister a webhook subscription.
#[utoipa::path(
    delete, path = "/v1/webhooks/{webhookId}",
    operation_id = "unregisterWebhook",
    params(
        ("webhookId" = String, Path), TenantQuery,
        ("Idempotency-Key" = Option<String>, Header, description = "same key → the first answer again")
    ),
    responses(
        (status = 204, description = "deleted; deliveries stop"),
        (status = 400, body = ErrorBody, description = "validation_error: an Idempotency-Key that is not 1..255 URL-safe characters"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "subscription_not_found"),
        (status = 409, body = ErrorBody, description = "idempotency_key_mismatch, idempotency_in_flight"),
        (status = 503, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn unregister_webhook(
    State(s): State<RestState>,
    caller: Caller,
    headers: HeaderMap,
    Path(webhook_id): Path<String>,
    Query(q): Query<TenantQuery>,
) -> Result<Response, ApiError> {
    if !s.config.webhooks_active() {
        return Err(not_enabled());
    }
    let missing = |tenant: &str| subscription_missing(&webhook_id, tenant);
    // An id this host never issues cannot exist anywhere: no tenant or access review needed.
    if !webhook::is_webhook_id(&webhook_id) {
        return Err(missing(q.tenant_id.as_deref().unwrap_or("(any)")));
    }
    let tenant = s.tenant(&caller, q.tenant_id.as_deref())?;
    s.auth
        .authorize(&caller, Verb::Delete, Resource::Webhooks, &tenant)
        .await?;
    let scope = Scope {
        namespace: &tenant,
        operation: op::UNREGISTER_WEBHOOK,
        principal: &caller.username,
    };
    idempotent(&s, &headers, scope, &[webhook_id.as_bytes()], || {
        unregister(&s, &tenant, &webhook_id)
    })
    .await
}

/// 404 `subscription_not_found`.
fn subscription_missing(webhook_id: &str, tenant: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "subscription_not_found",
        format!("no webhook subscription {webhook_id:?} in tenant {tenant}"),
    )
}

/// Deletes subscription `webhook_id` of `tenant` (authorized).
async fn unregister(s: &RestState, tenant: &str, webhook_id: &str) -> Result<Response, ApiError> {
    let missing = |tenant: &str| subscription_missing(webhook_id, tenant);
    let (tenant, webhook_id) = (tenant.to_owned(), webhook_id.to_owned());
    let (js, store) = open_store(s).await?;
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
    Ok(StatusCode::NO_CONTENT.into_response())
}
