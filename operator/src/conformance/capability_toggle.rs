//! `POST /v1/host/sample/test/capability-toggle` (RFC 0022 §C refusal cases): sets
//! (`{name, value: true|false}`), removes (`{name, value: null}`) or clears (`{reset: true}`)
//! entries of a capability overlay and answers `{overlay, …}`. The overlay lives in a
//! JetStream key-value bucket; every replica watches it ([`watch_overlay`]) and serves
//! discovery with it applied, so a toggle shows on `/.well-known/openwop` whichever replica
//! answers. An entry that would make the document invalid against
//! `capabilities.schema.json` is refused. Effects beyond discovery:
//! `host.aiEnvelope.supported: false` makes the envelope-accept seam refuse every envelope
//! with `capability_required`.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::kv::Operation;
use axum::extract::State;
use futures::StreamExt;
use openwop_protocol::seams::{SeamRefusal, Toggle, apply_overlay, check_document};
use serde_json::{Value, json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::seam::{CAPABILITIES_BUCKET, SeamCaller, SeamJson, store};
use crate::rest::{ApiError, ErrorBody, Json, RestState};

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new().routes(routes!(toggle))
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    tracing::warn!(error = %e, "capability-toggle seam: overlay store");
    ApiError::unavailable(
        "the capability overlay store is unavailable; retry shortly",
        Duration::from_secs(2),
    )
}

/// Removes every overlay entry from the bucket (and from this replica's discovery).
pub async fn clear(s: &RestState) -> Result<(), ApiError> {
    let kv = store(s, CAPABILITIES_BUCKET).await?;
    let keys: Vec<String> = kv
        .keys()
        .await
        .map_err(unavailable)?
        .filter_map(|k| async move { k.ok() })
        .collect()
        .await;
    for k in keys {
        kv.purge(&k).await.map_err(unavailable)?;
    }
    s.discovery.set_overlay(BTreeMap::new());
    Ok(())
}

/// Toggle a capability in discovery (conformance-only test seam).
#[utoipa::path(
    post, path = "/v1/host/sample/test/capability-toggle",
    request_body(content = Object, description = "{name: \"agents.dispatchMapping\", value: true|false|null} or {reset: true}"),
    responses(
        (status = 200, description = "{overlay: {name: bool}, set?: {name, value}, reset?: true}", body = Object),
        (status = 400, description = "unusable request, or an entry discovery cannot carry: {error: {code, message}}"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
async fn toggle(
    State(s): State<RestState>,
    _caller: SeamCaller,
    SeamJson(req): SeamJson<Value>,
) -> Result<Json<Value>, ApiError> {
    match Toggle::parse(&req)? {
        Toggle::Reset => {
            clear(&s).await?;
            Ok(Json(json!({"overlay": {}, "reset": true})))
        }
        Toggle::Set { name, value } => {
            let kv = store(&s, CAPABILITIES_BUCKET).await?;
            let mut overlay = s.discovery.overlay();
            match value {
                Some(v) => {
                    overlay.insert(name.clone(), v);
                    if let Some(doc) = s.discovery.base_capabilities() {
                        let out = apply_overlay(&doc, &overlay)?;
                        check_document(&out).map_err(|e| SeamRefusal {
                            code: "invalid_argument",
                            message: format!(
                                "setting {name} to {v}: {}; toggle another capability",
                                e.message
                            ),
                        })?;
                    }
                    kv.put(&name, if v { "true" } else { "false" }.into())
                        .await
                        .map_err(unavailable)?;
                }
                None => {
                    overlay.remove(&name);
                    kv.purge(&name).await.map_err(unavailable)?;
                }
            }
            s.discovery.set_overlay(overlay.clone());
            Ok(Json(
                json!({"overlay": overlay, "set": {"name": name, "value": value}}),
            ))
        }
    }
}

/// Keeps this replica's discovery overlay equal to the bucket, for the life of the process
/// (reconnecting after a failure).
pub async fn watch_overlay(s: RestState) {
    loop {
        if let Err(e) = watch_once(&s).await {
            tracing::debug!(error = ?e, "capability overlay watch; retrying");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn watch_once(s: &RestState) -> Result<(), String> {
    let kv = store(s, CAPABILITIES_BUCKET)
        .await
        .map_err(|e| e.to_string())?;
    let mut watch = kv
        .watch_with_history(">")
        .await
        .map_err(|e| e.to_string())?;
    // Rebuilt from the bucket's current entries, then kept current by each change.
    let mut overlay = BTreeMap::new();
    s.discovery.set_overlay(overlay.clone());
    while let Some(entry) = watch.next().await {
        let entry = entry.map_err(|e| e.to_string())?;
        match entry.operation {
            Operation::Put => match entry.value.as_ref() {
                b"true" => {
                    overlay.insert(entry.key, true);
                }
                b"false" => {
                    overlay.insert(entry.key, false);
                }
                _ => {
                    tracing::warn!(
                        key = entry.key,
                        "capability overlay: ignoring a value that is not true or false"
                    );
                }
            },
            Operation::Delete | Operation::Purge => {
                overlay.remove(&entry.key);
            }
        }
        s.discovery.set_overlay(overlay.clone());
    }
    Err("the watch ended".to_owned())
}
