//! Which ToolServers a Workflow in a namespace may use, and by which name: the one rule the
//! tool catalog (`GET /v1/tools`) applies, and what a run's tool resolution must agree with.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use openwop_crds::ToolServer;
use openwop_crds::toolserver::NamespacesFrom;

use crate::reasons::ConditionType;

/// Whether `ts`'s `Ready` condition is True for its current generation's listing (a server
/// not Ready offers no tools).
pub fn is_ready(ts: &ToolServer) -> bool {
    ts.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == ConditionType::Ready.as_str() && c.status == "True")
    })
}

/// Whether deciding [`usable_in`] for `namespace` needs its labels: some Ready server of
/// another namespace admits namespaces by selector.
pub fn needs_labels(namespace: &str, servers: &[Arc<ToolServer>]) -> bool {
    servers.iter().any(|ts| {
        ts.namespace().as_deref() != Some(namespace)
            && is_ready(ts)
            && ts
                .spec
                .allowed_namespaces
                .as_ref()
                .is_some_and(|a| a.from == NamespacesFrom::Selector)
    })
}

/// The Ready ToolServers a Workflow in `namespace` (labels `labels`) may use, sorted by the
/// name it uses for them (`metadata.name`). Two admitted servers of one name: the
/// namespace's own wins, else the one of the first namespace by name; the other is not
/// usable from here. A server whose selector cannot be evaluated admits nobody else.
pub fn usable_in<'a>(
    namespace: &str,
    labels: &BTreeMap<String, String>,
    servers: &'a [Arc<ToolServer>],
) -> Vec<&'a ToolServer> {
    let mut by_name: BTreeMap<String, &ToolServer> = BTreeMap::new();
    for ts in servers.iter().map(Arc::as_ref) {
        if !is_ready(ts) || ts.allows_namespace(namespace, labels) != Ok(true) {
            continue;
        }
        let rank = |t: &ToolServer| {
            let ns = t.namespace().unwrap_or_default();
            (ns != namespace, ns)
        };
        match by_name.get(&ts.name_any()) {
            Some(held) if rank(held) <= rank(ts) => {}
            _ => {
                by_name.insert(ts.name_any(), ts);
            }
        }
    }
    by_name.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn server(ns: &str, name: &str, allowed: serde_json::Value, ready: &str) -> Arc<ToolServer> {
        let mut spec = json!({"url": "http://s.example/mcp"});
        if !allowed.is_null() {
            spec["allowedNamespaces"] = allowed;
        }
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "openwop.dev/v1alpha1", "kind": "ToolServer",
                "metadata": {"name": name, "namespace": ns},
                "spec": spec,
                "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "Listed",
                    "message": "", "lastTransitionTime": "2025-06-15T15:06:40Z"}]}
            }))
            .unwrap(),
        )
    }

    fn names(v: &[&ToolServer]) -> Vec<String> {
        v.iter()
            .map(|t| format!("{}/{}", t.namespace().unwrap(), t.name_any()))
            .collect()
    }

    #[test]
    fn own_namespace_first_then_shared_and_never_not_ready() {
        let servers = vec![
            server("shared", "search", json!({"from": "All"}), "True"),
            server("team-a", "search", json!(null), "True"),
            server("shared", "tickets", json!({"from": "All"}), "True"),
            server("other", "private", json!(null), "True"),
            server("team-a", "down", json!(null), "False"),
            server(
                "labs",
                "picky",
                json!({"from": "Selector", "selector": {"matchLabels": {"tier": "gold"}}}),
                "True",
            ),
        ];
        let none = BTreeMap::new();
        assert_eq!(
            names(&usable_in("team-a", &none, &servers)),
            ["team-a/search", "shared/tickets"]
        );
        assert!(needs_labels("team-a", &servers));
        let gold = BTreeMap::from([("tier".to_owned(), "gold".to_owned())]);
        assert_eq!(
            names(&usable_in("team-b", &gold, &servers)),
            ["labs/picky", "shared/search", "shared/tickets"]
        );
        assert!(!needs_labels("labs", &servers[5..]));
    }
}
