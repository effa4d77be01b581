//! `core.openwop.http.fetch` / `core.http.request`: one HTTP call through the egress guard,
//! with retries, every attempt recorded in the run's log before it counts.
//!
//! Per attempt: fill the URL and headers (secrets from the Workflow's `spec.secrets`), check
//! the URL with the guard before any DNS, resolve, check every address, and connect to the
//! checked one (reqwest's per-host resolve override pins it; no proxy, no redirects). The
//! outcome is recorded (`protocol::http::record`) and the retry fold decides on the recorded
//! (redacted) form, so a restarted worker answers recorded attempts from the log and makes
//! only the call that was in flight at the kill — with the same `Idempotency-Key`.

use std::net::{IpAddr, SocketAddr};
use std::ops::ControlFlow;

use openwop_protocol::egress::{EgressPolicy, EgressRefusal};
use openwop_protocol::http::record::{self as journal, CallRecord, Next, Outcome};
use openwop_protocol::http::{self, Dialect, HttpConfig};

use super::*;

/// A failed node with `code`, no details beyond `details`.
fn failure(code: &str, message: String, details: Option<Value>, retryable: bool) -> NodeOutcome {
    NodeOutcome::Failed(ErrorInfo {
        code: code.to_owned(),
        message,
        details,
        retryable: Some(retryable),
    })
}

fn refused(url: &str, why: &EgressRefusal) -> NodeOutcome {
    failure(
        http::URL_REJECTED,
        format!("the egress guard refused {url}: {why}"),
        Some(json!({"url": url})),
        false,
    )
}

/// The error and its causes, one line (reqwest's top level alone says little).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

/// The URL to call and the address to connect to, checked: the URL before DNS, then every
/// address its host resolves to. `None`: the URL names an address (judged already).
async fn pin(
    policy: &EgressPolicy,
    url: &str,
) -> Result<(reqwest::Url, Option<SocketAddr>), EgressRefusal> {
    let target = policy.check_url(url)?;
    if target.literal.is_some() {
        return Ok((target.url, None));
    }
    let found: Vec<IpAddr> = tokio::net::lookup_host((target.host.as_str(), target.port))
        .await
        .map(|it| it.map(|a| a.ip()).collect())
        .unwrap_or_default();
    let ip = policy.check_resolved(&target, &found)?;
    Ok((target.url, Some(SocketAddr::new(ip, target.port))))
}

/// One attempt, ready to send.
struct Attempt<'a> {
    url: reqwest::Url,
    /// The checked address of the URL's host (`None` for an address URL).
    pinned: Option<SocketAddr>,
    method: http::Method,
    headers: &'a [(String, String)],
    body: Option<&'a (Vec<u8>, &'static str)>,
    idempotency_key: Option<&'a str>,
    max_bytes: u64,
    /// This attempt's time (the config's `timeoutMs`, or less when the node's deadline is
    /// nearer).
    timeout: Duration,
    /// The config's `timeoutMs`, as recorded.
    timeout_ms: u64,
}

/// One attempt's outcome (no I/O error escapes: a failure to reach the server is an outcome).
async fn attempt_once(a: Attempt<'_>) -> Outcome {
    let Attempt {
        url,
        pinned,
        method,
        headers,
        body,
        idempotency_key,
        max_bytes,
        timeout,
        timeout_ms,
    } = a;
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none());
    if let (Some(addr), Some(host)) = (pinned, url.host_str()) {
        // Connect to the checked address, whatever DNS says at connect time.
        builder = builder.resolve(host, addr);
    }
    let client = match builder.build() {
        Ok(c) => c,
        Err(e) => {
            return Outcome::NetworkError {
                message: format!("cannot build the HTTP client: {}", chain(&e)),
            };
        }
    };
    let m = reqwest::Method::from_bytes(method.as_str().as_bytes()).unwrap_or(reqwest::Method::GET);
    let mut req = client.request(m, url);
    let mut has_content_type = false;
    for (name, value) in headers {
        has_content_type |= name.eq_ignore_ascii_case("content-type");
        req = req.header(name.as_str(), value.as_str());
    }
    if let Some(key) = idempotency_key {
        req = req.header("Idempotency-Key", key);
    }
    if let Some((bytes, content_type)) = body {
        if !has_content_type {
            req = req.header("Content-Type", *content_type);
        }
        req = req.body(bytes.clone());
    }
    let call = async {
        let mut resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                return Outcome::NetworkError { message: chain(&e) };
            }
        };
        // A HEAD answer's Content-Length describes the GET body it did not send.
        if method != http::Method::Head && resp.content_length().is_some_and(|n| n > max_bytes) {
            return Outcome::TooLarge { max_bytes };
        }
        let status = resp.status().as_u16();
        let headers: Vec<(String, String)> = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let mut body = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(c)) => {
                    if body.len() as u64 + c.len() as u64 > max_bytes {
                        return Outcome::TooLarge { max_bytes };
                    }
                    body.extend_from_slice(&c);
                }
                Ok(None) => break,
                Err(e) => {
                    return Outcome::NetworkError { message: chain(&e) };
                }
            }
        }
        journal::shape_response(status, &headers, &body)
    };
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or(Outcome::Timeout { timeout_ms })
}

/// The node's request, filled and checked once for all its attempts.
struct Request {
    cfg: HttpConfig,
    policy: EgressPolicy,
    /// The URL with the node's variables filled in (the guard checks it on every attempt).
    url: String,
    /// The headers with their secrets filled in.
    headers: Vec<(String, String)>,
    body: Option<(Vec<u8>, &'static str)>,
    /// Sent on every attempt of a method that is not idempotent by definition.
    idempotency_key: Option<String>,
}

impl<P: Publisher> Executor<'_, P> {
    /// Runs an HTTP node attempt: each call the retry fold asks for is answered from the
    /// log's record when one exists, else made (after its backoff) and recorded, until the
    /// fold completes or fails the node.
    pub(super) async fn http(
        &self,
        node: &Node,
        inputs: &Value,
        attempt: u32,
        deadline: Option<Instant>,
        node_span: &SpanHandle,
    ) -> Result<NodeOutcome, LogError> {
        let id = node.id.as_str();
        let req = match self.http_request(node, inputs) {
            ControlFlow::Continue(r) => r,
            ControlFlow::Break(end) => return Ok(end),
        };
        let step = journal::step_key(id, attempt);
        let mut restored = journal::restore(self.writer.lock().await.log.events(), id, &step);
        let mut done: Vec<CallRecord> = Vec::new();
        loop {
            let (n, delay_ms) = match journal::next(&req.cfg, req.idempotency_key.as_deref(), &done)
            {
                Next::Complete(outputs) => return Ok(NodeOutcome::Completed(outputs)),
                Next::Fail(e) => return Ok(NodeOutcome::Failed(e)),
                Next::Call { attempt, delay_ms } => (attempt, delay_ms),
            };
            // A recorded attempt is never made again (nor waited for).
            if let Some(r) = restored.remove(&n) {
                tracing::info!(node = %id, attempt = n, "HTTP call restored from the run's log; no request");
                done.push(r);
                continue;
            }
            if delay_ms > 0 {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(delay_ms)) => {}
                    _ = crate::stop::wait(self.stop.clone()) => return Err(LogError::Stopped),
                    why = self.abandoned() => return why.map(NodeOutcome::Failed),
                }
            }
            match self
                .http_attempt(id, &req, n, &step, deadline, node_span)
                .await?
            {
                ControlFlow::Continue(recorded) => done.push(recorded),
                ControlFlow::Break(end) => return Ok(end),
            }
        }
    }

    /// Fills the request from the node's config, its variables and the Workflow's secrets;
    /// an unusable egress allow list, a template that cannot be filled, or a secret too
    /// short to redact fails the node before any call.
    fn http_request(&self, node: &Node, inputs: &Value) -> ControlFlow<NodeOutcome, Request> {
        let id = node.id.as_str();
        let dialect = if node.type_id == http::REQUEST_TYPE_ID {
            Dialect::Request
        } else {
            Dialect::Fetch
        };
        let cfg = match HttpConfig::parse(dialect, &node.config) {
            Ok(c) => c,
            Err(issues) => {
                return ControlFlow::Break(NodeOutcome::Failed(config_error(id, &issues)));
            }
        };
        let policy = match self.snap.host.http.egress_policy() {
            Ok(p) => p,
            Err(e) => {
                return ControlFlow::Break(failure(
                    http::URL_REJECTED,
                    format!("the host's egress allow list is unusable: {e}"),
                    None,
                    false,
                ));
            }
        };
        let variables = inputs
            .get("variables")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        // A request this node cannot make as configured: never retried.
        let invalid = |message: String| {
            ControlFlow::Break(failure(http::REQUEST_INVALID, message, None, false))
        };
        let url = match http::config::fill_url(&cfg.url, &variables) {
            Ok(u) => u,
            Err(e) => return invalid(e.to_string()),
        };
        for name in cfg.secret_names() {
            let rid = http::secret_redaction_id(name);
            if self.redactor.unredactable_secret_ids().contains(&rid) {
                return invalid(format!(
                    "secret {name} is shorter than {} characters, too short to redact from events and logs; store a longer value",
                    openwop_protocol::redact::MIN_SECRET_CHARS
                ));
            }
        }
        let headers = match http::config::fill_headers(&cfg.headers, |n| {
            let rid = http::secret_redaction_id(n);
            self.cfg
                .secrets
                .iter()
                .find(|(k, _)| *k == rid)
                .map(|(_, v)| v.as_str())
        }) {
            Ok(h) => h,
            Err(e) => return invalid(e.to_string()),
        };
        let body = http::request_body(&cfg, inputs.get("body"));
        let idempotency_key = journal::sends_idempotency_key(&cfg, cfg.method).then(|| {
            http::idempotency_key(
                self.run_id(),
                id,
                body.as_ref().map_or(&[][..], |(b, _)| b.as_slice()),
            )
        });
        ControlFlow::Continue(Request {
            cfg,
            policy,
            url,
            headers,
            body,
            idempotency_key,
        })
    }

    /// Makes attempt `n`: checks the URL and its addresses with the egress guard (DNS may
    /// answer differently between attempts), calls inside an `openwop.http.call` span, and
    /// records the outcome before it counts; returns the recorded (redacted) form, which the
    /// retry fold decides on, as a replay would. A stop abandons the call unrecorded (a later
    /// worker makes it again, with the same `Idempotency-Key`); a timeout that the node's own
    /// deadline caused fails the node.
    async fn http_attempt(
        &self,
        id: &str,
        req: &Request,
        n: u32,
        step: &str,
        deadline: Option<Instant>,
        node_span: &SpanHandle,
    ) -> Result<ControlFlow<NodeOutcome, CallRecord>, LogError> {
        let cfg = &req.cfg;
        let (target, pinned) = match pin(&req.policy, &req.url).await {
            Ok(t) => t,
            Err(why) => {
                let shown = self.redactor.redact_str(&req.url).0.into_owned();
                return Ok(ControlFlow::Break(refused(&shown, &why)));
            }
        };
        let host = target.host_str().unwrap_or_default().to_owned();
        let mut per_attempt = Duration::from_millis(cfg.timeout_ms);
        let node_deadline_binds =
            deadline.is_some_and(|d| d.saturating_duration_since(Instant::now()) < per_attempt);
        if let Some(d) = deadline {
            per_attempt = per_attempt.min(d.saturating_duration_since(Instant::now()));
        }
        let span = node_span.child("openwop.http.call");
        span.set_str("openwop.run_id", self.run_id());
        span.set_str("openwop.node_id", id);
        span.set_str("http.request.method", cfg.method.as_str());
        span.set_str("server.address", &host);
        span.set_i64("openwop.call_attempt", i64::from(n));
        // What a test reads from the worker's log (a replay never republishes records).
        tracing::info!(node = %id, attempt = n, method = cfg.method.as_str(), "http call");
        let started = Instant::now();
        let call = attempt_once(Attempt {
            url: target,
            pinned,
            method: cfg.method,
            headers: &req.headers,
            body: req.body.as_ref(),
            idempotency_key: req.idempotency_key.as_deref(),
            max_bytes: self.snap.host.http.max_response_bytes,
            timeout: per_attempt,
            timeout_ms: cfg.timeout_ms,
        });
        let outcome = tokio::select! {
            o = call => o,
            _ = crate::stop::wait(self.stop.clone()) => return Err(LogError::Stopped),
            why = self.abandoned() => {
                span.fail("cancelled", "the run stopped its in-flight branches");
                return why.map(|e| ControlFlow::Break(NodeOutcome::Failed(e)));
            }
        };
        match &outcome {
            Outcome::Response { status, .. } => {
                span.set_i64("http.response.status_code", i64::from(*status));
            }
            Outcome::NetworkError { message } => span.fail(http::NETWORK_ERROR, message),
            Outcome::Timeout { .. } => span.fail(http::TIMEOUT, "no response in time"),
            Outcome::TooLarge { .. } => {
                span.fail(http::RESPONSE_TOO_LARGE, "response body over the bound")
            }
        }
        drop(span);
        let record = CallRecord {
            step_key: step.to_owned(),
            attempt: n,
            method: cfg.method.as_str().to_owned(),
            url: req.url.clone(),
            idempotency_key: req.idempotency_key.clone(),
            duration_ms: started.elapsed().as_millis() as u64,
            outcome,
        };
        self.emit(&record.event_step(), Some(id), &record.to_payload(id))
            .await?;
        // Decide on the recorded (redacted) form, as a replay would.
        let recorded = journal::restore(self.writer.lock().await.log.events(), id, step)
            .remove(&n)
            .unwrap_or(record);
        if matches!(recorded.outcome, Outcome::Timeout { .. }) && node_deadline_binds {
            return Ok(ControlFlow::Break(failure(
                "node_timeout",
                format!("node {id} exceeded settings.timeout waiting for its HTTP call"),
                None,
                true,
            )));
        }
        Ok(ControlFlow::Continue(recorded))
    }
}
