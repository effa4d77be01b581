//! Full-pipeline throughput (envelopes/s) beside the floor measured in the same
//! run: `serde_json` parse + serialize of the same bytes.

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use openwop_protocol::events::EventFactory;
use openwop_protocol::pipeline::{Context, DedupStore, HostPolicy, accept_text};
use openwop_protocol::redact::Redactor;
use serde_json::{Value, json};

const TS: &str = "2026-05-18T10:00:00Z";

fn small_clarification() -> String {
    json!({"type": "clarification.request", "schemaVersion": 1, "envelopeId": "e1", "correlationId": "r:n:0:a",
        "payload": {"questions": [{"id": "q1", "question": "Which region should the cluster run in?"}]},
        "meta": {"source": "ai-generation", "ts": TS}})
    .to_string()
}

/// ~16 KB vendor envelope with nested arrays; 50 secrets, each appearing once.
fn vendor_16k(secrets: &[(String, String)]) -> String {
    let mut sections = Vec::new();
    let mut i = 0;
    while serde_json::to_string(&sections).unwrap().len() < 15_500 {
        let s = &secrets[i % secrets.len()].1;
        let leak = if i < secrets.len() {
            format!(" (token {s})")
        } else {
            String::new()
        };
        sections.push(json!({"title": format!("Section {i}"), "items": [
            {"text": format!("Requirement {i}: the service must stay available{leak}"), "tags": ["a", "b", [1, 2, [3]]]},
            {"text": "Acceptance: p99 latency under 200ms", "scores": [0.1, 0.2, 0.3]}
        ]}));
        i += 1;
    }
    json!({"type": "vendor.acme.prd.create", "schemaVersion": 1, "envelopeId": "e2", "correlationId": "r:n:1:b",
        "payload": {"reasoning": "plan first", "sections": sections}, "meta": {"source": "ai-generation", "ts": TS}})
    .to_string()
}

fn invalid() -> String {
    json!({"type": "clarification.request", "schemaVersion": 1, "correlationId": "r:n:2:c",
        "payload": {"questions": []}, "meta": {"source": "ai-generation", "ts": "yesterday"}, "extra": true})
    .to_string()
}

/// One pipeline call as the bench measures it: a fresh dedup store each time,
/// so first acceptance is measured, not the replay cache (its drop is charged
/// to the call too). The event factory is per run, as in the worker.
fn pipeline_once(text: &str, ctx: &Context<'_>, events: &mut EventFactory) {
    let mut store = DedupStore::new();
    black_box(accept_text(black_box(text), ctx, &mut store, events));
}

fn floor_once(text: &str) {
    let v: Value = serde_json::from_str(black_box(text)).unwrap();
    black_box(serde_json::to_string(&v).unwrap());
}

/// Median time per call of `f` over `rounds` batches of `batch` calls.
fn median_ns(rounds: usize, batch: u32, mut f: impl FnMut()) -> f64 {
    let mut samples: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..batch {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(batch)
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[rounds / 2]
}

fn bench(c: &mut Criterion) {
    let secrets: Vec<(String, String)> = (0..50)
        .map(|i| (format!("key-{i}"), format!("sk-live-{i:04}-ABCDEFGHIJKL")))
        .collect();
    let redactor = Redactor::new(secrets.clone());
    let host = HostPolicy::default();
    let cases = [
        ("small_clarification", small_clarification()),
        ("vendor_16k_50_secrets", vendor_16k(&secrets)),
        ("invalid", invalid()),
    ];
    // Built once, like the worker's: host policy, the run's redactor, the context
    // and the run's event factory.
    let ctx = Context::new(&host, &redactor, "node-1", TS);
    let mut events = EventFactory::new("run-1", 0);
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(1));
    for (name, text) in &cases {
        g.bench_function(format!("{name}/floor_serde_parse_serialize"), |b| {
            b.iter(|| floor_once(text))
        });
        g.bench_function(format!("{name}/full_pipeline"), |b| {
            b.iter(|| pipeline_once(text, &ctx, &mut events))
        });
    }
    g.finish();

    // Summary: envelopes/s and the ratio to the floor, both timed here
    // back to back (interleaved rounds, medians) so machine load hits both alike.
    println!("\npipeline summary (median of interleaved rounds, one core):");
    for (name, text) in &cases {
        let batch = if text.len() > 4096 { 20 } else { 2000 };
        let (mut floor, mut full) = (Vec::new(), Vec::new());
        for _ in 0..15 {
            floor.push(median_ns(3, batch, || floor_once(text)));
            full.push(median_ns(3, batch, || {
                pipeline_once(text, &ctx, &mut events)
            }));
        }
        floor.sort_by(f64::total_cmp);
        full.sort_by(f64::total_cmp);
        let (floor, full) = (floor[floor.len() / 2], full[full.len() / 2]);
        println!(
            "  {name:<24} pipeline {:>9.0} envelopes/s ({:>8.2} µs)  floor {:>9.0}/s ({:>8.2} µs)  ratio {:.2}x",
            1e9 / full,
            full / 1e3,
            1e9 / floor,
            floor / 1e3,
            full / floor
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
