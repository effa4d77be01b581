//! The node types this host executes: one list, read by the operator's Workflow validation
//! ([`crate::workflow_check::NodeRegistry::builtin`]), the worker's dispatch
//! ([`executor_of`]) and discovery's `nodeTypes`.

/// How the worker executes a node type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Executor {
    /// Passes its inputs through (`output` = `input` unless given); never emits `agent.*`.
    Passthrough,
    /// One LLM emission through the retry router and the envelope pipeline, with
    /// clarification turns.
    Prompt,
    /// The RFC 0023 conformance mock agent (gated: `conformance-*` workflows or an opt-in).
    MockAgent,
    /// `core.delay`: waits in the pod up to the host's durable-wait threshold; longer, the
    /// wake time is recorded and the pod exits (`run::waits`).
    Delay,
    /// `core.subWorkflow`: records intent (`node.dispatched`); the operator runs the child
    /// and writes its outcome into the snapshot (`run::waits`).
    SubWorkflow,
}

/// How a node type's `config` is checked at registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigCheck {
    /// Any JSON object.
    AnyObject,
    /// The closed RFC 0023 mock-agent config.
    MockAgent,
}

/// A built-in node type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinNode {
    pub type_id: &'static str,
    pub executor: Executor,
    pub config: ConfigCheck,
}

/// The conformance-only mock agent node type (RFC 0023).
pub const MOCK_AGENT_TYPE_ID: &str = "core.conformance.mock-agent";

/// Every node type the worker executes.
pub const BUILTIN_NODES: &[BuiltinNode] = &[
    BuiltinNode {
        type_id: "core.identity",
        executor: Executor::Passthrough,
        config: ConfigCheck::AnyObject,
    },
    BuiltinNode {
        type_id: "core.flow.noop",
        executor: Executor::Passthrough,
        config: ConfigCheck::AnyObject,
    },
    BuiltinNode {
        type_id: "core.ai.callPrompt",
        executor: Executor::Prompt,
        config: ConfigCheck::AnyObject,
    },
    BuiltinNode {
        type_id: "core.ai.structuredOutput",
        executor: Executor::Prompt,
        config: ConfigCheck::AnyObject,
    },
    BuiltinNode {
        type_id: MOCK_AGENT_TYPE_ID,
        executor: Executor::MockAgent,
        config: ConfigCheck::MockAgent,
    },
    BuiltinNode {
        type_id: "core.delay",
        executor: Executor::Delay,
        config: ConfigCheck::AnyObject,
    },
    BuiltinNode {
        type_id: "core.subWorkflow",
        executor: Executor::SubWorkflow,
        config: ConfigCheck::AnyObject,
    },
    // The conformance fixtures' spelling of the same node (node-library.md §3.13).
    BuiltinNode {
        type_id: "core.control.subWorkflow",
        executor: Executor::SubWorkflow,
        config: ConfigCheck::AnyObject,
    },
];

/// How the worker executes `type_id`; `None` for a type this host cannot execute.
pub fn executor_of(type_id: &str) -> Option<Executor> {
    BUILTIN_NODES
        .iter()
        .find(|n| n.type_id == type_id)
        .map(|n| n.executor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_is_executable_and_unique() {
        for (i, n) in BUILTIN_NODES.iter().enumerate() {
            assert_eq!(executor_of(n.type_id), Some(n.executor));
            assert!(
                BUILTIN_NODES[..i].iter().all(|m| m.type_id != n.type_id),
                "{} twice",
                n.type_id
            );
        }
        assert_eq!(executor_of("core.unknown"), None);
    }
}
