//! `POST /v1/host/sample/test/debug-bundle/export` (`host-sample-test-seams.md` §3,
//! `debug-bundle.md`): a run's debug bundle, synchronously.
//!
//! Built from what `GET /v1/runs/{runId}` and `GET /v1/runs/{runId}/events/poll` serve
//! (one snapshot mapping, one event reader) — for a synthetic run of the seams (events
//! `envelope/accept` projected), from its log and the projection of it — and redacted by protocol's bundle projection
//! with the run's sensitive inputs; the events are already redacted by the worker. The
//! bundle's `spans` are what the span store holds for the run ([`super::otel_spans`]; none
//! when workers cannot reach it).

use axum::extract::State;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, ResourceExt};
use openwop_crds::Run;
use openwop_protocol::redact::Redactor;
use openwop_protocol::run::snapshot::sensitive_values;
use openwop_protocol::run::{
    BundleHost, BundleInput, MAX_BUNDLE_BYTES, Projection, RunFacts, RunSnapshotDoc, debug_bundle,
    events_subject,
};
use serde_json::{Value, json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::seam::SeamCaller;
use crate::names::snapshot_name;
use crate::rest::log::{read_events, read_subject_events};
use crate::rest::view::snapshot_of;
use crate::rest::{ApiError, ErrorBody, Json, RestState, visible_run};
use crate::snapshot::read_snapshot;

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new().routes(routes!(export))
}

/// `POST .../debug-bundle/export` body.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportRequest {
    pub run_id: String,
}

/// The run's sensitive inputs, as its worker redacts them (same ids): from the frozen
/// snapshot the run executes (a Workflow edited since cannot change them), or — before the
/// run has one — from its Workflow as it is now.
async fn run_secrets(s: &RestState, run: &Run) -> Vec<(String, String)> {
    let ns = run.namespace().unwrap_or_default();
    let maps: Api<ConfigMap> = Api::namespaced(s.client.clone(), &ns);
    match maps.get_opt(&snapshot_name(&run.name_any())).await {
        Ok(Some(cm)) => match read_snapshot(&cm) {
            Ok(snapshot) => return snapshot.sensitive_values(),
            Err(e) => {
                tracing::warn!(run = %run.name_any(), error = %e, "debug bundle: the run's snapshot is unreadable; using its Workflow")
            }
        },
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(run = %run.name_any(), error = %e, "debug bundle: reading the run's snapshot; using its Workflow")
        }
    }
    let inputs = run.spec.inputs.clone().unwrap_or(Value::Null);
    run.spec
        .workflow_ref
        .name
        .as_deref()
        .and_then(|n| {
            s.workflows
                .state()
                .into_iter()
                .find(|w| w.namespace().as_deref() == Some(ns.as_str()) && w.name_any() == n)
        })
        .map(|w| sensitive_values(&s.definitions.of(&w).document, &inputs))
        .unwrap_or_default()
}

/// Export a run's debug bundle (`DebugBundle`, `debug-bundle.md`).
#[utoipa::path(
    post, path = "/v1/host/sample/test/debug-bundle/export", request_body = ExportRequest,
    responses((status = 200, description = "DebugBundle", body = Object),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = []))
)]
async fn export(
    State(s): State<RestState>,
    caller: SeamCaller,
    Json(req): Json<ExportRequest>,
) -> Result<Json<Value>, ApiError> {
    let run_id = req.run_id;
    if run_id.is_empty() {
        return Err(ApiError::validation(
            "runId must be a non-empty string: the id of the run to export (`runId` of POST /v1/runs)",
        )
        .with_details(json!({"field": "runId"})));
    }
    // A synthetic run of the seams (its snapshot is the projection of its events), else a
    // Run the caller may see.
    let synthetic = super::seam::is_synthetic(&s, &caller.namespace, &run_id).await?;
    let (ns, snapshot, events, secrets) = if synthetic {
        let ns = caller.namespace.clone();
        let events = read_subject_events(&s, events_subject(&ns, &run_id)).await?;
        let mut projection = Projection::default();
        for e in &events {
            projection.apply(e);
        }
        let ts = |i: Option<&Value>| {
            i.and_then(|e| e.get("timestamp"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let snapshot = RunSnapshotDoc::from_projection(
            &projection,
            RunFacts {
                run_id: &run_id,
                workflow_id: "",
                tenant: &ns,
                started_at: ts(events.first()),
                completed_at: None,
                attempts: None,
            },
        );
        (ns, snapshot, events, Vec::new())
    } else {
        let run = visible_run(&s, &caller.caller, &run_id).await?;
        let snapshot = snapshot_of(&s, &run);
        let events = read_events(&s, &run, None, None).await?.events;
        let ns = run.namespace().unwrap_or_default();
        let secrets = run_secrets(&s, &run).await;
        (ns, snapshot, events, secrets)
    };
    // The seams record spans for their synthetic runs; a Run's come from its workers, only
    // when they can reach the span store.
    let spans = if synthetic || crate::config::seams::span_ingest_traces_url(&s.config).is_some() {
        super::otel_spans::stored_spans(&s, &ns, &run_id).await?.0
    } else {
        Vec::new()
    };
    let generated_at = k8s_openapi::jiff::Timestamp::now().to_string();
    let bundle = debug_bundle(
        BundleInput {
            host: BundleHost {
                name: "openwop-operator".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                vendor: "openwop".into(),
            },
            run: &snapshot,
            events,
            spans,
            generated_at: &generated_at,
            max_bytes: MAX_BUNDLE_BYTES,
        },
        &Redactor::new(secrets),
    );
    tracing::info!(run_id = %run_id, namespace = %ns, caller = %caller.caller.username, "test seam: debug bundle exported");
    Ok(Json(bundle))
}
