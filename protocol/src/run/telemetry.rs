//! Names on the worker's OpenTelemetry spans that other components read back: the
//! operator's span store (conformance seam `test/otel/spans`) files each exported batch
//! under the run named by its resource attributes.

/// The run id (a Run's uid): on the worker's resource (every exported span) and on its
/// `openwop.run` span.
pub const RUN_ID: &str = "openwop.run_id";
/// The Run's namespace (the tenant), likewise.
pub const NAMESPACE: &str = "openwop.namespace";

use crate::outcome::{Code, Outcome};

/// Name of the span that times one envelope's acceptance.
pub const ENVELOPE_SPAN: &str = "openwop.envelope";
/// On an accepted envelope's span: whether its `schemaVersion` was below the advertised
/// floor and accepted under `envelopeStrictness: warn`.
pub const SCHEMA_VERSION_DRIFT: &str = "envelope_schema_version_drift";
/// The failure code on a failed span (its status is ERROR).
pub const ERROR_CODE: &str = "openwop.error_code";

/// A span attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Int(i64),
    Bool(bool),
}

/// What an [`ENVELOPE_SPAN`] is about.
#[derive(Debug, Clone, Copy)]
pub struct EnvelopeSpan<'a> {
    pub run_id: &'a str,
    pub node_id: &'a str,
    pub correlation_id: &'a str,
    /// `None` when no envelope could be read (a call the retry router gave up on).
    pub envelope_type: Option<&'a str>,
    /// The envelope's attempt under the retry router (1 = first).
    pub retry_attempt: u32,
}

fn envelope_span_base(span: &EnvelopeSpan<'_>, outcome: &str) -> Vec<(&'static str, AttrValue)> {
    let s = |v: &str| AttrValue::Str(v.to_owned());
    let mut attrs = vec![
        (RUN_ID, s(span.run_id)),
        ("openwop.node_id", s(span.node_id)),
        ("openwop.correlation_id", s(span.correlation_id)),
        (
            "openwop.envelope_retry_attempt",
            AttrValue::Int(i64::from(span.retry_attempt)),
        ),
        ("openwop.envelope_outcome", s(outcome)),
    ];
    if let Some(t) = span.envelope_type {
        attrs.push(("openwop.envelope_type", s(t)));
    }
    attrs
}

/// The attributes of an [`ENVELOPE_SPAN`] once the pipeline decided `outcome` — the worker
/// sets them on its span, the conformance seams on the span they record for a projected
/// envelope. A refusal also carries [`ERROR_CODE`] (and the span's status is ERROR with the
/// outcome's message).
pub fn envelope_span_attributes(
    span: &EnvelopeSpan<'_>,
    outcome: &Outcome,
) -> Vec<(&'static str, AttrValue)> {
    let mut attrs = envelope_span_base(span, outcome.status());
    match outcome {
        Outcome::Accepted(a) => {
            let drift = a
                .warnings
                .iter()
                .any(|w| w.keyword.as_deref() == Some(Code::EnvelopeSchemaVersionDrift.as_str()));
            // The spec's own name (`ai-envelope.md` §"Schema discipline": "log the mismatch
            // as `envelope_schema_version_drift` in the OTel span"), not under `openwop.`.
            attrs.push((SCHEMA_VERSION_DRIFT, AttrValue::Bool(drift)));
        }
        refused => {
            if let Some(code) = refused.code() {
                attrs.push((ERROR_CODE, AttrValue::Str(code.as_str().to_owned())));
            }
        }
    }
    attrs
}

/// The attributes of an [`ENVELOPE_SPAN`] whose envelope the retry router gave up on
/// (`envelope_outcome: failed`, [`ERROR_CODE`] = `code`).
pub fn envelope_span_failed(span: &EnvelopeSpan<'_>, code: &str) -> Vec<(&'static str, AttrValue)> {
    let mut attrs = envelope_span_base(span, "failed");
    attrs.push((ERROR_CODE, AttrValue::Str(code.to_owned())));
    attrs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;

    // Drives the envelope-accept seam's request (`pipeline::request`, feature `conformance`).
    #[cfg(feature = "conformance")]
    #[test]
    fn a_below_floor_envelope_accepted_under_warn_carries_the_drift_flag() {
        use crate::pipeline::InputLimits;
        use crate::pipeline::request::{AcceptRequest, evaluate};
        let outcome = |version: u32| {
            let req: AcceptRequest = serde_json::from_value(serde_json::json!({
                "envelope": {"type": "clarification.request", "schemaVersion": version,
                    "correlationId": "r:n:0:d", "payload": {"questions": [{"id": "q1", "question": "why?"}]},
                    "meta": {"source": "ai-generation", "ts": "2026-05-20T10:00:00Z"}},
                "schemaVersionFloor": {"clarification.request": 1},
                "envelopeStrictness": "warn"}))
            .unwrap_or_else(|e| panic!("request fixture: {e}"));
            evaluate(
                &req,
                None,
                InputLimits::default(),
                "r",
                0,
                "2026-05-20T10:00:00Z",
            )
            .unwrap_or_else(|e| panic!("evaluate: {e}"))
            .processed
            .outcome
        };
        let span = EnvelopeSpan {
            run_id: "r",
            node_id: "n",
            correlation_id: "r:n:0:d",
            envelope_type: Some("clarification.request"),
            retry_attempt: 1,
        };
        let drift = |o: &Outcome| {
            envelope_span_attributes(&span, o)
                .into_iter()
                .find(|(k, _)| *k == SCHEMA_VERSION_DRIFT)
                .map(|(_, v)| v)
        };
        let below = outcome(0);
        assert!(below.is_accepted(), "{below:?}");
        assert_eq!(drift(&below), Some(AttrValue::Bool(true)));
        assert_eq!(drift(&outcome(1)), Some(AttrValue::Bool(false)));
    }

    #[test]
    fn an_envelope_span_names_its_outcome_and_a_refusal_its_code() {
        let span = EnvelopeSpan {
            run_id: "r",
            node_id: "n",
            correlation_id: "r:n:0:x",
            envelope_type: Some("vendor.acme.note"),
            retry_attempt: 2,
        };
        let refused: Outcome = serde_json::from_value(serde_json::json!({
            "status": "invalid", "reason": "invalid_envelope_shape", "message": "bad",
            "details": []}))
        .unwrap_or_else(|e| panic!("outcome fixture: {e}"));
        let attrs = envelope_span_attributes(&span, &refused);
        let get = |k: &str| attrs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert_eq!(get(RUN_ID), Some(AttrValue::Str("r".into())));
        assert_eq!(
            get("openwop.envelope_retry_attempt"),
            Some(AttrValue::Int(2))
        );
        assert_eq!(
            get("openwop.envelope_outcome"),
            Some(AttrValue::Str("invalid".into()))
        );
        assert_eq!(
            get(ERROR_CODE),
            Some(AttrValue::Str("invalid_envelope_shape".into()))
        );
        assert_eq!(get(SCHEMA_VERSION_DRIFT), None);
        let failed = envelope_span_failed(
            &EnvelopeSpan {
                envelope_type: None,
                ..span
            },
            "x_code",
        );
        assert!(failed.contains(&("openwop.envelope_outcome", AttrValue::Str("failed".into()))));
        assert!(failed.contains(&(ERROR_CODE, AttrValue::Str("x_code".into()))));
        assert!(!failed.iter().any(|(k, _)| *k == "openwop.envelope_type"));
    }
}
