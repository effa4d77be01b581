//! The capabilities builder: schema-valid output for default and varied configs,
//! the `capabilities` mirror, the Tier-1 posture and config bounds.

use std::collections::BTreeMap;

use openwop_protocol::capabilities::{
    CapabilitiesConfig, CapabilitiesError, EventStream, Implementation, PROTOCOL_VERSION,
    RELIABILITY_EVENTS, ReasoningVerbosity, SecretScope, ServedKindSchema, TierOneSubsetCompliance,
    Transport, build,
};
use openwop_protocol::limits::Limits;
use openwop_protocol::pipeline::Strictness;
use openwop_protocol::retry::reasoning::ReasoningPosture;
use openwop_protocol::schema::{self, Document};
use serde_json::{Value, json};

/// The official schema (an excerpt vendored from the OpenWOP repository; see
/// `schemas/official/README.md`).
const OFFICIAL: &str = include_str!("../../schemas/official/capabilities.schema.json");

fn valid(doc: &Value) {
    if let Err(issues) = schema::validate(Document::Capabilities, doc) {
        panic!("capabilities document does not validate: {issues:?}\n{doc:#}");
    }
    valid_officially(doc);
}

/// The document, and its `capabilities` mirror on its own, validate against the spec's schema.
fn valid_officially(doc: &Value) {
    let official = schema::compile(&serde_json::from_str(OFFICIAL).unwrap()).unwrap();
    for (what, v) in [("root", doc), ("capabilities mirror", &doc["capabilities"])] {
        if let Err(issues) = official.validate(v) {
            panic!("{what} is refused by the official capabilities schema: {issues:?}\n{v:#}");
        }
    }
}

/// Ours must refuse whatever the official schema refuses, field by field we emit.
#[test]
fn our_schema_refuses_what_the_official_schema_refuses() {
    let official = schema::compile(&serde_json::from_str(OFFICIAL).unwrap()).unwrap();
    let base = build(&varied()).unwrap().to_value();
    valid(&base);
    let cases: Vec<(&str, Value)> = vec![
        ("/secrets/scopes/0", json!("namespace")),
        ("/supportedTransports/0", json!("nats")),
        ("/supportedTransports/1", json!("sse")),
        ("/limits/maxNodeExecutions", json!(0)),
        ("/limits/maxRunDurationMs", json!(999)),
        ("/limits/maxLoopyIterations", json!(1)),
        ("/envelopes/reliability/events/0", json!("envelope.custom")),
        ("/envelopes/reliability/maxRetryAttempts", json!(17)),
        ("/envelopes/reasoning/extra", json!(true)),
        ("/aiProviders/unknown", json!(1)),
        ("/aiProviders/supported/1", json!("openai")),
        ("/implementation/build", json!("x")),
        ("/conformance/other", json!(true)),
        ("/agents/reasoning/depth", json!(1)),
        ("/fixtures/1", json!("conformance-basic")),
        ("/envelopeContracts/extra", json!(1)),
        ("/observability/testSeams/debugBundleExport", json!("yes")),
        ("/observability/testSeams/other", json!(true)),
        ("/protocolVersion", json!("1.1.1")),
        ("/protocolVersion", json!("v1.0")),
        ("/protocolVersion", json!("01.0")),
        ("/protocolVersions/0", json!("1.0.0")),
        ("/protocolVersions", json!([])),
        ("/protocolVersions", json!(["1.0", "1.0"])),
        ("/preferredVersion", json!("1")),
    ];
    for (pointer, value) in cases {
        let mut v = base.clone();
        set(&mut v, pointer, value.clone());
        assert!(
            official.validate(&v).is_err(),
            "the official schema accepts {pointer} = {value}: drop this case"
        );
        assert!(
            schema::validate(Document::Capabilities, &v).is_err(),
            "our schema accepts {pointer} = {value}, which the official one refuses"
        );
    }
}

/// Sets the member at a JSON Pointer, creating the last member (an array index past the
/// end appends).
fn set(v: &mut Value, pointer: &str, value: Value) {
    let (parent, last) = pointer.rsplit_once('/').unwrap();
    match v.pointer_mut(parent).unwrap() {
        Value::Object(m) => {
            m.insert(last.to_owned(), value);
        }
        Value::Array(a) => {
            let i: usize = last.parse().unwrap();
            if i < a.len() {
                a[i] = value;
            } else {
                a.push(value);
            }
        }
        other => panic!("{parent} is {other}"),
    }
}

fn varied() -> CapabilitiesConfig {
    let mut cfg = CapabilitiesConfig {
        envelope_kinds: vec![
            "vendor.acme.prd.create".into(),
            "media.image".into(),
            "error".into(),
        ],
        node_types: vec!["core.llm".into(), "core.conformance.mock-agent".into()],
        providers: vec!["openai".into(), "mock".into()],
        max_inline_media_bytes: Some(1 << 20),
        limits: Limits {
            clarification_rounds: 0,
            schema_rounds: 5,
            envelopes_per_turn: 1,
            max_node_executions: None,
            max_run_duration_ms: Some(3_600_000),
        },
        strictness: Strictness::Strict,
        tier_one_subset_compliance: TierOneSubsetCompliance::Off,
        mock_agent: true,
        agents_supported: true,
        secret_scopes: vec![SecretScope::Tenant],
        fixtures: vec!["conformance-basic".into()],
        test_seams: openwop_protocol::capabilities::TestSeams {
            otel_scrape: false,
            debug_bundle_export: true,
        },
        transports: vec![Transport::Rest],
        event_stream: Some(EventStream {
            transport: "nats-jetstream".into(),
            subject: "openwop.events.<namespace>.<runId>".into(),
        }),
        test_seam_paths: vec![
            "POST /v1/host/sample/envelope/accept".into(),
            "GET /v1/host/sample/test/runs/{runId}/events".into(),
        ],
        implementation: Implementation {
            name: "test-host".into(),
            version: "9.9.9".into(),
        },
        ..CapabilitiesConfig::default()
    };
    cfg.served_schemas.insert(
        "vendor.acme.prd.create".into(),
        ServedKindSchema {
            schema_version: 4,
            schema: json!({"type": "object", "properties": {"title": {"type": "string"}},
                "required": ["title"], "additionalProperties": false}),
        },
    );
    cfg.reliability.max_retry_attempts = 16;
    cfg.reliability.truncation_budget_multiplier = 8.0;
    cfg.reasoning.prompt_directive = ReasoningPosture::Mandatory;
    cfg.reasoning.verbosity = ReasoningVerbosity::Full;
    cfg.reasoning.streaming = true;
    cfg
}

#[test]
fn default_config_validates_and_advertises_universal_kinds() {
    let doc = build(&CapabilitiesConfig::default()).unwrap();
    let v = doc.to_value();
    valid(&v);
    assert_eq!(v["protocolVersion"], PROTOCOL_VERSION);
    // RFC 0149 §C: `<major>.<minor>`, and `1.0` across the v1 line; one major served, so
    // the list and the header-less default are the version itself.
    assert_eq!(v["protocolVersion"], "1.0");
    assert_eq!(v["protocolVersions"], json!(["1.0"]));
    assert_eq!(v["preferredVersion"], "1.0");
    assert_eq!(v["capabilities"]["preferredVersion"], "1.0");
    assert_eq!(
        v["supportedEnvelopes"],
        json!([
            "clarification.request",
            "schema.request",
            "schema.response",
            "error"
        ])
    );
    for k in [
        "clarification.request",
        "schema.request",
        "schema.response",
        "error",
    ] {
        assert_eq!(
            v["schemaVersions"][k],
            json!(schema::kind_schema_version(k).unwrap())
        );
    }
    assert_eq!(
        v["limits"],
        json!({"clarificationRounds": 3, "schemaRounds": 3, "envelopesPerTurn": 32, "maxNodeExecutions": 1000})
    );
    assert_eq!(v["envelopeStrictness"], "warn");
    assert_eq!(v["envelopes"]["tierOneSubsetCompliance"], "warn");
    assert_eq!(
        v["envelopes"]["reasoning"],
        json!({"supported": true, "promptDirective": "advisory"})
    );
    assert_eq!(v["secrets"], json!({"supported": false}));
    assert!(v.get("nodeTypes").is_none());
}

#[test]
fn varied_config_validates_and_says_what_was_configured() {
    let v = build(&varied()).unwrap().to_value();
    valid(&v);
    assert_eq!(
        v["supportedEnvelopes"],
        json!([
            "clarification.request",
            "schema.request",
            "schema.response",
            "error",
            "vendor.acme.prd.create",
            "media.image"
        ])
    );
    assert_eq!(v["schemaVersions"]["vendor.acme.prd.create"], 4);
    assert_eq!(v["schemaVersions"]["media.image"], 1);
    assert_eq!(
        v["limits"],
        json!({"clarificationRounds": 0, "schemaRounds": 5, "envelopesPerTurn": 1, "maxRunDurationMs": 3_600_000})
    );
    assert_eq!(v["envelopeStrictness"], "strict");
    assert_eq!(v["envelopes"]["tierOneSubsetCompliance"], "off");
    assert_eq!(v["envelopes"]["reasoning"]["promptDirective"], "mandatory");
    assert_eq!(v["envelopes"]["reliability"]["maxRetryAttempts"], 16);
    assert_eq!(
        v["envelopes"]["reliability"]["completion"]["truncationBudgetMultiplier"],
        8.0
    );
    assert_eq!(
        v["agents"],
        json!({"supported": true, "reasoning": {"verbosity": "full", "streaming": true}})
    );
    assert_eq!(v["conformance"], json!({"mockAgent": true}));
    // capabilities.md §"Secrets" (and the suite's redaction scenario): a host that supports
    // secrets says who resolves them.
    assert_eq!(
        v["secrets"],
        json!({"supported": true, "scopes": ["tenant"], "resolution": "host-managed"})
    );
    assert_eq!(
        v["aiProviders"],
        json!({"supported": ["openai", "mock"], "maxInlineMediaBytes": 1048576})
    );
    assert_eq!(v["supportedTransports"], json!(["rest"]));
    assert_eq!(
        v["x-host-openwop-operator-event-stream"],
        json!({"transport": "nats-jetstream", "subject": "openwop.events.<namespace>.<runId>"})
    );
    assert_eq!(
        v["implementation"],
        json!({"name": "test-host", "version": "9.9.9"})
    );
    assert_eq!(
        v["nodeTypes"],
        json!(["core.llm", "core.conformance.mock-agent"])
    );
}

#[test]
fn no_kinds_advertises_none_and_still_validates() {
    let cfg = CapabilitiesConfig {
        envelope_kinds: Vec::new(),
        ..CapabilitiesConfig::default()
    };
    let v = build(&cfg).unwrap().to_value();
    valid(&v);
    assert_eq!(v["supportedEnvelopes"], json!([]));
    assert_eq!(v["schemaVersions"], json!({}));
}

#[test]
fn every_family_is_mirrored_under_capabilities() {
    for cfg in [CapabilitiesConfig::default(), varied()] {
        let v = build(&cfg).unwrap().to_value();
        let root = v.as_object().unwrap();
        let mirror = v["capabilities"].as_object().unwrap();
        let root_families: BTreeMap<&String, &Value> =
            root.iter().filter(|(k, _)| *k != "capabilities").collect();
        let mirrored: BTreeMap<&String, &Value> = mirror.iter().collect();
        assert_eq!(root_families, mirrored);
        assert!(mirror.len() >= 14, "{mirror:?}");
    }
}

#[test]
fn document_round_trips_through_json() {
    let doc = build(&varied()).unwrap();
    let back: openwop_protocol::capabilities::CapabilitiesDocument =
        serde_json::from_value(doc.to_value()).unwrap();
    assert_eq!(back, doc);
}

#[test]
fn reliability_events_are_listed_only_when_supported() {
    let v = build(&CapabilitiesConfig::default()).unwrap().to_value();
    let events: Vec<&str> = v["envelopes"]["reliability"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(events, RELIABILITY_EVENTS);
    assert!(events.contains(&"envelope.retry.exhausted"));
    assert!(events.contains(&"envelope.refusal"));

    let mut cfg = CapabilitiesConfig::default();
    cfg.reliability.supported = false;
    let v = build(&cfg).unwrap().to_value();
    valid(&v);
    assert_eq!(v["envelopes"]["reliability"]["supported"], false);
    assert!(v["envelopes"]["reliability"].get("events").is_none());
}

#[test]
fn tier1_strict_only_when_every_served_schema_passes() {
    let strict = |kinds: Vec<&str>, served: Option<Value>| {
        let mut cfg = CapabilitiesConfig {
            envelope_kinds: kinds.into_iter().map(String::from).collect(),
            tier_one_subset_compliance: TierOneSubsetCompliance::Strict,
            ..CapabilitiesConfig::default()
        };
        if let Some(schema) = served {
            cfg.served_schemas.insert(
                "vendor.acme.x".into(),
                ServedKindSchema {
                    schema_version: 1,
                    schema,
                },
            );
        }
        let doc = build(&cfg).unwrap();
        valid(&doc.to_value());
        (
            cfg.advertised_tier1(),
            doc.to_value()["envelopes"]["tierOneSubsetCompliance"].clone(),
        )
    };
    // Whether the embedded universal schemas pass decides the baseline.
    let universal_pass = UNIVERSAL.iter().all(|k| {
        openwop_protocol::tier1::check(schema::kind_payload_schema(k).unwrap()).is_empty()
    });
    let base = if universal_pass { "strict" } else { "warn" };
    assert_eq!(
        base, "warn",
        "see strict_is_advertised_when_nothing_served_fails"
    );
    let (_, v) = strict(vec!["error"], None);
    assert_eq!(v, base);

    let passing = json!({"type": "object", "properties": {"a": {"type": "string"}},
        "required": ["a"], "additionalProperties": false});
    let (_, v) = strict(vec!["vendor.acme.x"], Some(passing));
    assert_eq!(v, base);

    // A served schema with a Tier-1 violation (minLength, open object) forces warn.
    let failing =
        json!({"type": "object", "properties": {"a": {"type": "string", "minLength": 1}}});
    let (posture, v) = strict(vec!["vendor.acme.x"], Some(failing));
    assert_eq!(posture, TierOneSubsetCompliance::Warn);
    assert_eq!(v, "warn");

    // A failing schema of a kind that is not advertised does not count.
    let failing =
        json!({"type": "object", "properties": {"a": {"type": "string", "minLength": 1}}});
    let (_, v) = strict(vec!["error"], Some(failing));
    assert_eq!(v, base);
}

const UNIVERSAL: [&str; 4] = [
    "clarification.request",
    "schema.request",
    "schema.response",
    "error",
];

#[test]
fn tier1_warn_and_off_are_advertised_as_configured() {
    for (asked, wire) in [
        (TierOneSubsetCompliance::Warn, "warn"),
        (TierOneSubsetCompliance::Off, "off"),
    ] {
        let cfg = CapabilitiesConfig {
            tier_one_subset_compliance: asked,
            ..CapabilitiesConfig::default()
        };
        let v = build(&cfg).unwrap().to_value();
        assert_eq!(v["envelopes"]["tierOneSubsetCompliance"], wire);
        assert_eq!(asked.as_str(), wire);
    }
}

#[test]
fn out_of_range_settings_are_refused_with_the_bound() {
    let with = |f: &dyn Fn(&mut CapabilitiesConfig)| {
        let mut cfg = CapabilitiesConfig::default();
        f(&mut cfg);
        build(&cfg).unwrap_err()
    };
    for n in [0, 17, 100] {
        let e = with(&|c| c.reliability.max_retry_attempts = n);
        assert_eq!(e, CapabilitiesError::MaxRetryAttempts(n));
        assert!(e.to_string().contains("from 1 to 16"), "{e}");
    }
    for m in [0.0, 0.99, 8.5, f64::NAN, f64::INFINITY] {
        let e = with(&|c| c.reliability.truncation_budget_multiplier = m);
        assert!(
            matches!(e, CapabilitiesError::TruncationBudgetMultiplier(_)),
            "{e:?}"
        );
        assert!(e.to_string().contains("from 1 to 8"), "{e}");
    }
    // The bounds themselves are accepted.
    for (n, m) in [(1, 1.0), (16, 8.0)] {
        let mut cfg = CapabilitiesConfig::default();
        cfg.reliability.max_retry_attempts = n;
        cfg.reliability.truncation_budget_multiplier = m;
        valid(&build(&cfg).unwrap().to_value());
    }
    // The grammar's own examples (RFC 0149 §C) and a major this host does not serve.
    for bad in [
        "1", "1.0.0", "v1.0", "01.0", "1.01", "2.0", "1.x", "", "1.", ".0", "1.1.1", " 1.0",
    ] {
        let e = with(&|c| c.protocol_version = bad.into());
        assert_eq!(e, CapabilitiesError::ProtocolVersion(bad.into()));
    }
    for good in ["1.0", "1.12", "1.1"] {
        let cfg = CapabilitiesConfig {
            protocol_version: good.into(),
            ..CapabilitiesConfig::default()
        };
        valid(&build(&cfg).unwrap().to_value());
    }
    let e = with(&|c| c.envelope_kinds = vec!["error".into(), String::new()]);
    assert_eq!(e, CapabilitiesError::KindLength { index: 1, len: 0 });
    let e = with(&|c| c.envelope_kinds = vec!["x".repeat(257)]);
    assert_eq!(e, CapabilitiesError::KindLength { index: 0, len: 257 });
    let e = with(&|c| {
        c.served_schemas.insert(
            "error".into(),
            ServedKindSchema {
                schema_version: 2,
                schema: json!({}),
            },
        );
    });
    assert_eq!(
        e,
        CapabilitiesError::ServedSchemaShadowsEmbedded {
            kind: "error".into()
        }
    );
    let e = with(&|c| c.implementation.version = String::new());
    assert_eq!(
        e,
        CapabilitiesError::EmptyImplementation { field: "version" }
    );
}

#[test]
fn strict_is_advertised_when_nothing_served_fails() {
    // The embedded universal schemas are full validating schemas (minLength,
    // optional properties…), outside the Tier-1 subset: advertising any kind
    // therefore yields `warn` even when `strict` is asked for.
    assert!(UNIVERSAL.iter().any(|k| {
        !openwop_protocol::tier1::check(schema::kind_payload_schema(k).unwrap()).is_empty()
    }));
    let asked = |kinds: Vec<String>| {
        let cfg = CapabilitiesConfig {
            envelope_kinds: kinds,
            tier_one_subset_compliance: TierOneSubsetCompliance::Strict,
            ..CapabilitiesConfig::default()
        };
        build(&cfg).unwrap().to_value()["envelopes"]["tierOneSubsetCompliance"].clone()
    };
    assert_eq!(asked(vec!["error".into()]), "warn");
    // With no kind served there is nothing outside the subset.
    assert_eq!(asked(Vec::new()), "strict");
}

#[test]
fn config_values_the_official_schema_would_refuse_are_refused_with_a_fix() {
    let with = |f: &dyn Fn(&mut CapabilitiesConfig)| {
        let mut cfg = CapabilitiesConfig::default();
        f(&mut cfg);
        build(&cfg).unwrap_err()
    };
    let e = with(&|c| c.limits.max_node_executions = Some(0));
    assert_eq!(e, CapabilitiesError::MaxNodeExecutions);
    assert!(e.to_string().contains("at least 1"), "{e}");
    let e = with(&|c| c.limits.max_run_duration_ms = Some(500));
    assert_eq!(e, CapabilitiesError::MaxRunDurationMs(500));
    let e = with(&|c| c.providers = vec!["openai".into(), "mock".into(), "openai".into()]);
    assert_eq!(
        e,
        CapabilitiesError::Duplicate {
            field: "aiProviders.supported",
            value: "openai".into()
        }
    );
    // Enumerated values cannot repeat on the wire either.
    let cfg = CapabilitiesConfig {
        secret_scopes: vec![SecretScope::Tenant, SecretScope::Tenant],
        transports: vec![Transport::Rest, Transport::Rest],
        ..CapabilitiesConfig::default()
    };
    let v = build(&cfg).unwrap().to_value();
    valid(&v);
    assert_eq!(v["secrets"]["scopes"], json!(["tenant"]));
    assert_eq!(v["supportedTransports"], json!(["rest"]));
}

// The overlay is the conformance seams' (`seams`, feature `conformance`).
#[cfg(feature = "conformance")]
#[test]
fn the_test_seams_extension_and_the_scenarios_toggles_validate_everywhere() {
    let doc = build(&varied()).unwrap().to_value();
    valid(&doc);
    assert_eq!(
        doc["x-host-openwop-operator-test-seams"]["paths"][0],
        "POST /v1/host/sample/envelope/accept"
    );
    assert!(
        build(&CapabilitiesConfig::default())
            .unwrap()
            .to_value()
            .get("x-host-openwop-operator-test-seams")
            .is_none()
    );
    // What the conformance scenarios toggle.
    for name in [
        "host.aiEnvelope.supported",
        "agents.dispatchMapping",
        "subWorkflow.inputMapping",
    ] {
        let mut overlay = BTreeMap::new();
        overlay.insert(name.to_owned(), false);
        let out = openwop_protocol::seams::apply_overlay(&doc, &overlay).unwrap();
        openwop_protocol::seams::check_document(&out).unwrap();
        valid(&out);
    }
    // A toggle the official schema refuses is refused by the check.
    let mut bad = doc.clone();
    bad["supportedTransports"] = json!(true);
    assert!(openwop_protocol::seams::check_document(&bad).is_err());
}

#[test]
fn test_seams_are_advertised_only_when_served() {
    let v = build(&varied()).unwrap().to_value();
    valid(&v);
    assert_eq!(
        v["observability"],
        json!({"testSeams": {"debugBundleExport": true}})
    );
    assert_eq!(v["capabilities"]["observability"], v["observability"]);
    let none = build(&CapabilitiesConfig::default()).unwrap().to_value();
    valid(&none);
    assert!(none.get("observability").is_none(), "{none:#}");
}

/// Signed interrupt tokens are advertised (`extensions.interrupts.signedCallbackTokens`,
/// `interrupt-profiles.md`) exactly when served, the quorum profile always (every build
/// honours `requiredApprovals`), and the document stays valid either way.
#[test]
fn interrupt_tokens_are_advertised_only_when_served() {
    let off = build(&CapabilitiesConfig::default()).unwrap().to_value();
    valid(&off);
    assert_eq!(
        off["extensions"],
        json!({"interrupts": {"signedCallbackTokens": false, "profiles": ["openwop-interrupt-quorum", "openwop-interrupt-cascade-cancel"]}}),
        "{off:#}"
    );
    let on = build(&CapabilitiesConfig {
        interrupt_tokens: true,
        ..Default::default()
    })
    .unwrap()
    .to_value();
    valid(&on);
    for doc in [&on, &on["capabilities"]] {
        assert_eq!(
            doc["extensions"],
            json!({"interrupts": {"signedCallbackTokens": true, "profiles": ["openwop-interrupt-quorum", "openwop-interrupt-cascade-cancel"]}})
        );
    }
    // Our schema keeps the extension closed.
    let mut extra = on.clone();
    extra["extensions"]["interrupts"]["tokenFormat"] = json!("jwt");
    assert!(schema::validate(Document::Capabilities, &extra).is_err());
}

#[test]
fn sub_workflow_input_mapping_is_advertised_while_a_sub_workflow_type_is_registered() {
    for t in ["core.subWorkflow", "core.control.subWorkflow"] {
        let v = build(&CapabilitiesConfig {
            node_types: vec!["core.noop".into(), t.into()],
            ..CapabilitiesConfig::default()
        })
        .unwrap()
        .to_value();
        valid(&v);
        assert_eq!(v["subWorkflow"], json!({"inputMapping": true}), "{t}");
        assert_eq!(
            v["capabilities"]["subWorkflow"], v["subWorkflow"],
            "mirrored"
        );
    }
    let v = build(&CapabilitiesConfig {
        node_types: vec!["core.noop".into()],
        ..CapabilitiesConfig::default()
    })
    .unwrap()
    .to_value();
    valid(&v);
    assert!(v.get("subWorkflow").is_none(), "{v:#}");
}

#[test]
fn tools_are_advertised_only_when_served() {
    let off = build(&CapabilitiesConfig::default()).unwrap().to_value();
    valid(&off);
    for family in ["mcp", "toolCatalog", "host"] {
        assert!(off.get(family).is_none(), "{family}: {off:#}");
    }
    let on = build(&CapabilitiesConfig {
        tools: true,
        tool_catalog: true,
        ..Default::default()
    })
    .unwrap()
    .to_value();
    valid(&on);
    for doc in [&on, &on["capabilities"]] {
        let mcp = &doc["mcp"];
        assert_eq!(mcp["supported"], true);
        assert_eq!(mcp["serverUrls"], json!([]));
        // The client's revisions in MCP's date form, the preferred one among them.
        let versions = mcp["protocolVersions"].as_array().unwrap();
        assert!(versions.contains(&mcp["preferredVersion"]), "{mcp}");
        assert_eq!(
            doc["toolCatalog"],
            json!({"supported": true, "sources": ["mcp", "host-extension"], "sessionLifecycle": false})
        );
        assert_eq!(
            doc["host"]["toolHooks"],
            json!({"supported": true, "prePostEvents": true, "perToolAuthorization": false, "perToolRateLimit": false})
        );
    }
    // Our schema keeps the families closed and the revisions in date form.
    for (pointer, value) in [
        ("/mcp/preferredVersion", json!("latest")),
        ("/toolCatalog/sources/0", json!("plugins")),
        ("/host/toolHooks/rateLimit", json!(true)),
    ] {
        let mut bad = on.clone();
        set(&mut bad, pointer, value);
        assert!(
            schema::validate(Document::Capabilities, &bad).is_err(),
            "{pointer} accepted"
        );
    }
}
