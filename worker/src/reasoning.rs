//! Reasoning transparency (MEUP ADR-t8k) on `openwop.reasoning.<ns>.<run>`:
//! `reasoning.start` (top level, `correlationId` = the triggering message id), then
//! `reasoning.thought`s and a `reasoning.conclusion` whose `context` is the start's id;
//! nested reasoning uses path contexts (`<startId>/<child>`). Payload `{message}`.
//!
//! Every message is redacted and the count per node is capped (a deterministic count, not a
//! clock, so a replayed node publishes exactly the same messages); when the cap is hit the
//! rest are dropped and one `log.appended` warning is recorded for the node.

use std::collections::BTreeMap;

use bytes::Bytes;
use openwop_protocol::events::{LogAppended, LogLevel, event_id_for};
use serde_json::json;

use crate::eventlog::{LogError, Publisher, RunLog, now_rfc3339};

/// Default cap on reasoning messages per node.
pub const DEFAULT_MAX_PER_NODE: u32 = 64;
/// Longest message text kept; longer thoughts are cut (reasoning can flood).
pub const MAX_MESSAGE_CHARS: usize = 4096;

/// One reasoning block to publish.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Block {
    /// The id of the message that triggered the reasoning (an event id or envelope id).
    pub correlation_id: String,
    pub agent_id: String,
    /// What the start message says.
    pub title: String,
    pub thoughts: Vec<String>,
    /// Nested contexts: child name → thoughts inside `<startId>/<child>`.
    pub nested: Vec<(String, Vec<String>)>,
    pub conclusion: Option<String>,
}

#[derive(Debug)]
pub struct ReasoningStream {
    subject: String,
    max_per_node: u32,
    counts: BTreeMap<String, u32>,
}

fn clip(s: &str) -> String {
    match s.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

impl ReasoningStream {
    pub fn new(subject: impl Into<String>, max_per_node: u32) -> Self {
        ReasoningStream {
            subject: subject.into(),
            max_per_node,
            counts: BTreeMap::new(),
        }
    }

    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// Publishes `block` for `node`; `key` makes the message ids unique within the run.
    pub async fn publish<P: Publisher>(
        &mut self,
        log: &mut RunLog<P>,
        node: &str,
        key: &str,
        block: &Block,
    ) -> Result<(), LogError> {
        let run = log.run_id().to_owned();
        let start_id =
            event_id_for(&run, &format!("reasoning/{key}/start")).replacen("evt-", "rsn-", 1);
        let mut msgs = vec![json!({"id": start_id, "kind": "reasoning.start",
            "correlationId": block.correlation_id, "payload": {"message": block.title}})];
        let mut n = 0usize;
        let mut push = |context: String, kind: &str, message: &str| {
            n += 1;
            let id =
                event_id_for(&run, &format!("reasoning/{key}/{n}")).replacen("evt-", "rsn-", 1);
            msgs.push(json!({"id": id, "kind": kind, "context": context,
                "correlationId": block.correlation_id, "payload": {"message": clip(message)}}));
        };
        for t in &block.thoughts {
            push(start_id.clone(), "reasoning.thought", t);
        }
        for (child, thoughts) in &block.nested {
            for t in thoughts {
                push(format!("{start_id}/{child}"), "reasoning.thought", t);
            }
        }
        if let Some(c) = &block.conclusion {
            push(start_id.clone(), "reasoning.conclusion", c);
        }
        for mut m in msgs {
            let count = self.counts.entry(node.to_owned()).or_default();
            if *count >= self.max_per_node {
                if *count == self.max_per_node {
                    *count += 1;
                    let limit = self.max_per_node;
                    log.emit(
                        &format!("{node}/reasoning/rate-limited"),
                        Some(node),
                        &LogAppended {
                            level: LogLevel::Warn,
                            message: format!(
                                "reasoning messages for node {node} exceeded the limit of {limit}; the rest are dropped"
                            ),
                            node_id: Some(node.to_owned()),
                            fields: Some(json!({"limit": limit, "subject": self.subject})),
                        },
                    )
                    .await?;
                }
                continue;
            }
            *count += 1;
            m["from"] = json!(block.agent_id);
            m["runId"] = json!(run);
            m["nodeId"] = json!(node);
            m["ts"] = json!(now_rfc3339());
            log.redactor().redact_value(&mut m);
            let id = m["id"].as_str().unwrap_or_default().to_owned();
            let body = serde_json::to_vec(&m).map_err(|e| LogError::Read(e.to_string()))?;
            let subject = self.subject.clone();
            log.check_stop()?;
            log.publisher()
                .publish(&subject, &id, Bytes::from(body))
                .await?;
        }
        Ok(())
    }
}

/// Splits free reasoning text into thoughts (non-empty lines).
pub fn thoughts_of(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eventlog::MemoryPublisher;
    use openwop_protocol::redact::Redactor;
    use serde_json::Value;
    use std::sync::Arc;

    #[test]
    fn contexts_correlation_redaction_and_rate_limit() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let red = Arc::new(Redactor::new([(
                "c".to_string(),
                "canary-secret-42".to_string(),
            )]));
            let mut log = RunLog::new(MemoryPublisher::default(), "ev", "r", red, vec![]);
            let mut rs = ReasoningStream::new("rs", 4);
            let block = Block {
                correlation_id: "evt-trigger".into(),
                agent_id: "agent-a".into(),
                title: "thinking".into(),
                thoughts: vec!["uses canary-secret-42".into()],
                nested: vec![("call-1".into(), vec!["tool".into()])],
                conclusion: Some("done".into()),
            };
            rs.publish(&mut log, "n", "n/a", &block).await.unwrap();
            let msgs: Vec<Value> = log
                .publisher()
                .messages
                .iter()
                .filter(|m| m.0 == "rs")
                .map(|m| serde_json::from_slice(&m.2).unwrap())
                .collect();
            assert_eq!(msgs.len(), 4);
            let start = msgs[0]["id"].as_str().unwrap().to_owned();
            assert_eq!(msgs[0]["kind"], "reasoning.start");
            assert_eq!(msgs[0]["correlationId"], "evt-trigger");
            assert!(msgs[0].get("context").is_none());
            assert_eq!(msgs[1]["context"], start.as_str());
            assert_eq!(msgs[1]["payload"]["message"], "uses [REDACTED:c]");
            assert_eq!(msgs[2]["context"], format!("{start}/call-1"));
            assert_eq!(msgs[3]["kind"], "reasoning.conclusion");
            // A second block on the same node is over the limit: dropped, one warning event.
            rs.publish(&mut log, "n", "n/b", &block).await.unwrap();
            rs.publish(&mut log, "n", "n/c", &block).await.unwrap();
            assert_eq!(
                log.publisher()
                    .messages
                    .iter()
                    .filter(|m| m.0 == "rs")
                    .count(),
                4
            );
            let warns: Vec<_> = log
                .events()
                .iter()
                .filter(|e| e.event_type.as_str() == "log.appended")
                .collect();
            assert_eq!(warns.len(), 1);
            assert_eq!(warns[0].payload["level"], "warn");
        });
    }
}
