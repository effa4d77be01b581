//! The conformance seams as the rest of the operator sees them: what discovery advertises
//! and what a worker pod's env carries. Nothing here does I/O or reaches into a seam; with
//! the seams off every answer is "none". (Run creation's hook is [`crate::rest::RunHooks`],
//! implemented in [`super::run_hooks`].)

use crate::config::OperatorConfig;

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
    fn the_ingest_route_is_the_ingest_path() {
        assert!(PATHS.contains(&format!("POST {INGEST_PATH}").as_str()));
        assert!(advertised_paths(&OperatorConfig::default()).is_empty());
    }
}
