//! Step 1 — parse: bytes / text → JSON value, bounded.
//!
//! The direct parse is the fast path: one pass of `serde_json` with a custom
//! visitor that refuses duplicate keys, nesting deeper than
//! [`InputLimits::max_depth`] and strings longer than
//! [`InputLimits::max_string_len`] while the value is built. Input longer than
//! [`InputLimits::max_bytes`] is refused before any parsing. Only when the text
//! is not valid JSON does the step fall back to lenient recovery
//! (`crate::recovery::parse_lenient`: fences, brace walking, JSON repair); the
//! recovery path is reported so the retry router can emit
//! `envelope.recovery.applied`. Limit violations are never "recovered".

use crate::text::escape_pointer;
use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Value};

use crate::outcome::{Code, Detail, Outcome};
use crate::recovery::{self, RecoveryPath};

use super::shape::{self, Doc, META_SLOT, Meta, MetaFields, Top};

/// Bounds on untrusted input. All limits are inclusive maxima.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputLimits {
    /// Largest accepted input, in bytes. Default 1 MiB.
    pub max_bytes: usize,
    /// Deepest nesting of arrays/objects (the root object is depth 1). Default 64.
    /// `serde_json` stops at 128 levels regardless, so larger values act as 128.
    pub max_depth: usize,
    /// Longest string value or object key, in bytes. Default 256 KiB.
    pub max_string_len: usize,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_bytes: 1024 * 1024,
            max_depth: 64,
            max_string_len: 256 * 1024,
        }
    }
}

/// A recovery that happened inside the parse step (never set for a direct parse).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    pub path: RecoveryPath,
    /// Where the recovered document starts in the model text.
    pub byte_offset: Option<usize>,
}

impl Recovery {
    /// The wire name for `envelope.recovery.applied.path`.
    pub fn path_name(&self) -> crate::events::RecoveryPathName {
        use crate::events::RecoveryPathName as N;
        match self.path {
            RecoveryPath::Direct => N::Direct,
            RecoveryPath::Jsonrepair => N::Jsonrepair,
            RecoveryPath::MarkdownFence => N::MarkdownFence,
            RecoveryPath::BraceWalker => N::BraceWalker,
        }
    }
}

/// Why the strict parse stopped, with the JSON Pointer of the place.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Problem {
    TooDeep,
    StringTooLong,
    DuplicateKey,
}

#[derive(Default)]
struct Trace {
    problem: Option<Problem>,
    /// Path segments collected while the error unwinds (innermost first).
    segments: Vec<String>,
}

struct Seed<'a> {
    depth: usize,
    limits: &'a InputLimits,
    trace: &'a RefCell<Trace>,
}

impl<'a> Seed<'a> {
    fn child(&self) -> Seed<'a> {
        Seed {
            depth: self.depth + 1,
            limits: self.limits,
            trace: self.trace,
        }
    }
    fn fail<E: de::Error>(&self, p: Problem) -> E {
        self.trace.borrow_mut().problem = Some(p);
        E::custom("limit")
    }
    fn at<E>(&self, segment: impl FnOnce() -> String, e: E) -> E {
        let mut t = self.trace.borrow_mut();
        if t.problem.is_some() {
            t.segments.push(segment());
        }
        e
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        if v.len() > self.limits.max_string_len {
            return Err(self.fail(Problem::StringTooLong));
        }
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        if v.len() > self.limits.max_string_len {
            return Err(self.fail(Problem::StringTooLong));
        }
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        if self.depth >= self.limits.max_depth {
            return Err(self.fail(Problem::TooDeep));
        }
        let mut out = Vec::new();
        loop {
            let index = out.len();
            match seq.next_element_seed(self.child()) {
                Ok(Some(v)) => out.push(v),
                Ok(None) => break,
                Err(e) => return Err(self.at(|| index.to_string(), e)),
            }
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        if self.depth >= self.limits.max_depth {
            return Err(self.fail(Problem::TooDeep));
        }
        let mut out = Map::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key.len() > self.limits.max_string_len {
                return Err(self.fail(Problem::StringTooLong));
            }
            // One hash per key: the entry both detects a duplicate and takes the value.
            match out.entry(key.into_owned()) {
                Entry::Occupied(o) => {
                    let e = self.fail(Problem::DuplicateKey);
                    return Err(self.at(|| escape_pointer(o.key()), e));
                }
                Entry::Vacant(slot) => match map.next_value_seed(self.child()) {
                    Ok(v) => {
                        slot.insert(v);
                    }
                    Err(e) => return Err(self.at(|| escape_pointer(slot.key()), e)),
                },
            }
        }
        Ok(Value::Object(out))
    }
}

/// An object key, borrowed from the input when it has no escapes.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(k) => k,
            Key::Owned(k) => k,
        }
    }
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key<'de>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Key<'de>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key::Owned(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
        Ok(Key::Owned(v))
    }
}

/// Non-object values go through [`Seed`] unchanged, wrapped as `$wrap`.
macro_rules! delegate_non_objects {
    ($wrap:path) => {
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Visitor::visit_bool(self.0, v).map($wrap)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Visitor::visit_i64(self.0, v).map($wrap)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Visitor::visit_u64(self.0, v).map($wrap)
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Visitor::visit_f64(self.0, v).map($wrap)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Visitor::visit_str(self.0, v).map($wrap)
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            Visitor::visit_string(self.0, v).map($wrap)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Visitor::visit_unit(self.0).map($wrap)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Visitor::visit_none(self.0).map($wrap)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            Visitor::visit_seq(self.0, seq).map($wrap)
        }
    };
}

/// The envelope's root: an object is split into `shape::Top` as it is read.
struct EnvelopeSeed<'a>(Seed<'a>);

impl<'de> DeserializeSeed<'de> for EnvelopeSeed<'_> {
    type Value = Doc;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Doc, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EnvelopeSeed<'_> {
    type Value = Doc;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    delegate_non_objects!(Doc::Other);

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let s = &self.0;
        if s.depth >= s.limits.max_depth {
            return Err(s.fail(Problem::TooDeep));
        }
        let mut top = Top::default();
        let mut names = UnknownNames::default();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let key = key.as_str();
            if key.len() > s.limits.max_string_len {
                return Err(s.fail(Problem::StringTooLong));
            }
            let slot = shape::top_level_slot(key);
            let taken = match slot {
                Some(META_SLOT) => top.meta.is_some(),
                Some(i) => top.fields[i].is_some(),
                None => !names.add(key),
            };
            if taken {
                let e = s.fail(Problem::DuplicateKey);
                return Err(s.at(|| escape_pointer(key), e));
            }
            let read = match slot {
                Some(META_SLOT) => map
                    .next_value_seed(MetaSeed(s.child()))
                    .map(|m| top.meta = Some(m)),
                Some(i) => map
                    .next_value_seed(s.child())
                    .map(|v| top.fields[i] = Some(v)),
                // Parsed for its limits and duplicates, then dropped: only the name is reported.
                None => map.next_value_seed(s.child()).map(drop),
            };
            if let Err(e) = read {
                return Err(s.at(|| escape_pointer(key), e));
            }
        }
        top.unknown = names.into_names();
        Ok(Doc::Envelope(top))
    }
}

/// `meta`: an object is split into `shape::MetaFields` as it is read.
struct MetaSeed<'a>(Seed<'a>);

impl<'de> DeserializeSeed<'de> for MetaSeed<'_> {
    type Value = Meta;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Meta, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetaSeed<'_> {
    type Value = Meta;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    delegate_non_objects!(Meta::Other);

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Meta, A::Error> {
        let s = &self.0;
        if s.depth >= s.limits.max_depth {
            return Err(s.fail(Problem::TooDeep));
        }
        let mut meta = MetaFields::default();
        let mut names = UnknownNames::default();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let key = key.as_str();
            if key.len() > s.limits.max_string_len {
                return Err(s.fail(Problem::StringTooLong));
            }
            let slot = shape::meta_slot(key);
            let taken = match slot {
                Some(i) => meta.fields[i].is_some(),
                None => !names.add(key),
            };
            if taken {
                let e = s.fail(Problem::DuplicateKey);
                return Err(s.at(|| escape_pointer(key), e));
            }
            let read = match slot {
                Some(i) => map
                    .next_value_seed(s.child())
                    .map(|v| meta.fields[i] = Some(v)),
                None => map.next_value_seed(s.child()).map(drop),
            };
            if let Err(e) = read {
                return Err(s.at(|| escape_pointer(key), e));
            }
        }
        meta.unknown = names.into_names();
        Ok(Meta::Object(meta))
    }
}

/// Unknown member names in document order, with a set for the duplicate
/// check (a hostile document may hold many; nothing is allocated without one).
#[derive(Default)]
struct UnknownNames {
    order: Vec<String>,
    seen: HashSet<String>,
}

impl UnknownNames {
    /// False when the name was already seen.
    fn add(&mut self, name: &str) -> bool {
        if !self.seen.insert(name.to_owned()) {
            return false;
        }
        self.order.push(name.to_owned());
        true
    }
    fn into_names(self) -> Vec<String> {
        self.order
    }
}

/// Why the direct parse failed.
#[derive(Debug, PartialEq)]
pub(crate) enum DirectError {
    /// A limit or duplicate key: refuse, never try to recover.
    Refuse(Outcome),
    /// Not JSON at this position (1-based line / column): lenient recovery may help.
    Syntax {
        line: usize,
        column: usize,
        eof: bool,
    },
}

fn shape(
    sentence: impl fmt::Display,
    pointer: String,
    keyword: &str,
    message: impl Into<String>,
) -> Outcome {
    Outcome::invalid(
        Code::InvalidEnvelopeShape,
        sentence,
        vec![Detail::new(pointer, keyword, message)],
    )
}

/// The limit refusal for an oversized input.
pub(crate) fn too_large(len: usize, limits: &InputLimits) -> Outcome {
    shape(
        format!(
            "input is {len} bytes, over the {} byte limit",
            limits.max_bytes
        ),
        String::new(),
        "maxBytes",
        format!(
            "emit a smaller envelope (at most {} bytes) or raise the parse limit max_bytes",
            limits.max_bytes
        ),
    )
}

/// The refusal for bytes that are not UTF-8.
pub(crate) fn not_utf8(valid_up_to: usize) -> Outcome {
    shape(
        format!("input is not valid UTF-8 (first invalid byte at offset {valid_up_to})"),
        String::new(),
        "encoding",
        "an envelope must be UTF-8 encoded JSON text; re-encode the input as UTF-8",
    )
}

/// The direct (strict) parse: the fast path.
pub(crate) fn parse_direct(text: &str, limits: &InputLimits) -> Result<Value, DirectError> {
    drive(text, limits, |seed, de| seed.deserialize(de))
}

/// [`parse_direct`] for an envelope: the same checks and errors, but the top
/// level and `meta` come out split into their known members (`shape::Doc`),
/// so neither needs a map or key strings.
pub(crate) fn parse_envelope(text: &str, limits: &InputLimits) -> Result<Doc, DirectError> {
    drive(text, limits, |seed, de| EnvelopeSeed(seed).deserialize(de))
}

/// Runs one bounded parse of `text` and turns a failure into its refusal.
fn drive<T>(
    text: &str,
    limits: &InputLimits,
    parse: impl FnOnce(
        Seed<'_>,
        &mut serde_json::Deserializer<serde_json::de::StrRead<'_>>,
    ) -> Result<T, serde_json::Error>,
) -> Result<T, DirectError> {
    if text.len() > limits.max_bytes {
        return Err(DirectError::Refuse(too_large(text.len(), limits)));
    }
    let trace = RefCell::new(Trace::default());
    let mut de = serde_json::Deserializer::from_str(text);
    let result = parse(
        Seed {
            depth: 0,
            limits,
            trace: &trace,
        },
        &mut de,
    )
    .and_then(|v| de.end().map(|()| v));
    match result {
        Ok(v) => Ok(v),
        Err(e) => {
            let trace = trace.into_inner();
            let pointer: String = trace
                .segments
                .iter()
                .rev()
                .map(|s| format!("/{s}"))
                .collect();
            let msg = e.to_string();
            let refusal = match trace.problem {
                Some(Problem::TooDeep) => Some(too_deep(pointer, limits)),
                Some(Problem::StringTooLong) => Some(shape(
                    format!(
                        "a string or key is longer than the {} byte limit",
                        limits.max_string_len
                    ),
                    pointer,
                    "maxStringLength",
                    format!(
                        "shorten the value to at most {} bytes or raise the parse limit max_string_len",
                        limits.max_string_len
                    ),
                )),
                Some(Problem::DuplicateKey) => Some(shape(
                    "an object has the same key twice",
                    pointer,
                    "duplicateKey",
                    "JSON objects in an envelope must not repeat a key (which value is meant is ambiguous); keep one",
                )),
                // serde_json's own guard against deep nesting (128 levels).
                None if msg.starts_with("recursion limit exceeded") => {
                    Some(too_deep(String::new(), limits))
                }
                None if msg.starts_with("number out of range") => Some(shape(
                    format!(
                        "a number is out of range (line {}, column {})",
                        e.line(),
                        e.column()
                    ),
                    String::new(),
                    "number",
                    "numbers must fit a 64-bit float; send very large values as strings",
                )),
                None => None,
            };
            match refusal {
                Some(o) => Err(DirectError::Refuse(o)),
                None => Err(DirectError::Syntax {
                    line: e.line(),
                    column: e.column(),
                    eof: e.is_eof(),
                }),
            }
        }
    }
}

fn too_deep(pointer: String, limits: &InputLimits) -> Outcome {
    shape(
        format!(
            "nesting is deeper than the limit of {} levels",
            limits.max_depth
        ),
        pointer,
        "maxDepth",
        format!(
            "flatten the envelope to at most {} nested arrays/objects or raise the parse limit max_depth",
            limits.max_depth
        ),
    )
}

/// The refusal when neither the direct parse nor lenient recovery found JSON.
pub(crate) fn not_json(line: usize, column: usize, eof: bool, recovery_said: &str) -> Outcome {
    let what = if eof {
        "the JSON text ends early (truncated?)"
    } else {
        "syntax error"
    };
    shape(
        format!(
            "input is not a JSON envelope: {what} at line {line}, column {column}; lenient recovery: {recovery_said}"
        ),
        String::new(),
        "json",
        "emit exactly one JSON object with the envelope fields (type, correlationId, payload, meta)",
    )
}

/// Lenient recovery for text that is not JSON as it stands (markdown fences,
/// prose around the object, repairable JSON), via [`crate::recovery`]. On
/// failure, the recovery module's own (input-free) explanation is returned.
pub(crate) fn parse_recovered(
    text: &str,
    limits: &InputLimits,
) -> Result<(Value, Recovery), String> {
    let rl = recovery::ParseLimits {
        max_bytes: limits.max_bytes,
        max_depth: limits.max_depth,
    };
    match recovery::parse_lenient(text, &rl) {
        Ok(r) => Ok((
            r.value,
            Recovery {
                path: r.path,
                byte_offset: r.byte_offset,
            },
        )),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str, limits: &InputLimits) -> Outcome {
        match parse_direct(text, limits) {
            Err(DirectError::Refuse(o)) => o,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn detail(o: &Outcome) -> &Detail {
        match o {
            Outcome::Invalid(i) => &i.details[0],
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_valid_json_preserving_order() {
        let v = parse_direct(
            r#"{"b":1,"a":[true,null,"x",-1,1.5]}"#,
            &InputLimits::default(),
        )
        .unwrap();
        assert_eq!(
            v.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["b", "a"]
        );
        assert_eq!(v["a"][4], 1.5);
    }

    #[test]
    fn duplicate_key_is_refused_with_its_pointer() {
        let o = refused(r#"{"meta":{"a/b":1,"a/b":2}}"#, &InputLimits::default());
        assert_eq!(o.code(), Some(Code::InvalidEnvelopeShape));
        assert_eq!(detail(&o).instance_path, "/meta/a~1b");
        assert_eq!(detail(&o).keyword.as_deref(), Some("duplicateKey"));
    }

    #[test]
    fn depth_limit_is_configurable_and_located() {
        let limits = InputLimits {
            max_depth: 3,
            ..InputLimits::default()
        };
        assert!(parse_direct(r#"{"a":{"b":1}}"#, &limits).is_ok());
        let o = refused(r#"{"a":[{"b":[1]}]}"#, &limits);
        assert_eq!(detail(&o).instance_path, "/a/0/b");
        assert!(o.message().unwrap().contains("3 levels"));
    }

    #[test]
    fn hundred_thousand_deep_nesting_is_refused_without_overflow() {
        let text = "[".repeat(100_000) + &"]".repeat(100_000);
        let limits = InputLimits {
            max_bytes: usize::MAX,
            ..InputLimits::default()
        };
        let o = refused(&text, &limits);
        assert_eq!(detail(&o).keyword.as_deref(), Some("maxDepth"));
        // Even when our own limit is raised past serde_json's guard.
        let o = refused(
            &text,
            &InputLimits {
                max_depth: 1_000_000,
                ..limits
            },
        );
        assert_eq!(detail(&o).keyword.as_deref(), Some("maxDepth"));
    }

    #[test]
    fn size_and_string_limits() {
        let big = format!("{{\"a\":\"{}\"}}", "x".repeat(50 * 1024 * 1024));
        let o = refused(&big, &InputLimits::default());
        assert_eq!(detail(&o).keyword.as_deref(), Some("maxBytes"));
        let limits = InputLimits {
            max_string_len: 4,
            ..InputLimits::default()
        };
        let o = refused(r#"{"k":["abcde"]}"#, &limits);
        assert_eq!(detail(&o).instance_path, "/k/0");
        let o = refused(r#"{"abcde":1}"#, &limits);
        assert_eq!(detail(&o).keyword.as_deref(), Some("maxStringLength"));
    }

    #[test]
    fn out_of_range_number_is_specific() {
        let o = refused(r#"{"n":1e400}"#, &InputLimits::default());
        assert_eq!(detail(&o).keyword.as_deref(), Some("number"));
    }

    #[test]
    fn syntax_errors_are_left_to_recovery() {
        assert!(matches!(
            parse_direct("```json\n{}\n```", &InputLimits::default()),
            Err(DirectError::Syntax {
                line: 1,
                eof: false,
                ..
            })
        ));
        assert!(matches!(
            parse_direct(r#"{"a":"#, &InputLimits::default()),
            Err(DirectError::Syntax { eof: true, .. })
        ));
        assert!(matches!(
            parse_direct("{} trailing", &InputLimits::default()),
            Err(DirectError::Syntax { .. })
        ));
    }

    #[test]
    fn envelope_parse_agrees_with_the_value_parse() {
        let tight = InputLimits {
            max_depth: 2,
            max_string_len: 8,
            ..InputLimits::default()
        };
        let texts = [
            r#"{"type":"error","correlationId":"c","payload":{"a":[1]},"meta":{"source":"user","ts":"t"}}"#,
            r#"{"x":1,"type":"error","y":{"z":2},"meta":{"q":1,"ts":"t","r":[]}}"#,
            r#"{"meta":"nope","partial":{"isPartial":true}}"#,
            r#"{"ty\u0070e":"error","me\u0074a":{"s\u006Furce":"user"}}"#,
            r#"[1,{"type":"error"}]"#,
            r#""text""#,
            "12",
            "null",
            r#"{"type":"a","type":"b"}"#,
            r#"{"meta":{},"meta":{}}"#,
            r#"{"meta":{"ts":"a","ts":"b"}}"#,
            r#"{"meta":{"a/b":1,"a/b":2}}"#,
            r#"{"x~y":1,"x~y":2}"#,
            r#"{"payload":{"k":1,"k":2}}"#,
            r#"{"payload":{"deep":[[1]]}}"#,
            r#"{"meta":{"rendering":{"a":1}}}"#,
            r#"{"unknownkeylongerthan8":1}"#,
            r#"{"meta":{"ts":"a string longer than 8"}}"#,
            r#"{"type":"error"} trailing"#,
            r#"{"type":"#,
        ];
        for text in texts {
            for limits in [InputLimits::default(), tight] {
                let split = parse_envelope(text, &limits);
                let value = parse_direct(text, &limits).map(Doc::from_value);
                assert_eq!(split, value, "{text} with {limits:?}");
            }
        }
        let Ok(Doc::Envelope(top)) = parse_envelope(texts[1], &InputLimits::default()) else {
            panic!()
        };
        assert_eq!(top.unknown, ["x", "y"]);
        assert_eq!(
            refused(texts[10], &InputLimits::default()),
            match parse_envelope(texts[10], &InputLimits::default()) {
                Err(DirectError::Refuse(o)) => o,
                other => panic!("{other:?}"),
            }
        );
    }

    #[test]
    fn messages_do_not_echo_input() {
        let o = refused(
            r#"{"sk-SECRETSECRET":1,"sk-SECRETSECRET":2}"#,
            &InputLimits::default(),
        );
        let text = serde_json::to_string(&o).unwrap();
        // The pointer names the key (it is the location); the sentence and message do not.
        assert_eq!(text.matches("sk-SECRETSECRET").count(), 1, "{text}");
    }
}
