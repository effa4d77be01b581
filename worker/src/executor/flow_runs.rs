//! Whole runs of the control-flow and variable nodes on an in-memory log: routing with a
//! skipped branch, variables seen in topological order, the fan-in, the node-execution
//! ceiling — and a replay from every prefix of each log (a worker killed after any event)
//! that ends with the same log.

use openwop_protocol::events::RunEventDoc;
use openwop_protocol::graph::Graph;
use openwop_protocol::run::variables::Variables;
use serde_json::{Value, json};

use super::tests::{Outcome, assert_gapless, of, run_snapshot};
use super::*;

/// start → check (score ≥ 0.5?) → hi | lo (each sets `verdict`) → join (any_success) →
/// read (getVariable) ; start → each (loop over `items`) ; start → route (router).
fn flow_workflow() -> Value {
    let cond = |branch: &str| json!({"type": "equals", "left": "branch", "right": branch});
    json!({"id": "flow", "variables": [
            {"name": "order", "type": "object", "required": true},
            {"name": "items", "type": "array", "defaultValue": ["a", "b"]},
            {"name": "verdict", "type": "string", "defaultValue": "pending"},
            {"name": "token", "type": "string", "sensitive": true}],
        "nodes": [
            {"id": "start", "typeId": "core.identity"},
            {"id": "check", "typeId": "core.conditional",
             "inputs": {"value": {"type": "variable", "variableName": "order"}},
             "config": {"predicate": {"path": "score", "op": "gte", "value": 0.5}}},
            {"id": "hi", "typeId": "core.setVariable", "config": {"name": "verdict", "value": "high"}},
            {"id": "lo", "typeId": "core.setVariable", "config": {"name": "verdict", "value": "low"}},
            {"id": "after_lo", "typeId": "core.flow.noop"},
            {"id": "before", "typeId": "core.getVariable", "config": {"name": "verdict"}},
            {"id": "join", "typeId": "core.merge"},
            {"id": "read", "typeId": "core.getVariable", "config": {"name": "verdict"}},
            {"id": "each", "typeId": "core.loop",
             "inputs": {"array": {"type": "variable", "variableName": "items"}}},
            {"id": "route", "typeId": "core.parallel",
             "inputs": {"value": {"type": "variable", "variableName": "order"}},
             "config": {"mode": "all-match", "routes": [
                {"label": "big", "predicate": {"path": "total", "op": "gt", "value": 100}},
                {"label": "vip", "predicate": {"path": "tags", "op": "contains", "value": "vip"}},
                {"label": "eu", "predicate": {"path": "region", "op": "eq", "value": "eu"}}]}}],
        "edges": [
            {"id": "s-check", "sourceNodeId": "start", "targetNodeId": "check"},
            {"id": "then", "sourceNodeId": "check", "targetNodeId": "hi", "condition": cond("then")},
            {"id": "else", "sourceNodeId": "check", "targetNodeId": "lo", "condition": cond("else")},
            {"id": "lo-after", "sourceNodeId": "lo", "targetNodeId": "after_lo"},
            {"id": "s-before", "sourceNodeId": "start", "targetNodeId": "before"},
            {"id": "hi-join", "sourceNodeId": "hi", "targetNodeId": "join", "triggerRule": "any_success"},
            {"id": "lo-join", "sourceNodeId": "lo", "targetNodeId": "join", "triggerRule": "any_success"},
            {"id": "join-read", "sourceNodeId": "join", "targetNodeId": "read"},
            {"id": "s-each", "sourceNodeId": "start", "targetNodeId": "each"},
            {"id": "s-route", "sourceNodeId": "start", "targetNodeId": "route"}]})
}

fn snapshot(workflow: Value, inputs: Value, configurable: Value, host: Value) -> Value {
    json!({"run": {"namespace": "ns", "name": "r", "runId": "run-1"},
           "workflow": workflow, "inputs": inputs, "configurable": configurable, "host": host})
}

fn outputs(o: &Outcome, node: &str) -> Value {
    let i = of(&o.events, EventType::NodeCompleted, node);
    assert_eq!(i.len(), 1, "{node} completed once");
    o.events[i[0]].payload["outputs"].clone()
}

/// What must be identical between a run and its replay: ids, types, payloads, order.
fn shape(events: &[RunEventDoc]) -> Vec<(String, EventType, Value, u64)> {
    events
        .iter()
        .map(|e| {
            (
                e.event_id.clone(),
                e.event_type,
                e.payload.clone(),
                e.sequence,
            )
        })
        .collect()
}

/// A worker killed after each event in turn, restarted over what was recorded, ends with
/// the same log as the uninterrupted run.
fn replays_from_every_prefix(snap: &Value, full: &Outcome) {
    for cut in 0..full.events.len() {
        let again = run_snapshot(snap.clone(), full.events[..cut].to_vec());
        assert_eq!(again.end, full.end, "killed after event {cut}");
        assert_eq!(
            shape(&again.events),
            shape(&full.events),
            "killed after event {cut}"
        );
    }
}

#[test]
fn a_conditional_routes_skips_the_other_branch_and_variables_follow_the_graph() {
    let inputs = json!({"order": {"score": 0.9, "total": 250, "tags": ["vip"], "region": "us"},
                        "token": "tok-123456789"});
    let snap = snapshot(flow_workflow(), inputs.clone(), json!({}), json!({}));
    let o = run_snapshot(snap.clone(), vec![]);
    assert_eq!(o.end, RunEnd::Completed);
    assert_gapless(&o.events);
    assert_eq!(
        outputs(&o, "check"),
        json!({"branch": "then", "matched": true, "value": inputs["order"]})
    );
    // The branch not taken is skipped, and the skip cascades to what depends on it only.
    for skipped in ["lo", "after_lo"] {
        let i = of(&o.events, EventType::NodeSkipped, skipped);
        assert_eq!(i.len(), 1, "{skipped}");
        assert_eq!(
            o.events[i[0]].payload,
            json!({"nodeId": skipped, "reason": "trigger-rule-not-met"})
        );
        assert!(of(&o.events, EventType::NodeStarted, skipped).is_empty());
    }
    assert!(
        o.events
            .iter()
            .all(|e| e.event_type != EventType::LogAppended),
        "skips are node.skipped, not log records"
    );
    // hi wrote the variable; join (any_success) ran with hi's outputs; read sees the write,
    // `before` (a concurrent branch) never does.
    let changed: Vec<&RunEventDoc> = o
        .events
        .iter()
        .filter(|e| e.event_type == EventType::VariableChanged)
        .collect();
    assert_eq!(changed.len(), 1);
    assert_eq!(
        changed[0].payload,
        json!({"name": "verdict", "previous": "pending", "next": "high", "nodeId": "hi"})
    );
    assert_eq!(
        outputs(&o, "join"),
        json!({"inputs": {"hi": {"name": "verdict", "value": "high"}}})
    );
    assert_eq!(outputs(&o, "read"), json!({"value": "high"}));
    assert_eq!(outputs(&o, "before"), json!({"value": "pending"}));
    assert_eq!(outputs(&o, "each")["total"], 2);
    assert_eq!(outputs(&o, "route")["branches"], json!(["big", "vip"]));
    // The served bag, folded from the log: inputs over defaults plus the write; the
    // sensitive input masked.
    let graph = Graph::parse(&flow_workflow()).unwrap();
    let vars = Variables::new(&graph, &inputs);
    let docs: Vec<Value> = o
        .events
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    let served = vars.masked(vars.of_events(&docs));
    assert_eq!(served["verdict"], "high");
    assert_eq!(served["order"], inputs["order"]);
    assert_eq!(served["items"], json!(["a", "b"]));
    assert_eq!(served["token"], "[REDACTED:token]");

    // The other branch: lo runs, hi is skipped, join still runs (any_success).
    let low = snapshot(
        flow_workflow(),
        json!({"order": {"score": 0.1}}),
        json!({}),
        json!({}),
    );
    let l = run_snapshot(low, vec![]);
    assert_eq!(l.end, RunEnd::Completed);
    assert_eq!(of(&l.events, EventType::NodeSkipped, "hi").len(), 1);
    assert_eq!(outputs(&l, "read"), json!({"value": "low"}));
    assert_eq!(of(&l.events, EventType::NodeCompleted, "after_lo").len(), 1);

    replays_from_every_prefix(&snap, &o);
}

fn chain(n: usize) -> Value {
    let nodes: Vec<Value> = (1..=n)
        .map(|i| json!({"id": format!("n{i}"), "typeId": "core.flow.noop"}))
        .collect();
    let edges: Vec<Value> = (1..n)
        .map(|i| json!({"id": format!("e{i}"), "sourceNodeId": format!("n{i}"), "targetNodeId": format!("n{}", i + 1)}))
        .collect();
    json!({"id": "conformance-cap-breach", "nodes": nodes, "edges": edges,
           "settings": {"timeout": 30000, "maxRetries": 0}})
}

#[test]
fn the_node_after_the_recursion_limit_never_starts_and_the_run_fails_once() {
    let snap = snapshot(chain(6), json!({}), json!({"recursionLimit": 3}), json!({}));
    let o = run_snapshot(snap.clone(), vec![]);
    let RunEnd::Failed(e) = &o.end else {
        panic!("{:?}", o.end)
    };
    assert_eq!(e.code, "recursion_limit_exceeded");
    assert_gapless(&o.events);
    let started: Vec<&str> = o
        .events
        .iter()
        .filter(|e| e.event_type == EventType::NodeStarted)
        .filter_map(|e| e.node_id.as_deref())
        .collect();
    assert_eq!(started, ["n1", "n2", "n3"]);
    let breaches: Vec<&RunEventDoc> = o
        .events
        .iter()
        .filter(|e| e.event_type == EventType::CapBreached)
        .collect();
    assert_eq!(breaches.len(), 1);
    assert_eq!(
        breaches[0].payload,
        json!({"kind": "node-executions", "limit": 3, "observed": 4, "nodeId": "n4"})
    );
    assert!(
        o.events
            .iter()
            .all(|e| e.event_type != EventType::NodeFailed),
        "the node past the limit is not failed: it never started"
    );
    let types: Vec<EventType> = o
        .events
        .iter()
        .rev()
        .take(2)
        .map(|e| e.event_type)
        .collect();
    assert_eq!(types, [EventType::RunFailed, EventType::CapBreached]);
    assert_eq!(
        o.events.last().unwrap().payload["error"]["code"],
        "recursion_limit_exceeded"
    );
    replays_from_every_prefix(&snap, &o);
}

#[test]
fn the_hosts_ceiling_binds_and_clamps_a_larger_recursion_limit() {
    let host = json!({"limits": {"clarificationRounds": 3, "schemaRounds": 3, "envelopesPerTurn": 32, "maxNodeExecutions": 2}});
    for configurable in [json!({}), json!({"recursionLimit": 50})] {
        let o = run_snapshot(
            snapshot(chain(4), json!({}), configurable.clone(), host.clone()),
            vec![],
        );
        let RunEnd::Failed(e) = &o.end else {
            panic!("{:?}", o.end)
        };
        assert_eq!(e.code, "recursion_limit_exceeded", "{configurable}");
        let breach = o
            .events
            .iter()
            .find(|e| e.event_type == EventType::CapBreached)
            .unwrap();
        assert_eq!(breach.payload["limit"], 2);
        assert_eq!(breach.payload["nodeId"], "n3");
    }
    // Exactly at the limit: the run completes.
    let o = run_snapshot(
        snapshot(chain(3), json!({}), json!({"recursionLimit": 3}), json!({})),
        vec![],
    );
    assert_eq!(o.end, RunEnd::Completed);
    // A limit that is not a positive integer (a Run written without the REST API's check)
    // fails the run before anything starts, naming the field.
    let o = run_snapshot(
        snapshot(chain(2), json!({}), json!({"recursionLimit": 0}), json!({})),
        vec![],
    );
    let RunEnd::Failed(e) = &o.end else {
        panic!("{:?}", o.end)
    };
    assert_eq!(e.code, "validation_error");
    assert!(
        e.message.contains("configurable.recursionLimit"),
        "{}",
        e.message
    );
    assert!(
        o.events
            .iter()
            .all(|e| e.event_type != EventType::NodeStarted)
    );
}

#[test]
fn a_bad_write_fails_the_node_with_the_type_it_needed() {
    let wf = json!({"id": "w", "variables": [{"name": "count", "type": "number"}],
        "nodes": [{"id": "set", "typeId": "core.setVariable",
                   "inputs": {"value": {"type": "static", "value": "seven"}},
                   "config": {"name": "count"}}]});
    let o = run_snapshot(snapshot(wf, json!({}), json!({}), json!({})), vec![]);
    let RunEnd::Failed(e) = &o.end else {
        panic!("{:?}", o.end)
    };
    assert_eq!(e.code, "validation_error");
    assert_eq!(
        e.message,
        "node set: input `value` must be a number to write variable `count`"
    );
    assert!(
        o.events
            .iter()
            .all(|e| e.event_type != EventType::VariableChanged)
    );
}
