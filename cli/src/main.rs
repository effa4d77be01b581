//! `kubectl-openwop`: the OpenWOP kubectl plugin. The shell: it parses the command line and
//! runs it with [`kubectl_openwop::run`], where every subcommand lives.

use std::process::ExitCode;

use clap::Parser as _;
use kubectl_openwop::Cli;

fn main() -> ExitCode {
    kubectl_openwop::run(Cli::parse())
}
