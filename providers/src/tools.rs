//! Tool calling on each vendor's wire, as pure functions over JSON: the tools offered, the
//! calls a response asks for, and the conversation that carries calls and results back.
//!
//! | | OpenAI chat (and compatible) | Anthropic Messages | Gemini generateContent |
//! | --- | --- | --- | --- |
//! | offer | `tools: [{type: function, function: {name, description, parameters}}]` | `tools: [{name, description, input_schema}]` | `tools: [{functionDeclarations: [{name, description, parametersJsonSchema}]}]` |
//! | call | `message.tool_calls[]: {id, type: function, function: {name, arguments: "<JSON text>"}}` | content block `{type: tool_use, id, name, input}` | part `{functionCall: {name, args, id?}, thoughtSignature?}` |
//! | result | message `{role: tool, tool_call_id, content}` per call | one user message, blocks `{type: tool_result, tool_use_id, content, is_error?}` | one user content, parts `{functionResponse: {name, id?, response: {output} \| {error}}}` |
//!
//! Gemini's `thoughtSignature` rides on the part that carried a call (only the first of
//! parallel calls has one) and must come back unchanged in that same part: a decoded call
//! keeps it ([`ModelToolCall::signature`]) and the model turn is rebuilt with it in place.
//!
//! The conversation is rebuilt from recorded responses and recorded results
//! ([`AssistantTurn::of`], `ToolReturned::for_model`), so a replayed tool loop sends what the
//! live one sent. Anthropic `thinking` blocks are not carried back: the requests this crate
//! builds do not enable extended thinking, which would require echoing those blocks (and
//! their signatures) verbatim.

use openwop_protocol::retry::NormalizedResponse;
use openwop_protocol::tools::{ModelToolCall, OfferedTool};
use serde_json::{Map, Value, json};

use crate::error::ProviderError;

/// A tool as a model is offered it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The model-facing name ([`OfferedTool::model_name`]).
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: Value,
}

impl From<&OfferedTool> for ToolSpec {
    fn from(t: &OfferedTool) -> ToolSpec {
        ToolSpec {
            name: t.model_name.clone(),
            description: t.description.clone(),
            input_schema: t.input_schema.clone(),
        }
    }
}

/// A model turn that asked for tools.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssistantTurn {
    /// Text the model wrote beside its calls.
    pub text: Option<String>,
    pub tool_calls: Vec<ModelToolCall>,
}

impl AssistantTurn {
    /// The turn a (recorded) response was.
    pub fn of(response: &NormalizedResponse) -> AssistantTurn {
        AssistantTurn {
            text: response.text.clone().filter(|t| !t.is_empty()),
            tool_calls: response.tool_calls.clone(),
        }
    }
}

/// The result of one call, as the next request carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// The call's vendor id ([`ModelToolCall::id`]).
    pub call_id: String,
    /// The name the model called (Gemini pairs results by name).
    pub name: String,
    /// What the model reads (`ToolReturned::for_model`).
    pub content: String,
    pub is_error: bool,
}

/// One step of a tool conversation after the user prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolTurn {
    /// The model asked for calls.
    Assistant(AssistantTurn),
    /// The results of the previous turn's calls, in call order.
    Results(Vec<ToolResult>),
}

fn decode_error(provider: &str, message: impl Into<String>) -> ProviderError {
    ProviderError::Decode {
        provider: provider.to_owned(),
        message: message.into(),
    }
}

/// Arguments as an object for vendors whose wire needs one (Anthropic `input`, Gemini
/// `args`): a call whose arguments were not an object was refused, and the turn is sent back
/// with an empty object in their place.
fn args_object(call: &ModelToolCall) -> Value {
    match openwop_protocol::tools::call::arguments_object(call) {
        Ok(m) => Value::Object(m),
        Err(_) => Value::Object(Map::new()),
    }
}

fn appended(body: &mut Value, key: &str, items: Vec<Value>) {
    match body.get_mut(key).and_then(Value::as_array_mut) {
        Some(list) => list.extend(items),
        None => body[key] = Value::Array(items),
    }
}

/// OpenAI Chat Completions, and OpenAI-compatible servers (some of which send `arguments`
/// as an object, or no call `id`).
pub mod openai {
    use super::*;

    const PROVIDER: &str = "openai";

    /// The request's `tools`.
    pub fn tools(specs: &[ToolSpec]) -> Value {
        Value::Array(
            specs
                .iter()
                .map(|s| {
                    let mut f = json!({"name": s.name, "parameters": s.input_schema});
                    if let Some(d) = &s.description {
                        f["description"] = json!(d);
                    }
                    json!({"type": "function", "function": f})
                })
                .collect(),
        )
    }

    /// The calls of a chat-completions response (`choices[0].message.tool_calls`). Arguments
    /// text that does not parse is kept as a string (refused later, with a reason); a call
    /// without an id gets `call_<index>`.
    pub fn calls(resp: &Value) -> Result<Vec<ModelToolCall>, ProviderError> {
        let Some(list) = resp.pointer("/choices/0/message/tool_calls") else {
            return Ok(Vec::new());
        };
        let list = match list {
            Value::Null => return Ok(Vec::new()),
            Value::Array(l) => l,
            _ => return Err(decode_error(PROVIDER, "`tool_calls` is not an array")),
        };
        list.iter()
            .enumerate()
            .map(|(i, c)| {
                let f = c.get("function").ok_or_else(|| {
                    decode_error(PROVIDER, format!("tool call {i} has no `function`"))
                })?;
                let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
                    decode_error(PROVIDER, format!("tool call {i} has no function name"))
                })?;
                let arguments = match f.get("arguments") {
                    Some(Value::String(text)) => {
                        serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))
                    }
                    Some(other) => other.clone(),
                    None => Value::Null,
                };
                Ok(ModelToolCall {
                    id: c
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|id| !id.is_empty())
                        .map_or_else(|| format!("call_{i}"), str::to_owned),
                    name: name.to_owned(),
                    arguments,
                    signature: None,
                })
            })
            .collect()
    }

    /// The messages that follow the user prompt.
    pub fn messages(turns: &[ToolTurn]) -> Vec<Value> {
        let mut out = Vec::new();
        for turn in turns {
            match turn {
                ToolTurn::Assistant(a) => out.push(json!({
                    "role": "assistant",
                    "content": a.text,
                    "tool_calls": a.tool_calls.iter().map(|c| json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": arguments_text(c)},
                    })).collect::<Vec<_>>(),
                })),
                ToolTurn::Results(results) => out.extend(results.iter().map(|r| {
                    // The wire has no error flag: the text says so.
                    let content = if r.is_error {
                        format!("[error] {}", r.content)
                    } else {
                        r.content.clone()
                    };
                    json!({"role": "tool", "tool_call_id": r.call_id, "content": content})
                })),
            }
        }
        out
    }

    /// `arguments` as the model sent them: JSON text.
    fn arguments_text(c: &ModelToolCall) -> String {
        match &c.arguments {
            Value::String(raw) => raw.clone(),
            Value::Null => "{}".to_owned(),
            v => v.to_string(),
        }
    }

    /// Adds `tools` and `turns` to a request body (`OpenAiProvider::request_body`).
    pub fn with_tools(body: &mut Value, specs: &[ToolSpec], turns: &[ToolTurn]) {
        if !specs.is_empty() {
            body["tools"] = tools(specs);
        }
        appended(body, "messages", messages(turns));
    }
}

/// Anthropic Messages.
pub mod anthropic {
    use super::*;

    const PROVIDER: &str = "anthropic";

    /// The request's `tools`.
    pub fn tools(specs: &[ToolSpec]) -> Value {
        Value::Array(
            specs
                .iter()
                .map(|s| {
                    let mut t = json!({"name": s.name, "input_schema": s.input_schema});
                    if let Some(d) = &s.description {
                        t["description"] = json!(d);
                    }
                    t
                })
                .collect(),
        )
    }

    /// The `tool_use` blocks of a response, except the one named `schema_tool` (the forced
    /// structured-output tool of `AnthropicMode::StrictTool`, which is the answer).
    pub fn calls(resp: &Value, schema_tool: &str) -> Result<Vec<ModelToolCall>, ProviderError> {
        let blocks = resp
            .get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| decode_error(PROVIDER, "response has no `content` array"))?;
        blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
            .filter(|b| b.get("name").and_then(Value::as_str) != Some(schema_tool))
            .enumerate()
            .map(|(i, b)| {
                let name = b.get("name").and_then(Value::as_str).ok_or_else(|| {
                    decode_error(PROVIDER, format!("tool_use block {i} has no name"))
                })?;
                Ok(ModelToolCall {
                    id: b
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|id| !id.is_empty())
                        .map_or_else(|| format!("toolu_{i}"), str::to_owned),
                    name: name.to_owned(),
                    arguments: b.get("input").cloned().unwrap_or(Value::Null),
                    signature: None,
                })
            })
            .collect()
    }

    /// The messages that follow the user prompt. A turn's results go in one user message
    /// whose content is only `tool_result` blocks, in call order.
    pub fn messages(turns: &[ToolTurn]) -> Vec<Value> {
        turns
            .iter()
            .map(|turn| match turn {
                ToolTurn::Assistant(a) => {
                    let mut content = Vec::new();
                    if let Some(t) = &a.text {
                        content.push(json!({"type": "text", "text": t}));
                    }
                    content.extend(a.tool_calls.iter().map(|c| {
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": args_object(c)})
                    }));
                    json!({"role": "assistant", "content": content})
                }
                ToolTurn::Results(results) => json!({
                    "role": "user",
                    "content": results.iter().map(|r| {
                        let mut b = json!({"type": "tool_result", "tool_use_id": r.call_id, "content": r.content});
                        if r.is_error {
                            b["is_error"] = json!(true);
                        }
                        b
                    }).collect::<Vec<_>>(),
                }),
            })
            .collect()
    }

    /// Adds `tools` and `turns` to a request body (`AnthropicProvider::request_body`).
    pub fn with_tools(body: &mut Value, specs: &[ToolSpec], turns: &[ToolTurn]) {
        if !specs.is_empty() {
            let mut all = tools(specs);
            // Keep a StrictTool request's schema tool beside the offered ones.
            if let (Some(list), Some(existing)) = (
                all.as_array_mut(),
                body.get("tools").and_then(Value::as_array),
            ) {
                list.extend(existing.iter().cloned());
            }
            body["tools"] = all;
        }
        appended(body, "messages", messages(turns));
    }
}

/// Gemini generateContent.
pub mod gemini {
    use super::*;

    const PROVIDER: &str = "gemini";

    /// Prefix of the ids this crate makes up for calls Gemini sent without one: they pair
    /// results inside the host and are never sent to Gemini.
    pub const SYNTHETIC_ID_PREFIX: &str = "gemini-fc-";

    /// The request's `tools` (JSON Schema as `parametersJsonSchema`, not the OpenAPI subset).
    pub fn tools(specs: &[ToolSpec]) -> Value {
        json!([{
            "functionDeclarations": specs.iter().map(|s| {
                let mut d = json!({"name": s.name, "parametersJsonSchema": s.input_schema});
                if let Some(desc) = &s.description {
                    d["description"] = json!(desc);
                }
                d
            }).collect::<Vec<_>>()
        }])
    }

    /// The `functionCall` parts of `candidates[0]`, each with the `thoughtSignature` of its
    /// own part (a sibling of `functionCall`, not inside it).
    pub fn calls(resp: &Value) -> Result<Vec<ModelToolCall>, ProviderError> {
        let Some(parts) = resp.pointer("/candidates/0/content/parts") else {
            return Ok(Vec::new());
        };
        let parts = parts
            .as_array()
            .ok_or_else(|| decode_error(PROVIDER, "`content.parts` is not an array"))?;
        parts
            .iter()
            .filter_map(|p| Some((p, p.get("functionCall")?)))
            .enumerate()
            .map(|(i, (part, fc))| {
                let name = fc.get("name").and_then(Value::as_str).ok_or_else(|| {
                    decode_error(PROVIDER, format!("functionCall {i} has no name"))
                })?;
                let signature = part
                    .get("thoughtSignature")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                Ok(ModelToolCall {
                    id: fc
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|id| !id.is_empty())
                        .map_or_else(|| format!("{SYNTHETIC_ID_PREFIX}{i}"), str::to_owned),
                    name: name.to_owned(),
                    arguments: fc.get("args").cloned().unwrap_or(Value::Null),
                    signature,
                })
            })
            .collect()
    }

    fn vendor_id(id: &str) -> Option<&str> {
        (!id.starts_with(SYNTHETIC_ID_PREFIX)).then_some(id)
    }

    /// The `contents` that follow the user prompt: the model's turn with each call's
    /// signature back in its own part, then one user content of `functionResponse` parts.
    pub fn contents(turns: &[ToolTurn]) -> Vec<Value> {
        turns
            .iter()
            .map(|turn| match turn {
                ToolTurn::Assistant(a) => {
                    let mut parts = Vec::new();
                    if let Some(t) = &a.text {
                        parts.push(json!({"text": t}));
                    }
                    parts.extend(a.tool_calls.iter().map(|c| {
                        let mut fc = json!({"name": c.name, "args": args_object(c)});
                        if let Some(id) = vendor_id(&c.id) {
                            fc["id"] = json!(id);
                        }
                        let mut part = json!({"functionCall": fc});
                        if let Some(sig) = &c.signature {
                            part["thoughtSignature"] = json!(sig);
                        }
                        part
                    }));
                    json!({"role": "model", "parts": parts})
                }
                ToolTurn::Results(results) => json!({
                    "role": "user",
                    "parts": results.iter().map(|r| {
                        let key = if r.is_error { "error" } else { "output" };
                        let mut fr = json!({"name": r.name, "response": {key: r.content}});
                        if let Some(id) = vendor_id(&r.call_id) {
                            fr["id"] = json!(id);
                        }
                        json!({"functionResponse": fr})
                    }).collect::<Vec<_>>(),
                }),
            })
            .collect()
    }

    /// Adds `tools` and `turns` to a request body (`GeminiProvider::request_body`).
    pub fn with_tools(body: &mut Value, specs: &[ToolSpec], turns: &[ToolTurn]) {
        if !specs.is_empty() {
            body["tools"] = tools(specs);
        }
        appended(body, "contents", contents(turns));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "get_weather".into(),
                description: Some("Current weather for a city".into()),
                input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            },
            ToolSpec {
                name: "ping".into(),
                description: None,
                input_schema: json!({"type": "object"}),
            },
        ]
    }

    fn call(id: &str, name: &str, arguments: Value, signature: Option<&str>) -> ModelToolCall {
        ModelToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
            signature: signature.map(str::to_owned),
        }
    }

    fn conversation(calls: Vec<ModelToolCall>) -> Vec<ToolTurn> {
        let results = calls
            .iter()
            .enumerate()
            .map(|(i, c)| ToolResult {
                call_id: c.id.clone(),
                name: c.name.clone(),
                content: format!("<UNTRUSTED tool=\"{}\">r{i}</UNTRUSTED>", c.name),
                is_error: i == 1,
            })
            .collect();
        vec![
            ToolTurn::Assistant(AssistantTurn {
                text: Some("Checking.".into()),
                tool_calls: calls,
            }),
            ToolTurn::Results(results),
        ]
    }

    #[test]
    fn openai_offers_decodes_and_sends_back() {
        assert_eq!(
            openai::tools(&spec()),
            json!([
                {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
                {"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}}
            ])
        );
        let resp = json!({
            "id": "chatcmpl-1", "model": "gpt-4.1",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [
                    {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_def", "type": "function", "function": {"name": "ping", "arguments": "{\"city\": "}}
                ]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20}
        });
        let calls = openai::calls(&resp).unwrap();
        assert_eq!(
            calls,
            vec![
                call("call_abc", "get_weather", json!({"city": "Paris"}), None),
                // Unparseable text is kept, to be refused with a reason.
                call("call_def", "ping", json!("{\"city\": "), None),
            ]
        );
        // A compatible server's object arguments and missing ids.
        let compat = json!({"choices": [{"message": {"tool_calls": [
            {"function": {"name": "ping", "arguments": {"n": 1}}}
        ]}}]});
        assert_eq!(
            openai::calls(&compat).unwrap(),
            vec![call("call_0", "ping", json!({"n": 1}), None)]
        );
        assert_eq!(
            openai::calls(&json!({"choices": [{"message": {"content": "hi"}}]})).unwrap(),
            vec![]
        );
        assert!(openai::calls(&json!({"choices": [{"message": {"tool_calls": {}}}]})).is_err());
        assert!(
            openai::calls(&json!({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}))
                .is_err()
        );

        assert_eq!(
            openai::messages(&conversation(calls)),
            vec![
                json!({"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_def", "type": "function", "function": {"name": "ping", "arguments": "{\"city\": "}}
                ]}),
                json!({"role": "tool", "tool_call_id": "call_abc", "content": "<UNTRUSTED tool=\"get_weather\">r0</UNTRUSTED>"}),
                json!({"role": "tool", "tool_call_id": "call_def", "content": "[error] <UNTRUSTED tool=\"ping\">r1</UNTRUSTED>"}),
            ]
        );
    }

    #[test]
    fn anthropic_offers_decodes_and_sends_back() {
        assert_eq!(
            anthropic::tools(&spec())[0],
            json!({"name": "get_weather", "description": "Current weather for a city",
                   "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}})
        );
        let resp = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "stop_reason": "tool_use",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_01B", "name": "ping", "input": {}},
                {"type": "tool_use", "id": "toolu_01C", "name": "emit_result", "input": {"answer": 1}}
            ],
            "usage": {"input_tokens": 10, "output_tokens": 20}
        });
        let calls = anthropic::calls(&resp, "emit_result").unwrap();
        assert_eq!(
            calls,
            vec![
                call("toolu_01A", "get_weather", json!({"city": "Paris"}), None),
                call("toolu_01B", "ping", json!({}), None),
            ]
        );
        assert!(anthropic::calls(&json!({}), "x").is_err());
        assert_eq!(
            anthropic::messages(&conversation(calls)),
            vec![
                json!({"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_01B", "name": "ping", "input": {}}
                ]}),
                json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "<UNTRUSTED tool=\"get_weather\">r0</UNTRUSTED>"},
                    {"type": "tool_result", "tool_use_id": "toolu_01B", "content": "<UNTRUSTED tool=\"ping\">r1</UNTRUSTED>", "is_error": true}
                ]}),
            ]
        );
        // A refused call's non-object arguments go back as an empty input.
        let m = anthropic::messages(&[ToolTurn::Assistant(AssistantTurn {
            text: None,
            tool_calls: vec![call("t", "ping", json!("oops"), None)],
        })]);
        assert_eq!(
            m[0]["content"],
            json!([{"type": "tool_use", "id": "t", "name": "ping", "input": {}}])
        );
    }

    #[test]
    fn gemini_keeps_each_signature_in_its_own_part() {
        assert_eq!(
            gemini::tools(&spec()),
            json!([{"functionDeclarations": [
                {"name": "get_weather", "description": "Current weather for a city",
                 "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
                {"name": "ping", "parametersJsonSchema": {"type": "object"}}
            ]}])
        );
        // Parallel calls: only the first part carries a signature.
        let resp = json!({
            "candidates": [{"finishReason": "STOP", "content": {"role": "model", "parts": [
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2lnLTE="},
                {"functionCall": {"name": "ping", "args": {}}}
            ]}}],
            "modelVersion": "gemini-3-pro"
        });
        let calls = gemini::calls(&resp).unwrap();
        assert_eq!(
            calls,
            vec![
                call(
                    "gemini-fc-0",
                    "get_weather",
                    json!({"city": "Paris"}),
                    Some("c2lnLTE=")
                ),
                call("gemini-fc-1", "ping", json!({}), None),
            ]
        );
        // Text beside a call, and a vendor id.
        let with_text = json!({"candidates": [{"content": {"parts": [
            {"text": "thinking aloud"},
            {"functionCall": {"id": "fc-9", "name": "ping", "args": {"a": 1}}, "thoughtSignature": "b2xk"}
        ]}}]});
        assert_eq!(
            gemini::calls(&with_text).unwrap(),
            vec![call("fc-9", "ping", json!({"a": 1}), Some("b2xk"))]
        );
        assert_eq!(
            gemini::calls(&json!({"promptFeedback": {"blockReason": "SAFETY"}})).unwrap(),
            vec![]
        );

        let contents = gemini::contents(&conversation(calls));
        assert_eq!(
            contents,
            vec![
                json!({"role": "model", "parts": [
                    {"text": "Checking."},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2lnLTE="},
                    {"functionCall": {"name": "ping", "args": {}}}
                ]}),
                json!({"role": "user", "parts": [
                    {"functionResponse": {"name": "get_weather", "response": {"output": "<UNTRUSTED tool=\"get_weather\">r0</UNTRUSTED>"}}},
                    {"functionResponse": {"name": "ping", "response": {"error": "<UNTRUSTED tool=\"ping\">r1</UNTRUSTED>"}}}
                ]}),
            ]
        );
        // Vendor ids go back on both sides; made-up ones never do.
        let with_id = gemini::contents(&conversation(vec![call("fc-9", "ping", json!({}), None)]));
        assert_eq!(with_id[0]["parts"][1]["functionCall"]["id"], "fc-9");
        assert_eq!(with_id[1]["parts"][0]["functionResponse"]["id"], "fc-9");
    }

    /// Each provider's response decoder hands the calls to the router with the rest.
    #[test]
    fn the_response_decoders_return_the_calls() {
        let r = crate::openai::decode_chat(
            "openai-compatible",
            "m",
            &json!({"choices": [{"finish_reason": "tool_calls", "message": {"content": null,
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "ping", "arguments": "{}"}}]}}]}),
        )
        .unwrap();
        assert!(r.stop.is_clean());
        assert_eq!(r.tool_calls, vec![call("call_1", "ping", json!({}), None)]);
        let e = crate::openai::decode_chat(
            "openai-compatible",
            "m",
            &json!({"choices": [{"message": {"tool_calls": 3}}]}),
        )
        .unwrap_err();
        assert!(e.to_string().contains("'openai-compatible'"), "{e}");

        let r = crate::anthropic::decode_messages(
            "m",
            "emit_result",
            &json!({"stop_reason": "tool_use", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "ping", "input": {"a": 1}}]}),
        )
        .unwrap();
        assert!(r.stop.is_clean() && r.structured.is_none());
        assert_eq!(
            r.tool_calls,
            vec![call("toolu_1", "ping", json!({"a": 1}), None)]
        );

        let r = crate::gemini::decode_generate(
            "m",
            &json!({"candidates": [{"finishReason": "STOP", "content": {"parts": [
                {"functionCall": {"name": "ping", "args": {}}, "thoughtSignature": "c2ln"}]}}]}),
        )
        .unwrap();
        assert!(r.stop.is_clean() && r.text.is_none());
        assert_eq!(
            r.tool_calls,
            vec![call("gemini-fc-0", "ping", json!({}), Some("c2ln"))]
        );
        // Recorded and read back (the journal), the signature survives for the next turn.
        let back: NormalizedResponse =
            serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(
            gemini::contents(&[ToolTurn::Assistant(AssistantTurn::of(&back))])[0]["parts"][0]["thoughtSignature"],
            "c2ln"
        );
    }

    #[test]
    fn a_turn_is_rebuilt_from_a_recorded_response() {
        let mock: openwop_protocol::retry::MockResponse = serde_json::from_value(json!({
            "stopReason": "tool_calls", "content": "",
            "toolCalls": [{"name": "ping", "arguments": {"n": 1}}]
        }))
        .unwrap();
        let recorded = mock.to_normalized("m");
        let turn = AssistantTurn::of(&recorded);
        assert_eq!(turn.text, None);
        assert_eq!(
            turn.tool_calls,
            vec![call("mock-call-0", "ping", json!({"n": 1}), None)]
        );
    }

    #[test]
    fn with_tools_extends_a_request_body() {
        let turns = conversation(vec![call("c1", "ping", json!({}), None)]);
        let mut body = json!({"model": "m", "messages": [
            {"role": "system", "content": "s"}, {"role": "user", "content": "u"}]});
        openai::with_tools(&mut body, &spec(), &turns);
        assert_eq!(body["tools"].as_array().unwrap().len(), 2);
        assert_eq!(body["messages"].as_array().unwrap().len(), 4);
        assert_eq!(body["messages"][2]["role"], "assistant");

        let mut body = json!({"messages": [{"role": "user", "content": "u"}],
            "tools": [{"name": "emit_result", "input_schema": {"type": "object"}}]});
        anthropic::with_tools(&mut body, &spec(), &turns);
        let names: Vec<&str> = body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["get_weather", "ping", "emit_result"]);
        assert_eq!(body["messages"].as_array().unwrap().len(), 3);

        let mut body = json!({"contents": [{"role": "user", "parts": [{"text": "u"}]}]});
        gemini::with_tools(&mut body, &[], &turns);
        assert!(body.get("tools").is_none());
        assert_eq!(body["contents"][1]["role"], "model");
    }
}
