//! `openwop-worker`: runs one Run (see the crate docs and worker/README.md).
//! Exit codes (`openwop_protocol::run::exit`): 0 terminal, 1 crashed (retry), 2 unusable
//! snapshot/config, 3 suspended (also paused), 143 stopped by SIGTERM at a safe point (replay continues it).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use openwop_nats::NatsAuth;
use openwop_protocol::graph::{Graph, GraphError};
use openwop_protocol::redact::Redactor;
use openwop_protocol::run::ending;
use openwop_protocol::run::env::{self as run_env, WorkerEnv};
use openwop_protocol::run::exit::{BAD_INPUT, CRASHED, STOPPED, SUSPENDED, TERMINAL};
use openwop_protocol::run::pause::{DrainPolicy, PauseLog};
use openwop_protocol::run::projection::Projection;
use openwop_protocol::run::snapshot::{KeyMount, RunSnapshot};
use openwop_protocol::run::subjects;
use openwop_protocol::run::telemetry as run_telemetry;
use openwop_worker::eventlog::{LogError, RunLog};
use openwop_worker::executor::{ExecConfig, Executor, RunEnd, cancel_run};
use openwop_worker::nats::{self, JetStreamPublisher, RetryPolicy};
use openwop_worker::pause::{self, PauseSignal};
use openwop_worker::providers::ProviderSet;
use openwop_worker::reasoning::{DEFAULT_MAX_PER_NODE, ReasoningStream};
use openwop_worker::stop::{self, StopSignal};
use openwop_worker::telemetry::{self, Otel, SpanHandle};

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The pod's environment contract, read once.
fn worker_env() -> Result<WorkerEnv, run_env::EnvError> {
    WorkerEnv::from_vars(std::env::vars_os().filter_map(|(k, v)| {
        // A variable that is not Unicode is none of ours.
        Some((k.into_string().ok()?, v.into_string().ok()?))
    }))
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

fn write_termination(path: Option<&str>, summary: &str) {
    let path = path.unwrap_or("/dev/termination-log");
    if std::path::Path::new(&path)
        .parent()
        .is_some_and(|d| d.exists())
    {
        let _ = std::fs::write(path, summary);
    }
}

/// How long a stop may take before the in-flight step is dropped (`OPENWOP_STOP_GRACE_MS`).
const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(5);

/// Resolves `grace` after a stop was requested.
async fn stop_deadline(stop: StopSignal, grace: Duration) {
    stop.requested().await;
    tokio::time::sleep(grace).await;
}

/// Reads and parses the snapshot file.
fn load_snapshot(path: &str) -> anyhow::Result<RunSnapshot> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!("cannot read snapshot {path}; check the snapshot ConfigMap is mounted")
    })?;
    Ok(RunSnapshot::from_json(&text, path)?)
}

async fn run(stop: StopSignal, otel: &Otel, wenv: &WorkerEnv) -> anyhow::Result<i32> {
    let snapshot_path = &wenv.snapshot;
    let snap = match load_snapshot(snapshot_path) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "unusable snapshot");
            return Ok(BAD_INPUT);
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
        return Ok(BAD_INPUT);
    }
    // Run identity is the runId: a re-created Run of the same name has its own subject.
    let subject = wenv.events_subject_or(&namespace, &run_id);
    let stream = wenv.stream_spec();
    let url = &wenv.nats_url;
    // Credentials of an external NATS: the operator's copy of the chart's Secret.
    let nats_auth = match &wenv.nats_credentials_dir {
        None => NatsAuth::None,
        Some(dir) => match NatsAuth::from_dir(std::path::Path::new(dir)) {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "unusable NATS credentials");
                return Ok(BAD_INPUT);
            }
        },
    };
    let mut policy = RetryPolicy::default();
    if let Some(deadline) = wenv.tuning.publish_deadline {
        policy.deadline = deadline;
    }
    let max_reasoning = wenv
        .tuning
        .reasoning_max_per_node
        .unwrap_or(DEFAULT_MAX_PER_NODE);
    let grace = wenv.tuning.stop_grace.unwrap_or(DEFAULT_STOP_GRACE);

    // An invalid definition is recorded as run.failed below (the operator validated it; a
    // hand-edited snapshot can still be wrong, and then does not match `workflowChecked`).
    let graph = snap
        .workflow_definition()
        .map_err(GraphError::from)
        .and_then(|d| Graph::from_definition(&d));
    if let Err(e) = &graph {
        tracing::error!(error = %e, "workflow definition invalid");
    }
    let secrets = load_secrets(&snap, wenv.tuning.secrets_dir.as_deref());
    let cfg = ExecConfig {
        mock_programs: match snap.mock_programs() {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "unusable provider mocks");
                return Ok(BAD_INPUT);
            }
        },
        // A cancelled run, or a worker that only records a pause, calls no provider.
        providers: match (&graph, snap.cancel || snap.pause.is_some()) {
            (Ok(g), false) => {
                match ProviderSet::build(&snap, g, |p| wenv.provider_base_url(p).map(str::to_owned))
                {
                    Ok(p) => p,
                    Err(e) => {
                        let red = Redactor::new(secrets.clone());
                        tracing::error!(error = %red.redact_str(&e.to_string()).0, "provider configuration");
                        return Ok(BAD_INPUT);
                    }
                }
            }
            _ => ProviderSet::default(),
        },
        secrets,
    };

    tracing::debug!(credentials = nats_auth.kind(), "connecting to NATS");
    let client = nats::connect(url, &nats_auth).await?;
    let js = nats::context(client.clone(), &policy);
    let stream = nats::ensure_stream(&js, &stream, &policy).await?;
    let existing = nats::read_run_events(&stream, &subject, &run_id, &policy).await?;
    tracing::info!(run = %name, attempt = wenv.attempt, replayed = existing.len(), "event log read");
    let redactor = Arc::new(Redactor::new(cfg.secrets.clone()));
    let run_span = otel.telemetry(redactor.clone()).root("openwop.run");
    run_span.set_str(run_telemetry::RUN_ID, &run_id);
    run_span.set_str("openwop.run_name", &name);
    run_span.set_str(run_telemetry::NAMESPACE, &namespace);
    if let Some(w) = snap.workflow.get("id").and_then(serde_json::Value::as_str) {
        run_span.set_str("openwop.workflow_id", w);
    }
    run_span.set_i64("openwop.replayed_events", existing.len() as i64);
    let mut log = RunLog::new(
        JetStreamPublisher::new(js.clone(), policy),
        subject,
        &run_id,
        redactor,
        existing,
    );

    if snap.cancel {
        let end = cancel_run(&mut log, &snap).await?;
        let events = log.events().to_vec();
        return Ok(finish(wenv, &name, &end, &events, &run_span));
    }
    let pause_signal = PauseSignal::new();
    match &snap.pause {
        // Started while the Run's spec.pause is set (no worker was running to ask).
        Some(req)
            if req.drain_policy == DrainPolicy::Immediate || PauseLog::of(log.events()).paused =>
        {
            pause::record_paused(&mut log, req).await?;
            let events = log.events().to_vec();
            return Ok(paused(wenv, &name, &events, &run_span));
        }
        // Woken (a durable timer was due) under a drain: the nodes in flight finish first.
        Some(req) => pause_signal.request(req.clone(), &stop),
        // The first worker after a resume says so, then replays.
        None => {
            pause::record_resumed(&mut log).await?;
        }
    }
    pause::listen(
        client.clone(),
        subjects::control_subject(&namespace, &run_id),
        pause_signal.clone(),
        stop.clone(),
    )
    .await
    .map_err(|e| anyhow::anyhow!("subscribing to the run's control subject: {e}"))?;
    log.set_stop(Some(stop.clone()));
    log.set_fault_pause(wenv.testing.fault_pause_at_sequence);
    let reasoning = ReasoningStream::new(
        subjects::reasoning_subject(&namespace, &run_id),
        max_reasoning,
    );

    let (end, events) = match &graph {
        Ok(graph) => {
            let mut exec = Executor::new(&snap, graph, &cfg, log, reasoning)
                .with_run_span(run_span.borrowed())
                .with_drain(pause_signal.drain());
            let outcome = {
                let run = exec.run();
                tokio::pin!(run);
                tokio::select! {
                    r = &mut run => r.map(Some),
                    // A step that does not reach a safe point in time is dropped: the
                    // stream still holds a prefix (each publish waits for its ack).
                    _ = stop_deadline(stop.clone(), grace) => Ok(None),
                }
            };
            match outcome {
                Ok(Some(end)) => (end, exec.log_mut().events().to_vec()),
                Err(LogError::Stopped) => {
                    // The operator may have asked to cancel: the kubelet refreshes the
                    // mounted snapshot, so read it again.
                    let fresh = load_snapshot(snapshot_path).ok().filter(|s| s.cancel);
                    if let (None, Some(req)) = (&fresh, pause_signal.requested()) {
                        // Paused: `immediate` stopped in-flight nodes unrecorded, a drain let
                        // them finish; either way the log is a prefix a resume replays.
                        exec.log_mut().set_stop(None);
                        pause::record_paused(exec.log_mut(), &req).await?;
                        let events = exec.log_mut().events().to_vec();
                        return Ok(paused(wenv, &name, &events, &run_span));
                    }
                    let Some(fresh) = fresh else {
                        tracing::warn!(run = %name, "stopped at a safe point; a later worker replays");
                        run_span.set_str("openwop.run_outcome", "stopped");
                        let _ = client.flush().await;
                        return Ok(STOPPED);
                    };
                    exec.log_mut().set_stop(None);
                    let end = cancel_run(exec.log_mut(), &fresh).await?;
                    (end, exec.log_mut().events().to_vec())
                }
                Ok(None) => {
                    tracing::warn!(run = %name, grace_ms = grace.as_millis() as u64, "no safe point within the stop grace; the in-flight step was dropped");
                    run_span.set_str("openwop.run_outcome", "stopped");
                    return Ok(STOPPED);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(e) => {
            let mut log = log;
            let err = openwop_protocol::events::ErrorInfo {
                code: "workflow_invalid".into(),
                message: e.to_string(),
                details: None,
                retryable: Some(false),
            };
            log.emit_value(
                ending::RUN_FAILED_STEP,
                None,
                openwop_protocol::events::EventType::RunFailed,
                ending::failed_payload(&err),
            )
            .await?;
            (RunEnd::Failed(err), log.events().to_vec())
        }
    };
    Ok(finish(wenv, &name, &end, &events, &run_span))
}

/// A paused run's exit: the termination summary (phase `paused`) and the suspended code, so
/// the operator holds no pod until the resume.
fn paused(
    wenv: &WorkerEnv,
    name: &str,
    events: &[openwop_protocol::events::RunEventDoc],
    span: &SpanHandle,
) -> i32 {
    let summary = Projection::of_docs(events);
    span.set_str("openwop.run_outcome", "paused");
    span.set_i64("openwop.events", events.len() as i64);
    write_termination(
        wenv.tuning.termination_log.as_deref(),
        &summary.to_termination_message(),
    );
    tracing::info!(run = %name, events = events.len(), "worker paused");
    SUSPENDED
}

/// Writes the termination summary and picks the exit code.
fn finish(
    wenv: &WorkerEnv,
    name: &str,
    end: &RunEnd,
    events: &[openwop_protocol::events::RunEventDoc],
    span: &SpanHandle,
) -> i32 {
    // The same projection the operator applies to the stream.
    let mut summary = Projection::of_docs(events);
    if let RunEnd::Suspended(_) = end {
        // Nothing else can run: the run waits on its pending interrupts.
        summary.suspend();
    }
    if let Some(phase) = summary.phase {
        span.set_str("openwop.run_outcome", phase.as_str());
    }
    span.set_i64("openwop.events", events.len() as i64);
    if let RunEnd::Failed(e) = end {
        span.fail(&e.code, &e.message);
    }
    write_termination(
        wenv.tuning.termination_log.as_deref(),
        &summary.to_termination_message(),
    );
    tracing::info!(run = %name, events = events.len(), end = ?std::mem::discriminant(end), "worker done");
    match end {
        RunEnd::Suspended(_) => SUSPENDED,
        RunEnd::Completed | RunEnd::Failed(_) | RunEnd::Cancelled => TERMINAL,
    }
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env(run_env::LOG)
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .json()
        .init();
    // One thread: concurrent branches are futures of one task (they wait on providers and
    // on the run's one writer, not on the CPU), so worker threads would only add stacks
    // and wake-ups.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            std::process::exit(CRASHED);
        }
    };
    let wenv = match worker_env() {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, "unusable worker environment");
            std::process::exit(BAD_INPUT);
        }
    };
    let endpoints = telemetry::endpoints_from_env(&wenv, env);
    let otel = if endpoints.is_empty() {
        Otel::off()
    } else {
        // The resource names the run, so a span store can file every batch under it.
        let run: Vec<(&'static str, String)> = [
            (run_telemetry::RUN_ID, wenv.run_id.clone()),
            (run_telemetry::NAMESPACE, wenv.run_namespace.clone()),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect();
        Otel::to_endpoints(&endpoints, &run).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "running without OTLP spans");
            Otel::off()
        })
    };
    let stop = StopSignal::new();
    let code = match rt.block_on(async {
        stop::on_termination_signals(stop.clone()).context("installing the SIGTERM handler")?;
        run(stop.clone(), &otel, &wenv).await
    }) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "worker crashed; the operator will retry");
            CRASHED
        }
    };
    // Every exit path (terminal, suspended, stopped, crashed) exports the buffered spans.
    otel.shutdown();
    rt.shutdown_timeout(Duration::from_secs(1));
    std::process::exit(code);
}
