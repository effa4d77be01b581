//! Discovery: the capabilities document computed from what is configured, stored in a
//! ConfigMap, and served from that ConfigMap's content (`GET /.well-known/openwop`,
//! `GET /schemas/envelopes/{kind}.schema.json`). An admin who edits the ConfigMap and sets
//! the annotation `openwop.dev/managed: "false"` keeps their version: the operator stops
//! writing it and serves it as is.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use openwop_crds::names;
use openwop_protocol::capabilities::{
    self, CapabilitiesConfig, CapabilitiesError, EventStream, HttpClient, Implementation,
    ReasoningConfig, ReliabilityConfig, SecretScope, TestSeams, Transport,
};
use openwop_protocol::http;
use openwop_protocol::run::nodes::MOCK_AGENT_TYPE_ID;
use openwop_protocol::schema;
use openwop_protocol::workflow_check::NodeRegistry;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::config::OperatorConfig;
use crate::config::seams;

/// ConfigMap key of the capabilities document.
pub const CAPABILITIES_KEY: &str = "capabilities.json";
/// Prefix of the ConfigMap keys holding envelope payload schemas (`envelope.<kind>.schema.json`).
pub const SCHEMA_KEY_PREFIX: &str = "envelope.";
pub const SCHEMA_KEY_SUFFIX: &str = ".schema.json";
/// Annotation that stops the operator from overwriting an admin's ConfigMap.
pub use openwop_crds::names::ANNOTATION_MANAGED as MANAGED_ANNOTATION;
/// `Cache-Control` of envelope schemas (ai-envelope.md §Canonical schema location).
pub const SCHEMA_CACHE_CONTROL: &str = "public, max-age=300";
/// Response header carrying the version of the capabilities document.
pub const CAPABILITIES_ETAG: &str = "capabilities-etag";

/// Kinds the host advertises: the four universal kinds (the worker handles them all).
pub fn advertised_kinds() -> Vec<String> {
    schema::UNIVERSAL_KINDS
        .iter()
        .map(|k| (*k).to_owned())
        .collect()
}

/// Why the capabilities document could not be built from the operator config.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("capabilities document: {0}")]
    Capabilities(#[from] CapabilitiesError),
}

/// What this host really has, as the typed input of [`capabilities::build`]. Limits,
/// strictness, Tier-1 posture, reasoning directive and truncation multiplier come from the
/// host profile ([`OperatorConfig::host_profile`]) that every run's snapshot carries and the
/// worker enforces: what discovery advertises is what a run gets.
pub fn capabilities_config(
    cfg: &OperatorConfig,
    registry: &NodeRegistry,
) -> Result<CapabilitiesConfig, DiscoveryError> {
    let host = cfg.host_profile();
    // The worker runs the mock agent only where the host opted in (RFC 0023).
    let mock_registered = registry.get(MOCK_AGENT_TYPE_ID).is_some();
    Ok(CapabilitiesConfig {
        envelope_kinds: advertised_kinds(),
        node_types: registry.type_ids().map(str::to_owned).collect(),
        http_client: [http::FETCH_TYPE_ID, http::REQUEST_TYPE_ID]
            .iter()
            .any(|t| registry.get(t).is_some())
            .then(|| HttpClient::of(&host.http)),
        providers: cfg.providers.iter().map(|p| p.name.clone()).collect(),
        limits: host.limits,
        reliability: ReliabilityConfig {
            truncation_budget_multiplier: host.truncation_budget_multiplier,
            ..cfg.reliability
        },
        reasoning: ReasoningConfig {
            supported: cfg.reasoning.supported,
            prompt_directive: host.reasoning_directive,
            ..ReasoningConfig::default()
        },
        strictness: host.strictness,
        tier_one_subset_compliance: host.tier_one_subset_compliance,
        envelope_contracts: true,
        // Reachable when some namespace may use it, or when the conformance fixtures (whose
        // `conformance-*` ids always may) are installed.
        mock_agent: mock_registered
            && (!cfg.conformance.mock_agent_namespaces.is_empty() || cfg.conformance.seams.enabled),
        agents_supported: mock_registered,
        // BYOK secrets are Kubernetes Secrets in the Run's namespace, and a tenant is a
        // namespace.
        secret_scopes: vec![SecretScope::Tenant],
        // Only where deliveries work: enabled, with run events on NATS.
        webhooks: cfg.webhooks_active(),
        // LLM nodes call the tools of ToolServers (the worker's tool loop, its records).
        tools: true,
        // The catalog is a REST route.
        tool_catalog: cfg.rest.enabled,
        // Only where the routes are served and a signing key is configured.
        interrupt_tokens: cfg.rest.enabled && cfg.rest.interrupt_tokens.enabled(),
        fixtures: seams::advertised_fixtures(cfg, registry),
        // The seams this host serves when they are on (`conformance`); spans can be read
        // back only when workers can reach the operator's span store.
        test_seams: TestSeams {
            otel_scrape: seams::span_ingest_traces_url(cfg).is_some(),
            debug_bundle_export: seams::enabled(cfg),
        },
        // Discovery and the OpenWOP REST API are HTTP; NATS is not an OpenWOP transport
        // and is described in the host extension instead.
        transports: vec![Transport::Rest],
        event_stream: Some(EventStream {
            transport: "nats-jetstream".to_owned(),
            subject: openwop_protocol::run::subjects::events_subject("<namespace>", "<runId>"),
        }),
        // Only while the conformance seams are mounted (they 404 otherwise).
        test_seam_paths: seams::advertised_paths(cfg),
        implementation: Implementation {
            name: "openwop-operator".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        },
        ..CapabilitiesConfig::default()
    })
}

/// The capabilities document for this configuration and node registry.
pub fn capabilities(
    cfg: &OperatorConfig,
    registry: &NodeRegistry,
) -> Result<Value, DiscoveryError> {
    Ok(capabilities::build(&capabilities_config(cfg, registry)?)?.to_value())
}

/// The discovery ConfigMap: the capabilities document and every advertised kind's schema.
pub fn discovery_configmap(cfg: &OperatorConfig, doc: &Value) -> ConfigMap {
    let mut data = BTreeMap::new();
    data.insert(
        CAPABILITIES_KEY.to_string(),
        serde_json::to_string_pretty(doc).unwrap_or_else(|_| doc.to_string()),
    );
    for kind in advertised_kinds() {
        if let Some(s) = schema::kind_payload_schema(&kind) {
            data.insert(
                format!("{SCHEMA_KEY_PREFIX}{kind}{SCHEMA_KEY_SUFFIX}"),
                s.to_string(),
            );
        }
    }
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(cfg.discovery.config_map.clone()),
            namespace: Some(cfg.discovery.namespace.clone()),
            labels: Some(BTreeMap::from([
                (
                    names::LABEL_MANAGED_BY.to_string(),
                    names::MANAGER.to_string(),
                ),
                (
                    names::LABEL_COMPONENT.to_string(),
                    names::COMPONENT_DISCOVERY.to_string(),
                ),
            ])),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// True when an admin took the ConfigMap over.
pub fn is_admin_owned(cm: &ConfigMap) -> bool {
    cm.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MANAGED_ANNOTATION))
        .is_some_and(|v| v == "false")
}

/// One servable document with its strong ETag.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    pub body: String,
    pub etag: String,
}

impl Served {
    pub fn new(body: String) -> Self {
        let digest = hex::encode(Sha256::digest(body.as_bytes()));
        Self {
            etag: format!("\"{}\"", &digest[..32]),
            body,
        }
    }
}

/// What the HTTP endpoint serves, loaded from the ConfigMap.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiscoveryContent {
    pub capabilities: Option<Served>,
    pub schemas: BTreeMap<String, Served>,
}

impl DiscoveryContent {
    /// Content of a discovery ConfigMap, verbatim.
    pub fn from_configmap(cm: &ConfigMap) -> Self {
        let mut out = DiscoveryContent::default();
        for (k, v) in cm.data.iter().flatten() {
            if k == CAPABILITIES_KEY {
                out.capabilities = Some(Served::new(v.clone()));
            } else if let Some(kind) = k
                .strip_prefix(SCHEMA_KEY_PREFIX)
                .and_then(|r| r.strip_suffix(SCHEMA_KEY_SUFFIX))
            {
                out.schemas.insert(kind.to_owned(), Served::new(v.clone()));
            }
        }
        out
    }
}

/// Shared, swappable discovery content plus the capabilities `Cache-Control`.
#[derive(Clone)]
pub struct DiscoveryState {
    pub content: Arc<RwLock<DiscoveryContent>>,
    pub cache_control: String,
    /// The conformance capability-toggle overlay (the conformance capability-toggle seam): boolean
    /// capabilities set over the ConfigMap's document. Empty unless the seams are enabled;
    /// every replica keeps it current from the shared key-value bucket.
    pub overlay: Arc<RwLock<BTreeMap<String, bool>>>,
}

impl DiscoveryState {
    pub fn new(cache_control: &str) -> Self {
        Self {
            content: Arc::default(),
            cache_control: cache_control.to_owned(),
            overlay: Arc::default(),
        }
    }

    pub fn set(&self, content: DiscoveryContent) {
        if let Ok(mut c) = self.content.write() {
            *c = content;
        }
    }

    fn get(&self) -> DiscoveryContent {
        self.content.read().map(|c| c.clone()).unwrap_or_default()
    }

    /// The capabilities document as loaded from the ConfigMap (no overlay).
    pub fn base_capabilities(&self) -> Option<Value> {
        let c = self.get().capabilities?;
        serde_json::from_str(&c.body).ok()
    }

    pub fn overlay(&self) -> BTreeMap<String, bool> {
        self.overlay.read().map(|o| o.clone()).unwrap_or_default()
    }

    pub fn set_overlay(&self, overlay: BTreeMap<String, bool>) {
        if let Ok(mut o) = self.overlay.write() {
            *o = overlay;
        }
    }

    /// The capabilities document to serve: the loaded one with the overlay applied (its own
    /// ETag, so a cached copy is not reused across a toggle).
    fn served_capabilities(&self) -> Option<Served> {
        let served = self.get().capabilities?;
        let overlay = self.overlay();
        if overlay.is_empty() {
            return Some(served);
        }
        let doc: Value = match serde_json::from_str(&served.body) {
            Ok(d) => d,
            Err(_) => return Some(served),
        };
        match openwop_protocol::seams::apply_overlay(&doc, &overlay) {
            Ok(d) => Some(Served::new(
                serde_json::to_string_pretty(&d).unwrap_or(served.body),
            )),
            Err(e) => {
                // The toggle seam checks each entry against the document before storing
                // it; an admin's later edit can still conflict: serve the document as is.
                tracing::warn!(error = %e, "capability overlay does not apply; serving without it");
                Some(served)
            }
        }
    }
}

fn json_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = json!({"error": code, "message": message}).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn conditional(headers: &HeaderMap, served: &Served, content_type: &str, cache: &str) -> Response {
    let not_modified = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            let t = t.trim();
            t == "*" || t == served.etag || t.strip_prefix("W/") == Some(served.etag.as_str())
        });
    let mut resp = if not_modified {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, served.body.clone()).into_response()
    };
    let h = resp.headers_mut();
    if !not_modified {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_str(content_type)
                .unwrap_or(HeaderValue::from_static("application/json")),
        );
    }
    if let Ok(v) = HeaderValue::from_str(cache) {
        h.insert(header::CACHE_CONTROL, v);
    }
    if let Ok(v) = HeaderValue::from_str(&served.etag) {
        h.insert(header::ETAG, v);
    }
    resp
}

/// `GET /.well-known/openwop`.
pub async fn well_known(State(state): State<DiscoveryState>, headers: HeaderMap) -> Response {
    match state.served_capabilities() {
        Some(served) => {
            let mut resp = conditional(&headers, &served, "application/json", &state.cache_control);
            // The capabilities' own version (discovery.md): equal to the ETag here, since this
            // document is exactly the capabilities; clients compare it across requests.
            if let Ok(v) = HeaderValue::from_str(&served.etag) {
                resp.headers_mut().insert(CAPABILITIES_ETAG, v);
            }
            resp
        }
        None => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "discovery_unavailable",
            "the capabilities document has not been loaded yet; retry shortly",
        ),
    }
}

/// `GET /schemas/envelopes/{kind}.schema.json`.
pub async fn envelope_schema(
    State(state): State<DiscoveryState>,
    Path(file): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(kind) = file.strip_suffix(SCHEMA_KEY_SUFFIX) else {
        return json_error(
            StatusCode::NOT_FOUND,
            "not_found",
            "expected /schemas/envelopes/{kind}.schema.json",
        );
    };
    match state.get().schemas.get(kind) {
        Some(served) => conditional(
            &headers,
            served,
            "application/schema+json",
            SCHEMA_CACHE_CONTROL,
        ),
        None => json_error(
            StatusCode::NOT_FOUND,
            "unknown_envelope_kind",
            "this host does not advertise that envelope kind; see supportedEnvelopes at /.well-known/openwop",
        ),
    }
}

/// The discovery routes.
pub fn router(state: DiscoveryState) -> axum::Router {
    axum::Router::new()
        .route("/.well-known/openwop", axum::routing::get(well_known))
        .route(
            "/schemas/envelopes/{file}",
            axum::routing::get(envelope_schema),
        )
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openwop_protocol::pipeline::Strictness;
    use openwop_protocol::retry::reasoning::ReasoningPosture;
    use openwop_protocol::tier1::Tier1Posture;

    #[test]
    fn document_is_valid_and_truthful() {
        let mut cfg = OperatorConfig::default();
        cfg.providers.push(crate::config::ProviderConfig {
            name: "openai".into(),
            vendor: "openai".into(),
            base_url: None,
        });
        cfg.limits.schema_rounds = 5;
        let doc = capabilities(&cfg, &NodeRegistry::builtin()).unwrap();
        schema::validate(schema::Document::Capabilities, &doc)
            .expect("valid capabilities document");
        assert_eq!(doc["limits"]["schemaRounds"], 5);
        assert_eq!(doc["aiProviders"]["supported"], json!(["openai"]));
        assert_eq!(doc["capabilities"]["aiProviders"], doc["aiProviders"]);
        assert_eq!(doc["conformance"]["mockAgent"], false);
        let events = doc["envelopes"]["reliability"]["events"]
            .as_array()
            .unwrap();
        assert!(
            events.contains(&json!("envelope.retry.exhausted"))
                && events.contains(&json!("envelope.refusal"))
        );
        for k in schema::UNIVERSAL_KINDS {
            assert!(
                doc["supportedEnvelopes"]
                    .as_array()
                    .unwrap()
                    .contains(&json!(k))
            );
        }
        let mock_agent = |cfg: &OperatorConfig| {
            capabilities(cfg, &NodeRegistry::builtin()).unwrap()["conformance"]["mockAgent"].clone()
        };
        assert_eq!(mock_agent(&cfg), false);
        // The conformance fixtures use the mock agent: with the seams on it is reachable.
        let mut seams = cfg.clone();
        seams.conformance.seams.enabled = true;
        assert_eq!(mock_agent(&seams), true);
        // The seams it serves, advertised only with the seams on; otelScrape only when
        // workers can reach the span store.
        let with = capabilities(&seams, &NodeRegistry::builtin()).unwrap();
        schema::validate(schema::Document::Capabilities, &with).expect("valid with seams");
        assert_eq!(
            with["observability"],
            json!({"testSeams": {"debugBundleExport": true}})
        );
        seams.conformance.seams.span_ingest_url = "http://openwop-operator.ns.svc:8080".into();
        let with = capabilities(&seams, &NodeRegistry::builtin()).unwrap();
        schema::validate(schema::Document::Capabilities, &with).expect("valid with spans");
        assert_eq!(
            with["observability"],
            json!({"testSeams": {"debugBundleExport": true, "otelScrape": true}})
        );
        assert!(doc.get("observability").is_none());
        cfg.conformance.mock_agent_namespaces.push("e2e".into());
        assert_eq!(mock_agent(&cfg), true);
    }

    #[test]
    fn the_test_seams_are_advertised_only_while_enabled() {
        let mut cfg = OperatorConfig::default();
        let reg = NodeRegistry::builtin();
        let off = capabilities(&cfg, &reg).unwrap();
        assert!(off.get(capabilities::TEST_SEAMS_EXTENSION).is_none());
        cfg.conformance.seams.enabled = true;
        let on = capabilities(&cfg, &reg).unwrap();
        schema::validate(schema::Document::Capabilities, &on).expect("valid with the seams");
        let paths = on[capabilities::TEST_SEAMS_EXTENSION]["paths"]
            .as_array()
            .unwrap();
        assert_eq!(paths.len(), seams::PATHS.len());
        assert!(paths.contains(&json!("POST /v1/host/sample/envelope/accept")));
        assert_eq!(
            on["capabilities"][capabilities::TEST_SEAMS_EXTENSION],
            on[capabilities::TEST_SEAMS_EXTENSION]
        );
    }

    #[tokio::test]
    async fn the_capability_overlay_is_served_with_its_own_etag() {
        let cfg = OperatorConfig::default();
        let doc = capabilities(&cfg, &NodeRegistry::builtin()).unwrap();
        let state = DiscoveryState::new("no-cache");
        state.set(DiscoveryContent {
            capabilities: Some(Served::new(doc.to_string())),
            schemas: BTreeMap::new(),
        });
        let get = |state: DiscoveryState| async move {
            let r = well_known(State(state), HeaderMap::new()).await;
            let etag = r.headers()[header::ETAG].to_str().unwrap().to_owned();
            assert_eq!(r.headers()[CAPABILITIES_ETAG].to_str().unwrap(), etag);
            let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
            (etag, serde_json::from_slice::<Value>(&body).unwrap())
        };
        let (etag0, body0) = get(state.clone()).await;
        assert!(body0["host"].get("aiEnvelope").is_none());
        let mut o = BTreeMap::new();
        o.insert("host.aiEnvelope.supported".to_owned(), false);
        o.insert("agents.supported".to_owned(), false);
        state.set_overlay(o);
        let (etag1, body1) = get(state.clone()).await;
        assert_ne!(etag0, etag1);
        assert_eq!(body1["host"]["aiEnvelope"]["supported"], false);
        // The overlay adds to a family, it does not replace it.
        assert_eq!(body1["host"]["toolHooks"]["supported"], true);
        assert_eq!(body1["capabilities"]["agents"]["supported"], false);
        schema::validate(schema::Document::Capabilities, &body1).expect("still valid");
        state.set_overlay(BTreeMap::new());
        assert_eq!(get(state).await.0, etag0);
    }

    #[test]
    fn tier1_strict_is_claimed_only_when_every_schema_passes() {
        let reg = NodeRegistry::builtin();
        let posture = |cfg: &OperatorConfig| {
            capabilities(cfg, &reg).unwrap()["envelopes"]["tierOneSubsetCompliance"].clone()
        };
        let mut cfg = OperatorConfig::default();
        assert_eq!(posture(&cfg), "warn");
        cfg.tier_one_subset_compliance = Tier1Posture::Off;
        assert_eq!(posture(&cfg), "off");
        cfg.tier_one_subset_compliance = Tier1Posture::Strict;
        let all_pass = advertised_kinds().iter().all(|k| {
            openwop_protocol::tier1::check(schema::kind_payload_schema(k).unwrap()).is_empty()
        });
        assert_eq!(posture(&cfg), if all_pass { "strict" } else { "warn" });
    }

    #[test]
    fn every_configured_family_is_carried_and_mirrored() {
        let cfg = OperatorConfig {
            envelope_strictness: Strictness::Strict,
            reasoning: crate::config::Reasoning {
                supported: true,
                prompt_directive: ReasoningPosture::Mandatory,
            },
            reliability: ReliabilityConfig {
                supported: false,
                max_retry_attempts: 7,
                distinguishes_truncation: true,
                truncation_budget_multiplier: 4.0,
            },
            limits: crate::config::Limits {
                max_run_duration_ms: Some(60_000),
                ..Default::default()
            },
            fixtures: vec!["conformance-basic".into()],
            ..Default::default()
        };
        let reg = NodeRegistry::builtin();
        let doc = capabilities(&cfg, &reg).unwrap();
        schema::validate(schema::Document::Capabilities, &doc).expect("valid document");
        assert_eq!(doc["envelopeStrictness"], "strict");
        assert_eq!(
            doc["envelopes"]["reasoning"]["promptDirective"],
            "mandatory"
        );
        let rel = &doc["envelopes"]["reliability"];
        assert_eq!(rel["supported"], false);
        assert!(rel.get("events").is_none(), "no events when unsupported");
        assert_eq!(rel["maxRetryAttempts"], 7);
        assert_eq!(rel["completion"]["truncationBudgetMultiplier"], 4.0);
        assert_eq!(doc["limits"]["maxRunDurationMs"], 60_000);
        assert_eq!(doc["fixtures"], json!(["conformance-basic"]));
        // The spec's closed sets: REST (NATS is described in the host extension) and the
        // tenant scope (a tenant is a namespace).
        assert_eq!(doc["supportedTransports"], json!(["rest"]));
        assert_eq!(doc["secrets"]["scopes"], json!(["tenant"]));
        assert_eq!(doc["secrets"]["resolution"], "host-managed");
        assert_eq!(
            doc["x-host-openwop-operator-event-stream"],
            json!({"transport": "nats-jetstream", "subject": "openwop.events.<namespace>.<runId>"})
        );
        assert_eq!(doc["implementation"]["name"], "openwop-operator");
        // Tools: the MCP client's revisions (its default among them), the catalog (REST is
        // on by default) and the tool-call records; no MCP server is mounted.
        assert_eq!(
            doc["mcp"],
            json!({"supported": true, "serverUrls": [],
                   "protocolVersions": ["2025-03-26", "2025-06-18", "2025-11-25"],
                   "preferredVersion": "2025-06-18"})
        );
        assert_eq!(
            doc["toolCatalog"],
            json!({"supported": true, "sources": ["mcp", "host-extension"], "sessionLifecycle": false})
        );
        assert_eq!(doc["host"]["toolHooks"]["prePostEvents"], true);
        assert_eq!(doc["host"]["toolHooks"]["perToolAuthorization"], false);
        let types: Vec<&str> = reg.type_ids().collect();
        assert_eq!(doc["nodeTypes"], json!(types));
        for (k, v) in doc.as_object().unwrap() {
            if k != "capabilities" {
                assert_eq!(&doc["capabilities"][k], v, "family {k} mirrored");
            }
        }
    }

    #[test]
    fn unvalidated_config_values_are_named() {
        let mut cfg = OperatorConfig::default();
        cfg.reliability.max_retry_attempts = 0;
        let e = capabilities(&cfg, &NodeRegistry::builtin()).unwrap_err();
        assert!(e.to_string().contains("maxRetryAttempts is 0"), "{e}");
    }

    #[test]
    fn configmap_round_trips_to_served_content() {
        let cfg = OperatorConfig::default();
        let doc = capabilities(&cfg, &NodeRegistry::builtin()).unwrap();
        let cm = discovery_configmap(&cfg, &doc);
        let content = DiscoveryContent::from_configmap(&cm);
        let served: Value = serde_json::from_str(&content.capabilities.unwrap().body).unwrap();
        assert_eq!(served, doc);
        assert_eq!(content.schemas.len(), 4);
        assert!(content.schemas.contains_key("clarification.request"));
        assert!(!is_admin_owned(&cm));
    }

    #[test]
    fn discovery_and_the_run_snapshot_carry_the_same_host_profile() {
        let cfg = OperatorConfig::from_yaml("limits:\n  clarificationRounds: 1\n").unwrap();
        let doc = capabilities(&cfg, &cfg.node_registry().unwrap()).unwrap();
        assert_eq!(doc["limits"]["clarificationRounds"], 1);
        let host = cfg.host_profile();
        assert_eq!(
            serde_json::to_value(host.limits).unwrap(),
            doc["limits"],
            "the snapshot's host.limits are the advertised limits"
        );
        assert_eq!(doc["envelopeStrictness"], json!(host.strictness));
    }

    #[test]
    fn advertised_node_types_are_exactly_the_builtins() {
        let cfg = OperatorConfig::from_yaml(
            "nodeTypes:\n- {typeId: core.identity, configSchema: {type: object}}\n",
        )
        .unwrap();
        let doc = capabilities(&cfg, &cfg.node_registry().unwrap()).unwrap();
        let mut builtin: Vec<&str> = openwop_protocol::run::nodes::BUILTIN_NODES
            .iter()
            .map(|n| n.type_id)
            .collect();
        builtin.sort_unstable();
        assert_eq!(doc["nodeTypes"], json!(builtin));
    }

    #[test]
    fn the_http_client_is_advertised_from_the_host_profile() {
        let cfg = OperatorConfig::from_yaml(
            "limits:\n  maxHttpResponseBytes: 65536\negress:\n  allowHosts: [tickets.tools.svc]\n",
        )
        .unwrap();
        let doc = capabilities(&cfg, &cfg.node_registry().unwrap()).unwrap();
        assert_eq!(
            doc["httpClient"],
            json!({"supported": true, "ssrfGuard": true, "maxResponseBodyBytes": 65536,
                   "requestTimeoutMs": 30000,
                   "methods": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]})
        );
        assert_eq!(doc["capabilities"]["httpClient"], doc["httpClient"]);
        // The allow list is enforced (in the snapshot's host profile), never advertised.
        assert!(!doc.to_string().contains("tickets.tools.svc"));
        assert_eq!(
            cfg.host_profile().http.allow_hosts,
            vec!["tickets.tools.svc".to_owned()]
        );
    }
}
