//! Step 3 — kind known: the envelope's `type` must be advertised in the host's
//! `supportedEnvelopes` (universal kinds always are). Refusal:
//! `gated` / `unknown_envelope_kind`, retryable, no events.

use crate::envelope::{AiEnvelope, UNIVERSAL_KINDS, is_universal_kind};
use crate::outcome::{Code, Gate, Gated, Outcome};

use super::HostPolicy;

pub(crate) fn check(env: &AiEnvelope, host: &HostPolicy) -> Result<(), Outcome> {
    let Some(supported) = &host.supported_envelopes else {
        return Ok(());
    };
    if is_universal_kind(&env.kind) || supported.contains(&env.kind) {
        return Ok(());
    }
    let allowed = union_with_universals(supported);
    Err(Outcome::Gated(Gated {
        code: Code::UnknownEnvelopeKind,
        reason: format!(
            "{}: the host does not advertise envelope kind '{}' in supportedEnvelopes; emit one of: {}",
            Code::UnknownEnvelopeKind,
            super::quote_kind(&env.kind),
            allowed.join(", ")
        ),
        gate: Gate::SupportedEnvelopes,
        refused_type: env.kind.clone(),
        allowed_kinds: allowed,
        replayed: false,
    }))
}

/// Universal kinds first, then the given kinds, without duplicates.
pub(crate) fn union_with_universals(kinds: &[String]) -> Vec<String> {
    let mut out: Vec<String> = UNIVERSAL_KINDS.iter().map(|k| (*k).to_owned()).collect();
    for k in kinds {
        if !out.contains(k) {
            out.push(k.clone());
        }
    }
    out
}
