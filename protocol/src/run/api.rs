//! A run as the OpenWOP REST API shows it (`GET /v1/runs/{runId}`, the spec's
//! `run-snapshot.schema.json`): one mapping from the status [`Projection`] — the same fold
//! that writes `Run.status` — so `kubectl get run` and the API never disagree. Also the check
//! of a run's inputs against the workflow's declared variables, for callers that start runs.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::projection::Projection;
use super::status::RunPhase;
use super::variables::{kind_name, matches_kind};
use crate::text::json_type;
use crate::workflow::WorkflowVariable;

/// The error code of `POST /v1/runs` when an `Idempotency-Key` is reused with another request
/// body (409; `idempotency.md` §"Record shape, digest, and lease").
pub const IDEMPOTENCY_KEY_MISMATCH: &str = "idempotency_key_mismatch";

/// Response header set (to `true`) when `POST /v1/runs` answers a repeated `Idempotency-Key`
/// with the run the first request created (`rest-endpoints.md`, `OpenWOP-Idempotent-Replay`).
pub const IDEMPOTENT_REPLAY_HEADER: &str = "openwop-idempotent-replay";

/// The error code of a mutation whose `Idempotency-Key` is still being served by an earlier
/// request (409 with `details.retryAfter`; `idempotency.md` §"Concurrency").
pub const IDEMPOTENCY_IN_FLIGHT: &str = "idempotency_in_flight";

/// The REST RunSnapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RunSnapshotDoc {
    pub run_id: String,
    pub workflow_id: String,
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "running"))]
    pub status: RunPhase,
    /// The node executing or holding the interrupt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_node_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// Set on terminal `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunSnapshotError>,
    /// The tenant (Kubernetes namespace) owning the run.
    pub owner: RunOwner,
    pub metrics: RunMetrics,
    /// The interrupts waiting for an answer, one per waiting node (answer each at
    /// `/v1/runs/{runId}/interrupts/{nodeId}`); other branches may still run meanwhile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub pending_interrupts: Vec<super::status::PendingInterrupt>,
    /// The interrupt the run waits on (the first of `pendingInterrupts`), with the signed
    /// token that inspects or resolves it without a bearer token (`/v1/interrupts/{token}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<SnapshotInterrupt>,
    /// Caller-supplied `RunOptions.tags`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// Caller-supplied `RunOptions.metadata`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<Value>,
    /// The run's `RunOptions.configurable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub configurable: Option<Value>,
    /// Caller-supplied `RunOptions.scopeId` (opaque correlation), echoed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope_id: Option<String>,
    /// The run's workflow variables: its inputs over the declared defaults, plus the writes
    /// of `core.setVariable` nodes so far ([`super::variables::Variables`]); `sensitive`
    /// variables masked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub variables: Option<Map<String, Value>>,
    /// Set on a child run: the run whose `core.subWorkflow` node created it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    /// Set on a child run: the parent's node that created it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_node_id: Option<String>,
    /// The child runs this run's sub-workflow nodes created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_runs: Vec<ChildRunRef>,
    /// Host addition: when the run's next timer (a long `core.delay`) is due; the run is
    /// `running` and holds no worker meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<String>,
}

/// `RunSnapshot.interrupt`: what the run waits on, and how to answer it by signed token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SnapshotInterrupt {
    /// `approval`, `clarification`, `external-event` or `custom`.
    pub kind: String,
    pub node_id: String,
    pub interrupt_id: String,
    /// The signed token (`resolve` for a caller who may answer the run, `inspect` for one
    /// who may only read it); absent when the host mints no tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_token: Option<String>,
    /// `/v1/interrupts/{interruptToken}`, relative to this API's base URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    /// When the token stops working (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// One child run of a run (`RunSnapshot.childRuns`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ChildRunRef {
    pub run_id: String,
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "completed"))]
    pub status: RunPhase,
    /// The parent's node that created it.
    pub node_id: String,
    /// Host addition: while the child waits for an answer (its `status` is `waiting-*`, and
    /// so is this run's), the child's node holding the interrupt — answer it at
    /// `/v1/runs/{runId}/interrupts/{waitingNodeId}` of the child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_node_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunSnapshotError {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunOwner {
    pub tenant: String,
}

/// Counters of the run (absent fields are unknown, not zero).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RunMetrics {
    /// Run events seen so far.
    pub events: u64,
    /// Sequence of the last run event seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sequence: Option<u64>,
    /// Worker pods started (first start, retries and resumes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
}

/// Identity and times of a run that the projection does not carry.
#[derive(Debug, Clone, Default)]
pub struct RunFacts<'a> {
    pub run_id: &'a str,
    pub workflow_id: &'a str,
    pub tenant: &'a str,
    pub started_at: Option<String>,
    pub completed_at: Option<String>,
    pub attempts: Option<u32>,
}

impl RunSnapshotDoc {
    /// The RunSnapshot of a run whose status is `p`.
    pub fn from_projection(p: &Projection, f: RunFacts<'_>) -> Self {
        let status = p.phase.unwrap_or_default();
        RunSnapshotDoc {
            run_id: f.run_id.to_owned(),
            workflow_id: f.workflow_id.to_owned(),
            status,
            current_node_id: p.current_node.clone(),
            started_at: f.started_at,
            completed_at: f.completed_at.filter(|_| status.is_terminal()),
            error: p
                .error
                .as_ref()
                .filter(|_| status == RunPhase::Failed)
                .map(|e| RunSnapshotError {
                    code: e.code.clone(),
                    message: e.message.clone(),
                }),
            owner: RunOwner {
                tenant: f.tenant.to_owned(),
            },
            metrics: RunMetrics {
                events: p.events,
                last_sequence: p.last_sequence,
                attempts: f.attempts,
            },
            pending_interrupts: if status.is_terminal() {
                Vec::new()
            } else {
                p.pending_interrupts.clone()
            },
            interrupt: None,
            tags: None,
            metadata: None,
            configurable: None,
            scope_id: None,
            variables: None,
            parent_run_id: None,
            parent_node_id: None,
            child_runs: Vec::new(),
            wake_at: p
                .wake_at()
                .filter(|_| !status.is_terminal())
                .map(str::to_owned),
        }
    }
}

/// One problem with a run's inputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InputProblem {
    /// JSON pointer of the input (`/inputs/<name>`).
    pub field: String,
    pub problem: String,
}

/// Checks `inputs` against the declared `variables`: every required variable without a
/// default is present, and every declared variable present has its declared type. Inputs
/// that declare no variable are passed through (the spec lets a workflow read any input).
pub fn check_inputs(
    variables: &[WorkflowVariable],
    inputs: &Map<String, Value>,
) -> Vec<InputProblem> {
    let mut out = Vec::new();
    for v in variables {
        let field = format!("/inputs/{}", v.name.replace('~', "~0").replace('/', "~1"));
        match inputs.get(&v.name) {
            None if v.required == Some(true) && v.default_value.is_none() => {
                out.push(InputProblem {
                    field,
                    problem: format!("required variable `{}` is missing", v.name),
                })
            }
            Some(val) if !matches_kind(v.kind, val) => out.push(InputProblem {
                field,
                problem: format!(
                    "variable `{}` must be {}, got {}",
                    v.name,
                    kind_name(v.kind),
                    json_type(val)
                ),
            }),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_snapshot_is_the_projection_with_its_identity() {
        let mut p = Projection::default();
        p.apply(&json!({"type": "run.started", "sequence": 0, "payload": {}}));
        p.apply(&json!({"type": "node.failed", "sequence": 1, "nodeId": "a",
            "payload": {"nodeId": "a", "error": {"code": "envelope_invalid", "message": "bad"}}}));
        p.apply(&json!({"type": "run.failed", "sequence": 2,
            "payload": {"error": {"code": "envelope_invalid", "message": "bad"}}}));
        let doc = RunSnapshotDoc::from_projection(
            &p,
            RunFacts {
                run_id: "u-1",
                workflow_id: "wf",
                tenant: "team-a",
                completed_at: Some("2026-01-01T00:00:00Z".into()),
                ..Default::default()
            },
        );
        let v = serde_json::to_value(&doc).unwrap();
        assert_eq!(v["status"], "failed");
        assert_eq!(
            v["error"],
            json!({"code": "envelope_invalid", "message": "bad"})
        );
        assert_eq!(v["metrics"]["events"], 3);
        assert_eq!(v["metrics"]["lastSequence"], 2);
        assert_eq!(v["owner"]["tenant"], "team-a");
        assert_eq!(v["completedAt"], "2026-01-01T00:00:00Z");
        let running = RunSnapshotDoc::from_projection(
            &Projection::default(),
            RunFacts {
                run_id: "u",
                workflow_id: "w",
                completed_at: Some("x".into()),
                ..Default::default()
            },
        );
        assert_eq!(running.status, RunPhase::Pending);
        assert_eq!(
            running.completed_at, None,
            "no completion time before a terminal status"
        );
    }

    #[test]
    fn a_waiting_delay_shows_its_wake_time_until_the_run_ends() {
        let mut p = Projection::default();
        p.apply(&json!({"type": "run.started", "sequence": 0, "payload": {}}));
        let timer = serde_json::to_value(crate::run::waits::timer_record(
            "wait",
            "2026-01-01T00:01:00.000Z",
            60000,
        ))
        .unwrap();
        p.apply(
            &json!({"type": "log.appended", "sequence": 1, "nodeId": "wait", "payload": timer}),
        );
        let doc = |p: &Projection| {
            serde_json::to_value(RunSnapshotDoc::from_projection(p, RunFacts::default())).unwrap()
        };
        let v = doc(&p);
        assert_eq!(
            (v["status"].as_str(), v["wakeAt"].as_str()),
            (Some("running"), Some("2026-01-01T00:01:00.000Z"))
        );
        assert!(v.get("childRuns").is_none() && v.get("parentRunId").is_none());
        p.apply(&json!({"type": "run.cancelled", "sequence": 2, "payload": {}}));
        assert!(doc(&p).get("wakeAt").is_none());
    }

    #[test]
    fn inputs_are_checked_against_declared_variables() {
        let vars: Vec<WorkflowVariable> = serde_json::from_value(json!([
            {"name": "greeting", "type": "string", "required": true},
            {"name": "count", "type": "number"},
            {"name": "lang", "type": "string", "required": true, "defaultValue": "en"}
        ]))
        .unwrap();
        let ok = json!({"greeting": "hi", "count": 2, "other": true});
        assert!(check_inputs(&vars, ok.as_object().unwrap()).is_empty());
        let bad = json!({"count": "two"});
        let problems = check_inputs(&vars, bad.as_object().unwrap());
        assert_eq!(
            problems,
            vec![
                InputProblem {
                    field: "/inputs/greeting".into(),
                    problem: "required variable `greeting` is missing".into()
                },
                InputProblem {
                    field: "/inputs/count".into(),
                    problem: "variable `count` must be a number, got a string".into()
                },
            ]
        );
    }
}
