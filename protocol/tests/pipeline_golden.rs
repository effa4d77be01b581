//! Golden output of the envelope pipeline: the outcome, events, recovery and
//! kind of a fixed set of inputs (every step's refusal, replay, redaction,
//! the bench's three inputs) must stay byte-identical across refactors.
//! `tests/golden/pipeline.json` was recorded before the performance work;
//! regenerate it only for an intended change: `OPENWOP_BLESS=1 cargo test
//! -p openwop-protocol --test pipeline_golden`, and review the diff.

use openwop_protocol::events::EventFactory;
use openwop_protocol::pipeline::{
    Context, Counter, Counters, DedupStore, EnvelopeContract, HostPolicy, Processed, RefusalMode,
    Strictness, accept_bytes, accept_text,
};
use openwop_protocol::redact::Redactor;
use openwop_protocol::schema;
use serde_json::{Value, json};

const TS: &str = "2026-05-18T10:00:00Z";
const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/pipeline.json");

fn secrets() -> Vec<(String, String)> {
    (0..50)
        .map(|i| (format!("key-{i}"), format!("sk-live-{i:04}-ABCDEFGHIJKL")))
        .collect()
}

fn small_clarification() -> Value {
    json!({"type": "clarification.request", "schemaVersion": 1, "envelopeId": "e1", "correlationId": "r:n:0:a",
        "payload": {"questions": [{"id": "q1", "question": "Which region should the cluster run in?"}]},
        "meta": {"source": "ai-generation", "ts": TS}})
}

/// The bench's 16 KB vendor envelope: nested arrays, each of the 50 secrets once.
fn vendor_16k(secrets: &[(String, String)]) -> Value {
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
}

/// What a case sets on its context besides the defaults.
#[derive(Clone, Copy, Default)]
struct Tweak<'a> {
    node_contract: Option<&'a EnvelopeContract>,
    counters: Counters,
    boundary: Option<openwop_protocol::envelope::ContentTrust>,
    approval: bool,
}

fn render(p: &Processed) -> Value {
    json!({
        "outcome": p.outcome,
        "events": p.events,
        "recovery": p.recovery.map(|r| json!({"path": r.path_name(), "byteOffset": r.byte_offset})),
        "kind": p.kind,
    })
}

/// Every case, in order, as `[name, rendered]`.
fn run_cases() -> Vec<(String, Value)> {
    let secrets = secrets();
    let redactor = Redactor::new(secrets.clone());
    let mut host = HostPolicy::default();
    host.kind_schemas.insert(
        "vendor.acme.typed".into(),
        schema::compile(&json!({"type": "object", "required": ["title"],
            "properties": {"title": {"type": "string", "maxLength": 8}}}))
        .unwrap(),
    );
    host.schema_versions
        .insert("vendor.acme.versioned".into(), 2);
    let mut store = DedupStore::new();
    let mut events = EventFactory::new("run-1", 0);
    let mut out = Vec::new();
    let mut case = |name: &str, text: &str, host: &HostPolicy, store: &mut DedupStore, t: Tweak| {
        let mut ctx = Context::new(host, &redactor, "node-1", TS);
        ctx.node_contract = t.node_contract;
        ctx.counters = t.counters;
        ctx.run_trust_boundary = t.boundary;
        ctx.approval_gate_context = t.approval;
        let p = accept_text(text, &ctx, store, &mut events);
        out.push((name.to_owned(), render(&p)));
    };
    let none = Tweak::default();
    let small = small_clarification().to_string();
    let vendor = vendor_16k(&secrets).to_string();
    let invalid = json!({"type": "clarification.request", "schemaVersion": 1, "correlationId": "r:n:2:c",
        "payload": {"questions": []}, "meta": {"source": "ai-generation", "ts": "yesterday"}, "extra": true})
    .to_string();

    case("small_clarification", &small, &host, &mut store, none);
    case(
        "small_clarification_replay",
        &small,
        &host,
        &mut store,
        none,
    );
    case("vendor_16k_50_secrets", &vendor, &host, &mut store, none);
    case("invalid", &invalid, &host, &mut store, none);
    let mut conflict = small_clarification();
    conflict["type"] = json!("error");
    conflict["payload"] = json!({"code": "x", "message": "m"});
    case(
        "correlation_conflict",
        &conflict.to_string(),
        &host,
        &mut store,
        none,
    );
    case(
        "error_kind_with_secret_and_no_envelope_id",
        &json!({"type": "error", "correlationId": "c-err sk-live-0001-ABCDEFGHIJKL",
            "payload": {"code": "boom", "message": "failed with sk-live-0002-ABCDEFGHIJKL and secret:key-3"},
            "meta": {"source": "ai-generation", "ts": TS, "contentTrust": "untrusted"}})
        .to_string(),
        &host,
        &mut store,
        none,
    );
    case(
        "schema_request",
        &json!({"type": "schema.request", "schemaVersion": 1, "correlationId": "c-sr",
            "payload": {"envelopeType": "vendor.acme.typed"}, "meta": {"source": "ai-generation", "ts": TS}})
        .to_string(),
        &host,
        &mut store,
        none,
    );
    case(
        "clarification_full",
        &json!({"type": "clarification.request", "schemaVersion": 1, "correlationId": "c-full",
            "payload": {"questions": [
                {"id": "q1", "question": "Which region?", "schema": {"type": "string", "enum": ["eu", "us"]}},
                {"id": "q2", "question": "Key sk-live-0007-ABCDEFGHIJKL ok?", "context": "c"}
            ], "contextType": "deploy"},
            "meta": {"source": "user", "ts": TS, "label": "L", "rendering": {"display": "card", "title": "T"}}})
        .to_string(),
        &host,
        &mut store,
        Tweak {
            boundary: Some(openwop_protocol::envelope::ContentTrust::Untrusted),
            ..none
        },
    );
    case(
        "clarification_full_accepted",
        &json!({"type": "clarification.request", "schemaVersion": 1, "correlationId": "c-full2", "nodeId": "n",
            "payload": {"questions": [
                {"id": "q1", "question": "Which region?", "schema": {"type": "string", "enum": ["eu", "us"]}},
                {"id": "q2", "question": "Key sk-live-0007-ABCDEFGHIJKL ok?", "context": {"hint": "secret:key-7"}}
            ], "contextType": "deploy", "reasoning": "because"},
            "meta": {"source": "user", "ts": TS, "label": "L", "rendering": {"display": "card", "title": "T"}}})
        .to_string(),
        &host,
        &mut store,
        Tweak {
            boundary: Some(openwop_protocol::envelope::ContentTrust::Untrusted),
            ..none
        },
    );
    let vendor_small = |kind: &str, corr: &str| {
        json!({"type": kind, "correlationId": corr, "payload": {"title": "x"},
            "meta": {"source": "ai-generation", "ts": TS}})
        .to_string()
    };
    let fail_node = EnvelopeContract {
        accepts: vec!["vendor.acme.other".into()],
        refusal_mode: RefusalMode::FailNode,
    };
    let discard = EnvelopeContract {
        accepts: vec![],
        refusal_mode: RefusalMode::DiscardAndWarn,
    };
    case(
        "node_contract_fail_node",
        &vendor_small("vendor.acme.typed", "c-fail"),
        &host,
        &mut store,
        Tweak {
            node_contract: Some(&fail_node),
            ..none
        },
    );
    case(
        "node_contract_fail_node_replay",
        &vendor_small("vendor.acme.typed", "c-fail"),
        &host,
        &mut store,
        none,
    );
    case(
        "node_contract_discard",
        &vendor_small("vendor.acme.typed", "c-discard"),
        &host,
        &mut store,
        Tweak {
            node_contract: Some(&discard),
            ..none
        },
    );
    case(
        "vendor_schema_violation",
        &json!({"type": "vendor.acme.typed", "correlationId": "c-vs", "payload": {"title": "much too long", "n": 1},
            "meta": {"source": "ai-generation", "ts": TS}})
        .to_string(),
        &host,
        &mut store,
        none,
    );
    case(
        "schema_version_too_high",
        &json!({"type": "vendor.acme.versioned", "schemaVersion": 3, "correlationId": "c-v3", "payload": {},
            "meta": {"source": "ai-generation", "ts": TS}})
        .to_string(),
        &host,
        &mut store,
        none,
    );
    case(
        "schema_version_drift_warning",
        &json!({"type": "vendor.acme.versioned", "schemaVersion": 1, "correlationId": "c-v1", "payload": {},
            "meta": {"source": "ai-generation", "ts": TS}})
        .to_string(),
        &host,
        &mut store,
        none,
    );
    let strict = HostPolicy {
        strictness: Strictness::Strict,
        schema_versions: host.schema_versions.clone(),
        supported_envelopes: Some(vec!["vendor.acme.versioned".into()]),
        host_contract: Some(EnvelopeContract {
            accepts: vec!["vendor.acme.versioned".into()],
            refusal_mode: RefusalMode::FailNode,
        }),
        ..HostPolicy::default()
    };
    case(
        "strict_lower_version",
        &json!({"type": "vendor.acme.versioned", "schemaVersion": 1, "correlationId": "c-s1", "payload": {},
            "meta": {"source": "ai-generation", "ts": TS}})
        .to_string(),
        &strict,
        &mut store,
        none,
    );
    case(
        "unsupported_kind",
        &vendor_small("vendor.acme.unknown", "c-unk"),
        &strict,
        &mut store,
        none,
    );
    case(
        "host_contract",
        &vendor_small("vendor.acme.typed", "c-hc"),
        &HostPolicy {
            host_contract: Some(EnvelopeContract {
                accepts: vec![],
                refusal_mode: RefusalMode::FailNode,
            }),
            ..HostPolicy::default()
        },
        &mut store,
        none,
    );
    let counters = Counters {
        clarification_rounds: Some(Counter { current: 3, cap: 3 }),
        envelopes_per_turn: Some(Counter { current: 1, cap: 9 }),
        ..Counters::default()
    };
    case(
        "clarification_cap_breached",
        &json!({"type": "clarification.request", "schemaVersion": 1, "correlationId": "c-cap",
            "payload": {"questions": [{"id": "q1", "question": "Which region?"}]},
            "meta": {"source": "ai-generation", "ts": TS}})
        .to_string(),
        &host,
        &mut store,
        Tweak { counters, ..none },
    );
    case(
        "untrusted_blocks_approval",
        &json!({"type": "vendor.acme.approve", "correlationId": "c-appr", "payload": {"ok": true},
            "meta": {"source": "ai-generation", "ts": TS, "contentTrust": "untrusted"}})
        .to_string(),
        &host,
        &mut store,
        Tweak {
            approval: true,
            ..none
        },
    );
    case(
        "recovered_from_fence",
        &format!(
            "Here you go:\n```json\n{}\n```",
            vendor_small("vendor.acme.note", "c-fence")
        ),
        &host,
        &mut store,
        none,
    );
    case("not_json", "no envelope here", &host, &mut store, none);
    case(
        "duplicate_key",
        r#"{"type":"error","type":"error"}"#,
        &host,
        &mut store,
        none,
    );
    case(
        "secret_in_key_and_unknown_property",
        &json!({"type": "vendor.acme.keys", "correlationId": "c-keys", "sk-live-0009-ABCDEFGHIJKL": 1,
            "payload": {"sk-live-0009-ABCDEFGHIJKL": "v", "a": ["secret:nope", {"x": "secret:key-4."}]},
            "meta": {"source": "ai-generation", "ts": TS}})
        .to_string(),
        &host,
        &mut store,
        none,
    );
    case(
        "secret_in_key_accepted",
        &json!({"type": "vendor.acme.keys", "correlationId": "c-keys2",
            "payload": {"sk-live-0009-ABCDEFGHIJKL": "v", "[REDACTED:key-9]": "w", "a": ["secret:nope", {"x": "secret:key-4."}]},
            "meta": {"source": "ai-generation", "ts": TS}})
        .to_string(),
        &host,
        &mut store,
        none,
    );
    let p = accept_bytes(
        b"{\"type\":\xff}",
        &Context::new(&host, &redactor, "node-1", TS),
        &mut store,
        &mut events,
    );
    out.push(("not_utf8".to_owned(), render(&p)));
    out.push((
        "dedup_store".to_owned(),
        serde_json::to_value(&store).unwrap(),
    ));
    out
}

#[test]
fn pipeline_output_matches_golden() {
    let cases = run_cases();
    let rendered =
        serde_json::to_string_pretty(&Value::Object(cases.into_iter().collect())).unwrap() + "\n";
    if std::env::var_os("OPENWOP_BLESS").is_some() {
        std::fs::create_dir_all(std::path::Path::new(GOLDEN).parent().unwrap()).unwrap();
        std::fs::write(GOLDEN, &rendered).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(GOLDEN)
        .unwrap_or_else(|e| panic!("cannot read {GOLDEN} ({e}); record it with OPENWOP_BLESS=1"));
    if golden != rendered {
        let line = golden
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .map_or(golden.lines().count().min(rendered.lines().count()), |n| n);
        panic!(
            "pipeline output differs from {GOLDEN} at line {}:\n golden: {:?}\n    now: {:?}",
            line + 1,
            golden.lines().nth(line),
            rendered.lines().nth(line)
        );
    }
}

#[test]
fn same_input_gives_identical_output() {
    assert_eq!(run_cases(), run_cases());
}
