//! The ToolServers a run's LLM nodes name (`tools[].server`, in `tools[].namespace` or the
//! run's own), resolved once, when the run's snapshot is built: each must exist and admit
//! the run's namespace (`allowedNamespaces`). The worker reaches them as the snapshot's
//! `toolServers`; their `headersFrom` values are copied into the run's tool-credentials
//! Secret (owned by the Run, removed with it), which the worker pod mounts — a pod mounts
//! only Secrets of its own namespace, and a shared ToolServer may live in another. A run
//! whose servers cannot be resolved waits (`Ready=False`, `ToolServerUnavailable`) and is
//! tried again: the admin may be about to create the server or its Secret.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use openwop_crds::names::MANAGER;
use openwop_crds::{Run, ToolServer, Workflow, WorkflowSpec};
use openwop_protocol::run::env::TOOL_HEADERS_DIR;
use openwop_protocol::run::nodes::tools_of;
use openwop_protocol::run::snapshot::{SecretMount, ToolServerMount};

use super::context::{Context, Error};
use crate::names::{owner_ref, run_labels, tool_headers_secret_name};

/// What the snapshot of a run needs of its ToolServers.
#[derive(Debug, PartialEq)]
pub(super) enum Resolution {
    /// Every named server, and the header values to copy (`None`: no server has headers).
    Ready {
        mounts: Vec<ToolServerMount>,
        headers: Option<BTreeMap<String, ByteString>>,
    },
    /// Why the run cannot start yet (safe to show: names, never a value).
    Unavailable(String),
}

/// The ToolServers (namespace, name) the nodes of a Workflow (its `spec`) call — LLM nodes'
/// `tools`, `core.mcp.toolCall` nodes — for a run in `run_ns`. A node whose tool members do
/// not read names none here: the Workflow's check refused it already.
pub(super) fn named_servers(workflow: &WorkflowSpec, run_ns: &str) -> BTreeSet<(String, String)> {
    workflow
        .nodes
        .iter()
        .filter_map(|n| {
            let config = serde_json::Value::Object(n.config.clone()?);
            tools_of(&n.type_id, &config)
        })
        .flat_map(|c| {
            c.entries
                .into_iter()
                .map(|e| (e.namespace_in(run_ns).to_owned(), e.server))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Resolves the ToolServers `workflow` names for `run`.
pub(super) async fn resolve(
    ctx: &Context,
    run: &Run,
    workflow: &Workflow,
) -> Result<Resolution, Error> {
    let run_ns = run.namespace().unwrap_or_default();
    let named = named_servers(&workflow.spec, &run_ns);
    if named.is_empty() {
        return Ok(Resolution::Ready {
            mounts: vec![],
            headers: None,
        });
    }
    let mut ns_labels: Option<BTreeMap<String, String>> = None;
    let mut mounts = Vec::with_capacity(named.len());
    let mut headers = BTreeMap::new();
    for (ns, name) in &named {
        let api: Api<ToolServer> = Api::namespaced(ctx.client.clone(), ns);
        let Some(ts) = api.get_opt(name).await? else {
            return Ok(Resolution::Unavailable(format!(
                "ToolServer {ns}/{name}, which the workflow's LLM nodes name, does not exist; create it (or fix tools[].server / tools[].namespace)"
            )));
        };
        if ns != &run_ns {
            if ns_labels.is_none() {
                let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
                ns_labels = Some(namespaces.get(&run_ns).await?.labels().clone());
            }
            let labels = ns_labels.as_ref().expect("read above");
            match ts.allows_namespace(&run_ns, labels) {
                Ok(true) => {}
                Ok(false) => {
                    return Ok(Resolution::Unavailable(format!(
                        "ToolServer {ns}/{name} does not admit namespace {run_ns}: its admin can add it to spec.allowedNamespaces"
                    )));
                }
                Err(e) => {
                    return Ok(Resolution::Unavailable(format!(
                        "ToolServer {ns}/{name}: {e}"
                    )));
                }
            }
        }
        let resolved = match crate::toolservers::resolve(&ctx.client, &ts).await {
            Ok(r) => r,
            // A failed GET is retried as it is; anything else is the admin's to fix.
            Err(crate::toolservers::HeaderError::Api { source, .. }) => return Err(source.into()),
            Err(e) => {
                return Ok(Resolution::Unavailable(format!(
                    "ToolServer {ns}/{name}: {e}"
                )));
            }
        };
        let mut mounted = Vec::with_capacity(resolved.len());
        for (i, (header, value)) in resolved.pairs().enumerate() {
            // Secret keys allow `[-._a-zA-Z0-9]`: namespace and name are DNS names.
            let key = format!("{ns}.{name}.{i}");
            mounted.push(SecretMount {
                name: header.to_owned(),
                path: format!("{TOOL_HEADERS_DIR}/{key}"),
            });
            headers.insert(key, ByteString(value.to_vec()));
        }
        mounts.push(ToolServerMount {
            name: name.clone(),
            namespace: ns.clone(),
            url: ts.spec.url.clone(),
            headers: mounted,
            timeout_seconds: ts.spec.timeout_seconds,
            max_result_bytes: ts.spec.max_result_bytes,
            protocol_version: ts.spec.protocol_version,
            tool_tiers: ts.spec.tool_tiers.clone(),
        });
    }
    Ok(Resolution::Ready {
        mounts,
        headers: (!headers.is_empty()).then_some(headers),
    })
}

/// The run's tool-credentials Secret holding `data` (applied: a retried reconcile writes the
/// same object).
pub(super) async fn apply_headers(
    ctx: &Context,
    run: &Run,
    data: BTreeMap<String, ByteString>,
) -> Result<(), Error> {
    let ns = run.namespace().unwrap_or_default();
    let name = tool_headers_secret_name(&run.name_any());
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            labels: Some(run_labels(run)),
            owner_references: Some(vec![owner_ref(run)]),
            ..Default::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&secret),
    )
    .await?;
    tracing::debug!(run = %run.name_any(), secret = %name, uid = ?run.meta().uid, "tool credentials copied for the run");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The servers of every LLM node, in the run's namespace unless an entry names another;
    /// other node types and unreadable tool members name none.
    #[test]
    fn the_servers_a_workflow_names() {
        let wf: Workflow = serde_json::from_value(json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "w", "namespace": "team"},
            "spec": {"id": "w", "name": "w", "version": "1", "nodes": [
                {"id": "a", "typeId": "core.ai.callPrompt",
                 "config": {"tools": [{"server": "kb"}, {"server": "tickets", "namespace": "shared"}]}},
                {"id": "b", "typeId": "core.ai.structuredOutput",
                 "config": {"tools": [{"server": "kb"}]}},
                {"id": "c", "typeId": "core.identity", "config": {"tools": [{"server": "no"}]}},
                {"id": "d", "typeId": "core.ai.callPrompt", "config": {"tools": [{"server": "BAD NAME"}]}},
                {"id": "e", "typeId": "core.mcp.toolCall", "config": {"server": "audit", "tool": "log"}}
            ]}
        }))
        .unwrap();
        let named: Vec<(String, String)> = named_servers(&wf.spec, "team").into_iter().collect();
        assert_eq!(
            named,
            [
                ("shared".to_owned(), "tickets".to_owned()),
                ("team".to_owned(), "audit".to_owned()),
                ("team".to_owned(), "kb".to_owned())
            ]
        );
    }
}
