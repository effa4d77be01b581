//! Lenient parse recovery: each path, offsets, truncation, bounds, adversarial input.

use openwop_protocol::recovery::{
    MAX_DEPTH_CEILING, ParseFailure, ParseLimits, RecoveryPath, RepairKind, parse_lenient,
};
use proptest::prelude::*;
use serde_json::json;

fn parse(text: &str) -> Result<openwop_protocol::recovery::Recovered, ParseFailure> {
    parse_lenient(text, &ParseLimits::default())
}

#[test]
fn direct_json_has_no_offset() {
    let r = parse("  {\"type\": \"error\", \"payload\": {}}\n").unwrap();
    assert_eq!(r.path, RecoveryPath::Direct);
    assert_eq!(r.byte_offset, None);
    assert!(r.repairs.is_empty());
    assert_eq!(r.value["type"], "error");
    assert!(!r.path.is_recovery());
}

#[test]
fn markdown_fence_reports_content_offset() {
    let text = "Here you go:\n```json\n{\"a\": 1}\n```\nThanks!";
    let r = parse(text).unwrap();
    assert_eq!(r.path, RecoveryPath::MarkdownFence);
    assert_eq!(r.value, json!({"a": 1}));
    let off = r.byte_offset.unwrap();
    assert_eq!(&text[off..off + 1], "{");
    assert_eq!(off, text.find('{').unwrap());
}

#[test]
fn untagged_fence_and_skipped_non_json_fence() {
    let r = parse("```\n[1,2]\n```").unwrap();
    assert_eq!(r.path, RecoveryPath::MarkdownFence);
    assert_eq!(r.value, json!([1, 2]));
    let text = "```python\nprint('x')\n```\n```JSON\n{\"b\": true}\n```";
    let r = parse(text).unwrap();
    assert_eq!(r.path, RecoveryPath::MarkdownFence);
    assert_eq!(r.value, json!({"b": true}));
}

#[test]
fn brace_walker_skips_prose_and_stray_quotes() {
    let text = "He said \"sure\" and {here} is it: {\"k\": \"a } \\\" ] b\"} - hope that helps";
    let r = parse(text).unwrap();
    assert_eq!(r.path, RecoveryPath::BraceWalker);
    assert_eq!(r.value, json!({"k": "a } \" ] b"}));
    assert_eq!(r.byte_offset, Some(text.find("{\"k\"").unwrap()));
}

#[test]
fn brace_walker_prefers_objects_over_arrays() {
    let text = "See note [1]. Result: {\"ok\": true}";
    let r = parse(text).unwrap();
    assert_eq!(r.path, RecoveryPath::BraceWalker);
    assert_eq!(r.value, json!({"ok": true}));
}

#[test]
fn brace_walker_ignores_nested_of_failed_outer() {
    // The outer object is balanced but invalid; its inner object must not be returned.
    let text = "{\"a\": {\"b\": 1}, oops oops}";
    let err = parse(text).unwrap_err();
    assert!(matches!(err, ParseFailure::Invalid { .. }), "{err:?}");
}

#[test]
fn repair_trailing_commas_comments_quotes_keys() {
    let text = "Sure!\n{\n  // the answer\n  type: 'error', /* kind */\n  \"payload\": {'msg': 'it\\'s \"fine\"', list: [1, 2,],},\n}\nBye";
    let r = parse(text).unwrap();
    assert_eq!(r.path, RecoveryPath::Jsonrepair);
    assert_eq!(
        r.value,
        json!({"type": "error", "payload": {"msg": "it's \"fine\"", "list": [1, 2]}})
    );
    assert_eq!(r.byte_offset, Some(text.find('{').unwrap()));
    let kinds: Vec<_> = r.repairs.iter().map(|x| x.kind).collect();
    for k in [
        RepairKind::Comment,
        RepairKind::UnquotedKey,
        RepairKind::SingleQuotedString,
        RepairKind::TrailingComma,
    ] {
        assert!(kinds.contains(&k), "{k:?} missing from {kinds:?}");
    }
    let comment = r
        .repairs
        .iter()
        .find(|x| x.kind == RepairKind::Comment)
        .unwrap();
    assert_eq!(&text[comment.byte_offset..comment.byte_offset + 2], "//");
}

#[test]
fn repair_raw_newline_in_string() {
    let text = "{\"reasoning\": \"line one\nline two\"}";
    let r = parse(text).unwrap();
    assert_eq!(r.path, RecoveryPath::Jsonrepair);
    assert_eq!(r.value["reasoning"], "line one\nline two");
    assert_eq!(r.repairs[0].kind, RepairKind::ControlCharInString);
    assert_eq!(r.repairs[0].byte_offset, text.find('\n').unwrap());
}

#[test]
fn repair_inside_fence() {
    let text = "```json\n{\"a\": [1,],}\n```";
    let r = parse(text).unwrap();
    assert_eq!(r.path, RecoveryPath::Jsonrepair);
    assert_eq!(r.value, json!({"a": [1]}));
    assert_eq!(r.byte_offset, Some(8));
}

#[test]
fn truncated_document_is_never_completed() {
    for text in [
        "{\"type\": \"error\", \"payload\": {\"msg\": \"cut",
        "Here: {\"a\": [1, 2",
        "```json\n{\"a\": 1,\n",
        "{'a': 1, b: [1,",
    ] {
        let err = parse(text).unwrap_err();
        assert!(err.looks_truncated(), "{text:?} gave {err:?}");
        let off = err.byte_offset().unwrap();
        assert!(
            matches!(text.as_bytes()[off], b'{' | b'['),
            "{text:?} offset {off}"
        );
    }
}

#[test]
fn invalid_reports_byte_offset_without_content() {
    let text = "{\"a\": tru}";
    let err = parse(text).unwrap_err();
    match &err {
        ParseFailure::Invalid {
            byte_offset,
            reason,
        } => {
            assert!(*byte_offset <= text.len());
            assert!(!reason.contains("tru}"));
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert!(!err.to_string().contains("\"a\""));
}

#[test]
fn empty_no_json_and_too_large() {
    assert_eq!(parse("   \n ").unwrap_err(), ParseFailure::Empty);
    assert_eq!(parse("just some words").unwrap_err(), ParseFailure::NoJson);
    let limits = ParseLimits {
        max_bytes: 10,
        max_depth: 8,
    };
    assert_eq!(
        parse_lenient("{\"a\": \"0123456789\"}", &limits).unwrap_err(),
        ParseFailure::TooLarge { len: 19, limit: 10 }
    );
}

#[test]
fn depth_limit_is_enforced_with_offset() {
    let limits = ParseLimits {
        max_bytes: 1 << 20,
        max_depth: 3,
    };
    assert!(parse_lenient("[[[1]]]", &limits).is_ok());
    let err = parse_lenient("[[[[1]]]]", &limits).unwrap_err();
    assert_eq!(
        err,
        ParseFailure::TooDeep {
            byte_offset: 3,
            limit: 3
        }
    );
    // The ceiling applies even when a caller asks for more.
    let huge = ParseLimits {
        max_bytes: 1 << 20,
        max_depth: 10_000,
    };
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    assert_eq!(
        parse_lenient(&deep, &huge).unwrap_err(),
        ParseFailure::TooDeep {
            byte_offset: MAX_DEPTH_CEILING,
            limit: MAX_DEPTH_CEILING
        }
    );
}

#[test]
fn hundred_thousand_deep_nesting_does_not_overflow() {
    let limits = ParseLimits {
        max_bytes: 1 << 20,
        max_depth: 64,
    };
    let balanced = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(matches!(
        parse_lenient(&balanced, &limits),
        Err(ParseFailure::TooDeep { .. })
    ));
    let objects = "{\"a\":".repeat(100_000);
    assert!(parse_lenient(&objects, &limits).is_err());
    let prose = format!("text {} more", "{".repeat(100_000));
    assert!(parse_lenient(&prose, &limits).is_err());
    let closers = "}]".repeat(100_000);
    assert!(parse_lenient(&closers, &limits).is_err());
}

#[test]
fn scalars_parse_directly() {
    assert_eq!(parse("42").unwrap().value, json!(42));
    assert_eq!(parse("\"x\"").unwrap().path, RecoveryPath::Direct);
}

#[test]
fn wire_names() {
    assert_eq!(RecoveryPath::Direct.as_str(), "direct");
    assert_eq!(RecoveryPath::Jsonrepair.as_str(), "jsonrepair");
    assert_eq!(RecoveryPath::MarkdownFence.as_str(), "markdown-fence");
    assert_eq!(RecoveryPath::BraceWalker.as_str(), "brace-walker");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn never_panics_on_arbitrary_strings(s in "\\PC{0,200}") {
        let _ = parse(&s);
    }

    #[test]
    fn never_panics_on_json_like_noise(s in "[{}\\[\\]\"'\\\\:,/* a-z0-9\n`]{0,300}") {
        let _ = parse(&s);
    }

    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let s = String::from_utf8_lossy(&bytes);
        let _ = parse(&s);
    }

    #[test]
    fn valid_json_round_trips_through_any_wrapper(
        v in proptest::collection::btree_map("[a-z]{1,6}", "[ -~]{0,10}", 0..5),
        pre in "[a-zA-Z .!]{0,20}",
        post in "[a-zA-Z .!]{0,20}",
        fenced in any::<bool>(),
    ) {
        let doc = serde_json::to_string(&v).unwrap();
        let text = if fenced { format!("{pre}\n```json\n{doc}\n```\n{post}") } else { format!("{pre} {doc} {post}") };
        let r = parse(&text).unwrap();
        prop_assert_eq!(r.value, serde_json::to_value(&v).unwrap());
        let off = r.byte_offset.unwrap_or(text.len() - text.trim_start().len());
        prop_assert!(text[off..].starts_with('{'), "offset {} does not start the document", off);
    }
}

#[test]
fn backticks_inside_a_fenced_json_string_do_not_close_the_fence() {
    // Found by the round-trip property: a string value holding ``` inside a ```json block.
    let text = "```json\n{\"a\":\"```\"}\n```\n";
    let r = parse(text).unwrap();
    assert_eq!(r.value, serde_json::json!({"a": "```"}));
}
