//! Tier-1 subset: every rule with its pointer, and per-vendor lowering.

use openwop_protocol::tier1::{LowerError, Tier1Rule, Vendor, check, lower};
use serde_json::{Value, json};

/// A compliant schema exercising variants, refs, nullable optionals and reasoning.
fn compliant() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["steps", "reasoning"],
        "properties": {
            "steps": {"type": "array", "items": {"anyOf": [
                {"$ref": "#/$defs/DesignTask"},
                {"$ref": "#/$defs/ActionTask"}
            ]}},
            "reasoning": {"type": ["string", "null"]}
        },
        "$defs": {
            "DesignTask": {"type": "object", "additionalProperties": false,
                "required": ["kind", "title"],
                "properties": {"kind": {"type": "string", "enum": ["design"]}, "title": {"type": "string"}}},
            "ActionTask": {"type": "object", "additionalProperties": false,
                "required": ["kind", "command"],
                "properties": {"kind": {"type": "string", "enum": ["action"]}, "command": {"type": "string"}}}
        }
    })
}

fn rules_at(schema: &Value) -> Vec<(String, Tier1Rule)> {
    check(schema)
        .into_iter()
        .map(|v| (v.pointer, v.rule))
        .collect()
}

fn has(schema: &Value, pointer: &str, rule: Tier1Rule) {
    let got = rules_at(schema);
    assert!(
        got.iter().any(|(p, r)| p == pointer && *r == rule),
        "expected {rule} at {pointer:?}, got {got:?}"
    );
}

fn obj(props: Value) -> Value {
    let required: Vec<String> = props.as_object().unwrap().keys().cloned().collect();
    json!({"type": "object", "additionalProperties": false, "required": required, "properties": props})
}

#[test]
fn compliant_schema_has_no_violations() {
    assert_eq!(check(&compliant()), vec![]);
}

#[test]
fn root_must_be_object() {
    has(
        &json!({"type": "array", "items": {"type": "string"}}),
        "",
        Tier1Rule::RootNotObject,
    );
    has(&json!(true), "", Tier1Rule::RootNotObject);
    let mut s = compliant();
    s["anyOf"] = json!([]);
    has(&s, "/anyOf", Tier1Rule::RootNotObject);
}

#[test]
fn additional_properties_must_be_false() {
    let s = json!({"type": "object", "required": ["a"], "properties": {"a": {
        "type": "object", "additionalProperties": true, "required": [], "properties": {}
    }}});
    has(&s, "", Tier1Rule::AdditionalPropertiesNotFalse);
    has(&s, "/properties/a", Tier1Rule::AdditionalPropertiesNotFalse);
}

#[test]
fn every_property_required_with_escaped_pointer() {
    let s = json!({"type": "object", "additionalProperties": false, "required": [],
        "properties": {"a/b~c": {"type": "string"}}});
    has(&s, "/properties/a~1b~0c", Tier1Rule::PropertyNotRequired);
}

#[test]
fn unsupported_keywords_each_reported() {
    for key in [
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
    ] {
        let mut inner = json!({"type": "string"});
        inner[key] = if key == "not"
            || key == "if"
            || key == "then"
            || key == "else"
            || key == "propertyNames"
        {
            json!({"type": "string"})
        } else if key == "dependentRequired" || key == "dependencies" || key == "dependentSchemas" {
            json!({})
        } else {
            json!([{"type": "string"}])
        };
        let s = obj(json!({"x": inner}));
        has(
            &s,
            &format!("/properties/x/{key}"),
            Tier1Rule::UnsupportedKeyword,
        );
    }
    let tuple = obj(json!({"t": {"type": "array", "items": [{"type": "string"}]}}));
    has(&tuple, "/properties/t/items", Tier1Rule::UnsupportedKeyword);
}

#[test]
fn string_number_array_constraints() {
    let s = obj(json!({
        "s": {"type": "string", "minLength": 1, "maxLength": 3, "pattern": "^a", "format": "email"},
        "n": {"type": "number", "minimum": 0, "maximum": 9, "multipleOf": 2, "exclusiveMinimum": 0},
        "a": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2, "uniqueItems": true}
    }));
    for k in ["minLength", "maxLength", "pattern", "format"] {
        has(
            &s,
            &format!("/properties/s/{k}"),
            Tier1Rule::StringConstraint,
        );
    }
    for k in ["minimum", "maximum", "multipleOf", "exclusiveMinimum"] {
        has(
            &s,
            &format!("/properties/n/{k}"),
            Tier1Rule::NumberConstraint,
        );
    }
    for k in ["minItems", "maxItems", "uniqueItems"] {
        has(
            &s,
            &format!("/properties/a/{k}"),
            Tier1Rule::ArrayConstraint,
        );
    }
}

#[test]
fn nesting_depth_limit() {
    let mut s = obj(json!({"leaf": {"type": "string"}}));
    for _ in 0..4 {
        s = obj(json!({"n": s}));
    }
    assert_eq!(check(&s), vec![], "five levels are allowed");
    let six = obj(json!({"n": s}));
    has(
        &six,
        "/properties/n/properties/n/properties/n/properties/n/properties/n",
        Tier1Rule::NestingTooDeep,
    );
    assert_eq!(
        check(&six)
            .iter()
            .filter(|v| v.rule == Tier1Rule::NestingTooDeep)
            .count(),
        1,
        "reported once at the first level past the limit"
    );
}

#[test]
fn depth_counts_through_refs() {
    let mut s = json!({"$defs": {"Deep": obj(json!({"n": obj(json!({"n": obj(json!({"x": {"type": "string"}}))}))}))}});
    let root = obj(json!({"a": obj(json!({"b": obj(json!({"d": {"$ref": "#/$defs/Deep"}}))}))}));
    for (k, v) in root.as_object().unwrap() {
        s[k] = v.clone();
    }
    has(
        &s,
        "/$defs/Deep/properties/n/properties/n",
        Tier1Rule::NestingTooDeep,
    );
}

#[test]
fn property_count_limit() {
    let mut props = serde_json::Map::new();
    for i in 0..101 {
        props.insert(format!("p{i}"), json!({"type": "string"}));
    }
    has(
        &obj(Value::Object(props.clone())),
        "",
        Tier1Rule::TooManyProperties,
    );
    props.remove("p0");
    assert_eq!(check(&obj(Value::Object(props))), vec![]);
}

#[test]
fn variant_rules() {
    // Branch without a discriminator.
    let s = obj(json!({"v": {"anyOf": [
        obj(json!({"kind": {"type": "string", "enum": ["a"]}})),
        obj(json!({"x": {"type": "string"}}))
    ]}}));
    has(&s, "/properties/v/anyOf/1", Tier1Rule::VariantDiscriminator);
    // Multi-value enum is not a discriminator.
    let s = obj(json!({"v": {"anyOf": [
        obj(json!({"kind": {"type": "string", "enum": ["a", "b"]}})),
        obj(json!({"kind": {"type": "string", "enum": ["c"]}}))
    ]}}));
    has(&s, "/properties/v/anyOf/0", Tier1Rule::VariantDiscriminator);
    // Different discriminator names.
    let s = obj(json!({"v": {"anyOf": [
        obj(json!({"kind": {"type": "string", "enum": ["a"]}})),
        obj(json!({"variant": {"type": "string", "enum": ["b"]}}))
    ]}}));
    has(&s, "/properties/v/anyOf", Tier1Rule::VariantDiscriminator);
    // Repeated value.
    let s = obj(json!({"v": {"anyOf": [
        obj(json!({"kind": {"type": "string", "enum": ["a"]}})),
        obj(json!({"kind": {"type": "string", "const": "a"}}))
    ]}}));
    has(&s, "/properties/v/anyOf", Tier1Rule::VariantDiscriminator);
    // A nullable union via anyOf is not a discriminated variant.
    let s = obj(json!({"v": {"anyOf": [{"type": "string"}, {"type": "null"}]}}));
    has(&s, "/properties/v/anyOf/0", Tier1Rule::VariantDiscriminator);
}

#[test]
fn enum_values_must_be_scalar() {
    let s = obj(json!({"e": {"enum": ["a", 1, null, {"x": 1}]}}));
    has(&s, "/properties/e/enum/3", Tier1Rule::EnumValueNotScalar);
}

#[test]
fn refs_must_be_local_and_not_recursive() {
    let s = obj(json!({"r": {"$ref": "https://example.com/s.json"}}));
    has(&s, "/properties/r/$ref", Tier1Rule::NonLocalRef);
    let s = obj(json!({"r": {"$ref": "#/$defs/Missing"}}));
    has(&s, "/properties/r/$ref", Tier1Rule::NonLocalRef);
    let mut s = obj(json!({"tree": {"$ref": "#/$defs/Node"}}));
    s["$defs"] = json!({"Node": obj(json!({"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}))});
    has(
        &s,
        "/$defs/Node/properties/children/items/$ref",
        Tier1Rule::RecursiveRef,
    );
}

#[test]
fn unused_definitions_are_checked() {
    let mut s = obj(json!({"a": {"type": "string"}}));
    s["$defs"] = json!({"Unused": {"type": "string", "pattern": "x"}});
    has(&s, "/$defs/Unused/pattern", Tier1Rule::StringConstraint);
}

#[test]
fn messages_say_what_to_do() {
    let s = json!({"type": "object", "properties": {"a": {"type": "string", "oneOf": []}}});
    for v in check(&s) {
        assert!(!v.message.is_empty());
        if v.rule == Tier1Rule::UnsupportedKeyword {
            assert!(v.message.contains("anyOf"), "{}", v.message);
        }
    }
}

// ---------------- lowering ----------------

fn full() -> Value {
    json!({
        "type": "object",
        "required": ["title", "count"],
        "properties": {
            "title": {"type": "string", "minLength": 3, "pattern": "^[A-Z]", "description": "The title."},
            "count": {"type": "integer", "minimum": 1, "maximum": 10},
            "tags": {"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 1, "uniqueItems": true},
            "mode": {"enum": ["fast", "slow"]},
            "kind": {"const": "task"},
            "reasoning": {"type": "string"},
            "meta": {"type": "object", "properties": {"note": {"type": "string"}}}
        }
    })
}

#[test]
fn lowering_never_modifies_the_full_schema() {
    let s = full();
    let before = s.clone();
    for v in [Vendor::OpenAi, Vendor::Anthropic, Vendor::Gemini] {
        lower(&s, v).unwrap();
    }
    assert_eq!(s, before);
}

#[test]
fn openai_lowering() {
    let out = lower(&full(), Vendor::OpenAi).unwrap();
    let keys: Vec<&String> = out["properties"].as_object().unwrap().keys().collect();
    assert_eq!(keys[0], "reasoning", "reasoning first");
    assert_eq!(out["additionalProperties"], false);
    assert_eq!(out["required"].as_array().unwrap().len(), 7);
    let title = &out["properties"]["title"];
    assert_eq!(title["type"], "string");
    assert!(title.get("minLength").is_none() && title.get("pattern").is_none());
    assert_eq!(
        title["description"],
        "The title. Constraints: must be at least 3 characters; must match the regular expression `^[A-Z]`."
    );
    assert_eq!(
        out["properties"]["count"]["description"],
        "Constraints: must be at least 1; must be at most 10."
    );
    let tags = &out["properties"]["tags"];
    assert_eq!(
        tags["type"],
        json!(["array", "null"]),
        "optional becomes nullable"
    );
    assert!(tags.get("minItems").is_none());
    assert!(
        tags["description"]
            .as_str()
            .unwrap()
            .contains("must contain at least 1 item")
    );
    assert!(
        tags["description"]
            .as_str()
            .unwrap()
            .contains("items must be unique")
    );
    assert!(tags["items"].get("format").is_none());
    assert_eq!(
        out["properties"]["mode"]["anyOf"][0]["enum"],
        json!(["fast", "slow", null])
    );
    assert_eq!(
        out["properties"]["kind"]["anyOf"][0]["enum"],
        json!(["task", null])
    );
    assert_eq!(
        out["properties"]["reasoning"]["type"],
        json!(["string", "null"])
    );
    let meta = &out["properties"]["meta"];
    assert_eq!(meta["type"], json!(["object", "null"]));
    assert_eq!(meta["additionalProperties"], false);
    assert_eq!(meta["required"], json!(["note"]));
    assert_eq!(
        meta["properties"]["note"]["type"],
        json!(["string", "null"])
    );
    // The lowered schema satisfies the structural Tier-1 rules.
    let remaining: Vec<_> = check(&out)
        .into_iter()
        .filter(|v| {
            matches!(
                v.rule,
                Tier1Rule::AdditionalPropertiesNotFalse
                    | Tier1Rule::PropertyNotRequired
                    | Tier1Rule::StringConstraint
                    | Tier1Rule::NumberConstraint
                    | Tier1Rule::ArrayConstraint
            )
        })
        .collect();
    assert_eq!(remaining, vec![]);
}

#[test]
fn openai_keeps_refs_including_recursion() {
    let mut s = obj(json!({"tree": {"$ref": "#/$defs/Node"}}));
    s["$defs"] = json!({"Node": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 5},
        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}});
    let out = lower(&s, Vendor::OpenAi).unwrap();
    assert_eq!(out["properties"]["tree"]["$ref"], "#/$defs/Node");
    let node = &out["$defs"]["Node"];
    assert_eq!(node["additionalProperties"], false);
    assert_eq!(node["required"], json!(["name", "children"]));
    assert!(node["properties"]["name"].get("maxLength").is_none());
    assert_eq!(
        node["properties"]["children"]["items"]["$ref"],
        "#/$defs/Node"
    );
}

#[test]
fn anthropic_inlines_refs_and_rejects_recursion() {
    let out = lower(&compliant(), Vendor::Anthropic).unwrap();
    assert!(out.get("$defs").is_none());
    let branches = out["properties"]["steps"]["items"]["anyOf"]
        .as_array()
        .unwrap();
    assert_eq!(branches[0]["properties"]["kind"]["enum"], json!(["design"]));
    assert_eq!(branches[1]["properties"]["kind"]["enum"], json!(["action"]));
    assert!(!out.to_string().contains("$ref"));

    let mut s = obj(json!({"tree": {"$ref": "#/$defs/Node"}}));
    s["$defs"] = json!({"Node": obj(json!({"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}))});
    assert_eq!(
        lower(&s, Vendor::Anthropic).unwrap_err(),
        LowerError::RecursiveRef {
            pointer: "/$defs/Node/properties/children/items/$ref".into(),
            vendor: "anthropic"
        }
    );
}

#[test]
fn anthropic_keeps_supported_formats_and_min_items_zero_or_one() {
    let out = lower(&full(), Vendor::Anthropic).unwrap();
    let tags = &out["properties"]["tags"];
    assert_eq!(tags["minItems"], 1);
    assert_eq!(tags["items"]["format"], "email");
    let s = obj(
        json!({"d": {"type": "string", "format": "color"}, "l": {"type": "array", "items": {"type": "string"}, "minItems": 2}}),
    );
    let out = lower(&s, Vendor::Anthropic).unwrap();
    assert!(out["properties"]["d"].get("format").is_none());
    assert_eq!(
        out["properties"]["d"]["description"],
        "Constraints: must be a valid color."
    );
    assert!(out["properties"]["l"].get("minItems").is_none());
}

#[test]
fn gemini_lowering() {
    let out = lower(&full(), Vendor::Gemini).unwrap();
    assert_eq!(out["type"], "OBJECT");
    assert!(out.get("additionalProperties").is_none());
    let order = out["propertyOrdering"].as_array().unwrap();
    assert_eq!(order[0], "reasoning");
    assert_eq!(order.len(), 7);
    assert_eq!(out["required"].as_array().unwrap().len(), 7);
    let tags = &out["properties"]["tags"];
    assert_eq!(tags["type"], "ARRAY");
    assert_eq!(tags["nullable"], true);
    assert_eq!(tags["minItems"], 1, "Gemini accepts minItems");
    assert_eq!(tags["items"]["type"], "STRING");
    assert!(tags["items"].get("format").is_none());
    assert_eq!(out["properties"]["mode"]["enum"], json!(["fast", "slow"]));
    assert_eq!(out["properties"]["mode"]["format"], "enum");
    assert_eq!(out["properties"]["title"]["type"], "STRING");
    assert!(
        out["properties"]["title"].get("nullable").is_none(),
        "required stays non-null"
    );
    let meta = &out["properties"]["meta"];
    assert_eq!(meta["type"], "OBJECT");
    assert_eq!(meta["propertyOrdering"], json!(["note"]));
    assert_eq!(meta["properties"]["note"]["nullable"], true);
    assert!(
        !out.to_string().contains("\"null\""),
        "no type unions for Gemini"
    );
}

#[test]
fn gemini_type_unions_and_non_string_enums() {
    let s = obj(json!({
        "n": {"type": ["integer", "null"]},
        "m": {"type": ["string", "number"]},
        "e": {"type": "integer", "enum": [1, 2, 3]}
    }));
    let out = lower(&s, Vendor::Gemini).unwrap();
    assert_eq!(
        out["properties"]["n"],
        json!({"type": "INTEGER", "nullable": true})
    );
    assert_eq!(
        out["properties"]["m"]["anyOf"],
        json!([{"type": "STRING"}, {"type": "NUMBER"}])
    );
    assert!(out["properties"]["e"].get("enum").is_none());
    assert_eq!(
        out["properties"]["e"]["description"],
        "Constraints: must be one of 1, 2, 3."
    );
}

#[test]
fn gemini_inlines_refs() {
    let out = lower(&compliant(), Vendor::Gemini).unwrap();
    assert!(!out.to_string().contains("$ref"));
    assert!(out.get("$defs").is_none());
    assert_eq!(
        out["properties"]["steps"]["items"]["anyOf"][1]["properties"]["kind"]["enum"],
        json!(["action"])
    );
}

#[test]
fn lowering_errors() {
    assert_eq!(
        lower(&json!({"type": "array"}), Vendor::OpenAi).unwrap_err(),
        LowerError::RootNotObject { vendor: "openai" }
    );
    assert_eq!(
        lower(&json!({"type": "object", "anyOf": []}), Vendor::OpenAi).unwrap_err(),
        LowerError::RootAnyOf { vendor: "openai" }
    );
    let s = obj(json!({"x": {"$ref": "#/$defs/Nope"}}));
    assert_eq!(
        lower(&s, Vendor::Gemini).unwrap_err(),
        LowerError::UnresolvableRef {
            pointer: "/properties/x/$ref".into()
        }
    );
    let s = obj(json!({"x": {"allOf": [{"type": "string"}, {"type": "string"}]}}));
    let err = lower(&s, Vendor::Anthropic).unwrap_err();
    assert!(
        matches!(&err, LowerError::Unsupported { pointer, .. } if pointer == "/properties/x/allOf"),
        "{err:?}"
    );
    let s = obj(json!({"x": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}));
    let out = lower(&s, Vendor::OpenAi).unwrap();
    assert_eq!(out["properties"]["x"]["anyOf"].as_array().unwrap().len(), 2);
}

#[test]
fn vendor_names() {
    for v in [Vendor::OpenAi, Vendor::Anthropic, Vendor::Gemini] {
        assert_eq!(Vendor::parse(v.as_str()), Some(v));
    }
    assert_eq!(Vendor::parse("OpenAI"), Some(Vendor::OpenAi));
    assert_eq!(Vendor::parse("mistral"), None);
}
