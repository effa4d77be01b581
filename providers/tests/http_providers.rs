//! Each provider against a local fake server that speaks the vendor's real wire format.
//! Asserts the exact requests we send and the normalised responses the router sees.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router as HttpRouter;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use openwop_protocol::events::EventFactory;
use openwop_protocol::redact::Redactor;
use openwop_protocol::retry::{Action, RouterConfig, StopReason};
use openwop_protocol::tier1::Vendor;
use openwop_providers::{
    AnthropicMode, AnthropicProvider, ApiKey, CompletionRequest, GeminiProvider, OpenAiFlavor,
    OpenAiProvider, Provider, ProviderError, TransportPolicy,
};
use serde_json::{Value, json};

const KEY: &str = "sk-test-DO-NOT-LEAK-0123456789";

#[derive(Debug, Clone)]
struct Recorded {
    path: String,
    headers: HeaderMap,
    body: Value,
}

#[derive(Clone)]
struct Script {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<Recorded>>>,
}

#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, &'static str)>,
    body: Value,
    delay: Duration,
}

fn ok(body: Value) -> Reply {
    Reply {
        status: 200,
        headers: vec![],
        body,
        delay: Duration::ZERO,
    }
}

fn status(code: u16, body: Value) -> Reply {
    Reply {
        status: code,
        headers: vec![],
        body,
        delay: Duration::ZERO,
    }
}

async fn handle(State(s): State<Script>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    s.seen.lock().unwrap().push(Recorded {
        path: uri.path().to_string(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let reply = s.replies.lock().unwrap().pop_front();
    let Some(reply) = reply else {
        return (StatusCode::IM_A_TEAPOT, "script exhausted").into_response();
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut resp = (
        StatusCode::from_u16(reply.status).unwrap(),
        axum::Json(reply.body),
    )
        .into_response();
    for (k, v) in reply.headers {
        resp.headers_mut().insert(k, v.parse().unwrap());
    }
    resp
}

struct Fake {
    base: String,
    seen: Arc<Mutex<Vec<Recorded>>>,
}

impl Fake {
    fn requests(&self) -> Vec<Recorded> {
        self.seen.lock().unwrap().clone()
    }
}

async fn fake(replies: Vec<Reply>) -> Fake {
    let script = Script {
        replies: Arc::new(Mutex::new(replies.into())),
        seen: Arc::new(Mutex::new(Vec::new())),
    };
    let seen = script.seen.clone();
    let app = HttpRouter::new().fallback(handle).with_state(script);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Fake {
        base: format!("http://{addr}"),
        seen,
    }
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": false
    })
}

/// What each vendor must receive: the Tier-1 module's lowering of the full schema.
fn lowered(vendor: Vendor) -> Value {
    openwop_protocol::tier1::lower(&schema(), vendor).expect("test schema lowers")
}

fn request(max_tokens: u32) -> CompletionRequest {
    CompletionRequest {
        node_id: "n1".into(),
        system_prompt: "Be precise.".into(),
        user_prompt: "What is the answer?".into(),
        max_tokens,
        schema: Some(schema()),
        schema_name: "answer".into(),
        tools: vec![],
        turns: vec![],
    }
}

fn fast() -> TransportPolicy {
    TransportPolicy {
        timeout: Duration::from_secs(5),
        max_retries: 2,
        base_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
        max_retry_after: Duration::from_secs(1),
        ..TransportPolicy::default()
    }
}

fn openai_reply(finish: &str, content: Value, refusal: Value) -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-2024-08-06",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content, "refusal": refusal},
            "logprobs": null,
            "finish_reason": finish
        }],
        "usage": {"prompt_tokens": 31, "completion_tokens": 17, "total_tokens": 48}
    })
}

fn openai(base: &str) -> OpenAiProvider {
    OpenAiProvider::new(
        OpenAiFlavor::OpenAi,
        format!("{base}/v1"),
        "gpt-4o",
        Some(ApiKey::new(KEY)),
        16_384,
        fast(),
    )
    .unwrap()
}

#[tokio::test]
async fn openai_sends_strict_json_schema_and_normalises_stops() {
    let f = fake(vec![
        ok(openai_reply(
            "stop",
            json!("{\"answer\":\"42\"}"),
            Value::Null,
        )),
        ok(openai_reply(
            "length",
            json!("{\"answer\":\"4"),
            Value::Null,
        )),
        ok(openai_reply(
            "stop",
            Value::Null,
            json!("I can't help with that."),
        )),
        ok(openai_reply("content_filter", Value::Null, Value::Null)),
    ])
    .await;
    let p = openai(&f.base);
    let r = p.complete(&request(700)).await.unwrap();
    assert_eq!(r.stop, StopReason::Clean);
    assert_eq!(r.text.as_deref(), Some("{\"answer\":\"42\"}"));
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (31, 17));
    assert_eq!(r.model, "gpt-4o-2024-08-06");
    assert_eq!(r.provider, "openai");

    let req = &f.requests()[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.headers["authorization"], format!("Bearer {KEY}"));
    assert_eq!(
        req.body,
        json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "Be precise."},
                {"role": "user", "content": "What is the answer?"}
            ],
            "max_completion_tokens": 700,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": lowered(Vendor::OpenAi), "strict": true}
            }
        })
    );

    let r = p.complete(&request(700)).await.unwrap();
    assert_eq!(
        r.stop,
        StopReason::Truncated {
            raw: "length".into()
        }
    );
    let r = p.complete(&request(700)).await.unwrap();
    assert!(matches!(r.stop, StopReason::Refusal { .. }));
    assert_eq!(r.refusal_text.as_deref(), Some("I can't help with that."));
    let r = p.complete(&request(700)).await.unwrap();
    assert_eq!(
        r.stop,
        StopReason::Refusal {
            raw: "content_filter".into(),
            safety_category: Some("content_filter".into())
        }
    );
}

#[tokio::test]
async fn openai_compatible_uses_max_tokens_and_no_auth_without_a_key() {
    let f = fake(vec![ok(openai_reply("stop", json!("{}"), Value::Null))]).await;
    let p = OpenAiProvider::new(
        OpenAiFlavor::Compatible,
        format!("{}/v1/", f.base),
        "llama3.1",
        None,
        4096,
        fast(),
    )
    .unwrap();
    let mut req = request(256);
    req.schema = None;
    p.complete(&req).await.unwrap();
    let sent = &f.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert!(sent.headers.get("authorization").is_none());
    assert_eq!(sent.body["max_tokens"], 256);
    assert!(sent.body.get("max_completion_tokens").is_none());
    assert!(
        sent.body.get("response_format").is_none(),
        "free-text call sends no schema"
    );
    assert_eq!(p.name(), "openai-compatible");
}

fn anthropic_reply(stop: &str, content: Value) -> Value {
    json!({
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": {"input_tokens": 12, "output_tokens": 34}
    })
}

#[tokio::test]
async fn anthropic_json_output_headers_body_and_stops() {
    let f = fake(vec![
        ok(anthropic_reply(
            "end_turn",
            json!([{"type": "text", "text": "{\"answer\":\"42\"}"}]),
        )),
        ok(anthropic_reply(
            "max_tokens",
            json!([{"type": "text", "text": "{\"ans"}]),
        )),
        ok(anthropic_reply(
            "refusal",
            json!([{"type": "text", "text": "I won't do that."}]),
        )),
    ])
    .await;
    let p = AnthropicProvider::new(
        &f.base,
        "claude-sonnet-4-5",
        ApiKey::new(KEY),
        8192,
        AnthropicMode::JsonOutput,
        fast(),
    )
    .unwrap();
    let r = p.complete(&request(1024)).await.unwrap();
    assert_eq!(r.stop, StopReason::Clean);
    assert_eq!(r.text.as_deref(), Some("{\"answer\":\"42\"}"));
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (12, 34));
    let sent = &f.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.headers["x-api-key"], KEY);
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert!(sent.headers.get("authorization").is_none());
    assert_eq!(
        sent.body,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": "Be precise.",
            "messages": [{"role": "user", "content": "What is the answer?"}],
            "output_config": {"format": {"type": "json_schema", "schema": lowered(Vendor::Anthropic)}}
        })
    );
    let r = p.complete(&request(1024)).await.unwrap();
    assert_eq!(
        r.stop.truncation_wire(),
        openwop_protocol::events::StopReason::MaxTokens
    );
    let r = p.complete(&request(1024)).await.unwrap();
    assert!(matches!(r.stop, StopReason::Refusal { .. }));
    assert_eq!(r.text, None, "refusal text is not a payload");
    assert_eq!(r.refusal_text.as_deref(), Some("I won't do that."));
}

#[tokio::test]
async fn anthropic_strict_tool_mode_returns_the_tool_input() {
    let f = fake(vec![ok(anthropic_reply(
        "tool_use",
        json!([{"type": "tool_use", "id": "toolu_1", "name": "answer", "input": {"answer": "42"}}]),
    ))])
    .await;
    let p = AnthropicProvider::new(
        &f.base,
        "claude-sonnet-4-5",
        ApiKey::new(KEY),
        8192,
        AnthropicMode::StrictTool,
        fast(),
    )
    .unwrap();
    let r = p.complete(&request(512)).await.unwrap();
    assert_eq!(r.stop, StopReason::ToolUse);
    assert_eq!(r.structured, Some(json!({"answer": "42"})));
    let body = &f.requests()[0].body;
    assert_eq!(body["tools"][0]["name"], "answer");
    assert_eq!(body["tools"][0]["strict"], true);
    assert_eq!(body["tools"][0]["input_schema"], lowered(Vendor::Anthropic));
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "answer"})
    );
    assert!(body.get("output_config").is_none());
}

fn gemini_reply(finish: &str, text: &str, ratings: Value) -> Value {
    json!({
        "candidates": [{
            "content": {"role": "model", "parts": [{"text": text}]},
            "finishReason": finish,
            "index": 0,
            "safetyRatings": ratings
        }],
        "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 21, "totalTokenCount": 30},
        "modelVersion": "gemini-2.5-flash"
    })
}

#[tokio::test]
async fn gemini_generate_content_with_response_schema_and_safety_blocks() {
    let f = fake(vec![
        ok(gemini_reply("STOP", "{\"answer\":\"42\"}", json!([]))),
        ok(gemini_reply("MAX_TOKENS", "{\"answer\":", json!([]))),
        ok(gemini_reply(
            "SAFETY",
            "",
            json!([{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true}]),
        )),
        ok(json!({
            "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
            "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}
        })),
    ])
    .await;
    let p = GeminiProvider::new(
        format!("{}/v1beta", f.base),
        "gemini-2.5-flash",
        ApiKey::new(KEY),
        8192,
        fast(),
    )
    .unwrap();
    let r = p.complete(&request(900)).await.unwrap();
    assert_eq!(r.stop, StopReason::Clean);
    assert_eq!(r.text.as_deref(), Some("{\"answer\":\"42\"}"));
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (9, 21));
    let sent = &f.requests()[0];
    assert_eq!(sent.path, "/v1beta/models/gemini-2.5-flash:generateContent");
    assert_eq!(sent.headers["x-goog-api-key"], KEY);
    assert_eq!(
        sent.body,
        json!({
            "systemInstruction": {"parts": [{"text": "Be precise."}]},
            "contents": [{"role": "user", "parts": [{"text": "What is the answer?"}]}],
            "generationConfig": {
                "maxOutputTokens": 900,
                "responseMimeType": "application/json",
                "responseSchema": lowered(Vendor::Gemini)
            }
        })
    );
    let r = p.complete(&request(900)).await.unwrap();
    assert_eq!(
        r.stop,
        StopReason::Truncated {
            raw: "MAX_TOKENS".into()
        }
    );
    let r = p.complete(&request(900)).await.unwrap();
    assert_eq!(
        r.stop,
        StopReason::Refusal {
            raw: "SAFETY".into(),
            safety_category: Some("HARM_CATEGORY_DANGEROUS_CONTENT".into())
        }
    );
    let r = p.complete(&request(900)).await.unwrap();
    assert_eq!(
        r.stop,
        StopReason::Refusal {
            raw: "PROHIBITED_CONTENT".into(),
            safety_category: Some("PROHIBITED_CONTENT".into())
        }
    );
    assert_eq!(r.text, None);
}

#[tokio::test]
async fn too_many_requests_honours_retry_after() {
    let mut limited = status(
        429,
        json!({"error": {"message": "Rate limit reached", "type": "requests"}}),
    );
    limited.headers = vec![("retry-after", "1")];
    let f = fake(vec![
        limited,
        ok(openai_reply("stop", json!("{}"), Value::Null)),
    ])
    .await;
    let p = openai(&f.base);
    let t0 = Instant::now();
    let r = p.complete(&request(10)).await.unwrap();
    assert_eq!(r.stop, StopReason::Clean);
    assert!(
        t0.elapsed() >= Duration::from_millis(950),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(f.requests().len(), 2);
}

#[tokio::test]
async fn server_errors_back_off_a_bounded_number_of_times() {
    let err = || {
        status(
            500,
            json!({"error": {"message": "internal", "type": "server_error"}}),
        )
    };
    let f = fake(vec![err(), err(), err(), err()]).await;
    let p = openai(&f.base);
    let e = p.complete(&request(10)).await.unwrap_err();
    match &e {
        ProviderError::RetriesExhausted { attempts, last, .. } => {
            assert_eq!(*attempts, 3);
            assert!(last.contains("HTTP 500"), "{last}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(f.requests().len(), 3, "max_retries 2 → 3 requests, no more");
}

#[tokio::test]
async fn client_errors_fail_at_once() {
    let f = fake(vec![status(
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too large"}}),
    )])
    .await;
    let p = AnthropicProvider::new(
        &f.base,
        "m",
        ApiKey::new(KEY),
        8192,
        AnthropicMode::JsonOutput,
        fast(),
    )
    .unwrap();
    let e = p.complete(&request(10)).await.unwrap_err();
    assert!(
        matches!(&e, ProviderError::Http { status: 400, message, .. } if message == "max_tokens: too large"),
        "{e:?}"
    );
    assert_eq!(f.requests().len(), 1);
}

#[tokio::test]
async fn timeouts_are_retried_then_reported() {
    let mut slow = ok(openai_reply("stop", json!("{}"), Value::Null));
    slow.delay = Duration::from_secs(3);
    let f = fake(vec![slow.clone(), slow]).await;
    let p = OpenAiProvider::new(
        OpenAiFlavor::OpenAi,
        format!("{}/v1", f.base),
        "gpt-4o",
        Some(ApiKey::new(KEY)),
        100,
        TransportPolicy {
            timeout: Duration::from_millis(200),
            max_retries: 1,
            ..fast()
        },
    )
    .unwrap();
    let e = p.complete(&request(10)).await.unwrap_err();
    assert!(
        matches!(&e, ProviderError::RetriesExhausted { attempts: 2, last, .. } if last.contains("timed out")),
        "{e:?}"
    );
}

/// Captures tracing output of the current thread.
#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn api_key_never_appears_in_errors_debug_or_logs() {
    let buf = LogBuf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    // A vendor that echoes the rejected key back, as some do.
    let echo = json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}});
    let f = fake(vec![
        status(503, echo.clone()),
        status(503, echo.clone()),
        status(503, echo.clone()),
        status(401, echo),
    ])
    .await;
    let p = openai(&f.base);
    let exhausted = p.complete(&request(10)).await.unwrap_err();
    let f2 = fake(vec![status(
        401,
        json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}}),
    )])
    .await;
    let p2 = openai(&f2.base);
    let rejected = p2.complete(&request(10)).await.unwrap_err();

    let logs = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("transport retry"),
        "retries are visible in logs: {logs}"
    );
    for text in [
        logs,
        exhausted.to_string(),
        format!("{exhausted:?}"),
        rejected.to_string(),
        format!("{rejected:?}"),
        format!("{p:?}"),
    ] {
        assert!(!text.contains(KEY), "key leaked: {text}");
    }
    assert!(rejected.to_string().contains("[REDACTED:api-key]"));
}

#[tokio::test]
async fn router_drives_a_real_provider_over_http() {
    // length → stop(invalid) → stop(valid): budgets 500, 1000, 1000 on the wire.
    let f = fake(vec![
        ok(openai_reply("length", json!("{\"answer\":"), Value::Null)),
        ok(openai_reply("stop", json!("{\"answer\": 42}"), Value::Null)),
        ok(openai_reply(
            "stop",
            json!("{\"answer\": \"42\"}"),
            Value::Null,
        )),
    ])
    .await;
    let p = openai(&f.base);
    let mut cfg = RouterConfig::new("n1", p.name(), p.model(), 500, p.output_ceiling());
    cfg.system_prompt = "Be precise.".into();
    cfg.user_prompt = "What is the answer?".into();
    let validator = openwop_protocol::schema::compile(&schema()).unwrap();
    let mut router =
        openwop_protocol::retry::Router::new(cfg, validator, Redactor::default()).unwrap();
    let mut factory = EventFactory::new("run-1", 0);
    let mut step = router.start(&mut factory, "2026-05-21T10:00:00Z").unwrap();
    let mut types = Vec::new();
    loop {
        types.extend(step.events.iter().map(|e| e.event_type.as_str()));
        match step.action {
            Action::Call(call) => {
                let resp = p
                    .complete(&CompletionRequest {
                        node_id: "n1".into(),
                        system_prompt: call.system_prompt.clone(),
                        user_prompt: call.user_prompt.clone(),
                        max_tokens: call.max_tokens,
                        schema: call.send_schema.then(schema),
                        schema_name: "answer".into(),
                        tools: vec![],
                        turns: vec![],
                    })
                    .await
                    .unwrap();
                step = router
                    .on_response(&resp, &mut factory, "2026-05-21T10:00:01Z")
                    .unwrap();
            }
            Action::Accept(a) => {
                assert_eq!(a.payload, json!({"answer": "42"}));
                assert_eq!(a.attempts, 3);
                break;
            }
            Action::Fail(f) => panic!("unexpected failure {f:?}"),
        }
    }
    let sent: Vec<_> = f
        .requests()
        .iter()
        .map(|r| r.body["max_completion_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(sent, [500, 1000, 1000]);
    let systems: Vec<_> = f
        .requests()
        .iter()
        .map(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        !systems[1].contains("did not validate"),
        "truncation retry has no corrective fragment"
    );
    assert!(
        systems[2].contains("did not validate"),
        "schema retry has one"
    );
    assert!(types.contains(&"envelope.truncated"));
    assert_eq!(
        types
            .iter()
            .filter(|t| **t == "envelope.retry.attempted")
            .count(),
        2
    );
}

/// Each vendor's real thinking wire shape becomes `thinking`, never part of the answer.
#[tokio::test]
async fn provider_thinking_is_decoded_from_each_vendor_wire_format() {
    let mut compat = openai_reply("stop", json!("{\"answer\":\"42\"}"), Value::Null);
    compat["choices"][0]["message"]["reasoning_content"] = json!("6 times 7 is 42.");
    let mut routed = openai_reply("stop", json!("{\"answer\":\"42\"}"), Value::Null);
    routed["choices"][0]["message"]["reasoning"] = json!("via the reasoning field");
    let f = fake(vec![
        ok(compat),
        ok(routed),
        ok(openai_reply("stop", json!("{}"), Value::Null)),
    ])
    .await;
    let p = OpenAiProvider::new(
        OpenAiFlavor::Compatible,
        format!("{}/v1", f.base),
        "deepseek-reasoner",
        None,
        4096,
        fast(),
    )
    .unwrap();
    let r = p.complete(&request(64)).await.unwrap();
    assert_eq!(r.thinking.as_deref(), Some("6 times 7 is 42."));
    assert_eq!(r.text.as_deref(), Some("{\"answer\":\"42\"}"));
    let r = p.complete(&request(64)).await.unwrap();
    assert_eq!(r.thinking.as_deref(), Some("via the reasoning field"));
    let r = p.complete(&request(64)).await.unwrap();
    assert_eq!(r.thinking, None);

    let f = fake(vec![ok(anthropic_reply(
        "end_turn",
        json!([
            {"type": "thinking", "thinking": "First, parse.", "signature": "sig1"},
            {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"},
            {"type": "thinking", "thinking": "Then answer.", "signature": "sig2"},
            {"type": "text", "text": "{\"answer\":\"42\"}"}
        ]),
    ))])
    .await;
    let p = AnthropicProvider::new(
        &f.base,
        "claude-sonnet-4-5",
        ApiKey::new(KEY),
        8192,
        AnthropicMode::JsonOutput,
        fast(),
    )
    .unwrap();
    let r = p.complete(&request(64)).await.unwrap();
    assert_eq!(r.thinking.as_deref(), Some("First, parse.\nThen answer."));
    assert_eq!(r.text.as_deref(), Some("{\"answer\":\"42\"}"));

    let mut g = gemini_reply("STOP", "{\"answer\":\"42\"}", json!([]));
    g["candidates"][0]["content"]["parts"] = json!([
        {"text": "**Planning** the answer", "thought": true},
        {"text": "{\"answer\":\"42\"}"}
    ]);
    let f = fake(vec![ok(g)]).await;
    let p = GeminiProvider::new(
        format!("{}/v1beta", f.base),
        "gemini-2.5-flash",
        ApiKey::new(KEY),
        8192,
        fast(),
    )
    .unwrap();
    let r = p.complete(&request(64)).await.unwrap();
    assert_eq!(r.thinking.as_deref(), Some("**Planning** the answer"));
    assert_eq!(r.text.as_deref(), Some("{\"answer\":\"42\"}"));
}

/// A tool round trip on each vendor's wire: the first request offers the tool, the reply's
/// call is decoded, and the second request carries the call and its result back in the
/// vendor's own shape (Anthropic's StrictTool mode lets the model pick any tool, not only
/// the schema tool, when tools are offered).
#[tokio::test]
async fn each_vendor_offers_tools_and_carries_a_round_back() {
    use openwop_providers::tools::{AssistantTurn, ToolResult, ToolSpec, ToolTurn};
    let specs = vec![ToolSpec {
        name: "lookup".into(),
        description: Some("Looks a word up".into()),
        input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    }];
    let with_tools = |turns: Vec<ToolTurn>| {
        let mut r = request(512);
        r.tools = specs.clone();
        r.turns = turns;
        r
    };
    let round = |first: &openwop_protocol::retry::NormalizedResponse| {
        let call = &first.tool_calls[0];
        vec![
            ToolTurn::Assistant(AssistantTurn::of(first)),
            ToolTurn::Results(vec![ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content: "<UNTRUSTED tool=\"lookup\">42</UNTRUSTED>".into(),
                is_error: false,
            }]),
        ]
    };

    // OpenAI chat.
    let f = fake(vec![
        ok(json!({
            "id": "c1", "model": "gpt-4.1",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"x\"}"}}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 6}
        })),
        ok(json!({
            "id": "c2", "model": "gpt-4.1",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "{\"answer\":\"42\"}"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 6}
        })),
    ])
    .await;
    let p = openai(&f.base);
    let first = p.complete(&with_tools(vec![])).await.unwrap();
    assert_eq!(first.tool_calls.len(), 1);
    assert_eq!(first.tool_calls[0].name, "lookup");
    p.complete(&with_tools(round(&first))).await.unwrap();
    let sent = f.requests();
    assert_eq!(sent[0].body["tools"][0]["function"]["name"], "lookup");
    let msgs = sent[1].body["messages"].as_array().unwrap();
    assert_eq!(
        msgs.len(),
        4,
        "system, user, the model's call, the result: {msgs:?}"
    );
    assert_eq!(msgs[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(msgs[3]["role"], "tool");
    assert_eq!(msgs[3]["tool_call_id"], "call_1");
    assert!(
        sent[1].body["response_format"].is_object(),
        "the schema is still sent"
    );

    // Anthropic, StrictTool mode.
    let f = fake(vec![
        ok(anthropic_reply(
            "tool_use",
            json!([{"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {"q": "x"}}]),
        )),
        ok(anthropic_reply(
            "tool_use",
            json!([{"type": "tool_use", "id": "toolu_10", "name": "answer", "input": {"answer": "42"}}]),
        )),
    ])
    .await;
    let p = AnthropicProvider::new(
        &f.base,
        "claude-sonnet-4-5",
        ApiKey::new(KEY),
        8192,
        AnthropicMode::StrictTool,
        fast(),
    )
    .unwrap();
    let first = p.complete(&with_tools(vec![])).await.unwrap();
    assert_eq!(first.tool_calls[0].id, "toolu_9");
    assert_eq!(
        first.structured, None,
        "a call of another tool is not the answer"
    );
    let last = p.complete(&with_tools(round(&first))).await.unwrap();
    assert!(
        last.tool_calls.is_empty(),
        "the schema tool is the answer, not a call"
    );
    assert_eq!(last.structured, Some(json!({"answer": "42"})));
    let sent = f.requests();
    let names: Vec<&str> = sent[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["lookup", "answer"]);
    assert_eq!(sent[0].body["tool_choice"], json!({"type": "any"}));
    let msgs = sent[1].body["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["content"][0]["type"], "tool_use");
    assert_eq!(msgs[2]["content"][0]["tool_use_id"], "toolu_9");

    // Gemini.
    let f = fake(vec![
        ok(json!({
            "candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"name": "lookup", "args": {"q": "x"}}, "thoughtSignature": "sig-1"}
            ]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 2, "totalTokenCount": 11}
        })),
        ok(gemini_reply("STOP", "{\"answer\":\"42\"}", json!([]))),
    ])
    .await;
    let p = GeminiProvider::new(
        format!("{}/v1beta", f.base),
        "gemini-2.5-flash",
        ApiKey::new(KEY),
        8192,
        fast(),
    )
    .unwrap();
    let first = p.complete(&with_tools(vec![])).await.unwrap();
    assert_eq!(first.tool_calls[0].name, "lookup");
    p.complete(&with_tools(round(&first))).await.unwrap();
    let sent = f.requests();
    assert_eq!(
        sent[0].body["tools"][0]["functionDeclarations"][0]["name"],
        "lookup"
    );
    let contents = sent[1].body["contents"].as_array().unwrap();
    assert_eq!(contents.len(), 3);
    assert_eq!(
        contents[1]["parts"][0]["thoughtSignature"], "sig-1",
        "echoed unchanged"
    );
    assert_eq!(
        contents[2]["parts"][0]["functionResponse"]["name"],
        "lookup"
    );
}
