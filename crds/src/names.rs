//! Names on Kubernetes objects: the labels, annotations and finalizer the operator, the CLI
//! and the tests read and write (one definition each), and the mapping between OpenWOP
//! workflow ids and Kubernetes object names.
//!
//! An OpenWOP id matches `^[a-z][a-z0-9_-]*$` (up to 128 characters); a Kubernetes object
//! name is a DNS subdomain (no `_`, must end with an alphanumeric). Tools that create a
//! `Workflow` from an OpenWOP definition use [`kubernetes_name_for`] for `metadata.name`
//! and keep the original id in `spec.id`; Runs may reference either.

use sha2::{Digest, Sha256};

/// `app.kubernetes.io/name` on every object the operator creates.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// The value of [`LABEL_NAME`].
pub const APP_NAME: &str = "openwop";
/// `app.kubernetes.io/component`: what an object is for ([`COMPONENT_WORKER`], ...).
pub const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
/// `app.kubernetes.io/managed-by`: [`MANAGER`] on everything the operator creates.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The operator: the value of [`LABEL_MANAGED_BY`] and its server-side-apply field manager.
pub const MANAGER: &str = "openwop-operator";
/// Component of worker pods and run snapshots.
pub const COMPONENT_WORKER: &str = "worker";
/// Component of the operator's pods (chart).
pub const COMPONENT_OPERATOR: &str = "operator";
/// Component of the discovery ConfigMap.
pub const COMPONENT_DISCOVERY: &str = "discovery";
/// Component of the per-namespace copies of the NATS credentials.
pub const COMPONENT_NATS_CREDENTIALS: &str = "nats-credentials";
/// Label with the Run name (hashed when longer than a label value may be).
pub const LABEL_RUN: &str = "openwop.dev/run";
/// Label with the worker attempt number.
pub const LABEL_ATTEMPT: &str = "openwop.dev/attempt";
/// Label assigning a Workflow or Run to one operator instance (`instanceId`).
pub const LABEL_INSTANCE: &str = "openwop.dev/instance";
/// Annotation `"false"` on the discovery ConfigMap: an admin's version, left alone.
pub const ANNOTATION_MANAGED: &str = "openwop.dev/managed";
/// Annotation: who created the Run through the REST API.
pub const ANNOTATION_CREATED_BY: &str = "openwop.dev/created-by";
/// Annotation: `tags` of the creating REST request (JSON).
pub const ANNOTATION_TAGS: &str = "openwop.dev/tags";
/// Annotation: `metadata` of the creating REST request (JSON).
pub const ANNOTATION_METADATA: &str = "openwop.dev/metadata";
/// Annotation: `scopeId` of the creating REST request (opaque caller correlation, echoed).
pub const ANNOTATION_SCOPE_ID: &str = "openwop.dev/scope-id";
/// Label on a child Run (`core.subWorkflow`): the parent's runId.
pub const LABEL_PARENT_RUN: &str = "openwop.dev/parent-run";
/// Annotation on a child Run: the parent's node that created it.
pub const ANNOTATION_PARENT_NODE: &str = "openwop.dev/parent-node";
/// Annotation on a child Run: how deep it is nested (1 for a root run's child).
pub const ANNOTATION_SUB_WORKFLOW_DEPTH: &str = "openwop.dev/sub-workflow-depth";
/// Annotation on a Run cancelled for a reason other than its own `spec.cancel`
/// (`parent-cancelled`): the `reason` its `run.cancelled` carries.
pub const ANNOTATION_CANCEL_REASON: &str = "openwop.dev/cancel-reason";
/// Annotation on a Run's snapshot ConfigMap: the Workflow the snapshot froze (the operator's
/// snapshot cache holds metadata only; a retried reconcile reads the name from here).
pub const ANNOTATION_SNAPSHOT_WORKFLOW: &str = "openwop.dev/snapshot-workflow";
/// Finalizer that Runs of earlier releases carry (new Runs get none): the operator still
/// cleans up and releases such a Run when it is deleted.
pub const RUN_FINALIZER: &str = "openwop.dev/cleanup";

/// Longest object name we generate (DNS subdomain limit).
const MAX_NAME: usize = 253;

/// A valid Kubernetes object name for an OpenWOP workflow id.
///
/// Ids that already are valid names are returned unchanged. Otherwise the id is lowercased,
/// every character outside `[a-z0-9-]` becomes `-`, leading/trailing `-` are trimmed, and a
/// suffix of 10 hex digits of the id's SHA-256 is appended so that distinct ids (`a_b`, `a-b`)
/// never map to the same name.
pub fn kubernetes_name_for(id: &str) -> String {
    if is_dns_subdomain_label_chars(id) {
        return id.to_owned();
    }
    let mut base: String = id
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    base = base.trim_matches('-').to_owned();
    let digest = hex::encode(Sha256::digest(id.as_bytes()));
    let suffix = &digest[..10];
    let room = MAX_NAME - suffix.len() - 1;
    if base.len() > room {
        base.truncate(room);
        base = base.trim_end_matches('-').to_owned();
    }
    if base.is_empty() {
        format!("wf-{suffix}")
    } else {
        format!("{base}-{suffix}")
    }
}

/// True when `s` is a non-empty lowercase alphanumeric/`-` string starting and ending with an
/// alphanumeric, at most 253 characters (a valid name with no dots).
fn is_dns_subdomain_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(name: &str) -> bool {
        is_dns_subdomain_label_chars(name)
    }

    #[test]
    fn valid_ids_are_kept() {
        assert_eq!(kubernetes_name_for("support-triage"), "support-triage");
        assert_eq!(
            kubernetes_name_for("conformance-mock-1"),
            "conformance-mock-1"
        );
    }

    #[test]
    fn underscores_and_trailing_dashes_are_mapped_and_disambiguated() {
        let a = kubernetes_name_for("a_b");
        let b = kubernetes_name_for("a-b");
        assert!(a.starts_with("a-b-"), "{a}");
        assert_eq!(b, "a-b");
        assert_ne!(a, b);
        assert!(valid(&a));
        let t = kubernetes_name_for("trailing_");
        assert!(t.starts_with("trailing-") && valid(&t), "{t}");
        assert!(valid(&kubernetes_name_for("___")));
    }

    #[test]
    fn long_ids_fit_and_stay_distinct() {
        let long1 = format!("x{}_1", "a".repeat(300));
        let long2 = format!("x{}_2", "a".repeat(300));
        let n1 = kubernetes_name_for(&long1);
        let n2 = kubernetes_name_for(&long2);
        assert!(n1.len() <= MAX_NAME && valid(&n1));
        assert_ne!(n1, n2);
    }

    #[test]
    fn mapping_is_deterministic() {
        assert_eq!(
            kubernetes_name_for("my_flow"),
            kubernetes_name_for("my_flow")
        );
    }
}
