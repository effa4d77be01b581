//! The RFC 0023 conformance mock agent and CP-1 escalation.

use openwop_protocol::events::{InterruptResolved, NodeResumed};
use openwop_protocol::run::gate;
use openwop_protocol::run::status::DEFAULT_APPROVAL_ACTIONS;

use super::*;

impl<P: Publisher> Executor<'_, P> {
    /// RFC 0023 conformance mock agent: reasoned → tool pairs → handoff → decided → CP-1.
    pub(super) async fn mock_agent(&self, node: &Node) -> Result<NodeOutcome, LogError> {
        let id = node.id.as_str();
        // The operator's check of the Workflow asked the same question with the same opt-in
        // (frozen in the snapshot's host profile for the run's namespace).
        if !self.snap.host.mock_agent_allowed(&self.graph.id) {
            return Ok(NodeOutcome::Failed(error(
                "capability_required",
                openwop_protocol::run::nodes::mock_agent_refusal(),
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
        let reasoned = self.agent_reasoned(id, &agent_id, c, &mut block).await?;
        block.correlation_id =
            openwop_protocol::events::event_id_for(self.run_id(), &format!("{id}/agent/reasoned"));
        self.agent_tool_calls(id, &agent_id, c, &mut block).await?;
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
            self.publish_reasoning(id, &key, &block).await?;
        }
        let output = json!({"output": {"agentId": agent_id, "decision": decision.and_then(|d| d.get("decision")).cloned(), "confidence": confidence}});
        match confidence {
            Some(observed) if observed < self.threshold => {
                self.escalate(id, &agent_id, observed, output).await
            }
            _ => Ok(NodeOutcome::Completed(output)),
        }
    }

    /// The agent's `agent.reasoned` from `mockReasoning` (`true`, or a summary with an
    /// optional trace), its thoughts kept for the reasoning lane; `true` when it reasoned.
    async fn agent_reasoned(
        &self,
        id: &str,
        agent_id: &str,
        c: &Value,
        block: &mut Block,
    ) -> Result<bool, LogError> {
        match c.get("mockReasoning") {
            Some(Value::Bool(true)) => {
                let text = format!("mock reasoning for node {id}");
                block.thoughts = vec![text.clone()];
                self.emit_agent(
                    id,
                    "reasoned",
                    &AgentReasoned {
                        agent_id: agent_id.to_owned(),
                        reasoning: text,
                        verbosity: None,
                    },
                )
                .await?;
                Ok(true)
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
                        agent_id: agent_id.to_owned(),
                        reasoning: summary,
                        verbosity,
                    },
                )
                .await?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// One `agent.tool.called` / `agent.tool.returned` pair per `mockToolCalls` entry, the
    /// returned caused by its call; each is a nested step of the reasoning block.
    async fn agent_tool_calls(
        &self,
        id: &str,
        agent_id: &str,
        c: &Value,
        block: &mut Block,
    ) -> Result<(), LogError> {
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
            let called = self
                .build(
                    &format!("{id}/agent/tool/{i}/called"),
                    Some(id),
                    &AgentToolCalled {
                        agent_id: agent_id.to_owned(),
                        tool_name: tool.clone(),
                        call_id: call_id.clone(),
                        inputs: call.get("arguments").cloned(),
                    },
                )
                .await;
            let called_id = called.event_id.clone();
            self.append(vec![called]).await?;
            let err = call.get("error").cloned();
            let returned = self
                .build(
                    &format!("{id}/agent/tool/{i}/returned"),
                    Some(id),
                    &AgentToolReturned {
                        agent_id: agent_id.to_owned(),
                        tool_name: tool.clone(),
                        call_id: call_id.clone(),
                        outcome: call.get("result").cloned(),
                        status: Some(if err.is_some() { "error" } else { "ok" }.into()),
                        error: err,
                        duration_ms: call.get("durationMs").and_then(Value::as_u64),
                    },
                )
                .await
                .caused_by(called_id);
            self.append(vec![returned]).await?;
            block
                .nested
                .push((call_id, vec![format!("called tool {tool}")]));
        }
        Ok(())
    }

    async fn emit_agent<T: openwop_protocol::events::EventPayload>(
        &self,
        id: &str,
        step: &str,
        p: &T,
    ) -> Result<(), LogError> {
        self.emit(&format!("{id}/agent/{step}"), Some(id), p).await
    }

    /// CP-1: a decision below the escalation threshold waits for a (trusted) approval.
    async fn escalate(
        &self,
        id: &str,
        agent_id: &str,
        observed: f64,
        output: Value,
    ) -> Result<NodeOutcome, LogError> {
        let interrupt_id =
            openwop_protocol::events::event_id_for(self.run_id(), &format!("{id}/cp1"))
                .replacen("evt-", "int-", 1);
        self.emit(
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
        // The same approval rules as the gates: an action CP-1 offers (accept / reject), and an
        // untrusted answer never approves.
        let allowed = DEFAULT_APPROVAL_ACTIONS.map(str::to_owned);
        let received = match gate::approval_received(id, &interrupt_id, &answer, &allowed) {
            Ok(r) => r,
            Err(refusal) => {
                self.emit(
                    &format!("{id}/cp1/answer-refused"),
                    Some(id),
                    &LogAppended {
                        level: LogLevel::Warn,
                        message: refusal.to_string(),
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
        };
        let approved = received.action != "reject";
        self.run_resumed(&interrupt_id).await?;
        self.emit(&format!("{id}/cp1/decision"), Some(id), &received)
            .await?;
        self.emit(
            &format!("{id}/cp1/resolved"),
            Some(id),
            &InterruptResolved {
                node_id: id.to_owned(),
                interrupt_id: interrupt_id.clone(),
                kind: Some(InterruptKind::Approval),
                resume_value: Some(json!({"action": received.action})),
                resolved_by: received.decided_by.clone(),
                resolved_at: received.decided_at.clone(),
                outcome: None,
                reason: None,
                action: None,
                refine_feedback: None,
                edited_artifact_data: None,
            }
            .carrying(&received),
        )
        .await?;
        if !approved {
            return Ok(NodeOutcome::Failed(error(
                gate::APPROVAL_REJECTED,
                "the low-confidence decision was rejected by the approver",
                false,
            )));
        }
        self.emit(
            &format!("{id}/cp1/resumed"),
            Some(id),
            &NodeResumed {
                node_id: id.to_owned(),
                interrupt_id: Some(interrupt_id.clone()),
                resume_value: Some(json!({"action": received.action})),
            },
        )
        .await?;
        Ok(NodeOutcome::Completed(output))
    }
}
