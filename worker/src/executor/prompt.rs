//! `core.ai.callPrompt` / `core.ai.structuredOutput`: provider + retry router + envelope
//! pipeline, one emission per clarification turn.

use super::*;
use openwop_protocol::run::telemetry as run_telemetry;

impl<P: Publisher> Executor<'_, P> {
    pub(super) async fn prompt(
        &self,
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
        // A node without `provider` uses the first configured one, else the mock.
        let provider_name = c
            .get("provider")
            .and_then(Value::as_str)
            .or_else(|| self.cfg.providers.default_provider())
            .unwrap_or("mock")
            .to_owned();
        let node_model = c.get("model").and_then(Value::as_str);
        let max_tokens = c
            .get("maxTokens")
            .and_then(Value::as_u64)
            .unwrap_or(1024)
            .clamp(1, u32::MAX as u64) as u32;
        // The host profile's limits; a node may ask for less, never for more.
        let host = &self.snap.host;
        let schema_rounds = host.schema_rounds(c.get("schemaRounds").and_then(Value::as_u64));
        let clarification_rounds =
            host.clarification_rounds(c.get("clarificationRounds").and_then(Value::as_u64));
        let base_prompt = c
            .get("prompt")
            .or_else(|| c.get("userPrompt"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let run_id = self.run_id().to_owned();
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
            if self.recorded_interrupt(&interrupt_id).await {
                // This turn's envelope is finished (a clarification): no provider call.
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
                let Some(answer) = self.snap.answer(&interrupt_id).cloned() else {
                    return Ok(NodeOutcome::Suspended(
                        interrupt_id,
                        InterruptKind::Clarification,
                    ));
                };
                let value = answer.value.clone().unwrap_or(Value::Null);
                self.run_resumed(&interrupt_id).await?;
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
                answers.push(value);
                turn += 1;
                continue;
            }
            let mut user = format!("{base_prompt}\n\nInputs:\n{}", inputs);
            for (i, a) in answers.iter().enumerate() {
                user.push_str(&format!("\n\nAnswers to clarification {}:\n{a}", i + 1));
            }
            let mocked = self.cfg.mock_programs.get(id);
            let (provider, program_key): (&dyn Provider, String) = if let Some(turns) = mocked {
                let key = format!("{id}#{turn}");
                if !self.mock.has_program(&key) {
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
                match self.cfg.providers.get(&provider_name, node_model) {
                    Some(p) => (p, id.to_owned()),
                    None => {
                        return Ok(NodeOutcome::Failed(error(
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
            // The model the node names: a real client is built per provider and model, so it
            // calls exactly this one; the mock stands in for it under the same name.
            let model = node_model.unwrap_or(provider.model()).to_owned();
            let mut rc = RouterConfig::new(
                id,
                provider.name(),
                model.clone(),
                max_tokens,
                provider.output_ceiling(),
            );
            rc.step_key = openwop_protocol::retry::step_key(id, turn, attempt);
            rc.system_prompt = c
                .get("systemPrompt")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            rc.user_prompt = user;
            rc.schema_rounds = schema_rounds;
            rc.multiplier = host.multiplier(c.get("truncationMultiplier").and_then(Value::as_f64));
            rc.posture = host.reasoning_directive;
            if c.get("nlToFormat").and_then(Value::as_bool) == Some(true) {
                rc.nl_to_format = Some(NlToFormat {
                    envelope_type: envelope_type
                        .clone()
                        .unwrap_or_else(|| "outputSchema".into()),
                });
            }
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
            let et = envelope_type.clone();
            let vs = &vendor_schemas;
            let cs = compiled.as_ref();
            let validator = move |v: &Value| -> Result<(), Vec<ValidationIssue>> {
                match &et {
                    None => cs.map(|c| c.validate(v)).unwrap_or(Ok(())),
                    Some(t) => emission::validate_output(t, v, vs),
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
            let started = router.start(self.writer.lock().await.log.factory(), &now);
            let mut step = match started {
                Ok(s) => s,
                Err(e) => return Ok(NodeOutcome::Failed(error("internal", e.to_string(), false))),
            };
            let mut journal = router.restore(self.writer.lock().await.log.events());
            if std::ptr::addr_eq(provider, &self.mock) {
                // The mock answers by position, and its position lives in this process: a
                // restarted worker moves it past the calls of the earlier node attempts.
                let made = openwop_protocol::retry::calls_in_earlier_attempts(
                    self.writer.lock().await.log.events(),
                    id,
                    turn,
                    attempt,
                );
                self.mock.advance_to(&program_key, made);
            }
            let accepted = loop {
                let events = std::mem::take(&mut step.events);
                self.append(events).await?;
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
                        // A response recorded by an earlier worker is never requested again.
                        let restored = journal.take(req.attempt, req.max_tokens);
                        let response = if let Some(r) = restored {
                            if std::ptr::addr_eq(provider, &self.mock) {
                                // The mock plays the provider: the recorded call used its step.
                                self.mock.skip(&program_key);
                            }
                            tracing::info!(key = %program_key, attempt = req.attempt, "provider response restored from the run's log; no provider call");
                            r
                        } else {
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
                                _ = crate::stop::wait(self.stop.clone()) => return Err(LogError::Stopped),
                                why = self.abandoned() => {
                                    call_span.fail("cancelled", "the run stopped its in-flight branches");
                                    return why.map(NodeOutcome::Failed);
                                }
                            };
                            let Some(result) = result else {
                                call_span.fail(
                                    "node_timeout",
                                    "the provider call exceeded settings.timeout",
                                );
                                drop(call_span);
                                // The call was made: a restarted worker's scripted mock plays
                                // on after it, as this run's next attempt does.
                                let now = crate::eventlog::now_rfc3339();
                                let record = router
                                    .record_timeout(self.writer.lock().await.log.factory(), &now);
                                self.append(vec![record]).await?;
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
                                // The mock plays the node's model: its events name that model.
                                Ok(mut r) if std::ptr::addr_eq(provider, &self.mock) => {
                                    r.model = model.clone();
                                    r
                                }
                                Ok(r) => r,
                                Err(e) => {
                                    let msg =
                                        self.redactor.redact_str(&e.to_string()).0.into_owned();
                                    call_span.fail("provider_error", &msg);
                                    return Ok(NodeOutcome::Failed(error(
                                        "provider_error",
                                        msg,
                                        !e.is_permanent(),
                                    )));
                                }
                            };
                            call_span.set_str("openwop.response_model", &response.model);
                            call_span.set_i64(
                                "openwop.input_tokens",
                                response.usage.input_tokens as i64,
                            );
                            call_span.set_i64(
                                "openwop.output_tokens",
                                response.usage.output_tokens as i64,
                            );
                            call_span.set_str("openwop.stop_reason", stop_label(&response.stop));
                            call_span.set_bool("openwop.thinking", response.thinking.is_some());
                            drop(call_span);
                            response
                        };
                        // Recorded before anything else of the response; the router routes
                        // the recorded (redacted) form, live or restored alike.
                        let now = crate::eventlog::now_rfc3339();
                        let (record, response) =
                            router.record(&response, self.writer.lock().await.log.factory(), &now);
                        self.append(vec![record]).await?;
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
                            self.publish_reasoning(
                                id,
                                &format!("{corr}/thinking/{}", req.attempt),
                                &block,
                            )
                            .await?;
                        }
                        let now = crate::eventlog::now_rfc3339();
                        let next = router.on_response(
                            &response,
                            self.writer.lock().await.log.factory(),
                            &now,
                        );
                        step = match next {
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
                        let env_span = node_span.child(run_telemetry::ENVELOPE_SPAN);
                        let about = run_telemetry::EnvelopeSpan {
                            run_id: &run_id,
                            node_id: id,
                            correlation_id: &corr,
                            envelope_type: envelope_type.as_deref(),
                            retry_attempt: f.attempts,
                        };
                        env_span.set_all(&run_telemetry::envelope_span_failed(
                            &about,
                            f.code.as_str(),
                        ));
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
            // The envelope is stamped when it is accepted, not when the emission started.
            let now = crate::eventlog::now_rfc3339();
            // The model's output is an envelope; the engine owns correlation, ids and trust.
            let env = emission::assemble(&accepted.payload, t, &corr, id, &now);
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
            let env_span = node_span.child(run_telemetry::ENVELOPE_SPAN);
            let processed = {
                let mut ctx = Context::new(&self.host, &self.redactor, id, &now);
                ctx.node_contract = contract.as_ref();
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
                run_id: &run_id,
                node_id: id,
                correlation_id: &corr,
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
                    agent_id: format!("host:{}:{id}", provider.name()),
                    title: format!("{kind} reasoning"),
                    thoughts: thoughts_of(&text),
                    nested: vec![],
                    conclusion: Some(format!("emitted {kind}")),
                };
                self.publish_reasoning(id, &format!("{corr}/envelope"), &block)
                    .await?;
            }
            match processed.outcome {
                Outcome::Accepted(_) if kind == emission::CLARIFICATION_KIND => {
                    // Question number turn + 1: beyond the host's clarificationRounds (or the
                    // node's lower setting) the node fails instead of waiting.
                    if turn >= clarification_rounds {
                        self.emit_value(&format!("{corr}/cap"), Some(id), EventType::CapBreached, json!({"kind": "clarification", "limit": clarification_rounds, "observed": turn + 1, "nodeId": id})).await?;
                        return Ok(NodeOutcome::Failed(error(
                            "cap_breached",
                            format!(
                                "node {id} asked for clarification {} times; the limit (clarificationRounds) is {clarification_rounds}",
                                turn + 1
                            ),
                            false,
                        )));
                    }
                    continue; // the loop top records node.suspended and waits for the answer
                }
                Outcome::Accepted(a) => {
                    return Ok(NodeOutcome::Completed(
                        json!({"output": a.redacted_payload, "envelopeType": kind}),
                    ));
                }
                other => {
                    // A refusal the pipeline already projected as node.failed (a gate or
                    // a cap) fails the node with that same error, so node.failed and
                    // run.failed agree.
                    if let Some(err) = processed
                        .events
                        .iter()
                        .find(|e| e.event_type == EventType::NodeFailed)
                        .and_then(|e| e.payload.get("error").cloned())
                        .and_then(|v| serde_json::from_value::<ErrorInfo>(v).ok())
                    {
                        return Ok(NodeOutcome::Failed(err));
                    }
                    let code = other
                        .code()
                        .map(|c| c.as_str().to_owned())
                        .unwrap_or_else(|| "envelope_invalid".into());
                    let message = other
                        .message()
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
