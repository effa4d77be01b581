//! Step 8 — trust normalisation (`crate::trust`): resolve `contentTrust`
//! (the envelope's own marker wins over the run's boundary; default trusted)
//! and refuse untrusted content presented as an approval
//! (`untrusted_content_blocks_approval`).

use crate::envelope::{AiEnvelope, ContentTrust};
use crate::outcome::{Code, Detail, Outcome};
use crate::trust;

use super::context::Context;

pub(crate) fn resolve(env: &AiEnvelope, ctx: &Context<'_>) -> ContentTrust {
    trust::resolve(env.meta.content_trust, ctx.run_trust_boundary)
}

pub(crate) fn check(trust: ContentTrust, ctx: &Context<'_>) -> Result<(), Outcome> {
    if !trust::blocks_approval(trust, ctx.approval_gate_context) {
        return Ok(());
    }
    Err(Outcome::invalid(
        Code::UntrustedContentBlocksApproval,
        "untrusted content cannot advance an approval gate",
        vec![Detail::new(
            "/meta/contentTrust",
            "trust-boundary",
            "this envelope is untrusted (its own meta.contentTrust or the run's trust boundary): \
             resolve the approval with a trusted response from a person or the host, or reject the approval explicitly",
        )],
    ))
}
