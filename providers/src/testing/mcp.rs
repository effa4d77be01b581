//! [`FakeMcp`]: a deterministic MCP server over streamable HTTP (the `initialize` revisions)
//! for tests, with knobs for what goes wrong in the field — a slow tool, a huge result, a
//! tool error, refused credentials, another protocol revision, an expired session, event-
//! stream answers — and a count, kept by the server itself, of every tool call it ran.
//!
//! Tools: `lookup {query}` (a read: "found: <query>"), `write_note {text}` (a write:
//! "noted: <text>"), `fail` (`isError: true`), `huge` (`Knobs::huge_bytes` of text), `slow`
//! (answers after `Knobs::slow`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Served;

/// What the server does; change it between calls through [`FakeMcp::knobs`].
#[derive(Debug, Clone)]
pub struct Knobs {
    /// The `protocolVersion` answered to `initialize`; `None` echoes the client's.
    pub revision: Option<String>,
    /// When set, every request must carry `Authorization: <this>` (else 401).
    pub authorization: Option<String>,
    /// Answer requests as `text/event-stream` (a notification first, then the response).
    pub event_stream: bool,
    /// How long the `slow` tool takes.
    pub slow: Duration,
    /// Size of the `huge` tool's text.
    pub huge_bytes: usize,
    /// Answer the next request of the current session `404` (the session expired).
    pub expire_session: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            revision: None,
            authorization: None,
            event_stream: false,
            slow: Duration::from_secs(5),
            huge_bytes: 1 << 20,
            expire_session: false,
        }
    }
}

/// What the server saw.
#[derive(Debug, Default)]
pub struct McpLog {
    /// Every tool call it ran: (tool, arguments).
    pub calls: Vec<(String, Value)>,
    /// Sessions opened (`initialize` answered).
    pub sessions: usize,
    /// Requests after `initialize` whose `MCP-Protocol-Version` or `Mcp-Session-Id` was not
    /// the negotiated one.
    pub bad_headers: usize,
}

#[derive(Default)]
struct State {
    knobs: Knobs,
    log: McpLog,
    session: Option<String>,
    revision: Option<String>,
}

/// The fake server, on its own thread (usable from sync tests and inside a runtime).
pub struct FakeMcp {
    /// The endpoint (`http://127.0.0.1:<port>/mcp`).
    pub url: String,
    state: Arc<Mutex<State>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeMcp {
    /// Serves on a free port of 127.0.0.1.
    pub fn start(knobs: Knobs) -> FakeMcp {
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("bind the fake MCP server");
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            knobs,
            ..State::default()
        }));
        let shared = state.clone();
        let app = axum::Router::new().route(
            "/mcp",
            axum::routing::post(move |headers: HeaderMap, body: String| {
                let state = shared.clone();
                async move { answer(&state, &headers, &body).await }
            }),
        );
        let Served { stop, thread } = Served::start(listener, app);
        FakeMcp {
            url,
            state,
            stop,
            thread,
        }
    }

    /// Changes what the server does from now on.
    pub fn knobs(&self, change: impl FnOnce(&mut Knobs)) {
        change(&mut self.state.lock().unwrap().knobs);
    }

    /// What the server saw so far.
    pub fn log<R>(&self, read: impl FnOnce(&McpLog) -> R) -> R {
        read(&self.state.lock().unwrap().log)
    }
}

impl Drop for FakeMcp {
    fn drop(&mut self) {
        Served::stop(self.stop.take(), self.thread.take());
    }
}

fn rpc_error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

async fn answer(state: &Mutex<State>, headers: &HeaderMap, body: &str) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (knobs, session, revision) = {
        let s = state.lock().unwrap();
        (s.knobs.clone(), s.session.clone(), s.revision.clone())
    };
    if let Some(want) = &knobs.authorization
        && header("authorization").as_deref() != Some(want)
    {
        return (StatusCode::UNAUTHORIZED, "missing or wrong credentials").into_response();
    }
    let Ok(msg) = serde_json::from_str::<Value>(body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let method = msg["method"].as_str().unwrap_or_default().to_owned();
    let id = msg.get("id").cloned();
    if method == "initialize" {
        let asked = msg["params"]["protocolVersion"]
            .as_str()
            .unwrap_or_default();
        let answered = knobs.revision.clone().unwrap_or_else(|| asked.to_owned());
        let new_session = {
            let mut s = state.lock().unwrap();
            s.log.sessions += 1;
            let sid = format!("session-{}", s.log.sessions);
            s.session = Some(sid.clone());
            s.revision = Some(answered.clone());
            s.knobs.expire_session = false;
            sid
        };
        let result = json!({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": answered,
            "capabilities": {"tools": {"listChanged": false}},
            "serverInfo": {"name": "fake-mcp", "version": "1.0.0"},
        }});
        let mut resp = reply(&knobs, result);
        resp.headers_mut()
            .insert("mcp-session-id", new_session.parse().unwrap());
        return resp;
    }
    if knobs.expire_session && header("mcp-session-id").is_some() {
        return (StatusCode::NOT_FOUND, "session expired").into_response();
    }
    if header("mcp-session-id") != session || header("mcp-protocol-version") != revision {
        state.lock().unwrap().log.bad_headers += 1;
    }
    let Some(id) = id else {
        // A notification (`notifications/initialized`, ...).
        return StatusCode::ACCEPTED.into_response();
    };
    let message = match method.as_str() {
        "tools/list" => json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools()}}),
        "tools/call" => {
            let name = msg["params"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let args = msg["params"]["arguments"].clone();
            state
                .lock()
                .unwrap()
                .log
                .calls
                .push((name.clone(), args.clone()));
            match call(&knobs, &name, &args).await {
                Some(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                None => rpc_error(&id, -32602, &format!("unknown tool: {name}")),
            }
        }
        other => rpc_error(&id, -32601, &format!("method not found: {other}")),
    };
    reply(&knobs, message)
}

/// A JSON body, or an event stream carrying a progress notification and then `message`.
fn reply(knobs: &Knobs, message: Value) -> Response {
    if !knobs.event_stream {
        return axum::Json(message).into_response();
    }
    let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                      "params": {"level": "info", "data": "working"}});
    let body = format!("event: message\ndata: {note}\n\nevent: message\ndata: {message}\n\n");
    ([("content-type", "text/event-stream")], body).into_response()
}

fn tools() -> Value {
    let text_arg = |name: &str| json!({"type": "object", "properties": {name: {"type": "string"}}, "required": [name]});
    json!([
        {"name": "lookup", "description": "Looks a query up.", "inputSchema": text_arg("query"),
         "annotations": {"readOnlyHint": true}},
        {"name": "write_note", "description": "Writes a note.", "inputSchema": text_arg("text")},
        {"name": "fail", "description": "Always fails.", "inputSchema": {"type": "object"}},
        {"name": "huge", "description": "Answers a lot of text.", "inputSchema": {"type": "object"}},
        {"name": "slow", "description": "Takes its time.", "inputSchema": {"type": "object"}},
    ])
}

async fn call(knobs: &Knobs, name: &str, args: &Value) -> Option<Value> {
    let text = |t: String| json!({"content": [{"type": "text", "text": t}], "isError": false});
    Some(match name {
        "lookup" => text(format!(
            "found: {}",
            args["query"].as_str().unwrap_or_default()
        )),
        "write_note" => text(format!(
            "noted: {}",
            args["text"].as_str().unwrap_or_default()
        )),
        "fail" => {
            json!({"content": [{"type": "text", "text": "the tool failed"}], "isError": true})
        }
        "huge" => text("x".repeat(knobs.huge_bytes)),
        "slow" => {
            tokio::time::sleep(knobs.slow).await;
            text("finally".into())
        }
        _ => return None,
    })
}
