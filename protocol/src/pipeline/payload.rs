//! Step 4 — per-kind payload schema, with the schema-version drift rules
//! (RFC 0021 §"Schema discipline"):
//! - `schemaVersion` higher than advertised → `unknown_schema_version`, always;
//! - lower under `envelopeStrictness: strict` → `unknown_schema_version`;
//! - lower under `warn` → accepted with an `envelope_schema_version_drift` warning.
//!
//! The version is checked before the payload, since validating against the
//! wrong version's schema would give misleading errors. Kinds without a
//! schema (neither host-supplied nor embedded) skip validation.

use crate::envelope::AiEnvelope;
use crate::outcome::{Code, Detail, Outcome};
use crate::schema::{self, ValidationIssue};

use super::context::{HostPolicy, Strictness, quote_kind};

/// Returns the warnings to attach to an accepted outcome.
pub(crate) fn check(env: &AiEnvelope, host: &HostPolicy) -> Result<Vec<Detail>, Outcome> {
    let mut warnings = Vec::new();
    let advertised = host
        .schema_versions
        .get(&env.kind)
        .copied()
        .or_else(|| schema::kind_schema_version(&env.kind));
    if let Some(adv) = advertised {
        let got = env.schema_version;
        if got > adv || (got < adv && host.strictness == Strictness::Strict) {
            let kind = quote_kind(&env.kind);
            let why = if got > adv {
                "versions above the advertised one are always refused"
            } else {
                "lower versions are refused under envelopeStrictness: strict"
            };
            return Err(Outcome::invalid(
                Code::UnknownSchemaVersion,
                format!(
                    "kind '{kind}' is advertised at schemaVersion {adv}, the envelope has {got}; {why}"
                ),
                vec![Detail::new(
                    "/schemaVersion",
                    "schemaVersion",
                    format!(
                        "emit schemaVersion {adv} for kind '{kind}' with a payload matching that version's schema"
                    ),
                )],
            ));
        }
        if got < adv {
            let kind = quote_kind(&env.kind);
            warnings.push(Detail::new(
                "/schemaVersion",
                Code::EnvelopeSchemaVersionDrift.as_str(),
                format!("kind '{kind}' is advertised at schemaVersion {adv}, the envelope has {got}; accepted under envelopeStrictness: warn"),
            ));
        }
    }
    let result = match host.kind_schemas.get(&env.kind) {
        Some(compiled) => Some(compiled.validate(&env.payload)),
        None => schema::validate_kind_payload(&env.kind, &env.payload),
    };
    if let Some(Err(issues)) = result {
        let n = issues.len();
        return Err(Outcome::invalid(
            Code::EnvelopeInvalid,
            format!(
                "the payload does not match the schema of kind '{}' ({n} problem{}); correct the listed fields and re-emit",
                quote_kind(&env.kind),
                if n == 1 { "" } else { "s" }
            ),
            issues.into_iter().map(payload_detail).collect(),
        ));
    }
    Ok(warnings)
}

/// Validator pointers are relative to the payload; details point into the envelope.
fn payload_detail(i: ValidationIssue) -> Detail {
    Detail {
        instance_path: format!("/payload{}", i.instance_path),
        keyword: Some(i.keyword),
        message: i.message,
    }
}
