//! `kubectl-openwop envelope accept`: runs one envelope through the protocol
//! crate's pipeline, offline, and prints the outcome and projected events.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand};
use openwop_protocol::events::EventFactory;
use openwop_protocol::outcome::Outcome;
use openwop_protocol::pipeline::request::{self, AcceptRequest};
use openwop_protocol::pipeline::{self, Context, DedupEntry, DedupStore, HostPolicy, InputLimits};
use openwop_protocol::redact::Redactor;
use serde_json::json;

#[derive(Subcommand)]
pub enum EnvelopeCommand {
    /// Run one envelope through the accept pipeline and print the outcome.
    ///
    /// INPUT is the request of the spec's envelope-accept test seam
    /// (POST /v1/host/sample/envelope/accept; the operator serves the same request when
    /// its conformance seams are on, through the same code):
    ///
    ///   {"envelope": {...}, "hostSupportedEnvelopes": ["vendor.acme.prd.create"],
    ///    "nodeAllowedKinds": [...], "runTrustBoundary": "untrusted",
    ///    "counters": {"clarificationRounds": {"current": 1, "cap": 3}},
    ///    "schemaVersionFloor": {"vendor.acme.prd.create": 1}, "envelopeStrictness": "warn",
    ///    "priorCorrelations": [{"correlationId": "...", "envelopeType": "...", "outcome": {...}}],
    ///    "persistedDedup": {"runId": "run-1"},
    ///    "byokCanaries": [{"secretId": "openai", "value": "sk-..."}],
    ///    "approvalGateContext": false,
    ///    "projectTo": {"runId": "run-1", "nodeId": "node-1", "refusalMode": "fail-node"}}
    ///
    /// persistedDedup needs --dedup-store FILE: the decision for the envelope's
    /// correlationId is read from it and, when new, written to it.
    ///
    /// With --raw, INPUT is the envelope itself or raw model text (markdown fences and
    /// surrounding prose are recovered leniently).
    ///
    /// Prints {"status", "reason" (the bare code; a breached outcome names the limit),
    /// "message", "details", "envelopeId", "allowedKinds", "capKind", "normalizedMeta",
    /// "redactedPayload", "redactionCount", "recordedEventIds", ..., "events": [...]}.
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
    /// JSON file holding persisted dedup decisions per run (created when missing);
    /// required by a request with persistedDedup.
    #[arg(long, value_name = "FILE")]
    dedup_store: Option<PathBuf>,
    /// Timestamp of projected events when the envelope's meta.ts is not a valid ISO 8601 time.
    #[arg(long, default_value = "1970-01-01T00:00:00Z", value_name = "RFC3339")]
    timestamp: String,
    /// Sequence of the first projected event.
    #[arg(long, default_value_t = 0, value_name = "N")]
    first_sequence: u64,
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

/// The `--dedup-store` file: runId → correlationId → decision.
type DedupFile = BTreeMap<String, BTreeMap<String, DedupEntry>>;

fn load_store(path: &Path) -> Result<DedupFile> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "{} is not a dedup store ({{runId: {{correlationId: {{envelopeType, outcome}}}}}}); pass another --dedup-store file",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(DedupFile::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn save_store(path: &Path, store: &DedupFile) -> Result<()> {
    // Written beside the target and renamed over it, so an interrupted write never
    // leaves a truncated store.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(store)?)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))
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
    let processed = if args.raw {
        let host = HostPolicy {
            input_limits: limits,
            ..HostPolicy::default()
        };
        let redactor = Redactor::new(Vec::new());
        let ctx = Context::new(&host, &redactor, "node", &args.timestamp);
        let mut events = EventFactory::new("run-local", args.first_sequence);
        pipeline::accept_bytes(&bytes, &ctx, &mut DedupStore::new(), &mut events)
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
        if value.get("envelope").is_none() {
            bail!(
                "the request has no \"envelope\" field; to check an envelope on its own, use --raw"
            );
        }
        let req: AcceptRequest = serde_json::from_value(value).context(
            "the request does not have the expected fields (see --help); to check an envelope on its own, use --raw",
        )?;
        req.validate()?;
        // persistedDedup: the record lives in the --dedup-store file.
        let mut file = None;
        let persisted = match (&req.persisted_dedup, req.dedup_key()) {
            (Some(_), _) if args.dedup_store.is_none() => bail!(
                "the request has persistedDedup: pass --dedup-store FILE to keep its decisions between calls"
            ),
            (Some(p), Some(key)) => {
                let path = args.dedup_store.as_deref().unwrap_or(Path::new(""));
                let store = load_store(path)?;
                let found = store.get(&p.run_id).and_then(|m| m.get(&key)).cloned();
                file = Some((path, store, p.run_id.clone(), key));
                found
            }
            _ => None,
        };
        let evaluated = request::evaluate(
            &req,
            persisted,
            limits,
            "run-local",
            args.first_sequence,
            &args.timestamp,
        )?;
        if let (Some((path, mut store, run_id, key)), Some(record)) = (file, &evaluated.record) {
            store.entry(run_id).or_default().insert(key, record.clone());
            save_store(path, &store)?;
        }
        evaluated.processed
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
