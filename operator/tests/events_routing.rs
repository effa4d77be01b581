//! The event consumer's status writes against a mocked API server (`common`): events reach
//! their Run by uid, never by name.

mod common;

use common::{ApiServerVerifier, Expect, Scenario};
use http::Method;
use openwop_crds::Run;
use openwop_operator::config::OperatorConfig;
use openwop_operator::events::{Applied, EventError, KubeStatuses, RunLog, apply_events};
use serde_json::{Value, json};

fn run_with_uid(uid: &str, last_sequence: Option<u64>) -> Value {
    let mut r = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "r1", "namespace": "team-a", "uid": uid, "resourceVersion": "7"},
        "spec": {"workflowRef": {"name": "triage"}}});
    if let Some(seq) = last_sequence {
        r["status"] = json!({"phase": "running", "lastSequence": seq, "events": seq + 1});
    }
    r
}

fn event(run_id: &str, seq: u64, ty: &str) -> Value {
    json!({"eventId": format!("{run_id}-{seq}"), "runId": run_id, "type": ty, "sequence": seq,
           "timestamp": "2026-01-01T00:00:00Z", "payload": {}})
}

/// Every event here continues its run's status: nothing is read back.
struct NoReadBack;

impl RunLog for NoReadBack {
    async fn read_run(&self, _: &str, _: &str) -> Result<Vec<Value>, EventError> {
        panic!("no hole in these events: the log must not be read back")
    }
}

fn get_r1(uid: &str, last_sequence: u64) -> Expect {
    Expect::new(
        Method::GET,
        "/apis/openwop.dev/v1alpha1/namespaces/team-a/runs/r1",
    )
    .reply(200, run_with_uid(uid, Some(last_sequence)))
}

/// Run r1 was deleted and re-created: the old run's late events (its uid) never touch the
/// new Run of the same name; the new run's events do.
#[tokio::test]
async fn events_are_routed_by_uid_across_delete_and_recreate() {
    let (client, mut api) = ApiServerVerifier::pair();
    let cfg = OperatorConfig::default();
    let old = [event("uid-old", 5, "run.failed")];
    // Old uid, no cache: a LIST of the namespace finds only the new r1; nothing else.
    let list = Expect::new(
        Method::GET,
        "/apis/openwop.dev/v1alpha1/namespaces/team-a/runs?&labelSelector=%21openwop.dev%2Finstance",
    )
    .reply(
        200,
        json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "RunList", "metadata": {},
               "items": [run_with_uid("uid-new", Some(0))]}),
    );
    let applied = api
        .play(
            Scenario::new().then(list),
            apply_events(
                &KubeStatuses::new(&client, &cfg, None, api.events()),
                &NoReadBack,
                "team-a",
                "uid-old",
                &old,
            ),
        )
        .await;
    assert_eq!(applied.unwrap(), Applied::Unchanged, "dropped");

    // New uid: found in the cache (no LIST, no GET: the cached resourceVersion is the
    // write's precondition), patched.
    let (store, mut writer) = kube::runtime::reflector::store::<Run>();
    let new_run: Run = serde_json::from_value(run_with_uid("uid-new", Some(0))).unwrap();
    writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(new_run));
    let new = [event("uid-new", 1, "run.completed")];
    let write = Expect::new(Method::PUT, common::fixtures::RUN_STATUS)
        .body(|body| {
            let st = &body["status"];
            assert_eq!(st["phase"], "completed");
            assert_eq!(st["lastSequence"], 1);
            assert_eq!(body["metadata"]["resourceVersion"], "7");
            // The whole ending in the same write: the reconcile it triggers writes nothing.
            assert_eq!(st["terminalEvent"], "uid-new-1", "{st:#}");
            assert!(st["completionTime"].is_string(), "{st:#}");
            let succeeded = st["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Succeeded"))
                .unwrap_or_else(|| panic!("no Succeeded condition: {st:#}"));
            assert_eq!(
                (&succeeded["status"], &succeeded["reason"]),
                (&json!("True"), &json!("Completed"))
            );
        })
        .reply(200, run_with_uid("uid-new", Some(1)));
    // ... and its Event, once the write succeeded.
    let ended = common::fixtures::event_of("Run", "Normal", "Completed").body(|b| {
        assert_eq!(b["regarding"]["name"], "r1", "{b:#}");
        assert_eq!(b["regarding"]["uid"], "uid-new", "{b:#}");
    });
    let applied = api
        .play(
            Scenario::new().then(write).then(ended),
            apply_events(
                &KubeStatuses::new(&client, &cfg, Some(&store), api.events()),
                &NoReadBack,
                "team-a",
                "uid-new",
                &new,
            ),
        )
        .await;
    assert_eq!(applied.unwrap(), Applied::Changed);

    // A stale cache that still maps the old uid to r1 does not misroute either: the write
    // from the cached copy fails its precondition (the new r1 has another resourceVersion),
    // and the GET after the conflict shows the name now has another uid.
    let (stale, mut w) = kube::runtime::reflector::store::<Run>();
    let mut old_run: Run = serde_json::from_value(run_with_uid("uid-old", Some(4))).unwrap();
    old_run.metadata.resource_version = Some("3".into());
    w.apply_watcher_event(&kube::runtime::watcher::Event::Apply(old_run));
    let conflict = Expect::new(Method::PUT, common::fixtures::RUN_STATUS)
        .body(|body| assert_eq!(body["metadata"]["resourceVersion"], "3"))
        .reply(
            409,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict",
               "message": "the object has been modified", "code": 409}),
        );
    let applied = api
        .play(
            Scenario::new().then(conflict).then(get_r1("uid-new", 1)),
            apply_events(
                &KubeStatuses::new(&client, &cfg, Some(&stale), api.events()),
                &NoReadBack,
                "team-a",
                "uid-old",
                &old,
            ),
        )
        .await;
    assert_eq!(applied.unwrap(), Applied::Unchanged);
}

/// A deleted Run's unread events arrive in several batches: the first one finds no Run (a LIST
/// of the namespace), the later ones are dropped without another request.
#[tokio::test]
async fn events_of_a_run_found_gone_are_dropped_without_another_list() {
    let (client, mut api) = ApiServerVerifier::pair();
    let cfg = OperatorConfig::default();
    let statuses = KubeStatuses::new(&client, &cfg, None, api.events());
    let list = Expect::new(
        Method::GET,
        "/apis/openwop.dev/v1alpha1/namespaces/team-a/runs?&labelSelector=%21openwop.dev%2Finstance",
    )
    .reply(
        200,
        json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "RunList", "metadata": {}, "items": []}),
    );
    let first = [event("uid-gone", 0, "run.started")];
    let applied = api
        .play(
            Scenario::new().then(list),
            apply_events(&statuses, &NoReadBack, "team-a", "uid-gone", &first),
        )
        .await;
    assert_eq!(applied.unwrap(), Applied::Unchanged);
    let later = [event("uid-gone", 1, "run.completed")];
    let applied = api
        .play(
            Scenario::new(),
            apply_events(&statuses, &NoReadBack, "team-a", "uid-gone", &later),
        )
        .await;
    assert_eq!(applied.unwrap(), Applied::Unchanged);
}

/// The Event sink (Kubernetes Events published off the reconcile's path): every Event recorded
/// is published, each object's in the order recorded, and `flush` returns only after all of
/// them were, although several lanes publish at once.
#[tokio::test]
async fn the_event_sink_publishes_every_event_in_each_objects_order_before_flush_returns() {
    use k8s_openapi::api::core::v1::ObjectReference;
    use kube::runtime::events::EventType;
    use openwop_operator::kube_events::Note;
    use openwop_operator::reasons::Reason;
    let (client, api) = ApiServerVerifier::pair();
    let sink = api.events();
    type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>;
    let seen = Seen::default();
    let server = api.answer_all(seen.clone(), |seen: &mut Seen, m, path, body| {
        assert_eq!(
            (m.as_str(), path),
            ("POST", "/apis/events.k8s.io/v1/namespaces/team-a/events")
        );
        let name = body["regarding"]["name"].as_str().unwrap().to_owned();
        seen.lock()
            .unwrap()
            .push((name, body["note"].as_str().unwrap().to_owned()));
        (201, body)
    });
    let runs = ["r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"];
    for i in 0..30 {
        for run in runs {
            let regarding = ObjectReference {
                api_version: Some("openwop.dev/v1alpha1".into()),
                kind: Some("Run".into()),
                namespace: Some("team-a".into()),
                name: Some(run.into()),
                ..Default::default()
            };
            let note = Note {
                type_: EventType::Normal,
                reason: Reason::WorkerStarted,
                note: format!("attempt {i}"),
            };
            sink.record(regarding, note).await;
        }
    }
    sink.flush().await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        30 * runs.len(),
        "every Event published before flush returned"
    );
    for run in runs {
        let notes: Vec<&str> = seen
            .iter()
            .filter(|(name, _)| name == run)
            .map(|(_, note)| note.as_str())
            .collect();
        let recorded: Vec<String> = (0..30).map(|i| format!("attempt {i}")).collect();
        assert_eq!(notes, recorded, "{run}'s Events in the order recorded");
    }
    drop((sink, client));
    server.await.unwrap();
}
