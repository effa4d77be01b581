//! Approval gates that need more than one person or end on a timer, on an in-memory log:
//! quorum votes (`run::quorum`) and `timeoutMs` (the delay's durable timer), each replayed from
//! every prefix of its log (a worker killed after any event) to the same event ids.

use openwop_protocol::events::RunEventDoc;
use openwop_protocol::run::projection::Projection;
use openwop_protocol::run::snapshot::RunSnapshot;
use openwop_protocol::run::status::RunPhase;
use serde_json::{Value, json};

use super::*;

fn gate_flow(config: Value) -> Value {
    json!({"id": "g", "nodes": [{"id": "gate", "typeId": "core.approvalGate", "config": config}],
           "edges": [], "settings": {"timeout": 0}})
}

fn quorum_flow() -> Value {
    gate_flow(json!({"title": "q", "actions": ["accept", "reject"],
                     "requiredApprovals": 3, "rejectionPolicy": "majority"}))
}

fn run(workflow: &Value, answers: Value, existing: Vec<RunEventDoc>) -> (RunEnd, Vec<RunEventDoc>) {
    let snap: RunSnapshot = serde_json::from_value(json!({
        "run": {"namespace": "ns", "name": "r", "runId": "run-1"},
        "workflow": workflow, "answers": answers,
        "host": {"durableWaitThresholdMs": 30000}}))
    .unwrap();
    let out = super::tests::execute(&snap, existing);
    (out.end, out.events)
}

fn types(events: &[RunEventDoc]) -> Vec<&'static str> {
    events.iter().map(|e| e.event_type.as_str()).collect()
}

fn ids(events: &[RunEventDoc]) -> Vec<String> {
    events.iter().map(|e| e.event_id.clone()).collect()
}

fn votes(interrupt_id: &str, votes: &[(&str, &str)]) -> Value {
    votes
        .iter()
        .enumerate()
        .map(|(i, (voter, action))| {
            json!({"interruptId": interrupt_id, "nodeId": "gate", "action": action,
                   "value": {"voter": voter}, "answeredBy": "system:serviceaccount:suite:suite",
                   "answeredAt": format!("2026-05-18T10:0{i}:00Z")})
        })
        .collect()
}

/// The run suspended at the gate, and its interrupt id.
fn suspended(workflow: &Value) -> (Vec<RunEventDoc>, String) {
    let (end, events) = run(workflow, json!([]), vec![]);
    let RunEnd::Suspended(p) = end else {
        panic!("{end:?}")
    };
    (events, p[0].interrupt_id.clone())
}

/// Replays from every kill point of the full log from `from` on give the same log and end.
fn replays_exactly(
    workflow: &Value,
    answers: &Value,
    full: &[RunEventDoc],
    end: &RunEnd,
    from: usize,
) {
    for k in from..full.len() {
        let (again_end, again) = run(workflow, answers.clone(), full[..k].to_vec());
        assert_eq!(ids(&again), ids(full), "killed after {k} events");
        assert_eq!(&again_end, end, "killed after {k} events");
    }
}

#[test]
fn a_quorum_gate_waits_for_three_accepts_then_records_each_vote_once() {
    let wf = quorum_flow();
    let (first, id) = suspended(&wf);
    let requested = first
        .iter()
        .find(|e| e.event_type == EventType::ApprovalRequested)
        .unwrap();
    assert_eq!(requested.payload["requiredApprovals"], 3);
    let p = Projection::of_docs(&first);
    assert_eq!(p.pending_interrupts[0].required_approvals, Some(3));
    // Two votes (whatever a worker started anyway sees): still waiting, nothing recorded.
    let two = votes(&id, &[("a1", "accept"), ("a2", "accept")]);
    let (end, events) = run(&wf, two, first.clone());
    assert!(matches!(end, RunEnd::Suspended(_)), "{end:?}");
    assert_eq!(ids(&events), ids(&first));
    // a1 votes again (replaces its vote), then a3: the quorum is met.
    let answers = votes(
        &id,
        &[
            ("a1", "accept"),
            ("a2", "accept"),
            ("a1", "accept"),
            ("a3", "accept"),
        ],
    );
    let (end, events) = run(&wf, answers.clone(), first.clone());
    assert_eq!(end, RunEnd::Completed);
    assert_eq!(
        types(&events[first.len()..]),
        [
            "run.resumed",
            "approval.received",
            "approval.received",
            "approval.received",
            "interrupt.resolved",
            "node.resumed",
            "node.completed",
            "run.completed"
        ]
    );
    let voters: Vec<&Value> = events
        .iter()
        .filter(|e| e.event_type == EventType::ApprovalReceived)
        .map(|e| &e.payload["voter"])
        .collect();
    assert_eq!(voters, [&json!("a2"), &json!("a1"), &json!("a3")]);
    assert_eq!(
        events
            .iter()
            .filter(|e| e.event_type == EventType::InterruptResolved)
            .count(),
        1
    );
    for e in &events {
        if let Some(Err(issues)) =
            openwop_protocol::schema::validate_event_payload(e.event_type.as_str(), &e.payload)
        {
            panic!("{}: {issues:?}", e.event_type);
        }
    }
    replays_exactly(&wf, &answers, &events, &end, 0);
}

#[test]
fn a_majority_of_rejects_fails_the_quorum_gate() {
    let wf = quorum_flow();
    let (first, id) = suspended(&wf);
    let answers = votes(&id, &[("r1", "reject"), ("a1", "accept"), ("r2", "reject")]);
    let (end, events) = run(&wf, answers.clone(), first);
    let RunEnd::Failed(e) = &end else {
        panic!("{end:?}")
    };
    assert_eq!(e.code, "approval_rejected");
    replays_exactly(&wf, &answers, &events, &end, 0);
}

fn timeout_flow(ms: u64) -> Value {
    gate_flow(
        json!({"title": "t", "actions": ["accept", "reject"], "timeoutMs": ms, "onTimeout": "approve"}),
    )
}

#[test]
fn a_gate_timeout_arms_the_timer_exits_and_later_times_out_rejected() {
    let wf = timeout_flow(1500);
    let (first, id) = suspended(&wf);
    // The wait holds no pod: the worker exits at once, waiting-approval, the timer armed at
    // requestedAt + timeoutMs.
    let p = Projection::of_docs(&first);
    assert_eq!(p.phase, Some(RunPhase::WaitingApproval));
    let requested = first
        .iter()
        .find(|e| e.event_type == EventType::InterruptRequested)
        .unwrap();
    assert_eq!(requested.payload["timeoutMs"], 1500);
    let at = requested.payload["requestedAt"].as_str().unwrap();
    let due = openwop_protocol::run::waits::parse_time(p.wake_at().unwrap()).unwrap();
    let asked = openwop_protocol::run::waits::parse_time(at).unwrap();
    // wakeAt is kept to the millisecond (requestedAt may carry more digits).
    assert!(
        (1499..=1500).contains(&(due - asked).whole_milliseconds()),
        "{at} → {:?}",
        p.wake_at()
    );
    // The operator wakes the run at wakeAt: the worker records the timeout.
    let rest = openwop_protocol::run::waits::remaining_ms(due, time::OffsetDateTime::now_utc());
    std::thread::sleep(Duration::from_millis(rest));
    let (end, events) = run(&wf, json!([]), first.clone());
    let RunEnd::Failed(e) = &end else {
        panic!("{end:?}")
    };
    assert_eq!(
        (e.code.as_str(), &e.details.as_ref().unwrap()["reason"]),
        ("approval_rejected", &json!("timeout"))
    );
    let received = events
        .iter()
        .find(|e| e.event_type == EventType::ApprovalReceived)
        .unwrap();
    assert_eq!(
        (
            &received.payload["action"],
            &received.payload["decision"],
            &received.payload["reason"]
        ),
        (&json!("timeout"), &json!("rejected"), &json!("timeout"))
    );
    let resolved = events
        .iter()
        .find(|e| e.event_type == EventType::InterruptResolved)
        .unwrap();
    assert_eq!(
        (&resolved.payload["outcome"], &resolved.payload["reason"]),
        (&json!("rejected"), &json!("timeout"))
    );
    // A worker killed after any event of the timed-out worker replays to the same log (one
    // killed before the timer was recorded waits afresh: that is a new wait), and a late
    // answer (given after the wake time) does not change the outcome.
    let late = json!([{"interruptId": id, "nodeId": "gate", "action": "accept",
                       "answeredBy": "alice", "answeredAt": "2999-01-01T00:00:00Z"}]);
    replays_exactly(&wf, &late, &events, &end, first.len());
}

#[test]
fn an_answer_before_the_timeout_wins() {
    let wf = timeout_flow(600_000);
    let (first, id) = suspended(&wf);
    let answers = json!([{"interruptId": id, "nodeId": "gate", "action": "accept",
                          "answeredBy": "alice", "answeredAt": time::OffsetDateTime::now_utc()
                              .format(&time::format_description::well_known::Rfc3339).unwrap()}]);
    let (end, events) = run(&wf, answers.clone(), first);
    assert_eq!(end, RunEnd::Completed);
    assert!(
        events
            .iter()
            .any(|e| e.event_type == EventType::ApprovalReceived && e.payload["action"] == "accept")
    );
    // Never a second timer.
    assert_eq!(
        events
            .iter()
            .filter(|e| openwop_protocol::run::waits::timer_of(&e.payload).is_some())
            .count(),
        1
    );
    replays_exactly(&wf, &answers, &events, &end, 0);
}
