//! Issue #42 figure: what the tool loop adds to each tool call, beside a direct call to the
//! same MCP server measured in the same bench run.
//!
//! - **direct**: one MCP session (`providers::mcp`) calls the fake server's tool `CALLS`
//!   times in a row; per-call latency p50 / p99 / mean.
//! - **loop**: one run of an LLM node whose scripted model (the mock provider) asks for one
//!   call per turn, `ROUNDS` turns, then answers — executed by the worker's executor with its
//!   event log on a JetStream stream of a nats-server started here, as in production: each
//!   call journals the model's turn and its usage, records `agent.toolCalled` before and
//!   `agent.toolReturned` after (each append acknowledged by JetStream), and asks the model
//!   again with the result. The figure per call is (the run's wall time − the wall time of
//!   the same node answering at once) / `ROUNDS`, over `RUNS` runs (p50 and the slowest).
//!
//! Each is measured against the fake's `lookup` (answers at once: the loop's own cost in
//! absolute terms) and its `slow` tool held `SLOW_MS` (a tool that does work: the ratio a
//! user sees). The fake MCP server and the model are local, so nothing here is network or
//! model latency.
//!
//! Run alone: `cargo bench -p openwop-worker --bench tools`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use openwop_nats::NatsAuth;
use openwop_protocol::graph::Graph;
use openwop_protocol::redact::Redactor;
use openwop_protocol::run::snapshot::RunSnapshot;
use openwop_protocol::tools::mcp::RevisionPolicy;
use openwop_providers::mcp::{McpServer, McpSession};
use openwop_providers::testing::mcp::{FakeMcp, Knobs};
use openwop_worker::eventlog::RunLog;
use openwop_worker::executor::{ExecConfig, Executor, RunEnd};
use openwop_worker::nats::{self, JetStreamPublisher, RetryPolicy};
use openwop_worker::providers::ProviderSet;
use openwop_worker::reasoning::ReasoningStream;
use openwop_worker::tools::ToolServers;
use serde_json::{Value, json};

mod common;

const STREAM: &str = "BENCH_TOOLS";
const CALLS: usize = 200;
const ROUNDS: usize = 60;
const RUNS: usize = 8;
const SLOW_MS: u64 = 20;

fn main() {
    if common::filtered_out("tools") {
        return;
    }
    let nats = common::nats_with_stream(STREAM);
    let fake = FakeMcp::start(Knobs {
        slow: Duration::from_millis(SLOW_MS),
        ..Knobs::default()
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "tool loop per call vs a direct call (fake MCP server on loopback, mock model, JetStream log)"
    );
    for (tool, args) in [("lookup", json!({"query": "q"})), ("slow", json!({}))] {
        let direct = rt.block_on(direct_calls(&fake.url, tool, &args));
        let baseline = run_times(&rt, &nats.url(), &fake.url, tool, &args, 0);
        let looped = run_times(&rt, &nats.url(), &fake.url, tool, &args, ROUNDS);
        let base = median(&baseline);
        let mut per_call: Vec<f64> = looped
            .iter()
            .map(|w| (w - base).max(0.0) / ROUNDS as f64)
            .collect();
        per_call.sort_by(f64::total_cmp);
        let loop_p50 = percentile(&per_call, 50.0);
        let loop_max = per_call[per_call.len() - 1];
        let direct_p50 = percentile(&direct, 50.0);
        println!(
            "  {tool:<6} direct: p50 {direct_p50:.3} ms, p99 {:.3} ms, mean {:.3} ms ({CALLS} calls) | loop: p50 {loop_p50:.3} ms, slowest {loop_max:.3} ms per call ({RUNS} runs of {ROUNDS} rounds; node without calls {base:.1} ms) | ratio p50 {:.2}x",
            percentile(&direct, 99.0),
            direct.iter().sum::<f64>() / direct.len() as f64,
            loop_p50 / direct_p50,
        );
    }
}

/// Per-call latency (ms, sorted) of `CALLS` calls of `tool` on one session.
async fn direct_calls(url: &str, tool: &str, args: &Value) -> Vec<f64> {
    let session = McpSession::connect(McpServer {
        url: url.to_owned(),
        headers: vec![],
        revisions: RevisionPolicy::default(),
        timeout: Duration::from_secs(10),
        max_body_bytes: openwop_protocol::tools::mcp::MAX_RESPONSE_BYTES,
    })
    .await
    .unwrap();
    let args = args.as_object().cloned().unwrap_or_default();
    for _ in 0..5 {
        session.call_tool(tool, args.clone()).await.unwrap();
    }
    let mut out = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let t = Instant::now();
        session.call_tool(tool, args.clone()).await.unwrap();
        out.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    out.sort_by(f64::total_cmp);
    out
}

/// Wall times (ms) of `RUNS` runs whose node makes `rounds` calls of `tool`, one per turn.
fn run_times(
    rt: &tokio::runtime::Runtime,
    nats_url: &str,
    mcp_url: &str,
    tool: &str,
    args: &Value,
    rounds: usize,
) -> Vec<f64> {
    (0..RUNS)
        .map(|i| rt.block_on(one_run(nats_url, mcp_url, tool, args, rounds, i)))
        .collect()
}

async fn one_run(
    nats_url: &str,
    mcp_url: &str,
    tool: &str,
    args: &Value,
    rounds: usize,
    i: usize,
) -> f64 {
    let run_id = format!("tools-{tool}-{rounds}-{i}");
    let mut responses: Vec<Value> = (0..rounds)
        .map(|_| json!({"stopReason": "tool_calls", "toolCalls": [{"name": tool, "arguments": args}]}))
        .collect();
    responses.push(json!({"stopReason": "stop", "content": {"answer": "done"}}));
    let snap: RunSnapshot = serde_json::from_value(json!({
        "run": {"namespace": "bench", "name": run_id, "runId": run_id},
        "workflow": {"id": "tools", "nodes": [{"id": "agent", "typeId": "core.ai.callPrompt",
            "config": {"provider": "mock", "prompt": "p",
                       "outputSchema": {"type": "object", "required": ["answer"],
                                        "properties": {"answer": {"type": "string"}}},
                       "tools": [{"server": "kb", "names": [tool], "requireApproval": false}],
                       "maxToolRounds": ROUNDS.max(1)}}],
            "edges": [], "settings": {"timeout": 0}},
        "providerMocks": {"agent": {"responses": responses}},
        "toolServers": [{"name": "kb", "namespace": "bench", "url": mcp_url,
                         "timeoutSeconds": 10, "maxResultBytes": 4096,
                         "toolTiers": [{"name": tool, "tier": "read"}]}],
    }))
    .unwrap();
    let graph = Graph::parse(&snap.workflow).unwrap();
    let cfg = ExecConfig {
        mock_programs: snap.mock_programs().unwrap(),
        providers: ProviderSet::default(),
        secrets: vec![],
        tools: ToolServers::from_mounts(&snap.tool_servers).0,
    };
    let policy = RetryPolicy::default();
    let js = nats::context(
        nats::connect(nats_url, &NatsAuth::None).await.unwrap(),
        &policy,
    );
    let log = RunLog::new(
        JetStreamPublisher::new(js, policy),
        format!("openwop.events.bench.{run_id}"),
        &run_id,
        Arc::new(Redactor::default()),
        vec![],
    );
    let reasoning = ReasoningStream::new("openwop.reasoning.bench.x", 64);
    let started = Instant::now();
    let mut exec = Executor::new(&snap, &graph, &cfg, log, reasoning);
    let end = exec.run().await.unwrap();
    let wall = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(end, RunEnd::Completed);
    wall
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    percentile(&s, 50.0)
}

/// The `p`th percentile of sorted `v` (nearest rank).
fn percentile(v: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}
