//! Step 7 — SR-1 redaction: every string leaf and key of the payload has
//! secret values and `secret:` tokens replaced by `[REDACTED:<secretId>]`
//! before anything is persisted or projected. Refusal texts and projected
//! events get a final pass in `pipeline::finish`, so nothing produced by an
//! earlier step can leak either.

use serde_json::Value;

use crate::redact::Redactor;

/// Redacts the payload in place; returns the number of replacements.
pub(crate) fn apply(payload: &mut Value, redactor: &Redactor) -> u64 {
    redactor.redact_value(payload) as u64
}
