//! A real nats-server with JetStream for tests (feature `testing`): the pinned binary that
//! `e2e/cluster/build-binaries.sh` caches, or `OPENWOP_NATS_SERVER`. Killed on drop; restartable
//! on the same port and store.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The pinned nats-server: `OPENWOP_NATS_SERVER`, else the cache `e2e/cluster/build-binaries.sh`
/// fills (`$OPENWOP_BIN_CACHE`, default `~/.cache/openwop/bin/<versions>/nats-server`).
pub fn nats_server_binary() -> PathBuf {
    if let Ok(p) = std::env::var("OPENWOP_NATS_SERVER") {
        return PathBuf::from(p);
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let root =
        std::env::var("OPENWOP_BIN_CACHE").unwrap_or_else(|_| format!("{home}/.cache/openwop/bin"));
    let found = std::fs::read_dir(&root).ok().and_then(|d| {
        d.flatten()
            .map(|e| e.path().join("nats-server"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "nats-server not found under {root}: run `bash e2e/cluster/build-binaries.sh` or set OPENWOP_NATS_SERVER"
        )
    })
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One nats-server process with JetStream on a free local port.
pub struct NatsServer {
    child: Option<Child>,
    pub port: u16,
    pub store: tempfile::TempDir,
    extra: Vec<String>,
}

impl NatsServer {
    /// Without authentication.
    pub fn start() -> NatsServer {
        Self::start_with(&[])
    }

    /// With extra server flags, e.g. `["--user", "u", "--pass", "p"]` or `["--auth", "token"]`.
    pub fn start_with(extra: &[&str]) -> NatsServer {
        let mut s = NatsServer {
            child: None,
            port: free_port(),
            store: tempfile::tempdir().unwrap(),
            extra: extra.iter().map(|a| a.to_string()).collect(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        // `free_port` releases the port before the server binds it, so a test running in
        // parallel may take it first: then our server exits and the port answers for the
        // other one. Only a port that answers while our own child is alive counts.
        for _ in 0..5 {
            let mut child = Command::new(nats_server_binary())
                .args(["-js", "-a", "127.0.0.1", "-p", &self.port.to_string()])
                .args(&self.extra)
                .arg("-sd")
                .arg(self.store.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start nats-server");
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if child.try_wait().ok().flatten().is_some() {
                    break; // exited: the port was taken
                }
                if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
                    && child.try_wait().ok().flatten().is_none()
                {
                    self.child = Some(child);
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "nats-server did not listen on {}",
                    self.port
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            self.port = free_port();
        }
        panic!("nats-server could not bind a free port in 5 attempts");
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops and starts it again on the same port and JetStream store.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
