//! `openwop-worker`: runs one Run (see the crate docs and worker/README.md).
//! Exit codes (`openwop_protocol::run::exit`): 0 terminal, 1 crashed (retry), 2 unusable
//! snapshot/config, 3 suspended (also paused), 143 stopped by SIGTERM at a safe point (replay continues it).
//!
//! The shell: it parses the pod's environment ([`WorkerEnv`]), sets up logging, the async
//! runtime, OTLP export and the SIGTERM handler, and calls [`openwop_worker::run`].

use std::time::Duration;

use anyhow::Context as _;
use openwop_protocol::run::env::{self as run_env, WorkerEnv};
use openwop_protocol::run::exit::{BAD_INPUT, CRASHED};
use openwop_worker::stop::{self, StopSignal};
use openwop_worker::telemetry::Otel;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The pod's environment contract, read once.
fn worker_env() -> Result<WorkerEnv, run_env::EnvError> {
    WorkerEnv::from_vars(std::env::vars_os().filter_map(|(k, v)| {
        // A variable that is not Unicode is none of ours.
        Some((k.into_string().ok()?, v.into_string().ok()?))
    }))
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env(run_env::LOG)
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .json()
        .init();
    // One thread: concurrent branches are futures of one task (they wait on providers and
    // on the run's one writer, not on the CPU), so worker threads would only add stacks
    // and wake-ups.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            std::process::exit(CRASHED);
        }
    };
    let wenv = match worker_env() {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, "unusable worker environment");
            std::process::exit(BAD_INPUT);
        }
    };
    let otel = Otel::for_worker(&wenv, env);
    let stop = StopSignal::new();
    let code = match rt.block_on(async {
        stop::on_termination_signals(stop.clone()).context("installing the SIGTERM handler")?;
        anyhow::Ok(openwop_worker::run(stop.clone(), &otel, &wenv).await?)
    }) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "worker crashed; the operator will retry");
            CRASHED
        }
    };
    // Every exit path (terminal, suspended, stopped, crashed) exports the buffered spans.
    otel.shutdown();
    rt.shutdown_timeout(Duration::from_secs(1));
    std::process::exit(code);
}
