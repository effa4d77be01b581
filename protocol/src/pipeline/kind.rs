//! Step 3 — kind known: the envelope's `type` must be advertised in the host's
//! `supportedEnvelopes` (universal kinds always are). Refusal:
//! `gated` / `unknown_envelope_kind` (gate `supported-envelopes`), projected
//! exactly like a contract refusal (`contract::project`): `node.failed` with
//! `envelope_contract_violation`, or a `log.appended` warning under
//! `discard-and-warn` — the caller's override, else the refusal mode of the node's
//! contract, else the host contract's, else the spec default `fail-node`.

use crate::envelope::{AiEnvelope, ContentTrust, is_universal_kind};
use crate::events::{EventFactory, RunEventDoc};
use crate::outcome::{Code, Gate, Gated, Outcome};

use super::context::{Context, quote_kind, stamp};
use crate::envelope::universal_first;

pub(crate) fn check(
    env: &AiEnvelope,
    ctx: &Context<'_>,
    corr: &str,
    trust: ContentTrust,
    events: &mut EventFactory,
) -> Result<(), (Outcome, Vec<RunEventDoc>)> {
    let Some(supported) = &ctx.host.supported_envelopes else {
        return Ok(());
    };
    if is_universal_kind(&env.kind) || supported.contains(&env.kind) {
        return Ok(());
    }
    let allowed = universal_first(supported);
    let message = format!(
        "the host does not advertise envelope kind '{}' in supportedEnvelopes; emit one of: {}",
        quote_kind(&env.kind),
        allowed.join(", ")
    );
    let mode = ctx.refusal_mode.unwrap_or_else(|| {
        ctx.node_contract
            .or(ctx.host.host_contract.as_ref())
            .map(|c| c.refusal_mode)
            .unwrap_or_default()
    });
    let ev = super::contract::project(
        ctx,
        corr,
        events,
        Gate::SupportedEnvelopes,
        &env.kind,
        &allowed,
        mode,
        &message,
    );
    let outcome = Outcome::Gated(Gated {
        code: Code::UnknownEnvelopeKind,
        message,
        gate: Gate::SupportedEnvelopes,
        refused_type: env.kind.clone(),
        allowed_kinds: allowed,
        replayed: false,
    });
    Err((outcome, vec![stamp(ev, ctx, corr, trust)]))
}
