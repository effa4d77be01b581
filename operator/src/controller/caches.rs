//! The watch caches the Run reconciler reads instead of GETs: worker pods, snapshot
//! ConfigMaps (their metadata only), Workflows, the worker ServiceAccounts and the Runs
//! themselves. The binary feeds them ([`CacheWriters`]; the Runs and Workflows come from the
//! process's one watch of each, [`super::Feed`], shared with the REST API); the pod and
//! Workflow caches are fed by the same streams that trigger Run reconciles, so a reconcile
//! never sees a cache older than what triggered it. Without a cache (`None`, the reconcile
//! tests) a read goes to the API server.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Pod, PodStatus, ServiceAccount};
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use openwop_crds::{Run, RunPhase, Workflow};

use crate::names::pod_name;
use crate::reasons::{ConditionType, Reason};

/// Read sides of the caches; `None` reads from the API server.
#[derive(Default, Clone)]
pub struct Caches {
    /// Worker pods (labels `component=worker`, `managed-by`), as [`slim_pod`] keeps them.
    pub pods: Option<Store<Pod>>,
    /// Snapshot ConfigMaps (the worker pods' labels), metadata only: a start reads whether
    /// the snapshot exists, its owner and the Workflow it froze
    /// (`openwop.dev/snapshot-workflow`); the snapshot itself (a whole workflow and the run's
    /// inputs, the largest part of a run in memory) is read from the API server where needed.
    pub snapshots: Option<Store<PartialObjectMeta<ConfigMap>>>,
    pub workflows: Option<Store<Workflow>>,
    /// The worker ServiceAccount (`worker.serviceAccountName`) of every namespace.
    pub service_accounts: Option<Store<ServiceAccount>>,
    /// This instance's Runs (the queue order of [`queued_ahead`]).
    pub runs: Option<Store<Run>>,
}

/// Write sides of the caches the Run controller alone reads, for the binary's watches.
pub struct CacheWriters {
    pub pods: Writer<Pod>,
    pub snapshots: Writer<PartialObjectMeta<ConfigMap>>,
    pub service_accounts: Writer<ServiceAccount>,
}

impl Caches {
    /// The process's Run and Workflow stores (also the REST API's), empty caches of the
    /// rest, and their writers.
    pub fn new(runs: Store<Run>, workflows: Store<Workflow>) -> (Caches, CacheWriters) {
        let (pods, pods_w) = reflector::store();
        let (snapshots, snapshots_w) = reflector::store();
        let (service_accounts, sas_w) = reflector::store();
        (
            Caches {
                pods: Some(pods),
                snapshots: Some(snapshots),
                workflows: Some(workflows),
                service_accounts: Some(service_accounts),
                runs: Some(runs),
            },
            CacheWriters {
                pods: pods_w,
                snapshots: snapshots_w,
                service_accounts: sas_w,
            },
        )
    }
}

/// Resolves once `store` holds its watch's first complete list; `false` if its writer is gone.
///
/// Every wait for a cache's first list goes through here, never a bare
/// `Store::wait_until_ready`: that future wakes only the last of several tasks waiting at once
/// (one waker inside kube's `DelayedInit`), and kube's controller runners wait on the same
/// stores. An operator started before its CRDs were served once had its controllers' feed
/// waiting forever that way. Asking again every slice bounds a lost wake-up to one slice.
pub(super) async fn listed<K>(store: &Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    const SLICE: std::time::Duration = std::time::Duration::from_millis(50);
    loop {
        if let Ok(writer) = tokio::time::timeout(SLICE, store.wait_until_ready()).await {
            return writer.is_ok();
        }
    }
}

/// What the pod cache keeps of a worker pod: what its readers use — the metadata (name,
/// owner, deletion; [`super::triggers::slim`] already dropped managedFields), the phase and the worker
/// container's termination ([`super::state::WorkerState`], [`holds_slot`],
/// [`super::pod_key`], [`pod_triggers`]). The spec (the worker's whole environment, its
/// volumes) and the rest of the status were most of a cached pod, held for every run whose
/// pod has not been deleted yet.
pub fn slim_pod(p: &mut Pod) {
    super::triggers::slim(p);
    p.spec = None;
    if let Some(st) = p.status.take() {
        p.status = Some(PodStatus {
            phase: st.phase,
            container_statuses: st.container_statuses.map(|cs| {
                cs.into_iter()
                    .filter(|c| c.name == "worker")
                    .map(|c| ContainerStatus {
                        name: c.name,
                        state: c.state,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        });
    }
}

/// Per Run (uid): the resourceVersion its last write by this reconciler (the status write, or
/// the finalizer patch of a new Run) replaced, and the one that write produced. A reconcile
/// of the replaced copy would act on a status the reconciler already changed (starting a
/// worker it started, writing a status that fails its precondition): skipped. The produced
/// copy is what that reconcile acted on and wrote, so neither it nor the replaced copy
/// triggers a reconcile of its own ([`super::triggers::changes`]): the reconcile that wrote
/// it returned its next step already.
#[derive(Default)]
pub struct Superseded(Mutex<HashMap<String, (String, Option<String>)>>);

impl Superseded {
    /// A status write replaced `run`'s copy at `rv` with the copy at `written`.
    pub(super) fn record(&self, run: &Run, rv: &str, written: Option<String>) {
        if let Some(uid) = run.uid() {
            let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
            m.insert(uid, (rv.to_owned(), written));
        }
    }

    /// Whether `run` is a copy a status write of this reconciler already replaced; a newer
    /// copy forgets the entry.
    pub(super) fn is_stale(&self, run: &Run) -> bool {
        let (Some(uid), Some(rv)) = (run.uid(), run.resource_version()) else {
            return false;
        };
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match m.get(&uid) {
            Some((old, _)) if *old == rv => true,
            Some(_) => {
                m.remove(&uid);
                false
            }
            None => false,
        }
    }

    /// Whether `run` is the copy this reconciler's last write of it produced, or the copy that
    /// write replaced (a reconcile acted on both: neither asks for another; e.g. the copy the
    /// finalizer patch produced, which the same reconcile's status write replaced).
    pub fn is_ours(&self, run: &Run) -> bool {
        let (Some(uid), Some(rv)) = (run.uid(), run.resource_version()) else {
            return false;
        };
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&uid).is_some_and(|(replaced, written)| {
            *replaced == rv || written.as_deref() == Some(rv.as_str())
        })
    }

    /// The Run is gone.
    pub(super) fn forget(&self, run: &Run) {
        if let Some(uid) = run.uid() {
            let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
            m.remove(&uid);
        }
    }
}

/// Whether a worker pod holds one of its namespace's slots: it has not finished (a pod being
/// deleted may still run its worker, so it holds its slot until it is gone).
pub(super) fn holds_slot(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        None | Some("Pending" | "Running")
    )
}

/// Queue order: creation time, then name (creation times have one-second resolution).
fn queue_order(a: &Run, b: &Run) -> Ordering {
    let key = |r: &Run| {
        (
            r.metadata.creation_timestamp.clone().map(|t| t.0),
            r.name_any(),
        )
    };
    key(a).cmp(&key(b))
}

/// Whether `run` waits for a worker slot: no worker, not yet started or queued, and nothing
/// else holding it back (a missing or invalid Workflow, a refused pod, a crash backoff, a
/// wait). Runs that wait for a slot start in creation order.
fn waits_for_slot(run: &Run) -> bool {
    let Some(st) = run.status.as_ref() else {
        return true;
    };
    let blocked = st.conditions.iter().any(|c| {
        (c.type_ == ConditionType::Ready.as_str() && c.status == "False")
            || (c.type_ == ConditionType::Scheduled.as_str()
                && c.status == "False"
                && c.reason != Reason::Queued.as_str())
    });
    st.worker_pod.is_none()
        && matches!(st.phase, None | Some(RunPhase::Pending))
        && st.retry_after.is_none()
        && !blocked
        && run.spec.cancel != Some(true)
}

/// Whether `run` was queued: `Scheduled=False Queued`.
fn queued(run: &Run) -> bool {
    run.status.as_ref().is_some_and(|st| {
        st.conditions.iter().any(|c| {
            c.type_ == ConditionType::Scheduled.as_str()
                && c.status == "False"
                && c.reason == Reason::Queued.as_str()
        })
    })
}

/// The runs of `run`'s namespace that wait for a slot and were created before it; a run
/// whose next worker pod already holds a slot (`counted`: being created, or created and its
/// status not written yet) is starting, not waiting.
pub(super) fn queued_ahead(runs: &Store<Run>, run: &Run, counted: &dyn Fn(&str) -> bool) -> usize {
    let ns = run.namespace();
    runs.state()
        .iter()
        .filter(|r| r.namespace() == ns && r.uid() != run.uid())
        .filter(|r| queue_order(r, run) == Ordering::Less && waits_for_slot(r))
        .filter(|r| {
            let attempt = r.status.as_ref().and_then(|s| s.attempts).unwrap_or(0) + 1;
            !counted(&pod_name(&r.name_any(), attempt))
        })
        .count()
}

/// When a worker pod of namespace `ns` frees its slot: the oldest queued runs (`Scheduled=False
/// Queued`), as many as slots are free (`limit` less the unfinished worker pods), to be
/// reconciled now instead of at their next look at the queue. Runs not queued yet are
/// reconciled anyway (their own creation triggers it).
pub fn next_in_queue(
    runs: &Store<Run>,
    pods: &Store<Pod>,
    ns: &str,
    limit: usize,
) -> Vec<ObjectRef<Run>> {
    let active = pods
        .state()
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(ns) && holds_slot(p))
        .count();
    let free = limit.saturating_sub(active);
    if free == 0 {
        return vec![];
    }
    let mut waiting: Vec<_> = runs
        .state()
        .into_iter()
        .filter(|r| r.namespace().as_deref() == Some(ns) && queued(r) && waits_for_slot(r))
        .collect();
    waiting.sort_by(|a, b| queue_order(a, b));
    waiting
        .iter()
        .take(free)
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

/// Whether `run` ended and its ending is recorded (completion time, the log's terminal
/// event): what is left are its TTLs, which its last reconcile scheduled; a change of its
/// worker pod (its exit seen after the run's terminal event, its deletion) asks for nothing.
fn settled(run: &Run) -> bool {
    run.status.as_ref().is_some_and(|st| {
        st.phase.is_some_and(RunPhase::is_terminal)
            && st.completion_time.is_some()
            && st.terminal_event.is_some()
    })
}

/// The Runs a worker pod's change concerns: its own Run unless it is [`settled`], and when
/// the pod frees its slot (finished or being deleted) the next runs of its namespace's queue
/// ([`next_in_queue`]).
pub fn pod_triggers(
    runs: &Store<Run>,
    pods: &Store<Pod>,
    limit: usize,
    pod: &Pod,
) -> Vec<ObjectRef<Run>> {
    let ns = pod.namespace().unwrap_or_default();
    let mut refs: Vec<ObjectRef<Run>> = pod
        .owner_references()
        .iter()
        .filter(|o| o.controller == Some(true) && o.kind == "Run")
        .map(|o| ObjectRef::new(&o.name).within(&ns))
        .filter(|r| !runs.get(r).is_some_and(|run| settled(&run)))
        .collect();
    if !holds_slot(pod) || pod.metadata.deletion_timestamp.is_some() {
        refs.extend(next_in_queue(runs, pods, &ns, limit));
    }
    refs
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher;
    use serde_json::json;

    fn run(name: &str, created: &str, status: serde_json::Value) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": name, "namespace": "ns", "uid": name,
                         "creationTimestamp": created},
            "spec": {"workflowRef": {"name": "w"}},
            "status": status}))
        .unwrap()
    }

    fn queued() -> serde_json::Value {
        json!({"phase": "pending", "conditions": [
            {"type": "Ready", "status": "True", "reason": "Snapshotted", "message": "",
             "lastTransitionTime": "2025-06-15T15:00:00Z"},
            {"type": "Scheduled", "status": "False", "reason": "Queued", "message": "",
             "lastTransitionTime": "2025-06-15T15:00:00Z"}]})
    }

    fn store<K>(objs: Vec<K>) -> Store<K>
    where
        K: kube::Resource + Clone + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        let (s, mut w) = reflector::store();
        w.apply_watcher_event(&watcher::Event::Init);
        for o in objs {
            w.apply_watcher_event(&watcher::Event::InitApply(o));
        }
        w.apply_watcher_event(&watcher::Event::InitDone);
        s
    }

    #[test]
    fn the_pod_cache_keeps_what_its_readers_read_and_drops_the_spec() {
        let full: Pod = serde_json::from_value(json!({
            "metadata": {"name": "a-w1", "namespace": "ns", "uid": "p",
                         "deletionTimestamp": "2025-06-15T15:00:00Z",
                         "managedFields": [{"manager": "kubelet"}],
                         "ownerReferences": [{"apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
                                              "name": "a", "uid": "a", "controller": true}]},
            "spec": {"containers": [{"name": "worker", "image": "w",
                                     "env": [{"name": "OPENWOP_RUN", "value": "x".repeat(4096)}]}]},
            "status": {"phase": "Failed", "podIP": "10.0.0.1",
                       "conditions": [{"type": "Ready", "status": "False"}],
                       "containerStatuses": [
                           {"name": "worker", "image": "w", "imageID": "", "ready": false,
                            "restartCount": 0, "state": {"terminated": {
                                "exitCode": 3, "message": "boom"}}},
                           {"name": "sidecar", "image": "s", "imageID": "", "ready": false,
                            "restartCount": 0}]}}))
        .unwrap();
        let mut slim = full.clone();
        slim_pod(&mut slim);
        assert_eq!(slim.spec, None);
        assert_eq!(slim.metadata.managed_fields, None);
        assert_eq!(
            serde_json::to_value(&slim.status).unwrap(),
            json!({"phase": "Failed", "containerStatuses": [
                {"name": "worker", "image": "", "imageID": "", "ready": false,
                 "restartCount": 0, "state": {"terminated": {"exitCode": 3, "message": "boom"}}}]})
        );
        // Every reader of the pod cache reads the same from the slim copy.
        use super::super::state::WorkerState;
        assert_eq!(WorkerState::of(Some(&slim)), WorkerState::of(Some(&full)));
        assert_eq!(super::super::pod_key(&slim), super::super::pod_key(&full));
        assert_eq!(holds_slot(&slim), holds_slot(&full));
        assert_eq!(slim.owner_references(), full.owner_references());
        assert_eq!(
            slim.metadata.deletion_timestamp,
            full.metadata.deletion_timestamp
        );
        let (runs, pods) = (
            store(vec![run("a", "2025-06-15T15:00:00Z", json!(null))]),
            store(vec![slim.clone()]),
        );
        let names = |v: Vec<ObjectRef<Run>>| v.into_iter().map(|r| r.name).collect::<Vec<_>>();
        assert_eq!(
            names(pod_triggers(&runs, &pods, 1, &slim)),
            names(pod_triggers(&runs, &pods, 1, &full))
        );
    }

    #[test]
    fn a_copy_replaced_by_a_status_write_is_stale_until_a_newer_one_arrives() {
        let mut r = run("a", "2025-06-15T15:00:00Z", json!(null));
        r.metadata.resource_version = Some("10".into());
        let s = Superseded::default();
        assert!(!s.is_stale(&r));
        s.record(&r, "10", Some("11".into()));
        assert!(s.is_stale(&r), "the cache has not caught up with the write");
        assert!(s.is_ours(&r), "the copy the write replaced");
        r.metadata.resource_version = Some("12".into());
        assert!(!s.is_ours(&r), "someone else's write");
        r.metadata.resource_version = Some("11".into());
        assert!(s.is_ours(&r), "the copy the write produced");
        assert!(!s.is_stale(&r));
        r.metadata.resource_version = Some("10".into());
        assert!(!s.is_stale(&r), "forgotten once a newer copy was seen");
        s.record(&r, "10", None);
        s.forget(&r);
        assert!(!s.is_stale(&r));
    }

    #[test]
    fn runs_wait_for_a_slot_in_creation_order_and_blocked_runs_do_not_hold_the_queue() {
        let t = |s: u32| format!("2025-06-15T15:00:{s:02}Z");
        let missing_wf = json!({"phase": "pending", "conditions": [
            {"type": "Ready", "status": "False", "reason": "WorkflowNotFound", "message": "",
             "lastTransitionTime": "2025-06-15T15:00:00Z"}]});
        let running = json!({"phase": "running", "workerPod": "a-w1"});
        let runs = vec![
            run("a", &t(0), running),
            run("b", &t(1), missing_wf),
            run("c", &t(2), queued()),
            run("d", &t(2), json!(null)),
            run("e", &t(3), queued()),
        ];
        let all = store(runs.clone());
        let none = |_: &str| false;
        assert_eq!(queued_ahead(&all, &runs[0], &none), 0);
        assert_eq!(
            queued_ahead(&all, &runs[2], &none),
            0,
            "b is blocked on its Workflow"
        );
        assert_eq!(
            queued_ahead(&all, &runs[3], &none),
            1,
            "same second: by name"
        );
        assert_eq!(queued_ahead(&all, &runs[4], &none), 2);
        let c_starting = |p: &str| p == "c-w1";
        assert_eq!(
            queued_ahead(&all, &runs[4], &c_starting),
            1,
            "c's pod holds a slot: it is starting"
        );
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "a-w1", "namespace": "ns"}, "status": {"phase": "Running"}}))
        .unwrap();
        let pods = store(vec![pod]);
        let names = |v: Vec<ObjectRef<Run>>| v.into_iter().map(|r| r.name).collect::<Vec<_>>();
        assert_eq!(
            names(next_in_queue(&all, &pods, "ns", 3)),
            ["c", "e"],
            "queued runs only: d is reconciled for its creation anyway"
        );
        assert!(
            next_in_queue(&all, &pods, "ns", 1).is_empty(),
            "no free slot"
        );
        assert!(next_in_queue(&all, &pods, "other", 3).is_empty());
    }

    #[test]
    fn a_pod_change_triggers_its_run_until_the_run_is_settled_and_the_queue_always() {
        let t = "2025-06-15T15:00:00Z";
        let ended = |terminal_event: Option<&str>| {
            json!({"phase": "completed", "workerPod": "a-w1", "completionTime": t,
                   "terminalEvent": terminal_event})
        };
        let finished: Pod = serde_json::from_value(json!({
            "metadata": {"name": "a-w1", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "openwop.dev/v1alpha1", "kind": "Run", "name": "a", "uid": "a",
                 "controller": true}]},
            "status": {"phase": "Succeeded"}}))
        .unwrap();
        let pods = store(vec![finished.clone()]);
        let names = |v: Vec<ObjectRef<Run>>| v.into_iter().map(|r| r.name).collect::<Vec<_>>();
        let recorded = store(vec![run("a", t, ended(Some("e9"))), run("b", t, queued())]);
        assert_eq!(
            names(pod_triggers(&recorded, &pods, 2, &finished)),
            ["b"],
            "a's ending is recorded: its pod's exit asks for nothing; the queue moves"
        );
        let unrecorded = store(vec![run("a", t, ended(None)), run("b", t, queued())]);
        assert_eq!(
            names(pod_triggers(&unrecorded, &pods, 2, &finished)),
            ["a", "b"],
            "a's terminal event is not recorded yet"
        );
    }
}
