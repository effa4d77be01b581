//! Per-vendor lowering of a full envelope schema to the request schema a
//! vendor's strict structured-output mode accepts.
//!
//! The result is a new value; the input is never touched and remains the schema
//! the engine validates responses against, so anything a vendor cannot enforce
//! is still enforced locally. Lowering therefore never loosens validation — it
//! only decides what the vendor is told:
//! - constraints the vendor does not accept move into `description` as readable
//!   text ("must be at least 3 characters");
//! - every property becomes required; properties that were optional become
//!   nullable (`["T", "null"]`, or `nullable: true` for Gemini);
//! - `reasoning` is placed first (and first in Gemini's `propertyOrdering`);
//! - `oneOf` becomes `anyOf`, `const` becomes a one-value `enum`;
//! - `$ref`s are inlined for Anthropic (no recursive schemas) and Gemini (no
//!   `$ref` in `responseSchema`); a reference cycle is [`LowerError::RecursiveRef`].
//!   OpenAI keeps `$defs` and `$ref`, recursion included.
//!
//! Vendor facts used (vendor docs, checked against RFC 0030 §B's table):
//! - OpenAI strict: root object, `additionalProperties: false` everywhere, all
//!   properties required, `anyOf` not at the root, no string/number/array
//!   constraints (per the Tier-1 table).
//! - Anthropic strict: same object rules; `format` limited to a known list;
//!   `minItems` 0 or 1 only; no recursive schemas.
//! - Gemini `responseSchema` (OpenAPI 3.0 subset): upper-case single `type`,
//!   `nullable` instead of type unions, `enum` of strings only (with
//!   `format: "enum"`), `propertyOrdering`, `minItems`/`maxItems`, `anyOf`, no
//!   `additionalProperties`, no `$ref`.

use serde_json::{Map, Value, json};

use super::walk::{child, is_object_schema, resolve_local};
use crate::vendor::LlmVendor;

/// Deepest schema nesting lowering will follow.
const MAX_LOWER_DEPTH: usize = 64;

/// Formats Anthropic strict mode accepts.
const ANTHROPIC_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Keywords dropped without a trace: annotations the vendors reject or ignore.
const DROPPED: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "$anchor",
    "deprecated",
    "readOnly",
    "writeOnly",
    "examples",
    "propertyOrdering",
    "title",
];

/// A structured-output vendor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Vendor {
    OpenAi,
    Anthropic,
    Gemini,
}

impl From<LlmVendor> for Vendor {
    /// The structured-output schema dialect the vendor's API takes (an OpenAI-compatible
    /// server takes OpenAI's).
    fn from(v: LlmVendor) -> Vendor {
        match v {
            LlmVendor::OpenAi | LlmVendor::OpenAiCompatible => Vendor::OpenAi,
            LlmVendor::Anthropic => Vendor::Anthropic,
            LlmVendor::Gemini => Vendor::Gemini,
        }
    }
}

impl Vendor {
    /// The vendor whose dialect this is ([`LlmVendor`] names vendors once).
    fn vendor(self) -> LlmVendor {
        match self {
            Vendor::OpenAi => LlmVendor::OpenAi,
            Vendor::Anthropic => LlmVendor::Anthropic,
            Vendor::Gemini => LlmVendor::Gemini,
        }
    }

    /// CLI / config name.
    pub fn as_str(self) -> &'static str {
        self.vendor().as_str()
    }

    /// Parses `openai|anthropic|gemini` (case-insensitive).
    pub fn parse(name: &str) -> Option<Vendor> {
        [Vendor::OpenAi, Vendor::Anthropic, Vendor::Gemini]
            .into_iter()
            .find(|d| d.as_str() == name.to_ascii_lowercase())
    }
}

/// Why a schema cannot be lowered for a vendor. Pointers refer to the full schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LowerError {
    #[error("the root schema must be an object schema (\"type\": \"object\") for {vendor}")]
    RootNotObject { vendor: &'static str },
    #[error(
        "{vendor} does not accept anyOf at the root; wrap the union in a property of a root object"
    )]
    RootAnyOf { vendor: &'static str },
    #[error(
        "`$ref` at {pointer} is recursive; {vendor} needs the reference inlined, so recursion cannot be expressed — bound it explicitly"
    )]
    RecursiveRef {
        pointer: String,
        vendor: &'static str,
    },
    #[error(
        "`$ref` at {pointer} does not resolve to a location inside the schema; only local `#/...` references are supported"
    )]
    UnresolvableRef { pointer: String },
    #[error("{keyword} at {pointer} cannot be lowered for {vendor}: {hint}")]
    Unsupported {
        pointer: String,
        keyword: String,
        vendor: &'static str,
        hint: &'static str,
    },
    #[error("the schema nests deeper than {MAX_LOWER_DEPTH} levels at {pointer}; flatten it")]
    TooDeep { pointer: String },
}

/// Produces the request schema `vendor` accepts for the full `schema`.
pub fn lower(schema: &Value, vendor: Vendor) -> Result<Value, LowerError> {
    let Some(root) = schema.as_object() else {
        return Err(LowerError::RootNotObject {
            vendor: vendor.as_str(),
        });
    };
    if root.get("type") != Some(&Value::String("object".into())) {
        return Err(LowerError::RootNotObject {
            vendor: vendor.as_str(),
        });
    }
    if root.contains_key("anyOf") || root.contains_key("oneOf") {
        return Err(LowerError::RootAnyOf {
            vendor: vendor.as_str(),
        });
    }
    let mut lw = Lowerer {
        root: schema,
        vendor,
        refs: Vec::new(),
    };
    let mut out = lw.node(schema, "", 0)?;
    if vendor == Vendor::OpenAi {
        for defs in ["$defs", "definitions"] {
            if let Some(Value::Object(m)) = schema.get(defs) {
                let mut lowered = Map::new();
                for (name, def) in m {
                    lowered.insert(
                        name.clone(),
                        lw.node(def, &child(&child("", defs), name), 1)?,
                    );
                }
                if let Value::Object(o) = &mut out {
                    o.insert(defs.to_string(), Value::Object(lowered));
                }
            }
        }
    }
    Ok(out)
}

struct Lowerer<'a> {
    root: &'a Value,
    vendor: Vendor,
    /// `$ref`s being inlined, for cycle detection.
    refs: Vec<String>,
}

impl Lowerer<'_> {
    fn unsupported(&self, ptr: &str, keyword: &str, hint: &'static str) -> LowerError {
        LowerError::Unsupported {
            pointer: child(ptr, keyword),
            keyword: keyword.to_string(),
            vendor: self.vendor.as_str(),
            hint,
        }
    }

    fn node(&mut self, node: &Value, ptr: &str, depth: usize) -> Result<Value, LowerError> {
        if depth > MAX_LOWER_DEPTH {
            return Err(LowerError::TooDeep {
                pointer: ptr.to_string(),
            });
        }
        let m = match node {
            Value::Object(m) => m,
            Value::Bool(_) => {
                return Err(LowerError::Unsupported {
                    pointer: ptr.to_string(),
                    keyword: "boolean schema".into(),
                    vendor: self.vendor.as_str(),
                    hint: "declare an explicit typed schema",
                });
            }
            _ => {
                return Err(LowerError::Unsupported {
                    pointer: ptr.to_string(),
                    keyword: "schema".into(),
                    vendor: self.vendor.as_str(),
                    hint: "a schema must be a JSON object",
                });
            }
        };

        if let Some(r) = m.get("$ref") {
            return self.reference(m, r, ptr, depth);
        }

        let mut out = Map::new();
        let mut notes: Vec<String> = Vec::new();
        let object = is_object_schema(m);

        // allOf with one branch is the branch; more cannot be merged faithfully.
        if let Some(all) = m.get("allOf") {
            match all.as_array().map(Vec::as_slice) {
                Some([only]) => {
                    let mut merged = m.clone();
                    merged.remove("allOf");
                    let inner = self.node(only, &child(&child(ptr, "allOf"), "0"), depth + 1)?;
                    if let Value::Object(im) = inner {
                        for (k, v) in im {
                            merged.entry(k).or_insert(v);
                        }
                    }
                    return self.node(&Value::Object(merged), ptr, depth + 1);
                }
                _ => {
                    return Err(self.unsupported(
                        ptr,
                        "allOf",
                        "merge the branches into one object schema",
                    ));
                }
            }
        }
        if m.contains_key("prefixItems") || m.get("items").is_some_and(Value::is_array) {
            let key = if m.contains_key("prefixItems") {
                "prefixItems"
            } else {
                "items"
            };
            return Err(self.unsupported(ptr, key, "use one homogeneous `items` schema"));
        }

        for (key, value) in m {
            match key.as_str() {
                "type" => self.lower_type(value, &mut out),
                "nullable" if value == &Value::Bool(true) => {
                    // OpenAPI-style nullability arrives as a type union for JSON Schema vendors.
                    if self.vendor == Vendor::Gemini {
                        out.insert("nullable".into(), Value::Bool(true));
                    }
                }
                "description" => {
                    out.insert("description".into(), value.clone());
                }
                "properties" | "required" | "additionalProperties" => {}
                "items" => {
                    let lowered = self.node(value, &child(ptr, "items"), depth + 1)?;
                    out.insert("items".into(), lowered);
                }
                "anyOf" | "oneOf" => {
                    let Some(branches) = value.as_array() else {
                        return Err(self.unsupported(ptr, key, "must be an array of schemas"));
                    };
                    let kp = child(ptr, key);
                    let mut lowered = Vec::with_capacity(branches.len());
                    for (i, b) in branches.iter().enumerate() {
                        lowered.push(self.node(b, &child(&kp, &i.to_string()), depth + 1)?);
                    }
                    out.insert("anyOf".into(), Value::Array(lowered));
                }
                "enum" => self.lower_enum(value, &mut out, &mut notes),
                "const" => {
                    self.lower_enum(&Value::Array(vec![value.clone()]), &mut out, &mut notes)
                }
                "$defs" | "definitions" => {}
                k if DROPPED.contains(&k) => {
                    if k == "title" && self.vendor == Vendor::Gemini {
                        out.insert("title".into(), value.clone());
                    }
                }
                _ => self.constraint(key, value, &mut out, &mut notes),
            }
        }

        if object {
            self.lower_properties(m, ptr, depth, &mut out)?;
        }
        if !notes.is_empty() {
            let text = format!("Constraints: {}.", notes.join("; "));
            let desc = match out.get("description").and_then(Value::as_str) {
                Some(d) if !d.is_empty() => format!("{} {text}", d.trim_end()),
                _ => text,
            };
            out.insert("description".into(), Value::String(desc));
        }
        Ok(Value::Object(out))
    }

    fn reference(
        &mut self,
        m: &Map<String, Value>,
        r: &Value,
        ptr: &str,
        depth: usize,
    ) -> Result<Value, LowerError> {
        let ref_ptr = child(ptr, "$ref");
        let reference = r.as_str().ok_or(LowerError::UnresolvableRef {
            pointer: ref_ptr.clone(),
        })?;
        let target = resolve_local(self.root, reference).ok_or(LowerError::UnresolvableRef {
            pointer: ref_ptr.clone(),
        })?;
        if self.vendor == Vendor::OpenAi {
            // OpenAI resolves `$defs` itself (recursion allowed); keep the reference.
            let mut out = Map::new();
            out.insert("$ref".into(), r.clone());
            if let Some(d) = m.get("description") {
                out.insert("description".into(), d.clone());
            }
            return Ok(Value::Object(out));
        }
        if self.refs.iter().any(|x| x == reference) {
            return Err(LowerError::RecursiveRef {
                pointer: ref_ptr,
                vendor: self.vendor.as_str(),
            });
        }
        self.refs.push(reference.to_string());
        let target_ptr = reference.strip_prefix('#').unwrap_or_default().to_string();
        let lowered = self.node(target, &target_ptr, depth + 1);
        self.refs.pop();
        let mut lowered = lowered?;
        // Sibling annotations next to `$ref` (e.g. a description) win over the target's.
        if let (Value::Object(o), Some(d)) = (&mut lowered, m.get("description")) {
            o.insert("description".into(), d.clone());
        }
        Ok(lowered)
    }

    fn lower_type(&self, value: &Value, out: &mut Map<String, Value>) {
        if self.vendor != Vendor::Gemini {
            out.insert("type".into(), value.clone());
            return;
        }
        match value {
            Value::String(t) => {
                out.insert("type".into(), Value::String(t.to_ascii_uppercase()));
            }
            Value::Array(ts) => {
                let non_null: Vec<&str> = ts
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|t| *t != "null")
                    .collect();
                if ts.iter().any(|t| t == "null") {
                    out.insert("nullable".into(), Value::Bool(true));
                }
                match non_null.as_slice() {
                    [one] => {
                        out.insert("type".into(), Value::String(one.to_ascii_uppercase()));
                    }
                    many => {
                        let branches = many
                            .iter()
                            .map(|t| json!({"type": t.to_ascii_uppercase()}))
                            .collect();
                        out.insert("anyOf".into(), Value::Array(branches));
                    }
                }
            }
            other => {
                out.insert("type".into(), other.clone());
            }
        }
    }

    fn lower_enum(&self, value: &Value, out: &mut Map<String, Value>, notes: &mut Vec<String>) {
        let Some(values) = value.as_array() else {
            return;
        };
        if self.vendor == Vendor::Gemini {
            if values.iter().all(Value::is_string) {
                out.insert("enum".into(), value.clone());
                out.insert("format".into(), Value::String("enum".into()));
            } else {
                let listed: Vec<String> = values.iter().map(Value::to_string).collect();
                notes.push(format!("must be one of {}", listed.join(", ")));
            }
            return;
        }
        out.insert("enum".into(), value.clone());
    }

    /// Keeps what the vendor accepts; moves every other constraint into text.
    fn constraint(
        &self,
        key: &str,
        value: &Value,
        out: &mut Map<String, Value>,
        notes: &mut Vec<String>,
    ) {
        let keep = match (self.vendor, key) {
            (Vendor::Gemini, "minItems" | "maxItems") => true,
            (Vendor::Gemini, "format") => value == "date-time",
            (Vendor::Anthropic, "format") => value
                .as_str()
                .is_some_and(|f| ANTHROPIC_FORMATS.contains(&f)),
            (Vendor::Anthropic, "minItems") => value == 0 || value == 1,
            _ => false,
        };
        if keep {
            out.insert(key.to_string(), value.clone());
        } else if let Some(text) = describe_constraint(key, value) {
            notes.push(text);
        }
    }

    fn lower_properties(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        depth: usize,
        out: &mut Map<String, Value>,
    ) -> Result<(), LowerError> {
        let required: Vec<&str> = match m.get("required") {
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let mut names: Vec<&String> = m
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().collect())
            .unwrap_or_default();
        // `reasoning` first (RFC 0030 §A): the model writes its analysis before the answer.
        if let Some(i) = names.iter().position(|n| n.as_str() == "reasoning") {
            let r = names.remove(i);
            names.insert(0, r);
        }
        let pp = child(ptr, "properties");
        let mut props = Map::new();
        for name in &names {
            let sub = &m["properties"][name.as_str()];
            let mut lowered = self.node(sub, &child(&pp, name), depth + 1)?;
            if !required.contains(&name.as_str()) {
                lowered = self.nullable(lowered);
            }
            props.insert((*name).clone(), lowered);
        }
        let name_values: Vec<Value> = names.iter().map(|n| Value::String((*n).clone())).collect();
        if self.vendor != Vendor::Gemini {
            out.insert(
                "type".into(),
                out.get("type").cloned().unwrap_or_else(|| json!("object")),
            );
        } else if !out.contains_key("type") {
            out.insert("type".into(), json!("OBJECT"));
        }
        out.insert("properties".into(), Value::Object(props));
        out.insert("required".into(), Value::Array(name_values.clone()));
        match self.vendor {
            Vendor::Gemini => {
                out.insert("propertyOrdering".into(), Value::Array(name_values));
            }
            Vendor::OpenAi | Vendor::Anthropic => {
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
        }
        Ok(())
    }

    /// Makes an optional property's schema accept `null` (it is now required).
    fn nullable(&self, schema: Value) -> Value {
        let Value::Object(mut m) = schema else {
            return schema;
        };
        if self.vendor == Vendor::Gemini {
            m.insert("nullable".into(), Value::Bool(true));
            return Value::Object(m);
        }
        if let Some(Value::Array(values)) = m.get_mut("enum")
            && !values.contains(&Value::Null)
        {
            values.push(Value::Null);
        }
        match m.get_mut("type") {
            Some(Value::String(t)) => {
                let t = std::mem::take(t);
                m.insert("type".into(), json!([t, "null"]));
                Value::Object(m)
            }
            Some(Value::Array(ts)) => {
                if !ts.contains(&json!("null")) {
                    ts.push(json!("null"));
                }
                Value::Object(m)
            }
            _ => {
                if let Some(Value::Array(branches)) = m.get_mut("anyOf") {
                    if !branches
                        .iter()
                        .any(|b| b.get("type") == Some(&json!("null")))
                    {
                        branches.push(json!({"type": "null"}));
                    }
                    return Value::Object(m);
                }
                json!({"anyOf": [Value::Object(m), {"type": "null"}]})
            }
        }
    }
}

fn num(v: &Value) -> String {
    v.to_string()
}

/// Readable text for a constraint a vendor is not told about.
fn describe_constraint(key: &str, v: &Value) -> Option<String> {
    let n = num(v);
    let plural = |one: &'static str, many: &'static str| if v == 1 { one } else { many };
    Some(match key {
        "minLength" => format!("must be at least {n} {}", plural("character", "characters")),
        "maxLength" => format!("must be at most {n} {}", plural("character", "characters")),
        "pattern" => format!(
            "must match the regular expression {}",
            v.as_str().map_or(n.clone(), |s| format!("`{s}`"))
        ),
        "format" => format!(
            "must be a valid {}",
            v.as_str().unwrap_or("formatted value")
        ),
        "minimum" => format!("must be at least {n}"),
        "maximum" => format!("must be at most {n}"),
        "exclusiveMinimum" => format!("must be greater than {n}"),
        "exclusiveMaximum" => format!("must be less than {n}"),
        "multipleOf" => format!("must be a multiple of {n}"),
        "minItems" => format!("must contain at least {n} {}", plural("item", "items")),
        "maxItems" => format!("must contain at most {n} {}", plural("item", "items")),
        "uniqueItems" if v == true => "items must be unique".to_string(),
        "minProperties" => format!(
            "must have at least {n} {}",
            plural("property", "properties")
        ),
        "maxProperties" => format!("must have at most {n} {}", plural("property", "properties")),
        "default" => format!("defaults to {n}"),
        "not"
        | "if"
        | "then"
        | "else"
        | "dependencies"
        | "dependentRequired"
        | "dependentSchemas"
        | "propertyNames"
        | "patternProperties"
        | "contains"
        | "minContains"
        | "maxContains"
        | "unevaluatedProperties"
        | "unevaluatedItems" => {
            format!("additional `{key}` rules are checked after generation")
        }
        _ => return None,
    })
}
