//! Executes one run's node graph, sequentially in the graph's deterministic topological
//! order, publishing every step through the [`RunLog`]. Node kinds live in their own files:
//! [`agent`] (the RFC 0023 mock agent and CP-1) and [`prompt`] (LLM nodes); the node type →
//! kind mapping is protocol's registry (`openwop_protocol::run::nodes`).
//!
//! Replay: the executor always starts from the top. A node whose `node.completed` /
//! `node.failed` is recorded is not executed again (its outputs come from the record); a
//! clarification turn whose `clarification.requested` is recorded makes no provider call; a
//! node resumes at the node attempt its recorded retries reached; within an emission, every
//! provider response is journaled in the log before it is routed and a re-executed call
//! whose response is recorded is answered from the record (`protocol::retry::journal`).
//! Everything else is re-executed and its deterministic events that are already recorded are
//! dropped by the log. So a replayed run repeats only a provider call that was in flight (no
//! recorded response) and publishes no duplicate event.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod agent;
mod prompt;

use openwop_protocol::emission;
use openwop_protocol::envelope::ContentTrust;
use openwop_protocol::events::{
    AgentDecided, AgentHandoff, AgentReasoned, AgentToolCalled, AgentToolReturned, ErrorInfo,
    EventType, InterruptKind, LogAppended, LogLevel, NodeFailed, NodeSuspended,
};
use openwop_protocol::graph::{Graph, Incoming, Node, PortValue, condition_holds};
use openwop_protocol::outcome::Outcome;
use openwop_protocol::pipeline::{self, Context, DedupStore, EnvelopeContract, HostPolicy};
use openwop_protocol::redact::Redactor;
use openwop_protocol::retry::MockProgram;
use openwop_protocol::retry::{Action, NlToFormat, NormalizedResponse, Router, RouterConfig};
use openwop_protocol::run::nodes::{Executor as NodeExecutor, MOCK_AGENT_TYPE_ID, executor_of};
use openwop_protocol::run::snapshot::RunSnapshot;
use openwop_protocol::schema::{self, ValidationIssue};
use openwop_protocol::workflow::NodeEnvelopeContract;
use openwop_providers::{CompletionRequest, MockProvider, Provider};
use serde_json::{Map, Value, json};

use crate::eventlog::{LogError, Publisher, RunLog};
use crate::providers::ProviderSet;
use crate::reasoning::{Block, ReasoningStream, thoughts_of};
use crate::telemetry::SpanHandle;

/// Host-side settings of the executor.
pub struct ExecConfig {
    /// Host opt-in for `core.conformance.mock-agent` outside `conformance-*` workflows.
    pub allow_mock_agent: bool,
    /// Provider mocks (`Run.spec.providerMocks` via the snapshot): node id → one script per
    /// clarification turn. A listed node calls the mock provider whatever its `provider`.
    pub mock_programs: BTreeMap<String, Vec<MockProgram>>,
    /// Real providers by name and model, built from the snapshot's mounts.
    pub providers: ProviderSet,
    /// `(secretId, value)` pairs redacted everywhere.
    pub secrets: Vec<(String, String)>,
}

impl std::fmt::Debug for ExecConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecConfig")
            .field("allow_mock_agent", &self.allow_mock_agent)
            .field(
                "mock_programs",
                &self.mock_programs.keys().collect::<Vec<_>>(),
            )
            .field("providers", &self.providers)
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

/// How the worker's part of the run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    Completed,
    Failed(ErrorInfo),
    /// `run.cancelled` is durable.
    Cancelled,
    /// Waiting for an answer; the worker exits with `exit::SUSPENDED`.
    Suspended {
        node_id: String,
        interrupt_id: String,
        kind: InterruptKind,
    },
}

#[derive(Debug, Clone, PartialEq)]
enum NodeState {
    Succeeded(Value),
    Failed(ErrorInfo),
    Skipped,
}

enum NodeOutcome {
    Completed(Value),
    Failed(ErrorInfo),
    Suspended(String, InterruptKind),
}

fn error(code: &str, message: impl Into<String>, retryable: bool) -> ErrorInfo {
    ErrorInfo {
        code: code.into(),
        message: message.into(),
        details: None,
        retryable: Some(retryable),
    }
}

pub struct Executor<'a, P: Publisher> {
    snap: &'a RunSnapshot,
    graph: &'a Graph,
    cfg: &'a ExecConfig,
    pub log: RunLog<P>,
    reasoning: ReasoningStream,
    mock: MockProvider,
    dedup: DedupStore,
    host: HostPolicy,
    redactor: Arc<Redactor>,
    threshold: f64,
    run_span: SpanHandle,
    /// Node executions so far in this worker (capped by the host's `maxNodeExecutions`).
    executions: u32,
}

impl<'a, P: Publisher> Executor<'a, P> {
    pub fn new(
        snap: &'a RunSnapshot,
        graph: &'a Graph,
        cfg: &'a ExecConfig,
        log: RunLog<P>,
        reasoning: ReasoningStream,
    ) -> Self {
        let programs = cfg.mock_programs.iter().flat_map(|(node, turns)| {
            turns
                .iter()
                .enumerate()
                .map(move |(t, p)| (format!("{node}#{t}"), p.clone()))
        });
        Executor {
            snap,
            graph,
            cfg,
            log,
            reasoning,
            mock: MockProvider::new("mock-model", 8192, programs),
            dedup: DedupStore::new(),
            host: snap.host.pipeline_policy(),
            redactor: Arc::new(Redactor::new(cfg.secrets.clone())),
            threshold: snap.escalation_threshold(),
            run_span: SpanHandle::none(),
            executions: 0,
        }
    }

    /// Node spans become children of `span` (the run's `openwop.run` span).
    pub fn with_run_span(mut self, span: SpanHandle) -> Self {
        self.run_span = span;
        self
    }

    fn recorded(&self, t: EventType, node: &str) -> Option<&Value> {
        self.log
            .events()
            .iter()
            .rev()
            .find(|e| e.event_type == t && e.node_id.as_deref() == Some(node))
            .map(|e| &e.payload)
    }

    /// Whether the clarification turn's events are all durable: `interrupt.requested` is the
    /// last of the pipeline's batch, so a kill inside the batch re-drives the turn (its
    /// provider response comes from the journal) and publishes the rest.
    fn recorded_interrupt(&self, interrupt_id: &str) -> bool {
        self.log.events().iter().any(|e| {
            e.event_type == EventType::InterruptRequested
                && e.payload.get("interruptId").and_then(Value::as_str) == Some(interrupt_id)
        })
    }

    /// Runs (or resumes) the run to its end or its next suspension.
    pub async fn run(&mut self) -> Result<RunEnd, LogError> {
        let inputs = self.snap.inputs.clone();
        self.log
            .emit_value(
                "run.started",
                None,
                EventType::RunStarted,
                json!({"workflowId": self.graph.id, "inputs": inputs}),
            )
            .await?;
        let mut variables = Map::new();
        for v in &self.graph.variables {
            match self.snap.inputs.get(&v.name).or(v.default.as_ref()) {
                Some(val) => {
                    variables.insert(v.name.clone(), val.clone());
                }
                None if v.required => {
                    let e = error(
                        "workflow_input_invalid",
                        format!(
                            "required variable `{}` has no value: pass it in the run's inputs",
                            v.name
                        ),
                        false,
                    );
                    return self.finish_failed(e).await;
                }
                None => {}
            }
        }
        let variables = Value::Object(variables);
        let mut states: BTreeMap<String, NodeState> = BTreeMap::new();
        let started = Instant::now();
        // The workflow's settings.timeout, capped by the host's maxRunDurationMs.
        let run_limit = match (
            self.graph.run_timeout_ms,
            self.snap.host.limits.max_run_duration_ms,
        ) {
            (Some(w), Some(h)) => Some(w.min(h)),
            (w, h) => w.or(h),
        };
        for node in &self.graph.nodes {
            if let Some(limit) = run_limit
                && started.elapsed() > Duration::from_millis(limit)
            {
                let e = error(
                    "run_timeout",
                    format!(
                        "the run exceeded its duration limit of {limit} ms (workflow settings.timeout, capped by the host's maxRunDurationMs)"
                    ),
                    false,
                );
                self.log
                    .emit_value(
                        "cap.breached/run-duration",
                        None,
                        EventType::CapBreached,
                        json!({"kind": "run-duration", "limit": limit, "observed": started.elapsed().as_millis() as u64}),
                    )
                    .await?;
                return self.finish_failed(e).await;
            }
            let state = self.visit(node, &states, &variables).await?;
            match state {
                Ok(s) => {
                    states.insert(node.id.clone(), s);
                }
                Err((interrupt_id, kind)) => {
                    return Ok(RunEnd::Suspended {
                        node_id: node.id.clone(),
                        interrupt_id,
                        kind,
                    });
                }
            }
        }
        // A failed node fails the run unless an edge consumes its failure.
        let unhandled = self
            .graph
            .nodes
            .iter()
            .find_map(|n| match states.get(&n.id) {
                Some(NodeState::Failed(e))
                    if !self
                        .graph
                        .outgoing(&n.id)
                        .any(|e| e.trigger_rule.handles_failure()) =>
                {
                    Some(e.clone())
                }
                _ => None,
            });
        if let Some(e) = unhandled {
            return self.finish_failed(e).await;
        }
        let mut outputs = Map::new();
        for n in &self.graph.nodes {
            if self.graph.outgoing(&n.id).next().is_none()
                && let Some(NodeState::Succeeded(o)) = states.get(&n.id)
            {
                outputs.insert(n.id.clone(), o.clone());
            }
        }
        self.log
            .emit_value(
                "run.completed",
                None,
                EventType::RunCompleted,
                json!({"outputs": outputs}),
            )
            .await?;
        Ok(RunEnd::Completed)
    }

    /// `run.resumed` for an answered interrupt (once per interrupt: its key is the id).
    async fn run_resumed(&mut self, interrupt_id: &str) -> Result<(), LogError> {
        self.log
            .emit_value(
                &format!("run.resumed/{interrupt_id}"),
                None,
                EventType::RunResumed,
                json!({"interruptId": interrupt_id}),
            )
            .await
    }

    async fn finish_failed(&mut self, e: ErrorInfo) -> Result<RunEnd, LogError> {
        self.log
            .emit_value(
                "run.failed",
                None,
                EventType::RunFailed,
                json!({"error": e}),
            )
            .await?;
        Ok(RunEnd::Failed(e))
    }

    /// One node: trigger rule, replay, inputs, execution with node-level retries.
    async fn visit(
        &mut self,
        node: &Node,
        states: &BTreeMap<String, NodeState>,
        variables: &Value,
    ) -> Result<Result<NodeState, (String, InterruptKind)>, LogError> {
        let id = node.id.as_str();
        if let Some(p) = self.recorded(EventType::NodeCompleted, id) {
            return Ok(Ok(NodeState::Succeeded(
                p.get("outputs").cloned().unwrap_or(Value::Null),
            )));
        }
        if let Some(p) = self.recorded(EventType::NodeFailed, id) {
            let e = serde_json::from_value(p.get("error").cloned().unwrap_or(Value::Null))
                .unwrap_or_else(|_| error("node_failed", "recorded failure", false));
            return Ok(Ok(NodeState::Failed(e)));
        }
        // Incoming edges: taken, skipped (condition false / source skipped) or failed.
        let mut edge_inputs = Map::new();
        let (mut ok, mut failed, mut total) = (0, 0, 0);
        let mut rule = None;
        for e in self.graph.incoming(id) {
            total += 1;
            rule.get_or_insert(e.trigger_rule);
            match states.get(&e.source) {
                Some(NodeState::Succeeded(out)) => {
                    let taken = match &e.condition {
                        None => true,
                        Some(c) => match condition_holds(c, out) {
                            Ok(b) => b,
                            Err(why) => {
                                let err = error(
                                    "edge_condition_invalid",
                                    format!("edge {}: {why}", e.id),
                                    false,
                                );
                                return self.fail_node(id, err, None).await.map(Ok);
                            }
                        },
                    };
                    if taken {
                        ok += 1;
                        if let Some(v) = out.get(&e.source_output) {
                            edge_inputs.insert(e.target_input.clone(), v.clone());
                        }
                    }
                }
                Some(NodeState::Failed(_)) => failed += 1,
                _ => {}
            }
        }
        let runs = rule.unwrap_or_default().is_met(Incoming {
            taken: ok,
            failed,
            total,
        });
        if !runs || node.disabled {
            let why = if node.disabled {
                "disabled"
            } else {
                "trigger rule not met"
            };
            self.log
                .emit(
                    &format!("{id}/skipped"),
                    Some(id),
                    &LogAppended {
                        level: LogLevel::Info,
                        message: format!("node {id} skipped: {why}"),
                        node_id: Some(id.to_owned()),
                        fields: Some(json!({"skipped": true, "reason": why})),
                    },
                )
                .await?;
            return Ok(Ok(NodeState::Skipped));
        }
        let inputs = match self.resolve_inputs(node, edge_inputs, states, variables) {
            Ok(i) => i,
            Err(e) => return self.fail_node(id, *e, None).await.map(Ok),
        };
        let max_retries = node.max_retries.unwrap_or(self.graph.default_max_retries);
        // A restarted worker resumes at the node attempt the log reached: the failures of the
        // earlier attempts are recorded (`{id}/retry/{n}`), replaying them would call again.
        let mut attempt = 0u32;
        while self.log.contains(&openwop_protocol::events::event_id_for(
            self.log.run_id(),
            &format!("{id}/retry/{}", attempt + 1),
        )) {
            attempt += 1;
        }
        let span = self.run_span.child("openwop.node");
        span.set_str("openwop.run_id", self.log.run_id());
        span.set_str("openwop.node_id", id);
        span.set_str("openwop.node_type", &node.type_id);
        loop {
            span.set_i64("openwop.node_attempt", i64::from(attempt) + 1);
            self.executions += 1;
            if let Some(cap) = self.snap.host.limits.max_node_executions
                && self.executions > cap
            {
                self.log
                    .emit_value(
                        &format!("{id}/cap/node-executions"),
                        Some(id),
                        EventType::CapBreached,
                        json!({"kind": "node-executions", "limit": cap, "observed": self.executions, "nodeId": id}),
                    )
                    .await?;
                let e = error(
                    "cap_breached",
                    format!("the run exceeded the host's maxNodeExecutions ({cap})"),
                    false,
                );
                return self.fail_node(id, e, Some(attempt + 1)).await.map(Ok);
            }
            let key = if attempt == 0 {
                format!("{id}/started")
            } else {
                format!("{id}/started/r{attempt}")
            };
            self.log
                .emit_value(
                    &key,
                    Some(id),
                    EventType::NodeStarted,
                    json!({"nodeId": id, "typeId": node.type_id, "attempt": attempt + 1}),
                )
                .await?;
            let deadline = node
                .timeout_ms
                .map(|ms| Instant::now() + Duration::from_millis(ms));
            let outcome = self
                .execute(node, &inputs, attempt, deadline, &span)
                .await?;
            match &outcome {
                NodeOutcome::Completed(_) => span.set_str("openwop.node_outcome", "completed"),
                NodeOutcome::Suspended(..) => span.set_str("openwop.node_outcome", "suspended"),
                NodeOutcome::Failed(e) => {
                    span.set_str("openwop.node_outcome", "failed");
                    span.fail(&e.code, &e.message);
                }
            }
            match outcome {
                NodeOutcome::Completed(outputs) => {
                    self.log
                        .emit_value(
                            &format!("{id}/completed"),
                            Some(id),
                            EventType::NodeCompleted,
                            json!({"nodeId": id, "outputs": outputs}),
                        )
                        .await?;
                    // The recorded (redacted) outputs are what downstream nodes see, live or replayed.
                    let outputs = self
                        .recorded(EventType::NodeCompleted, id)
                        .and_then(|p| p.get("outputs").cloned())
                        .unwrap_or(outputs);
                    return Ok(Ok(NodeState::Succeeded(outputs)));
                }
                NodeOutcome::Suspended(interrupt, kind) => return Ok(Err((interrupt, kind))),
                NodeOutcome::Failed(e) if e.retryable == Some(true) && attempt < max_retries => {
                    attempt += 1;
                    self.log
                        .emit(
                            &format!("{id}/retry/{attempt}"),
                            Some(id),
                            &LogAppended {
                                level: LogLevel::Warn,
                                message: format!("node {id} attempt {attempt} failed ({}); retrying ({attempt} of {max_retries})", e.code),
                                node_id: Some(id.to_owned()),
                                fields: Some(json!({"attempt": attempt, "maxRetries": max_retries, "code": e.code})),
                            },
                        )
                        .await?;
                }
                NodeOutcome::Failed(e) => {
                    if self.recorded(EventType::NodeFailed, id).is_none() {
                        return self.fail_node(id, e, Some(attempt + 1)).await.map(Ok);
                    }
                    return Ok(Ok(NodeState::Failed(e)));
                }
            }
        }
    }

    async fn fail_node(
        &mut self,
        id: &str,
        e: ErrorInfo,
        attempts: Option<u32>,
    ) -> Result<NodeState, LogError> {
        self.log
            .emit(
                &format!("{id}/failed"),
                Some(id),
                &NodeFailed {
                    node_id: id.to_owned(),
                    error: e.clone(),
                    attempts,
                },
            )
            .await?;
        Ok(NodeState::Failed(e))
    }

    fn resolve_inputs(
        &self,
        node: &Node,
        mut inputs: Map<String, Value>,
        states: &BTreeMap<String, NodeState>,
        variables: &Value,
    ) -> Result<Value, Box<ErrorInfo>> {
        for (port, pv) in &node.inputs {
            let v = match pv {
                PortValue::Static { value } => Some(value.clone()),
                PortValue::Connection {
                    node_id,
                    output_key,
                    optional,
                } => {
                    let optional = optional.unwrap_or(false);
                    let v = match states.get(node_id) {
                        Some(NodeState::Succeeded(out)) => out.get(output_key).cloned(),
                        _ => None,
                    };
                    if v.is_none() && !optional {
                        return Err(Box::new(error(
                            "input_missing",
                            format!(
                                "input `{port}` needs output `{output_key}` of node `{node_id}`, which produced none"
                            ),
                            false,
                        )));
                    }
                    v
                }
                PortValue::Variable {
                    variable_name: name,
                    optional,
                } => {
                    let v = variables.get(name).cloned();
                    if v.is_none() && !optional.unwrap_or(false) {
                        return Err(Box::new(error(
                            "input_missing",
                            format!("input `{port}` needs variable `{name}`, which has no value"),
                            false,
                        )));
                    }
                    v
                }
                PortValue::Expression { .. } => {
                    return Err(Box::new(error(
                        "capability_required",
                        format!(
                            "input `{port}` uses an expression port value; this host has no expression engine"
                        ),
                        false,
                    )));
                }
            };
            if let Some(v) = v {
                inputs.insert(port.clone(), v);
            }
        }
        if inputs.is_empty() && self.graph.incoming(&node.id).next().is_none() {
            inputs.insert("input".into(), self.snap.inputs.clone());
        }
        Ok(Value::Object(inputs))
    }

    async fn execute(
        &mut self,
        node: &Node,
        inputs: &Value,
        attempt: u32,
        deadline: Option<Instant>,
        span: &SpanHandle,
    ) -> Result<NodeOutcome, LogError> {
        match executor_of(&node.type_id) {
            Some(NodeExecutor::Passthrough) => {
                let mut out = inputs.as_object().cloned().unwrap_or_default();
                if !out.contains_key("output") {
                    let v = out.get("input").cloned().unwrap_or_else(|| inputs.clone());
                    out.insert("output".into(), v);
                }
                Ok(NodeOutcome::Completed(Value::Object(out)))
            }
            Some(NodeExecutor::MockAgent) => self.mock_agent(node).await,
            Some(NodeExecutor::Prompt) => self.prompt(node, inputs, attempt, deadline, span).await,
            None => {
                let other = node.type_id.as_str();
                Ok(NodeOutcome::Failed(ErrorInfo {
                    code: "capability_required".into(),
                    message: format!(
                        "node type `{other}` is not executable by this host; register it or change the node's typeId"
                    ),
                    details: Some(json!({"typeId": other})),
                    retryable: Some(false),
                }))
            }
        }
    }
}

/// How a run whose log already holds a terminal event ended, if it does.
pub fn recorded_end<P: Publisher>(log: &RunLog<P>) -> Option<RunEnd> {
    log.events().iter().rev().find_map(|e| match e.event_type {
        EventType::RunCompleted => Some(RunEnd::Completed),
        EventType::RunCancelled => Some(RunEnd::Cancelled),
        EventType::RunFailed => Some(RunEnd::Failed(
            e.payload
                .get("error")
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_else(|| error("run_failed", "recorded failure", false)),
        )),
        _ => None,
    })
}

/// Records `run.cancelled` (once: its id is deterministic) unless the run already ended, and
/// nothing else. The worker calls it for a snapshot with `cancel: true`, at start or after
/// a SIGTERM stop.
pub async fn cancel_run<P: Publisher>(
    log: &mut RunLog<P>,
    reason: &str,
) -> Result<RunEnd, LogError> {
    if let Some(end) = recorded_end(log) {
        return Ok(end);
    }
    log.emit_value(
        "run.cancelled",
        None,
        EventType::RunCancelled,
        json!({"reason": reason, "cancelledBy": "operator"}),
    )
    .await?;
    Ok(RunEnd::Cancelled)
}

fn config_error(id: &str, issues: &[ValidationIssue]) -> ErrorInfo {
    let first = issues.first();
    ErrorInfo {
        code: "node_config_invalid".into(),
        message: format!(
            "node {id}: config invalid at {}: {}",
            first.map(|i| i.instance_path.as_str()).unwrap_or(""),
            first.map(|i| i.message.as_str()).unwrap_or("")
        ),
        details: Some(json!(issues.iter().map(|i| json!({"instancePath": i.instance_path, "keyword": i.keyword, "message": i.message})).collect::<Vec<_>>())),
        retryable: Some(false),
    }
}
