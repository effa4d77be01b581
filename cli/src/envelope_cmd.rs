//! `kubectl-openwop envelope accept`: runs one envelope through the protocol
//! crate's pipeline, offline, and prints the outcome and projected events.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand};
use openwop_protocol::envelope::ContentTrust;
use openwop_protocol::events::EventFactory;
use openwop_protocol::outcome::Outcome;
use openwop_protocol::pipeline::{
    self, Context, Counters, DedupEntry, DedupStore, EnvelopeContract, HostPolicy, InputLimits,
    RefusalMode, Strictness,
};
use openwop_protocol::redact::Redactor;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Subcommand)]
pub enum EnvelopeCommand {
    /// Run one envelope through the accept pipeline and print the outcome.
    ///
    /// INPUT is a JSON request (same fields as the spec's envelope-accept test seam):
    ///
    ///   {"envelope": {...}, "hostSupportedEnvelopes": ["vendor.acme.prd.create"],
    ///    "nodeAllowedKinds": [...], "runTrustBoundary": "untrusted",
    ///    "counters": {"clarificationRounds": {"current": 1, "cap": 3}},
    ///    "schemaVersionFloor": {"vendor.acme.prd.create": 1}, "envelopeStrictness": "warn",
    ///    "priorCorrelations": {"<correlationId>": {"envelopeType": "...", "outcome": {...}}},
    ///    "persistedDedup": {...same shape...},
    ///    "byokCanaries": [{"secretId": "openai", "value": "sk-..."}],
    ///    "approvalGateContext": false,
    ///    "projectTo": {"runId": "run-1", "nodeId": "node-1", "timestamp": "2026-05-18T10:00:00Z", "firstSequence": 0}}
    ///
    /// With --raw, INPUT is the envelope itself or raw model text (markdown fences and
    /// surrounding prose are recovered leniently).
    ///
    /// Prints {"status", "code", "reason", "details", "envelopeId", "allowedKinds", "capKind",
    /// "normalizedMeta", "redactedPayload", "redactionCount", "recordedEventIds", ..., "events": [...]}.
    ///
    /// Exit status: 0 accepted; 1 refused (gated, invalid, breached); 2 usage error or unreadable input.
    #[command(verbatim_doc_comment)]
    Accept(AcceptArgs),
    /// Run the RFC 0033 retry router against a scripted mock provider, offline, and print
    /// the run events as JSON lines (plus a readable timeline on a terminal).
    ///
    /// Exit status: 0 the node completed; 1 it failed; 2 usage error or unreadable input.
    Simulate(crate::simulate_cmd::SimulateArgs),
}

#[derive(Args)]
pub struct AcceptArgs {
    /// File to read, or `-` for standard input.
    #[arg(value_name = "FILE|-", default_value = "-")]
    input: String,
    /// INPUT is the envelope (or raw model text), not a request object.
    #[arg(long)]
    raw: bool,
    /// Largest accepted input in bytes.
    #[arg(long, default_value_t = InputLimits::default().max_bytes, value_name = "BYTES")]
    max_bytes: usize,
    /// Deepest accepted nesting of arrays/objects (serde_json caps this at 128).
    #[arg(long, default_value_t = InputLimits::default().max_depth, value_name = "LEVELS")]
    max_depth: usize,
    /// Longest accepted string or key in bytes.
    #[arg(long, default_value_t = InputLimits::default().max_string_len, value_name = "BYTES")]
    max_string_len: usize,
    /// Print compact JSON instead of pretty JSON.
    #[arg(long)]
    compact: bool,
}

/// The request document (the seam's body). Unknown fields are refused so typos surface.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Request {
    envelope: Option<Value>,
    host_supported_envelopes: Option<Vec<String>>,
    host_allowed_kinds: Option<Vec<String>>,
    node_allowed_kinds: Option<Vec<String>>,
    refusal_mode: Option<RefusalMode>,
    run_trust_boundary: Option<ContentTrust>,
    #[serde(default)]
    counters: Counters,
    #[serde(default)]
    schema_version_floor: BTreeMap<String, u32>,
    envelope_strictness: Option<Strictness>,
    #[serde(default)]
    prior_correlations: BTreeMap<String, DedupEntry>,
    #[serde(default)]
    persisted_dedup: BTreeMap<String, DedupEntry>,
    #[serde(default)]
    byok_canaries: Vec<Canary>,
    project_to: Option<ProjectTo>,
    #[serde(default)]
    approval_gate_context: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Canary {
    secret_id: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProjectTo {
    run_id: Option<String>,
    node_id: Option<String>,
    timestamp: Option<String>,
    first_sequence: Option<u64>,
}

pub fn run(cmd: EnvelopeCommand) -> ExitCode {
    match cmd {
        EnvelopeCommand::Accept(args) => match accept(&args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("kubectl-openwop envelope accept: {e:#}");
                ExitCode::from(2)
            }
        },
        EnvelopeCommand::Simulate(args) => crate::simulate_cmd::run(args),
    }
}

fn read_input(path: &str, max: usize) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    // Read at most one byte past the limit, so an oversized input is never held whole.
    let limit = max as u64 + 1;
    if path == "-" {
        std::io::stdin()
            .lock()
            .take(limit)
            .read_to_end(&mut buf)
            .context("cannot read standard input")?;
    } else {
        std::fs::File::open(path)
            .with_context(|| format!("cannot open {path}"))?
            .take(limit)
            .read_to_end(&mut buf)
            .with_context(|| format!("cannot read {path}"))?;
    }
    Ok(buf)
}

fn accept(args: &AcceptArgs) -> Result<ExitCode> {
    let limits = InputLimits {
        max_bytes: args.max_bytes,
        max_depth: args.max_depth,
        max_string_len: args.max_string_len,
    };
    let bytes = read_input(&args.input, args.max_bytes)?;
    let (request, envelope_text) = if args.raw {
        (Request::default(), Some(bytes))
    } else {
        if bytes.len() > limits.max_bytes {
            bail!(
                "the request is over the {} byte limit; pass --max-bytes to raise it",
                limits.max_bytes
            );
        }
        let text = std::str::from_utf8(&bytes).context("the request is not valid UTF-8 JSON")?;
        let value =
            pipeline::parse_json(text, &limits).map_err(|o| anyhow::anyhow!(describe(&o)))?;
        let request: Request = serde_json::from_value(value).context(
            "the request does not have the expected fields (see --help); to check an envelope on its own, use --raw",
        )?;
        if request.envelope.is_none() {
            bail!(
                "the request has no \"envelope\" field; to check an envelope on its own, use --raw"
            );
        }
        (request, None)
    };

    let host = HostPolicy {
        supported_envelopes: request.host_supported_envelopes.clone(),
        schema_versions: request.schema_version_floor.clone(),
        strictness: request.envelope_strictness.unwrap_or_default(),
        host_contract: request
            .host_allowed_kinds
            .clone()
            .map(|accepts| EnvelopeContract {
                accepts,
                refusal_mode: request.refusal_mode.unwrap_or_default(),
            }),
        input_limits: limits,
        ..HostPolicy::default()
    };
    let redactor = Redactor::new(
        request
            .byok_canaries
            .iter()
            .map(|c| (c.secret_id.clone(), c.value.clone())),
    );
    let node_contract = request
        .node_allowed_kinds
        .clone()
        .map(|accepts| EnvelopeContract {
            accepts,
            refusal_mode: request.refusal_mode.unwrap_or_default(),
        });
    let project = request.project_to.as_ref();
    let envelope_node = request
        .envelope
        .as_ref()
        .and_then(|e| e.get("nodeId"))
        .and_then(Value::as_str);
    let node_id = project
        .and_then(|p| p.node_id.as_deref())
        .or(envelope_node)
        .unwrap_or("node")
        .to_owned();
    let timestamp = project
        .and_then(|p| p.timestamp.clone())
        .unwrap_or_else(|| {
            let ts = request
                .envelope
                .as_ref()
                .and_then(|e| e.pointer("/meta/ts"))
                .and_then(Value::as_str);
            ts.filter(|t| pipeline::shape::is_iso8601(t))
                .unwrap_or("1970-01-01T00:00:00Z")
                .to_owned()
        });
    let run_id = project
        .and_then(|p| p.run_id.clone())
        .unwrap_or_else(|| "run-local".to_owned());
    let mut events = EventFactory::new(run_id, project.and_then(|p| p.first_sequence).unwrap_or(0));

    let mut ctx = Context::new(&host, &redactor, &node_id, &timestamp);
    ctx.node_contract = node_contract.as_ref();
    ctx.run_trust_boundary = request.run_trust_boundary;
    ctx.counters = request.counters;
    ctx.approval_gate_context = request.approval_gate_context;

    let mut store = DedupStore::new();
    for (corr, entry) in request
        .persisted_dedup
        .iter()
        .chain(&request.prior_correlations)
    {
        store.record(corr, &entry.envelope_type, &entry.outcome);
    }

    let processed = match (envelope_text, request.envelope) {
        (Some(bytes), _) => pipeline::accept_bytes(&bytes, &ctx, &mut store, &mut events),
        (None, Some(value)) => pipeline::accept_value(value, None, &ctx, &mut store, &mut events),
        (None, None) => bail!("nothing to check"),
    };

    let mut out = serde_json::to_value(&processed.outcome).context("cannot render the outcome")?;
    out["events"] = serde_json::to_value(&processed.events).context("cannot render the events")?;
    if let Some(r) = processed.recovery {
        out["recovery"] = json!({"path": r.path_name(), "byteOffset": r.byte_offset});
    }
    let rendered = if args.compact {
        serde_json::to_string(&out)
    } else {
        serde_json::to_string_pretty(&out)
    };
    println!("{}", rendered.context("cannot render the output")?);
    Ok(if processed.outcome.is_accepted() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One-line explanation of a parse refusal of the request document.
fn describe(o: &Outcome) -> String {
    let mut s = format!(
        "the request is not usable JSON: {}",
        o.message().unwrap_or("unreadable")
    );
    if let Outcome::Invalid(i) = o {
        for d in &i.details {
            let at = if d.instance_path.is_empty() {
                "(root)"
            } else {
                &d.instance_path
            };
            s.push_str(&format!("\n  at {at}: {}", d.message));
        }
    }
    s
}
