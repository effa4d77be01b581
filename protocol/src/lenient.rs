//! Free-form JSON fields that never fail the object holding them.
//!
//! serde_json refuses values nested deeper than 128 levels (its recursion limit), while the
//! apiserver stores up to 10,000. Decoded directly, one such value in one Run fails the whole
//! typed list/watch and stops reconciliation of every object in scope. These functions read
//! the field as raw JSON first (serde_json skips a raw value iteratively, with no depth
//! limit) and only then decode it; a value too deep to decode becomes a marker
//! ([`UNDECODABLE_KEY`]) that the controllers find with [`undecodable`] and report.

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The reserved key of the marker that replaces a value too deep to decode.
pub const UNDECODABLE_KEY: &str = "$openwopUndecodable";

/// serde_json's nesting limit (levels of arrays/objects) when decoding a value.
pub const MAX_DEPTH: usize = 128;

/// A free-form value decoded leniently: the value, or the marker naming why it could not be.
#[derive(Debug, Clone, PartialEq)]
pub struct Lenient(pub Value);

impl<'de> Deserialize<'de> for Lenient {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Ok(Lenient(match serde_json::from_str(raw.get()) {
            Ok(v) => v,
            Err(e) => marker(&format!(
                "{} bytes of JSON nested deeper than {MAX_DEPTH} levels, the limit the operator decodes ({e}); flatten the value, or pass it as a JSON string the workflow parses",
                raw.get().len()
            )),
        }))
    }
}

/// The marker standing for a value that could not be decoded.
pub fn marker(reason: &str) -> Value {
    let mut m = Map::new();
    m.insert(UNDECODABLE_KEY.to_owned(), Value::String(reason.to_owned()));
    Value::Object(m)
}

/// Why `v` could not be decoded, when it is the marker.
pub fn undecodable(v: &Value) -> Option<&str> {
    match v.as_object() {
        Some(m) if m.len() == 1 => m.get(UNDECODABLE_KEY).and_then(Value::as_str),
        _ => None,
    }
}

/// `(path, why)` when the field at `path` holds the marker.
pub fn flagged(path: String, v: Option<&Value>) -> Option<(String, &str)> {
    v.and_then(undecodable).map(|why| (path, why))
}

/// `deserialize_with` for `Option<Value>` fields.
pub fn option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Ok(Option::<Lenient>::deserialize(d)?.map(|l| l.0))
}

/// `deserialize_with` for `Option<Vec<Value>>` fields.
pub fn option_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Value>>, D::Error> {
    Ok(Option::<Vec<Lenient>>::deserialize(d)?.map(|v| v.into_iter().map(|l| l.0).collect()))
}

/// `deserialize_with` for `Option<Map>` fields (free-form objects; the marker is one too).
pub fn option_object<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Map<String, Value>>, D::Error> {
    match Option::<Lenient>::deserialize(d)? {
        None => Ok(None),
        Some(Lenient(Value::Object(m))) => Ok(Some(m)),
        Some(Lenient(other)) => Err(serde::de::Error::invalid_type(
            serde::de::Unexpected::Other(crate::text::json_type(&other)),
            &"a JSON object",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Holder {
        #[serde(default, deserialize_with = "option")]
        v: Option<Value>,
    }

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn a_value_too_deep_becomes_the_marker_and_a_normal_one_is_kept() {
        let deep = format!(
            r#"[{{"v": {}}}, {{"v": {{"a": [1, 2]}}}}, {{"v": null}}, {{}}]"#,
            nested(9000)
        );
        // Without the lenient reading the whole list fails (the defect this module fixes).
        assert!(serde_json::from_str::<Vec<Value>>(&deep).is_err());
        let list: Vec<Holder> = serde_json::from_str(&deep).unwrap();
        let why = undecodable(list[0].v.as_ref().unwrap()).unwrap();
        assert!(
            why.contains("deeper than 128 levels") && why.contains("flatten"),
            "{why}"
        );
        assert!(why.len() < 400, "the reason stays short: {why}");
        assert_eq!(list[1].v, Some(serde_json::json!({"a": [1, 2]})));
        assert_eq!(undecodable(list[1].v.as_ref().unwrap()), None);
        assert_eq!(list[2].v, None);
        assert_eq!(list[3].v, None);
    }

    #[test]
    fn values_decode_through_serde_json_value_too() {
        let h: Holder = serde_json::from_value(serde_json::json!({"v": {"x": [true]}})).unwrap();
        assert_eq!(h.v, Some(serde_json::json!({"x": [true]})));
    }
}
