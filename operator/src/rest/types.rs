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

/// `POST /v1/runs` body (`RunOptions`).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateRunRequest {
    /// OpenWOP id (or Kubernetes name) of a Workflow in the tenant's namespace.
    pub workflow_id: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub inputs: Option<Map<String, Value>>,
    /// Per-run options (e.g. `escalationThreshold`).
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
    /// Seconds to wait for a first new event (at most 30).
    pub timeout: Option<u64>,
}
