//! Environment variables the operator sets on a worker pod and the worker reads.

/// The run's event subject (`subjects::events_subject`).
pub const EVENTS_SUBJECT: &str = "OPENWOP_EVENTS_SUBJECT";
/// The JetStream stream name.
pub const EVENTS_STREAM: &str = "OPENWOP_EVENTS_STREAM";
/// The stream's retention in seconds (`0` or unset: kept until purged).
pub const EVENTS_MAX_AGE_SECONDS: &str = "OPENWOP_EVENTS_MAX_AGE_SECONDS";

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
