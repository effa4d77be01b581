//! One worker process's run, from its parsed environment to its exit code: read the mounted
//! snapshot, connect to NATS and replay the run's log, then cancel, record a pause, or execute
//! the graph, and write the termination summary. The binary (`main.rs`) only parses the pod's
//! [`WorkerEnv`], sets up logging, the runtime, OTLP and SIGTERM, and calls [`run`]; so
//! everything here is reachable from tests in-process.
//!
//! Exit codes (`openwop_protocol::run::exit`): 0 terminal, 1 crashed (retry), 2 unusable
//! snapshot/config, 3 suspended (also paused), 143 stopped by SIGTERM at a safe point (replay
//! continues it).

use std::sync::Arc;
use std::time::Duration;

use openwop_nats::NatsAuth;
use openwop_protocol::events::DrainPolicy;
use openwop_protocol::events::{ErrorInfo, EventType, RunEventDoc};
use openwop_protocol::graph::{Graph, GraphError};
use openwop_protocol::redact::Redactor;
use openwop_protocol::run::ending;
use openwop_protocol::run::env::WorkerEnv;
use openwop_protocol::run::exit::{BAD_INPUT, STOPPED, SUSPENDED, TERMINAL};
use openwop_protocol::run::pause::PauseLog;
use openwop_protocol::run::projection::Projection;
use openwop_protocol::run::snapshot::{KeyMount, RunSnapshot, SnapshotError};
use openwop_protocol::run::subjects;
use openwop_protocol::run::telemetry as run_telemetry;

use crate::eventlog::{LogError, RunLog};
use crate::executor::{ExecConfig, Executor, RunEnd, cancel_run};
use crate::nats::{self, JetStreamPublisher, RetryPolicy};
use crate::pause::{self, PauseSignal};
use crate::providers::ProviderSet;
use crate::reasoning::{DEFAULT_MAX_PER_NODE, ReasoningStream};
use crate::stop::StopSignal;
use crate::telemetry::{Otel, SpanHandle};

/// How long a stop may take before the in-flight step is dropped (`OPENWOP_STOP_GRACE_MS`).
const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(5);

/// Why a run could not go on: the process exits with `exit::CRASHED` and the operator retries.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The run's events could not be read or made durable.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The operator's pause requests could not be listened for.
    #[error("subscribing to the run's control subject: {0}")]
    ControlSubject(async_nats::Error),
}

/// Why the mounted snapshot cannot be used (the process exits with `exit::BAD_INPUT`).
#[derive(Debug, thiserror::Error)]
enum SnapshotLoadError {
    #[error("cannot read snapshot {path}; check the snapshot ConfigMap is mounted")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Parse(#[from] SnapshotError),
}

/// Runs the Run the environment names and returns the process's exit code; `stop` is the
/// worker's SIGTERM, `otel` where its spans go.
pub async fn run(stop: StopSignal, otel: &Otel, wenv: &WorkerEnv) -> Result<i32, RunError> {
    let Some(prepared) = Prepared::read(wenv) else {
        return Ok(BAD_INPUT);
    };
    let Opened {
        client,
        mut log,
        span,
    } = open(wenv, &prepared, otel).await?;
    let session = Session {
        wenv,
        p: prepared,
        client,
        span,
        pause: PauseSignal::new(),
        stop,
    };
    if session.p.snap.cancel {
        let end = cancel_run(&mut log, &session.p.snap).await?;
        return Ok(session.finish(&end, log.events()));
    }
    if let Some(code) = session.begin(&mut log).await? {
        return Ok(code);
    }
    session.listen(&mut log).await?;
    let reasoning = ReasoningStream::new(
        subjects::reasoning_subject(&session.p.namespace, &session.p.run_id),
        wenv.tuning
            .reasoning_max_per_node
            .unwrap_or(DEFAULT_MAX_PER_NODE),
    );
    match &session.p.graph {
        Ok(graph) => session.execute(graph, log, reasoning).await,
        Err(e) => {
            let end = record_invalid(&mut log, e).await?;
            Ok(session.finish(&end, log.events()))
        }
    }
}

/// What the run needs besides NATS, read and checked before the worker connects.
struct Prepared {
    snap: RunSnapshot,
    namespace: String,
    name: String,
    /// The run identity: subjects and event ids are keyed by it.
    run_id: String,
    nats_auth: NatsAuth,
    policy: RetryPolicy,
    /// An invalid definition is recorded as `run.failed` (the operator validated it; a
    /// hand-edited snapshot can still be wrong, and then does not match `workflowChecked`).
    graph: Result<Graph, GraphError>,
    cfg: ExecConfig,
}

impl Prepared {
    /// Reads the snapshot, the run's identity, NATS credentials, the graph, secrets and
    /// providers; `None` (logged) when any of them is unusable, which exits with `BAD_INPUT`.
    fn read(wenv: &WorkerEnv) -> Option<Prepared> {
        let snap = match load_snapshot(&wenv.snapshot) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "unusable snapshot");
                return None;
            }
        };
        let namespace = wenv
            .run_namespace
            .clone()
            .unwrap_or_else(|| snap.run.namespace.clone());
        let name = wenv
            .run_name
            .clone()
            .unwrap_or_else(|| snap.run.name.clone());
        let run_id = wenv
            .run_id
            .clone()
            .unwrap_or_else(|| snap.run.run_id.clone());
        // The operator creates a run's first snapshot and its pod at the same time; should the
        // pod mount a deleted Run's snapshot of the same name in that moment, this pod is being
        // deleted and must record nothing from it.
        if !snap.run.run_id.is_empty() && snap.run.run_id != run_id {
            tracing::error!(
                mounted = %snap.run.run_id,
                run_id = %run_id,
                "the mounted snapshot is another run's (a deleted Run of the same name); not running it"
            );
            return None;
        }
        // Credentials of an external NATS: the operator's copy of the chart's Secret.
        let nats_auth = match &wenv.nats_credentials_dir {
            None => NatsAuth::None,
            Some(dir) => match NatsAuth::from_dir(std::path::Path::new(dir)) {
                Ok(a) => a,
                Err(e) => {
                    tracing::error!(error = %e, "unusable NATS credentials");
                    return None;
                }
            },
        };
        let mut policy = RetryPolicy::default();
        if let Some(deadline) = wenv.tuning.publish_deadline {
            policy.deadline = deadline;
        }
        let graph = snap
            .workflow_definition()
            .map_err(GraphError::from)
            .and_then(|d| Graph::from_definition(&d));
        if let Err(e) = &graph {
            tracing::error!(error = %e, "workflow definition invalid");
        }
        let secrets = load_secrets(&snap, wenv.tuning.secrets_dir.as_deref());
        let cfg = exec_config(wenv, &snap, &graph, secrets)?;
        Some(Prepared {
            snap,
            namespace,
            name,
            run_id,
            nats_auth,
            policy,
            graph,
            cfg,
        })
    }
}

/// The executor's mocks, providers and secrets; `None` (logged) when the mocks or a
/// provider's configuration are unusable.
fn exec_config(
    wenv: &WorkerEnv,
    snap: &RunSnapshot,
    graph: &Result<Graph, GraphError>,
    secrets: Vec<(String, String)>,
) -> Option<ExecConfig> {
    let mock_programs = match snap.mock_programs() {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "unusable provider mocks");
            return None;
        }
    };
    // A cancelled run, or a worker that only records a pause, calls no provider.
    let providers = match (graph, snap.cancel || snap.pause.is_some()) {
        (Ok(g), false) => {
            match ProviderSet::build(snap, g, |p| wenv.provider_base_url(p).map(str::to_owned)) {
                Ok(p) => p,
                Err(e) => {
                    let red = Redactor::new(secrets.clone());
                    tracing::error!(error = %red.redact_str(&e.to_string()).0, "provider configuration");
                    return None;
                }
            }
        }
        _ => ProviderSet::default(),
    };
    // Tool server header values are redacted like every other secret.
    let (tools, tool_secrets) = crate::tools::ToolServers::from_mounts(&snap.tool_servers);
    let mut secrets = secrets;
    secrets.extend(tool_secrets);
    Some(ExecConfig {
        mock_programs,
        providers,
        secrets,
        tools,
    })
}

/// Secrets to redact: provider keys, the Workflow's `spec.secrets` (id `secrets.<name>`,
/// which the HTTP node also reads them by), every file of `OPENWOP_SECRETS_DIR` (id = file name),
/// and the values of workflow variables marked `sensitive` (id = variable name, so events,
/// status, logs and spans show `[REDACTED:<name>]`; the prompt still carries the value
/// where the workflow puts it).
fn load_secrets(snap: &RunSnapshot, secrets_dir: Option<&str>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in &snap.providers {
        let value = match &p.key {
            KeyMount::File { path } => std::fs::read_to_string(path).ok(),
            KeyMount::Env { env_name } => std::env::var(env_name).ok(),
        };
        if let Some(v) = value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()) {
            out.push((format!("provider:{}", p.provider), v));
        }
    }
    // The Workflow's spec.secrets (the HTTP node's header values).
    for s in &snap.secrets {
        if let Some(v) = std::fs::read_to_string(&s.path)
            .ok()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
        {
            out.push((openwop_protocol::http::secret_redaction_id(&s.name), v));
        }
    }
    if let Some(dir) = secrets_dir
        && let Ok(entries) = std::fs::read_dir(dir)
    {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !e.path().is_file() {
                continue;
            }
            if let Ok(v) = std::fs::read_to_string(e.path()) {
                let v = v.trim().to_owned();
                if !v.is_empty() {
                    out.push((name, v));
                }
            }
        }
    }
    out.extend(snap.sensitive_values());
    out
}

/// Reads and parses the snapshot file.
fn load_snapshot(path: &str) -> Result<RunSnapshot, SnapshotLoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| SnapshotLoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok(RunSnapshot::from_json(&text, path)?)
}

/// The run's NATS side once connected.
struct Opened {
    /// The connection: the control subject's listener and a stopped worker's flush use it.
    client: async_nats::Client,
    /// The log as replayed from the stream, publishing through JetStream.
    log: RunLog<JetStreamPublisher>,
    /// The run's root span.
    span: SpanHandle,
}

/// Connects to NATS, makes sure the stream exists, reads the run's log back and opens the
/// run's root span: everything later steps append to.
async fn open(wenv: &WorkerEnv, p: &Prepared, otel: &Otel) -> Result<Opened, LogError> {
    // Run identity is the runId: a re-created Run of the same name has its own subject.
    let subject = wenv.events_subject_or(&p.namespace, &p.run_id);
    tracing::debug!(credentials = p.nats_auth.kind(), "connecting to NATS");
    let client = nats::connect(&wenv.nats_url, &p.nats_auth).await?;
    let js = nats::context(client.clone(), &p.policy);
    let stream = nats::ensure_stream(&js, &wenv.stream_spec(), &p.policy).await?;
    let existing = nats::read_run_events(&stream, &subject, &p.run_id, &p.policy).await?;
    tracing::info!(run = %p.name, attempt = wenv.attempt, replayed = existing.len(), "event log read");
    let redactor = Arc::new(Redactor::new(p.cfg.secrets.clone()));
    let span = otel.telemetry(redactor.clone()).root("openwop.run");
    span.set_str(run_telemetry::RUN_ID, &p.run_id);
    span.set_str("openwop.run_name", &p.name);
    span.set_str(run_telemetry::NAMESPACE, &p.namespace);
    if let Some(w) = p
        .snap
        .workflow
        .get("id")
        .and_then(serde_json::Value::as_str)
    {
        span.set_str("openwop.workflow_id", w);
    }
    span.set_i64("openwop.replayed_events", existing.len() as i64);
    let log = RunLog::new(
        JetStreamPublisher::new(js, p.policy),
        subject,
        &p.run_id,
        redactor,
        existing,
    );
    Ok(Opened { client, log, span })
}

/// Records an invalid workflow definition as the run's failure (no node runs).
async fn record_invalid(
    log: &mut RunLog<JetStreamPublisher>,
    e: &GraphError,
) -> Result<RunEnd, LogError> {
    let err = ErrorInfo {
        code: "workflow_invalid".into(),
        message: e.to_string(),
        details: None,
        retryable: Some(false),
    };
    log.emit_value(
        ending::RUN_FAILED_STEP,
        None,
        EventType::RunFailed,
        ending::failed_payload(&err),
    )
    .await?;
    Ok(RunEnd::Failed(err))
}

/// Resolves `grace` after a stop was requested.
async fn stop_deadline(stop: StopSignal, grace: Duration) {
    stop.requested().await;
    tokio::time::sleep(grace).await;
}

/// A connected run: what every step after [`open`] reads.
struct Session<'w> {
    wenv: &'w WorkerEnv,
    p: Prepared,
    client: async_nats::Client,
    span: SpanHandle,
    /// The operator's pause, asked on the control subject (or by the snapshot).
    pause: PauseSignal,
    stop: StopSignal,
}

impl Session<'_> {
    /// Applies the snapshot's pause state before anything runs: `Some(exit code)` when the
    /// worker only records `run.paused` (started under a pause no worker was running to ask).
    async fn begin(&self, log: &mut RunLog<JetStreamPublisher>) -> Result<Option<i32>, LogError> {
        match &self.p.snap.pause {
            // Started while the Run's spec.pause is set (no worker was running to ask).
            Some(req)
                if req.drain_policy == DrainPolicy::Immediate
                    || PauseLog::of(log.events()).paused =>
            {
                pause::record_paused(log, req).await?;
                return Ok(Some(self.paused(log.events())));
            }
            // Woken (a durable timer was due) under a drain: the nodes in flight finish first.
            Some(req) => self.pause.request(req.clone(), &self.stop),
            // The first worker after a resume says so, then replays.
            None => {
                pause::record_resumed(log).await?;
            }
        }
        Ok(None)
    }

    /// Listens for the operator's pause requests and arms the log's stop (and the test-only
    /// fault pause) before the graph runs.
    async fn listen(&self, log: &mut RunLog<JetStreamPublisher>) -> Result<(), RunError> {
        pause::listen(
            self.client.clone(),
            subjects::control_subject(&self.p.namespace, &self.p.run_id),
            self.pause.clone(),
            self.stop.clone(),
        )
        .await
        .map_err(RunError::ControlSubject)?;
        log.set_stop(Some(self.stop.clone()));
        log.set_fault_pause(self.wenv.testing.fault_pause_at_sequence);
        Ok(())
    }

    /// Executes the graph to its end, a suspension, or a stop; a step that reaches no safe
    /// point within the stop grace is dropped (the stream still holds a prefix, as each
    /// publish waits for its ack).
    async fn execute(
        &self,
        graph: &Graph,
        log: RunLog<JetStreamPublisher>,
        reasoning: ReasoningStream,
    ) -> Result<i32, RunError> {
        let grace = self.wenv.tuning.stop_grace.unwrap_or(DEFAULT_STOP_GRACE);
        let mut exec = Executor::new(&self.p.snap, graph, &self.p.cfg, log, reasoning)
            .with_run_span(self.span.borrowed())
            .with_drain(self.pause.drain());
        let outcome = {
            let run = exec.run();
            tokio::pin!(run);
            tokio::select! {
                r = &mut run => r.map(Some),
                _ = stop_deadline(self.stop.clone(), grace) => Ok(None),
            }
        };
        match outcome {
            Ok(Some(end)) => Ok(self.finish(&end, exec.log_mut().events())),
            Err(LogError::Stopped) => Ok(self.stopped(exec.log_mut()).await?),
            Ok(None) => {
                tracing::warn!(run = %self.p.name, grace_ms = grace.as_millis() as u64, "no safe point within the stop grace; the in-flight step was dropped");
                self.span.set_str("openwop.run_outcome", "stopped");
                Ok(STOPPED)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// After a stop at a safe point: the operator's cancel (the kubelet refreshes the mounted
    /// snapshot, so it is read again), else a pause, else a plain stop a later worker replays.
    async fn stopped(&self, log: &mut RunLog<JetStreamPublisher>) -> Result<i32, LogError> {
        let fresh = load_snapshot(&self.wenv.snapshot).ok().filter(|s| s.cancel);
        if let (None, Some(req)) = (&fresh, self.pause.requested()) {
            // Paused: `immediate` stopped in-flight nodes unrecorded, a drain let them
            // finish; either way the log is a prefix a resume replays.
            log.set_stop(None);
            pause::record_paused(log, &req).await?;
            return Ok(self.paused(log.events()));
        }
        let Some(fresh) = fresh else {
            tracing::warn!(run = %self.p.name, "stopped at a safe point; a later worker replays");
            self.span.set_str("openwop.run_outcome", "stopped");
            let _ = self.client.flush().await;
            return Ok(STOPPED);
        };
        log.set_stop(None);
        let end = cancel_run(log, &fresh).await?;
        Ok(self.finish(&end, log.events()))
    }

    /// A paused run's exit: the termination summary (phase `paused`) and the suspended code,
    /// so the operator holds no pod until the resume.
    fn paused(&self, events: &[RunEventDoc]) -> i32 {
        let summary = Projection::of_docs(events);
        self.span.set_str("openwop.run_outcome", "paused");
        self.span.set_i64("openwop.events", events.len() as i64);
        write_termination(
            self.wenv.tuning.termination_log.as_deref(),
            &summary.to_termination_message(),
        );
        tracing::info!(run = %self.p.name, events = events.len(), "worker paused");
        SUSPENDED
    }

    /// Writes the termination summary and picks the exit code.
    fn finish(&self, end: &RunEnd, events: &[RunEventDoc]) -> i32 {
        // The same projection the operator applies to the stream.
        let mut summary = Projection::of_docs(events);
        if let RunEnd::Suspended(_) = end {
            // Nothing else can run: the run waits on its pending interrupts.
            summary.suspend();
        }
        if let Some(phase) = summary.phase {
            self.span.set_str("openwop.run_outcome", phase.as_str());
        }
        self.span.set_i64("openwop.events", events.len() as i64);
        if let RunEnd::Failed(e) = end {
            self.span.fail(&e.code, &e.message);
        }
        write_termination(
            self.wenv.tuning.termination_log.as_deref(),
            &summary.to_termination_message(),
        );
        tracing::info!(run = %self.p.name, events = events.len(), end = ?std::mem::discriminant(end), "worker done");
        match end {
            RunEnd::Suspended(_) => SUSPENDED,
            RunEnd::Completed | RunEnd::Failed(_) | RunEnd::Cancelled => TERMINAL,
        }
    }
}

/// Writes the pod's termination message where the kubelet reads it (when that directory
/// exists: outside a pod there is none).
fn write_termination(path: Option<&str>, summary: &str) {
    let path = path.unwrap_or("/dev/termination-log");
    if std::path::Path::new(&path)
        .parent()
        .is_some_and(|d| d.exists())
    {
        let _ = std::fs::write(path, summary);
    }
}
