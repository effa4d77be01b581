//! SR-1 redaction: keys, nesting, overlaps, `secret:` tokens, counts, property test.

use std::borrow::Cow;

use openwop_protocol::redact::{MIN_SECRET_CHARS, Redactor, RedactorError, UNKNOWN_REF_MARKER};
use proptest::prelude::*;
use serde_json::{Value, json};

const CANARY: &str = "sk-reasoning-canary-DO-NOT-LEAK-30a1";
const CANARY_ID: &str = "byok-reasoning-fixture-001";

fn redactor(pairs: &[(&str, &str)]) -> Redactor {
    Redactor::new(pairs.iter().map(|(i, v)| (i.to_string(), v.to_string())))
}

#[test]
fn clean_string_is_borrowed_and_counts_zero() {
    let r = redactor(&[(CANARY_ID, CANARY)]);
    let (out, n) = r.redact_str("The input was empty; I declined to fabricate a response.");
    assert!(matches!(out, Cow::Borrowed(_)));
    assert_eq!(n, 0);
}

#[test]
fn canary_in_reasoning_is_replaced_with_marker() {
    let r = redactor(&[(CANARY_ID, CANARY)]);
    let mut payload = json!({
        "reasoning": format!("I noticed the credential {CANARY} was embedded."),
        "code": "validation_failed",
        "message": "Refusing."
    });
    let n = r.redact_value(&mut payload);
    assert_eq!(n, 1);
    let text = payload.to_string();
    assert!(!text.contains(CANARY));
    assert_eq!(
        payload["reasoning"],
        format!("I noticed the credential [REDACTED:{CANARY_ID}] was embedded.")
    );
}

#[test]
fn every_occurrence_counts_once() {
    let r = redactor(&[(CANARY_ID, CANARY)]);
    let mut payload = json!({
        "reasoning": format!("The token {CANARY} appeared in two places."),
        "message": format!("Original tool output: {CANARY}{CANARY}")
    });
    assert_eq!(r.redact_value(&mut payload), 3);
    assert!(!payload.to_string().contains(CANARY));
}

#[test]
fn walks_nested_open_bags_arrays_and_keys() {
    let r = redactor(&[("k1", "hunter2hunter2")]);
    let mut payload = json!({
        "questions": [{"id": "q1", "question": "ok?", "context": {
            "deep": [[{"x": "a hunter2hunter2 b"}]],
            "hunter2hunter2": "value under a secret key",
            "prefix-hunter2hunter2-suffix": 1
        }}]
    });
    let n = r.redact_value(&mut payload);
    assert_eq!(n, 3);
    let ctx = &payload["questions"][0]["context"];
    assert_eq!(ctx["deep"][0][0]["x"], "a [REDACTED:k1] b");
    assert_eq!(ctx["[REDACTED:k1]"], "value under a secret key");
    assert_eq!(ctx["prefix-[REDACTED:k1]-suffix"], 1);
    assert!(!payload.to_string().contains("hunter2hunter2"));
}

#[test]
fn colliding_redacted_keys_keep_both_members() {
    let r = redactor(&[("k", "alpha-secret-1"), ("k", "alpha-secret-2")]);
    let mut payload = json!({"alpha-secret-1": 1, "alpha-secret-2": 2});
    assert_eq!(r.redact_value(&mut payload), 2);
    let obj = payload.as_object().unwrap();
    assert_eq!(obj.len(), 2);
    assert_eq!(obj["[REDACTED:k]"], 1);
    assert_eq!(obj["[REDACTED:k]~1"], 2);
}

#[test]
fn longer_secret_containing_shorter_redacts_whole() {
    let r = redactor(&[("short", "abcdefgh"), ("long", "xxabcdefghyy")]);
    let (out, n) = r.redact_str("<xxabcdefghyy> and abcdefgh");
    assert_eq!(out, "<[REDACTED:long]> and [REDACTED:short]");
    assert_eq!(n, 2);
}

#[test]
fn partially_overlapping_secrets_leave_no_fragment() {
    let r = redactor(&[("a", "11112222"), ("b", "22223333")]);
    let (out, n) = r.redact_str("x111122223333y");
    assert_eq!(out, "x[REDACTED:a][REDACTED:b]y");
    assert_eq!(n, 2);
}

#[test]
fn duplicate_values_are_one_occurrence() {
    let r = redactor(&[("first", "same-value-123"), ("second", "same-value-123")]);
    let (out, n) = r.redact_str("same-value-123");
    assert_eq!(n, 1);
    assert!(out == "[REDACTED:first]" || out == "[REDACTED:second]");
}

#[test]
fn secret_tokens_known_and_unknown() {
    let r = redactor(&[("OPENAI_API_KEY", "sk-live-0123456789")]);
    let (out, n) = r.redact_str("use secret:OPENAI_API_KEY. Also secret:tenant/other-key, done");
    assert_eq!(
        out,
        format!("use [REDACTED:OPENAI_API_KEY]. Also {UNKNOWN_REF_MARKER}, done")
    );
    assert_eq!(n, 2);
}

#[test]
fn bare_prefix_is_not_a_token() {
    let r = Redactor::default();
    let (out, n) = r.redact_str("the secret: is safe, secret:!");
    assert_eq!(out, "the secret: is safe, secret:!");
    assert_eq!(n, 0);
}

#[test]
fn token_overlapping_a_value_is_merged() {
    // The token stops at '!', the value continues past it: nothing may remain.
    let r = redactor(&[("v", "abcd!efgh12")]);
    let (out, n) = r.redact_str("secret:xxabcd!efgh12 tail");
    assert!(!out.contains("efgh12"), "{out}");
    assert_eq!(out, format!("{UNKNOWN_REF_MARKER}[REDACTED:v] tail"));
    assert_eq!(n, 2);
}

#[test]
fn unicode_secret_and_boundaries() {
    let r = redactor(&[("u", "pässwörd-ü-日本")]);
    let (out, n) = r.redact_str("→pässwörd-ü-日本←");
    assert_eq!(out, "→[REDACTED:u]←");
    assert_eq!(n, 1);
}

#[test]
fn short_secrets_are_reported_or_refused() {
    let r = redactor(&[("tiny", "abc"), ("ok", "long-enough-value")]);
    assert_eq!(r.unredactable_secret_ids(), ["tiny".to_string()]);
    assert_eq!(r.secret_count(), 1);
    let (out, _) = r.redact_str("abc long-enough-value");
    assert_eq!(out, "abc [REDACTED:ok]");

    let err = Redactor::try_new([("tiny".to_string(), "abc".to_string())]).unwrap_err();
    assert_eq!(
        err,
        RedactorError::SecretTooShort {
            secret_id: "tiny".into(),
            min: MIN_SECRET_CHARS
        }
    );
    assert!(!err.to_string().contains("abc\""));
    assert_eq!(
        Redactor::try_new([(String::new(), "long-enough".to_string())]).unwrap_err(),
        RedactorError::EmptySecretId
    );
}

#[test]
fn marker_never_reintroduces_a_secret() {
    // The id equals the value: the natural marker would contain the secret.
    let r = redactor(&[("abcdefghij", "abcdefghij")]);
    let (out, n) = r.redact_str("k=abcdefghij");
    assert!(!out.contains("abcdefghij"), "{out}");
    assert_eq!(n, 1);
    // A secret that spells the start of every marker.
    let r = redactor(&[("x", "[REDACTED:")]);
    let (out, _) = r.redact_str("a [REDACTED: b");
    assert!(!out.contains("[REDACTED:"), "{out}");
}

#[test]
fn debug_never_prints_values() {
    let r = redactor(&[("id", "super-secret-value-42")]);
    let dbg = format!("{r:?}");
    assert!(!dbg.contains("super-secret-value-42"));
    assert!(dbg.contains("Redactor"));
}

#[test]
fn deep_value_does_not_overflow() {
    let r = redactor(&[("d", "deep-secret-value")]);
    let mut v = json!("deep-secret-value");
    for _ in 0..50_000 {
        v = Value::Array(vec![v]);
    }
    assert_eq!(r.redact_value(&mut v), 1);
    let mut cur = &v;
    while let Value::Array(a) = cur {
        cur = &a[0];
    }
    assert_eq!(cur, "[REDACTED:d]");
    // Drop iteratively: serde_json's recursive Drop would overflow at this depth.
    let mut stack = vec![v];
    while let Some(x) = stack.pop() {
        if let Value::Array(a) = x {
            stack.extend(a);
        }
    }
}

#[test]
fn redact_in_place_for_span_attributes_and_errors() {
    let r = redactor(&[("id", "super-secret-value-42")]);
    let mut attr = "calling with super-secret-value-42".to_string();
    assert_eq!(r.redact_in_place(&mut attr), 1);
    assert_eq!(attr, "calling with [REDACTED:id]");
    let mut clean = "nothing here".to_string();
    assert_eq!(r.redact_in_place(&mut clean), 0);
}

#[test]
fn hundreds_of_secrets() {
    let secrets: Vec<(String, String)> = (0..500)
        .map(|i| (format!("s{i}"), format!("secret-value-{i:05}-zz")))
        .collect();
    let r = Redactor::new(secrets.clone());
    let text: String = secrets.iter().map(|(_, v)| format!("{v} ")).collect();
    let (out, n) = r.redact_str(&text);
    assert_eq!(n, 500);
    for (_, v) in &secrets {
        assert!(!out.contains(v.as_str()));
    }
}

// ---- property test: no secret value survives anywhere ----

fn arb_secret() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[ -~]{8,24}").unwrap()
}

fn arb_json(secrets: Vec<String>) -> impl Strategy<Value = Value> {
    let secrets2 = secrets.clone();
    let text = (
        proptest::string::string_regex("[ -~]{0,12}").unwrap(),
        proptest::sample::select(secrets),
        proptest::string::string_regex("[ -~]{0,12}").unwrap(),
        any::<bool>(),
    )
        .prop_map(|(a, s, b, with)| if with { format!("{a}{s}{b}") } else { a + &b });
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        text.prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        let key = (
            proptest::sample::select(secrets2.clone()),
            proptest::string::string_regex("[a-z]{0,4}").unwrap(),
            any::<bool>(),
        )
            .prop_map(|(s, k, with)| if with { format!("{k}{s}") } else { k });
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((key, inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn leaves(value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(a) => stack.extend(a.iter()),
            Value::Object(m) => {
                out.extend(m.keys().cloned());
                stack.extend(m.values());
            }
            _ => {}
        }
    }
    out
}

fn case() -> impl Strategy<Value = (Vec<String>, Value)> {
    proptest::collection::vec(arb_secret(), 1..6)
        .prop_flat_map(|secrets| (Just(secrets.clone()), arb_json(secrets)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_secret_survives((secrets, mut value) in case()) {
        let r = Redactor::new(secrets.iter().enumerate().map(|(i, s)| (format!("id{i}"), s.clone())));
        let before = value.clone();
        let leaves_before = leaves(&before);
        let n = r.redact_value(&mut value);
        for s in &secrets {
            for leaf in &leaves(&value) {
                prop_assert!(!leaf.contains(s.as_str()), "secret survived in {:?}", leaf);
            }
        }
        let had_secret = secrets
            .iter()
            .any(|s| leaves_before.iter().any(|l| l.contains(s.as_str())));
        if had_secret {
            prop_assert!(n > 0);
        }
        if n == 0 {
            prop_assert_eq!(value, before);
        }
    }

    #[test]
    fn no_secret_survives_in_plain_strings(
        secrets in proptest::collection::vec(arb_secret(), 1..8),
        parts in proptest::collection::vec((proptest::string::string_regex("[ -~]{0,6}").unwrap(), 0usize..8), 0..12),
    ) {
        let r = Redactor::new(secrets.iter().enumerate().map(|(i, s)| (format!("id{i}"), s.clone())));
        let text: String = parts.iter().map(|(p, i)| format!("{p}{}", secrets[i % secrets.len()])).collect();
        let (out, _) = r.redact_str(&text);
        for s in &secrets {
            prop_assert!(!out.contains(s.as_str()));
        }
    }
}
