//! Events/s the worker's run log publishes with acks (eventId dedup check, sequence, redaction,
//! JetStream ack per event) beside a raw JetStream publish-and-ack baseline of the same payload
//! size, both against one nats-server started here; a first start's read of its empty run log
//! beside an ordered consumer's; and the worker's peak RSS for a 20-node run beside a 1-node
//! baseline.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use openwop_nats::NatsAuth;
use openwop_nats::testing::NatsServer;
use openwop_protocol::events::{EventType, event_id_for};
use openwop_protocol::redact::Redactor;
use openwop_worker::eventlog::RunLog;
use openwop_worker::nats::{self, JetStreamPublisher, RetryPolicy};
use serde_json::json;

mod common;

fn bench(c: &mut Criterion) {
    let srv = NatsServer::start();
    let url = srv.url();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let policy = RetryPolicy::default();
    let js = rt.block_on(async {
        let js = nats::context(nats::connect(&url, &NatsAuth::None).await.unwrap(), &policy);
        nats::ensure_stream(
            &js,
            &openwop_protocol::run::subjects::StreamSpec::new("BENCH", None),
            &policy,
        )
        .await
        .unwrap();
        js
    });
    let mut g = c.benchmark_group("publish_with_ack");
    g.throughput(Throughput::Elements(1));
    for size in [256usize, 4096] {
        let text = "x".repeat(size);
        let doc_len = {
            let mut f = openwop_protocol::events::EventFactory::new("r", 0);
            serde_json::to_vec(&f.emit_value(
                "k",
                "2026-01-01T00:00:00Z",
                EventType::LogAppended,
                json!({"level": "info", "message": text}),
            ))
            .unwrap()
            .len()
        };
        let raw_body = bytes::Bytes::from(vec![b'x'; doc_len]);
        let mut n = 0u64;
        g.bench_function(format!("raw_jetstream/{size}B"), |b| {
            b.iter(|| {
                n += 1;
                let msg = async_nats::jetstream::message::PublishMessage::build()
                    .payload(raw_body.clone())
                    .message_id(event_id_for("raw", &n.to_string()));
                rt.block_on(async {
                    js.send_publish("openwop.events.bench.raw", msg)
                        .await
                        .unwrap()
                        .await
                        .unwrap()
                });
            })
        });
        let mut log = RunLog::new(
            JetStreamPublisher::new(js.clone(), policy),
            format!("openwop.events.bench.worker{size}"),
            "bench-run",
            Arc::new(Redactor::new([(
                "k".to_string(),
                "sk-bench-secret-value".to_string(),
            )])),
            vec![],
        );
        let mut i = 0u64;
        g.bench_function(format!("worker_run_log/{size}B"), |b| {
            b.iter(|| {
                i += 1;
                rt.block_on(log.emit_value(
                    &format!("s{i}"),
                    Some("n"),
                    EventType::LogAppended,
                    json!({"level": "info", "message": text}),
                ))
                .unwrap();
            })
        });
    }
    g.finish();
    read_empty_log(c, &rt, &js, &policy);
    peak_rss(&url);
}

/// A worker's first start reads its run's (empty) log back before it records anything: the
/// worker's read (one look-up of the subject's last message), beside an ordered consumer on
/// the subject (how every start read it before, and how a log with messages is still read).
fn read_empty_log(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    js: &async_nats::jetstream::Context,
    policy: &RetryPolicy,
) {
    use openwop_nats::reader::{From, RunLog as StreamLog};
    use openwop_protocol::run::subjects::events_subject;
    let stream = rt.block_on(js.get_stream("BENCH")).unwrap();
    let mut g = c.benchmark_group("read_empty_run_log");
    let mut i = 0u64;
    g.bench_function("worker_first_start", |b| {
        b.iter(|| {
            i += 1;
            let subject = events_subject("bench", &format!("fresh-{i}"));
            let events = rt.block_on(nats::read_run_events(&stream, &subject, "r", policy));
            assert!(events.unwrap().is_empty());
        })
    });
    let mut i = 0u64;
    g.bench_function("ordered_consumer", |b| {
        b.iter(|| {
            i += 1;
            let subject = events_subject("bench", &format!("consumer-{i}"));
            let log = rt.block_on(StreamLog::open_on(&stream, vec![subject], From::Start));
            assert_eq!(log.unwrap().pending_at_start, 0);
        })
    });
    g.finish();
}

/// Peak RSS of the worker binary for a 20-node run (identity chain with one mock agent), beside
/// a 1-node run in the same session as the baseline.
///
/// Measured as the child's own `VmHWM` (`/proc/<pid>/status`, the high-water mark of the
/// worker's address space after `exec`), sampled every millisecond until it exits. The
/// child's `ru_maxrss` from `wait4` is printed too but is not the worker's figure: at `exec`
/// Linux folds the high-water mark of the pre-exec image — a copy of this (large) criterion
/// process — into the child's `ru_maxrss`, which is what the earlier 164,504 KiB measured.
fn peak_rss(url: &str) {
    let own = common::vm_hwm(std::process::id()).unwrap_or(0);
    let one = worker_peak(url, "rss1", 1);
    let twenty = worker_peak(url, "rss20", 20);
    println!(
        "worker peak RSS (VmHWM): 20-node run {} KiB; baseline 1-node run {} KiB; +{} KiB for 19 more nodes",
        twenty.0,
        one.0,
        twenty.0.saturating_sub(one.0)
    );
    println!(
        "  wait4 ru_maxrss (inherits this bench process's {own} KiB at exec): 20-node {} KiB, 1-node {} KiB",
        twenty.1, one.1
    );
}

/// (VmHWM KiB, wait4 ru_maxrss KiB) of one worker run of `n` nodes.
fn worker_peak(url: &str, name: &str, n: usize) -> (u64, i64) {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<_> = (0..n - 1)
        .map(|i| json!({"id": format!("n{i}"), "typeId": "core.identity"}))
        .collect();
    nodes.push(json!({"id": "m", "typeId": "core.conformance.mock-agent", "config": {"mockReasoning": true, "mockDecision": {"decision": "ok", "confidence": 0.9}}}));
    let edges: Vec<_> = (1..n)
        .map(|i| json!({"id": format!("e{i}"), "sourceNodeId": format!("n{}", i - 1), "targetNodeId": if i == n - 1 { "m".to_string() } else { format!("n{i}") }}))
        .collect();
    let snap = json!({"run": {"namespace": "bench", "name": name, "runId": format!("{name}-run")},
        "workflow": {"id": "conformance-rss", "nodes": nodes, "edges": edges}, "inputs": {"x": 1}});
    let path = dir.path().join("snapshot.json");
    std::fs::write(&path, snap.to_string()).unwrap();
    // Reaped below with wait4 (std's wait gives no rusage).
    #[allow(clippy::zombie_processes)]
    let child = Command::new(env!("CARGO_BIN_EXE_openwop-worker"))
        .env("OPENWOP_SNAPSHOT", &path)
        .env("OPENWOP_NATS_URL", url)
        .env("OPENWOP_EVENTS_STREAM", "BENCH")
        .env("OPENWOP_TERMINATION_LOG", dir.path().join("t.json"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut hwm = 0;
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        if let Some(v) = common::vm_hwm(child.id()) {
            hwm = hwm.max(v);
        }
        // SAFETY: waiting on our own child; WNOHANG never blocks.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        assert!(r == 0, "wait4 failed");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "worker failed"
    );
    (hwm, usage.ru_maxrss)
}

criterion_group!(benches, bench);
criterion_main!(benches);
