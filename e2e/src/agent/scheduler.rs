//! The scheduler part: binds every unscheduled pod to this (only) node.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use kube::api::{ListParams, PostParams};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::ctx::Ctx;

const RESYNC: Duration = Duration::from_secs(5);
/// Bindings in flight at once. One at a time (three API round trips each) was the bottleneck
/// of 200 pods created at once under load; the API server takes many more.
const BIND_CONCURRENCY: usize = 16;

/// Binds pods concurrently, each pod at most once at a time.
#[derive(Clone)]
struct Binder {
    ctx: Arc<Ctx>,
    slots: Arc<tokio::sync::Semaphore>,
    in_flight: Arc<Mutex<HashSet<String>>>,
}

impl Binder {
    fn spawn(&self, pod: Pod) {
        let uid = pod.uid().unwrap_or_default();
        if !self.in_flight.lock().unwrap().insert(uid.clone()) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            if let Ok(_slot) = this.slots.acquire().await {
                bind(&this.ctx, &pod).await;
            }
            this.in_flight.lock().unwrap().remove(&uid);
        });
    }
}

fn schedulable(pod: &Pod) -> bool {
    let Some(spec) = &pod.spec else { return false };
    spec.node_name.is_none()
        && pod.metadata.deletion_timestamp.is_none()
        && matches!(
            spec.scheduler_name.as_deref(),
            None | Some("default-scheduler")
        )
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded") | Some("Failed")
        )
}

/// The first nodeSelector entry the node's labels do not satisfy.
fn selector_mismatch(pod: &Pod, node: &Node) -> Option<String> {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    pod.spec
        .as_ref()?
        .node_selector
        .as_ref()?
        .iter()
        .find(|(k, v)| labels.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}={v}"))
}

async fn bind(ctx: &Ctx, pod: &Pod) {
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let node_name = &ctx.opts.node_name;
    let reference = pod.object_ref(&());
    if let Ok(node) = Api::<Node>::all(ctx.client.clone()).get(node_name).await
        && let Some(sel) = selector_mismatch(pod, &node)
    {
        let note =
            format!("0/1 nodes are available: node {node_name} does not match nodeSelector {sel}");
        ctx.event(&reference, EventType::Warning, "FailedScheduling", note)
            .await;
        return;
    }
    let mut binding = Binding {
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node_name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    binding.metadata.name = Some(name.clone());
    binding.metadata.namespace = Some(ns.clone());
    binding.metadata.uid = pod.uid();
    let api: Api<Pod> = Api::namespaced(ctx.scheduler_client.clone(), &ns);
    match api
        .create_subresource::<_, serde_json::Value>(
            "binding",
            &name,
            &PostParams::default(),
            &binding,
        )
        .await
    {
        Ok(_) => {
            tracing::info!(pod = %format!("{ns}/{name}"), node = %node_name, "pod bound");
            let note = format!("Successfully assigned {ns}/{name} to {node_name}");
            ctx.event(&reference, EventType::Normal, "Scheduled", note)
                .await;
        }
        // Already bound or gone: nothing to do.
        Err(kube::Error::Api(e)) if matches!(e.code, 404 | 409) => {}
        Err(err) => {
            tracing::warn!(pod = %format!("{ns}/{name}"), %err, "binding failed; will retry")
        }
    }
}

pub async fn run(ctx: Arc<Ctx>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::all(ctx.scheduler_client.clone());
    let fields = "spec.nodeName=";
    let mut stream = watcher(api.clone(), watcher::Config::default().fields(fields)).boxed();
    let mut resync = tokio::time::interval(RESYNC);
    let binder = Binder {
        ctx: ctx.clone(),
        slots: Arc::new(tokio::sync::Semaphore::new(BIND_CONCURRENCY)),
        in_flight: Arc::default(),
    };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            ev = stream.next() => match ev {
                Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                    if schedulable(&pod) {
                        binder.spawn(pod);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(err)) => {
                    tracing::warn!(%err, "unscheduled-pod watch error; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                None => return Ok(()),
            },
            // Retries pods whose binding failed transiently.
            _ = resync.tick() => {
                match api.list(&ListParams::default().fields(fields)).await {
                    Ok(list) => {
                        for pod in list.items.into_iter().filter(schedulable) {
                            binder.spawn(pod);
                        }
                    }
                    Err(err) => tracing::warn!(%err, "listing unscheduled pods failed"),
                }
            }
        }
    }
}
