//! Webhook subscriptions (`spec/v1/webhooks.md`): registrations in a JetStream key-value
//! bucket ([`store`]), delivery from one durable consumer per subscription ([`dispatch`]),
//! signed attempts through the egress guard ([`deliver`]), settings ([`config`]). The REST
//! endpoints are `rest::webhooks`; the pure rules (registration checks, signing, retries,
//! circuit breaker) are `openwop_protocol::webhook`.

pub mod config;
pub mod deliver;
pub mod dispatch;
pub mod store;

pub use config::WebhooksConfig;

use crate::config::OperatorConfig;

/// Whether this operator serves and delivers webhooks: enabled, the REST API on (where they
/// are registered) and run events on NATS (what they deliver). Discovery advertises
/// `webhooks` exactly then.
pub fn active(cfg: &OperatorConfig) -> bool {
    cfg.webhooks.enabled
        && cfg.rest.enabled
        && cfg
            .events
            .nats_url
            .as_deref()
            .is_some_and(|u| !u.is_empty())
}

/// Checks at start that an active configuration can deliver (the signing key and CA file
/// are readable), so a broken mount fails the rollout instead of every delivery.
pub fn check_startup(cfg: &OperatorConfig) -> Result<(), String> {
    if !active(cfg) {
        return Ok(());
    }
    cfg.webhooks.signing_key().map_err(|e| e.to_string())?;
    deliver::Deliverer::new(&cfg.webhooks).map_err(|e| e.to_string())?;
    Ok(())
}
