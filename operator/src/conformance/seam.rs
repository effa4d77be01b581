//! What every seam shares: its caller ([`SeamCaller`]), its JSON body ([`SeamJson`]), its
//! refusals in the seams' shape, the seams' state in JetStream ([`store`]) and the synthetic
//! runs they write events for.

use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use openwop_protocol::events::RunEventDoc;
use openwop_protocol::run::events_subject;
use openwop_protocol::seams::SeamRefusal;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::rest::{ApiError, Caller, Json, Resource, RestState, Verb};

/// Key-value bucket of the envelope-accept seam's persisted dedup decisions.
pub const DEDUP_BUCKET: &str = "openwop-seam-envelope-dedup";
/// Key-value bucket of the capability-toggle overlay (read by discovery on every replica).
pub const CAPABILITIES_BUCKET: &str = "openwop-seam-capabilities";
/// Key-value bucket listing the synthetic runs the seams wrote events for (`<ns>.<runId>`).
pub const RUNS_BUCKET: &str = "openwop-seam-runs";

/// A seam's own refusal of its request, in the seams' shape (`{"error": {"code",
/// "message"}}`, 400).
impl From<SeamRefusal> for ApiError {
    fn from(r: SeamRefusal) -> Self {
        ApiError::seam_refusal(StatusCode::BAD_REQUEST, r.code, r.message)
    }
}

/// 400 `invalid_argument` in the seams' shape.
pub fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::seam_refusal(StatusCode::BAD_REQUEST, "invalid_argument", message)
}

/// A seam's JSON body: the API's [`Json`] extractor (same limit, 413 and 415), with a body
/// that is not JSON or does not fit refused in the seams' shape (`invalid_argument`).
pub struct SeamJson<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequest<RestState> for SeamJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &RestState) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(SeamJson(v)),
            Err(e) if e.status == StatusCode::BAD_REQUEST => Err(invalid(e.body.message)),
            Err(e) => Err(e),
        }
    }
}

pub(super) fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// The run sequence the next event of a seam's synthetic run gets, and the stream sequence
/// to expect as the subject's last (0: empty).
async fn tail(
    state: &RestState,
    js: &async_nats::jetstream::Context,
    subject: &str,
) -> Result<(u64, u64), ApiError> {
    let last =
        openwop_nats::stream::last_on_subject(js, &state.config.worker.events_stream, subject)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "test seams: reading a run's last event");
                ApiError::unavailable(
                    "the event stream is unavailable; retry shortly",
                    std::time::Duration::from_secs(2),
                )
            })?;
    Ok(match last {
        None => (0, 0),
        Some((stream_seq, payload)) => {
            let seq = serde_json::from_slice::<Value>(&payload)
                .ok()
                .and_then(|d| d.get("sequence").and_then(Value::as_u64))
                .map_or(0, |s| s + 1);
            (seq, stream_seq)
        }
    })
}

/// A run the seams may write events for in `namespace`: a synthetic id (never a Run's uid,
/// so a seam can never mix events into a real run's log). Returns its events subject.
async fn synthetic_run(
    state: &RestState,
    namespace: &str,
    run_id: &str,
) -> Result<String, ApiError> {
    openwop_protocol::seams::check_run_id("runId", run_id)?;
    let real = state
        .runs
        .state()
        .into_iter()
        .any(|r| r.metadata.uid.as_deref() == Some(run_id));
    if real {
        return Err(ApiError::seam_refusal(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "{run_id} is a Run's id: the seams write events only for synthetic run ids, never into a real run's log; pick another runId"
            ),
        ));
    }
    Ok(events_subject(namespace, run_id))
}

/// Whether the seams wrote events for the synthetic run `run_id` in `namespace` (such ids
/// are never a Run's uid: [`synthetic_run`] refuses those).
pub async fn is_synthetic(
    state: &RestState,
    namespace: &str,
    run_id: &str,
) -> Result<bool, ApiError> {
    if openwop_protocol::seams::check_run_id("runId", run_id).is_err() {
        return Ok(false);
    }
    let runs = store(state, RUNS_BUCKET).await?;
    let found = runs
        .get(format!("{namespace}.{run_id}"))
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "test seams: reading the synthetic runs");
            ApiError::unavailable(
                "the seam store is unavailable; retry shortly",
                std::time::Duration::from_secs(2),
            )
        })?;
    Ok(found.is_some())
}

/// Appends seam-built events to a synthetic run's log in order (each only if nothing else
/// was appended meanwhile), and records the run so `test/reset` can purge it. `build` gets
/// the run sequence of the first event.
pub(super) async fn append_synthetic<T>(
    state: &RestState,
    namespace: &str,
    run_id: &str,
    build: impl FnOnce(u64) -> Result<(T, Vec<RunEventDoc>), ApiError>,
) -> Result<T, ApiError> {
    let subject = synthetic_run(state, namespace, run_id).await?;
    let js = state.jetstream().await?;
    let (first, mut expected) = tail(state, &js, &subject).await?;
    let (out, events) = build(first)?;
    // Recorded even without events: the seams may keep spans for it (`test/otel/spans`).
    let runs = store(state, RUNS_BUCKET).await?;
    runs.put(
        format!("{namespace}.{run_id}"),
        bytes::Bytes::from_static(b"1"),
    )
    .await
    .map_err(|e| {
        tracing::warn!(error = %e, "test seams: recording a synthetic run");
        ApiError::unavailable(
            "the seam store is unavailable; retry shortly",
            std::time::Duration::from_secs(2),
        )
    })?;
    if events.is_empty() {
        return Ok(out);
    }
    for ev in &events {
        let body = serde_json::to_vec(ev).unwrap_or_default();
        // Unique per append: JetStream's dedup window is stream-wide, and the same synthetic
        // run id (hence event id) recurs in other namespaces and after `test/reset`; the
        // expected-last-sequence check already stops a double append.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let msg_id = format!("seam:{namespace}:{}:{}:{nanos}", ev.event_id, ev.sequence);
        match openwop_nats::stream::append_after(&js, &subject, &msg_id, expected, body.into())
            .await
        {
            Ok(openwop_nats::stream::Appended::Stored) => {}
            Ok(openwop_nats::stream::Appended::Moved) => {
                return Err(ApiError::seam_refusal(
                    StatusCode::CONFLICT,
                    "conflict",
                    format!("another writer appended to run {run_id} meanwhile; retry"),
                ));
            }
            Err(e) => {
                tracing::warn!(error = %e, "test seams: appending an event");
                return Err(ApiError::unavailable(
                    "the event stream is unavailable; retry shortly",
                    std::time::Duration::from_secs(2),
                ));
            }
        }
        expected = tail(state, &js, &subject).await?.1;
    }
    Ok(out)
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
