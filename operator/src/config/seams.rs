//! `conformance.seams` as the rest of the operator sees it: what discovery advertises and
//! what a worker pod's env carries. Nothing here does I/O or reaches into a seam (the seams
//! themselves are `crate::conformance`, above every production module); with the seams off
//! every answer is "none". (Run creation's hook is `crate::rest::RunHooks`, implemented in
//! `crate::conformance::run_hooks`.)

use openwop_protocol::seams::fixtures;
use openwop_protocol::workflow_check::NodeRegistry;

use super::OperatorConfig;

/// The span store's OTLP/HTTP traces path (below the operator's base URL).
pub const INGEST_PATH: &str = "/v1/host/sample/test/otel/ingest/v1/traces";

/// Every seam served when enabled, as `METHOD path` (advertised in discovery under the
/// `x-host-openwop-operator-test-seams` extension; a new seam adds its paths here).
pub const PATHS: &[&str] = &[
    "POST /v1/host/sample/envelope/accept",
    "GET /v1/host/sample/test/runs/{runId}/events",
    "POST /v1/host/sample/test/reset",
    "POST /v1/host/sample/test/capability-toggle",
    "POST /v1/host/sample/test/llm-prompt-wrap",
    "POST /v1/host/sample/test/emit-envelope-reliability",
    "POST /v1/host/sample/test/mock-ai/program",
    "GET /v1/host/sample/test/mock-ai/last-dispatch-budget",
    "GET /v1/host/sample/test/mock-ai/dispatch-budgets",
    "POST /v1/host/sample/test/debug-bundle/export",
    "GET /v1/host/sample/test/otel/spans",
    "POST /v1/host/sample/test/otel/ingest/v1/traces",
];

/// Whether the seams are served (`conformance.seams.enabled`).
pub fn enabled(cfg: &OperatorConfig) -> bool {
    cfg.conformance.seams.enabled
}

/// The seams discovery advertises: every one while they are served, none otherwise (they
/// 404 then).
pub fn advertised_paths(cfg: &OperatorConfig) -> Vec<String> {
    if enabled(cfg) {
        PATHS.iter().map(|p| (*p).to_owned()).collect()
    } else {
        Vec::new()
    }
}

/// The fixture ids discovery advertises (`fixtures`): the configured ones, less the official
/// fixtures that use a node type `registry` lacks (the chart installs them all; one is
/// advertised once this build can run it).
pub fn advertised_fixtures(cfg: &OperatorConfig, registry: &NodeRegistry) -> Vec<String> {
    fixtures::runnable(&cfg.fixtures, |t| registry.get(t).is_some())
}

/// The traces URL workers also export their spans to (the seams' span store), or `None`
/// when there is no span store (seams off, or no `conformance.seams.spanIngestUrl`).
pub fn span_ingest_traces_url(cfg: &OperatorConfig) -> Option<String> {
    let base = &cfg.conformance.seams.span_ingest_url;
    (enabled(cfg) && !base.is_empty())
        .then(|| format!("{}{INGEST_PATH}", base.trim_end_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ingest_url_exists_only_with_the_seams_and_a_base_url() {
        let mut cfg = OperatorConfig::default();
        cfg.conformance.seams.span_ingest_url = "http://op.ns.svc:8080/".into();
        assert_eq!(span_ingest_traces_url(&cfg), None);
        cfg.conformance.seams.enabled = true;
        assert_eq!(
            span_ingest_traces_url(&cfg).as_deref(),
            Some("http://op.ns.svc:8080/v1/host/sample/test/otel/ingest/v1/traces")
        );
        cfg.conformance.seams.span_ingest_url.clear();
        assert_eq!(span_ingest_traces_url(&cfg), None);
    }

    #[test]
    fn fixtures_are_advertised_once_their_node_types_are_registered() {
        let cfg = OperatorConfig {
            fixtures: vec![
                "conformance-approval".into(),
                "conformance-delay".into(),
                "conformance-agent-reasoning".into(),
            ],
            ..OperatorConfig::default()
        };
        // Every node type but core.delay, as a build without it would register.
        let mut registry = NodeRegistry::new();
        let builtin = NodeRegistry::builtin();
        for id in builtin.type_ids().filter(|id| *id != "core.delay") {
            registry.register(openwop_protocol::workflow_check::NodeType {
                type_id: id.into(),
                config: openwop_protocol::workflow_check::ConfigRule::AnyObject,
            });
        }
        let without_delay = advertised_fixtures(&cfg, &registry);
        assert!(!without_delay.contains(&"conformance-delay".to_owned()));
        assert!(without_delay.contains(&"conformance-approval".to_owned()));
        assert!(without_delay.contains(&"conformance-agent-reasoning".to_owned()));
        let registry = builtin;
        assert_eq!(advertised_fixtures(&cfg, &registry), cfg.fixtures);
    }

    #[test]
    fn the_ingest_route_is_the_ingest_path() {
        assert!(PATHS.contains(&format!("POST {INGEST_PATH}").as_str()));
        assert!(advertised_paths(&OperatorConfig::default()).is_empty());
    }
}
