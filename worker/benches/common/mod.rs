//! What the worker benches share: a child process's peak RSS, sampled while it runs.
// Each bench is its own crate and uses only part of this module.
#![allow(dead_code)]

use std::process::Child;
use std::time::Duration;

use openwop_nats::NatsAuth;
use openwop_nats::testing::NatsServer;
use openwop_worker::nats::{self, RetryPolicy};

/// Whether `cargo bench`'s filter names another bench (it passes `--bench` and the filter).
pub fn filtered_out(bench: &str) -> bool {
    std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && !bench.contains(a.as_str()))
}

/// A nats-server started for the bench, with the run-events stream `stream`.
pub fn nats_with_stream(stream: &str) -> NatsServer {
    let srv = NatsServer::start();
    let url = srv.url();
    let policy = RetryPolicy::default();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let js = nats::context(nats::connect(&url, &NatsAuth::None).await.unwrap(), &policy);
            nats::ensure_stream(
                &js,
                &openwop_protocol::run::subjects::StreamSpec::new(stream, None),
                &policy,
            )
            .await
            .unwrap();
        });
    srv
}

/// VmHWM (peak resident set, KiB) of process `pid`, while it exists.
pub fn vm_hwm(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Waits for `child` to exit, sampling its VmHWM every millisecond; panics unless it exits
/// with status 0. Returns the largest VmHWM seen (KiB).
pub fn wait_sampling_rss(child: &Child, what: &str) -> u64 {
    let pid = child.id() as libc::pid_t;
    let mut hwm = 0;
    let mut status = 0;
    loop {
        if let Some(v) = vm_hwm(child.id()) {
            hwm = hwm.max(v);
        }
        // SAFETY: waiting on our own child; WNOHANG never blocks.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        assert!(r == 0, "waitpid failed");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{what} failed (status {status})"
    );
    hwm
}
