//! Test helper: start (or attach to) the local mini-cluster, or attach to any other cluster,
//! and get a `kube::Client`.
//!
//! `cluster()` runs `e2e/cluster/cluster.sh up`, which is idempotent and serialised by a file
//! lock in the state directory, so any number of tests and test binaries may call it at once.
//! With `OPENWOP_E2E_KUBECONFIG` set it attaches instead (attach mode, e.g. kind through
//! `e2e/kind/test.sh`): no cluster.sh, no node agent; NATS is `OPENWOP_E2E_NATS_URL`.

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
    #[error(
        "attach mode (OPENWOP_E2E_KUBECONFIG={kubeconfig}) needs OPENWOP_E2E_NATS_URL: the URL at which this machine reaches the release's NATS (e.g. a kubectl port-forward, as e2e/kind/test.sh sets up)"
    )]
    NoNatsUrl { kubeconfig: PathBuf },
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
    /// `OPENWOP_E2E_KUBECONFIG`: attach to this cluster instead of the mini-cluster.
    pub attach_kubeconfig: Option<PathBuf>,
    /// `OPENWOP_E2E_NATS_URL`: the NATS URL in attach mode.
    pub attach_nats_url: Option<String>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
        Self {
            attach_kubeconfig: var("OPENWOP_E2E_KUBECONFIG").map(PathBuf::from),
            attach_nats_url: var("OPENWOP_E2E_NATS_URL"),
            state_dir: std::env::var_os("OPENWOP_STATE_DIR").map(PathBuf::from),
            port_offset: std::env::var("OPENWOP_PORT_OFFSET")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            node_agent_bin: std::env::var_os("OPENWOP_NODE_AGENT_BIN").map(PathBuf::from),
        }
    }
}

/// A running cluster: the local mini-cluster, or an attached one.
#[derive(Clone)]
pub struct Cluster {
    /// Client with the kubeconfig's rights (cluster-admin on the mini-cluster).
    pub client: Client,
    pub kubeconfig: PathBuf,
    /// NATS as this machine reaches it (`nats://127.0.0.1:<port>` on the mini-cluster).
    pub nats_url: String,
    /// The mini-cluster's state directory (meaningless in attach mode).
    pub state_dir: PathBuf,
    /// True for the local mini-cluster (node agent, host processes, cluster.sh); false in
    /// attach mode.
    pub local: bool,
}

impl Cluster {
    /// For tests that need the mini-cluster's node agent or host processes: true (and the
    /// reason printed) when `test` must be skipped because this is an attached cluster.
    pub fn skip_unless_local(&self, test: &str, needs: &str) -> bool {
        if !self.local {
            eprintln!(
                "SKIPPED {test}: needs {needs}, which only the local mini-cluster has (attach mode: OPENWOP_E2E_KUBECONFIG={})",
                self.kubeconfig.display()
            );
        }
        !self.local
    }
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

/// Starts the mini-cluster described by the environment (or attaches to the running one), or
/// attaches to `OPENWOP_E2E_KUBECONFIG`'s cluster.
pub async fn cluster() -> Result<Cluster, ClusterError> {
    cluster_with(ClusterOptions::default()).await
}

pub async fn cluster_with(opts: ClusterOptions) -> Result<Cluster, ClusterError> {
    let state_dir = opts.state_dir();
    if let Some(kubeconfig) = opts.attach_kubeconfig.clone() {
        let nats_url = opts
            .attach_nats_url
            .clone()
            .ok_or_else(|| ClusterError::NoNatsUrl {
                kubeconfig: kubeconfig.clone(),
            })?;
        let client = client_for(&kubeconfig).await?;
        return Ok(Cluster {
            client,
            kubeconfig,
            nats_url,
            state_dir,
            local: false,
        });
    }
    let exports = tokio::task::spawn_blocking(move || up_once(&opts)).await??;
    let client = client_for(&exports.kubeconfig).await?;
    Ok(Cluster {
        client,
        kubeconfig: exports.kubeconfig,
        nats_url: exports.nats_url,
        state_dir,
        local: true,
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

    #[tokio::test]
    async fn attach_mode_needs_a_nats_url_and_starts_nothing() {
        let opts = ClusterOptions {
            attach_kubeconfig: Some("/nonexistent/kubeconfig".into()),
            attach_nats_url: None,
            ..Default::default()
        };
        let e = cluster_with(opts.clone()).await.err().unwrap();
        assert!(matches!(e, ClusterError::NoNatsUrl { .. }), "{e}");
        assert!(e.to_string().contains("OPENWOP_E2E_NATS_URL"), "{e}");
        // With a URL it reads the kubeconfig (no cluster.sh): a missing file is the error.
        let e = cluster_with(ClusterOptions {
            attach_nats_url: Some("nats://127.0.0.1:1".into()),
            ..opts
        })
        .await
        .err()
        .unwrap();
        assert!(matches!(e, ClusterError::Kubeconfig { .. }), "{e}");
    }
}
