//! Discovery over real HTTP on 127.0.0.1: headers, ETag / If-None-Match, schema 404s.

use openwop_operator::config::OperatorConfig;
use openwop_operator::discovery::{self, DiscoveryContent, DiscoveryState};
use openwop_protocol::workflow_check::NodeRegistry;
use serde_json::Value;

async fn serve(state: DiscoveryState) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, discovery::router(state))
            .await
            .unwrap()
    });
    format!("http://{addr}")
}

fn loaded_state() -> DiscoveryState {
    let cfg = OperatorConfig::default();
    let doc = discovery::capabilities(&cfg, &NodeRegistry::builtin()).expect("document builds");
    let state = DiscoveryState::new(&cfg.discovery.cache_control);
    state.set(DiscoveryContent::from_configmap(
        &discovery::discovery_configmap(&cfg, &doc),
    ));
    state
}

#[tokio::test]
async fn well_known_has_cache_headers_and_honours_if_none_match() {
    let base = serve(loaded_state()).await;
    let http = reqwest::Client::new();
    let r = http
        .get(format!("{base}/.well-known/openwop"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.headers()["cache-control"], "public, max-age=60");
    let etag = r.headers()["etag"].to_str().unwrap().to_owned();
    assert!(etag.starts_with('"') && etag.ends_with('"'));
    let doc: Value = r.json().await.unwrap();
    assert_eq!(
        doc["protocolVersion"],
        openwop_protocol::capabilities::PROTOCOL_VERSION
    );
    // What the route serves passes the spec's own capabilities schema (the vendored
    // excerpt, `schemas/official/README.md`), the root and its `capabilities` mirror.
    let official = openwop_protocol::schema::compile(
        &serde_json::from_str(include_str!(
            "../../schemas/official/capabilities.schema.json"
        ))
        .unwrap(),
    )
    .unwrap();
    for v in [&doc, &doc["capabilities"]] {
        if let Err(issues) = official.validate(v) {
            panic!("the served discovery document is refused by the official schema: {issues:?}");
        }
    }
    assert_eq!(doc["protocolVersion"], "1.0");
    assert_eq!(doc["preferredVersion"], "1.0");
    let again = http
        .get(format!("{base}/.well-known/openwop"))
        .header("If-None-Match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    assert_eq!(again.headers()["etag"].to_str().unwrap(), etag);
    assert!(again.bytes().await.unwrap().is_empty());
    let other = http
        .get(format!("{base}/.well-known/openwop"))
        .header("If-None-Match", "\"stale\"")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
}

#[tokio::test]
async fn envelope_schemas_are_served_with_schema_media_type_and_json_404() {
    let base = serve(loaded_state()).await;
    let r = reqwest::get(format!(
        "{base}/schemas/envelopes/clarification.request.schema.json"
    ))
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/schema+json");
    assert_eq!(r.headers()["cache-control"], "public, max-age=300");
    let s: Value = r.json().await.unwrap();
    assert_eq!(
        &s,
        openwop_protocol::schema::kind_payload_schema("clarification.request").unwrap()
    );
    let missing = reqwest::get(format!("{base}/schemas/envelopes/vendor.x.y.schema.json"))
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.headers()["content-type"], "application/json");
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"], "unknown_envelope_kind");
}

#[tokio::test]
async fn admin_override_is_served_verbatim_and_unloaded_is_503() {
    let state = DiscoveryState::new("public, max-age=60");
    let base = serve(state.clone()).await;
    let r = reqwest::get(format!("{base}/.well-known/openwop"))
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
    let text = "{\"protocolVersion\":\"1.1.x\",  \"custom\":true}";
    cm.data = Some([("capabilities.json".to_string(), text.to_string())].into());
    state.set(DiscoveryContent::from_configmap(&cm));
    let r = reqwest::get(format!("{base}/.well-known/openwop"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), text);
}
