//! A deleted Run's events and reasoning are purged from the stream once the Run is gone.
//!
//! Runs carry no finalizer: none is added per run (one API request and one round trip before
//! each start), and nothing holds a deletion when the operator is not running (uninstalled,
//! scaled to zero: Runs and namespaces delete at once). The worker pod and the snapshot go
//! with the Run (owner references, the garbage collector). The leader purges a run's subjects
//! when
//! * its Run watch sees the Run deleted ([`Departures::observe`]), or a re-list of the watch
//!   no longer shows it (deleted while the watch was reconnecting);
//! * its event consumer connects, before it reads: every run with events in the stream that no
//!   Run has any more (deleted while no leader watched, [`orphans`]) — the stream is listed
//!   before the Runs, so a run created meanwhile is never among them; Runs of every operator
//!   instance count.
//!
//! Best effort, as a purge always was: a purge that fails is logged, and the stream's
//! retention (`events.retention`) removes the events later anyway. Runs that still carry the
//! finalizer of earlier releases are cleaned up by it (`run::reconcile_run`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use openwop_crds::Run;
use openwop_protocol::run::subjects::{RunSubject, events_filter};
use tokio::sync::mpsc::UnboundedReceiver;

use super::context::Context;
use super::ending::within_timeout;
use crate::config::OperatorConfig;

/// The Runs a watch has shown (uid → namespace), to tell which are gone.
#[derive(Default)]
pub struct Departures {
    known: HashMap<String, String>,
    /// The Runs of the re-list in progress.
    relisted: Option<HashMap<String, String>>,
}

impl Departures {
    /// The runs `ev` shows gone: a deleted Run, or at the end of a re-list every Run known
    /// before that it did not list.
    pub fn observe(&mut self, ev: &watcher::Event<Run>) -> Vec<RunSubject> {
        let id = |r: &Run| Some((r.uid()?, r.namespace()?));
        match ev {
            watcher::Event::Apply(r) => {
                if let Some((uid, ns)) = id(r) {
                    self.known.insert(uid, ns);
                }
                vec![]
            }
            watcher::Event::Delete(r) => id(r)
                .map(|(uid, _)| uid)
                .and_then(|uid| self.known.remove_entry(&uid))
                .or_else(|| id(r))
                .map(|(run_id, namespace)| RunSubject { namespace, run_id })
                .into_iter()
                .collect(),
            watcher::Event::Init => {
                self.relisted = Some(HashMap::new());
                vec![]
            }
            watcher::Event::InitApply(r) => {
                if let (Some((uid, ns)), Some(fresh)) = (id(r), self.relisted.as_mut()) {
                    fresh.insert(uid, ns);
                }
                vec![]
            }
            watcher::Event::InitDone => {
                let fresh = self.relisted.take().unwrap_or_default();
                let old = std::mem::replace(&mut self.known, fresh);
                old.into_iter()
                    .filter(|(uid, _)| !self.known.contains_key(uid))
                    .map(|(run_id, namespace)| RunSubject { namespace, run_id })
                    .collect()
            }
        }
    }
}

/// The runs with events in the stream (`in_stream`, listed first) that no Run has (`uids`,
/// listed after): deleted while no leader watched.
pub fn orphans(in_stream: Vec<RunSubject>, uids: &HashSet<String>) -> Vec<RunSubject> {
    in_stream
        .into_iter()
        .filter(|s| !uids.contains(&s.run_id))
        .collect()
}

/// Purges the runs `departed` sends; returns when the sender is gone (the leader stops).
pub async fn purge_departed(ctx: Arc<Context>, mut departed: UnboundedReceiver<RunSubject>) {
    let Some(slot) = ctx.jetstream.clone() else {
        // No event stream configured: nothing to purge; drain so the watch never waits.
        while departed.recv().await.is_some() {}
        return;
    };
    while let Some(run) = departed.recv().await {
        // Not connected yet: this and later deletions wait (unbounded, one small entry each).
        let js = loop {
            match slot.get() {
                Some(js) => break js,
                None => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        };
        if let Err(why) = purge(&ctx.config, &js, &run.namespace, &run.run_id).await {
            let retention = &ctx.config.events.retention;
            tracing::warn!(namespace = %run.namespace, run_id = %run.run_id, "could not purge the deleted Run's events: {why}; they expire with the stream's retention ({retention})");
        }
    }
}

/// Purges one run's subjects; how many messages went, or why not.
pub(super) async fn purge(
    cfg: &OperatorConfig,
    js: &async_nats::jetstream::Context,
    namespace: &str,
    run_id: &str,
) -> Result<u64, String> {
    let stream = &cfg.worker.events_stream;
    let purged = within_timeout(openwop_nats::stream::purge_run(
        js, stream, namespace, run_id,
    ))
    .await?;
    tracing::debug!(namespace, run_id, purged, "deleted Run's events purged");
    Ok(purged)
}

/// Purges the runs with events in the stream that no Run in the operator's scope has (Runs of
/// every instance count), logging what it did; the event consumer calls it when it connects,
/// before it reads.
pub async fn sweep(client: &Client, cfg: &OperatorConfig, js: &async_nats::jetstream::Context) {
    match orphans_purged(client, cfg, js).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            runs = n,
            "purged the events of Runs deleted while no leader watched"
        ),
        Err(e) => {
            tracing::warn!(error = %e, "could not look for the events of Runs deleted while no leader watched; they expire with the stream's retention")
        }
    }
}

async fn orphans_purged(
    client: &Client,
    cfg: &OperatorConfig,
    js: &async_nats::jetstream::Context,
) -> Result<usize, String> {
    let scope = (!cfg.watch_namespace.is_empty()).then_some(cfg.watch_namespace.as_str());
    // The stream first: a run created after this listing is not in it.
    let in_stream = within_timeout(openwop_nats::stream::runs_in_stream(
        js,
        &cfg.worker.events_stream,
        &events_filter(scope),
    ))
    .await?;
    if in_stream.is_empty() {
        return Ok(0);
    }
    let runs: Api<Run> = match scope {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    // Names and uids only; every instance's Runs (no label selector).
    let listed = runs
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| format!("cannot list Runs: {e}"))?;
    let uids: HashSet<String> = listed.items.iter().filter_map(|r| r.uid()).collect();
    let mut purged = 0;
    for run in orphans(in_stream, &uids) {
        match purge(cfg, js, &run.namespace, &run.run_id).await {
            Ok(_) => purged += 1,
            Err(why) => {
                tracing::warn!(namespace = %run.namespace, run_id = %run.run_id, "could not purge a deleted Run's events: {why}")
            }
        }
    }
    Ok(purged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ns: &str, uid: &str) -> Run {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": format!("r-{uid}"), "namespace": ns, "uid": uid},
            "spec": {"workflowRef": {"name": "w"}}}))
        .unwrap()
    }

    fn subject(ns: &str, uid: &str) -> RunSubject {
        RunSubject {
            namespace: ns.into(),
            run_id: uid.into(),
        }
    }

    #[test]
    fn deleted_runs_and_runs_a_relist_misses_are_gone() {
        use watcher::Event::*;
        let mut d = Departures::default();
        for ev in [
            Init,
            InitApply(run("a", "u1")),
            InitApply(run("b", "u2")),
            InitDone,
        ] {
            assert_eq!(d.observe(&ev), [], "the first listing removes nothing");
        }
        assert_eq!(d.observe(&Apply(run("a", "u3"))), []);
        assert_eq!(d.observe(&Delete(run("a", "u1"))), [subject("a", "u1")]);
        // The watch reconnects: u2 was deleted meanwhile, u3 is still there.
        assert_eq!(d.observe(&Init), []);
        assert_eq!(d.observe(&InitApply(run("a", "u3"))), []);
        assert_eq!(d.observe(&InitDone), [subject("b", "u2")]);
        // A Delete of a Run the watch never showed (deleted before it was listed) still names it.
        assert_eq!(d.observe(&Delete(run("c", "u9"))), [subject("c", "u9")]);
        assert_eq!(d.observe(&Init), []);
        assert_eq!(d.observe(&InitDone), [subject("a", "u3")]);
    }

    #[test]
    fn only_runs_no_run_has_are_orphans() {
        let uids: HashSet<String> = ["u1".to_owned()].into();
        assert_eq!(
            orphans(vec![subject("a", "u1"), subject("a", "u2")], &uids),
            [subject("a", "u2")]
        );
    }
}
