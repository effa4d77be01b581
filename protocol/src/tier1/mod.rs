//! Tier-1 structured-output subset (RFC 0030 §B, `structured-output-subset.md`)
//! and the variant-discrimination rule (RFC 0031 §A).
//!
//! [`check`] is the strict static walk: it reports every violation with the JSON
//! Pointer of the offending schema location. [`lower`] turns a full schema into
//! the request schema one vendor accepts; the full schema is never modified and
//! stays the one the engine validates against.
//!
//! Walk decisions (the spec leaves them open):
//! - Nesting depth counts object schemas on the path from the root, the root
//!   object being level 1; level 6 and deeper is a violation.
//! - The 100-property ceiling counts every `properties` entry in the document
//!   once (definitions included, however often they are referenced).
//! - `$ref` must be a local pointer into the document (`#/$defs/…`,
//!   `#/definitions/…`); referenced definitions are walked where they are used
//!   (depth counts through them) and reported at their own pointer. A reference
//!   cycle is a violation: Anthropic strict mode rejects recursive schemas.
//! - `anyOf` is only allowed as a discriminated union: every branch is an object
//!   with one shared property, in `required`, typed `string` with a single-value
//!   `enum` (or `const`), and the values differ between branches.

mod lower;
mod walk;

use std::collections::HashSet;
use std::fmt;

use serde_json::{Map, Value};

pub use lower::{LowerError, Vendor, lower};
use walk::{child, is_object_schema, resolve_local};

/// Deepest object nesting allowed (root object = level 1).
pub const MAX_NESTING_DEPTH: usize = 5;
/// Most `properties` entries allowed across the whole schema.
pub const MAX_TOTAL_PROPERTIES: usize = 100;
/// Schema locations visited before the walk gives up (ref fan-out guard).
const MAX_VISITS: usize = 50_000;

/// Keywords outside the subset, reported as [`Tier1Rule::UnsupportedKeyword`].
const UNSUPPORTED: &[&str] = &[
    "oneOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "prefixItems",
    "propertyNames",
];
const STRING_CONSTRAINTS: &[&str] = &["minLength", "maxLength", "pattern", "format"];
const NUMBER_CONSTRAINTS: &[&str] = &[
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
];
const ARRAY_CONSTRAINTS: &[&str] = &["minItems", "maxItems", "uniqueItems"];

/// Which Tier-1 rule a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier1Rule {
    /// The root must be `type: "object"` (no root union, array or scalar).
    RootNotObject,
    /// Every object needs `additionalProperties: false`.
    AdditionalPropertiesNotFalse,
    /// Every property must be listed in `required` (optional = `[T, "null"]`).
    PropertyNotRequired,
    /// `oneOf`, `allOf`, `not`, `if/then/else`, `dependencies`, `prefixItems`, `propertyNames`, tuple `items`.
    UnsupportedKeyword,
    /// `minLength`, `maxLength`, `pattern`, `format`.
    StringConstraint,
    /// `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`.
    NumberConstraint,
    /// `minItems`, `maxItems`, `uniqueItems`.
    ArrayConstraint,
    /// More than [`MAX_NESTING_DEPTH`] levels of objects.
    NestingTooDeep,
    /// More than [`MAX_TOTAL_PROPERTIES`] properties in the schema.
    TooManyProperties,
    /// An `anyOf` that is not a single-value string-enum discriminated union (RFC 0031).
    VariantDiscriminator,
    /// `enum` values must be strings, numbers, booleans or null.
    EnumValueNotScalar,
    /// `$ref` that is not a resolvable local pointer.
    NonLocalRef,
    /// A `$ref` cycle (recursive schema).
    RecursiveRef,
    /// The schema expands to too many locations to check.
    TooComplex,
}

impl Tier1Rule {
    /// Stable kebab-case name, used in CLI output.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier1Rule::RootNotObject => "root-not-object",
            Tier1Rule::AdditionalPropertiesNotFalse => "additional-properties-not-false",
            Tier1Rule::PropertyNotRequired => "property-not-required",
            Tier1Rule::UnsupportedKeyword => "unsupported-keyword",
            Tier1Rule::StringConstraint => "string-constraint",
            Tier1Rule::NumberConstraint => "number-constraint",
            Tier1Rule::ArrayConstraint => "array-constraint",
            Tier1Rule::NestingTooDeep => "nesting-too-deep",
            Tier1Rule::TooManyProperties => "too-many-properties",
            Tier1Rule::VariantDiscriminator => "variant-discriminator",
            Tier1Rule::EnumValueNotScalar => "enum-value-not-scalar",
            Tier1Rule::NonLocalRef => "non-local-ref",
            Tier1Rule::RecursiveRef => "recursive-ref",
            Tier1Rule::TooComplex => "too-complex",
        }
    }
}

impl fmt::Display for Tier1Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The host's `tierOneSubsetCompliance` posture for vendor envelope schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier1Posture {
    /// A violation makes the workflow invalid.
    Strict,
    /// A violation is reported as a warning.
    #[default]
    Warn,
    /// Not checked.
    Off,
}

impl Tier1Posture {
    /// The wire value (`strict|warn|off`).
    pub fn as_str(self) -> &'static str {
        match self {
            Tier1Posture::Strict => "strict",
            Tier1Posture::Warn => "warn",
            Tier1Posture::Off => "off",
        }
    }

    /// Parses the wire value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "strict" => Some(Tier1Posture::Strict),
            "warn" => Some(Tier1Posture::Warn),
            "off" => Some(Tier1Posture::Off),
            _ => None,
        }
    }
}

/// One violation of the strict walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier1Violation {
    /// JSON Pointer of the offending location (`""` is the root).
    pub pointer: String,
    pub rule: Tier1Rule,
    /// What is wrong and what to do instead.
    pub message: String,
}

struct Frame<'a> {
    ptr: String,
    node: &'a Value,
    /// Object levels above this node.
    depth: usize,
    /// Whether depth is still counted (false inside standalone definitions or
    /// below an already reported too-deep object).
    count_depth: bool,
    /// `$ref`s followed to reach this node, for cycle detection.
    refs: Vec<String>,
}

struct Walker<'a> {
    root: &'a Value,
    out: Vec<Tier1Violation>,
    seen: HashSet<(String, Tier1Rule)>,
    property_ptrs: HashSet<String>,
}

impl Walker<'_> {
    fn report(&mut self, pointer: String, rule: Tier1Rule, message: String) {
        if self.seen.insert((pointer.clone(), rule)) {
            self.out.push(Tier1Violation {
                pointer,
                rule,
                message,
            });
        }
    }
}

/// Runs the strict Tier-1 walk over `schema`; an empty result means compliant.
/// Violations are ordered by pointer, then rule.
pub fn check(schema: &Value) -> Vec<Tier1Violation> {
    let mut w = Walker {
        root: schema,
        out: Vec::new(),
        seen: HashSet::new(),
        property_ptrs: HashSet::new(),
    };
    check_root(&mut w, schema);

    let mut stack = vec![Frame {
        ptr: String::new(),
        node: schema,
        depth: 0,
        count_depth: true,
        refs: Vec::new(),
    }];
    // Definitions are also checked where they stand, so unused ones are covered.
    for defs in ["$defs", "definitions"] {
        if let Some(Value::Object(m)) = schema.get(defs) {
            for (name, def) in m {
                stack.push(Frame {
                    ptr: child(&child("", defs), name),
                    node: def,
                    depth: 0,
                    count_depth: false,
                    refs: Vec::new(),
                });
            }
        }
    }
    let mut visits = 0;
    while let Some(frame) = stack.pop() {
        visits += 1;
        if visits > MAX_VISITS {
            w.report(
                String::new(),
                Tier1Rule::TooComplex,
                format!("the schema expands to more than {MAX_VISITS} locations through $ref; flatten it"),
            );
            break;
        }
        visit(&mut w, frame, &mut stack);
    }
    if w.property_ptrs.len() > MAX_TOTAL_PROPERTIES {
        w.report(
            String::new(),
            Tier1Rule::TooManyProperties,
            format!(
                "the schema declares {} properties; the Tier-1 limit is {MAX_TOTAL_PROPERTIES} in total",
                w.property_ptrs.len()
            ),
        );
    }
    let mut out = w.out;
    out.sort_by(|a, b| a.pointer.cmp(&b.pointer).then(a.rule.cmp(&b.rule)));
    out
}

fn check_root(w: &mut Walker<'_>, schema: &Value) {
    let Value::Object(m) = schema else {
        w.report(
            String::new(),
            Tier1Rule::RootNotObject,
            "the root schema must be a JSON object with \"type\": \"object\"".into(),
        );
        return;
    };
    if m.get("type") != Some(&Value::String("object".into())) {
        w.report(
            String::new(),
            Tier1Rule::RootNotObject,
            "the root must declare \"type\": \"object\" (no root union, array or scalar); wrap other shapes in an object property".into(),
        );
    }
    if m.contains_key("anyOf") {
        w.report(
            child("", "anyOf"),
            Tier1Rule::RootNotObject,
            "anyOf is not allowed at the root; move the union into a property of a root object"
                .into(),
        );
    }
}

fn visit<'a>(w: &mut Walker<'a>, f: Frame<'a>, stack: &mut Vec<Frame<'a>>) {
    let Value::Object(m) = f.node else {
        if !f.node.is_boolean() {
            w.report(
                f.ptr,
                Tier1Rule::UnsupportedKeyword,
                "a schema must be a JSON object".into(),
            );
        } else if f.node == &Value::Bool(true) && !f.ptr.ends_with("/additionalProperties") {
            w.report(
                f.ptr,
                Tier1Rule::UnsupportedKeyword,
                "boolean `true` schemas accept anything; declare a type".into(),
            );
        }
        return;
    };

    if let Some(r) = m.get("$ref") {
        follow_ref(w, &f, r, stack);
    }

    let is_object = is_object_schema(m);
    let depth = f.depth + usize::from(is_object);
    let mut count_depth = f.count_depth;
    if is_object && count_depth && depth > MAX_NESTING_DEPTH {
        w.report(
            f.ptr.clone(),
            Tier1Rule::NestingTooDeep,
            format!("object nested {depth} levels deep; the Tier-1 limit is {MAX_NESTING_DEPTH}"),
        );
        count_depth = false;
    }

    for key in UNSUPPORTED {
        if m.contains_key(*key) {
            let hint = match *key {
                "oneOf" => {
                    "use anyOf with a single-value string enum discriminator per branch (RFC 0031)"
                }
                "allOf" => "merge the branches into one object schema",
                "prefixItems" => "use a homogeneous `items` schema",
                _ => "express the constraint in the description and validate it after generation",
            };
            w.report(
                child(&f.ptr, key),
                Tier1Rule::UnsupportedKeyword,
                format!("`{key}` is outside the Tier-1 subset; {hint}"),
            );
        }
    }
    for (list, rule, what) in [
        (STRING_CONSTRAINTS, Tier1Rule::StringConstraint, "string"),
        (NUMBER_CONSTRAINTS, Tier1Rule::NumberConstraint, "number"),
        (ARRAY_CONSTRAINTS, Tier1Rule::ArrayConstraint, "array"),
    ] {
        for key in list {
            if m.contains_key(*key) {
                w.report(
                    child(&f.ptr, key),
                    rule,
                    format!(
                        "{what} constraint `{key}` is outside the Tier-1 subset; state it in the description \
                         (the full schema still validates it locally)"
                    ),
                );
            }
        }
    }
    if let Some(Value::Array(values)) = m.get("enum") {
        for (i, v) in values.iter().enumerate() {
            if v.is_object() || v.is_array() {
                w.report(
                    child(&child(&f.ptr, "enum"), &i.to_string()),
                    Tier1Rule::EnumValueNotScalar,
                    "enum values must be strings, numbers, booleans or null".into(),
                );
            }
        }
    }

    if is_object {
        check_object(w, &f.ptr, m);
    }
    if let Some(Value::Array(branches)) = m.get("anyOf") {
        check_variants(w, &f.ptr, branches);
    }

    // Children.
    let push = |stack: &mut Vec<Frame<'a>>, ptr: String, node: &'a Value| {
        stack.push(Frame {
            ptr,
            node,
            depth,
            count_depth,
            refs: f.refs.clone(),
        });
    };
    if let Some(Value::Object(props)) = m.get("properties") {
        let pp = child(&f.ptr, "properties");
        for (name, sub) in props {
            let p = child(&pp, name);
            w.property_ptrs.insert(p.clone());
            push(stack, p, sub);
        }
    }
    match m.get("items") {
        Some(Value::Array(_)) => w.report(
            child(&f.ptr, "items"),
            Tier1Rule::UnsupportedKeyword,
            "tuple-form `items` is outside the Tier-1 subset; use one homogeneous items schema"
                .into(),
        ),
        Some(sub) => push(stack, child(&f.ptr, "items"), sub),
        None => {}
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(branches)) = m.get(key) {
            let kp = child(&f.ptr, key);
            for (i, sub) in branches.iter().enumerate() {
                push(stack, child(&kp, &i.to_string()), sub);
            }
        }
    }
    for key in ["not", "if", "then", "else", "propertyNames", "contains"] {
        if let Some(sub) = m.get(key) {
            push(stack, child(&f.ptr, key), sub);
        }
    }
    if let Some(sub @ Value::Object(_)) = m.get("additionalProperties") {
        push(stack, child(&f.ptr, "additionalProperties"), sub);
    }
}

fn follow_ref<'a>(w: &mut Walker<'a>, f: &Frame<'a>, r: &'a Value, stack: &mut Vec<Frame<'a>>) {
    let ref_ptr = child(&f.ptr, "$ref");
    let Some(reference) = r.as_str() else {
        w.report(
            ref_ptr,
            Tier1Rule::NonLocalRef,
            "`$ref` must be a string".into(),
        );
        return;
    };
    let Some(target) = resolve_local(w.root, reference) else {
        w.report(
            ref_ptr,
            Tier1Rule::NonLocalRef,
            format!("`$ref` `{reference}` does not resolve inside this schema; only local `#/$defs/...` references are portable"),
        );
        return;
    };
    if f.refs.iter().any(|seen| seen == reference) {
        w.report(
            ref_ptr,
            Tier1Rule::RecursiveRef,
            format!("`$ref` `{reference}` is recursive; Anthropic strict mode rejects recursive schemas — bound the recursion explicitly"),
        );
        return;
    }
    let mut refs = f.refs.clone();
    refs.push(reference.to_string());
    // Report inside the definition at its own pointer.
    let target_ptr = reference.strip_prefix('#').unwrap_or_default().to_string();
    stack.push(Frame {
        ptr: target_ptr,
        node: target,
        depth: f.depth,
        count_depth: f.count_depth,
        refs,
    });
}

fn check_object(w: &mut Walker<'_>, ptr: &str, m: &Map<String, Value>) {
    if m.get("additionalProperties") != Some(&Value::Bool(false)) {
        w.report(
            ptr.to_string(),
            Tier1Rule::AdditionalPropertiesNotFalse,
            "object schemas must set \"additionalProperties\": false".into(),
        );
    }
    let required: HashSet<&str> = match m.get("required") {
        Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
        _ => HashSet::new(),
    };
    if let Some(Value::Object(props)) = m.get("properties") {
        let pp = child(ptr, "properties");
        for name in props.keys() {
            if !required.contains(name.as_str()) {
                w.report(
                    child(&pp, name),
                    Tier1Rule::PropertyNotRequired,
                    format!(
                        "property `{name}` is not in `required`; list it there and make it optional with \"type\": [T, \"null\"]"
                    ),
                );
            }
        }
    }
}

/// Candidate discriminators of one branch: required string properties with one enum value.
fn discriminators<'v>(root: &'v Value, branch: &'v Value) -> Option<Vec<(&'v str, &'v Value)>> {
    let mut node = branch;
    // Follow a short chain of `$ref`s (cycles are reported by the walk).
    for _ in 0..8 {
        match node.get("$ref").and_then(Value::as_str) {
            Some(r) => node = resolve_local(root, r)?,
            None => break,
        }
    }
    let m = node.as_object()?;
    let props = m.get("properties")?.as_object()?;
    let required: Vec<&str> = m
        .get("required")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut out = Vec::new();
    for (name, p) in props {
        if !required.contains(&name.as_str()) {
            continue;
        }
        let Some(pm) = p.as_object() else { continue };
        if pm.get("type").and_then(Value::as_str) != Some("string") {
            continue;
        }
        let single = match (pm.get("enum"), pm.get("const")) {
            (Some(Value::Array(vals)), _) if vals.len() == 1 && vals[0].is_string() => &vals[0],
            (None, Some(c @ Value::String(_))) => c,
            _ => continue,
        };
        out.push((name.as_str(), single));
    }
    Some(out)
}

fn check_variants(w: &mut Walker<'_>, ptr: &str, branches: &[Value]) {
    let any_ptr = child(ptr, "anyOf");
    let mut per_branch = Vec::with_capacity(branches.len());
    for (i, b) in branches.iter().enumerate() {
        match discriminators(w.root, b) {
            Some(d) if !d.is_empty() => per_branch.push(d),
            _ => {
                w.report(
                    child(&any_ptr, &i.to_string()),
                    Tier1Rule::VariantDiscriminator,
                    "anyOf branch has no discriminator: give it a required property of type string with a \
                     single-value enum (RFC 0031); for an optional value use \"type\": [T, \"null\"] instead"
                        .into(),
                );
                return;
            }
        }
    }
    let Some(first) = per_branch.first() else {
        w.report(
            any_ptr,
            Tier1Rule::VariantDiscriminator,
            "anyOf must list at least one branch".into(),
        );
        return;
    };
    let shared: Vec<&str> = first
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| per_branch.iter().all(|b| b.iter().any(|(bn, _)| bn == n)))
        .collect();
    if shared.is_empty() {
        w.report(
            any_ptr,
            Tier1Rule::VariantDiscriminator,
            "anyOf branches do not share one discriminator property; use the same name (e.g. `kind`) in every branch".into(),
        );
        return;
    }
    let distinct = shared.iter().any(|name| {
        let mut values = HashSet::new();
        per_branch.iter().all(|b| {
            b.iter()
                .find(|(bn, _)| bn == name)
                .is_some_and(|(_, v)| values.insert(v.to_string()))
        })
    });
    if !distinct {
        w.report(
            any_ptr,
            Tier1Rule::VariantDiscriminator,
            "two anyOf branches use the same discriminator value; each branch needs its own literal".into(),
        );
    }
}
