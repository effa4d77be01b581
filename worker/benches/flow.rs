//! Issue 24 figures: one run of 10,000 node executions, and one run of a 10,000-iteration
//! `core.loop` — node executions (iterations) per second and the executing process's peak RSS,
//! beside a 1-node run measured in the same bench run.
//!
//! The run is a chain of 10,000 `core.flow.noop` nodes (n1 → n2 → … ): the only shape in
//! which one run executes 10,000 nodes on this host (cycles are refused and `core.loop`
//! annotates its array rather than re-running nodes), and a chain makes every execution go
//! through the whole per-node path — scheduling decision, replay look-ups, `node.started` /
//! `node.completed` appended and acknowledged by JetStream — with nothing else (no provider
//! call) in the measurement. A workflow definition holds at most 200 nodes (the schema), so
//! the graph is built from the definition without the schema check, and run by the worker's
//! executor in a child process (this bench re-executed) against a nats-server started here,
//! with the host's `maxNodeExecutions` raised to the chain's length. The child's VmHWM is
//! sampled by the parent, as `fanout` does for the worker binary.
//!
//! The loop run is one `core.loop` over a 10,000-item array (a static input): this host's
//! `core.loop` has the published flow pack's iterator semantics, so its 10,000 iterations are
//! one node execution whose `node.completed` carries all 10,000 `{item, index, total}` — the
//! figure is iterations per second of that run, and the peak RSS shows what holding the
//! array, its annotation and the event costs.
//!
//! Run alone: `cargo bench -p openwop-worker --bench flow`.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openwop_nats::NatsAuth;
use openwop_protocol::events::EventType;
use openwop_protocol::graph::Graph;
use openwop_protocol::redact::Redactor;
use openwop_protocol::run::snapshot::RunSnapshot;
use openwop_protocol::workflow::WorkflowDefinition;
use openwop_worker::eventlog::RunLog;
use openwop_worker::executor::{ExecConfig, Executor, RunEnd};
use openwop_worker::nats::{self, JetStreamPublisher, RetryPolicy};
use openwop_worker::providers::ProviderSet;
use openwop_worker::reasoning::ReasoningStream;
use serde_json::{Value, json};

mod common;

const STREAM: &str = "BENCH_FLOW";
const CHILD_ENV: &str = "OPENWOP_FLOW_BENCH_NODES";
const SHAPE_ENV: &str = "OPENWOP_FLOW_BENCH_SHAPE";

/// What one measured run executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `n` chained `core.flow.noop` nodes: `n` node executions.
    Chain,
    /// One `core.loop` over an `n`-item array: `n` iterations in one node execution.
    Loop,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Chain => "chain",
            Shape::Loop => "loop",
        }
    }

    fn parse(s: &str) -> Shape {
        match s {
            "loop" => Shape::Loop,
            _ => Shape::Chain,
        }
    }

    fn workflow(self, n: usize) -> Value {
        match self {
            Shape::Chain => chain(n),
            Shape::Loop => iterations(n),
        }
    }

    /// Node executions of the run (the events are two per node plus run start and end).
    fn nodes(self, n: usize) -> usize {
        match self {
            Shape::Chain => n,
            Shape::Loop => 1,
        }
    }
}

fn chain(n: usize) -> Value {
    let nodes: Vec<Value> = (1..=n)
        .map(|i| json!({"id": format!("n{i}"), "typeId": "core.flow.noop"}))
        .collect();
    let edges: Vec<Value> = (1..n)
        .map(|i| json!({"id": format!("e{i}"), "sourceNodeId": format!("n{i}"), "targetNodeId": format!("n{}", i + 1)}))
        .collect();
    json!({"id": "chain", "nodes": nodes, "edges": edges})
}

/// One `core.loop` node iterating over `n` numbers.
fn iterations(n: usize) -> Value {
    let array: Vec<usize> = (0..n).collect();
    json!({"id": "loop", "nodes": [{"id": "each", "typeId": "core.loop",
                                     "inputs": {"array": {"type": "static", "value": array}}}],
           "edges": []})
}

/// The child: runs one run of `shape` and size `n` to completion and prints its wall time (ms).
fn child(shape: Shape, n: usize, url: &str) {
    let name = format!("{}-{n}", shape.name());
    let snap: RunSnapshot = serde_json::from_value(json!({
        "run": {"namespace": "bench", "name": name, "runId": format!("{name}-run")},
        "workflow": shape.workflow(n),
        "host": {"limits": {"clarificationRounds": 3, "schemaRounds": 3, "envelopesPerTurn": 32,
                            "maxNodeExecutions": n}}}))
    .unwrap();
    let def: WorkflowDefinition = serde_json::from_value(snap.workflow.clone()).unwrap();
    let graph = Graph::from_definition(&def).unwrap();
    let cfg = ExecConfig {
        mock_programs: Default::default(),
        providers: ProviderSet::default(),
        secrets: vec![],
        tools: Default::default(),
    };
    let policy = RetryPolicy::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let wall = rt.block_on(async {
        let js = nats::context(nats::connect(url, &NatsAuth::None).await.unwrap(), &policy);
        let subject = format!("openwop.events.bench.{name}-run");
        let log = RunLog::new(
            JetStreamPublisher::new(js, policy),
            &subject,
            &format!("{name}-run"),
            Arc::new(Redactor::default()),
            vec![],
        );
        let reasoning = ReasoningStream::new("openwop.reasoning.bench.x", 64);
        let started = Instant::now();
        let mut exec = Executor::new(&snap, &graph, &cfg, log, reasoning);
        let end = exec.run().await.unwrap();
        assert_eq!(end, RunEnd::Completed);
        assert_eq!(exec.log_mut().events().len(), 2 * shape.nodes(n) + 2);
        if shape == Shape::Loop {
            // The iterations really happened: the annotation of the last item is in the event.
            let done = exec
                .log_mut()
                .events()
                .iter()
                .rev()
                .find(|e| e.event_type == EventType::NodeCompleted);
            let outputs = &done.expect("node.completed").payload["outputs"];
            assert_eq!(outputs["total"], n);
            assert_eq!(outputs["items"][n - 1]["index"], n - 1);
        }
        started.elapsed()
    });
    println!("{}", wall.as_secs_f64() * 1000.0);
}

/// (wall time of the run, peak RSS KiB of the process) of one run of `shape` and size `n`.
fn measure(url: &str, shape: Shape, n: usize) -> (Duration, u64) {
    let exe = std::env::current_exe().unwrap();
    // Reaped by `wait_sampling_rss` (polled, so VmHWM can be sampled while it runs).
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new(exe)
        .env(CHILD_ENV, n.to_string())
        .env(SHAPE_ENV, shape.name())
        .env("OPENWOP_FLOW_BENCH_URL", url)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let hwm = common::wait_sampling_rss(&child, "bench child");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    let ms: f64 = out.trim().parse().unwrap();
    (Duration::from_secs_f64(ms / 1000.0), hwm)
}

fn main() {
    if let Ok(n) = std::env::var(CHILD_ENV) {
        let url = std::env::var("OPENWOP_FLOW_BENCH_URL").unwrap();
        let shape = Shape::parse(&std::env::var(SHAPE_ENV).unwrap_or_default());
        child(shape, n.parse().unwrap(), &url);
        return;
    }
    if common::filtered_out("flow") {
        return;
    }
    let srv = common::nats_with_stream(STREAM);
    let url = srv.url();
    const N: usize = 10_000;
    // Warm-up (page cache, the stream's first writes).
    measure(&url, Shape::Chain, 10);
    let (one, one_rss) = measure(&url, Shape::Chain, 1);
    let (big, big_rss) = measure(&url, Shape::Chain, N);
    let (lp, lp_rss) = measure(&url, Shape::Loop, N);
    let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "one run of {N} node executions (a chain of core.flow.noop; worker executor, real JetStream acks):"
    );
    println!(
        "  {N} nodes: {:>9.0} ms  -> {:>8.0} node executions/s; peak RSS {big_rss} KiB",
        big.as_secs_f64() * 1000.0,
        rate(N, big)
    );
    println!(
        "  1 node:    {:>9.1} ms  -> {:>8.0} node executions/s; peak RSS {one_rss} KiB",
        one.as_secs_f64() * 1000.0,
        rate(1, one)
    );
    println!(
        "  peak RSS of the 10,000-node run over the 1-node run: +{} KiB",
        big_rss.saturating_sub(one_rss)
    );
    println!("one run of a {N}-iteration core.loop (one node execution, iterator semantics):");
    println!(
        "  {N} iterations: {:>9.1} ms  -> {:>8.0} iterations/s; peak RSS {lp_rss} KiB (+{} KiB over the 1-node run)",
        lp.as_secs_f64() * 1000.0,
        rate(N, lp),
        lp_rss.saturating_sub(one_rss)
    );
}
