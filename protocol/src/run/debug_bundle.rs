//! The run debug bundle (`debug-bundle.md`): one run's snapshot and event log in one
//! portable document, redacted. Served by the conformance seam
//! `POST /v1/host/sample/test/debug-bundle/export`.
//!
//! Redaction: the worker already redacts everything it publishes (SR-1, [`Redactor`]);
//! the bundle passes the whole document through the run's redactor once more, so a value
//! that reached the log by another way (a sensitive input echoed by an operator-written
//! event, say) still leaves only as `[REDACTED:<secretId>]`.

use serde::Serialize;
use serde_json::{Value, json};

use super::api::RunSnapshotDoc;
use crate::redact::Redactor;

/// `bundleVersion` of every v1 bundle.
pub const BUNDLE_VERSION: &str = "1";

/// The spec's default size cap (8 MB): larger logs are cut to a prefix that fits.
pub const MAX_BUNDLE_BYTES: usize = 8 * 1024 * 1024;

/// `truncatedReason` of a bundle whose events were cut to the cap.
pub const TRUNCATED_REASON: &str = "events_truncated_to_size_cap";

/// The `redactionMode` this host applies: secrets are masked as `[REDACTED:<secretId>]`.
pub const REDACTION_MODE: &str = "mask";

/// The host that produced the bundle (`capabilities.implementation`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BundleHost {
    pub name: String,
    pub version: String,
    pub vendor: String,
}

/// What a bundle is built from.
pub struct BundleInput<'a> {
    pub host: BundleHost,
    /// The run's snapshot, exactly as `GET /v1/runs/{runId}` serves it.
    pub run: &'a RunSnapshotDoc,
    /// The run's events in order, exactly as `GET /v1/runs/{runId}/events/poll` serves them.
    pub events: Vec<Value>,
    /// The run's OpenTelemetry spans as the span store keeps them (`{name, attributes,
    /// events, ...}`; empty when the host keeps none).
    pub spans: Vec<Value>,
    /// RFC 3339 time of generation (this crate reads no clock).
    pub generated_at: &'a str,
    /// Size cap in bytes ([`MAX_BUNDLE_BYTES`] unless lowered).
    pub max_bytes: usize,
}

/// The bundle, redacted with `redactor` (built from the run's secrets).
pub fn debug_bundle(input: BundleInput<'_>, redactor: &Redactor) -> Value {
    let BundleInput {
        host,
        run,
        mut events,
        mut spans,
        generated_at,
        max_bytes,
    } = input;
    let mut run = serde_json::to_value(run).unwrap_or(Value::Null);
    redactor.redact_value(&mut run);
    for e in events.iter_mut().chain(spans.iter_mut()) {
        redactor.redact_value(e);
    }
    let build = |events: &[Value], truncated: bool| {
        let node_count = events
            .iter()
            .filter_map(|e| e.get("nodeId").and_then(Value::as_str))
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let mut doc = json!({
            "bundleVersion": BUNDLE_VERSION,
            "generatedAt": generated_at,
            "host": host,
            "run": run,
            "events": events,
            "spans": spans,
            "metrics": {"nodeCount": node_count, "eventCount": events.len()},
            "redactionApplied": true,
            "redactionMode": REDACTION_MODE,
            "truncated": truncated,
        });
        if truncated {
            doc["truncatedReason"] = json!(TRUNCATED_REASON);
        }
        doc
    };
    let whole = build(&events, false);
    if serde_json::to_vec(&whole).map_or(0, |v| v.len()) <= max_bytes {
        return whole;
    }
    // The envelope without events, then as many leading events as fit.
    let mut used = serde_json::to_vec(&build(&[], true)).map_or(0, |v| v.len());
    let mut keep = 0;
    for e in &events {
        let size = serde_json::to_vec(e).map_or(0, |v| v.len()) + 1;
        if used + size > max_bytes {
            break;
        }
        used += size;
        keep += 1;
    }
    build(&events[..keep], true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::api::{RunFacts, RunSnapshotDoc};
    use crate::run::projection::Projection;

    fn snapshot() -> RunSnapshotDoc {
        let mut p = Projection::default();
        p.apply(&json!({"type": "run.started", "sequence": 0, "payload": {}}));
        RunSnapshotDoc::from_projection(
            &p,
            RunFacts {
                run_id: "r1",
                workflow_id: "wf",
                tenant: "team-a",
                started_at: Some("2026-01-01T00:00:00Z".into()),
                completed_at: None,
                attempts: Some(1),
            },
        )
    }

    fn event(seq: u64, node: &str, text: &str) -> Value {
        json!({"eventId": format!("e{seq}"), "runId": "r1", "type": "log.appended",
               "sequence": seq, "timestamp": "2026-01-01T00:00:00Z", "nodeId": node,
               "payload": {"level": "info", "message": text}})
    }

    fn input(events: Vec<Value>, max_bytes: usize, run: &RunSnapshotDoc) -> BundleInput<'_> {
        BundleInput {
            host: BundleHost {
                name: "openwop-operator".into(),
                version: "0.1.0".into(),
                vendor: "openwop".into(),
            },
            run,
            events,
            spans: vec![],
            generated_at: "2026-01-01T00:00:01Z",
            max_bytes,
        }
    }

    #[test]
    fn a_bundle_mirrors_the_run_and_its_events_and_redacts_secrets() {
        let canary = "CANARY-5f1d2c8e-do-not-leak";
        let run = snapshot();
        let events = vec![
            event(0, "a", "start"),
            event(1, "a", &format!("echo {canary}")),
            event(2, "b", "done"),
        ];
        let redactor = Redactor::new([("apiToken".to_string(), canary.to_string())]);
        let b = debug_bundle(input(events, MAX_BUNDLE_BYTES, &run), &redactor);
        let text = b.to_string();
        assert!(!text.contains(canary), "{text}");
        assert!(text.contains("[REDACTED:apiToken]"), "{text}");
        assert_eq!(b["bundleVersion"], "1");
        assert_eq!(b["run"], serde_json::to_value(&run).unwrap());
        assert_eq!(b["metrics"], json!({"nodeCount": 2, "eventCount": 3}));
        assert_eq!(b["events"].as_array().unwrap().len(), 3);
        assert_eq!(b["redactionApplied"], true);
        assert_eq!(b["redactionMode"], "mask");
        assert_eq!(b["truncated"], false);
        assert!(b.get("truncatedReason").is_none());
        assert_eq!(b["spans"], json!([]));
    }

    #[test]
    fn spans_travel_in_the_bundle_redacted() {
        let canary = "CANARY-0b7e-span";
        let run = snapshot();
        let mut inp = input(vec![event(0, "a", "start")], MAX_BUNDLE_BYTES, &run);
        inp.spans = vec![json!({"name": "openwop.provider.call", "attributes":
            {"openwop.model": format!("m-{canary}")}, "events": []})];
        let b = debug_bundle(
            inp,
            &Redactor::new([("key".to_string(), canary.to_string())]),
        );
        assert_eq!(b["spans"][0]["name"], "openwop.provider.call");
        assert_eq!(
            b["spans"][0]["attributes"]["openwop.model"],
            "m-[REDACTED:key]"
        );
        assert!(!b.to_string().contains(canary));
    }

    #[test]
    fn an_oversized_log_is_cut_to_a_prefix_that_fits() {
        let run = snapshot();
        let events: Vec<Value> = (0..50).map(|i| event(i, "a", &"x".repeat(200))).collect();
        let one = serde_json::to_vec(&events[0]).unwrap().len();
        let empty = debug_bundle(input(vec![], MAX_BUNDLE_BYTES, &run), &Redactor::new([]));
        let cap = serde_json::to_vec(&empty).unwrap().len() + 60 + 10 * (one + 1);
        let b = debug_bundle(input(events, cap, &run), &Redactor::new([]));
        assert_eq!(b["truncated"], true);
        assert_eq!(b["truncatedReason"], TRUNCATED_REASON);
        let kept = b["events"].as_array().unwrap();
        assert!((9..=10).contains(&kept.len()), "{}", kept.len());
        assert_eq!(kept[0]["sequence"], 0);
        assert_eq!(b["metrics"]["eventCount"], kept.len());
        assert!(serde_json::to_vec(&b).unwrap().len() <= cap);
    }
}
