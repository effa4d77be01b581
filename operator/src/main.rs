//! openwop-operator binary: a shell. It parses the command line and the config, sets up
//! logging, and runs [`openwop_operator::app::run`] (HTTP, leader election, the controllers,
//! shutdown), where everything else is wired.

use std::path::PathBuf;

use clap::Parser;
use openwop_operator::config::OperatorConfig;

#[derive(Parser, Debug)]
#[command(version, about = "Kubernetes operator for OpenWOP workflows")]
struct Args {
    /// Operator config file (YAML or JSON); defaults apply to every missing field.
    #[arg(long, env = "OPENWOP_CONFIG")]
    config: Option<PathBuf>,
    /// Identity in the leader Lease (defaults to the pod name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into())
                // kube-client logs the whole response body at WARN when it cannot decode it
                // (e.g. a LIST holding one Run nested deeper than serde_json's recursion
                // limit: a ~250 KB line per retry, with whatever the objects hold). The
                // error itself reaches our own (bounded) log lines.
                .add_directive(
                    "kube_client::client=error"
                        .parse()
                        .expect("valid directive"),
                ),
        )
        .init();
    let args = Args::parse();
    let cfg = match &args.config {
        Some(p) => OperatorConfig::from_file(p)?,
        None => OperatorConfig::default(),
    };
    openwop_operator::app::run(cfg, args.identity).await
}
