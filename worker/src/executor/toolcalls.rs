//! An LLM node's tool loop: the tools it offers its model, and each round of calls the model
//! asks for — refused, answered from the run's log, waiting for a person, or made on the
//! ToolServer — recorded before and after, so a replay or a restarted worker never makes a
//! recorded call again.
//!
//! Where a round sits: the provider call the retry router asks for (call `N` of an emission)
//! may be answered by a model turn that asks for tools; that turn is journaled under
//! `tools::record::rounds_key(emission, N)`, its calls run (this file), their results join
//! the conversation, and the provider is called again for the same router call, until a turn
//! asks for none: that one is the router's answer, journaled and routed as without tools.
//! Rounds are numbered across the emission (the `maxToolRounds` cap and each call's
//! [`ToolStep`] use the number). A replay reads the same turns from the journals and the
//! same results from the `agent.toolCalled` / `agent.toolReturned` records, so it sends the
//! provider what the live loop sent.
//!
//! The kill rule (`tools::policy::after_unknown_outcome`): a call recorded as made but never
//! as returned is made again when its tool reads, and otherwise reported to the model as
//! of unknown outcome, never silently repeated. A call that waits for approval holds no
//! pod: the node is suspended, the worker exits, and the answer's worker replays to the call.

use openwop_protocol::run::gate::{self, GateEnd, tool_call_approval, tool_call_interrupt_id};
use openwop_protocol::tools::call::arguments_object;
use openwop_protocol::tools::config::ToolCallConfig;
use openwop_protocol::tools::mcp::result_text;
use openwop_protocol::tools::policy::{
    MAX_CALLS_PER_ROUND, OfferedTool, Refusal, ServerTools, check_round,
};
use openwop_protocol::tools::record::{Resume, resume};
use openwop_protocol::tools::{
    ModelToolCall, ToolCalled, ToolLog, ToolReturned, ToolSet, ToolStatus, ToolStep, ToolsConfig,
};
use openwop_providers::mcp::McpError;
use openwop_providers::tools::{AssistantTurn, ToolResult, ToolSpec, ToolTurn};

use super::*;
use crate::tools::ToolServerError;

/// The `node.failed` code when a declared server cannot be listed (or used) at node start.
const TOOL_SERVER_UNAVAILABLE: &str = "tool_server_unavailable";

/// The tools an LLM node offers its model, read at the start of a node attempt.
pub(super) struct NodeTools {
    set: ToolSet,
    specs: Vec<ToolSpec>,
    max_rounds: u32,
    /// Each offered server's namespace (a node names a server once).
    namespaces: BTreeMap<String, String>,
}

/// One emission's tool conversation: the turns so far and the next round's number.
#[derive(Default)]
pub(super) struct Conversation {
    pub(super) turns: Vec<ToolTurn>,
    round: u32,
}

/// What became of one call of a round.
enum Decided<'t> {
    /// Its result is known (recorded, refused, or of unknown outcome).
    Result(ToolReturned),
    /// It is to be made now.
    Make {
        step: ToolStep,
        called: ToolCalled,
        /// The ToolServer's namespace.
        namespace: &'t str,
        tool: &'t OfferedTool,
        arguments: Map<String, Value>,
    },
    /// It waits for a person's approval.
    Waiting(String),
}

impl Conversation {
    /// Rounds of tool calls made so far in the emission.
    pub(super) fn round(&self) -> u32 {
        self.round
    }
}

impl NodeTools {
    /// The offered tools as the provider sends them.
    pub(super) fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }
}

impl<P: Publisher> Executor<'_, P> {
    /// The tools node `node` offers: `None` when its config names none; a failed node when
    /// the config does not read or a server cannot be listed (retryable when the server may
    /// answer later).
    pub(super) async fn node_tools(&self, node: &Node) -> Result<Option<NodeTools>, NodeOutcome> {
        let id = node.id.as_str();
        let config = ToolsConfig::parse(&node.config)
            .map_err(|issues| NodeOutcome::Failed(config_error(id, &issues)))?;
        if config.is_empty() {
            return Ok(None);
        }
        self.offer(id, &config).await.map(Some)
    }

    /// The tools `config` offers, listed from their servers.
    async fn offer(&self, id: &str, config: &ToolsConfig) -> Result<NodeTools, NodeOutcome> {
        let unavailable = |e: ToolServerError| {
            NodeOutcome::Failed(error(
                TOOL_SERVER_UNAVAILABLE,
                format!("node {id}: {}", self.redactor.redact_str(&e.to_string()).0),
                e.is_transient(),
            ))
        };
        let mut listed = Vec::with_capacity(config.entries.len());
        let mut namespaces = BTreeMap::new();
        for entry in &config.entries {
            let ns = entry.namespace_in(&self.snap.run.namespace);
            namespaces.insert(entry.server.clone(), ns.to_owned());
            let Some(mount) = self.cfg.tools.mount(ns, &entry.server) else {
                return Err(unavailable(ToolServerError::Unknown(format!(
                    "{ns}/{}",
                    entry.server
                ))));
            };
            let session = self
                .cfg
                .tools
                .session(ns, &entry.server)
                .await
                .map_err(unavailable)?;
            let tools = session
                .list_tools()
                .await
                .map_err(|source| ToolServerError::Mcp {
                    server: entry.server.clone(),
                    source,
                })
                .map_err(unavailable)?;
            listed.push((entry.server.as_str(), tools, mount.tool_tiers.as_slice()));
        }
        let servers: Vec<ServerTools<'_>> = listed
            .iter()
            .map(|(server, tools, tiers)| ServerTools {
                server,
                tools,
                tiers,
            })
            .collect();
        let set = ToolSet::build(config, &servers)
            .map_err(|e| NodeOutcome::Failed(error(e.code(), format!("node {id}: {e}"), false)))?;
        let specs = set.tools().iter().map(ToolSpec::from).collect();
        Ok(NodeTools {
            set,
            specs,
            max_rounds: config.max_rounds,
            namespaces,
        })
    }

    /// `core.mcp.toolCall`: its one call, decided and made as a model's would be (the same
    /// approval, record, replay and kill rules), as the one call of round 0 of its node
    /// attempt. Completes with `{result, toolId, callId}`; a call that did not answer `ok`
    /// fails the node with the record's error (retryable when the record says so).
    pub(super) async fn tool_call_node(
        &self,
        node: &Node,
        attempt: u32,
    ) -> Result<NodeOutcome, LogError> {
        let id = node.id.as_str();
        let config = match ToolCallConfig::parse(&node.config) {
            Ok(c) => c,
            Err(issues) => return Ok(NodeOutcome::Failed(config_error(id, &issues))),
        };
        let tools = match self.offer(id, &config.as_tools()).await {
            Ok(t) => t,
            Err(end) => return Ok(end),
        };
        // The offer holds exactly the named tool (a missing one failed it).
        let Some(name) = tools.set.tools().first().map(|t| t.model_name.clone()) else {
            return Ok(NodeOutcome::Failed(error(
                "tool_not_found",
                format!("node {id}: tool {} is not offered", config.tool),
                false,
            )));
        };
        let call = ModelToolCall {
            id: "call-0".into(),
            name,
            arguments: config.arguments(),
            signature: None,
        };
        let emission = openwop_protocol::retry::step_key(id, 0, attempt);
        let agent_id = format!("host:tools:{id}");
        let log = ToolLog::from_events(self.writer.lock().await.log.events());
        let step = ToolStep::new(emission, 0, 0);
        let returned = match self
            .decide(id, &agent_id, &tools, &log, step, &call)
            .await?
        {
            Decided::Result(r) => r,
            Decided::Waiting(interrupt_id) => {
                return Ok(NodeOutcome::Suspended(
                    interrupt_id,
                    InterruptKind::Approval,
                ));
            }
            make @ Decided::Make { .. } => {
                self.make(id, &make).await?.expect("a call to make is made")
            }
        };
        if returned.status() == ToolStatus::Ok {
            return Ok(NodeOutcome::Completed(json!({
                "result": returned.base.outcome,
                "toolId": returned.tool_id,
                "callId": returned.base.call_id,
            })));
        }
        let e: ErrorInfo = returned
            .base
            .error
            .clone()
            .and_then(|e| serde_json::from_value(e).ok())
            .unwrap_or_else(|| error("tool_error", "the tool call failed", false));
        Ok(NodeOutcome::Failed(e))
    }

    /// Runs the calls of a model turn that asked for tools (round `conv.round` of emission
    /// `emission`) and adds the turn and its results to the conversation; `Break` ends the
    /// node: a call waits for approval, or the rounds are used up.
    pub(super) async fn tool_round(
        &self,
        node_id: &str,
        emission: &str,
        tools: &NodeTools,
        conv: &mut Conversation,
        turn: &NormalizedResponse,
    ) -> Result<ControlFlow<NodeOutcome>, LogError> {
        let round = conv.round;
        if let Err(limit) = check_round(round, tools.max_rounds) {
            self.emit(
                &format!("{emission}/tools/cap"),
                Some(node_id),
                &limit.cap_breached(node_id),
            )
            .await?;
            return Ok(ControlFlow::Break(NodeOutcome::Failed(limit.error_info())));
        }
        let agent_id = format!("host:tools:{node_id}");
        let log = ToolLog::from_events(self.writer.lock().await.log.events());
        let mut decided = Vec::with_capacity(turn.tool_calls.len());
        for (i, call) in turn.tool_calls.iter().enumerate() {
            let step = ToolStep::new(emission, round, i as u32);
            decided.push(
                self.decide(node_id, &agent_id, tools, &log, step, call)
                    .await?,
            );
        }
        // Make every call that may be made now, at once (a turn's calls are independent);
        // each is recorded before it is made and its return as soon as it comes.
        let made = futures::future::join_all(decided.iter().map(|d| self.make(node_id, d))).await;
        let mut results = Vec::with_capacity(decided.len());
        let mut waiting = None;
        for (d, made) in decided.into_iter().zip(made) {
            let returned = match (d, made?) {
                (_, Some(r)) => r,
                (Decided::Result(r), None) => r,
                (Decided::Waiting(interrupt), None) => {
                    waiting.get_or_insert(interrupt);
                    continue;
                }
                (Decided::Make { .. }, None) => unreachable!("a made call has a return"),
            };
            results.push(returned);
        }
        if let Some(interrupt_id) = waiting {
            // The rest of the round is recorded; its worker replays to here once answered.
            return Ok(ControlFlow::Break(NodeOutcome::Suspended(
                interrupt_id,
                InterruptKind::Approval,
            )));
        }
        conv.turns
            .push(ToolTurn::Assistant(AssistantTurn::of(turn)));
        conv.turns.push(ToolTurn::Results(
            turn.tool_calls
                .iter()
                .zip(&results)
                .map(|(call, r)| {
                    let m = r.for_model();
                    ToolResult {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        content: m.content,
                        is_error: m.is_error,
                    }
                })
                .collect(),
        ));
        conv.round += 1;
        Ok(ControlFlow::Continue(()))
    }

    /// What to do with call `step` of the model's turn: refuse it, answer it from the log,
    /// report its unknown outcome, wait for (or apply) its approval, or make it.
    async fn decide<'t>(
        &self,
        node_id: &str,
        agent_id: &str,
        tools: &'t NodeTools,
        log: &ToolLog,
        step: ToolStep,
        call: &ModelToolCall,
    ) -> Result<Decided<'t>, LogError> {
        let set = &tools.set;
        let resolved = if step.index as usize >= MAX_CALLS_PER_ROUND {
            Err(Refusal::too_many_calls(step.index as usize))
        } else {
            set.resolve(&call.name).and_then(|tool| {
                arguments_object(call)
                    .map(|args| (tool, args))
                    .map_err(|e| Refusal::bad_arguments(&e))
            })
        };
        let (tool, arguments) = match resolved {
            Ok(found) => found,
            Err(refusal) => {
                let called = ToolCalled::new(
                    agent_id,
                    &step,
                    &call.name,
                    &call.arguments,
                    &self.redactor,
                    set.resolve(&call.name).ok(),
                );
                let returned = ToolReturned::refused(&called, &refusal);
                let called_id = self.record_call(node_id, &step, &called).await?;
                self.record_return(node_id, &step, &returned, called_id)
                    .await?;
                return Ok(Decided::Result(returned));
            }
        };
        let called = ToolCalled::new(
            agent_id,
            &step,
            &call.name,
            &call.arguments,
            &self.redactor,
            Some(tool),
        );
        match resume(log.lookup(&step.call_id()), tool.tier) {
            Resume::Answer(returned) => return Ok(Decided::Result(returned.clone())),
            Resume::ReportUnknown {
                called,
                called_event_id,
            } => {
                let returned = ToolReturned::unknown(called);
                self.record_return(node_id, &step, &returned, called_event_id.to_owned())
                    .await?;
                return Ok(Decided::Result(returned));
            }
            Resume::Call => {}
        }
        // A read in flight at a kill is made again; if it needed approval, the approval is
        // recorded and its answer is still in the snapshot, so this passes again.
        if tool.needs_approval {
            match self.approval(node_id, &step, &called).await? {
                Some(true) => {}
                Some(false) => {
                    let returned = ToolReturned::refused(&called, &Refusal::approval_rejected());
                    let called_id = self.record_call(node_id, &step, &called).await?;
                    self.record_return(node_id, &step, &returned, called_id)
                        .await?;
                    return Ok(Decided::Result(returned));
                }
                None => {
                    return Ok(Decided::Waiting(tool_call_interrupt_id(
                        self.run_id(),
                        &step,
                    )));
                }
            }
        }
        Ok(Decided::Make {
            step,
            called,
            namespace: tools
                .namespaces
                .get(&tool.server)
                .map_or("", String::as_str),
            tool,
            arguments,
        })
    }

    /// The approval of call `step`: recorded as waiting (the gates' events), then decided by
    /// the snapshot's answer — `Some(true)` accepted, `Some(false)` rejected, `None` still
    /// waiting (an answer that cannot decide, such as an untrusted one, is recorded as
    /// refused and the call keeps waiting).
    async fn approval(
        &self,
        node_id: &str,
        step: &ToolStep,
        called: &ToolCalled,
    ) -> Result<Option<bool>, LogError> {
        let g = tool_call_approval(node_id, called);
        let interrupt_id = tool_call_interrupt_id(self.run_id(), step);
        let key = |suffix: &str| gate::tool_call_step(step, suffix);
        let requested_at = self
            .recorded_at_step(&key("/requested"))
            .await
            .and_then(|p| p.get("requestedAt")?.as_str().map(str::to_owned))
            .unwrap_or_else(crate::eventlog::now_rfc3339);
        let w = g.wait(node_id, &interrupt_id, &requested_at);
        self.emit(&key("/suspended"), Some(node_id), &w.suspended)
            .await?;
        self.emit(&key("/requested"), Some(node_id), &w.requested)
            .await?;
        if let Some(a) = &w.approval {
            self.emit(&key("/approval.requested"), Some(node_id), a)
                .await?;
        }
        let Some(answer) = self
            .snap
            .answers
            .iter()
            .rfind(|a| a.interrupt_id == interrupt_id)
        else {
            return Ok(None);
        };
        let r = match g.resolve(node_id, &interrupt_id, answer) {
            Ok(r) => r,
            Err(refusal) => {
                self.emit(
                    &key("/answer-refused"),
                    Some(node_id),
                    &LogAppended {
                        level: LogLevel::Warn,
                        message: format!("node {node_id}: answer refused: {refusal}"),
                        node_id: Some(node_id.to_owned()),
                        fields: Some(json!({"interruptId": interrupt_id})),
                    },
                )
                .await?;
                return Ok(None);
            }
        };
        self.run_resumed(&interrupt_id).await?;
        if let Some(a) = &r.approval {
            self.emit(&key("/received"), Some(node_id), a).await?;
        }
        self.emit(&key("/resolved"), Some(node_id), &r.resolved)
            .await?;
        self.emit(&key("/resumed"), Some(node_id), &r.resumed)
            .await?;
        Ok(Some(matches!(r.outcome, GateEnd::Completed(_))))
    }

    /// Makes `d` when it is a call to make (`None` for any other decision).
    async fn make(&self, node_id: &str, d: &Decided<'_>) -> Result<Option<ToolReturned>, LogError> {
        let Decided::Make {
            step,
            called,
            namespace,
            tool,
            arguments,
        } = d
        else {
            return Ok(None);
        };
        self.make_call(node_id, step, called, namespace, tool, arguments.clone())
            .await
            .map(Some)
    }

    /// Records the call, makes it on its ToolServer (bounded by the server's timeout, given
    /// up unrecorded at the worker's stop) and records its return.
    async fn make_call(
        &self,
        node_id: &str,
        step: &ToolStep,
        called: &ToolCalled,
        namespace: &str,
        tool: &OfferedTool,
        arguments: Map<String, Value>,
    ) -> Result<ToolReturned, LogError> {
        let called_id = self.record_call(node_id, step, called).await?;
        let max_bytes = self.cfg.tools.mount(namespace, &tool.server).map_or(
            openwop_protocol::tools::result::DEFAULT_MAX_RESULT_BYTES,
            |m| m.max_result_bytes as usize,
        );
        let started = Instant::now();
        let call = async {
            let session = self.cfg.tools.session(namespace, &tool.server).await?;
            session
                .call_tool(&tool.tool, arguments)
                .await
                .map_err(|source| ToolServerError::Mcp {
                    server: tool.server.clone(),
                    source,
                })
        };
        let outcome = tokio::select! {
            r = call => r,
            // The call stays recorded as made: the kill rule decides at the next worker.
            _ = crate::stop::wait(self.stop.clone()) => return Err(LogError::Stopped),
        };
        let ms = started.elapsed().as_millis() as u64;
        let returned = match outcome {
            Ok(result) => {
                let (text, is_error) = result_text(&result);
                ToolReturned::answered(called, &text, is_error, max_bytes, &self.redactor, ms)
            }
            Err(ToolServerError::Mcp {
                source: McpError::Timeout { seconds, .. },
                ..
            }) => ToolReturned::timed_out(called, seconds * 1000),
            Err(e) => ToolReturned::unreachable(called, &e.to_string(), &self.redactor, ms),
        };
        tracing::info!(node = node_id, call = %called.base.call_id, tool = %tool.tool_id(), status = returned.status().wire(), duration_ms = ms, "tool call");
        self.record_return(node_id, step, &returned, called_id)
            .await?;
        Ok(returned)
    }

    /// Appends `agent.toolCalled` of `step` (once: the step's event id is fixed); returns its
    /// event id, the return's cause.
    async fn record_call(
        &self,
        node_id: &str,
        step: &ToolStep,
        called: &ToolCalled,
    ) -> Result<String, LogError> {
        let doc = self.build(&step.called_key(), Some(node_id), called).await;
        let id = doc.event_id.clone();
        self.append(vec![doc]).await?;
        Ok(id)
    }

    /// Appends `agent.toolReturned` of `step`, caused by its call's event.
    async fn record_return(
        &self,
        node_id: &str,
        step: &ToolStep,
        returned: &ToolReturned,
        called_id: String,
    ) -> Result<(), LogError> {
        let doc = self
            .build(&step.returned_key(), Some(node_id), returned)
            .await
            .caused_by(called_id);
        self.append(vec![doc]).await
    }
}
