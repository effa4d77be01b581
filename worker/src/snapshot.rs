//! The run snapshot the operator mounts for the worker (`operator/src/snapshot.rs`):
//! `{run: {namespace, name, uid, runId}, workflow, providers, inputs, configurable, answers,
//! cancel?, providerMocks?}`.

use std::collections::BTreeMap;

use openwop_providers::MockScript;
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
    /// `Run.spec.providerMocks` (copied by the operator only where its gate allows):
    /// node id → `{responses: [...]}` or `{turns: [{responses: [...]}, ...]}`. Read with
    /// [`Snapshot::mock_scripts`].
    #[serde(default)]
    pub provider_mocks: BTreeMap<String, Value>,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot providerMocks at {pointer}: {reason}")]
    Mocks { pointer: String, reason: String },
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

    /// The provider mocks as scripts: node id → one script per clarification turn.
    pub fn mock_scripts(&self) -> Result<BTreeMap<String, Vec<MockScript>>, SnapshotError> {
        let mut out = BTreeMap::new();
        for (node, v) in &self.provider_mocks {
            let base = format!("/providerMocks/{}", escape_pointer(node));
            let fail = |pointer: String, reason: String| SnapshotError::Mocks { pointer, reason };
            let obj = v.as_object().ok_or_else(|| {
                fail(
                    base.clone(),
                    "must be an object with `responses` or `turns`".into(),
                )
            })?;
            let turns: Vec<(String, &Value)> = match (obj.get("responses"), obj.get("turns")) {
                (Some(_), None) => vec![(base.clone(), v)],
                (None, Some(Value::Array(turns))) => turns
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (format!("{base}/turns/{i}"), t))
                    .collect(),
                (None, Some(_)) => {
                    return Err(fail(
                        format!("{base}/turns"),
                        "must be a list of {responses: [...]}".into(),
                    ));
                }
                _ => {
                    return Err(fail(
                        base,
                        "set exactly one of `responses` or `turns`".into(),
                    ));
                }
            };
            let scripts = turns
                .into_iter()
                .map(|(at, t)| {
                    MockScript::from_json(t)
                        .map_err(|e| fail(format!("{at}{}", e.pointer), e.reason))
                })
                .collect::<Result<Vec<_>, _>>()?;
            out.insert(node.clone(), scripts);
        }
        Ok(out)
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

/// RFC 6901: `~` → `~0`, `/` → `~1`.
fn escape_pointer(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
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

    fn with_mocks(mocks: &str) -> Snapshot {
        Snapshot::from_json(
            &format!(r#"{{"run":{{"namespace":"ns","name":"r","runId":"u"}},"workflow":{{}},"providerMocks":{mocks}}}"#),
            "s.json",
        )
        .unwrap()
    }

    #[test]
    fn provider_mocks_become_one_script_per_turn() {
        let s = with_mocks(
            r#"{"q":{"responses":[{"stopReason":"stop","content":"{}","delayMs":250}]},
                "p":{"turns":[{"responses":[{"stopReason":"stop"}]},{"responses":[{"stopReason":"max_tokens"},{"stopReason":"stop"}]}]}}"#,
        );
        let m = s.mock_scripts().unwrap();
        assert_eq!(m["q"].len(), 1);
        assert_eq!(
            m["q"][0].steps[0].delay,
            std::time::Duration::from_millis(250)
        );
        assert_eq!(m["p"].len(), 2);
        assert_eq!(m["p"][1].steps.len(), 2);
        // No mocks: no scripts (the pre-existing snapshots have no key at all).
        let none = Snapshot::from_json(
            r#"{"run":{"namespace":"n","name":"r","runId":"u"},"workflow":{}}"#,
            "s",
        )
        .unwrap();
        assert!(none.mock_scripts().unwrap().is_empty());
    }

    #[test]
    fn bad_provider_mocks_name_the_json_pointer() {
        let e = with_mocks(r#"{"a/b":{"turns":[{"responses":[{"stopReason":"stop"}]},{"responses":[{"stopReason":"stop","delayMs":-1}]}]}}"#)
            .mock_scripts()
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "snapshot providerMocks at /providerMocks/a~1b/turns/1/responses/0/delayMs: must be a whole number of milliseconds"
        );
        let e = with_mocks(r#"{"q":{}}"#)
            .mock_scripts()
            .unwrap_err()
            .to_string();
        assert!(e.contains("/providerMocks/q: set exactly one of"), "{e}");
        let e = with_mocks(r#"{"q":{"responses":[{"stopReason":"stop","bogus":1}]}}"#)
            .mock_scripts()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/providerMocks/q/responses/0") && e.contains("bogus"),
            "{e}"
        );
    }
}
