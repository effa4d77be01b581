//! The workflow definition as the executor needs it: nodes in a deterministic topological
//! order, incoming edges with conditions and trigger rules, port values, variables and
//! settings. Parsed from the snapshot's JSON (`schemas/workflow-definition.schema.json`);
//! errors name the JSON Pointer of the offending value.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("workflow definition invalid at {pointer}: {message}")]
pub struct GraphError {
    pub pointer: String,
    pub message: String,
}

fn err(pointer: impl Into<String>, message: impl Into<String>) -> GraphError {
    GraphError {
        pointer: pointer.into(),
        message: message.into(),
    }
}

/// Where an input port gets its value.
#[derive(Debug, Clone, PartialEq)]
pub enum PortValue {
    Static(Value),
    Connection {
        node_id: String,
        output_key: String,
        optional: bool,
    },
    Variable {
        name: String,
        optional: bool,
    },
    /// Expressions need an expression engine this host does not ship (`capability_required`).
    Expression(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TriggerRule {
    #[default]
    AllSuccess,
    AnySuccess,
    AllComplete,
    NoneFailed,
    AnyFailed,
}

impl TriggerRule {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "all_success" => Self::AllSuccess,
            "any_success" => Self::AnySuccess,
            "all_complete" => Self::AllComplete,
            "none_failed" => Self::NoneFailed,
            "any_failed" => Self::AnyFailed,
            _ => return None,
        })
    }
    /// Rules under which a failed source does not fail the run.
    pub fn handles_failure(self) -> bool {
        matches!(self, Self::AllComplete | Self::AnyFailed)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub op: String,
    pub left: Option<String>,
    pub right: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    pub id: String,
    pub source: String,
    pub source_output: String,
    pub target: String,
    pub target_input: String,
    pub condition: Option<Condition>,
    pub trigger_rule: TriggerRule,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub id: String,
    pub type_id: String,
    pub config: Value,
    pub inputs: BTreeMap<String, PortValue>,
    pub agent_id: Option<String>,
    /// The raw `envelopeContract` block.
    pub envelope_contract: Option<Value>,
    pub timeout_ms: Option<u64>,
    pub max_retries: Option<u32>,
    pub disabled: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Variable {
    pub name: String,
    pub required: bool,
    pub default: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    pub id: String,
    /// Topological order; ties broken by declaration order, so every worker agrees.
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    pub variables: Vec<Variable>,
    pub run_timeout_ms: Option<u64>,
    pub default_max_retries: u32,
}

fn obj<'a>(v: &'a Value, ptr: &str) -> Result<&'a Map<String, Value>, GraphError> {
    v.as_object().ok_or_else(|| err(ptr, "expected an object"))
}

fn req_str(o: &Map<String, Value>, key: &str, ptr: &str) -> Result<String, GraphError> {
    match o.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(_) => Err(err(format!("{ptr}/{key}"), "expected a non-empty string")),
        None => Err(err(ptr, format!("missing required property `{key}`"))),
    }
}

fn opt_str(o: &Map<String, Value>, key: &str) -> Option<String> {
    o.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn opt_u64(o: &Map<String, Value>, key: &str, ptr: &str) -> Result<Option<u64>, GraphError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| err(format!("{ptr}/{key}"), "expected a non-negative integer")),
    }
}

fn port_value(v: &Value, ptr: &str) -> Result<PortValue, GraphError> {
    let o = obj(v, ptr)?;
    let optional = o.get("optional").and_then(Value::as_bool).unwrap_or(false);
    match o.get("type").and_then(Value::as_str) {
        Some("static") => Ok(PortValue::Static(
            o.get("value").cloned().unwrap_or(Value::Null),
        )),
        Some("connection") => Ok(PortValue::Connection {
            node_id: req_str(o, "nodeId", ptr)?,
            output_key: req_str(o, "outputKey", ptr)?,
            optional,
        }),
        Some("variable") => Ok(PortValue::Variable {
            name: req_str(o, "variableName", ptr)?,
            optional,
        }),
        Some("expression") => Ok(PortValue::Expression(req_str(o, "expression", ptr)?)),
        _ => Err(err(
            format!("{ptr}/type"),
            "port value type must be static, connection, variable or expression",
        )),
    }
}

impl Graph {
    /// Parses and orders a workflow definition.
    pub fn parse(def: &Value) -> Result<Graph, GraphError> {
        let root = obj(def, "")?;
        let id = req_str(root, "id", "")?;
        let raw_nodes = root
            .get("nodes")
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| err("/nodes", "expected a non-empty array of nodes"))?;
        let mut nodes = Vec::with_capacity(raw_nodes.len());
        let mut index = BTreeMap::new();
        for (i, n) in raw_nodes.iter().enumerate() {
            let ptr = format!("/nodes/{i}");
            let o = obj(n, &ptr)?;
            let node_id = req_str(o, "id", &ptr)?;
            if index.insert(node_id.clone(), i).is_some() {
                return Err(err(
                    format!("{ptr}/id"),
                    "duplicate node id; node ids must be unique",
                ));
            }
            let mut inputs = BTreeMap::new();
            if let Some(ins) = o.get("inputs") {
                for (port, pv) in obj(ins, &format!("{ptr}/inputs"))? {
                    inputs.insert(
                        port.clone(),
                        port_value(pv, &format!("{ptr}/inputs/{port}"))?,
                    );
                }
            }
            let settings = o.get("settings").and_then(Value::as_object);
            let (timeout_ms, max_retries) = match settings {
                Some(s) => (
                    opt_u64(s, "timeout", &format!("{ptr}/settings"))?,
                    opt_u64(s, "maxRetries", &format!("{ptr}/settings"))?.map(|r| r.min(16) as u32),
                ),
                None => (None, None),
            };
            nodes.push(Node {
                id: node_id,
                type_id: req_str(o, "typeId", &ptr)?,
                config: o
                    .get("config")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Map::new())),
                inputs,
                agent_id: o
                    .get("agent")
                    .and_then(|a| a.get("agentId"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                envelope_contract: o.get("envelopeContract").cloned(),
                timeout_ms,
                max_retries,
                disabled: o.get("disabled").and_then(Value::as_bool).unwrap_or(false),
            });
        }
        let mut edges = Vec::new();
        if let Some(raw) = root.get("edges") {
            let arr = raw
                .as_array()
                .ok_or_else(|| err("/edges", "expected an array"))?;
            for (i, e) in arr.iter().enumerate() {
                let ptr = format!("/edges/{i}");
                let o = obj(e, &ptr)?;
                let source = req_str(o, "sourceNodeId", &ptr)?;
                let target = req_str(o, "targetNodeId", &ptr)?;
                for (k, n) in [("sourceNodeId", &source), ("targetNodeId", &target)] {
                    if !index.contains_key(n) {
                        return Err(err(format!("{ptr}/{k}"), format!("no node has id `{n}`")));
                    }
                }
                let trigger_rule = match o.get("triggerRule").and_then(Value::as_str) {
                    None => TriggerRule::default(),
                    Some(s) => TriggerRule::parse(s).ok_or_else(|| {
                        err(
                            format!("{ptr}/triggerRule"),
                            "use all_success, any_success, all_complete, none_failed or any_failed",
                        )
                    })?,
                };
                let condition = match o.get("condition") {
                    None => None,
                    Some(c) => {
                        let co = obj(c, &format!("{ptr}/condition"))?;
                        let op = req_str(co, "type", &format!("{ptr}/condition"))?;
                        Some(Condition {
                            op,
                            left: opt_str(co, "left"),
                            right: co.get("right").cloned(),
                        })
                    }
                };
                edges.push(Edge {
                    id: req_str(o, "id", &ptr)?,
                    source,
                    source_output: opt_str(o, "sourceOutput").unwrap_or_else(|| "output".into()),
                    target,
                    target_input: opt_str(o, "targetInput").unwrap_or_else(|| "input".into()),
                    condition,
                    trigger_rule,
                });
            }
        }
        let mut variables = Vec::new();
        if let Some(raw) = root.get("variables").and_then(Value::as_array) {
            for (i, v) in raw.iter().enumerate() {
                let ptr = format!("/variables/{i}");
                let o = obj(v, &ptr)?;
                variables.push(Variable {
                    name: req_str(o, "name", &ptr)?,
                    required: o.get("required").and_then(Value::as_bool).unwrap_or(false),
                    default: o.get("defaultValue").cloned(),
                });
            }
        }
        let settings = root.get("settings").and_then(Value::as_object);
        let (run_timeout_ms, default_max_retries) = match settings {
            Some(s) => (
                opt_u64(s, "timeout", "/settings")?,
                opt_u64(s, "maxRetries", "/settings")?.unwrap_or(0).min(16) as u32,
            ),
            None => (None, 0),
        };
        let order = topo_order(&nodes, &edges, &index)?;
        let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
        let nodes = order.into_iter().filter_map(|i| slots[i].take()).collect();
        Ok(Graph {
            id,
            nodes,
            edges,
            variables,
            run_timeout_ms,
            default_max_retries,
        })
    }

    pub fn incoming(&self, node_id: &str) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.target == node_id)
    }

    pub fn outgoing(&self, node_id: &str) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.source == node_id)
    }

    pub fn node(&self, node_id: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == node_id)
    }
}

/// Kahn's algorithm, always taking the lowest declaration index that is ready.
fn topo_order(
    nodes: &[Node],
    edges: &[Edge],
    index: &BTreeMap<String, usize>,
) -> Result<Vec<usize>, GraphError> {
    let mut indegree = vec![0usize; nodes.len()];
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut dependency = |from: usize, to: usize| {
        out[from].push(to);
        indegree[to] += 1;
    };
    for e in edges {
        dependency(index[&e.source], index[&e.target]);
    }
    for (i, n) in nodes.iter().enumerate() {
        for pv in n.inputs.values() {
            if let PortValue::Connection { node_id, .. } = pv {
                let Some(&src) = index.get(node_id) else {
                    return Err(err(
                        format!("/nodes/{i}/inputs"),
                        format!("connection to unknown node `{node_id}`"),
                    ));
                };
                dependency(src, i);
            }
        }
    }
    let mut ready: BTreeSet<usize> = (0..nodes.len()).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &t in &out[i] {
            indegree[t] -= 1;
            if indegree[t] == 0 {
                ready.insert(t);
            }
        }
    }
    if order.len() != nodes.len() {
        let stuck: Vec<&str> = (0..nodes.len())
            .filter(|i| indegree[*i] > 0)
            .map(|i| nodes[i].id.as_str())
            .collect();
        return Err(err(
            "/edges",
            format!("the graph has a cycle through nodes {stuck:?}; remove an edge to break it"),
        ));
    }
    Ok(order)
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

fn truthy(v: Option<&Value>) -> bool {
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

impl Condition {
    /// Evaluates against the source node's outputs (port name → value).
    pub fn eval(&self, outputs: &Value) -> Result<bool, ConditionError> {
        let left = || {
            self.left
                .as_deref()
                .ok_or_else(|| ConditionError::MissingLeft(self.op.clone()))
                .map(|p| lookup(outputs, p))
        };
        let right = self.right.as_ref().unwrap_or(&Value::Null);
        Ok(match self.op.as_str() {
            "truthy" => truthy(left()?),
            "falsy" => !truthy(left()?),
            "equals" => left()? == Some(right),
            "notEquals" => left()? != Some(right),
            "contains" => match left()? {
                Some(Value::String(s)) => right.as_str().is_some_and(|r| s.contains(r)),
                Some(Value::Array(a)) => a.contains(right),
                Some(Value::Object(o)) => right.as_str().is_some_and(|r| o.contains_key(r)),
                _ => false,
            },
            "regex" => {
                let pattern = right.as_str().unwrap_or_default();
                let re = regex::RegexBuilder::new(pattern)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| ConditionError::BadRegex(e.to_string()))?;
                left()?
                    .and_then(Value::as_str)
                    .is_some_and(|s| re.is_match(s))
            }
            other => return Err(ConditionError::Unsupported(other.to_owned())),
        })
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
    fn cycles_and_dangling_edges_are_refused_with_pointers() {
        let cyc = Graph::parse(&json!({"id": "w", "nodes": [
            {"id": "a", "typeId": "t"}, {"id": "b", "typeId": "t"}],
            "edges": [{"id": "1", "sourceNodeId": "a", "targetNodeId": "b"},
                      {"id": "2", "sourceNodeId": "b", "targetNodeId": "a"}]}))
        .unwrap_err();
        assert_eq!(cyc.pointer, "/edges");
        assert!(cyc.message.contains("cycle"));
        let dangling = Graph::parse(&json!({"id": "w", "nodes": [{"id": "a", "typeId": "t"}],
            "edges": [{"id": "1", "sourceNodeId": "a", "targetNodeId": "zz"}]}))
        .unwrap_err();
        assert_eq!(dangling.pointer, "/edges/0/targetNodeId");
        let bad_rule = Graph::parse(&json!({"id": "w", "nodes": [{"id": "a", "typeId": "t"}, {"id": "b", "typeId": "t"}],
            "edges": [{"id": "1", "sourceNodeId": "a", "targetNodeId": "b", "triggerRule": "sometimes"}]}))
        .unwrap_err();
        assert_eq!(bad_rule.pointer, "/edges/0/triggerRule");
        let dup = Graph::parse(
            &json!({"id": "w", "nodes": [{"id": "a", "typeId": "t"}, {"id": "a", "typeId": "t"}]}),
        )
        .unwrap_err();
        assert_eq!(dup.pointer, "/nodes/1/id");
    }

    #[test]
    fn conditions_evaluate_against_outputs() {
        let out =
            json!({"output": {"approved": true, "tags": ["x"], "text": "hello world", "n": 0}});
        let c = |op: &str, left: &str, right: Value| Condition {
            op: op.into(),
            left: Some(left.into()),
            right: Some(right),
        };
        assert!(
            c("truthy", "output.approved", Value::Null)
                .eval(&out)
                .unwrap()
        );
        assert!(c("falsy", "output.n", Value::Null).eval(&out).unwrap());
        assert!(
            c("equals", "output.approved", json!(true))
                .eval(&out)
                .unwrap()
        );
        assert!(
            c("notEquals", "output.text", json!("x"))
                .eval(&out)
                .unwrap()
        );
        assert!(c("contains", "output.tags", json!("x")).eval(&out).unwrap());
        assert!(
            c("regex", "output.text", json!("^hel+o"))
                .eval(&out)
                .unwrap()
        );
        assert!(!c("equals", "output.missing", json!(1)).eval(&out).unwrap());
        assert!(matches!(
            c("expression", "x", Value::Null).eval(&out),
            Err(ConditionError::Unsupported(_))
        ));
    }
}
