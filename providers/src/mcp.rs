//! An MCP client over streamable HTTP, for the revisions with the `initialize` handshake
//! ([`McpRevision`]): what a worker uses to list and call a declared ToolServer's tools.
//!
//! Every JSON-RPC message is one `POST` to the server's URL, accepting `application/json` and
//! `text/event-stream`; a request is answered by one JSON body or by an event stream that
//! carries the response (server notifications and requests on it are skipped). The session
//! id the server assigns at `initialize` (`Mcp-Session-Id`) and the negotiated revision
//! (`MCP-Protocol-Version`) go with every later message; a `404` to a message of an expired
//! session starts a new one, once. The revision is the ToolServer's policy
//! ([`accept_revision`]): the preferred one or the admin's fallback, never another.
//!
//! Each call is bounded: a whole-exchange timeout (the ToolServer's `timeoutSeconds`) and a
//! response size read chunk by chunk and abandoned past `max_body_bytes`. Header values come
//! from Secrets: they are sent marked sensitive, never printed by `Debug`, and never quoted
//! in an error (an error names the server's URL without its query and the status).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use openwop_protocol::tools::mcp::{
    McpRevision, Negotiated, RevisionPolicy, RevisionRefused, accept_revision,
};
use openwop_protocol::tools::policy::DiscoveredTool;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// `clientInfo.name` in `initialize`.
const CLIENT_NAME: &str = "openwop-worker";
/// Longest part of a server's error text kept in an error.
const MAX_ERROR_TEXT: usize = 300;
/// Most `tools/list` pages followed (a server that never stops paginating is cut off).
const MAX_LIST_PAGES: usize = 64;

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

/// Where and how to reach one MCP server.
#[derive(Clone)]
pub struct McpServer {
    /// The streamable HTTP endpoint (the ToolServer's `spec.url`).
    pub url: String,
    /// Headers from the ToolServer's Secret keys (`Authorization`, API keys).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub revisions: RevisionPolicy,
    /// Longest wait for one exchange (a request and its whole response).
    pub timeout: Duration,
    /// Largest response body read; a larger one fails the call unread.
    pub max_body_bytes: u64,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values are secrets: only their names are shown.
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("McpServer")
            .field("url", &url_for_errors(&self.url))
            .field("headers", &names)
            .field("revisions", &self.revisions)
            .field("timeout", &self.timeout)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish()
    }
}

/// Why an MCP exchange failed. Messages name the server's URL (without its query) and never
/// a header value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum McpError {
    #[error(
        "the MCP server at {url} refused the credentials (HTTP {status}): check the ToolServer's headersFrom Secret"
    )]
    Unauthorized { url: String, status: u16 },
    #[error("the MCP server at {url} answered HTTP {status}: {text}")]
    Http {
        url: String,
        status: u16,
        text: String,
    },
    #[error("{0}")]
    Revision(RevisionRefused),
    #[error("the MCP server at {url} answered error {code}: {message}")]
    Rpc {
        url: String,
        code: i64,
        message: String,
    },
    #[error("the MCP server at {url} did not answer within {seconds} s")]
    Timeout { url: String, seconds: u64 },
    #[error("the MCP server at {url} answered more than {limit} bytes")]
    TooLarge { url: String, limit: u64 },
    #[error("the MCP server at {url} answered something that is not MCP: {why}")]
    Malformed { url: String, why: String },
    #[error("cannot reach the MCP server at {url}: {why}")]
    Unreachable { url: String, why: String },
}

impl McpError {
    /// Whether the same call may succeed if made again (a timeout, a 5xx, no connection).
    pub fn is_transient(&self) -> bool {
        match self {
            McpError::Timeout { .. } | McpError::Unreachable { .. } => true,
            McpError::Http { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
}

/// A connected session: `initialize` done, the negotiated revision known.
#[derive(Debug)]
pub struct McpSession {
    http: reqwest::Client,
    server: McpServer,
    negotiated: Negotiated,
    /// The server's `Mcp-Session-Id`, when it assigned one (replaced when it expires).
    session_id: Mutex<Option<HeaderValue>>,
    next_id: AtomicU64,
    /// `serverInfo` and `capabilities` of the `initialize` answer.
    pub server_info: Value,
}

impl McpSession {
    /// Connects: `initialize` with the policy's preferred revision, the answer's revision
    /// accepted or refused by the policy, then `notifications/initialized`.
    pub async fn connect(server: McpServer) -> Result<McpSession, McpError> {
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| McpError::Unreachable {
                url: url_for_errors(&server.url),
                why: format!("cannot build the HTTP client: {e}"),
            })?;
        let (negotiated, session_id, server_info) = initialize(&http, &server).await?;
        Ok(McpSession {
            http,
            server,
            negotiated,
            session_id: Mutex::new(session_id),
            next_id: AtomicU64::new(2),
            server_info,
        })
    }

    /// The revision this session speaks (a fallback is the admin's, to be recorded).
    pub fn negotiated(&self) -> Negotiated {
        self.negotiated
    }

    /// Every tool the server lists, following `nextCursor`.
    pub async fn list_tools(&self) -> Result<Vec<DiscoveredTool>, McpError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.request("tools/list", params).await?;
            let listed = page.get("tools").and_then(Value::as_array).ok_or_else(|| {
                self.malformed("a tools/list answer without a `tools` array".into())
            })?;
            for (i, t) in listed.iter().enumerate() {
                let tool = DiscoveredTool::deserialize(t).map_err(|e| {
                    self.malformed(format!("tools/list entry {i} is not a tool ({e})"))
                })?;
                tools.push(tool);
            }
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
                .map(str::to_owned);
            if cursor.is_none() {
                return Ok(tools);
            }
        }
        Err(self.malformed(format!(
            "tools/list still had more pages after {MAX_LIST_PAGES}"
        )))
    }

    /// Calls `name` with `arguments`: the `CallToolResult` as sent. A tool's own failure is
    /// a result with `isError: true` (for the model to read), not an error here.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<Value, McpError> {
        self.request(
            "tools/call",
            json!({ "name": name, "arguments": Value::Object(arguments) }),
        )
        .await
    }

    /// One request and its result; an expired session (`404` to a message carrying its id)
    /// is replaced by a new one and the request sent again, once.
    async fn request(&self, method: &str, params: Value) -> Result<Value, McpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let revision = Some(self.negotiated.revision());
        let session = self.session();
        let sent = exchange(&self.http, &self.server, &msg, session.as_ref(), revision).await;
        let answered = match sent {
            Err(Exchange::Status(StatusCode::NOT_FOUND, _)) if session.is_some() => {
                let (_, renewed, _) = initialize(&self.http, &self.server).await?;
                *self.session_id.lock().unwrap_or_else(|e| e.into_inner()) = renewed.clone();
                exchange(&self.http, &self.server, &msg, renewed.as_ref(), revision).await
            }
            other => other,
        };
        answered
            .map_err(|e| e.into_error(&self.server))
            .and_then(|(body, _)| result_of(&self.server, body, id))
    }

    fn session(&self) -> Option<HeaderValue> {
        self.session_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn malformed(&self, why: String) -> McpError {
        McpError::Malformed {
            url: url_for_errors(&self.server.url),
            why,
        }
    }
}

/// `initialize` then `notifications/initialized`: the accepted revision, the session id
/// and the server's `serverInfo`/`capabilities`.
async fn initialize(
    http: &reqwest::Client,
    server: &McpServer,
) -> Result<(Negotiated, Option<HeaderValue>, Value), McpError> {
    let msg = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": server.revisions.preferred.as_str(),
            "capabilities": {},
            "clientInfo": {"name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION")},
        },
    });
    let (body, headers) = exchange(http, server, &msg, None, None)
        .await
        .map_err(|e| e.into_error(server))?;
    let result = result_of(server, body, 1)?;
    let answered = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::Malformed {
            url: url_for_errors(&server.url),
            why: "an initialize answer without `protocolVersion`".into(),
        })?;
    let negotiated = accept_revision(&server.revisions, answered).map_err(McpError::Revision)?;
    let session = headers.get(SESSION_HEADER).cloned();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    exchange(
        http,
        server,
        &note,
        session.as_ref(),
        Some(negotiated.revision()),
    )
    .await
    .map_err(|e| e.into_error(server))?;
    let info = json!({
        "serverInfo": result.get("serverInfo").cloned().unwrap_or(Value::Null),
        "capabilities": result.get("capabilities").cloned().unwrap_or(Value::Null),
    });
    Ok((negotiated, session, info))
}

/// How one exchange failed, before it is named for the server.
enum Exchange {
    Status(StatusCode, String),
    Timeout,
    TooLarge,
    Malformed(String),
    Unreachable(String),
}

impl Exchange {
    fn into_error(self, server: &McpServer) -> McpError {
        let url = url_for_errors(&server.url);
        match self {
            Exchange::Status(s, _)
                if s == StatusCode::UNAUTHORIZED || s == StatusCode::FORBIDDEN =>
            {
                McpError::Unauthorized {
                    url,
                    status: s.as_u16(),
                }
            }
            Exchange::Status(s, text) => McpError::Http {
                url,
                status: s.as_u16(),
                text: scrub(server, &text),
            },
            Exchange::Timeout => McpError::Timeout {
                url,
                seconds: server.timeout.as_secs(),
            },
            Exchange::TooLarge => McpError::TooLarge {
                url,
                limit: server.max_body_bytes,
            },
            Exchange::Malformed(why) => McpError::Malformed {
                url,
                why: scrub(server, &why),
            },
            Exchange::Unreachable(why) => McpError::Unreachable {
                url,
                why: scrub(server, &why),
            },
        }
    }
}

/// POSTs one message; for a request (it has an `id`), the JSON-RPC response to it — read from
/// a JSON body or from the event stream — with the response headers; for a notification,
/// `Null` once the server accepted it.
async fn exchange(
    http: &reqwest::Client,
    server: &McpServer,
    msg: &Value,
    session: Option<&HeaderValue>,
    revision: Option<McpRevision>,
) -> Result<(Value, HeaderMap), Exchange> {
    let work = async {
        let mut req = http
            .post(&server.url)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
            .body(msg.to_string());
        for (name, value) in &server.headers {
            let mut v = value.clone();
            v.set_sensitive(true);
            req = req.header(name, v);
        }
        if let Some(s) = session {
            req = req.header(SESSION_HEADER, s);
        }
        if let Some(r) = revision {
            req = req.header(VERSION_HEADER, r.as_str());
        }
        let mut resp = req
            .send()
            .await
            .map_err(|e| Exchange::Unreachable(without_url(e)))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        if !status.is_success() {
            let text = read_bounded(&mut resp, server.max_body_bytes.min(64 * 1024))
                .await
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .chars()
                        .take(MAX_ERROR_TEXT)
                        .collect()
                })
                .unwrap_or_default();
            return Err(Exchange::Status(status, text));
        }
        let Some(id) = msg.get("id") else {
            // A notification: 202 Accepted, no body.
            return Ok((Value::Null, headers));
        };
        let is_stream = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let answer = if is_stream {
            response_in_stream(&mut resp, server.max_body_bytes, id).await?
        } else {
            let body = read_bounded(&mut resp, server.max_body_bytes).await?;
            serde_json::from_slice(&body)
                .map_err(|e| Exchange::Malformed(format!("a body that is not JSON ({e})")))?
        };
        Ok((answer, headers))
    };
    tokio::time::timeout(server.timeout, work)
        .await
        .unwrap_or(Err(Exchange::Timeout))
}

/// The body, read chunk by chunk and abandoned as soon as it exceeds `limit`.
async fn read_bounded(resp: &mut reqwest::Response, limit: u64) -> Result<Vec<u8>, Exchange> {
    if resp.content_length().is_some_and(|n| n > limit) {
        return Err(Exchange::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| Exchange::Unreachable(without_url(e)))?
    {
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(Exchange::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The JSON-RPC response with `id` on a `text/event-stream` answer, read event by event and
/// returned as soon as it arrives (a server may keep the stream open after it); other
/// messages on the stream are skipped. At most `limit` bytes are read.
async fn response_in_stream(
    resp: &mut reqwest::Response,
    limit: u64,
    id: &Value,
) -> Result<Value, Exchange> {
    let mut events = EventStream::default();
    let mut read = 0u64;
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| Exchange::Unreachable(without_url(e)))?
    {
        read += chunk.len() as u64;
        if read > limit {
            return Err(Exchange::TooLarge);
        }
        for data in events.push(&chunk) {
            if let Some(m) = response_with_id(&data, id) {
                return Ok(m);
            }
        }
    }
    events
        .finish()
        .and_then(|data| response_with_id(&data, id))
        .ok_or_else(|| {
            Exchange::Malformed("an event stream that ended without the response".into())
        })
}

/// `data` (one event's data) when it is the response to request `id`.
fn response_with_id(data: &str, id: &Value) -> Option<Value> {
    serde_json::from_str::<Value>(data).ok().filter(|m| {
        m.get("id") == Some(id) && (m.get("result").is_some() || m.get("error").is_some())
    })
}

/// Server-sent events, split as bytes arrive: each complete event's `data:` lines, joined.
#[derive(Default)]
struct EventStream {
    pending: Vec<u8>,
    data: Option<String>,
}

impl EventStream {
    /// Takes more bytes; returns the data of the events they complete.
    fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let mut done = Vec::new();
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                done.extend(self.data.take());
            } else if let Some(d) = line.strip_prefix("data:") {
                let d = d.strip_prefix(' ').unwrap_or(d);
                match &mut self.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(d);
                    }
                    None => self.data = Some(d.to_owned()),
                }
            }
        }
        done
    }

    /// The data of an event the stream ended in the middle of.
    fn finish(mut self) -> Option<String> {
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            let mut done = self.push(&rest);
            done.extend(self.push(b"\n\n"));
            return done.pop();
        }
        self.data.take()
    }
}

/// The `result` of the JSON-RPC response to request `id`, or its `error`.
fn result_of(server: &McpServer, answer: Value, id: u64) -> Result<Value, McpError> {
    let url = url_for_errors(&server.url);
    if answer.get("id") != Some(&json!(id)) {
        return Err(McpError::Malformed {
            url,
            why: format!("a response to another request than {id}"),
        });
    }
    if let Some(e) = answer.get("error") {
        return Err(McpError::Rpc {
            url,
            code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: scrub(
                server,
                e.get("message").and_then(Value::as_str).unwrap_or_default(),
            )
            .chars()
            .take(MAX_ERROR_TEXT)
            .collect(),
        });
    }
    answer.get("result").cloned().ok_or(McpError::Malformed {
        url,
        why: "a response with neither `result` nor `error`".into(),
    })
}

/// The URL without its query and fragment (which can carry keys).
fn url_for_errors(url: &str) -> String {
    url.split(['?', '#']).next().unwrap_or_default().to_owned()
}

/// A transport error's text without the URL reqwest puts in it (it may carry a query).
fn without_url(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    if e.is_connect() {
        text = format!("connection failed ({text})");
    }
    text
}

/// `text` with every header value of `server` replaced: a server may echo what it was sent.
fn scrub(server: &McpServer, text: &str) -> String {
    let mut out = text.to_owned();
    for (_, v) in &server.headers {
        if let Ok(v) = v.to_str()
            && v.len() >= 4
        {
            out = out.replace(v, "[redacted]");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_as_bytes_arrive_and_the_response_is_found_among_them() {
        let body = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n\
retry: 3000\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\ndata: \"result\":{\"ok\":true}}\r\n\r\n";
        // Any split of the bytes gives the same events.
        for cut in [1, 7, 40, body.len() - 1] {
            let mut events = EventStream::default();
            let mut data = events.push(&body.as_bytes()[..cut]);
            data.extend(events.push(&body.as_bytes()[cut..]));
            assert_eq!(data.len(), 2, "cut at {cut}: {data:?}");
            let found = data.iter().find_map(|d| response_with_id(d, &json!(7)));
            assert_eq!(found.unwrap()["result"]["ok"], true);
            assert!(
                data.iter()
                    .all(|d| response_with_id(d, &json!(8)).is_none())
            );
        }
        // A stream that ends inside an event still gives it.
        let mut events = EventStream::default();
        assert!(events.push(b"data: {\"id\":1,\"result\":{}}").is_empty());
        assert_eq!(events.finish().as_deref(), Some("{\"id\":1,\"result\":{}}"));
    }

    #[test]
    fn errors_and_debug_never_show_a_header_value_or_a_query() {
        let server = McpServer {
            url: "https://tools.example/mcp?key=sekrit-query".into(),
            headers: vec![(
                HeaderName::from_static("authorization"),
                HeaderValue::from_static("Bearer sekrit-token"),
            )],
            revisions: RevisionPolicy::default(),
            timeout: Duration::from_secs(3),
            max_body_bytes: 1024,
        };
        let debug = format!("{server:?}");
        assert!(!debug.contains("sekrit"), "{debug}");
        let e = Exchange::Status(
            StatusCode::BAD_GATEWAY,
            "upstream said: Bearer sekrit-token".into(),
        )
        .into_error(&server);
        let text = e.to_string();
        assert!(!text.contains("sekrit"), "{text}");
        assert!(text.contains("https://tools.example/mcp"), "{text}");
        assert!(e.is_transient());
        let e = result_of(
            &server,
            json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "bad token Bearer sekrit-token"}}),
            3,
        )
        .unwrap_err();
        assert!(!e.to_string().contains("sekrit"), "{e}");
    }
}
