//! The operator process, wired: HTTP (metrics, probes, discovery, the REST API and web UI),
//! the process's Run and Workflow watches, leader election, the Workflow and Run controllers,
//! the event consumer, webhook delivery, and shutdown. The top layer: it may use every module
//! and none uses it. The binary (`main.rs`) parses the command line and the config and calls
//! [`run`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::predicates;
use kube::runtime::reflector::{ObjectRef, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use openwop_crds::{Run, RunPhase, ToolServer, Workflow};
use openwop_protocol::workflow_check::NodeRegistry;

use crate::config::OperatorConfig;
use crate::controller::departed::{Departures, purge_departed};
use crate::controller::{
    CacheWriters, Caches, Context, Feed, changes, error_policy, pod_key, pod_triggers,
    reconcile_run, reconcile_workflow, run_key, slim, slim_pod,
};
use crate::definitions::Definitions;
use crate::discovery::{self, DiscoveryContent, DiscoveryState};
use crate::jetstream::JetStreamSlot;
use crate::kube_events::EventSink;
use crate::leader::{Elector, LeaseLost, Round, Timing};
use crate::metrics::Metrics;
use crate::names::{MANAGER, worker_selector};
use crate::toolservers::{self, ToolServerContext, reconcile_tool_server};
use crate::{conformance, rest};

/// Runs the operator with `cfg` (already validated) until SIGTERM or SIGINT, or until a part
/// that must not end does. `identity`: this replica's name in the leader Lease (default: a
/// name from the process id).
pub async fn run(cfg: OperatorConfig, identity: Option<String>) -> anyhow::Result<()> {
    check_startup(&cfg)?;
    let cfg = Arc::new(cfg);
    // Built-in node types only (the worker executes nothing else), with configured schemas.
    let registry = cfg.node_registry()?;
    let registry = Arc::new(registry);
    let kube_config = kube::Config::infer()
        .await
        .context("connecting to the Kubernetes API")?;
    // The leader lease's renewals get a client of their own (`Elector::keep_apart`).
    let client =
        Client::try_from(kube_config.clone()).context("connecting to the Kubernetes API")?;
    let identity = identity.unwrap_or_else(|| format!("openwop-operator-{}", std::process::id()));
    let metrics = Metrics::default();
    let discovery_state = DiscoveryState::new(&cfg.discovery.cache_control);
    let ready = Arc::new(AtomicBool::new(false));
    let runs_listable = RunsHealth::default();

    let (run_feed, wf_feed, ts_feed, feeds) =
        watch_runs_and_workflows(&client, &cfg, &runs_listable);
    // One reading of each Workflow generation for the API and the controllers.
    let definitions = Definitions::default();
    let (api, api_caches, feeds_when_leading) = rest_api(
        &client,
        &cfg,
        (&discovery_state, &definitions),
        (&run_feed, &wf_feed, &ts_feed),
        feeds,
    );
    let draining = Arc::new(AtomicBool::new(false));
    // Spawned: it keeps answering through the shutdown drain below, after the rest stopped.
    let mut http = tokio::spawn(serve_http(
        cfg.listen.clone(),
        metrics.clone(),
        discovery_state.clone(),
        ready.clone(),
        draining.clone(),
        api,
        runs_listable.clone(),
    ));
    let watch_discovery =
        watch_discovery_configmap(client.clone(), cfg.clone(), discovery_state, ready.clone());
    let (caches, cache_writers) = Caches::new(run_feed.store(), wf_feed.store());
    let ctx = controller_context(
        &client,
        &cfg,
        registry,
        metrics,
        (caches, definitions),
        &identity,
    );
    let elector = cfg.leader_election.enabled.then(|| {
        Arc::new(Elector::new(
            Api::<Lease>::namespaced(client.clone(), cfg.lease_namespace()),
            &cfg.leader_election.lease_name,
            &identity,
            cfg.leader_election.lease_duration_seconds,
        ))
    });
    let drain = Duration::from_secs(cfg.shutdown_drain_seconds);
    let events = ctx.events.clone();
    let lead = lead_then_run(
        (client, kube_config),
        cfg,
        identity,
        elector.clone(),
        ctx,
        Inputs {
            writers: cache_writers,
            runs: run_feed,
            workflows: wf_feed,
            tool_servers: ts_feed,
            unstarted: feeds_when_leading,
        },
        runs_listable,
    );
    // Boxed so it can be dropped before the lease is released.
    let mut lead = Box::pin(lead);
    let signal = tokio::select! {
        r = &mut http => {
            r.context("HTTP server task")?.context("HTTP server")?;
            return Ok(());
        }
        _ = api_caches => anyhow::bail!("the REST API's watches of Runs and Workflows ended"),
        r = watch_discovery => return r.context("discovery ConfigMap watch"),
        // The controllers end by themselves only on SIGTERM/SIGINT (`shutdown_on_signal`).
        r = &mut lead => {
            r?;
            "controllers stopped"
        }
        s = shutdown_signal() => s,
    };
    draining.store(true, Ordering::SeqCst);
    // Stops the controllers and the event consumer (at their next await: every reconcile and
    // event write is idempotent, as after a crash) before another replica may lead.
    drop(lead);
    shut_down(signal, &events, elector.as_deref(), drain, http).await
}

/// Fails at start, not at the first Run, when the mounted NATS credentials are unusable or
/// an active webhook configuration cannot deliver.
fn check_startup(cfg: &OperatorConfig) -> anyhow::Result<()> {
    let nats_auth = cfg
        .nats_credentials
        .load()
        .context("natsCredentials (chart nats.external.credentialsSecret)")?;
    tracing::info!(credentials = nats_auth.kind(), "NATS credentials");
    crate::webhooks::check_startup(cfg)
        .map_err(anyhow::Error::msg)
        .context("webhooks (chart webhooks.*)")?;
    Ok(())
}

/// This process's one watch of the Runs, one of the Workflows and one of the ToolServers
/// (`controller::Feed`), and the future that runs them: the REST API reads their stores on
/// every replica, and the leader's controllers read the same stores and follow their events
/// (one copy of every Run, not one per reader). They run from the start when the REST API is
/// on, else once this replica leads.
fn watch_runs_and_workflows(
    client: &Client,
    cfg: &OperatorConfig,
    runs_listable: &RunsHealth,
) -> (
    Feed<Run>,
    Feed<Workflow>,
    Feed<ToolServer>,
    impl Future<Output = ()> + Send + 'static,
) {
    let mine = watcher::Config::default().labels(&cfg.instance_selector());
    let (run_feed, run_watch) = Feed::new(
        scoped::<Run>(client, cfg),
        mine.clone(),
        runs_listable.on_watch_error(),
    );
    let (wf_feed, wf_watch) = Feed::new(
        scoped::<Workflow>(client, cfg),
        mine.clone(),
        runs_listable.on_watch_error(),
    );
    // A failing ToolServer watch does not make the operator unready: `helm upgrade` does not
    // install a new CRD, and runs without tools must go on while the admin applies it.
    let (ts_feed, ts_watch) = Feed::new(
        scoped::<ToolServer>(client, cfg),
        mine,
        |e| tracing::warn!(error = %e, "cannot list or watch ToolServers (is the ToolServer CRD installed? `kubectl apply -f charts/openwop/crds/`)"),
    );
    let feeds = async move {
        futures::join!(run_watch, wf_watch, ts_watch);
    };
    (run_feed, wf_feed, ts_feed, feeds)
}

/// The REST API (with the web UI and, when on, the conformance seams), which reads this
/// replica's own caches: every replica serves it, leader or not. Returns its router, the
/// future that keeps its caches and background work going (the watches `feeds`, the seams'
/// work, webhook delivery), and `feeds` back when the API is off (the leader runs them then).
fn rest_api<F: Future<Output = ()>>(
    client: &Client,
    cfg: &Arc<OperatorConfig>,
    (discovery_state, definitions): (&DiscoveryState, &Definitions),
    (run_feed, wf_feed, ts_feed): (&Feed<Run>, &Feed<Workflow>, &Feed<ToolServer>),
    feeds: F,
) -> (
    Option<axum::Router>,
    impl Future<Output = ()> + use<F>,
    Option<F>,
) {
    if !cfg.rest.enabled {
        return (
            None,
            futures::future::Either::Right(std::future::pending::<()>()),
            Some(feeds),
        );
    }
    // The conformance seams (off unless `conformance.seams.enabled`): their routes, the
    // run-creation hook and their background work; all empty when off.
    let state = rest::RestState::new(
        client.clone(),
        cfg.clone(),
        run_feed.store(),
        wf_feed.store(),
    )
    .with_discovery(discovery_state.clone())
    .with_definitions(definitions.clone())
    .with_tool_servers(ts_feed.store())
    .with_run_hooks(conformance::run_hooks(cfg));
    let seams = conformance::background(state.clone());
    // Every replica delivers webhooks (one durable consumer per subscription, shared).
    let webhooks =
        crate::webhooks::dispatch::run(cfg.clone(), state.nats.clone(), state.runs.clone());
    (
        Some(crate::ui::mount(
            rest::router(state.clone(), conformance::mounted(cfg)),
            state,
        )),
        futures::future::Either::Left(async move {
            futures::join!(feeds, seams, webhooks);
        }),
        None,
    )
}

/// The reconcilers' shared state: their clients, config, caches, and the Kubernetes Events
/// they queue (published under this replica's `identity`).
fn controller_context(
    client: &Client,
    cfg: &Arc<OperatorConfig>,
    registry: Arc<NodeRegistry>,
    metrics: Metrics,
    (caches, definitions): (Caches, Definitions),
    identity: &str,
) -> Arc<Context> {
    Arc::new(Context {
        client: client.clone(),
        config: cfg.clone(),
        registry,
        metrics,
        events: EventSink::start(
            client.clone(),
            Reporter {
                controller: MANAGER.into(),
                instance: Some(identity.to_owned()),
            },
        ),
        now: k8s_openapi::jiff::Timestamp::now,
        caches,
        nats_copies: Default::default(),
        worker_accounts: Default::default(),
        starts: Default::default(),
        superseded: Default::default(),
        definitions,
        jetstream: cfg
            .events
            .nats_url
            .as_ref()
            .map(|_| JetStreamSlot::default()),
    })
}

/// After the controllers stopped (`signal` says why): publish the queued Kubernetes Events,
/// release the leader lease, and keep the HTTP server answering (not ready) for `drain`.
async fn shut_down(
    signal: &'static str,
    events: &EventSink,
    elector: Option<&Elector>,
    drain: Duration,
    mut http: tokio::task::JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<()> {
    // The Kubernetes Events the controllers queued are published off their path; give them
    // a moment (they are best effort, and the API server may be what is failing).
    if tokio::time::timeout(Duration::from_secs(5), events.flush())
        .await
        .is_err()
    {
        tracing::warn!("shutting down with Kubernetes Events not yet published");
    }
    tracing::info!(
        signal,
        drain_seconds = drain.as_secs(),
        "shutting down: controllers stopped; the HTTP server answers (not ready) until the drain ends"
    );
    // A follower takes over at its next round instead of after the lease expires.
    if let Some(e) = elector {
        match tokio::time::timeout(Duration::from_secs(5), e.release()).await {
            Ok(Ok(true)) => tracing::info!("released the leader lease"),
            Ok(Ok(false)) => {}
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "could not release the leader lease; it expires instead")
            }
            Err(_) => tracing::warn!("releasing the leader lease timed out; it expires instead"),
        }
    }
    tokio::select! {
        _ = tokio::time::sleep(drain) => {}
        r = &mut http => {
            r.context("HTTP server task")?.context("HTTP server")?;
        }
    }
    http.abort();
    Ok(())
}

/// SIGTERM (pod deletion) or SIGINT. Without this the HTTP server and the gauge loop kept the
/// process alive after the controllers stopped, until the kubelet's SIGKILL.
async fn shutdown_signal() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the operator");
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT";
        }
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "SIGINT",
    }
}

async fn serve_http(
    listen: String,
    metrics: Metrics,
    discovery_state: DiscoveryState,
    ready: Arc<AtomicBool>,
    draining: Arc<AtomicBool>,
    api: Option<axum::Router>,
    runs: RunsHealth,
) -> anyhow::Result<()> {
    let app = discovery::router(discovery_state)
        .merge(api.unwrap_or_default())
        .route(
            "/metrics",
            axum::routing::get(move || {
                let m = metrics.clone();
                async move {
                    match m.encode() {
                        Ok(text) => (
                            [(
                                header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            text,
                        )
                            .into_response(),
                        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                    }
                }
            }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route(
            "/readyz",
            axum::routing::get(move || {
                let r = ready.load(Ordering::Relaxed);
                let stopping = draining.load(Ordering::Relaxed);
                let failing = runs.failing();
                async move {
                    if stopping {
                        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down".to_owned());
                    }
                    match (r, failing) {
                        (false, _) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            "discovery not loaded".to_owned(),
                        ),
                        (true, Some(why)) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("cannot list or watch Runs, so no Run is reconciled: {why}"),
                        ),
                        (true, None) => (StatusCode::OK, "ready".to_owned()),
                    }
                }
            }),
        );
    // Every protocol path is negotiated, matched or not (an unversioned v2 path has no route).
    let app = app.layer(axum::middleware::from_fn_with_state(
        crate::versioning::advertised(),
        crate::versioning::negotiate_version,
    ));
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    tracing::info!(%listen, "HTTP server listening");
    axum::serve(listener, app).await?;
    Ok(())
}

/// Every replica serves discovery from the ConfigMap's current content.
async fn watch_discovery_configmap(
    client: Client,
    cfg: Arc<OperatorConfig>,
    state: DiscoveryState,
    ready: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client, &cfg.discovery.namespace);
    let wc =
        watcher::Config::default().fields(&format!("metadata.name={}", cfg.discovery.config_map));
    // Backoff: without it a lost apiserver turns this loop into a hot spin of log lines.
    let mut stream = watcher::watcher(api, wc).default_backoff().boxed();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => {
                state.set(DiscoveryContent::from_configmap(&cm));
                ready.store(true, Ordering::Relaxed);
            }
            Ok(watcher::Event::Delete(_)) => {
                state.set(DiscoveryContent::default());
                ready.store(false, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "discovery ConfigMap watch error"),
        }
    }
    Ok(())
}

/// Writes the computed capabilities document unless an admin took the ConfigMap over.
async fn publish_discovery(
    client: &Client,
    cfg: &OperatorConfig,
    registry: &NodeRegistry,
) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &cfg.discovery.namespace);
    if let Some(existing) = api.get_opt(&cfg.discovery.config_map).await?
        && discovery::is_admin_owned(&existing)
    {
        tracing::info!("discovery ConfigMap is admin-owned; serving it as is");
        return Ok(());
    }
    let doc = discovery::capabilities(cfg, registry)?;
    let cm = discovery::discovery_configmap(cfg, &doc);
    api.patch(
        &cfg.discovery.config_map,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await?;
    Ok(())
}

async fn lead_then_run(
    // The controllers' client, and the config the lease renewal builds its own from.
    (client, kube_config): (Client, kube::Config),
    cfg: Arc<OperatorConfig>,
    identity: String,
    elector: Option<Arc<Elector>>,
    ctx: Arc<Context>,
    inputs: Inputs<impl Future<Output = ()>>,
    runs_listable: RunsHealth,
) -> anyhow::Result<()> {
    let Inputs {
        writers,
        runs: run_feed,
        workflows: wf_feed,
        tool_servers: ts_feed,
        unstarted: feeds,
    } = inputs;
    let renew = Duration::from_secs(u64::from(cfg.leader_election.renew_interval_seconds));
    // When the round that made us leader started: the fencing deadline counts from it.
    let mut renewed = tokio::time::Instant::now();
    if let Some(e) = &elector {
        loop {
            renewed = tokio::time::Instant::now();
            match e.round(k8s_openapi::jiff::Timestamp::now()).await {
                Ok(Round::Leading) => break,
                Ok(Round::Following { holder }) => {
                    tracing::info!(%holder, "standing by: another replica leads")
                }
                Err(err) => tracing::warn!(error = %err, "leader election round failed"),
            }
            tokio::time::sleep(renew).await;
        }
    }
    tracing::info!(%identity, "leading: starting controllers");
    runs_listable.leading();
    // The Run controller follows the process's Run watch (`Feed`); its store (also the REST
    // API's) routes run events (by uid) to their Run and is the reconciler's Run cache (the
    // queue order).
    // Only the changes a reconcile acts on trigger one (`controller::run_key`); the cache
    // sees every change.
    // The Runs this watch shows gone have their events purged (`controller::departed`).
    let (departed_tx, departed_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut departures = Departures::default();
    let run_controller = Controller::for_stream(
        changes(
            run_feed.subscribe().inspect(move |ev| {
                if let Ok(ev) = ev {
                    for run in departures.observe(ev) {
                        // The receiver lives as long as the controllers.
                        let _ = departed_tx.send(run);
                    }
                }
            }),
            run_key,
            {
                let ctx = ctx.clone();
                move |run: &Run| ctx.superseded.is_ours(run)
            },
            false,
        ),
        run_feed.store(),
    );
    let runs = run_controller.store();
    let slot = ctx.jetstream.clone().unwrap_or_default();
    let events = ctx.events.clone();
    let purges = purge_departed(ctx.clone(), departed_rx);
    let controllers = async {
        publish_discovery(&client, &cfg, &ctx.registry).await?;
        tokio::join!(
            run_controllers(
                client.clone(),
                ctx.clone(),
                (writers, wf_feed),
                run_controller,
                runs_listable
            ),
            run_tool_server_controller(&ctx, ts_feed),
            purges,
            crate::events::run_consumer(client.clone(), cfg.clone(), Some(runs), slot, events,),
            async {
                if let Some(feeds) = feeds {
                    feeds.await
                }
            },
        );
        anyhow::Ok(())
    };
    let timing = Timing {
        renew_interval: renew,
        renew_deadline: Duration::from_secs(u64::from(cfg.leader_election.renew_deadline_seconds)),
    };
    let keep = async {
        let Some(e) = &elector else {
            return std::future::pending::<LeaseLost>().await;
        };
        e.keep_apart(kube_config, timing, renewed).await
    };
    // Fencing: when `keep` returns, the controllers and the event consumer are dropped here
    // (cancelled at their next await), before the lease can expire for the other replicas;
    // the process then exits and Kubernetes restarts it as a candidate.
    tokio::select! {
        r = controllers => r,
        lost = keep => {
            tracing::error!(%identity, error = %lost, "stopped leading: controllers and event consumer stopped; exiting so a restart re-elects");
            Err(anyhow::Error::new(lost).context("leader election"))
        }
    }
}

/// What the leader's controllers read and follow: the writers of the caches only they use,
/// the process's Run and Workflow watches, and those watches' future when nothing runs it yet
/// (the REST API off: they start when this replica leads).
struct Inputs<F> {
    writers: CacheWriters,
    runs: Feed<Run>,
    workflows: Feed<Workflow>,
    tool_servers: Feed<ToolServer>,
    unstarted: Option<F>,
}

/// The ToolServer controller (leader only, like the others): follows the process's
/// ToolServer watch, reconciling on each new generation (its own status writes do not
/// trigger one) and on the reconciler's own schedule (a listing every few minutes).
async fn run_tool_server_controller(ctx: &Context, feed: Feed<ToolServer>) {
    let ts_ctx = Arc::new(ToolServerContext {
        client: ctx.client.clone(),
        events: ctx.events.clone(),
        metrics: ctx.metrics.clone(),
        now: ctx.now,
    });
    let changes = feed
        .subscribe()
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    Controller::for_stream(changes, feed.store())
        .shutdown_on_signal()
        .run(reconcile_tool_server, toolservers::error_policy, ts_ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "tool server reconcile");
            }
        })
        .await
}

/// `Api::all`, or the one namespace the operator is restricted to.
fn scoped<K>(client: &Client, cfg: &OperatorConfig) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    if cfg.watch_namespace.is_empty() {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), &cfg.watch_namespace)
    }
}

/// A Run's reconcile waits this long after the last change that asks for it: a worker pod
/// goes created → bound → Running within a fraction of a second, and the event consumer writes
/// a run's status at each node, so a reconcile per change would look at one transition after
/// another (7.4 reconciles per run at 200 Runs at once before). Trailing-edge, so it also
/// delays each reconcile by this much.
const RUN_DEBOUNCE: Duration = Duration::from_millis(250);

async fn run_controllers(
    client: Client,
    ctx: Arc<Context>,
    (writers, wf_feed): (CacheWriters, Feed<Workflow>),
    run_controller: Controller<Run>,
    runs_listable: RunsHealth,
) {
    let CacheWriters {
        pods: pod_writer,
        snapshots: snapshot_writer,
        service_accounts: sa_writer,
    } = writers;
    // Only the objects of this operator instance (`instanceId`), so several can share a cluster.
    let mine = || watcher::Config::default().labels(&ctx.config.instance_selector());
    // The Workflow controller follows the process's Workflow watch (`Feed`), as does the Run
    // controller below.
    let wf_ctrl = Controller::for_stream(wf_feed.subscribe().applied_objects(), wf_feed.store())
        .shutdown_on_signal()
        .run(reconcile_workflow, error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "workflow reconcile");
            }
        });
    let store = run_controller.store();
    let mapper_store = store.clone();
    // The worker pods and Workflows trigger Run reconciles through the streams that feed the
    // reconciler's caches: a reconcile never reads a cache older than what triggered it.
    let worker_pods = changes(
        reflector(
            pod_writer,
            watcher(
                scoped::<Pod>(&client, &ctx.config),
                watcher::Config::default().labels(&worker_selector()),
            )
            .modify(slim_pod),
        )
        .default_backoff(),
        pod_key,
        |_: &Pod| false,
        true,
    );
    // The Workflow feed stores each change before it passes it on.
    let workflow_changes = wf_feed.subscribe().touched_objects();
    let (queue_runs, queue_pods) = (
        store.clone(),
        ctx.caches.pods.clone().expect("the binary's pod cache"),
    );
    let limit = ctx.config.runs.max_concurrent_per_namespace as usize;
    let run_ctrl = run_controller
        // A worker pod's change concerns its Run; a pod that frees its slot also wakes the
        // next queued runs of its namespace (FIFO by creation time).
        .watches_stream(worker_pods, move |pod: Pod| {
            pod_triggers(&queue_runs, &queue_pods, limit, &pod)
        })
        // A parent Run waiting for its child (`core.subWorkflow`) proceeds when the child
        // changes (the child's owner reference names the parent).
        .owns(scoped::<Run>(&client, &ctx.config), mine())
        // A Run waiting for its Workflow proceeds as soon as the Workflow appears or turns Ready.
        .watches_stream(workflow_changes, move |wf: Workflow| {
            let ns = wf.namespace();
            let name = wf.name_any();
            let id = wf.spec.id.clone();
            mapper_store
                .state()
                .into_iter()
                .filter(|r| r.namespace() == ns)
                .filter(|r| {
                    r.spec.workflow_ref.name.as_deref() == Some(name.as_str())
                        || r.spec.workflow_ref.id.as_deref() == Some(id.as_str())
                })
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect::<Vec<_>>()
        })
        .with_config(
            controller::Config::default()
                .debounce(RUN_DEBOUNCE)
                .concurrency(ctx.config.runs.reconcile_concurrency),
        )
        .shutdown_on_signal()
        .run(reconcile_run, error_policy, ctx.clone())
        .for_each(move |r| {
            let health = runs_listable.clone();
            async move {
                match r {
                    Ok(_) => {}
                    // A trigger's list/watch fails (the worker pods'; the Runs' and
                    // Workflows' report through their `Feed`).
                    Err(kube::runtime::controller::Error::QueueError(e)) => health.failed(&e),
                    Err(e) => tracing::debug!(error = %e, "run reconcile"),
                }
            }
        });
    // Snapshot ConfigMaps (the worker pods' labels; metadata only, see `Caches::snapshots`)
    // and the worker ServiceAccounts: read by every worker start, so cached instead of fetched.
    let snapshots = reflector(
        snapshot_writer,
        watcher(
            scoped::<PartialObjectMeta<ConfigMap>>(&client, &ctx.config),
            watcher::Config::default().labels(&worker_selector()),
        )
        .modify(slim),
    )
    .default_backoff()
    .for_each(|_| async {});
    let service_accounts = reflector(
        sa_writer,
        watcher(
            scoped::<ServiceAccount>(&client, &ctx.config),
            watcher::Config::default().fields(&format!(
                "metadata.name={}",
                ctx.config.worker.service_account_name
            )),
        )
        .modify(slim),
    )
    .default_backoff()
    .for_each(|_| async {});
    let gauges = async move {
        loop {
            tokio::time::sleep(Duration::from_secs(15)).await;
            let mut counts: Vec<(RunPhase, i64)> = Vec::new();
            for r in store.state() {
                let p = r.status.as_ref().and_then(|s| s.phase).unwrap_or_default();
                match counts.iter_mut().find(|(q, _)| *q == p) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((p, 1)),
                }
            }
            ctx.metrics.set_runs_by_phase(&counts);
        }
    };
    tokio::join!(wf_ctrl, run_ctrl, gauges, snapshots, service_accounts);
}

/// How long after the last failed Run list/watch `/readyz` stays 503: longer than the
/// watcher's retry backoff (at most 30 s), so a list failing at every retry keeps it 503.
const RUNS_FAILURE_HOLD: Duration = Duration::from_secs(60);

/// Whether the leader's Run list/watch works: `/readyz` is 503 (naming the error) while it
/// fails, so an operator that cannot see its Runs is not reported healthy.
#[derive(Clone, Default)]
struct RunsHealth {
    last_failure: Arc<std::sync::Mutex<Option<(std::time::Instant, String)>>>,
    /// Set once this replica leads: before, a failing watch only left the REST API's view
    /// behind (as it did when the API had watches of its own).
    leading: Arc<AtomicBool>,
}

impl RunsHealth {
    fn leading(&self) {
        self.leading.store(true, Ordering::Relaxed);
    }

    /// A failed list or watch of the Runs (or of the Workflows, which trigger Run
    /// reconciles too): logged, and readiness is false until it recovers.
    fn failed(&self, e: &dyn std::fmt::Display) {
        let why = openwop_protocol::text::truncate(&e.to_string(), 300);
        tracing::warn!(error = %why, "cannot list or watch Runs; readiness is false until it recovers");
        if let Ok(mut s) = self.last_failure.lock() {
            *s = Some((std::time::Instant::now(), why));
        }
    }

    /// What the process's Run and Workflow watches (`Feed`) do with an error: [`Self::failed`]
    /// once this replica leads.
    fn on_watch_error(&self) -> impl Fn(&watcher::Error) + Send + 'static {
        let health = self.clone();
        move |e| {
            if health.leading.load(Ordering::Relaxed) {
                health.failed(e);
            } else {
                tracing::debug!(error = %e, "REST API watch");
            }
        }
    }

    /// The last error, while it is recent.
    fn failing(&self) -> Option<String> {
        let s = self.last_failure.lock().ok()?;
        s.as_ref()
            .filter(|(at, _)| at.elapsed() < RUNS_FAILURE_HOLD)
            .map(|(_, why)| why.clone())
    }
}
