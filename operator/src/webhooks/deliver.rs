//! One delivery attempt: a signed `POST` to the subscription's URL, through the egress guard.
//!
//! The URL is checked again at every attempt (the allow list may have changed since
//! registration), its host name is resolved at connect time by [`PinningResolver`], which
//! checks **every** resolved address with `protocol::egress` and hands the client only the
//! one it checked, so the connection goes to exactly the validated address (no second
//! resolution for DNS rebinding to exploit). Connections are not pooled: each attempt
//! resolves and checks afresh. Redirects are never followed (a 3xx is a failed attempt).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use openwop_protocol::egress::{EgressPolicy, EgressRefusal, Target};
use openwop_protocol::webhook::{self, Attempt, SIGNATURE_ALGORITHM, headers};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::config::WebhooksConfig;

/// Why the delivery client cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read webhooks.caFile {path}: {source}")]
    CaRead {
        path: String,
        source: std::io::Error,
    },
    #[error("webhooks.caFile {path} is not a PEM bundle of CA certificates: {message}")]
    CaParse { path: String, message: String },
    #[error("cannot build the webhook HTTP client: {0}")]
    Build(String),
}

/// Resolves a delivery host and returns only an address the egress policy allows.
struct PinningResolver {
    policy: EgressPolicy,
}

impl Resolve for PinningResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let target = policy.check_url(&format!("https://{host}/"))?;
            let ip = resolve_checked(&policy, &target).await?;
            let pinned: Addrs = Box::new(std::iter::once(SocketAddr::new(ip, 0)));
            Ok(pinned)
        })
    }
}

/// Resolves `target`'s host (a literal address as itself) and returns the address to connect
/// to when every resolved address is allowed. A name that does not resolve is refused
/// (`EgressRefusal::Unresolved`).
pub async fn resolve_checked(
    policy: &EgressPolicy,
    target: &Target,
) -> Result<IpAddr, EgressRefusal> {
    let addrs: Vec<IpAddr> = match target.literal {
        Some(ip) => vec![ip],
        None => tokio::net::lookup_host((target.host.as_str(), target.port))
            .await
            .map(|a| a.map(|a| a.ip()).collect())
            .unwrap_or_default(),
    };
    policy.check_resolved(target, &addrs)
}

/// Sends deliveries.
pub struct Deliverer {
    client: reqwest::Client,
    policy: EgressPolicy,
    user_agent: String,
}

/// What is sent in one attempt.
pub struct Outgoing<'a> {
    pub url: &'a str,
    pub webhook_id: &'a str,
    pub delivery_id: &'a str,
    pub event_type: &'a str,
    pub secret: &'a str,
    pub body: Vec<u8>,
    /// Unix seconds, signed with the body.
    pub timestamp: u64,
}

impl Deliverer {
    pub fn new(cfg: &WebhooksConfig) -> Result<Self, ClientError> {
        let policy = cfg.egress();
        let timeout = Duration::from_secs(cfg.timeout_seconds);
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .pool_max_idle_per_host(0)
            .timeout(timeout)
            .connect_timeout(timeout)
            .dns_resolver(Arc::new(PinningResolver {
                policy: policy.clone(),
            }));
        if !cfg.ca_file.is_empty() {
            let pem = std::fs::read(&cfg.ca_file).map_err(|source| ClientError::CaRead {
                path: cfg.ca_file.clone(),
                source,
            })?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ClientError::CaParse {
                    path: cfg.ca_file.clone(),
                    message: e.to_string(),
                })?;
            if certs.is_empty() {
                return Err(ClientError::CaParse {
                    path: cfg.ca_file.clone(),
                    message: "no certificate found".into(),
                });
            }
            builder = builder.tls_certs_merge(certs);
        }
        Ok(Deliverer {
            client: builder
                .build()
                .map_err(|e| ClientError::Build(e.to_string()))?,
            policy,
            user_agent: format!(
                "{}{}",
                webhook::USER_AGENT_PREFIX,
                env!("CARGO_PKG_VERSION")
            ),
        })
    }

    /// One attempt. Never returns the secret or the body in its text.
    pub async fn attempt(&self, out: Outgoing<'_>) -> Attempt {
        if let Err(refusal) = self.policy.check_url(out.url) {
            return Attempt::Refused(format!("the URL is no longer allowed: {refusal}"));
        }
        let signature = webhook::signature(out.secret, out.timestamp, &out.body);
        let sent = self
            .client
            .post(out.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::USER_AGENT, &self.user_agent)
            .header(headers::WEBHOOK_ID, out.webhook_id)
            .header(headers::DELIVERY_ID, out.delivery_id)
            .header(headers::EVENT_TYPE, out.event_type)
            .header(headers::TIMESTAMP, out.timestamp.to_string())
            .header(headers::SIGNATURE, signature)
            .header(headers::SIGNATURE_ALGORITHM, SIGNATURE_ALGORITHM)
            .body(out.body)
            .send()
            .await;
        match sent {
            Ok(resp) => Attempt::of_status(resp.status().as_u16()),
            Err(e) => match egress_refusal(&e) {
                Some(r) => Attempt::Refused(format!("egress guard: {r}")),
                None if e.is_timeout() => Attempt::Transient("timed out".into()),
                None => Attempt::Transient(error_chain(&e)),
            },
        }
    }
}

/// The egress refusal behind a client error, if that is why it failed.
fn egress_refusal(e: &(dyn std::error::Error + 'static)) -> Option<EgressRefusal> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<EgressRefusal>() {
            return Some(r.clone());
        }
        cur = err.source();
    }
    None
}

/// An error and its causes on one line (reqwest's top-level text alone says little).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(err) = cur {
        out.push_str(": ");
        out.push_str(&err.to_string());
        cur = err.source();
    }
    out
}
