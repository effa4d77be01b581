//! The node agent: a small kubelet (and scheduler) that runs the pods of the mini-cluster as
//! local processes. See e2e/README.md for what it supports.

pub mod config;
pub mod logs;
pub mod node;
pub mod pod;
pub mod process;
pub mod scheduler;
pub mod status;
pub mod volumes;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::events::EventType;
use kube::{Client, Config};
use tokio_util::sync::CancellationToken;

/// Command-line options of `openwop-node-agent`.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "openwop-node-agent",
    about = "Runs the pods of the local mini-cluster as processes"
)]
pub struct Options {
    /// Kubeconfig with the node's credentials (user system:node:<name>).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// Kubeconfig for the scheduler part (binding pods); NodeRestriction forbids nodes to
    /// bind, so this is normally a system:kube-scheduler identity. Default: --kubeconfig.
    #[arg(long)]
    pub scheduler_kubeconfig: Option<PathBuf>,
    #[arg(long, default_value = "openwop-node")]
    pub node_name: String,
    /// Image → binary mapping (YAML); re-read for every container start.
    #[arg(long, env = "OPENWOP_NODE_AGENT_CONFIG")]
    pub config: PathBuf,
    /// Pod directories (tokens, per-pod kubeconfig) and container logs live here.
    #[arg(long)]
    pub state_dir: PathBuf,
    /// API server URL given to pods (KUBERNETES_SERVICE_HOST/PORT and per-pod kubeconfig).
    #[arg(long)]
    pub api_server: String,
    /// Cluster CA bundle given to pods as ca.crt.
    #[arg(long)]
    pub ca_file: PathBuf,
    /// Port of the kubelet API (container logs) on 127.0.0.1; 0 disables it.
    #[arg(long, default_value_t = 10250)]
    pub kubelet_port: u16,
    /// Serving certificate of the kubelet API.
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
}

/// Shared state of the agent's tasks.
pub struct Ctx {
    pub client: Client,
    pub scheduler_client: Client,
    pub opts: Options,
    pub api_host: String,
    pub api_port: u16,
    pub ca_pem: String,
}

impl Ctx {
    pub fn pods_dir(&self) -> PathBuf {
        self.opts.state_dir.join("pods")
    }
    pub fn logs_dir(&self) -> PathBuf {
        self.opts.state_dir.join("logs")
    }

    /// Publishes a core/v1 Event as the kubelet does (nodes may create those, not
    /// events.k8s.io ones); failures are logged, never fatal.
    pub async fn event(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let now = Timestamp::now();
        let ns = reference
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let mut ev = Event {
            involved_object: reference.clone(),
            reason: Some(reason.into()),
            message: Some(note),
            type_: Some(match type_ {
                EventType::Normal => "Normal".into(),
                EventType::Warning => "Warning".into(),
            }),
            source: Some(EventSource {
                component: Some("openwop-node-agent".into()),
                host: Some(self.opts.node_name.clone()),
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            count: Some(1),
            action: Some(reason.into()),
            reporting_component: Some("openwop-node-agent".into()),
            reporting_instance: Some(self.opts.node_name.clone()),
            ..Default::default()
        };
        ev.metadata.generate_name = Some(format!(
            "{}.",
            reference.name.as_deref().unwrap_or("object")
        ));
        ev.metadata.namespace = Some(ns.clone());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        if let Err(err) = api.create(&PostParams::default(), &ev).await {
            tracing::warn!(%err, reason, "cannot publish event");
        }
    }
}

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
