//! Events/s the worker's run log publishes with acks (eventId dedup check, sequence, redaction,
//! JetStream ack per event) beside a raw JetStream publish-and-ack baseline of the same payload
//! size, both against one nats-server started here; and the worker's peak RSS for a 20-node run.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use openwop_protocol::events::{EventType, event_id_for};
use openwop_protocol::redact::Redactor;
use openwop_worker::eventlog::RunLog;
use openwop_worker::nats::{self, JetStreamPublisher, RetryPolicy};
use serde_json::json;

struct Server(
    std::process::Child,
    u16,
    #[allow(dead_code)] tempfile::TempDir,
);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn server() -> Server {
    let bin = std::env::var("OPENWOP_NATS_SERVER").unwrap_or_else(|_| {
        let root = format!(
            "{}/.cache/openwop/bin",
            std::env::var("HOME").unwrap_or_default()
        );
        std::fs::read_dir(&root)
            .expect("nats-server cache; run e2e/cluster/build-binaries.sh")
            .flatten()
            .map(|e| e.path().join("nats-server"))
            .find(|p| p.exists())
            .expect("nats-server binary")
            .to_string_lossy()
            .into_owned()
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(bin)
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    Server(child, port, dir)
}

fn bench(c: &mut Criterion) {
    let srv = server();
    let url = format!("nats://127.0.0.1:{}", srv.1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let policy = RetryPolicy::default();
    let js = rt.block_on(async {
        let js = nats::context(nats::connect(&url).await.unwrap(), &policy);
        nats::ensure_stream(&js, "BENCH", &policy).await.unwrap();
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
    peak_rss_20_nodes(&url);
}

/// Peak RSS of the worker binary executing a 20-node run (identity chain with one mock agent).
fn peak_rss_20_nodes(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<_> = (0..19)
        .map(|i| json!({"id": format!("n{i}"), "typeId": "core.identity"}))
        .collect();
    nodes.push(json!({"id": "m", "typeId": "core.conformance.mock-agent", "config": {"mockReasoning": true, "mockDecision": {"decision": "ok", "confidence": 0.9}}}));
    let edges: Vec<_> = (1..20)
        .map(|i| json!({"id": format!("e{i}"), "sourceNodeId": format!("n{}", i - 1), "targetNodeId": if i == 19 { "m".to_string() } else { format!("n{i}") }}))
        .collect();
    let snap = json!({"run": {"namespace": "bench", "name": "rss", "runId": "rss-run"},
        "workflow": {"id": "conformance-rss", "nodes": nodes, "edges": edges}, "inputs": {"x": 1}});
    let path = dir.path().join("snapshot.json");
    std::fs::write(&path, snap.to_string()).unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_openwop-worker"))
        .env("OPENWOP_SNAPSHOT", &path)
        .env("OPENWOP_NATS_URL", url)
        .env("OPENWOP_EVENTS_STREAM", "BENCH")
        .env("OPENWOP_TERMINATION_LOG", dir.path().join("t.json"))
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    // SAFETY: getrusage only writes into the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    println!(
        "worker peak RSS, 20-node run: {} KiB (ru_maxrss over child processes)",
        usage.ru_maxrss
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
