//! The nodes that complete or fail at once: `core.noop` (and `core.start`, `core.end`) and
//! `core.fail`. Their semantics are protocol's (`openwop_protocol::run::nodes`).

use openwop_protocol::graph::Node;
use openwop_protocol::run::nodes::{fail_error, noop_outputs};
use serde_json::Value;

use super::outcome::NodeOutcome;

/// `core.noop`: completes with `{value}` when an input `value` is wired, else `{}`.
pub(super) fn noop(inputs: &Value) -> NodeOutcome {
    NodeOutcome::Completed(noop_outputs(inputs))
}

/// `core.fail`: fails with its configured error, never retried.
pub(super) fn fail(node: &Node) -> NodeOutcome {
    NodeOutcome::Failed(fail_error(&node.config))
}
