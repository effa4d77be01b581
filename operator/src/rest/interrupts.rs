//! `POST /v1/runs/{runId}/interrupts/{nodeId}`: an answer to a pending interrupt
//! (clarification answers, approve / reject), appended to the Run's `spec.answers`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
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

/// Answer a pending interrupt (clarification answers, approve / reject).
#[utoipa::path(
    post, path = "/v1/runs/{runId}/interrupts/{nodeId}",
    request_body = ResolveInterruptRequest,
    params(("runId" = String, Path), ("nodeId" = String, Path)),
    responses(
        (status = 202, body = RunStatusResponse),
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
    // The patch is conditional on the version read, so a concurrent answer is never
    // overwritten; when this replica's cache lagged (the operator just wrote the status),
    // the Run is read again from the API server and the answer re-checked against it.
    let mut attempt = 0;
    loop {
        attempt += 1;
        let answers = answers_with(&run, &run_id, &node_id, req.clone())?;
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
        StatusCode::ACCEPTED,
        Json(RunStatusResponse {
            run_id,
            node_id: Some(node_id),
            status: phase(&run),
        }),
    )
        .into_response())
}

/// The Run's answers with the answer to its interrupt at `node_id` appended, or why not.
fn answers_with(
    run: &Run,
    run_id: &str,
    node_id: &str,
    req: ResolveInterruptRequest,
) -> Result<Vec<InterruptAnswer>, ApiError> {
    // Several branches may wait at once (and others still run): any pending one can be answered.
    let pending = run
        .status
        .as_ref()
        .filter(|_| !phase(run).is_terminal())
        .and_then(|st| st.pending_interrupts.iter().find(|p| p.node_id == node_id))
        .cloned();
    let Some(pending) = pending else {
        return Err(ApiError::conflict(
            "interrupt_not_pending",
            format!("run {run_id} has no interrupt waiting at node {node_id:?}"),
        )
        .with_details(json!({"runStatus": phase(run).as_str()})));
    };
    let answer = build_answer(&pending, req)?;
    if run
        .spec
        .answers
        .iter()
        .any(|a| a.interrupt_id == answer.interrupt_id)
    {
        return Err(ApiError::conflict(
            "interrupt_already_answered",
            format!("interrupt {} is already answered", answer.interrupt_id),
        ));
    }
    let mut answers = run.spec.answers.clone();
    answers.push(answer);
    Ok(answers)
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
                "resumeValue must answer exactly the questions {}",
                known.join(", ")
            ))
            .with_details(json!({"field": field, "missing": missing, "unknown": unknown})),
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
    fn approvals_accept_the_usual_spellings_and_record_trust() {
        let p = pending("approval", &[]);
        for (v, want) in [
            (json!(true), true),
            (json!("reject"), false),
            (json!({"approved": true}), true),
            (json!({"decision": "approve"}), true),
        ] {
            assert_eq!(
                build_answer(&p, req(v.clone(), None)).unwrap().approved,
                Some(want),
                "{v}"
            );
        }
        let a = build_answer(&p, req(json!(true), Some("untrusted"))).unwrap();
        assert_eq!(a.content_trust.as_deref(), Some("untrusted"));
        let e = build_answer(&p, req(json!({"region": "eu"}), None)).unwrap_err();
        assert_eq!(e.body.error, "validation_error");
        let e = build_answer(&p, req(json!(true), Some("maybe"))).unwrap_err();
        assert!(e.body.message.contains("contentTrust"), "{e}");
    }

    #[test]
    fn clarification_answers_must_match_the_questions() {
        let p = pending("clarification", &["region", "tier"]);
        let a = build_answer(&p, req(json!({"region": "eu", "tier": "gold"}), None)).unwrap();
        assert_eq!(a.value, Some(json!({"region": "eu", "tier": "gold"})));
        assert_eq!(a.interrupt_id, "i1");
        let e = build_answer(&p, req(json!({"region": "eu", "zone": 1}), None)).unwrap_err();
        assert_eq!(e.body.details.as_ref().unwrap()["missing"], json!(["tier"]));
        assert_eq!(e.body.details.as_ref().unwrap()["unknown"], json!(["zone"]));
        let e = build_answer(&p, req(json!("eu"), None)).unwrap_err();
        assert!(e.body.message.contains("object"), "{e}");
        let _ = PendingQuestion {
            id: String::new(),
            question: String::new(),
        };
    }
}
