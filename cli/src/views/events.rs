//! `kubectl-openwop events RUN [-f] [--json] [--since-seq N]`: reads the Run's `status.runId`
//! (its uid: a Run re-created under the same name is a new run with its own log), then the
//! run's JetStream subjects (`openwop.events.<ns>.<runId>` and
//! `openwop.reasoning.<ns>.<runId>`, [`openwop_protocol::run::subjects`]) with the reader the
//! REST API's event endpoints share ([`openwop_nats::reader`]), and prints a timeline, the
//! reasoning in its own lane.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use async_nats::jetstream;
use clap::Args;
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use openwop_crds::Run;
use openwop_nats::NatsAuth;
use openwop_nats::reader::{From, RunLog};
use openwop_protocol::run::subjects::{DEFAULT_STREAM, events_subject, reasoning_subject};
use serde_json::{Value, json};

use super::{Style, one_line};

#[derive(Args, Debug)]
pub struct EventsArgs {
    /// Name of the Run.
    pub run: String,
    /// Namespace of the run; defaults to the kubeconfig context's namespace, else `default`.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Keep following new events until the run ends (run.completed / failed / cancelled).
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// One JSON object per line: {"lane": "events"|"reasoning", "subject", "streamSequence", "message"}.
    #[arg(long)]
    pub json: bool,
    /// Skip run events whose `sequence` is below N (reasoning messages are not filtered).
    #[arg(long, value_name = "N")]
    pub since_seq: Option<u64>,
    /// Hide the reasoning lane.
    #[arg(long)]
    pub no_reasoning: bool,
    /// NATS server with the run-events stream (e.g. a `kubectl port-forward` of the chart's NATS).
    #[arg(
        long,
        env = "OPENWOP_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub nats_url: String,
    /// NATS credentials file (user JWT and NKey seed, as `nsc generate creds` writes it).
    #[arg(long, value_name = "FILE", env = "OPENWOP_NATS_CREDS", conflicts_with_all = ["nats_token_file", "nats_user"])]
    pub nats_creds: Option<PathBuf>,
    /// File holding a NATS authorization token (a file keeps the token out of shell history).
    #[arg(
        long,
        value_name = "FILE",
        env = "OPENWOP_NATS_TOKEN_FILE",
        conflicts_with = "nats_user"
    )]
    pub nats_token_file: Option<PathBuf>,
    /// NATS user name; the password is read from the OPENWOP_NATS_PASSWORD environment variable
    /// (never a flag, so it stays out of shell history).
    #[arg(long, value_name = "USER", env = "OPENWOP_NATS_USER")]
    pub nats_user: Option<String>,
    /// JetStream stream holding the run's subjects.
    #[arg(long, env = "OPENWOP_EVENTS_STREAM", default_value = DEFAULT_STREAM)]
    pub stream: String,
    /// The run's runId (the Run's uid): skips reading the Run from the API server, e.g. for
    /// the events of a deleted Run that the stream still holds.
    #[arg(long, value_name = "UID")]
    pub run_id: Option<String>,
}

/// Which subject family a message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Events,
    Reasoning,
}

impl Lane {
    fn as_str(self) -> &'static str {
        match self {
            Lane::Events => "events",
            Lane::Reasoning => "reasoning",
        }
    }
}

/// The runId of a Run as its status shows it, or why there is none yet.
pub fn run_id_of(run: &Run) -> Result<String> {
    match run.status.as_ref().and_then(|s| s.run_id.clone()) {
        Some(id) if !id.is_empty() => Ok(id),
        _ => bail!(
            "Run {}/{} has no runId yet: the operator has not reconciled it (is it running, and does it handle this Run?); retry in a moment",
            run.namespace().unwrap_or_default(),
            run.name_any()
        ),
    }
}

/// The runId of Run `name`: `--run-id`, else the Run's `status.runId`.
async fn resolve_run_id(
    args: &EventsArgs,
    config: Option<kube::Config>,
    namespace: &str,
) -> Result<String> {
    if let Some(id) = &args.run_id {
        return Ok(id.clone());
    }
    let name = &args.run;
    let hint = "(the run's events are keyed by its runId; pass --run-id UID to read them without the API server)";
    let config = config.with_context(|| {
        format!("cannot load a Kubernetes configuration to read Run {namespace}/{name} {hint}")
    })?;
    let client = kube::Client::try_from(config).context("cannot build a Kubernetes client")?;
    let api: Api<Run> = Api::namespaced(client, namespace);
    let run = api
        .get_opt(name)
        .await
        .with_context(|| format!("cannot read Run {namespace}/{name} {hint}"))?
        .with_context(|| format!("Run {namespace}/{name} not found {hint}"))?;
    run_id_of(&run)
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// `HH:MM:SS.mmm` of an RFC 3339 timestamp, or the text as is.
fn clock(ts: &str) -> String {
    match ts.find('T') {
        Some(i) if ts.len() >= i + 13 => ts[i + 1..i + 13].to_owned(),
        _ => ts.to_owned(),
    }
}

/// One-line summary of an event's payload, by type.
pub fn summary(event_type: &str, p: &Value) -> String {
    let err = |e: &Value| format!("{}: {}", s(e, "code"), one_line(s(e, "message"), 160));
    match event_type {
        "node.failed" | "run.failed" => p.get("error").map(err).unwrap_or_default(),
        "log.appended" => format!("[{}] {}", s(p, "level"), one_line(s(p, "message"), 160)),
        "clarification.requested" => {
            let qs: Vec<String> = p
                .get("questions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|q| format!("{}: {}", s(q, "id"), one_line(s(q, "question"), 80)))
                .collect();
            qs.join(" | ")
        }
        "interrupt.requested" | "node.suspended" => {
            let mut out = format!("interrupt {} kind {}", s(p, "interruptId"), s(p, "kind"));
            if !s(p, "reason").is_empty() {
                out.push_str(&format!(" reason {}", s(p, "reason")));
            }
            out
        }
        "agent.reasoned" => one_line(s(p, "reasoning"), 160),
        "agent.decided" => match p.get("confidence") {
            Some(c) => format!("{} (confidence {c})", one_line(s(p, "decision"), 120)),
            None => one_line(s(p, "decision"), 160),
        },
        // The tool loop's records name the tool by id, tier and arguments; the conformance
        // mock agent's carry only a name.
        "agent.toolCalled" => {
            let tool = Some(s(p, "toolId"))
                .filter(|t| !t.is_empty())
                .unwrap_or(s(p, "toolName"));
            let mut out = format!("{tool} {}", s(p, "callId"));
            if !s(p, "safetyTier").is_empty() {
                out.push_str(&format!(" ({})", s(p, "safetyTier")));
            }
            if let Some(args) = p.get("inputs") {
                out.push_str(&format!(" args {}", one_line(&args.to_string(), 100)));
            }
            out
        }
        "agent.toolReturned" => {
            let tool = Some(s(p, "toolId"))
                .filter(|t| !t.is_empty())
                .unwrap_or(s(p, "toolName"));
            let mut out = format!("{tool} {}", s(p, "status"));
            if let Some(ms) = p.get("durationMs").and_then(Value::as_u64) {
                out.push_str(&format!(" {ms} ms"));
            }
            match p.get("error") {
                Some(e) => out.push_str(&format!(" {}", err(e))),
                None if !s(p, "resultPreview").is_empty() => {
                    out.push_str(&format!(" → {}", one_line(s(p, "resultPreview"), 100)))
                }
                None => {}
            }
            out
        }
        "approval.requested" if s(p, "artifactType") == "tool-call" => {
            format!("interrupt {} {}", s(p, "interruptId"), s(p, "title"))
        }
        "agent.handoff" => format!("{} → {}", s(p, "fromAgentId"), s(p, "toAgentId")),
        "envelope.retry.attempted" => format!(
            "attempt {} ({})",
            p.get("attempt").unwrap_or(&Value::Null),
            s(p, "reason")
        ),
        "envelope.retry.exhausted" => format!(
            "after {} attempts ({})",
            p.get("totalAttempts").unwrap_or(&Value::Null),
            s(p, "finalReason")
        ),
        "envelope.truncated" => format!(
            "{}/{} stop {}",
            s(p, "provider"),
            s(p, "model"),
            s(p, "stopReason")
        ),
        "envelope.refusal" => format!("{}/{}", s(p, "provider"), s(p, "model")),
        "envelope.recovery.applied" => format!("path {}", s(p, "path")),
        "cap.breached" => format!(
            "{} limit {} observed {}",
            s(p, "kind"),
            p.get("limit").unwrap_or(&Value::Null),
            p.get("observed").unwrap_or(&Value::Null)
        ),
        "approval.granted"
        | "approval.rejected"
        | "interrupt.resolved"
        | "clarification.resolved" => s(p, "interruptId").to_owned(),
        _ => {
            let text = p.to_string();
            if text == "{}" || text == "null" {
                String::new()
            } else {
                one_line(&text, 120)
            }
        }
    }
}

fn type_colour(t: &str) -> &'static str {
    match t {
        "run.completed" | "node.completed" | "approval.granted" => "32",
        "run.failed"
        | "node.failed"
        | "envelope.refusal"
        | "envelope.retry.exhausted"
        | "cap.breached"
        | "approval.rejected"
        | "replay.diverged" => "31",
        "run.cancelled" => "33",
        _ if t.starts_with("interrupt.")
            || t.starts_with("clarification.")
            || t.starts_with("approval.")
            || t == "node.suspended" =>
        {
            "33"
        }
        _ if t.starts_with("envelope.") => "35",
        _ if t.starts_with("agent.") => "36",
        _ if t.starts_with("run.") => "1",
        _ => "0",
    }
}

/// One timeline line of a RunEventDoc.
pub fn render_event(doc: &Value, style: Style) -> String {
    let t = s(doc, "type");
    let seq = doc.get("sequence").and_then(Value::as_u64);
    let seq = seq.map_or("   ?".into(), |n| format!("{n:>4}"));
    let node = doc
        .get("nodeId")
        .and_then(Value::as_str)
        .or_else(|| {
            doc.get("payload")
                .and_then(|p| p.get("nodeId"))
                .and_then(Value::as_str)
        })
        .unwrap_or("");
    let summary = summary(t, doc.get("payload").unwrap_or(&Value::Null));
    let line = format!(
        "{} {} {:<26} {:<16} {}",
        style.paint("2", &clock(s(doc, "timestamp"))),
        style.paint("2", &format!("#{seq}")),
        style.paint(type_colour(t), &format!("{t:<26}")),
        node,
        summary
    );
    line.trim_end().to_owned()
}

/// One reasoning-lane line: indented under the timeline, nested contexts deeper.
pub fn render_reasoning(msg: &Value, style: Style) -> String {
    let kind = s(msg, "kind");
    let depth = s(msg, "context").matches('/').count();
    let marker = match kind {
        "reasoning.start" => "┌",
        "reasoning.conclusion" => "└",
        _ => "│",
    };
    let text = msg
        .get("payload")
        .map(|p| s(p, "message"))
        .unwrap_or_default();
    let who = s(msg, "from");
    let head = format!(
        "{} {:>5} {}{} {}",
        style.paint("2", &clock(s(msg, "ts"))),
        "",
        "  ".repeat(depth),
        marker,
        style.paint(
            "2;36",
            &format!("reasoning {who} {}", s(msg, "nodeId")).replace("  ", " ")
        ),
    );
    format!(
        "{} {}",
        head.trim_end(),
        style.paint("36", &one_line(text, 200))
    )
}

/// The `--json` line of one message.
pub fn json_line(lane: Lane, subject: &str, stream_seq: u64, message: Value) -> String {
    json!({"lane": lane.as_str(), "subject": subject, "streamSequence": stream_seq, "message": message})
        .to_string()
}

/// The credentials of `--nats-creds`, `--nats-token-file` or `--nats-user` with
/// OPENWOP_NATS_PASSWORD (clap keeps them mutually exclusive).
fn nats_auth(args: &EventsArgs) -> Result<NatsAuth> {
    if let Some(p) = &args.nats_creds {
        return Ok(NatsAuth::from_creds_file(p)?);
    }
    if let Some(p) = &args.nats_token_file {
        return Ok(NatsAuth::from_token_file(p)?);
    }
    if let Some(user) = &args.nats_user {
        let Ok(password) = std::env::var("OPENWOP_NATS_PASSWORD") else {
            bail!(
                "--nats-user {user} needs the password in the OPENWOP_NATS_PASSWORD environment variable"
            );
        };
        return Ok(NatsAuth::user_password(
            user,
            &password,
            "--nats-user and OPENWOP_NATS_PASSWORD",
        )?);
    }
    Ok(NatsAuth::None)
}

/// Whether a run event ends the run (its phase is terminal).
fn is_terminal_event(t: &str, payload: &Value) -> bool {
    let mut p = openwop_protocol::run::projection::Projection::default();
    p.apply(&json!({"type": t, "payload": payload}));
    p.phase.is_some_and(|ph| ph.is_terminal())
}

pub async fn run(mut args: EventsArgs) -> Result<()> {
    let style = Style::detect();
    // The kubeconfig gives the namespace and the API server where the Run's runId is read.
    let config = if args.run_id.is_some() && args.namespace.is_some() {
        None
    } else {
        kube::Config::infer().await.ok()
    };
    let namespace = match args.namespace.take() {
        Some(ns) => ns,
        None => config
            .as_ref()
            .map(|c| c.default_namespace.clone())
            .unwrap_or_else(|| "default".into()),
    };
    let run_id = resolve_run_id(&args, config, &namespace).await?;
    let events = events_subject(&namespace, &run_id);
    let reasoning = reasoning_subject(&namespace, &run_id);
    let auth = nats_auth(&args)?;
    let client = openwop_nats::connect_options(
        concat!("kubectl-openwop/", env!("CARGO_PKG_VERSION")),
        &auth,
    )?
    .connection_timeout(Duration::from_secs(5))
    .connect(&args.nats_url)
    .await
    .with_context(|| match auth {
        NatsAuth::None => format!(
            "cannot connect to NATS at {} (set --nats-url or OPENWOP_NATS_URL; with the chart: \
             kubectl -n openwop-system port-forward svc/openwop-nats 4222; a NATS that requires \
             authentication needs --nats-creds, --nats-token-file or --nats-user)",
            args.nats_url
        ),
        _ => format!(
            "cannot connect to NATS at {} with the given {}",
            args.nats_url,
            auth.kind()
        ),
    })?;
    let js = jetstream::new(client);
    let mut filters = vec![events.clone()];
    if !args.no_reasoning {
        filters.push(reasoning.clone());
    }
    let log = RunLog::open(&js, &args.stream, filters, From::Start)
        .await
        .with_context(|| {
            format!(
                "cannot read run {namespace}/{} from {}",
                args.run, args.nats_url
            )
        })?;
    if log.pending_at_start == 0 && !args.follow {
        eprintln!(
            "no events yet for run {}/{} (subject {events}); use -f to wait for them",
            namespace, args.run
        );
        return Ok(());
    }
    let mut messages = std::pin::pin!(log.messages());
    let mut out = std::io::stdout().lock();
    while let Some(msg) = messages.next().await {
        let msg = msg.context("reading from JetStream")?;
        let (stream_seq, left) = (msg.stream_sequence, msg.pending);
        let lane = if msg.subject == reasoning {
            Lane::Reasoning
        } else {
            Lane::Events
        };
        let body: Value = match serde_json::from_slice(&msg.payload) {
            Ok(v) => v,
            Err(e) => {
                eprintln!(
                    "skipping stream message {stream_seq} on {}: not JSON ({e})",
                    msg.subject
                );
                if left == 0 && !args.follow {
                    break;
                }
                continue;
            }
        };
        let skip = lane == Lane::Events
            && args
                .since_seq
                .is_some_and(|n| body.get("sequence").and_then(Value::as_u64).unwrap_or(0) < n);
        let terminal = lane == Lane::Events
            && is_terminal_event(
                s(&body, "type"),
                body.get("payload").unwrap_or(&Value::Null),
            );
        if !skip {
            let line = if args.json {
                json_line(lane, &msg.subject, stream_seq, body)
            } else if lane == Lane::Reasoning {
                render_reasoning(&body, style)
            } else {
                render_event(&body, style)
            };
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                return Ok(()); // stdout closed (e.g. piped into head)
            }
        }
        if left == 0 && (!args.follow || terminal) {
            return Ok(());
        }
    }
    bail!("the JetStream message stream ended unexpectedly")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: Style = Style { enabled: false };

    #[test]
    fn event_lines_show_time_sequence_type_node_and_summary() {
        let doc = json!({"eventId": "e1", "runId": "r", "type": "node.failed", "sequence": 7,
            "timestamp": "2026-05-18T10:00:01.250Z", "nodeId": "classify",
            "payload": {"nodeId": "classify", "error": {"code": "envelope_invalid", "message": "bad\npayload"}}});
        assert_eq!(
            render_event(&doc, PLAIN),
            format!(
                "10:00:01.250 #   7 {:<26} {:<16} envelope_invalid: bad payload",
                "node.failed", "classify"
            )
        );
    }

    #[test]
    fn colour_only_on_request() {
        let doc = json!({"type": "run.completed", "sequence": 1, "timestamp": "2026-05-18T10:00:00Z", "payload": {}});
        assert!(!render_event(&doc, PLAIN).contains('\x1b'));
        assert!(render_event(&doc, Style { enabled: true }).contains("\x1b[32m"));
    }

    #[test]
    fn summaries_by_type() {
        assert_eq!(
            summary(
                "clarification.requested",
                &json!({"questions": [{"id": "q1", "question": "Which?"}, {"id": "q2", "question": "When?"}]})
            ),
            "q1: Which? | q2: When?"
        );
        assert_eq!(
            summary(
                "envelope.retry.attempted",
                &json!({"attempt": 2, "reason": "truncation"})
            ),
            "attempt 2 (truncation)"
        );
        assert_eq!(
            summary(
                "agent.decided",
                &json!({"decision": "escalate", "confidence": 0.4})
            ),
            "escalate (confidence 0.4)"
        );
        assert_eq!(
            summary("log.appended", &json!({"level": "warn", "message": "m"})),
            "[warn] m"
        );
        assert_eq!(
            summary(
                "agent.toolCalled",
                &json!({"toolName": "lookup", "callId": "call-1", "toolId": "mcp:kb/lookup",
                        "safetyTier": "read", "inputs": {"query": "rust"}})
            ),
            "mcp:kb/lookup call-1 (read) args {\"query\":\"rust\"}"
        );
        assert_eq!(
            summary(
                "agent.toolReturned",
                &json!({"toolName": "lookup", "callId": "call-1", "toolId": "mcp:kb/lookup",
                        "status": "ok", "durationMs": 12, "resultPreview": "found:\nrust"})
            ),
            "mcp:kb/lookup ok 12 ms → found: rust"
        );
        assert_eq!(
            summary(
                "agent.toolReturned",
                &json!({"toolName": "write_note", "status": "error",
                        "error": {"code": "tool_outcome_unknown", "message": "may or may not"}})
            ),
            "write_note error tool_outcome_unknown: may or may not"
        );
        assert_eq!(
            summary(
                "approval.requested",
                &json!({"interruptId": "int-1", "artifactType": "tool-call",
                        "title": "Call tool mcp:kb/write_note?"})
            ),
            "interrupt int-1 Call tool mcp:kb/write_note?"
        );
        assert_eq!(summary("run.started", &json!({})), "");
        assert_eq!(summary("x.custom", &json!({"a": 1})), "{\"a\":1}");
    }

    #[test]
    fn reasoning_lane_is_marked_and_nested_contexts_indent() {
        let start = json!({"kind": "reasoning.start", "from": "agent-1", "nodeId": "n1", "ts": "2026-05-18T10:00:00Z", "payload": {"message": "thinking"}});
        let nested = json!({"kind": "reasoning.thought", "context": "rsn-1/child", "from": "agent-1", "nodeId": "n1", "ts": "2026-05-18T10:00:00Z", "payload": {"message": "deeper"}});
        let a = render_reasoning(&start, PLAIN);
        let b = render_reasoning(&nested, PLAIN);
        assert!(a.contains("┌ reasoning agent-1 n1 thinking"), "{a}");
        assert!(b.contains("  │ reasoning agent-1 n1 deeper"), "{b}");
    }

    #[test]
    fn json_lines_carry_lane_and_message() {
        let v: Value = serde_json::from_str(&json_line(
            Lane::Reasoning,
            "openwop.reasoning.ns.r",
            4,
            json!({"kind": "reasoning.thought"}),
        ))
        .unwrap();
        assert_eq!(v["lane"], "reasoning");
        assert_eq!(v["streamSequence"], 4);
        assert_eq!(v["message"]["kind"], "reasoning.thought");
    }

    #[test]
    fn the_run_id_comes_from_status_and_its_absence_is_explained() {
        let mut run: Run = serde_json::from_value(json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": "r1", "namespace": "team-a", "uid": "u-1"},
            "spec": {"workflowRef": {"name": "w"}}}))
        .unwrap();
        let e = run_id_of(&run).unwrap_err().to_string();
        assert!(
            e.starts_with("Run team-a/r1 has no runId yet: the operator has not reconciled it"),
            "{e}"
        );
        run.status = Some(serde_json::from_value(json!({"runId": "u-1"})).unwrap());
        assert_eq!(run_id_of(&run).unwrap(), "u-1");
        assert_eq!(events_subject("team-a", "u-1"), "openwop.events.team-a.u-1");
    }

    #[test]
    fn terminal_events_follow_the_projection() {
        assert!(is_terminal_event("run.completed", &json!({})));
        assert!(is_terminal_event("run.failed", &json!({})));
        assert!(is_terminal_event("run.cancelled", &json!({})));
        assert!(!is_terminal_event("node.completed", &json!({})));
        assert!(!is_terminal_event("node.suspended", &json!({})));
    }
}
