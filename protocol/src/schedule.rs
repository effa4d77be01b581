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

use std::collections::{BTreeMap, BTreeSet, HashMap};

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

/// The nodes that can be decided now given `states`, in the graph's topological order, with
/// what happens to each: [`Scheduler::decide`] over a scheduler holding `states`, with no
/// limit on the nodes to run. Skips and condition failures cascade within one call (a
/// skipped node settles, so its dependents are decided too); nodes to run do not (they
/// settle when they finish).
pub fn decide<'g>(
    graph: &'g Graph,
    states: &BTreeMap<String, NodeState>,
) -> Vec<(&'g Node, Decision)> {
    let mut s = Scheduler::new(graph);
    for n in &graph.nodes {
        if let Some(st) = states.get(&n.id) {
            s.set(&n.id, st.clone());
        }
    }
    s.decide(usize::MAX)
}

/// The run's node states and what can be decided next, kept up to date as nodes start and
/// settle so that one step costs what changed (the settled node's dependents), not the size
/// of the graph: every node counts its unsettled dependencies, and a node whose count
/// reaches zero joins the `fresh` set, decided by the next [`Scheduler::decide`].
#[derive(Debug, Clone)]
pub struct Scheduler<'g> {
    graph: &'g Graph,
    /// Position in `graph.nodes` (the topological order) of each node id.
    index: HashMap<&'g str, usize>,
    /// By position: the node's state, `None` while undecided.
    states: Vec<Option<NodeState>>,
    /// By position: dependencies (with multiplicity: two edges from one node count twice)
    /// not yet settled.
    pending: Vec<usize>,
    /// By position: the positions depending on the node, once per dependency.
    dependents: Vec<Vec<usize>>,
    /// Undecided nodes whose dependencies all settled and that were not evaluated yet.
    fresh: BTreeSet<usize>,
    /// Nodes evaluated to run and not started yet (their edge inputs cannot change: every
    /// dependency settled for good), in topological order.
    runnable: BTreeMap<usize, Map<String, Value>>,
}

impl<'g> Scheduler<'g> {
    /// A run of `graph` with no node decided yet.
    pub fn new(graph: &'g Graph) -> Self {
        let index: HashMap<&str, usize> = graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id.as_str(), i))
            .collect();
        let mut pending = vec![0; graph.nodes.len()];
        let mut dependents = vec![Vec::new(); graph.nodes.len()];
        for (i, n) in graph.nodes.iter().enumerate() {
            for d in dependencies(graph, n) {
                // A dependency on no node never settles: the node is never decided.
                pending[i] += 1;
                if let Some(&j) = index.get(d) {
                    dependents[j].push(i);
                }
            }
        }
        let fresh = (0..graph.nodes.len())
            .filter(|&i| pending[i] == 0)
            .collect();
        Scheduler {
            graph,
            index,
            states: vec![None; graph.nodes.len()],
            pending,
            dependents,
            fresh,
            runnable: BTreeMap::new(),
        }
    }

    /// The state of `node_id` (`None` while undecided or unknown).
    pub fn state(&self, node_id: &str) -> Option<&NodeState> {
        self.index
            .get(node_id)
            .and_then(|&i| self.states[i].as_ref())
    }

    /// The outputs of `node_id` once it succeeded.
    pub fn outputs(&self, node_id: &str) -> Option<&Value> {
        match self.state(node_id) {
            Some(NodeState::Succeeded(o)) => Some(o),
            _ => None,
        }
    }

    /// Records how `node_id` stands. The first time a node settles its dependents are
    /// counted down; settling it again (a skip recorded by [`Self::decide`] and then by its
    /// branch) only replaces the state.
    pub fn set(&mut self, node_id: &str, state: NodeState) {
        let Some(&i) = self.index.get(node_id) else {
            return;
        };
        self.fresh.remove(&i);
        self.runnable.remove(&i);
        let was_settled = self.states[i].as_ref().is_some_and(NodeState::is_settled);
        let settles = state.is_settled();
        self.states[i] = Some(state);
        if settles && !was_settled {
            for k in 0..self.dependents[i].len() {
                let d = self.dependents[i][k];
                self.pending[d] -= 1;
                if self.pending[d] == 0 && self.states[d].is_none() {
                    self.fresh.insert(d);
                }
            }
        }
    }

    /// Marks `node` as running and returns the states of the nodes it depends on (what
    /// its inputs and a merge read), all settled.
    pub fn start(&mut self, node: &Node) -> BTreeMap<String, NodeState> {
        self.set(&node.id, NodeState::Running);
        dependencies(self.graph, node)
            .filter_map(|d| Some((d.to_owned(), self.state(d)?.clone())))
            .collect()
    }

    /// The nodes that can be decided now, in topological order, with what happens to each;
    /// at most `max_runs` of them to run (the first ones in that order). Skips and condition
    /// failures are recorded here and cascade within the call; a node returned to run stays
    /// undecided until [`Self::start`], and is returned again by a later call until then.
    pub fn decide(&mut self, max_runs: usize) -> Vec<(&'g Node, Decision)> {
        let graph = self.graph;
        let mut settled: Vec<(usize, Decision)> = Vec::new();
        while let Some(i) = self.fresh.pop_first() {
            let node = &graph.nodes[i];
            let decision = evaluate(graph, node, &|n: &str| self.state(n));
            match decision {
                Decision::Run { edge_inputs } => {
                    self.runnable.insert(i, edge_inputs);
                }
                Decision::Skip(_) => {
                    self.set(&node.id, NodeState::Skipped);
                    settled.push((i, decision));
                }
                Decision::ConditionInvalid { .. } => {
                    self.set(&node.id, NodeState::Failed);
                    settled.push((i, decision));
                }
            }
        }
        let runs = self.runnable.iter().take(max_runs).map(|(&i, inputs)| {
            (
                i,
                Decision::Run {
                    edge_inputs: inputs.clone(),
                },
            )
        });
        let mut out: Vec<(usize, Decision)> = settled.into_iter().chain(runs).collect();
        out.sort_by_key(|(i, _)| *i);
        out.into_iter().map(|(i, d)| (&graph.nodes[i], d)).collect()
    }
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

    /// The scheduling rule as first written (a pass over every node per call, the caller
    /// starting the first `max_runs` nodes to run): the oracle the incremental scheduler
    /// must agree with.
    fn reference<'g>(
        graph: &'g Graph,
        states: &mut BTreeMap<String, NodeState>,
        max_runs: usize,
    ) -> Vec<(&'g Node, Decision)> {
        let mut out = Vec::new();
        let mut runs = 0;
        for node in &graph.nodes {
            if states.contains_key(&node.id) {
                continue;
            }
            let ready =
                dependencies(graph, node).all(|d| states.get(d).is_some_and(NodeState::is_settled));
            if !ready {
                continue;
            }
            let d = evaluate(graph, node, &|n: &str| states.get(n));
            match &d {
                Decision::Skip(_) => {
                    states.insert(node.id.clone(), NodeState::Skipped);
                }
                Decision::ConditionInvalid { .. } => {
                    states.insert(node.id.clone(), NodeState::Failed);
                }
                Decision::Run { .. } if runs == max_runs => continue,
                Decision::Run { .. } => runs += 1,
            }
            out.push((node, d));
        }
        out
    }

    /// A random DAG: node `i` depends on some earlier nodes through edges (random rule,
    /// sometimes a condition, sometimes an invalid one) or `connection` inputs.
    fn random_graph(n: usize, links: &[(usize, usize, u8)], disabled: &[bool]) -> Graph {
        let mut nodes = Vec::new();
        let mut edges = Vec::new();
        let rules = [
            "all_success",
            "any_success",
            "all_complete",
            "none_failed",
            "any_failed",
        ];
        for i in 0..n {
            let mut inputs = serde_json::Map::new();
            for (k, &(a, b, kind)) in links.iter().enumerate() {
                let (src, dst) = (a % n, b % n);
                if src >= dst || dst != i {
                    continue;
                }
                match kind % 8 {
                    0 => {
                        inputs.insert(
                            format!("c{k}"),
                            json!({"type": "connection", "nodeId": format!("n{src}"), "outputKey": "output"}),
                        );
                    }
                    k8 => {
                        let mut e = json!({"id": format!("e{k}"), "sourceNodeId": format!("n{src}"),
                            "targetNodeId": format!("n{dst}"), "targetInput": format!("p{k}"),
                            "triggerRule": rules[(kind / 8) as usize % rules.len()]});
                        if k8 == 1 {
                            e["condition"] = json!({"type": "truthy", "left": "output"});
                        } else if k8 == 2 {
                            e["condition"] = json!({"type": "truthy"});
                        }
                        edges.push(e);
                    }
                }
            }
            nodes.push(json!({"id": format!("n{i}"), "typeId": "t",
                "disabled": disabled.get(i).copied().unwrap_or(false), "inputs": inputs}));
        }
        Graph::parse(&json!({"id": "w", "nodes": nodes, "edges": edges})).unwrap()
    }

    fn names(d: &[(&Node, Decision)]) -> Vec<(String, Decision)> {
        d.iter().map(|(n, d)| (n.id.clone(), d.clone())).collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// Driven step by step through the same outcomes (random successes with truthy or
        /// falsy outputs, failures, waits) and the same concurrency limits, the incremental
        /// scheduler decides exactly what the reference pass decides, in the same order.
        #[test]
        fn the_incremental_scheduler_decides_as_the_reference_pass(
            n in 1usize..14,
            links in proptest::collection::vec((0usize..14, 0usize..14, 0u8..40), 0..30),
            disabled in proptest::collection::vec(proptest::bool::weighted(0.1), 14),
            outcomes in proptest::collection::vec(0u8..8, 64),
            limits in proptest::collection::vec(0usize..4, 64),
        ) {
            let g = random_graph(n, &links, &disabled);
            let mut s = Scheduler::new(&g);
            let mut states = BTreeMap::new();
            let mut running: Vec<String> = Vec::new();
            for step in 0..64 {
                let free = limits[step];
                let want = names(&reference(&g, &mut states, free));
                let got = names(&s.decide(free));
                proptest::prop_assert_eq!(&got, &want, "step {}", step);
                for (id, d) in &got {
                    if matches!(d, Decision::Run { .. }) {
                        let node = g.node(id).unwrap();
                        let deps = s.start(node);
                        for (dep, st) in &deps {
                            proptest::prop_assert_eq!(Some(st), states.get(dep));
                        }
                        states.insert(id.clone(), NodeState::Running);
                        running.push(id.clone());
                    }
                }
                // One running node settles per step, chosen and ended by the outcomes.
                if !running.is_empty() {
                    let o = outcomes[step];
                    let id = running.remove(o as usize % running.len());
                    let st = match o % 4 {
                        0 => NodeState::Succeeded(json!({"output": true})),
                        1 => NodeState::Succeeded(json!({"output": false})),
                        2 => NodeState::Failed,
                        _ if o < 6 => NodeState::Succeeded(json!({})),
                        _ => NodeState::Waiting,
                    };
                    s.set(&id, st.clone());
                    states.insert(id, st);
                }
                for node in &g.nodes {
                    proptest::prop_assert_eq!(s.state(&node.id), states.get(&node.id));
                }
            }
        }
    }

    #[test]
    fn a_long_chain_is_decided_one_step_at_a_time() {
        let n = 2_000;
        let nodes: Vec<Value> = (0..n)
            .map(|i| json!({"id": format!("n{i}"), "typeId": "t"}))
            .collect();
        let edges: Vec<Value> = (1..n)
            .map(|i| json!({"id": format!("e{i}"), "sourceNodeId": format!("n{}", i - 1), "targetNodeId": format!("n{i}")}))
            .collect();
        let g = Graph::parse(&json!({"id": "w", "nodes": nodes, "edges": edges})).unwrap();
        let mut s = Scheduler::new(&g);
        for i in 0..n {
            let d = s.decide(8);
            assert_eq!(d.len(), 1);
            assert_eq!(d[0].0.id, format!("n{i}"));
            let deps = s.start(d[0].0);
            assert_eq!(deps.len(), usize::from(i > 0));
            // A started node is not returned again.
            assert!(s.decide(8).is_empty());
            s.set(&format!("n{i}"), ok());
        }
        assert!(s.decide(8).is_empty());
    }
}
