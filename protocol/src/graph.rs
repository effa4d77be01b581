//! The workflow definition as an executor runs it: nodes in the deterministic topological
//! order of `openwop_protocol::workflow` (edges and `connection` inputs), incoming edges with
//! conditions and trigger rules, port values, variables and settings with their defaults
//! resolved. Read with [`WorkflowDefinition::from_value`] from the snapshot's JSON, so the
//! worker accepts exactly what the schema (`schemas/workflow-definition.schema.json`) and the
//! operator's checks accept; errors name the JSON Pointer of the offending value.

use std::collections::BTreeMap;

pub use crate::workflow::{ConditionKind, PortValue, TriggerRule};
use crate::workflow::{
    EdgeCondition, NodeEnvelopeContract, VariableKind, WorkflowDefinition, WorkflowError,
};
use serde_json::Value;

/// Why the snapshot's workflow cannot be executed (the run fails with `workflow_invalid`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("workflow definition invalid: {0}")]
pub struct GraphError(#[from] pub WorkflowError);

#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    pub id: String,
    pub source: String,
    pub source_output: String,
    pub target: String,
    pub target_input: String,
    pub condition: Option<EdgeCondition>,
    pub trigger_rule: TriggerRule,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub id: String,
    pub type_id: String,
    pub config: Value,
    pub inputs: BTreeMap<String, PortValue>,
    pub agent_id: Option<String>,
    pub envelope_contract: Option<NodeEnvelopeContract>,
    pub timeout_ms: Option<u64>,
    pub max_retries: Option<u32>,
    pub disabled: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Variable {
    pub name: String,
    pub kind: VariableKind,
    pub required: bool,
    pub default: Option<Value>,
    /// Masked in `RunSnapshot.variables` and never written by a node.
    pub sensitive: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    pub id: String,
    /// Topological order; ties broken by declaration order, so every worker agrees.
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    pub variables: Vec<Variable>,
    /// `settings.timeout` in ms; `None` without one or with `0` (no deadline).
    pub run_timeout_ms: Option<u64>,
    pub default_max_retries: u32,
    /// `settings.maxConcurrency` (see [`crate::schedule::concurrency_limit`]).
    pub max_concurrency: Option<u32>,
    /// Edge indexes by node, so the scheduler's per-node look-ups do not scan every edge.
    index: EdgeIndex,
}

/// Positions in `edges` of each node's incoming and outgoing edges, in definition order.
#[derive(Debug, Clone, PartialEq, Default)]
struct EdgeIndex {
    incoming: BTreeMap<String, Vec<usize>>,
    outgoing: BTreeMap<String, Vec<usize>>,
    nodes: BTreeMap<String, usize>,
}

impl EdgeIndex {
    fn of(nodes: &[Node], edges: &[Edge]) -> Self {
        let mut ix = EdgeIndex::default();
        for (i, e) in edges.iter().enumerate() {
            ix.incoming.entry(e.target.clone()).or_default().push(i);
            ix.outgoing.entry(e.source.clone()).or_default().push(i);
        }
        for (i, n) in nodes.iter().enumerate() {
            ix.nodes.entry(n.id.clone()).or_insert(i);
        }
        ix
    }
}

/// Retries per node are capped here whatever the definition says.
const MAX_RETRIES: u64 = 16;

impl Graph {
    /// Reads (schema, unique ids, known nodes) and orders a workflow definition.
    pub fn parse(def: &Value) -> Result<Graph, GraphError> {
        Self::from_definition(&WorkflowDefinition::from_value(def.clone())?)
    }

    /// The executor's view of a definition read by [`WorkflowDefinition::from_value`].
    pub fn from_definition(def: &WorkflowDefinition) -> Result<Graph, GraphError> {
        let retries = |r: Option<u64>| r.map(|r| r.min(MAX_RETRIES) as u32);
        let nodes: Vec<Node> = def
            .topological_order()?
            .into_iter()
            .map(|n| Node {
                id: n.id.clone(),
                type_id: n.type_id.clone(),
                config: Value::Object(n.config.clone().unwrap_or_default()),
                // A definition read by `from_value` passed the schema: every source, agent
                // and settings member fits its type.
                inputs: n
                    .inputs
                    .iter()
                    .flatten()
                    .filter_map(|(port, v)| Some((port.clone(), v.typed()?.clone())))
                    .collect(),
                agent_id: n
                    .agent
                    .as_ref()
                    .and_then(|a| a.typed())
                    .map(|a| a.agent_id.clone()),
                envelope_contract: n.envelope_contract.clone(),
                timeout_ms: n.settings.as_ref().and_then(|s| s.typed()?.timeout),
                max_retries: retries(n.settings.as_ref().and_then(|s| s.typed()?.max_retries)),
                disabled: n.disabled.unwrap_or(false),
            })
            .collect();
        let edges: Vec<Edge> = def
            .edges()
            .iter()
            .map(|e| Edge {
                id: e.id.clone(),
                source: e.source_node_id.clone(),
                source_output: e.source_output().to_owned(),
                target: e.target_node_id.clone(),
                target_input: e.target_input().to_owned(),
                condition: e.condition.clone(),
                trigger_rule: e.trigger_rule(),
            })
            .collect();
        let variables = def
            .variables
            .iter()
            .flatten()
            .map(|v| Variable {
                name: v.name.clone(),
                kind: v.kind,
                required: v.required.unwrap_or(false),
                default: v.default_value.clone(),
                sensitive: v.sensitive.unwrap_or(false),
            })
            .collect();
        let settings = def.settings.as_ref().and_then(|s| s.typed());
        let index = EdgeIndex::of(&nodes, &edges);
        Ok(Graph {
            id: def.id.clone(),
            nodes,
            edges,
            variables,
            // `timeout: 0` is "no deadline": the gate fixtures set it (the spec allows 0 and
            // is silent on its meaning; a zero deadline could never let a gate be answered).
            run_timeout_ms: settings.and_then(|s| s.timeout).filter(|ms| *ms > 0),
            default_max_retries: retries(settings.and_then(|s| s.max_retries)).unwrap_or(0),
            max_concurrency: settings
                .and_then(|s| s.max_concurrency)
                .map(|c| c.min(u64::from(u32::MAX)) as u32),
            index,
        })
    }

    /// The edges ending at `node_id`, in definition order.
    pub fn incoming(&self, node_id: &str) -> impl Iterator<Item = &Edge> {
        let ix = self.index.incoming.get(node_id);
        ix.into_iter().flatten().map(|&i| &self.edges[i])
    }

    /// The edges starting at `node_id`, in definition order.
    pub fn outgoing(&self, node_id: &str) -> impl Iterator<Item = &Edge> {
        let ix = self.index.outgoing.get(node_id);
        ix.into_iter().flatten().map(|&i| &self.edges[i])
    }

    pub fn node(&self, node_id: &str) -> Option<&Node> {
        self.index.nodes.get(node_id).map(|&i| &self.nodes[i])
    }
}

/// How the incoming edges of a node stand: taken (source succeeded and the condition held),
/// failed (source failed) and in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Incoming {
    pub taken: usize,
    pub failed: usize,
    pub total: usize,
}

impl TriggerRule {
    /// Whether a node whose incoming edges stand as `e` runs under this rule. A node with
    /// no incoming edge always runs.
    pub fn is_met(self, e: Incoming) -> bool {
        e.total == 0
            || match self {
                TriggerRule::AllSuccess => e.taken == e.total,
                TriggerRule::AnySuccess => e.taken > 0,
                TriggerRule::AllComplete => true,
                TriggerRule::NoneFailed => e.failed == 0 && e.taken > 0,
                TriggerRule::AnyFailed => e.failed > 0,
            }
    }
}

/// Resolves a dotted path (`output.approved`, `items.0`) inside `root`.
pub fn lookup<'a>(root: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .filter(|s| !s.is_empty())
        .try_fold(root, |v, seg| match v {
            Value::Object(m) => m.get(seg),
            Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        })
}

/// JS-style truthiness (RFC 0134): absent, `null`, `false`, `0`, `""`, `[]` and `{}` are falsy.
pub fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// Why a condition cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    #[error("condition operator `{0}` needs `left`")]
    MissingLeft(String),
    #[error("condition `regex` has an invalid pattern: {0}")]
    BadRegex(String),
    #[error(
        "condition operator `{0}` is not supported by this host (expression conditions need an expression engine)"
    )]
    Unsupported(String),
}

/// A comparison of the one condition language. Both vocabularies map onto it: the workflow
/// definition's `EdgeCondition.type` (`equals`, `notEquals`, `contains`, `regex`, `truthy`,
/// `falsy`) and the `core.openwop.flow` predicate `op` (`eq` … `falsy`), so an edge and a
/// `core.conditional` node that say the same thing decide the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    Eq,
    Neq,
    Lt,
    Lte,
    Gt,
    Gte,
    In,
    Contains,
    StartsWith,
    EndsWith,
    Regex,
    Exists,
    NotExists,
    Truthy,
    Falsy,
}

impl Op {
    /// Every operator, in the predicate vocabulary's order.
    pub const ALL: [Op; 15] = [
        Op::Eq,
        Op::Neq,
        Op::Lt,
        Op::Lte,
        Op::Gt,
        Op::Gte,
        Op::In,
        Op::Contains,
        Op::StartsWith,
        Op::EndsWith,
        Op::Regex,
        Op::Exists,
        Op::NotExists,
        Op::Truthy,
        Op::Falsy,
    ];

    /// The predicate wire name (`starts-with`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "eq",
            Op::Neq => "neq",
            Op::Lt => "lt",
            Op::Lte => "lte",
            Op::Gt => "gt",
            Op::Gte => "gte",
            Op::In => "in",
            Op::Contains => "contains",
            Op::StartsWith => "starts-with",
            Op::EndsWith => "ends-with",
            Op::Regex => "regex",
            Op::Exists => "exists",
            Op::NotExists => "not-exists",
            Op::Truthy => "truthy",
            Op::Falsy => "falsy",
        }
    }

    /// The operator whose answer is always the opposite of this one's, if there is one.
    pub fn negation(self) -> Option<Op> {
        Some(match self {
            Op::Eq => Op::Neq,
            Op::Neq => Op::Eq,
            Op::Exists => Op::NotExists,
            Op::NotExists => Op::Exists,
            Op::Truthy => Op::Falsy,
            Op::Falsy => Op::Truthy,
            _ => return None,
        })
    }

    /// Whether `right` is read (a regex pattern, a value to compare); `exists`, `truthy` and
    /// their negations ignore it.
    pub fn reads_right(self) -> bool {
        !matches!(self, Op::Exists | Op::NotExists | Op::Truthy | Op::Falsy)
    }
}

/// Longest compiled regex (bytes of the automaton): a pattern in a workflow cannot make the
/// worker build an unbounded one.
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Compiles a condition's regex pattern with the bound every evaluation uses.
pub fn compile_regex(pattern: &str) -> Result<regex::Regex, ConditionError> {
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| ConditionError::BadRegex(e.to_string()))
}

/// Two JSON values equal as the condition language sees them: numbers by value (`1` equals
/// `1.0`), everything else structurally.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y || ((x.is_f64() || y.is_f64()) && x.as_f64() == y.as_f64())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Orders two numbers or two strings; anything else is unordered.
fn order(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

/// Whether `haystack` contains `needle`: a substring of a string, an element of an array,
/// a key of an object.
fn contains(haystack: Option<&Value>, needle: &Value) -> bool {
    match haystack {
        Some(Value::String(s)) => needle.as_str().is_some_and(|r| s.contains(r)),
        Some(Value::Array(a)) => a.iter().any(|x| same(x, needle)),
        Some(Value::Object(o)) => needle.as_str().is_some_and(|r| o.contains_key(r)),
        _ => false,
    }
}

/// The one evaluator: whether `op` holds between `left` (the value found at the path, `None`
/// when nothing is there) and `right`. Comparisons of values of different kinds are false,
/// never an error; only a `regex` whose pattern does not compile is one.
pub fn evaluate(op: Op, left: Option<&Value>, right: &Value) -> Result<bool, ConditionError> {
    use std::cmp::Ordering::*;
    let ord = || left.and_then(|l| order(l, right));
    Ok(match op {
        Op::Eq => left.is_some_and(|l| same(l, right)),
        Op::Neq => !left.is_some_and(|l| same(l, right)),
        Op::Lt => ord() == Some(Less),
        Op::Lte => matches!(ord(), Some(Less | Equal)),
        Op::Gt => ord() == Some(Greater),
        Op::Gte => matches!(ord(), Some(Greater | Equal)),
        Op::In => left.is_some_and(|l| contains(Some(right), l)),
        Op::Contains => contains(left, right),
        Op::StartsWith => match (left, right) {
            (Some(Value::String(s)), Value::String(p)) => s.starts_with(p.as_str()),
            _ => false,
        },
        Op::EndsWith => match (left, right) {
            (Some(Value::String(s)), Value::String(p)) => s.ends_with(p.as_str()),
            _ => false,
        },
        Op::Regex => {
            let re = compile_regex(right.as_str().unwrap_or_default())?;
            left.and_then(Value::as_str).is_some_and(|s| re.is_match(s))
        }
        Op::Exists => !left.is_none_or(Value::is_null),
        Op::NotExists => left.is_none_or(Value::is_null),
        Op::Truthy => truthy(left),
        Op::Falsy => !truthy(left),
    })
}

/// The operator an edge condition type means; `None` for `expression` (no engine here).
pub fn edge_operator(kind: ConditionKind) -> Option<Op> {
    Some(match kind {
        ConditionKind::Equals => Op::Eq,
        ConditionKind::NotEquals => Op::Neq,
        ConditionKind::Contains => Op::Contains,
        ConditionKind::Regex => Op::Regex,
        ConditionKind::Truthy => Op::Truthy,
        ConditionKind::Falsy => Op::Falsy,
        ConditionKind::Expression => return None,
    })
}

/// Whether edge condition `c` holds for the source node's outputs (port name → value).
pub fn condition_holds(c: &EdgeCondition, outputs: &Value) -> Result<bool, ConditionError> {
    let name = || operator_name(c.kind).to_owned();
    let op = edge_operator(c.kind).ok_or_else(|| ConditionError::Unsupported(name()))?;
    let path = c
        .left
        .as_deref()
        .ok_or_else(|| ConditionError::MissingLeft(name()))?;
    evaluate(
        op,
        lookup(outputs, path),
        c.right.as_ref().unwrap_or(&Value::Null),
    )
}

/// A `core.openwop.flow` predicate (`core.conditional` / `core.flow.if`, router routes):
/// `path` into the node's input value (empty: the value itself), `op`, `value`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Predicate {
    pub path: String,
    pub op: Op,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

impl Predicate {
    /// Whether the predicate holds for `root`.
    pub fn holds(&self, root: &Value) -> Result<bool, ConditionError> {
        evaluate(
            self.op,
            lookup(root, &self.path),
            self.value.as_ref().unwrap_or(&Value::Null),
        )
    }
}

/// The wire name of a condition type (`notEquals`, ...).
fn operator_name(kind: ConditionKind) -> &'static str {
    match kind {
        ConditionKind::Expression => "expression",
        ConditionKind::Equals => "equals",
        ConditionKind::NotEquals => "notEquals",
        ConditionKind::Contains => "contains",
        ConditionKind::Regex => "regex",
        ConditionKind::Truthy => "truthy",
        ConditionKind::Falsy => "falsy",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn orders_topologically_with_declaration_tiebreak() {
        let g = Graph::parse(&json!({"id": "w", "nodes": [
            {"id": "c", "typeId": "core.identity"},
            {"id": "a", "typeId": "core.identity"},
            {"id": "b", "typeId": "core.identity", "inputs": {"x": {"type": "connection", "nodeId": "a", "outputKey": "output"}}}],
            "edges": [{"id": "e1", "sourceNodeId": "b", "targetNodeId": "c", "triggerRule": "any_failed"}]}))
        .unwrap();
        let ids: Vec<_> = g.nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(g.edges[0].trigger_rule, TriggerRule::AnyFailed);
        assert_eq!(g.edges[0].source_output, "output");
    }

    #[test]
    fn bad_definitions_are_refused_with_pointers() {
        let msg = |def: Value| Graph::parse(&def).unwrap_err().to_string();
        let cyc = msg(json!({"id": "w", "nodes": [
            {"id": "a", "typeId": "t"}, {"id": "b", "typeId": "t"}],
            "edges": [{"id": "1", "sourceNodeId": "a", "targetNodeId": "b"},
                      {"id": "2", "sourceNodeId": "b", "targetNodeId": "a"}]}));
        assert!(
            cyc.contains("in a cycle") && cyc.contains("b → a → b"),
            "{cyc}"
        );
        // A connection input is a dependency too: a cycle through one is refused.
        let through_input = msg(json!({"id": "w", "nodes": [
            {"id": "a", "typeId": "t", "inputs": {"x": {"type": "connection", "nodeId": "b", "outputKey": "output"}}},
            {"id": "b", "typeId": "t"}],
            "edges": [{"id": "1", "sourceNodeId": "a", "targetNodeId": "b"}]}));
        assert!(through_input.contains("in a cycle"), "{through_input}");
        let dangling = msg(json!({"id": "w", "nodes": [{"id": "a", "typeId": "t"}],
            "edges": [{"id": "1", "sourceNodeId": "a", "targetNodeId": "zz"}]}));
        assert!(dangling.contains("/edges/0/targetNodeId"), "{dangling}");
        let unknown_input = msg(json!({"id": "w", "nodes": [{"id": "a", "typeId": "t",
            "inputs": {"x": {"type": "connection", "nodeId": "zz", "outputKey": "output"}}}]}));
        assert!(
            unknown_input.contains("/nodes/0/inputs/x/nodeId"),
            "{unknown_input}"
        );
        let bad_rule = msg(
            json!({"id": "w", "nodes": [{"id": "a", "typeId": "t"}, {"id": "b", "typeId": "t"}],
            "edges": [{"id": "1", "sourceNodeId": "a", "targetNodeId": "b", "triggerRule": "sometimes"}]}),
        );
        assert!(bad_rule.contains("/edges/0/triggerRule"), "{bad_rule}");
        let dup = msg(
            json!({"id": "w", "nodes": [{"id": "a", "typeId": "t"}, {"id": "a", "typeId": "t"}]}),
        );
        assert!(dup.contains("/nodes/1/id"), "{dup}");
    }

    #[test]
    fn settings_defaults_and_retry_cap() {
        let g = Graph::parse(
            &json!({"id": "w", "settings": {"timeout": 5000, "maxRetries": 99},
            "variables": [{"name": "v", "type": "string", "required": true}],
            "nodes": [{"id": "a", "typeId": "t", "settings": {"timeout": 10, "maxRetries": 2},
                       "agent": {"agentId": "agent-1"}, "disabled": true},
                      {"id": "b", "typeId": "t"}]}),
        )
        .unwrap();
        assert_eq!((g.run_timeout_ms, g.default_max_retries), (Some(5000), 16));
        // `settings.timeout: 0` (the gate fixtures) is no run deadline.
        let open = Graph::parse(
            &json!({"id": "w", "settings": {"timeout": 0}, "nodes": [{"id": "a", "typeId": "t"}]}),
        )
        .unwrap();
        assert_eq!(open.run_timeout_ms, None);
        let a = g.node("a").unwrap();
        assert_eq!((a.timeout_ms, a.max_retries), (Some(10), Some(2)));
        assert_eq!(a.agent_id.as_deref(), Some("agent-1"));
        assert!(a.disabled);
        assert_eq!(a.config, json!({}));
        let b = g.node("b").unwrap();
        assert_eq!(
            (b.timeout_ms, b.max_retries, b.disabled),
            (None, None, false)
        );
        assert_eq!(
            g.variables[0],
            Variable {
                name: "v".into(),
                kind: VariableKind::String,
                required: true,
                default: None,
                sensitive: false,
            }
        );
    }

    #[test]
    fn trigger_rules_decide_from_the_incoming_edges() {
        let e = |taken, failed, total| Incoming {
            taken,
            failed,
            total,
        };
        use TriggerRule::*;
        let table = [
            (AllSuccess, e(2, 0, 2), true),
            (AllSuccess, e(1, 1, 2), false),
            (AnySuccess, e(1, 1, 2), true),
            (AnySuccess, e(0, 2, 2), false),
            (AllComplete, e(0, 2, 2), true),
            (NoneFailed, e(1, 0, 2), true),
            (NoneFailed, e(1, 1, 2), false),
            (NoneFailed, e(0, 0, 2), false),
            (AnyFailed, e(0, 1, 2), true),
            (AnyFailed, e(2, 0, 2), false),
            (AnyFailed, e(0, 0, 0), true),
        ];
        for (rule, inc, want) in table {
            assert_eq!(rule.is_met(inc), want, "{rule:?} {inc:?}");
        }
    }

    #[test]
    fn conditions_evaluate_against_outputs() {
        let out =
            json!({"output": {"approved": true, "tags": ["x"], "text": "hello world", "n": 0}});
        let holds = |op: &str, left: &str, right: Value| {
            let c: EdgeCondition =
                serde_json::from_value(json!({"type": op, "left": left, "right": right})).unwrap();
            condition_holds(&c, &out)
        };
        assert_eq!(holds("truthy", "output.approved", Value::Null), Ok(true));
        assert_eq!(holds("falsy", "output.n", Value::Null), Ok(true));
        assert_eq!(holds("equals", "output.approved", json!(true)), Ok(true));
        assert_eq!(holds("notEquals", "output.text", json!("x")), Ok(true));
        assert_eq!(holds("contains", "output.tags", json!("x")), Ok(true));
        assert_eq!(holds("regex", "output.text", json!("^hel+o")), Ok(true));
        assert_eq!(holds("equals", "output.missing", json!(1)), Ok(false));
        assert_eq!(
            holds("expression", "x", Value::Null),
            Err(ConditionError::Unsupported("expression".into()))
        );
        let no_left: EdgeCondition = serde_json::from_value(json!({"type": "truthy"})).unwrap();
        assert_eq!(
            condition_holds(&no_left, &out),
            Err(ConditionError::MissingLeft("truthy".into()))
        );
    }
}
