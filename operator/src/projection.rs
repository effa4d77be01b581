//! Why a worker crashed, from its log tail. The event → status projection itself and the
//! worker's termination summary are protocol's
//! ([`openwop_protocol::run::projection::Projection`]).

use openwop_protocol::run::projection::Projection;
use openwop_protocol::run::status::MAX_MESSAGE_CHARS;
use openwop_protocol::text::truncate;
use serde_json::Value;

/// Why a worker failed, from a termination message that is not a summary: the log tail the
/// kubelet puts there (`terminationMessagePolicy: FallbackToLogsOnError`) when the worker
/// exits non-zero without writing one. The last ERROR line of the worker's JSON log as
/// `message: error`, else the last plain-text line (a panic); `None` when the tail is only
/// ordinary log lines (a killed worker). Bounded; the worker's log is redacted at the source.
pub fn crash_reason(text: &str) -> Option<String> {
    if Projection::from_termination_message(text).is_some() {
        return None;
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let last_error = lines.iter().rev().find_map(|l| {
        let v: Value = serde_json::from_str(l).ok()?;
        if v.get("level")?.as_str()? != "ERROR" {
            return None;
        }
        let fields = v.get("fields")?;
        let message = fields.get("message")?.as_str()?;
        Some(match fields.get("error").and_then(Value::as_str) {
            Some(e) => format!("{message}: {e}"),
            None => message.to_owned(),
        })
    });
    let plain = || {
        let text: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| serde_json::from_str::<Value>(l).is_err())
            .collect();
        // A panic prints its location on one line and its message on the next.
        match text.iter().rposition(|l| l.contains("panicked at")) {
            Some(i) => Some(text[i..text.len().min(i + 2)].join(" ")),
            None => text.last().map(|l| (*l).to_owned()),
        }
    };
    let reason = last_error.or_else(plain)?;
    Some(truncate(&reason, MAX_MESSAGE_CHARS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_reason_is_the_last_error_of_the_log_tail() {
        let tail = concat!(
            r#"{"timestamp":"t","level":"INFO","fields":{"message":"event log read"},"target":"w"}"#,
            "\n",
            r#"{"timestamp":"t","level":"ERROR","fields":{"message":"unusable NATS credentials","error":"has `username` but no `password`"},"target":"w"}"#,
            "\n",
            r#"{"timestamp":"t","level":"INFO","fields":{"message":"bye"},"target":"w"}"#,
            "\n"
        );
        assert_eq!(
            crash_reason(tail).as_deref(),
            Some("unusable NATS credentials: has `username` but no `password`")
        );
        assert_eq!(
            crash_reason(
                "thread 'main' panicked at x.rs:1:\nboom\nnote: run with RUST_BACKTRACE=1\n"
            )
            .as_deref(),
            Some("thread 'main' panicked at x.rs:1: boom")
        );
        assert_eq!(
            crash_reason("out of memory\n").as_deref(),
            Some("out of memory")
        );
        // Only ordinary log lines (SIGKILL mid-step): no reason to quote.
        let killed = r#"{"timestamp":"t","level":"INFO","fields":{"message":"mock provider call"},"target":"w"}"#;
        assert_eq!(crash_reason(killed), None);
        assert_eq!(crash_reason("  \n"), None);
        // A worker summary is not a crash reason.
        assert_eq!(crash_reason(r#"{"phase":"failed","events":3}"#), None);
        assert!(crash_reason(&"x".repeat(5000)).unwrap().chars().count() <= MAX_MESSAGE_CHARS + 1);
    }
}
