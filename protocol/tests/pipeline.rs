//! End-to-end tests of the envelope pipeline: one test per step and code,
//! the normative order, replay, projection and redaction.

use openwop_protocol::envelope::ContentTrust;
use openwop_protocol::events::{EventFactory, EventType};
use openwop_protocol::outcome::{Code, EnvelopeCapKind, Gate, Outcome};
use openwop_protocol::pipeline::{
    Context, Counter, Counters, DedupStore, EnvelopeContract, HostPolicy, Processed, RefusalMode,
    Strictness, accept_bytes, accept_text, envelope_id_for,
};
use openwop_protocol::redact::Redactor;
use openwop_protocol::schema;
use serde_json::{Value, json};

const TS: &str = "2026-05-18T10:00:00Z";

fn clar(corr: &str) -> Value {
    json!({"type": "clarification.request", "schemaVersion": 1, "correlationId": corr,
        "payload": {"questions": [{"id": "q1", "question": "Which region?"}]},
        "meta": {"source": "ai-generation", "ts": TS}})
}

fn vendor(kind: &str, corr: &str) -> Value {
    json!({"type": kind, "correlationId": corr, "payload": {"title": "x"},
        "meta": {"source": "ai-generation", "ts": TS}})
}

struct H {
    host: HostPolicy,
    redactor: Redactor,
    store: DedupStore,
    events: EventFactory,
    node_contract: Option<EnvelopeContract>,
}

impl H {
    fn new() -> Self {
        H {
            host: HostPolicy::default(),
            redactor: Redactor::default(),
            store: DedupStore::new(),
            events: EventFactory::new("run-1", 0),
            node_contract: None,
        }
    }
    fn run_with(&mut self, v: &Value, f: impl FnOnce(&mut Context<'_>)) -> Processed {
        let mut ctx = Context::new(&self.host, &self.redactor, "node-1", TS);
        ctx.node_contract = self.node_contract.as_ref();
        f(&mut ctx);
        accept_text(&v.to_string(), &ctx, &mut self.store, &mut self.events)
    }
    fn run(&mut self, v: &Value) -> Processed {
        self.run_with(v, |_| {})
    }
}

fn code(p: &Processed) -> Option<Code> {
    p.outcome.code()
}

#[test]
fn clarification_is_accepted_and_projected() {
    let mut h = H::new();
    let p = h.run(&clar("r:n:0:a"));
    let Outcome::Accepted(a) = &p.outcome else {
        panic!("{:?}", p.outcome)
    };
    assert_eq!(a.envelope_id, envelope_id_for("run-1", "r:n:0:a"));
    assert_eq!(a.normalized_meta.content_trust, ContentTrust::Trusted);
    let types: Vec<_> = p.events.iter().map(|e| e.event_type).collect();
    assert_eq!(
        types,
        [
            EventType::ClarificationRequested,
            EventType::InterruptRequested
        ]
    );
    assert_eq!(p.events[1].payload["kind"], "clarification");
    assert_eq!(
        a.recorded_event_ids,
        p.events
            .iter()
            .map(|e| e.event_id.clone())
            .collect::<Vec<_>>()
    );
    for (i, e) in p.events.iter().enumerate() {
        assert_eq!(e.sequence, i as u64);
        assert_eq!(e.causation_id.as_deref(), Some("r:n:0:a"));
        assert_eq!(e.content_trust, Some(ContentTrust::Trusted));
        assert_eq!(e.node_id.as_deref(), Some("node-1"));
        assert_eq!(
            schema::validate_event_payload(e.event_type.as_str(), &e.payload),
            Some(Ok(())),
            "{e:?}"
        );
        assert_eq!(
            schema::validate(
                schema::Document::RunEvent,
                &serde_json::to_value(e).unwrap()
            ),
            Ok(())
        );
    }
}

#[test]
fn error_and_schema_kinds_project_logs_without_node_failed() {
    let mut h = H::new();
    let e = json!({"type": "error", "schemaVersion": 1, "correlationId": "c-err",
        "payload": {"code": "cannot", "message": "no data"}, "meta": {"source": "ai-generation", "ts": TS}});
    let p = h.run(&e);
    assert!(p.outcome.is_accepted());
    assert_eq!(p.events.len(), 1);
    assert_eq!(p.events[0].event_type, EventType::LogAppended);
    assert_eq!(p.events[0].payload["level"], "error");
    let s = json!({"type": "schema.request", "schemaVersion": 1, "correlationId": "c-s",
        "payload": {"envelopeType": "vendor.acme.prd.create"}, "meta": {"source": "ai-generation", "ts": TS}});
    let p = h.run(&s);
    assert_eq!(p.events[0].event_type, EventType::LogAppended);
    assert_eq!(p.events[0].payload["level"], "debug");
    for e in &p.events {
        assert_eq!(
            schema::validate_event_payload(e.event_type.as_str(), &e.payload),
            Some(Ok(()))
        );
    }
}

#[test]
fn parse_step_codes() {
    let mut h = H::new();
    let ctx = Context::new(&h.host, &h.redactor, "n", TS);
    let p = accept_bytes(b"{\"type\": \"\xff\"}", &ctx, &mut h.store, &mut h.events);
    assert_eq!(code(&p), Some(Code::InvalidEnvelopeShape));
    assert!(p.outcome.message().unwrap().contains("UTF-8"));
    let p = accept_text("the model said hello", &ctx, &mut h.store, &mut h.events);
    assert_eq!(code(&p), Some(Code::InvalidEnvelopeShape));
    let p = accept_text(
        r#"{"type":"error","type":"error"}"#,
        &ctx,
        &mut h.store,
        &mut h.events,
    );
    assert!(
        serde_json::to_string(&p.outcome)
            .unwrap()
            .contains("duplicateKey")
    );
}

#[test]
fn lenient_recovery_is_reported() {
    let mut h = H::new();
    let text = format!("Here you go:\n```json\n{}\n```\n", clar("c-fence"));
    let ctx = Context::new(&h.host, &h.redactor, "n", TS);
    let p = accept_text(&text, &ctx, &mut h.store, &mut h.events);
    assert!(p.outcome.is_accepted(), "{:?}", p.outcome);
    let r = p.recovery.expect("recovery reported");
    assert_ne!(r.path, openwop_protocol::pipeline::RecoveryPath::Direct);
    let p = accept_text(
        &clar("c-direct").to_string(),
        &ctx,
        &mut h.store,
        &mut h.events,
    );
    assert_eq!(p.recovery, None);
}

#[test]
fn bad_ts_names_iso8601() {
    let mut h = H::new();
    let mut v = clar("c");
    v["meta"]["ts"] = json!("tomorrow");
    let p = h.run(&v);
    let Outcome::Invalid(i) = &p.outcome else {
        panic!()
    };
    assert_eq!(i.code, Code::InvalidEnvelopeShape);
    assert!(
        i.details
            .iter()
            .any(|d| d.instance_path == "/meta/ts" && d.message.contains("ISO 8601"))
    );
}

#[test]
fn kind_gate_lists_allowed_kinds() {
    let mut h = H::new();
    h.host.supported_envelopes = Some(vec!["vendor.acme.prd.create".into()]);
    let p = h.run(&vendor("vendor.acme.unknown", "c"));
    let Outcome::Gated(g) = &p.outcome else {
        panic!("{:?}", p.outcome)
    };
    assert_eq!(
        (g.code, g.gate),
        (Code::UnknownEnvelopeKind, Gate::SupportedEnvelopes)
    );
    assert!(
        g.allowed_kinds
            .contains(&"clarification.request".to_owned())
    );
    assert!(
        g.allowed_kinds
            .contains(&"vendor.acme.prd.create".to_owned())
    );
    // The host-level gate projects exactly like the node gate: node.failed
    // with envelope_contract_violation, refusedType and acceptedTypes.
    assert_eq!(p.events.len(), 1, "{:?}", p.events);
    let e = &p.events[0];
    assert_eq!(e.event_type, EventType::NodeFailed);
    assert_eq!(e.payload["error"]["code"], "envelope_contract_violation");
    assert_eq!(
        e.payload["error"]["details"]["refusedType"],
        "vendor.acme.unknown"
    );
    assert_eq!(e.payload["error"]["details"]["gate"], "supported-envelopes");
    assert!(
        e.payload["error"]["details"]["acceptedTypes"]
            .as_array()
            .unwrap()
            .contains(&json!("vendor.acme.prd.create"))
    );
    assert_eq!(e.causation_id.as_deref(), Some("c"));
    // Universal kinds always pass.
    assert!(h.run(&clar("c2")).outcome.is_accepted());
}

#[test]
fn kind_gate_follows_the_contract_refusal_mode() {
    let mut h = H::new();
    h.host.supported_envelopes = Some(vec!["vendor.acme.prd.create".into()]);
    h.node_contract = Some(EnvelopeContract {
        accepts: vec!["vendor.acme.unknown".into()],
        refusal_mode: RefusalMode::DiscardAndWarn,
    });
    let p = h.run(&vendor("vendor.acme.unknown", "c"));
    assert_eq!(code(&p), Some(Code::UnknownEnvelopeKind));
    let types: Vec<_> = p.events.iter().map(|e| e.event_type).collect();
    assert_eq!(types, [EventType::LogAppended]);
}

#[test]
fn payload_schema_and_version_drift() {
    let mut h = H::new();
    let mut v = clar("c1");
    v["payload"] = json!({"questions": []});
    let p = h.run(&v);
    let Outcome::Invalid(i) = &p.outcome else {
        panic!()
    };
    assert_eq!(i.code, Code::EnvelopeInvalid);
    assert!(i.details[0].instance_path.starts_with("/payload"));

    let mut v = clar("c2");
    v["schemaVersion"] = json!(2);
    assert_eq!(code(&h.run(&v)), Some(Code::UnknownSchemaVersion));

    let mut v = clar("c3");
    v["schemaVersion"] = json!(0);
    let p = h.run(&v);
    let Outcome::Accepted(a) = &p.outcome else {
        panic!("{:?}", p.outcome)
    };
    assert_eq!(
        a.warnings[0].keyword.as_deref(),
        Some("envelope_schema_version_drift")
    );

    h.host.strictness = Strictness::Strict;
    let mut v = clar("c4");
    v["schemaVersion"] = json!(0);
    assert_eq!(code(&h.run(&v)), Some(Code::UnknownSchemaVersion));
}

#[test]
fn contract_gate_fail_node_and_discard() {
    let mut h = H::new();
    let contract = EnvelopeContract {
        accepts: vec!["vendor.x.foo.create".into()],
        refusal_mode: RefusalMode::FailNode,
    };
    let p = {
        h.node_contract = Some(contract.clone());
        let r = h.run(&vendor("vendor.x.bar.create", "c1"));
        h.node_contract = None;
        r
    };
    let Outcome::Gated(g) = &p.outcome else {
        panic!()
    };
    assert_eq!(
        (g.code, g.gate),
        (Code::EnvelopeContractViolation, Gate::NodeContract)
    );
    assert_eq!(p.events.len(), 1);
    let e = &p.events[0];
    assert_eq!(e.event_type, EventType::NodeFailed);
    assert_eq!(e.payload["error"]["code"], "envelope_contract_violation");
    assert_eq!(
        e.payload["error"]["details"]["refusedType"],
        "vendor.x.bar.create"
    );
    assert!(
        e.payload["error"]["details"]["acceptedTypes"]
            .as_array()
            .unwrap()
            .contains(&json!("vendor.x.foo.create"))
    );
    // Universal kinds pass any contract.
    assert!(
        {
            h.node_contract = Some(contract.clone());
            let r = h.run(&clar("c2"));
            h.node_contract = None;
            r
        }
        .outcome
        .is_accepted()
    );

    let warn = EnvelopeContract {
        refusal_mode: RefusalMode::DiscardAndWarn,
        ..contract.clone()
    };
    let p = {
        h.node_contract = Some(warn.clone());
        let r = h.run(&vendor("vendor.x.bar.create", "c3"));
        h.node_contract = None;
        r
    };
    assert_eq!(p.events[0].event_type, EventType::LogAppended);
    assert_eq!(p.events[0].payload["level"], "warn");

    // Host-level contract is checked before the node's.
    h.host.host_contract = Some(EnvelopeContract {
        accepts: vec![],
        refusal_mode: RefusalMode::FailNode,
    });
    let p = {
        h.node_contract = Some(contract.clone());
        let r = h.run(&vendor("vendor.x.foo.create", "c4"));
        h.node_contract = None;
        r
    };
    let Outcome::Gated(g) = &p.outcome else {
        panic!()
    };
    assert_eq!(g.gate, Gate::HostContract);
}

#[test]
fn limits_breach_with_cap_kind_and_events() {
    let mut h = H::new();
    let counters = Counters {
        clarification_rounds: Some(Counter { current: 2, cap: 2 }),
        ..Counters::default()
    };
    let p = h.run_with(&clar("c1"), |c| c.counters = counters);
    let Outcome::Breached(b) = &p.outcome else {
        panic!()
    };
    assert_eq!(b.cap_kind, EnvelopeCapKind::Clarification);
    assert!(
        b.message.contains("clarificationRounds limit 2"),
        "{}",
        b.message
    );
    let types: Vec<_> = p.events.iter().map(|e| e.event_type).collect();
    assert_eq!(types, [EventType::CapBreached, EventType::NodeFailed]);
    assert_eq!(p.events[1].payload["error"]["code"], "cap_breached");
    for e in &p.events {
        assert_eq!(
            schema::validate_event_payload(e.event_type.as_str(), &e.payload),
            Some(Ok(()))
        );
    }
    let counters = Counters {
        envelopes_per_turn: Some(Counter { current: 3, cap: 3 }),
        ..Counters::default()
    };
    let p = h.run_with(&vendor("vendor.a.b", "c2"), |c| c.counters = counters);
    let Outcome::Breached(b) = &p.outcome else {
        panic!()
    };
    assert_eq!(b.cap_kind, EnvelopeCapKind::Envelopes);
    assert!(b.message.contains("envelopesPerTurn limit 3"));
    // The suite reads the limit and its value from the breached outcome's reason.
    let wire = serde_json::to_value(&p.outcome).unwrap();
    assert_eq!(
        wire["reason"],
        "envelopesPerTurn limit 3 reached (observed 3)"
    );
    let counters = Counters {
        schema_rounds: Some(Counter { current: 1, cap: 4 }),
        ..Counters::default()
    };
    assert!(
        h.run_with(&clar("c3"), |c| c.counters = counters)
            .outcome
            .is_accepted()
    );
}

#[test]
fn trust_envelope_wins_and_untrusted_blocks_approval() {
    let mut h = H::new();
    let p = h.run_with(&clar("c1"), |c| {
        c.run_trust_boundary = Some(ContentTrust::Untrusted)
    });
    let Outcome::Accepted(a) = &p.outcome else {
        panic!()
    };
    assert_eq!(a.normalized_meta.content_trust, ContentTrust::Untrusted);
    assert!(
        p.events
            .iter()
            .all(|e| e.content_trust == Some(ContentTrust::Untrusted))
    );
    let mut v = clar("c2");
    v["meta"]["contentTrust"] = json!("trusted");
    let p = h.run_with(&v, |c| c.run_trust_boundary = Some(ContentTrust::Untrusted));
    let Outcome::Accepted(a) = &p.outcome else {
        panic!()
    };
    assert_eq!(a.normalized_meta.content_trust, ContentTrust::Trusted);

    let mut v = clar("c3");
    v["meta"]["contentTrust"] = json!("untrusted");
    let p = h.run_with(&v, |c| c.approval_gate_context = true);
    assert_eq!(code(&p), Some(Code::UntrustedContentBlocksApproval));
    // On the wire `reason` is the bare code; the sentence is in `message`.
    let wire = serde_json::to_value(&p.outcome).unwrap();
    assert_eq!(wire["reason"], "untrusted_content_blocks_approval");
    assert!(
        wire["message"]
            .as_str()
            .unwrap()
            .contains("cannot advance an approval gate"),
        "{wire}"
    );
}

#[test]
fn a_bad_meta_ts_is_refused_with_the_bare_code_and_names_iso_8601() {
    let mut h = H::new();
    let mut v = clar("c-ts");
    v["meta"]["ts"] = json!("yesterday");
    let wire = serde_json::to_value(&h.run(&v).outcome).unwrap();
    assert_eq!(wire["status"], "invalid");
    assert_eq!(wire["reason"], "invalid_envelope_shape");
    assert_eq!(wire["details"][0]["instancePath"], "/meta/ts");
    assert!(
        wire["details"][0]["message"]
            .as_str()
            .unwrap()
            .contains("ISO 8601"),
        "{wire}"
    );
}

#[test]
fn replay_returns_cached_outcome_and_conflict_is_refused() {
    let mut h = H::new();
    let first = h.run(&clar("c1"));
    let again = h.run(&clar("c1"));
    let (Outcome::Accepted(a), Outcome::Accepted(b)) = (&first.outcome, &again.outcome) else {
        panic!()
    };
    assert_eq!(a.envelope_id, b.envelope_id);
    assert_eq!(a.recorded_event_ids, b.recorded_event_ids);
    assert!(b.replayed && !a.replayed);
    assert!(again.events.is_empty());
    let mut other = vendor("vendor.a.b", "c1");
    other["envelopeId"] = json!("e2");
    assert_eq!(
        code(&h.run(&other)),
        Some(Code::EnvelopeCorrelationConflict)
    );

    // A cached gated outcome replays as gated even if the gate would now pass.
    let contract = EnvelopeContract {
        accepts: vec![],
        refusal_mode: RefusalMode::FailNode,
    };
    let g = {
        h.node_contract = Some(contract.clone());
        let r = h.run(&vendor("vendor.a.b", "c2"));
        h.node_contract = None;
        r
    };
    assert_eq!(g.outcome.status(), "gated");
    let r = h.run(&vendor("vendor.a.b", "c2"));
    let Outcome::Gated(gg) = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert!(gg.replayed);

    // Invalid outcomes are not cached: a corrected re-emission is accepted.
    let mut bad = clar("c3");
    bad["payload"] = json!({"questions": []});
    assert_eq!(code(&h.run(&bad)), Some(Code::EnvelopeInvalid));
    assert!(h.run(&clar("c3")).outcome.is_accepted());

    // The store survives serialisation (the worker persists it).
    let restored: DedupStore =
        serde_json::from_value(serde_json::to_value(&h.store).unwrap()).unwrap();
    assert_eq!(restored, h.store);
}

#[test]
fn order_earlier_step_wins() {
    let mut h = H::new();
    h.host.supported_envelopes = Some(vec![]);
    let contract = EnvelopeContract {
        accepts: vec![],
        refusal_mode: RefusalMode::FailNode,
    };
    let breach = Counters {
        envelopes_per_turn: Some(Counter { current: 9, cap: 1 }),
        ..Counters::default()
    };

    // shape + kind: shape wins.
    let mut v = vendor("vendor.not.advertised", "o1");
    v["meta"]["ts"] = json!("nope");
    assert_eq!(code(&h.run(&v)), Some(Code::InvalidEnvelopeShape));
    // kind + payload: kind wins.
    h.host.supported_envelopes = None;
    h.host.schema_versions.insert("vendor.v.k".into(), 1);
    h.host.supported_envelopes = Some(vec!["vendor.other".into()]);
    let mut v = vendor("vendor.v.k", "o2");
    v["schemaVersion"] = json!(5);
    assert_eq!(code(&h.run(&v)), Some(Code::UnknownEnvelopeKind));
    // payload + contract: payload wins.
    h.host.supported_envelopes = None;
    assert_eq!(
        code(&{
            h.node_contract = Some(contract.clone());
            let r = h.run(&v);
            h.node_contract = None;
            r
        }),
        Some(Code::UnknownSchemaVersion)
    );
    // contract + limits: contract wins.
    h.node_contract = Some(contract.clone());
    let p = h.run_with(&vendor("vendor.z", "o3"), |c| c.counters = breach);
    h.node_contract = None;
    assert_eq!(code(&p), Some(Code::EnvelopeContractViolation));
    // limits + trust: limits wins.
    let mut v = vendor("vendor.z", "o4");
    v["meta"]["contentTrust"] = json!("untrusted");
    let p = h.run_with(&v, |c| {
        c.counters = breach;
        c.approval_gate_context = true;
    });
    assert_eq!(code(&p), Some(Code::CapBreached));
    // trust + dedup conflict: trust wins.
    h.run(&clar("o5"));
    let mut v = vendor("vendor.z", "o5");
    v["meta"]["contentTrust"] = json!("untrusted");
    assert_eq!(
        code(&h.run_with(&v, |c| c.approval_gate_context = true)),
        Some(Code::UntrustedContentBlocksApproval)
    );
    assert_eq!(
        code(&h.run(&vendor("vendor.z", "o5"))),
        Some(Code::EnvelopeCorrelationConflict)
    );
}

#[test]
fn secrets_never_leave_the_pipeline() {
    let secret = "sk-live-0123456789abcdef";
    let mut h = H::new();
    h.redactor = Redactor::new([("openai-key".to_owned(), secret.to_owned())]);
    let mut v = clar("c1");
    v["payload"]["questions"][0]["question"] = json!(format!("use {secret}?"));
    v["payload"]["reasoning"] = json!(format!("the key is {secret}"));
    let p = h.run(&v);
    let Outcome::Accepted(a) = &p.outcome else {
        panic!()
    };
    assert_eq!(a.redaction_count, 2);
    let all = format!(
        "{}{}",
        serde_json::to_string(&p.outcome).unwrap(),
        serde_json::to_string(&p.events).unwrap()
    );
    assert!(!all.contains(secret));
    assert!(all.contains("[REDACTED:openai-key]"));

    // Refusals that quote a kind or a key are redacted too.
    h.host.supported_envelopes = Some(vec![]);
    let p = h.run(&vendor(&format!("vendor.{secret}"), "c2"));
    assert!(!serde_json::to_string(&p.outcome).unwrap().contains(secret));
    let mut v = clar("c3");
    v[secret] = json!(1);
    let p = h.run(&v);
    assert!(!serde_json::to_string(&p.outcome).unwrap().contains(secret));
}

#[test]
fn shape_step_agrees_with_the_envelope_schema() {
    let mut cases = vec![clar("a"), vendor("vendor.a.b", "b")];
    let mut v = clar("c");
    v["extra"] = json!(1);
    cases.push(v);
    let mut v = clar("d");
    v["meta"]["source"] = json!("robot");
    cases.push(v);
    let mut v = clar("e");
    v["partial"] = json!({"isPartial": true, "index": 0, "total": -1});
    cases.push(v);
    let mut v = clar("f");
    v.as_object_mut().unwrap().remove("correlationId");
    cases.push(v);
    for mut v in cases {
        // The schema describes the envelope after the engine assigned its id.
        v["envelopeId"] = json!("env-1");
        let mut h = H::new();
        let ours = h.run(&v).outcome.code() != Some(Code::InvalidEnvelopeShape);
        let theirs = schema::validate(schema::Document::AiEnvelope, &v).is_ok();
        assert_eq!(ours, theirs, "{v}");
    }
}
