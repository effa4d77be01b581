//! Node registration and heartbeats (Lease renewals and Ready status).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::ctx::Ctx;

const LEASE_SECONDS: i32 = 40;
const LEASE_RENEW: Duration = Duration::from_secs(10);
/// Ready status is re-posted this often even when nothing changed, like the kubelet.
const STATUS_EVERY: u32 = 6;

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn memory_kib() -> u64 {
    read_trimmed("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn node_status(ctx: &Ctx) -> serde_json::Value {
    let now = Timestamp::now().to_string();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let resources = json!({
        "cpu": cpus.to_string(),
        "memory": format!("{}Ki", memory_kib()),
        "pods": "110",
        "ephemeral-storage": "100Gi",
    });
    let cond = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": type_, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        })
    };
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", "True", "KubeletReady", "openwop node agent is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": ctx.opts.node_name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": ctx.opts.kubelet_port}},
        "nodeInfo": {
            "machineID": read_trimmed("/etc/machine-id"),
            "systemUUID": read_trimmed("/etc/machine-id"),
            "bootID": read_trimmed("/proc/sys/kernel/random/boot_id"),
            "kernelVersion": read_trimmed("/proc/sys/kernel/osrelease"),
            "osImage": "openwop mini-cluster (processes)",
            "containerRuntimeVersion": format!("openwop-process://{}", env!("CARGO_PKG_VERSION")),
            "kubeletVersion": "v1.33.13",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": arch(),
        },
    })
}

/// Creates the Node (if absent) and posts a Ready status.
pub async fn register(ctx: &Arc<Ctx>) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let name = &ctx.opts.node_name;
    if nodes.get_opt(name).await?.is_none() {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": arch(),
                    "openwop.dev/process-node": "true",
                },
            },
        }))?;
        nodes
            .create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("creating node {name}"))?;
    }
    post_status(ctx).await?;
    renew_lease(ctx).await?;
    Ok(())
}

async fn post_status(ctx: &Ctx) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let patch = json!({ "status": node_status(ctx) });
    nodes
        .patch_status(
            &ctx.opts.node_name,
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
        .with_context(|| format!("updating the status of node {}", ctx.opts.node_name))?;
    Ok(())
}

async fn renew_lease(ctx: &Ctx) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), "kube-node-lease");
    let name = &ctx.opts.node_name;
    let now = MicroTime(Timestamp::now());
    match leases.get_opt(name).await? {
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.holder_identity = Some(name.clone());
            spec.lease_duration_seconds = Some(LEASE_SECONDS);
            spec.renew_time = Some(now);
            leases
                .replace(name, &PostParams::default(), &lease)
                .await
                .with_context(|| format!("renewing lease {name}"))?;
        }
        None => {
            let node = Api::<Node>::all(ctx.client.clone()).get(name).await?;
            let mut lease = Lease::default();
            lease.metadata.name = Some(name.clone());
            lease.metadata.namespace = Some("kube-node-lease".into());
            // Like the kubelet: the lease goes away with its Node.
            lease.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: name.clone(),
                uid: node.uid().unwrap_or_default(),
                ..Default::default()
            }]);
            lease.spec = Some(LeaseSpec {
                holder_identity: Some(name.clone()),
                lease_duration_seconds: Some(LEASE_SECONDS),
                renew_time: Some(now),
                ..Default::default()
            });
            leases
                .create(&PostParams::default(), &lease)
                .await
                .with_context(|| format!("creating lease {name}"))?;
        }
    }
    Ok(())
}

/// Renews the Lease every 10 s and re-posts Ready every minute until shutdown.
pub async fn heartbeat(ctx: Arc<Ctx>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let mut tick = 0u32;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(LEASE_RENEW) => {}
        }
        tick += 1;
        if let Err(err) = renew_lease(&ctx).await {
            tracing::warn!(error = %format!("{err:#}"), "lease renewal failed");
        }
        if tick.is_multiple_of(STATUS_EVERY) {
            // A deleted Node (kubectl delete node) is re-created, as a kubelet would.
            let r = match post_status(&ctx).await {
                Err(_) => register(&ctx).await,
                ok => ok,
            };
            if let Err(err) = r {
                tracing::warn!(error = %format!("{err:#}"), "node status update failed");
            }
        }
    }
}
