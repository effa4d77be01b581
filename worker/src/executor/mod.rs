//! Executes one run's node graph: every node protocol's scheduling rule
//! ([`openwop_protocol::schedule`]) says may run is started at once, up to the run's
//! concurrency limit, as a concurrent branch of the worker's one task; every branch appends
//! its events through the run's one writer (the [`RunLog`] behind a lock held for a whole
//! append), so `sequence` stays gapless and each event's id depends only on (run, node,
//! logical step), never on the interleaving. Node kinds live in their own files:
//! [`agent`] (the RFC 0023 mock agent and CP-1), [`prompt`] (LLM nodes), [`basic`] (noop,
//! fail) and [`wait`] (the gates that wait for a person); the node type →
//! kind mapping is protocol's registry (`openwop_protocol::run::nodes`).
//!
//! Replay: the executor always starts from the root nodes. A node whose `node.completed` /
//! `node.failed` is recorded is not executed again (its outputs come from the record); a
//! clarification turn whose `clarification.requested` is recorded makes no provider call; a
//! node resumes at the node attempt its recorded retries reached; within an emission, every
//! provider response is journaled in the log before it is routed and a re-executed call
//! whose response is recorded is answered from the record (`protocol::retry::journal`).
//! Everything else is re-executed and its deterministic events that are already recorded are
//! dropped by the log. So a replayed run repeats only a provider call that was in flight (no
//! recorded response) and publishes no duplicate event.
//!
//! Why one file of this size: the scheduling loop, the replay rules and the branch
//! bookkeeping decide together which node runs and which event is appended once; they are
//! read side by side. Every node kind's own logic lives in its own file.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod agent;
mod basic;
mod delay;
mod flow;
mod http;
mod outcome;
mod prompt;
mod subworkflow;
mod toolcalls;
mod wait;

use futures::stream::{FuturesUnordered, StreamExt};
use openwop_protocol::emission;
use openwop_protocol::events::RunEventDoc;
use openwop_protocol::events::{
    AgentDecided, AgentHandoff, AgentReasoned, AgentToolCalled, AgentToolReturned, ErrorInfo,
    EventType, InterruptKind, LogAppended, LogLevel, NodeFailed, NodeSkipped, NodeSuspended,
    VariableChanged,
};
use openwop_protocol::graph::{Graph, Node, PortValue};
use openwop_protocol::outcome::Outcome;
use openwop_protocol::pipeline::{self, Context, DedupStore, EnvelopeContract, HostPolicy};
use openwop_protocol::redact::Redactor;
use openwop_protocol::retry::MockProgram;
use openwop_protocol::retry::{Action, NlToFormat, NormalizedResponse, Router, RouterConfig};
use openwop_protocol::run::ending;
use openwop_protocol::run::nodes::{Executor as NodeExecutor, executor_of};
use openwop_protocol::run::snapshot::{RECURSION_LIMIT_EXCEEDED, RunSnapshot};
use openwop_protocol::run::variables::Variables;
use openwop_protocol::schedule::{
    self, Breach, Decision, ExecutionBudget, NodeState, Scheduler, SkipReason,
};
use openwop_protocol::schema::{self, ValidationIssue};
use openwop_protocol::workflow::NodeEnvelopeContract;
use openwop_providers::{CompletionRequest, MockProvider, Provider};
use serde_json::{Map, Value, json};

use crate::eventlog::{LogError, Publisher, RunLog};
use crate::providers::ProviderSet;
use crate::reasoning::{Block, ReasoningStream, thoughts_of};
use crate::stop::StopSignal;
use crate::telemetry::SpanHandle;
use outcome::{NodeOutcome, error};

/// Host-side settings of the executor.
pub struct ExecConfig {
    /// Provider mocks (`Run.spec.providerMocks` via the snapshot): node id → one script per
    /// clarification turn. A listed node calls the mock provider whatever its `provider`.
    pub mock_programs: BTreeMap<String, Vec<MockProgram>>,
    /// Real providers by name and model, built from the snapshot's mounts.
    pub providers: ProviderSet,
    /// `(secretId, value)` pairs redacted everywhere.
    pub secrets: Vec<(String, String)>,
    /// The ToolServers the run's LLM nodes may call.
    pub tools: crate::tools::ToolServers,
}

impl std::fmt::Debug for ExecConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecConfig")
            .field(
                "mock_programs",
                &self.mock_programs.keys().collect::<Vec<_>>(),
            )
            .field("providers", &self.providers)
            .field("secrets", &self.secrets.len())
            .field("tools", &self.tools)
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
    /// Waiting for answers; the worker exits with `exit::SUSPENDED`. Everything that could
    /// run has run: these are the interrupts left pending, in the graph's order — empty when
    /// only durable waits (a long delay, a child run) are left, which the operator wakes.
    Suspended(Vec<Suspension>),
}

/// One node waiting for an answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Suspension {
    pub node_id: String,
    pub interrupt_id: String,
    pub kind: InterruptKind,
}

/// How a branch left its node.
enum Visited {
    Succeeded(Value),
    Failed(ErrorInfo),
    Skipped,
    Suspended(String, InterruptKind),
    Dormant,
}

/// Why the run tells its in-flight branches to stop.
#[derive(Debug, Clone)]
enum Abandon {
    /// The run's duration limit passed: each in-flight node records this failure.
    Timeout(ErrorInfo),
    /// Another branch could not make its events durable: nothing more is recorded.
    Error,
}

/// The run's one writer: every branch appends through it, one append (stamp the sequence,
/// publish, wait for the ack) at a time, so `sequence` stays gapless whatever the interleaving.
struct Writer<P: Publisher> {
    log: RunLog<P>,
    reasoning: ReasoningStream,
}

/// A started branch: its node and how it left it.
type Branch<'f> = Pin<Box<dyn Future<Output = (&'f Node, Result<Visited, LogError>)> + 'f>>;

/// What the scheduling loop leaves once no branch runs any more.
struct Drained<'g> {
    sched: Scheduler<'g>,
    /// Failed nodes' errors, by node id.
    errors: BTreeMap<String, ErrorInfo>,
    /// Nodes waiting for an answer.
    waiting: Vec<Suspension>,
    /// A node waits without a pod (a long delay, a child run).
    dormant: bool,
    /// A branch could not make its events durable.
    failure: Option<LogError>,
    /// A drain kept a node from starting.
    held: bool,
    /// The node that would have passed the execution ceiling.
    breach: Option<Breach>,
    /// The run's duration limit, and when the run started.
    run_limit: Option<u64>,
    started: Instant,
}

pub struct Executor<'a, P: Publisher> {
    snap: &'a RunSnapshot,
    graph: &'a Graph,
    cfg: &'a ExecConfig,
    writer: tokio::sync::Mutex<Writer<P>>,
    run_id: String,
    /// The worker's stop (SIGTERM): in-flight provider calls are abandoned unrecorded.
    stop: Option<StopSignal>,
    /// A pause under `drain-current-node` ([`crate::pause`]): start no node, end nothing.
    drain: Option<StopSignal>,
    /// Nodes the replayed log shows started: in flight when the worker stopped (or done), so
    /// a drain still lets them run to their end.
    started_before: BTreeSet<String>,
    /// Stops every in-flight branch of this run (timeout, a failed append).
    abandon: StopSignal,
    abandon_why: RefCell<Option<Abandon>>,
    mock: MockProvider,
    dedup: RefCell<DedupStore>,
    host: HostPolicy,
    redactor: Arc<Redactor>,
    threshold: f64,
    run_span: SpanHandle,
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
        let started_before = log
            .events()
            .iter()
            .filter(|e| e.event_type == EventType::NodeStarted)
            .filter_map(|e| e.node_id.clone())
            .collect();
        Executor {
            snap,
            graph,
            cfg,
            run_id: log.run_id().to_owned(),
            stop: log.stop_signal(),
            writer: tokio::sync::Mutex::new(Writer { log, reasoning }),
            drain: None,
            started_before,
            abandon: StopSignal::new(),
            abandon_why: RefCell::new(None),
            mock: MockProvider::new("mock-model", 8192, programs),
            dedup: RefCell::new(DedupStore::new()),
            host: snap.host.pipeline_policy(),
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

    /// Once `drain` is requested the run starts no node (but lets the nodes its log shows
    /// started run to their end) and, once they are recorded, returns [`LogError::Stopped`]
    /// instead of ending (a pause that lets the current node finish). A run left waiting
    /// (a durable timer, an answer) with nothing held back suspends as usual: the pause
    /// lands after the wait.
    pub fn with_drain(mut self, drain: StopSignal) -> Self {
        self.drain = Some(drain);
        self
    }

    fn draining(&self) -> bool {
        self.drain.as_ref().is_some_and(StopSignal::is_requested)
    }

    /// The run's log (for the worker once the run future is gone).
    pub fn log_mut(&mut self) -> &mut RunLog<P> {
        &mut self.writer.get_mut().log
    }

    fn run_id(&self) -> &str {
        &self.run_id
    }

    async fn emit<T: openwop_protocol::events::EventPayload>(
        &self,
        step_key: &str,
        node: Option<&str>,
        p: &T,
    ) -> Result<(), LogError> {
        self.writer.lock().await.log.emit(step_key, node, p).await
    }

    async fn emit_value(
        &self,
        step_key: &str,
        node: Option<&str>,
        t: EventType,
        payload: Value,
    ) -> Result<(), LogError> {
        self.writer
            .lock()
            .await
            .log
            .emit_value(step_key, node, t, payload)
            .await
    }

    async fn append(&self, docs: Vec<RunEventDoc>) -> Result<(), LogError> {
        self.writer.lock().await.log.append(docs).await
    }

    async fn build<T: openwop_protocol::events::EventPayload>(
        &self,
        step_key: &str,
        node: Option<&str>,
        p: &T,
    ) -> RunEventDoc {
        self.writer.lock().await.log.build(step_key, node, p)
    }

    async fn publish_reasoning(
        &self,
        node: &str,
        key: &str,
        block: &Block,
    ) -> Result<(), LogError> {
        let mut w = self.writer.lock().await;
        let w = &mut *w;
        w.reasoning.publish(&mut w.log, node, key, block).await
    }

    async fn recorded(&self, t: EventType, node: &str) -> Option<Value> {
        self.writer
            .lock()
            .await
            .log
            .last_of_node(t, node)
            .map(|e| e.payload.clone())
    }

    async fn recorded_id(&self, event_id: &str) -> bool {
        self.writer.lock().await.log.contains(event_id)
    }

    /// Whether the clarification turn's events are all durable: `interrupt.requested` is the
    /// last of the pipeline's batch, so a kill inside the batch re-drives the turn (its
    /// provider response comes from the journal) and publishes the rest.
    async fn recorded_interrupt(&self, interrupt_id: &str) -> bool {
        self.writer.lock().await.log.events().iter().any(|e| {
            e.event_type == EventType::InterruptRequested
                && e.payload.get("interruptId").and_then(Value::as_str) == Some(interrupt_id)
        })
    }

    fn abandon(&self, why: Abandon) {
        self.abandon_why.borrow_mut().get_or_insert(why);
        self.abandon.request();
    }

    /// Why in-flight work stops, once the run abandons its branches: `Ok(error)` to record
    /// as the node's failure, `Err` when nothing more may be recorded.
    fn abandon_reason(&self) -> Option<Result<ErrorInfo, LogError>> {
        self.abandon
            .is_requested()
            .then(|| match &*self.abandon_why.borrow() {
                Some(Abandon::Timeout(e)) => Ok(e.clone()),
                _ => Err(LogError::Stopped),
            })
    }

    /// Resolves once the run abandons its branches (see [`Self::abandon_reason`]).
    async fn abandoned(&self) -> Result<ErrorInfo, LogError> {
        self.abandon.requested().await;
        self.abandon_reason().unwrap_or(Err(LogError::Stopped))
    }

    /// Runs (or resumes) the run to its end or until only waiting branches are left.
    pub async fn run(&mut self) -> Result<RunEnd, LogError> {
        self.drive().await
    }

    /// The scheduler: starts every node [`Scheduler::decide`] says may run, up to the run's
    /// concurrency limit, as concurrent branches of this task, and settles them as they
    /// finish. It never awaits the writer itself while branches run (a branch holding it is
    /// only driven by being polled here); it emits only once every branch has returned.
    /// Its loop stays one piece: the scheduler, the budget, the branches in flight and their
    /// counts change together on every turn of it.
    async fn drive(&self) -> Result<RunEnd, LogError> {
        let (variables, mut budget) = match self.begin_run().await? {
            ControlFlow::Continue(checked) => checked,
            ControlFlow::Break(end) => return Ok(end),
        };
        // The node that would have passed the execution ceiling: nothing starts after it.
        let mut breach: Option<Breach> = None;
        let started = Instant::now();
        // The workflow's settings.timeout and the run's configurable.runTimeoutMs (checked
        // when the run was created), capped by the host's maxRunDurationMs.
        let run_limit = openwop_protocol::run::options::run_deadline_ms(
            self.graph.run_timeout_ms,
            openwop_protocol::run::options::run_timeout_ms(&self.snap.configurable)
                .ok()
                .flatten(),
            self.snap.host.limits.max_run_duration_ms,
        );
        let deadline =
            run_limit.map(|ms| tokio::time::Instant::from_std(started) + Duration::from_millis(ms));
        let limit = schedule::concurrency_limit(
            self.graph.max_concurrency,
            self.snap.host.node_concurrency,
        );
        let mut sched = Scheduler::new(self.graph);
        let mut errors: BTreeMap<String, ErrorInfo> = BTreeMap::new();
        let mut waiting: Vec<Suspension> = Vec::new();
        // A node waits without a pod (a long delay, a child run).
        let mut dormant = false;
        let mut running: FuturesUnordered<Branch<'_>> = FuturesUnordered::new();
        // Nodes executing (skips and condition failures are branches too, but count for nothing).
        let mut executing = 0usize;
        let mut failure: Option<LogError> = None;
        // A drain kept a node from starting.
        let mut held = false;
        loop {
            if let Some(d) = deadline
                && tokio::time::Instant::now() >= d
                && !self.abandon.is_requested()
            {
                self.abandon(Abandon::Timeout(run_timeout(run_limit.unwrap_or_default())));
            }
            if !self.abandon.is_requested() && breach.is_none() {
                // The scheduler records skips and condition failures itself.
                for (node, decision) in sched.decide(limit.saturating_sub(executing)) {
                    let id = node.id.clone();
                    if self.draining()
                        && !(matches!(decision, Decision::Run { .. })
                            && self.started_before.contains(&id))
                    {
                        held = true;
                        continue;
                    }
                    let branch: Branch<'_> = match decision {
                        Decision::Skip(why) => {
                            Box::pin(async move { (node, self.skip(node, why).await) })
                        }
                        Decision::ConditionInvalid { message, .. } => {
                            let e = error("edge_condition_invalid", message, false);
                            errors.insert(id, e.clone());
                            Box::pin(async move {
                                let r = self.fail_node(&node.id, e.clone(), None).await;
                                (node, r.map(|()| Visited::Failed(e)))
                            })
                        }
                        Decision::Run { edge_inputs } => {
                            if let Err(b) = budget.admit(&id) {
                                breach = Some(b);
                                break;
                            }
                            executing += 1;
                            let bag =
                                Value::Object(variables.visible_to(&id, |n| sched.outputs(n)));
                            // Only what the node reads: its dependencies' states.
                            let upstream = sched.start(node);
                            Box::pin(async move {
                                let r = self.visit(node, edge_inputs, &upstream, &bag).await;
                                (node, r)
                            })
                        }
                    };
                    running.push(branch);
                }
            }
            if running.is_empty() {
                break;
            }
            let next = match deadline.filter(|_| !self.abandon.is_requested()) {
                Some(d) => tokio::select! {
                    n = running.next() => n,
                    _ = tokio::time::sleep_until(d) => continue,
                },
                None => running.next().await,
            };
            let Some((node, result)) = next else { break };
            let id = node.id.clone();
            if matches!(sched.state(&id), Some(NodeState::Running)) {
                executing -= 1;
            }
            match result {
                Ok(Visited::Succeeded(out)) => {
                    sched.set(&id, NodeState::Succeeded(out));
                }
                Ok(Visited::Failed(e)) => {
                    sched.set(&id, NodeState::Failed);
                    errors.insert(id, e);
                }
                Ok(Visited::Skipped) => {
                    sched.set(&id, NodeState::Skipped);
                }
                Ok(Visited::Dormant) => {
                    sched.set(&id, NodeState::Waiting);
                    dormant = true;
                }
                Ok(Visited::Suspended(interrupt_id, kind)) => {
                    sched.set(&id, NodeState::Waiting);
                    waiting.push(Suspension {
                        node_id: id,
                        interrupt_id,
                        kind,
                    });
                }
                Err(e) => {
                    // Stop the other branches at their next safe point and keep driving them
                    // until they return: dropping one mid-append could lose an acked event.
                    failure.get_or_insert(e);
                    self.abandon(Abandon::Error);
                }
            }
        }
        self.end_run(Drained {
            sched,
            errors,
            waiting,
            dormant,
            failure,
            held,
            breach,
            run_limit,
            started,
        })
        .await
    }

    /// Records `run.started` and checks what the run needs before any node starts: its
    /// required inputs and its node execution limit (either one unusable fails the run).
    async fn begin_run(
        &self,
    ) -> Result<ControlFlow<RunEnd, (Variables, ExecutionBudget)>, LogError> {
        let inputs = self.snap.inputs.clone();
        self.emit_value(
            "run.started",
            None,
            EventType::RunStarted,
            json!({"workflowId": self.graph.id, "inputs": inputs}),
        )
        .await?;
        let variables = Variables::new(self.graph, &self.snap.inputs);
        if let Err(missing) = variables.check_required(self.graph) {
            let e = error("workflow_input_invalid", missing.to_string(), false);
            return self.finish_failed(e).await.map(ControlFlow::Break);
        }
        let budget = match self.snap.node_execution_limit() {
            Ok(limit) => ExecutionBudget::new(limit),
            Err(e) => {
                let mut e = error("validation_error", e.to_string(), false);
                e.details = Some(json!({"field": "/configurable/recursionLimit"}));
                return self.finish_failed(e).await.map(ControlFlow::Break);
            }
        };
        Ok(ControlFlow::Continue((variables, budget)))
    }

    /// How the run ends once no branch runs: a branch's undurable events end the worker; a
    /// drain leaves the run paused; else, in this order, a passed execution ceiling, the run
    /// timeout, branches waiting (the run suspends), a failure no edge handles, and otherwise
    /// completion with the outputs of the nodes nothing follows.
    async fn end_run(&self, d: Drained<'_>) -> Result<RunEnd, LogError> {
        let Drained {
            sched,
            errors,
            mut waiting,
            dormant,
            failure,
            held,
            breach,
            run_limit,
            started,
        } = d;
        if let Some(e) = failure {
            return Err(e);
        }
        if self.draining() && (held || (waiting.is_empty() && !dormant)) {
            // Paused after the in-flight nodes: the run neither goes on nor ends here.
            return Err(LogError::Stopped);
        }
        if let Some(b) = breach {
            return self.breached(b).await;
        }
        if let Some(Ok(e)) = self.abandon_reason() {
            let limit = run_limit.unwrap_or_default();
            self.emit_value(
                "cap.breached/run-duration",
                None,
                EventType::CapBreached,
                json!({"kind": "run-duration", "limit": limit, "observed": started.elapsed().as_millis() as u64}),
            )
            .await?;
            return self.finish_failed(e).await;
        }
        // Branches waiting for answers suspend the run even beside a failed branch (as when
        // the suspension came first in a sequential run): the run ends once nothing waits.
        if !waiting.is_empty() || dormant {
            let order = |s: &Suspension| self.graph.nodes.iter().position(|n| n.id == s.node_id);
            waiting.sort_by_key(order);
            return Ok(RunEnd::Suspended(waiting));
        }
        // A failed node fails the run unless an edge consumes its failure.
        let unhandled = self.graph.nodes.iter().find_map(|n| {
            errors
                .get(&n.id)
                .filter(|_| {
                    !self
                        .graph
                        .outgoing(&n.id)
                        .any(|e| e.trigger_rule.handles_failure())
                })
                .cloned()
        });
        if let Some(e) = unhandled {
            return self.finish_failed(e).await;
        }
        let mut outputs = Map::new();
        for n in &self.graph.nodes {
            if self.graph.outgoing(&n.id).next().is_none()
                && let Some(o) = sched.outputs(&n.id)
            {
                outputs.insert(n.id.clone(), o.clone());
            }
        }
        self.emit_value(
            "run.completed",
            None,
            EventType::RunCompleted,
            json!({"outputs": outputs}),
        )
        .await?;
        Ok(RunEnd::Completed)
    }

    /// `run.resumed` for an answered interrupt (once per interrupt: its key is the id).
    async fn run_resumed(&self, interrupt_id: &str) -> Result<(), LogError> {
        self.emit_value(
            &format!("run.resumed/{interrupt_id}"),
            None,
            EventType::RunResumed,
            json!({"interruptId": interrupt_id}),
        )
        .await
    }

    async fn finish_failed(&self, e: ErrorInfo) -> Result<RunEnd, LogError> {
        self.emit_value(
            ending::RUN_FAILED_STEP,
            None,
            EventType::RunFailed,
            ending::failed_payload(&e),
        )
        .await?;
        Ok(RunEnd::Failed(e))
    }

    /// The run passed its node-execution ceiling: `cap.breached` (once: one step key
    /// whichever node a replay stops at), then `run.failed` with `recursion_limit_exceeded`.
    /// The node past the ceiling never started.
    async fn breached(&self, b: Breach) -> Result<RunEnd, LogError> {
        self.emit_value(
            "cap.breached/node-executions",
            Some(&b.node_id),
            EventType::CapBreached,
            json!({"kind": "node-executions", "limit": b.limit, "observed": b.observed, "nodeId": b.node_id}),
        )
        .await?;
        let mut e = error(
            RECURSION_LIMIT_EXCEEDED,
            format!(
                "the run reached its limit of {} node executions (configurable.recursionLimit, capped by the host's maxNodeExecutions); node {} was not started",
                b.limit, b.node_id
            ),
            false,
        );
        e.details = Some(json!({"limit": b.limit, "observed": b.observed, "nodeId": b.node_id}));
        self.finish_failed(e).await
    }

    async fn skip(&self, node: &Node, why: SkipReason) -> Result<Visited, LogError> {
        let id = node.id.as_str();
        self.emit(
            &format!("{id}/skipped"),
            Some(id),
            &NodeSkipped {
                node_id: id.to_owned(),
                reason: Some(why.as_str().to_owned()),
            },
        )
        .await?;
        Ok(Visited::Skipped)
    }

    /// One node the scheduler started: replay, inputs, execution with node-level retries.
    async fn visit(
        &self,
        node: &Node,
        edge_inputs: Map<String, Value>,
        states: &BTreeMap<String, NodeState>,
        variables: &Value,
    ) -> Result<Visited, LogError> {
        let id = node.id.as_str();
        if let Some(p) = self.recorded(EventType::NodeCompleted, id).await {
            return Ok(Visited::Succeeded(
                p.get("outputs").cloned().unwrap_or(Value::Null),
            ));
        }
        if let Some(p) = self.recorded(EventType::NodeFailed, id).await {
            let e = serde_json::from_value(p.get("error").cloned().unwrap_or(Value::Null))
                .unwrap_or_else(|_| error("node_failed", "recorded failure", false));
            return Ok(Visited::Failed(e));
        }
        let inputs = match self.resolve_inputs(node, edge_inputs, states, variables) {
            Ok(i) => i,
            Err(e) => return self.failed(id, *e, None).await,
        };
        let max_retries = node.max_retries.unwrap_or(self.graph.default_max_retries);
        // A restarted worker resumes at the node attempt the log reached: the failures of the
        // earlier attempts are recorded (`{id}/retry/{n}`), replaying them would call again.
        let mut attempt = 0u32;
        while self
            .recorded_id(&openwop_protocol::events::event_id_for(
                self.run_id(),
                &format!("{id}/retry/{}", attempt + 1),
            ))
            .await
        {
            attempt += 1;
        }
        let span = self.run_span.child("openwop.node");
        span.set_str("openwop.run_id", self.run_id());
        span.set_str("openwop.node_id", id);
        span.set_str("openwop.node_type", &node.type_id);
        loop {
            match self.abandon_reason() {
                Some(Ok(e)) => return self.failed(id, e, Some(attempt + 1)).await,
                Some(Err(e)) => return Err(e),
                None => {}
            }
            span.set_i64("openwop.node_attempt", i64::from(attempt) + 1);
            let key = if attempt == 0 {
                format!("{id}/started")
            } else {
                format!("{id}/started/r{attempt}")
            };
            self.emit_value(
                &key,
                Some(id),
                EventType::NodeStarted,
                json!({"nodeId": id, "typeId": node.type_id, "attempt": attempt}),
            )
            .await?;
            let deadline = node
                .timeout_ms
                .map(|ms| Instant::now() + Duration::from_millis(ms));
            let outcome = self
                .execute(node, &inputs, attempt, deadline, &span, states, variables)
                .await?;
            match &outcome {
                NodeOutcome::Completed(_) => span.set_str("openwop.node_outcome", "completed"),
                NodeOutcome::Suspended(..) => span.set_str("openwop.node_outcome", "suspended"),
                NodeOutcome::Dormant => span.set_str("openwop.node_outcome", "waiting"),
                NodeOutcome::Failed(e) => {
                    span.set_str("openwop.node_outcome", "failed");
                    span.fail(&e.code, &e.message);
                }
            }
            match outcome {
                NodeOutcome::Completed(outputs) => {
                    self.emit_value(
                        &format!("{id}/completed"),
                        Some(id),
                        EventType::NodeCompleted,
                        json!({"nodeId": id, "outputs": outputs}),
                    )
                    .await?;
                    // The recorded (redacted) outputs are what downstream nodes see, live or replayed.
                    let outputs = self
                        .recorded(EventType::NodeCompleted, id)
                        .await
                        .and_then(|p| p.get("outputs").cloned())
                        .unwrap_or(outputs);
                    return Ok(Visited::Succeeded(outputs));
                }
                NodeOutcome::Suspended(interrupt, kind) => {
                    return Ok(Visited::Suspended(interrupt, kind));
                }
                NodeOutcome::Dormant => return Ok(Visited::Dormant),
                NodeOutcome::Failed(e)
                    if e.retryable == Some(true)
                        && attempt < max_retries
                        && self.abandon_reason().is_none() =>
                {
                    attempt += 1;
                    self.emit(
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
                    if self.recorded(EventType::NodeFailed, id).await.is_none() {
                        return self.failed(id, e, Some(attempt + 1)).await;
                    }
                    return Ok(Visited::Failed(e));
                }
            }
        }
    }

    /// Records `node.failed` and settles the node as failed.
    async fn failed(
        &self,
        id: &str,
        e: ErrorInfo,
        attempts: Option<u32>,
    ) -> Result<Visited, LogError> {
        self.fail_node(id, e.clone(), attempts).await?;
        Ok(Visited::Failed(e))
    }

    async fn fail_node(
        &self,
        id: &str,
        e: ErrorInfo,
        attempts: Option<u32>,
    ) -> Result<(), LogError> {
        self.emit(
            &format!("{id}/failed"),
            Some(id),
            &NodeFailed {
                node_id: id.to_owned(),
                error: e,
                attempts,
            },
        )
        .await
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

    #[allow(clippy::too_many_arguments)]
    async fn execute(
        &self,
        node: &Node,
        inputs: &Value,
        attempt: u32,
        deadline: Option<Instant>,
        span: &SpanHandle,
        states: &BTreeMap<String, NodeState>,
        variables: &Value,
    ) -> Result<NodeOutcome, LogError> {
        let done = |r: flow::NodeResult<Value>| {
            Ok(match r {
                Ok(v) => NodeOutcome::Completed(v),
                Err(e) => NodeOutcome::Failed(*e),
            })
        };
        match executor_of(&node.type_id) {
            Some(NodeExecutor::Conditional) => done(flow::conditional(node, inputs)),
            Some(NodeExecutor::Iterator) => done(flow::iterator(node, inputs)),
            Some(NodeExecutor::Router) => done(flow::router(node, inputs)),
            Some(NodeExecutor::Merge) => done(flow::merge(self.graph, node, states)),
            Some(NodeExecutor::ArrayMerge) => {
                done(flow::array_merge(self.graph, node, inputs, states))
            }
            Some(NodeExecutor::GetVariable) => done(flow::get_variable(node, variables)),
            Some(NodeExecutor::SetVariable) => {
                match flow::set_variable(self.graph, node, inputs, variables) {
                    Err(e) => Ok(NodeOutcome::Failed(*e)),
                    Ok(w) => {
                        let id = node.id.as_str();
                        self.emit(
                            &format!("{id}/variable"),
                            Some(id),
                            &VariableChanged {
                                name: w.name.clone(),
                                previous: w.previous,
                                next: Some(w.next.clone()),
                                node_id: Some(id.to_owned()),
                            },
                        )
                        .await?;
                        Ok(NodeOutcome::Completed(
                            json!({"name": w.name, "value": w.next}),
                        ))
                    }
                }
            }
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
            Some(NodeExecutor::Http) => self.http(node, inputs, attempt, deadline, span).await,
            Some(NodeExecutor::Noop) => Ok(basic::noop(inputs)),
            Some(NodeExecutor::Fail) => Ok(basic::fail(node)),
            Some(NodeExecutor::Gate) => self.gate(node, attempt).await,
            Some(NodeExecutor::Delay) => self.delay(node, inputs).await,
            Some(NodeExecutor::SubWorkflow) => self.sub_workflow(node, variables).await,
            Some(NodeExecutor::ToolCall) => self.tool_call_node(node, attempt).await,
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
    snap: &RunSnapshot,
) -> Result<RunEnd, LogError> {
    if let Some(end) = recorded_end(log) {
        return Ok(end);
    }
    log.emit_value(
        ending::RUN_CANCELLED_STEP,
        None,
        EventType::RunCancelled,
        openwop_protocol::run::waits::cancelled_payload(
            snap.cancel_reason.as_deref(),
            snap.parent.as_ref(),
        ),
    )
    .await?;
    Ok(RunEnd::Cancelled)
}

fn run_timeout(limit: u64) -> ErrorInfo {
    error(
        "run_timeout",
        format!(
            "the run exceeded its duration limit of {limit} ms (workflow settings.timeout or configurable.runTimeoutMs, capped by the host's maxRunDurationMs); in-flight branches were stopped"
        ),
        false,
    )
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

#[cfg(test)]
mod durable_tests;
#[cfg(test)]
mod event_tests;
#[cfg(test)]
mod flow_runs;
#[cfg(test)]
mod gate_tests;
#[cfg(test)]
mod pause_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tool_tests;
