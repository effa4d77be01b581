//! SR-1 redaction cost: 300 secrets over a ~16 KB envelope payload, beside a
//! baseline serde_json round trip of the same bytes, in the same run.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use openwop_protocol::redact::Redactor;
use serde_json::{Value, json};

const SECRETS: usize = 300;

fn secrets() -> Vec<(String, String)> {
    (0..SECRETS)
        .map(|i| {
            (
                format!("byok-{i}"),
                format!(
                    "sk-live-{i:04}-{:016x}",
                    (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ),
            )
        })
        .collect()
}

/// ~16 KB payload: prose, nested bags, keys; `with` secrets embedded sparsely.
fn payload(secrets: &[(String, String)], with: bool) -> Value {
    let mut items = Vec::new();
    let mut i = 0;
    while serde_json::to_string(&items).map_or(0, |s| s.len()) < 15_500 {
        let leak = if with && i % 10 == 0 {
            secrets[i % secrets.len()].1.as_str()
        } else {
            "no credential here"
        };
        items.push(json!({
            "id": format!("q{i}"),
            "question": format!("Step {i}: the model considered the options carefully and noted {leak}."),
            "context": {"source": "tool-result", "score": i, "tags": ["a", "b", "c"]}
        }));
        i += 1;
    }
    json!({"reasoning": "Long analytical reasoning ".repeat(8), "questions": items})
}

fn bench(c: &mut Criterion) {
    let s = secrets();
    let redactor = Redactor::new(s.clone());
    let clean = payload(&s, false);
    let dirty = payload(&s, true);
    let clean_bytes = serde_json::to_vec(&clean).unwrap();
    let dirty_bytes = serde_json::to_vec(&dirty).unwrap();
    let mut g = c.benchmark_group("redact_16kb_300_secrets");
    g.throughput(criterion::Throughput::Bytes(clean_bytes.len() as u64));
    g.bench_function("baseline_serde_round_trip", |b| {
        b.iter(|| {
            let v: Value = serde_json::from_slice(black_box(&clean_bytes)).unwrap();
            black_box(serde_json::to_vec(&v).unwrap())
        })
    });
    g.bench_function("redact_value_clean", |b| {
        b.iter_batched_ref(
            || clean.clone(),
            |v| black_box(redactor.redact_value(v)),
            criterion::BatchSize::SmallInput,
        )
    });
    g.bench_function("redact_value_with_secrets", |b| {
        b.iter_batched_ref(
            || dirty.clone(),
            |v| black_box(redactor.redact_value(v)),
            criterion::BatchSize::SmallInput,
        )
    });
    g.bench_function("redact_str_serialized_with_secrets", |b| {
        let text = String::from_utf8(dirty_bytes.clone()).unwrap();
        b.iter(|| black_box(redactor.redact_str(black_box(&text)).1))
    });
    g.finish();
    c.bench_function("redactor_build_300_secrets", |b| {
        b.iter(|| black_box(Redactor::new(s.clone())))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
