//! Test support (feature `testing`): [`ScriptedLlm`], a fake OpenAI-compatible server that
//! speaks the real chat-completions wire format, plays a script per model and counts, itself,
//! every request it gets and every completion it delivers — so a test measures repeated
//! provider calls at the provider, not from the run's log. Its server runs on its own thread,
//! so it can be used from synchronous tests and from inside a tokio runtime alike.

pub mod mcp;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// One logical call of a [`ScriptedLlm`] model: the transient failures its HTTP requests get
/// first (each status answers one request; the transport retries), then its completion.
#[derive(Debug, Clone)]
pub struct Step {
    pub transient: Vec<u16>,
    pub reply: Reply,
}

/// What a [`ScriptedLlm`] sends once a call's transient failures are used up.
#[derive(Debug, Clone)]
pub enum Reply {
    /// An OpenAI chat completion with this `finish_reason` and message content.
    Completion { finish: String, content: String },
    /// A 200 whose JSON body is padded to `bytes`, with a `Content-Length` or, when
    /// `chunked`, streamed in chunks without one.
    Oversized { bytes: usize, chunked: bool },
}

impl Step {
    pub fn ok(finish: &str, content: impl ToString) -> Step {
        Step {
            transient: vec![],
            reply: Reply::Completion {
                finish: finish.into(),
                content: content.to_string(),
            },
        }
    }

    pub fn after(mut self, transient: &[u16]) -> Step {
        self.transient = transient.to_vec();
        self
    }
}

/// What a [`ScriptedLlm`] saw, by model: logical calls are told apart by their request body
/// (a retry changes the budget or the system prompt; a transport retry sends the same body).
#[derive(Debug, Default)]
pub struct LlmLog {
    /// Every HTTP request, in order: (model, call ordinal).
    pub requests: Vec<(String, usize)>,
    /// Every completion delivered, in order: (model, call ordinal).
    pub deliveries: Vec<(String, usize)>,
    ordinals: HashMap<String, Vec<String>>,
    transient_used: HashMap<(String, usize), usize>,
    /// 1-based index of the HTTP request to hold (see [`ScriptedLlm::hold_request`]).
    hold: Option<usize>,
    arrived: usize,
    holding: bool,
    /// Every answer is sent this long after its request arrived.
    delay: std::time::Duration,
}

type Script = BTreeMap<String, Vec<Step>>;

/// What [`ScriptedLlm::after_kill`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AfterKill {
    /// Completions delivered again although the run had recorded them: (model, call ordinal).
    pub repeated: Vec<(String, usize)>,
    /// Completions delivered again that were in flight (delivered, unrecorded) at the kill.
    pub in_flight: usize,
}

/// A fake OpenAI-compatible server (`POST {base}/chat/completions`). The same request body
/// always gets the same answer (a deterministic model), so a re-made call is counted, not
/// hidden.
pub struct ScriptedLlm {
    /// The API root to configure as the provider's base URL (`http://127.0.0.1:<port>/v1`).
    pub base: String,
    pub log: Arc<Mutex<LlmLog>>,
    release: Arc<tokio::sync::Notify>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ScriptedLlm {
    /// Serves `script` on a free port of 127.0.0.1.
    pub fn start(script: Script) -> ScriptedLlm {
        Self::start_on("127.0.0.1:0", script)
    }

    /// Serves `script` on `addr` (e.g. `0.0.0.0:0` for pods outside the host network).
    pub fn start_on(addr: &str, script: Script) -> ScriptedLlm {
        let listener = std::net::TcpListener::bind(addr).expect("bind the fake provider");
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let log: Arc<Mutex<LlmLog>> = Default::default();
        let release = Arc::new(tokio::sync::Notify::new());
        let (l, r, script) = (log.clone(), release.clone(), Arc::new(script));
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let (l, r, script) = (l.clone(), r.clone(), script.clone());
                async move { Self::answer(&l, &r, &script, body).await }
            }),
        );
        let Served { stop, thread } = Served::start(listener, app);
        ScriptedLlm {
            base,
            log,
            release,
            stop,
            thread,
        }
    }

    async fn answer(
        log: &Mutex<LlmLog>,
        release: &tokio::sync::Notify,
        script: &Script,
        body: Value,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        let held = {
            let mut log = log.lock().unwrap();
            log.arrived += 1;
            let held = log.hold == Some(log.arrived);
            log.holding |= held;
            held
        };
        if held {
            // Held until released (the test kills the caller meanwhile); then refused, so
            // nothing is delivered to a caller that is gone.
            release.notified().await;
            log.lock().unwrap().holding = false;
            return (
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(json!({"error": {"message": "held request released"}})),
            )
                .into_response();
        }
        let delay = log.lock().unwrap().delay;
        let response = Self::respond(log, script, body);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        response
    }

    fn respond(log: &Mutex<LlmLog>, script: &Script, body: Value) -> axum::response::Response {
        use axum::response::IntoResponse;
        let model = body["model"].as_str().unwrap_or_default().to_owned();
        let mut log = log.lock().unwrap();
        let known = log.ordinals.entry(model.clone()).or_default();
        let text = body.to_string();
        let ordinal = match known.iter().position(|b| *b == text) {
            Some(i) => i,
            None => {
                known.push(text);
                known.len() - 1
            }
        };
        log.requests.push((model.clone(), ordinal));
        let Some(step) = script.get(&model).and_then(|s| s.get(ordinal)) else {
            let msg = format!("script of model {model} has no call {}", ordinal + 1);
            return (
                axum::http::StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": {"message": msg}})),
            )
                .into_response();
        };
        let used = log
            .transient_used
            .entry((model.clone(), ordinal))
            .or_default();
        if let Some(&status) = step.transient.get(*used) {
            *used += 1;
            let status = axum::http::StatusCode::from_u16(status).unwrap();
            return (
                status,
                [("retry-after", "0")],
                axum::Json(json!({"error": {"message": "scripted transient failure"}})),
            )
                .into_response();
        }
        log.deliveries.push((model.clone(), ordinal));
        match &step.reply {
            Reply::Completion { finish, content } => axum::Json(json!({
                "model": model,
                "choices": [{"index": 0, "finish_reason": finish,
                    "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 5}
            }))
            .into_response(),
            Reply::Oversized { bytes, chunked } => {
                let head = br#"{"model":"x","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":""#;
                let tail = br#""}}]}"#;
                let mut full = head.to_vec();
                full.resize(bytes.saturating_sub(tail.len()).max(head.len()), b'x');
                full.extend_from_slice(tail);
                if *chunked {
                    let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = full
                        .chunks(64 * 1024)
                        .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
                        .collect();
                    let body = axum::body::Body::from_stream(futures::stream::iter(chunks));
                    ([("content-type", "application/json")], body).into_response()
                } else {
                    ([("content-type", "application/json")], full).into_response()
                }
            }
        }
    }

    /// HTTP requests received so far (a held one counts once it is released).
    pub fn requests(&self) -> usize {
        self.log.lock().unwrap().requests.len()
    }

    /// Completions delivered so far.
    pub fn deliveries(&self) -> Vec<(String, usize)> {
        self.log.lock().unwrap().deliveries.clone()
    }

    /// The completions delivered since `before` (what [`deliveries`](Self::deliveries) was at
    /// a kill), judged against the responses the run's log had recorded then (`recorded`:
    /// per model, how many): a call whose response was recorded and is delivered again is a
    /// repeated call; one delivered before the kill but never recorded was in flight.
    pub fn after_kill(
        &self,
        before: &[(String, usize)],
        recorded: &HashMap<String, usize>,
    ) -> AfterKill {
        let mut out = AfterKill::default();
        for (model, ordinal) in self.deliveries().into_iter().skip(before.len()) {
            if ordinal < recorded.get(&model).copied().unwrap_or(0) {
                out.repeated.push((model, ordinal));
            } else if before.contains(&(model, ordinal)) {
                out.in_flight += 1;
            }
        }
        out
    }

    /// Holds the `n`-th HTTP request (1-based, counted from the start or the last
    /// [`reset`](Self::reset)) without answering until [`release`](Self::release): a call in
    /// flight, for a test to kill its caller in.
    pub fn hold_request(&self, n: usize) {
        self.log.lock().unwrap().hold = Some(n);
    }

    /// Whether the held request has arrived and waits.
    pub fn holding(&self) -> bool {
        self.log.lock().unwrap().holding
    }

    /// Lets the held request go (it is answered 503 and delivers nothing).
    pub fn release(&self) {
        self.log.lock().unwrap().hold = None;
        self.release.notify_waiters();
    }

    /// Sends every answer `delay` after its request arrived (a slower model).
    pub fn set_delay(&self, delay: std::time::Duration) {
        self.log.lock().unwrap().delay = delay;
    }

    /// Forgets everything seen (requests, deliveries, ordinals, the hold; the delay stays): the next run
    /// starts the script from its beginning.
    pub fn reset(&self) {
        self.release();
        let mut log = self.log.lock().unwrap();
        let delay = log.delay;
        *log = LlmLog {
            delay,
            ..LlmLog::default()
        };
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        self.release.notify_waiters();
        Served::stop(self.stop.take(), self.thread.take());
    }
}

/// A fake server's `app`, served from `listener` on a thread of its own (with its own
/// runtime), so it answers whether the test is synchronous or inside a runtime.
pub(crate) struct Served {
    pub(crate) stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub(crate) thread: Option<std::thread::JoinHandle<()>>,
}

impl Served {
    pub(crate) fn start(listener: std::net::TcpListener, app: axum::Router) -> Served {
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the fake server");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        Served {
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Stops the server and waits for its thread.
    pub(crate) fn stop(
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        thread: Option<std::thread::JoinHandle<()>>,
    ) {
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}
