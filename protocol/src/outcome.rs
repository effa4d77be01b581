//! The envelope pipeline's outcome and every refusal / terminal code of the
//! OpenWOP v1 wire contract.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::envelope::ContentTrust;

/// Every refusal, warning and terminal error code the pipeline and the retry
/// router put on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// Not JSON, not an object, invalid UTF-8, over a parse limit, duplicate key,
    /// or the closed top level / `meta` block is wrong.
    InvalidEnvelopeShape,
    /// `type` is not in the host's `supportedEnvelopes` (host-level gate).
    UnknownEnvelopeKind,
    /// The payload fails its kind's schema.
    EnvelopeInvalid,
    /// `schemaVersion` higher than advertised, or lower under `envelopeStrictness: strict`.
    UnknownSchemaVersion,
    /// Same `correlationId` re-emitted with a different `type`.
    EnvelopeCorrelationConflict,
    /// `type` outside the node's envelope contract (node-level gate).
    EnvelopeContractViolation,
    /// An engine limit (`envelopesPerTurn`, `schemaRounds`, `clarificationRounds`) is reached.
    CapBreached,
    /// Untrusted content presented as the resolution of an approval gate.
    UntrustedContentBlocksApproval,
    /// The request needs a capability the host does not offer.
    CapabilityRequired,
    /// Warning (never a refusal): lower `schemaVersion` accepted under `warn`.
    EnvelopeSchemaVersionDrift,
    /// Terminal: truncation retries exhausted.
    EnvelopeTruncationUnrecoverable,
    /// Terminal: the provider refused; never retried.
    EnvelopeRefusal,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidEnvelopeShape => "invalid_envelope_shape",
            Code::UnknownEnvelopeKind => "unknown_envelope_kind",
            Code::EnvelopeInvalid => "envelope_invalid",
            Code::UnknownSchemaVersion => "unknown_schema_version",
            Code::EnvelopeCorrelationConflict => "envelope_correlation_conflict",
            Code::EnvelopeContractViolation => "envelope_contract_violation",
            Code::CapBreached => "cap_breached",
            Code::UntrustedContentBlocksApproval => "untrusted_content_blocks_approval",
            Code::CapabilityRequired => "capability_required",
            Code::EnvelopeSchemaVersionDrift => "envelope_schema_version_drift",
            Code::EnvelopeTruncationUnrecoverable => "envelope_truncation_unrecoverable",
            Code::EnvelopeRefusal => "envelope_refusal",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One located problem: a JSON Pointer into the envelope and a message a
/// person can act on. Messages never quote instance values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Detail {
    pub instance_path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyword: Option<String>,
    pub message: String,
}

impl Detail {
    pub fn new(
        instance_path: impl Into<String>,
        keyword: &str,
        message: impl Into<String>,
    ) -> Self {
        Detail {
            instance_path: instance_path.into(),
            keyword: Some(keyword.to_owned()),
            message: message.into(),
        }
    }
}

/// What the pipeline decided about one envelope. Serialises with a `status`
/// discriminator: `accepted | gated | invalid | breached`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Outcome {
    Accepted(Accepted),
    Gated(Gated),
    Invalid(Invalid),
    Breached(Breached),
}

impl Outcome {
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Accepted(_) => "accepted",
            Outcome::Gated(_) => "gated",
            Outcome::Invalid(_) => "invalid",
            Outcome::Breached(_) => "breached",
        }
    }

    pub fn is_accepted(&self) -> bool {
        matches!(self, Outcome::Accepted(_))
    }

    /// The refusal code; `None` when accepted.
    pub fn code(&self) -> Option<Code> {
        match self {
            Outcome::Accepted(_) => None,
            Outcome::Gated(g) => Some(g.code),
            Outcome::Invalid(i) => Some(i.code),
            Outcome::Breached(b) => Some(b.code),
        }
    }

    /// The sentence for people explaining a refusal (the code is [`Outcome::code`]).
    pub fn message(&self) -> Option<&str> {
        match self {
            Outcome::Accepted(_) => None,
            Outcome::Gated(g) => Some(&g.message),
            Outcome::Invalid(i) => Some(&i.message),
            Outcome::Breached(b) => Some(&b.message),
        }
    }

    pub(crate) fn invalid(
        code: Code,
        sentence: impl fmt::Display,
        details: Vec<Detail>,
    ) -> Outcome {
        Outcome::Invalid(Invalid {
            code,
            message: sentence.to_string(),
            details,
        })
    }
}

impl Outcome {
    /// Reads a decision a caller hands back (`priorCorrelations[].outcome` of the envelope-accept
    /// request): this host's own serialised outcome, or the spec's minimal `EnvelopeOutcome`
    /// (`ai-envelope.md`: `{status, recordedEventIds}` / `{status, reason, …}`) as other hosts
    /// and the conformance suite send it — an accepted outcome without `redactedPayload`, a
    /// gated one whose `reason` is a sentence. Fields this host's outcome has and the caller
    /// left out take neutral values (no events, trusted, payload `null`, no redactions); a
    /// `reason` that is not one of [`Code`] is kept as the outcome's `message`, under the code
    /// of its status (`gated`: `envelope_contract_violation`, `invalid`: `envelope_invalid`).
    /// The error says what is missing.
    pub fn from_prior_value(v: &Value) -> Result<Outcome, String> {
        if let Ok(o) = serde_json::from_value::<Outcome>(v.clone()) {
            return Ok(o);
        }
        let Some(obj) = v.as_object() else {
            return Err("is not an object: give the outcome the earlier accept returned".into());
        };
        let str_of = |k: &str| obj.get(k).and_then(Value::as_str);
        let strings_of = |k: &str| -> Vec<String> {
            obj.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        // The reason as a code when it is one; otherwise the caller's sentence.
        let reason = str_of("reason");
        let code_of = |fallback: Code| {
            reason
                .and_then(|r| serde_json::from_value::<Code>(Value::from(r)).ok())
                .unwrap_or(fallback)
        };
        let message = str_of("message").or(reason).unwrap_or_default().to_owned();
        match str_of("status") {
            Some("accepted") => Ok(Outcome::Accepted(Accepted {
                envelope_id: str_of("envelopeId").unwrap_or_default().to_owned(),
                recorded_event_ids: strings_of("recordedEventIds"),
                normalized_meta: obj
                    .get("normalizedMeta")
                    .and_then(|m| serde_json::from_value(m.clone()).ok())
                    .unwrap_or(NormalizedMeta {
                        content_trust: ContentTrust::Trusted,
                    }),
                redacted_payload: obj.get("redactedPayload").cloned().unwrap_or(Value::Null).into(),
                redaction_count: obj.get("redactionCount").and_then(Value::as_u64).unwrap_or(0),
                replayed: false,
                warnings: Vec::new(),
            })),
            Some("gated") => {
                let code = code_of(Code::EnvelopeContractViolation);
                let gate = obj
                    .get("gate")
                    .and_then(|g| serde_json::from_value(g.clone()).ok())
                    .unwrap_or(if code == Code::UnknownEnvelopeKind {
                        Gate::SupportedEnvelopes
                    } else {
                        Gate::NodeContract
                    });
                Ok(Outcome::Gated(Gated {
                    code,
                    message,
                    gate,
                    refused_type: str_of("refusedType").unwrap_or_default().to_owned(),
                    allowed_kinds: strings_of("allowedKinds"),
                    replayed: false,
                }))
            }
            Some("invalid") => Ok(Outcome::Invalid(Invalid {
                code: code_of(Code::EnvelopeInvalid),
                message,
                details: obj
                    .get("details")
                    .and_then(|d| serde_json::from_value(d.clone()).ok())
                    .unwrap_or_default(),
            })),
            Some("breached") => {
                let Some(cap_kind) = obj
                    .get("capKind")
                    .and_then(|k| serde_json::from_value::<EnvelopeCapKind>(k.clone()).ok())
                else {
                    return Err(
                        "is breached without a capKind: give capKind envelopes, schema or clarification"
                            .into(),
                    );
                };
                Ok(Outcome::Breached(Breached {
                    code: Code::CapBreached,
                    reason: reason.unwrap_or(cap_kind.limit_name()).to_owned(),
                    message,
                    cap_kind,
                    limit: obj.get("limit").and_then(Value::as_u64).unwrap_or(0),
                    observed: obj.get("observed").and_then(Value::as_u64).unwrap_or(0),
                    replayed: false,
                }))
            }
            _ => Err(
                "has no status accepted, gated, invalid or breached: give the outcome the earlier accept returned"
                    .into(),
            ),
        }
    }
}

/// Trust resolved by the trust step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NormalizedMeta {
    pub content_trust: ContentTrust,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    /// The envelope's own id, or the engine-assigned one (`pipeline::envelope_id_for`).
    pub envelope_id: String,
    /// Ids of the events projected for this envelope, in order.
    pub recorded_event_ids: Vec<String>,
    pub normalized_meta: NormalizedMeta,
    /// The payload as it must be persisted: secrets replaced by `[REDACTED:<secretId>]`.
    pub redacted_payload: SharedValue,
    pub redaction_count: u64,
    /// True when this outcome was served from the correlationId dedup store.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// Non-blocking findings, e.g. `envelope_schema_version_drift`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Detail>,
}

/// An immutable JSON value behind a reference count: the accepted payload is
/// held by the caller's outcome and by the dedup store's replay copy, and
/// cloning it must not copy the tree. Reads go through `Deref<Target = Value>`;
/// it serialises exactly as the value.
#[derive(Clone, PartialEq, Default)]
pub struct SharedValue(Arc<Value>);

impl SharedValue {
    /// The value itself (copied only if another holder still shares it).
    pub fn into_value(self) -> Value {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone())
    }
}

impl Deref for SharedValue {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.0
    }
}

impl From<Value> for SharedValue {
    fn from(v: Value) -> Self {
        SharedValue(Arc::new(v))
    }
}

impl PartialEq<Value> for SharedValue {
    fn eq(&self, other: &Value) -> bool {
        *self.0 == *other
    }
}

impl fmt::Debug for SharedValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl Serialize for SharedValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SharedValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(SharedValue::from)
    }
}

/// Which gate refused, in pipeline order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Gate {
    /// The kind is not in the host's `supportedEnvelopes` (`unknown_envelope_kind`; retryable).
    SupportedEnvelopes,
    /// The host-level envelope contract of the node's typeId refused it.
    HostContract,
    /// The node's own envelope contract refused it.
    NodeContract,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gated {
    /// `unknown_envelope_kind` (supportedEnvelopes) or `envelope_contract_violation` (contracts).
    /// On the wire: `reason`, the bare code.
    #[serde(rename = "reason")]
    pub code: Code,
    /// The sentence for people: what was refused and what to emit instead.
    pub message: String,
    pub gate: Gate,
    pub refused_type: String,
    /// Universal kinds plus the kinds the refusing gate allows.
    pub allowed_kinds: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Invalid {
    /// On the wire: `reason`, the bare code.
    #[serde(rename = "reason")]
    pub code: Code,
    /// The sentence for people; `details` locates each problem.
    pub message: String,
    pub details: Vec<Detail>,
}

fn cap_breached() -> Code {
    Code::CapBreached
}

/// The engine-limit families an envelope can breach (a subset of `CapKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnvelopeCapKind {
    Envelopes,
    Schema,
    Clarification,
}

impl EnvelopeCapKind {
    /// The capabilities `limits` field that bounds this family.
    pub fn limit_name(self) -> &'static str {
        match self {
            EnvelopeCapKind::Envelopes => "envelopesPerTurn",
            EnvelopeCapKind::Schema => "schemaRounds",
            EnvelopeCapKind::Clarification => "clarificationRounds",
        }
    }

    pub fn cap_kind(self) -> crate::events::CapKind {
        match self {
            EnvelopeCapKind::Envelopes => crate::events::CapKind::Envelopes,
            EnvelopeCapKind::Schema => crate::events::CapKind::Schema,
            EnvelopeCapKind::Clarification => crate::events::CapKind::Clarification,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Breached {
    /// Always `cap_breached` (implied on the wire by `status: breached`).
    #[serde(skip, default = "cap_breached")]
    pub code: Code,
    /// Names the limit and its value, e.g. `envelopesPerTurn limit 3 reached (observed 3)`:
    /// unlike the other refusals, the spec's conformance suite reads the limit from the
    /// breached outcome's `reason` (aiEnvelope.capBreached "breached reason cites the limit
    /// and cap value").
    pub reason: String,
    /// The sentence for people.
    pub message: String,
    pub cap_kind: EnvelopeCapKind,
    pub limit: u64,
    pub observed: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outcomes_serialise_with_status_and_codes() {
        let o = Outcome::invalid(
            Code::InvalidEnvelopeShape,
            "meta.ts must be ISO 8601",
            vec![Detail::new("/meta/ts", "format", "use ISO 8601")],
        );
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(v["status"], "invalid");
        // The spec's outcome: `reason` is the bare code; the words are in `message`.
        assert_eq!(v["reason"], "invalid_envelope_shape");
        assert_eq!(v["message"], "meta.ts must be ISO 8601");
        assert!(v.get("code").is_none(), "{v}");
        assert_eq!(v["details"][0]["instancePath"], "/meta/ts");
        assert_eq!(serde_json::from_value::<Outcome>(v).unwrap(), o);

        let b = Outcome::Breached(Breached {
            code: Code::CapBreached,
            reason: "schemaRounds limit 2 reached (observed 2)".into(),
            message: "m".into(),
            cap_kind: EnvelopeCapKind::Schema,
            limit: 2,
            observed: 2,
            replayed: false,
        });
        let v = serde_json::to_value(&b).unwrap();
        assert_eq!(
            v,
            json!({"status": "breached", "reason": "schemaRounds limit 2 reached (observed 2)", "message": "m", "capKind": "schema", "limit": 2, "observed": 2})
        );
        assert_eq!(serde_json::from_value::<Outcome>(v).unwrap(), b);
    }

    #[test]
    fn every_code_has_its_wire_name() {
        for (c, s) in [
            (Code::InvalidEnvelopeShape, "invalid_envelope_shape"),
            (Code::UnknownEnvelopeKind, "unknown_envelope_kind"),
            (Code::EnvelopeInvalid, "envelope_invalid"),
            (Code::UnknownSchemaVersion, "unknown_schema_version"),
            (
                Code::EnvelopeCorrelationConflict,
                "envelope_correlation_conflict",
            ),
            (
                Code::EnvelopeContractViolation,
                "envelope_contract_violation",
            ),
            (Code::CapBreached, "cap_breached"),
            (
                Code::UntrustedContentBlocksApproval,
                "untrusted_content_blocks_approval",
            ),
            (Code::CapabilityRequired, "capability_required"),
            (
                Code::EnvelopeSchemaVersionDrift,
                "envelope_schema_version_drift",
            ),
            (
                Code::EnvelopeTruncationUnrecoverable,
                "envelope_truncation_unrecoverable",
            ),
            (Code::EnvelopeRefusal, "envelope_refusal"),
        ] {
            assert_eq!(c.as_str(), s);
            assert_eq!(serde_json::to_value(c).unwrap(), json!(s));
        }
    }
}
