//! The worker pod's environment contract: every variable the operator sets on a worker pod
//! and the worker reads, as one typed value ([`WorkerEnv`]), and the paths the pod mounts.
//!
//! The operator builds a [`WorkerEnv`] and writes [`WorkerEnv::to_env_vars`] into the pod;
//! the worker reads it back with [`WorkerEnv::from_vars`] (pure: it takes the variables, so
//! this crate does no I/O). Test-only variables (fault injection, the conformance span
//! store) live in [`TestingEnv`], never set on a production pod.

use std::collections::BTreeMap;
use std::time::Duration;

use super::subjects;

/// The run id (the Run's uid).
pub const RUN_ID: &str = "OPENWOP_RUN_ID";
/// The Run's namespace.
pub const RUN_NAMESPACE: &str = "OPENWOP_RUN_NAMESPACE";
/// The Run's name.
pub const RUN_NAME: &str = "OPENWOP_RUN_NAME";
/// The worker attempt (1-based) this pod is.
pub const ATTEMPT: &str = "OPENWOP_ATTEMPT";
/// Path of the run snapshot file.
pub const SNAPSHOT: &str = "OPENWOP_SNAPSHOT";
/// The NATS URL the worker publishes run events to.
pub const NATS_URL: &str = "OPENWOP_NATS_URL";
/// Directory of the NATS credentials (`nats.creds`, `token`, or `username` + `password`).
pub const NATS_CREDENTIALS_DIR: &str = "OPENWOP_NATS_CREDENTIALS_DIR";
/// The run's event subject (`subjects::events_subject`).
pub const EVENTS_SUBJECT: &str = "OPENWOP_EVENTS_SUBJECT";
/// The JetStream stream name.
pub const EVENTS_STREAM: &str = "OPENWOP_EVENTS_STREAM";
/// The stream's retention in seconds (`0` or unset: kept until purged).
pub const EVENTS_MAX_AGE_SECONDS: &str = "OPENWOP_EVENTS_MAX_AGE_SECONDS";
/// The OTLP/HTTP base URL the worker exports its spans to (chart `worker.otlpEndpoint`;
/// `/v1/traces` is appended). The standard `OTEL_EXPORTER_OTLP_ENDPOINT` works too.
pub const OTLP_ENDPOINT: &str = "OPENWOP_OTLP_ENDPOINT";

/// Worker tuning, never set by the operator (defaults suit every pod; tests and benches
/// change them): directory of extra secrets to redact (id = file name).
pub const SECRETS_DIR: &str = "OPENWOP_SECRETS_DIR";
/// Where the worker writes its termination summary.
pub const TERMINATION_LOG: &str = "OPENWOP_TERMINATION_LOG";
/// How long one publish may keep retrying, in milliseconds.
pub const PUBLISH_DEADLINE_MS: &str = "OPENWOP_PUBLISH_DEADLINE_MS";
/// Most reasoning messages one node publishes.
pub const REASONING_MAX_PER_NODE: &str = "OPENWOP_REASONING_MAX_PER_NODE";
/// How long a stop may take before the in-flight step is dropped, in milliseconds.
pub const STOP_GRACE_MS: &str = "OPENWOP_STOP_GRACE_MS";
/// The worker's log filter (`tracing` env-filter syntax), read before anything else.
pub const LOG: &str = "OPENWOP_LOG";

/// Conformance seams only: the full OTLP/HTTP traces URL of the operator's span store,
/// which the worker exports to in addition to any collector (the `test/otel/spans` seam
/// reads spans back from it).
pub const TEST_OTEL_SCRAPE_ENDPOINT: &str = "OPENWOP_TEST_OTEL_SCRAPE_ENDPOINT";
/// Fault injection for kill tests and the fault bench, never set by the operator: the
/// worker stops just before it publishes the event of this per-run sequence (logging
/// `fault pause`) and waits to be killed, so a test can SIGKILL it at an exact point.
pub const FAULT_PAUSE_AT_SEQUENCE: &str = "OPENWOP_FAULT_PAUSE_AT_SEQUENCE";

const PROVIDER_PREFIX: &str = "OPENWOP_PROVIDER_";
const BASE_URL_SUFFIX: &str = "_BASE_URL";

/// Where the worker pod mounts the run's snapshot ConfigMap.
pub const SNAPSHOT_DIR: &str = "/var/run/openwop/snapshot";
/// The snapshot file's name in [`SNAPSHOT_DIR`] (the ConfigMap's key).
pub const SNAPSHOT_FILE: &str = "snapshot.json";
/// Where file-mounted provider credentials live (`<dir>/<provider>/<key>`).
pub const PROVIDERS_DIR: &str = "/var/run/openwop/providers";
/// Where the Workflow's `spec.secrets` live (`<dir>/<name>/<key>`), for the HTTP node's
/// headers.
pub const WORKFLOW_SECRETS_DIR: &str = "/var/run/openwop/workflow-secrets";
/// Where the run's tool-credentials Secret lives (its ToolServers' `headersFrom` values,
/// one file per header), for the MCP client.
pub const TOOL_HEADERS_DIR: &str = "/var/run/openwop/tool-headers";
/// Where worker pods mount the copy of the NATS credentials.
pub const NATS_CREDENTIALS_MOUNT: &str = "/var/run/openwop/nats";
/// NATS URL of a worker started without [`NATS_URL`] (a local nats-server).
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";

/// The snapshot path inside the pod: [`SNAPSHOT_DIR`]`/`[`SNAPSHOT_FILE`].
pub fn snapshot_path() -> String {
    format!("{SNAPSHOT_DIR}/{SNAPSHOT_FILE}")
}

/// `OPENWOP_PROVIDER_<NAME>_BASE_URL`: the API root of a configured provider (`-` → `_`).
pub fn provider_base_url(provider: &str) -> String {
    format!(
        "{PROVIDER_PREFIX}{}{BASE_URL_SUFFIX}",
        provider_key(provider)
    )
}

/// The part of [`provider_base_url`] naming the provider.
fn provider_key(provider: &str) -> String {
    provider.to_ascii_uppercase().replace('-', "_")
}

/// A variable of the worker's environment that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("environment variable {name} is {value:?}: {expected}")]
pub struct EnvError {
    pub name: &'static str,
    pub value: String,
    pub expected: &'static str,
}

/// Test-only variables: set by the operator only with the conformance seams on, or by
/// tests directly; never part of a production pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestingEnv {
    /// [`TEST_OTEL_SCRAPE_ENDPOINT`].
    pub otel_scrape_endpoint: Option<String>,
    /// [`FAULT_PAUSE_AT_SEQUENCE`].
    pub fault_pause_at_sequence: Option<u64>,
}

/// Worker tuning the operator never sets; `None` = the worker's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tuning {
    /// [`SECRETS_DIR`].
    pub secrets_dir: Option<String>,
    /// [`TERMINATION_LOG`].
    pub termination_log: Option<String>,
    /// [`PUBLISH_DEADLINE_MS`].
    pub publish_deadline: Option<Duration>,
    /// [`REASONING_MAX_PER_NODE`].
    pub reasoning_max_per_node: Option<u32>,
    /// [`STOP_GRACE_MS`].
    pub stop_grace: Option<Duration>,
}

/// The worker pod's environment. Run identity is optional: a worker started by hand (tests,
/// benches) takes it from the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerEnv {
    /// [`RUN_NAMESPACE`].
    pub run_namespace: Option<String>,
    /// [`RUN_NAME`].
    pub run_name: Option<String>,
    /// [`RUN_ID`].
    pub run_id: Option<String>,
    /// [`ATTEMPT`].
    pub attempt: Option<u32>,
    /// [`SNAPSHOT`]; default [`snapshot_path`].
    pub snapshot: String,
    /// [`NATS_URL`]; default [`DEFAULT_NATS_URL`].
    pub nats_url: String,
    /// [`NATS_CREDENTIALS_DIR`]; unset: NATS without authentication.
    pub nats_credentials_dir: Option<String>,
    /// [`EVENTS_STREAM`]; default [`subjects::DEFAULT_STREAM`].
    pub events_stream: String,
    /// [`EVENTS_MAX_AGE_SECONDS`]; `None` (`0` or unset): kept until purged.
    pub events_max_age: Option<Duration>,
    /// [`EVENTS_SUBJECT`]; unset: [`subjects::events_subject`] of the run.
    pub events_subject: Option<String>,
    /// [`OTLP_ENDPOINT`].
    pub otlp_endpoint: Option<String>,
    /// [`provider_base_url`] values, keyed by the provider's name as written in the variable
    /// name (upper case, `-` → `_`); read them with [`WorkerEnv::provider_base_url`].
    pub provider_base_urls: BTreeMap<String, String>,
    pub testing: TestingEnv,
    pub tuning: Tuning,
}

impl Default for WorkerEnv {
    fn default() -> Self {
        WorkerEnv {
            run_namespace: None,
            run_name: None,
            run_id: None,
            attempt: None,
            snapshot: snapshot_path(),
            nats_url: DEFAULT_NATS_URL.to_owned(),
            nats_credentials_dir: None,
            events_stream: subjects::DEFAULT_STREAM.to_owned(),
            events_max_age: None,
            events_subject: None,
            otlp_endpoint: None,
            provider_base_urls: BTreeMap::new(),
            testing: TestingEnv::default(),
            tuning: Tuning::default(),
        }
    }
}

impl WorkerEnv {
    /// Sets the API root of `provider`.
    pub fn set_provider_base_url(&mut self, provider: &str, url: impl Into<String>) {
        self.provider_base_urls
            .insert(provider_key(provider), url.into());
    }

    /// The API root of `provider`, if the operator configured one.
    pub fn provider_base_url(&self, provider: &str) -> Option<&str> {
        self.provider_base_urls
            .get(&provider_key(provider))
            .map(String::as_str)
    }

    /// The variables of a pod with this environment, in a stable order. Unset optional
    /// values are left out; the retention is always written (`0`: kept until purged).
    pub fn to_env_vars(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                out.push((k.to_owned(), v));
            }
        };
        put(RUN_NAMESPACE, self.run_namespace.clone());
        put(RUN_NAME, self.run_name.clone());
        put(RUN_ID, self.run_id.clone());
        put(ATTEMPT, self.attempt.map(|a| a.to_string()));
        put(SNAPSHOT, Some(self.snapshot.clone()));
        put(NATS_URL, Some(self.nats_url.clone()));
        put(NATS_CREDENTIALS_DIR, self.nats_credentials_dir.clone());
        put(EVENTS_STREAM, Some(self.events_stream.clone()));
        put(
            EVENTS_MAX_AGE_SECONDS,
            Some(self.events_max_age.map_or(0, |a| a.as_secs()).to_string()),
        );
        put(EVENTS_SUBJECT, self.events_subject.clone());
        put(OTLP_ENDPOINT, self.otlp_endpoint.clone());
        for (key, url) in &self.provider_base_urls {
            put(
                &format!("{PROVIDER_PREFIX}{key}{BASE_URL_SUFFIX}"),
                Some(url.clone()),
            );
        }
        let t = &self.tuning;
        put(SECRETS_DIR, t.secrets_dir.clone());
        put(TERMINATION_LOG, t.termination_log.clone());
        put(
            PUBLISH_DEADLINE_MS,
            t.publish_deadline.map(|d| d.as_millis().to_string()),
        );
        put(
            REASONING_MAX_PER_NODE,
            t.reasoning_max_per_node.map(|n| n.to_string()),
        );
        put(
            STOP_GRACE_MS,
            t.stop_grace.map(|d| d.as_millis().to_string()),
        );
        let t = &self.testing;
        put(TEST_OTEL_SCRAPE_ENDPOINT, t.otel_scrape_endpoint.clone());
        put(
            FAULT_PAUSE_AT_SEQUENCE,
            t.fault_pause_at_sequence.map(|s| s.to_string()),
        );
        out
    }

    /// Reads the environment from its variables (the process's, in the worker). Empty
    /// values count as unset; a number that does not parse is an error naming the variable.
    pub fn from_vars<K, V>(vars: impl IntoIterator<Item = (K, V)>) -> Result<Self, EnvError>
    where
        K: AsRef<str>,
        V: Into<String>,
    {
        let mut known: BTreeMap<&'static str, String> = BTreeMap::new();
        let mut provider_base_urls = BTreeMap::new();
        for (k, v) in vars {
            let (k, v) = (k.as_ref(), v.into());
            if v.trim().is_empty() {
                continue;
            }
            if let Some(name) = ALL.iter().find(|n| **n == k) {
                known.insert(name, v);
            } else if let Some(key) = k
                .strip_prefix(PROVIDER_PREFIX)
                .and_then(|rest| rest.strip_suffix(BASE_URL_SUFFIX))
                .filter(|key| !key.is_empty())
            {
                provider_base_urls.insert(key.to_owned(), v);
            }
        }
        let mut take = |name: &'static str| known.remove(name);
        let number = |name: &'static str, v: Option<String>, expected| {
            v.map(|v| {
                v.trim().parse::<u64>().map_err(|_| EnvError {
                    name,
                    value: v.clone(),
                    expected,
                })
            })
            .transpose()
        };
        let millis = |d: Option<u64>| d.map(Duration::from_millis);
        let d = WorkerEnv::default();
        Ok(WorkerEnv {
            run_namespace: take(RUN_NAMESPACE),
            run_name: take(RUN_NAME),
            run_id: take(RUN_ID),
            attempt: number(
                ATTEMPT,
                take(ATTEMPT),
                "a worker attempt number (1, 2, ...)",
            )?
            .map(|a| u32::try_from(a).unwrap_or(u32::MAX)),
            snapshot: take(SNAPSHOT).unwrap_or(d.snapshot),
            nats_url: take(NATS_URL).unwrap_or(d.nats_url),
            nats_credentials_dir: take(NATS_CREDENTIALS_DIR),
            events_stream: take(EVENTS_STREAM).unwrap_or(d.events_stream),
            events_max_age: number(
                EVENTS_MAX_AGE_SECONDS,
                take(EVENTS_MAX_AGE_SECONDS),
                "whole seconds (0: kept until purged)",
            )?
            .filter(|s| *s > 0)
            .map(Duration::from_secs),
            events_subject: take(EVENTS_SUBJECT),
            otlp_endpoint: take(OTLP_ENDPOINT),
            provider_base_urls,
            tuning: Tuning {
                secrets_dir: take(SECRETS_DIR),
                termination_log: take(TERMINATION_LOG),
                publish_deadline: millis(number(
                    PUBLISH_DEADLINE_MS,
                    take(PUBLISH_DEADLINE_MS),
                    "whole milliseconds",
                )?),
                reasoning_max_per_node: number(
                    REASONING_MAX_PER_NODE,
                    take(REASONING_MAX_PER_NODE),
                    "a whole number of messages",
                )?
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
                stop_grace: millis(number(
                    STOP_GRACE_MS,
                    take(STOP_GRACE_MS),
                    "whole milliseconds",
                )?),
            },
            testing: TestingEnv {
                otel_scrape_endpoint: take(TEST_OTEL_SCRAPE_ENDPOINT),
                fault_pause_at_sequence: number(
                    FAULT_PAUSE_AT_SEQUENCE,
                    take(FAULT_PAUSE_AT_SEQUENCE),
                    "an event sequence number",
                )?,
            },
        })
    }

    /// The run's event subject: [`EVENTS_SUBJECT`], else the one of `namespace`/`run_id`.
    pub fn events_subject_or(&self, namespace: &str, run_id: &str) -> String {
        self.events_subject
            .clone()
            .unwrap_or_else(|| subjects::events_subject(namespace, run_id))
    }

    /// The run-events stream as the worker ensures it.
    pub fn stream_spec(&self) -> subjects::StreamSpec {
        subjects::StreamSpec::new(self.events_stream.clone(), self.events_max_age)
    }
}

/// Every fixed variable name of the contract (provider base URLs are per provider).
pub const ALL: [&str; 19] = [
    RUN_ID,
    RUN_NAMESPACE,
    RUN_NAME,
    ATTEMPT,
    SNAPSHOT,
    NATS_URL,
    NATS_CREDENTIALS_DIR,
    EVENTS_SUBJECT,
    EVENTS_STREAM,
    EVENTS_MAX_AGE_SECONDS,
    OTLP_ENDPOINT,
    SECRETS_DIR,
    TERMINATION_LOG,
    PUBLISH_DEADLINE_MS,
    REASONING_MAX_PER_NODE,
    STOP_GRACE_MS,
    LOG,
    TEST_OTEL_SCRAPE_ENDPOINT,
    FAULT_PAUSE_AT_SEQUENCE,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_base_url_names_are_env_safe() {
        assert_eq!(
            provider_base_url("openai-compatible"),
            "OPENWOP_PROVIDER_OPENAI_COMPATIBLE_BASE_URL"
        );
    }

    fn full() -> WorkerEnv {
        let mut e = WorkerEnv {
            run_namespace: Some("team-a".into()),
            run_name: Some("triage-1".into()),
            run_id: Some("uid-123".into()),
            attempt: Some(2),
            snapshot: snapshot_path(),
            nats_url: "nats://nats.openwop-system.svc:4222".into(),
            nats_credentials_dir: Some(NATS_CREDENTIALS_MOUNT.into()),
            events_stream: "OPENWOP_EVENTS".into(),
            events_max_age: Some(Duration::from_secs(604_800)),
            events_subject: Some(subjects::events_subject("team-a", "uid-123")),
            otlp_endpoint: Some("http://collector:4318".into()),
            provider_base_urls: BTreeMap::new(),
            testing: TestingEnv {
                otel_scrape_endpoint: Some("http://op:8080/v1/traces".into()),
                fault_pause_at_sequence: Some(7),
            },
            tuning: Tuning {
                secrets_dir: Some("/s".into()),
                termination_log: Some("/t".into()),
                publish_deadline: Some(Duration::from_millis(1500)),
                reasoning_max_per_node: Some(9),
                stop_grace: Some(Duration::from_millis(250)),
            },
        };
        e.set_provider_base_url("local-llm", "http://vllm:8000/v1");
        e
    }

    #[test]
    fn every_value_round_trips_through_the_variables() {
        for env in [full(), WorkerEnv::default()] {
            let vars = env.to_env_vars();
            assert_eq!(WorkerEnv::from_vars(vars.clone()).unwrap(), env, "{vars:?}");
        }
        // Each optional value alone, too.
        let full = full();
        let vars = full.to_env_vars();
        for (name, _) in &vars {
            let without: Vec<_> = vars.iter().filter(|(k, _)| k != name).cloned().collect();
            let back = WorkerEnv::from_vars(without.clone()).unwrap();
            assert_eq!(WorkerEnv::from_vars(back.to_env_vars()).unwrap(), back);
            assert!(
                !back.to_env_vars().iter().any(|(k, _)| k == name) || {
                    // Defaults are written back: snapshot, NATS URL, stream and retention.
                    [SNAPSHOT, NATS_URL, EVENTS_STREAM, EVENTS_MAX_AGE_SECONDS]
                        .contains(&name.as_str())
                }
            );
        }
        assert_eq!(
            full.provider_base_url("local-llm"),
            Some("http://vllm:8000/v1")
        );
        assert!(vars.contains(&(
            "OPENWOP_PROVIDER_LOCAL_LLM_BASE_URL".into(),
            "http://vllm:8000/v1".into()
        )));
    }

    #[test]
    fn every_name_is_listed_once_and_unknown_variables_are_ignored() {
        let mut names = ALL.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        for (k, _) in full().to_env_vars() {
            assert!(
                ALL.contains(&k.as_str()) || k.ends_with(BASE_URL_SUFFIX),
                "{k} is not part of the contract"
            );
        }
        let env =
            WorkerEnv::from_vars([("PATH", "/bin"), ("OPENWOP_PROVIDER__BASE_URL", "x")]).unwrap();
        assert_eq!(env, WorkerEnv::default());
    }

    #[test]
    fn empty_values_are_unset_and_bad_numbers_name_the_variable() {
        let env =
            WorkerEnv::from_vars([(SNAPSHOT, ""), (RUN_ID, " "), (EVENTS_MAX_AGE_SECONDS, "0")])
                .unwrap();
        assert_eq!(env, WorkerEnv::default());
        assert_eq!(env.snapshot, "/var/run/openwop/snapshot/snapshot.json");
        let e = WorkerEnv::from_vars([(EVENTS_MAX_AGE_SECONDS, "7d")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "environment variable OPENWOP_EVENTS_MAX_AGE_SECONDS is \"7d\": whole seconds (0: kept until purged)"
        );
        let e = WorkerEnv::from_vars([(FAULT_PAUSE_AT_SEQUENCE, "-1")]).unwrap_err();
        assert_eq!(e.name, FAULT_PAUSE_AT_SEQUENCE);
    }

    #[test]
    fn the_subject_defaults_to_the_runs() {
        let env = WorkerEnv::default();
        assert_eq!(
            env.events_subject_or("ns", "u1"),
            subjects::events_subject("ns", "u1")
        );
        assert_eq!(env.stream_spec().name, subjects::DEFAULT_STREAM);
    }
}
