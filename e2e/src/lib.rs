//! The local mini-cluster: the node agent (`openwop-node-agent`) and the helper tests use to
//! start or attach to the cluster (`cluster()`). See e2e/README.md.

pub mod agent;
pub mod cluster;
pub mod webhook_receiver;

pub use cluster::{Cluster, ClusterError, ClusterOptions, cluster, cluster_with};

/// A Role and RoleBinding (both named `name`) giving ServiceAccount `name` of the namespace
/// they are applied in what a team needs of the REST API (the Role of docs/rest-api.md): create,
/// follow, answer and cancel runs; read workflows.
pub fn rest_role(name: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: {name}}}\nrules:\n  - apiGroups: [openwop.dev]\n    resources: [runs]\n    verbs: [get, list, create, patch]\n  - apiGroups: [openwop.dev]\n    resources: [workflows]\n    verbs: [get, list]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {name}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {name}}}\nsubjects:\n  - {{kind: ServiceAccount, name: {name}}}\n"
    )
}

/// The holder of the operator's leader Lease (`openwop-operator`, the chart's default) in
/// namespace `ns`, if it has one: which replica leads.
pub async fn lease_holder(client: &kube::Client, ns: &str) -> Option<String> {
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), ns);
    leases
        .get_opt("openwop-operator")
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}
