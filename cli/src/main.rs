//! `kubectl-openwop`: the OpenWOP kubectl plugin. Each subcommand lives in its
//! own module; this file only wires them to the command line.

mod envelope_cmd;
mod schema_cmd;
mod simulate_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// OpenWOP for Kubernetes: offline checks of AI envelopes and schemas.
///
/// Installed on your PATH as `kubectl-openwop`, it also runs as `kubectl openwop ...`.
#[derive(Parser)]
#[command(name = "kubectl-openwop", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Work with AI envelopes (the JSON documents an LLM emits to the engine).
    #[command(subcommand)]
    Envelope(envelope_cmd::EnvelopeCommand),
    /// Check JSON Schemas against the Tier-1 structured-output subset and lower them per vendor.
    #[command(subcommand)]
    Schema(schema_cmd::SchemaCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Envelope(cmd) => envelope_cmd::run(cmd),
        Command::Schema(cmd) => schema_cmd::run(cmd),
    }
}
