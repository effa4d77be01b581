//! The run's LLM clients: one per (provider, model) that an unmocked prompt node names, so
//! every node calls exactly the model it asks for. Keys come from the snapshot's mounts;
//! base URLs from the operator's `OPENWOP_PROVIDER_<NAME>_BASE_URL`.

use std::collections::BTreeMap;

use openwop_protocol::graph::Graph;
use openwop_protocol::run::nodes::{Executor, executor_of};
use openwop_protocol::run::snapshot::{KeyMount, RunSnapshot};
use openwop_providers::{KeySource, Provider, ProviderConfig, ProviderKind, build_provider};
use serde_json::Value;

/// Clients by provider name and model.
#[derive(Default)]
pub struct ProviderSet {
    clients: BTreeMap<(String, String), Box<dyn Provider>>,
}

impl std::fmt::Debug for ProviderSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.clients.keys()).finish()
    }
}

/// Why a client could not be built (the worker exits with `exit::BAD_INPUT`).
#[derive(Debug, thiserror::Error)]
#[error("provider {provider} (model {model}): {reason}")]
pub struct ProviderSetError {
    pub provider: String,
    pub model: String,
    pub reason: String,
}

fn str_of<'a>(config: &'a Value, key: &str) -> Option<&'a str> {
    config.get(key).and_then(Value::as_str)
}

impl ProviderSet {
    /// A set with the given clients (tests).
    pub fn from_clients(clients: impl IntoIterator<Item = Box<dyn Provider>>) -> Self {
        ProviderSet {
            clients: clients
                .into_iter()
                .map(|c| ((c.name().to_owned(), c.model().to_owned()), c))
                .collect(),
        }
    }

    /// Builds a client for every (provider, model) an unmocked prompt node of `graph` names,
    /// for the providers the snapshot mounts a key for. `base_url` gives the operator's base
    /// URL of a provider by name ([`openwop_protocol::run::env::WorkerEnv::provider_base_url`]
    /// in the binary).
    pub fn build(
        snap: &RunSnapshot,
        graph: &Graph,
        base_url: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ProviderSetError> {
        let mut clients = BTreeMap::new();
        for node in &graph.nodes {
            if executor_of(&node.type_id) != Some(Executor::Prompt)
                || snap.provider_mocks.contains_key(&node.id)
            {
                continue;
            }
            let (Some(provider), Some(model)) = (
                str_of(&node.config, "provider"),
                str_of(&node.config, "model"),
            ) else {
                continue;
            };
            let key = (provider.to_owned(), model.to_owned());
            if clients.contains_key(&key) {
                continue;
            }
            let Some(mount) = snap.providers.iter().find(|m| m.provider == provider) else {
                continue;
            };
            let Some(kind) = ProviderKind::parse(provider) else {
                continue;
            };
            let mut cfg = ProviderConfig::new(kind, model);
            cfg.base_url = base_url(provider);
            cfg.transport.max_body_bytes = snap.host.max_provider_response_bytes;
            cfg = match &mount.key {
                KeyMount::File { path } => cfg.with_key_file(path),
                KeyMount::Env { env_name } => {
                    cfg.key = Some(KeySource::Env(env_name.clone()));
                    cfg
                }
            };
            let client = build_provider(&cfg).map_err(|e| ProviderSetError {
                provider: provider.to_owned(),
                model: model.to_owned(),
                reason: e.to_string(),
            })?;
            clients.insert(key, client);
        }
        Ok(ProviderSet { clients })
    }

    /// The client for `provider`'s `model`; without a model, the first client of the
    /// provider.
    pub fn get(&self, provider: &str, model: Option<&str>) -> Option<&dyn Provider> {
        match model {
            Some(m) => self
                .clients
                .get(&(provider.to_owned(), m.to_owned()))
                .map(|c| c.as_ref()),
            None => self
                .clients
                .iter()
                .find(|((p, _), _)| p == provider)
                .map(|(_, c)| c.as_ref()),
        }
    }

    /// The provider a node without `config.provider` uses: the first configured one.
    pub fn default_provider(&self) -> Option<&str> {
        self.clients.keys().next().map(|(p, _)| p.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }
}
