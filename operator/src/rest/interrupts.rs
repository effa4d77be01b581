//! `POST /v1/runs/{runId}/interrupts/{nodeId}`: the spec's run-scoped interrupt resolution
//! (`resolveInterruptByRun`). The answer — an approval action or clarification answers,
//! normalised by `Answer::from_user_input` — is appended to the Run's `spec.answers` with the
//! authenticated caller and the time, and a new worker resumes the run.
//!
//! Answers (INT): **200** `{runId, nodeId, status}`; 400 `validation_error` (a body that does
//! not fit the interrupt, naming the allowed actions or the missing questions); 404
//! `interrupt_not_found` (nothing waits at the node); 409 `interrupt_already_resolved` (the
//! interrupt is answered: a concurrent resolve lost, or it was resolved before).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use openwop_crds::{InterruptAnswer, Run};
use openwop_protocol::run::snapshot::{AnswerError, Reply};
use openwop_protocol::run::{AnswerMismatch, PendingInterrupt};
use serde_json::json;

use super::json::Json;
use super::support::{kube_error, phase, visible_run};
use super::types::{ResolveInterruptRequest, RunStatusResponse};
use super::{ApiError, Caller, ErrorBody, Resource, RestState, Verb};

/// Answer a pending interrupt (an approval action or clarification answers).
#[utoipa::path(
    post, path = "/v1/runs/{runId}/interrupts/{nodeId}",
    operation_id = "resolveInterruptByRun",
    request_body = ResolveInterruptRequest,
    params(("runId" = String, Path), ("nodeId" = String, Path)),
    responses(
        (status = 200, body = RunStatusResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)
    ),
    security(("bearer" = []))
)]
pub async fn resolve_interrupt(
    State(s): State<RestState>,
    caller: Caller,
    Path((run_id, node_id)): Path<(String, String)>,
    Json(req): Json<ResolveInterruptRequest>,
) -> Result<Response, ApiError> {
    let cached = visible_run(&s, &caller, &run_id).await?;
    let ns = cached.namespace().unwrap_or_default();
    s.auth
        .authorize(&caller, Verb::Patch, Resource::Runs, &ns)
        .await?;
    let api: Api<Run> = Api::namespaced(s.client.clone(), &ns);
    // Checked against the run as its log has it, like the snapshot the caller read.
    let mut run = super::runs::fresh_run(&s, &cached).await;
    // Who answered and when: the authenticated caller (TokenReview), stamped here so a caller
    // cannot claim to be someone else.
    let answered_at = Timestamp::now().to_string();
    // The patch is conditional on the version read, so a concurrent answer is never
    // overwritten; when this replica's cache lagged (the operator just wrote the status),
    // the Run is read again from the API server and the answer re-checked against it.
    let mut attempt = 0;
    loop {
        attempt += 1;
        let answer = answer_for(&run, &run_id, &node_id, req.clone())?
            .answered(&caller.username, &answered_at);
        let mut answers = run.spec.answers.clone();
        answers.push(answer);
        match api
            .patch(
                &run.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"resourceVersion": run.resource_version()},
                    "spec": {"answers": answers},
                })),
            )
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 4 => {
                run = super::runs::fresh_run(
                    &s,
                    &api.get(&run.name_any()).await.map_err(kube_error)?,
                )
                .await;
            }
            Err(e) => return Err(kube_error(e)),
        }
    }
    Ok((
        StatusCode::OK,
        Json(RunStatusResponse {
            run_id,
            node_id: Some(node_id),
            status: phase(&run),
        }),
    )
        .into_response())
}

/// The answer to append for the Run's interrupt at `node_id`, or the error the spec gives.
fn answer_for(
    run: &Run,
    run_id: &str,
    node_id: &str,
    req: ResolveInterruptRequest,
) -> Result<InterruptAnswer, ApiError> {
    let answered = |interrupt_id: &str| {
        run.spec
            .answers
            .iter()
            .any(|a| a.interrupt_id == interrupt_id)
    };
    let already = || {
        ApiError::conflict(
            "interrupt_already_resolved",
            format!("the interrupt at node {node_id:?} of run {run_id} is already answered"),
        )
        .with_details(json!({"runStatus": phase(run).as_str()}))
    };
    // Several branches may wait at once (and others still run): any pending one can be
    // answered. A node waits on one interrupt at a time; an earlier one it was answered for
    // no longer blocks a new one.
    let pending = run
        .status
        .as_ref()
        .filter(|_| !phase(run).is_terminal())
        .and_then(|st| st.pending_interrupts.iter().find(|p| p.node_id == node_id))
        .cloned();
    let Some(pending) = pending else {
        // Answered before (the worker may have resolved it since): 409; never waited: 404.
        if run
            .spec
            .answers
            .iter()
            .any(|a| a.node_id.as_deref() == Some(node_id))
        {
            return Err(already());
        }
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "interrupt_not_found",
            format!("run {run_id} has no interrupt waiting at node {node_id:?}"),
        )
        .with_details(json!({"runStatus": phase(run).as_str()})));
    };
    if answered(&pending.interrupt_id) {
        return Err(already());
    }
    build_answer(&pending, req)
}

/// The answer to append for `pending`, or 400 naming what is wrong.
pub fn build_answer(
    pending: &PendingInterrupt,
    req: ResolveInterruptRequest,
) -> Result<InterruptAnswer, ApiError> {
    InterruptAnswer::from_user_input(
        pending.interrupt_id.clone(),
        Some(pending),
        Reply::ResumeValue(req.resume_value),
        req.comment,
        req.content_trust,
    )
    .map_err(|e| {
        let field = e.field();
        match e {
            AnswerError::Mismatch(AnswerMismatch::Questions {
                known,
                unknown,
                missing,
                ..
            }) => ApiError::validation(format!(
                "resumeValue.answers must answer exactly the questions {}",
                known.join(", ")
            ))
            .with_details(json!({"field": field, "missing": missing, "unknown": unknown})),
            AnswerError::NotADecision { ref allowed }
            | AnswerError::ActionNotOffered { ref allowed, .. } => {
                let allowed = allowed.clone();
                ApiError::validation(e.to_string())
                    .with_details(json!({"field": field, "allowed": allowed}))
            }
            e => ApiError::validation(e.to_string()).with_details(json!({"field": field})),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use openwop_protocol::run::{PendingInterrupt, PendingQuestion};
    use serde_json::Value;

    fn pending(kind: &str, qs: &[&str]) -> PendingInterrupt {
        serde_json::from_value(json!({
            "interruptId": "i1", "nodeId": "n", "kind": kind,
            "questions": qs.iter().map(|q| json!({"id": q, "question": "?"})).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    fn req(v: Value, trust: Option<&str>) -> ResolveInterruptRequest {
        ResolveInterruptRequest {
            resume_value: v,
            content_trust: trust.map(str::to_owned),
            comment: None,
        }
    }

    #[test]
    fn approvals_take_the_spec_actions_and_record_trust() {
        let p = pending("approval", &[]);
        for (v, want) in [
            (json!({"action": "accept"}), true),
            (json!({"action": "reject"}), false),
            (json!({"decision": "approved"}), true),
        ] {
            assert_eq!(
                build_answer(&p, req(v.clone(), None)).unwrap().approved,
                Some(want),
                "{v}"
            );
        }
        let a = build_answer(&p, req(json!({"action": "accept"}), Some("untrusted"))).unwrap();
        assert_eq!(a.content_trust.as_deref(), Some("untrusted"));
        // The suite's `{action: "maybe"}`: 400 naming the actions the gate offers.
        for v in [
            json!({"action": "maybe"}),
            json!(true),
            json!({"region": "eu"}),
        ] {
            let e = build_answer(&p, req(v.clone(), None)).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{v}");
            assert_eq!(e.body.error, "validation_error");
            assert_eq!(
                e.body.details.as_ref().unwrap()["allowed"],
                json!(["accept", "reject"]),
                "{v}"
            );
        }
        let e = build_answer(&p, req(json!({"action": "accept"}), Some("maybe"))).unwrap_err();
        assert!(e.body.message.contains("contentTrust"), "{e}");
    }

    #[test]
    fn clarification_answers_must_match_the_questions() {
        let p = pending("clarification", &["region", "tier"]);
        let a = build_answer(
            &p,
            req(json!({"answers": {"region": "eu", "tier": "gold"}}), None),
        )
        .unwrap();
        assert_eq!(a.value, Some(json!({"region": "eu", "tier": "gold"})));
        assert_eq!(a.interrupt_id, "i1");
        let e = build_answer(
            &p,
            req(json!({"answers": {"region": "eu", "zone": 1}}), None),
        )
        .unwrap_err();
        assert_eq!(e.body.details.as_ref().unwrap()["missing"], json!(["tier"]));
        assert_eq!(e.body.details.as_ref().unwrap()["unknown"], json!(["zone"]));
        let e = build_answer(&p, req(json!({"region": "eu"}), None)).unwrap_err();
        assert!(e.body.message.contains("\"answers\""), "{e}");
        let _ = PendingQuestion {
            id: String::new(),
            question: String::new(),
        };
    }

    fn run(phase: &str, pending: Value, answers: Value) -> Run {
        serde_json::from_value(json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {"workflowRef": {"name": "w"}, "answers": answers},
            "status": {"phase": phase, "pendingInterrupts": pending},
        }))
        .unwrap()
    }

    /// The spec's codes (INT): nothing waiting → 404 interrupt_not_found; answered (still
    /// pending, or resolved since) → 409 interrupt_already_resolved.
    #[test]
    fn not_waiting_is_404_and_answered_is_409() {
        let gate = json!([{"interruptId": "i1", "nodeId": "gate", "kind": "approval"}]);
        let accept = || req(json!({"action": "accept"}), None);
        let code = |r: &Run, node: &str| {
            answer_for(r, "run-1", node, accept())
                .map(|a| a.node_id)
                .map_err(|e| (e.status.as_u16(), e.body.error))
        };
        let waiting = run("waiting-approval", gate.clone(), json!([]));
        assert_eq!(code(&waiting, "gate"), Ok(Some("gate".into())));
        assert_eq!(
            code(&waiting, "no-such-node"),
            Err((404, "interrupt_not_found".into()))
        );
        let answered = run(
            "waiting-approval",
            gate,
            json!([{"interruptId": "i1", "action": "accept", "nodeId": "gate"}]),
        );
        assert_eq!(
            code(&answered, "gate"),
            Err((409, "interrupt_already_resolved".into()))
        );
        let resolved = run(
            "completed",
            json!([]),
            json!([{"interruptId": "i1", "action": "accept", "nodeId": "gate"}]),
        );
        assert_eq!(
            code(&resolved, "gate"),
            Err((409, "interrupt_already_resolved".into()))
        );
        assert_eq!(
            code(&run("completed", json!([]), json!([])), "gate"),
            Err((404, "interrupt_not_found".into()))
        );
    }
}
