//! Environment variables the operator sets on a worker pod and the worker reads.

/// The run id (the Run's uid).
pub const RUN_ID: &str = "OPENWOP_RUN_ID";
/// The Run's namespace.
pub const RUN_NAMESPACE: &str = "OPENWOP_RUN_NAMESPACE";
/// The run's event subject (`subjects::events_subject`).
pub const EVENTS_SUBJECT: &str = "OPENWOP_EVENTS_SUBJECT";
/// The JetStream stream name.
pub const EVENTS_STREAM: &str = "OPENWOP_EVENTS_STREAM";
/// The stream's retention in seconds (`0` or unset: kept until purged).
pub const EVENTS_MAX_AGE_SECONDS: &str = "OPENWOP_EVENTS_MAX_AGE_SECONDS";

/// The OTLP/HTTP base URL the worker exports its spans to (chart `worker.otlpEndpoint`;
/// `/v1/traces` is appended). The standard `OTEL_EXPORTER_OTLP_ENDPOINT` works too.
pub const OTLP_ENDPOINT: &str = "OPENWOP_OTLP_ENDPOINT";
/// Conformance seams only: the full OTLP/HTTP traces URL of the operator's span store,
/// which the worker exports to in addition to any collector (the `test/otel/spans` seam
/// reads spans back from it).
pub const TEST_OTEL_SCRAPE_ENDPOINT: &str = "OPENWOP_TEST_OTEL_SCRAPE_ENDPOINT";

/// Fault injection for kill tests and the fault bench, never set by the operator: the
/// worker stops just before it publishes the event of this per-run sequence (logging
/// `fault pause`) and waits to be killed, so a test can SIGKILL it at an exact point.
pub const FAULT_PAUSE_AT_SEQUENCE: &str = "OPENWOP_FAULT_PAUSE_AT_SEQUENCE";

/// `OPENWOP_PROVIDER_<NAME>_BASE_URL`: the API root of a configured provider (`-` → `_`).
pub fn provider_base_url(provider: &str) -> String {
    format!(
        "OPENWOP_PROVIDER_{}_BASE_URL",
        provider.to_ascii_uppercase().replace('-', "_")
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn provider_base_url_names_are_env_safe() {
        assert_eq!(
            super::provider_base_url("openai-compatible"),
            "OPENWOP_PROVIDER_OPENAI_COMPATIBLE_BASE_URL"
        );
    }
}
