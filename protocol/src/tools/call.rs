//! A tool call as a model asks for it, whatever the vendor, and the shape a mock provider
//! step uses to ask for one.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One tool call a model asked for, decoded from any vendor's wire format
/// (`openwop-providers` does the decoding).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelToolCall {
    /// The vendor's id of the call (OpenAI `tool_calls[].id`, Anthropic `tool_use.id`,
    /// Gemini `functionCall.id`): the result quotes it back. A decoder makes one up from the
    /// call's position when the vendor sends none (Gemini usually does not).
    pub id: String,
    /// The name the model used: one of the names it was offered, or not
    /// ([`super::policy::ToolSet::resolve`] decides).
    pub name: String,
    /// The arguments. OpenAI sends them as JSON text: text that does not parse is kept as a
    /// JSON string, so the call is refused with a reason instead of being dropped
    /// ([`arguments_object`]).
    pub arguments: Value,
    /// Gemini's `thoughtSignature` on the part that carried this call: opaque, and sent back
    /// unchanged in the same part on the next turn (Gemini 3 refuses a function-calling turn
    /// without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// Why a call's arguments cannot be sent to a tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentsError {
    #[error("the arguments are not valid JSON: send a JSON object")]
    NotJson,
    #[error("the arguments are a JSON {0}, not an object: send a JSON object")]
    NotObject(&'static str),
}

/// The arguments of `call` as the object an MCP `tools/call` sends (`null` and absent
/// arguments are the empty object).
pub fn arguments_object(call: &ModelToolCall) -> Result<Map<String, Value>, ArgumentsError> {
    match &call.arguments {
        Value::Object(m) => Ok(m.clone()),
        Value::Null => Ok(Map::new()),
        // A vendor's JSON text that did not parse (see `ModelToolCall::arguments`).
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => Ok(m),
            Ok(other) => Err(ArgumentsError::NotObject(json_kind(&other))),
            Err(_) => Err(ArgumentsError::NotJson),
        },
        other => Err(ArgumentsError::NotObject(json_kind(other))),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A tool call in a mock provider step (`Run.spec.providerMocks.<node>.responses[].toolCalls`):
/// the scripted model asks for it, as a real one would.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MockToolCall {
    /// The tool name the scripted model uses (the name the node offers the model).
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// The arguments (any JSON; a non-object is refused like a real model's would be).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub arguments: Option<Value>,
    /// The vendor call id to report; default `mock-call-<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub id: Option<String>,
}

impl MockToolCall {
    /// The call a model would have sent, as call `index` (0-based) of its response.
    pub fn to_model_call(&self, index: usize) -> ModelToolCall {
        ModelToolCall {
            id: self
                .id
                .clone()
                .unwrap_or_else(|| format!("mock-call-{index}")),
            name: self.name.clone(),
            arguments: self.arguments.clone().unwrap_or(Value::Null),
            signature: None,
        }
    }
}

/// Any JSON value, kept as written by the apiserver (a structural schema would prune it).
fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(arguments: Value) -> ModelToolCall {
        ModelToolCall {
            id: "c".into(),
            name: "t".into(),
            arguments,
            signature: None,
        }
    }

    #[test]
    fn arguments_must_be_an_object() {
        assert_eq!(
            arguments_object(&call(json!({"q": 1}))).unwrap(),
            json!({"q": 1}).as_object().unwrap().clone()
        );
        assert!(arguments_object(&call(Value::Null)).unwrap().is_empty());
        // OpenAI's JSON text, kept as a string when it arrived unparsed.
        assert_eq!(
            arguments_object(&call(json!("{\"q\": 2}"))).unwrap()["q"],
            2
        );
        assert_eq!(
            arguments_object(&call(json!("{\"q\": "))),
            Err(ArgumentsError::NotJson)
        );
        assert_eq!(
            arguments_object(&call(json!("[1]"))),
            Err(ArgumentsError::NotObject("array"))
        );
        assert_eq!(
            arguments_object(&call(json!(3))),
            Err(ArgumentsError::NotObject("number"))
        );
    }

    #[test]
    fn a_mock_call_becomes_a_model_call() {
        let m: MockToolCall =
            serde_json::from_value(json!({"name": "search", "arguments": {"q": "x"}})).unwrap();
        let c = m.to_model_call(2);
        assert_eq!(
            (c.id.as_str(), c.name.as_str(), &c.arguments),
            ("mock-call-2", "search", &json!({"q": "x"}))
        );
        let m: MockToolCall = serde_json::from_value(json!({"name": "s", "id": "call_9"})).unwrap();
        assert_eq!(m.to_model_call(0).id, "call_9");
        assert_eq!(m.to_model_call(0).arguments, Value::Null);
        assert!(serde_json::from_value::<MockToolCall>(json!({"name": "s", "args": {}})).is_err());
    }
}
