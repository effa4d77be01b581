//! Test helper: start (or attach to) the local mini-cluster and get a `kube::Client`.
//!
//! `cluster()` runs `e2e/cluster/cluster.sh up`, which is idempotent and serialised by a file
//! lock in the state directory, so any number of tests and test binaries may call it at once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cannot run {script}: {source}")]
    Spawn {
        script: PathBuf,
        source: std::io::Error,
    },
    #[error("`cluster.sh {command}` failed ({status}); its last output:\n{output}")]
    Script {
        command: String,
        status: std::process::ExitStatus,
        output: String,
    },
    #[error("`cluster.sh up` printed no `export KUBECONFIG=...` line")]
    NoKubeconfig,
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("building a client for {path}: {source}")]
    Client { path: PathBuf, source: kube::Error },
    #[error("the cluster helper task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// Where and how the mini-cluster runs. `Default` reads the environment.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// `OPENWOP_STATE_DIR`; default `~/.cache/openwop/cluster`.
    pub state_dir: Option<PathBuf>,
    /// `OPENWOP_PORT_OFFSET`, added to every port; default 0.
    pub port_offset: u16,
    /// The node agent to start when none runs yet (`OPENWOP_NODE_AGENT_BIN`). Integration
    /// tests of this crate pass `env!("CARGO_BIN_EXE_openwop-node-agent")`.
    pub node_agent_bin: Option<PathBuf>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            state_dir: std::env::var_os("OPENWOP_STATE_DIR").map(PathBuf::from),
            port_offset: std::env::var("OPENWOP_PORT_OFFSET")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            node_agent_bin: std::env::var_os("OPENWOP_NODE_AGENT_BIN").map(PathBuf::from),
        }
    }
}

/// A running mini-cluster.
#[derive(Clone)]
pub struct Cluster {
    /// Client with cluster-admin rights (system:masters).
    pub client: Client,
    pub kubeconfig: PathBuf,
    /// `nats://127.0.0.1:<port>` of the JetStream-enabled nats-server.
    pub nats_url: String,
    pub state_dir: PathBuf,
}

#[derive(Debug, Clone)]
struct Exports {
    kubeconfig: PathBuf,
    nats_url: String,
}

/// The cluster scripts shipped with this crate.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster/cluster.sh")
}

fn cache_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"))
        .join(".cache/openwop")
}

impl ClusterOptions {
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(|| cache_dir().join("cluster"))
    }

    /// An agent binary that exists, without invoking cargo: inside `cargo test` the target
    /// directory is locked, so building from a test would deadlock.
    fn agent_bin(&self) -> Option<PathBuf> {
        if let Some(p) = &self.node_agent_bin {
            return Some(p.clone());
        }
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| cache_dir().join("target"));
        ["debug", "release"]
            .iter()
            .map(|p| target.join(p).join("openwop-node-agent"))
            .find(|p| p.is_file())
    }

    fn command(&self, sub: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(script()).arg(sub);
        cmd.env("OPENWOP_STATE_DIR", self.state_dir());
        cmd.env("OPENWOP_PORT_OFFSET", self.port_offset.to_string());
        match self.agent_bin() {
            Some(bin) => {
                cmd.env("OPENWOP_NODE_AGENT_BIN", bin);
            }
            None => {
                // Let the script build the agent in a target directory of its own.
                cmd.env_remove("OPENWOP_NODE_AGENT_BIN");
                cmd.env("CARGO_TARGET_DIR", cache_dir().join("node-agent-target"));
            }
        }
        cmd
    }
}

fn run_script(opts: &ClusterOptions, sub: &str) -> Result<String, ClusterError> {
    let out = opts
        .command(sub)
        .output()
        .map_err(|source| ClusterError::Spawn {
            script: script(),
            source,
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        return Err(ClusterError::Script {
            command: sub.into(),
            status: out.status,
            output: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    Ok(stdout)
}

fn parse_exports(stdout: &str) -> Result<Exports, ClusterError> {
    let mut kubeconfig = None;
    let mut nats_url = String::new();
    for line in stdout.lines() {
        if let Some(v) = line.strip_prefix("export KUBECONFIG=") {
            kubeconfig = Some(PathBuf::from(v.trim()));
        } else if let Some(v) = line.strip_prefix("export OPENWOP_NATS_URL=") {
            nats_url = v.trim().to_string();
        }
    }
    Ok(Exports {
        kubeconfig: kubeconfig.ok_or(ClusterError::NoKubeconfig)?,
        nats_url,
    })
}

/// `cluster.sh up` once per process and state directory; later calls reuse the result.
fn up_once(opts: &ClusterOptions) -> Result<Exports, ClusterError> {
    static UP: Mutex<Option<HashMap<PathBuf, Exports>>> = Mutex::new(None);
    let mut guard = UP.lock().unwrap_or_else(|e| e.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    let key = opts.state_dir();
    if let Some(e) = map.get(&key) {
        return Ok(e.clone());
    }
    let exports = parse_exports(&run_script(opts, "up")?)?;
    map.insert(key, exports.clone());
    Ok(exports)
}

/// Starts the cluster described by the environment (or attaches to the running one).
pub async fn cluster() -> Result<Cluster, ClusterError> {
    cluster_with(ClusterOptions::default()).await
}

pub async fn cluster_with(opts: ClusterOptions) -> Result<Cluster, ClusterError> {
    let state_dir = opts.state_dir();
    let exports = tokio::task::spawn_blocking(move || up_once(&opts)).await??;
    let client = client_for(&exports.kubeconfig).await?;
    Ok(Cluster {
        client,
        kubeconfig: exports.kubeconfig,
        nats_url: exports.nats_url,
        state_dir,
    })
}

/// A fresh client for a kubeconfig (each test runtime needs its own connections).
pub async fn client_for(kubeconfig: &Path) -> Result<Client, ClusterError> {
    let kc = Kubeconfig::read_from(kubeconfig).map_err(|source| ClusterError::Kubeconfig {
        path: kubeconfig.to_owned(),
        source,
    })?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|source| ClusterError::Kubeconfig {
            path: kubeconfig.to_owned(),
            source,
        })?;
    Client::try_from(config).map_err(|source| ClusterError::Client {
        path: kubeconfig.to_owned(),
        source,
    })
}

/// Runs `cluster.sh <sub>` (up, down, status, purge) synchronously; returns its stdout. Unlike
/// `cluster()` this is not memoised.
pub fn run(opts: &ClusterOptions, sub: &str) -> Result<String, ClusterError> {
    run_script(opts, sub)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_are_parsed() {
        let e = parse_exports(
            "noise\nexport OPENWOP_NATS_URL=nats://127.0.0.1:14222\nexport KUBECONFIG=/s/admin.kubeconfig\n",
        )
        .unwrap();
        assert_eq!(e.kubeconfig, PathBuf::from("/s/admin.kubeconfig"));
        assert_eq!(e.nats_url, "nats://127.0.0.1:14222");
        assert!(matches!(
            parse_exports("nothing"),
            Err(ClusterError::NoKubeconfig)
        ));
    }
}
