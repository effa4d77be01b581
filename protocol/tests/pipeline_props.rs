//! Property tests of the pipeline: (a) no secret survives anywhere in the
//! outcome or the events; (b) arbitrary input never panics.

use openwop_protocol::events::EventFactory;
use openwop_protocol::pipeline::{
    Context, DedupStore, HostPolicy, accept_bytes, accept_text, accept_value,
};
use openwop_protocol::redact::Redactor;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const TS: &str = "2026-05-18T10:00:00Z";

/// Secret values: `sk-` + 8..20 upper-case letters/digits, so they cannot occur in
/// the pipeline's own fixed text (lower-case names, hex ids, the timestamp).
fn secret() -> impl Strategy<Value = String> {
    "sk-[A-Z0-9]{8,20}"
}

/// Arbitrary JSON in which some strings and keys embed one of the secrets.
fn json_with(secrets: Vec<String>) -> impl Strategy<Value = Value> {
    let text = (any::<String>(), any::<prop::sample::Index>(), any::<bool>()).prop_map(
        move |(t, i, embed)| {
            if embed {
                format!("{t}{}{t}", secrets[i.index(secrets.len())])
            } else {
                t
            }
        },
    );
    let key = text.clone();
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        text.prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn case() -> impl Strategy<Value = (Vec<String>, Value, String, bool)> {
    prop::collection::vec(secret(), 1..6).prop_flat_map(|secrets| {
        let kinds = prop_oneof![
            Just("vendor.acme.doc.create".to_owned()),
            Just("error".to_owned()),
            Just("vendor.x".to_owned())
        ];
        (
            Just(secrets.clone()),
            json_with(secrets),
            kinds,
            any::<bool>(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_secret_survives((secrets, payload, kind, message_carries_secret) in case()) {
        let redactor = Redactor::new(secrets.iter().enumerate().map(|(i, v)| (format!("s{i}"), v.clone())));
        let host = HostPolicy { supported_envelopes: Some(vec!["vendor.acme.doc.create".into()]), ..HostPolicy::default() };
        let ctx = Context::new(&host, &redactor, "node-1", TS);
        let payload = if kind == "error" {
            let msg = if message_carries_secret { format!("failed with {}", secrets[0]) } else { "failed".into() };
            json!({"code": "x", "message": msg, "details": {"raw": payload}})
        } else {
            payload
        };
        let env = json!({"type": kind, "schemaVersion": 1, "correlationId": format!("c:{}", secrets[0]),
            "payload": payload, "meta": {"source": "ai-generation", "ts": TS}});
        let mut store = DedupStore::new();
        let mut events = EventFactory::new("run-1", 0);
        for _ in 0..2 {
            let p = accept_text(&env.to_string(), &ctx, &mut store, &mut events);
            let all = format!("{}{}{:?}", serde_json::to_string(&p.outcome).unwrap(), serde_json::to_string(&p.events).unwrap(), p.kind);
            for s in &secrets {
                prop_assert!(!all.contains(s.as_str()), "secret leaked: {all}");
            }
        }
        let stored = serde_json::to_string(&store).unwrap();
        for s in &secrets {
            prop_assert!(!stored.contains(s.as_str()));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let host = HostPolicy::default();
        let redactor = Redactor::default();
        let ctx = Context::new(&host, &redactor, "n", TS);
        let p = accept_bytes(&bytes, &ctx, &mut DedupStore::new(), &mut EventFactory::new("r", 0));
        prop_assert!(!p.outcome.is_accepted() || p.kind.is_some());
    }

    #[test]
    fn json_like_text_never_panics(text in r#"[\{\}\[\]",:a-z0-9 \\`\-]{0,200}"#) {
        let host = HostPolicy::default();
        let redactor = Redactor::default();
        let ctx = Context::new(&host, &redactor, "n", TS);
        let _ = accept_text(&text, &ctx, &mut DedupStore::new(), &mut EventFactory::new("r", 0));
    }

    /// The text entry point parses the envelope's top level and `meta` split
    /// into their members; the value entry point splits a parsed value. Both
    /// must give the same result, whatever sits in those places.
    #[test]
    fn text_and_value_entry_points_agree(
        doc in json_with(vec!["sk-AAAAAAAA".into()]),
        field in prop::sample::select(vec!["type", "correlationId", "payload", "meta", "schemaVersion",
            "partial", "envelopeId", "nodeId", "extra", "meta.source", "meta.ts", "meta.rendering",
            "meta.contentTrust", "meta.label", "meta.extra"]),
    ) {
        let host = HostPolicy::default();
        let redactor = Redactor::new([("k".to_owned(), "sk-AAAAAAAA".to_owned())]);
        let ctx = Context::new(&host, &redactor, "n", TS);
        let mut env = json!({"type": "clarification.request", "correlationId": "c",
            "payload": {"questions": [{"id": "q", "question": "?"}]}, "meta": {"source": "user", "ts": TS}});
        match field.strip_prefix("meta.") {
            Some(m) => env["meta"][m] = doc,
            None => env[field] = doc,
        }
        let text = accept_text(&env.to_string(), &ctx, &mut DedupStore::new(), &mut EventFactory::new("r", 0));
        let value = accept_value(env, None, &ctx, &mut DedupStore::new(), &mut EventFactory::new("r", 0));
        prop_assert_eq!(text, value);
    }

    #[test]
    fn arbitrary_documents_never_panic(
        doc in json_with(vec!["sk-AAAAAAAA".into()]),
        field in prop::sample::select(vec!["type", "correlationId", "payload", "meta", "schemaVersion", "partial", "envelopeId", "nodeId"]),
    ) {
        let host = HostPolicy::default();
        let redactor = Redactor::default();
        let ctx = Context::new(&host, &redactor, "n", TS);
        let mut env = json!({"type": "clarification.request", "correlationId": "c",
            "payload": {"questions": [{"id": "q", "question": "?"}]}, "meta": {"source": "user", "ts": TS}});
        env[field] = doc.clone();
        let _ = accept_value(env, None, &ctx, &mut DedupStore::new(), &mut EventFactory::new("r", 0));
        let _ = accept_value(doc, None, &ctx, &mut DedupStore::new(), &mut EventFactory::new("r", 0));
    }
}
