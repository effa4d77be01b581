//! `kubectl-openwop envelope simulate`: runs the RFC 0033 retry router against the mock
//! provider, offline, and prints the run events it produces.
//!
//! PROGRAM.json scripts the mock provider, one response per call:
//!
//! ```json
//! {"responses": [
//!   {"stopReason": "max_tokens", "content": "{\"answer\": \"fo", "outputTokens": 1024, "inputTokens": 80},
//!   {"stopReason": "end_turn", "content": "{\"answer\": 42}", "outputTokens": 12, "inputTokens": 80},
//!   {"stopReason": "end_turn", "content": "{\"answer\": \"42\"}", "outputTokens": 12, "inputTokens": 80}
//! ]}
//! ```
//!
//! `stopReason` takes any vendor's spelling (`stop`, `length`, `content_filter`, `end_turn`,
//! `max_tokens`, `stop_sequence`, `refusal`, `tool_use`, `STOP`, `MAX_TOKENS`, `SAFETY`, …);
//! `content` is raw model text (a string, parsed leniently) or a JSON value (an
//! already-structured payload); `refusalText`, `outputTokens`, `inputTokens` are optional.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::Args;
use openwop_protocol::events::{EventFactory, EventType, RunEventDoc};
use openwop_protocol::redact::Redactor;
use openwop_protocol::retry::{
    Action, MockCursor, MockProgram, NlToFormat, ReasoningPosture, Router, RouterConfig,
};
use serde_json::{Value, json};

/// Largest program or schema file read.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// Mock-provider program: {"responses": [{stopReason, content, refusalText, outputTokens, inputTokens}, …]}.
    #[arg(long, value_name = "PROGRAM.json")]
    program: String,
    /// JSON Schema the payload must validate against.
    #[arg(long, value_name = "SCHEMA.json")]
    schema: String,
    /// Output budget of the first call.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    max_tokens: u32,
    /// limits.schemaRounds: total provider calls allowed for the emission (1..16).
    #[arg(long, default_value_t = openwop_protocol::limits::DEFAULT_SCHEMA_ROUNDS, value_name = "N")]
    schema_rounds: u32,
    /// Truncation budget multiplier (1..8).
    #[arg(long, default_value_t = openwop_protocol::limits::DEFAULT_TRUNCATION_BUDGET_MULTIPLIER, value_name = "M")]
    multiplier: f64,
    /// Provider/model per-call output ceiling.
    #[arg(long, default_value_t = 16_384, value_name = "N")]
    ceiling: u32,
    /// Reasoning directive posture: advisory, mandatory or off.
    #[arg(long, default_value = "advisory", value_name = "POSTURE")]
    reasoning: String,
    /// Enable the NL-to-Format fallback, reporting this envelope type.
    #[arg(long, value_name = "ENVELOPE_TYPE")]
    nl_to_format: Option<String>,
    #[arg(long, default_value = "sim-run", value_name = "ID")]
    run_id: String,
    #[arg(long, default_value = "node-1", value_name = "ID")]
    node_id: String,
    /// Timestamp stamped on every event (the simulation is deterministic).
    #[arg(long, default_value = "2026-01-01T00:00:00Z", value_name = "RFC3339")]
    timestamp: String,
    /// Print the readable timeline (to stderr) even when stderr is not a terminal.
    #[arg(long)]
    timeline: bool,
}

pub fn run(args: SimulateArgs) -> ExitCode {
    match simulate(&args) {
        Ok((events, completed)) => {
            let mut out = std::io::stdout().lock();
            for e in &events {
                // Writing to a closed pipe is not worth a panic.
                if serde_json::to_string(e)
                    .map(|line| writeln!(out, "{line}"))
                    .is_err()
                {
                    return ExitCode::from(2);
                }
            }
            if args.timeline || std::io::stderr().is_terminal() {
                eprint!("{}", timeline(&events));
            }
            if completed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("kubectl-openwop envelope simulate: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn read_json(path: &str, what: &str) -> Result<Value> {
    use std::io::Read;
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {what} {path}"))?;
    let mut buf = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut buf)
        .with_context(|| format!("cannot read {what} {path}"))?;
    if buf.len() as u64 > MAX_FILE_BYTES {
        bail!("{what} {path} is larger than {MAX_FILE_BYTES} bytes");
    }
    serde_json::from_slice(&buf).with_context(|| format!("{what} {path} is not valid JSON"))
}

/// Runs the router to completion. Returns the events and whether the node completed.
pub fn simulate(args: &SimulateArgs) -> Result<(Vec<RunEventDoc>, bool)> {
    let program: MockProgram = serde_json::from_value(read_json(&args.program, "program")?)
        .with_context(|| {
            format!(
                "program {} does not match {{\"responses\": [{{stopReason, content?, refusalText?, outputTokens?, inputTokens?}}]}}",
                args.program
            )
        })?;
    let schema_doc = read_json(&args.schema, "schema")?;
    let validator = openwop_protocol::schema::compile(&schema_doc)
        .with_context(|| format!("schema {} cannot be compiled", args.schema))?;
    let posture = ReasoningPosture::parse(&args.reasoning).with_context(|| {
        format!(
            "--reasoning {}: expected advisory, mandatory or off",
            args.reasoning
        )
    })?;

    let model = "mock-model";
    let mut cfg = RouterConfig::new(&args.node_id, "mock", model, args.max_tokens, args.ceiling);
    cfg.step_key = format!("{}:0", args.node_id);
    cfg.system_prompt = "Answer with the structured output the schema describes.".into();
    cfg.user_prompt = "(simulated task)".into();
    cfg.schema_rounds = args.schema_rounds;
    cfg.multiplier = args.multiplier;
    cfg.posture = posture;
    cfg.nl_to_format = args
        .nl_to_format
        .clone()
        .map(|t| NlToFormat { envelope_type: t });
    let mut router = Router::new(cfg, validator, Redactor::default())?;

    let ts = args.timestamp.as_str();
    let mut factory = EventFactory::new(&args.run_id, 0);
    let mut events = vec![
        factory
            .emit_value(
                &format!("{}:started", args.node_id),
                ts,
                EventType::NodeStarted,
                json!({"nodeId": args.node_id, "typeId": "core.llm.structured"}),
            )
            .with_node(&args.node_id),
    ];
    let mut cursor = MockCursor::new(program);
    let mut step = router.start(&mut factory, ts)?;
    loop {
        events.append(&mut step.events);
        match step.action {
            Action::Call(_) => {
                let response = cursor.next_response(model)?;
                step = router.on_response(&response, &mut factory, ts)?;
            }
            Action::Accept(accepted) => {
                events.push(
                    factory
                        .emit_value(
                            &format!("{}:completed", args.node_id),
                            ts,
                            EventType::NodeCompleted,
                            json!({"nodeId": args.node_id, "outputs": accepted.payload}),
                        )
                        .with_node(&args.node_id),
                );
                return Ok((events, true));
            }
            Action::Fail(_) => return Ok((events, false)),
        }
    }
}

/// One human-readable line per event.
pub fn timeline(events: &[RunEventDoc]) -> String {
    let mut out = String::new();
    for e in events {
        let p = &e.payload;
        let s = |k: &str| p.get(k).map(show).unwrap_or_default();
        let detail = match e.event_type {
            EventType::LogAppended => {
                let f = p.get("fields").cloned().unwrap_or(Value::Null);
                format!(
                    "call {} → maxTokens {}{}  fragments {}",
                    show(&f["attempt"]),
                    show(&f["maxTokens"]),
                    if f["clamped"] == json!(true) {
                        " (at ceiling)"
                    } else {
                        ""
                    },
                    show(&f["fragments"])
                )
            }
            EventType::PromptComposed => format!("hash {}", s("hash")),
            EventType::ProviderUsage => {
                format!("in {} / out {} tokens", s("inputTokens"), s("outputTokens"))
            }
            EventType::EnvelopeTruncated => format!(
                "stopReason {}  outputTokens {}  partial {}",
                s("stopReason"),
                s("outputTokenCount"),
                s("partialPayloadAvailable")
            ),
            EventType::EnvelopeRetryAttempted => format!(
                "attempt {}  reason {}  ({})",
                s("attempt"),
                s("reason"),
                s("previousError")
            ),
            EventType::EnvelopeRecoveryApplied => {
                format!("path {}  byteOffset {}", s("path"), s("byteOffset"))
            }
            EventType::EnvelopeRefusal => format!(
                "safetyCategory {}  refusalText {}",
                s("safetyCategory"),
                s("refusalText")
            ),
            EventType::EnvelopeRetryExhausted => format!(
                "finalReason {}  totalAttempts {}",
                s("finalReason"),
                s("totalAttempts")
            ),
            EventType::CapBreached => format!(
                "kind {}  limit {}  observed {}",
                s("kind"),
                s("limit"),
                s("observed")
            ),
            EventType::EnvelopeNlToFormatEngaged => format!(
                "originalEnvelopeType {}  fallbackCalls {}",
                s("originalEnvelopeType"),
                s("fallbackCalls")
            ),
            EventType::NodeFailed => format!(
                "{}: {}",
                show(&p["error"]["code"]),
                show(&p["error"]["message"])
            ),
            EventType::NodeCompleted => format!("outputs {}", s("outputs")),
            _ => String::new(),
        };
        out.push_str(&format!(
            "{:>3}  {:<28} {}\n",
            e.sequence,
            e.event_type.as_str(),
            detail
        ));
    }
    out
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(program: Value, schema_rounds: u32) -> (SimulateArgs, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("program.json");
        let s = dir.path().join("schema.json");
        std::fs::write(&p, program.to_string()).unwrap();
        std::fs::write(
            &s,
            json!({"type": "object", "required": ["answer"], "properties": {"answer": {"type": "string"}}})
                .to_string(),
        )
        .unwrap();
        let a = SimulateArgs {
            program: p.display().to_string(),
            schema: s.display().to_string(),
            max_tokens: 100,
            schema_rounds,
            multiplier: 2.0,
            ceiling: 1000,
            reasoning: "advisory".into(),
            nl_to_format: None,
            run_id: "sim".into(),
            node_id: "n".into(),
            timestamp: "2026-01-01T00:00:00Z".into(),
            timeline: false,
        };
        (a, dir)
    }

    fn types(events: &[RunEventDoc]) -> Vec<&'static str> {
        events.iter().map(|e| e.event_type.as_str()).collect()
    }

    #[test]
    fn truncation_then_valid_completes() {
        let (a, _d) = args(
            json!({"responses": [
                {"stopReason": "max_tokens", "content": "{\"answer\": \"4", "outputTokens": 100},
                {"stopReason": "end_turn", "content": "{\"answer\": \"42\"}", "outputTokens": 8}
            ]}),
            3,
        );
        let (events, done) = simulate(&a).unwrap();
        assert!(done);
        let t = types(&events);
        assert_eq!(t.first(), Some(&"node.started"));
        assert_eq!(t.last(), Some(&"node.completed"));
        assert!(t.contains(&"envelope.truncated"));
        let line = timeline(&events);
        assert!(line.contains("call 2 → maxTokens 200"), "{line}");
        assert!(line.contains("reason truncation"), "{line}");
    }

    #[test]
    fn exhaustion_fails_and_program_errors_are_reported() {
        let (a, _d) = args(
            json!({"responses": [{"stopReason": "stop", "content": "{}"}, {"stopReason": "stop", "content": "{}"}]}),
            2,
        );
        let (events, done) = simulate(&a).unwrap();
        assert!(!done);
        assert_eq!(types(&events).last(), Some(&"node.failed"));
        assert!(timeline(&events).contains("envelope_invalid"));

        // A program too short for the run is a usage error, not a panic.
        let (a, _d) = args(
            json!({"responses": [{"stopReason": "stop", "content": "{}"}]}),
            2,
        );
        let err = simulate(&a).unwrap_err();
        assert!(
            format!("{err:#}").contains("mock program exhausted"),
            "{err:#}"
        );

        let (mut a, _d) = args(json!({"responses": []}), 2);
        a.multiplier = 9.0;
        assert!(format!("{:#}", simulate(&a).unwrap_err()).contains("multiplier"));
    }
}
