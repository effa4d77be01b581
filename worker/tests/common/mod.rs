//! Test harness: a real nats-server with JetStream per test (killed on drop, restartable on
//! the same port and store), and the worker binary run as a child process.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use openwop_protocol::run::env as run_env;
use openwop_protocol::run::subjects::{self, StreamSpec};
use openwop_worker::nats::{self, RetryPolicy};
use serde_json::Value;

pub use openwop_nats::testing::NatsServer;

/// One run's files: snapshot, mock programs, termination log, mock call log, secrets.
pub struct RunFiles {
    pub dir: tempfile::TempDir,
    pub namespace: String,
    pub name: String,
    /// The runId: subjects and event ids are keyed by it.
    pub run_id: String,
    /// Mock provider calls seen in the stderr of every worker run so far, in order.
    calls: std::sync::Mutex<Vec<Value>>,
}

impl RunFiles {
    pub fn new(
        name: &str,
        run_id: &str,
        workflow: Value,
        inputs: Value,
        programs: Value,
    ) -> RunFiles {
        let dir = tempfile::tempdir().unwrap();
        let f = RunFiles {
            dir,
            namespace: "ns".into(),
            name: name.into(),
            run_id: run_id.into(),
            calls: Default::default(),
        };
        f.write_snapshot(run_id, &workflow, &inputs, &serde_json::json!([]));
        f.set_snapshot_field("providerMocks", provider_mocks(&programs));
        std::fs::create_dir_all(f.path("secrets")).unwrap();
        f
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub fn write_snapshot(&self, run_id: &str, workflow: &Value, inputs: &Value, answers: &Value) {
        let snap = serde_json::json!({"run": {"namespace": self.namespace, "name": self.name, "uid": run_id, "runId": run_id},
            "workflow": workflow, "providers": [], "inputs": inputs, "configurable": {}, "answers": answers});
        std::fs::write(self.path("snapshot.json"), snap.to_string()).unwrap();
    }

    pub fn set_answers(&self, answers: Value) {
        let mut snap: Value =
            serde_json::from_str(&std::fs::read_to_string(self.path("snapshot.json")).unwrap())
                .unwrap();
        snap["answers"] = answers;
        std::fs::write(self.path("snapshot.json"), snap.to_string()).unwrap();
    }

    pub fn subject(&self) -> String {
        subjects::events_subject(&self.namespace, &self.run_id)
    }

    pub fn reasoning_subject(&self) -> String {
        subjects::reasoning_subject(&self.namespace, &self.run_id)
    }

    pub fn command(&self, url: &str) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_openwop-worker"));
        c.env(run_env::SNAPSHOT, self.path("snapshot.json"))
            .env(run_env::NATS_URL, url)
            .env(run_env::EVENTS_STREAM, subjects::DEFAULT_STREAM)
            .env(run_env::TERMINATION_LOG, self.path("termination.json"))
            .env(run_env::SECRETS_DIR, self.path("secrets"))
            .env_remove(run_env::RUN_NAMESPACE)
            .env_remove(run_env::RUN_NAME)
            .env_remove(run_env::RUN_ID)
            .env_remove(run_env::EVENTS_SUBJECT)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    }

    /// Runs the worker to its end; returns (exit code, stderr).
    pub fn run(&self, url: &str) -> (i32, String) {
        self.run_with(url, |_| {})
    }

    /// [`RunFiles::run`] with extra settings of the command.
    pub fn run_with(&self, url: &str, adjust: impl FnOnce(&mut Command)) -> (i32, String) {
        let mut c = self.command(url);
        adjust(&mut c);
        let out = c.output().expect("run worker");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        self.record_calls(&stderr);
        (out.status.code().unwrap_or(-1), stderr)
    }

    /// The mock provider calls one worker logged (`{"key", "attempt", "maxTokens"}`), also
    /// added to [`RunFiles::calls`].
    pub fn record_calls(&self, stderr: &str) -> Vec<Value> {
        let calls: Vec<Value> = stderr
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["fields"]["message"] == "mock provider call")
            .map(|l| {
                let f = &l["fields"];
                serde_json::json!({"key": f["key"], "attempt": f["attempt"], "maxTokens": f["max_tokens"]})
            })
            .collect();
        self.calls.lock().unwrap().extend(calls.iter().cloned());
        calls
    }
    pub fn termination(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.path("termination.json")).unwrap())
            .unwrap()
    }

    pub fn calls(&self) -> Vec<Value> {
        self.calls.lock().unwrap().clone()
    }
}

/// Test programs `{node: program | [program per turn]}` as the snapshot's `providerMocks`.
pub fn provider_mocks(programs: &Value) -> Value {
    let Some(m) = programs.as_object() else {
        return programs.clone();
    };
    m.iter()
        .map(|(node, p)| {
            let v = match p {
                Value::Array(turns) => serde_json::json!({"turns": turns}),
                p => p.clone(),
            };
            (node.clone(), v)
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Every raw message on `subject`, in stream order.
pub fn read_raw(url: &str, subject: &str) -> Vec<Value> {
    read_raw_with(url, subject, &openwop_nats::NatsAuth::None)
}

/// [`read_raw`] from a NATS that requires `auth`.
pub fn read_raw_with(url: &str, subject: &str, auth: &openwop_nats::NatsAuth) -> Vec<Value> {
    rt().block_on(async {
        let policy = RetryPolicy {
            deadline: Duration::from_secs(20),
            ..Default::default()
        };
        let client = nats::connect(url, auth).await.unwrap();
        let js = nats::context(client, &policy);
        let stream = nats::ensure_stream(&js, &StreamSpec::new("OPENWOP_EVENTS", None), &policy)
            .await
            .unwrap();
        nats::read_subject(&stream, subject, &policy)
            .await
            .unwrap()
            .iter()
            .map(|b| serde_json::from_slice(b).unwrap())
            .collect()
    })
}

/// The comparable part of an event (everything but the timestamp).
pub fn essence(e: &Value) -> Value {
    let mut e = e.clone();
    e.as_object_mut().unwrap().remove("timestamp");
    e
}

pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

pub fn assert_gap_free(events: &[Value]) {
    let mut ids = std::collections::HashSet::new();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            e["sequence"].as_u64(),
            Some(i as u64),
            "sequence gap at {i}: {e}"
        );
        assert!(
            ids.insert(e["eventId"].as_str().unwrap().to_owned()),
            "duplicate eventId at {i}"
        );
    }
}

pub fn wait_for(mut cond: impl FnMut() -> bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

impl RunFiles {
    /// Sets one top-level field of the snapshot (e.g. `cancel`, `providers`).
    pub fn set_snapshot_field(&self, key: &str, value: Value) {
        let mut snap: Value =
            serde_json::from_str(&std::fs::read_to_string(self.path("snapshot.json")).unwrap())
                .unwrap();
        snap[key] = value;
        std::fs::write(self.path("snapshot.json"), snap.to_string()).unwrap();
    }
}

/// A fake OpenAI-compatible server: answers `POST /v1/chat/completions` with `content`,
/// or holds the request for a minute while `slow` is set. Counts requests.
pub struct FakeLlm {
    pub base: String,
    /// Every request body received, in order.
    pub bodies: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
    pub slow: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    _rt: tokio::runtime::Runtime,
}

impl FakeLlm {
    pub fn start(content: Value) -> FakeLlm {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let slow = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let bodies: Arc<std::sync::Mutex<Vec<Value>>> = Default::default();
        let (s, r, b) = (slow.clone(), requests.clone(), bodies.clone());
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let (s, r, b, content) = (s.clone(), r.clone(), b.clone(), content.clone());
                async move {
                    b.lock().unwrap().push(body);
                    r.fetch_add(1, Ordering::SeqCst);
                    if s.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                    }
                    axum::Json(serde_json::json!({
                        "model": "fake-1",
                        "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": content.to_string()}}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 5}
                    }))
                }
            }),
        );
        rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeLlm {
            base,
            bodies,
            slow,
            requests,
            _rt: rt,
        }
    }

    pub fn request_count(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A worker started with `OPENWOP_FAULT_PAUSE_AT_SEQUENCE=pause` and SIGKILLed as soon as it
/// pauses there; `None` when it ended by itself first (exit code).
pub fn run_until_paused(
    files: &RunFiles,
    url: &str,
    pause: u64,
    adjust: impl FnOnce(&mut Command),
) -> Option<i32> {
    use std::io::BufRead;
    let mut c = files.command(url);
    c.env(
        openwop_protocol::run::env::FAULT_PAUSE_AT_SEQUENCE,
        pause.to_string(),
    );
    adjust(&mut c);
    let mut child = c.spawn().unwrap();
    let pipe = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
            if line.contains("fault pause") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let paused = loop {
        if rx.recv_timeout(Duration::from_millis(20)).is_ok() {
            break true;
        }
        if child.try_wait().unwrap().is_some() {
            break rx.try_recv().is_ok();
        }
    };
    let code = if paused {
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        None
    } else {
        child.wait().unwrap().code()
    };
    let stderr = reader.join().unwrap();
    files.record_calls(&stderr);
    code
}
