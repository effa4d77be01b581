//! One Run reconcile as a value ([`RunReconcile`]): what it reads, the status it drafts, and
//! the one place where it acts.
//!
//! The steps ([`super::run`], [`super::start`], [`super::observe`], [`super::cancel`]) read
//! through its read methods — the pods, ConfigMaps, Workflows and ServiceAccounts a start
//! needs go through here, so a cache can replace a GET in one place — decide in pure
//! functions over the draft ([`Draft`]), and leave the deletes, the status write and the
//! Events to [`RunReconcile::act`]. The writes whose answer decides what follows (the
//! snapshot apply, the pod create) are methods here too.

use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use openwop_crds::{Run, RunStatus, Workflow};
use serde_json::json;

use super::caches::{holds_slot, listed};
use super::common::{Draft, delete_ignoring_missing, has_condition, publish};
use super::context::{Context, Error};
use super::slots::Listed;
use crate::names::{MANAGER, is_worker_object, owned_by, snapshot_name};
use crate::reasons::{ConditionType, Reason};
use crate::status::write_run_status;

/// The state of one Run reconcile: built once, passed to every step.
pub(super) struct RunReconcile<'a> {
    pub(super) run: &'a Run,
    pub(super) ctx: &'a Context,
    pub(super) ns: String,
    pub(super) name: String,
    /// The reconcile's clock (`ctx.now`, read once).
    pub(super) now: Timestamp,
    /// The status as read; the status is written only when the draft differs from it.
    original: RunStatus,
    /// What this reconcile decided.
    pub(super) draft: Draft,
    pods: Api<Pod>,
    cms: Api<ConfigMap>,
    wfs: Api<Workflow>,
    sas: Api<ServiceAccount>,
    runs: Api<Run>,
}

impl<'a> RunReconcile<'a> {
    /// The reconcile of `run`: its draft starts from the stored status, stamped with the
    /// runId, the generation it reflects and the workflow reference.
    pub(super) fn new(run: &'a Run, ctx: &'a Context) -> Self {
        let ns = run.namespace().unwrap_or_default();
        let now = (ctx.now)();
        let generation = run.metadata.generation;
        let original = run.status.clone().unwrap_or_default();
        let mut status = original.clone();
        status.run_id = run.uid();
        status.observed_generation = generation;
        if status.workflow.is_none() {
            status.workflow = Some(run.spec.workflow_ref.to_string());
        }
        let client = &ctx.client;
        RunReconcile {
            run,
            ctx,
            name: run.name_any(),
            now,
            original,
            draft: Draft::new(status, generation, now),
            pods: Api::namespaced(client.clone(), &ns),
            cms: Api::namespaced(client.clone(), &ns),
            wfs: Api::namespaced(client.clone(), &ns),
            sas: Api::namespaced(client.clone(), &ns),
            runs: Api::namespaced(client.clone(), &ns),
            ns,
        }
    }

    /// The draft status.
    pub(super) fn status(&self) -> &RunStatus {
        &self.draft.status
    }

    // Reads: from the watch caches when the binary runs them ([`super::caches`]), else GETs.

    /// Worker pod `name` of the Run's namespace. A pod the cache does not show is read from
    /// the API server: a pod just created may not have reached the cache yet, and reading it
    /// as missing would count a crash.
    pub(super) async fn pod(&self, name: &str) -> Result<Option<Pod>, Error> {
        if let Some(store) = ready(&self.ctx.caches.pods).await
            && let Some(p) = store.get(&ObjectRef::new(name).within(&self.ns))
        {
            return Ok(Some((*p).clone()));
        }
        Ok(self.pods.get_opt(name).await?)
    }

    /// The metadata of the Run's snapshot ConfigMap (whether it exists, its owner, the
    /// Workflow it froze), from the metadata-only cache; with the ConfigMap whole when it was
    /// read from the API server instead. A snapshot the cache does not show yet although the
    /// status says it was taken (a cache behind a fresh apply) is read from the API server:
    /// snapshotting again could take a newer Workflow than the one the run started from.
    pub(super) async fn snapshot_meta(
        &self,
    ) -> Result<Option<(ObjectMeta, Option<ConfigMap>)>, Error> {
        match self.cached_snapshot().await {
            Some(cached) => Ok(cached.map(|meta| (meta, None))),
            None => Ok(self
                .snapshot_now()
                .await?
                .map(|cm| (cm.metadata.clone(), Some(cm)))),
        }
    }

    /// The Run's snapshot ConfigMap, whole: from the API server (the cache holds metadata
    /// only), unless the cache shows there is none.
    pub(super) async fn snapshot(&self) -> Result<Option<ConfigMap>, Error> {
        if let Some(None) = self.cached_snapshot().await {
            return Ok(None);
        }
        self.snapshot_now().await
    }

    /// What the snapshot cache knows of the Run's snapshot: `Some(None)` none, `Some(meta)`
    /// its metadata; `None` when it cannot tell (no cache, not listed yet, or the status says
    /// the snapshot was taken and the cache does not show it yet).
    async fn cached_snapshot(&self) -> Option<Option<ObjectMeta>> {
        let store = ready(&self.ctx.caches.snapshots).await?;
        let cached = store.get(&ObjectRef::new(&snapshot_name(&self.name)).within(&self.ns));
        let taken = has_condition(
            &self.original.conditions,
            ConditionType::Ready,
            Some(Reason::Snapshotted),
        );
        (cached.is_some() || !taken).then(|| cached.map(|c| c.metadata.clone()))
    }

    /// The Run's snapshot ConfigMap as the API server has it now: a dormant or resumed run
    /// reads what its last worker or reconcile recorded there (a cache may be behind).
    pub(super) async fn snapshot_now(&self) -> Result<Option<ConfigMap>, Error> {
        Ok(self.cms.get_opt(&snapshot_name(&self.name)).await?)
    }

    /// Workflow `name` of the Run's namespace.
    pub(super) async fn workflow(&self, name: &str) -> Result<Option<Workflow>, Error> {
        if let Some(store) = ready(&self.ctx.caches.workflows).await {
            return Ok(store
                .get(&ObjectRef::new(name).within(&self.ns))
                .map(|w| (*w).clone()));
        }
        Ok(self.wfs.get_opt(name).await?)
    }

    /// The Workflows of the Run's namespace.
    pub(super) async fn workflows(&self) -> Result<Vec<Workflow>, Error> {
        if let Some(store) = ready(&self.ctx.caches.workflows).await {
            return Ok(store
                .state()
                .iter()
                .filter(|w| w.metadata.namespace.as_deref() == Some(self.ns.as_str()))
                .map(|w| (**w).clone())
                .collect());
        }
        Ok(self.wfs.list(&ListParams::default()).await?.items)
    }

    /// ServiceAccount `name` of the Run's namespace.
    pub(super) async fn service_account(
        &self,
        name: &str,
    ) -> Result<Option<ServiceAccount>, Error> {
        if let Some(store) = ready(&self.ctx.caches.service_accounts).await {
            return Ok(store
                .get(&ObjectRef::new(name).within(&self.ns))
                .map(|s| (*s).clone()));
        }
        Ok(self.sas.get_opt(name).await?)
    }

    /// How the worker pods of the Run's namespace are read for the concurrency limit: the
    /// pod cache (read under the start gate's lock) when there is one — a LIST per worker
    /// start made starting N runs cost O(N²) transfer — else a LIST now.
    pub(super) async fn worker_pod_listing(&self) -> Result<PodListing, Error> {
        if let Some(store) = ready(&self.ctx.caches.pods).await {
            return Ok(PodListing::Cache(store.clone()));
        }
        let listed = self
            .pods
            .list(&ListParams::default().labels(&crate::names::worker_selector()))
            .await?
            .items
            .iter()
            .map(|p| (p.name_any(), holds_slot(p)))
            .collect();
        Ok(PodListing::Listed(listed))
    }

    /// Runs of the namespace waiting for a worker slot that were created before this one
    /// (they take the free slots first); 0 without a Run cache.
    /// `counted`: whether a worker pod already holds a slot (the start gate's view).
    pub(super) fn queued_ahead(&self, counted: &dyn Fn(&str) -> bool) -> usize {
        self.ctx.caches.runs.as_ref().map_or(0, |runs| {
            super::caches::queued_ahead(runs, self.run, counted)
        })
    }

    // Writes whose answer decides what follows.

    /// Applies the Run's snapshot ConfigMap.
    pub(super) async fn apply_snapshot(&self, cm: &ConfigMap) -> Result<ConfigMap, Error> {
        let snap = snapshot_name(&self.name);
        Ok(self
            .cms
            .patch(
                &snap,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(cm),
            )
            .await?)
    }

    /// Creates the run's first snapshot ConfigMap. A create, not an apply: the API server
    /// spends about half the CPU on it (1.6–2.2 ms against 3.3–3.7 ms for a 2 KiB snapshot,
    /// 300 sequential writes each on the mini-cluster) and a first snapshot has nothing to
    /// merge with.
    ///
    /// A ConfigMap of that name that is this run's (an earlier reconcile's whose status write
    /// was lost) counts as created, as a snapshot found in the cache does. One of a deleted Run
    /// of the same name that the cache did not show yet is deleted and the 409 returned: the
    /// reconcile retries shortly (`error_policy`) and writes nothing meanwhile. Anything else
    /// of that name is applied over, as a snapshot apply always did.
    pub(super) async fn create_snapshot(&self, cm: &ConfigMap) -> Result<(), Error> {
        let params = PostParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        let taken = match self.cms.create(&params, cm).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => kube::Error::Api(s),
            Err(e) => return Err(e.into()),
        };
        match self.snapshot_now().await? {
            Some(existing) if owned_by(&existing.metadata, self.run) => Ok(()),
            Some(existing) if is_worker_object(&existing.metadata) => {
                tracing::info!(
                    namespace = %self.ns,
                    run = %self.name,
                    "a deleted Run's snapshot holds the name; deleting it"
                );
                self.delete_snapshot().await?;
                Err(taken.into())
            }
            _ => {
                self.apply_snapshot(cm).await?;
                Ok(())
            }
        }
    }

    /// Deletes the snapshot ConfigMap (a deleted Run's of the same name).
    pub(super) async fn delete_snapshot(&self) -> Result<(), Error> {
        delete_ignoring_missing(&self.cms, &snapshot_name(&self.name)).await
    }

    /// Creates the worker ServiceAccount `name` (no RBAC, token never mounted).
    pub(super) async fn apply_service_account(&self, name: &str) -> Result<(), Error> {
        let sa = json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "labels": {crate::names::LABEL_MANAGED_BY: MANAGER}},
            "automountServiceAccountToken": false
        });
        self.sas
            .patch(name, &PatchParams::apply(MANAGER), &Patch::Apply(&sa))
            .await?;
        Ok(())
    }

    /// Creates a worker pod as the operator's field manager; a pod that already exists (a
    /// reconcile retried after its status write was lost) counts as created.
    ///
    /// Returns `false` when the name is held by a leftover of a deleted Run of the same name
    /// (a re-created Run reuses pod names while the old pods still terminate): that pod is
    /// deleted and the caller retries shortly. Adopting it would report the old run's outcome
    /// as this run's.
    pub(super) async fn create_pod(&self, pod: &Pod) -> Result<bool, kube::Error> {
        let params = PostParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        match self.pods.create(&params, pod).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let name = pod.metadata.name.clone().unwrap_or_default();
                match self.pods.get_opt(&name).await? {
                    // This run's own pod being deleted (discarded with a failed snapshot
                    // write) is not a worker to adopt: wait until it is gone.
                    Some(existing) if existing.metadata.deletion_timestamp.is_some() => Ok(false),
                    Some(existing) if owned_by(&existing.metadata, self.run) => Ok(true),
                    Some(_) => {
                        tracing::info!(pod = %name, "a deleted Run's worker pod holds the name; deleting it");
                        match self.pods.delete(&name, &DeleteParams::background()).await {
                            Ok(_) => Ok(false),
                            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
                            Err(e) => Err(e),
                        }
                    }
                    None => Ok(false),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Deletes worker pod `name` that this reconcile created but cannot use (its slot's
    /// reservation is released with the reconcile's); a failure is logged: the pod stays,
    /// owned by the Run, and the next start adopts it.
    pub(super) async fn discard_pod(&self, name: &str) {
        if let Err(e) = delete_ignoring_missing(&self.pods, name).await {
            tracing::warn!(namespace = %self.ns, pod = name, error = %e, "could not delete a worker pod whose snapshot write failed");
        }
    }

    // The one place the reconcile acts.

    /// Performs what the draft says, in order: the status write when the status changed, the
    /// pod deletes, the Run's deletion (its TTL passed), then the Events (so an Event never
    /// reports a status that was not written).
    ///
    /// The status goes first: its write can lose a race (409 on the resourceVersion
    /// precondition), and a pod deleted before a lost write leaves a status that still names
    /// it, which the next reconcile would read as a crashed worker (a suspended run then
    /// counted a crash and backed off). Written first, a 409 leaves everything as it was.
    pub(super) async fn act(self) -> Result<(), Error> {
        let RunReconcile {
            run,
            ctx,
            name,
            original,
            draft,
            pods,
            runs,
            ..
        } = self;
        if draft.status != original {
            // The resourceVersion precondition: the event consumer writes status too; a
            // status computed from a stale cache must not overwrite its newer one (409 →
            // re-reconcile).
            let written =
                write_run_status(&runs, &name, run.resource_version(), &draft.status).await?;
            // A phase this write set that the next reconcile acts on (a suspended or paused
            // run gets its wait, a cancelling one its cancel worker, a run the operator ended
            // its terminal event) makes its copy trigger one. Any other write's copy (the
            // worker started, queued, progress, a run whose log the worker ended: the
            // reconcile that ended it recorded that, `run::apply_run`) is what this reconcile
            // acted on: it triggers none (the pod's end, a requeue or the Workflow's change
            // brings the next step).
            use openwop_crds::RunPhase;
            let next_step = draft.status.phase != original.phase
                && draft.status.phase.is_some_and(|p| match p {
                    RunPhase::Running | RunPhase::Pending => false,
                    p if p.is_terminal() => draft.status.terminal_event.is_none(),
                    _ => true,
                });
            let own = (!next_step).then(|| written.resource_version()).flatten();
            if let Some(rv) = run.resource_version() {
                ctx.superseded.record(run, &rv, own);
            }
        }
        for p in &draft.delete_pods {
            delete_ignoring_missing(&pods, p).await?;
            // Gone: no longer counted against the namespace's limit, seen by the cache or not.
            ctx.starts.forget(&run.namespace().unwrap_or_default(), p);
        }
        if draft.delete_run {
            delete_ignoring_missing(&runs, &name).await?;
        }
        for n in draft.notes {
            publish(ctx, run, n.type_, n.reason, n.note).await;
        }
        Ok(())
    }
}

/// How long a read waits for a cache's first list before reading from the API server.
const CACHE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A cache that has listed once; `None` without one, or while its first list has not finished
/// within [`CACHE_WAIT`] (a watch that fails must not hold the reconciles: they read from the
/// API server meanwhile).
async fn ready<K>(cache: &Option<Store<K>>) -> Option<&Store<K>>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    let store = cache.as_ref()?;
    match tokio::time::timeout(CACHE_WAIT, listed(store)).await {
        Ok(true) => Some(store),
        _ => {
            tracing::warn!(
                kind = %K::kind(&K::DynamicType::default()),
                "the watch cache has not listed yet; reading from the API server"
            );
            None
        }
    }
}

/// Where the worker pods of a namespace are read for the concurrency limit.
pub(super) enum PodListing {
    Cache(Store<Pod>),
    Listed(Listed),
}

impl PodListing {
    /// The worker pods of `ns`, (name, holds a slot).
    pub(super) fn read(&self, ns: &str) -> Listed {
        match self {
            PodListing::Cache(store) => store
                .state()
                .iter()
                .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
                .map(|p| (p.name_any(), holds_slot(p)))
                .collect(),
            PodListing::Listed(l) => l.clone(),
        }
    }
}

/// A worker pod's state as the reconcile reads it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum WorkerState {
    /// No such pod.
    Missing,
    /// The pod exists and has not ended; `running`: its phase is `Running`.
    Active { running: bool },
    /// The pod ended (`Succeeded` or `Failed`): its worker container's exit code and
    /// termination message, when the container's termination is recorded.
    Ended {
        exit_code: Option<i32>,
        message: Option<String>,
    },
}

impl WorkerState {
    pub(super) fn of(pod: Option<&Pod>) -> Self {
        let Some(pod) = pod else {
            return WorkerState::Missing;
        };
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref());
        if !matches!(phase, Some("Succeeded" | "Failed")) {
            return WorkerState::Active {
                running: phase == Some("Running"),
            };
        }
        let terminated = status
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.name == "worker"))
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.terminated.as_ref());
        WorkerState::Ended {
            exit_code: terminated.map(|t| t.exit_code),
            message: terminated.and_then(|t| t.message.clone()),
        }
    }

    /// Whether the pod can no longer publish (ended or gone).
    pub(super) fn ended(&self) -> bool {
        !matches!(self, WorkerState::Active { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::{self, store::Writer};
    use kube::runtime::watcher;

    /// Reconciles started together at start-up all wait for the same cache's first list; each
    /// reads it soon after it is listed, not when its wait runs out.
    #[tokio::test(start_paused = true)]
    async fn every_reconcile_waiting_for_a_cache_reads_it_soon_after_it_is_listed() {
        let (store, mut writer): (Store<Pod>, Writer<Pod>) = reflector::store();
        let cache = Some(store);
        let waits: Vec<_> = (0..3)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move {
                    let listed = ready(&cache).await.is_some();
                    (listed, tokio::time::Instant::now())
                })
            })
            .collect();
        tokio::task::yield_now().await;
        let at = tokio::time::Instant::now();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        for w in waits {
            let (listed, when) = w.await.unwrap();
            assert!(listed, "a waiter fell back to the API server");
            let late = when - at;
            assert!(
                late < CACHE_WAIT / 4,
                "a waiter read the cache {late:?} after it was listed"
            );
        }
    }
}
