//! The AI-envelope pipeline, in the normative order (`ai-envelope.md`
//! §"Production flow"), one module per step:
//!
//! 1. [`parse`] — bytes/text → JSON, bounded by [`InputLimits`]; lenient recovery on syntax errors
//! 2. [`shape`] — closed top level and `meta` (`invalid_envelope_shape`)
//! 3. [`kind`] — host `supportedEnvelopes` (`gated` / `unknown_envelope_kind`, projected like a contract refusal)
//! 4. [`payload`] — per-kind schema + schema-version drift (`envelope_invalid`, `unknown_schema_version`)
//! 5. [`contract`] — host then node envelope contract (`gated` / `envelope_contract_violation`)
//! 6. [`limits`] — `envelopesPerTurn`, `schemaRounds`, `clarificationRounds` (`breached` / `cap_breached`)
//! 7. [`redaction`] — SR-1
//! 8. [`trust`] — `contentTrust` resolution, `untrusted_content_blocks_approval`
//! 9. [`dedup`] — correlationId replay / `envelope_correlation_conflict`
//! 10. [`handler`] — kind → `RunEventDoc`s with `causationId = correlationId`
//!
//! Everything is pure: the caller passes the timestamp, the dedup store and
//! the event factory, and persists what comes back.

// Each step returns its refusal (an ordinary outcome) as `Err`; boxing it would
// only add an allocation on a path that is as common as success.
#![allow(clippy::result_large_err)]

// The steps are private: callers use the `pub use` list below, so a step's internals can
// change without touching another crate.
mod context;
mod contract;
mod dedup;
mod handler;
mod kind;
mod limits;
mod parse;
mod payload;
mod redaction;
// The conformance seam `envelope/accept` and `kubectl-openwop envelope accept`: not part of
// the production pipeline, so only built with the `conformance` feature.
#[cfg(feature = "conformance")]
pub mod request;
mod shape;
mod trust;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::events::{EventFactory, RunEventDoc};
use crate::outcome::{Accepted, NormalizedMeta, Outcome};

pub use crate::recovery::RecoveryPath;
pub use context::{
    Context, Counter, Counters, EnvelopeContract, HostPolicy, RefusalMode, Strictness,
};
pub use dedup::{DedupEntry, DedupStore};
pub use handler::interrupt_id_for;
pub use parse::{InputLimits, Recovery};
pub use shape::is_iso8601;

/// The result of one pipeline call.
#[derive(Debug, Clone, PartialEq)]
pub struct Processed {
    pub outcome: Outcome,
    /// Events to append to the run's log, in order (empty for a replay).
    pub events: Vec<RunEventDoc>,
    /// Set when lenient recovery produced the document (emit `envelope.recovery.applied`).
    pub recovery: Option<Recovery>,
    /// The envelope's `type` once the shape step passed.
    pub kind: Option<String>,
}

/// Entry point for raw bytes (e.g. a file or an HTTP body): UTF-8 check, then [`accept_text`].
pub fn accept_bytes(
    bytes: &[u8],
    ctx: &Context<'_>,
    store: &mut DedupStore,
    events: &mut EventFactory,
) -> Processed {
    if bytes.len() > ctx.host.input_limits.max_bytes {
        return finish(
            parse::too_large(bytes.len(), &ctx.host.input_limits),
            Vec::new(),
            None,
            None,
            ctx,
        );
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => accept_text(text, ctx, store, events),
        Err(e) => finish(
            parse::not_utf8(e.valid_up_to()),
            Vec::new(),
            None,
            None,
            ctx,
        ),
    }
}

/// Entry point for model text: a direct parse first (the fast path), lenient
/// recovery only when the text is not JSON as it stands.
pub fn accept_text(
    text: &str,
    ctx: &Context<'_>,
    store: &mut DedupStore,
    events: &mut EventFactory,
) -> Processed {
    let limits = &ctx.host.input_limits;
    match parse::parse_envelope(text, limits) {
        Ok(doc) => run(doc, None, ctx, store, events),
        Err(parse::DirectError::Refuse(o)) => finish(o, Vec::new(), None, None, ctx),
        Err(parse::DirectError::Syntax { line, column, eof }) => {
            match parse::parse_recovered(text, limits) {
                Ok((value, recovery)) => run(
                    shape::Doc::from_value(value),
                    Some(recovery),
                    ctx,
                    store,
                    events,
                ),
                Err(why) => finish(
                    parse::not_json(line, column, eof, &why),
                    Vec::new(),
                    None,
                    None,
                    ctx,
                ),
            }
        }
    }
}

/// The strict, bounded JSON parse of step 1 on its own (no recovery): for
/// callers that read envelope-bearing documents such as the CLI's request.
/// Errors are `invalid_envelope_shape` outcomes with a pointer and a fix.
pub fn parse_json(text: &str, limits: &InputLimits) -> Result<Value, Outcome> {
    match parse::parse_direct(text, limits) {
        Ok(v) => Ok(v),
        Err(parse::DirectError::Refuse(o)) => Err(o),
        Err(parse::DirectError::Syntax { line, column, eof }) => {
            Err(parse::not_json(line, column, eof, "not attempted"))
        }
    }
}

/// Entry point for an already-parsed document (e.g. a provider's structured
/// output); `recovery` is what the caller's parser did, reported back as is.
pub fn accept_value(
    value: Value,
    recovery: Option<Recovery>,
    ctx: &Context<'_>,
    store: &mut DedupStore,
    events: &mut EventFactory,
) -> Processed {
    run(shape::Doc::from_value(value), recovery, ctx, store, events)
}

fn run(
    doc: shape::Doc,
    recovery: Option<Recovery>,
    ctx: &Context<'_>,
    store: &mut DedupStore,
    events: &mut EventFactory,
) -> Processed {
    let mut env = match shape::check(doc) {
        Ok(env) => env,
        Err(o) => return finish(o, Vec::new(), recovery, None, ctx),
    };
    // The dedup key and causationId are the redacted correlationId, so a secret
    // pasted into an id never reaches the log. Moved out of `env` (no copy):
    // every later step takes `corr`.
    let mut corr = std::mem::take(&mut env.correlation_id);
    ctx.redactor.redact_in_place(&mut corr);
    let trust = trust::resolve(&env, ctx);

    // Not recorded for replay (see `dedup`): the refusal is about the host's
    // advertisement, not a decision about this envelope's content.
    if let Err((o, evs)) = kind::check(&env, ctx, &corr, trust, events) {
        return finish(o, evs, recovery, Some(env.kind), ctx);
    }
    let warnings = match payload::check(&env, ctx.host) {
        Ok(w) => w,
        Err(o) => return finish(o, Vec::new(), recovery, Some(env.kind), ctx),
    };
    if let Err((o, evs)) = contract::check(&env, ctx, &corr, trust, events) {
        return decided(
            finish(o, evs, recovery, None, ctx),
            &corr,
            env.kind,
            ctx,
            store,
        );
    }
    if let Err((o, evs)) = limits::check(&env, ctx, &corr, trust, events) {
        return decided(
            finish(o, evs, recovery, None, ctx),
            &corr,
            env.kind,
            ctx,
            store,
        );
    }
    let mut redacted = std::mem::take(&mut env.payload);
    let redaction_count = redaction::apply(&mut redacted, ctx.redactor);
    if let Err(o) = trust::check(trust, ctx) {
        return finish(o, Vec::new(), recovery, Some(env.kind), ctx);
    }
    match dedup::lookup(store, &corr, &env.kind) {
        dedup::Lookup::Fresh => {}
        dedup::Lookup::Replay(o) | dedup::Lookup::Conflict(o) => {
            return finish(o, Vec::new(), recovery, Some(env.kind), ctx);
        }
    }
    let envelope_id = match env.envelope_id.take() {
        Some(mut id) => {
            ctx.redactor.redact_in_place(&mut id);
            id
        }
        None => envelope_id_for(events.run_id(), &corr),
    };
    let docs = handler::project(&env, &redacted, &envelope_id, ctx, &corr, trust, events);
    let outcome = Outcome::Accepted(Accepted {
        envelope_id,
        recorded_event_ids: docs.iter().map(|d| d.event_id.clone()).collect(),
        normalized_meta: NormalizedMeta {
            content_trust: trust,
        },
        redacted_payload: redacted.into(),
        redaction_count,
        replayed: false,
        warnings,
    });
    // The handler builds its events from redacted text only (see `handler`),
    // so they skip the final walk; the outcome still gets it.
    let processed = finish_outcome(outcome, docs, recovery, None, ctx);
    decided(processed, &corr, env.kind, ctx, store)
}

/// A decision about a well-formed envelope, already finished: recorded for
/// replay under its (unredacted) kind; `Processed::kind` gets the redacted one.
fn decided(
    mut processed: Processed,
    corr: &str,
    mut kind: String,
    ctx: &Context<'_>,
    store: &mut DedupStore,
) -> Processed {
    store.record(corr, &kind, &processed.outcome);
    ctx.redactor.redact_in_place(&mut kind);
    processed.kind = Some(kind);
    processed
}

/// Last line of SR-1 defence: no refusal text or event built by an earlier
/// step (which may quote a kind name or a key) carries a secret.
fn finish(
    outcome: Outcome,
    mut events: Vec<RunEventDoc>,
    recovery: Option<Recovery>,
    kind: Option<String>,
    ctx: &Context<'_>,
) -> Processed {
    for e in &mut events {
        ctx.redactor.redact_value(&mut e.payload);
    }
    finish_outcome(outcome, events, recovery, kind, ctx)
}

/// [`finish`] for events built from redacted text only: the outcome's texts
/// and the kind are still redacted, the events are passed through.
fn finish_outcome(
    mut outcome: Outcome,
    events: Vec<RunEventDoc>,
    recovery: Option<Recovery>,
    kind: Option<String>,
    ctx: &Context<'_>,
) -> Processed {
    let r = ctx.redactor;
    let fix = |s: &mut String| {
        r.redact_in_place(s);
    };
    match &mut outcome {
        Outcome::Accepted(a) => a.warnings.iter_mut().for_each(|d| fix(&mut d.message)),
        Outcome::Gated(g) => {
            fix(&mut g.message);
            fix(&mut g.refused_type);
        }
        Outcome::Invalid(i) => {
            fix(&mut i.message);
            for d in &mut i.details {
                fix(&mut d.instance_path);
                fix(&mut d.message);
            }
        }
        Outcome::Breached(b) => {
            fix(&mut b.reason);
            fix(&mut b.message);
        }
    }
    Processed {
        outcome,
        events,
        recovery,
        kind: kind.map(|mut k| {
            fix(&mut k);
            k
        }),
    }
}

/// Engine-assigned `envelopeId` when the model omits it: deterministic from
/// `(runId, correlationId)` — `env-` + 32 hex chars of SHA-256 — so a replayed
/// or re-executed step assigns the same id without any stored state.
pub fn envelope_id_for(run_id: &str, correlation_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"envelope\0");
    h.update(run_id.as_bytes());
    h.update([0u8]);
    h.update(correlation_id.as_bytes());
    crate::events::hex_id("env-", &h.finalize(), 32)
}
