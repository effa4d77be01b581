use super::*;
use openwop_crds::RunPhase;
use serde_json::json;

fn ev(seq: u64, ty: &str, payload: Value) -> Value {
    json!({"eventId": format!("e{seq}"), "runId": "r", "type": ty, "sequence": seq,
           "timestamp": "2026-01-01T00:00:00Z", "payload": payload})
}

#[test]
fn subjects_name_namespace_and_run_id() {
    let (s, v) = decode_message(
        "openwop.events.team-a.uid-1",
        br#"{"type":"run.started","sequence":0,"runId":"uid-1"}"#,
    )
    .unwrap();
    assert_eq!(
        (s.namespace.as_str(), s.run_id.as_str()),
        ("team-a", "uid-1")
    );
    assert_eq!(v["type"], "run.started");
    for bad in [
        "openwop.reasoning.a.b",
        "openwop.events.a",
        "openwop.events..b",
        "openwop.events.a.my.run",
    ] {
        let e = decode_message(bad, b"{}").unwrap_err();
        assert!(matches!(e, EventError::Subject(_)), "{bad}: {e}");
    }
}

#[test]
fn malformed_payloads_are_refused_with_the_reason() {
    let s = "openwop.events.a.b";
    let d = |p: &[u8]| decode_message(s, p).map(|x| x.1);
    let e = d(b"not json").unwrap_err().to_string();
    assert!(e.contains("not JSON"), "{e}");
    let e = d(br#"{"type":"run.started","runId":"b"}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("/sequence"), "{e}");
    let e = d(br#"{"type":"run.started","sequence":0}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("/runId"), "{e}");
    let e = d(br#"[1]"#).unwrap_err().to_string();
    assert!(e.contains("not a JSON object"), "{e}");
    let big = vec![b' '; MAX_EVENT_BYTES + 1];
    assert!(d(&big).unwrap_err().to_string().contains("limit"));
    assert!(d(br#"{"type":"run.started","sequence":0,"runId":"b"}"#).is_ok());
}

#[test]
fn an_event_speaking_for_another_run_is_refused() {
    let e = decode_message(
        "openwop.events.a.uid-1",
        br#"{"type":"run.completed","sequence":9,"runId":"uid-2"}"#,
    )
    .unwrap_err();
    assert!(matches!(e, EventError::ForeignRunId { .. }));
    assert_eq!(
        e.to_string(),
        "event on openwop.events.a.uid-1 carries runId \"uid-2\", not its subject's uid-1; refused"
    );
    // Quoted untrusted text is bounded.
    let long = format!(
        r#"{{"type":"x","sequence":0,"runId":"{}"}}"#,
        "z".repeat(10_000)
    );
    let e = decode_message("openwop.events.a.u", long.as_bytes()).unwrap_err();
    assert!(e.to_string().len() < 400, "{}", e.to_string().len());
}

fn named(name: &str, uid: &str) -> Run {
    let mut r: Run = serde_json::from_value(json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {"workflowRef": {"name": "w"}}}))
    .unwrap();
    r.metadata.namespace = Some("ns".into());
    r
}

#[test]
fn events_are_routed_by_uid_never_by_name() {
    // r1 was deleted and re-created: only the new uid exists.
    let runs = [named("r1", "uid-new"), named("r2", "uid-2")];
    assert_eq!(
        route(&runs, "ns", "uid-new").unwrap().uid().as_deref(),
        Some("uid-new")
    );
    assert!(
        route(&runs, "ns", "uid-old").is_none(),
        "the old run's events never touch the new Run of the same name"
    );
    assert!(
        route(&runs, "other", "uid-2").is_none(),
        "namespace must match"
    );
    assert!(route(&runs, "ns", "r1").is_none(), "a name is not a runId");
}

#[test]
fn fold_resumes_from_last_sequence_and_never_goes_back() {
    let st = RunStatus {
        phase: Some(RunPhase::Running),
        events: Some(2),
        last_sequence: Some(1),
        attempts: Some(1),
        ..Default::default()
    };
    assert_eq!(
        fold(
            &st,
            &[
                ev(0, "run.started", json!({})),
                ev(1, "node.started", json!({"nodeId": "a"}))
            ]
        ),
        None,
        "replays change nothing"
    );
    let next = fold(
        &st,
        &[
            ev(1, "node.started", json!({"nodeId": "a"})),
            ev(
                2,
                "clarification.requested",
                json!({"nodeId": "a", "interruptId": "i1",
                "questions": [{"id": "q1", "question": "Which colour?"}]}),
            ),
            ev(
                3,
                "node.suspended",
                json!({"nodeId": "a", "interruptId": "i1", "kind": "clarification"}),
            ),
        ],
    )
    .unwrap();
    assert_eq!(next.phase, Some(RunPhase::WaitingInput));
    assert_eq!((next.events, next.last_sequence), (Some(4), Some(3)));
    assert_eq!(
        next.attempts,
        Some(1),
        "fields outside the projection are kept"
    );
    let pi = next.pending_interrupts[0].clone();
    assert_eq!(
        (pi.interrupt_id.as_str(), pi.questions[0].id.as_str()),
        ("i1", "q1")
    );
}

#[test]
fn terminal_phase_set_by_the_operator_is_not_revived() {
    let st = RunStatus {
        phase: Some(RunPhase::Cancelled),
        last_sequence: Some(0),
        events: Some(1),
        ..Default::default()
    };
    let next = fold(&st, &[ev(1, "node.started", json!({"nodeId": "b"}))]).unwrap();
    assert_eq!(next.phase, Some(RunPhase::Cancelled));
    assert_eq!(next.last_sequence, Some(1));
}

#[test]
fn cancelling_holds_until_the_stream_records_run_cancelled() {
    let st = RunStatus {
        phase: Some(RunPhase::Cancelling),
        last_sequence: Some(0),
        events: Some(1),
        ..Default::default()
    };
    let late = fold(&st, &[ev(1, "node.started", json!({"nodeId": "b"}))]).unwrap();
    assert_eq!(late.phase, Some(RunPhase::Cancelling));
    let done = fold(
        &late,
        &[ev(
            2,
            "run.cancelled",
            json!({"reason": "cancelled by spec.cancel", "cancelledBy": "operator"}),
        )],
    )
    .unwrap();
    assert_eq!(done.phase, Some(RunPhase::Cancelled));
}

#[test]
fn filter_follows_the_watched_namespace() {
    let mut cfg = OperatorConfig::default();
    assert_eq!(filter_subject(&cfg), "openwop.events.>");
    cfg.watch_namespace = "team-a".into();
    assert_eq!(filter_subject(&cfg), "openwop.events.team-a.>");
}

#[test]
fn instance_selector_and_ownership() {
    let mut cfg = OperatorConfig::default();
    let labelled: BTreeMap<String, String> =
        [("openwop.dev/instance".to_string(), "blue".to_string())].into();
    assert_eq!(cfg.instance_selector(), "!openwop.dev/instance");
    assert!(cfg.handles(&BTreeMap::new()));
    assert!(!cfg.handles(&labelled));
    cfg.instance_id = "blue".into();
    assert_eq!(cfg.instance_selector(), "openwop.dev/instance=blue");
    assert!(cfg.handles(&labelled));
    assert!(!cfg.handles(&BTreeMap::new()));
    assert!(cfg.validate().is_ok());
    cfg.instance_id = "-bad".into();
    assert!(cfg.validate().is_err());
}

#[test]
fn the_terminal_event_ends_the_run_once_and_an_operator_ending_is_kept() {
    let now: Timestamp = "2026-01-01T00:00:09Z".parse().unwrap();
    let running = RunStatus {
        phase: Some(RunPhase::Running),
        last_sequence: Some(0),
        events: Some(1),
        ..Default::default()
    };
    // Not the log's end: nothing recorded.
    let events = [ev(1, "node.started", json!({"nodeId": "a"}))];
    let mut st = fold(&running, &events).unwrap();
    assert_eq!(settle(&mut st, &events, Some(2), now), None);
    assert_eq!((st.terminal_event, st.completion_time), (None, None));

    // The worker's run.failed: the ending recorded as a reconcile records it.
    let events = [ev(
        1,
        "run.failed",
        json!({"error": {"code": "boom", "message": "it broke"}}),
    )];
    let mut st = fold(&running, &events).unwrap();
    let note = settle(&mut st, &events, Some(2), now).expect("the ending's Event");
    assert_eq!(st.phase, Some(RunPhase::Failed));
    assert_eq!(st.terminal_event.as_deref(), Some("e1"));
    assert_eq!(st.completion_time.as_ref().map(|t| t.0), Some(now));
    let c = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Succeeded")
        .unwrap();
    assert_eq!(
        (c.status.as_str(), c.observed_generation),
        ("False", Some(2))
    );
    assert_eq!(note.reason.as_str(), c.reason);
    assert_eq!(note.type_, kube::runtime::events::EventType::Warning);
    // Folded again (a redelivery after a lost write): the same ending, not a second one.
    let mut again = st.clone();
    assert_eq!(settle(&mut again, &events, Some(2), now), None);
    assert_eq!(again, st);

    // A run the operator ended (a timeout) whose worker's run.cancelled arrives late: the
    // log's ending is recorded, the operator's ending (time, reason) is kept, no Event.
    let ended_at: Timestamp = "2026-01-01T00:00:03Z".parse().unwrap();
    let timed_out = RunStatus {
        phase: Some(RunPhase::Failed),
        completion_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            ended_at,
        )),
        ..running.clone()
    };
    let events = [ev(1, "run.cancelled", json!({"reason": "stopped"}))];
    let mut st = fold(&timed_out, &events).unwrap();
    assert_eq!(settle(&mut st, &events, Some(2), now), None);
    assert_eq!(st.phase, Some(RunPhase::Failed));
    assert_eq!(st.terminal_event.as_deref(), Some("e1"));
    assert_eq!(st.completion_time.map(|t| t.0), Some(ended_at));
}
