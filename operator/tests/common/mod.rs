//! The reconcilers against a mocked API server (tower-test): a test [`Context`]
//! ([`TestContext::test`]) and an [`ApiServerVerifier`] that plays a [`Scenario`] — the
//! requests a reconcile must make, in order, each checked and answered — and fails on any
//! request beyond it or any it left out. Kubernetes Events are published off the reconcile's
//! path ([`EventSink`]): they keep their order among themselves, not among the other requests,
//! and a scenario ends once the Events the reconcile queued are published.

// Each test binary uses a part of this module.
#![allow(dead_code)]

pub mod fixtures;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;

use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use kube::runtime::events::Reporter;
use openwop_operator::config::OperatorConfig;
use openwop_operator::controller::Context;
use openwop_operator::kube_events::EventSink;
use openwop_operator::metrics::Metrics;
use openwop_protocol::workflow_check::NodeRegistry;
use serde_json::Value;
use tower_test::mock::{self, Handle, SendResponse};

type MockHandle = Handle<Request<Body>, Response<Body>>;

/// The clock of every test reconcile: 2025-06-15T15:06:40Z.
pub fn fixed_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_second(1_750_000_000).unwrap()
}

/// `Context::test()`: the reconcilers' context over a mocked API server.
pub trait TestContext {
    /// The default configuration, no pod cache, no NATS.
    fn test() -> (Arc<Context>, ApiServerVerifier);
    /// `config`, then `edit` (a pod cache, a JetStream slot, ...).
    fn test_with(
        config: OperatorConfig,
        edit: impl FnOnce(&mut Context),
    ) -> (Arc<Context>, ApiServerVerifier);
}

impl TestContext for Context {
    fn test() -> (Arc<Context>, ApiServerVerifier) {
        Self::test_with(OperatorConfig::default(), |_| {})
    }

    fn test_with(
        config: OperatorConfig,
        edit: impl FnOnce(&mut Context),
    ) -> (Arc<Context>, ApiServerVerifier) {
        let (client, verifier) = ApiServerVerifier::pair();
        let mut ctx = Context {
            events: verifier.events(),
            client,
            config: Arc::new(config),
            registry: Arc::new(NodeRegistry::builtin()),
            metrics: Metrics::default(),
            now: fixed_now,
            caches: Default::default(),
            nats_copies: Default::default(),
            worker_accounts: Default::default(),
            starts: Default::default(),
            superseded: Default::default(),
            definitions: Default::default(),
            jetstream: None,
        };
        edit(&mut ctx);
        (Arc::new(ctx), verifier)
    }
}

/// The mocked API server's side: receives the client's requests, and the Events of the
/// [`EventSink`] publishing through that client.
pub struct ApiServerVerifier(MockHandle, EventSink);

impl ApiServerVerifier {
    /// A client whose requests this verifier receives.
    pub fn pair() -> (Client, ApiServerVerifier) {
        let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(svc, "default");
        let events = EventSink::start(
            client.clone(),
            Reporter {
                controller: "openwop-operator".into(),
                instance: None,
            },
        );
        (client, ApiServerVerifier(handle, events))
    }

    /// The Event sink publishing through the client: the one to give the code under test, so
    /// that a scenario waits for the Events it queued.
    pub fn events(&self) -> EventSink {
        self.1.clone()
    }

    /// Runs `reconcile` while serving `scenario`: each request must be the scenario's next
    /// (method, URI, body check) and gets its answer. Fails on a request beyond the scenario
    /// and when the reconcile ends before making all of them.
    pub async fn play<T>(&mut self, scenario: Scenario, reconcile: impl Future<Output = T>) -> T {
        let total = scenario.0.len();
        let left = RefCell::new(scenario.0.iter().map(Expect::describe).collect::<Vec<_>>());
        let served = Cell::new(0usize);
        let ApiServerVerifier(handle, events) = self;
        let out = tokio::select! {
            biased;
            _ = serve(handle, scenario, &served, &left) => unreachable!("serving never ends"),
            out = async {
                let out = reconcile.await;
                events.flush().await;
                out
            } => out,
        };
        let n = served.get();
        assert_eq!(
            n,
            total,
            "the reconcile ended after {n} of the scenario's {total} requests; missing: {:?}",
            left.borrow()
        );
        out
    }

    /// Answers every request with `answer(method, path, body)` until the client is dropped
    /// (for reconciles running concurrently, whose requests interleave).
    pub fn answer_all<S: Send + 'static>(
        self,
        mut state: S,
        mut answer: impl FnMut(&mut S, &Method, &str, Value) -> (u16, Value) + Send + 'static,
    ) -> tokio::task::JoinHandle<S> {
        let mut handle = self.0;
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                let (m, path) = (req.method().clone(), req.uri().path().to_owned());
                let body = body_of(req).await;
                let (status, reply) = answer(&mut state, &m, &path, body);
                respond(send, status, reply);
            }
            state
        })
    }
}

/// Whether `uri` records a Kubernetes Event (published off the reconcile's path).
fn is_event(uri: &str) -> bool {
    uri.starts_with("/apis/events.k8s.io/")
}

async fn serve(
    handle: &mut MockHandle,
    scenario: Scenario,
    served: &Cell<usize>,
    left: &RefCell<Vec<String>>,
) {
    let (mut events, mut others): (VecDeque<Expect>, VecDeque<Expect>) =
        scenario.0.into_iter().partition(|e| is_event(&e.uri));
    // Requests received and checked, not answered yet: (the expectation they met, the reply
    // channel, the body).
    let mut held: Vec<(Expect, SendResponse<Response<Body>>, Value)> = vec![];
    // Expectations of the requests that must be in flight together with a held one.
    let mut together: Vec<Expect> = vec![];
    while !events.is_empty() || !others.is_empty() || !together.is_empty() {
        let next = handle.next_request();
        let (req, send) = if together.is_empty() {
            next.await
        } else {
            // A request of a pair must come while the other one waits for its answer.
            let waiting: Vec<String> = held.iter().map(|(e, ..)| e.describe()).collect();
            let expected: Vec<String> = together.iter().map(Expect::describe).collect();
            tokio::time::timeout(TOGETHER, next)
                .await
                .unwrap_or_else(|_| {
                    panic!("{expected:?} did not come while {waiting:?} waited for its answer: not in flight together")
                })
        }
        .unwrap_or_else(|| panic!("the client is gone; expected {:?}", left.borrow()));
        let (method, uri) = (req.method().clone(), req.uri().to_string());
        let got = format!("{method} {uri}");
        let expect = if let Some(i) = together.iter().position(|e| e.describe() == got) {
            together.remove(i)
        } else if !together.is_empty() {
            let expected: Vec<String> = together.iter().map(Expect::describe).collect();
            panic!(
                "request {}: {got} while {expected:?} was expected together with {:?}",
                served.get(),
                held.iter().map(|(e, ..)| e.describe()).collect::<Vec<_>>()
            );
        } else {
            let queue = if is_event(req.uri().path()) {
                &mut events
            } else {
                &mut others
            };
            let expect = queue.pop_front().unwrap_or_else(|| {
                panic!(
                    "request {}: {got} beyond the scenario; expected {:?}",
                    served.get(),
                    left.borrow()
                )
            });
            // The first of a pair: its partner may come first.
            if expect.with_next {
                let partner = others.pop_front().expect("`Scenario::together` adds two");
                if partner.describe() == got {
                    together.push(expect);
                    partner
                } else {
                    together.push(partner);
                    expect
                }
            } else {
                expect
            }
        };
        let want = expect.describe();
        assert_eq!(got, want, "request {}", served.get());
        {
            let mut left = left.borrow_mut();
            if let Some(i) = left.iter().position(|d| *d == want) {
                left.remove(i);
            }
        }
        let body = body_of(req).await;
        served.set(served.get() + 1);
        held.push((expect, send, body));
        if together.is_empty() {
            for (mut expect, send, body) in held.drain(..) {
                for check in std::mem::take(&mut expect.checks) {
                    check(&body);
                }
                let reply = match expect.reply {
                    Reply::Json(v) => v,
                    Reply::Echo => body,
                };
                respond(send, expect.status, reply);
            }
        }
    }
    if let Some((req, _)) = handle.next_request().await {
        panic!(
            "a request beyond the scenario: {} {}",
            req.method(),
            req.uri()
        );
    }
    // The client is gone: nothing more can come.
    std::future::pending::<()>().await;
}

/// How long the second request of a [`Scenario::together`] pair may take to come.
const TOGETHER: std::time::Duration = std::time::Duration::from_secs(5);

async fn body_of(req: Request<Body>) -> Value {
    let bytes = req.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

fn respond(send: SendResponse<Response<Body>>, status: u16, body: Value) {
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
}

/// The requests one reconcile must make, in order.
#[derive(Default)]
pub struct Scenario(Vec<Expect>);

impl Scenario {
    pub fn new() -> Self {
        Scenario::default()
    }

    /// Then `e`.
    pub fn then(mut self, e: Expect) -> Self {
        self.0.push(e);
        self
    }

    /// Then `a` and `b` in flight together, in either order: neither is answered before both
    /// came (a scenario fails when one waits for its answer and the other does not come).
    pub fn together(mut self, mut a: Expect, b: Expect) -> Self {
        assert!(
            !is_event(&a.uri) && !is_event(&b.uri),
            "Events keep their own order"
        );
        a.with_next = true;
        self.0.push(a);
        self.0.push(b);
        self
    }

    /// Then every request of `other`.
    pub fn and(mut self, other: Scenario) -> Self {
        self.0.extend(other.0);
        self
    }
}

enum Reply {
    Json(Value),
    /// The request's own body (a created object, a recorded Event).
    Echo,
}

/// A check of a request's body.
type Check = Box<dyn FnOnce(&Value)>;

/// One expected request: method and URI, a check of its body, and the answer.
pub struct Expect {
    method: Method,
    uri: String,
    checks: Vec<Check>,
    status: u16,
    reply: Reply,
    /// Comes together with the next expectation ([`Scenario::together`]).
    with_next: bool,
}

impl Expect {
    pub fn new(method: Method, uri: impl Into<String>) -> Self {
        Expect {
            method,
            uri: uri.into(),
            checks: vec![],
            status: 200,
            reply: Reply::Echo,
            with_next: false,
        }
    }

    /// Checks the request's body (JSON; `null` when empty), after the checks added before.
    pub fn body(mut self, check: impl FnOnce(&Value) + 'static) -> Self {
        self.checks.push(Box::new(check));
        self
    }

    /// Answers `status` with `body`.
    pub fn reply(mut self, status: u16, body: Value) -> Self {
        self.status = status;
        self.reply = Reply::Json(body);
        self
    }

    /// Answers `status` with the request's body.
    pub fn echo(mut self, status: u16) -> Self {
        self.status = status;
        self.reply = Reply::Echo;
        self
    }

    /// Answers 404 Not Found.
    pub fn not_found(self) -> Self {
        self.reply(404, fixtures::not_found())
    }

    fn describe(&self) -> String {
        format!("{} {}", self.method, self.uri)
    }
}
