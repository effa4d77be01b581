//! The ToolServer resource: its admission rules (CEL, run as the apiserver would), defaults,
//! columns, the namespace rule and the catalog the operator publishes.

use std::collections::BTreeMap;

use kube::CustomResourceExt;
use kube::core::cel::validate_cel;
use openwop_crds::ToolServer;
use openwop_protocol::tools::SafetyTier;
use openwop_protocol::tools::mcp::McpRevision;
use openwop_protocol::tools::policy::{DiscoveredTool, TierAssignment};
use serde_json::{Value, json};

fn server(spec: Value) -> ToolServer {
    serde_json::from_value(json!({
        "apiVersion": "openwop.dev/v1alpha1", "kind": "ToolServer",
        "metadata": {"name": "search", "namespace": "team-a"},
        "spec": spec
    }))
    .expect("valid ToolServer")
}

fn errors(spec: Value) -> String {
    match validate_cel(&server(spec)) {
        Ok(()) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_minimal_server_gets_the_defaults() {
    let s = server(json!({"url": "https://mcp.example.com/mcp"}));
    assert_eq!(s.spec.timeout_seconds, 30);
    assert_eq!(s.spec.max_result_bytes, 64 * 1024);
    assert_eq!(s.spec.protocol_version.preferred, McpRevision::V2025_06_18);
    assert_eq!(s.spec.protocol_version.fallback, None);
    assert!(s.spec.allowed_namespaces.is_none() && s.spec.headers_from.is_empty());
    assert_eq!(errors(json!({"url": "https://mcp.example.com/mcp"})), "");
}

#[test]
fn the_url_is_http_or_https_without_credentials() {
    for ok in [
        "https://mcp.example.com/mcp",
        "http://search.tools.svc.cluster.local:8080/mcp",
        "https://mcp.example.com/v1/users/@me/mcp",
    ] {
        assert_eq!(errors(json!({ "url": ok })), "", "{ok}");
    }
    for (bad, why) in [
        ("ftp://mcp.example.com/", "http or https"),
        ("mcp.example.com/mcp", "http or https"),
        ("https://user:secret@mcp.example.com/mcp", "credentials"),
        ("https://token@mcp.example.com/", "credentials"),
    ] {
        let e = errors(json!({ "url": bad }));
        assert!(e.contains(why), "{bad}: {e}");
    }
}

#[test]
fn headers_come_from_secrets_once_each_and_never_the_clients_own() {
    let h = |name: &str| json!({"name": name, "secretKeyRef": {"name": "mcp", "key": "token"}});
    let url = "https://mcp.example.com/mcp";
    assert_eq!(
        errors(json!({"url": url, "headersFrom": [h("Authorization"), h("X-Api-Key")]})),
        ""
    );
    for reserved in [
        "Host",
        "content-length",
        "MCP-Protocol-Version",
        "Mcp-Session-Id",
    ] {
        let e = errors(json!({"url": url, "headersFrom": [h(reserved)]}));
        assert!(
            e.contains("set by the MCP client itself"),
            "{reserved}: {e}"
        );
    }
    let e = errors(json!({"url": url, "headersFrom": [h("Authorization"), h("authorization")]}));
    assert!(e.contains("once in headersFrom"), "{e}");
}

#[test]
fn a_fallback_revision_is_older_than_the_preferred_one() {
    let url = "https://mcp.example.com/mcp";
    assert_eq!(
        errors(
            json!({"url": url, "protocolVersion": {"preferred": "2025-11-25", "fallback": "2025-06-18"}})
        ),
        ""
    );
    for fallback in ["2025-11-25", "2025-06-18"] {
        let e = errors(
            json!({"url": url, "protocolVersion": {"preferred": "2025-06-18", "fallback": fallback}}),
        );
        assert!(e.contains("older revision"), "{fallback}: {e}");
    }
    // An unknown revision is not a ToolServer at all.
    assert!(
        serde_json::from_value::<ToolServer>(json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "ToolServer",
            "metadata": {"name": "s"},
            "spec": {"url": url, "protocolVersion": {"preferred": "2026-07-28"}}
        }))
        .is_err()
    );
}

#[test]
fn allowed_namespaces_are_well_formed() {
    let url = "https://mcp.example.com/mcp";
    let e = errors(json!({"url": url, "allowedNamespaces": {"from": "Selector"}}));
    assert!(e.contains("needs a selector"), "{e}");
    let e = errors(
        json!({"url": url, "allowedNamespaces": {"from": "All", "selector": {"matchLabels": {"a": "b"}}}}),
    );
    assert!(e.contains("only with from: Selector"), "{e}");
    assert_eq!(
        errors(
            json!({"url": url, "allowedNamespaces": {"from": "Selector", "selector": {"matchLabels": {"tools": "on"}}}})
        ),
        ""
    );
}

#[test]
fn who_may_use_a_server() {
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    };
    let none = labels(&[]);
    let url = "https://mcp.example.com/mcp";
    let own = server(json!({ "url": url }));
    assert!(own.allows_namespace("team-a", &none).unwrap());
    assert!(!own.allows_namespace("team-b", &none).unwrap());
    let all = server(json!({"url": url, "allowedNamespaces": {"from": "All"}}));
    assert!(all.allows_namespace("team-b", &none).unwrap());
    let sel = server(
        json!({"url": url, "allowedNamespaces": {"from": "Selector", "selector": {
            "matchLabels": {"tools": "on"},
            "matchExpressions": [{"key": "env", "operator": "In", "values": ["dev", "staging"]}]
        }}}),
    );
    assert!(sel.allows_namespace("team-a", &none).unwrap());
    assert!(
        sel.allows_namespace("team-b", &labels(&[("tools", "on"), ("env", "dev")]))
            .unwrap()
    );
    assert!(
        !sel.allows_namespace("team-b", &labels(&[("tools", "on"), ("env", "prod")]))
            .unwrap()
    );
    assert!(
        !sel.allows_namespace("team-b", &labels(&[("env", "dev")]))
            .unwrap()
    );
    let broken = server(
        json!({"url": url, "allowedNamespaces": {"from": "Selector", "selector": {
        "matchExpressions": [{"key": "env", "operator": "Near"}]}}}),
    );
    assert!(broken.allows_namespace("team-b", &none).is_err());
}

#[test]
fn the_catalog_is_sorted_classified_by_the_host_and_bounded() {
    let tool = |name: &str, read_only_hint: bool| DiscoveredTool {
        name: name.into(),
        description: Some(format!("{name} things")),
        input_schema: json!({"type": "object"}),
        annotations: Some(json!({"readOnlyHint": read_only_hint})),
    };
    let tiers = vec![TierAssignment {
        name: "search".into(),
        tier: SafetyTier::Read,
    }];
    let mut status = openwop_crds::ToolServerStatus::default();
    status.set_tools(
        &[
            tool("wipe", true),
            tool("search", false),
            tool("wipe", true),
        ],
        &tiers,
    );
    let got: Vec<(&str, SafetyTier)> = status
        .tools
        .iter()
        .map(|t| (t.name.as_str(), t.tier))
        .collect();
    // `wipe` says it is read-only; nobody classified it, so it is a write.
    assert_eq!(
        got,
        vec![("search", SafetyTier::Read), ("wipe", SafetyTier::Write)]
    );
    assert_eq!(status.tool_count, Some(2));
    let many: Vec<DiscoveredTool> = (0..600).map(|i| tool(&format!("t{i:03}"), false)).collect();
    status.set_tools(&many, &[]);
    assert_eq!(
        status.tools.len(),
        openwop_crds::toolserver::MAX_STATUS_TOOLS
    );
    assert_eq!(status.tool_count, Some(600));
    assert_eq!(status.tools[0].name, "t000");
}

#[test]
fn the_crd_is_namespaced_with_columns_and_bounds_from_protocol() {
    let crd = ToolServer::crd();
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.kind, "ToolServer");
    let v = &crd.spec.versions[0];
    assert!(
        v.subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    let cols: Vec<(&str, &str)> = v
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        cols,
        vec![
            ("URL", ".spec.url"),
            ("Protocol", ".status.protocolVersion"),
            ("Tools", ".status.toolCount"),
            ("Ready", ".status.conditions[?(@.type==\"Ready\")].status"),
            ("Reason", ".status.conditions[?(@.type==\"Ready\")].reason"),
            ("Age", ".metadata.creationTimestamp"),
        ]
    );
    let schema = serde_json::to_value(&v.schema).unwrap();
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"];
    use openwop_protocol::tools::{mcp, result};
    assert_eq!(
        spec["timeoutSeconds"]["maximum"],
        json!(f64::from(mcp::MAX_TIMEOUT_SECONDS))
    );
    assert_eq!(
        spec["timeoutSeconds"]["default"],
        mcp::DEFAULT_TIMEOUT_SECONDS
    );
    assert_eq!(
        spec["maxResultBytes"]["maximum"],
        json!(result::MAX_RESULT_BYTES as f64)
    );
    assert_eq!(
        spec["maxResultBytes"]["minimum"],
        json!(result::MIN_RESULT_BYTES as f64)
    );
    assert_eq!(
        spec["maxResultBytes"]["default"],
        result::DEFAULT_MAX_RESULT_BYTES
    );
    // A tool is classified once: the apiserver keys the list by name.
    assert_eq!(spec["toolTiers"]["x-kubernetes-list-type"], "map");
    assert_eq!(
        spec["toolTiers"]["x-kubernetes-list-map-keys"],
        json!(["name"])
    );
    let revisions: Vec<&str> = McpRevision::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        spec["protocolVersion"]["properties"]["preferred"]["enum"],
        json!(revisions)
    );
}
