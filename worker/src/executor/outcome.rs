//! How one node's execution ended, and the error a failure carries: what the dispatch in
//! `executor` and the node executors it calls (`basic`, `flow`) both name. A leaf, so those
//! executors never import the module that calls them.

use openwop_protocol::events::{ErrorInfo, InterruptKind};
use serde_json::Value;

/// How a node left its execution.
pub(super) enum NodeOutcome {
    Completed(Value),
    Failed(ErrorInfo),
    Suspended(String, InterruptKind),
    /// Waits without a pod (a recorded timer or child run): the operator wakes the run.
    Dormant,
}

/// A node failure's error: `code`, `message`, whether a retry may help.
pub(super) fn error(code: &str, message: impl Into<String>, retryable: bool) -> ErrorInfo {
    ErrorInfo {
        code: code.into(),
        message: message.into(),
        details: None,
        retryable: Some(retryable),
    }
}
