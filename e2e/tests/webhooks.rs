//! Webhooks end to end (docs/webhooks.md): the chart installed with a receiver this test
//! runs allowed through `webhooks.allowHosts` (it listens on 127.0.0.1) and its CA in
//! `webhooks.caBundle`; a subscription registered over REST with a ServiceAccount token; a
//! run whose provider call is held while the operator pod is deleted. The receiver must get
//! every event of the run — each delivery id once at least, each id's body the same, first
//! arrivals in sequence order, every signature valid — and a delivery it answered 500 must
//! come again (same id) and succeed.

mod common;
#[allow(dead_code)]
#[path = "webui/kit.rs"]
mod kit;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use futures::StreamExt as _;
use openwop_e2e::webhook_receiver::{Delivery, Receiver};
use openwop_protocol::schema::EVENT_TYPES;
use openwop_protocol::webhook::{self, headers};
use serde_json::{Value, json};

/// How long the run's provider call is held: the operator is deleted and back within it.
const HOLD_MS: u64 = 25_000;

/// The run's log as the stream holds it.
async fn run_log(c: &openwop_e2e::Cluster, ns: &str, run_id: &str) -> Vec<Value> {
    let js = async_nats::jetstream::new(async_nats::connect(&c.nats_url).await.unwrap());
    let log = openwop_nats::reader::RunLog::open(
        &js,
        openwop_protocol::run::subjects::DEFAULT_STREAM,
        vec![openwop_protocol::run::subjects::events_subject(ns, run_id)],
        openwop_nats::reader::From::Start,
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    if log.pending_at_start == 0 {
        return out;
    }
    let mut msgs = Box::pin(log.messages());
    while let Some(m) = msgs.next().await {
        let m = m.unwrap();
        out.push(serde_json::from_slice(&m.payload).unwrap());
        if m.pending == 0 {
            break;
        }
    }
    out
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn a_run_is_delivered_signed_in_order_across_an_operator_restart_and_a_500_is_retried() {
    let c = cluster().await;
    if c.skip_unless_local(
        "webhooks",
        "a receiver on 127.0.0.1 the operator reaches (pods share the host network)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(dir.path()).await.unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &receiver.ca_pem).unwrap();
    target_bin("debug", "openwop-operator");
    target_bin("debug", "openwop-worker");
    kit::install_with(
        &c,
        &[
            "--set".into(),
            "webhooks.allowHosts[0]=127.0.0.1".into(),
            "--set-file".into(),
            format!("webhooks.caBundle={}", ca.display()),
        ],
    );
    let base = kit::base_url();
    let caps: Value = wait_for(
        Duration::from_secs(120),
        "discovery advertising webhooks",
        || {
            let url = format!("{base}/.well-known/openwop");
            async move {
                let (code, _, body) = kit::http("GET", &url, &[], None);
                let v: Value = serde_json::from_str(&body).ok()?;
                (code == 200 && v["webhooks"]["supported"] == true).then_some(v)
            }
        },
    )
    .await;
    assert_eq!(caps["webhooks"]["signatureAlgorithms"], json!(["v1"]));

    let ns = namespace(&c.client, "j-wh").await;
    let rules = format!(
        "{}  - apiGroups: [openwop.dev]\n    resources: [webhooks]\n    verbs: [create, delete]\n",
        kit::TEAM_RULES
    );
    let token = kit::sa_with_role(&c, &ns, "team", &rules);
    let auth = format!("Authorization: Bearer {token}");
    let (code, _, body) = kit::http(
        "POST",
        &format!("{base}/v1/webhooks"),
        &[&auth, "Content-Type: application/json"],
        Some(&json!({"url": receiver.url("/openwop"), "events": EVENT_TYPES}).to_string()),
    );
    assert_eq!(code, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    let webhook_id = created["webhookId"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();

    // The first delivery is answered 500: it must come again and succeed.
    receiver.answer_next(&[500]);
    let wf = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "slow"},
        "spec": {"id": "slow", "name": "slow", "version": "1", "nodes": [{"id": "q",
            "typeId": "core.ai.callPrompt",
            "config": {"provider": "mock", "prompt": "plan", "envelopeType": "vendor.acme.plan"}}]}});
    kit::apply(&c, &ns, &wf.to_string());
    let run = json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "victim"},
        "spec": {"workflowRef": {"name": "slow"}, "timeoutSeconds": 300,
            "providerMocks": {"q": {"responses": [{"stopReason": "stop", "delayMs": HOLD_MS,
                "content": r#"{"type": "vendor.acme.plan", "payload": {"region": "eu"}}"#}]}}}});
    kit::apply(&c, &ns, &run.to_string());
    let run_id = kit::run_id(&c, &ns, "victim").await;

    // Once deliveries flow (the 500 and its retry among them), delete the operator pod while
    // the provider call is still held.
    wait_for(
        Duration::from_secs(90),
        "the retried first delivery",
        || async {
            let d = receiver.deliveries();
            (d.iter().any(|d| d.status == 500) && d.iter().any(|d| d.status == 200)).then_some(())
        },
    )
    .await;
    let old = operator_pods(&c).await;
    force_delete_operator_pods(&c, &old);
    let log_now = run_log(&c, &ns, &run_id).await;
    assert!(
        !log_now.iter().any(|e| e["type"] == "run.completed"),
        "the run ended before the operator was deleted (raise HOLD_MS)"
    );
    kit::wait_run(&c, &ns, "victim", "completed", 240).await;
    let log = run_log(&c, &ns, &run_id).await;
    for e in &log {
        assert!(
            EVENT_TYPES.contains(&e["type"].as_str().unwrap()),
            "the run emitted {}, a type not in protocol::schema::EVENT_TYPES (which the subscription asks for)",
            e["type"]
        );
    }
    let want: BTreeMap<String, &Value> = log
        .iter()
        .map(|e| {
            (
                webhook::delivery_id(&webhook_id, e["eventId"].as_str().unwrap()),
                e,
            )
        })
        .collect();
    let all = wait_for(
        Duration::from_secs(180),
        "a successful delivery of every event",
        || async {
            let d = receiver.deliveries();
            want.keys()
                .all(|id| {
                    d.iter()
                        .any(|x| x.status == 200 && x.header(headers::DELIVERY_ID) == Some(id))
                })
                .then_some(d)
        },
    )
    .await;

    let mut first: Vec<(String, u64)> = Vec::new();
    let mut seen: BTreeMap<String, Value> = BTreeMap::new();
    for d in all.iter().filter(|d: &&Delivery| d.status == 200) {
        webhook::verify(
            &secret,
            d.header(headers::SIGNATURE_ALGORITHM),
            d.header(headers::TIMESTAMP).unwrap(),
            d.header(headers::SIGNATURE).unwrap(),
            &d.body,
            now(),
        )
        .unwrap_or_else(|e| panic!("a delivery does not verify: {e}"));
        let body: Value = serde_json::from_slice(&d.body).unwrap();
        let id = d.header(headers::DELIVERY_ID).unwrap().to_owned();
        let logged = want
            .get(&id)
            .unwrap_or_else(|| panic!("delivery {id} of no event of the run: {body}"));
        assert_eq!(&&body["event"], logged, "the body carries the logged event");
        assert_eq!(body["runId"], run_id.as_str());
        assert_eq!(body["workspaceId"], ns.as_str());
        assert_eq!(d.header(headers::WEBHOOK_ID), Some(webhook_id.as_str()));
        match seen.get(&id) {
            Some(prev) => assert_eq!(prev, &body["event"], "a redelivery changed the event"),
            None => {
                seen.insert(id.clone(), body["event"].clone());
                first.push((id, body["event"]["sequence"].as_u64().unwrap()));
            }
        }
    }
    let seqs: Vec<u64> = first.iter().map(|(_, s)| *s).collect();
    let expect: Vec<u64> = (0..log.len() as u64).collect();
    assert_eq!(
        seqs, expect,
        "first arrivals in sequence order, none missing"
    );
    // The 500 was the first event's first attempt; its retry carried the same id.
    let failed: Vec<&Delivery> = all.iter().filter(|d| d.status == 500).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        failed[0].header(headers::DELIVERY_ID),
        Some(first[0].0.as_str())
    );

    let (code, _, body) = kit::http(
        "DELETE",
        &format!("{base}/v1/webhooks/{webhook_id}"),
        &[&auth],
        None,
    );
    assert_eq!(code, 204, "{body}");
    delete_namespace(&c.client, &ns).await;
}
