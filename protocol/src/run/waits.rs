//! Durable waits: a `core.delay` longer than the host's threshold and a `core.subWorkflow`
//! child run hold no pod. The worker records the wait in the run's log and exits
//! ([`super::exit::SUSPENDED`]); the operator reads the wait from the status projection and
//! starts a worker when it is due — at the recorded wake time, or once the child run ended
//! (its outcome written into the parent's snapshot as a [`ChildResult`], like an answer).
//! Everything both sides must agree on lives here: the delay's bounds, the timer record, the
//! sub-workflow config, the child's name and what flows back from it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::status::{RunError, RunPhase};
use crate::events::{ErrorInfo, LogAppended, LogLevel};

/// Longest `core.delay`: 30 days. The spec names no upper bound (its fixtures use up to
/// 60 s); a bound keeps a typo from parking a run for years.
pub const MAX_DELAY_MS: u64 = 30 * 24 * 3600 * 1000;
/// Most timers and child waits kept in a status (each branch of a run may hold one).
pub const MAX_WAITS: usize = 16;
/// The `log.appended` field that records an armed timer (the spec has no timer event;
/// `node.suspended` would turn the phase to `waiting-*`, which conformance-delay forbids).
pub const TIMER_FIELD: &str = "timer";
/// `run.cancelled.reason` of a child cancelled because its parent was.
pub const PARENT_CANCELLED: &str = "parent-cancelled";

/// The interrupt profile this cascade fulfils (`interrupt-profiles.md`
/// §openwop-interrupt-cascade-cancel): a parent's cancel cancels its active children, their
/// `run.cancelled` names the parent run and node, a cancelled child gives its parent a
/// deterministic outcome (`onChildFailure`), and the interrupts the cancel cut off answer
/// `409 interrupt_already_resolved`.
pub const CASCADE_CANCEL_PROFILE: &str = "openwop-interrupt-cascade-cancel";

/// Step key of a delay node's timer record (one per node: a replay reads it back).
pub fn timer_step(node_id: &str) -> String {
    format!("{node_id}/timer")
}

/// Step key of a sub-workflow node's `node.dispatched` (one per node: the child is made once).
pub fn dispatch_step(node_id: &str) -> String {
    format!("{node_id}/dispatch")
}

/// A delay node waiting for its wake time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArmedTimer {
    pub node_id: String,
    /// RFC 3339, UTC, milliseconds.
    pub wake_at: String,
}

/// A sub-workflow node waiting for its child run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChildWait {
    pub node_id: String,
    /// The child Run's name (in the parent's namespace).
    pub child_run_name: String,
    /// The OpenWOP workflow id the child runs.
    pub child_workflow_id: String,
}

/// RFC 3339 (UTC, milliseconds) of `t`.
pub fn rfc3339_ms(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    let t = t
        .replace_nanosecond(t.nanosecond() / 1_000_000 * 1_000_000)
        .unwrap_or(t);
    t.format(&Rfc3339).unwrap_or_default()
}

/// Parses an RFC 3339 time.
pub fn parse_time(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}

/// Milliseconds from `now` until `wake_at` (0 once due).
pub fn remaining_ms(wake_at: OffsetDateTime, now: OffsetDateTime) -> u64 {
    let ms = (wake_at - now).whole_milliseconds();
    u64::try_from(ms.max(0)).unwrap_or(u64::MAX)
}

fn validation(node_id: &str, port: &str, message: String) -> Box<ErrorInfo> {
    Box::new(ErrorInfo {
        code: "validation_error".into(),
        message: format!("node {node_id}: {port}: {message}"),
        details: Some(json!({"nodeId": node_id, "field": port})),
        retryable: Some(false),
    })
}

fn bounded_ms(node_id: &str, port: &str, v: &Value, scale: u64) -> Result<u64, Box<ErrorInfo>> {
    let whole = v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
            .map(|f| f as u64)
    });
    let Some(n) = whole else {
        return Err(validation(
            node_id,
            port,
            format!("must be a non-negative integer, got {v}"),
        ));
    };
    match n.checked_mul(scale).filter(|ms| *ms <= MAX_DELAY_MS) {
        Some(ms) => Ok(ms),
        None => Err(validation(
            node_id,
            port,
            format!("{v} is beyond the longest delay of {MAX_DELAY_MS} ms (30 days)"),
        )),
    }
}

fn until_ms(
    node_id: &str,
    port: &str,
    v: &Value,
    now: OffsetDateTime,
) -> Result<u64, Box<ErrorInfo>> {
    let Some(t) = v.as_str().and_then(parse_time) else {
        return Err(validation(
            node_id,
            port,
            format!("must be an RFC 3339 date-time, got {v}"),
        ));
    };
    let ms = remaining_ms(t, now);
    if ms > MAX_DELAY_MS {
        return Err(validation(
            node_id,
            port,
            format!("{v} is beyond the longest delay of {MAX_DELAY_MS} ms (30 days)"),
        ));
    }
    Ok(ms)
}

/// How long a `core.delay` node waits from `now`: the input port `delayMs` first, then
/// `config.delayMs`, `config.until` (RFC 3339), then the `core.flow.wait` shape
/// (`config.mode: duration` + `seconds`, `mode: until` + `timestamp`). A value out of bounds
/// or of the wrong type fails the node with `validation_error` naming where it came from.
pub fn delay_ms(
    node_id: &str,
    inputs: &Value,
    config: &Value,
    now: OffsetDateTime,
) -> Result<u64, Box<ErrorInfo>> {
    if let Some(v) = inputs.get("delayMs").filter(|v| !v.is_null()) {
        return bounded_ms(node_id, "inputs.delayMs", v, 1);
    }
    if let Some(v) = config.get("delayMs") {
        return bounded_ms(node_id, "config.delayMs", v, 1);
    }
    if let Some(v) = config.get("until") {
        return until_ms(node_id, "config.until", v, now);
    }
    match config.get("mode").and_then(Value::as_str) {
        Some("duration") => match config.get("seconds") {
            Some(v) => bounded_ms(node_id, "config.seconds", v, 1000),
            None => Err(validation(
                node_id,
                "config.seconds",
                "mode duration needs seconds".into(),
            )),
        },
        Some("until") => match config.get("timestamp") {
            Some(v) => until_ms(node_id, "config.timestamp", v, now),
            None => Err(validation(
                node_id,
                "config.timestamp",
                "mode until needs timestamp".into(),
            )),
        },
        Some(other) => Err(Box::new(ErrorInfo {
            code: "capability_required".into(),
            message: format!(
                "node {node_id}: config.mode {other:?} is not supported by this host; use duration or until"
            ),
            details: Some(json!({"nodeId": node_id, "field": "config.mode"})),
            retryable: Some(false),
        })),
        None => Err(validation(
            node_id,
            "inputs.delayMs",
            "no delay given: wire input port delayMs or set config.delayMs or config.until".into(),
        )),
    }
}

/// The record of an armed timer (`log.appended`, step [`timer_step`]).
pub fn timer_record(node_id: &str, wake_at: &str, delay_ms: u64) -> LogAppended {
    LogAppended {
        level: LogLevel::Debug,
        message: format!("node {node_id} waits until {wake_at}; the worker exits meanwhile"),
        node_id: Some(node_id.to_owned()),
        fields: Some(
            json!({TIMER_FIELD: {"nodeId": node_id, "wakeAt": wake_at, "delayMs": delay_ms}}),
        ),
    }
}

/// The timer a `log.appended` payload records, if it records one.
pub fn timer_of(payload: &Value) -> Option<ArmedTimer> {
    let t = payload.get("fields")?.get(TIMER_FIELD)?;
    let wake_at = t.get("wakeAt")?.as_str()?;
    parse_time(wake_at)?;
    Some(ArmedTimer {
        node_id: t.get("nodeId")?.as_str()?.to_owned(),
        wake_at: wake_at.to_owned(),
    })
}

/// What happens to the parent node when its child did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnChildFailure {
    #[default]
    FailParent,
    Absorb,
}

/// The config of a `core.subWorkflow` node (node-packs.md, `core.subWorkflow` contract).
#[derive(Debug, Clone, PartialEq)]
pub struct SubWorkflowConfig {
    pub workflow_id: String,
    pub on_child_failure: OnChildFailure,
    /// child variable → parent variable, seeded once when the child is created.
    pub input_mapping: BTreeMap<String, String>,
    /// parent variable → child variable, applied when the child completed.
    pub output_mapping: BTreeMap<String, String>,
    pub propagate_cancellation: bool,
}

fn string_map(
    node_id: &str,
    field: &str,
    v: Option<&Value>,
) -> Result<BTreeMap<String, String>, Box<ErrorInfo>> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(BTreeMap::new());
    };
    let bad = || {
        validation(
            node_id,
            &format!("config.{field}"),
            "must be an object of variable name → variable name".into(),
        )
    };
    v.as_object()
        .ok_or_else(bad)?
        .iter()
        .map(|(k, v)| Ok((k.clone(), v.as_str().ok_or_else(bad)?.to_owned())))
        .collect()
}

impl SubWorkflowConfig {
    /// Reads a node's config; what is wrong is named.
    pub fn parse(node_id: &str, config: &Value) -> Result<SubWorkflowConfig, Box<ErrorInfo>> {
        let workflow_id = config
            .get("workflowId")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                validation(
                    node_id,
                    "config.workflowId",
                    "required: the OpenWOP id of the workflow to run as the child".into(),
                )
            })?
            .to_owned();
        if config.get("waitForCompletion") == Some(&Value::Bool(false)) {
            return Err(validation(
                node_id,
                "config.waitForCompletion",
                "false (fire and forget) is not supported by this host; leave it true".into(),
            ));
        }
        let on_child_failure = match config.get("onChildFailure") {
            None | Some(Value::Null) => OnChildFailure::default(),
            Some(v) => serde_json::from_value(v.clone()).map_err(|_| {
                validation(
                    node_id,
                    "config.onChildFailure",
                    format!("must be fail-parent or absorb, got {v}"),
                )
            })?,
        };
        Ok(SubWorkflowConfig {
            workflow_id,
            on_child_failure,
            input_mapping: string_map(node_id, "inputMapping", config.get("inputMapping"))?,
            output_mapping: string_map(node_id, "outputMapping", config.get("outputMapping"))?,
            propagate_cancellation: config
                .get("propagateCancellation")
                .and_then(Value::as_bool)
                .unwrap_or(true),
        })
    }

    /// The child's inputs: each mapped child variable gets the parent variable's value; an
    /// unset parent variable leaves the child variable unset (never null).
    pub fn child_inputs(&self, parent_variables: &Value) -> Map<String, Value> {
        self.input_mapping
            .iter()
            .filter_map(|(child, parent)| {
                let v = parent_variables.get(parent).filter(|v| !v.is_null())?;
                Some((child.clone(), v.clone()))
            })
            .collect()
    }
}

/// The child Run's name: derived from (parent name, node id) only, so reading the same
/// `node.dispatched` twice can never make two children. Fits a Kubernetes name and leaves
/// room for the worker pod's suffix.
pub fn child_run_name(parent_name: &str, node_id: &str) -> String {
    let hash = hex::encode(Sha256::digest(
        format!("{parent_name}\0{node_id}").as_bytes(),
    ));
    let stem: String = parent_name.chars().take(40).collect();
    let stem = stem.trim_end_matches(['-', '.']);
    format!("{stem}-c{}", &hash[..10])
}

/// `node.dispatched` of a sub-workflow node: intent recorded before the operator makes the
/// child (`inputs` are the child's, resolved once by the input mapping).
pub fn dispatched_payload(node_id: &str, child: &ChildWait, inputs: &Map<String, Value>) -> Value {
    json!({
        "nodeId": node_id,
        "childWorkflowId": child.child_workflow_id,
        "childRunName": child.child_run_name,
        "inputs": inputs,
    })
}

/// The child a `node.dispatched` payload names.
pub fn child_of(node_id: Option<&str>, payload: &Value) -> Option<ChildWait> {
    let s = |k| payload.get(k).and_then(Value::as_str);
    Some(ChildWait {
        node_id: s("nodeId").or(node_id)?.to_owned(),
        child_run_name: s("childRunName")?.to_owned(),
        child_workflow_id: s("childWorkflowId").unwrap_or_default().to_owned(),
    })
}

/// Where a child run comes from: written into the child's snapshot by the operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentRef {
    pub run_id: String,
    pub run_name: String,
    pub node_id: String,
    /// 1 for a child of a root run.
    pub depth: u32,
}

/// How a child run ended, written into the parent's snapshot by the operator (like an
/// answer) before it starts the parent's worker again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildResult {
    pub node_id: String,
    pub child_run_id: String,
    pub child_run_name: String,
    pub child_status: RunPhase,
    /// The child's variables the parent's `outputMapping` reads (only those).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub variables: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
}

/// The phase a run waiting on child runs shows: the first waiting phase among its children
/// (`waiting-approval`, `waiting-input`, `waiting-external`) while the run's own events leave
/// it `running` or waiting with nothing of its own to answer (`pending` false), else its own
/// phase. So `kubectl get runs` and `GET /v1/runs/{parent}` say what the run needs, as the
/// interrupt profiles' parent/child scenario reads it (the parent polled to
/// `waiting-approval` while its child's gate waits). `children`: the last-seen phase of
/// each child a sub-workflow node waits for, in wait order.
pub fn mirrored_phase(
    own: RunPhase,
    pending: bool,
    children: impl IntoIterator<Item = Option<RunPhase>>,
) -> RunPhase {
    let mirrorable = own == RunPhase::Running || (own.is_waiting() && !pending);
    if !mirrorable {
        return own;
    }
    children
        .into_iter()
        .flatten()
        .find(|p| p.is_waiting())
        .unwrap_or(RunPhase::Running)
}

/// `run.cancelled`'s payload for a run whose snapshot says `cancel`: a child cancelled with
/// its parent says so (`reason: parent-cancelled`, `parentRunId`, `parentNodeId`); a direct cancel never
/// names a parent.
pub fn cancelled_payload(cancel_reason: Option<&str>, parent: Option<&ParentRef>) -> Value {
    let reason = cancel_reason.unwrap_or("cancelled by spec.cancel");
    let mut p = super::ending::cancelled_payload(reason, super::ending::CANCELLED_BY_OPERATOR);
    if reason == PARENT_CANCELLED
        && let Some(parent) = parent
    {
        p["parentRunId"] = Value::String(parent.run_id.clone());
        p["parentNodeId"] = Value::String(parent.node_id.clone());
    }
    p
}

/// What the parent node reports once its child ended: `Ok(outputs)` for `node.completed`
/// (`{childRunId, childStatus, variables}` — `variables` the output-mapped parent variables,
/// a child value that is unset never overwrites), or `Err` for `node.failed` under
/// `fail-parent`.
pub fn child_outcome(cfg: &SubWorkflowConfig, r: &ChildResult) -> Result<Value, Box<ErrorInfo>> {
    let status = r.child_status.as_str();
    // No child was made (e.g. `unknown_child_workflow`): the operator's error, as it is.
    if r.child_run_id.is_empty()
        && let Some(e) = &r.error
    {
        return Err(Box::new(ErrorInfo {
            code: e.code.clone(),
            message: e.message.clone(),
            details: Some(json!({"childStatus": status})),
            retryable: Some(false),
        }));
    }
    if r.child_status != RunPhase::Completed && cfg.on_child_failure == OnChildFailure::FailParent {
        let why = r
            .error
            .as_ref()
            .map(|e| format!(": {} ({})", e.message, e.code))
            .unwrap_or_default();
        return Err(Box::new(ErrorInfo {
            code: "child_failed".into(),
            message: format!(
                "child run {} of workflow {} ended {status}{why}",
                r.child_run_name, cfg.workflow_id
            ),
            details: Some(json!({"childRunId": r.child_run_id, "childStatus": status})),
            retryable: Some(false),
        }));
    }
    let mut variables = Map::new();
    if r.child_status == RunPhase::Completed {
        for (parent, child) in &cfg.output_mapping {
            if let Some(v) = r.variables.get(child).filter(|v| !v.is_null()) {
                variables.insert(parent.clone(), v.clone());
            }
        }
    }
    Ok(json!({"childRunId": r.child_run_id, "childStatus": status, "variables": variables}))
}

#[cfg(test)]
mod tests {
    /// The cascade-cancel profile: a cascaded `run.cancelled` names the parent run and node; a
    /// direct cancel names no parent, even for a child.
    #[test]
    fn a_cascaded_cancel_names_its_parent_and_a_direct_one_does_not() {
        use super::*;
        let parent = ParentRef {
            run_id: "p-uid".into(),
            run_name: "p".into(),
            node_id: "subwf-call".into(),
            depth: 1,
        };
        let p = cancelled_payload(Some(PARENT_CANCELLED), Some(&parent));
        assert_eq!(
            (&p["reason"], &p["parentRunId"], &p["parentNodeId"]),
            (
                &json!(PARENT_CANCELLED),
                &json!("p-uid"),
                &json!("subwf-call")
            )
        );
        assert!(matches!(
            crate::schema::validate_event_payload("run.cancelled", &p),
            None | Some(Ok(()))
        ));
        let direct = cancelled_payload(Some("user asked"), Some(&parent));
        assert!(direct.get("parentRunId").is_none() && direct.get("parentNodeId").is_none());
    }

    #[test]
    fn a_run_shows_the_wait_of_the_child_it_waits_for() {
        use RunPhase::*;
        // Own phase, own pending interrupt, children's phases → phase shown.
        let rows: [(RunPhase, bool, Vec<Option<RunPhase>>, RunPhase); 9] = [
            (Running, false, vec![Some(WaitingApproval)], WaitingApproval),
            (
                Running,
                false,
                vec![None, Some(Running), Some(WaitingInput)],
                WaitingInput,
            ),
            (Running, false, vec![Some(Running), None], Running),
            // The child was answered: the mirrored wait ends.
            (WaitingApproval, false, vec![Some(Running)], Running),
            (
                WaitingApproval,
                false,
                vec![Some(WaitingExternal)],
                WaitingExternal,
            ),
            // The run's own interrupt wins: it is what its own answer needs.
            (
                WaitingInput,
                true,
                vec![Some(WaitingApproval)],
                WaitingInput,
            ),
            // Ended, paused or cancelling runs keep their phase.
            (Completed, false, vec![Some(WaitingApproval)], Completed),
            (Cancelling, false, vec![Some(WaitingApproval)], Cancelling),
            (Pending, false, vec![Some(WaitingApproval)], Pending),
        ];
        for (own, pending, children, want) in rows {
            assert_eq!(
                mirrored_phase(own, pending, children.clone()),
                want,
                "{own:?} {pending} {children:?}"
            );
        }
    }
    use super::*;

    fn now() -> OffsetDateTime {
        parse_time("2026-01-01T00:00:00Z").unwrap()
    }

    #[test]
    fn the_delay_comes_from_the_port_then_config_within_bounds() {
        let d = |i: Value, c: Value| delay_ms("w", &i, &c, now());
        assert_eq!(d(json!({"delayMs": 1000}), json!({"delayMs": 5})), Ok(1000));
        assert_eq!(d(json!({}), json!({"delayMs": 5})), Ok(5));
        assert_eq!(
            d(json!({}), json!({"until": "2026-01-01T00:00:02.5Z"})),
            Ok(2500)
        );
        assert_eq!(
            d(json!({}), json!({"until": "2025-01-01T00:00:00Z"})),
            Ok(0)
        );
        assert_eq!(
            d(json!({}), json!({"mode": "duration", "seconds": 3})),
            Ok(3000)
        );
        assert_eq!(d(json!({"delayMs": 2.0}), json!({})), Ok(2));
        for (i, c, field) in [
            (json!({"delayMs": -1}), json!({}), "inputs.delayMs"),
            (json!({"delayMs": 1.5}), json!({}), "inputs.delayMs"),
            (json!({"delayMs": "10"}), json!({}), "inputs.delayMs"),
            (
                json!({}),
                json!({"delayMs": MAX_DELAY_MS + 1}),
                "config.delayMs",
            ),
            (json!({}), json!({"until": "tomorrow"}), "config.until"),
            (json!({}), json!({}), "inputs.delayMs"),
            (json!({}), json!({"mode": "duration"}), "config.seconds"),
        ] {
            let e = d(i.clone(), c.clone()).unwrap_err();
            assert_eq!(e.code, "validation_error", "{i} {c}");
            assert_eq!(e.details.unwrap()["field"], field, "{i} {c}");
            assert!(e.message.contains(field), "{}", e.message);
        }
        let e = d(json!({}), json!({"mode": "webhook"})).unwrap_err();
        assert_eq!(e.code, "capability_required");
    }

    #[test]
    fn the_timer_record_reads_back() {
        let at = rfc3339_ms(now() + time::Duration::milliseconds(1234));
        assert_eq!(at, "2026-01-01T00:00:01.234Z");
        let rec = serde_json::to_value(timer_record("w", &at, 1234)).unwrap();
        assert_eq!(
            timer_of(&rec),
            Some(ArmedTimer {
                node_id: "w".into(),
                wake_at: at.clone()
            })
        );
        assert_eq!(remaining_ms(parse_time(&at).unwrap(), now()), 1234);
        assert_eq!(remaining_ms(now(), parse_time(&at).unwrap()), 0);
        assert_eq!(timer_of(&json!({"fields": {"other": 1}})), None);
    }

    #[test]
    fn the_child_name_is_deterministic_and_fits() {
        let a = child_run_name("parent", "subwf-call");
        assert_eq!(a, child_run_name("parent", "subwf-call"));
        assert_ne!(a, child_run_name("parent", "other"));
        assert!(a.starts_with("parent-c") && a.len() == "parent-c".len() + 10);
        let long = child_run_name(&"x".repeat(253), "n");
        assert!(long.len() <= 52, "{long}");
    }

    #[test]
    fn sub_workflow_config_and_mappings() {
        let cfg = SubWorkflowConfig::parse(
            "s",
            &json!({"workflowId": "child", "onChildFailure": "absorb",
                    "inputMapping": {"topic": "subject"}, "outputMapping": {"out": "result"}}),
        )
        .unwrap();
        assert_eq!(cfg.on_child_failure, OnChildFailure::Absorb);
        let inputs = cfg.child_inputs(&json!({"subject": "cats", "other": 1}));
        assert_eq!(Value::Object(inputs), json!({"topic": "cats"}));
        assert!(cfg.child_inputs(&json!({"subject": null})).is_empty());
        for (c, field) in [
            (json!({}), "config.workflowId"),
            (
                json!({"workflowId": "c", "waitForCompletion": false}),
                "config.waitForCompletion",
            ),
            (
                json!({"workflowId": "c", "onChildFailure": "explode"}),
                "config.onChildFailure",
            ),
            (
                json!({"workflowId": "c", "inputMapping": {"a": 1}}),
                "config.inputMapping",
            ),
        ] {
            let e = SubWorkflowConfig::parse("s", &c).unwrap_err();
            assert_eq!(e.details.unwrap()["field"], field, "{c}");
        }
        let mut r = ChildResult {
            node_id: "s".into(),
            child_run_id: "uid-c".into(),
            child_run_name: "p-c1".into(),
            child_status: RunPhase::Completed,
            variables: json!({"result": "done"}).as_object().unwrap().clone(),
            error: None,
        };
        assert_eq!(
            child_outcome(&cfg, &r).unwrap(),
            json!({"childRunId": "uid-c", "childStatus": "completed", "variables": {"out": "done"}})
        );
        r.child_status = RunPhase::Failed;
        assert_eq!(child_outcome(&cfg, &r).unwrap()["childStatus"], "failed");
        let strict = SubWorkflowConfig {
            on_child_failure: OnChildFailure::FailParent,
            ..cfg
        };
        let e = child_outcome(&strict, &r).unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.details.unwrap()["childStatus"].as_str()),
            ("child_failed", Some("failed"))
        );
    }
}
