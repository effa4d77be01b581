//! Issue #27 limit leg: 1,000 Runs (`OPENWOP_SCALE_LIMIT_RUNS`) applied at once under
//! `runs.maxConcurrentPerNamespace` = 50. A watch of the namespace's worker pods samples, at
//! every change, how many hold a slot (not finished): never more than the limit. The queue
//! drains in creation order (the operator's order: creation time, then name): when a run's
//! worker pod is first seen, the runs before it in that order that have no pod yet are fewer
//! than the limit (runs admitted in the same wave are created concurrently, so their pods may
//! be seen in any order among themselves).

use super::*;

/// The namespace limit of the leg's install.
pub(super) const LIMIT: usize = 50;

fn runs() -> usize {
    std::env::var("OPENWOP_SCALE_LIMIT_RUNS")
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("OPENWOP_SCALE_LIMIT_RUNS: {v:?} is not a number"))
        })
        .unwrap_or(1000)
}

/// What the pod watch saw: pods holding a slot now, the peak, samples, and each run's worker
/// pod in the order first seen.
#[derive(Default)]
struct Slots {
    holding: std::collections::BTreeSet<String>,
    peak: usize,
    samples: usize,
    started: Vec<String>,
}

pub(super) async fn limit_leg(c: &Cluster) {
    let n = runs();
    let (ns, runs) = hello_namespace(c, "scale-limit").await;
    let seen: Arc<Mutex<Slots>> = Arc::default();
    let watch = {
        let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns);
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut w = watcher(pods, watcher::Config::default()).boxed();
            while let Some(ev) = w.next().await {
                let mut s = seen.lock().unwrap();
                match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                        let name = p.name_any();
                        if let Some(run) = owner_run(&p)
                            && !s.started.contains(&run)
                        {
                            s.started.push(run);
                        }
                        if matches!(phase(&p).as_deref(), None | Some("Pending" | "Running")) {
                            s.holding.insert(name);
                        } else {
                            s.holding.remove(&name);
                        }
                    }
                    Ok(watcher::Event::Delete(p)) => {
                        s.holding.remove(&p.name_any());
                    }
                    _ => continue,
                }
                s.samples += 1;
                s.peak = s.peak.max(s.holding.len());
            }
        })
    };
    let docs: Vec<DynamicObject> = (0..n).map(hello_run).collect();
    let start = Instant::now();
    let pp = PostParams::default();
    for r in futures::future::join_all(docs.iter().map(|d| runs.create(&pp, d))).await {
        r.expect("create Run");
    }
    let what = format!("{n} Runs completed under limit {LIMIT}");
    wait_for(Duration::from_secs(1800), &what, || {
        let runs = runs.clone();
        async move {
            let items = runs.list(&ListParams::default()).await.ok()?.items;
            let failed: Vec<_> = items
                .iter()
                .filter(|r| r.data["status"]["phase"] == "failed")
                .map(|r| r.name_any())
                .collect();
            assert!(failed.is_empty(), "failed runs: {failed:?}");
            let done = items
                .iter()
                .filter(|r| r.data["status"]["phase"] == "completed")
                .count();
            (done == n).then_some(())
        }
    })
    .await;
    let drained = start.elapsed().as_secs_f64();
    watch.abort();
    // The queue order, as the operator orders it.
    let mut order: Vec<(String, String)> = runs
        .list(&ListParams::default())
        .await
        .expect("list Runs")
        .items
        .iter()
        .map(|r| {
            let created = r.metadata.creation_timestamp.clone().map(|t| t.0);
            (
                created.map(|t| t.to_string()).unwrap_or_default(),
                r.name_any(),
            )
        })
        .collect();
    order.sort();
    let rank: BTreeMap<String, usize> = order
        .iter()
        .enumerate()
        .map(|(i, (_, name))| (name.clone(), i))
        .collect();
    let s = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(s.started.len(), n, "every run's worker pod was seen");
    // When each run started: how many runs before it in the queue had not started yet.
    let mut started = vec![false; n];
    let mut overtaken = 0;
    for run in &s.started {
        let r = rank[run];
        let waiting_before = started[..r].iter().filter(|s| !**s).count();
        overtaken = overtaken.max(waiting_before);
        started[r] = true;
    }
    println!(
        "FIGURES scale limit: {n} Runs under limit {LIMIT} drained in {drained:.1} s; peak {} worker pods holding a slot over {} samples; at most {overtaken} earlier runs still queued when a run started ({} builds)",
        s.peak,
        s.samples,
        build_profile()
    );
    assert!(
        s.peak <= LIMIT,
        "{} worker pods held a slot at once (limit {LIMIT})",
        s.peak
    );
    assert!(
        overtaken < LIMIT,
        "a run started while {overtaken} runs created before it were still queued (limit {LIMIT})"
    );
    delete_namespace(&c.client, &ns).await;
}
