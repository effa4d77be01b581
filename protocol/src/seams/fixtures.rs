//! The official conformance fixtures (FX, `conformance/fixtures/*.json` of the spec) this host
//! installs verbatim when its seams are on: the chart's `fixtures/` directory holds the JSON
//! (its template makes each one a Workflow whose spec is the file), and this module embeds
//! the same files so discovery advertises a fixture only when this build registers every node
//! type it uses — a fixture whose type lands later (e.g. `core.delay`) is advertised from then
//! on without a list to edit.

use std::collections::BTreeSet;

use serde_json::Value;

macro_rules! fixtures {
    ($($id:literal),* $(,)?) => {
        /// `(fixture id, JSON text)` of every official fixture the chart installs.
        pub const OFFICIAL: &[(&str, &str)] = &[$((
            $id,
            include_str!(concat!("../../../charts/openwop/fixtures/", $id, ".json")),
        )),*];
    };
}

fixtures!(
    "conformance-approval",
    "conformance-approval-reject-routed",
    "conformance-approval-timeout",
    "conformance-approval-timeout-approve",
    "conformance-cancellable",
    "conformance-cap-breach",
    "conformance-clarification",
    "conformance-delay",
    "conformance-failure",
    "conformance-idempotent",
    "conformance-identity",
    "conformance-multi-node",
    "conformance-noop",
    "conformance-subworkflow-child",
    "conformance-subworkflow-input-mapping",
    "conformance-subworkflow-parent",
);

/// The definition of the official fixture `id`.
pub fn definition(id: &str) -> Option<Value> {
    let (_, text) = OFFICIAL.iter().find(|(i, _)| *i == id)?;
    serde_json::from_str(text).ok()
}

/// The node types the official fixture `id` uses.
pub fn node_types(id: &str) -> Option<BTreeSet<String>> {
    let def = definition(id)?;
    Some(
        def.get("nodes")?
            .as_array()?
            .iter()
            .filter_map(|n| n.get("typeId")?.as_str().map(str::to_owned))
            .collect(),
    )
}

/// The fixture ids of `ids` this host can run: an official fixture only when `registered`
/// holds for every node type it uses; any other id (the host's own fixtures) as given.
pub fn runnable(ids: &[String], registered: impl Fn(&str) -> bool) -> Vec<String> {
    ids.iter()
        .filter(|id| node_types(id).is_none_or(|types| types.iter().all(|t| registered(t))))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier1::Tier1Posture;
    use crate::workflow::WorkflowDefinition;
    use crate::workflow_check::{CheckOptions, NodeRegistry, ProblemCode, check_workflow};

    /// Every fixture decodes into the workflow definition and back unchanged (it is served
    /// verbatim) and passes the Workflow check, except for node types this build does not
    /// register — and exactly those fixtures are left out of discovery.
    #[test]
    fn fixtures_decode_unchanged_and_pass_the_workflow_check() {
        let registry = NodeRegistry::builtin();
        let kinds = BTreeSet::new();
        let opts = CheckOptions {
            registry: &registry,
            advertised_kinds: &kinds,
            tier1: Tier1Posture::Warn,
            mock_agent_opt_in: false,
        };
        let ids: Vec<String> = OFFICIAL.iter().map(|(id, _)| (*id).to_owned()).collect();
        let advertised = runnable(&ids, |t| registry.get(t).is_some());
        for (id, text) in OFFICIAL {
            let v: Value = serde_json::from_str(text).unwrap();
            assert_eq!(v["id"], *id, "the file name is the fixture id");
            let def: WorkflowDefinition = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(serde_json::to_value(&def).unwrap(), v, "{id} round trip");
            let report = check_workflow(&v, &opts);
            let missing: Vec<&str> = report
                .errors
                .iter()
                .filter(|p| p.code == ProblemCode::UnknownTypeId)
                .filter_map(|p| p.node_id.as_deref())
                .collect();
            assert_eq!(
                report.errors.len(),
                missing.len(),
                "{id}: {:?}",
                report.errors
            );
            assert_eq!(
                advertised.contains(&(*id).to_owned()),
                missing.is_empty(),
                "{id} is advertised exactly when it can run"
            );
        }
        for id in [
            "conformance-noop",
            "conformance-identity",
            "conformance-failure",
            "conformance-approval",
            "conformance-clarification",
            "conformance-cap-breach",
            "conformance-multi-node",
            "conformance-idempotent",
        ] {
            assert!(advertised.contains(&id.to_owned()), "{id}");
        }
    }

    #[test]
    fn runnable_keeps_the_hosts_own_fixtures_and_drops_unregistered_types() {
        let ids = vec![
            "conformance-delay".to_owned(),
            "conformance-agent-reasoning".to_owned(),
        ];
        assert_eq!(runnable(&ids, |_| true), ids);
        assert_eq!(
            runnable(&ids, |t| t != "core.delay"),
            ["conformance-agent-reasoning"]
        );
        assert_eq!(
            node_types("conformance-multi-node").unwrap(),
            BTreeSet::from(["core.noop".to_owned()])
        );
    }
}
