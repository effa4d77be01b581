//! `kubectl-openwop schema tier1 FILE [--vendor openai|anthropic|gemini]`.
//!
//! Without `--vendor`: lists every Tier-1 violation (exit 1 if any, 0 if none).
//! With `--vendor`: prints the request schema lowered for that vendor (exit 1
//! if it cannot be lowered). Exit 2 means the file could not be read or parsed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::{Subcommand, ValueEnum};
use openwop_protocol::tier1::{self, Vendor};
use serde_json::Value;

#[derive(Subcommand)]
pub enum SchemaCommand {
    /// Check a JSON Schema against the Tier-1 structured-output subset, or lower it for a vendor.
    Tier1 {
        /// Path to the JSON Schema file (`-` reads standard input).
        file: PathBuf,
        /// Print the schema lowered for this vendor instead of listing violations.
        #[arg(long, value_enum)]
        vendor: Option<VendorArg>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum VendorArg {
    Openai,
    Anthropic,
    Gemini,
}

impl From<VendorArg> for Vendor {
    fn from(v: VendorArg) -> Vendor {
        match v {
            VendorArg::Openai => Vendor::OpenAi,
            VendorArg::Anthropic => Vendor::Anthropic,
            VendorArg::Gemini => Vendor::Gemini,
        }
    }
}

pub fn run(cmd: SchemaCommand) -> ExitCode {
    match cmd {
        SchemaCommand::Tier1 { file, vendor } => match tier1_cmd(&file, vendor.map(Vendor::from)) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

fn read_schema(file: &Path) -> Result<Value> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
            .context("reading the schema from standard input")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", file.display()))
}

fn tier1_cmd(file: &Path, vendor: Option<Vendor>) -> Result<ExitCode> {
    let schema = read_schema(file)?;
    match vendor {
        Some(v) => match tier1::lower(&schema, v) {
            Ok(lowered) => {
                println!("{}", serde_json::to_string_pretty(&lowered)?);
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("{}: cannot lower for {}: {e}", file.display(), v.as_str());
                Ok(ExitCode::FAILURE)
            }
        },
        None => {
            let violations = tier1::check(&schema);
            if violations.is_empty() {
                println!("{}: Tier-1 compliant", file.display());
                return Ok(ExitCode::SUCCESS);
            }
            for v in &violations {
                let at = if v.pointer.is_empty() {
                    "(root)"
                } else {
                    v.pointer.as_str()
                };
                println!("{at}\t{}\t{}", v.rule, v.message);
            }
            eprintln!(
                "{}: {} Tier-1 violation(s)",
                file.display(),
                violations.len()
            );
            Ok(ExitCode::FAILURE)
        }
    }
}
