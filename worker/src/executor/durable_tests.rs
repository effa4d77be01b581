//! Durable waits on an in-memory log: `core.delay` below and above the host's threshold, and
//! `core.subWorkflow`'s dispatch and outcome — each replayed from every prefix of its log (a
//! worker killed after any event): the same event ids, and never a second timer or child.

use openwop_protocol::events::RunEventDoc;
use openwop_protocol::run::projection::Projection;
use openwop_protocol::run::snapshot::RunSnapshot;
use openwop_protocol::run::status::RunPhase;
use serde_json::{Value, json};

use super::*;

/// Runs (or replays over `existing`) `workflow` with the host's durable-wait `threshold` and
/// the snapshot fields in `extra` (children, parent).
fn run(
    workflow: &Value,
    threshold: u64,
    extra: Value,
    existing: Vec<RunEventDoc>,
) -> (RunEnd, Vec<RunEventDoc>) {
    let mut doc = json!({
        "run": {"namespace": "ns", "name": "parent", "runId": "run-1"},
        "workflow": workflow, "inputs": {"topic": "cats"},
        "host": {"durableWaitThresholdMs": threshold, "maxSubWorkflowDepth": 2}});
    for (k, v) in extra.as_object().unwrap() {
        doc[k] = v.clone();
    }
    let snap: RunSnapshot = serde_json::from_value(doc).unwrap();
    let out = super::tests::execute(&snap, existing);
    (out.end, out.events)
}

pub(super) fn delay_flow(delay_ms: u64) -> Value {
    json!({"id": "d", "variables": [{"name": "delayMs", "type": "number", "defaultValue": delay_ms}],
           "nodes": [{"id": "wait", "typeId": "core.delay",
                      "inputs": {"delayMs": {"type": "variable", "variableName": "delayMs"}}},
                     {"id": "after", "typeId": "core.flow.noop"}],
           "edges": [{"id": "e", "sourceNodeId": "wait", "targetNodeId": "after"}]})
}

fn sub_flow(on_failure: &str) -> Value {
    json!({"id": "p", "variables": [{"name": "topic", "type": "string"}],
           "nodes": [{"id": "call", "typeId": "core.control.subWorkflow",
                      "config": {"workflowId": "child", "onChildFailure": on_failure,
                                 "inputMapping": {"subject": "topic"},
                                 "outputMapping": {"childOutcome": "childResult"}}},
                     {"id": "end", "typeId": "core.flow.noop"}],
           "edges": [{"id": "e", "sourceNodeId": "call", "targetNodeId": "end"}]})
}

fn ids(events: &[RunEventDoc]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| (e.event_type.as_str().to_owned(), e.event_id.clone()))
        .collect()
}

fn count(events: &[RunEventDoc], pred: impl Fn(&RunEventDoc) -> bool) -> usize {
    events.iter().filter(|e| pred(e)).count()
}

fn is_timer(e: &RunEventDoc) -> bool {
    e.event_type == EventType::LogAppended
        && openwop_protocol::run::waits::timer_of(&e.payload).is_some()
}

/// Drives a run to its end from `existing`: a worker per wake-up, each started once the
/// recorded timer is due (as the operator does).
fn to_the_end(workflow: &Value, threshold: u64, mut events: Vec<RunEventDoc>) -> Vec<RunEventDoc> {
    for _ in 0..10 {
        let (end, now) = run(workflow, threshold, json!({}), events);
        events = now;
        match end {
            RunEnd::Suspended(s) if s.is_empty() => {
                let p = Projection::of_docs(&events);
                let at = openwop_protocol::run::waits::parse_time(p.wake_at().unwrap()).unwrap();
                let rest =
                    openwop_protocol::run::waits::remaining_ms(at, time::OffsetDateTime::now_utc());
                std::thread::sleep(Duration::from_millis(rest));
            }
            _ => return events,
        }
    }
    panic!("the run never ended");
}

#[test]
fn a_delay_at_or_below_the_threshold_sleeps_in_the_pod() {
    let started = Instant::now();
    let (end, events) = run(&delay_flow(50), 100, json!({}), vec![]);
    assert_eq!(end, RunEnd::Completed);
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert_eq!(count(&events, is_timer), 0, "no timer recorded in the pod");
    let done = events
        .iter()
        .find(|e| e.event_type == EventType::NodeCompleted && e.node_id.as_deref() == Some("wait"))
        .unwrap();
    assert_eq!(done.payload["outputs"]["delayedMs"], 50);
    assert!(done.payload["outputs"]["resumedAt"].is_string());
}

#[test]
fn a_delay_above_the_threshold_records_its_wake_time_and_exits_running() {
    let started = time::OffsetDateTime::now_utc();
    let (end, events) = run(&delay_flow(400), 100, json!({}), vec![]);
    assert_eq!(end, RunEnd::Suspended(vec![]), "exits without waiting");
    assert_eq!(count(&events, is_timer), 1);
    assert_eq!(
        count(&events, |e| e.event_type == EventType::NodeCompleted),
        0
    );
    let mut p = Projection::of_docs(&events);
    p.suspend();
    assert_eq!(
        p.phase,
        Some(RunPhase::Running),
        "a delay is never waiting-*"
    );
    let at = openwop_protocol::run::waits::parse_time(p.wake_at().unwrap()).unwrap();
    let delay = (at - started).whole_milliseconds();
    // The delay counts from when the worker records it (a loaded host may start it late).
    assert!(
        (399..=10_000).contains(&delay),
        "wakeAt {delay} ms after the start"
    );
    // Woken early (another branch, an early start): the rest is still above the threshold,
    // so it exits again with the same recorded time and nothing new.
    let (again, replayed) = run(&delay_flow(400), 100, json!({}), events.clone());
    assert_eq!(again, RunEnd::Suspended(vec![]));
    assert_eq!(ids(&replayed), ids(&events));
    // A changed input never moves a recorded wake time.
    let (_, other) = run(&delay_flow(999_000), 100, json!({}), events.clone());
    assert_eq!(ids(&other), ids(&events));
    let done = to_the_end(&delay_flow(400), 100, events);
    let woke = time::OffsetDateTime::now_utc();
    assert!(woke >= at, "never before the recorded wake time");
    assert_eq!(done.last().unwrap().event_type, EventType::RunCompleted);
    assert_eq!(count(&done, is_timer), 1);
}

#[test]
fn a_delay_killed_at_every_event_replays_to_the_same_log() {
    let wf = delay_flow(300);
    let full = to_the_end(&wf, 100, vec![]);
    assert_eq!(full.last().unwrap().event_type, EventType::RunCompleted);
    for k in 0..full.len() {
        let replayed = to_the_end(&wf, 100, full[..k].to_vec());
        assert_eq!(ids(&replayed), ids(&full), "killed after {k} events");
        assert_eq!(count(&replayed, is_timer), 1, "killed after {k} events");
    }
}

#[test]
fn a_bad_delay_fails_the_node_naming_the_port() {
    let wf = json!({"id": "d", "nodes": [{"id": "wait", "typeId": "core.delay",
                                          "inputs": {"delayMs": {"type": "static", "value": -5}}}]});
    let (end, events) = run(&wf, 100, json!({}), vec![]);
    let RunEnd::Failed(e) = end else {
        panic!("{end:?}")
    };
    assert_eq!(e.code, "validation_error");
    assert!(e.message.contains("inputs.delayMs"), "{}", e.message);
    assert_eq!(count(&events, is_timer), 0);
}

fn result(status: &str) -> Value {
    json!({"children": [{"nodeId": "call", "childRunId": "uid-child", "childRunName": "x",
                         "childStatus": status, "variables": {"childResult": "child-completed"},
                         "error": {"code": "boom", "message": "it broke"}}]})
}

#[test]
fn a_sub_workflow_records_its_child_once_and_completes_from_its_outcome() {
    let wf = sub_flow("fail-parent");
    let (end, events) = run(&wf, 100, json!({}), vec![]);
    assert_eq!(end, RunEnd::Suspended(vec![]));
    let dispatched: Vec<&RunEventDoc> = events
        .iter()
        .filter(|e| e.event_type == EventType::NodeDispatched)
        .collect();
    assert_eq!(dispatched.len(), 1);
    let d = &dispatched[0].payload;
    assert_eq!(d["childWorkflowId"], "child");
    assert_eq!(
        d["inputs"],
        json!({"subject": "cats"}),
        "inputMapping seeds the child"
    );
    assert_eq!(
        d["childRunName"],
        openwop_protocol::run::waits::child_run_name("parent", "call")
    );
    let mut p = Projection::of_docs(&events);
    p.suspend();
    assert_eq!((p.phase, p.children.len()), (Some(RunPhase::Running), 1));
    // Woken before the child ended: nothing new, no second child.
    let (again, replayed) = run(&wf, 100, json!({}), events.clone());
    assert_eq!(again, RunEnd::Suspended(vec![]));
    assert_eq!(ids(&replayed), ids(&events));
    // The child completed: the node completes with its id, status and mapped variables.
    let (end, done) = run(&wf, 100, result("completed"), events.clone());
    assert_eq!(end, RunEnd::Completed);
    let completed = done
        .iter()
        .find(|e| e.event_type == EventType::NodeCompleted && e.node_id.as_deref() == Some("call"))
        .unwrap();
    assert_eq!(
        completed.payload["outputs"],
        json!({"childRunId": "uid-child", "childStatus": "completed",
               "variables": {"childOutcome": "child-completed"}})
    );
    // Killed after any event of the whole run: the same log, one dispatch.
    for k in 0..done.len() {
        let dispatched_yet = done[..k]
            .iter()
            .any(|e| e.event_type == EventType::NodeDispatched);
        let (_, first) = run(&wf, 100, json!({}), done[..k].to_vec());
        let (_, replayed) = if dispatched_yet {
            run(&wf, 100, result("completed"), done[..k].to_vec())
        } else {
            run(&wf, 100, result("completed"), first)
        };
        assert_eq!(ids(&replayed), ids(&done), "killed after {k} events");
        assert_eq!(
            count(&replayed, |e| e.event_type == EventType::NodeDispatched),
            1
        );
    }
}

#[test]
fn a_failed_child_fails_or_is_absorbed_by_on_child_failure() {
    let (_, events) = run(&sub_flow("fail-parent"), 100, json!({}), vec![]);
    let (end, _) = run(
        &sub_flow("fail-parent"),
        100,
        result("failed"),
        events.clone(),
    );
    let RunEnd::Failed(e) = end else {
        panic!("{end:?}")
    };
    assert_eq!(e.code, "child_failed");
    assert!(e.message.contains("it broke"), "{}", e.message);
    let (end, done) = run(&sub_flow("absorb"), 100, result("cancelled"), events);
    assert_eq!(end, RunEnd::Completed);
    let completed = done
        .iter()
        .find(|e| e.event_type == EventType::NodeCompleted && e.node_id.as_deref() == Some("call"))
        .unwrap();
    assert_eq!(completed.payload["outputs"]["childStatus"], "cancelled");
    assert_eq!(completed.payload["outputs"]["variables"], json!({}));
}

#[test]
fn children_nested_beyond_the_hosts_depth_fail_with_a_clear_error() {
    let parent = json!({"parent": {"runId": "uid-gp", "runName": "gp", "nodeId": "n", "depth": 2}});
    let (end, events) = run(&sub_flow("fail-parent"), 100, parent, vec![]);
    let RunEnd::Failed(e) = end else {
        panic!("{end:?}")
    };
    assert_eq!(e.code, "sub_workflow_depth_exceeded");
    assert!(
        e.message.contains("runs.maxSubWorkflowDepth"),
        "{}",
        e.message
    );
    assert_eq!(
        count(&events, |e| e.event_type == EventType::NodeDispatched),
        0
    );
}
