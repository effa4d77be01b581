//! What every handler of the API is given ([`RestState`]): the caches it reads, the client it
//! writes with, the auth checks, the lazily connected JetStream, the request limit and the
//! optional run-creation hooks ([`RunHooks`]).

use crate::definitions::Definitions;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRef;
use futures::future::BoxFuture;
use kube::Client;
use kube::runtime::reflector::Store;
use openwop_crds::{ProviderMock, Run, ToolServer, Workflow};
use tokio::sync::Semaphore;

use super::auth::{Authenticator, Caller};
use super::error::ApiError;
use crate::config::{OperatorConfig, RestConfig};
use crate::jetstream::{ConnectError, LazyJetStream};

/// Everything a handler needs; cheap to clone.
#[derive(Clone)]
pub struct RestState {
    pub auth: Arc<Authenticator>,
    pub client: Client,
    pub config: Arc<OperatorConfig>,
    /// This replica's cache of the Runs the operator instance handles.
    pub runs: Store<Run>,
    /// This replica's cache of the Workflows the operator instance handles.
    pub workflows: Store<Workflow>,
    /// This replica's cache of the ToolServers the operator instance handles (the tool
    /// catalog); empty until [`RestState::with_tool_servers`].
    pub tool_servers: Store<ToolServer>,
    /// Requests in flight beyond which the API answers 429.
    pub(super) load: Arc<Semaphore>,
    /// JetStream, connected on first use (every replica reads run events itself); the
    /// webhook dispatcher shares it.
    pub nats: LazyJetStream,
    /// The `Idempotency-Key` records bucket, opened on first use.
    pub(super) idempotency: Arc<tokio::sync::OnceCell<async_nats::jetstream::kv::Store>>,
    /// The discovery document this replica serves (the capability-toggle seam reads and
    /// overlays it).
    pub discovery: crate::discovery::DiscoveryState,
    /// What run creation asks of the conformance seams; `None` (the seams off): nothing.
    pub run_hooks: Option<Arc<dyn RunHooks>>,
    /// The Workflow definitions read so far (once per generation), shared with the
    /// controllers.
    pub definitions: Definitions,
}

impl FromRef<RestState> for Arc<Authenticator> {
    fn from_ref(s: &RestState) -> Self {
        s.auth.clone()
    }
}

impl RestState {
    pub fn new(
        client: Client,
        config: Arc<OperatorConfig>,
        runs: Store<Run>,
        workflows: Store<Workflow>,
    ) -> Self {
        let rest = &config.rest;
        RestState {
            auth: Arc::new(Authenticator::new(
                client.clone(),
                Duration::from_secs(rest.review_cache_seconds),
            )),
            load: Arc::new(Semaphore::new(rest.max_in_flight.max(1))),
            client,
            nats: LazyJetStream::new(config.clone()),
            config,
            runs,
            workflows,
            tool_servers: kube::runtime::reflector::store().0,
            idempotency: Default::default(),
            discovery: crate::discovery::DiscoveryState::new(""),
            run_hooks: None,
            definitions: Definitions::default(),
        }
    }

    /// Shares `definitions` (the Workflow definitions read so far) with the API.
    pub fn with_definitions(mut self, definitions: Definitions) -> Self {
        self.definitions = definitions;
        self
    }

    /// Serves the tool catalog from `tool_servers` (the process's ToolServer watch).
    pub fn with_tool_servers(mut self, tool_servers: Store<ToolServer>) -> Self {
        self.tool_servers = tool_servers;
        self
    }

    /// Installs run-creation hooks (`None`: none).
    pub fn with_run_hooks(mut self, hooks: Option<Arc<dyn RunHooks>>) -> Self {
        self.run_hooks = hooks;
        self
    }

    /// Shares `discovery` (the state the discovery routes serve) with the API.
    pub fn with_discovery(mut self, discovery: crate::discovery::DiscoveryState) -> Self {
        self.discovery = discovery;
        self
    }

    /// JetStream for reading run events (503 when NATS is not configured or unreachable).
    pub async fn jetstream(&self) -> Result<async_nats::jetstream::Context, ApiError> {
        self.nats.get().await.map_err(|e| match e {
            ConnectError::NotConfigured => ApiError::unavailable(
                "this operator has no events.natsUrl: run events are not available",
                Duration::from_secs(60),
            ),
            ConnectError::Connect(e) => {
                tracing::warn!(error = %e, "REST API: NATS connection");
                ApiError::unavailable(
                    "the event stream is unavailable; retry shortly",
                    Duration::from_secs(2),
                )
            }
        })
    }

    pub(super) fn rest(&self) -> &RestConfig {
        &self.config.rest
    }

    /// The namespace (tenant) of a request: `tenantId` when given, else the caller's
    /// ServiceAccount namespace. Other callers (users, OIDC) must name the tenant.
    pub fn tenant(&self, caller: &Caller, tenant_id: Option<&str>) -> Result<String, ApiError> {
        let ns = match tenant_id.filter(|t| !t.is_empty()) {
            Some(t) => t.to_owned(),
            None => caller.service_account_namespace.clone().ok_or_else(|| {
                ApiError::validation(
                    "tenantId is required: it is the Kubernetes namespace of the run, and only \
                     ServiceAccount callers have a default (their own namespace)",
                )
                .with_details(serde_json::json!({"field": "tenantId"}))
            })?,
        };
        if !is_dns_label(&ns) {
            return Err(ApiError::validation(format!(
                "tenantId {ns:?} is not a Kubernetes namespace name (a DNS label: lowercase \
                 letters, digits and '-', at most 63 characters)"
            ))
            .with_details(serde_json::json!({"field": "tenantId"})));
        }
        if !self.config.watch_namespace.is_empty() && ns != self.config.watch_namespace {
            return Err(ApiError::validation(format!(
                "this operator serves namespace {} only; tenantId {ns} is not served here",
                self.config.watch_namespace
            ))
            .with_details(serde_json::json!({"field": "tenantId"})));
        }
        Ok(ns)
    }
}

fn is_dns_label(s: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && edge(s.chars().next())
        && edge(s.chars().last())
}

/// What `POST /v1/runs` asks of an optional extension at run creation — the conformance
/// seams (`crate::conformance`) are the one implementation. The REST API knows this trait
/// only: with no hooks (the seams off) a run is created exactly as without it. (Beside
/// [`RestState`]: each names the other.)
///
/// Run-creation hooks, installed with [`RestState::with_run_hooks`].
pub trait RunHooks: Send + Sync {
    /// The `spec.providerMocks` a new Run of a workflow with `node_ids` gets in `namespace`
    /// (empty: none).
    fn provider_mocks<'a>(
        &'a self,
        state: &'a RestState,
        namespace: &'a str,
        node_ids: &'a [String],
    ) -> BoxFuture<'a, Result<BTreeMap<String, ProviderMock>, ApiError>>;

    /// The Run exists (created, or met again by an idempotent replay). Cannot fail the
    /// request: the run is there whatever the hook does.
    fn run_created<'a>(
        &'a self,
        state: &'a RestState,
        namespace: &'a str,
        run: &'a Run,
    ) -> BoxFuture<'a, ()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_names_are_namespaces() {
        assert!(is_dns_label("team-a"));
        for bad in ["", "Team", "a_b", "-a", "a-", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }
}
