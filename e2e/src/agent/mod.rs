//! The node agent: a small kubelet (and scheduler) that runs the pods of the mini-cluster as
//! local processes. See e2e/README.md for what it supports.

pub mod config;
mod ctx;
pub mod logs;
pub mod node;
pub mod pod;
pub mod process;
pub mod scheduler;
pub mod status;
pub mod volumes;

use std::sync::Arc;

use anyhow::Context as _;
use kube::{Client, Config};
use tokio_util::sync::CancellationToken;

pub use ctx::{Ctx, Options};

async fn client_for(path: &std::path::Path) -> anyhow::Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let config =
        Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .with_context(|| format!("building the client config from {}", path.display()))?;
    Client::try_from(config).context("building the API client")
}

fn split_host_port(url: &str) -> anyhow::Result<(String, u16)> {
    let uri: http::Uri = url
        .parse()
        .with_context(|| format!("invalid --api-server {url}"))?;
    let host = uri
        .host()
        .with_context(|| format!("--api-server {url} has no host"))?
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    Ok((host, port))
}

/// Runs the agent until `shutdown` is cancelled; then stops every container it started.
pub async fn run(opts: Options, shutdown: CancellationToken) -> anyhow::Result<()> {
    let client = client_for(&opts.kubeconfig).await?;
    let scheduler_client = match &opts.scheduler_kubeconfig {
        Some(path) => client_for(path).await?,
        None => client.clone(),
    };
    let (api_host, api_port) = split_host_port(&opts.api_server)?;
    let ca_pem = std::fs::read_to_string(&opts.ca_file)
        .with_context(|| format!("reading --ca-file {}", opts.ca_file.display()))?;
    // Fail at start on a broken mapping file rather than at the first pod.
    config::AgentConfig::load(&opts.config)?;
    std::fs::create_dir_all(opts.state_dir.join("pods"))?;
    std::fs::create_dir_all(opts.state_dir.join("logs"))?;
    let ctx = Arc::new(Ctx {
        client,
        scheduler_client,
        opts,
        api_host,
        api_port,
        ca_pem,
    });

    node::register(&ctx).await?;
    tracing::info!(node = %ctx.opts.node_name, "node registered");

    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(node::heartbeat(ctx.clone(), shutdown.clone()));
    tasks.spawn(scheduler::run(ctx.clone(), shutdown.clone()));
    if ctx.opts.kubelet_port != 0 {
        tasks.spawn(logs::serve(ctx.clone(), shutdown.clone()));
    }
    // The pod manager returns only after its containers have stopped.
    let result = pod::manage(ctx.clone(), shutdown.clone()).await;
    shutdown.cancel();
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok(Err(err)) => tracing::error!(error = %format!("{err:#}"), "task failed"),
            Err(err) => tracing::error!(%err, "task panicked"),
            Ok(Ok(())) => {}
        }
    }
    result
}
