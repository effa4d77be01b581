//! `kubectl-openwop`, the OpenWOP kubectl plugin, as a library: the command line ([`Cli`]) and
//! [`run`], which runs one parsed command. Each subcommand lives in its own module; the binary
//! (`main.rs`) only parses the command line and calls [`run`]. The commands' errors go to the
//! terminal only, so they are `anyhow` errors (printed with their causes by [`run`]).

mod envelope_cmd;
mod schema_cmd;
mod simulate_cmd;
mod views;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// OpenWOP for Kubernetes: offline checks of AI envelopes and schemas, and live views of runs.
///
/// Installed on your PATH as `kubectl-openwop`, it also runs as `kubectl openwop ...`.
/// Online commands use your kubeconfig (KUBECONFIG, current context and namespace) like kubectl;
/// `events` reads the run's event stream from NATS (--nats-url or OPENWOP_NATS_URL; an
/// authenticated NATS takes --nats-creds, --nats-token-file or --nats-user).
///
/// Typical session:
///   kubectl openwop runs -n team-a                      list runs with phase and node
///   kubectl openwop events triage-1 -n team-a -f        follow the live timeline
///   kubectl openwop describe triage-1 -n team-a         status and the pending question
///   kubectl openwop resume triage-1 -n team-a --answer region=eu
#[derive(Parser)]
#[command(
    name = "kubectl-openwop",
    version,
    propagate_version = true,
    verbatim_doc_comment
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Work with AI envelopes (the JSON documents an LLM emits to the engine).
    #[command(subcommand)]
    Envelope(envelope_cmd::EnvelopeCommand),
    /// Check JSON Schemas against the Tier-1 structured-output subset and lower them per vendor.
    #[command(subcommand)]
    Schema(schema_cmd::SchemaCommand),
    /// List runs with their workflow, phase, current node and age.
    Runs(views::runs::RunsArgs),
    /// Show a run's status, conditions, error, worker pod and pending interrupt.
    Describe(views::runs::DescribeArgs),
    /// Answer a run's pending interrupt (clarification answers, or approve / reject); with no
    /// answer, resume a paused run.
    Resume(views::resume::ResumeArgs),
    /// Pause a running run: it stops at a safe point and holds no pod until `resume`.
    Pause(views::pause::PauseArgs),
    /// Print a run's event timeline from NATS JetStream (-f to follow it live); the subjects
    /// are keyed by the Run's `status.runId`, read from the API server (or `--run-id`).
    Events(views::events::EventsArgs),
}

/// Runs an online command on a Tokio runtime; errors print with their causes and exit 1.
fn online<F: std::future::Future<Output = anyhow::Result<()>>>(fut: F) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(fut) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one parsed command; its exit code is the process's.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Envelope(cmd) => envelope_cmd::run(cmd),
        Command::Schema(cmd) => schema_cmd::run(cmd),
        Command::Runs(args) => online(views::runs::list(args)),
        Command::Describe(args) => online(views::runs::describe(args)),
        Command::Resume(args) => online(views::resume::run(args)),
        Command::Pause(args) => online(views::pause::pause(args)),
        Command::Events(args) => online(views::events::run(args)),
    }
}
