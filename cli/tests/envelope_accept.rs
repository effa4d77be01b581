//! Runs the built `kubectl-openwop envelope accept` binary end to end.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-openwop"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The process may exit before reading everything (size limit): ignore EPIPE.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

fn clar() -> Value {
    json!({"type": "clarification.request", "schemaVersion": 1, "correlationId": "r:n:0:a",
        "payload": {"questions": [{"id": "q1", "question": "Which region? sk-test-ABCDEFGH1234"}]},
        "meta": {"source": "ai-generation", "ts": "2026-05-18T10:00:00Z"}})
}

#[test]
fn accepted_request_prints_outcome_and_events() {
    let req = json!({"envelope": clar(), "byokCanaries": [{"secretId": "k", "value": "sk-test-ABCDEFGH1234"}],
        "projectTo": {"runId": "run-9", "nodeId": "n1"}});
    let out = run(&["envelope", "accept", "-"], req.to_string().as_bytes());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(!stdout.contains("sk-test-ABCDEFGH1234"));
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["status"], "accepted");
    assert_eq!(v["redactionCount"], 1);
    assert_eq!(v["events"][0]["type"], "clarification.requested");
    assert_eq!(v["events"][0]["runId"], "run-9");
    assert_eq!(v["events"][1]["payload"]["kind"], "clarification");
    assert_eq!(v["recordedEventIds"].as_array().unwrap().len(), 2);
    // The envelope's own meta.ts stamps the events.
    assert_eq!(v["events"][0]["timestamp"], "2026-05-18T10:00:00Z");
}

/// The spec's request shape: priorCorrelations as an array, persistedDedup {runId}
/// backed by the --dedup-store file, projectTo.refusalMode.
#[test]
fn the_spec_request_shape_replays_prior_and_persisted_decisions() {
    let dir = std::env::temp_dir().join(format!("openwop-dedup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = dir.join("dedup.json");
    let _ = std::fs::remove_file(&store);
    let store_arg = store.to_str().unwrap();
    let req = json!({"envelope": clar(), "persistedDedup": {"runId": "run-p"}});

    // Without a store the request is refused with the fix.
    let out = run(&["envelope", "accept"], req.to_string().as_bytes());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dedup-store"));

    let first = run(
        &["envelope", "accept", "--dedup-store", store_arg],
        req.to_string().as_bytes(),
    );
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let first: Value = serde_json::from_slice(&first.stdout).unwrap();
    assert!(first.get("replayed").is_none());
    let saved: Value = serde_json::from_slice(&std::fs::read(&store).unwrap()).unwrap();
    assert_eq!(
        saved["run-p"]["r:n:0:a"]["envelopeType"],
        "clarification.request"
    );

    // A second process replays the stored decision: same envelopeId, no new events.
    let second = run(
        &["envelope", "accept", "--dedup-store", store_arg],
        req.to_string().as_bytes(),
    );
    let second: Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(second["replayed"], true);
    assert_eq!(second["envelopeId"], first["envelopeId"]);
    assert_eq!(second["events"], json!([]));

    // priorCorrelations is an array of {correlationId, outcome, envelopeType}.
    let mut conflicting = clar();
    conflicting["type"] = json!("schema.request");
    conflicting["payload"] = json!({"envelopeType": "vendor.acme.x"});
    let prior = json!({"envelope": conflicting, "priorCorrelations": [
        {"correlationId": "r:n:0:a", "envelopeType": "clarification.request", "outcome": first}]});
    let mut prior = prior;
    prior["priorCorrelations"][0]["outcome"]
        .as_object_mut()
        .unwrap()
        .remove("events");
    let out = run(&["envelope", "accept"], prior.to_string().as_bytes());
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["reason"], "envelope_correlation_conflict");

    // projectTo.refusalMode decides what the host gate projects.
    let env = json!({"type": "vendor.acme.other", "correlationId": "c", "payload": {},
        "meta": {"source": "ai-generation", "ts": "2026-05-18T10:00:00Z"}});
    let req = json!({"envelope": env, "hostSupportedEnvelopes": ["vendor.acme.prd.create"],
        "projectTo": {"runId": "r", "nodeId": "n", "refusalMode": "discard-and-warn"}});
    let out = run(&["envelope", "accept"], req.to_string().as_bytes());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["events"][0]["type"], "log.appended");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn refusals_exit_one() {
    let env = json!({"type": "vendor.acme.other", "correlationId": "c", "payload": {},
        "meta": {"source": "ai-generation", "ts": "2026-05-18T10:00:00Z"}});
    let req = json!({"envelope": env, "hostSupportedEnvelopes": ["vendor.acme.prd.create"]});
    let out = run(
        &["envelope", "accept", "--compact"],
        req.to_string().as_bytes(),
    );
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "gated");
    assert_eq!(v["reason"], "unknown_envelope_kind");
    assert_eq!(
        v["events"][0]["payload"]["error"]["code"],
        "envelope_contract_violation"
    );
    assert!(
        v["allowedKinds"]
            .as_array()
            .unwrap()
            .contains(&json!("error"))
    );
}

#[test]
fn raw_mode_recovers_fenced_model_text_and_refuses_garbage() {
    let text = format!("Sure:\n```json\n{}\n```", clar());
    let out = run(&["envelope", "accept", "--raw", "-"], text.as_bytes());
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["recovery"]["path"], "markdown-fence");

    let out = run(&["envelope", "accept", "--raw"], b"\xff\xfe\x00garbage");
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["reason"], "invalid_envelope_shape");

    let deep = "[".repeat(100_000);
    let out = run(
        &["envelope", "accept", "--raw", "--max-bytes", "200000"],
        deep.as_bytes(),
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn unreadable_input_and_usage_errors_exit_two() {
    let out = run(&["envelope", "accept", "/no/such/file.json"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open /no/such/file.json"));
    let out = run(
        &["envelope", "accept"],
        br#"{"envelope": {}, "envelope": {}}"#,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("same key twice"));
    let out = run(&["envelope", "accept"], br#"{"envlope": {}}"#);
    assert_eq!(out.status.code(), Some(2));
    let big = vec![b' '; 2048];
    let out = run(&["envelope", "accept", "--max-bytes", "1024"], &big);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["envelope", "bogus"], b"");
    assert_eq!(out.status.code(), Some(2));
}
