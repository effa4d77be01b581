//! Issue 7 measurement on the mini-cluster: 200 Runs applied at once, beside a baseline of 200
//! bare pods created directly through the API. Prints time until all are done, p50/p95 from
//! apply to the first event (Runs: the first NATS event's `timestamp`; pods: the first watch
//! observation of a phase past Pending), and the operator's peak RSS.
//!
//! Ignored by default (minutes of wall time, the whole host busy):
//! `cargo test -p openwop-e2e --release --test scale -- --ignored --nocapture`.
//! Needs the operator, worker and CLI binaries in `$CARGO_TARGET_DIR/debug` like the journeys;
//! the figures are for those debug builds running as local processes on this host.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::runtime::watcher;
use openwop_e2e::Cluster;
use serde_json::{Value, json};

const N: usize = 200;
const RELEASE: &str = "openwop";
const RELEASE_NS: &str = "openwop-system";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .into()
}

fn target_bin(name: &str) -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"));
    let p = dir.join("debug").join(name);
    assert!(p.is_file(), "{} is missing: build it first", p.display());
    p
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

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn helm_bin() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo().join("e2e/cluster/build-binaries.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("build-binaries.sh");
    assert!(out.status.success(), "build-binaries.sh failed");
    let dir = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(dir.lines().last().unwrap().trim()).join("helm")
}

/// The release with the journeys' mini-cluster values, all 200 Runs allowed at once.
fn install(c: &Cluster) {
    let chart = repo().join("charts/openwop");
    let values = repo().join("e2e/helm/mini-cluster-values.yaml");
    let nats = format!("nats.external.url={}", c.nats_url);
    let limit = format!("runs.maxConcurrentPerNamespace={N}");
    let args = [
        "upgrade",
        "--install",
        RELEASE,
        chart.to_str().unwrap(),
        "-n",
        RELEASE_NS,
        "--create-namespace",
        "-f",
        values.to_str().unwrap(),
        "--set",
        &nats,
        "--set",
        "providers[0].name=mock,providers[0].vendor=mock",
        "--set",
        &limit,
        "--wait",
        "--timeout",
        "3m",
    ];
    ok(run_cmd(c, &helm_bin(), &args), "helm upgrade --install");
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

fn summary(what: &str, mut lat: Vec<f64>) -> (f64, f64) {
    assert_eq!(lat.len(), N, "{what}: {} of {N} measured", lat.len());
    lat.sort_by(f64::total_cmp);
    (percentile(&lat, 50.0), percentile(&lat, 95.0))
}

fn since(t0: SystemTime) -> f64 {
    SystemTime::now()
        .duration_since(t0)
        .unwrap_or_default()
        .as_secs_f64()
}

async fn runs_at_once(c: &Cluster) {
    let ns = namespace(&c.client, "scale-runs").await;
    ok(
        run_cmd(
            c,
            Path::new("kubectl"),
            &[
                "apply",
                "-n",
                &ns,
                "-f",
                repo()
                    .join("examples/01-hello-workflow.yaml")
                    .to_str()
                    .unwrap(),
            ],
        ),
        "apply hello workflow",
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
    wait_for(Duration::from_secs(60), "workflow hello Ready", || {
        let wfs = wfs.clone();
        async move {
            let wf = wfs.get("hello").await.ok()?;
            wf.data["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
                .then_some(())
        }
    })
    .await;
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

    let docs: Vec<DynamicObject> = (0..N)
        .map(|i| {
            serde_json::from_value(json!({
                "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
                "metadata": {"name": format!("r{i:03}")},
                "spec": {"workflowRef": {"name": "hello"}, "inputs": {"greeting": "hi"}},
            }))
            .unwrap()
        })
        .collect();
    let t0 = SystemTime::now();
    let pp = PostParams::default();
    let start = Instant::now();
    let created = futures::future::join_all(docs.iter().map(|d| runs.create(&pp, d))).await;
    for r in created {
        r.expect("create Run");
    }
    let applied = start.elapsed();
    let all_done = wait_for(Duration::from_secs(900), "200 Runs completed", || {
        let runs = runs.clone();
        async move {
            let items = runs.list(&ListParams::default()).await.ok()?.items;
            let failed: Vec<String> = items
                .iter()
                .filter(|r| r.data["status"]["phase"] == "failed")
                .map(|r| {
                    format!(
                        "{}: {}",
                        r.metadata.name.clone().unwrap_or_default(),
                        r.data["status"]["error"]
                    )
                })
                .collect();
            assert!(failed.is_empty(), "failed runs: {failed:?}");
            let done = items
                .iter()
                .filter(|r| r.data["status"]["phase"] == "completed")
                .count();
            (done == N).then(|| start.elapsed())
        }
    })
    .await;
    sampler.abort();
    let peak_rss = *peak.lock().unwrap();
    let hwm = status_kib(pid, "VmHWM").unwrap_or(0);

    // First event of each run, from its stream.
    let t0_ts = Timestamp::try_from(t0).unwrap();
    let cli = target_bin("kubectl-openwop");
    let mut firsts = Vec::with_capacity(N);
    for chunk in (0..N).collect::<Vec<_>>().chunks(8) {
        let handles: Vec<_> = chunk
            .iter()
            .map(|i| {
                let (c, ns, cli) = (c.clone(), ns.clone(), cli.clone());
                let name = format!("r{i:03}");
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
                    m["timestamp"]
                        .as_str()
                        .unwrap()
                        .parse::<Timestamp>()
                        .unwrap()
                })
            })
            .collect();
        for h in handles {
            let ts = h.await.unwrap();
            firsts.push(ts.duration_since(t0_ts).as_secs_f64());
        }
    }
    let (p50, p95) = summary("runs", firsts);
    println!(
        "scale: {N} Runs: created in {:.2} s; all completed after {:.2} s; apply→first event p50 {:.2} s, p95 {:.2} s; operator RSS before {:.1} MiB, peak sampled {:.1} MiB, VmHWM {:.1} MiB",
        applied.as_secs_f64(),
        all_done.as_secs_f64(),
        p50,
        p95,
        rss_before as f64 / 1024.0,
        peak_rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    assert!(peak_rss > 0, "operator RSS was sampled");
    delete_namespace(&c.client, &ns).await;
}

async fn bare_pods_baseline(c: &Cluster) {
    let ns = namespace(&c.client, "scale-pods").await;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns);
    // Watch from before the creates: the first time each pod is seen past Pending.
    let seen: Arc<Mutex<std::collections::BTreeMap<String, f64>>> = Arc::default();
    let t0 = SystemTime::now();
    let watch = {
        let (pods, seen) = (pods.clone(), seen.clone());
        tokio::spawn(async move {
            let mut w = watcher(pods, watcher::Config::default()).boxed();
            while let Some(ev) = w.next().await {
                let list = match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => vec![p],
                    _ => continue,
                };
                for p in list {
                    if matches!(
                        phase(&p).as_deref(),
                        Some("Running" | "Succeeded" | "Failed")
                    ) {
                        let name = p.metadata.name.unwrap_or_default();
                        seen.lock()
                            .unwrap()
                            .entry(name)
                            .or_insert_with(|| since(t0));
                    }
                }
            }
        })
    };
    let docs: Vec<Pod> = (0..N)
        .map(|i| {
            serde_json::from_value(json!({
                "metadata": {"name": format!("p{i:03}")},
                "spec": {"restartPolicy": "Never", "containers": [
                    {"name": "c", "image": "local/sh", "command": ["true"]}]},
            }))
            .unwrap()
        })
        .collect();
    let pp = PostParams::default();
    let start = Instant::now();
    let created = futures::future::join_all(docs.iter().map(|d| pods.create(&pp, d))).await;
    for r in created {
        r.expect("create pod");
    }
    let applied = start.elapsed();
    let all_done = wait_for(Duration::from_secs(900), "200 pods Succeeded", || {
        let pods = pods.clone();
        async move {
            let items = pods.list(&ListParams::default()).await.ok()?.items;
            let failed = items
                .iter()
                .filter(|p| phase(p).as_deref() == Some("Failed"))
                .count();
            assert_eq!(failed, 0, "bare pods failed");
            let done = items
                .iter()
                .filter(|p| phase(p).as_deref() == Some("Succeeded"))
                .count();
            (done == N).then(|| start.elapsed())
        }
    })
    .await;
    // The watch may trail the list by a moment.
    wait_for(Duration::from_secs(30), "every pod observed", || {
        let seen = seen.clone();
        async move { (seen.lock().unwrap().len() == N).then_some(()) }
    })
    .await;
    watch.abort();
    let lat: Vec<f64> = seen.lock().unwrap().values().copied().collect();
    let (p50, p95) = summary("pods", lat);
    println!(
        "scale: {N} bare pods (local/sh true): created in {:.2} s; all Succeeded after {:.2} s; create→first phase past Pending p50 {:.2} s, p95 {:.2} s",
        applied.as_secs_f64(),
        all_done.as_secs_f64(),
        p50,
        p95
    );
    delete_namespace(&c.client, &ns).await;
}

/// The two measurements share the host; never run them at once.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn setup() -> (Cluster, tokio::sync::MutexGuard<'static, ()>) {
    let guard = SERIAL.lock().await;
    let c = cluster().await;
    for b in ["openwop-operator", "openwop-worker", "kubectl-openwop"] {
        target_bin(b);
    }
    (c, guard)
}

#[tokio::test]
#[ignore = "measurement: minutes of wall time and the whole host; run with --ignored --nocapture"]
async fn baseline_two_hundred_bare_pods_at_once() {
    let (c, _g) = setup().await;
    bare_pods_baseline(&c).await;
}

#[tokio::test]
#[ignore = "measurement: minutes of wall time and the whole host; run with --ignored --nocapture"]
async fn two_hundred_runs_at_once() {
    let (c, _g) = setup().await;
    install(&c);
    runs_at_once(&c).await;
}
