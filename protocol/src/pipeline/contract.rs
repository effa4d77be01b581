//! Step 5 — envelope contract gate (`ai-envelope.md` §"Envelope Contract").
//! Universal kinds always pass. The host-level contract (the typeId's
//! advertised accepts) is checked before the node's own contract. A refusal is
//! `gated` / `envelope_contract_violation` and, per the contract's
//! `refusalMode`, projects `node.failed` (fail-node, default) or a
//! `log.appended` warning (discard-and-warn).

use serde_json::json;

use crate::envelope::{AiEnvelope, ContentTrust, is_universal_kind};
use crate::events::{ErrorInfo, EventFactory, LogAppended, LogLevel, NodeFailed, RunEventDoc};
use crate::outcome::{Code, Gate, Gated, Outcome};

use super::context::{Context, EnvelopeContract, RefusalMode, quote_kind, stamp};
use crate::envelope::universal_first;

pub(crate) fn check(
    env: &AiEnvelope,
    ctx: &Context<'_>,
    corr: &str,
    trust: ContentTrust,
    events: &mut EventFactory,
) -> Result<(), (Outcome, Vec<RunEventDoc>)> {
    if is_universal_kind(&env.kind) {
        return Ok(());
    }
    for (gate, contract) in [
        (Gate::HostContract, ctx.host.host_contract.as_ref()),
        (Gate::NodeContract, ctx.node_contract),
    ] {
        let Some(contract) = contract else { continue };
        if !contract.accepts.contains(&env.kind) {
            return Err(refuse(env, ctx, corr, trust, events, gate, contract));
        }
    }
    Ok(())
}

fn refuse(
    env: &AiEnvelope,
    ctx: &Context<'_>,
    corr: &str,
    trust: ContentTrust,
    events: &mut EventFactory,
    gate: Gate,
    contract: &EnvelopeContract,
) -> (Outcome, Vec<RunEventDoc>) {
    let accepted = universal_first(&contract.accepts);
    let whose = if gate == Gate::HostContract {
        "the host's contract for this node type"
    } else {
        "this node's envelope contract"
    };
    let kind = quote_kind(&env.kind);
    let message = format!(
        "envelope kind '{kind}' is not accepted by {whose}; accepted kinds: {}",
        accepted.join(", ")
    );
    let ev = project(
        ctx,
        corr,
        events,
        gate,
        &env.kind,
        &accepted,
        ctx.refusal_mode.unwrap_or(contract.refusal_mode),
        &message,
    );
    let outcome = Outcome::Gated(Gated {
        code: Code::EnvelopeContractViolation,
        message,
        gate,
        refused_type: env.kind.clone(),
        allowed_kinds: accepted,
        replayed: false,
    });
    (outcome, vec![stamp(ev, ctx, corr, trust)])
}

/// The event a gate refusal projects, the same for every gate (host
/// `supportedEnvelopes`, host contract, node contract): `node.failed` with
/// `envelope_contract_violation` (fail-node) or a `log.appended` warning
/// (discard-and-warn); `details` name the refused and accepted kinds and the gate.
#[allow(clippy::too_many_arguments)]
pub(crate) fn project(
    ctx: &Context<'_>,
    corr: &str,
    events: &mut EventFactory,
    gate: Gate,
    refused: &str,
    accepted: &[String],
    mode: RefusalMode,
    message: &str,
) -> RunEventDoc {
    let details = json!({"refusedType": refused, "acceptedTypes": accepted, "gate": gate});
    match mode {
        RefusalMode::FailNode => events.emit(
            &format!("{corr}/contract/node.failed"),
            ctx.timestamp,
            &NodeFailed {
                node_id: ctx.node_id.to_owned(),
                error: ErrorInfo {
                    code: Code::EnvelopeContractViolation.as_str().to_owned(),
                    message: message.to_owned(),
                    details: Some(details),
                    retryable: Some(false),
                },
                attempts: None,
            },
        ),
        RefusalMode::DiscardAndWarn => events.emit(
            &format!("{corr}/contract/log.appended"),
            ctx.timestamp,
            &LogAppended {
                level: LogLevel::Warn,
                message: format!(
                    "{}: {message}; envelope discarded",
                    Code::EnvelopeContractViolation
                ),
                node_id: Some(ctx.node_id.to_owned()),
                fields: Some(details),
            },
        ),
    }
}
