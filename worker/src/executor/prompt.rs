//! `core.ai.callPrompt` / `core.ai.structuredOutput`: provider + retry router + envelope
//! pipeline, one emission per clarification turn.
//!
//! [`Executor::prompt`] is the turn loop; each turn is a sequence of named steps: a turn
//! whose clarification is recorded replays it ([`Executor::clarification_turn`]); any other
//! picks its provider ([`Executor::turn_provider`]), builds the retry router
//! ([`Executor::router_config`], [`Executor::start_emission`]), drives it to an accepted or
//! failed emission ([`Executor::route`]: each call answered from the log's journal or by the
//! provider, [`Executor::call_provider`], and recorded before it is routed,
//! [`Executor::route_response`]), and runs an accepted envelope through the pipeline
//! ([`Executor::process_envelope`]), whose outcome ends the node or asks the next
//! clarification ([`Executor::envelope_outcome`]). Every event's step key derives from the
//! turn's correlation id (or the router's step key), so a replay yields the same event ids.

use std::ops::ControlFlow;

use super::*;
use openwop_protocol::pipeline::Processed;
use openwop_protocol::retry::{
    Accepted, CallRequest, Failure, Journal, PayloadValidator, Step as RouterStep,
};
use openwop_protocol::run::telemetry as run_telemetry;
use openwop_providers::tools::ToolTurn;

use super::toolcalls::{Conversation, NodeTools};

/// What a prompt node's config asks for, read and checked once for all its turns.
struct PromptNode<'n> {
    node: &'n Node,
    /// The envelope kind the model emits; without it, the output must match `output_schema`.
    envelope_type: Option<String>,
    compiled: Option<schema::CompiledSchema>,
    /// The schema sent to the provider (structured output).
    wire_schema: Value,
    /// The node's envelope contract; a block without `accepts` gates nothing (only the
    /// universal kinds are implied).
    contract: Option<EnvelopeContract>,
    vendor_schemas: BTreeMap<String, schema::CompiledSchema>,
    provider_name: String,
    /// The model the node names (else the provider's own).
    model: Option<&'n str>,
    max_tokens: u32,
    schema_rounds: u32,
    clarification_rounds: u64,
    base_prompt: String,
}

/// One clarification turn of a node attempt.
struct Turn {
    number: u64,
    /// The emission's correlation id (`{runId}:{nodeId}:{turn}` plus `:r{attempt}` on a node
    /// retry): the events of the turn are keyed by it.
    corr: String,
    /// The interrupt a clarification of this turn raises.
    interrupt_id: String,
}

/// The provider a turn calls.
struct TurnProvider<'p> {
    provider: &'p dyn Provider,
    /// The key the mock answers by (`{nodeId}#{turn}`), or the node id for a real provider.
    program_key: String,
    /// A scripted mock plays the provider (the run's `providerMocks` or provider `mock`).
    scripted: bool,
    /// The model the node names: a real client is built per provider and model, so it calls
    /// exactly this one; the mock stands in for it under the same name.
    model: String,
}

/// One emission's context, shared by the steps that drive the retry router.
struct Emission<'e> {
    spec: &'e PromptNode<'e>,
    turn: &'e Turn,
    /// The emission's step key (`retry::step_key`): its journal, its tool rounds and their
    /// calls are keyed by it.
    key: String,
    /// The tools the node offers its model (`None`: it offers none).
    tools: Option<&'e NodeTools>,
    via: TurnProvider<'e>,
    run_id: &'e str,
    deadline: Option<Instant>,
    node_span: &'e SpanHandle,
}

/// The output check the router corrects against: the envelope kind's (with the node's vendor
/// schemas) when the node names one, else the node's compiled `outputSchema`.
struct NodeValidator<'s> {
    envelope_type: Option<&'s str>,
    compiled: Option<&'s schema::CompiledSchema>,
    vendor_schemas: &'s BTreeMap<String, schema::CompiledSchema>,
}

impl PayloadValidator for NodeValidator<'_> {
    fn validate(&self, v: &Value) -> Result<(), Vec<ValidationIssue>> {
        match self.envelope_type {
            None => self.compiled.map(|c| c.validate(v)).unwrap_or(Ok(())),
            Some(t) => emission::validate_output(t, v, self.vendor_schemas),
        }
    }
}

/// The retry router of one emission.
type NodeRouter<'s> = Router<NodeValidator<'s>>;

impl<P: Publisher> Executor<'_, P> {
    /// Runs a prompt node attempt: one emission per clarification turn, until an emission
    /// completes or fails the node, or a clarification waits for its answer.
    pub(super) async fn prompt(
        &self,
        node: &Node,
        inputs: &Value,
        attempt: u32,
        deadline: Option<Instant>,
        node_span: &SpanHandle,
    ) -> Result<NodeOutcome, LogError> {
        let spec = match self.prompt_node(node) {
            ControlFlow::Continue(s) => s,
            ControlFlow::Break(end) => return Ok(end),
        };
        let tools = match self.node_tools(node).await {
            Ok(t) => t,
            Err(end) => return Ok(end),
        };
        let run_id = self.run_id().to_owned();
        let mut answers: Vec<Value> = Vec::new();
        let mut turn_number: u64 = 0;
        loop {
            let turn = self.turn(&run_id, &node.id, turn_number, attempt);
            if self.recorded_interrupt(&turn.interrupt_id).await {
                // This turn's envelope is finished (a clarification): no provider call.
                let Some(answer) = self.clarification_turn(&node.id, &turn).await? else {
                    return Ok(NodeOutcome::Suspended(
                        turn.interrupt_id,
                        InterruptKind::Clarification,
                    ));
                };
                answers.push(answer);
                turn_number += 1;
                continue;
            }
            let via = match self.turn_provider(&spec, turn.number) {
                ControlFlow::Continue(p) => p,
                ControlFlow::Break(end) => return Ok(end),
            };
            let em = Emission {
                spec: &spec,
                turn: &turn,
                key: openwop_protocol::retry::step_key(&node.id, turn.number, attempt),
                tools: tools.as_ref(),
                via,
                run_id: &run_id,
                deadline,
                node_span,
            };
            let rc = self.router_config(&em, user_prompt(&spec, inputs, &answers));
            let (mut router, step, mut journal) = match self.start_emission(&em, rc, attempt).await
            {
                ControlFlow::Continue(started) => started,
                ControlFlow::Break(end) => return Ok(end),
            };
            let accepted = match self.route(&em, &mut router, step, &mut journal).await? {
                ControlFlow::Continue(a) => a,
                ControlFlow::Break(end) => return Ok(end),
            };
            let Some(t) = &spec.envelope_type else {
                return Ok(NodeOutcome::Completed(json!({"output": accepted.payload})));
            };
            let (kind, processed) = self.process_envelope(&em, t, &accepted).await?;
            match self.envelope_outcome(&em, &kind, processed).await? {
                // The loop top records node.suspended and waits for the answer.
                ControlFlow::Continue(()) => continue,
                ControlFlow::Break(end) => return Ok(end),
            }
        }
    }

    /// Reads and checks the node's config once: a node that sets neither `envelopeType` nor
    /// a compiling `outputSchema` fails before any call; the host profile's limits bound the
    /// node's own (a node may ask for less, never for more).
    fn prompt_node<'n>(&self, node: &'n Node) -> ControlFlow<NodeOutcome, PromptNode<'n>> {
        let id = node.id.as_str();
        let c = &node.config;
        let envelope_type = c
            .get("envelopeType")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let output_schema = c.get("outputSchema").cloned();
        if envelope_type.is_none() && output_schema.is_none() {
            return ControlFlow::Break(NodeOutcome::Failed(error(
                "node_config_invalid",
                format!("node {id}: set config.envelopeType or config.outputSchema"),
                false,
            )));
        }
        let compiled = match &output_schema {
            Some(s) => match schema::compile(s) {
                Ok(c) => Some(c),
                Err(e) => {
                    return ControlFlow::Break(NodeOutcome::Failed(error(
                        "node_config_invalid",
                        format!("node {id}: config.outputSchema does not compile: {e}"),
                        false,
                    )));
                }
            },
            None => None,
        };
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
        let wire_schema = match (&envelope_type, &output_schema) {
            (Some(t), _) => emission::wire_schema(
                t,
                node.envelope_contract
                    .as_ref()
                    .and_then(|c| c.schemas.as_ref())
                    .and_then(|s| s.get(t)),
            ),
            (None, Some(s)) => s.clone(),
            (None, None) => Value::Null,
        };
        // A node without `provider` uses the first configured one, else the mock.
        let provider_name = c
            .get("provider")
            .and_then(Value::as_str)
            .or_else(|| self.cfg.providers.default_provider())
            .unwrap_or("mock")
            .to_owned();
        let host = &self.snap.host;
        ControlFlow::Continue(PromptNode {
            node,
            envelope_type,
            compiled,
            wire_schema,
            contract,
            vendor_schemas,
            provider_name,
            model: c.get("model").and_then(Value::as_str),
            max_tokens: c
                .get("maxTokens")
                .and_then(Value::as_u64)
                .unwrap_or(1024)
                .clamp(1, u32::MAX as u64) as u32,
            schema_rounds: host.schema_rounds(c.get("schemaRounds").and_then(Value::as_u64)),
            clarification_rounds: host
                .clarification_rounds(c.get("clarificationRounds").and_then(Value::as_u64)),
            base_prompt: c
                .get("prompt")
                .or_else(|| c.get("userPrompt"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        })
    }

    /// The turn's correlation id and interrupt id, which key every event of the turn.
    fn turn(&self, run_id: &str, id: &str, number: u64, attempt: u32) -> Turn {
        let retry = if attempt == 0 {
            String::new()
        } else {
            format!(":r{attempt}")
        };
        let corr = format!("{run_id}:{id}:{number}{retry}");
        let interrupt_id = pipeline::interrupt_id_for(run_id, &self.redactor.redact_str(&corr).0);
        Turn {
            number,
            corr,
            interrupt_id,
        }
    }

    /// A turn whose clarification is recorded: records `node.suspended`, then, when the
    /// snapshot holds the answer, the resume and resolution events, and returns the answer
    /// (`None`: the node waits for it).
    async fn clarification_turn(&self, id: &str, turn: &Turn) -> Result<Option<Value>, LogError> {
        let corr = &turn.corr;
        let interrupt_id = &turn.interrupt_id;
        self.emit(
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
        let Some(answer) = self.snap.answer(interrupt_id).cloned() else {
            return Ok(None);
        };
        let value = answer.value.clone().unwrap_or(Value::Null);
        self.run_resumed(interrupt_id).await?;
        self.emit(
            &format!("{corr}/clarification.resolved"),
            Some(id),
            &openwop_protocol::events::ClarificationResolved {
                node_id: id.to_owned(),
                answers: value.clone(),
                interrupt_id: Some(interrupt_id.clone()),
                answered_by: Some(answer.principal().to_owned()),
                answered_at: answer.answered_at.clone(),
            },
        )
        .await?;
        self.emit_value(
            &format!("{corr}/interrupt.resolved"),
            Some(id),
            EventType::InterruptResolved,
            json!({"nodeId": id, "interruptId": interrupt_id}),
        )
        .await?;
        self.emit_value(
            &format!("{corr}/node.resumed"),
            Some(id),
            EventType::NodeResumed,
            json!({"nodeId": id, "interruptId": interrupt_id}),
        )
        .await?;
        Ok(Some(value))
    }

    /// The provider the turn calls: the mock when the run's `providerMocks` list the node
    /// (one program per turn) or the node names provider `mock`, else the client configured
    /// for the node's provider and model; a missing program or client fails the node.
    fn turn_provider<'s>(
        &'s self,
        spec: &PromptNode<'s>,
        turn: u64,
    ) -> ControlFlow<NodeOutcome, TurnProvider<'s>> {
        let id = spec.node.id.as_str();
        let provider_name = spec.provider_name.as_str();
        let node_model = spec.model;
        let mocked = self.cfg.mock_programs.get(id);
        let (provider, program_key): (&dyn Provider, String) = if let Some(turns) = mocked {
            let key = format!("{id}#{turn}");
            if !self.mock.has_program(&key) {
                return ControlFlow::Break(NodeOutcome::Failed(error(
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
            match self.cfg.providers.get(provider_name, node_model) {
                Some(p) => (p, id.to_owned()),
                None => {
                    return ControlFlow::Break(NodeOutcome::Failed(error(
                        "capability_required",
                        format!(
                            "node {id} uses provider `{provider_name}`{}, which is not configured for this workflow: add the provider to spec.providers and set config.model",
                            node_model
                                .map(|m| format!(" model `{m}`"))
                                .unwrap_or_default()
                        ),
                        false,
                    )));
                }
            }
        };
        ControlFlow::Continue(TurnProvider {
            provider,
            program_key,
            scripted: mocked.is_some() || provider_name == "mock",
            model: node_model.unwrap_or(provider.model()).to_owned(),
        })
    }

    /// The retry router's settings for the emission: its step key names the node, the turn
    /// and the node attempt (the router's event ids derive from it), its budget, prompts,
    /// schema rounds and truncation multiplier are the node's within the host's limits.
    fn router_config(&self, em: &Emission<'_>, user: String) -> RouterConfig {
        let spec = em.spec;
        let id = spec.node.id.as_str();
        let c = &spec.node.config;
        let host = &self.snap.host;
        let provider = em.via.provider;
        let mut rc = RouterConfig::new(
            id,
            provider.name(),
            em.via.model.clone(),
            spec.max_tokens,
            provider.output_ceiling(),
        );
        rc.step_key = em.key.clone();
        rc.system_prompt = c
            .get("systemPrompt")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        rc.user_prompt = user;
        rc.schema_rounds = spec.schema_rounds;
        rc.multiplier = host.multiplier(c.get("truncationMultiplier").and_then(Value::as_f64));
        rc.posture = host.reasoning_directive;
        if c.get("nlToFormat").and_then(Value::as_bool) == Some(true) {
            rc.nl_to_format = Some(NlToFormat {
                envelope_type: spec
                    .envelope_type
                    .clone()
                    .unwrap_or_else(|| "outputSchema".into()),
            });
        }
        rc
    }

    /// Builds the emission's router and its first step, and reads back what earlier workers
    /// recorded of it (the journal); the mock's position moves past the calls of earlier
    /// node attempts, as it lives in this process. A router that cannot be built fails the
    /// node.
    async fn start_emission<'s>(
        &self,
        em: &Emission<'s>,
        rc: RouterConfig,
        attempt: u32,
    ) -> ControlFlow<NodeOutcome, (NodeRouter<'s>, RouterStep, Journal)> {
        let spec = em.spec;
        let id = spec.node.id.as_str();
        let validator = NodeValidator {
            envelope_type: spec.envelope_type.as_deref(),
            compiled: spec.compiled.as_ref(),
            vendor_schemas: &spec.vendor_schemas,
        };
        let mut router = match Router::new(rc, validator, Redactor::new(self.cfg.secrets.clone())) {
            Ok(r) => r,
            Err(e) => {
                return ControlFlow::Break(NodeOutcome::Failed(error(
                    "node_config_invalid",
                    format!("node {id}: {e}"),
                    false,
                )));
            }
        };
        let now = crate::eventlog::now_rfc3339();
        let started = router.start(self.writer.lock().await.log.factory(), &now);
        let step = match started {
            Ok(s) => s,
            Err(e) => {
                return ControlFlow::Break(NodeOutcome::Failed(error(
                    "internal",
                    e.to_string(),
                    false,
                )));
            }
        };
        let journal = router.restore(self.writer.lock().await.log.events());
        if std::ptr::addr_eq(em.via.provider, &self.mock) {
            // The mock answers by position, and its position lives in this process: a
            // restarted worker moves it past the calls of the earlier node attempts.
            let made = openwop_protocol::retry::calls_in_earlier_attempts(
                self.writer.lock().await.log.events(),
                id,
                em.turn.number,
                attempt,
            );
            self.mock.advance_to(&em.via.program_key, made);
        }
        ControlFlow::Continue((router, step, journal))
    }

    /// Drives the retry router to an accepted or failed emission (its schema rounds and
    /// truncation retries are further calls): appends each step's events, answers each call
    /// it asks for (from the journal, else the provider) and routes the recorded response.
    async fn route(
        &self,
        em: &Emission<'_>,
        router: &mut NodeRouter<'_>,
        mut step: RouterStep,
        journal: &mut Journal,
    ) -> Result<ControlFlow<NodeOutcome, Accepted>, LogError> {
        let mut conv = Conversation::default();
        loop {
            let events = std::mem::take(&mut step.events);
            self.append(events).await?;
            match step.action {
                Action::Call(req) => {
                    let response = match self
                        .model_answer(em, router, &req, journal, &mut conv)
                        .await?
                    {
                        ControlFlow::Continue(r) => r,
                        ControlFlow::Break(end) => return Ok(ControlFlow::Break(end)),
                    };
                    step = match self.route_response(em, router, &req, &response).await? {
                        ControlFlow::Continue(s) => s,
                        ControlFlow::Break(end) => return Ok(ControlFlow::Break(end)),
                    };
                }
                Action::Accept(a) => return Ok(ControlFlow::Continue(a)),
                Action::Fail(f) => return Ok(ControlFlow::Break(self.emission_failed(em, f))),
            }
        }
    }

    /// The model's answer to router call `req`: recorded by an earlier worker (never
    /// requested again), else the provider's. A node with tools may get turns that ask for
    /// tools first: each is journaled as a round (`tools::record::rounds_key`), its calls
    /// run ([`Executor::tool_round`]), and the provider is asked again with the results,
    /// until a turn asks for none — the answer the router routes. A replay tells the two
    /// apart by the journals: at each position a recorded round, else the router's record.
    async fn model_answer(
        &self,
        em: &Emission<'_>,
        router: &NodeRouter<'_>,
        req: &CallRequest,
        journal: &mut Journal,
        conv: &mut Conversation,
    ) -> Result<ControlFlow<NodeOutcome, NormalizedResponse>, LogError> {
        let id = em.spec.node.id.as_str();
        let rounds_key = openwop_protocol::tools::record::rounds_key(&em.key, req.attempt);
        let mut rounds = match em.tools {
            Some(_) => Journal::restore(self.writer.lock().await.log.events(), id, &rounds_key),
            None => Journal::default(),
        };
        loop {
            let number = conv.round() + 1;
            let response = if let Some(r) = rounds.take(number, req.max_tokens) {
                self.restored(em, req.attempt);
                r
            } else if let Some(r) = journal.take(req.attempt, req.max_tokens) {
                self.restored(em, req.attempt);
                return Ok(ControlFlow::Continue(r));
            } else {
                match self.call_provider(em, router, req, &conv.turns).await? {
                    ControlFlow::Continue(r) => r,
                    ControlFlow::Break(end) => return Ok(ControlFlow::Break(end)),
                }
            };
            let Some(tools) = em.tools.filter(|_| !response.tool_calls.is_empty()) else {
                return Ok(ControlFlow::Continue(response));
            };
            // Recorded again when restored: the log keeps one of each (same ids), and a
            // worker killed between the record and its usage completes the pair.
            let response = self
                .record_round(em, &rounds_key, number, req.max_tokens, &response)
                .await?;
            if let ControlFlow::Break(end) =
                self.tool_round(id, &em.key, tools, conv, &response).await?
            {
                return Ok(ControlFlow::Break(end));
            }
        }
    }

    /// A response read back from the run's log instead of requested: the mock, which plays
    /// the provider by position, moves past the step the recorded call used.
    fn restored(&self, em: &Emission<'_>, attempt: u32) {
        if std::ptr::addr_eq(em.via.provider, &self.mock) {
            self.mock.skip(&em.via.program_key);
        }
        tracing::info!(key = %em.via.program_key, attempt, "provider response restored from the run's log; no provider call");
    }

    /// Journals a model turn that asked for tools (round `number` of the emission), with its
    /// usage, before any of its calls is made; returns the recorded (redacted) turn, whose
    /// calls are the ones made.
    async fn record_round(
        &self,
        em: &Emission<'_>,
        rounds_key: &str,
        number: u32,
        max_tokens: u32,
        response: &NormalizedResponse,
    ) -> Result<NormalizedResponse, LogError> {
        let id = em.spec.node.id.as_str();
        let (record, redacted) = openwop_protocol::retry::ResponseRecord::new(
            rounds_key,
            number,
            max_tokens,
            response,
            &self.redactor,
        );
        let key = format!("{rounds_key}/{number}");
        self.emit(&format!("{key}/response"), Some(id), &record.to_payload(id))
            .await?;
        self.emit_value(
            &format!("{key}/usage"),
            Some(id),
            EventType::ProviderUsage,
            response.usage_payload(id),
        )
        .await?;
        Ok(redacted)
    }

    /// Makes one provider call, under the node's deadline, the worker's stop and the run's
    /// abandon, inside its `openwop.provider.call` span. A stop abandons the call unrecorded
    /// (a later worker makes it again); a timeout is recorded, as the call was made, and
    /// fails the node retryably; a provider error fails it with its redacted message.
    async fn call_provider(
        &self,
        em: &Emission<'_>,
        router: &NodeRouter<'_>,
        req: &CallRequest,
        turns: &[ToolTurn],
    ) -> Result<ControlFlow<NodeOutcome, NormalizedResponse>, LogError> {
        let id = em.spec.node.id.as_str();
        let provider = em.via.provider;
        let request = CompletionRequest {
            node_id: em.via.program_key.clone(),
            system_prompt: req.system_prompt.clone(),
            user_prompt: req.user_prompt.clone(),
            max_tokens: req.max_tokens,
            schema: req.send_schema.then(|| em.spec.wire_schema.clone()),
            schema_name: em
                .spec
                .envelope_type
                .clone()
                .unwrap_or_else(|| "output".into())
                .replace('.', "_"),
            tools: em.tools.map(|t| t.specs().to_vec()).unwrap_or_default(),
            turns: turns.to_vec(),
        };
        let call_span = em.node_span.child("openwop.provider.call");
        call_span.set_str("openwop.run_id", em.run_id);
        call_span.set_str("openwop.node_id", id);
        call_span.set_str("openwop.provider", provider.name());
        call_span.set_str("openwop.model", &em.via.model);
        call_span.set_i64("openwop.call_attempt", i64::from(req.attempt));
        call_span.set_i64("openwop.max_tokens", i64::from(req.max_tokens));
        if em.via.scripted {
            // The record a test reads from the worker's log (events carry the same
            // call as `log.appended`, but a replay never republishes those).
            tracing::info!(key = %em.via.program_key, attempt = req.attempt, max_tokens = req.max_tokens, "mock provider call");
        }
        let call = provider.complete(&request);
        let timed = async {
            match em.deadline {
                Some(d) => tokio::time::timeout(d.saturating_duration_since(Instant::now()), call)
                    .await
                    .ok(),
                None => Some(call.await),
            }
        };
        let result = tokio::select! {
            r = timed => r,
            _ = crate::stop::wait(self.stop.clone()) => return Err(LogError::Stopped),
            why = self.abandoned() => {
                call_span.fail("cancelled", "the run stopped its in-flight branches");
                return why.map(|e| ControlFlow::Break(NodeOutcome::Failed(e)));
            }
        };
        let Some(result) = result else {
            call_span.fail(
                "node_timeout",
                "the provider call exceeded settings.timeout",
            );
            drop(call_span);
            // The call was made: a restarted worker's scripted mock plays on after it, as
            // this run's next attempt does.
            let now = crate::eventlog::now_rfc3339();
            let record = router.record_timeout(self.writer.lock().await.log.factory(), &now);
            self.append(vec![record]).await?;
            return Ok(ControlFlow::Break(NodeOutcome::Failed(error(
                "node_timeout",
                format!(
                    "node {id} exceeded settings.timeout waiting for provider {}",
                    provider.name()
                ),
                true,
            ))));
        };
        let response: NormalizedResponse = match result {
            // The mock plays the node's model: its events name that model.
            Ok(mut r) if std::ptr::addr_eq(provider, &self.mock) => {
                r.model = em.via.model.clone();
                r
            }
            Ok(r) => r,
            Err(e) => {
                let msg = self.redactor.redact_str(&e.to_string()).0.into_owned();
                call_span.fail("provider_error", &msg);
                return Ok(ControlFlow::Break(NodeOutcome::Failed(error(
                    "provider_error",
                    msg,
                    !e.is_permanent(),
                ))));
            }
        };
        call_span.set_str("openwop.response_model", &response.model);
        call_span.set_i64("openwop.input_tokens", response.usage.input_tokens as i64);
        call_span.set_i64("openwop.output_tokens", response.usage.output_tokens as i64);
        call_span.set_str("openwop.stop_reason", stop_label(&response.stop));
        call_span.set_bool("openwop.thinking", response.thinking.is_some());
        Ok(ControlFlow::Continue(response))
    }

    /// Records the response before anything else of it (the router routes the recorded,
    /// redacted form, live or restored alike), publishes the provider's thinking to the
    /// reasoning lane, and takes the router's next step.
    async fn route_response(
        &self,
        em: &Emission<'_>,
        router: &mut NodeRouter<'_>,
        req: &CallRequest,
        response: &NormalizedResponse,
    ) -> Result<ControlFlow<NodeOutcome, RouterStep>, LogError> {
        let id = em.spec.node.id.as_str();
        let corr = &em.turn.corr;
        let now = crate::eventlog::now_rfc3339();
        let (record, response) =
            router.record(response, self.writer.lock().await.log.factory(), &now);
        self.append(vec![record]).await?;
        if let Some(thinking) = response.thinking.as_deref() {
            // Provider thinking: one block per call, correlated to the emission; redacted
            // and rate-limited by the stream.
            let name = em.via.provider.name();
            let block = Block {
                correlation_id: corr.clone(),
                agent_id: format!("host:{name}:{id}"),
                title: format!("{name} thinking (call {})", req.attempt),
                thoughts: thoughts_of(thinking),
                nested: vec![],
                conclusion: None,
            };
            self.publish_reasoning(id, &format!("{corr}/thinking/{}", req.attempt), &block)
                .await?;
        }
        let now = crate::eventlog::now_rfc3339();
        let next = router.on_response(&response, self.writer.lock().await.log.factory(), &now);
        Ok(match next {
            Ok(s) => ControlFlow::Continue(s),
            Err(e) => {
                ControlFlow::Break(NodeOutcome::Failed(error("internal", e.to_string(), false)))
            }
        })
    }

    /// A failed emission fails the node with the router's spec code (the router already
    /// recorded `node.failed`) and marks its `openwop.envelope` span failed.
    fn emission_failed(&self, em: &Emission<'_>, f: Failure) -> NodeOutcome {
        let env_span = em.node_span.child(run_telemetry::ENVELOPE_SPAN);
        let about = run_telemetry::EnvelopeSpan {
            run_id: em.run_id,
            node_id: em.spec.node.id.as_str(),
            correlation_id: &em.turn.corr,
            envelope_type: em.spec.envelope_type.as_deref(),
            retry_attempt: f.attempts,
        };
        env_span.set_all(&run_telemetry::envelope_span_failed(
            &about,
            f.code.as_str(),
        ));
        env_span.fail(f.code.as_str(), &f.message);
        NodeOutcome::Failed(ErrorInfo {
            code: f.code.as_str().into(),
            message: f.message,
            details: None,
            retryable: Some(false),
        })
    }

    /// Runs the accepted output through the envelope pipeline as an envelope the engine
    /// stamps at acceptance (it owns correlation, ids and trust), inside its
    /// `openwop.envelope` span; appends the pipeline's events and publishes the envelope's
    /// reasoning. Returns the envelope's kind and what the pipeline made of it.
    async fn process_envelope(
        &self,
        em: &Emission<'_>,
        envelope_type: &str,
        accepted: &Accepted,
    ) -> Result<(String, Processed), LogError> {
        let id = em.spec.node.id.as_str();
        let corr = &em.turn.corr;
        // The envelope is stamped when it is accepted, not when the emission started.
        let now = crate::eventlog::now_rfc3339();
        // The model's output is an envelope; the engine owns correlation, ids and trust.
        let env = emission::assemble(&accepted.payload, envelope_type, corr, id, &now);
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
        let env_span = em.node_span.child(run_telemetry::ENVELOPE_SPAN);
        let processed = {
            let mut ctx = Context::new(&self.host, &self.redactor, id, &now);
            ctx.node_contract = em.spec.contract.as_ref();
            let mut w = self.writer.lock().await;
            pipeline::accept_value(
                env,
                None,
                &ctx,
                &mut self.dedup.borrow_mut(),
                w.log.factory(),
            )
        };
        let about = run_telemetry::EnvelopeSpan {
            run_id: em.run_id,
            node_id: id,
            correlation_id: corr,
            envelope_type: Some(&kind),
            retry_attempt: accepted.attempts,
        };
        env_span.set_all(&run_telemetry::envelope_span_attributes(
            &about,
            &processed.outcome,
        ));
        if let Some(code) = processed.outcome.code() {
            env_span.fail(
                code.as_str(),
                processed.outcome.message().unwrap_or_default(),
            );
        }
        drop(env_span);
        self.append(processed.events.clone()).await?;
        if let Some(text) = reasoning_text {
            let envelope_id = match &processed.outcome {
                Outcome::Accepted(a) => a.envelope_id.clone(),
                _ => corr.clone(),
            };
            let block = Block {
                correlation_id: envelope_id,
                agent_id: format!("host:{}:{id}", em.via.provider.name()),
                title: format!("{kind} reasoning"),
                thoughts: thoughts_of(&text),
                nested: vec![],
                conclusion: Some(format!("emitted {kind}")),
            };
            self.publish_reasoning(id, &format!("{corr}/envelope"), &block)
                .await?;
        }
        Ok((kind, processed))
    }

    /// What the pipeline's outcome means for the node: an accepted clarification waits for
    /// its answer (`Continue`: the loop top records `node.suspended`) unless it is beyond the
    /// clarification rounds; any other accepted envelope completes the node; a refusal
    /// fails it.
    async fn envelope_outcome(
        &self,
        em: &Emission<'_>,
        kind: &str,
        processed: Processed,
    ) -> Result<ControlFlow<NodeOutcome>, LogError> {
        let id = em.spec.node.id.as_str();
        let corr = &em.turn.corr;
        let turn = em.turn.number;
        let clarification_rounds = em.spec.clarification_rounds;
        match processed.outcome {
            Outcome::Accepted(_) if kind == emission::CLARIFICATION_KIND => {
                // Question number turn + 1: beyond the host's clarificationRounds (or the
                // node's lower setting) the node fails instead of waiting.
                if turn >= clarification_rounds {
                    self.emit_value(&format!("{corr}/cap"), Some(id), EventType::CapBreached, json!({"kind": "clarification", "limit": clarification_rounds, "observed": turn + 1, "nodeId": id})).await?;
                    return Ok(ControlFlow::Break(NodeOutcome::Failed(error(
                        "cap_breached",
                        format!(
                            "node {id} asked for clarification {} times; the limit (clarificationRounds) is {clarification_rounds}",
                            turn + 1
                        ),
                        false,
                    ))));
                }
                Ok(ControlFlow::Continue(()))
            }
            Outcome::Accepted(a) => Ok(ControlFlow::Break(NodeOutcome::Completed(
                json!({"output": a.redacted_payload, "envelopeType": kind}),
            ))),
            other => Ok(ControlFlow::Break(NodeOutcome::Failed(refused(
                other,
                &processed.events,
            )))),
        }
    }
}

/// The prompt of one turn: the node's prompt, its inputs, and every clarification answered
/// so far, in order.
fn user_prompt(spec: &PromptNode<'_>, inputs: &Value, answers: &[Value]) -> String {
    let mut user = format!("{}\n\nInputs:\n{}", spec.base_prompt, inputs);
    for (i, a) in answers.iter().enumerate() {
        user.push_str(&format!("\n\nAnswers to clarification {}:\n{a}", i + 1));
    }
    user
}

/// The node's error for a refused envelope: a refusal the pipeline already projected as
/// `node.failed` (a gate or a cap) fails the node with that same error, so `node.failed` and
/// `run.failed` agree; any other carries the outcome's code and message.
fn refused(outcome: Outcome, events: &[RunEventDoc]) -> ErrorInfo {
    if let Some(err) = events
        .iter()
        .find(|e| e.event_type == EventType::NodeFailed)
        .and_then(|e| e.payload.get("error").cloned())
        .and_then(|v| serde_json::from_value::<ErrorInfo>(v).ok())
    {
        return err;
    }
    let code = outcome
        .code()
        .map(|c| c.as_str().to_owned())
        .unwrap_or_else(|| "envelope_invalid".into());
    let message = outcome
        .message()
        .unwrap_or("the envelope was refused")
        .to_owned();
    ErrorInfo {
        code,
        message,
        details: serde_json::to_value(&outcome).ok(),
        retryable: Some(false),
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
