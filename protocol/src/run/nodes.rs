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
    /// One HTTP call through the egress guard, journaled (`crate::http`).
    Http,
    /// Completes at once: outputs `{value}` when an input `value` is wired, else `{}`.
    Noop,
    /// Fails with its configured error (`core.fail`), never retried.
    Fail,
    /// Waits for a person: an approval decision or answers (`core.approvalGate`,
    /// `core.clarificationGate`, `core.interrupt`). The wait is recorded in the log and holds
    /// no pod; an answer in the Run's `spec.answers` resumes it.
    Gate,
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
    /// `core.delay`: waits in the pod up to the host's durable-wait threshold; longer, the
    /// wake time is recorded and the pod exits (`run::waits`).
    Delay,
    /// `core.subWorkflow`: records intent (`node.dispatched`); the operator runs the child
    /// and writes its outcome into the snapshot (`run::waits`).
    SubWorkflow,
    /// `core.mcp.toolCall`: one call of one ToolServer tool without a model, recorded and
    /// approved like an LLM node's tool call (`crate::tools::config::ToolCallConfig`).
    ToolCall,
}

/// How a node type's `config` is checked at registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigCheck {
    /// Any JSON object.
    AnyObject,
    /// The closed RFC 0023 mock-agent config.
    MockAgent,
    /// The HTTP node's config in one of its dialects ([`crate::http::HttpConfig::parse`]).
    Http(crate::http::Dialect),
    /// A JSON Schema from `schemas/nodes/`: the document `doc` (its text), or the entry `def`
    /// under its `$defs`.
    Schema {
        doc: &'static str,
        def: Option<&'static str>,
    },
}

/// The config schemas of the gate and basic node types (`$defs`: noop, fail, approval,
/// clarification, custom, interrupt).
pub const GATES_CONFIG_SCHEMA: &str =
    include_str!("../../../schemas/nodes/gates.config.schema.json");

const fn gates(def: &'static str) -> ConfigCheck {
    ConfigCheck::Schema {
        doc: GATES_CONFIG_SCHEMA,
        def: Some(def),
    }
}

/// A whole schema document as a node's config check.
const fn schema(doc: &'static str) -> ConfigCheck {
    ConfigCheck::Schema { doc, def: None }
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

/// Workflow ids with this prefix may use the mock agent without a host opt-in.
pub const CONFORMANCE_ID_PREFIX: &str = "conformance-";

/// Whether a workflow may run `core.conformance.mock-agent` (RFC 0023): its id starts with
/// [`CONFORMANCE_ID_PREFIX`], or the host opted in for the workflow's tenant. The Workflow
/// controller asks this with the namespace's opt-in, and the worker with the opt-in the
/// operator froze in the run snapshot's host profile ([`crate::run::host::HostProfile::mock_agent`]),
/// so a Workflow the operator accepts is one its worker runs.
pub fn mock_agent_allowed(workflow_id: &str, host_opt_in: bool) -> bool {
    host_opt_in || workflow_id.starts_with(CONFORMANCE_ID_PREFIX)
}

/// Why a mock-agent node was refused, and what to do about it.
pub fn mock_agent_refusal() -> String {
    format!(
        "{MOCK_AGENT_TYPE_ID} is conformance-only (RFC 0023): give the workflow an id starting with {CONFORMANCE_ID_PREFIX:?}, or have the operator admin allow the mock agent for this namespace (conformance.mockAgentNamespaces)"
    )
}

/// The approval gate.
pub const APPROVAL_GATE_TYPE_ID: &str = "core.approvalGate";
/// The clarification gate.
pub const CLARIFICATION_GATE_TYPE_ID: &str = "core.clarificationGate";
/// The interrupt primitive (`config.kind` says what it waits for).
pub const INTERRUPT_TYPE_ID: &str = "core.interrupt";

const CONDITIONAL_CONFIG: &str =
    include_str!("../../../schemas/nodes/core.conditional.config.schema.json");
const LOOP_CONFIG: &str = include_str!("../../../schemas/nodes/core.loop.config.schema.json");
const PARALLEL_CONFIG: &str =
    include_str!("../../../schemas/nodes/core.parallel.config.schema.json");
const MERGE_CONFIG: &str = include_str!("../../../schemas/nodes/core.merge.config.schema.json");
const SET_VARIABLE_CONFIG: &str =
    include_str!("../../../schemas/nodes/core.setVariable.config.schema.json");
const TOOL_CALL_CONFIG: &str =
    include_str!("../../../schemas/nodes/core.mcp.toolCall.config.schema.json");
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
        type_id: crate::http::FETCH_TYPE_ID,
        executor: Executor::Http,
        config: ConfigCheck::Http(crate::http::Dialect::Fetch),
    },
    BuiltinNode {
        type_id: crate::http::REQUEST_TYPE_ID,
        executor: Executor::Http,
        config: ConfigCheck::Http(crate::http::Dialect::Request),
    },
    BuiltinNode {
        type_id: "core.noop",
        executor: Executor::Noop,
        config: gates("noop"),
    },
    BuiltinNode {
        type_id: "core.start",
        executor: Executor::Noop,
        config: gates("noop"),
    },
    BuiltinNode {
        type_id: "core.end",
        executor: Executor::Noop,
        config: gates("noop"),
    },
    BuiltinNode {
        type_id: "core.fail",
        executor: Executor::Fail,
        config: gates("fail"),
    },
    BuiltinNode {
        type_id: APPROVAL_GATE_TYPE_ID,
        executor: Executor::Gate,
        config: gates("approval"),
    },
    BuiltinNode {
        type_id: CLARIFICATION_GATE_TYPE_ID,
        executor: Executor::Gate,
        config: gates("clarification"),
    },
    BuiltinNode {
        type_id: INTERRUPT_TYPE_ID,
        executor: Executor::Gate,
        config: gates("interrupt"),
    },
    BuiltinNode {
        type_id: "core.conditional",
        executor: Executor::Conditional,
        config: schema(CONDITIONAL_CONFIG),
    },
    BuiltinNode {
        type_id: "core.flow.if",
        executor: Executor::Conditional,
        config: schema(CONDITIONAL_CONFIG),
    },
    BuiltinNode {
        type_id: "core.loop",
        executor: Executor::Iterator,
        config: schema(LOOP_CONFIG),
    },
    BuiltinNode {
        type_id: "core.flow.iterator",
        executor: Executor::Iterator,
        config: schema(LOOP_CONFIG),
    },
    BuiltinNode {
        type_id: "core.parallel",
        executor: Executor::Router,
        config: schema(PARALLEL_CONFIG),
    },
    BuiltinNode {
        type_id: "core.flow.router",
        executor: Executor::Router,
        config: schema(PARALLEL_CONFIG),
    },
    BuiltinNode {
        type_id: "core.merge",
        executor: Executor::Merge,
        config: schema(MERGE_CONFIG),
    },
    BuiltinNode {
        type_id: "core.flow.merge",
        executor: Executor::ArrayMerge,
        config: schema(MERGE_CONFIG),
    },
    BuiltinNode {
        type_id: SET_VARIABLE_TYPE_ID,
        executor: Executor::SetVariable,
        config: schema(SET_VARIABLE_CONFIG),
    },
    BuiltinNode {
        type_id: GET_VARIABLE_TYPE_ID,
        executor: Executor::GetVariable,
        config: schema(GET_VARIABLE_CONFIG),
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
    BuiltinNode {
        type_id: crate::tools::config::TOOL_CALL_TYPE_ID,
        executor: Executor::ToolCall,
        config: schema(TOOL_CALL_CONFIG),
    },
];

/// The ToolServers a node of `type_id` with `config` calls, as an LLM node's tool config:
/// an LLM node's `tools` (`None` when they do not read), a `core.mcp.toolCall`'s one tool;
/// `None` for every other node type.
pub fn tools_of(type_id: &str, config: &serde_json::Value) -> Option<crate::tools::ToolsConfig> {
    use crate::tools::config::ToolCallConfig;
    match executor_of(type_id)? {
        Executor::Prompt => crate::tools::ToolsConfig::parse(config).ok(),
        Executor::ToolCall => ToolCallConfig::parse(config).ok().map(|c| c.as_tools()),
        _ => None,
    }
}

/// The error code `core.fail` fails with unless its config names one (FX).
pub const FAIL_DEFAULT_CODE: &str = "conformance_test_failure";
/// The message `core.fail` fails with unless its config names one (FX).
pub const FAIL_DEFAULT_MESSAGE: &str = "Intentional conformance failure";

/// The outputs of a `core.noop` (and `core.start` / `core.end`) given its resolved inputs:
/// `{value}` when an input `value` is wired, else nothing.
pub fn noop_outputs(inputs: &serde_json::Value) -> serde_json::Value {
    match inputs.get("value") {
        Some(v) => serde_json::json!({ "value": v }),
        None => serde_json::json!({}),
    }
}

/// The error a `core.fail` node fails with: its config's `code`, `message` and `details`, or
/// the conformance defaults; never retryable, so `maxRetries` does not re-run it.
pub fn fail_error(config: &serde_json::Value) -> crate::events::ErrorInfo {
    let text = |k: &str, default: &str| {
        config
            .get(k)
            .and_then(serde_json::Value::as_str)
            .unwrap_or(default)
            .to_owned()
    };
    crate::events::ErrorInfo {
        code: text("code", FAIL_DEFAULT_CODE),
        message: text("message", FAIL_DEFAULT_MESSAGE),
        details: config.get("details").cloned(),
        retryable: Some(false),
    }
}

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
    fn noop_and_fail_semantics() {
        use serde_json::json;
        assert_eq!(noop_outputs(&json!({"input": {"a": 1}})), json!({}));
        assert_eq!(noop_outputs(&json!({"value": [1]})), json!({"value": [1]}));
        let e = fail_error(&json!({}));
        assert_eq!(
            (e.code.as_str(), e.message.as_str(), e.retryable),
            (FAIL_DEFAULT_CODE, FAIL_DEFAULT_MESSAGE, Some(false))
        );
        let e = fail_error(&json!({"code": "boom", "message": "m", "details": {"a": 1}}));
        assert_eq!(
            (e.code.as_str(), e.message.as_str(), e.details),
            ("boom", "m", Some(json!({"a": 1})))
        );
    }

    #[test]
    fn every_config_schema_compiles() {
        for n in BUILTIN_NODES {
            if let ConfigCheck::Schema { doc, def } = n.config {
                crate::workflow_check::schema_def(doc, def)
                    .unwrap_or_else(|e| panic!("{}: {e}", n.type_id));
            }
        }
    }

    /// The approval schema's bounds are the ones the protocol enforces.
    #[test]
    fn approval_schema_bounds_match_the_protocol() {
        let doc: serde_json::Value = serde_json::from_str(GATES_CONFIG_SCHEMA).unwrap();
        let p = &doc["$defs"]["approval"]["properties"];
        assert_eq!(
            p["requiredApprovals"]["maximum"],
            u64::from(super::super::quorum::MAX_REQUIRED_APPROVALS)
        );
        assert_eq!(p["timeoutMs"]["maximum"], super::super::waits::MAX_DELAY_MS);
    }

    /// Registration checks each gate's config and names the node and the field at fault.
    #[test]
    fn gate_configs_are_checked_at_registration() {
        use crate::tier1::Tier1Posture;
        use crate::workflow_check::{CheckOptions, NodeRegistry, check_workflow};
        use serde_json::json;
        let registry = NodeRegistry::builtin();
        let kinds = Default::default();
        let opts = CheckOptions {
            registry: &registry,
            advertised_kinds: &kinds,
            tier1: Tier1Posture::Warn,
            mock_agent_opt_in: false,
        };
        let problems = |type_id: &str, config: serde_json::Value| -> Vec<String> {
            let wf = json!({"id": "w", "name": "w", "version": "1", "nodes": [
                {"id": "n", "typeId": type_id, "name": "n", "position": {"x": 0, "y": 0},
                 "config": config, "inputs": {}}]});
            check_workflow(&wf, &opts)
                .errors
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        for (type_id, config) in [
            ("core.noop", json!({})),
            ("core.start", json!({})),
            (
                "core.fail",
                json!({"code": "boom", "message": "m", "details": {"a": 1}}),
            ),
            (
                "core.approvalGate",
                json!({"title": "t", "description": "d", "actions": ["accept", "reject"]}),
            ),
            ("core.approvalGate", json!({})),
            (
                "core.approvalGate",
                json!({"requiredApprovals": 3, "rejectionPolicy": "majority", "timeoutMs": 1500, "onTimeout": "approve"}),
            ),
            (
                "core.clarificationGate",
                json!({"questions": [{"id": "q1", "question": "?"}]}),
            ),
            (
                "core.interrupt",
                json!({"kind": "custom", "data": {"customKind": "payment"}}),
            ),
            (
                "core.interrupt",
                json!({"kind": "approval", "data": {"actions": ["accept"]}}),
            ),
        ] {
            assert_eq!(
                problems(type_id, config.clone()),
                Vec::<String>::new(),
                "{type_id} {config}"
            );
        }
        for (type_id, config, at) in [
            ("core.noop", json!({"x": 1}), "/nodes/0/config"),
            ("core.fail", json!({"code": ""}), "/nodes/0/config/code"),
            (
                "core.approvalGate",
                json!({"actions": ["approve"]}),
                "/nodes/0/config/actions/0",
            ),
            (
                "core.approvalGate",
                json!({"actions": ["accept", "accept"]}),
                "/nodes/0/config/actions",
            ),
            (
                "core.approvalGate",
                json!({"requiredApprovals": 101}),
                "/nodes/0/config/requiredApprovals",
            ),
            (
                "core.approvalGate",
                json!({"timeoutMs": 0}),
                "/nodes/0/config/timeoutMs",
            ),
            (
                "core.approvalGate",
                json!({"onTimeout": "escalate"}),
                "/nodes/0/config/onTimeout",
            ),
            (
                "core.clarificationGate",
                json!({"questions": []}),
                "/nodes/0/config/questions",
            ),
            ("core.clarificationGate", json!({}), "/nodes/0/config"),
            (
                "core.interrupt",
                json!({"kind": "external-event", "data": {"eventType": "e", "correlation": {}, "x": 1}}),
                "/nodes/0/config/data",
            ),
            (
                "core.interrupt",
                json!({"kind": "clarification", "data": {"questions": [{"id": "q"}]}}),
                "/nodes/0/config/data/questions/0",
            ),
        ] {
            let p = problems(type_id, config.clone());
            assert!(
                p.iter().any(|m| m.starts_with("node \"n\" (")
                    && m.contains(at)
                    && m.contains(type_id)),
                "{type_id} {config}: {p:?}"
            );
        }
    }
}
