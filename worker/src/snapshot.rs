//! The run snapshot the operator mounts for the worker (`operator/src/snapshot.rs`):
//! `{run: {namespace, name, uid, runId}, workflow, providers, inputs, configurable, answers, cancel?}`.

use serde::Deserialize;
use serde_json::Value;

/// Where the run lives.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRef {
    pub namespace: String,
    pub name: String,
    #[serde(default)]
    pub uid: Option<String>,
    pub run_id: String,
}

/// A provider credential mount, as the operator wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderMount {
    pub provider: String,
    #[serde(default)]
    pub mount_as: Option<String>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub env_name: Option<String>,
    /// API root override (needed for `openai-compatible`); the worker's
    /// `OPENWOP_PROVIDER_<NAME>_BASE_URL` wins over it.
    #[serde(default)]
    pub base_url: Option<String>,
}

/// An answer to an interrupt (`Run.spec.answers[]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    pub interrupt_id: String,
    #[serde(default)]
    pub value: Option<Value>,
    #[serde(default)]
    pub approved: Option<bool>,
    #[serde(default)]
    pub comment: Option<String>,
    /// Set by a relay that forwards content it did not author; `untrusted` can never approve.
    #[serde(default)]
    pub content_trust: Option<String>,
}

/// The snapshot document.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    pub run: RunRef,
    pub workflow: Value,
    #[serde(default)]
    pub providers: Vec<ProviderMount>,
    #[serde(default)]
    pub inputs: Value,
    #[serde(default)]
    pub configurable: Value,
    #[serde(default)]
    pub answers: Vec<Answer>,
    /// `Run.spec.cancel`: the worker records `run.cancelled` and nothing else.
    #[serde(default)]
    pub cancel: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("cannot read snapshot {path}: {reason}; check the snapshot ConfigMap is mounted")]
    Read { path: String, reason: String },
    #[error(
        "snapshot {path} is not a valid run snapshot at line {line}, column {column}: {reason}"
    )]
    Parse {
        path: String,
        line: usize,
        column: usize,
        reason: String,
    },
}

impl Snapshot {
    /// Parses a snapshot document.
    pub fn from_json(text: &str, path: &str) -> Result<Snapshot, SnapshotError> {
        serde_json::from_str(text).map_err(|e| SnapshotError::Parse {
            path: path.to_owned(),
            line: e.line(),
            column: e.column(),
            // serde's message names the field, never the value.
            reason: e.to_string(),
        })
    }

    /// Reads and parses the snapshot file.
    pub fn load(path: &str) -> Result<Snapshot, SnapshotError> {
        let text = std::fs::read_to_string(path).map_err(|e| SnapshotError::Read {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        Self::from_json(&text, path)
    }

    /// The answer to `interrupt_id`, the last one when several were given.
    pub fn answer(&self, interrupt_id: &str) -> Option<&Answer> {
        self.answers
            .iter()
            .rev()
            .find(|a| a.interrupt_id == interrupt_id)
    }

    /// `configurable.escalationThreshold` (CP-1), default 0.7.
    pub fn escalation_threshold(&self) -> f64 {
        self.configurable
            .get("escalationThreshold")
            .and_then(Value::as_f64)
            .filter(|t| (0.0..=1.0).contains(t))
            .unwrap_or(0.7)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_operator_shape_and_finds_answers() {
        let s = Snapshot::from_json(
            r#"{"run":{"namespace":"ns","name":"r1","uid":"u","runId":"u"},
                "workflowRef":{"name":"w"},
                "workflow":{"id":"w","nodes":[{"id":"a","typeId":"core.identity"}]},
                "providers":[{"provider":"openai","mountAs":"file","path":"/p/openai/key"}],
                "inputs":{"x":1},"configurable":{"escalationThreshold":0.5},
                "answers":[{"interruptId":"i1","approved":false},{"interruptId":"i1","approved":true}],
                "cancel":true}"#,
            "s.json",
        )
        .unwrap();
        assert_eq!(s.run.run_id, "u");
        assert_eq!(s.answer("i1").unwrap().approved, Some(true));
        assert!(s.answer("i2").is_none());
        assert_eq!(s.escalation_threshold(), 0.5);
        assert_eq!(s.providers[0].path.as_deref(), Some("/p/openai/key"));
        assert!(s.cancel);
    }

    #[test]
    fn a_missing_run_block_is_a_clear_error() {
        let e = Snapshot::from_json(r#"{"workflow":{}}"#, "s.json").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("missing field `run`"), "{msg}");
        assert!(msg.contains("s.json"));
    }
}
