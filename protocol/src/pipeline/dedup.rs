//! Step 9 — correlationId dedup / replay (`ai-envelope.md` §"Replay determinism").
//!
//! The store maps `correlationId` → (envelope type, outcome). It is a plain
//! value: the pipeline stays pure, the worker rebuilds it from the event log
//! (or persists its serialised form) and passes it back in.
//! - same id + same type → the cached outcome, unchanged (same `envelopeId`,
//!   same `recordedEventIds`), marked `replayed`, and no new events; a cached
//!   `gated` or `breached` replays as such;
//! - same id + other type → `envelope_correlation_conflict`.
//!
//! Recorded: `accepted`, contract-`gated` and `breached` outcomes — decisions
//! about a well-formed envelope. Not recorded: `invalid` and kind-gated
//! (`unknown_envelope_kind`) outcomes, which the model is asked to correct
//! and may re-emit under the same correlationId. A decision the caller hands
//! back (`priorCorrelations`) is kept whatever its status: it was taken.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::context::quote_kind;
use crate::outcome::{Code, Detail, Outcome};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DedupEntry {
    pub envelope_type: String,
    pub outcome: Outcome,
}

/// `correlationId` → first decision. Serialises as a JSON object keyed by correlationId.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DedupStore {
    // Boxed: an outcome is a few hundred bytes, and B-tree nodes of inline
    // entries are large enough to hit the allocator's slow path.
    entries: BTreeMap<String, Box<DedupEntry>>,
}

impl DedupStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, correlation_id: &str) -> Option<&DedupEntry> {
        self.entries.get(correlation_id).map(Box::as_ref)
    }

    /// Records a decision the pipeline took; the first decision for a correlationId is
    /// kept. `invalid` and kind-gated outcomes are not recorded (see the module docs).
    pub fn record(&mut self, correlation_id: &str, envelope_type: &str, outcome: &Outcome) {
        if matches!(outcome, Outcome::Invalid(_)) {
            return;
        }
        if let Outcome::Gated(g) = outcome
            && g.code == Code::UnknownEnvelopeKind
        {
            return;
        }
        self.insert(correlation_id, envelope_type, outcome);
    }

    /// Records a decision whatever its status (a caller's `priorCorrelations` entry); the
    /// first decision for a correlationId is kept.
    pub fn insert(&mut self, correlation_id: &str, envelope_type: &str, outcome: &Outcome) {
        self.entries
            .entry(correlation_id.to_owned())
            .or_insert_with(|| {
                Box::new(DedupEntry {
                    envelope_type: envelope_type.to_owned(),
                    outcome: outcome.clone(),
                })
            });
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &DedupEntry)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_ref()))
    }
}

pub(crate) enum Lookup {
    Fresh,
    Replay(Outcome),
    Conflict(Outcome),
}

pub(crate) fn lookup(store: &DedupStore, corr: &str, kind: &str) -> Lookup {
    let Some(entry) = store.get(corr) else {
        return Lookup::Fresh;
    };
    if entry.envelope_type != kind {
        return Lookup::Conflict(Outcome::invalid(
            Code::EnvelopeCorrelationConflict,
            format!(
                "correlationId was already used in this run by an envelope of kind '{}'; this envelope has kind '{}'",
                quote_kind(&entry.envelope_type),
                quote_kind(kind)
            ),
            vec![Detail::new(
                "/correlationId",
                "dedup",
                "a correlationId identifies one emission: re-emit with the original type, or use a new correlationId for a different envelope",
            )],
        ));
    }
    let mut o = entry.outcome.clone();
    match &mut o {
        Outcome::Accepted(a) => a.replayed = true,
        Outcome::Gated(g) => g.replayed = true,
        Outcome::Breached(b) => b.replayed = true,
        Outcome::Invalid(_) => {}
    }
    Lookup::Replay(o)
}
