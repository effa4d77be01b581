//! Reserved `RunOptions.configurable` keys the host itself honours (`run-options.md`
//! §"Reserved keys"), read the same way where a run is created (the REST API refuses a bad
//! value before the run exists) and where it executes (the worker enforces the value).
//!
//! * `runTimeoutMs` (RFC 0058): the run's wall-clock deadline in milliseconds, resolved as
//!   `min(runTimeoutMs, limits.maxRunDurationMs)`; a value that is not a whole number of at
//!   least 1 ms is refused at run creation, never at run time.

use serde_json::Value;

/// The `configurable` key of the run's deadline.
pub const RUN_TIMEOUT_MS: &str = "runTimeoutMs";

/// A reserved `configurable` value the host cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunOptionError {
    #[error(
        "configurable.runTimeoutMs is {0}: use a whole number of milliseconds of at least 1 (the run's wall-clock deadline; the host caps it at its limits.maxRunDurationMs)"
    )]
    RunTimeoutMs(String),
}

impl RunOptionError {
    /// The `configurable` key at fault.
    pub fn key(&self) -> &'static str {
        match self {
            RunOptionError::RunTimeoutMs(_) => RUN_TIMEOUT_MS,
        }
    }
}

/// The `runTimeoutMs` asked for in `configurable` (an object; anything else has none).
pub fn run_timeout_ms(configurable: &Value) -> Result<Option<u64>, RunOptionError> {
    match configurable.get(RUN_TIMEOUT_MS) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|ms| *ms >= 1)
            .map(Some)
            .ok_or_else(|| RunOptionError::RunTimeoutMs(v.to_string())),
    }
}

/// The deadline a run gets: the smallest of the workflow's own timeout, the run's
/// `runTimeoutMs` and the host's `maxRunDurationMs` (`None`: no deadline).
pub fn run_deadline_ms(
    workflow: Option<u64>,
    requested: Option<u64>,
    host_max: Option<u64>,
) -> Option<u64> {
    [workflow, requested, host_max].into_iter().flatten().min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn run_timeout_is_a_positive_whole_number_of_milliseconds() {
        assert_eq!(run_timeout_ms(&json!({})), Ok(None));
        assert_eq!(run_timeout_ms(&json!({"runTimeoutMs": null})), Ok(None));
        assert_eq!(run_timeout_ms(&json!({"runTimeoutMs": 1})), Ok(Some(1)));
        assert_eq!(
            run_timeout_ms(&json!({"runTimeoutMs": 86_400_000})),
            Ok(Some(86_400_000))
        );
        for bad in [json!(0), json!(-5), json!(1.5), json!("60000"), json!(true)] {
            let e = run_timeout_ms(&json!({ "runTimeoutMs": bad })).unwrap_err();
            assert_eq!(e, RunOptionError::RunTimeoutMs(bad.to_string()));
            assert_eq!(e.key(), "runTimeoutMs");
        }
        assert_eq!(run_timeout_ms(&json!("not an object")), Ok(None));
    }

    #[test]
    fn the_deadline_is_the_smallest_bound_given() {
        assert_eq!(run_deadline_ms(None, None, None), None);
        assert_eq!(run_deadline_ms(None, Some(5_000), None), Some(5_000));
        // Clamped to the host's ceiling, and never above the workflow's own timeout.
        assert_eq!(
            run_deadline_ms(None, Some(10_000), Some(3_000)),
            Some(3_000)
        );
        assert_eq!(
            run_deadline_ms(Some(2_000), Some(10_000), Some(3_000)),
            Some(2_000)
        );
        assert_eq!(run_deadline_ms(Some(9_000), None, None), Some(9_000));
    }
}
