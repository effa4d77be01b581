//! `core.interrupt` kind `external-event` on an in-memory log: the wait records its
//! correlation, an event that does not carry it keeps the run waiting, a matching one
//! completes the node with the event — and a worker killed after any event replays to the
//! same log.

use openwop_protocol::events::RunEventDoc;
use openwop_protocol::run::projection::Projection;
use openwop_protocol::run::snapshot::RunSnapshot;
use openwop_protocol::run::status::RunPhase;
use serde_json::{Value, json};

use super::*;

/// The shape of the chart's `conformance-interrupt-external-event` fixture.
fn event_flow() -> Value {
    json!({"id": "e", "nodes": [
        {"id": "wait-for-external", "typeId": "core.interrupt",
         "config": {"kind": "external-event", "data": {"eventType": "order.updated",
                    "correlation": {"orderId": "fixture-order-1", "status": "completed"}}}},
        {"id": "after", "typeId": "core.flow.noop"}],
        "edges": [{"id": "e1", "sourceNodeId": "wait-for-external", "targetNodeId": "after"}]})
}

fn run(answers: Value, existing: Vec<RunEventDoc>) -> (RunEnd, Vec<RunEventDoc>) {
    let snap: RunSnapshot = serde_json::from_value(json!({
        "run": {"namespace": "ns", "name": "r", "runId": "run-1"},
        "workflow": event_flow(), "answers": answers}))
    .unwrap();
    let out = super::tests::execute(&snap, existing);
    (out.end, out.events)
}

fn types(events: &[RunEventDoc]) -> Vec<&str> {
    events.iter().map(|e| e.event_type.as_str()).collect()
}

fn ids(events: &[RunEventDoc]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| (e.event_type.as_str().to_owned(), e.event_id.clone()))
        .collect()
}

#[test]
fn an_external_event_waits_external_and_completes_with_a_matching_event() {
    let (end, first) = run(json!([]), vec![]);
    let RunEnd::Suspended(pending) = &end else {
        panic!("{end:?}")
    };
    assert_eq!(pending[0].kind, InterruptKind::ExternalEvent);
    assert_eq!(
        types(&first),
        [
            "run.started",
            "node.started",
            "node.suspended",
            "interrupt.requested"
        ]
    );
    assert_eq!(first[2].payload["kind"], "external-event");
    assert_eq!(
        first[3].payload["data"]["correlation"],
        json!({"orderId": "fixture-order-1", "status": "completed"})
    );
    let mut p = Projection::of_docs(&first);
    p.suspend();
    assert_eq!(p.phase, Some(RunPhase::WaitingExternal));
    let id = pending[0].interrupt_id.clone();

    // An event that does not carry the correlation (written to spec.answers by hand; the
    // REST surfaces refuse it with 422): the node keeps waiting and says why.
    let wrong = json!([{"interruptId": id, "value": {"orderId": "different-order", "status": "completed"}}]);
    let (end, refused) = run(wrong, first.clone());
    assert!(matches!(end, RunEnd::Suspended(_)), "{end:?}");
    let last = refused.last().unwrap();
    assert_eq!(last.event_type, EventType::LogAppended);
    assert!(
        last.payload["message"]
            .as_str()
            .unwrap()
            .contains("correlation_mismatch"),
        "{}",
        last.payload
    );
    assert!(
        !types(&refused).contains(&"interrupt.resolved"),
        "{:?}",
        types(&refused)
    );

    // The matching event, as INT's {eventPayload} (extra members allowed).
    let event =
        json!({"orderId": "fixture-order-1", "status": "completed", "externalReference": "r-1"});
    let answers = json!([{"interruptId": id, "value": {"eventPayload": event},
                          "answeredBy": "callback-token"}]);
    let (end, done) = run(answers.clone(), first.clone());
    assert_eq!(end, RunEnd::Completed);
    let completed = done
        .iter()
        .find(|e| {
            e.event_type == EventType::NodeCompleted
                && e.node_id.as_deref() == Some("wait-for-external")
        })
        .unwrap();
    assert_eq!(
        completed.payload["outputs"],
        json!({"eventPayload": event, "eventType": "order.updated", "answeredBy": "callback-token"})
    );
    let resolved = done
        .iter()
        .find(|e| e.event_type == EventType::InterruptResolved)
        .unwrap();
    assert_eq!(resolved.payload["kind"], "external-event");
    assert_eq!(resolved.payload["resolvedBy"], "callback-token");

    // Killed after any event of the whole run, before or after the answer arrived: a new
    // worker ends with the same log.
    for k in 0..done.len() {
        let (_, replayed) = run(answers.clone(), done[..k].to_vec());
        assert_eq!(ids(&replayed), ids(&done), "killed after {k} events");
        let (_, waited) = run(json!([]), done[..k.min(first.len())].to_vec());
        let (_, resumed) = run(answers.clone(), waited);
        assert_eq!(
            ids(&resumed),
            ids(&done),
            "killed after {k} events, answered later"
        );
    }
}
