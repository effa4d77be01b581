//! The kubelet part: one worker task per pod bound to this node.
//!
//! Why one file of this size: a pod's lifecycle (init containers, restarts, probes of
//! termination, status patches) is one state machine whose steps share its state; split, the
//! order of its transitions would be spread over files.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, ObjectReference, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::AgentConfig;
use super::ctx::Ctx;
use super::process;
use super::status::{self, ContainerView, State, StatusInput, Terminated};
use super::volumes::{self, VolumeSet};

/// How often a blocked pod (unmapped image, missing secret, …) is retried.
const RETRY: Duration = Duration::from_secs(2);
/// Bound service-account tokens are requested for this long and refreshed at 80 %.
const TOKEN_SECONDS: i64 = 3607;
/// Grace given to containers when the agent itself stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How often ConfigMap, Secret and projected volumes are re-read (the kubelet: about a minute).
const VOLUME_REFRESH: Duration = Duration::from_secs(10);

enum Msg {
    Update(Box<Pod>),
    Gone,
}

/// Watches the pods bound to this node and keeps one worker per pod.
pub async fn manage(ctx: Arc<Ctx>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={}", ctx.opts.node_name));
    let mut stream = watcher(api, cfg).boxed();
    let mut workers: HashMap<String, (mpsc::UnboundedSender<Msg>, tokio::task::JoinHandle<()>)> =
        HashMap::new();
    let mut seen: HashSet<String> = HashSet::new();
    loop {
        let ev = tokio::select! {
            _ = shutdown.cancelled() => break,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { break };
        workers.retain(|_, (_, h)| !h.is_finished());
        match ev {
            Ok(watcher::Event::Init) => seen.clear(),
            Ok(watcher::Event::InitApply(pod)) => {
                seen.insert(pod.uid().unwrap_or_default());
                dispatch(&ctx, &mut workers, &shutdown, pod);
            }
            Ok(watcher::Event::InitDone) => {
                for (uid, (tx, _)) in &workers {
                    if !seen.contains(uid) {
                        let _ = tx.send(Msg::Gone);
                    }
                }
            }
            Ok(watcher::Event::Apply(pod)) => dispatch(&ctx, &mut workers, &shutdown, pod),
            Ok(watcher::Event::Delete(pod)) => {
                if let Some((tx, _)) = workers.get(&pod.uid().unwrap_or_default()) {
                    let _ = tx.send(Msg::Gone);
                }
            }
            Err(err) => {
                tracing::warn!(%err, "pod watch error; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    // Workers see the cancelled token and stop their containers.
    shutdown.cancel();
    for (_, (_, handle)) in workers.drain() {
        let _ = handle.await;
    }
    Ok(())
}

fn dispatch(
    ctx: &Arc<Ctx>,
    workers: &mut HashMap<String, (mpsc::UnboundedSender<Msg>, tokio::task::JoinHandle<()>)>,
    shutdown: &CancellationToken,
    pod: Pod,
) {
    let uid = pod.uid().unwrap_or_default();
    if let Some((tx, _)) = workers.get(&uid)
        && tx.send(Msg::Update(Box::new(pod.clone()))).is_ok()
    {
        return;
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let worker = Worker::new(ctx.clone(), pod);
    let handle = tokio::spawn(worker.run(rx, shutdown.clone()));
    workers.insert(uid, (tx, handle));
}

/// When a pod worker must reconcile next without a message: the earliest deadline that
/// `reconcile` acts on in the pod's state. A finished pod restarts no container and refreshes
/// neither tokens nor volumes, so those deadlines (soon in the past) must not wake it: they
/// made every finished pod a busy loop re-serialising its status (issue 7's 200-run profile).
fn next_wake(
    now: Instant,
    terminal: bool,
    restarts: impl Iterator<Item = Instant>,
    refreshes: [Option<Instant>; 2],
    always: [Option<Instant>; 2],
) -> Instant {
    let far = now + Duration::from_secs(3600);
    let live: Vec<Instant> = if terminal {
        vec![]
    } else {
        restarts.chain(refreshes.into_iter().flatten()).collect()
    };
    live.into_iter()
        .chain(always.into_iter().flatten())
        .fold(far, Instant::min)
}

struct Ctr {
    spec: Container,
    state: State,
    last_terminated: Option<Terminated>,
    restart_count: i32,
    /// True once the container has been started by this agent at least once.
    started_once: bool,
    not_before: Option<Instant>,
    backoff: Duration,
    /// Incremented per start so a late exit of an old process is not mistaken for the new one.
    attempt: u64,
    pgid: Option<i32>,
    image_id: String,
}

impl Ctr {
    fn new(spec: Container, backoff: Duration) -> Self {
        Self {
            spec,
            state: State::Waiting {
                reason: "ContainerCreating".into(),
                message: None,
            },
            last_terminated: None,
            restart_count: 0,
            started_once: false,
            not_before: None,
            backoff,
            attempt: 0,
            pgid: None,
            image_id: String::new(),
        }
    }

    fn view(&self, will_restart: bool) -> ContainerView {
        ContainerView {
            name: self.spec.name.clone(),
            image: self.spec.image.clone().unwrap_or_default(),
            image_id: self.image_id.clone(),
            state: self.state.clone(),
            last_terminated: self.last_terminated.clone(),
            restart_count: self.restart_count,
            will_restart,
        }
    }

    fn running(&self) -> bool {
        matches!(self.state, State::Running { .. })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Init,
    Main,
}

struct Exit {
    kind: Kind,
    index: usize,
    attempt: u64,
    code: i32,
    signal: Option<i32>,
    finished: Timestamp,
    message: Option<String>,
}

struct Worker {
    ctx: Arc<Ctx>,
    pod: Pod,
    reference: ObjectReference,
    ns: String,
    name: String,
    dir: PathBuf,
    log_dir: PathBuf,
    init: Vec<Ctr>,
    main: Vec<Ctr>,
    init_done: bool,
    terminal: Option<&'static str>,
    prepared: bool,
    token_deadline: Option<Instant>,
    terminating: Option<Instant>,
    killed: bool,
    start_time: Timestamp,
    conditions_since: Timestamp,
    condition_key: (String, bool, bool),
    last_status: Option<serde_json::Value>,
    /// reason → note of the last Warning event, so a retried failure is reported once.
    warned: HashMap<String, String>,
    retry_at: Option<Instant>,
    exits_tx: mpsc::UnboundedSender<Exit>,
    exits_rx: mpsc::UnboundedReceiver<Exit>,
    backoff: (Duration, Duration),
    done: bool,
    volumes: VolumeSet,
    volumes_refresh_at: Option<Instant>,
}

impl Worker {
    fn new(ctx: Arc<Ctx>, pod: Pod) -> Self {
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let uid = pod.uid().unwrap_or_default();
        let dir = ctx.pods_dir().join(format!("{ns}_{name}_{uid}"));
        let volumes = VolumeSet::new(&dir);
        let log_dir = ctx.logs_dir().join(&ns).join(&name);
        let backoff = AgentConfig::load(&ctx.opts.config)
            .map(|c| c.restart_backoff)
            .unwrap_or_default();
        let backoff = (backoff.initial(), backoff.max());
        let spec = pod.spec.clone().unwrap_or_default();
        let mut init: Vec<Ctr> = spec
            .init_containers
            .unwrap_or_default()
            .into_iter()
            .map(|c| Ctr::new(c, backoff.0))
            .collect();
        let mut main: Vec<Ctr> = spec
            .containers
            .into_iter()
            .map(|c| Ctr::new(c, backoff.0))
            .collect();
        // After an agent restart, keep counting restarts where the last agent left off.
        let status = pod.status.clone().unwrap_or_default();
        for (ctrs, statuses) in [
            (
                &mut init,
                status.init_container_statuses.unwrap_or_default(),
            ),
            (&mut main, status.container_statuses.unwrap_or_default()),
        ] {
            for s in statuses {
                if let Some(c) = ctrs.iter_mut().find(|c| c.spec.name == s.name) {
                    c.restart_count = s.restart_count;
                    // Its process died with the previous agent: starting it again is a restart.
                    c.started_once = s
                        .state
                        .as_ref()
                        .is_some_and(|st| st.running.is_some() || st.terminated.is_some())
                        || s.last_state
                            .as_ref()
                            .is_some_and(|st| st.terminated.is_some());
                }
            }
        }
        let terminal = match status.phase.as_deref() {
            Some("Succeeded") => Some("Succeeded"),
            Some("Failed") => Some("Failed"),
            _ => None,
        };
        let start_time = status
            .start_time
            .map(|t| t.0)
            .unwrap_or_else(Timestamp::now);
        let (exits_tx, exits_rx) = mpsc::unbounded_channel();
        Self {
            reference: pod.object_ref(&()),
            ctx,
            ns,
            name,
            dir,
            log_dir,
            init_done: init.is_empty(),
            init,
            main,
            terminal,
            prepared: false,
            token_deadline: None,
            terminating: None,
            killed: false,
            start_time,
            conditions_since: start_time,
            condition_key: (String::new(), false, false),
            last_status: None,
            warned: HashMap::new(),
            retry_at: None,
            exits_tx,
            exits_rx,
            backoff,
            done: false,
            volumes,
            volumes_refresh_at: None,
            pod,
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>, shutdown: CancellationToken) {
        self.reset_log_dir();
        loop {
            self.reconcile().await;
            if self.done {
                break;
            }
            let wake = self.next_wake();
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(Msg::Update(p)) => self.pod = *p,
                    Some(Msg::Gone) | None => {
                        self.stop_all(Duration::ZERO).await;
                        self.cleanup();
                        break;
                    }
                },
                Some(exit) = self.exits_rx.recv() => self.on_exit(exit),
                _ = tokio::time::sleep_until(wake) => {}
                _ = shutdown.cancelled() => {
                    self.stop_all(SHUTDOWN_GRACE).await;
                    break;
                }
            }
        }
    }

    fn next_wake(&self) -> Instant {
        let restarts = self
            .init
            .iter()
            .chain(self.main.iter())
            .filter_map(|c| c.not_before);
        next_wake(
            Instant::now(),
            self.terminal.is_some(),
            restarts,
            [self.token_deadline, self.volumes_refresh_at],
            [self.terminating, self.retry_at],
        )
    }

    fn restart_policy(&self) -> Option<String> {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
    }

    fn reset_log_dir(&self) {
        // A new pod with the same name (StatefulSet-style) starts with fresh logs.
        let uid = self.pod.uid().unwrap_or_default();
        let marker = self.log_dir.join(".uid");
        if std::fs::read_to_string(&marker).ok().as_deref() != Some(uid.as_str()) {
            let _ = std::fs::remove_dir_all(&self.log_dir);
        }
        if let Err(err) = std::fs::create_dir_all(&self.log_dir)
            .and_then(|_| std::fs::write(&marker, uid.as_bytes()))
        {
            tracing::warn!(%err, dir = %self.log_dir.display(), "cannot prepare log directory");
        }
    }

    fn cleanup(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    async fn warn(&mut self, reason: &str, note: String) {
        if self.warned.get(reason) == Some(&note) {
            return;
        }
        tracing::warn!(pod = %format!("{}/{}", self.ns, self.name), reason, %note);
        self.ctx
            .event(&self.reference, EventType::Warning, reason, note.clone())
            .await;
        self.warned.insert(reason.into(), note);
    }

    async fn reconcile(&mut self) {
        self.retry_at = None;
        if self.pod.metadata.deletion_timestamp.is_some() {
            self.terminate().await;
            return;
        }
        if self.terminal.is_none() {
            if !self.prepared {
                self.prepare().await;
            }
            if self.prepared {
                self.refresh_token_if_due().await;
                self.refresh_volumes_if_due().await;
                self.start_due().await;
            }
        }
        self.sync_status().await;
    }

    /// Checks that every image maps to a binary, then creates the pod directory and the
    /// service-account credentials.
    async fn prepare(&mut self) {
        let cfg = match AgentConfig::load(&self.ctx.opts.config) {
            Ok(c) => c,
            Err(err) => {
                self.block_all("InvalidNodeAgentConfig", err.to_string())
                    .await;
                return;
            }
        };
        let mut unmapped = Vec::new();
        for c in self.init.iter().chain(self.main.iter()) {
            let image = c.spec.image.clone().unwrap_or_default();
            if cfg.resolve(&image, &env_var).is_none() {
                unmapped.push(image);
            }
        }
        if !unmapped.is_empty() {
            let note = format!(
                "image {} is not mapped to a local binary: add it to {} (or set OPENWOP_NODE_AGENT_CONFIG)",
                unmapped.join(", "),
                self.ctx.opts.config.display()
            );
            self.block_all("ImageNotMapped", note).await;
            return;
        }
        if let Err(err) = std::fs::create_dir_all(self.dir.join("serviceaccount")) {
            self.block_all(
                "CreatePodSandboxError",
                format!("cannot create {}: {err}", self.dir.display()),
            )
            .await;
            return;
        }
        if self.wants_token()
            && let Err(note) = self.write_token().await
        {
            self.block_all("FailedMount", note).await;
            return;
        }
        if let Err(err) = self.volumes.sync(&self.ctx.client, &self.pod).await {
            self.block_all("FailedMount", err.to_string()).await;
            return;
        }
        self.volumes_refresh_at = Some(Instant::now() + VOLUME_REFRESH);
        self.prepared = true;
    }

    /// Keeps ConfigMap, Secret and projected volumes current, as the kubelet does eventually.
    async fn refresh_volumes_if_due(&mut self) {
        if self.volumes_refresh_at.is_some_and(|d| d <= Instant::now()) {
            self.volumes_refresh_at = Some(Instant::now() + VOLUME_REFRESH);
            if let Err(err) = self.volumes.sync(&self.ctx.client, &self.pod).await {
                self.warn("FailedMount", err.to_string()).await;
            }
        }
    }

    async fn block_all(&mut self, reason: &str, message: String) {
        for c in self.init.iter_mut().chain(self.main.iter_mut()) {
            if !c.running() {
                c.state = State::Waiting {
                    reason: reason.into(),
                    message: Some(message.clone()),
                };
            }
        }
        self.warn(reason, message).await;
        self.retry_at = Some(Instant::now() + RETRY);
    }

    /// The ServiceAccount admission plugin adds a projected token volume unless automounting
    /// is turned off; its presence is the kubelet's signal to provide credentials.
    fn wants_token(&self) -> bool {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .map(|vols| {
                vols.iter().any(|v| {
                    v.projected.as_ref().is_some_and(|p| {
                        p.sources
                            .iter()
                            .flatten()
                            .any(|s| s.service_account_token.is_some())
                    })
                })
            })
            .unwrap_or(false)
    }

    async fn write_token(&mut self) -> Result<(), String> {
        let token = volumes::bound_token(&self.ctx.client, &self.pod, vec![], TOKEN_SECONDS)
            .await
            .map_err(|e| {
                let sa = volumes::service_account(&self.pod);
                format!("cannot request a token for service account {sa}: {e}")
            })?;
        let sa_dir = self.dir.join("serviceaccount");
        let write = |name: &str, content: &str| -> Result<(), String> {
            let tmp = sa_dir.join(format!(".{name}.tmp"));
            std::fs::write(&tmp, content)
                .and_then(|_| std::fs::rename(&tmp, sa_dir.join(name)))
                .map_err(|e| format!("cannot write {}: {e}", sa_dir.join(name).display()))
        };
        write("token", &token)?;
        write("ca.crt", &self.ctx.ca_pem)?;
        write("namespace", &self.ns)?;
        let kubeconfig = pod_kubeconfig(
            &format!("https://{}:{}", self.ctx.api_host, self.ctx.api_port),
            &sa_dir,
            &self.ns,
        );
        std::fs::write(self.dir.join("kubeconfig"), kubeconfig)
            .map_err(|e| format!("cannot write the pod kubeconfig: {e}"))?;
        self.token_deadline =
            Some(Instant::now() + Duration::from_secs((TOKEN_SECONDS as u64) * 8 / 10));
        Ok(())
    }

    async fn refresh_token_if_due(&mut self) {
        if self.token_deadline.is_some_and(|d| d <= Instant::now())
            && let Err(note) = self.write_token().await
        {
            self.warn("FailedMount", note).await;
            self.token_deadline = Some(Instant::now() + Duration::from_secs(30));
        }
    }

    async fn start_due(&mut self) {
        let now = Instant::now();
        let policy = self.restart_policy();
        if !self.init_done {
            // Init containers run one at a time, in order, each to success.
            let Some(i) = self
                .init
                .iter()
                .position(|c| !matches!(&c.state, State::Terminated(t) if t.exit_code == 0))
            else {
                self.init_done = true;
                return Box::pin(self.start_due()).await;
            };
            let c = &self.init[i];
            if c.running() || c.not_before.is_some_and(|t| t > now) {
                return;
            }
            if let State::Terminated(t) = &c.state
                && policy.as_deref() == Some("Never")
                && t.exit_code != 0
            {
                return;
            }
            self.start(Kind::Init, i).await;
            return;
        }
        for i in 0..self.main.len() {
            let c = &self.main[i];
            if c.running() || c.not_before.is_some_and(|t| t > now) {
                continue;
            }
            let due = match &c.state {
                State::Waiting { .. } => true,
                State::Terminated(t) => status::restart_allowed(policy.as_deref(), t.exit_code),
                State::Running { .. } => false,
            };
            if due {
                self.start(Kind::Main, i).await;
            }
        }
    }

    fn ctr(&mut self, kind: Kind, i: usize) -> &mut Ctr {
        match kind {
            Kind::Init => &mut self.init[i],
            Kind::Main => &mut self.main[i],
        }
    }

    async fn fail_start(&mut self, kind: Kind, i: usize, reason: &str, note: String) {
        let retry = Instant::now() + RETRY;
        let c = self.ctr(kind, i);
        c.state = State::Waiting {
            reason: reason.into(),
            message: Some(note.clone()),
        };
        c.not_before = Some(retry);
        let name = c.spec.name.clone();
        self.warn(reason, format!("container {name}: {note}")).await;
    }

    /// The environment every container gets before its own `env`: what a container image and
    /// the kubelet would provide, adapted to a process on this machine.
    fn base_env(&self, mapping_env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        env.insert(
            "PATH".into(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
        );
        env.insert("HOME".into(), self.dir.display().to_string());
        env.insert("HOSTNAME".into(), self.name.clone());
        env.insert("OPENWOP_POD_DIR".into(), self.dir.display().to_string());
        let (host, port) = (&self.ctx.api_host, self.ctx.api_port);
        env.insert("KUBERNETES_SERVICE_HOST".into(), host.clone());
        env.insert("KUBERNETES_SERVICE_PORT".into(), port.to_string());
        env.insert("KUBERNETES_SERVICE_PORT_HTTPS".into(), port.to_string());
        env.insert("KUBERNETES_PORT".into(), format!("tcp://{host}:{port}"));
        if self.wants_token() {
            env.insert(
                "KUBECONFIG".into(),
                self.dir.join("kubeconfig").display().to_string(),
            );
        }
        for (k, v) in mapping_env {
            env.insert(k.clone(), v.clone());
        }
        env
    }

    async fn start(&mut self, kind: Kind, i: usize) {
        let cfg = match AgentConfig::load(&self.ctx.opts.config) {
            Ok(c) => c,
            Err(err) => {
                return self
                    .fail_start(kind, i, "InvalidNodeAgentConfig", err.to_string())
                    .await;
            }
        };
        let spec = self.ctr(kind, i).spec.clone();
        let image = spec.image.clone().unwrap_or_default();
        let Some(mapping) = cfg.resolve(&image, &env_var) else {
            let note = format!(
                "image {image} is not mapped to a local binary: add it to {}",
                self.ctx.opts.config.display()
            );
            return self.fail_start(kind, i, "ImageNotMapped", note).await;
        };
        let env = match process::container_env(
            &self.ctx.client,
            &self.pod,
            &spec,
            self.base_env(&mapping.env),
        )
        .await
        {
            Ok(env) => env,
            Err(err) => {
                return self
                    .fail_start(kind, i, "CreateContainerConfigError", err.to_string())
                    .await;
            }
        };
        let argv = process::argv(&spec, &mapping, &env);
        let Some(program) = argv.first().cloned() else {
            let note = format!("image {image}: no command, no entrypoint in the mapping");
            return self
                .fail_start(kind, i, "CreateContainerConfigError", note)
                .await;
        };
        if !process::program_exists(&program, env.get("PATH").map(String::as_str)) {
            let note = format!(
                "{program} (image {image}) does not exist or is not executable: build it or fix the mapping in {}",
                self.ctx.opts.config.display()
            );
            return self.fail_start(kind, i, "BinaryNotFound", note).await;
        }
        let workdir = spec
            .working_dir
            .as_deref()
            .map(Path::new)
            .filter(|p| p.is_dir())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.dir.clone());

        let restarting = self.ctr(kind, i).started_once;
        let restart_count = self.ctr(kind, i).restart_count + i32::from(restarting);
        let ctr_log_dir = self.log_dir.join(&spec.name);
        let log_path = ctr_log_dir.join(format!("{restart_count}.log"));
        let log = std::fs::create_dir_all(&ctr_log_dir).and_then(|_| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
        });
        let log = match log {
            Ok(f) => f,
            Err(err) => {
                let note = format!("cannot open log file {}: {err}", log_path.display());
                return self.fail_start(kind, i, "RunContainerError", note).await;
            }
        };
        let stderr = match log.try_clone() {
            Ok(f) => f,
            Err(err) => {
                let note = format!("cannot open log file {}: {err}", log_path.display());
                return self.fail_start(kind, i, "RunContainerError", note).await;
            }
        };
        // Volumes and the termination-message file, bind-mounted in a private mount namespace.
        let mut mounts = match self.volumes.container_mounts(&self.pod, &spec, &env) {
            Ok(m) => m,
            Err(err) => {
                return self
                    .fail_start(kind, i, "FailedMount", err.to_string())
                    .await;
            }
        };
        let needs_ns = !mounts.is_empty();
        let term_file = self.dir.join("termination").join(&spec.name);
        let term_path = spec
            .termination_message_path
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/dev/termination-log".into());
        let ns_ok = volumes::mount_namespaces_available();
        if needs_ns && !ns_ok {
            let note = "volume mounts need mount namespaces (run the node agent as root with CAP_SYS_ADMIN)".to_string();
            return self.fail_start(kind, i, "FailedMount", note).await;
        }
        if ns_ok {
            if let Err(err) = std::fs::create_dir_all(self.dir.join("termination"))
                .and_then(|_| std::fs::write(&term_file, b""))
            {
                let note = format!("cannot create {}: {err}", term_file.display());
                return self.fail_start(kind, i, "RunContainerError", note).await;
            }
            // Last, as the kubelet does, so a volume mounted over its directory cannot hide it.
            mounts.push(volumes::Mount {
                source: term_file.clone(),
                target: PathBuf::from(&term_path),
                read_only: false,
            });
        }
        let prepared_mounts = match volumes::ensure_mountpoints(&mounts)
            .map_err(|e| format!("cannot create mountpoints: {e}"))
            .and_then(|_| volumes::PreparedMounts::new(&mounts))
        {
            Ok(p) => p,
            Err(note) => return self.fail_start(kind, i, "FailedMount", note).await,
        };
        let mut cmd = tokio::process::Command::new(&program);
        if ns_ok {
            // SAFETY: the closure only makes system calls on data prepared before fork.
            unsafe {
                cmd.pre_exec(move || prepared_mounts.apply_in_child());
            }
        }
        cmd.args(&argv[1..])
            .env_clear()
            .envs(&env)
            .current_dir(&workdir)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(stderr)
            // Own process group: signals reach the whole tree (shell and children).
            .process_group(0)
            .kill_on_drop(false);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(err) => {
                let note = if ns_ok {
                    format!(
                        "cannot start {program} (private mount namespace with {} mount(s)): {err}",
                        mounts.len()
                    )
                } else {
                    format!("cannot start {program}: {err}")
                };
                return self.fail_start(kind, i, "RunContainerError", note).await;
            }
        };
        let pid = child.id().map(|p| p as i32).unwrap_or(0);
        let started = Timestamp::now();
        let attempt = {
            let c = self.ctr(kind, i);
            c.attempt += 1;
            c.attempt
        };
        let tx = self.exits_tx.clone();
        let exit_marker = ctr_log_dir.join(format!("{restart_count}.exit"));
        let fallback_to_logs =
            spec.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
        let term_file = ns_ok.then_some(term_file);
        tokio::spawn(async move {
            let status = child.wait().await;
            let (code, signal) = match status {
                Ok(s) => {
                    use std::os::unix::process::ExitStatusExt;
                    match (s.code(), s.signal()) {
                        (Some(c), _) => (c, None),
                        (None, Some(sig)) => (128 + sig, Some(sig)),
                        (None, None) => (-1, None),
                    }
                }
                Err(err) => {
                    tracing::warn!(%err, pid, "waiting for container process failed");
                    (-1, None)
                }
            };
            let _ = std::fs::write(&exit_marker, code.to_string());
            let mut message = term_file
                .as_deref()
                .and_then(volumes::read_termination_message);
            if message.is_none() && fallback_to_logs && code != 0 {
                message = volumes::log_tail(&log_path);
            }
            let _ = tx.send(Exit {
                message,
                kind,
                index: i,
                attempt,
                code,
                signal,
                finished: Timestamp::now(),
            });
        });
        let container_id = format!("openwop://{pid}");
        {
            let c = self.ctr(kind, i);
            c.restart_count = restart_count;
            c.started_once = true;
            c.pgid = Some(pid);
            c.not_before = None;
            c.image_id = format!("openwop-local://{program}");
            c.state = State::Running {
                started,
                container_id,
            };
        }
        tracing::info!(pod = %format!("{}/{}", self.ns, self.name), container = %spec.name, pid, %program, restart_count, "container started");
        self.warned.clear();
        let note = format!("Started container {} (pid {pid}, {program})", spec.name);
        self.ctx
            .event(&self.reference, EventType::Normal, "Started", note)
            .await;
    }

    fn on_exit(&mut self, exit: Exit) {
        let policy = self.restart_policy();
        let terminating = self.terminating.is_some();
        let (initial, max) = self.backoff;
        let c = match exit.kind {
            Kind::Init => self.init.get_mut(exit.index),
            Kind::Main => self.main.get_mut(exit.index),
        };
        let Some(c) = c else { return };
        if c.attempt != exit.attempt {
            return;
        }
        let State::Running {
            started,
            container_id,
        } = c.state.clone()
        else {
            return;
        };
        c.pgid = None;
        let term = Terminated {
            exit_code: exit.code,
            signal: exit.signal,
            reason: if exit.code == 0 { "Completed" } else { "Error" }.into(),
            message: exit.message,
            started,
            finished: exit.finished,
            container_id,
        };
        tracing::info!(pod = %format!("{}/{}", self.ns, self.name), container = %c.spec.name, exit_code = exit.code, "container exited");
        // A container that ran stably for a while starts over with the initial backoff.
        let ran = exit.finished.duration_since(started).as_secs_f64();
        if ran > 2.0 * max.as_secs_f64() {
            c.backoff = initial;
        }
        let restart = !terminating
            && match exit.kind {
                Kind::Init => exit.code != 0 && policy.as_deref() != Some("Never"),
                Kind::Main => status::restart_allowed(policy.as_deref(), exit.code),
            };
        if restart {
            c.last_terminated = Some(term);
            c.state = State::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: Some(format!(
                    "back-off {}s restarting failed container={}",
                    c.backoff.as_secs_f64(),
                    c.spec.name
                )),
            };
            c.not_before = Some(Instant::now() + c.backoff);
            c.backoff = (c.backoff * 2).min(max);
        } else {
            c.state = State::Terminated(term);
        }
    }

    fn views(&self) -> (Vec<ContainerView>, Vec<ContainerView>) {
        let policy = self.restart_policy();
        let terminating = self.terminating.is_some();
        let will_restart = |c: &Ctr, kind: Kind| {
            if terminating {
                return false;
            }
            match &c.state {
                State::Terminated(t) => match kind {
                    Kind::Init => false,
                    Kind::Main => status::restart_allowed(policy.as_deref(), t.exit_code),
                },
                _ => true,
            }
        };
        (
            self.init
                .iter()
                .map(|c| c.view(will_restart(c, Kind::Init)))
                .collect(),
            self.main
                .iter()
                .map(|c| c.view(will_restart(c, Kind::Main)))
                .collect(),
        )
    }

    fn init_failed(&self) -> bool {
        let never = self.restart_policy().as_deref() == Some("Never");
        never
            && self
                .init
                .iter()
                .any(|c| matches!(&c.state, State::Terminated(t) if t.exit_code != 0))
    }

    async fn sync_status(&mut self) {
        let (init, main) = self.views();
        let phase = match self.terminal {
            Some(p) => p,
            None => {
                let mut p = status::phase(self.init_done, self.init_failed(), &main);
                // A pod being deleted whose containers all stopped ends in a terminal phase.
                if self.terminating.is_some() && !self.any_running() && p != "Pending" {
                    p = if main
                        .iter()
                        .all(|c| matches!(&c.state, State::Terminated(t) if t.exit_code == 0))
                    {
                        "Succeeded"
                    } else {
                        "Failed"
                    };
                }
                p
            }
        };
        if matches!(phase, "Succeeded" | "Failed") && self.terminal.is_none() {
            self.terminal = Some(phase);
            tracing::info!(pod = %format!("{}/{}", self.ns, self.name), phase, "pod finished");
        }
        let ready = phase == "Running" && self.main.iter().all(Ctr::running);
        let key = (phase.to_string(), ready, self.init_done);
        if key != self.condition_key {
            self.condition_key = key;
            self.conditions_since = Timestamp::now();
        }
        let spec = self.pod.spec.clone().unwrap_or_default();
        let st = status::pod_status(&StatusInput {
            spec: &spec,
            phase,
            init_done: self.init_done,
            sandbox_ready: self.prepared,
            init: &init,
            containers: &main,
            start_time: self.start_time,
            since: self.conditions_since,
        });
        let value = match serde_json::to_value(&st) {
            Ok(v) => v,
            Err(err) => {
                tracing::error!(%err, "cannot serialise pod status");
                return;
            }
        };
        if self.last_status.as_ref() == Some(&value) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let patch = serde_json::json!({ "status": value });
        match api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => self.last_status = Some(value),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(err) => {
                tracing::warn!(pod = %format!("{}/{}", self.ns, self.name), %err, "cannot update pod status; retrying");
                self.retry_at = Some(Instant::now() + RETRY);
            }
        }
    }

    fn any_running(&self) -> bool {
        self.init.iter().chain(self.main.iter()).any(Ctr::running)
    }

    /// Graceful deletion as a kubelet does it: SIGTERM, SIGKILL after the grace period, final
    /// status, then the pod object is removed with grace 0.
    async fn terminate(&mut self) {
        let grace = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                self.pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30)
            .max(0) as u64;
        if self.terminating.is_none() {
            let deadline = Instant::now() + Duration::from_secs(grace);
            self.terminating = Some(deadline);
            for c in self.init.iter_mut().chain(self.main.iter_mut()) {
                c.not_before = None;
                if let Some(pgid) = c.pgid
                    && c.running()
                {
                    tracing::info!(pod = %format!("{}/{}", self.ns, self.name), container = %c.spec.name, grace, "stopping container (SIGTERM)");
                    process::signal_group(pgid, libc::SIGTERM);
                }
            }
            if self.any_running() {
                let note = format!("Stopping containers (grace period {grace}s)");
                self.ctx
                    .event(&self.reference, EventType::Normal, "Killing", note)
                    .await;
            }
        }
        if self.any_running() {
            if self.terminating.is_some_and(|d| d <= Instant::now()) && !self.killed {
                self.killed = true;
                for c in self.init.iter().chain(self.main.iter()) {
                    if let Some(pgid) = c.pgid.filter(|_| c.running()) {
                        process::signal_group(pgid, libc::SIGKILL);
                    }
                }
                // Exits arrive through the channel; check again shortly.
                self.terminating = Some(Instant::now() + Duration::from_millis(200));
            }
            return;
        }
        // Containers that never ran end as Waiting; record the final state and remove the pod.
        self.sync_status().await;
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: self.pod.uid(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&self.name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(err) => {
                tracing::warn!(pod = %format!("{}/{}", self.ns, self.name), %err, "cannot finalise pod deletion; retrying");
                self.retry_at = Some(Instant::now() + RETRY);
                return;
            }
        }
        self.cleanup();
        self.done = true;
    }

    /// SIGTERM to every running container, SIGKILL after `grace`, and wait for the exits.
    async fn stop_all(&mut self, grace: Duration) {
        let pgids: Vec<i32> = self
            .init
            .iter()
            .chain(self.main.iter())
            .filter(|c| c.running())
            .filter_map(|c| c.pgid)
            .collect();
        if pgids.is_empty() {
            return;
        }
        let sig = if grace.is_zero() {
            libc::SIGKILL
        } else {
            libc::SIGTERM
        };
        for &p in &pgids {
            process::signal_group(p, sig);
        }
        let deadline = Instant::now() + grace;
        while self.any_running() {
            tokio::select! {
                Some(exit) = self.exits_rx.recv() => self.on_exit_final(exit),
                _ = tokio::time::sleep_until(deadline) => {
                    for &p in &pgids {
                        process::signal_group(p, libc::SIGKILL);
                    }
                    // Give the reaper tasks a moment; the processes are gone either way.
                    let until = Instant::now() + Duration::from_secs(2);
                    while self.any_running() {
                        tokio::select! {
                            Some(exit) = self.exits_rx.recv() => self.on_exit_final(exit),
                            _ = tokio::time::sleep_until(until) => return,
                        }
                    }
                    return;
                }
            }
        }
    }

    fn on_exit_final(&mut self, exit: Exit) {
        self.terminating.get_or_insert_with(Instant::now);
        self.on_exit(exit);
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A kubeconfig for in-cluster clients: kube-rs and client-go both honour `KUBECONFIG`, and
/// `tokenFile` is re-read so refreshed tokens are picked up.
fn pod_kubeconfig(server: &str, sa_dir: &Path, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: in-cluster\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: service-account\n  user:\n    tokenFile: {token}\ncontexts:\n- name: in-cluster\n  context:\n    cluster: in-cluster\n    user: service-account\n    namespace: {namespace}\ncurrent-context: in-cluster\n",
        ca = sa_dir.join("ca.crt").display(),
        token = sa_dir.join("token").display(),
    )
}

#[cfg(test)]
mod tests;
