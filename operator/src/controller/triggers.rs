//! Which watch events start a Run reconcile, and what the watch caches keep of an object.
//!
//! A Run's status is written at every event its worker publishes (the event consumer), and a
//! worker pod changes several times on its way to Running (bound, container created, …): at
//! 200 Runs at once that was 10 reconciles per run, most of them looking at a change the
//! reconcile does not act on. [`changes`] passes an object on only when the part of it a
//! reconcile acts on ([`run_key`], [`pod_key`]) differs from the last one passed, and never
//! a Run copy the reconciler's own write produced (its finalizer patch, its status write) or
//! already replaced, unless it set a phase the next reconcile acts on (the reconcile that
//! wrote it decided its next step already: a requeue, or the change it waits for; see
//! `RunReconcile::act`); the caches (the reflectors
//! before it) still see every change, so a reconcile reads the newest copy.
//!
//! [`slim`] drops what no reader of the caches uses (managedFields, kubectl's
//! last-applied-configuration) before an object is stored: the reflector stores hold one copy
//! of every Run, worker pod and snapshot.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::runtime::watcher;
use openwop_crds::Run;

/// What of a Run its reconcile acts on: spec (generation), deletion, finalizers, labels and
/// annotations, and the status but the progress the event consumer records at each event
/// (`lastSequence`, `events`, `currentNode`, `runningNodes`): a reconcile reads those when it
/// runs for another reason, none of them alone asks for one.
pub fn run_key(run: &Run) -> Option<u64> {
    let m = &run.metadata;
    let mut h = DefaultHasher::new();
    (
        &m.uid,
        m.generation,
        m.deletion_timestamp.is_some(),
        &m.finalizers,
        &m.labels,
        &m.annotations,
    )
        .hash(&mut h);
    if let Some(st) = &run.status {
        let mut st = st.clone();
        st.last_sequence = None;
        st.events = None;
        st.current_node = None;
        st.running_nodes.clear();
        // The status has no Hash (floats in outputs); its JSON is its identity.
        serde_json::to_string(&st).unwrap_or_default().hash(&mut h);
    }
    Some(h.finish())
}

/// What of a worker pod a reconcile acts on ([`super::state::WorkerState`], the slot it
/// holds): its end (phase, the worker container's exit code and message) and its deletion.
/// `None` while it is neither ended nor being deleted: a live pod's scheduling, container
/// creation and start ask for nothing (the run's phase is `running` from the pod's creation,
/// and the event consumer records the rest).
pub fn pod_key(pod: &Pod) -> Option<u64> {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref());
    let ended = matches!(phase, Some("Succeeded" | "Failed"));
    let deleting = pod.metadata.deletion_timestamp.is_some();
    if !ended && !deleting {
        return None;
    }
    let terminated = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "worker"))
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref())
        .map(|t| (t.exit_code, t.message.clone()));
    let mut h = DefaultHasher::new();
    (&pod.metadata.uid, phase, deleting, terminated).hash(&mut h);
    Some(h.finish())
}

/// The objects of a watch stream whose `key` changed since the last one passed for them
/// (first sight passes); a `None` key never passes. `own`: a copy this reconciler's own
/// write produced or replaced (the reconcile that wrote it has acted on it already):
/// remembered, not passed. `deletes`: a deleted object passes too (a deleted worker pod frees its slot for
/// the queued runs), and is forgotten.
pub fn changes<K, S>(
    events: S,
    key: fn(&K) -> Option<u64>,
    own: impl Fn(&K) -> bool + Send + 'static,
    deletes: bool,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let mut seen: HashMap<String, u64> = HashMap::new();
    let id = |o: &K| {
        let m = o.meta();
        m.uid.clone().unwrap_or_else(|| {
            format!(
                "{}/{}",
                m.namespace.as_deref().unwrap_or(""),
                m.name.as_deref().unwrap_or("")
            )
        })
    };
    events.filter_map(move |ev| {
        let out = match ev {
            Err(e) => Some(Err(e)),
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => match key(&o) {
                None => None,
                Some(k) => {
                    let changed = seen.insert(id(&o), k) != Some(k);
                    (changed && !own(&o)).then_some(Ok(o))
                }
            },
            Ok(watcher::Event::Delete(o)) => {
                seen.remove(&id(&o));
                deletes.then_some(Ok(o))
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
        };
        std::future::ready(out)
    })
}

/// kubectl's copy of the applied manifest: nothing in the operator reads it.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no reader of a watch cache uses before the object is stored.
pub fn slim<K: Resource>(o: &mut K) {
    let m = o.meta_mut();
    m.managed_fields = None;
    if let Some(a) = m.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;
    use serde_json::json;

    fn run(rv: &str, status: serde_json::Value) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "ns", "uid": "u", "generation": 1,
                         "resourceVersion": rv},
            "spec": {"workflowRef": {"name": "w"}},
            "status": status}))
        .unwrap()
    }

    fn pod(phase: &str, terminated: Option<i32>, deleting: bool) -> Pod {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "r-w1", "namespace": "ns", "uid": "p"},
            "status": {"phase": phase}}))
        .unwrap();
        if let Some(code) = terminated {
            p.status.as_mut().unwrap().container_statuses = Some(vec![
                serde_json::from_value(json!({"name": "worker", "image": "w", "imageID": "",
                    "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": code}}}))
                .unwrap(),
            ]);
        }
        if deleting {
            p.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        p
    }

    fn passed<K: Resource + Clone + Send + 'static>(
        events: Vec<watcher::Event<K>>,
        key: fn(&K) -> Option<u64>,
        own: impl Fn(&K) -> bool + Send + 'static,
        deletes: bool,
    ) -> usize {
        let s = changes(stream::iter(events.into_iter().map(Ok)), key, own, deletes);
        futures::executor::block_on(s.count())
    }

    fn none<K>(_: &K) -> bool {
        false
    }

    #[test]
    fn progress_writes_do_not_trigger_a_run_reconcile_and_phase_changes_do() {
        use watcher::Event::Apply;
        let progress = |rv, seq: u64| {
            run(
                rv,
                json!({"phase": "running", "workerPod": "r-w1", "lastSequence": seq,
                            "events": seq + 1, "currentNode": format!("n{seq}")}),
            )
        };
        let events = vec![
            Apply(run("1", json!(null))),
            Apply(progress("2", 1)),
            Apply(progress("3", 2)),
            Apply(progress("4", 3)),
            Apply(run(
                "5",
                json!({"phase": "completed", "workerPod": "r-w1", "lastSequence": 4}),
            )),
            Apply(run(
                "6",
                json!({"phase": "completed", "workerPod": "r-w1", "lastSequence": 4}),
            )),
        ];
        assert_eq!(
            passed(events.clone(), run_key, none, false),
            3,
            "created, running, completed; not the next two events' progress nor a resync"
        );
        let ours = |r: &Run| r.metadata.resource_version.as_deref() == Some("5");
        assert_eq!(
            passed(events, run_key, ours, false),
            2,
            "the completed copy is our own write's: remembered, not passed, and its resync neither"
        );
    }

    #[test]
    fn a_pod_triggers_at_its_phase_changes_its_deletion_and_its_termination() {
        use watcher::Event::{Apply, Delete};
        let events = vec![
            Apply(pod("Pending", None, false)),
            // bound, then its container created: still Pending
            Apply(pod("Pending", None, false)),
            Apply(pod("Pending", None, false)),
            Apply(pod("Running", None, false)),
            Apply(pod("Running", Some(0), false)),
            Apply(pod("Succeeded", Some(0), false)),
            Apply(pod("Succeeded", Some(0), true)),
            Delete(pod("Succeeded", Some(0), true)),
        ];
        assert_eq!(
            passed(events.clone(), pod_key, none, true),
            3,
            "Succeeded, deleting, deleted; not its life before it ended"
        );
        assert_eq!(
            passed(events, pod_key, none, false),
            2,
            "the delete only with deletes"
        );
    }

    #[test]
    fn slim_drops_managed_fields_and_the_last_applied_manifest_only() {
        let mut r = run("1", json!(null));
        r.metadata.managed_fields = Some(vec![Default::default()]);
        r.metadata.annotations = Some(
            [
                (LAST_APPLIED.to_owned(), "{}".to_owned()),
                ("keep".to_owned(), "v".to_owned()),
            ]
            .into(),
        );
        slim(&mut r);
        assert_eq!(r.metadata.managed_fields, None);
        assert_eq!(
            r.metadata
                .annotations
                .unwrap()
                .into_keys()
                .collect::<Vec<_>>(),
            ["keep"]
        );
    }
}
