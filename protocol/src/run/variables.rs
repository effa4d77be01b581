//! A run's workflow variables: the bag seeded from the run's inputs over the declared
//! defaults, the writes of `core.setVariable` nodes, what each node sees, and the bag
//! `RunSnapshot.variables` serves (masked for `sensitive` variables).
//!
//! Visibility (spec silent; node-library.md §3.12): a node sees the initial bag plus the
//! writes of the writer nodes it depends on (transitively, through edges and `connection`
//! inputs), applied in the graph's topological order — never a concurrent branch's write. So
//! what a node reads depends only on the graph and the recorded outputs of its ancestors, and
//! a replay decides identically whatever order the branches finished in. The run's bag is
//! the initial bag plus every write in topological order.
//!
//! A write is the `node.completed` outputs `{name, value}` of a writer node: the worker reads
//! them from its node states, the operator from the run's log ([`Variables::of_events`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::nodes::{Executor, executor_of};
use crate::graph::{Graph, PortValue};
use crate::workflow::VariableKind;

/// Whether `v` has the declared variable type.
pub fn matches_kind(kind: VariableKind, v: &Value) -> bool {
    match kind {
        VariableKind::String => v.is_string(),
        VariableKind::Number => v.is_number(),
        VariableKind::Boolean => v.is_boolean(),
        VariableKind::Object => v.is_object(),
        VariableKind::Array => v.is_array(),
    }
}

/// The type as a message names it (`a string`, ...).
pub fn kind_name(kind: VariableKind) -> &'static str {
    match kind {
        VariableKind::String => "a string",
        VariableKind::Number => "a number",
        VariableKind::Boolean => "a boolean",
        VariableKind::Object => "an object",
        VariableKind::Array => "an array",
    }
}

/// One writer node and the nodes that see its write.
#[derive(Debug, Clone, PartialEq)]
struct Writer {
    node: String,
    descendants: BTreeSet<String>,
}

/// A run's variables: the initial bag and the writer nodes in topological order.
#[derive(Debug, Clone, PartialEq)]
pub struct Variables {
    initial: Map<String, Value>,
    writers: Vec<Writer>,
    sensitive: BTreeSet<String>,
}

/// A required variable without a value (the run fails with `workflow_input_invalid`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("required variable `{0}` has no value: pass it in the run's inputs")]
pub struct MissingVariable(pub String);

impl Variables {
    /// The variables of a run of `graph` with `inputs`: every input (a workflow may read an
    /// input it does not declare), then the default of each declared variable no input sets.
    pub fn new(graph: &Graph, inputs: &Value) -> Self {
        let mut initial = inputs.as_object().cloned().unwrap_or_default();
        for v in &graph.variables {
            if !initial.contains_key(&v.name)
                && let Some(d) = &v.default
            {
                initial.insert(v.name.clone(), d.clone());
            }
        }
        let writers = graph
            .nodes
            .iter()
            // Sub-workflow nodes write too: their `outputMapping` sets parent variables.
            .filter(|n| {
                matches!(
                    executor_of(&n.type_id),
                    Some(Executor::SetVariable | Executor::SubWorkflow)
                )
            })
            .map(|n| Writer {
                node: n.id.clone(),
                descendants: descendants(graph, &n.id),
            })
            .collect();
        let sensitive = graph
            .variables
            .iter()
            .filter(|v| v.sensitive)
            .map(|v| v.name.clone())
            .collect();
        Variables {
            initial,
            writers,
            sensitive,
        }
    }

    /// The first required variable of `graph` without a value, in declaration order.
    pub fn check_required(&self, graph: &Graph) -> Result<(), MissingVariable> {
        match graph
            .variables
            .iter()
            .find(|v| v.required && !self.initial.contains_key(&v.name))
        {
            Some(v) => Err(MissingVariable(v.name.clone())),
            None => Ok(()),
        }
    }

    /// The bag the run starts with (inputs over the declared defaults).
    pub fn initial(&self) -> &Map<String, Value> {
        &self.initial
    }

    /// Whether any node of the graph writes a variable (else the bag never changes).
    pub fn has_writers(&self) -> bool {
        !self.writers.is_empty()
    }

    /// The bag node `node` sees: the initial bag plus the writes of its writer ancestors in
    /// topological order. `outputs_of` gives a node's recorded outputs once it succeeded.
    pub fn visible_to<'v>(
        &self,
        node: &str,
        outputs_of: impl Fn(&str) -> Option<&'v Value>,
    ) -> Map<String, Value> {
        let mut bag = self.initial.clone();
        for w in self.writers.iter().filter(|w| w.descendants.contains(node)) {
            apply(&mut bag, outputs_of(&w.node));
        }
        bag
    }

    /// The run's bag: the initial bag plus every write, in topological order.
    pub fn run_bag<'v>(
        &self,
        outputs_of: impl Fn(&str) -> Option<&'v Value>,
    ) -> Map<String, Value> {
        let mut bag = self.initial.clone();
        for w in &self.writers {
            apply(&mut bag, outputs_of(&w.node));
        }
        bag
    }

    /// The run's bag from its log (`RunEventDoc`s as JSON, in order): the last
    /// `node.completed` of each writer node is its write.
    pub fn of_events<'e>(&self, events: impl IntoIterator<Item = &'e Value>) -> Map<String, Value> {
        let mut outputs: BTreeMap<&str, &Value> = BTreeMap::new();
        for e in events {
            if e.get("type").and_then(Value::as_str) != Some("node.completed") {
                continue;
            }
            let node = e
                .get("nodeId")
                .or_else(|| e.pointer("/payload/nodeId"))
                .and_then(Value::as_str);
            if let Some(n) = node
                && self.writers.iter().any(|w| w.node == n)
                && let Some(o) = e.pointer("/payload/outputs")
            {
                outputs.insert(n, o);
            }
        }
        self.run_bag(|n| outputs.get(n).copied())
    }

    /// `bag` as served: the value of every `sensitive` variable replaced by
    /// `[REDACTED:<name>]`, the marker the worker's redaction puts in its events.
    pub fn masked(&self, mut bag: Map<String, Value>) -> Map<String, Value> {
        for name in &self.sensitive {
            if let Some(v) = bag.get_mut(name) {
                *v = Value::String(format!("[REDACTED:{name}]"));
            }
        }
        bag
    }

    /// Whether `name` is a sensitive variable.
    pub fn is_sensitive(&self, name: &str) -> bool {
        self.sensitive.contains(name)
    }
}

/// Applies a writer's outputs `{name, value}` to `bag`.
/// A writer's outputs applied to `bag`: `core.setVariable`'s `{name, value}`, or a
/// sub-workflow's `{variables: {<parent variable>: value}}` (its `outputMapping`).
fn apply(bag: &mut Map<String, Value>, outputs: Option<&Value>) {
    let Some(o) = outputs else { return };
    if let Some(name) = o.get("name").and_then(Value::as_str)
        && let Some(v) = o.get("value")
    {
        bag.insert(name.to_owned(), v.clone());
    }
    if let Some(mapped) = o.get("variables").and_then(Value::as_object) {
        for (name, v) in mapped {
            bag.insert(name.clone(), v.clone());
        }
    }
}

/// Every node that depends on `from`, transitively (edges and `connection` inputs).
fn descendants(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for e in &graph.edges {
        next.entry(e.source.as_str()).or_default().push(&e.target);
    }
    for n in &graph.nodes {
        for pv in n.inputs.values() {
            if let PortValue::Connection { node_id, .. } = pv {
                next.entry(node_id.as_str()).or_default().push(&n.id);
            }
        }
    }
    let mut seen = BTreeSet::new();
    let mut stack = vec![from];
    while let Some(n) = stack.pop() {
        for &t in next.get(n).into_iter().flatten() {
            if seen.insert(t.to_owned()) {
                stack.push(t);
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `start` fans out to writers `w1` (x := 1) and `w2` (x := 2, after `w1`'s sibling
    /// `mid`); `r1` reads after `w1`, `join` after both.
    fn graph() -> Graph {
        Graph::parse(&json!({"id": "w",
            "variables": [{"name": "x", "type": "number", "defaultValue": 0},
                          {"name": "secret", "type": "string", "sensitive": true},
                          {"name": "req", "type": "string", "required": true}],
            "nodes": [
                {"id": "start", "typeId": "core.identity"},
                {"id": "w1", "typeId": "core.setVariable", "config": {"name": "x", "value": 1}},
                {"id": "mid", "typeId": "core.identity"},
                {"id": "w2", "typeId": "core.setVariable", "config": {"name": "x", "value": 2}},
                {"id": "r1", "typeId": "core.getVariable", "config": {"name": "x"}},
                {"id": "join", "typeId": "core.getVariable", "config": {"name": "x"}}],
            "edges": [
                {"id": "1", "sourceNodeId": "start", "targetNodeId": "w1"},
                {"id": "2", "sourceNodeId": "start", "targetNodeId": "mid"},
                {"id": "3", "sourceNodeId": "mid", "targetNodeId": "w2"},
                {"id": "4", "sourceNodeId": "w1", "targetNodeId": "r1"},
                {"id": "5", "sourceNodeId": "r1", "targetNodeId": "join"},
                {"id": "6", "sourceNodeId": "w2", "targetNodeId": "join"}]}))
        .unwrap()
    }

    fn writes() -> BTreeMap<&'static str, Value> {
        BTreeMap::from([
            ("w1", json!({"name": "x", "value": 1})),
            ("w2", json!({"name": "x", "value": 2})),
        ])
    }

    #[test]
    fn inputs_override_defaults_and_required_ones_are_checked() {
        let g = graph();
        let v = Variables::new(&g, &json!({"req": "r", "extra": true}));
        assert_eq!(v.check_required(&g), Ok(()));
        assert_eq!(
            v.run_bag(|_| None),
            *json!({"req": "r", "extra": true, "x": 0})
                .as_object()
                .unwrap()
        );
        let v = Variables::new(&g, &json!({"x": 5}));
        assert_eq!(v.check_required(&g), Err(MissingVariable("req".into())));
        assert_eq!(v.run_bag(|_| None)["x"], 5);
    }

    #[test]
    fn a_node_sees_only_its_ancestors_writes_in_topological_order() {
        let g = graph();
        let v = Variables::new(&g, &json!({"req": "r"}));
        let w = writes();
        let out = |n: &str| w.get(n);
        // mid and w2 run beside w1: they never see its write.
        assert_eq!(v.visible_to("mid", out)["x"], 0);
        assert_eq!(v.visible_to("w2", out)["x"], 0);
        assert_eq!(v.visible_to("r1", out)["x"], 1);
        // join depends on both writers: w2 comes later in topological order, so it wins,
        // whichever finished first.
        assert_eq!(v.visible_to("join", out)["x"], 2);
        assert_eq!(v.run_bag(out)["x"], 2);
        // A writer that has not succeeded (skipped, failed) wrote nothing.
        assert_eq!(
            v.visible_to("join", |n| w.get(n).filter(|_| n == "w1"))["x"],
            1
        );
    }

    #[test]
    fn the_log_gives_the_same_bag_whatever_the_completion_order() {
        let g = graph();
        let v = Variables::new(&g, &json!({"req": "r", "secret": "hunter2hunter2"}));
        let done = |n: &str, o: Value| json!({"type": "node.completed", "nodeId": n, "payload": {"nodeId": n, "outputs": o}});
        let a = [
            done("w2", json!({"name": "x", "value": 2})),
            done("w1", json!({"name": "x", "value": 1})),
            done("mid", json!({"name": "x", "value": 99})),
        ];
        let mut b = a.clone();
        b.reverse();
        assert_eq!(v.of_events(&a), v.of_events(&b));
        assert_eq!(v.of_events(&a)["x"], 2);
        let served = v.masked(v.of_events(&a));
        assert_eq!(served["secret"], "[REDACTED:secret]");
        assert_eq!(served["req"], "r");
        assert!(v.is_sensitive("secret") && !v.is_sensitive("x"));
    }

    /// The conformance-subworkflow-parent shape: `outputMapping {childOutcome: childResult}`
    /// writes the parent's `childOutcome` (undeclared there) once the child completed.
    #[test]
    fn a_sub_workflow_node_writes_its_output_mapped_variables() {
        let g = Graph::parse(&json!({"id": "p", "nodes": [
            {"id": "start", "typeId": "core.noop"},
            {"id": "call", "typeId": "core.control.subWorkflow",
             "config": {"workflowId": "child", "outputMapping": {"childOutcome": "childResult"}}},
            {"id": "end", "typeId": "core.noop"}],
            "edges": [{"id": "1", "sourceNodeId": "start", "targetNodeId": "call"},
                      {"id": "2", "sourceNodeId": "call", "targetNodeId": "end"}]}))
        .unwrap();
        let v = Variables::new(&g, &json!({}));
        assert!(v.has_writers());
        let log = [
            json!({"type": "node.completed", "nodeId": "call", "payload": {"nodeId": "call",
            "outputs": {"childRunId": "uid-c", "childStatus": "completed",
                        "variables": {"childOutcome": "child-completed"}}}}),
        ];
        assert_eq!(v.of_events(&log)["childOutcome"], "child-completed");
        let out = json!({"variables": {"childOutcome": "child-completed"}});
        assert_eq!(
            v.visible_to("end", |n| (n == "call").then_some(&out))["childOutcome"],
            "child-completed"
        );
        assert!(
            v.visible_to("start", |n| (n == "call").then_some(&out))
                .get("childOutcome")
                .is_none()
        );
    }

    #[test]
    fn kinds_match_their_json_types() {
        use VariableKind::*;
        let table = [
            (String, json!("s"), true),
            (String, json!(1), false),
            (Number, json!(1.5), true),
            (Boolean, json!(false), true),
            (Object, json!({}), true),
            (Array, json!([]), true),
            (Array, json!({}), false),
        ];
        for (k, v, want) in table {
            assert_eq!(matches_kind(k, &v), want, "{k:?} {v}");
        }
        assert_eq!(kind_name(Object), "an object");
    }
}
