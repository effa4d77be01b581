//! The names of what the operator creates for a run (worker pods, snapshot ConfigMaps, the
//! NATS credentials copy): object names, owner references and labels, and the label names
//! and field manager of `crds::names` they use. Pure functions of the Run.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use openwop_crds::Run;
use sha2::{Digest, Sha256};

pub use openwop_crds::names::{
    APP_NAME, COMPONENT_NATS_CREDENTIALS as NATS_CREDENTIALS_COMPONENT, COMPONENT_WORKER,
    LABEL_ATTEMPT, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_NAME, LABEL_RUN, MANAGER,
};

/// A label value (≤ 63 characters) identifying `name`.
pub fn label_value(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_owned();
    }
    let digest = hex::encode(Sha256::digest(name.as_bytes()));
    let head: String = name.chars().take(52).collect();
    let head = head.trim_end_matches(['-', '.']);
    format!("{head}-{}", &digest[..10])
}

/// Name of attempt `attempt` of the worker pod of `run` (≤ 63 characters).
pub fn pod_name(run: &str, attempt: u32) -> String {
    let suffix = format!("-w{attempt}");
    if run.len() + suffix.len() <= 63 {
        return format!("{run}{suffix}");
    }
    let digest = hex::encode(Sha256::digest(run.as_bytes()));
    let room = 63 - suffix.len() - 9;
    let head: String = run.chars().take(room).collect();
    let head = head.trim_end_matches(['-', '.']);
    format!("{head}-{}{suffix}", &digest[..8])
}

/// Name of the snapshot ConfigMap of `run`.
pub fn snapshot_name(run: &str) -> String {
    format!("{run}-snapshot")
}

/// The run's tool-credentials Secret: its ToolServers' header values, copied into the run's
/// namespace for the worker pod to mount (`controller::tools`).
pub fn tool_headers_secret_name(run: &str) -> String {
    format!("{run}-tool-headers")
}

/// Owner reference making `run` the controller of a child object.
pub fn owner_ref(run: &Run) -> OwnerReference {
    OwnerReference {
        api_version: Run::api_version(&()).into_owned(),
        kind: Run::kind(&()).into_owned(),
        name: run.name_any(),
        uid: run.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether `meta` is owned by this very Run object (its uid), not by a deleted Run of the
/// same name whose objects the garbage collector has not removed yet.
pub fn owned_by(meta: &ObjectMeta, run: &Run) -> bool {
    let uid = run.uid();
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| Some(&o.uid) == uid.as_ref())
}

/// Whether `meta` carries the labels of the objects this operator creates for runs (worker
/// pods, snapshot ConfigMaps): the ones [`worker_selector`] selects.
pub fn is_worker_object(meta: &ObjectMeta) -> bool {
    let labels = meta.labels.as_ref();
    let has = |k: &str, v: &str| labels.and_then(|l| l.get(k)).is_some_and(|x| x == v);
    has(LABEL_COMPONENT, COMPONENT_WORKER) && has(LABEL_MANAGED_BY, MANAGER)
}

/// Label selector of the worker pods and snapshot ConfigMaps this operator creates.
pub fn worker_selector() -> String {
    format!("{LABEL_COMPONENT}={COMPONENT_WORKER},{LABEL_MANAGED_BY}={MANAGER}")
}

/// Labels shared by every object created for `run`.
pub fn run_labels(run: &Run) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_RUN.into(), label_value(&run.name_any())),
        (LABEL_COMPONENT.into(), COMPONENT_WORKER.into()),
        (LABEL_MANAGED_BY.into(), MANAGER.into()),
        (LABEL_NAME.into(), APP_NAME.into()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_shortened_deterministically() {
        let long = "r".repeat(100);
        let p1 = pod_name(&long, 12);
        assert!(p1.len() <= 63 && p1.ends_with("-w12"), "{p1}");
        assert_eq!(p1, pod_name(&long, 12));
        assert_ne!(
            pod_name(&format!("{long}a"), 1),
            pod_name(&format!("{long}b"), 1)
        );
        assert!(label_value(&long).len() <= 63);
        assert_eq!(label_value("short"), "short");
    }
}
