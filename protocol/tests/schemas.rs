//! The embedded JSON Schemas: validity, identity, and positive/negative examples per document,
//! per envelope kind and per run-event type; plus the no-instance-values rule for messages.
//!
//! Why one file of this size: a table of cases per schema this host ships; each case is a few
//! lines and they are read side by side.

use openwop_protocol::schema::{
    self, Document, MAX_DEPTH, MAX_ISSUES, SCHEMA_ID_BASE, SchemaCompileError, ValidationIssue,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::HashSet;

fn issues(result: Result<(), Vec<ValidationIssue>>) -> Vec<ValidationIssue> {
    match result {
        Ok(()) => panic!("expected validation to fail"),
        Err(issues) => issues,
    }
}

/// Asserts the result failed with `keyword` at `path`, and returns that issue's message.
fn expect_issue(result: Result<(), Vec<ValidationIssue>>, keyword: &str, path: &str) -> String {
    let all = issues(result);
    all.iter()
        .find(|i| i.keyword == keyword && i.instance_path == path)
        .unwrap_or_else(|| panic!("no `{keyword}` issue at `{path}` in {all:#?}"))
        .message
        .clone()
}

fn ok(result: Result<(), Vec<ValidationIssue>>) {
    if let Err(issues) = result {
        panic!("expected valid, got {issues:#?}");
    }
}

// ---------------------------------------------------------------- the embedded set

#[test]
fn every_embedded_schema_is_valid_2020_12_with_a_stable_unique_id() {
    let all = schema::embedded_schemas();
    assert_eq!(
        all.len(),
        1 + 7 + 1 + schema::EVENT_TYPES.len() + 3,
        "envelope, 7 kinds, run event, every event type, capabilities, workflow, mock agent"
    );
    let mut ids = HashSet::new();
    for doc in all {
        assert_eq!(
            doc.value["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{}",
            doc.path
        );
        assert!(
            jsonschema::draft202012::meta::is_valid(&doc.value),
            "{} is not a valid 2020-12 schema",
            doc.path
        );
        assert_eq!(
            doc.id,
            format!("{SCHEMA_ID_BASE}{}", doc.path),
            "$id of {}",
            doc.path
        );
        assert!(ids.insert(doc.id.clone()), "duplicate $id {}", doc.id);
        assert!(
            doc.value["description"]
                .as_str()
                .is_some_and(|d| d.len() > 20),
            "{} needs a human description",
            doc.path
        );
        assert_eq!(
            serde_json::from_str::<Value>(doc.text).expect("text parses"),
            doc.value
        );
        assert_eq!(
            schema::embedded_schema_by_id(&doc.id).map(|d| d.path),
            Some(doc.path)
        );
    }
}

#[test]
fn every_validator_compiles_offline_from_the_embedded_set() {
    // Each call forces the cached validator; a $ref that did not resolve from the embedded
    // registry would fail compilation here (nothing is ever fetched).
    for doc in Document::ALL {
        let _ = schema::validate(doc, &json!({}));
        assert_eq!(
            doc.schema()["$id"],
            format!("{SCHEMA_ID_BASE}{}", doc.schema_path())
        );
    }
    for kind in schema::known_kinds() {
        assert!(
            schema::validate_kind_payload(kind, &json!({})).is_some(),
            "{kind}"
        );
    }
    for ty in schema::EVENT_TYPES {
        assert!(
            schema::validate_event_payload(ty, &json!({})).is_some(),
            "{ty}"
        );
        assert!(schema::event_payload_schema(ty).is_some(), "{ty}");
    }
}

#[test]
fn run_event_type_enum_lists_exactly_the_event_types_with_payload_schemas() {
    let listed: Vec<&str> = Document::RunEvent.schema()["properties"]["type"]["enum"]
        .as_array()
        .expect("enum")
        .iter()
        .map(|v| v.as_str().expect("string"))
        .collect();
    assert_eq!(listed, schema::EVENT_TYPES);
}

#[test]
fn kinds_catalog() {
    assert_eq!(
        schema::known_kinds(),
        [
            "clarification.request",
            "schema.request",
            "schema.response",
            "error",
            "media.image",
            "media.audio",
            "media.file"
        ]
    );
    for kind in schema::known_kinds() {
        assert_eq!(schema::kind_schema_version(kind), Some(1));
        let doc = schema::kind_payload_schema(kind).expect("schema");
        assert_eq!(
            doc["$id"],
            format!("{SCHEMA_ID_BASE}envelopes/{kind}.schema.json")
        );
        assert_eq!(
            doc["additionalProperties"], false,
            "{kind} payload is closed"
        );
    }
    assert_eq!(schema::kind_schema_version("vendor.acme.prd.create"), None);
    assert!(schema::kind_payload_schema("vendor.acme.prd.create").is_none());
    assert!(schema::validate_kind_payload("ui.a2ui-surface", &json!({})).is_none());
    assert!(schema::validate_event_payload("run.annotated", &json!({})).is_none());
}

// ---------------------------------------------------------------- AI envelope

fn envelope() -> Value {
    json!({
        "type": "clarification.request",
        "envelopeId": "env-1",
        "correlationId": "run-1:n1:0:abc",
        "schemaVersion": 1,
        "nodeId": "n1",
        "payload": {"questions": [{"id": "q1", "question": "Which region?"}]},
        "meta": {
            "source": "ai-generation",
            "ts": "2026-05-01T12:00:00Z",
            "contentTrust": "trusted",
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "label": "Draft #2",
            "rendering": {"display": "markdown", "title": "Q"}
        },
        "partial": {"isPartial": true, "index": 0, "total": -1}
    })
}

#[test]
fn envelope_valid_examples() {
    ok(schema::validate(Document::AiEnvelope, &envelope()));
    let minimal = json!({
        "type": "error", "envelopeId": "e", "correlationId": "c",
        "payload": "any JSON value is allowed at this level",
        "meta": {"source": "system", "ts": "2026-05-01T12:00:00.123+00:00"}
    });
    ok(schema::validate(Document::AiEnvelope, &minimal));
}

#[test]
fn envelope_top_level_and_meta_are_closed() {
    let mut doc = envelope();
    doc["foo"] = json!(1);
    let msg = expect_issue(
        schema::validate(Document::AiEnvelope, &doc),
        "additionalProperties",
        "",
    );
    assert!(msg.starts_with("property \"foo\" is not allowed"), "{msg}");

    let mut doc = envelope();
    doc["meta"]["vendor"] = json!({});
    expect_issue(
        schema::validate(Document::AiEnvelope, &doc),
        "additionalProperties",
        "/meta",
    );

    let mut doc = envelope();
    doc["meta"]["rendering"]["colour"] = json!("red");
    expect_issue(
        schema::validate(Document::AiEnvelope, &doc),
        "additionalProperties",
        "/meta/rendering",
    );
}

#[test]
fn envelope_field_rules() {
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "/type",
            json!(""),
            "minLength",
            "must be at least 1 character long",
        ),
        (
            "/type",
            json!("x".repeat(257)),
            "maxLength",
            "must be at most 256 characters long",
        ),
        (
            "/envelopeId",
            json!("x".repeat(129)),
            "maxLength",
            "must be at most 128 characters long",
        ),
        (
            "/correlationId",
            json!(7),
            "type",
            "expected type string, found integer",
        ),
        ("/schemaVersion", json!(-1), "minimum", "must be at least 0"),
        (
            "/schemaVersion",
            json!(1.5),
            "type",
            "expected type integer, found number",
        ),
        (
            "/meta/source",
            json!("model"),
            "enum",
            "must be one of: ai-generation, user, system",
        ),
        (
            "/meta/ts",
            json!("yesterday"),
            "format",
            "must be a valid date-time",
        ),
        (
            "/meta/contentTrust",
            json!("maybe"),
            "enum",
            "must be one of: trusted, untrusted",
        ),
        (
            "/meta/label",
            json!("l".repeat(257)),
            "maxLength",
            "must be at most 256",
        ),
        (
            "/meta/rendering/display",
            json!("video"),
            "enum",
            "must be one of: markdown, code, card, image, audio, file",
        ),
        (
            "/partial/total",
            json!(-2),
            "minimum",
            "must be at least -1",
        ),
        ("/partial/index", json!(-1), "minimum", "must be at least 0"),
    ];
    for (pointer, value, keyword, message) in cases {
        let mut doc = envelope();
        *doc.pointer_mut(pointer).expect(pointer) = value;
        let msg = expect_issue(
            schema::validate(Document::AiEnvelope, &doc),
            keyword,
            pointer,
        );
        assert!(msg.starts_with(message), "{pointer}: {msg}");
    }
}

#[test]
fn envelope_required_fields() {
    for field in ["type", "envelopeId", "correlationId", "payload", "meta"] {
        let mut doc = envelope();
        doc.as_object_mut().expect("object").remove(field);
        let msg = expect_issue(schema::validate(Document::AiEnvelope, &doc), "required", "");
        assert_eq!(msg, format!("missing required property \"{field}\""));
    }
    for field in ["source", "ts"] {
        let mut doc = envelope();
        doc["meta"].as_object_mut().expect("object").remove(field);
        expect_issue(
            schema::validate(Document::AiEnvelope, &doc),
            "required",
            "/meta",
        );
    }
    let mut doc = envelope();
    doc["partial"] = json!({"isPartial": false});
    expect_issue(
        schema::validate(Document::AiEnvelope, &doc),
        "required",
        "/partial",
    );
}

#[test]
fn envelope_meta_ts_must_be_rfc3339() {
    for bad in [
        "2026-05-01",
        "2026-05-01 12:00:00Z",
        "2026-13-01T00:00:00Z",
        "1714564800",
    ] {
        let mut doc = envelope();
        doc["meta"]["ts"] = json!(bad);
        expect_issue(
            schema::validate(Document::AiEnvelope, &doc),
            "format",
            "/meta/ts",
        );
    }
}

// ---------------------------------------------------------------- universal and media kinds

#[test]
fn clarification_request_payload() {
    let kind = "clarification.request";
    ok(
        schema::validate_kind_payload(kind, &json!({"questions": [{"id": "q", "question": "?"}]}))
            .expect("kind"),
    );
    ok(schema::validate_kind_payload(
        kind,
        &json!({
            "reasoning": "I need the region first.",
            "questions": [{"id": "q", "question": "Region?", "schema": {"enum": ["eu", "us"]}, "context": {"hint": 1}}],
            "contextType": "form-field"
        }),
    )
    .expect("kind"));
    let msg = expect_issue(
        schema::validate_kind_payload(kind, &json!({})).expect("kind"),
        "required",
        "",
    );
    assert_eq!(msg, "missing required property \"questions\"");
    let msg = expect_issue(
        schema::validate_kind_payload(kind, &json!({"questions": []})).expect("kind"),
        "minItems",
        "/questions",
    );
    assert_eq!(msg, "must have at least 1 item");
    expect_issue(
        schema::validate_kind_payload(kind, &json!({"questions": [{"id": "q"}]})).expect("kind"),
        "required",
        "/questions/0",
    );
    expect_issue(
        schema::validate_kind_payload(
            kind,
            &json!({"questions": [{"id": "q", "question": "?", "extra": 1}]}),
        )
        .expect("kind"),
        "additionalProperties",
        "/questions/0",
    );
    expect_issue(
        schema::validate_kind_payload(
            kind,
            &json!({"questions": [{"id": "q", "question": "?"}], "reasoning": 3}),
        )
        .expect("kind"),
        "type",
        "/reasoning",
    );
}

#[test]
fn schema_request_and_response_payloads() {
    ok(schema::validate_kind_payload(
        "schema.request",
        &json!({"envelopeType": "vendor.a.b", "reason": "unsure", "reasoning": "r"}),
    )
    .expect("kind"));
    expect_issue(
        schema::validate_kind_payload("schema.request", &json!({"reason": "x"})).expect("kind"),
        "required",
        "",
    );
    expect_issue(
        schema::validate_kind_payload(
            "schema.request",
            &json!({"envelopeType": "k", "reason": "r".repeat(1025)}),
        )
        .expect("kind"),
        "maxLength",
        "/reason",
    );

    ok(schema::validate_kind_payload(
        "schema.response",
        &json!({"envelopeType": "k", "ack": true}),
    )
    .expect("kind"));
    let msg = expect_issue(
        schema::validate_kind_payload(
            "schema.response",
            &json!({"envelopeType": "k", "ack": false}),
        )
        .expect("kind"),
        "const",
        "/ack",
    );
    assert_eq!(msg, "must be exactly true");
    // schema.response carries no reasoning.
    let msg = expect_issue(
        schema::validate_kind_payload(
            "schema.response",
            &json!({"envelopeType": "k", "ack": true, "reasoning": "r"}),
        )
        .expect("kind"),
        "additionalProperties",
        "",
    );
    assert!(msg.contains("\"reasoning\""), "{msg}");
}

#[test]
fn error_payload() {
    ok(schema::validate_kind_payload("error", &json!({"code": "validation_failed", "message": "could not", "details": {"a": 1}, "reasoning": "r"})).expect("kind"));
    expect_issue(
        schema::validate_kind_payload("error", &json!({"code": "c"})).expect("kind"),
        "required",
        "",
    );
    expect_issue(
        schema::validate_kind_payload("error", &json!({"code": "", "message": "m"})).expect("kind"),
        "minLength",
        "/code",
    );
    expect_issue(
        schema::validate_kind_payload(
            "error",
            &json!({"code": "c", "message": "m", "details": []}),
        )
        .expect("kind"),
        "type",
        "/details",
    );
}

#[test]
fn media_payloads() {
    for kind in ["media.image", "media.audio", "media.file"] {
        ok(schema::validate_kind_payload(
            kind,
            &json!({"url": "https://assets.example/t/abc", "bytes": 10, "mimeType": "x/y", "alt": "a"}),
        )
        .expect("kind"));
        ok(
            schema::validate_kind_payload(kind, &json!({"base64": "AAEC", "bytes": 3}))
                .expect("kind"),
        );
        expect_issue(
            schema::validate_kind_payload(kind, &json!({"url": "https://x"})).expect("kind"),
            "required",
            "",
        );
        expect_issue(
            schema::validate_kind_payload(kind, &json!({"bytes": -1})).expect("kind"),
            "minimum",
            "/bytes",
        );
        expect_issue(
            schema::validate_kind_payload(kind, &json!({"bytes": 1, "url": "not a uri"}))
                .expect("kind"),
            "format",
            "/url",
        );
        expect_issue(
            schema::validate_kind_payload(kind, &json!({"bytes": 1, "reasoning": "r"}))
                .expect("kind"),
            "additionalProperties",
            "",
        );
    }
    ok(
        schema::validate_kind_payload("media.audio", &json!({"bytes": 1, "durationSeconds": 2.5}))
            .expect("kind"),
    );
    ok(
        schema::validate_kind_payload("media.file", &json!({"bytes": 1, "name": "q3.pdf"}))
            .expect("kind"),
    );
    expect_issue(
        schema::validate_kind_payload("media.image", &json!({"bytes": 1, "name": "x.png"}))
            .expect("kind"),
        "additionalProperties",
        "",
    );
}

// ---------------------------------------------------------------- run events

/// (type, valid payload, invalid payload, failing keyword, failing pointer)
fn event_cases() -> Vec<(&'static str, Value, Value, &'static str, &'static str)> {
    let err = json!({"code": "envelope_invalid", "message": "payload did not validate"});
    vec![
        (
            "run.started",
            json!({"workflowId": "wf", "inputs": {}, "transport": "rest"}),
            json!({"transport": "rest"}),
            "required",
            "",
        ),
        (
            "run.completed",
            json!({"outputs": {"a": 1}, "durationMs": 5}),
            json!({"durationMs": -5}),
            "minimum",
            "/durationMs",
        ),
        (
            "run.failed",
            json!({"error": err, "failedNodeId": "n1"}),
            json!({"error": {"code": "x"}}),
            "required",
            "/error",
        ),
        (
            "run.cancelled",
            json!({"reason": "user", "cancelledBy": "system"}),
            json!({"reason": 1}),
            "type",
            "/reason",
        ),
        (
            "run.resumed",
            json!({"fromStatus": "waiting-input", "interruptId": "i1"}),
            json!({"fromStatus": "running"}),
            "enum",
            "/fromStatus",
        ),
        (
            "run.paused",
            json!({"reason": "maintenance", "drainPolicy": "immediate", "pausedAt": "2026-05-01T12:00:00Z"}),
            json!({"drainPolicy": "later"}),
            "enum",
            "/drainPolicy",
        ),
        (
            "node.started",
            json!({"nodeId": "n1", "typeId": "core.ai.callPrompt", "attempt": 0}),
            json!({"nodeId": "n1"}),
            "required",
            "",
        ),
        (
            "node.completed",
            json!({"nodeId": "n1", "outputs": {}}),
            json!({"nodeId": ""}),
            "minLength",
            "/nodeId",
        ),
        (
            "node.failed",
            json!({"nodeId": "n1", "error": err, "attempts": 3}),
            json!({"nodeId": "n1", "error": err, "attempts": 0}),
            "minimum",
            "/attempts",
        ),
        (
            "node.suspended",
            json!({"nodeId": "n1", "interruptId": "i1", "kind": "approval", "reason": "low-confidence", "agentId": "agent-a", "threshold": 0.7, "observed": 0.5}),
            json!({"nodeId": "n1", "interruptId": "i1", "observed": 1.5}),
            "maximum",
            "/observed",
        ),
        (
            "node.resumed",
            json!({"nodeId": "n1", "interruptId": "i1", "resumeValue": {"ok": true}}),
            json!({}),
            "required",
            "",
        ),
        (
            "node.skipped",
            json!({"nodeId": "n1", "reason": "trigger-rule-not-met"}),
            json!({"nodeId": "", "reason": "disabled"}),
            "minLength",
            "/nodeId",
        ),
        (
            "variable.changed",
            json!({"name": "verdict", "previous": "pending", "next": "high", "nodeId": "n1"}),
            json!({"next": 1}),
            "required",
            "",
        ),
        (
            "node.dispatched",
            json!({"nodeId": "n1", "childWorkflowId": "child", "childRunName": "r-c0123456789", "inputs": {"a": 1}}),
            json!({"nodeId": "n1", "inputs": []}),
            "type",
            "/inputs",
        ),
        (
            "clarification.requested",
            json!({"nodeId": "n1", "interruptId": "i1", "questions": [{"id": "q", "question": "?"}]}),
            json!({"nodeId": "n1", "questions": []}),
            "minItems",
            "/questions",
        ),
        (
            "clarification.resolved",
            json!({"nodeId": "n1", "answers": {"q": "eu"}}),
            json!({"nodeId": "n1", "answers": []}),
            "type",
            "/answers",
        ),
        (
            "interrupt.requested",
            json!({"nodeId": "n1", "interruptId": "i1", "kind": "clarification", "data": {}}),
            json!({"interruptId": "i1", "kind": "question"}),
            "enum",
            "/kind",
        ),
        (
            "interrupt.resolved",
            json!({"nodeId": "n1", "interruptId": "i1", "kind": "approval"}),
            json!({"nodeId": "n1"}),
            "required",
            "",
        ),
        (
            "approval.requested",
            json!({"nodeId": "n1", "artifactId": "a", "artifactType": "decision", "actions": ["accept", "reject"]}),
            json!({"nodeId": "n1", "artifactId": "a", "artifactType": "d", "actions": ["maybe"]}),
            "enum",
            "/actions/0",
        ),
        (
            "approval.granted",
            json!({"gateId": "g", "principal": "p", "quorumProgress": {"granted": 1, "required": 2}}),
            json!({"gateId": "g", "principal": "p", "extra": 1}),
            "additionalProperties",
            "",
        ),
        (
            "approval.rejected",
            json!({"gateId": "g", "principal": "p", "reason": "no"}),
            json!({"gateId": "g"}),
            "required",
            "",
        ),
        (
            "approval.received",
            json!({"nodeId": "n1", "interruptId": "i1", "action": "accept", "decidedBy": "alice", "decidedAt": "2026-05-18T10:00:00Z"}),
            json!({"nodeId": "n1", "action": "approve"}),
            "enum",
            "/action",
        ),
        (
            "log.appended",
            json!({"level": "error", "message": "model reported an error", "nodeId": "n1", "fields": {"code": "x"}}),
            json!({"level": "trace", "message": "m"}),
            "enum",
            "/level",
        ),
        (
            "cap.breached",
            json!({"kind": "schema", "limit": 3, "observed": 4, "nodeId": "n1"}),
            json!({"kind": "tokens", "limit": 1, "observed": 2}),
            "enum",
            "/kind",
        ),
        (
            "prompt.composed",
            json!({"nodeId": "n1", "refs": ["prompt:writer@1.0.0"], "kind": "system+user", "hash": format!("sha256:{}", "a".repeat(64))}),
            json!({"nodeId": "n1", "refs": [], "kind": "system+user", "hash": "md5:abc"}),
            "pattern",
            "/hash",
        ),
        (
            "provider.usage",
            json!({"provider": "anthropic", "model": "m", "inputTokens": 10, "outputTokens": 5, "totalTokens": 15}),
            json!({"provider": "anthropic", "model": "m", "inputTokens": 10}),
            "required",
            "",
        ),
        (
            "agent.reasoned",
            json!({"agentId": "agent-a", "reasoning": "because", "verbosity": "summary"}),
            json!({"agentId": "ab", "reasoning": "r"}),
            "minLength",
            "/agentId",
        ),
        (
            "agent.reasoning.delta",
            json!({"agentId": "agent-a", "delta": "be", "sequence": 0}),
            json!({"agentId": "agent-a", "delta": "be", "sequence": -1}),
            "minimum",
            "/sequence",
        ),
        (
            "agent.toolCalled",
            json!({"agentId": "agent-a", "toolName": "search", "callId": "c1", "inputs": {"q": "x"}}),
            json!({"agentId": "agent-a", "toolName": "search"}),
            "required",
            "",
        ),
        (
            "agent.toolReturned",
            json!({"agentId": "agent-a", "toolName": "search", "callId": "c1", "outcome": [1], "status": "ok", "durationMs": 3}),
            json!({"agentId": "agent-a", "toolName": "search", "callId": "c1", "status": "done"}),
            "enum",
            "/status",
        ),
        (
            "agent.handoff",
            json!({"fromAgentId": "agent-a", "toAgentId": "agent-b", "reason": "specialist"}),
            json!({"fromAgentId": "agent-a", "toAgentId": "x".repeat(257)}),
            "maxLength",
            "/toAgentId",
        ),
        (
            "agent.decided",
            json!({"agentId": "agent-a", "decision": {"next": "b"}, "confidence": 0.92}),
            json!({"agentId": "agent-a", "decision": 1, "confidence": -0.1}),
            "minimum",
            "/confidence",
        ),
        (
            "envelope.retry.attempted",
            json!({"nodeId": "n1", "attempt": 2, "reason": "schema-violation", "previousError": "missing required property \"steps\""}),
            json!({"nodeId": "n1", "attempt": 1, "reason": "truncation"}),
            "minimum",
            "/attempt",
        ),
        (
            "envelope.retry.exhausted",
            json!({"nodeId": "n1", "totalAttempts": 3, "finalReason": "x-host-k8s-budget", "finalError": null}),
            json!({"nodeId": "n1", "totalAttempts": 0, "finalReason": "truncation"}),
            "minimum",
            "/totalAttempts",
        ),
        (
            "envelope.refusal",
            json!({"nodeId": "n1", "provider": "openai", "model": "m", "refusalText": null, "safetyCategory": "policy"}),
            json!({"nodeId": "n1", "provider": "openai", "model": "m", "prompt": "x"}),
            "additionalProperties",
            "",
        ),
        (
            "envelope.truncated",
            json!({"nodeId": "n1", "provider": "openai", "model": "m", "stopReason": "max_tokens", "partialPayloadAvailable": true, "outputTokenCount": 1024}),
            json!({"nodeId": "n1", "provider": "openai", "model": "m", "stopReason": "MAX_TOKENS"}),
            "enum",
            "/stopReason",
        ),
        (
            "envelope.nlToFormat.engaged",
            json!({"nodeId": "n1", "originalEnvelopeType": "vendor.a.b", "fallbackCalls": 1}),
            json!({"nodeId": "n1", "originalEnvelopeType": "k", "fallbackCalls": 0}),
            "minimum",
            "/fallbackCalls",
        ),
        (
            "envelope.recovery.applied",
            json!({"nodeId": "n1", "path": "markdown-fence", "byteOffset": 12}),
            json!({"nodeId": "n1", "path": "regex"}),
            "enum",
            "/path",
        ),
        (
            "replay.diverged",
            json!({"sourceRunId": "r0", "atSequence": 4, "divergenceKind": "output", "divergencePoint": "prompt.composed"}),
            json!({"sourceRunId": "r0", "atSequence": 4, "divergenceKind": "other"}),
            "enum",
            "/divergenceKind",
        ),
    ]
}

fn run_event(ty: &str, payload: Value) -> Value {
    json!({
        "eventId": "ev-1", "runId": "run-1", "type": ty, "payload": payload,
        "timestamp": "2026-05-01T12:00:00Z", "sequence": 0,
        "nodeId": "n1", "schemaVersion": 1, "engineVersion": "0.1.0",
        "causationId": "run-1:n1:0:abc", "contentTrust": "trusted"
    })
}

#[test]
fn every_event_type_has_a_valid_and_an_invalid_example() {
    let cases = event_cases();
    let covered: Vec<&str> = cases.iter().map(|c| c.0).collect();
    assert_eq!(
        covered,
        schema::EVENT_TYPES,
        "one case per emitted event type, in order"
    );
    for (ty, valid, invalid, keyword, pointer) in cases {
        ok(schema::validate_event_payload(ty, &valid).expect(ty));
        ok(schema::validate(Document::RunEvent, &run_event(ty, valid)));
        expect_issue(
            schema::validate_event_payload(ty, &invalid).expect(ty),
            keyword,
            pointer,
        );
        // The whole-document validator checks the payload against the type's schema too.
        expect_issue(
            schema::validate(Document::RunEvent, &run_event(ty, invalid)),
            keyword,
            &format!("/payload{pointer}"),
        );
    }
}

#[test]
fn retry_reasons_accept_reserved_values_and_host_extensions_only() {
    for reason in [
        "schema-violation",
        "truncation",
        "type-drift",
        "type-mismatch",
        "refusal",
        "parse-error",
        "unknown",
        "x-host-acme-budget-cut",
    ] {
        ok(schema::validate_event_payload(
            "envelope.retry.attempted",
            &json!({"nodeId": "n", "attempt": 16, "reason": reason}),
        )
        .expect("type"));
    }
    for reason in ["x-host-Acme-budget", "x-host-acme", "timeout", ""] {
        expect_issue(
            schema::validate_event_payload(
                "envelope.retry.attempted",
                &json!({"nodeId": "n", "attempt": 2, "reason": reason}),
            )
            .expect("type"),
            "anyOf",
            "/reason",
        );
    }
    expect_issue(
        schema::validate_event_payload(
            "envelope.retry.attempted",
            &json!({"nodeId": "n", "attempt": 17, "reason": "unknown"}),
        )
        .expect("type"),
        "maximum",
        "/attempt",
    );
}

#[test]
fn run_event_document_rules() {
    let good = run_event(
        "log.appended",
        json!({"level": "debug", "message": "schema.request"}),
    );
    ok(schema::validate(Document::RunEvent, &good));
    let cases: Vec<(&str, Value, &str)> = vec![
        ("/type", json!("run.annotated"), "enum"),
        ("/sequence", json!(-1), "minimum"),
        ("/timestamp", json!("now"), "format"),
        ("/eventId", json!(""), "minLength"),
        ("/eventId", json!("e".repeat(129)), "maxLength"),
        ("/contentTrust", json!("unknown"), "enum"),
    ];
    for (pointer, value, keyword) in cases {
        let mut doc = good.clone();
        *doc.pointer_mut(pointer).expect(pointer) = value;
        expect_issue(schema::validate(Document::RunEvent, &doc), keyword, pointer);
    }
    for field in [
        "eventId",
        "runId",
        "type",
        "payload",
        "timestamp",
        "sequence",
    ] {
        let mut doc = good.clone();
        doc.as_object_mut().expect("object").remove(field);
        expect_issue(schema::validate(Document::RunEvent, &doc), "required", "");
    }
    let mut doc = good;
    doc["correlationId"] = json!("x");
    expect_issue(
        schema::validate(Document::RunEvent, &doc),
        "additionalProperties",
        "",
    );
}

// ---------------------------------------------------------------- capabilities

fn capabilities() -> Value {
    let families = json!({
        "envelopeStrictness": "warn",
        "envelopeContracts": {"advertised": true},
        "envelopes": {
            "reasoning": {"supported": true, "promptDirective": "advisory"},
            "tierOneSubsetCompliance": "warn",
            "reliability": {
                "supported": true,
                "events": ["envelope.retry.attempted", "envelope.retry.exhausted", "envelope.refusal", "envelope.truncated", "envelope.recovery.applied"],
                "maxRetryAttempts": 3,
                "completion": {"distinguishesTruncation": true, "truncationBudgetMultiplier": 2}
            }
        },
        "conformance": {"mockAgent": false},
        "agents": {"supported": true, "reasoning": {"verbosity": "summary", "streaming": true}},
        "secrets": {"supported": true, "scopes": ["tenant"]},
        "aiProviders": {"supported": ["openai", "anthropic", "gemini"], "maxInlineMediaBytes": 262144},
        "fixtures": [],
        "supportedTransports": ["rest"],
        "implementation": {"name": "openwop-operator", "version": "0.1.0"}
    });
    let mut doc = json!({
        "protocolVersion": "1.0",
        "protocolVersions": ["1.0"],
        "preferredVersion": "1.0",
        "supportedEnvelopes": schema::known_kinds(),
        "schemaVersions": {"clarification.request": 1, "schema.request": 1, "schema.response": 1, "error": 1},
        "limits": {"clarificationRounds": 3, "schemaRounds": 3, "envelopesPerTurn": 32, "maxNodeExecutions": 1000}
    });
    for (k, v) in families.as_object().expect("object") {
        doc[k] = v.clone();
    }
    doc["capabilities"] = families;
    doc
}

#[test]
fn capabilities_example() {
    ok(schema::validate(Document::Capabilities, &capabilities()));
    for field in [
        "protocolVersion",
        "supportedEnvelopes",
        "schemaVersions",
        "limits",
    ] {
        let mut doc = capabilities();
        doc.as_object_mut().expect("object").remove(field);
        expect_issue(
            schema::validate(Document::Capabilities, &doc),
            "required",
            "",
        );
    }
    let cases: Vec<(&str, Value, &str)> = vec![
        ("/limits/schemaRounds", json!(-1), "minimum"),
        ("/schemaVersions/error", json!("1"), "type"),
        ("/envelopeStrictness", json!("lenient"), "enum"),
        (
            "/envelopes/reliability/maxRetryAttempts",
            json!(17),
            "maximum",
        ),
        (
            "/envelopes/reliability/completion/truncationBudgetMultiplier",
            json!(9),
            "maximum",
        ),
        ("/envelopes/tierOneSubsetCompliance", json!("yes"), "enum"),
        (
            "/capabilities/envelopes/reasoning/promptDirective",
            json!("always"),
            "enum",
        ),
        ("/protocolVersion", json!("2.0.0"), "pattern"),
        ("/protocolVersion", json!("1.1.1"), "pattern"),
        ("/protocolVersion", json!("2.0"), "pattern"),
        ("/protocolVersions/0", json!("1.01"), "pattern"),
        ("/preferredVersion", json!("1.0.0"), "pattern"),
    ];
    for (pointer, value, keyword) in cases {
        let mut doc = capabilities();
        *doc.pointer_mut(pointer).expect(pointer) = value;
        expect_issue(
            schema::validate(Document::Capabilities, &doc),
            keyword,
            pointer,
        );
    }
    let mut doc = capabilities();
    doc["limits"]
        .as_object_mut()
        .expect("object")
        .remove("envelopesPerTurn");
    expect_issue(
        schema::validate(Document::Capabilities, &doc),
        "required",
        "/limits",
    );
}

// ---------------------------------------------------------------- workflow definition

fn workflow() -> Value {
    json!({
        "id": "conformance-mock-agent",
        "name": "Mock agent",
        "version": "1.0.0",
        "nodes": [
            {
                "id": "ask",
                "typeId": "core.ai.callPrompt",
                "name": "Ask",
                "config": {"prompt": "Summarise"},
                "inputs": {
                    "topic": {"type": "variable", "variableName": "topic"},
                    "style": {"type": "static", "value": {"tone": "dry"}},
                    "n": {"type": "expression", "expression": "inputs.n + 1"}
                },
                "agent": {"agentId": "agent-writer"},
                "envelopeContract": {
                    "accepts": ["vendor.acme.summary"],
                    "refusalMode": "fail-node",
                    "schemas": {"vendor.acme.summary": {"type": "object", "additionalProperties": false, "required": ["text"], "properties": {"text": {"type": "string"}}}}
                },
                "settings": {"timeout": 60000, "maxRetries": 1}
            },
            {
                "id": "mock",
                "typeId": "core.conformance.mock-agent",
                "config": {"mockConfidence": 0.5},
                "inputs": {"summary": {"type": "connection", "nodeId": "ask", "outputKey": "output", "optional": true}}
            }
        ],
        "edges": [{
            "id": "e1", "sourceNodeId": "ask", "targetNodeId": "mock",
            "condition": {"type": "truthy", "left": "output.ok"}, "triggerRule": "all_success"
        }],
        "variables": [{"name": "topic", "type": "string", "required": true, "sensitive": false}],
        "settings": {"timeout": 600000, "maxRetries": 2, "logLevel": "info"},
        "outputSchema": {"type": "object"}
    })
}

#[test]
fn workflow_definition_example() {
    ok(schema::validate(Document::WorkflowDefinition, &workflow()));
    ok(schema::validate(
        Document::WorkflowDefinition,
        &json!({"id": "w", "nodes": [{"id": "a", "typeId": "core.identity"}]}),
    ));
    let cases: Vec<(&str, Value, &str)> = vec![
        ("/id", json!("Bad Id"), "pattern"),
        ("/nodes", json!([]), "minItems"),
        ("/nodes/0/typeId", json!("Core.Thing"), "pattern"),
        (
            "/nodes/0/inputs/topic",
            json!({"type": "variable"}),
            "anyOf",
        ),
        (
            "/nodes/0/inputs/style",
            json!({"type": "file", "value": 1}),
            "anyOf",
        ),
        ("/nodes/0/agent/agentId", json!("ab"), "minLength"),
        (
            "/nodes/0/envelopeContract/refusalMode",
            json!("ignore"),
            "enum",
        ),
        ("/edges/0/triggerRule", json!("sometimes"), "enum"),
        ("/edges/0/condition/type", json!("greater"), "enum"),
        ("/variables/0/type", json!("date"), "enum"),
        ("/settings/timeout", json!(-1), "minimum"),
    ];
    for (pointer, value, keyword) in cases {
        let mut doc = workflow();
        *doc.pointer_mut(pointer).expect(pointer) = value;
        expect_issue(
            schema::validate(Document::WorkflowDefinition, &doc),
            keyword,
            pointer,
        );
    }
    let mut doc = workflow();
    doc["nodes"][0]["colour"] = json!("red");
    let msg = expect_issue(
        schema::validate(Document::WorkflowDefinition, &doc),
        "additionalProperties",
        "/nodes/0",
    );
    assert!(msg.contains("\"colour\""), "{msg}");
    let mut doc = workflow();
    doc["settings"]["retries"] = json!(1);
    expect_issue(
        schema::validate(Document::WorkflowDefinition, &doc),
        "additionalProperties",
        "/settings",
    );
}

// ---------------------------------------------------------------- mock agent config

#[test]
fn mock_agent_config_examples() {
    let valid = [
        json!({}),
        json!({"mockConfidence": 0.5}),
        json!({"agentId": "agent-mock", "mockReasoning": true}),
        json!({
            "mockReasoning": {"summary": "Considered three options.", "trace": "t", "tokenCount": 42, "streamChunks": ["a", "b"]},
            "mockToolCalls": [
                {"toolId": "openwop.search.web", "arguments": {"q": "x"}, "result": ["hit"], "durationMs": 12},
                {"toolId": "t2", "error": {"error": "tool_failed", "message": "boom"}}
            ],
            "mockHandoff": {"toAgentId": "agent-b", "reason": "specialist", "context": {"k": 1}},
            "mockDecision": {"decision": {"next": "summarize"}, "confidence": 0.92, "reasoning": "clear"}
        }),
    ];
    for doc in valid {
        ok(schema::validate(Document::MockAgentConfig, &doc));
    }
}

#[test]
fn mock_agent_config_is_closed_and_checked() {
    let msg = expect_issue(
        schema::validate(
            Document::MockAgentConfig,
            &json!({"mockConfidence": 0.5, "mockTemperature": 1}),
        ),
        "additionalProperties",
        "",
    );
    assert!(msg.contains("\"mockTemperature\""), "{msg}");
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"mockConfidence": 1.2}), "maximum", "/mockConfidence"),
        (json!({"mockReasoning": "yes"}), "anyOf", "/mockReasoning"),
        (
            json!({"mockReasoning": {"trace": "t"}}),
            "anyOf",
            "/mockReasoning",
        ),
        (
            json!({"mockToolCalls": [{"toolId": "t"}]}),
            "anyOf",
            "/mockToolCalls/0",
        ),
        (
            json!({"mockToolCalls": [{"toolId": "t", "result": 1, "error": {"error": "e", "message": "m"}}]}),
            "not",
            "/mockToolCalls/0",
        ),
        (
            json!({"mockToolCalls": [{"toolId": "t", "result": 1, "args": {}}]}),
            "additionalProperties",
            "/mockToolCalls/0",
        ),
        (
            json!({"mockHandoff": {"reason": "r"}}),
            "required",
            "/mockHandoff",
        ),
        (
            json!({"mockHandoff": {"toAgentId": "b"}}),
            "minLength",
            "/mockHandoff/toAgentId",
        ),
        (
            json!({"mockDecision": {"confidence": 0.2}}),
            "required",
            "/mockDecision",
        ),
        (
            json!({"mockDecision": {"decision": 1, "why": "x"}}),
            "additionalProperties",
            "/mockDecision",
        ),
        (json!({"agentId": "ab"}), "minLength", "/agentId"),
    ];
    for (doc, keyword, pointer) in cases {
        expect_issue(
            schema::validate(Document::MockAgentConfig, &doc),
            keyword,
            pointer,
        );
    }
}

// ---------------------------------------------------------------- user-supplied schemas

#[test]
fn compile_user_schema_validates_with_the_same_issue_shape() {
    let compiled = schema::compile(&json!({
        "type": "object", "required": ["steps"], "additionalProperties": false,
        "properties": {"steps": {"type": "array", "items": {"type": "string"}}, "at": {"type": "string", "format": "date-time"}}
    }))
    .expect("compiles");
    ok(compiled.validate(&json!({"steps": ["a"], "at": "2026-01-01T00:00:00Z"})));
    let msg = expect_issue(compiled.validate(&json!({})), "required", "");
    assert_eq!(msg, "missing required property \"steps\"");
    let msg = expect_issue(
        compiled.validate(&json!({"steps": [1]})),
        "type",
        "/steps/0",
    );
    assert_eq!(msg, "expected type string, found integer");
    expect_issue(
        compiled.validate(&json!({"steps": [], "at": "soon"})),
        "format",
        "/at",
    );
}

#[test]
fn compile_refuses_remote_references_and_never_fetches() {
    let err = schema::compile(&json!({"$ref": "https://example.com/schema.json"}))
        .expect_err("must fail");
    assert!(
        matches!(err, SchemaCompileError::UnresolvedReference { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("nothing is fetched"), "{err}");
    let err = schema::compile(&json!({"$ref": "file:///etc/passwd"})).expect_err("must fail");
    assert!(
        matches!(err, SchemaCompileError::UnresolvedReference { .. }),
        "{err:?}"
    );
}

#[test]
fn compile_resolves_embedded_ids_and_local_refs() {
    let compiled = schema::compile(&json!({
        "type": "object",
        "properties": {"q": {"$ref": "https://openwop.dev/schemas/v1/envelopes/clarification.request.schema.json"}, "n": {"$ref": "#/$defs/n"}},
        "$defs": {"n": {"type": "integer"}}
    }))
    .expect("compiles");
    ok(compiled.validate(&json!({"q": {"questions": [{"id": "a", "question": "b"}]}, "n": 1})));
    expect_issue(
        compiled.validate(&json!({"q": {"questions": []}})),
        "minItems",
        "/q/questions",
    );
    expect_issue(compiled.validate(&json!({"n": "1"})), "type", "/n");
}

#[test]
fn compile_reports_invalid_schemas_with_a_pointer() {
    let err =
        schema::compile(&json!({"properties": {"a": {"type": "strin"}}})).expect_err("invalid");
    match &err {
        SchemaCompileError::Invalid { pointer, .. } => assert_eq!(pointer, "/properties/a/type"),
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("/properties/a/type"), "{err}");
    let err = schema::compile(&json!({"minLength": -1})).expect_err("invalid");
    assert!(matches!(err, SchemaCompileError::Invalid { .. }), "{err:?}");
}

#[test]
fn depth_limits_give_errors_not_stack_overflows() {
    let mut deep_schema = json!({"type": "object"});
    for _ in 0..MAX_DEPTH {
        deep_schema = json!({"type": "object", "properties": {"a": deep_schema}});
    }
    assert_eq!(
        schema::compile(&deep_schema).expect_err("too deep"),
        SchemaCompileError::TooDeep {
            max_depth: MAX_DEPTH
        }
    );

    let mut deep = json!(1);
    for _ in 0..100_000 {
        deep = Value::Array(vec![deep]);
    }
    let found = issues(schema::validate(Document::AiEnvelope, &deep));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].keyword, "maxDepth");
    assert_eq!(found[0].instance_path, "");
    // Drop iteratively; a recursive drop of 100k levels could itself overflow the test stack.
    let mut cur = deep;
    while let Value::Array(mut items) = cur {
        cur = items.pop().unwrap_or(Value::Null);
    }
}

#[test]
fn issue_count_is_bounded() {
    let compiled =
        schema::compile(&json!({"type": "array", "items": {"type": "string"}})).expect("compiles");
    let many: Vec<i32> = (0..500).collect();
    let found = issues(compiled.validate(&json!(many)));
    assert_eq!(found.len(), MAX_ISSUES);
    assert_eq!(found[0].instance_path, "/0");
}

// ---------------------------------------------------------------- no instance values in messages

const CANARY: &str = "secret:CANARY-7f3a9c";

fn assert_no_canary(found: &[ValidationIssue]) {
    assert!(!found.is_empty());
    for issue in found {
        assert!(
            !issue.message.contains("CANARY"),
            "message leaks instance value: {issue:?}"
        );
        assert!(
            !issue.to_string().contains("CANARY"),
            "display leaks: {issue:?}"
        );
    }
}

#[test]
fn messages_never_echo_instance_values() {
    let placements: Vec<(&str, Value)> = vec![
        ("/type", json!(CANARY.repeat(20))),        // maxLength
        ("/correlationId", json!([CANARY])),        // type
        ("/meta/source", json!(CANARY)),            // enum
        ("/meta/ts", json!(CANARY)),                // format
        ("/schemaVersion", json!(CANARY)),          // type
        ("/partial", json!({"isPartial": CANARY})), // type + required
    ];
    for (pointer, value) in placements {
        let mut doc = envelope();
        *doc.pointer_mut(pointer).expect(pointer) = value;
        assert_no_canary(&issues(schema::validate(Document::AiEnvelope, &doc)));
    }
    // Unknown property whose *name* is a secret-bearing string: counted, not quoted.
    let mut doc = envelope();
    doc[CANARY] = json!(CANARY);
    let found = issues(schema::validate(Document::AiEnvelope, &doc));
    assert_no_canary(&found);
    assert!(
        found.iter().any(|i| i.message.contains("name withheld")),
        "{found:?}"
    );
    // const, pattern, anyOf and not failures in payload schemas.
    assert_no_canary(&issues(
        schema::validate_kind_payload(
            "schema.response",
            &json!({"envelopeType": "k", "ack": CANARY}),
        )
        .expect("kind"),
    ));
    assert_no_canary(&issues(
        schema::validate_event_payload(
            "prompt.composed",
            &json!({"nodeId": "n", "refs": [CANARY], "kind": "system+user", "hash": CANARY}),
        )
        .expect("type"),
    ));
    assert_no_canary(&issues(
        schema::validate_event_payload(
            "envelope.retry.attempted",
            &json!({"nodeId": "n", "attempt": 2, "reason": CANARY}),
        )
        .expect("type"),
    ));
    assert_no_canary(&issues(schema::validate(
        Document::MockAgentConfig,
        &json!({"mockToolCalls": [{"toolId": "t", "result": CANARY, "error": {"error": CANARY, "message": CANARY}}]}),
    )));
}

proptest! {
    #[test]
    fn prop_messages_never_contain_the_offending_string(
        value in "[A-Za-z0-9:_-]{12,64}",
        slot in 0usize..6,
    ) {
        // Each slot places the value where it must fail.
        let mut doc = envelope();
        let pointer = ["/meta/source", "/meta/ts", "/meta/contentTrust", "/meta/rendering/display", "/partial/total", "/type"][slot];
        *doc.pointer_mut(pointer).expect("slot") = if pointer == "/type" {
            json!(value.repeat(30))
        } else {
            json!(value)
        };
        let found = issues(schema::validate(Document::AiEnvelope, &doc));
        for issue in &found {
            prop_assert!(!issue.message.contains(&value), "{issue:?}");
        }
    }

    #[test]
    fn prop_unknown_property_names_never_leak_unless_identifier_like(
        name in "[a-z]{4,12}:[A-Za-z0-9 ]{8,40}",
    ) {
        let mut doc = envelope();
        doc["payload"] = json!({"questions": [{"id": "q", "question": "?"}]});
        let mut payload = doc["payload"].clone();
        payload[name.as_str()] = json!(1);
        let found = issues(schema::validate_kind_payload("clarification.request", &payload).expect("kind"));
        for issue in &found {
            prop_assert!(!issue.message.contains(&name), "{issue:?}");
        }
    }
}
