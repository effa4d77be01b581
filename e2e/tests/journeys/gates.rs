//! Issues #24/#25 approval gates on the mini-cluster: a quorum gate (three accepts) takes two
//! votes over REST that leave the run `waiting-approval` with no worker pod, and the third,
//! `kubectl openwop resume`, completes it with one `approval.received` per voter and one
//! `interrupt.resolved`; a gate with `timeoutMs` waits without a pod and times out rejected
//! (`approval.received {action: timeout}`, the run fails `approval_rejected`), after which an
//! answer is refused; a `refine` (RFC 0183) is refused without its `refineFeedback`, and with
//! it the resolution — the action and the feedback — is in the run's events as soon as the
//! resolve answers 200. Every status version of twenty quorum-gate Runs, watched from the API
//! server, shows the gate's interrupt complete (issue #39: a status written between the gate's
//! events once showed a bare interrupt, judged as decided by one vote).

use futures::StreamExt;
use kube::api::{WatchEvent, WatchParams};

use super::*;

fn gate_workflow(name: &str, config: Value) -> String {
    serde_json::to_string(&json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "metadata": {"name": name},
        "spec": {"id": name, "name": name, "version": "1", "settings": {"timeout": 0},
                 "nodes": [{"id": "gate", "typeId": "core.approvalGate", "config": config}],
                 "edges": []}}))
    .unwrap()
}

fn phase_of(st: &Value) -> &str {
    st["phase"].as_str().unwrap_or_default()
}

const QUORUM_CONFIG: &str = r#"{"title": "three of us", "actions": ["accept", "reject"],
    "requiredApprovals": 3, "rejectionPolicy": "majority"}"#;

/// Twenty three-voter gate Runs started at once, every version of their statuses watched from
/// the API server until all wait: a waiting run always shows its interrupt with the quorum,
/// actions and title, and a pending interrupt never lacks them (while its events are being
/// recorded it is listed in `recordingInterrupts`, not answerable).
#[tokio::test]
async fn every_status_version_of_twenty_quorum_gates_shows_a_complete_interrupt() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-gates-watch").await;
    let config: Value = serde_json::from_str(QUORUM_CONFIG).unwrap();
    ok(
        apply(&c, &ns, &gate_workflow("quorum", config)),
        "apply workflow",
    );
    wait_workflow(&c, &ns, "quorum", "True").await;
    let runs = api(&c, &ns, "Run");
    let rv = runs
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap_or_default();
    let stream = runs
        .watch(&WatchParams::default().timeout(290), &rv)
        .await
        .unwrap();
    let seen = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut statuses: Vec<(String, Value)> = Vec::new();
        let mut waiting = std::collections::BTreeSet::new();
        while let Some(ev) = stream.next().await {
            if let Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) = ev {
                let st = status(&o);
                if phase_of(&st) == "waiting-approval" {
                    waiting.insert(o.metadata.name.clone().unwrap_or_default());
                }
                statuses.push((o.metadata.name.clone().unwrap_or_default(), st));
                if waiting.len() == 20 {
                    break;
                }
            }
        }
        statuses
    });
    for i in 0..20 {
        ok(
            apply(&c, &ns, &fixture_run(&format!("w-{i}"), "quorum")),
            "run",
        );
    }
    let statuses = tokio::time::timeout(Duration::from_secs(280), seen)
        .await
        .expect("all twenty runs wait for approval within 280 s")
        .unwrap();
    let mut recording = 0;
    for (name, st) in &statuses {
        if phase_of(st) == "waiting-approval" {
            assert!(
                st["pendingInterrupts"]
                    .as_array()
                    .is_some_and(|p| !p.is_empty()),
                "{name} waits on nothing: {st:#}"
            );
        }
        for p in st["pendingInterrupts"].as_array().into_iter().flatten() {
            assert_eq!(
                (
                    &p["requiredApprovals"],
                    &p["actions"],
                    &p["title"],
                    &p["rejectionPolicy"]
                ),
                (
                    &json!(3),
                    &json!(["accept", "reject"]),
                    &json!("three of us"),
                    &json!("majority")
                ),
                "{name}: a pending interrupt without its quorum, actions or title: {st:#}"
            );
        }
        recording += usize::from(
            st["recordingInterrupts"]
                .as_array()
                .is_some_and(|r| !r.is_empty()),
        );
    }
    eprintln!(
        "watched {} status versions of 20 quorum gates; {recording} showed the interrupt still being recorded",
        statuses.len()
    );
}

#[tokio::test]
async fn a_quorum_gate_waits_for_three_voters_and_a_timed_out_gate_fails_without_a_pod() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-gates").await;
    ok(
        apply(
            &c,
            &ns,
            &gate_workflow("quorum", serde_json::from_str(QUORUM_CONFIG).unwrap()),
        ),
        "apply workflow",
    );
    ok(
        apply(
            &c,
            &ns,
            &gate_workflow(
                "timed",
                json!({"title": "nobody answers", "actions": ["accept", "reject"],
                       "timeoutMs": 8000}),
            ),
        ),
        "apply workflow",
    );
    wait_workflow(&c, &ns, "quorum", "True").await;
    wait_workflow(&c, &ns, "timed", "True").await;
    ok(apply(&c, &ns, &rest_role("team")), "team Role");
    let bearer = sa_token(&c, &ns, "team");
    let base = format!("http://127.0.0.1:{}", operator_port());

    // 1. Quorum: two REST votes, then kubectl openwop resume.
    ok(apply(&c, &ns, &fixture_run("q-1", "quorum")), "run");
    let st = wait_run(&c, &ns, "q-1", "waiting-approval", 120).await;
    assert_eq!(st["pendingInterrupts"][0]["requiredApprovals"], 3, "{st:#}");
    let run_id = st["runId"].as_str().unwrap().to_owned();
    no_worker_pods(&c, &ns, Duration::from_secs(30)).await;
    let url = format!("{base}/v1/runs/{run_id}/interrupts/gate");
    for voter in ["approver-1", "approver-2", "approver-2"] {
        let vote = json!({"resumeValue": {"action": "accept", "voter": voter}});
        let (code, body) = http_json("POST", &url, Some(&bearer), Some(&vote));
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["status"], "waiting-approval", "{body}");
    }
    // A partial vote starts no worker: still waiting, still no pod.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        worker_pods(&c, &ns).await.is_empty(),
        "a worker for a partial vote"
    );
    let st = status(&api(&c, &ns, "Run").get("q-1").await.unwrap());
    assert_eq!(phase_of(&st), "waiting-approval", "{st:#}");
    ok(
        cli(&c, &["resume", "q-1", "-n", &ns, "--action", "accept"]),
        "kubectl openwop resume (the third voter)",
    );
    wait_run(&c, &ns, "q-1", "completed", 120).await;
    let evs = events(&c, &ns, "q-1");
    assert_gapless(&evs);
    let voters: Vec<String> = evs
        .iter()
        .filter(|e| e["type"] == "approval.received")
        .map(|e| {
            e["payload"]["voter"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(voters.len(), 3, "{voters:?}");
    assert_eq!(&voters[..2], ["approver-1", "approver-2"]);
    assert_eq!(
        evs.iter()
            .filter(|e| e["type"] == "interrupt.resolved")
            .count(),
        1
    );
    // Decided: a fourth vote is refused.
    let vote = json!({"resumeValue": {"action": "accept", "voter": "approver-4"}});
    let (code, body) = http_json("POST", &url, Some(&bearer), Some(&vote));
    assert_eq!(code, 409, "{body}");

    // 2. timeoutMs: waiting-approval without a pod, then the timeout rejects it.
    ok(apply(&c, &ns, &fixture_run("t-1", "timed")), "run");
    let st = wait_run(&c, &ns, "t-1", "waiting-approval", 120).await;
    let run_id = st["runId"].as_str().unwrap().to_owned();
    no_worker_pods(&c, &ns, Duration::from_secs(30)).await;
    let st = status(&api(&c, &ns, "Run").get("t-1").await.unwrap());
    if phase_of(&st) == "waiting-approval" {
        assert!(st["wakeAt"].is_string(), "the gate's timer: {st:#}");
        assert!(
            worker_pods(&c, &ns).await.is_empty(),
            "a pod while the gate waits"
        );
    }
    let st = wait_run(&c, &ns, "t-1", "failed", 120).await;
    assert_eq!(st["error"]["code"], "approval_rejected", "{st:#}");
    let evs = events(&c, &ns, "t-1");
    assert_gapless(&evs);
    let received = evs
        .iter()
        .find(|e| e["type"] == "approval.received")
        .expect("approval.received");
    assert_eq!(
        (
            &received["payload"]["action"],
            &received["payload"]["reason"]
        ),
        (&json!("timeout"), &json!("timeout"))
    );
    let resolved = evs
        .iter()
        .find(|e| e["type"] == "interrupt.resolved")
        .expect("interrupt.resolved");
    assert_eq!(resolved["payload"]["outcome"], "rejected");
    // After the timeout nothing waits at the gate.
    let (code, body) = http_json(
        "POST",
        &format!("{base}/v1/runs/{run_id}/interrupts/gate"),
        Some(&bearer),
        Some(&json!({"resumeValue": {"action": "accept"}})),
    );
    assert!(matches!(code, 404 | 409 | 410), "{code} {body}");
}

/// RFC 0183 through the REST API, as `interrupt-approval.test.ts` drives it: the events read
/// right after the resolve's 200 already hold the resolution, with the action and the feedback
/// (on `approval.received` and `interrupt.resolved`); the node's outputs carry the feedback.
#[tokio::test]
async fn a_refine_is_recorded_with_its_feedback_before_the_resolve_answers() {
    let (c, _g) = setup().await;
    let ns = namespace(&c.client, "j-refine").await;
    ok(
        apply(
            &c,
            &ns,
            &gate_workflow(
                "refine",
                json!({"title": "review", "actions": ["accept", "reject", "refine"]}),
            ),
        ),
        "apply workflow",
    );
    wait_workflow(&c, &ns, "refine", "True").await;
    ok(apply(&c, &ns, &rest_role("team")), "team Role");
    let bearer = sa_token(&c, &ns, "team");
    let base = format!("http://127.0.0.1:{}", operator_port());
    let feedback = json!({"scope": "section", "sectionPath": "summary", "text": "tighten it"});
    for i in 0..3 {
        let name = format!("r-{i}");
        ok(apply(&c, &ns, &fixture_run(&name, "refine")), "run");
        let st = wait_run(&c, &ns, &name, "waiting-approval", 120).await;
        let run_id = st["runId"].as_str().unwrap().to_owned();
        let url = format!("{base}/v1/runs/{run_id}/interrupts/gate");
        if i == 0 {
            // Without the feedback (or with a scope the spec does not name) it means nothing.
            for bad in [
                json!({"resumeValue": {"action": "refine"}}),
                json!({"resumeValue": {"action": "refine", "refineFeedback": {"scope": "all"}}}),
            ] {
                let (code, body) = http_json("POST", &url, Some(&bearer), Some(&bad));
                assert_eq!(code, 400, "{bad} -> {body}");
                assert!(
                    body["message"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("refineFeedback"),
                    "{body}"
                );
            }
        }
        let answer = json!({"resumeValue": {"action": "refine", "refineFeedback": feedback}});
        let (code, body) = http_json("POST", &url, Some(&bearer), Some(&answer));
        assert_eq!(code, 200, "{body}");
        let (code, evs) = http_json(
            "GET",
            &format!("{base}/v1/runs/{run_id}/events"),
            Some(&bearer),
            None,
        );
        assert_eq!(code, 200, "{evs}");
        let rows = evs["events"].as_array().cloned().unwrap_or_default();
        for t in ["approval.received", "interrupt.resolved"] {
            let e = rows
                .iter()
                .find(|e| e["type"] == t)
                .unwrap_or_else(|| panic!("{name}: no {t} right after the 200: {evs:#}"));
            assert_eq!(
                (&e["payload"]["action"], &e["payload"]["refineFeedback"]),
                (&json!("refine"), &feedback),
                "{e:#}"
            );
        }
        wait_run(&c, &ns, &name, "completed", 120).await;
        let evs = events(&c, &ns, &name);
        assert_gapless(&evs);
        let done = evs
            .iter()
            .find(|e| e["type"] == "node.completed")
            .expect("node.completed");
        assert_eq!(done["payload"]["outputs"]["refineFeedback"], feedback);
    }

    // The same from the command line: `kubectl openwop resume --action refine --feedback`.
    ok(apply(&c, &ns, &fixture_run("r-cli", "refine")), "run");
    wait_run(&c, &ns, "r-cli", "waiting-approval", 120).await;
    ok(
        cli(
            &c,
            &[
                "resume",
                "r-cli",
                "-n",
                &ns,
                "--action",
                "refine",
                "--feedback",
                "from the CLI",
            ],
        ),
        "kubectl openwop resume --action refine",
    );
    wait_run(&c, &ns, "r-cli", "completed", 120).await;
    let evs = events(&c, &ns, "r-cli");
    let received = evs
        .iter()
        .find(|e| e["type"] == "approval.received")
        .expect("approval.received");
    assert_eq!(
        received["payload"]["refineFeedback"],
        json!({"scope": "whole", "text": "from the CLI"})
    );

    // A run cancelled while its gate waited: the status no longer lists the interrupt, but an
    // answer to it is `409 interrupt_already_resolved` (v2 errors.md: one code for that
    // state), not "never waited"; a node that never waited stays 404.
    ok(apply(&c, &ns, &fixture_run("r-cancel", "refine")), "run");
    let st = wait_run(&c, &ns, "r-cancel", "waiting-approval", 120).await;
    let run_id = st["runId"].as_str().unwrap().to_owned();
    let (code, body) = http_json(
        "POST",
        &format!("{base}/v1/runs/{run_id}/cancel"),
        Some(&bearer),
        Some(&json!({"reason": "not needed"})),
    );
    assert_eq!(code, 200, "{body}");
    wait_run(&c, &ns, "r-cancel", "cancelled", 60).await;
    let answer = json!({"resumeValue": {"action": "accept"}});
    let (code, body) = http_json(
        "POST",
        &format!("{base}/v1/runs/{run_id}/interrupts/gate"),
        Some(&bearer),
        Some(&answer),
    );
    assert_eq!(
        (code, body["error"].as_str()),
        (409, Some("interrupt_already_resolved")),
        "{body}"
    );
    assert_eq!(body["details"]["runStatus"], "cancelled", "{body}");
    let (code, body) = http_json(
        "POST",
        &format!("{base}/v1/runs/{run_id}/interrupts/never-waited"),
        Some(&bearer),
        Some(&answer),
    );
    assert_eq!(code, 404, "{body}");
}
