//! The scheduling rule of a run: given how the nodes stand, which nodes run now, which are
//! skipped and which fail before running. Pure: the worker runs what [`decide`] says, as many
//! at once as the run's concurrency limit allows ([`concurrency_limit`]).
//!
//! A node is decided once every node it depends on (incoming edges and `connection` inputs)
//! has settled (succeeded, failed or been skipped). Its trigger rule is then evaluated over
//! its incoming edges. Deciding only on settled upstreams keeps a node's inputs independent
//! of which concurrent branch finished first, so a replayed run makes the same calls. A node
//! waiting on an interrupt has not settled: its dependents wait with it, while independent
//! branches go on.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::graph::{Graph, Incoming, Node, condition_holds};
use crate::workflow::PortValue;

/// Largest number of nodes one run executes at once, whatever a workflow asks for.
pub const MAX_NODE_CONCURRENCY: u32 = 64;
/// The host's default (chart value `runs.nodeConcurrency`) when a workflow sets no
/// `settings.maxConcurrency`.
pub const DEFAULT_NODE_CONCURRENCY: u32 = 8;

/// The effective concurrency of a run: the workflow's `settings.maxConcurrency`, else the
/// host's default, within `1..=MAX_NODE_CONCURRENCY`.
pub fn concurrency_limit(workflow: Option<u32>, host_default: u32) -> usize {
    workflow
        .unwrap_or(host_default)
        .clamp(1, MAX_NODE_CONCURRENCY) as usize
}

/// The run's node-execution ceiling (`configurable.recursionLimit` clamped to the host's
/// `maxNodeExecutions`, [`crate::run::snapshot::node_execution_limit`]) as the scheduler
/// applies it: every node it starts counts once (live or replayed, so a restarted worker
/// counts what the first one did; node-level retries are attempts of the same execution),
/// and the first node past the limit is refused before it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutionBudget {
    limit: Option<u32>,
    started: u32,
}

/// The node execution that would pass the ceiling: `cap.breached {kind: node-executions,
/// limit, observed, nodeId}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breach {
    pub limit: u32,
    pub observed: u32,
    pub node_id: String,
}

impl ExecutionBudget {
    pub fn new(limit: Option<u32>) -> Self {
        ExecutionBudget { limit, started: 0 }
    }

    /// Counts one more execution of `node_id`, or refuses it when it would pass the limit
    /// (the count does not move then: the node never starts).
    pub fn admit(&mut self, node_id: &str) -> Result<(), Breach> {
        let observed = self.started.saturating_add(1);
        match self.limit {
            Some(limit) if observed > limit => Err(Breach {
                limit,
                observed,
                node_id: node_id.to_owned(),
            }),
            _ => {
                self.started = observed;
                Ok(())
            }
        }
    }

    /// Executions admitted so far.
    pub fn started(&self) -> u32 {
        self.started
    }
}

/// How a node stands. A node absent from the state map has not been decided yet.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeState {
    /// Started, not finished.
    Running,
    /// Suspended on an interrupt; not settled, so its dependents wait.
    Waiting,
    /// Completed with these outputs (port name → value).
    Succeeded(Value),
    Failed,
    Skipped,
}

impl NodeState {
    /// Whether dependents may be decided.
    pub fn is_settled(&self) -> bool {
        matches!(self, Self::Succeeded(_) | Self::Failed | Self::Skipped)
    }
}

/// Why a node does not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    Disabled,
    TriggerRuleNotMet,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::TriggerRuleNotMet => "trigger-rule-not-met",
        }
    }
}

/// What happens to a decided node.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Run it; `edge_inputs` are the values of its taken incoming edges (target port → value).
    Run {
        edge_inputs: Map<String, Value>,
    },
    Skip(SkipReason),
    /// An incoming edge's condition cannot be evaluated: the node fails without running.
    ConditionInvalid {
        edge: String,
        message: String,
    },
}

/// The nodes that can be decided now, in the graph's topological order, with what happens to
/// each. Skips and condition failures cascade within one call (a skipped node settles, so its
/// dependents are decided too); nodes to run do not (they settle when they finish). A node
/// returned as `Run` and not started stays undecided and is returned again by the next call.
pub fn decide<'g>(
    graph: &'g Graph,
    states: &BTreeMap<String, NodeState>,
) -> Vec<(&'g Node, Decision)> {
    // Decisions of this call that settle a node (skips, failures) before the caller records them.
    let mut settled_here: BTreeMap<&str, NodeState> = BTreeMap::new();
    let mut out = Vec::new();
    for node in &graph.nodes {
        let id = node.id.as_str();
        if states.contains_key(id) {
            continue;
        }
        let state_of = |n: &str| settled_here.get(n).or_else(|| states.get(n));
        let upstream_settled =
            dependencies(graph, node).all(|d| state_of(d).is_some_and(NodeState::is_settled));
        if !upstream_settled {
            continue;
        }
        let decision = evaluate(graph, node, &state_of);
        match &decision {
            Decision::Skip(_) => {
                settled_here.insert(id, NodeState::Skipped);
            }
            Decision::ConditionInvalid { .. } => {
                settled_here.insert(id, NodeState::Failed);
            }
            Decision::Run { .. } => {}
        }
        out.push((node, decision));
    }
    out
}

/// The nodes `node` depends on: edge sources and `connection` input sources.
fn dependencies<'g>(graph: &'g Graph, node: &'g Node) -> impl Iterator<Item = &'g str> {
    graph
        .incoming(&node.id)
        .map(|e| e.source.as_str())
        .chain(node.inputs.values().filter_map(|pv| match pv {
            PortValue::Connection { node_id, .. } => Some(node_id.as_str()),
            _ => None,
        }))
}

fn evaluate<'s>(
    graph: &Graph,
    node: &Node,
    state_of: &impl Fn(&str) -> Option<&'s NodeState>,
) -> Decision {
    if node.disabled {
        return Decision::Skip(SkipReason::Disabled);
    }
    let mut edge_inputs = Map::new();
    let mut incoming = Incoming::default();
    // The node's rule is its first incoming edge's.
    let mut rule = None;
    for e in graph.incoming(&node.id) {
        incoming.total += 1;
        rule.get_or_insert(e.trigger_rule);
        match state_of(&e.source) {
            Some(NodeState::Succeeded(out)) => {
                let taken = match &e.condition {
                    None => true,
                    Some(c) => match condition_holds(c, out) {
                        Ok(b) => b,
                        Err(why) => {
                            return Decision::ConditionInvalid {
                                edge: e.id.clone(),
                                message: format!("edge {}: {why}", e.id),
                            };
                        }
                    },
                };
                if taken {
                    incoming.taken += 1;
                    if let Some(v) = out.get(&e.source_output) {
                        edge_inputs.insert(e.target_input.clone(), v.clone());
                    }
                }
            }
            Some(NodeState::Failed) => incoming.failed += 1,
            _ => {}
        }
    }
    if rule.unwrap_or_default().is_met(incoming) {
        Decision::Run { edge_inputs }
    } else {
        Decision::Skip(SkipReason::TriggerRuleNotMet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `a` fans out to `b`, `c`, `d`; `join` fans them in with `rule`.
    fn fan(rule: &str) -> Graph {
        Graph::parse(&json!({"id": "w", "nodes": [
            {"id": "a", "typeId": "t"}, {"id": "b", "typeId": "t"}, {"id": "c", "typeId": "t"},
            {"id": "d", "typeId": "t"}, {"id": "join", "typeId": "t"}],
            "edges": [
                {"id": "ab", "sourceNodeId": "a", "targetNodeId": "b"},
                {"id": "ac", "sourceNodeId": "a", "targetNodeId": "c"},
                {"id": "ad", "sourceNodeId": "a", "targetNodeId": "d"},
                {"id": "bj", "sourceNodeId": "b", "targetNodeId": "join", "targetInput": "b", "triggerRule": rule},
                {"id": "cj", "sourceNodeId": "c", "targetNodeId": "join", "targetInput": "c", "triggerRule": rule},
                {"id": "dj", "sourceNodeId": "d", "targetNodeId": "join", "targetInput": "d", "triggerRule": rule}]}))
        .unwrap()
    }

    fn ok() -> NodeState {
        NodeState::Succeeded(json!({"output": 1}))
    }

    fn states(s: &[(&str, NodeState)]) -> BTreeMap<String, NodeState> {
        s.iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    /// The decisions as `(node, "run" | "skip" | "fail")`.
    fn brief(g: &Graph, s: &[(&str, NodeState)]) -> Vec<(String, &'static str)> {
        decide(g, &states(s))
            .into_iter()
            .map(|(n, d)| {
                let what = match d {
                    Decision::Run { .. } => "run",
                    Decision::Skip(_) => "skip",
                    Decision::ConditionInvalid { .. } => "fail",
                };
                (n.id.clone(), what)
            })
            .collect()
    }

    fn v(x: &[(&str, &'static str)]) -> Vec<(String, &'static str)> {
        x.iter().map(|(a, b)| ((*a).to_owned(), *b)).collect()
    }

    /// (trigger rule of the fan-in, node states, expected decisions).
    type Row = (
        &'static str,
        Vec<(&'static str, NodeState)>,
        Vec<(&'static str, &'static str)>,
    );

    #[test]
    fn fan_out_and_fan_in_under_every_rule() {
        use NodeState::*;
        let table: Vec<Row> = vec![
            // Nothing decided: only the root runs.
            ("all_success", vec![], vec![("a", "run")]),
            // The root finished: all three branches are ready at once.
            (
                "all_success",
                vec![("a", ok())],
                vec![("b", "run"), ("c", "run"), ("d", "run")],
            ),
            // Branches in flight are not decided again; the join waits for all of them.
            (
                "all_success",
                vec![("a", ok()), ("b", ok()), ("c", Running), ("d", Running)],
                vec![],
            ),
            (
                "any_success",
                vec![("a", ok()), ("b", ok()), ("c", ok()), ("d", Running)],
                vec![],
            ),
            (
                "all_success",
                vec![("a", ok()), ("b", ok()), ("c", ok()), ("d", ok())],
                vec![("join", "run")],
            ),
            (
                "all_success",
                vec![("a", ok()), ("b", ok()), ("c", Failed), ("d", ok())],
                vec![("join", "skip")],
            ),
            (
                "any_success",
                vec![("a", ok()), ("b", Failed), ("c", Failed), ("d", ok())],
                vec![("join", "run")],
            ),
            (
                "any_success",
                vec![("a", ok()), ("b", Failed), ("c", Failed), ("d", Skipped)],
                vec![("join", "skip")],
            ),
            (
                "all_complete",
                vec![("a", ok()), ("b", Failed), ("c", Failed), ("d", Failed)],
                vec![("join", "run")],
            ),
            (
                "none_failed",
                vec![("a", ok()), ("b", ok()), ("c", Skipped), ("d", ok())],
                vec![("join", "run")],
            ),
            (
                "none_failed",
                vec![("a", ok()), ("b", ok()), ("c", Failed), ("d", ok())],
                vec![("join", "skip")],
            ),
            (
                "any_failed",
                vec![("a", ok()), ("b", ok()), ("c", Failed), ("d", ok())],
                vec![("join", "run")],
            ),
            (
                "any_failed",
                vec![("a", ok()), ("b", ok()), ("c", ok()), ("d", ok())],
                vec![("join", "skip")],
            ),
            // A waiting branch has not settled: the join waits, whatever its rule.
            (
                "all_complete",
                vec![("a", ok()), ("b", ok()), ("c", Waiting), ("d", ok())],
                vec![],
            ),
            (
                "any_success",
                vec![("a", ok()), ("b", ok()), ("c", Waiting), ("d", ok())],
                vec![],
            ),
            // A failed root skips every branch, and the skips cascade to the join in one call.
            (
                "all_success",
                vec![("a", Failed)],
                vec![
                    ("b", "skip"),
                    ("c", "skip"),
                    ("d", "skip"),
                    ("join", "skip"),
                ],
            ),
            (
                "all_complete",
                vec![("a", Failed)],
                vec![("b", "skip"), ("c", "skip"), ("d", "skip"), ("join", "run")],
            ),
        ];
        for (rule, s, want) in table {
            assert_eq!(brief(&fan(rule), &s), v(&want), "{rule} {s:?}");
        }
    }

    #[test]
    fn a_waiting_branch_does_not_block_an_independent_one() {
        let g = Graph::parse(&json!({"id": "w", "nodes": [
            {"id": "ask1", "typeId": "t"}, {"id": "after1", "typeId": "t"},
            {"id": "ask2", "typeId": "t"}, {"id": "after2", "typeId": "t"}],
            "edges": [{"id": "1", "sourceNodeId": "ask1", "targetNodeId": "after1"},
                      {"id": "2", "sourceNodeId": "ask2", "targetNodeId": "after2"}]}))
        .unwrap();
        assert_eq!(brief(&g, &[]), v(&[("ask1", "run"), ("ask2", "run")]));
        let s = [("ask1", NodeState::Waiting), ("ask2", ok())];
        assert_eq!(brief(&g, &s), v(&[("after2", "run")]));
    }

    #[test]
    fn connection_inputs_are_dependencies_and_edges_carry_values() {
        let g = Graph::parse(&json!({"id": "w", "nodes": [
            {"id": "a", "typeId": "t"}, {"id": "b", "typeId": "t"},
            {"id": "c", "typeId": "t", "inputs": {"x": {"type": "connection", "nodeId": "b", "outputKey": "output"}}}],
            "edges": [{"id": "ac", "sourceNodeId": "a", "targetNodeId": "c", "targetInput": "fromA"}]}))
        .unwrap();
        // `c` has one edge (from a) but also reads b's output: it waits for b.
        assert_eq!(brief(&g, &[("a", ok()), ("b", NodeState::Running)]), v(&[]));
        let d = decide(&g, &states(&[("a", ok()), ("b", ok())]));
        assert_eq!(d.len(), 1);
        assert_eq!(
            d[0].1,
            Decision::Run {
                edge_inputs: json!({"fromA": 1}).as_object().unwrap().clone()
            }
        );
    }

    #[test]
    fn conditions_disabled_nodes_and_invalid_conditions() {
        let g = Graph::parse(&json!({"id": "w", "nodes": [
            {"id": "a", "typeId": "t"}, {"id": "yes", "typeId": "t"}, {"id": "no", "typeId": "t"},
            {"id": "off", "typeId": "t", "disabled": true}, {"id": "bad", "typeId": "t"}, {"id": "after_bad", "typeId": "t"}],
            "edges": [
                {"id": "y", "sourceNodeId": "a", "targetNodeId": "yes", "condition": {"type": "truthy", "left": "output"}},
                {"id": "n", "sourceNodeId": "a", "targetNodeId": "no", "condition": {"type": "falsy", "left": "output"}},
                {"id": "o", "sourceNodeId": "a", "targetNodeId": "off"},
                {"id": "b", "sourceNodeId": "a", "targetNodeId": "bad", "condition": {"type": "truthy"}},
                {"id": "ab", "sourceNodeId": "bad", "targetNodeId": "after_bad", "triggerRule": "any_failed"}]}))
        .unwrap();
        let d = decide(&g, &states(&[("a", ok())]));
        let got: Vec<_> = d.iter().map(|(n, d)| (n.id.as_str(), d.clone())).collect();
        assert_eq!(got[0].0, "yes");
        assert!(matches!(got[0].1, Decision::Run { .. }));
        assert_eq!(
            got[1],
            ("no", Decision::Skip(SkipReason::TriggerRuleNotMet))
        );
        assert_eq!(got[2], ("off", Decision::Skip(SkipReason::Disabled)));
        assert_eq!(
            got[3],
            (
                "bad",
                Decision::ConditionInvalid {
                    edge: "b".into(),
                    message: "edge b: condition operator `truthy` needs `left`".into()
                }
            )
        );
        // The invalid condition failed `bad`, so its any_failed handler is decided in the same call.
        assert!(matches!(got[4], ("after_bad", Decision::Run { .. })));
    }

    #[test]
    fn the_execution_budget_refuses_the_first_node_past_the_limit() {
        let mut b = ExecutionBudget::new(Some(3));
        for n in ["n1", "n2", "n3"] {
            assert_eq!(b.admit(n), Ok(()));
        }
        let breach = Breach {
            limit: 3,
            observed: 4,
            node_id: "n4".into(),
        };
        assert_eq!(b.admit("n4"), Err(breach));
        assert_eq!(b.started(), 3);
        let mut free = ExecutionBudget::new(None);
        for _ in 0..10_000 {
            free.admit("n").unwrap();
        }
        assert_eq!(free.started(), 10_000);
    }

    #[test]
    fn the_concurrency_limit_is_the_workflows_else_the_hosts_within_bounds() {
        assert_eq!(concurrency_limit(None, DEFAULT_NODE_CONCURRENCY), 8);
        assert_eq!(concurrency_limit(Some(2), 8), 2);
        assert_eq!(concurrency_limit(Some(0), 8), 1);
        assert_eq!(
            concurrency_limit(Some(1000), 8),
            MAX_NODE_CONCURRENCY as usize
        );
        assert_eq!(concurrency_limit(None, 0), 1);
    }
}
