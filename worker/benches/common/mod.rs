//! What the worker benches share: a child process's peak RSS, sampled while it runs.
// Each bench is its own crate and uses only part of this module.
#![allow(dead_code)]

use std::process::Child;
use std::time::Duration;

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
