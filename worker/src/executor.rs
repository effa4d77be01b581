//! Executes one run's node graph, sequentially in the graph's deterministic topological
//! order, publishing every step through the [`RunLog`].
//!
//! Replay: the executor always starts from the top. A node whose `node.completed` /
//! `node.failed` is recorded is not executed again (its outputs come from the record); a
//! clarification turn whose `clarification.requested` is recorded makes no provider call;
//! everything else is re-executed and its deterministic events that are already recorded are
//! dropped by the log. So a replayed run repeats no provider call for a finished envelope and
//! publishes no duplicate event.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openwop_protocol::envelope::{ContentTrust, is_universal_kind};
use openwop_protocol::events::{
    AgentDecided, AgentHandoff, AgentReasoned, AgentToolCalled, AgentToolReturned, ErrorInfo,
    EventType, InterruptKind, LogAppended, LogLevel, NodeFailed, NodeSuspended,
};
use openwop_protocol::outcome::Outcome;
use openwop_protocol::pipeline::{self, Context, DedupStore, EnvelopeContract, HostPolicy};
use openwop_protocol::redact::Redactor;
use openwop_protocol::retry::{Action, NlToFormat, NormalizedResponse, Router, RouterConfig};
use openwop_protocol::schema::{self, ValidationIssue};
use openwop_protocol::workflow::NodeEnvelopeContract;
use openwop_protocol::workflow_check::MOCK_AGENT_TYPE_ID;
use openwop_providers::{CompletionRequest, MockProvider, MockScript, Provider};
use serde_json::{Map, Value, json};

use crate::eventlog::{LogError, Publisher, RunLog};
use crate::graph::{Graph, Node, PortValue, TriggerRule, condition_holds};
use crate::reasoning::{Block, ReasoningStream, thoughts_of};
use crate::snapshot::Snapshot;
use crate::telemetry::SpanHandle;

/// Host-side settings of the executor.
pub struct ExecConfig {
    /// Host opt-in for `core.conformance.mock-agent` outside `conformance-*` workflows.
    pub allow_mock_agent: bool,
    /// Provider mocks (`Run.spec.providerMocks` via the snapshot): node id → one script per
    /// clarification turn. A listed node calls the mock provider whatever its `provider`.
    pub mock_programs: BTreeMap<String, Vec<MockScript>>,
    /// Real providers by name (`openai`, `anthropic`, …), built from the snapshot's mounts.
    pub providers: BTreeMap<String, Box<dyn Provider>>,
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
            .field("providers", &self.providers.keys().collect::<Vec<_>>())
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
    /// Waiting for an answer; the worker exits with `EXIT_SUSPENDED`.
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
    snap: &'a Snapshot,
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
}

impl<'a, P: Publisher> Executor<'a, P> {
    pub fn new(
        snap: &'a Snapshot,
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
            host: HostPolicy::default(),
            redactor: Arc::new(Redactor::new(cfg.secrets.clone())),
            threshold: snap.escalation_threshold(),
            run_span: SpanHandle::none(),
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

    fn recorded_interrupt(&self, interrupt_id: &str) -> bool {
        self.log.events().iter().any(|e| {
            e.event_type == EventType::ClarificationRequested
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
        for node in &self.graph.nodes {
            if let Some(limit) = self.graph.run_timeout_ms
                && started.elapsed() > Duration::from_millis(limit)
            {
                let e = error(
                    "run_timeout",
                    format!("the run exceeded settings.timeout of {limit} ms"),
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
        let runs = total == 0
            || match rule.unwrap_or_default() {
                TriggerRule::AllSuccess => ok == total,
                TriggerRule::AnySuccess => ok > 0,
                TriggerRule::AllComplete => true,
                TriggerRule::NoneFailed => failed == 0 && ok > 0,
                TriggerRule::AnyFailed => failed > 0,
            };
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
        let mut attempt = 0u32;
        let span = self.run_span.child("openwop.node");
        span.set_str("openwop.run_id", self.log.run_id());
        span.set_str("openwop.node_id", id);
        span.set_str("openwop.node_type", &node.type_id);
        loop {
            span.set_i64("openwop.node_attempt", i64::from(attempt) + 1);
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
        match node.type_id.as_str() {
            "core.identity" | "core.flow.noop" => {
                let mut out = inputs.as_object().cloned().unwrap_or_default();
                if !out.contains_key("output") {
                    let v = out.get("input").cloned().unwrap_or_else(|| inputs.clone());
                    out.insert("output".into(), v);
                }
                Ok(NodeOutcome::Completed(Value::Object(out)))
            }
            MOCK_AGENT_TYPE_ID => self.mock_agent(node).await,
            "core.ai.callPrompt" | "core.ai.structuredOutput" => {
                self.prompt(node, inputs, attempt, deadline, span).await
            }
            other => Ok(NodeOutcome::Failed(ErrorInfo {
                code: "capability_required".into(),
                message: format!(
                    "node type `{other}` is not executable by this host; register it or change the node's typeId"
                ),
                details: Some(json!({"typeId": other})),
                retryable: Some(false),
            })),
        }
    }

    /// RFC 0023 conformance mock agent: reasoned → tool pairs → handoff → decided → CP-1.
    async fn mock_agent(&mut self, node: &Node) -> Result<NodeOutcome, LogError> {
        let id = node.id.as_str();
        if !self.graph.id.starts_with("conformance-") && !self.cfg.allow_mock_agent {
            return Ok(NodeOutcome::Failed(error(
                "capability_required",
                format!(
                    "{MOCK_AGENT_TYPE_ID} is conformance-only: use a workflow id starting with `conformance-` or enable the host's conformance.mockAgent"
                ),
                false,
            )));
        }
        if let Err(issues) = schema::validate(schema::Document::MockAgentConfig, &node.config) {
            return Ok(NodeOutcome::Failed(config_error(id, &issues)));
        }
        let c = &node.config;
        let agent_id = c
            .get("agentId")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| node.agent_id.clone())
            .unwrap_or_else(|| format!("host:mock-agent:{id}"));
        let mut block = Block {
            agent_id: agent_id.clone(),
            title: format!("agent {agent_id} reasoning"),
            ..Block::default()
        };
        let mut reasoned = false;
        match c.get("mockReasoning") {
            Some(Value::Bool(true)) => {
                let text = format!("mock reasoning for node {id}");
                block.thoughts = vec![text.clone()];
                self.emit_agent(
                    id,
                    "reasoned",
                    &AgentReasoned {
                        agent_id: agent_id.clone(),
                        reasoning: text,
                        verbosity: None,
                    },
                )
                .await?;
                reasoned = true;
            }
            Some(r @ Value::Object(_)) => {
                let summary = r
                    .get("summary")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let trace = r.get("trace");
                block.thoughts = match trace {
                    Some(Value::String(t)) => thoughts_of(t),
                    Some(Value::Array(a)) => a
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect(),
                    _ => thoughts_of(&summary),
                };
                let verbosity = trace.map(|_| "trace".to_owned());
                self.emit_agent(
                    id,
                    "reasoned",
                    &AgentReasoned {
                        agent_id: agent_id.clone(),
                        reasoning: summary,
                        verbosity,
                    },
                )
                .await?;
                reasoned = true;
            }
            _ => {}
        }
        block.correlation_id = openwop_protocol::events::event_id_for(
            self.log.run_id(),
            &format!("{id}/agent/reasoned"),
        );
        for (i, call) in c
            .get("mockToolCalls")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let tool = call
                .get("toolId")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let call_id = format!("{id}-call-{i}");
            let called = self.log.build(
                &format!("{id}/agent/tool/{i}/called"),
                Some(id),
                &AgentToolCalled {
                    agent_id: agent_id.clone(),
                    tool_name: tool.clone(),
                    call_id: call_id.clone(),
                    inputs: call.get("arguments").cloned(),
                },
            );
            let called_id = called.event_id.clone();
            self.log.append(vec![called]).await?;
            let err = call.get("error").cloned();
            let returned = self
                .log
                .build(
                    &format!("{id}/agent/tool/{i}/returned"),
                    Some(id),
                    &AgentToolReturned {
                        agent_id: agent_id.clone(),
                        tool_name: tool.clone(),
                        call_id: call_id.clone(),
                        outcome: call.get("result").cloned(),
                        status: Some(if err.is_some() { "error" } else { "ok" }.into()),
                        error: err,
                        duration_ms: call.get("durationMs").and_then(Value::as_u64),
                    },
                )
                .caused_by(called_id);
            self.log.append(vec![returned]).await?;
            block
                .nested
                .push((call_id, vec![format!("called tool {tool}")]));
        }
        if let Some(h) = c.get("mockHandoff") {
            let to = h
                .get("toAgentId")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            self.emit_agent(
                id,
                "handoff",
                &AgentHandoff {
                    from_agent_id: agent_id.clone(),
                    to_agent_id: to,
                    reason: h.get("reason").and_then(Value::as_str).map(str::to_owned),
                },
            )
            .await?;
        }
        let decision = c.get("mockDecision");
        let confidence = decision
            .and_then(|d| d.get("confidence"))
            .and_then(Value::as_f64)
            .or_else(|| c.get("mockConfidence").and_then(Value::as_f64));
        if let Some(d) = decision {
            let value = d.get("decision").cloned().unwrap_or(Value::Null);
            block.conclusion = Some(match &value {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            });
            self.emit_agent(
                id,
                "decided",
                &AgentDecided {
                    agent_id: agent_id.clone(),
                    decision: value,
                    confidence,
                },
            )
            .await?;
        }
        if reasoned {
            let key = format!("{id}/agent");
            self.reasoning
                .publish(&mut self.log, id, &key, &block)
                .await?;
        }
        let output = json!({"output": {"agentId": agent_id, "decision": decision.and_then(|d| d.get("decision")).cloned(), "confidence": confidence}});
        match confidence {
            Some(observed) if observed < self.threshold => {
                self.escalate(id, &agent_id, observed, output).await
            }
            _ => Ok(NodeOutcome::Completed(output)),
        }
    }

    async fn emit_agent<T: openwop_protocol::events::EventPayload>(
        &mut self,
        id: &str,
        step: &str,
        p: &T,
    ) -> Result<(), LogError> {
        self.log
            .emit(&format!("{id}/agent/{step}"), Some(id), p)
            .await
    }

    /// CP-1: a decision below the escalation threshold waits for a (trusted) approval.
    async fn escalate(
        &mut self,
        id: &str,
        agent_id: &str,
        observed: f64,
        output: Value,
    ) -> Result<NodeOutcome, LogError> {
        let interrupt_id =
            openwop_protocol::events::event_id_for(self.log.run_id(), &format!("{id}/cp1"))
                .replacen("evt-", "int-", 1);
        self.log
            .emit(
                &format!("{id}/cp1/suspended"),
                Some(id),
                &NodeSuspended {
                    node_id: id.to_owned(),
                    interrupt_id: interrupt_id.clone(),
                    kind: Some(InterruptKind::Approval),
                    reason: Some("low-confidence".into()),
                    agent_id: Some(agent_id.to_owned()),
                    threshold: Some(self.threshold),
                    observed: Some(observed),
                },
            )
            .await?;
        let Some(answer) = self.snap.answer(&interrupt_id).cloned() else {
            return Ok(NodeOutcome::Suspended(
                interrupt_id,
                InterruptKind::Approval,
            ));
        };
        let untrusted = answer.content_trust.as_deref() == Some(ContentTrust::Untrusted.as_str());
        if openwop_protocol::trust::blocks_approval(
            if untrusted {
                ContentTrust::Untrusted
            } else {
                ContentTrust::Trusted
            },
            true,
        ) || answer.approved.is_none()
        {
            let why = if untrusted {
                "untrusted_content_blocks_approval: an untrusted answer can never approve"
            } else {
                "the answer carries no approval decision"
            };
            self.log
                .emit(
                    &format!("{id}/cp1/answer-refused"),
                    Some(id),
                    &LogAppended {
                        level: LogLevel::Warn,
                        message: why.into(),
                        node_id: Some(id.to_owned()),
                        fields: Some(json!({"interruptId": interrupt_id})),
                    },
                )
                .await?;
            return Ok(NodeOutcome::Suspended(
                interrupt_id,
                InterruptKind::Approval,
            ));
        }
        let approved = answer.approved == Some(true);
        self.log
            .emit_value(
                &format!("run.resumed/{interrupt_id}"),
                None,
                EventType::RunResumed,
                json!({"interruptId": interrupt_id}),
            )
            .await?;
        let (t, p) = if approved {
            (
                EventType::ApprovalGranted,
                json!({"nodeId": id, "interruptId": interrupt_id}),
            )
        } else {
            (
                EventType::ApprovalRejected,
                json!({"nodeId": id, "interruptId": interrupt_id, "comment": answer.comment}),
            )
        };
        self.log
            .emit_value(&format!("{id}/cp1/decision"), Some(id), t, p)
            .await?;
        self.log
            .emit_value(
                &format!("{id}/cp1/resolved"),
                Some(id),
                EventType::InterruptResolved,
                json!({"interruptId": interrupt_id, "nodeId": id, "approved": approved}),
            )
            .await?;
        if !approved {
            return Ok(NodeOutcome::Failed(error(
                "approval_rejected",
                "the low-confidence decision was rejected by the approver",
                false,
            )));
        }
        self.log
            .emit_value(
                &format!("{id}/cp1/resumed"),
                Some(id),
                EventType::NodeResumed,
                json!({"nodeId": id, "interruptId": interrupt_id}),
            )
            .await?;
        Ok(NodeOutcome::Completed(output))
    }

    /// `core.ai.callPrompt` / `core.ai.structuredOutput`: provider + retry router + envelope
    /// pipeline, one emission per clarification turn.
    async fn prompt(
        &mut self,
        node: &Node,
        inputs: &Value,
        attempt: u32,
        deadline: Option<Instant>,
        node_span: &SpanHandle,
    ) -> Result<NodeOutcome, LogError> {
        let id = node.id.as_str();
        let c = &node.config;
        let envelope_type = c
            .get("envelopeType")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let output_schema = c.get("outputSchema").cloned();
        if envelope_type.is_none() && output_schema.is_none() {
            return Ok(NodeOutcome::Failed(error(
                "node_config_invalid",
                format!("node {id}: set config.envelopeType or config.outputSchema"),
                false,
            )));
        }
        let compiled = match &output_schema {
            Some(s) => match schema::compile(s) {
                Ok(c) => Some(c),
                Err(e) => {
                    return Ok(NodeOutcome::Failed(error(
                        "node_config_invalid",
                        format!("node {id}: config.outputSchema does not compile: {e}"),
                        false,
                    )));
                }
            },
            None => None,
        };
        // A block without `accepts` gates nothing (only the universal kinds are implied).
        let contract: Option<EnvelopeContract> = node
            .envelope_contract
            .as_ref()
            .filter(|c| c.accepts.is_some())
            .map(NodeEnvelopeContract::to_pipeline);
        let vendor_schemas: BTreeMap<String, schema::CompiledSchema> = node
            .envelope_contract
            .as_ref()
            .and_then(|c| c.schemas.as_ref())
            .map(|m| {
                m.iter()
                    .filter_map(|(k, s)| schema::compile(s).ok().map(|c| (k.clone(), c)))
                    .collect()
            })
            .unwrap_or_default();
        let provider_name = c
            .get("provider")
            .and_then(Value::as_str)
            .unwrap_or(if self.cfg.providers.is_empty() {
                "mock"
            } else {
                ""
            })
            .to_owned();
        let provider_name = if provider_name.is_empty() {
            self.cfg
                .providers
                .keys()
                .next()
                .cloned()
                .unwrap_or_else(|| "mock".into())
        } else {
            provider_name
        };
        let max_tokens = c
            .get("maxTokens")
            .and_then(Value::as_u64)
            .unwrap_or(1024)
            .clamp(1, u32::MAX as u64) as u32;
        let schema_rounds = c
            .get("schemaRounds")
            .and_then(Value::as_u64)
            .unwrap_or(3)
            .min(16) as u32;
        let clarification_rounds = c
            .get("clarificationRounds")
            .and_then(Value::as_u64)
            .unwrap_or(2);
        let base_prompt = c
            .get("prompt")
            .or_else(|| c.get("userPrompt"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let run_id = self.log.run_id().to_owned();
        let retry = if attempt == 0 {
            String::new()
        } else {
            format!(":r{attempt}")
        };
        let mut answers: Vec<Value> = Vec::new();
        let mut turn: u64 = 0;
        loop {
            let corr = format!("{run_id}:{id}:{turn}{retry}");
            let interrupt_id =
                pipeline::interrupt_id_for(&run_id, &self.redactor.redact_str(&corr).0);
            if self.recorded_interrupt(&interrupt_id) {
                // This turn's envelope is finished (a clarification): no provider call.
                self.log
                    .emit(
                        &format!("{corr}/node.suspended"),
                        Some(id),
                        &NodeSuspended {
                            node_id: id.to_owned(),
                            interrupt_id: interrupt_id.clone(),
                            kind: Some(InterruptKind::Clarification),
                            reason: None,
                            agent_id: None,
                            threshold: None,
                            observed: None,
                        },
                    )
                    .await?;
                let Some(answer) = self.snap.answer(&interrupt_id).cloned() else {
                    return Ok(NodeOutcome::Suspended(
                        interrupt_id,
                        InterruptKind::Clarification,
                    ));
                };
                let value = answer.value.clone().unwrap_or(Value::Null);
                self.log
                    .emit_value(
                        &format!("run.resumed/{interrupt_id}"),
                        None,
                        EventType::RunResumed,
                        json!({"interruptId": interrupt_id}),
                    )
                    .await?;
                self.log
                    .emit_value(
                        &format!("{corr}/clarification.resolved"),
                        Some(id),
                        EventType::ClarificationResolved,
                        json!({"nodeId": id, "interruptId": interrupt_id, "answers": value}),
                    )
                    .await?;
                self.log
                    .emit_value(
                        &format!("{corr}/interrupt.resolved"),
                        Some(id),
                        EventType::InterruptResolved,
                        json!({"nodeId": id, "interruptId": interrupt_id}),
                    )
                    .await?;
                self.log
                    .emit_value(
                        &format!("{corr}/node.resumed"),
                        Some(id),
                        EventType::NodeResumed,
                        json!({"nodeId": id, "interruptId": interrupt_id}),
                    )
                    .await?;
                answers.push(value);
                turn += 1;
                continue;
            }
            if turn > clarification_rounds {
                self.log.emit_value(&format!("{corr}/cap"), Some(id), EventType::CapBreached, json!({"kind": "clarification", "limit": clarification_rounds, "observed": turn, "nodeId": id})).await?;
                return Ok(NodeOutcome::Failed(error(
                    "cap_breached",
                    format!(
                        "node {id} asked for clarification more than clarificationRounds ({clarification_rounds}) times"
                    ),
                    false,
                )));
            }
            let mut user = format!("{base_prompt}\n\nInputs:\n{}", inputs);
            for (i, a) in answers.iter().enumerate() {
                user.push_str(&format!("\n\nAnswers to clarification {}:\n{a}", i + 1));
            }
            let mocked = self.cfg.mock_programs.get(id);
            let (provider, program_key): (&dyn Provider, String) = if let Some(turns) = mocked {
                let key = format!("{id}#{turn}");
                if !self.mock.has_script(&key) {
                    return Ok(NodeOutcome::Failed(error(
                        "provider_error",
                        format!(
                            "providerMocks.{id} has {} program(s) but clarification turn {turn} needs one more: list one program per turn under providerMocks.{id}.turns",
                            turns.len()
                        ),
                        false,
                    )));
                }
                (&self.mock, key)
            } else if provider_name == "mock" {
                (&self.mock, format!("{id}#{turn}"))
            } else {
                match self.cfg.providers.get(&provider_name) {
                    Some(p) => (p.as_ref(), id.to_owned()),
                    None => {
                        return Ok(NodeOutcome::Failed(error(
                            "capability_required",
                            format!(
                                "node {id} uses provider `{provider_name}`, which is not configured for this workflow: add it to spec.providers"
                            ),
                            false,
                        )));
                    }
                }
            };
            let model = c
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or(provider.model())
                .to_owned();
            let mut rc = RouterConfig::new(
                id,
                provider.name(),
                model.clone(),
                max_tokens,
                provider.output_ceiling(),
            );
            rc.step_key = format!("{id}:t{turn}{retry}");
            rc.system_prompt = c
                .get("systemPrompt")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            rc.user_prompt = user;
            rc.schema_rounds = schema_rounds;
            if let Some(m) = c.get("truncationMultiplier").and_then(Value::as_f64) {
                rc.multiplier = m;
            }
            if c.get("nlToFormat").and_then(Value::as_bool) == Some(true) {
                rc.nl_to_format = Some(NlToFormat {
                    envelope_type: envelope_type
                        .clone()
                        .unwrap_or_else(|| "outputSchema".into()),
                });
            }
            let wire_schema = match (&envelope_type, &output_schema) {
                (Some(t), _) => envelope_wire_schema(
                    t,
                    node.envelope_contract
                        .as_ref()
                        .and_then(|c| c.schemas.as_ref())
                        .and_then(|s| s.get(t)),
                ),
                (None, Some(s)) => s.clone(),
                (None, None) => Value::Null,
            };
            let et = envelope_type.clone();
            let vs = &vendor_schemas;
            let cs = compiled.as_ref();
            let validator = move |v: &Value| -> Result<(), Vec<ValidationIssue>> {
                match &et {
                    None => cs.map(|c| c.validate(v)).unwrap_or(Ok(())),
                    Some(t) => validate_envelope_output(t, v, vs),
                }
            };
            let mut router =
                match Router::new(rc, validator, Redactor::new(self.cfg.secrets.clone())) {
                    Ok(r) => r,
                    Err(e) => {
                        return Ok(NodeOutcome::Failed(error(
                            "node_config_invalid",
                            format!("node {id}: {e}"),
                            false,
                        )));
                    }
                };
            let now = crate::eventlog::now_rfc3339();
            let mut step = match router.start(self.log.factory(), &now) {
                Ok(s) => s,
                Err(e) => return Ok(NodeOutcome::Failed(error("internal", e.to_string(), false))),
            };
            let accepted = loop {
                let events = std::mem::take(&mut step.events);
                self.log.append(events).await?;
                match step.action {
                    Action::Call(req) => {
                        let request = CompletionRequest {
                            node_id: program_key.clone(),
                            system_prompt: req.system_prompt.clone(),
                            user_prompt: req.user_prompt.clone(),
                            max_tokens: req.max_tokens,
                            schema: req.send_schema.then(|| wire_schema.clone()),
                            schema_name: envelope_type
                                .clone()
                                .unwrap_or_else(|| "output".into())
                                .replace('.', "_"),
                        };
                        let call_span = node_span.child("openwop.provider.call");
                        call_span.set_str("openwop.run_id", &run_id);
                        call_span.set_str("openwop.node_id", id);
                        call_span.set_str("openwop.provider", provider.name());
                        call_span.set_str("openwop.model", &model);
                        call_span.set_i64("openwop.call_attempt", i64::from(req.attempt));
                        call_span.set_i64("openwop.max_tokens", i64::from(req.max_tokens));
                        if mocked.is_some() || provider_name == "mock" {
                            // The record a test reads from the worker's log (events carry the same
                            // call as `log.appended`, but a replay never republishes those).
                            tracing::info!(key = %program_key, attempt = req.attempt, max_tokens = req.max_tokens, "mock provider call");
                        }
                        let call = provider.complete(&request);
                        let timed = async {
                            match deadline {
                                Some(d) => tokio::time::timeout(
                                    d.saturating_duration_since(Instant::now()),
                                    call,
                                )
                                .await
                                .ok(),
                                None => Some(call.await),
                            }
                        };
                        // A stop abandons the call: nothing of it is recorded, a later
                        // worker makes it again.
                        let result = tokio::select! {
                            r = timed => r,
                            _ = crate::stop::wait(self.log.stop_signal()) => return Err(LogError::Stopped),
                        };
                        let Some(result) = result else {
                            call_span.fail(
                                "node_timeout",
                                "the provider call exceeded settings.timeout",
                            );
                            return Ok(NodeOutcome::Failed(error(
                                "node_timeout",
                                format!(
                                    "node {id} exceeded settings.timeout waiting for provider {}",
                                    provider.name()
                                ),
                                true,
                            )));
                        };
                        let response: NormalizedResponse = match result {
                            Ok(r) => r,
                            Err(e) => {
                                let msg = self.redactor.redact_str(&e.to_string()).0.into_owned();
                                call_span.fail("provider_error", &msg);
                                return Ok(NodeOutcome::Failed(error(
                                    "provider_error",
                                    msg,
                                    !e.is_permanent(),
                                )));
                            }
                        };
                        call_span.set_str("openwop.response_model", &response.model);
                        call_span
                            .set_i64("openwop.input_tokens", response.usage.input_tokens as i64);
                        call_span
                            .set_i64("openwop.output_tokens", response.usage.output_tokens as i64);
                        call_span.set_str("openwop.stop_reason", stop_label(&response.stop));
                        call_span.set_bool("openwop.thinking", response.thinking.is_some());
                        drop(call_span);
                        if let Some(thinking) = response.thinking.as_deref() {
                            // Provider thinking: one block per call, correlated to the
                            // emission; redacted and rate-limited by the stream.
                            let block = Block {
                                correlation_id: corr.clone(),
                                agent_id: format!("host:{}:{id}", provider.name()),
                                title: format!(
                                    "{} thinking (call {})",
                                    provider.name(),
                                    req.attempt
                                ),
                                thoughts: thoughts_of(thinking),
                                nested: vec![],
                                conclusion: None,
                            };
                            self.reasoning
                                .publish(
                                    &mut self.log,
                                    id,
                                    &format!("{corr}/thinking/{}", req.attempt),
                                    &block,
                                )
                                .await?;
                        }
                        let now = crate::eventlog::now_rfc3339();
                        step = match router.on_response(&response, self.log.factory(), &now) {
                            Ok(s) => s,
                            Err(e) => {
                                return Ok(NodeOutcome::Failed(error(
                                    "internal",
                                    e.to_string(),
                                    false,
                                )));
                            }
                        };
                    }
                    Action::Accept(a) => break a,
                    Action::Fail(f) => {
                        let env_span = node_span.child("openwop.envelope");
                        env_span.set_str("openwop.run_id", &run_id);
                        env_span.set_str("openwop.node_id", id);
                        env_span.set_str("openwop.correlation_id", &corr);
                        if let Some(t) = &envelope_type {
                            env_span.set_str("openwop.envelope_type", t);
                        }
                        env_span.set_str("openwop.envelope_outcome", "failed");
                        env_span.set_i64("openwop.envelope_retry_attempt", i64::from(f.attempts));
                        env_span.fail(f.code.as_str(), &f.message);
                        // The router already recorded node.failed with the spec code.
                        return Ok(NodeOutcome::Failed(ErrorInfo {
                            code: f.code.as_str().into(),
                            message: f.message,
                            details: None,
                            retryable: Some(false),
                        }));
                    }
                }
            };
            let Some(t) = &envelope_type else {
                return Ok(NodeOutcome::Completed(json!({"output": accepted.payload})));
            };
            // The model's output is an envelope; the engine owns correlation, ids and trust.
            let mut env = accepted.payload.as_object().cloned().unwrap_or_default();
            env.retain(|k, _| k == "type" || k == "payload" || k == "schemaVersion");
            env.entry("type").or_insert_with(|| json!(t));
            env.insert("correlationId".into(), json!(corr));
            env.insert("nodeId".into(), json!(id));
            env.insert(
                "meta".into(),
                json!({"source": "ai-generation", "ts": now, "contentTrust": "untrusted"}),
            );
            let kind = env
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let reasoning_text = env
                .get("payload")
                .and_then(|p| p.get("reasoning"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            let env_span = node_span.child("openwop.envelope");
            env_span.set_str("openwop.run_id", &run_id);
            env_span.set_str("openwop.node_id", id);
            env_span.set_str("openwop.correlation_id", &corr);
            env_span.set_str("openwop.envelope_type", &kind);
            env_span.set_i64(
                "openwop.envelope_retry_attempt",
                i64::from(accepted.attempts),
            );
            let processed = {
                let mut ctx = Context::new(&self.host, &self.redactor, id, &now);
                ctx.node_contract = contract.as_ref();
                pipeline::accept_value(
                    Value::Object(env),
                    None,
                    &ctx,
                    &mut self.dedup,
                    self.log.factory(),
                )
            };
            env_span.set_str("openwop.envelope_outcome", processed.outcome.status());
            if let Outcome::Accepted(a) = &processed.outcome {
                env_span.set_bool(
                    "openwop.envelope_schema_version_drift",
                    a.warnings.iter().any(|w| {
                        w.keyword.as_deref()
                            == Some(
                                openwop_protocol::outcome::Code::EnvelopeSchemaVersionDrift
                                    .as_str(),
                            )
                    }),
                );
            } else if let Some(code) = processed.outcome.code() {
                env_span.fail(
                    code.as_str(),
                    processed.outcome.reason().unwrap_or_default(),
                );
            }
            drop(env_span);
            self.log.append(processed.events.clone()).await?;
            if let Some(text) = reasoning_text {
                let envelope_id = match &processed.outcome {
                    Outcome::Accepted(a) => a.envelope_id.clone(),
                    _ => corr.clone(),
                };
                let block = Block {
                    correlation_id: envelope_id,
                    agent_id: format!("host:{}:{id}", provider.name()),
                    title: format!("{kind} reasoning"),
                    thoughts: thoughts_of(&text),
                    nested: vec![],
                    conclusion: Some(format!("emitted {kind}")),
                };
                self.reasoning
                    .publish(&mut self.log, id, &format!("{corr}/envelope"), &block)
                    .await?;
            }
            match processed.outcome {
                Outcome::Accepted(a) if kind == "clarification.request" => {
                    let _ = a;
                    continue; // the loop top records node.suspended and waits for the answer
                }
                Outcome::Accepted(a) => {
                    return Ok(NodeOutcome::Completed(
                        json!({"output": a.redacted_payload, "envelopeType": kind}),
                    ));
                }
                other => {
                    let code = other
                        .code()
                        .map(|c| c.as_str().to_owned())
                        .unwrap_or_else(|| "envelope_invalid".into());
                    let message = other
                        .reason()
                        .unwrap_or("the envelope was refused")
                        .to_owned();
                    return Ok(NodeOutcome::Failed(ErrorInfo {
                        code,
                        message,
                        details: serde_json::to_value(&other).ok(),
                        retryable: Some(false),
                    }));
                }
            }
        }
    }
}

/// The vendor's stop spelling for telemetry.
fn stop_label(stop: &openwop_protocol::retry::StopReason) -> &str {
    use openwop_protocol::retry::StopReason as S;
    match stop {
        S::Clean => "clean",
        S::ToolUse => "tool_use",
        S::Truncated { raw } | S::Refusal { raw, .. } | S::Unknown { raw } => raw,
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

/// The schema sent to the provider for an `envelopeType` node: the envelope kind or a
/// clarification request, with the kind's payload schema when one is known.
fn envelope_wire_schema(kind: &str, vendor: Option<&Value>) -> Value {
    let payload = vendor
        .cloned()
        .or_else(|| schema::kind_payload_schema(kind).cloned())
        .unwrap_or_else(|| json!({"type": "object"}));
    json!({"type": "object", "additionalProperties": false, "required": ["type", "payload"],
           "properties": {"type": {"type": "string", "enum": [kind, "clarification.request"]}, "payload": payload}})
}

/// Router-side validation of an envelope-shaped model output (the pipeline re-checks all).
fn validate_envelope_output(
    expected: &str,
    v: &Value,
    vendor: &BTreeMap<String, schema::CompiledSchema>,
) -> Result<(), Vec<ValidationIssue>> {
    let issue = |path: &str, keyword: &str, message: String| {
        vec![ValidationIssue {
            instance_path: path.into(),
            keyword: keyword.into(),
            message,
        }]
    };
    let Some(kind) = v.get("type").and_then(Value::as_str) else {
        return Err(issue(
            "/type",
            "required",
            "the output must be an envelope object with a string `type`".into(),
        ));
    };
    if kind != expected && !is_universal_kind(kind) {
        return Err(issue(
            "/type",
            "enum",
            format!("expected envelope type `{expected}` (or a universal kind)"),
        ));
    }
    let Some(payload) = v.get("payload") else {
        return Err(issue(
            "/payload",
            "required",
            "the envelope needs a `payload`".into(),
        ));
    };
    let prefix = |mut issues: Vec<ValidationIssue>| {
        for i in &mut issues {
            i.instance_path = format!("/payload{}", i.instance_path);
        }
        issues
    };
    if let Some(s) = vendor.get(kind) {
        return s.validate(payload).map_err(prefix);
    }
    match schema::validate_kind_payload(kind, payload) {
        Some(r) => r.map_err(prefix),
        None => Ok(()),
    }
}
