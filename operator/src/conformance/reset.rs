//! `POST /v1/host/sample/test/reset` (suite teardown): forgets what the seams recorded for
//! the caller's namespace — persisted dedup decisions, and the synthetic runs' event logs
//! (purged from the stream) — and clears the capability overlay. Real Runs' logs are never
//! touched: the seams only ever write synthetic runs (see `synthetic_run`).

use std::time::Duration;

use axum::extract::State;
use futures::StreamExt;
use serde_json::{Value, json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::seam::{DEDUP_BUCKET, RUNS_BUCKET, SeamCaller, store};
use super::{capability_toggle, mock_ai, otel_spans};
use crate::rest::{ApiError, ErrorBody, Json, RestState};

/// Every seam bucket whose keys are `<namespace>.…`: `test/reset` clears the caller's
/// namespace's keys in each (the overlay bucket is global and cleared whole).
pub const BUCKETS: &[&str] = &[
    DEDUP_BUCKET,
    RUNS_BUCKET,
    mock_ai::BUCKET,
    otel_spans::BUCKET,
];

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new().routes(routes!(reset))
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    tracing::warn!(error = %e, "reset seam");
    ApiError::unavailable(
        "the seam store is unavailable; retry shortly",
        Duration::from_secs(2),
    )
}

/// Reset the seams' state (conformance-only test seam).
#[utoipa::path(
    post, path = "/v1/host/sample/test/reset",
    responses(
        (status = 200, description = "{ok: true}", body = Object),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
async fn reset(State(s): State<RestState>, caller: SeamCaller) -> Result<Json<Value>, ApiError> {
    let prefix = format!("{}.", caller.namespace);
    let js = s.jetstream().await?;
    for bucket in BUCKETS {
        let kv = store(&s, bucket).await?;
        let keys: Vec<String> = kv
            .keys()
            .await
            .map_err(unavailable)?
            .filter_map(|k| async move { k.ok() })
            .filter(|k| std::future::ready(k.starts_with(&prefix)))
            .collect()
            .await;
        for key in keys {
            if *bucket == RUNS_BUCKET {
                let run_id = &key[prefix.len()..];
                openwop_nats::stream::purge_run(
                    &js,
                    &s.config.worker.events_stream,
                    &caller.namespace,
                    run_id,
                )
                .await
                .map_err(unavailable)?;
            }
            kv.purge(&key).await.map_err(unavailable)?;
        }
    }
    capability_toggle::clear(&s).await?;
    Ok(Json(json!({"ok": true})))
}
