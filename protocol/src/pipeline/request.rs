//! The envelope-accept request: the body of the spec's host test seam
//! `POST /v1/host/sample/envelope/accept` (`host-sample-test-seams.md`, RFC 0021 §A) and
//! the input of `kubectl-openwop envelope accept` — one type, one evaluation
//! ([`evaluate`]), so the CLI and the HTTP seam cannot drift apart.
//!
//! `persistedDedup: {runId}` names a dedup record kept outside the request (the
//! operator's JetStream key-value bucket, the CLI's `--dedup-store` file). This crate
//! does no I/O: the caller looks the record up under [`AcceptRequest::dedup_key`],
//! passes it to [`evaluate`], and stores [`Evaluated::record`] when there is one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::envelope::ContentTrust;
use crate::events::EventFactory;
use crate::outcome::Outcome;
use crate::redact::Redactor;

use super::{
    Context, Counters, DedupEntry, DedupStore, EnvelopeContract, HostPolicy, InputLimits,
    Processed, RefusalMode, Strictness,
};

/// The request. Unknown fields are refused so a typo surfaces instead of being ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AcceptRequest {
    /// The candidate envelope, as the model emitted it.
    pub envelope: Value,
    /// The host gate (`supportedEnvelopes`); absent = every kind passes this gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_supported_envelopes: Option<Vec<String>>,
    /// The node's envelope contract (`accepts`); absent = no node-level restriction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_allowed_kinds: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_trust_boundary: Option<ContentTrust>,
    #[serde(default)]
    pub counters: Counters,
    /// Advertised `schemaVersions` per kind.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub schema_version_floor: BTreeMap<String, u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope_strictness: Option<Strictness>,
    /// Decisions already taken in this run (replay determinism).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prior_correlations: Vec<PriorCorrelation>,
    /// SR-1 secrets to redact: `{value, secretId}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub byok_canaries: Vec<Canary>,
    /// Project the outcome onto a run's event log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_to: Option<ProjectTo>,
    /// Read and write this correlationId's decision in a persisted store keyed by run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persisted_dedup: Option<PersistedDedup>,
    /// The envelope is presented as the resolution of an approval gate.
    #[serde(default)]
    pub approval_gate_context: bool,
}

/// One earlier decision: `{correlationId, outcome, envelopeType}`. The outcome may be this
/// host's own or the spec's minimal `EnvelopeOutcome` ([`Outcome::from_prior_value`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriorCorrelation {
    pub correlation_id: String,
    #[serde(deserialize_with = "prior_outcome")]
    pub outcome: Outcome,
    pub envelope_type: String,
}

fn prior_outcome<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Outcome, D::Error> {
    let v = Value::deserialize(d)?;
    Outcome::from_prior_value(&v)
        .map_err(|why| serde::de::Error::custom(format!("priorCorrelations[].outcome {why}")))
}

/// A BYOK secret the outcome and events must never carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Canary {
    pub value: String,
    pub secret_id: String,
}

/// Where projected events go: `{runId, nodeId?, refusalMode?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProjectTo {
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Overrides the contracts' refusal mode for every gate (host and node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal_mode: Option<RefusalMode>,
}

/// `{runId}`: the run whose persisted dedup records apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PersistedDedup {
    pub run_id: String,
}

/// A request that cannot be evaluated; each says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error(
        "byokCanaries[{index}] has an empty {field}: give each canary a non-empty value and secretId"
    )]
    EmptyCanary { index: usize, field: &'static str },
    #[error("{field} is empty: give the run id the events or dedup records belong to")]
    EmptyRunId { field: &'static str },
    #[error(
        "priorCorrelations[{index}] has an empty correlationId or envelopeType: give both, as returned with the earlier outcome"
    )]
    EmptyPrior { index: usize },
}

/// What [`evaluate`] decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluated {
    pub processed: Processed,
    /// The run the events belong to: `projectTo.runId`, else the caller's default.
    pub run_id: String,
    /// With `persistedDedup`: the decision to store under (runId, [`AcceptRequest::dedup_key`]),
    /// unless it was itself served from the store.
    pub record: Option<DedupEntry>,
}

impl AcceptRequest {
    /// Checks what serde cannot: non-empty canaries, run ids and prior correlations.
    pub fn validate(&self) -> Result<(), RequestError> {
        for (index, c) in self.byok_canaries.iter().enumerate() {
            for (field, v) in [("value", &c.value), ("secretId", &c.secret_id)] {
                if v.is_empty() {
                    return Err(RequestError::EmptyCanary { index, field });
                }
            }
        }
        if self
            .project_to
            .as_ref()
            .is_some_and(|p| p.run_id.is_empty())
        {
            return Err(RequestError::EmptyRunId {
                field: "projectTo.runId",
            });
        }
        if self
            .persisted_dedup
            .as_ref()
            .is_some_and(|p| p.run_id.is_empty())
        {
            return Err(RequestError::EmptyRunId {
                field: "persistedDedup.runId",
            });
        }
        if let Some(index) = self
            .prior_correlations
            .iter()
            .position(|p| p.correlation_id.is_empty() || p.envelope_type.is_empty())
        {
            return Err(RequestError::EmptyPrior { index });
        }
        Ok(())
    }

    /// The SR-1 redactor of this request's canaries.
    pub fn redactor(&self) -> Redactor {
        Redactor::new(
            self.byok_canaries
                .iter()
                .map(|c| (c.secret_id.clone(), c.value.clone())),
        )
    }

    /// The key of the persisted dedup record: the envelope's correlationId, redacted as
    /// the pipeline redacts it (a secret pasted into an id never reaches a store). `None`
    /// without `persistedDedup` or without a string correlationId.
    pub fn dedup_key(&self) -> Option<String> {
        self.persisted_dedup.as_ref()?;
        let mut corr = self.envelope.get("correlationId")?.as_str()?.to_owned();
        self.redactor().redact_in_place(&mut corr);
        Some(corr)
    }

    /// The events' timestamp: the envelope's own `meta.ts` when it is a valid ISO 8601
    /// time (deterministic), else `now`.
    pub fn event_timestamp<'a>(&'a self, now: &'a str) -> &'a str {
        self.envelope
            .pointer("/meta/ts")
            .and_then(Value::as_str)
            .filter(|t| super::shape::is_iso8601(t))
            .unwrap_or(now)
    }
}

/// Runs the request's envelope through the pipeline. `persisted` is the record found
/// under (persistedDedup.runId, [`AcceptRequest::dedup_key`]); it wins over an explicit
/// `priorCorrelations` entry for the same id (the store is the cross-process source of
/// truth). Events get `projectTo.runId` (else `default_run_id`) and sequences from
/// `first_sequence`.
pub fn evaluate(
    req: &AcceptRequest,
    persisted: Option<DedupEntry>,
    input_limits: InputLimits,
    default_run_id: &str,
    first_sequence: u64,
    now: &str,
) -> Result<Evaluated, RequestError> {
    req.validate()?;
    let host = HostPolicy {
        supported_envelopes: req.host_supported_envelopes.clone(),
        schema_versions: req.schema_version_floor.clone(),
        strictness: req.envelope_strictness.unwrap_or_default(),
        input_limits,
        ..HostPolicy::default()
    };
    let redactor = req.redactor();
    let refusal_mode = req.project_to.as_ref().and_then(|p| p.refusal_mode);
    let node_contract = req
        .node_allowed_kinds
        .clone()
        .map(|accepts| EnvelopeContract {
            accepts,
            refusal_mode: refusal_mode.unwrap_or_default(),
        });
    let node_id = req
        .project_to
        .as_ref()
        .and_then(|p| p.node_id.as_deref())
        .or_else(|| req.envelope.get("nodeId").and_then(Value::as_str))
        .unwrap_or("node");
    let timestamp = req.event_timestamp(now);
    let mut ctx = Context::new(&host, &redactor, node_id, timestamp);
    ctx.node_contract = node_contract.as_ref();
    ctx.refusal_mode = refusal_mode;
    ctx.run_trust_boundary = req.run_trust_boundary;
    ctx.counters = req.counters;
    ctx.approval_gate_context = req.approval_gate_context;

    let mut store = DedupStore::new();
    let key = req.dedup_key();
    if let (Some(key), Some(entry)) = (&key, &persisted) {
        store.record(key, &entry.envelope_type, &entry.outcome);
    }
    for p in &req.prior_correlations {
        let mut corr = p.correlation_id.clone();
        redactor.redact_in_place(&mut corr);
        // First record wins: the persisted one, when present. A decision the caller hands
        // back replays whatever its status (`ai-envelope.md` §"Replay determinism": the
        // cached outcome is returned), unlike the pipeline's own, which skips `invalid`.
        store.insert(&corr, &p.envelope_type, &p.outcome);
    }
    let run_id = req
        .project_to
        .as_ref()
        .map_or(default_run_id, |p| p.run_id.as_str())
        .to_owned();
    let mut events = EventFactory::new(run_id.clone(), first_sequence);
    let processed = super::accept_value(req.envelope.clone(), None, &ctx, &mut store, &mut events);
    let record = match (&key, &persisted) {
        (Some(key), None) => store.get(key).cloned(),
        _ => None,
    };
    Ok(Evaluated {
        processed,
        run_id,
        record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Code;
    use serde_json::json;

    fn env(kind: &str, corr: &str) -> Value {
        json!({"type": kind, "schemaVersion": 1, "correlationId": corr,
            "payload": {"code": "x", "message": "y"},
            "meta": {"source": "ai-generation", "ts": "2026-05-18T10:00:00Z"}})
    }

    fn req(v: Value) -> AcceptRequest {
        serde_json::from_value(v).unwrap()
    }

    fn eval(r: &AcceptRequest, persisted: Option<DedupEntry>) -> Evaluated {
        evaluate(
            r,
            persisted,
            InputLimits::default(),
            "run-local",
            0,
            "2026-01-01T00:00:00Z",
        )
        .unwrap()
    }

    #[test]
    fn the_spec_shape_parses_and_unknown_fields_are_refused() {
        let r = req(json!({
            "envelope": env("error", "c1"),
            "hostSupportedEnvelopes": ["vendor.a.b"], "nodeAllowedKinds": ["vendor.a.b"],
            "runTrustBoundary": "untrusted", "counters": {"envelopesPerTurn": {"current": 1, "cap": 3}},
            "schemaVersionFloor": {"vendor.a.b": 1}, "envelopeStrictness": "strict",
            "priorCorrelations": [{"correlationId": "c0", "envelopeType": "error",
                "outcome": {"status": "breached", "reason": "envelopesPerTurn limit 1 reached (observed 1)",
                    "message": "m", "capKind": "envelopes", "limit": 1, "observed": 1}}],
            "byokCanaries": [{"value": "sk-1", "secretId": "openai"}],
            "projectTo": {"runId": "r1", "nodeId": "n1", "refusalMode": "discard-and-warn"},
            "persistedDedup": {"runId": "r1"}, "approvalGateContext": false
        }));
        assert_eq!(r.prior_correlations[0].correlation_id, "c0");
        assert_eq!(
            r.project_to.as_ref().unwrap().refusal_mode,
            Some(RefusalMode::DiscardAndWarn)
        );
        // The old map shape and unknown fields are refused, not ignored.
        for bad in [
            json!({"envelope": {}, "priorCorrelations": {"c0": {"envelopeType": "error", "outcome": {}}}}),
            json!({"envelope": {}, "persistedDedup": {"c0": {}}}),
            json!({"envelope": {}, "projectTo": {"runId": "r", "timestamp": "t"}}),
            json!({"envelope": {}, "hostAlowedKinds": []}),
        ] {
            assert!(
                serde_json::from_value::<AcceptRequest>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn prior_correlations_replay_and_conflict() {
        let first = eval(&req(json!({"envelope": env("error", "c1")})), None);
        assert!(first.processed.outcome.is_accepted());
        let prior = json!([{"correlationId": "c1", "envelopeType": "error",
            "outcome": serde_json::to_value(&first.processed.outcome).unwrap()}]);
        let again = eval(
            &req(json!({"envelope": env("error", "c1"), "priorCorrelations": prior})),
            None,
        );
        let Outcome::Accepted(a) = &again.processed.outcome else {
            panic!("{:?}", again.processed.outcome)
        };
        assert!(a.replayed);
        assert!(again.processed.events.is_empty());
        let mut other = env("schema.request", "c1");
        other["payload"] = json!({"envelopeType": "vendor.a.b"});
        let conflict = eval(
            &req(json!({"envelope": other, "priorCorrelations": prior})),
            None,
        );
        assert_eq!(
            serde_json::to_value(&conflict.processed.outcome).unwrap()["reason"],
            "envelope_correlation_conflict"
        );
    }

    /// The spec's minimal `EnvelopeOutcome`, as the conformance suite's correlationReplay
    /// scenario sends it: accepted without `redactedPayload`, gated with a sentence reason.
    #[test]
    fn prior_outcomes_in_the_spec_shape_replay_whatever_their_status() {
        let prior = |corr: &str, kind: &str, outcome: Value| json!([{"correlationId": corr, "envelopeType": kind, "outcome": outcome}]);
        // Accepted: replayed with the caller's envelopeId, no new events.
        let r = req(
            json!({"envelope": env("error", "c1"), "priorCorrelations": prior("c1", "error",
            json!({"status": "accepted", "envelopeId": "env-prior", "recordedEventIds": [],
                "normalizedMeta": {"contentTrust": "trusted"}}))}),
        );
        let e = eval(&r, None);
        let Outcome::Accepted(a) = &e.processed.outcome else {
            panic!("{:?}", e.processed.outcome)
        };
        assert!(a.replayed);
        assert_eq!(a.envelope_id, "env-prior");
        assert!(e.processed.events.is_empty());
        // Same correlationId, another type: the conflict, not a parse error.
        let r = req(
            json!({"envelope": env("error", "c2"), "priorCorrelations": prior("c2",
            "clarification.request", json!({"status": "accepted", "envelopeId": "env-prior",
                "recordedEventIds": [], "normalizedMeta": {"contentTrust": "trusted"}}))}),
        );
        assert_eq!(
            eval(&r, None).processed.outcome.code(),
            Some(Code::EnvelopeCorrelationConflict)
        );
        // Gated with a sentence, although the host gate would accept the kind now: gated
        // again, the sentence kept as the message.
        let mut v = env("vendor.x.foo", "c3");
        v["payload"] = json!({});
        let r = req(
            json!({"envelope": v, "hostSupportedEnvelopes": ["vendor.x.foo"],
            "priorCorrelations": prior("c3", "vendor.x.foo", json!({"status": "gated",
                "reason": "envelope type 'vendor.x.foo' not advertised",
                "allowedKinds": ["error"]}))}),
        );
        let e = eval(&r, None);
        let Outcome::Gated(g) = &e.processed.outcome else {
            panic!("{:?}", e.processed.outcome)
        };
        assert!(g.replayed);
        assert_eq!(g.message, "envelope type 'vendor.x.foo' not advertised");
        assert_eq!(g.allowed_kinds, vec!["error".to_owned()]);
        // Invalid replays too (a decision the caller hands back was taken).
        let r = req(
            json!({"envelope": env("error", "c4"), "priorCorrelations": prior("c4", "error",
            json!({"status": "invalid", "reason": "unknown_schema_version", "details": []}))}),
        );
        assert_eq!(
            eval(&r, None).processed.outcome.code(),
            Some(Code::UnknownSchemaVersion)
        );
        // An unusable prior says what to give.
        for (outcome, says) in [
            (json!({"reason": "x"}), "has no status"),
            (
                json!({"status": "breached", "reason": "x"}),
                "without a capKind",
            ),
            (json!("accepted"), "is not an object"),
        ] {
            let err =
                serde_json::from_value::<AcceptRequest>(json!({"envelope": env("error", "c"),
                "priorCorrelations": prior("c", "error", outcome.clone())}))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("priorCorrelations[].outcome") && err.contains(says),
                "{outcome}: {err}"
            );
        }
    }

    #[test]
    fn persisted_dedup_returns_a_record_once_and_replays_it_after() {
        let r =
            req(json!({"envelope": env("error", "r1:n:0:a"), "persistedDedup": {"runId": "r1"}}));
        assert_eq!(r.dedup_key().as_deref(), Some("r1:n:0:a"));
        let first = eval(&r, None);
        let record = first
            .record
            .clone()
            .expect("a fresh decision is to be stored");
        assert_eq!(record.envelope_type, "error");
        let second = eval(&r, Some(record.clone()));
        assert!(
            second.record.is_none(),
            "served from the store: nothing new to store"
        );
        let Outcome::Accepted(a) = &second.processed.outcome else {
            panic!()
        };
        assert!(a.replayed);
        // The persisted record wins over a conflicting explicit entry.
        let mut with_prior = r.clone();
        with_prior.prior_correlations.push(PriorCorrelation {
            correlation_id: "r1:n:0:a".into(),
            outcome: first.processed.outcome.clone(),
            envelope_type: "schema.request".into(),
        });
        let third = eval(&with_prior, Some(record));
        assert!(third.processed.outcome.is_accepted());
    }

    #[test]
    fn project_to_refusal_mode_applies_to_the_host_gate_too() {
        let r = req(json!({"envelope": env("vendor.x.unadvertised", "c"),
            "hostSupportedEnvelopes": ["vendor.x.only"],
            "projectTo": {"runId": "r-host", "nodeId": "n", "refusalMode": "discard-and-warn"}}));
        let e = eval(&r, None);
        assert_eq!(e.run_id, "r-host");
        assert_eq!(e.processed.events.len(), 1);
        assert_eq!(e.processed.events[0].run_id, "r-host");
        assert_eq!(e.processed.events[0].payload["level"], "warn");
        let r = req(json!({"envelope": env("vendor.x.unadvertised", "c"),
            "hostSupportedEnvelopes": ["vendor.x.only"], "nodeAllowedKinds": ["vendor.x.unadvertised"],
            "projectTo": {"runId": "r-host", "nodeId": "n"}}));
        let e = eval(&r, None);
        assert_eq!(
            e.processed.events[0].payload["error"]["code"],
            "envelope_contract_violation"
        );
    }

    #[test]
    fn canaries_never_reach_the_dedup_key_and_bad_requests_say_what_to_fix() {
        let r = req(json!({"envelope": env("error", "corr-sk-secret-1"),
            "byokCanaries": [{"value": "sk-secret-1", "secretId": "k"}], "persistedDedup": {"runId": "r"}}));
        let key = r.dedup_key().unwrap();
        assert!(!key.contains("sk-secret-1"), "{key}");
        let bad = req(
            json!({"envelope": env("error", "c"), "byokCanaries": [{"value": "", "secretId": "k"}]}),
        );
        let e = evaluate(&bad, None, InputLimits::default(), "r", 0, "t").unwrap_err();
        assert_eq!(
            e,
            RequestError::EmptyCanary {
                index: 0,
                field: "value"
            }
        );
        assert!(e.to_string().contains("byokCanaries[0]"));
        let bad = req(json!({"envelope": env("error", "c"), "projectTo": {"runId": ""}}));
        assert!(bad.validate().is_err());
    }
}
