//! Issue #25 G7 and G15 over real HTTP on the mini-cluster: the signed token a run's snapshot
//! carries inspects and answers its approval gate with no bearer token (the worker records
//! `callback-token` as who decided), and a cancel repeated under one `Idempotency-Key` is
//! answered again, marked as a replay, while the same key for another run is refused.

use super::*;

#[tokio::test]
async fn a_signed_token_answers_a_gate_and_a_repeated_cancel_replays() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-tokens").await;
    apply_fixture(&c, &ns, "conformance-approval");
    wait_workflow(&c, &ns, "conformance-approval", "True").await;
    ok(apply(&c, &ns, &rest_role("team")), "team Role");
    let bearer = sa_token(&c, &ns, "team");
    let base = format!("http://127.0.0.1:{}", operator_port());

    // 1. The token from the snapshot inspects and answers the gate, with no bearer.
    ok(
        apply(&c, &ns, &fixture_run("by-token", "conformance-approval")),
        "run",
    );
    let st = wait_run(&c, &ns, "by-token", "waiting-approval", 120).await;
    let run_id = st["runId"].as_str().unwrap().to_owned();
    let answered_run = run_id.clone();
    let (code, snap) = http_json(
        "GET",
        &format!("{base}/v1/runs/{run_id}"),
        Some(&bearer),
        None,
    );
    assert_eq!(code, 200, "{snap}");
    let interrupt = &snap["interrupt"];
    assert_eq!(
        (interrupt["kind"].as_str(), interrupt["nodeId"].as_str()),
        (Some("approval"), Some("gate")),
        "{snap}"
    );
    let token = interrupt["interruptToken"].as_str().unwrap().to_owned();
    let url = format!("{base}/v1/interrupts/{token}");
    let (code, inspected) = http_json("GET", &url, None, None);
    assert_eq!(code, 200, "{inspected}");
    assert_eq!(
        (inspected["intent"].as_str(), inspected["runId"].as_str()),
        (Some("resolve"), Some(run_id.as_str()))
    );
    let accept = json!({"resumeValue": {"action": "accept"}});
    let (code, body) = http_json("POST", &url, None, Some(&accept));
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        rest_terminal(&base, &bearer, &run_id).await["status"],
        "completed"
    );
    // The token died with its interrupt.
    let (code, body) = http_json("POST", &url, None, Some(&accept));
    assert_eq!(
        (code, body["error"].as_str()),
        (409, Some("interrupt_already_resolved")),
        "{body}"
    );
    let evs = events(&c, &ns, "by-token");
    assert_gapless(&evs);
    let payload = |ty: &str| {
        evs.iter()
            .find(|e| e["type"] == ty)
            .map(|e| e["payload"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(payload("approval.received")["decidedBy"], "callback-token");
    assert_eq!(
        payload("interrupt.resolved")["resolvedBy"],
        "callback-token"
    );
    // A forged token is unknown, never a hint.
    let forged = format!("{}.AAAA", token.split_once('.').unwrap().0);
    let (code, body) = http_json("GET", &format!("{base}/v1/interrupts/{forged}"), None, None);
    assert_eq!(
        (code, body["error"].as_str()),
        (404, Some("interrupt_not_found")),
        "{body}"
    );

    // 2. A cancel repeated under one Idempotency-Key: one cancel, the same answer again.
    ok(
        apply(&c, &ns, &fixture_run("cancel-me", "conformance-approval")),
        "run",
    );
    let st = wait_run(&c, &ns, "cancel-me", "waiting-approval", 120).await;
    let run_id = st["runId"].as_str().unwrap().to_owned();
    let cancel = |run_id: &str| {
        http_call(
            "POST",
            &format!("{base}/v1/runs/{run_id}/cancel"),
            Some(&bearer),
            &[("Idempotency-Key", "journey-cancel-1")],
            Some(&json!({"reason": "journey"})),
        )
    };
    let (code, head, first) = cancel(&run_id);
    assert_eq!(code, 200, "{first}");
    assert!(!head.contains("openwop-idempotent-replay"), "{head}");
    let (code, head, again) = cancel(&run_id);
    assert_eq!(code, 200, "{again}");
    assert!(head.contains("openwop-idempotent-replay: true"), "{head}");
    assert_eq!(again, first);
    wait_run(&c, &ns, "cancel-me", "cancelled", 120).await;
    let cancelled = events(&c, &ns, "cancel-me")
        .iter()
        .filter(|e| e["type"] == "run.cancelled")
        .count();
    assert_eq!(cancelled, 1);
    // The key names that cancel: for another run it is refused, naming nothing of it.
    let (code, _, body) = cancel(&answered_run);
    assert_eq!(
        (code, body["error"].as_str()),
        (409, Some("idempotency_key_mismatch")),
        "{body}"
    );
}
