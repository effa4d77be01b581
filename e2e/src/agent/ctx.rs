//! What every task of the agent shares: its command-line [`Options`] and the [`Ctx`] built
//! from them. A leaf of `agent`, so the tasks (`node`, `scheduler`, `pod`, `logs`) never import
//! the module that starts them.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::events::EventType;

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
