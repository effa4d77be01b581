//! Provider response bodies are read with the host profile's bound.

mod common;

use std::collections::BTreeMap;

use common::*;
use openwop_providers::testing::{Reply, ScriptedLlm, Step};
use serde_json::{Value, json};

const LIMIT: u64 = 64 * 1024;

fn run_with_reply(name: &str, reply: Reply) -> (ScriptedLlm, Vec<Value>) {
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start(BTreeMap::from([(
        "fake-a".to_string(),
        vec![Step {
            transient: vec![],
            reply,
        }],
    )]));
    let workflow = json!({"id": "limits", "nodes": [
        {"id": "p", "typeId": "core.ai.callPrompt", "config": {"provider": "openai-compatible",
         "model": "fake-a", "prompt": "note it", "envelopeType": "vendor.acme.note"}}]});
    let f = RunFiles::new(name, &format!("run-{name}"), workflow, json!({}), json!({}));
    f.set_snapshot_field(
        "providers",
        json!([{"provider": "openai-compatible", "mountAs": "env", "envName": "OPENWOP_TEST_NO_KEY"}]),
    );
    f.set_snapshot_field("host", json!({"maxProviderResponseBytes": LIMIT}));
    let (code, stderr) = f.run_with(&nats.url(), |c| {
        c.env("OPENWOP_PROVIDER_OPENAI_COMPATIBLE_BASE_URL", &llm.base);
    });
    assert_eq!(code, 0, "{stderr}");
    let events = read_raw(&nats.url(), &f.subject());
    (llm, events)
}

fn failure(events: &[Value]) -> &Value {
    &events
        .iter()
        .find(|e| e["type"] == "run.failed")
        .expect("run.failed")["payload"]["error"]
}

#[test]
fn a_body_over_the_limit_fails_the_call_naming_the_limit() {
    for (name, chunked) in [("sized", false), ("chunked", true)] {
        let (llm, events) = run_with_reply(
            name,
            Reply::Oversized {
                bytes: 4 * LIMIT as usize,
                chunked,
            },
        );
        let e = failure(&events);
        assert_eq!(e["code"], "provider_error", "{name}: {e}");
        let msg = e["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!("larger than {LIMIT} bytes"))
                && msg.contains("limits.maxProviderResponseBytes"),
            "{name}: {msg}"
        );
        assert_eq!(llm.requests(), 1, "{name}: a too-large body is not retried");
    }
    // Just under the limit is read whole and reaches the router (whose parse then fails).
    let (_, events) = run_with_reply(
        "under",
        Reply::Oversized {
            bytes: LIMIT as usize - 16,
            chunked: true,
        },
    );
    let record = events
        .iter()
        .find_map(|e| e["payload"]["fields"].get("providerResponse"))
        .expect("the response was read and recorded");
    assert!(record["response"]["text"].as_str().unwrap().len() > (LIMIT as usize) / 2);
}
