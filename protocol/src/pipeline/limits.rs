//! Step 6 — engine limits. `clarification.request` counts against
//! `clarificationRounds`, `schema.request` against `schemaRounds`, and every
//! envelope against `envelopesPerTurn`. A counter at or over its cap is a
//! breach: `breached` / `cap_breached` with `capKind`, a reason naming the
//! limit and its value, and the events `cap.breached` + `node.failed`.

use serde_json::json;

use crate::envelope::{AiEnvelope, ContentTrust};
use crate::events::{CapBreached, ErrorInfo, EventFactory, NodeFailed, RunEventDoc};
use crate::outcome::{Breached, Code, EnvelopeCapKind, Outcome};

use super::context::{Context, Counter, stamp};

pub(crate) fn check(
    env: &AiEnvelope,
    ctx: &Context<'_>,
    corr: &str,
    trust: ContentTrust,
    events: &mut EventFactory,
) -> Result<(), (Outcome, Vec<RunEventDoc>)> {
    let c = &ctx.counters;
    let specific = match env.kind.as_str() {
        "clarification.request" => c
            .clarification_rounds
            .map(|n| (EnvelopeCapKind::Clarification, n)),
        "schema.request" => c.schema_rounds.map(|n| (EnvelopeCapKind::Schema, n)),
        _ => None,
    };
    let checks = specific.into_iter().chain(
        c.envelopes_per_turn
            .map(|n| (EnvelopeCapKind::Envelopes, n)),
    );
    for (kind, Counter { current, cap }) in checks {
        if current >= cap {
            return Err(breach(ctx, corr, trust, events, kind, cap, current));
        }
    }
    Ok(())
}

fn breach(
    ctx: &Context<'_>,
    corr: &str,
    trust: ContentTrust,
    events: &mut EventFactory,
    kind: EnvelopeCapKind,
    limit: u64,
    observed: u64,
) -> (Outcome, Vec<RunEventDoc>) {
    let name = kind.limit_name();
    let reason = format!("{name} limit {limit} reached (observed {observed})");
    let message = format!("{reason}; no further envelopes of this family are accepted");
    let breached = events.emit(
        &format!("{corr}/limits/cap.breached"),
        ctx.timestamp,
        &CapBreached {
            kind: kind.cap_kind(),
            limit,
            observed,
            node_id: Some(ctx.node_id.to_owned()),
        },
    );
    let failed = events.emit(
        &format!("{corr}/limits/node.failed"),
        ctx.timestamp,
        &NodeFailed {
            node_id: ctx.node_id.to_owned(),
            error: ErrorInfo {
                code: Code::CapBreached.as_str().to_owned(),
                message: message.clone(),
                details: Some(
                    json!({"capKind": kind, "limit": name, "value": limit, "observed": observed}),
                ),
                retryable: Some(false),
            },
            attempts: None,
        },
    );
    let outcome = Outcome::Breached(Breached {
        code: Code::CapBreached,
        reason,
        message,
        cap_kind: kind,
        limit,
        observed,
        replayed: false,
    });
    (
        outcome,
        vec![
            stamp(breached, ctx, corr, trust),
            stamp(failed, ctx, corr, trust),
        ],
    )
}
