//! Webhook delivery against a real nats-server and a real HTTPS receiver (no Kubernetes):
//! a subscription stored the way `POST /v1/webhooks` stores it gets exactly the event types
//! it asked for, of its own tenant only, in order, signed with the secret registration
//! returned; a 500 is retried with backoff and the same delivery id; a dispatcher killed and
//! restarted mid-stream loses nothing; deleting the subscription stops deliveries; the
//! secret is nowhere in what the dispatcher logged.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use kube::runtime::reflector;
use openwop_crds::Run;
use openwop_e2e::webhook_receiver::{Delivery, Receiver};
use openwop_nats::testing::NatsServer;
use openwop_operator::config::OperatorConfig;
use openwop_operator::config::WebhooksConfig;
use openwop_operator::webhooks::dispatch;
use openwop_operator::webhooks::store::{Store, Subscription, SubscriptionStatus};
use openwop_protocol::run::subjects::{StreamSpec, events_subject};
use openwop_protocol::webhook::{self, headers};
use serde_json::{Value, json};

const STREAM: &str = "WEBHOOK_EVENTS";

/// Everything the operator logs in this test binary (debug and up), to search for secrets.
fn captured_logs() -> &'static std::sync::Mutex<Vec<u8>> {
    static LOGS: std::sync::OnceLock<&'static std::sync::Mutex<Vec<u8>>> =
        std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs: &'static std::sync::Mutex<Vec<u8>> =
            Box::leak(Box::new(std::sync::Mutex::new(Vec::new())));
        struct W(&'static std::sync::Mutex<Vec<u8>>);
        impl std::io::Write for W {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        tracing_subscriber::fmt()
            .json()
            .with_env_filter("openwop_operator=debug")
            .with_writer(move || W(logs))
            .init();
        logs
    })
}

struct Setup {
    _server: NatsServer,
    _dir: tempfile::TempDir,
    js: jetstream::Context,
    cfg: Arc<OperatorConfig>,
    receiver: Receiver,
    key: Vec<u8>,
}

async fn setup() -> Setup {
    setup_with(|_| {}).await
}

/// [`setup`] with its webhooks settings changed by `tune`.
async fn setup_with(tune: impl FnOnce(&mut WebhooksConfig)) -> Setup {
    captured_logs();
    let server = NatsServer::start();
    let js = jetstream::new(async_nats::connect(server.url()).await.unwrap());
    openwop_nats::stream::ensure_stream(&js, &StreamSpec::new(STREAM, None))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(dir.path()).await.unwrap();
    let key = b"0123456789abcdef0123456789abcdef-test-key".to_vec();
    std::fs::write(dir.path().join("signing-key"), &key).unwrap();
    std::fs::write(dir.path().join("ca.pem"), &receiver.ca_pem).unwrap();
    let mut cfg = OperatorConfig::default();
    cfg.worker.events_stream = STREAM.into();
    cfg.events.nats_url = Some(server.url());
    cfg.webhooks.enabled = true;
    cfg.webhooks.signing_key_file = dir.path().join("signing-key").display().to_string();
    cfg.webhooks.ca_file = dir.path().join("ca.pem").display().to_string();
    cfg.webhooks.allow_hosts = vec!["127.0.0.1".into()];
    cfg.webhooks.initial_backoff_ms = 200;
    tune(&mut cfg.webhooks);
    cfg.validate().unwrap();
    Setup {
        _server: server,
        _dir: dir,
        js,
        cfg: Arc::new(cfg),
        receiver,
        key,
    }
}

/// Registers a subscription as the REST handler does (consumer first, then the record) and
/// returns it with its secret.
async fn subscribe(s: &Setup, tenant: &str, id: &str, events: &[&str]) -> (Subscription, String) {
    let secret = webhook::derive_secret(&s.key, tenant, id);
    let sub = Subscription {
        webhook_id: id.into(),
        tenant: tenant.into(),
        url: s.receiver.url("/hook"),
        events: events.iter().map(|e| (*e).to_owned()).collect(),
        tags: vec![],
        secret_fingerprint: webhook::fingerprint(&secret),
        created_at: "2026-11-26T00:00:00Z".into(),
        status: Default::default(),
        failed_at: None,
    };
    dispatch::create_consumer(&s.js, &s.cfg, &sub)
        .await
        .unwrap();
    Store::open(&s.js, &s.cfg.webhooks.bucket)
        .await
        .unwrap()
        .create(&sub)
        .await
        .unwrap();
    (sub, secret)
}

fn event(run: &str, seq: u64, ty: &str) -> Value {
    json!({"eventId": format!("{run}-{seq}"), "runId": run, "type": ty, "sequence": seq,
           "timestamp": "2026-11-26T00:00:00Z", "payload": {"n": seq}})
}

async fn publish(js: &jetstream::Context, tenant: &str, ev: &Value) {
    js.publish(
        events_subject(tenant, ev["runId"].as_str().unwrap()),
        serde_json::to_vec(ev).unwrap().into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
}

fn start(s: &Setup) -> tokio::task::JoinHandle<Result<(), String>> {
    let (runs, _writer) = reflector::store::<Run>();
    tokio::spawn(dispatch::follow(s.cfg.clone(), s.js.clone(), runs))
}

async fn wait_deliveries(r: &Receiver, n: usize, secs: u64) -> Vec<Delivery> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let d = r.deliveries();
        if first_arrivals(&d).len() >= n {
            return d;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} deliveries after {secs} s, want {n}: {:?}\noperator log:\n{}",
            d.len(),
            d.iter()
                .map(|d| (
                    d.header(headers::EVENT_TYPE).unwrap_or("").to_owned(),
                    d.status
                ))
                .collect::<Vec<_>>(),
            String::from_utf8_lossy(&captured_logs().lock().unwrap())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The successful deliveries, the first of each delivery id only (a receiver dedupes on it:
/// delivery is at least once, e.g. when a dispatcher stops between a 200 and its ack).
fn first_arrivals(all: &[Delivery]) -> Vec<&Delivery> {
    let mut seen = std::collections::HashSet::new();
    all.iter()
        .filter(|d| d.status == 200 && seen.insert(d.header(headers::DELIVERY_ID).unwrap_or("")))
        .collect()
}

/// The status the receiver answered each attempt with, in order.
fn statuses(r: &Receiver) -> Vec<u16> {
    r.deliveries().iter().map(|d| d.status).collect()
}

fn verified(d: &Delivery, secret: &str) -> Value {
    webhook::verify(
        secret,
        d.header(headers::SIGNATURE_ALGORITHM),
        d.header(headers::TIMESTAMP).unwrap(),
        d.header(headers::SIGNATURE).unwrap(),
        &d.body,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap_or_else(|e| panic!("delivery does not verify: {e}"));
    serde_json::from_slice(&d.body).unwrap()
}

#[tokio::test]
async fn deliveries_are_filtered_ordered_signed_retried_and_survive_a_restart() {
    let s = setup().await;
    let (sub, secret) = subscribe(
        &s,
        "team-a",
        "wh_000000000000000000000001",
        &["run.started", "node.completed", "run.completed"],
    )
    .await;
    let dispatcher = start(&s);

    // Another tenant's run, and a type nobody asked for, never arrive.
    publish(&s.js, "team-b", &event("other", 0, "run.started")).await;
    publish(&s.js, "team-a", &event("r1", 0, "run.started")).await;
    publish(&s.js, "team-a", &event("r1", 1, "log.appended")).await;
    publish(&s.js, "team-a", &event("r1", 2, "node.completed")).await;
    let got = wait_deliveries(&s.receiver, 2, 30).await;
    assert_eq!(got.len(), 2, "{got:?}");

    // The receiver fails the next delivery once: retried, same delivery id, still in order.
    s.receiver.answer_next(&[500]);
    publish(&s.js, "team-a", &event("r1", 3, "node.completed")).await;
    wait_deliveries(&s.receiver, 3, 30).await;

    // The dispatcher dies; events published meanwhile wait in JetStream.
    dispatcher.abort();
    let _ = dispatcher.await;
    publish(&s.js, "team-a", &event("r1", 4, "node.completed")).await;
    publish(&s.js, "team-a", &event("r1", 5, "run.completed")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(s.receiver.deliveries().len(), 4, "delivered while stopped");
    // A pull the dead dispatcher had open may hold the next event until its ack wait (the
    // attempt timeout + 10 s) runs out.
    let dispatcher = start(&s);
    let all = wait_deliveries(&s.receiver, 5, 60).await;

    // Repeats of a delivery id carry the same event.
    for d in all.iter().filter(|d| d.status == 200) {
        let first = first_arrivals(&all)
            .into_iter()
            .find(|f| f.header(headers::DELIVERY_ID) == d.header(headers::DELIVERY_ID))
            .unwrap();
        assert_eq!(
            verified(d, &secret)["event"],
            verified(first, &secret)["event"]
        );
    }
    let ok = first_arrivals(&all);
    let seqs: Vec<u64> = ok
        .iter()
        .map(|d| verified(d, &secret)["event"]["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [0, 2, 3, 4, 5]);
    for d in &ok {
        let body = verified(d, &secret);
        assert_eq!(body["runId"], "r1");
        assert_eq!(body["workspaceId"], "team-a");
        assert_eq!(d.header(headers::WEBHOOK_ID), Some(sub.webhook_id.as_str()));
        assert_eq!(d.header(headers::SIGNATURE_ALGORITHM), Some("v1"));
        assert_eq!(
            d.header(headers::EVENT_TYPE),
            body["event"]["type"].as_str()
        );
        assert_eq!(
            d.header(headers::DELIVERY_ID).unwrap(),
            webhook::delivery_id(&sub.webhook_id, body["event"]["eventId"].as_str().unwrap())
        );
        assert!(
            d.header("user-agent")
                .unwrap()
                .starts_with(webhook::USER_AGENT_PREFIX)
        );
        assert_eq!(d.header("content-type"), Some("application/json"));
    }
    // The event is the log's document, byte for byte.
    assert_eq!(
        verified(ok[0], &secret)["event"],
        event("r1", 0, "run.started")
    );
    // The failed attempt and its retry carry the same delivery id.
    let failed: Vec<&Delivery> = all.iter().filter(|d| d.status == 500).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        failed[0].header(headers::DELIVERY_ID),
        ok[2].header(headers::DELIVERY_ID)
    );

    // Unsubscribed: the record and the consumer go, nothing more arrives.
    Store::open(&s.js, &s.cfg.webhooks.bucket)
        .await
        .unwrap()
        .delete("team-a", &sub.webhook_id)
        .await
        .unwrap();
    dispatch::delete_consumer(&s.js, &s.cfg, &sub.webhook_id)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    publish(&s.js, "team-a", &event("r2", 0, "run.started")).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(s.receiver.deliveries().len(), all.len());
    dispatcher.abort();

    // The logs name the subscription by its fingerprint, never by its secret.
    let logs = String::from_utf8_lossy(&captured_logs().lock().unwrap()).to_string();
    assert!(logs.contains(&sub.secret_fingerprint), "{logs}");
    assert!(logs.contains("retrying"), "{logs}");
    assert!(!logs.contains(&secret));
}

#[tokio::test]
async fn a_refusing_receiver_is_not_retried_and_the_breaker_opens() {
    let s = setup_with(|w| {
        w.breaker_threshold = 2;
    })
    .await;
    let (_sub, _secret) = subscribe(
        &s,
        "team-a",
        "wh_000000000000000000000002",
        &["run.started"],
    )
    .await;
    let dispatcher = start(&s);
    // Two refusals (4xx: not retried) open the circuit; the next deliveries are skipped.
    s.receiver.answer_next(&[400, 410]);
    for i in 0..4 {
        publish(&s.js, "team-a", &event(&format!("r{i}"), 0, "run.started")).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        statuses(&s.receiver),
        [400, 410],
        "one attempt per refused delivery, then nothing while the circuit is open"
    );
    dispatcher.abort();
}

#[tokio::test]
async fn a_target_outside_the_egress_policy_is_refused_at_delivery() {
    let s = setup().await;
    // Registered while allowed; the allow list no longer names it.
    let (_sub, _) = subscribe(
        &s,
        "team-a",
        "wh_000000000000000000000003",
        &["run.started"],
    )
    .await;
    let mut cfg = (*s.cfg).clone();
    cfg.webhooks.allow_hosts.clear();
    let s = Setup {
        cfg: Arc::new(cfg),
        ..s
    };
    let dispatcher = start(&s);
    publish(&s.js, "team-a", &event("r1", 0, "run.started")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(s.receiver.deliveries().is_empty());
    dispatcher.abort();
}

#[tokio::test]
async fn the_breaker_is_shared_so_a_restarted_dispatcher_keeps_the_circuit_open() {
    let s = setup_with(|w| {
        w.breaker_threshold = 2;
    })
    .await;
    let (_sub, _) = subscribe(
        &s,
        "team-a",
        "wh_000000000000000000000004",
        &["run.started"],
    )
    .await;
    // One failure on the first dispatcher, which then stops (a replica restarted or lost
    // its pod) ...
    s.receiver.answer_next(&[400, 400]);
    let first = start(&s);
    publish(&s.js, "team-a", &event("r1", 0, "run.started")).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while s.receiver.deliveries().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no first attempt");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.abort();
    // ... the second failure on another dispatcher opens the one shared circuit: its
    // deliveries after that are skipped. A breaker per process would have counted 1 here
    // and tried the third event.
    let second = start(&s);
    for i in 2..5 {
        publish(&s.js, "team-a", &event(&format!("r{i}"), 0, "run.started")).await;
    }
    // The stopped dispatcher may have had the next event handed to it: JetStream gives it to
    // the second one after the ack wait (attempt timeout + 10 s).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while s.receiver.deliveries().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "no second attempt");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(statuses(&s.receiver), [400, 400]);
    second.abort();
}

#[tokio::test]
async fn a_subscription_fails_after_its_failure_limit_and_a_new_registration_delivers() {
    let s = setup_with(|w| {
        // The circuit never opens here: only the failure limit stops deliveries.
        w.breaker_threshold = 100;
        w.failure_limit = 3;
    })
    .await;
    let id = "wh_000000000000000000000005";
    let (sub, secret) = subscribe(&s, "team-a", id, &["run.started"]).await;
    s.receiver.answer_next(&[400, 404, 400]);
    let dispatcher = start(&s);
    for i in 0..5 {
        publish(&s.js, "team-a", &event(&format!("r{i}"), 0, "run.started")).await;
    }
    let store = Store::open(&s.js, &s.cfg.webhooks.bucket).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let failed = loop {
        let now = store.get("team-a", id).await.unwrap().unwrap();
        if now.status == SubscriptionStatus::Failed {
            break now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not marked failed; deliveries {:?}",
            s.receiver.deliveries().len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(failed.failed_at.is_some());
    // Its consumer is deleted: nothing is kept for it any more.
    let stream = s.js.get_stream(STREAM).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while stream
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>(&dispatch::consumer_name(id))
        .await
        .is_ok()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "consumer still there"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    publish(&s.js, "team-a", &event("r9", 0, "run.started")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        statuses(&s.receiver),
        [400, 404, 400],
        "three failed deliveries, then nothing"
    );
    // Registering again (a new id, a new secret) delivers.
    let again = "wh_000000000000000000000006";
    let (_, secret2) = subscribe(&s, "team-a", again, &["run.started"]).await;
    publish(&s.js, "team-a", &event("r10", 0, "run.started")).await;
    let got = wait_deliveries(&s.receiver, 1, 15).await;
    let body = verified(first_arrivals(&got)[0], &secret2);
    assert_eq!(body["runId"], "r10");
    // The failed subscription's record says why, and never holds the secret.
    let record = serde_json::to_string(&failed).unwrap();
    assert!(!record.contains(&secret), "{record}");
    let logs = String::from_utf8_lossy(&captured_logs().lock().unwrap()).to_string();
    assert!(logs.contains("register it again to resume"), "{logs}");
    assert!(!logs.contains(&secret) && !logs.contains(&secret2));
    let _ = sub;
    dispatcher.abort();
}
