//! Issue #24's example (`examples/07-ticket-escalation.yaml`) as CI applies it: the file with
//! its placeholder ticketing API (`http://ticketing.tools.svc:8080`) pointed at a stand-in
//! service on this host's loopback (the mini-cluster's values allow loopback egress). The
//! urgent ticket waits for a person's approval, then opens the ticket and follows up in a child
//! Run (`ticket-follow-up`: a delay, then the follow-up call); the routine one skips the
//! approval.

use super::*;

/// The placeholder the example documents for the ticketing API.
const TICKETING: &str = "http://ticketing.tools.svc:8080";

pub(super) async fn ticket_escalation(c: &Cluster, ns: &str) {
    if !c.local {
        eprintln!(
            "SKIPPED examples/07-ticket-escalation.yaml: its stand-in ticketing service listens on this host's loopback, which only the mini-cluster's workers share"
        );
        return;
    }
    let (port, seen) = super::ticket_service();
    let file = std::fs::read_to_string(repo().join("examples/07-ticket-escalation.yaml")).unwrap();
    assert!(
        file.contains(TICKETING),
        "the example's placeholder URL moved"
    );
    let manifests = file.replace(TICKETING, &format!("http://127.0.0.1:{port}"));
    ok(
        apply(c, ns, &manifests),
        "apply examples/07-ticket-escalation.yaml",
    );
    wait_workflow(c, ns, "ticket-escalation", "True").await;
    wait_workflow(c, ns, "ticket-follow-up", "True").await;

    // Routine: no approval, the ticket is opened and followed up.
    wait_run(c, ns, "ticket-routine", "completed", 120).await;
    let evs = events(c, ns, "ticket-routine");
    assert_gapless(&evs);
    let skipped = node_ids(&evs, "node.skipped");
    assert_eq!(skipped, ["approve"], "{:?}", types(&evs));

    // Urgent: waits for a person, then the same path.
    let st = wait_run(c, ns, "ticket-urgent", "waiting-approval", 120).await;
    assert_eq!(st["pendingInterrupts"][0]["nodeId"], "approve", "{st:#}");
    ok(
        cli(
            c,
            &["resume", "ticket-urgent", "-n", ns, "--action", "accept"],
        ),
        "kubectl openwop resume ticket-urgent",
    );
    wait_run(c, ns, "ticket-urgent", "completed", 120).await;
    let evs = events(c, ns, "ticket-urgent");
    assert_gapless(&evs);
    let completed = node_ids(&evs, "node.completed");
    assert_eq!(
        completed,
        [
            "classify",
            "approve",
            "open-ticket",
            "remember",
            "follow-up"
        ],
        "{:?}",
        types(&evs)
    );
    // The follow-up ran as a child Run of the parent's `follow-up` node: a delay, then the call.
    let dispatched = evs
        .iter()
        .find(|e| e["type"] == "node.completed" && e["nodeId"] == "follow-up")
        .unwrap();
    assert_eq!(
        dispatched["payload"]["outputs"]["childStatus"], "completed",
        "{dispatched}"
    );
    let parent_id = st["runId"].as_str().unwrap();
    let child = child_run(c, ns, parent_id).await;
    let child_evs = events(c, ns, &child);
    assert_gapless(&child_evs);
    let child_done = node_ids(&child_evs, "node.completed");
    assert_eq!(child_done, ["wait", "follow-up"], "{:?}", types(&child_evs));
    let follow_up = child_evs
        .iter()
        .find(|e| e["type"] == "node.completed" && e["nodeId"] == "follow-up")
        .unwrap();
    assert_eq!(
        follow_up["payload"]["outputs"]["status"], 201,
        "{follow_up}"
    );
    let all = serde_json::to_string(&child_evs).unwrap();
    assert!(
        !all.contains("replace-me"),
        "the Secret's token reached the child's events"
    );
    let all = serde_json::to_string(&evs).unwrap();
    assert!(
        !all.contains("replace-me"),
        "the Secret's token reached the events"
    );

    // Two runs, two calls each: open, then follow up on the id the API answered.
    let heads = seen.lock().unwrap().clone();
    let lines: Vec<String> = heads
        .iter()
        .map(|h| h.lines().next().unwrap_or("").to_owned())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    for want in ["POST /tickets ", "POST /tickets/T-1/follow-up "] {
        assert_eq!(
            lines.iter().filter(|l| l.starts_with(want)).count(),
            2,
            "{want}: {lines:?}"
        );
    }
    assert!(
        heads.iter().all(|h| h
            .to_ascii_lowercase()
            .contains("authorization: bearer replace-me")),
        "the Secret's token reached the ticketing API"
    );
}

/// The name of the one child Run of the run `parent_id` (label `openwop.dev/parent-run`).
async fn child_run(c: &Cluster, ns: &str, parent_id: &str) -> String {
    let runs = api(c, ns, "Run")
        .list(&ListParams::default().labels(&format!("openwop.dev/parent-run={parent_id}")))
        .await
        .unwrap();
    let names: Vec<String> = runs
        .items
        .into_iter()
        .filter_map(|r| r.metadata.name)
        .collect();
    assert_eq!(names.len(), 1, "children of {parent_id}: {names:?}");
    names.into_iter().next().unwrap()
}

/// The node ids of the events of type `ty`, in log order.
fn node_ids<'a>(evs: &'a [Value], ty: &str) -> Vec<&'a str> {
    evs.iter()
        .filter(|e| e["type"] == ty)
        .filter_map(|e| e["nodeId"].as_str())
        .collect()
}
