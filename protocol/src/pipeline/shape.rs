//! Step 2 — shape: the closed top level and `meta` block of the envelope
//! (`schemas/ai-envelope.schema.json`), checked by hand so every problem is
//! reported at once with its JSON Pointer and a fix, without echoing values.
//! A bad `meta.ts` names ISO 8601.

use serde_json::{Map, Value};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::envelope::{
    AiEnvelope, ContentTrust, Display, EnvelopeMeta, MAX_ID_LEN, MAX_LABEL_LEN, MAX_TYPE_LEN,
    Partial, Rendering, Source,
};
use crate::outcome::{Code, Detail, Outcome};

use crate::text::{escape_pointer, json_type};

const TOP_LEVEL: [&str; 8] = [
    "type",
    "envelopeId",
    "correlationId",
    "schemaVersion",
    "nodeId",
    "payload",
    "meta",
    "partial",
];
const META: [&str; 6] = [
    "source",
    "ts",
    "contentTrust",
    "traceparent",
    "label",
    "rendering",
];
const RENDERING: [&str; 5] = ["display", "mimeType", "lang", "alt", "title"];

/// Position of `meta` in [`TOP_LEVEL`]; its members live in [`Top::meta`].
pub(crate) const META_SLOT: usize = 6;

/// The envelope document split at its closed top level and `meta` block: what
/// this step checks. The direct parse builds it as it reads (no map and no key
/// strings for the known members, see `parse`); [`Doc::from_value`] splits an
/// already-parsed value, moving the members.
// One per call, on the stack: boxing would add the allocation this type avoids.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq)]
pub(crate) enum Doc {
    Envelope(Top),
    /// Not a JSON object.
    Other(Value),
}

/// The top level: known members by position in [`TOP_LEVEL`] (the `meta` slot
/// stays empty), unknown member names in document order.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Top {
    pub(crate) fields: [Option<Value>; 8],
    pub(crate) meta: Option<Meta>,
    pub(crate) unknown: Vec<String>,
}

#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq)]
pub(crate) enum Meta {
    Object(MetaFields),
    /// `meta` is not an object.
    Other(Value),
}

/// `meta`'s known members by position in [`META`], unknown names in document order.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct MetaFields {
    pub(crate) fields: [Option<Value>; 6],
    pub(crate) unknown: Vec<String>,
}

/// Position of a top-level member name in [`TOP_LEVEL`].
pub(crate) fn top_level_slot(name: &str) -> Option<usize> {
    TOP_LEVEL.iter().position(|n| *n == name)
}

/// Position of a `meta` member name in [`META`].
pub(crate) fn meta_slot(name: &str) -> Option<usize> {
    META.iter().position(|n| *n == name)
}

impl Doc {
    pub(crate) fn from_value(value: Value) -> Doc {
        let Value::Object(map) = value else {
            return Doc::Other(value);
        };
        let mut top = Top::default();
        for (k, v) in map {
            match top_level_slot(&k) {
                Some(META_SLOT) => top.meta = Some(Meta::from_value(v)),
                Some(i) => top.fields[i] = Some(v),
                None => top.unknown.push(k),
            }
        }
        Doc::Envelope(top)
    }
}

impl Meta {
    fn from_value(value: Value) -> Meta {
        let Value::Object(map) = value else {
            return Meta::Other(value);
        };
        let mut meta = MetaFields::default();
        for (k, v) in map {
            match meta_slot(&k) {
                Some(i) => meta.fields[i] = Some(v),
                None => meta.unknown.push(k),
            }
        }
        Meta::Object(meta)
    }
}

/// Checks the document and builds the typed envelope (moving the payload, no copy).
pub(crate) fn check(doc: Doc) -> Result<AiEnvelope, Outcome> {
    let top = match doc {
        Doc::Envelope(top) => top,
        Doc::Other(other) => {
            return Err(refuse(vec![Detail::new(
                "",
                "type",
                format!(
                    "the envelope must be a JSON object, found {}; wrap the fields in {{...}}",
                    json_type(&other)
                ),
            )]));
        }
    };
    let mut d = Vec::new();
    for k in &top.unknown {
        unknown_property(
            k,
            &TOP_LEVEL,
            "",
            "remove it: the envelope top level is closed (extensions go inside payload)",
            &mut d,
        );
    }
    let [
        kind,
        envelope_id,
        correlation_id,
        schema_version,
        node_id,
        payload,
        _,
        partial,
    ] = top.fields.each_ref().map(Option::as_ref);
    string(kind, "type", "", 1, MAX_TYPE_LEN, true, &mut d);
    string(envelope_id, "envelopeId", "", 1, MAX_ID_LEN, false, &mut d);
    string(
        correlation_id,
        "correlationId",
        "",
        1,
        MAX_ID_LEN,
        true,
        &mut d,
    );
    string(node_id, "nodeId", "", 1, MAX_ID_LEN, false, &mut d);
    if let Some(v) = schema_version
        && v.as_u64().is_none_or(|n| n > u64::from(u32::MAX))
    {
        d.push(Detail::new(
            "/schemaVersion",
            "type",
            "schemaVersion must be a non-negative integer (absent means 0)",
        ));
    }
    if payload.is_none() {
        d.push(Detail::new(
            "",
            "required",
            "payload is required: add the kind's payload object",
        ));
    }
    match &top.meta {
        None => d.push(Detail::new(
            "",
            "required",
            "meta is required: add {\"source\": \"ai-generation\", \"ts\": \"<ISO 8601 UTC time>\"}",
        )),
        Some(Meta::Object(meta)) => check_meta(meta, &mut d),
        Some(Meta::Other(other)) => d.push(Detail::new("/meta", "type", format!("meta must be an object, found {}", json_type(other)))),
    }
    if let Some(p) = partial {
        check_partial(p, &mut d);
    }
    if !d.is_empty() {
        return Err(refuse(d));
    }

    // Every field was checked above, so the conversions below cannot fail;
    // the members are moved, not copied.
    let [
        kind,
        envelope_id,
        correlation_id,
        schema_version,
        node_id,
        payload,
        _,
        partial,
    ] = top.fields;
    let meta = match top.meta {
        Some(Meta::Object(m)) => build_meta(m),
        _ => build_meta(MetaFields::default()),
    };
    Ok(AiEnvelope {
        kind: kind.and_then(into_string).unwrap_or_default(),
        envelope_id: envelope_id.and_then(into_string),
        correlation_id: correlation_id.and_then(into_string).unwrap_or_default(),
        schema_version: schema_version
            .and_then(|v| v.as_u64())
            .map_or(0, |n| n as u32),
        node_id: node_id.and_then(into_string),
        payload: payload.unwrap_or(Value::Null),
        meta,
        partial: partial.and_then(|v| serde_json::from_value::<Partial>(v).ok()),
    })
}

fn refuse(details: Vec<Detail>) -> Outcome {
    let n = details.len();
    Outcome::invalid(
        Code::InvalidEnvelopeShape,
        format!(
            "the envelope does not match the AI envelope shape ({n} problem{})",
            if n == 1 { "" } else { "s" }
        ),
        details,
    )
}

fn check_meta(meta: &MetaFields, d: &mut Vec<Detail>) {
    for k in &meta.unknown {
        unknown_property(k, &META, "/meta", "remove it: meta is closed", d);
    }
    let [source, ts, content_trust, traceparent, label, rendering] =
        meta.fields.each_ref().map(Option::as_ref);
    match source {
        None => d.push(Detail::new(
            "/meta",
            "required",
            "meta.source is required: one of ai-generation, user, system",
        )),
        Some(v) if v.as_str().and_then(parse_source).is_none() => d.push(Detail::new(
            "/meta/source",
            "enum",
            "meta.source must be one of ai-generation, user, system",
        )),
        Some(_) => {}
    }
    match ts {
        None => d.push(Detail::new(
            "/meta",
            "required",
            "meta.ts is required: the ISO 8601 (RFC 3339) UTC time of emission, e.g. 2026-05-18T10:00:00Z",
        )),
        Some(v) if !v.as_str().is_some_and(is_iso8601) => d.push(Detail::new(
            "/meta/ts",
            "format",
            "meta.ts must be an ISO 8601 (RFC 3339) date-time in UTC, e.g. 2026-05-18T10:00:00Z",
        )),
        Some(_) => {}
    }
    if let Some(v) = content_trust
        && v.as_str().and_then(parse_trust).is_none()
    {
        d.push(Detail::new(
            "/meta/contentTrust",
            "enum",
            "meta.contentTrust must be trusted or untrusted",
        ));
    }
    string(traceparent, "traceparent", "/meta", 1, 512, false, d);
    string(label, "label", "/meta", 0, MAX_LABEL_LEN, false, d);
    match rendering {
        None => {}
        Some(Value::Object(r)) => {
            closed(
                r,
                &RENDERING,
                "/meta/rendering",
                "remove it: meta.rendering is closed",
                d,
            );
            if let Some(v) = r.get("display")
                && v.as_str().and_then(parse_display).is_none()
            {
                d.push(Detail::new(
                    "/meta/rendering/display",
                    "enum",
                    "meta.rendering.display must be one of markdown, code, card, image, audio, file",
                ));
            }
            for f in ["mimeType", "lang", "alt", "title"] {
                string(r.get(f), f, "/meta/rendering", 0, 1024, false, d);
            }
        }
        Some(_) => d.push(Detail::new(
            "/meta/rendering",
            "type",
            "meta.rendering must be an object",
        )),
    }
}

fn check_partial(p: &Value, d: &mut Vec<Detail>) {
    let Value::Object(m) = p else {
        d.push(Detail::new(
            "/partial",
            "type",
            "partial must be an object {isPartial, index, total}",
        ));
        return;
    };
    closed(
        m,
        &["isPartial", "index", "total"],
        "/partial",
        "remove it: partial is closed",
        d,
    );
    if !m.get("isPartial").is_some_and(Value::is_boolean) {
        d.push(Detail::new(
            "/partial/isPartial",
            "type",
            "partial.isPartial is required and must be a boolean",
        ));
    }
    if m.get("index").is_none_or(|v| v.as_u64().is_none()) {
        d.push(Detail::new(
            "/partial/index",
            "type",
            "partial.index is required and must be an integer >= 0",
        ));
    }
    if m.get("total")
        .is_none_or(|v| v.as_i64().is_none_or(|t| t < -1))
    {
        d.push(Detail::new(
            "/partial/total",
            "type",
            "partial.total is required and must be an integer >= -1 (-1 = unknown)",
        ));
    }
}

fn closed(m: &Map<String, Value>, allowed: &[&str], at: &str, fix: &str, d: &mut Vec<Detail>) {
    for k in m.keys() {
        if !allowed.contains(&k.as_str()) {
            unknown_property(k, allowed, at, fix, d);
        }
    }
}

fn unknown_property(key: &str, allowed: &[&str], at: &str, fix: &str, d: &mut Vec<Detail>) {
    d.push(Detail::new(
        format!("{at}/{}", escape_pointer(key)),
        "additionalProperties",
        format!("unknown property: {fix}; allowed: {}", allowed.join(", ")),
    ));
}

#[allow(clippy::too_many_arguments)]
fn string(
    value: Option<&Value>,
    field: &str,
    at: &str,
    min: usize,
    max: usize,
    required: bool,
    d: &mut Vec<Detail>,
) {
    // Built only for a problem report: the common (valid) case allocates nothing.
    let name = || {
        if at.is_empty() {
            field.to_owned()
        } else {
            format!("{}.{field}", at.trim_start_matches('/').replace('/', "."))
        }
    };
    match value {
        None if required => d.push(Detail::new(
            at.to_owned(),
            "required",
            format!("{} is required", name()),
        )),
        None => {}
        Some(Value::String(s)) => {
            let n = s.chars().count();
            if n < min || n > max {
                d.push(Detail::new(
                    format!("{at}/{field}"),
                    if n < min { "minLength" } else { "maxLength" },
                    format!(
                        "{} must be {min}..{max} characters long (found {n})",
                        name()
                    ),
                ));
            }
        }
        Some(other) => d.push(Detail::new(
            format!("{at}/{field}"),
            "type",
            format!("{} must be a string, found {}", name(), json_type(other)),
        )),
    }
}

fn into_string(v: Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s),
        _ => None,
    }
}

fn build_meta(m: MetaFields) -> EnvelopeMeta {
    let [source, ts, content_trust, traceparent, label, rendering] = m.fields;
    EnvelopeMeta {
        source: source
            .as_ref()
            .and_then(Value::as_str)
            .and_then(parse_source)
            .unwrap_or(Source::AiGeneration),
        ts: ts.and_then(into_string).unwrap_or_default(),
        content_trust: content_trust
            .as_ref()
            .and_then(Value::as_str)
            .and_then(parse_trust),
        traceparent: traceparent.and_then(into_string),
        label: label.and_then(into_string),
        rendering: match rendering {
            Some(Value::Object(r)) => Some(build_rendering(r)),
            _ => None,
        },
    }
}

fn build_rendering(r: Map<String, Value>) -> Rendering {
    let mut out = Rendering {
        display: None,
        mime_type: None,
        lang: None,
        alt: None,
        title: None,
    };
    for (k, v) in r {
        match k.as_str() {
            "display" => out.display = v.as_str().and_then(parse_display),
            "mimeType" => out.mime_type = into_string(v),
            "lang" => out.lang = into_string(v),
            "alt" => out.alt = into_string(v),
            "title" => out.title = into_string(v),
            _ => {}
        }
    }
    out
}

/// RFC 3339 date-time (the ISO 8601 profile the wire uses).
pub fn is_iso8601(s: &str) -> bool {
    OffsetDateTime::parse(s, &Rfc3339).is_ok()
}

fn parse_source(s: &str) -> Option<Source> {
    Some(match s {
        "ai-generation" => Source::AiGeneration,
        "user" => Source::User,
        "system" => Source::System,
        _ => return None,
    })
}

fn parse_trust(s: &str) -> Option<ContentTrust> {
    Some(match s {
        "trusted" => ContentTrust::Trusted,
        "untrusted" => ContentTrust::Untrusted,
        _ => return None,
    })
}

fn parse_display(s: &str) -> Option<Display> {
    Some(match s {
        "markdown" => Display::Markdown,
        "code" => Display::Code,
        "card" => Display::Card,
        "image" => Display::Image,
        "audio" => Display::Audio,
        "file" => Display::File,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn details(v: Value) -> Vec<Detail> {
        match check(Doc::from_value(v)) {
            Err(Outcome::Invalid(i)) => {
                assert_eq!(i.code, Code::InvalidEnvelopeShape);
                i.details
            }
            other => panic!("expected invalid shape, got {other:?}"),
        }
    }

    fn valid() -> Value {
        json!({"type": "error", "correlationId": "c1", "payload": {"code": "x", "message": "m"},
               "meta": {"source": "ai-generation", "ts": "2026-05-18T10:00:00Z"}})
    }

    #[test]
    fn valid_envelope_builds_typed_value() {
        let mut v = valid();
        v["meta"]["rendering"] = json!({"display": "code", "lang": "rust"});
        v["partial"] = json!({"isPartial": false, "index": 2, "total": 3});
        let env = check(Doc::from_value(v)).unwrap();
        assert_eq!(env.kind, "error");
        assert_eq!(env.schema_version, 0);
        assert_eq!(env.meta.rendering.unwrap().display, Some(Display::Code));
        assert_eq!(env.partial.unwrap().total, 3);
    }

    #[test]
    fn non_object_root() {
        let d = details(json!([1]));
        assert_eq!(d[0].instance_path, "");
        assert!(d[0].message.contains("an array"));
    }

    #[test]
    fn reports_every_problem_with_pointers() {
        let d = details(
            json!({"type": "", "correlationId": 5, "extra": 1, "schemaVersion": -1,
            "meta": {"source": "robot", "ts": "tomorrow", "x": 1}}),
        );
        let paths: Vec<&str> = d.iter().map(|d| d.instance_path.as_str()).collect();
        for p in [
            "/extra",
            "/type",
            "/correlationId",
            "/schemaVersion",
            "",
            "/meta/x",
            "/meta/source",
            "/meta/ts",
        ] {
            assert!(paths.contains(&p), "missing {p} in {paths:?}");
        }
        let ts = d.iter().find(|d| d.instance_path == "/meta/ts").unwrap();
        assert!(ts.message.contains("ISO 8601"));
        assert!(!ts.message.contains("tomorrow"));
    }

    #[test]
    fn missing_meta_and_payload() {
        let d = details(json!({"type": "error", "correlationId": "c"}));
        assert!(
            d.iter()
                .any(|d| d.message.starts_with("payload is required"))
        );
        assert!(d.iter().any(|d| d.message.starts_with("meta is required")));
    }

    #[test]
    fn length_limits() {
        let mut v = valid();
        v["correlationId"] = json!("c".repeat(129));
        let d = details(v);
        assert_eq!(d[0].keyword.as_deref(), Some("maxLength"));
    }

    #[test]
    fn iso8601_check() {
        assert!(is_iso8601("2026-05-18T10:00:00Z"));
        assert!(is_iso8601("2026-05-18T10:00:00.123+02:00"));
        assert!(!is_iso8601("2026-05-18"));
        assert!(!is_iso8601("2026-13-18T10:00:00Z"));
    }
}
