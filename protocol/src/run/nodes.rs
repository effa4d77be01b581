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
    /// Evaluates a predicate (or an edge-condition-shaped `condition`) against its input
    /// `value`: outputs `{branch: "then" | "else", matched, value}`; outgoing edge conditions
    /// route on them.
    Conditional,
    /// Annotates its input `array`: outputs `{items: [{item, index, total}], total}`.
    Iterator,
    /// Selects route labels for its input `value`: outputs `{branches, value}`.
    Router,
    /// Fan-in once its incoming edges' trigger rule is met: outputs `{inputs: {<source>:
    /// outputs}}` (+ `merged` with a `mode`).
    Merge,
    /// Combines the upstream `output` arrays (`core.openwop.flow` merge): outputs `{merged}`.
    ArrayMerge,
    /// Writes a declared workflow variable (type-checked): outputs `{name, value}`.
    SetVariable,
    /// Reads a declared workflow variable as this node sees it: outputs `{value}`.
    GetVariable,
}

/// How a node type's `config` is checked at registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigCheck {
    /// Any JSON object.
    AnyObject,
    /// The closed RFC 0023 mock-agent config.
    MockAgent,
    /// A JSON Schema (the text of a file under `schemas/nodes/`).
    Schema(&'static str),
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

const CONDITIONAL_CONFIG: &str =
    include_str!("../../../schemas/nodes/core.conditional.config.schema.json");
const LOOP_CONFIG: &str = include_str!("../../../schemas/nodes/core.loop.config.schema.json");
const PARALLEL_CONFIG: &str =
    include_str!("../../../schemas/nodes/core.parallel.config.schema.json");
const MERGE_CONFIG: &str = include_str!("../../../schemas/nodes/core.merge.config.schema.json");
const SET_VARIABLE_CONFIG: &str =
    include_str!("../../../schemas/nodes/core.setVariable.config.schema.json");
const GET_VARIABLE_CONFIG: &str =
    include_str!("../../../schemas/nodes/core.getVariable.config.schema.json");

/// The node types that write a workflow variable (the `config.name` they write).
pub const SET_VARIABLE_TYPE_ID: &str = "core.setVariable";
/// The node type that reads a workflow variable.
pub const GET_VARIABLE_TYPE_ID: &str = "core.getVariable";

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
        type_id: "core.conditional",
        executor: Executor::Conditional,
        config: ConfigCheck::Schema(CONDITIONAL_CONFIG),
    },
    BuiltinNode {
        type_id: "core.flow.if",
        executor: Executor::Conditional,
        config: ConfigCheck::Schema(CONDITIONAL_CONFIG),
    },
    BuiltinNode {
        type_id: "core.loop",
        executor: Executor::Iterator,
        config: ConfigCheck::Schema(LOOP_CONFIG),
    },
    BuiltinNode {
        type_id: "core.flow.iterator",
        executor: Executor::Iterator,
        config: ConfigCheck::Schema(LOOP_CONFIG),
    },
    BuiltinNode {
        type_id: "core.parallel",
        executor: Executor::Router,
        config: ConfigCheck::Schema(PARALLEL_CONFIG),
    },
    BuiltinNode {
        type_id: "core.flow.router",
        executor: Executor::Router,
        config: ConfigCheck::Schema(PARALLEL_CONFIG),
    },
    BuiltinNode {
        type_id: "core.merge",
        executor: Executor::Merge,
        config: ConfigCheck::Schema(MERGE_CONFIG),
    },
    BuiltinNode {
        type_id: "core.flow.merge",
        executor: Executor::ArrayMerge,
        config: ConfigCheck::Schema(MERGE_CONFIG),
    },
    BuiltinNode {
        type_id: SET_VARIABLE_TYPE_ID,
        executor: Executor::SetVariable,
        config: ConfigCheck::Schema(SET_VARIABLE_CONFIG),
    },
    BuiltinNode {
        type_id: GET_VARIABLE_TYPE_ID,
        executor: Executor::GetVariable,
        config: ConfigCheck::Schema(GET_VARIABLE_CONFIG),
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

    #[test]
    fn every_config_schema_compiles() {
        for n in BUILTIN_NODES {
            if let ConfigCheck::Schema(text) = n.config {
                let v: serde_json::Value = serde_json::from_str(text).unwrap();
                crate::schema::compile(&v).unwrap_or_else(|e| panic!("{}: {e}", n.type_id));
            }
        }
    }
}
