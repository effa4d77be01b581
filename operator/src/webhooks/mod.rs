//! Webhook subscriptions (`spec/v1/webhooks.md`): registrations in a JetStream key-value
//! bucket ([`store`]), delivery from one durable consumer per subscription ([`dispatch`]),
//! signed attempts through the egress guard ([`deliver`]); settings are
//! [`crate::config::WebhooksConfig`], and whether they are on [`OperatorConfig::webhooks_active`]. The REST
//! endpoints are `rest::webhooks`; the pure rules (registration checks, signing, retries,
//! circuit breaker) are `openwop_protocol::webhook`.

pub mod deliver;
pub mod dispatch;
pub mod store;

use crate::config::OperatorConfig;

/// Checks at start that an active configuration can deliver (the signing key and CA file
/// are readable), so a broken mount fails the rollout instead of every delivery.
pub fn check_startup(cfg: &OperatorConfig) -> Result<(), String> {
    if !cfg.webhooks_active() {
        return Ok(());
    }
    cfg.webhooks.signing_key().map_err(|e| e.to_string())?;
    deliver::Deliverer::new(&cfg.webhooks).map_err(|e| e.to_string())?;
    Ok(())
}
