//! The executor on an in-memory log: concurrency, the limit, determinism of event ids under
//! any interleaving, failure semantics, the run timeout and several pending interrupts.

use std::collections::BTreeSet;

use openwop_protocol::events::RunEventDoc;
use openwop_protocol::run::snapshot::RunSnapshot;
use serde_json::{Value, json};

use super::*;
use crate::eventlog::MemoryPublisher;

/// A mocked LLM node that emits a `vendor.acme.note` envelope.
fn llm(id: &str) -> Value {
    json!({"id": id, "typeId": "core.ai.callPrompt",
           "config": {"provider": "mock", "prompt": format!("node {id}"), "envelopeType": "vendor.acme.note"}})
}

fn note(text: &str, delay_ms: u64) -> Value {
    json!({"stopReason": "stop", "delayMs": delay_ms,
           "content": {"type": "vendor.acme.note", "payload": {"text": text}}})
}

fn ask(question_id: &str) -> Value {
    json!({"stopReason": "stop", "content": {"type": "clarification.request",
           "payload": {"questions": [{"id": question_id, "question": "Which?"}]}}})
}

/// `a` (identity) fans out to `branches`, which fan in to `join` (noop) under `rule`.
fn fan(branches: &[&str], rule: &str, settings: Value) -> Value {
    let mut nodes = vec![json!({"id": "a", "typeId": "core.identity"})];
    let mut edges = vec![];
    for b in branches {
        nodes.push(llm(b));
        edges.push(json!({"id": format!("a-{b}"), "sourceNodeId": "a", "targetNodeId": b}));
        edges.push(
            json!({"id": format!("{b}-join"), "sourceNodeId": b, "targetNodeId": "join",
                          "targetInput": b, "triggerRule": rule}),
        );
    }
    nodes.push(json!({"id": "join", "typeId": "core.flow.noop"}));
    json!({"id": "fan", "nodes": nodes, "edges": edges, "settings": settings})
}

pub(super) struct Outcome {
    pub(super) end: RunEnd,
    pub(super) events: Vec<RunEventDoc>,
    /// Provider calls this worker made, by program key.
    pub(super) calls: Vec<String>,
    /// The same calls, with what each carried.
    pub(super) mock_calls: Vec<openwop_providers::MockCall>,
}

/// Runs (or replays over `existing`) the workflow with `mocks` and `answers`.
fn run(workflow: &Value, mocks: &Value, answers: Value, existing: Vec<RunEventDoc>) -> Outcome {
    run_configured(workflow, mocks, answers, existing, json!({}))
}

/// [`run`] with the run's `configurable`.
fn run_configured(
    workflow: &Value,
    mocks: &Value,
    answers: Value,
    existing: Vec<RunEventDoc>,
    configurable: Value,
) -> Outcome {
    run_snapshot(
        json!({
        "run": {"namespace": "ns", "name": "r", "runId": "run-1"},
        "workflow": workflow, "inputs": {"doc": "d"}, "answers": answers, "providerMocks": mocks,
        "configurable": configurable}),
        existing,
    )
}

/// Runs (or replays over `existing`) the run snapshot `snap` (JSON) of run `run-1`.
pub(super) fn run_snapshot(snap: Value, existing: Vec<RunEventDoc>) -> Outcome {
    let snap: RunSnapshot = serde_json::from_value(snap).unwrap();
    execute(&snap, existing)
}

/// Runs (or replays over `existing`) the run `snap` describes on an in-memory log.
pub(super) fn execute(snap: &RunSnapshot, existing: Vec<RunEventDoc>) -> Outcome {
    let graph = Graph::parse(&snap.workflow).unwrap();
    let cfg = ExecConfig {
        mock_programs: snap.mock_programs().unwrap(),
        providers: ProviderSet::default(),
        secrets: vec![],
        tools: crate::tools::ToolServers::from_mounts(&snap.tool_servers).0,
    };
    // All drivers: the tool loop's MCP client does network I/O.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let log = RunLog::new(
            MemoryPublisher::default(),
            "openwop.events.ns.run-1",
            "run-1",
            Arc::new(Redactor::default()),
            existing,
        );
        let reasoning = ReasoningStream::new("openwop.reasoning.ns.run-1", 64);
        let mut exec = Executor::new(snap, &graph, &cfg, log, reasoning);
        let end = exec.run().await.unwrap();
        let mock_calls = exec.mock.calls();
        let calls = mock_calls.iter().map(|c| c.node_id.clone()).collect();
        Outcome {
            end,
            events: exec.log_mut().events().to_vec(),
            calls,
            mock_calls,
        }
    })
}

pub(super) fn of(events: &[RunEventDoc], t: EventType, node: &str) -> Vec<usize> {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.event_type == t && e.node_id.as_deref() == Some(node))
        .map(|(i, _)| i)
        .collect()
}

/// Each node's event ids, in the order the node emitted them.
fn per_node(events: &[RunEventDoc]) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in events {
        m.entry(e.node_id.clone().unwrap_or_default())
            .or_default()
            .push(e.event_id.clone());
    }
    m
}

pub(super) fn assert_gapless(events: &[RunEventDoc]) {
    let seqs: Vec<u64> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(seqs, (0..events.len() as u64).collect::<Vec<_>>());
    let ids: BTreeSet<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids.len(), events.len(), "duplicate event ids");
}

fn mocks_for(branches: &[&str], delay_ms: u64) -> Value {
    Value::Object(
        branches
            .iter()
            .map(|b| ((*b).to_owned(), json!({"responses": [note(b, delay_ms)]})))
            .collect(),
    )
}

#[test]
fn independent_branches_overlap_and_the_fan_in_waits_for_all() {
    let branches = ["b", "c", "d"];
    let o = run(
        &fan(&branches, "all_success", json!({})),
        &mocks_for(&branches, 150),
        json!([]),
        vec![],
    );
    assert_eq!(o.end, RunEnd::Completed);
    assert_gapless(&o.events);
    // Every branch started before any of them completed: they were in flight together.
    let last_start = branches
        .iter()
        .map(|b| of(&o.events, EventType::NodeStarted, b)[0])
        .max()
        .unwrap();
    let first_done = branches
        .iter()
        .map(|b| of(&o.events, EventType::NodeCompleted, b)[0])
        .min()
        .unwrap();
    assert!(last_start < first_done, "branches ran one after another");
    // The fan-in started after the last branch completed, with every branch's output.
    let last_done = branches
        .iter()
        .map(|b| of(&o.events, EventType::NodeCompleted, b)[0])
        .max()
        .unwrap();
    let join = of(&o.events, EventType::NodeCompleted, "join")[0];
    assert!(of(&o.events, EventType::NodeStarted, "join")[0] > last_done);
    let out = &o.events[join].payload["outputs"];
    for b in branches {
        assert_eq!(out[b]["text"], b, "{out}");
    }
}

#[test]
fn event_ids_per_node_do_not_depend_on_the_interleaving() {
    let branches = ["b", "c", "d", "e"];
    let wf = |limit: u64| fan(&branches, "all_success", json!({"maxConcurrency": limit}));
    // Concurrent with different delays (finishing in reverse order) vs one at a time.
    let mut mocks = mocks_for(&branches, 0);
    for (i, b) in branches.iter().enumerate() {
        mocks[b]["responses"][0]["delayMs"] = json!(40 * (branches.len() - i) as u64);
    }
    let concurrent = run(&wf(8), &mocks, json!([]), vec![]);
    let sequential = run(&wf(1), &mocks, json!([]), vec![]);
    assert_gapless(&concurrent.events);
    assert_gapless(&sequential.events);
    assert_eq!(per_node(&concurrent.events), per_node(&sequential.events));
    // The interleaving really differed: concurrent branches finished last-started first.
    let done_order = |o: &Outcome| {
        let mut v: Vec<(usize, &str)> = branches
            .iter()
            .map(|b| (of(&o.events, EventType::NodeCompleted, b)[0], *b))
            .collect();
        v.sort();
        v.into_iter().map(|(_, b)| b).collect::<Vec<_>>()
    };
    assert_eq!(done_order(&concurrent), ["e", "d", "c", "b"]);
    assert_eq!(done_order(&sequential), ["b", "c", "d", "e"]);
}

#[test]
fn the_concurrency_limit_bounds_the_nodes_in_flight() {
    let branches = ["b", "c", "d", "e", "f"];
    let o = run(
        &fan(&branches, "all_success", json!({"maxConcurrency": 2})),
        &mocks_for(&branches, 30),
        json!([]),
        vec![],
    );
    assert_eq!(o.end, RunEnd::Completed);
    let (mut in_flight, mut peak) = (0i32, 0i32);
    for e in &o.events {
        match e.event_type {
            EventType::NodeStarted => in_flight += 1,
            EventType::NodeCompleted | EventType::NodeFailed => in_flight -= 1,
            _ => {}
        }
        peak = peak.max(in_flight);
    }
    assert_eq!(peak, 2);
}

#[test]
fn a_failed_branch_fails_only_its_dependents() {
    // b is refused; c and d go on. join (all_success) is skipped; after_c depends on c only.
    let mut wf = fan(&["b", "c", "d"], "all_success", json!({}));
    wf["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "after_c", "typeId": "core.flow.noop"}));
    wf["edges"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "c-after", "sourceNodeId": "c", "targetNodeId": "after_c"}));
    let mut mocks = mocks_for(&["c", "d"], 50);
    mocks["b"] = json!({"responses": [{"stopReason": "refusal", "refusalText": "no"}]});
    let o = run(&wf, &mocks, json!([]), vec![]);
    let RunEnd::Failed(e) = &o.end else {
        panic!("{:?}", o.end)
    };
    assert_eq!(e.code, "envelope_refusal");
    assert_gapless(&o.events);
    for n in ["c", "d", "after_c"] {
        assert_eq!(of(&o.events, EventType::NodeCompleted, n).len(), 1, "{n}");
    }
    assert!(of(&o.events, EventType::NodeStarted, "join").is_empty());
    let skipped = o
        .events
        .iter()
        .find(|e| e.event_id == openwop_protocol::events::event_id_for("run-1", "join/skipped"));
    assert!(skipped.is_some(), "join is recorded as skipped");
    // The failure is handled when the fan-in takes it (all_complete): the run completes.
    let mut handled = fan(&["b", "c", "d"], "all_complete", json!({}));
    handled["id"] = json!("fan2");
    let o = run(&handled, &mocks, json!([]), vec![]);
    assert_eq!(o.end, RunEnd::Completed);
}

#[test]
fn configurable_run_timeout_ms_is_a_deadline_too() {
    // No workflow timeout: the run's own runTimeoutMs (RFC 0058) stops it.
    let branches = ["b"];
    let started = Instant::now();
    let o = run_configured(
        &fan(&branches, "all_success", json!({})),
        &mocks_for(&branches, 60_000),
        json!([]),
        vec![],
        json!({"runTimeoutMs": 200}),
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    let RunEnd::Failed(e) = &o.end else {
        panic!("{:?}", o.end)
    };
    assert_eq!(e.code, "run_timeout");
    let breach = o
        .events
        .iter()
        .find(|e| e.event_type.as_str() == "cap.breached")
        .expect("cap.breached");
    assert_eq!(breach.payload["kind"], "run-duration");
    assert_eq!(breach.payload["limit"], 200);
}

#[test]
fn the_run_timeout_stops_every_in_flight_branch_and_records_it() {
    let branches = ["b", "c", "d"];
    let started = Instant::now();
    let o = run(
        &fan(&branches, "all_success", json!({"timeout": 200})),
        &mocks_for(&branches, 60_000),
        json!([]),
        vec![],
    );
    // The provider calls were cancelled, not waited for.
    assert!(started.elapsed() < Duration::from_secs(30));
    let RunEnd::Failed(e) = &o.end else {
        panic!("{:?}", o.end)
    };
    assert_eq!(e.code, "run_timeout");
    assert_gapless(&o.events);
    for b in branches {
        let failed = of(&o.events, EventType::NodeFailed, b);
        assert_eq!(failed.len(), 1, "{b}");
        assert_eq!(o.events[failed[0]].payload["error"]["code"], "run_timeout");
    }
    let types: Vec<&str> = o
        .events
        .iter()
        .rev()
        .take(2)
        .map(|e| e.event_type.as_str())
        .collect();
    assert_eq!(types, ["run.failed", "cap.breached"]);
    assert!(of(&o.events, EventType::NodeStarted, "join").is_empty());
}

#[test]
fn several_interrupts_wait_together_and_are_answered_one_by_one() {
    // q1 and q2 both ask; `free` runs to completion meanwhile; join needs all three.
    let wf = fan(&["q1", "q2", "free"], "all_success", json!({}));
    let turns = |q: &str| json!({"turns": [{"responses": [ask(q)]}, {"responses": [note(q, 0)]}]});
    let mocks =
        json!({"q1": turns("q1"), "q2": turns("q2"), "free": {"responses": [note("free", 100)]}});
    let first = run(&wf, &mocks, json!([]), vec![]);
    let RunEnd::Suspended(pending) = &first.end else {
        panic!("{:?}", first.end)
    };
    let nodes: Vec<&str> = pending.iter().map(|s| s.node_id.as_str()).collect();
    assert_eq!(nodes, ["q1", "q2"]);
    assert!(
        pending
            .iter()
            .all(|s| s.kind == InterruptKind::Clarification)
    );
    // The independent branch finished although both others wait.
    assert_eq!(of(&first.events, EventType::NodeCompleted, "free").len(), 1);
    assert_gapless(&first.events);

    // Answer q2 only: q2 finishes, q1 still waits, nothing finished is called again.
    let answer = |s: &Suspension| json!({"interruptId": s.interrupt_id, "value": {"q": s.node_id}});
    let second = run(
        &wf,
        &mocks,
        json!([answer(&pending[1])]),
        first.events.clone(),
    );
    let RunEnd::Suspended(still) = &second.end else {
        panic!("{:?}", second.end)
    };
    assert_eq!(still.len(), 1);
    assert_eq!(still[0].node_id, "q1");
    assert_eq!(
        second.calls,
        ["q2#1"],
        "only q2's next turn calls the provider"
    );
    assert_eq!(of(&second.events, EventType::NodeCompleted, "q2").len(), 1);
    assert_gapless(&second.events);

    // Answer q1 too: the fan-in runs and the run completes, nothing recorded twice.
    let third = run(
        &wf,
        &mocks,
        json!([answer(&pending[1]), answer(&pending[0])]),
        second.events.clone(),
    );
    assert_eq!(third.end, RunEnd::Completed);
    assert_eq!(third.calls, ["q1#1"]);
    assert_gapless(&third.events);
    assert_eq!(of(&third.events, EventType::NodeCompleted, "join").len(), 1);
    assert!(
        third
            .events
            .iter()
            .all(|e| e.event_type != EventType::ReplayDiverged)
    );
}

/// An official fixture (`charts/openwop/fixtures/`) as its workflow definition.
fn fixture(id: &str) -> Value {
    let text = match id {
        "approval" => include_str!("../../../charts/openwop/fixtures/conformance-approval.json"),
        "clarification" => {
            include_str!("../../../charts/openwop/fixtures/conformance-clarification.json")
        }
        "failure" => include_str!("../../../charts/openwop/fixtures/conformance-failure.json"),
        "noop" => include_str!("../../../charts/openwop/fixtures/conformance-noop.json"),
        "multi-node" => {
            include_str!("../../../charts/openwop/fixtures/conformance-multi-node.json")
        }
        other => panic!("no fixture {other}"),
    };
    serde_json::from_str(text).unwrap()
}

fn types_of(events: &[RunEventDoc]) -> Vec<&'static str> {
    events.iter().map(|e| e.event_type.as_str()).collect()
}

/// `(event id, type)` of each event: what a replay must reproduce exactly.
fn ids(events: &[RunEventDoc]) -> Vec<(String, EventType)> {
    events
        .iter()
        .map(|e| (e.event_id.clone(), e.event_type))
        .collect()
}

/// The answered run, and the same run's worker killed after each event of that log in turn:
/// a new worker replaying the prefix ends with the same log and the same end.
fn replays_from_every_kill_point(wf: &Value, answers: Value) -> Outcome {
    let full = run(wf, &json!({}), answers.clone(), vec![]);
    assert_gapless(&full.events);
    for k in 0..full.events.len() {
        let again = run(wf, &json!({}), answers.clone(), full.events[..k].to_vec());
        assert_eq!(
            ids(&again.events),
            ids(&full.events),
            "killed after {k} events"
        );
        assert_eq!(again.end, full.end, "killed after {k} events");
    }
    full
}

#[test]
fn the_approval_fixture_waits_then_accept_completes_with_who_decided() {
    let wf = fixture("approval");
    // `settings.timeout: 0` is no deadline: the gate waits instead of timing out.
    let first = run(&wf, &json!({}), json!([]), vec![]);
    let RunEnd::Suspended(pending) = &first.end else {
        panic!("{:?}", first.end)
    };
    assert_eq!(
        (pending[0].node_id.as_str(), pending[0].kind),
        ("gate", InterruptKind::Approval)
    );
    assert_eq!(
        types_of(&first.events),
        [
            "run.started",
            "node.started",
            "node.suspended",
            "interrupt.requested",
            "approval.requested"
        ]
    );
    // Zero-based (REP `nodeStarted.attempt`): the first attempt is 0.
    assert_eq!(first.events[1].payload["attempt"], 0);
    let requested = &first.events[4].payload;
    assert_eq!(requested["actions"], json!(["accept", "reject"]));
    assert_eq!(requested["title"], "Conformance approval");
    let interrupt_id = pending[0].interrupt_id.clone();
    let answer = json!([{"interruptId": interrupt_id, "action": "accept", "nodeId": "gate",
                         "answeredBy": "alice", "answeredAt": "2026-05-18T10:01:00Z"}]);
    let second = run(&wf, &json!({}), answer.clone(), first.events.clone());
    assert_eq!(second.end, RunEnd::Completed);
    assert_gapless(&second.events);
    assert_eq!(
        types_of(&second.events[first.events.len()..]),
        [
            "run.resumed",
            "approval.received",
            "interrupt.resolved",
            "node.resumed",
            "node.completed",
            "run.completed"
        ]
    );
    let received = &second.events[first.events.len() + 1].payload;
    assert_eq!(
        received,
        &json!({"nodeId": "gate", "action": "accept", "interruptId": interrupt_id,
                "decidedBy": "alice", "decidedAt": "2026-05-18T10:01:00Z"})
    );
    let done = of(&second.events, EventType::NodeCompleted, "gate")[0];
    assert_eq!(
        second.events[done].payload["outputs"],
        json!({"action": "accept", "decidedBy": "alice", "decidedAt": "2026-05-18T10:01:00Z"})
    );
    // Every event validates against its payload schema.
    for e in &second.events {
        if let Some(Err(issues)) =
            openwop_protocol::schema::validate_event_payload(e.event_type.as_str(), &e.payload)
        {
            panic!("{}: {issues:?}", e.event_type);
        }
    }
    // A worker killed after any event of that log replays to the same log.
    let full = replays_from_every_kill_point(&wf, answer);
    assert_eq!(ids(&full.events), ids(&second.events));
}

#[test]
fn a_rejected_approval_fails_the_gate_and_the_run() {
    let wf = fixture("approval");
    let first = run(&wf, &json!({}), json!([]), vec![]);
    let RunEnd::Suspended(pending) = &first.end else {
        panic!("{:?}", first.end)
    };
    // Written with `kubectl patch` (no principal): recorded as unattributed.
    let answer = json!([{"interruptId": pending[0].interrupt_id, "approved": false}]);
    let o = replays_from_every_kill_point(&wf, answer);
    let RunEnd::Failed(e) = &o.end else {
        panic!("{:?}", o.end)
    };
    assert_eq!(e.code, "approval_rejected");
    let received = o
        .events
        .iter()
        .find(|e| e.event_type == EventType::ApprovalReceived)
        .unwrap();
    assert_eq!(received.payload["action"], "reject");
    assert_eq!(
        received.payload["decidedBy"],
        openwop_protocol::run::snapshot::UNATTRIBUTED
    );
    assert_eq!(
        types_of(&o.events[o.events.len() - 2..]),
        ["node.failed", "run.failed"]
    );
}

#[test]
fn an_answer_that_cannot_decide_keeps_the_gate_waiting() {
    let wf = fixture("approval");
    let first = run(&wf, &json!({}), json!([]), vec![]);
    let RunEnd::Suspended(pending) = &first.end else {
        panic!("{:?}", first.end)
    };
    let id = pending[0].interrupt_id.clone();
    let o = run(
        &wf,
        &json!({}),
        json!([{"interruptId": id, "action": "accept", "contentTrust": "untrusted"}]),
        first.events.clone(),
    );
    assert!(matches!(o.end, RunEnd::Suspended(_)), "{:?}", o.end);
    let last = o.events.last().unwrap();
    assert_eq!(last.event_type, EventType::LogAppended);
    assert!(
        last.payload["message"]
            .as_str()
            .unwrap()
            .contains("untrusted_content_blocks_approval"),
        "{}",
        last.payload
    );
}

#[test]
fn the_clarification_fixture_completes_with_the_answers() {
    let wf = fixture("clarification");
    let first = run(&wf, &json!({}), json!([]), vec![]);
    let RunEnd::Suspended(pending) = &first.end else {
        panic!("{:?}", first.end)
    };
    assert_eq!(pending[0].kind, InterruptKind::Clarification);
    let asked = of(&first.events, EventType::ClarificationRequested, "ask")[0];
    assert_eq!(
        first.events[asked].payload["questions"],
        json!([{"id": "q1", "question": "What is your favorite color?"}])
    );
    let answer = json!([{"interruptId": pending[0].interrupt_id, "value": {"q1": "blue"},
                         "answeredBy": "bob"}]);
    let o = replays_from_every_kill_point(&wf, answer);
    assert_eq!(o.end, RunEnd::Completed);
    let resolved = of(&o.events, EventType::ClarificationResolved, "ask")[0];
    assert_eq!(o.events[resolved].payload["answeredBy"], "bob");
    assert_eq!(o.events[resolved].payload["answers"], json!({"q1": "blue"}));
    let done = of(&o.events, EventType::NodeCompleted, "ask")[0];
    assert_eq!(
        o.events[done].payload["outputs"],
        json!({"answers": {"q1": "blue"}, "answeredBy": "bob"})
    );
}

#[test]
fn the_failure_fixture_fails_once_with_the_conformance_error() {
    let mut wf = fixture("failure");
    // Never retried, whatever maxRetries says.
    wf["settings"]["maxRetries"] = json!(3);
    let o = run(&wf, &json!({}), json!([]), vec![]);
    let RunEnd::Failed(e) = &o.end else {
        panic!("{:?}", o.end)
    };
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        (
            "conformance_test_failure",
            "Intentional conformance failure"
        )
    );
    assert_eq!(
        types_of(&o.events),
        ["run.started", "node.started", "node.failed", "run.failed"]
    );
    assert_eq!(o.events[2].payload["attempts"], 1);
}

#[test]
fn noop_fixtures_complete_in_order() {
    let o = run(&fixture("noop"), &json!({}), json!([]), vec![]);
    assert_eq!(o.end, RunEnd::Completed);
    assert_eq!(
        types_of(&o.events),
        [
            "run.started",
            "node.started",
            "node.completed",
            "run.completed"
        ]
    );
    assert_eq!(o.events[2].payload["outputs"], json!({}));
    let o = run(&fixture("multi-node"), &json!({}), json!([]), vec![]);
    let completed: Vec<&str> = o
        .events
        .iter()
        .filter(|e| e.event_type == EventType::NodeCompleted)
        .filter_map(|e| e.node_id.as_deref())
        .collect();
    assert_eq!(completed, ["a", "b", "c"]);
}

#[test]
fn a_custom_interrupt_resumes_with_any_object() {
    let wf = json!({"id": "w", "nodes": [{"id": "pay", "typeId": "core.interrupt",
        "config": {"kind": "custom", "data": {"customKind": "payment"}}}]});
    let first = run(&wf, &json!({}), json!([]), vec![]);
    let RunEnd::Suspended(pending) = &first.end else {
        panic!("{:?}", first.end)
    };
    assert_eq!(pending[0].kind, InterruptKind::Custom);
    let o = run(
        &wf,
        &json!({}),
        json!([{"interruptId": pending[0].interrupt_id, "value": {"paid": true}, "answeredBy": "svc"}]),
        first.events.clone(),
    );
    assert_eq!(o.end, RunEnd::Completed);
    let done = of(&o.events, EventType::NodeCompleted, "pay")[0];
    assert_eq!(
        o.events[done].payload["outputs"],
        json!({"resumeValue": {"paid": true}, "answeredBy": "svc"})
    );
}
