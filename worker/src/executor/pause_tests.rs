//! Pausing on an in-memory log: a run paused after any event of its log and resumed ends with
//! the same log as the run never paused, apart from its `run.paused` / `run.resumed` (replay
//! folds both as no-ops; a node abandoned mid-flight runs again as a fresh attempt); and a
//! drain lets the node in flight finish, starts nothing and does not end the run.

use std::time::Duration;

use openwop_protocol::events::DrainPolicy;
use openwop_protocol::events::RunEventDoc;
use openwop_protocol::run::pause::{PauseLog, PauseRequest};
use openwop_protocol::run::projection::Projection;
use openwop_protocol::run::snapshot::RunSnapshot;
use openwop_protocol::run::status::RunPhase;
use serde_json::{Value, json};

use super::*;
use crate::eventlog::MemoryPublisher;
use crate::pause::{record_paused, record_resumed};

fn snapshot(workflow: Value) -> RunSnapshot {
    serde_json::from_value(json!({
        "run": {"namespace": "ns", "name": "r", "runId": "run-1"},
        "workflow": workflow, "inputs": {}, "host": {"durableWaitThresholdMs": 60000}}))
    .unwrap()
}

fn chain() -> Value {
    json!({"id": "c", "nodes": [{"id": "a", "typeId": "core.flow.noop"},
                                {"id": "b", "typeId": "core.flow.noop"},
                                {"id": "c", "typeId": "core.flow.noop"}],
           "edges": [{"id": "ab", "sourceNodeId": "a", "targetNodeId": "b"},
                     {"id": "bc", "sourceNodeId": "b", "targetNodeId": "c"}]})
}

fn log(existing: Vec<RunEventDoc>) -> RunLog<MemoryPublisher> {
    RunLog::new(
        MemoryPublisher::default(),
        "openwop.events.ns.run-1",
        "run-1",
        Arc::new(Redactor::default()),
        existing,
    )
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// `prefix` paused (as the worker records it), then resumed by a new worker: the log the
/// resumed worker starts from.
fn paused_then_resumed(prefix: &[RunEventDoc], policy: DrainPolicy) -> Vec<RunEventDoc> {
    rt().block_on(async {
        let mut l = log(prefix.to_vec());
        let req = PauseRequest {
            reason: Some("test".into()),
            drain_policy: policy,
            ..Default::default()
        };
        record_paused(&mut l, &req).await.unwrap();
        let paused = Projection::of_docs(l.events());
        assert_eq!(paused.phase, Some(RunPhase::Paused));
        assert!(paused.running_nodes.is_empty(), "a paused run runs nothing");
        let mut resumed = log(l.events().to_vec());
        assert!(record_resumed(&mut resumed).await.unwrap());
        resumed.events().to_vec()
    })
}

/// The log without its pause and pause-resume events, as `(type, eventId)`.
fn without_pauses(events: &[RunEventDoc]) -> Vec<(EventType, String)> {
    let mut state = PauseLog::default();
    events
        .iter()
        .filter(|e| {
            let before = state;
            state.apply(e.event_type, &e.payload);
            state == before
        })
        .map(|e| (e.event_type, e.event_id.clone()))
        .collect()
}

#[test]
fn a_run_paused_after_any_event_resumes_to_the_unpaused_log() {
    for wf in [chain(), durable_tests::delay_flow(5)] {
        let snap = snapshot(wf);
        let full = tests::execute(&snap, vec![]);
        assert_eq!(full.end, RunEnd::Completed);
        tests::assert_gapless(&full.events);
        // After run.started up to just before the terminal event (a pause never follows it).
        for k in 1..full.events.len() {
            let start = paused_then_resumed(&full.events[..k], DrainPolicy::Immediate);
            let again = tests::execute(&snap, start);
            tests::assert_gapless(&again.events);
            assert_eq!(again.end, full.end, "paused after {k} events");
            assert_eq!(
                without_pauses(&again.events),
                without_pauses(&full.events),
                "paused after {k} events"
            );
            let types: Vec<_> = again.events[k..k + 2]
                .iter()
                .map(|e| e.event_type)
                .collect();
            assert_eq!(types, [EventType::RunPaused, EventType::RunResumed]);
            assert_eq!(again.events[k + 1].payload["fromStatus"], "paused");
            let end = Projection::of_docs(&again.events);
            assert_eq!(end.phase, Some(RunPhase::Completed));
        }
    }
}

#[test]
fn a_drain_lets_the_node_in_flight_finish_and_starts_nothing() {
    let snap = snapshot(durable_tests::delay_flow(150));
    let graph = Graph::parse(&snap.workflow).unwrap();
    let cfg = ExecConfig {
        mock_programs: snap.mock_programs().unwrap(),
        providers: ProviderSet::default(),
        secrets: vec![],
        tools: crate::tools::ToolServers::from_mounts(&snap.tool_servers).0,
    };
    let drain = StopSignal::new();
    let events = rt().block_on(async {
        let reasoning = ReasoningStream::new("openwop.reasoning.ns.run-1", 64);
        let mut exec =
            Executor::new(&snap, &graph, &cfg, log(vec![]), reasoning).with_drain(drain.clone());
        let ask = async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            drain.request();
        };
        let (end, ()) = tokio::join!(exec.run(), ask);
        assert!(matches!(end, Err(LogError::Stopped)), "{end:?}");
        exec.log_mut().events().to_vec()
    });
    let seen: Vec<_> = events
        .iter()
        .map(|e| (e.event_type, e.node_id.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(
        seen,
        [
            (EventType::RunStarted, ""),
            (EventType::NodeStarted, "wait"),
            (EventType::NodeCompleted, "wait"),
        ],
        "the delay finished and was recorded; `after` never started"
    );
    // Resumed: `after` runs and the run completes with the unpaused run's log.
    let start = paused_then_resumed(&events, DrainPolicy::DrainCurrentNode);
    assert_eq!(start[3].payload["drainPolicy"], "drain-current-node");
    let resumed = tests::execute(&snap, start);
    assert_eq!(resumed.end, RunEnd::Completed);
    let unpaused = tests::execute(&snap, vec![]);
    assert_eq!(
        without_pauses(&resumed.events),
        without_pauses(&unpaused.events)
    );
}
