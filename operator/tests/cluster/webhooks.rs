//! `POST /v1/webhooks` and `DELETE /v1/webhooks/{id}` over real HTTP against the operator
//! process, tokens and RBAC checked by the mini-cluster's kube-apiserver, subscriptions in its
//! nats-server: every error code of the endpoints (the `webhook-negative` scenario's among
//! them), tenant isolation, the per-tenant limit, discovery's `webhooks` block, and one signed
//! delivery to a receiver the test runs. The secret appears in the 201 body and nowhere in the
//! operator's log.

use openwop_e2e::webhook_receiver::Receiver;
use openwop_protocol::webhook::{self, headers};
use reqwest::StatusCode;
use sha2::Digest as _;

use super::*;

const WEBHOOK_RULES: &str =
    "  - apiGroups: [openwop.dev]\n    resources: [webhooks]\n    verbs: [create, delete]\n";

/// ServiceAccount `sa` in `ns` with `rules` (Role rules as YAML, may be empty); its token.
fn token_with(c: &openwop_e2e::Cluster, ns: &str, sa: &str, rules: &str) -> String {
    let yaml = if rules.is_empty() {
        format!("apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {sa}}}\n")
    } else {
        format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {sa}}}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: {sa}}}\nrules:\n{rules}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {sa}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {sa}}}\nsubjects:\n  - {{kind: ServiceAccount, name: {sa}}}\n"
        )
    };
    let file = std::env::temp_dir().join(format!("{ns}-{sa}.yaml"));
    std::fs::write(&file, yaml).unwrap();
    let (ok, out) = kubectl(
        &c.kubeconfig,
        &["apply", "-n", ns, "-f", file.to_str().unwrap()],
    );
    let _ = std::fs::remove_file(&file);
    assert!(ok, "apply {sa}: {out}");
    let (ok, token) = kubectl(
        &c.kubeconfig,
        &["create", "token", sa, "-n", ns, "--duration", "1h"],
    );
    assert!(ok, "create token: {token}");
    token.trim().to_owned()
}

async fn error_of(r: reqwest::Response) -> (StatusCode, String, Value) {
    let status = r.status();
    let body: Value = r.json().await.expect("a JSON error body");
    assert!(
        body.as_object()
            .unwrap()
            .keys()
            .all(|k| ["error", "message", "details"].contains(&k.as_str())),
        "{body}"
    );
    (
        status,
        body["error"].as_str().unwrap_or("").to_owned(),
        body,
    )
}

#[tokio::test]
async fn webhook_endpoints_answer_every_code_isolate_tenants_and_deliver_signed() {
    let Some(c) =
        cluster("webhook_endpoints_answer_every_code_isolate_tenants_and_deliver_signed").await
    else {
        return;
    };
    ensure_crds(&c.client).await;
    let js = events_jetstream(&c).await;
    let ns = Namespace::new(&c, "opi-wh").await;
    let other = Namespace::new(&c, "opi-wh-other").await;
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(dir.path()).await.unwrap();
    let key_file = dir.path().join("signing-key");
    std::fs::write(&key_file, "k".repeat(48)).unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &receiver.ca_pem).unwrap();
    let bucket = format!("wh-{}", ns.name);
    let extra = format!(
        "events: {{natsUrl: '{}', consumer: 'test-{}', flushIntervalMs: 100}}\n\
         webhooks: {{enabled: true, signingKeyFile: '{}', caFile: '{}', bucket: '{bucket}', \
         allowHosts: ['127.0.0.1'], maxPerTenant: 2}}\n",
        c.nats_url,
        ns.name,
        key_file.display(),
        ca_file.display()
    );
    // The operator serves `ns` only (watchNamespace); the stranger's own namespace is `other`.
    let op = Operator::start(&c, &ns.name, "opi-wh", &extra);
    let http = reqwest::Client::new();
    let team = token_with(&c, &ns.name, "team", WEBHOOK_RULES);
    let nobody = token_with(&c, &ns.name, "nobody", "");
    let stranger = token_with(&c, &other.name, "stranger", WEBHOOK_RULES);

    // Discovery advertises webhooks once the operator is up.
    let caps: Value = wait_for(60, "discovery", || async {
        let r = http.get(op.url("/.well-known/openwop")).send().await.ok()?;
        (r.status() == StatusCode::OK).then_some(())?;
        r.json().await.ok()
    })
    .await;
    assert_eq!(
        caps["webhooks"],
        json!({"supported": true, "signatureAlgorithms": ["v1"]})
    );
    assert_eq!(caps["capabilities"]["webhooks"], caps["webhooks"]);

    let post = |token: Option<&str>, body: Value| {
        let mut r = http.post(op.url("/v1/webhooks")).json(&body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    let good = json!({"url": receiver.url("/hook"), "events": ["run.completed"]});

    // 401 without a token.
    let (st, code, _) = error_of(post(None, good.clone()).await.unwrap()).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::UNAUTHORIZED, "unauthenticated")
    );
    // The webhook-negative scenario's legs.
    for (body, want, field) in [
        (
            json!({"url": "http://127.0.0.1:65535/", "events": ["run.completed"]}),
            "webhook_url_rejected",
            "url",
        ),
        (
            json!({"url": "https://169.254.169.254/latest", "events": ["run.completed"]}),
            "webhook_url_rejected",
            "url",
        ),
        (
            json!({"url": "not a url", "events": ["run.completed"]}),
            "validation_error",
            "url",
        ),
        (
            json!({"eventTypes": ["run.completed"]}),
            "validation_error",
            "eventTypes",
        ),
        (
            json!({"url": receiver.url("/hook")}),
            "validation_error",
            "events",
        ),
        (
            json!({"url": receiver.url("/hook"), "events": []}),
            "validation_error",
            "events",
        ),
        (
            json!({"url": receiver.url("/hook"), "events": ["run.completed"], "secret": "mine"}),
            "validation_error",
            "secret",
        ),
    ] {
        let (st, code, b) = error_of(post(Some(&team), body.clone()).await.unwrap()).await;
        assert_eq!(
            (st, code.as_str()),
            (StatusCode::BAD_REQUEST, want),
            "{body} → {b}"
        );
        assert_eq!(b["details"]["field"], field, "{b}");
    }
    // A tenant this operator does not serve (the stranger's own namespace): 400 naming it.
    let (st, code, _) = error_of(post(Some(&stranger), good.clone()).await.unwrap()).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::BAD_REQUEST, "validation_error")
    );
    // 403: authenticated, no RBAC on webhooks here; a stranger naming this tenant likewise.
    let (st, code, b) = error_of(post(Some(&nobody), good.clone()).await.unwrap()).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::FORBIDDEN, "forbidden"),
        "{b}"
    );
    assert_eq!(b["details"]["resource"], "webhooks");
    let mut named = good.clone();
    named["tenantId"] = json!(ns.name);
    let (st, _, _) = error_of(post(Some(&stranger), named).await.unwrap()).await;
    assert_eq!(st, StatusCode::FORBIDDEN);

    // A name is resolved at registration too: one that resolves to nothing is refused.
    let (st, code, b) = error_of(
        post(
            Some(&team),
            json!({"url": "https://no-such-host.invalid/hook", "events": ["run.completed"]}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::BAD_REQUEST, "webhook_url_rejected"),
        "{b}"
    );

    // 201: the secret once, with its fingerprint.
    let r = post(Some(&team), good.clone()).await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let created: Value = r.json().await.unwrap();
    let id = created["webhookId"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(webhook::is_webhook_id(&id), "{created}");
    assert_eq!(secret.len(), 64);
    assert_eq!(
        created["secretFingerprint"],
        hex::encode(sha2::Sha256::digest(secret.as_bytes()))[..8]
    );
    assert_eq!(created.as_object().unwrap().len(), 3, "{created}");

    // A run.completed of this tenant's run is delivered, signed with that secret.
    js.publish(
        openwop_protocol::run::subjects::events_subject(&ns.name, "run-uid-1"),
        serde_json::to_vec(
            &json!({"eventId": "e-9", "runId": "run-uid-1", "type": "run.completed",
            "sequence": 9, "timestamp": "2026-11-26T00:00:00Z", "payload": {}}),
        )
        .unwrap()
        .into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let d = wait_for(60, "the delivery", || async {
        receiver.deliveries().into_iter().next()
    })
    .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    webhook::verify(
        &secret,
        d.header(headers::SIGNATURE_ALGORITHM),
        d.header(headers::TIMESTAMP).unwrap(),
        d.header(headers::SIGNATURE).unwrap(),
        &d.body,
        now,
    )
    .unwrap();
    let body: Value = serde_json::from_slice(&d.body).unwrap();
    assert_eq!(
        (body["runId"].as_str(), body["workspaceId"].as_str()),
        (Some("run-uid-1"), Some(ns.name.as_str()))
    );

    // 409 beyond webhooks.maxPerTenant (2).
    let second: Value = post(Some(&team), good.clone())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (st, code, b) = error_of(post(Some(&team), good.clone()).await.unwrap()).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::CONFLICT, "webhook_limit_reached"),
        "{b}"
    );

    // DELETE: 404 for an id never issued and for a missing one, 403 without RBAC, 204, then 404.
    let delete = |token: &str, path: String| http.delete(op.url(&path)).bearer_auth(token).send();
    let (st, code, _) = error_of(
        delete(&team, "/v1/webhooks/wh-does-not-exist".into())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::NOT_FOUND, "subscription_not_found")
    );
    let (st, code, _) = error_of(
        delete(&team, "/v1/webhooks/wh_0123456789abcdef01234567".into())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::NOT_FOUND, "subscription_not_found")
    );
    let (st, _, _) = error_of(delete(&nobody, format!("/v1/webhooks/{id}")).await.unwrap()).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    let (st, _, _) = error_of(
        delete(&stranger, format!("/v1/webhooks/{id}?tenantId={}", ns.name))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    for sub in [id.as_str(), second["webhookId"].as_str().unwrap()] {
        let r = delete(&team, format!("/v1/webhooks/{sub}?tenantId={}", ns.name))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
    }
    let (st, code, _) = error_of(delete(&team, format!("/v1/webhooks/{id}")).await.unwrap()).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::NOT_FOUND, "subscription_not_found")
    );

    // The secret is in the 201 body only: never in the operator's log.
    let log = op.log_text();
    assert!(
        log.contains(created["secretFingerprint"].as_str().unwrap()),
        "{log}"
    );
    assert!(!log.contains(&secret));
    let _ = js.delete_key_value(&bucket).await;
}
