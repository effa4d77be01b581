//! The run contract's interrupt invariant: **no prefix of a node's recorded events shows an
//! interrupt that lacks what its kind needs.** A status may be written after any event, so
//! every prefix of every sequence a worker records is folded (and folded again across a
//! status round trip, as the operator's event consumer resumes from the stored status), and
//! every interrupt the prefix shows as pending — the ones REST, `kubectl openwop resume`, the
//! controller and the web UI answer and decide — must be complete: an approval with its
//! actions, title and quorum, a clarification with its questions, an external event with its
//! correlation, a custom interrupt with its key. A run is shown waiting only on such
//! interrupts, and it does end up waiting once the node's events are all in.
//!
//! Its consequence, proven below for every prefix: a quorum gate is never decided by fewer
//! votes than it requires.

use openwop_protocol::run::gate::{self, Gate};
use openwop_protocol::run::nodes::{
    APPROVAL_GATE_TYPE_ID, CLARIFICATION_GATE_TYPE_ID, INTERRUPT_TYPE_ID,
};
use openwop_protocol::run::projection::Projection;
use openwop_protocol::run::quorum;
use openwop_protocol::run::snapshot::Answer;
use openwop_protocol::run::status::{PendingInterrupt, RunPhase};
use serde_json::{Value, json};

const RUN: &str = "run-1";
const AT: &str = "2026-12-07T10:00:00Z";

/// What a shown interrupt of one node must carry.
type Needs = Box<dyn Fn(&PendingInterrupt) -> Result<(), String>>;

/// One node's recorded events (type, payload) and what its interrupt needs.
struct Case {
    name: &'static str,
    node: &'static str,
    events: Vec<(String, Value)>,
    needs: Needs,
}

fn payload(p: &impl serde::Serialize) -> Value {
    serde_json::to_value(p).unwrap()
}

/// The events a gate records for its wait at `attempt`, in the worker's order
/// (`worker/src/executor/wait.rs`: suspended, requested, then the approval or questions).
fn gate_wait(g: &Gate, node: &str, attempt: u32) -> Vec<(String, Value)> {
    let w = g.wait(node, &gate::interrupt_id(RUN, node, attempt), AT);
    let mut out = vec![
        ("node.suspended".to_owned(), payload(&w.suspended)),
        ("interrupt.requested".to_owned(), payload(&w.requested)),
    ];
    if let Some(a) = &w.approval {
        out.push(("approval.requested".to_owned(), payload(a)));
    }
    if let Some(c) = &w.clarification {
        out.push(("clarification.requested".to_owned(), payload(c)));
    }
    out
}

fn started(node: &str) -> (String, Value) {
    ("node.started".to_owned(), json!({"nodeId": node}))
}

fn check(cond: bool, what: &str) -> Result<(), String> {
    if cond { Ok(()) } else { Err(what.to_owned()) }
}

fn approval_needs(
    actions: &'static [&'static str],
    title: &'static str,
    quorum: Option<(u32, &'static str)>,
) -> Needs {
    Box::new(move |p| {
        check(p.kind == "approval", "kind approval")?;
        check(p.actions == actions, "its actions")?;
        check(p.title.as_deref() == Some(title), "its title")?;
        check(
            p.required_approvals == quorum.map(|q| q.0)
                && p.rejection_policy.as_deref() == quorum.map(|q| q.1),
            "its quorum (requiredApprovals, rejectionPolicy)",
        )
    })
}

fn quorum_gate() -> Gate {
    Gate::of(
        "vote",
        APPROVAL_GATE_TYPE_ID,
        &json!({"title": "Ship it?", "actions": ["accept", "reject", "refine"],
                "requiredApprovals": 3, "rejectionPolicy": "majority"}),
    )
    .unwrap()
}

/// Every kind of wait a worker records, each as a first wait and, for the gates, as a
/// resumed one (resolved, then the node's next attempt waits again).
fn cases() -> Vec<Case> {
    let q = quorum_gate();
    let plain = Gate::of(
        "approve",
        APPROVAL_GATE_TYPE_ID,
        &json!({"title": "Publish?", "actions": ["accept", "reject"]}),
    )
    .unwrap();
    let ask = Gate::of(
        "ask",
        CLARIFICATION_GATE_TYPE_ID,
        &json!({"questions": [{"id": "q1", "question": "Which region?"}, {"id": "q2", "question": "Why?"}]}),
    )
    .unwrap();
    let external = Gate::of(
        "hook",
        INTERRUPT_TYPE_ID,
        &json!({"kind": "external-event", "data": {"eventType": "order.updated", "correlation": {"orderId": "o-1"}}}),
    )
    .unwrap();
    let custom = Gate::of(
        "pay",
        INTERRUPT_TYPE_ID,
        &json!({"kind": "custom", "key": "order-42", "data": {"customKind": "payment"}}),
    )
    .unwrap();
    let interrupt_approval = Gate::of(
        "sign",
        INTERRUPT_TYPE_ID,
        &json!({"kind": "approval", "data": {"title": "Sign off", "actions": ["accept", "reject"]}}),
    )
    .unwrap();

    // A quorum gate resolved (rejected by majority), then waiting again on its next attempt.
    let mut resumed = vec![started("vote")];
    resumed.extend(gate_wait(&q, "vote", 0));
    let votes: Vec<Answer> = ["r1", "r2"]
        .iter()
        .map(|v| {
            serde_json::from_value(json!({"interruptId": gate::interrupt_id(RUN, "vote", 0),
                "action": "reject", "value": {"voter": v}, "answeredBy": v}))
            .unwrap()
        })
        .collect();
    let r = q
        .resolve_votes("vote", &gate::interrupt_id(RUN, "vote", 0), votes.iter())
        .expect("two rejects of three decide by majority");
    resumed.push(("run.resumed".to_owned(), json!({})));
    for v in &r.votes {
        resumed.push(("approval.received".to_owned(), payload(v)));
    }
    let res = r.resolution;
    if let Some(a) = &res.approval {
        resumed.push(("approval.received".to_owned(), payload(a)));
    }
    resumed.push(("interrupt.resolved".to_owned(), payload(&res.resolved)));
    resumed.push(("node.resumed".to_owned(), payload(&res.resumed)));
    resumed.push(("node.failed".to_owned(), json!({"nodeId": "vote"})));
    resumed.push(started("vote"));
    resumed.extend(gate_wait(&q, "vote", 1));

    let with_start = |node: &'static str, g: &Gate| {
        let mut e = vec![started(node)];
        e.extend(gate_wait(g, node, 0));
        e
    };
    vec![
        Case {
            name: "quorum approval gate",
            node: "vote",
            events: with_start("vote", &q),
            needs: approval_needs(
                &["accept", "reject", "refine"],
                "Ship it?",
                Some((3, "majority")),
            ),
        },
        Case {
            name: "quorum approval gate, resumed and waiting again",
            node: "vote",
            events: resumed,
            needs: approval_needs(
                &["accept", "reject", "refine"],
                "Ship it?",
                Some((3, "majority")),
            ),
        },
        Case {
            name: "approval gate",
            node: "approve",
            events: with_start("approve", &plain),
            needs: approval_needs(&["accept", "reject"], "Publish?", None),
        },
        Case {
            name: "core.interrupt approval",
            node: "sign",
            events: with_start("sign", &interrupt_approval),
            needs: approval_needs(&["accept", "reject"], "Sign off", None),
        },
        Case {
            name: "clarification gate",
            node: "ask",
            events: with_start("ask", &ask),
            needs: Box::new(|p| {
                let ids: Vec<&str> = p.questions.iter().map(|q| q.id.as_str()).collect();
                check(
                    p.kind == "clarification" && ids == ["q1", "q2"],
                    "its questions",
                )
            }),
        },
        Case {
            name: "external-event interrupt",
            node: "hook",
            events: with_start("hook", &external),
            needs: Box::new(|p| {
                check(
                    p.kind == "external-event"
                        && p.correlation == json!({"orderId": "o-1"}).as_object().cloned(),
                    "its correlation",
                )
            }),
        },
        Case {
            name: "custom interrupt",
            node: "pay",
            events: with_start("pay", &custom),
            needs: Box::new(|p| {
                check(
                    p.kind == "custom" && p.key.as_deref() == Some("order-42"),
                    "its key",
                )
            }),
        },
        Case {
            // The LLM pipeline records its questions before the suspension
            // (`pipeline::handler`, `worker/src/executor/prompt.rs`).
            name: "pipeline clarification",
            node: "llm",
            events: vec![
                started("llm"),
                (
                    "clarification.requested".to_owned(),
                    json!({"nodeId": "llm", "interruptId": "int-llm", "questions": [{"id": "tone", "question": "Formal?"}]}),
                ),
                (
                    "interrupt.requested".to_owned(),
                    json!({"interruptId": "int-llm", "nodeId": "llm", "kind": "clarification", "data": {}}),
                ),
                (
                    "node.suspended".to_owned(),
                    json!({"nodeId": "llm", "interruptId": "int-llm", "kind": "clarification"}),
                ),
            ],
            needs: Box::new(|p| check(p.questions.len() == 1, "its questions")),
        },
        Case {
            // CP-1: a low-confidence decision escalates with the suspension alone.
            name: "low-confidence escalation",
            node: "agent",
            events: vec![
                started("agent"),
                (
                    "node.suspended".to_owned(),
                    json!({"nodeId": "agent", "interruptId": "int-cp1", "kind": "approval",
                           "reason": "low-confidence", "agentId": "a", "threshold": 0.7, "observed": 0.4}),
                ),
            ],
            needs: Box::new(|p| {
                check(
                    p.kind == "approval" && p.observed == Some(0.4),
                    "its observed confidence",
                )
            }),
        },
    ]
}

fn doc(seq: u64, (ty, p): &(String, Value)) -> Value {
    json!({"eventId": format!("evt-{seq}"), "runId": RUN, "type": ty, "sequence": seq,
           "timestamp": AT, "nodeId": p.get("nodeId"), "payload": p})
}

/// The run's log: `run.started`, then the events of `cases` interleaved round-robin (parallel
/// branches waiting at once).
fn log_of(cases: &[&Case]) -> Vec<Value> {
    let mut out = vec![
        json!({"eventId": "evt-0", "runId": RUN, "type": "run.started",
                              "sequence": 0, "timestamp": AT, "payload": {}}),
    ];
    let longest = cases.iter().map(|c| c.events.len()).max().unwrap_or(0);
    for i in 0..longest {
        for c in cases {
            if let Some(e) = c.events.get(i) {
                out.push(doc(out.len() as u64, e));
            }
        }
    }
    out
}

/// The invariant at one prefix: every pending interrupt is complete for its kind, and the
/// run waits only on pending ones.
fn invariant(p: &Projection, cases: &[&Case], at: &str) {
    for pi in &p.pending_interrupts {
        let case = cases.iter().find(|c| c.node == pi.node_id).unwrap();
        if let Err(what) = (case.needs)(pi) {
            panic!(
                "{at}: {} shows its interrupt without {what}: {pi:?}",
                case.name
            );
        }
    }
    if p.phase.is_some_and(RunPhase::is_waiting) {
        assert!(
            !p.pending_interrupts.is_empty(),
            "{at}: waiting on nothing: {p:?}"
        );
    }
}

/// Folds every prefix of `log` three ways — straight, with every event delivered twice (a
/// replay), and resumed from the serialized status after every event — checking the
/// invariant at each; returns the final projection.
fn fold_every_prefix(log: &[Value], cases: &[&Case], what: &str) -> Projection {
    let mut straight = Projection::default();
    let mut replayed = Projection::default();
    let mut resumed = Projection::default();
    for (i, e) in log.iter().enumerate() {
        straight.apply(e);
        replayed.apply(e);
        replayed.apply(e);
        if i > 0 {
            replayed.apply(&log[i - 1]);
        }
        let stored = serde_json::to_value(&resumed).unwrap();
        resumed = serde_json::from_value(stored).unwrap();
        resumed.apply(e);
        let at = format!("{what}, after event {i} ({})", e["type"]);
        invariant(&straight, cases, &at);
        assert_eq!(
            straight, replayed,
            "{at}: a replayed event changed the fold"
        );
        assert_eq!(
            straight, resumed,
            "{at}: resuming from the stored status changed the fold"
        );
    }
    straight
}

#[test]
fn no_prefix_shows_an_interrupt_without_what_its_kind_needs() {
    let all = cases();
    for c in &all {
        let end = fold_every_prefix(&log_of(&[c]), &[c], c.name);
        // Once its events are all in, the run does wait on it.
        assert!(
            end.phase.is_some_and(RunPhase::is_waiting),
            "{}: not waiting at the end: {end:?}",
            c.name
        );
        assert_eq!(end.pending_interrupts.len(), 1, "{}: {end:?}", c.name);
        assert!(end.recording_interrupts.is_empty(), "{}: {end:?}", c.name);
    }
    // Parallel branches: every pair of waits interleaved.
    for a in &all {
        for b in &all {
            if a.node != b.node {
                let end = fold_every_prefix(
                    &log_of(&[a, b]),
                    &[a, b],
                    &format!("{} ∥ {}", a.name, b.name),
                );
                assert_eq!(
                    end.pending_interrupts.len(),
                    2,
                    "{} ∥ {}: {end:?}",
                    a.name,
                    b.name
                );
            }
        }
    }
}

#[test]
fn the_worker_exiting_suspended_leaves_nothing_being_recorded() {
    // A log whose request events never came (a worker that recorded none) must not leave a
    // run running without a pod: the worker's summary shows the interrupt pending.
    let g = quorum_gate();
    let mut p = Projection::default();
    let events = gate_wait(&g, "vote", 0);
    p.apply(&doc(0, &started("vote")));
    p.apply(&doc(1, &events[0]));
    assert_eq!(
        (
            p.phase,
            p.pending_interrupts.len(),
            p.recording_interrupts.len()
        ),
        (Some(RunPhase::Running), 0, 1)
    );
    p.suspend();
    assert_eq!(
        (p.phase, p.pending_interrupts.len()),
        (Some(RunPhase::WaitingApproval), 1)
    );
    assert!(p.recording_interrupts.is_empty());
    // A terminal event clears both lists.
    let mut p = Projection::default();
    p.apply(&doc(0, &events[0]));
    p.apply(&doc(1, &("run.cancelled".to_owned(), json!({}))));
    assert!(p.pending_interrupts.is_empty() && p.recording_interrupts.is_empty());
}

/// Accept votes by `n` distinct voters for the quorum gate's first interrupt.
fn accepts(n: usize) -> Vec<Answer> {
    (0..n)
        .map(|i| {
            serde_json::from_value(json!({"interruptId": gate::interrupt_id(RUN, "vote", 0),
                "action": "accept", "value": {"voter": format!("v{i}")}, "answeredBy": "sa"}))
            .unwrap()
        })
        .collect()
}

#[test]
fn a_quorum_gate_is_never_decided_by_fewer_votes_than_it_requires_at_any_prefix() {
    let all = cases();
    let c = &all[0];
    let log = log_of(&[c]);
    // Votes may arrive at any moment: at every prefix, whatever votes are in `spec.answers`,
    // whatever the answerer reads as pending decides only with three accepts.
    let mut p = Projection::default();
    for (i, e) in log.iter().enumerate() {
        p.apply(e);
        for n in 0..=4 {
            let votes = accepts(n);
            for pi in &p.pending_interrupts {
                assert_eq!(
                    quorum::decided(pi, &votes),
                    n >= 3,
                    "after event {i} ({}), {n} accept vote(s) on {pi:?}",
                    e["type"]
                );
            }
        }
    }
    assert_eq!(p.pending_interrupts.len(), 1);
}
