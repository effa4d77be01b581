//! Issues 7 and 27, measured on the mini-cluster: N Runs applied at once (N = 200 and 1,000;
//! `OPENWOP_SCALE_RUNS=200` for one size), each beside a baseline of N bare pods created
//! directly through the API in the same run, before the Runs and again after them. Prints the
//! time until all are done and its ratio to the bare pods' (their mean, and each leg's),
//! p50/p95 from apply to the worker pod created and to the first event (Runs: the first NATS
//! event's `timestamp`; pods: the first watch observation of a phase past Pending), reconciles
//! and API server requests per run (by verb and resource) beside the bare pods' per pod, the
//! operator's CPU seconds and peak RSS, and a profile: when each stage of a
//! run was reached (worker pod created, bound, started, first event, pod done, Run completed)
//! and CPU seconds per component (the workers' from the node agent's reaped children).
//! `OPENWOP_SCALE_JOBS=1` adds N `batch/v1` Jobs per size (same pod, same run): the built-in
//! Job controller's ratio to the bare pods on the same host, printed beside the Runs'.
//! The limit leg ([`limit`]): 1,000 Runs under `runs.maxConcurrentPerNamespace` 50
//! (`OPENWOP_SCALE_LIMIT_RUNS`): the sampled pods holding a slot never exceed 50, and the
//! queue drains in creation order.
//!
//! Ignored by default (minutes of wall time, the whole host busy):
//! `cargo test -p openwop-e2e --test scale -- --ignored --nocapture --test-threads=1`.
//! `OPENWOP_E2E_PROFILE=release` (what `make bench` uses) runs the operator and worker built
//! with `cargo build --release`, through the `:release` image tags `e2e/node-agent.yaml` maps
//! to `$CARGO_TARGET_DIR/release`; the default is the debug builds the journeys use. The
//! release is installed as `openwop-scale` in `openwop-scale-system` with its own `instanceId`
//! and port, so it never disturbs the journeys' `openwop`, and uninstalled at the end.

mod common;
// Issue #24: delay wake lateness on the same install.
#[path = "scale/delay.rs"]
mod delay;
// Issue #27: the exact limit and the queue order under load.
#[path = "scale/limit.rs"]
mod limit;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use common::*;
use futures::{FutureExt, StreamExt, TryFutureExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use openwop_e2e::{Cluster, ClusterOptions};
use serde_json::{Value, json};

/// The batch sizes measured: `OPENWOP_SCALE_RUNS` (comma-separated), default 200 and 1,000.
fn sizes() -> Vec<usize> {
    let v = std::env::var("OPENWOP_SCALE_RUNS").unwrap_or_else(|_| "200,1000".into());
    v.split(',')
        .map(|n| {
            n.trim()
                .parse()
                .unwrap_or_else(|_| panic!("OPENWOP_SCALE_RUNS: {n:?} is not a number"))
        })
        .collect()
}
/// `OPENWOP_SCALE_JOBS=1`: a third leg per size, N `batch/v1` Jobs, to compare the Runs with
/// the built-in Job controller on the same host (its pace depends on kube-controller-manager's
/// client QPS, which the leg prints).
fn jobs_leg() -> bool {
    std::env::var("OPENWOP_SCALE_JOBS").is_ok_and(|v| v == "1")
}
/// Not the journeys' `openwop` / `openwop-system`: both may be installed at once.
const RELEASE: &str = "openwop-scale";
const RELEASE_NS: &str = "openwop-scale-system";
const INSTANCE: &str = "scale";
/// The operator's HTTP port (pods share the host network; the journeys' operator has 8080),
/// shifted by `OPENWOP_PORT_OFFSET` like every port of a second mini-cluster beside the first.
fn scale_operator_port() -> u16 {
    18191 + ClusterOptions::default().port_offset
}
const LABEL_INSTANCE: &str = "openwop.dev/instance";

/// `debug` (default) or `release`: which cargo profile's operator and worker run.
fn build_profile() -> String {
    let p = std::env::var("OPENWOP_E2E_PROFILE").unwrap_or_else(|_| "debug".into());
    assert!(
        p == "debug" || p == "release",
        "OPENWOP_E2E_PROFILE must be debug or release, not {p:?}"
    );
    p
}

/// The image tag e2e/node-agent.yaml maps to that profile's binaries.
fn image_tag() -> &'static str {
    if build_profile() == "release" {
        "release"
    } else {
        "dev"
    }
}

fn run_cmd(c: &Cluster, program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .env("KUBECONFIG", &c.kubeconfig)
        .env("OPENWOP_NATS_URL", &c.nats_url)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()))
}

/// The release with the journeys' mini-cluster values, `limit` Runs allowed at once per
/// namespace.
fn install(c: &Cluster, limit: usize) {
    let chart = repo().join("charts/openwop");
    let values = repo().join("e2e/helm/mini-cluster-values.yaml");
    let mut sets = vec![
        format!("nats.external.url={}", c.nats_url),
        "providers[0].name=mock,providers[0].vendor=mock".into(),
        format!("runs.maxConcurrentPerNamespace={limit}"),
        // The chart's default (the mini-cluster values shorten it to 30 s for the journeys):
        // the baseline's bare pods are never deleted, so a worker pod's TTL deletion is not
        // counted against the Runs either (at 1,000 Runs the 30 s TTL fell inside the
        // measurement: 0.77 `DELETE pods` per run).
        format!("runs.podTtlSecondsAfterFinished={}", chart_pod_ttl()),
        format!("operator.instanceId={INSTANCE}"),
        format!("operator.port={}", scale_operator_port()),
        format!("operator.image.tag={}", image_tag()),
        format!("worker.image.tag={}", image_tag()),
        // Info-level logs: the journeys' debug level would time the logging.
        // `OPENWOP_SCALE_OPERATOR_LOG` (a tracing filter) to look closer.
        format!(
            "operator.logLevel={}",
            env_or("OPENWOP_SCALE_OPERATOR_LOG", "info,kube=warn").replace(',', "\\,")
        ),
    ];
    // `OPENWOP_SCALE_RECONCILE_CONCURRENCY` measures another `runs.reconcileConcurrency` than
    // the chart's.
    if let Ok(n) = std::env::var("OPENWOP_SCALE_RECONCILE_CONCURRENCY") {
        sets.push(format!("runs.reconcileConcurrency={n}"));
    }
    let mut args = vec![
        "upgrade".to_string(),
        "--install".into(),
        RELEASE.into(),
        chart.display().to_string(),
        "-n".into(),
        RELEASE_NS.into(),
        "--create-namespace".into(),
        "-f".into(),
        values.display().to_string(),
        "--wait".into(),
        "--timeout".into(),
        "3m".into(),
    ];
    for s in sets {
        args.push("--set".into());
        args.push(s);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(run_cmd(c, &helm_bin(), &args), "helm upgrade --install");
}

/// `runs.podTtlSecondsAfterFinished` of the chart's own values.
fn chart_pod_ttl() -> u64 {
    let path = repo().join("charts/openwop/values.yaml");
    let text = std::fs::read_to_string(&path).expect("the chart's values.yaml");
    let values: serde_yaml::Value = serde_yaml::from_str(&text).expect("values.yaml is YAML");
    values["runs"]["podTtlSecondsAfterFinished"]
        .as_u64()
        .unwrap_or_else(|| panic!("{}: no runs.podTtlSecondsAfterFinished", path.display()))
}

fn uninstall(c: &Cluster) {
    let args = ["uninstall", RELEASE, "-n", RELEASE_NS, "--wait"];
    ok(run_cmd(c, &helm_bin(), &args), "helm uninstall");
}

/// The operator pod's process (the node agent sets HOSTNAME to the pod name).
async fn operator_pid(c: &Cluster) -> i32 {
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), RELEASE_NS);
    let lp = ListParams::default().labels("app.kubernetes.io/component=operator");
    wait_for(Duration::from_secs(90), "the operator process", || {
        let pods = pods.clone();
        let lp = lp.clone();
        async move {
            let names: Vec<String> = pods
                .list(&lp)
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.metadata.name)
                .collect();
            std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
                let pid: i32 = e.file_name().to_str()?.parse().ok()?;
                let exe = std::fs::read_link(e.path().join("exe")).ok()?;
                // A rebuilt binary shows as "<path> (deleted)".
                if !exe.to_string_lossy().contains("/openwop-operator") {
                    return None;
                }
                let env = std::fs::read(e.path().join("environ")).ok()?;
                env.split(|b| *b == 0)
                    .any(|v| {
                        names
                            .iter()
                            .any(|n| v == format!("HOSTNAME={n}").as_bytes())
                    })
                    .then_some(pid)
            })
        }
    })
    .await
}

/// `VmRSS` or `VmHWM` of `pid` in KiB.
fn status_kib(pid: i32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary(what: &str, n: usize, mut lat: Vec<f64>) -> (f64, f64) {
    assert_eq!(lat.len(), n, "{what}: {} of {n} measured", lat.len());
    lat.sort_by(f64::total_cmp);
    (percentile(&lat, 50.0), percentile(&lat, 95.0))
}

fn since(t0: SystemTime) -> f64 {
    SystemTime::now()
        .duration_since(t0)
        .unwrap_or_default()
        .as_secs_f64()
}

// ---------------------------------------------------------------- profile

/// CPU seconds (own, reaped children) of `pid` from /proc/<pid>/stat.
fn cpu_seconds(pid: i32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command: state is field 3; utime 14, stime 15,
    // cutime 16, cstime 17.
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let f = |i: usize| rest.get(i - 3)?.parse::<f64>().ok();
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(((f(14)? + f(15)?) / tick, (f(16)? + f(17)?) / tick))
}

/// The mini-cluster components, by the name of their executable.
const COMPONENTS: [&str; 6] = [
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "nats-server",
    "openwop-node-agent",
    "openwop-operator",
];

/// CPU seconds per component (summed over processes), plus `workers (agent children)`.
fn cpu_snapshot(operator: Option<i32>) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(exe) = std::fs::read_link(e.path().join("exe")) else {
            continue;
        };
        let exe = exe.to_string_lossy().into_owned();
        let base = exe
            .trim_end_matches(" (deleted)")
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let Some(name) = COMPONENTS.iter().find(|c| **c == base) else {
            continue;
        };
        // Only the measured operator, not the journeys' one.
        if *name == "openwop-operator" && Some(pid) != operator {
            continue;
        }
        let Some((own, children)) = cpu_seconds(pid) else {
            continue;
        };
        *out.entry(name.to_string()).or_default() += own;
        if *name == "openwop-node-agent" {
            *out.entry("pods (agent's reaped children)".into())
                .or_default() += children;
        }
    }
    out
}

/// The API server's requests by verb and resource[/subresource]: how many
/// (`apiserver_request_total`) and the seconds it spent serving them
/// (`apiserver_request_duration_seconds_sum`, which leaves out watches).
#[derive(Default)]
struct ApiCounters {
    requests: BTreeMap<String, f64>,
    seconds: BTreeMap<String, f64>,
}

async fn apiserver_requests(client: &Client) -> ApiCounters {
    let req = http::Request::get("/metrics").body(vec![]).unwrap();
    let text = client.request_text(req).await.expect("apiserver /metrics");
    let mut out = ApiCounters::default();
    for line in text.lines() {
        let (map, rest) = if let Some(r) = line.strip_prefix("apiserver_request_total{") {
            (&mut out.requests, r)
        } else if let Some(r) = line.strip_prefix("apiserver_request_duration_seconds_sum{") {
            (&mut out.seconds, r)
        } else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=\""))?.strip_suffix('"'))
                .unwrap_or_default()
                .to_string()
        };
        let mut key = format!("{} {}", label("verb"), label("resource"));
        let sub = label("subresource");
        if !sub.is_empty() {
            key = format!("{key}/{sub}");
        }
        *map.entry(key).or_default() += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    out
}

/// The operator's own Prometheus text (`/metrics` on its port), without histogram buckets.
fn operator_metrics() -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", scale_operator_port())) else {
        return out;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    for line in body.lines() {
        if line.starts_with("openwop_operator_")
            && !line.contains("_bucket{")
            && let Some((k, v)) = line.rsplit_once(' ')
            && let Ok(v) = v.parse::<f64>()
        {
            out.insert(k.to_string(), v);
        }
    }
    out
}

fn delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> Vec<(String, f64)> {
    let mut d: Vec<(String, f64)> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    d.sort_by(|a, b| b.1.total_cmp(&a.1));
    d
}

/// Counters before a measurement; `report` prints what changed since.
struct Usage {
    cpu: BTreeMap<String, f64>,
    /// The measured operator's own CPU seconds.
    operator_cpu: f64,
    api: ApiCounters,
    operator: BTreeMap<String, f64>,
    operator_pid: Option<i32>,
}

impl Usage {
    async fn start(client: &Client, operator_pid: Option<i32>) -> Self {
        Self {
            cpu: cpu_snapshot(operator_pid),
            operator_cpu: operator_pid
                .and_then(cpu_seconds)
                .map_or(0.0, |(own, _)| own),
            api: apiserver_requests(client).await,
            operator: operator_metrics(),
            operator_pid,
        }
    }

    /// Prints what changed since `start` for `n` items; returns the API requests and the Run
    /// reconciles made meanwhile.
    async fn report(&self, client: &Client, what: &str, n: usize, wall: f64) -> (f64, f64) {
        let per = |v: f64| v / n as f64;
        let cpu = delta(&self.cpu, &cpu_snapshot(self.operator_pid));
        let total: f64 = cpu.iter().map(|(_, v)| v).sum();
        let cpu: Vec<String> = cpu
            .iter()
            .map(|(k, v)| format!("{k} {v:.1}s ({:.2}s/item)", per(*v)))
            .collect();
        println!(
            "profile {what}: CPU {total:.1}s over {wall:.1}s wall ({:.0}% of 2 cores): {}",
            100.0 * total / (2.0 * wall),
            cpu.join(", ")
        );
        let now = apiserver_requests(client).await;
        let api = delta(&self.api.requests, &now.requests);
        let requests: f64 = api.iter().map(|(_, v)| v).sum();
        let top: Vec<String> = api
            .iter()
            .take(16)
            .map(|(k, v)| format!("{k} {v:.0} ({:.2}/item)", per(*v)))
            .collect();
        println!(
            "profile {what}: API requests {requests:.0} ({:.1}/item; all clients): {}",
            per(requests),
            top.join(", ")
        );
        // Where the API server's time went, and how long each kind of request took on average
        // (server side: a write's latency under the load, not the client's queueing).
        let seconds = delta(&self.api.seconds, &now.seconds);
        let latency: Vec<String> = seconds
            .iter()
            .filter(|(k, _)| !k.starts_with("WATCH "))
            .take(12)
            .filter_map(|(k, s)| {
                let count = api.iter().find(|(key, _)| key == k)?.1;
                Some(format!("{k} {s:.1}s, {:.0} ms each", 1000.0 * s / count))
            })
            .collect();
        println!(
            "profile {what}: API server time serving requests (no watches): {}",
            latency.join(", ")
        );
        let mut reconciles = 0.0;
        if self.operator_pid.is_some() {
            let ops = delta(&self.operator, &operator_metrics());
            reconciles = ops
                .iter()
                .find(|(k, _)| k == "openwop_operator_reconciles_total{controller=\"run\"}")
                .map_or(0.0, |(_, v)| *v);
            let ops: Vec<String> = ops.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
            println!("profile {what}: operator metrics: {}", ops.join(", "));
        }
        (requests, reconciles)
    }
}

/// When each Run's stages were first observed, in seconds after the creates started.
#[derive(Default)]
struct Timeline {
    pod_created: BTreeMap<String, f64>,
    pod_bound: BTreeMap<String, f64>,
    pod_started: BTreeMap<String, f64>,
    pod_done: BTreeMap<String, f64>,
    run_completed: BTreeMap<String, f64>,
    /// `name: error` of every Run seen failed.
    run_failed: Vec<String>,
}

fn owner_run(p: &Pod) -> Option<String> {
    p.owner_references()
        .iter()
        .find(|o| o.kind == "Run")
        .map(|o| o.name.clone())
}

fn watch_timeline(
    client: &Client,
    ns: &str,
    runs: Api<DynamicObject>,
    t0: SystemTime,
) -> (Arc<Mutex<Timeline>>, Vec<tokio::task::JoinHandle<()>>) {
    let tl: Arc<Mutex<Timeline>> = Arc::default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod_task = {
        let tl = tl.clone();
        tokio::spawn(async move {
            let mut w = watcher(pods, watcher::Config::default()).boxed();
            while let Some(ev) = w.next().await {
                let (Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p))) = ev else {
                    continue;
                };
                let Some(run) = owner_run(&p) else { continue };
                let now = since(t0);
                let mut tl = tl.lock().unwrap();
                tl.pod_created.entry(run.clone()).or_insert(now);
                if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                    tl.pod_bound.entry(run.clone()).or_insert(now);
                }
                let ph = phase(&p);
                if matches!(ph.as_deref(), Some("Running" | "Succeeded" | "Failed")) {
                    tl.pod_started.entry(run.clone()).or_insert(now);
                }
                if matches!(ph.as_deref(), Some("Succeeded" | "Failed")) {
                    tl.pod_done.entry(run).or_insert(now);
                }
            }
        })
    };
    let run_task = {
        let tl = tl.clone();
        tokio::spawn(async move {
            let mut w = watcher(runs, watcher::Config::default()).boxed();
            while let Some(ev) = w.next().await {
                let (Ok(watcher::Event::Apply(r)) | Ok(watcher::Event::InitApply(r))) = ev else {
                    continue;
                };
                let now = since(t0);
                let mut tl = tl.lock().unwrap();
                match r.data["status"]["phase"].as_str() {
                    Some("completed") => {
                        tl.run_completed.entry(r.name_any()).or_insert(now);
                    }
                    Some("failed") => {
                        let e = format!("{}: {}", r.name_any(), r.data["status"]["error"]);
                        tl.run_failed.push(e);
                    }
                    _ => {}
                }
            }
        })
    };
    (tl, vec![pod_task, run_task])
}

fn p50_p95(values: impl Iterator<Item = f64>) -> String {
    let mut v: Vec<f64> = values.collect();
    if v.is_empty() {
        return "n/a".into();
    }
    v.sort_by(f64::total_cmp);
    format!(
        "p50 {:.2} p95 {:.2} max {:.2} (n={})",
        percentile(&v, 50.0),
        percentile(&v, 95.0),
        v[v.len() - 1],
        v.len()
    )
}

fn print_timeline(tl: &Timeline, first_event: &BTreeMap<String, f64>) {
    let stages: [(&str, &BTreeMap<String, f64>); 6] = [
        ("worker pod created", &tl.pod_created),
        ("pod bound", &tl.pod_bound),
        ("pod Running", &tl.pod_started),
        ("first event", first_event),
        ("pod finished", &tl.pod_done),
        ("Run completed", &tl.run_completed),
    ];
    for (name, m) in stages {
        println!(
            "profile runs: apply→{name}: {}",
            p50_p95(m.values().copied())
        );
    }
    for w in stages.windows(2) {
        let ((a, ma), (b, mb)) = (w[0], w[1]);
        let d = mb.iter().filter_map(|(k, vb)| Some(vb - ma.get(k)?));
        println!("profile runs: {a}→{b}: {}", p50_p95(d));
    }
}

/// Waits until Workflow `name` is `Ready`.
async fn wait_workflow_ready(wfs: &Api<DynamicObject>, name: &str) {
    wait_for(
        Duration::from_secs(60),
        &format!("workflow {name} Ready"),
        || {
            let wfs = wfs.clone();
            async move {
                let wf = wfs.get(name).await.ok()?;
                wf.data["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    .then_some(())
            }
        },
    )
    .await;
}

/// A fresh namespace with the `hello` example Workflow of this instance, Ready; its Run API.
async fn hello_namespace(c: &Cluster, prefix: &str) -> (String, Api<DynamicObject>) {
    let ns = namespace(&c.client, prefix).await;
    let workflow = repo().join("examples/01-hello-workflow.yaml");
    ok(
        run_cmd(
            c,
            Path::new("kubectl"),
            &["apply", "-n", &ns, "-f", workflow.to_str().unwrap()],
        ),
        "apply hello workflow",
    );
    let instance = format!("{LABEL_INSTANCE}={INSTANCE}");
    ok(
        run_cmd(
            c,
            Path::new("kubectl"),
            &["label", "-n", &ns, "workflow", "hello", &instance],
        ),
        "label hello workflow",
    );
    let gvk = GroupVersionKind::gvk("openwop.dev", "v1alpha1", "Run");
    let runs: Api<DynamicObject> =
        Api::namespaced_with(c.client.clone(), &ns, &ApiResource::from_gvk(&gvk));
    let wfs: Api<DynamicObject> = Api::namespaced_with(
        c.client.clone(),
        &ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "openwop.dev",
            "v1alpha1",
            "Workflow",
        )),
    );
    wait_workflow_ready(&wfs, "hello").await;
    (ns, runs)
}

/// Run `r{i:04}` of the `hello` Workflow.
fn hello_run(i: usize) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": format!("r{i:04}"), "labels": {LABEL_INSTANCE: INSTANCE}},
        "spec": {"workflowRef": {"name": "hello"}, "inputs": {"greeting": "hi"}},
    }))
    .unwrap()
}

/// What a measurement of N items found, for the ratios.
struct Measured {
    /// Seconds until all were done.
    done: f64,
    /// API server requests meanwhile (all clients).
    requests: f64,
    /// The operator restarted meanwhile (its own figures are partial).
    restarted: bool,
}

async fn runs_at_once(c: &Cluster, n: usize) -> Measured {
    let (ns, runs) = hello_namespace(c, "scale-runs").await;
    let pid = operator_pid(c).await;
    let rss_before = status_kib(pid, "VmRSS").unwrap_or(0);
    let peak = Arc::new(Mutex::new(rss_before));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            while let Some(kib) = status_kib(pid, "VmRSS") {
                {
                    let mut p = peak.lock().unwrap();
                    *p = (*p).max(kib);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let docs: Vec<DynamicObject> = (0..n).map(hello_run).collect();
    let usage = Usage::start(&c.client, Some(pid)).await;
    let t0 = SystemTime::now();
    let (timeline, watches) = watch_timeline(&c.client, &ns, runs.clone(), t0);
    let pp = PostParams::default();
    let start = Instant::now();
    let created = futures::future::join_all(docs.iter().map(|d| runs.create(&pp, d))).await;
    for r in created {
        r.expect("create Run");
    }
    let applied = start.elapsed();
    // Watched, not listed: polling 200 Runs every 250 ms loaded the API server it measures.
    let all_done = wait_for(Duration::from_secs(1800), "all Runs completed", || {
        let tl = timeline.clone();
        async move {
            let tl = tl.lock().unwrap();
            assert!(tl.run_failed.is_empty(), "failed runs: {:?}", tl.run_failed);
            (tl.run_completed.len() == n).then(|| {
                Duration::from_secs_f64(tl.run_completed.values().copied().fold(0.0, f64::max))
            })
        }
    })
    .await;
    sampler.abort();
    let (requests, reconciles) = usage
        .report(&c.client, "runs", n, all_done.as_secs_f64())
        .await;
    let operator_cpu = cpu_seconds(pid).map_or(0.0, |(own, _)| own) - usage.operator_cpu;

    let peak_rss = *peak.lock().unwrap();
    let hwm = status_kib(pid, "VmHWM").unwrap_or(0);
    // A restarted operator (e.g. its leader lease lapsed) resets its counters and its RSS.
    let restarted = operator_pid(c).await != pid;
    if restarted {
        println!(
            "scale: WARNING the operator restarted during the measurement: its reconciles, CPU and RSS below are partial"
        );
    }
    for w in watches {
        w.abort();
    }

    // First event of each run, from its stream.
    let t0_ts = Timestamp::try_from(t0).unwrap();
    let cli = target_bin("debug", "kubectl-openwop");
    let mut firsts = BTreeMap::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(8) {
        let handles: Vec<_> = chunk
            .iter()
            .map(|i| {
                let (c, ns, cli) = (c.clone(), ns.clone(), cli.clone());
                let name = format!("r{i:04}");
                tokio::task::spawn_blocking(move || {
                    let out = ok(
                        run_cmd(
                            &c,
                            &cli,
                            &["events", &name, "-n", &ns, "--json", "--no-reasoning"],
                        ),
                        "kubectl openwop events",
                    );
                    let first: Value =
                        serde_json::from_str(out.lines().next().expect("an event")).unwrap();
                    let m = &first["message"];
                    assert_eq!(m["sequence"], 0, "{m}");
                    let ts = m["timestamp"]
                        .as_str()
                        .unwrap()
                        .parse::<Timestamp>()
                        .unwrap();
                    (name, ts)
                })
            })
            .collect();
        for h in handles {
            let (name, ts) = h.await.unwrap();
            firsts.insert(name, ts.duration_since(t0_ts).as_secs_f64());
        }
    }
    let created = p50_p95(timeline.lock().unwrap().pod_created.values().copied());
    print_timeline(&timeline.lock().unwrap(), &firsts);
    let (p50, p95) = summary("runs", n, firsts.into_values().collect());
    println!(
        "scale: {n} Runs ({} operator and worker): created in {:.2} s; all completed after {:.2} s; apply→worker pod created {created}; apply→first event p50 {:.2} s, p95 {:.2} s; {:.2} reconciles and {:.1} API requests per run; operator CPU {operator_cpu:.1} s; operator RSS before {:.1} MiB, peak sampled {:.1} MiB, VmHWM {:.1} MiB",
        build_profile(),
        applied.as_secs_f64(),
        all_done.as_secs_f64(),
        p50,
        p95,
        reconciles / n as f64,
        requests / n as f64,
        rss_before as f64 / 1024.0,
        peak_rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    assert!(peak_rss > 0, "operator RSS was sampled");
    // Gone before the next measurement starts (its Runs' purges and pods were counted
    // in the next size's bare pods).
    delete_namespace_and_wait(&c.client, &ns).await;
    Measured {
        done: all_done.as_secs_f64(),
        requests,
        restarted,
    }
}

/// What a baseline leg creates: bare pods, or one `batch/v1` Job per pod (the built-in Job
/// controller in kube-controller-manager doing the work a Run's reconciler does for its pod).
#[derive(Clone, Copy, PartialEq)]
enum Baseline {
    Pods,
    Jobs,
}

impl Baseline {
    fn label(self) -> &'static str {
        match self {
            Baseline::Pods => "bare pods",
            Baseline::Jobs => "Jobs",
        }
    }
}

/// The pod every baseline item runs: `sh true` from the node agent's local image.
fn baseline_pod_spec() -> Value {
    json!({"restartPolicy": "Never", "containers": [
        {"name": "c", "image": "local/sh", "command": ["true"]}]})
}

/// `n` objects named `{prefix}0000`, `{prefix}0001`, ..., each with `spec`.
fn named_docs<T: serde::de::DeserializeOwned>(n: usize, prefix: char, spec: Value) -> Vec<T> {
    (0..n)
        .map(|i| {
            let doc = json!({"metadata": {"name": format!("{prefix}{i:04}")}, "spec": spec});
            serde_json::from_value(doc).unwrap()
        })
        .collect()
}

/// The flags of the running kube-controller-manager that bound the Job controller's pace
/// (its client's QPS and burst, its sync workers), as given; defaults where not given.
fn job_controller_flags() -> String {
    let wanted = [
        "--kube-api-qps",
        "--kube-api-burst",
        "--concurrent-job-syncs",
    ];
    let given: Vec<String> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|raw| {
            raw.split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
        })
        .find(|args| {
            args.first()
                .is_some_and(|a| a.ends_with("kube-controller-manager"))
        })
        .unwrap_or_default()
        .into_iter()
        .filter(|a| wanted.iter().any(|w| a.starts_with(w)))
        .collect();
    if given.is_empty() {
        "kube-controller-manager defaults: --kube-api-qps=20 --kube-api-burst=30 --concurrent-job-syncs=5".into()
    } else {
        format!("kube-controller-manager {}", given.join(" "))
    }
}

/// N bare pods (or N Jobs) created at once through the API: the time until all succeeded.
async fn baseline(c: &Cluster, n: usize, kind: Baseline) -> Measured {
    let ns = namespace(
        &c.client,
        match kind {
            Baseline::Pods => "scale-pods",
            Baseline::Jobs => "scale-jobs",
        },
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(c.client.clone(), &ns);
    // Watch from before the creates: the first time each pod is seen at all (a Job's pod:
    // when its controller created it) and past Pending.
    type Seen = Arc<Mutex<std::collections::BTreeMap<String, f64>>>;
    let (appeared, seen): (Seen, Seen) = Default::default();
    let t0 = SystemTime::now();
    let watch = {
        let (pods, appeared, seen) = (pods.clone(), appeared.clone(), seen.clone());
        tokio::spawn(async move {
            let mut w = watcher(pods, watcher::Config::default()).boxed();
            while let Some(ev) = w.next().await {
                let p = match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
                    _ => continue,
                };
                let at = since(t0);
                let name = p.metadata.name.clone().unwrap_or_default();
                appeared.lock().unwrap().entry(name.clone()).or_insert(at);
                if matches!(
                    phase(&p).as_deref(),
                    Some("Running" | "Succeeded" | "Failed")
                ) {
                    seen.lock().unwrap().entry(name).or_insert(at);
                }
            }
        })
    };
    // Typed before the clock starts: only the creates are timed.
    let (pod_docs, job_docs): (Vec<Pod>, Vec<Job>) = match kind {
        Baseline::Pods => (named_docs(n, 'p', baseline_pod_spec()), vec![]),
        Baseline::Jobs => (
            vec![],
            named_docs(
                n,
                'j',
                json!({"backoffLimit": 0, "template": {"spec": baseline_pod_spec()}}),
            ),
        ),
    };
    let usage = Usage::start(&c.client, None).await;
    let pp = PostParams::default();
    let start = Instant::now();
    let creates = pod_docs
        .iter()
        .map(|d| pods.create(&pp, d).map_ok(drop).boxed())
        .chain(
            job_docs
                .iter()
                .map(|d| jobs.create(&pp, d).map_ok(drop).boxed()),
        );
    for r in futures::future::join_all(creates).await {
        r.expect("create");
    }
    let applied = start.elapsed();
    let all_done = wait_for(Duration::from_secs(1800), "all Succeeded", || {
        let (pods, jobs) = (pods.clone(), jobs.clone());
        async move {
            let (done, failed) = match kind {
                Baseline::Pods => {
                    let items = pods.list(&ListParams::default()).await.ok()?.items;
                    let count = |want: &str| {
                        items
                            .iter()
                            .filter(|p| phase(p).as_deref() == Some(want))
                            .count()
                    };
                    (count("Succeeded"), count("Failed"))
                }
                Baseline::Jobs => {
                    let items = jobs.list(&ListParams::default()).await.ok()?.items;
                    let count = |f: fn(&k8s_openapi::api::batch::v1::JobStatus) -> Option<i32>| {
                        items
                            .iter()
                            .filter(|j| j.status.as_ref().and_then(f).unwrap_or(0) > 0)
                            .count()
                    };
                    (count(|s| s.succeeded), count(|s| s.failed))
                }
            };
            assert_eq!(failed, 0, "baseline {} failed", kind.label());
            (done == n).then(|| start.elapsed())
        }
    })
    .await;
    let (requests, _) = usage
        .report(&c.client, kind.label(), n, all_done.as_secs_f64())
        .await;
    // The watch may trail the list by a moment.
    wait_for(Duration::from_secs(30), "every pod observed", || {
        let seen = seen.clone();
        async move { (seen.lock().unwrap().len() == n).then_some(()) }
    })
    .await;
    watch.abort();
    let lat: Vec<f64> = seen.lock().unwrap().values().copied().collect();
    let (p50, p95) = summary("pods", n, lat);
    let (how, pod_created) = match kind {
        Baseline::Pods => ("local/sh true".to_string(), String::new()),
        Baseline::Jobs => (
            format!(
                "batch/v1, one local/sh true pod each; {}",
                job_controller_flags()
            ),
            format!(
                "; create→Job's pod seen {}",
                p50_p95(appeared.lock().unwrap().values().copied())
            ),
        ),
    };
    println!(
        "scale: {n} {} ({how}): created in {:.2} s; all Succeeded after {:.2} s{pod_created}; create→first pod phase past Pending p50 {:.2} s, p95 {:.2} s",
        kind.label(),
        applied.as_secs_f64(),
        all_done.as_secs_f64(),
        p50,
        p95
    );
    // Gone before the Runs are measured: the namespace controller's and the node agent's
    // deletes of these pods (a DELETE pods per pod and more) were counted as the Runs'.
    delete_namespace_and_wait(&c.client, &ns).await;
    Measured {
        done: all_done.as_secs_f64(),
        requests,
        restarted: false,
    }
}

/// Deletes namespace `ns` and waits until it is gone (its pods deleted and finalized).
async fn delete_namespace_and_wait(client: &Client, ns: &str) {
    delete_namespace(client, ns).await;
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    wait_for(
        Duration::from_secs(300),
        &format!("namespace {ns} deleted"),
        || {
            let api = api.clone();
            async move { matches!(api.get_opt(ns).await, Ok(None)).then_some(()) }
        },
    )
    .await;
}

/// The two measurements share the host; never run them at once.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn setup() -> (Cluster, tokio::sync::MutexGuard<'static, ()>) {
    let guard = SERIAL.lock().await;
    let c = cluster().await;
    for b in ["openwop-operator", "openwop-worker"] {
        target_bin(&build_profile(), b);
    }
    // The CLI only reads the streams afterwards.
    target_bin("debug", "kubectl-openwop");
    (c, guard)
}

/// Each size: N bare pods, then N Runs, on the same host in the same run; the ratios.
#[tokio::test]
#[ignore = "measurement: minutes of wall time and the whole host; run with --ignored --nocapture"]
async fn runs_at_once_beside_bare_pods() {
    let (c, _g) = setup().await;
    let sizes = sizes();
    install(&c, sizes.iter().copied().max().unwrap_or(1));
    for n in sizes {
        let pods = baseline(&c, n, Baseline::Pods).await;
        let jobs = if jobs_leg() {
            Some(baseline(&c, n, Baseline::Jobs).await)
        } else {
            None
        };
        let runs = runs_at_once(&c, n).await;
        // The same bare pods again: this machine's speed drifts within minutes (the same 1,000
        // bare pods took 29 s and 54 s 12 minutes apart, their CPU seconds 1.8x), so the Runs are
        // compared with bare pods measured on both sides of them, not one.
        let pods_after = baseline(&c, n, Baseline::Pods).await;
        let bare = (pods.done + pods_after.done) / 2.0;
        let bare_requests = (pods.requests + pods_after.requests) / 2.0;
        if let Some(jobs) = jobs {
            println!(
                "FIGURES scale {n}: Jobs all succeeded after {:.2} s vs bare pods {:.2} s: {:.2}x (Runs: {:.2}x); API requests per Job {:.1}: {:.2}x a bare pod's",
                jobs.done,
                pods.done,
                jobs.done / pods.done,
                runs.done / pods.done,
                jobs.requests / n as f64,
                jobs.requests / pods.requests,
            );
        }
        println!(
            "FIGURES scale {n}: Runs all completed after {:.2} s vs bare pods {bare:.2} s (mean of {:.2} s before and {:.2} s after): {:.2}x ({:.2}x, {:.2}x); API requests per run {:.1} vs per bare pod {:.1}: {:.2}x ({} builds{})",
            runs.done,
            pods.done,
            pods_after.done,
            runs.done / bare,
            runs.done / pods.done,
            runs.done / pods_after.done,
            runs.requests / n as f64,
            bare_requests / n as f64,
            runs.requests / bare_requests,
            build_profile(),
            if runs.restarted {
                "; the operator restarted meanwhile"
            } else {
                ""
            }
        );
        // A busy leader keeps its lease (`Elector::keep_apart`): a restart mid-batch is a
        // failure, not a footnote.
        assert!(
            !runs.restarted,
            "the operator restarted during {n} Runs at once (a lost leader lease?)"
        );
    }
    uninstall(&c);
    // Gone before returning: a measurement started right after installs into the same
    // namespace, and helm cannot while it terminates.
    delete_namespace_and_wait(&c.client, RELEASE_NS).await;
}

#[tokio::test]
#[ignore = "measurement: minutes of wall time and the whole host; run with --ignored --nocapture"]
async fn runs_under_the_limit_start_in_order_and_never_exceed_it() {
    let (c, _g) = setup().await;
    install(&c, limit::LIMIT);
    limit::limit_leg(&c).await;
    uninstall(&c);
    delete_namespace_and_wait(&c.client, RELEASE_NS).await;
}

#[tokio::test]
#[ignore = "measurement: minutes of wall time and the whole host; run with --ignored --nocapture"]
async fn delay_wake_lateness() {
    let (c, _g) = setup().await;
    install(&c, 200);
    delay::delay_wake_lateness(&c).await;
    uninstall(&c);
    delete_namespace_and_wait(&c.client, RELEASE_NS).await;
}
