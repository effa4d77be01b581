use super::*;
use std::time::Duration;

#[test]
fn defaults_are_valid_and_empty_file_gives_defaults() {
    let cfg = OperatorConfig::from_yaml("{}").unwrap();
    assert_eq!(cfg, OperatorConfig::default());
    assert_eq!(cfg.runs.max_concurrent_per_namespace, 10);
    assert_eq!(cfg.lease_namespace(), "openwop-system");
}

#[test]
fn partial_file_overrides_only_given_fields() {
    let cfg = OperatorConfig::from_yaml(
        "runs:\n  maxConcurrentPerNamespace: 2\nconformance:\n  mockAgentNamespaces: [e2e]\n",
    )
    .unwrap();
    assert_eq!(cfg.runs.max_concurrent_per_namespace, 2);
    assert_eq!(cfg.runs.max_worker_retries, 3);
    assert_eq!(cfg.runs.reconcile_concurrency, 64);
    assert!(cfg.conformance.mock_agent_allowed_in("e2e"));
    assert!(!cfg.conformance.mock_agent_allowed_in("default"));
    // The opt-in the Workflow controller checks is the one a run's snapshot carries.
    assert!(cfg.host_profile_for("e2e").mock_agent);
    assert!(!cfg.host_profile_for("default").mock_agent);
    assert_eq!(cfg.host_profile_for("default"), cfg.host_profile());
}

#[test]
fn provider_mock_namespaces_take_names_prefixes_and_star() {
    let cfg =
        OperatorConfig::from_yaml("conformance:\n  providerMockNamespaces: [ci, e2e-*]\n").unwrap();
    let c = &cfg.conformance;
    assert!(c.provider_mocks_allowed_in("ci"));
    assert!(c.provider_mocks_allowed_in("e2e-7f3a"));
    assert!(!c.provider_mocks_allowed_in("ci-2"));
    assert!(!c.provider_mocks_allowed_in("prod"));
    // Separate from the mock-agent opt-in.
    assert!(!c.mock_agent_allowed_in("ci"));
    assert!(
        !OperatorConfig::default()
            .conformance
            .provider_mocks_allowed_in("default")
    );
    let all = OperatorConfig::from_yaml("conformance:\n  providerMockNamespaces: ['*']\n").unwrap();
    assert!(all.conformance.provider_mocks_allowed_in("anything"));
    let e =
        OperatorConfig::from_yaml("conformance:\n  providerMockNamespaces: [Prod]\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "config field conformance.providerMockNamespaces: \"Prod\" is not a namespace name, a `prefix*` pattern or `*`"
    );
    assert!(
        OperatorConfig::from_yaml("conformance:\n  providerMockNamespaces: ['a*b']\n").is_err()
    );
}

#[test]
fn bad_values_name_the_field() {
    let e = OperatorConfig::from_yaml("reliability:\n  maxRetryAttempts: 40\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "config field reliability.maxRetryAttempts: reliability.maxRetryAttempts is 40: use a whole number from 1 to 16 (the highest attempt number a retry may reach)"
    );
    let e = OperatorConfig::from_yaml("tierOneSubsetCompliance: loose\n").unwrap_err();
    assert!(e.to_string().contains("tierOneSubsetCompliance"));
    let e = OperatorConfig::from_yaml("workr: {}\n").unwrap_err();
    assert!(e.to_string().contains("unknown field `workr`"), "{e}");
    let e = OperatorConfig::from_yaml("worker:\n  runAsUser: 0\n").unwrap_err();
    assert!(e.to_string().contains("never run as root"));
    let e = OperatorConfig::from_yaml("limits:\n  maxProviderResponseBytes: 0\n").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("config field limits.maxProviderResponseBytes: must be at least 1024"),
        "{e}"
    );
    let e = OperatorConfig::from_yaml("limits:\n  maxHttpResponseBytes: 1048576\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "config field limits.maxHttpResponseBytes: must be 1024..524288 bytes (the body is recorded in the run's event log), got 1048576"
    );
    let e = OperatorConfig::from_yaml("egress:\n  allowHosts: [\"https://x\"]\n").unwrap_err();
    assert!(
        e.to_string().starts_with(
            "config field egress.allowHosts: egress allow list entry `https://x` is not a host name"
        ),
        "{e}"
    );
    // Every REST bound names its own field and the value given.
    for (yaml, want) in [
        (
            "rest:\n  keepaliveSeconds: 0\n",
            "config field rest.keepaliveSeconds: must be 1..30, got 0",
        ),
        (
            "rest:\n  keepaliveSeconds: 31\n",
            "config field rest.keepaliveSeconds: must be 1..30, got 31",
        ),
        (
            "rest:\n  interruptRecordWaitSeconds: 61\n",
            "config field rest.interruptRecordWaitSeconds: must be 0..60, got 61",
        ),
        (
            "rest:\n  maxBodyBytes: 1023\n",
            "config field rest.maxBodyBytes: must be at least 1024 bytes, got 1023",
        ),
        (
            "runs:\n  reconcileConcurrency: 0\n",
            "config field runs.reconcileConcurrency: must be 1..512, got 0",
        ),
        (
            "runs:\n  reconcileConcurrency: 513\n",
            "config field runs.reconcileConcurrency: must be 1..512, got 513",
        ),
        (
            "rest:\n  maxInFlight: 0\n",
            "config field rest.maxInFlight: must be at least 1, got 0",
        ),
        (
            "worker:\n  otlpEndpoint: collector:4318\n",
            "config field worker.otlpEndpoint: \"collector:4318\" must be an http:// or https:// URL",
        ),
        (
            "conformance:\n  seams:\n    enabled: true\n    spanIngestUrl: operator.svc\n",
            "config field conformance.seams.spanIngestUrl: \"operator.svc\" must be an http:// or https:// URL",
        ),
        (
            "reliability:\n  truncationBudgetMultiplier: 9\n",
            "config field reliability.truncationBudgetMultiplier: reliability.truncationBudgetMultiplier is 9",
        ),
        (
            "rest:\n  reviewCacheSeconds: 301\n",
            "config field rest.reviewCacheSeconds: must be 0..300, got 301",
        ),
    ] {
        let e = OperatorConfig::from_yaml(yaml).unwrap_err();
        assert!(e.to_string().starts_with(want), "{yaml}: {e}");
    }
    let ok = OperatorConfig::from_yaml(
        "rest:\n  keepaliveSeconds: 1\n  maxBodyBytes: 1024\n  maxInFlight: 1\n  reviewCacheSeconds: 0\n",
    )
    .unwrap();
    assert_eq!(ok.rest.max_in_flight, 1);
    let e = OperatorConfig::from_yaml("shutdownDrainSeconds: 26\n").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("config field shutdownDrainSeconds: 26 is above 25"),
        "{e}"
    );
    assert_eq!(
        OperatorConfig::from_yaml("shutdownDrainSeconds: 0\n")
            .unwrap()
            .shutdown_drain_seconds,
        0
    );
    let e = OperatorConfig::from_yaml(
        "natsCredentials:\n  dir: /var/run/openwop/nats\n  workerSecret: Nats_Creds\n",
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with(
            "config field natsCredentials.workerSecret: \"Nats_Creds\" is not a Secret name"
        ),
        "{e}"
    );
}

#[test]
fn nats_credentials_load_from_the_configured_dir_only() {
    let cfg = OperatorConfig::default();
    assert!(cfg.nats_credentials.load().unwrap().is_none());
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("token"), "s3cr3t-token\n").unwrap();
    let mut cfg = cfg;
    cfg.nats_credentials.dir = d.path().display().to_string();
    cfg.validate().unwrap();
    assert_eq!(cfg.nats_credentials.load().unwrap().kind(), "token");
}

#[test]
fn retention_takes_seconds_or_units_and_zero_keeps_until_purged() {
    let d = |s: u64| Some(Duration::from_secs(s));
    assert_eq!(parse_retention("168h"), Ok(d(7 * 86_400)));
    assert_eq!(parse_retention("7d"), Ok(d(7 * 86_400)));
    assert_eq!(
        parse_retention("1d12h30m5s"),
        Ok(d(86_400 + 12 * 3600 + 1800 + 5))
    );
    assert_eq!(parse_retention("3600"), Ok(d(3600)));
    assert_eq!(parse_retention("0"), Ok(None));
    assert_eq!(parse_retention("0h"), Ok(None));
    for bad in ["", "7 days", "h", "12x", "5h3", "-1", "1.5h", "1w"] {
        assert!(parse_retention(bad).is_err(), "{bad}");
    }
    assert!(
        parse_retention("99999999999d")
            .unwrap_err()
            .contains("100 years")
    );
    let e = OperatorConfig::from_yaml("events:\n  retention: 7 days\n").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("config field events.retention: \"7 days\" is not a duration"),
        "{e}"
    );
    let cfg = OperatorConfig::from_yaml("events:\n  retention: '0'\n").unwrap();
    assert_eq!(cfg.stream_spec().max_age, None);
    let spec = OperatorConfig::default().stream_spec();
    assert_eq!(
        (spec.name.as_str(), spec.max_age),
        ("OPENWOP_EVENTS", d(7 * 86_400))
    );
}

#[test]
fn node_types_may_only_add_a_schema_to_a_built_in_type() {
    let e = OperatorConfig::from_yaml("nodeTypes:\n- typeId: acme.thing\n").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("config field nodeTypes: typeId \"acme.thing\" is not a built-in node type; the worker executes only core.identity, core.flow.noop, core.ai.callPrompt, core.ai.structuredOutput, core.conformance.mock-agent"),
        "{msg}"
    );
    let e = OperatorConfig::from_yaml(
        "nodeTypes:\n- {typeId: core.conformance.mock-agent, configSchema: {type: object}}\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("takes no configSchema"), "{e}");
    let cfg = OperatorConfig::from_yaml(
        "nodeTypes:\n- {typeId: core.ai.callPrompt, configSchema: {type: object, required: [provider]}}\n",
    )
    .unwrap();
    let reg = cfg.node_registry().unwrap();
    let ids: Vec<&str> = reg.type_ids().collect();
    let mut builtin: Vec<&str> = BUILTIN_NODES.iter().map(|n| n.type_id).collect();
    builtin.sort_unstable();
    assert_eq!(ids, builtin, "a schema adds no type");
    assert!(matches!(
        reg.get("core.ai.callPrompt").unwrap().config,
        openwop_protocol::workflow_check::ConfigRule::Schema(_)
    ));
    let e = OperatorConfig::from_yaml(
        "nodeTypes:\n- {typeId: core.identity, configSchema: {type: 7}}\n",
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("configSchema of \"core.identity\""),
        "{e}"
    );
}

#[test]
fn the_host_profile_is_the_configuration() {
    let cfg = OperatorConfig::from_yaml(
        "limits: {clarificationRounds: 1, schemaRounds: 5}\nenvelopeStrictness: strict\ntierOneSubsetCompliance: 'off'\nreasoning: {promptDirective: mandatory}\nreliability: {truncationBudgetMultiplier: 4}\n",
    )
    .unwrap();
    let h = cfg.host_profile();
    assert_eq!(
        (h.limits.clarification_rounds, h.limits.schema_rounds),
        (1, 5)
    );
    assert_eq!(h.limits.max_node_executions, Some(1000));
    assert_eq!(h.strictness, Strictness::Strict);
    assert_eq!(h.tier_one_subset_compliance, Tier1Posture::Off);
    assert_eq!(h.reasoning_directive, ReasoningPosture::Mandatory);
    assert_eq!(h.truncation_budget_multiplier, 4.0);
    // Defaults are the host profile's, not restated here.
    assert_eq!(
        OperatorConfig::default().host_profile(),
        HostProfile::default()
    );
    // A fractional multiplier is a multiplier (RFC 0033 takes a number).
    let cfg =
        OperatorConfig::from_yaml("reliability: {truncationBudgetMultiplier: 1.5}\n").unwrap();
    assert_eq!(cfg.host_profile().truncation_budget_multiplier, 1.5);
    let e = OperatorConfig::from_yaml("envelopeStrictness: loose\n").unwrap_err();
    assert!(
        e.to_string().contains("envelopeStrictness") && e.to_string().contains("loose"),
        "{e}"
    );
    let e = OperatorConfig::from_yaml("reasoning: {promptDirective: loud}\n").unwrap_err();
    assert!(
        e.to_string().contains("promptDirective") && e.to_string().contains("loud"),
        "{e}"
    );
}

#[test]
fn the_seams_allow_provider_mocks_everywhere() {
    // mock-ai/program stages mocks for whoever may create Runs in a namespace: with the
    // seams on, the namespace list would only be the same switch read twice.
    let cfg = OperatorConfig::from_yaml("conformance:\n  seams: {enabled: true}\n").unwrap();
    assert!(cfg.conformance.provider_mocks_allowed_in("any-team"));
    let off = OperatorConfig::from_yaml("conformance:\n  providerMockNamespaces: [ci]\n").unwrap();
    assert!(!off.conformance.provider_mocks_allowed_in("any-team"));
}

/// The chart's default values of the host settings are the host profile's defaults: the
/// chart passes `limits`, `reliability`, `reasoning`, the postures and `runs` to the
/// operator as they are, so a chart default that differs would silently change the host.
#[test]
fn the_charts_default_host_settings_are_the_host_profiles() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/openwop/values.yaml");
    let values: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut section = serde_yaml::Mapping::new();
    for key in [
        "limits",
        "egress",
        "reliability",
        "reasoning",
        "envelopeStrictness",
        "tierOneSubsetCompliance",
    ] {
        section.insert(key.into(), values[key].clone());
    }
    let mut runs = serde_yaml::Mapping::new();
    runs.insert(
        "nodeConcurrency".into(),
        values["runs"]["nodeConcurrency"].clone(),
    );
    for key in ["durableWaitThresholdMs", "maxSubWorkflowDepth"] {
        runs.insert(key.into(), values["runs"][key].clone());
    }
    section.insert("runs".into(), runs.into());
    let cfg = OperatorConfig::from_yaml(&serde_yaml::to_string(&section).unwrap()).unwrap();
    let defaults = OperatorConfig::default();
    assert_eq!(cfg.host_profile(), HostProfile::default());
    assert_eq!(cfg.reliability, ReliabilityConfig::default());
    assert_eq!(cfg.reasoning, defaults.reasoning);
    assert_eq!(cfg.limits, defaults.limits);
}
