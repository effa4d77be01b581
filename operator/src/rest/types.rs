//! The request and response bodies of the REST API (their OpenAPI schemas come from here).

use openwop_protocol::run::RunPhase;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Query of endpoints that address a namespace-scoped object by OpenWOP id.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
pub struct TenantQuery {
    /// Namespace to look in; defaults to the caller's ServiceAccount namespace.
    pub tenant_id: Option<String>,
}

/// `GET /v1/workflows/{workflowId}` body: the OpenWOP workflow definition document.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(transparent)]
#[schema(value_type = Object)]
pub struct WorkflowDefinition(pub Value);

/// `POST /v1/runs` body (`RunOptions`). Closed: a field this host does not know is refused
/// by name (400), never ignored; fields the spec defines that this host cannot honour yet
/// (`callbackUrl`, `residency`, `mode`, `evalSuiteRef`, `agentId`) are refused with the spec's
/// code.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateRunRequest {
    /// OpenWOP id (or Kubernetes name) of a Workflow in the tenant's namespace.
    pub workflow_id: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub inputs: Option<Map<String, Value>>,
    /// Per-run options (e.g. `escalationThreshold`; `runTimeoutMs`, a whole number of
    /// milliseconds ≥ 1, capped at the host's `limits.maxRunDurationMs`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub configurable: Option<Map<String, Value>>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    /// The Kubernetes namespace of the run; defaults to the caller's ServiceAccount namespace.
    #[serde(default)]
    pub tenant_id: Option<String>,
    /// Opaque caller correlation (1..256 characters), kept with the run and echoed in its
    /// snapshot.
    #[serde(default)]
    pub scope_id: Option<String>,
    /// Where to POST the signed interrupt token of an external-event suspension. Checked by
    /// the egress guard (https, no internal address); this host does not deliver it yet, so a
    /// run asking for it is refused (`capability_required`).
    #[serde(default)]
    pub callback_url: Option<String>,
    /// Data-residency constraint (RFC 0129); this host pins no region
    /// (`residency_unavailable`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub residency: Option<Value>,
    /// `eval` runs (RFC 0081) are not served here (`capability_not_provided`).
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub eval_suite_ref: Option<Value>,
    /// An agent as the root of the run (RFC 0072) is not served here
    /// (`capability_not_provided`).
    #[serde(default)]
    pub agent_id: Option<String>,
}

/// `201` body of `POST /v1/runs`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateRunResponse {
    pub run_id: String,
    #[schema(value_type = String)]
    pub status: RunPhase,
    pub events_url: String,
    pub status_url: String,
    /// The request's `scopeId`, echoed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope_id: Option<String>,
}

/// Body of cancel and interrupt answers.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStatusResponse {
    pub run_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    #[schema(value_type = String)]
    pub status: RunPhase,
}

/// `POST /v1/runs/{runId}/interrupts/{nodeId}` body.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolveInterruptRequest {
    /// Approval: `{"action": "accept" | "reject" | "refine" | "edit-accept"}` (an action the
    /// gate offers; `refine` with `refineFeedback {scope}`, `edit-accept` with
    /// `editedArtifactData`; the legacy `{"decision": "approved" | "rejected"}` is read too).
    /// Clarification: `{"answers": {QUESTION_ID: ANSWER}}` or `{"answers": [{"id", "answer"}]}`,
    /// every question answered. Custom interrupt: any object.
    #[schema(value_type = Object)]
    pub resume_value: Value,
    /// `untrusted` when the answer relays content the caller did not author; an untrusted
    /// answer is recorded but can never approve.
    #[serde(default)]
    pub content_trust: Option<String>,
    #[serde(default)]
    pub comment: Option<String>,
}

/// `{events: [...]}` (JSON events and long-poll).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventsResponse {
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<Value>,
    /// The run's terminal event is among the events read.
    pub is_complete: bool,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
pub struct PollQuery {
    /// Return events after this run sequence.
    pub last_sequence: Option<u64>,
    /// Seconds to wait for a first new event: 1 to 60, default 30.
    #[param(minimum = 1, maximum = 60)]
    pub timeout: Option<u64>,
}

/// Query of `GET /v1/runs/{runId}/events` (read as text: refusals are the API's own).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
pub struct EventsQuery {
    /// `values`, `updates` (default), `messages` or `debug`, or a comma-separated
    /// combination without `values`; anything else is 400 `unsupported_stream_mode`.
    pub stream_mode: Option<String>,
    /// Batch events for up to this many milliseconds (0..5000, larger clamped) into one
    /// `event: batch` whose data is a JSON array; terminal events and suspensions flush.
    pub buffer_ms: Option<String>,
}

/// `POST /v1/runs:bulk-cancel` body.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BulkCancelRequest {
    /// Runs to cancel (1 to 100 runIds), answered in this order.
    pub run_ids: Vec<String>,
    /// Why (at most 1024 characters): each run cancelled now records it as its
    /// `run.cancelled.reason`.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `POST /v1/runs/{runId}/cancel` body (optional). Open, unlike the other bodies: this
/// endpoint took any body before it read `reason`, and clients send their own members.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelRunRequest {
    /// Why the run is cancelled (at most 1024 characters): recorded as its
    /// `run.cancelled.reason`.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `200` body of `POST /v1/runs:bulk-cancel`: one result per requested runId, in order.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BulkCancelResponse {
    pub results: Vec<BulkCancelResult>,
}

/// The outcome for one runId of a bulk cancel.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkCancelResult {
    pub run_id: String,
    /// The run is cancelled or being cancelled.
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub status: Option<RunPhase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<BulkCancelError>,
}

/// Why one runId of a bulk cancel was not cancelled (`not_found`, `forbidden`,
/// `run_terminal`, `validation_error`, ...).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BulkCancelError {
    pub code: String,
    pub message: String,
}

/// `POST /v1/runs/{runId}:pause` body (closed; `drainPolicy` defaults to `drain-current-node`).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PauseRunRequest {
    /// Why (recorded in `run.paused.reason`; at most 1024 characters).
    #[serde(default)]
    pub reason: Option<String>,
    /// `immediate` | `drain-current-node` (default).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub drain_policy: Option<openwop_crds::DrainPolicy>,
}

/// `POST /v1/runs/{runId}:resume` body (closed).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResumeRunRequest {
    #[serde(default)]
    pub reason: Option<String>,
}

/// `:pause` (`status: paused`, `pausedAt`) and `:resume` (`status: running`, `resumedAt`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PauseRunResponse {
    pub run_id: String,
    #[schema(value_type = String)]
    pub status: RunPhase,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_at: Option<String>,
}
