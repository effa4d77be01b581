//! `kubectl-openwop resume RUN --answer id=value… | --action ACTION [--feedback TEXT
//! --scope S --section P | --edited JSON] | --approve | --reject [--reason TEXT]` (with none of them it resumes a paused run, `super::pause`): appends one entry to `spec.answers` (append-only, enforced by the CRD's
//! CEL rule), guarded by the Run's resourceVersion so a concurrent writer is never
//! overwritten. The answer records who gave it — the kubeconfig user as the API server
//! authenticates it (a SelfSubjectReview) — and when.

use anyhow::{Context as _, Result, bail};
use clap::Args;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use openwop_crds::{InterruptAnswer, Run};
use openwop_protocol::run::snapshot::{AnswerError, Reply};
use openwop_protocol::run::status::{AnswerMismatch, PendingInterrupt};
use serde_json::{Map, Value, json};

use super::{NamespaceArg, client_and_namespace};

#[derive(Args, Debug)]
// No decision: resume a paused run (`spec.pause` removed, `super::pause`).
#[command(group(clap::ArgGroup::new("decision").required(false).args(["answer", "action", "approve", "reject"])))]
pub struct ResumeArgs {
    /// Name of the Run waiting for input or approval.
    pub run: String,
    #[command(flatten)]
    pub ns: NamespaceArg,
    /// Answer a clarification question: QUESTION_ID=VALUE (repeat for each question). VALUE is
    /// read as JSON when it parses (42, true, {"a":1}), otherwise as a string.
    #[arg(long, value_name = "ID=VALUE", conflicts_with_all = ["action", "approve", "reject"])]
    pub answer: Vec<String>,
    /// Take an approval action the gate offers: accept, reject, refine (with --feedback) or
    /// edit-accept (with --edited).
    #[arg(long, value_name = "ACTION", conflicts_with_all = ["approve", "reject"])]
    pub action: Option<String>,
    /// `--action refine`: what should change (`refineFeedback.text`).
    #[arg(long, value_name = "TEXT", requires = "action")]
    pub feedback: Option<String>,
    /// `--action refine`: what the feedback is about: whole, section or items.
    #[arg(
        long,
        value_name = "SCOPE",
        default_value = "whole",
        requires = "feedback"
    )]
    pub scope: String,
    /// `--action refine --scope section`: the section meant (`refineFeedback.sectionPath`).
    #[arg(long, value_name = "PATH", requires = "feedback")]
    pub section: Option<String>,
    /// `--action edit-accept`: the edited artifact, as JSON (`editedArtifactData`).
    #[arg(
        long,
        value_name = "JSON",
        requires = "action",
        conflicts_with = "feedback"
    )]
    pub edited: Option<String>,
    /// Approve the pending approval (`--action accept`).
    #[arg(long, conflicts_with = "reject")]
    pub approve: bool,
    /// Reject the pending approval (`--action reject`).
    #[arg(long)]
    pub reject: bool,
    /// Comment stored with the answer (why you approved or rejected).
    #[arg(long, alias = "comment", value_name = "TEXT")]
    pub reason: Option<String>,
    /// Node whose pending interrupt to answer; needed when several nodes wait.
    #[arg(long, value_name = "NODE", conflicts_with = "interrupt")]
    pub node: Option<String>,
    /// Interrupt to answer by id; defaults to the only one in `status.pendingInterrupts`.
    #[arg(long, value_name = "ID")]
    pub interrupt: Option<String>,
}

/// Splits `id=value`; the value is JSON when it parses, else the raw string.
pub fn parse_answer(arg: &str) -> Result<(String, Value)> {
    let Some((id, raw)) = arg.split_once('=') else {
        bail!("--answer {arg:?}: expected QUESTION_ID=VALUE, e.g. --answer region=eu-west-1");
    };
    let id = id.trim();
    if id.is_empty() {
        bail!("--answer {arg:?}: the question id before '=' is empty");
    }
    let value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()));
    Ok((id.to_owned(), value))
}

/// The answer to append, checked against the Run's pending interrupt.
pub fn build_answer(run: &Run, args: &ResumeArgs) -> Result<InterruptAnswer> {
    let name = run.name_any();
    let all: &[_] = run
        .status
        .as_ref()
        .map_or(&[], |s| s.pending_interrupts.as_slice());
    let listing = || {
        all.iter()
            .map(|p| format!("{} ({})", p.node_id, p.kind))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let recording = |p: &PendingInterrupt| {
        args.interrupt
            .as_ref()
            .map_or(args.node.as_ref().is_none_or(|n| &p.node_id == n), |id| {
                &p.interrupt_id == id
            })
    };
    let targeted = args.interrupt.is_some() || args.node.is_some();
    if (targeted || all.is_empty())
        && let Some(p) = run
            .status
            .as_ref()
            .and_then(|s| s.recording_interrupts.iter().find(|p| recording(p)))
    {
        bail!(
            "the interrupt at node {} of Run {name} is still being recorded (its approval or questions are not in the Run's status yet); retry in a moment",
            p.node_id
        )
    }
    let pending = match (&args.interrupt, &args.node) {
        (Some(id), _) => all.iter().find(|p| &p.interrupt_id == id),
        (None, Some(node)) => match all.iter().find(|p| &p.node_id == node) {
            Some(p) => Some(p),
            None if all.is_empty() => None,
            None => bail!(
                "node {node} of Run {name} has no pending interrupt; the nodes waiting are: {}",
                listing()
            ),
        },
        (None, None) if all.len() > 1 => bail!(
            "Run {name} waits on {} interrupts: choose one with --node NODE (waiting: {})",
            all.len(),
            listing()
        ),
        (None, None) => all.first(),
    };
    let interrupt_id = match (&args.interrupt, pending) {
        (Some(id), _) => id.clone(),
        (None, Some(p)) => p.interrupt_id.clone(),
        (None, None) => {
            let phase = run
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .unwrap_or_default()
                .as_str();
            bail!(
                "Run {name} has no pending interrupt (phase {phase}); nothing to resume. Check `kubectl openwop describe {name}`"
            )
        }
    };
    // A quorum approval takes votes (one per voter: this user) until they decide it.
    let decided = match pending.filter(|p| p.interrupt_id == interrupt_id) {
        Some(p) => openwop_protocol::run::quorum::decided(p, &run.spec.answers),
        None => run
            .spec
            .answers
            .iter()
            .any(|a| a.interrupt_id == interrupt_id),
    };
    if decided {
        bail!(
            "interrupt {interrupt_id} of Run {name} is already answered (answers are append-only)"
        );
    }
    let reply = if let Some(action) = &args.action {
        action_reply(action, args)?
    } else if args.approve || args.reject {
        Reply::Decision(args.approve)
    } else {
        let mut value = Map::new();
        for a in &args.answer {
            let (id, v) = parse_answer(a)?;
            if value.insert(id.clone(), v).is_some() {
                bail!("--answer {id}=… is given twice");
            }
        }
        Reply::Answers(value)
    };
    let pending = pending.filter(|p| p.interrupt_id == interrupt_id);
    let answer = InterruptAnswer::from_user_input(
        interrupt_id.clone(),
        pending,
        reply,
        args.reason.clone(),
        None,
    );
    answer.or_else(|e| match e {
        AnswerError::Mismatch(AnswerMismatch::Questions {
            known,
            unknown,
            missing,
            ..
        }) => {
            if let Some(unknown) = unknown.first() {
                bail!(
                    "interrupt {interrupt_id} has no question {unknown:?}; its questions are: {}",
                    known.join(", ")
                );
            }
            bail!(
                "missing answers for question(s) {}: add --answer {}=VALUE",
                missing.join(", "),
                missing[0]
            )
        }
        AnswerError::Mismatch(e @ AnswerMismatch::NotAnApproval { .. }) => {
            bail!("{e}: answer its questions with --answer ID=VALUE")
        }
        AnswerError::Mismatch(e) => bail!("{e}: use --action ACTION (or --approve / --reject)"),
        AnswerError::ActionNotOffered { action, allowed } => bail!(
            "interrupt {interrupt_id} does not offer action {action:?}; use --action with one of: {}",
            allowed.join(", ")
        ),
        AnswerError::ActionData { action, field } => bail!(
            "action {action} needs resumeValue.{field}: {}",
            if field.starts_with("refineFeedback") {
                "give --feedback TEXT, with --scope whole|section|items"
            } else {
                "give --edited JSON"
            }
        ),
        // The CLI neither sets a trust nor passes a resumeValue.
        e => bail!("{e}"),
    })
}

/// An approval action as the REST API's `resumeValue` takes it: `refine` carries
/// `refineFeedback {scope, text, sectionPath?}`, `edit-accept` `editedArtifactData`.
fn action_reply(action: &str, args: &ResumeArgs) -> Result<Reply> {
    let mut value = Map::new();
    value.insert("action".into(), json!(action));
    if let Some(text) = &args.feedback {
        let mut f = json!({"scope": args.scope, "text": text});
        if let Some(section) = &args.section {
            f["sectionPath"] = json!(section);
        }
        value.insert("refineFeedback".into(), f);
    }
    if let Some(raw) = &args.edited {
        let edited: Value = serde_json::from_str(raw).with_context(|| {
            format!("--edited {raw:?} is not JSON (e.g. '{{\"summary\": \"…\"}}')")
        })?;
        value.insert("editedArtifactData".into(), edited);
    }
    Ok(if value.len() == 1 {
        Reply::Action(action.to_owned())
    } else {
        Reply::ResumeValue(Value::Object(value))
    })
}

/// Merge patch appending `answer`, conditional on `resource_version`.
pub fn answers_patch(run: &Run, answer: &InterruptAnswer) -> Result<Value> {
    let mut answers = run.spec.answers.clone();
    answers.push(answer.clone());
    Ok(json!({
        "metadata": {"resourceVersion": run.resource_version()},
        "spec": {"answers": serde_json::to_value(answers)?},
    }))
}

/// Who this kubeconfig is, as the API server authenticates it (a SelfSubjectReview,
/// Kubernetes ≥ 1.28); when the review is unavailable, the kubeconfig context's user name,
/// marked as unverified.
async fn whoami(client: &kube::Client) -> String {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = SelfSubjectReview::default();
    if let Ok(r) = api.create(&PostParams::default(), &review).await
        && let Some(name) = r
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .filter(|n| !n.is_empty())
    {
        return name;
    }
    unverified_user(kube::config::Kubeconfig::read().ok().as_ref())
}

/// The current context's user name from `kubeconfig`, marked as unverified.
fn unverified_user(kubeconfig: Option<&kube::config::Kubeconfig>) -> String {
    let user = kubeconfig.and_then(|k| {
        let current = k.current_context.as_deref()?;
        k.contexts
            .iter()
            .find(|c| c.name == current)?
            .context
            .as_ref()?
            .user
            .clone()
    });
    match user {
        Some(u) => format!("kubeconfig:{u} (unverified)"),
        None => "kubeconfig user (unverified)".to_owned(),
    }
}

pub async fn run(args: ResumeArgs) -> Result<()> {
    if args.answer.is_empty() && args.action.is_none() && !args.approve && !args.reject {
        return super::pause::resume(&args.run, args.ns.namespace.as_deref()).await;
    }
    let (client, namespace) = client_and_namespace(args.ns.namespace.as_deref()).await?;
    let who = whoami(&client).await;
    let api: Api<Run> = Api::namespaced(client, &namespace);
    // A concurrent update makes the conditional patch fail with 409: re-read and retry.
    for attempt in 1..=5 {
        let run = api
            .get_opt(&args.run)
            .await
            .with_context(|| format!("cannot read Run {namespace}/{}", args.run))?
            .with_context(|| format!("Run {:?} not found in namespace {namespace}", args.run))?;
        let answer = build_answer(&run, &args)?.answered(&who, Timestamp::now().to_string());
        let patch = answers_patch(&run, &answer)?;
        match api
            .patch(&args.run, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                let what = match answer.approval_action() {
                    Some("accept") => "approved".to_owned(),
                    Some("reject") => "rejected".to_owned(),
                    Some(other) => format!("answered with {other}"),
                    None => "answered".to_owned(),
                };
                println!(
                    "run.openwop.dev/{} {what} by {who} (interrupt {}); a new worker resumes it",
                    args.run, answer.interrupt_id
                );
                return Ok(());
            }
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 5 => continue,
            Err(kube::Error::Api(e)) if e.code == 422 => {
                bail!("the API server refused the answer: {}", e.message)
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot patch Run {namespace}/{}", args.run));
            }
        }
    }
    bail!(
        "Run {namespace}/{} kept changing while answering; try again",
        args.run
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use openwop_crds::{
        PendingInterrupt, PendingQuestion, RunPhase, RunSpec, RunStatus, WorkflowRef,
    };

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ResumeArgs,
    }

    fn args(argv: &[&str]) -> ResumeArgs {
        Cli::try_parse_from(std::iter::once("resume").chain(argv.iter().copied()))
            .unwrap()
            .args
    }

    fn waiting(kind: &str, questions: &[&str]) -> Run {
        let mut run = Run::new(
            "r1",
            RunSpec {
                workflow_ref: WorkflowRef {
                    name: Some("wf".into()),
                    id: None,
                },
                inputs: None,
                configurable: None,
                timeout_seconds: None,
                answers: vec![],
                cancel: None,
                pause: None,
                provider_mocks: Default::default(),
            },
        );
        run.metadata.resource_version = Some("42".into());
        run.status = Some(RunStatus {
            phase: Some(RunPhase::WaitingInput),
            pending_interrupts: vec![PendingInterrupt {
                interrupt_id: "i1".into(),
                node_id: "n".into(),
                kind: kind.into(),
                questions: questions
                    .iter()
                    .map(|q| PendingQuestion {
                        id: (*q).into(),
                        question: "?".into(),
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        });
        run
    }

    /// An interrupt still being recorded (its approval not in the status yet) is not
    /// answered: the user is told to retry, whichever way they name it.
    #[test]
    fn an_interrupt_still_being_recorded_is_not_answered() {
        let mut run = waiting("approval", &[]);
        let st = run.status.as_mut().unwrap();
        st.phase = Some(RunPhase::Running);
        st.recording_interrupts = std::mem::take(&mut st.pending_interrupts);
        for argv in [
            &["r1", "--approve"][..],
            &["r1", "--approve", "--node", "n"],
            &["r1", "--approve", "--interrupt", "i1"],
        ] {
            let e = build_answer(&run, &args(argv)).unwrap_err();
            assert_eq!(
                e.to_string(),
                "the interrupt at node n of Run r1 is still being recorded (its approval or questions are not in the Run's status yet); retry in a moment",
                "{argv:?}"
            );
        }
        // Another node named: not this one's business.
        let e = build_answer(&run, &args(&["r1", "--approve", "--node", "m"])).unwrap_err();
        assert!(!e.to_string().contains("being recorded"), "{e}");
    }

    #[test]
    fn with_several_pending_interrupts_node_picks_one() {
        let mut run = waiting("clarification", &["q1"]);
        let st = run.status.as_mut().unwrap();
        let mut second = st.pending_interrupts[0].clone();
        second.interrupt_id = "i2".into();
        second.node_id = "m".into();
        second.kind = "approval".into();
        second.questions.clear();
        st.pending_interrupts.push(second);
        let e = build_answer(&run, &args(&["r1", "--answer", "q1=x"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Run r1 waits on 2 interrupts: choose one with --node NODE (waiting: n (clarification), m (approval))"
        );
        let a = build_answer(&run, &args(&["r1", "--node", "m", "--approve"])).unwrap();
        assert_eq!((a.interrupt_id.as_str(), a.approved), ("i2", Some(true)));
        let a = build_answer(&run, &args(&["r1", "--node", "n", "--answer", "q1=x"])).unwrap();
        assert_eq!(a.interrupt_id, "i1");
        // The chosen node's own checks apply: n asks questions, it is not an approval.
        let e = build_answer(&run, &args(&["r1", "--node", "n", "--approve"])).unwrap_err();
        assert!(e.to_string().contains("not an approval"), "{e}");
        let e = build_answer(&run, &args(&["r1", "--node", "zz", "--approve"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "node zz of Run r1 has no pending interrupt; the nodes waiting are: n (clarification), m (approval)"
        );
    }

    #[test]
    fn answers_become_a_value_object_with_json_or_string_values() {
        let a = build_answer(
            &waiting("clarification", &["q1", "q2"]),
            &args(&["r1", "--answer", "q1=blue", "--answer", "q2={\"n\":3}"]),
        )
        .unwrap();
        assert_eq!(a.interrupt_id, "i1");
        assert_eq!(a.value, Some(json!({"q1": "blue", "q2": {"n": 3}})));
        assert_eq!(a.approved, None);
    }

    #[test]
    fn approvals_carry_the_decision_and_reason() {
        let a = build_answer(
            &waiting("approval", &[]),
            &args(&["r1", "--reject", "--reason", "too risky"]),
        )
        .unwrap();
        assert_eq!(
            (a.approved, a.comment.as_deref()),
            (Some(false), Some("too risky"))
        );
        let a = build_answer(&waiting("approval", &[]), &args(&["r1", "--approve"])).unwrap();
        assert_eq!(a.approved, Some(true));
    }

    #[test]
    fn action_takes_an_offered_action() {
        let mut run = waiting("approval", &[]);
        run.status.as_mut().unwrap().pending_interrupts[0].actions =
            vec!["accept".into(), "reject".into()];
        let a = build_answer(&run, &args(&["r1", "--action", "reject"])).unwrap();
        assert_eq!(
            (a.action.as_deref(), a.approved),
            (Some("reject"), Some(false))
        );
        let e = build_answer(&run, &args(&["r1", "--action", "refine"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "interrupt i1 does not offer action \"refine\"; use --action with one of: accept, reject"
        );
        assert!(Cli::try_parse_from(["resume", "r1", "--action", "accept", "--approve"]).is_err());
    }

    #[test]
    fn refine_and_edit_accept_send_their_data() {
        let mut run = waiting("approval", &[]);
        run.status.as_mut().unwrap().pending_interrupts[0].actions =
            vec!["accept".into(), "refine".into(), "edit-accept".into()];
        let a = build_answer(
            &run,
            &args(&[
                "r1",
                "--action",
                "refine",
                "--feedback",
                "shorter",
                "--scope",
                "section",
                "--section",
                "intro",
            ]),
        )
        .unwrap();
        assert_eq!(a.action.as_deref(), Some("refine"));
        assert_eq!(
            a.value,
            Some(
                json!({"refineFeedback": {"scope": "section", "text": "shorter", "sectionPath": "intro"}})
            )
        );
        let e = build_answer(&run, &args(&["r1", "--action", "refine"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "action refine needs resumeValue.refineFeedback: give --feedback TEXT, with --scope whole|section|items"
        );
        let e = build_answer(
            &run,
            &args(&[
                "r1",
                "--action",
                "refine",
                "--feedback",
                "x",
                "--scope",
                "all",
            ]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("refineFeedback.scope"), "{e}");
        let a = build_answer(
            &run,
            &args(&[
                "r1",
                "--action",
                "edit-accept",
                "--edited",
                "{\"title\": \"v2\"}",
            ]),
        )
        .unwrap();
        assert_eq!(
            a.value,
            Some(json!({"editedArtifactData": {"title": "v2"}}))
        );
        let e = build_answer(
            &run,
            &args(&["r1", "--action", "edit-accept", "--edited", "{x"]),
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("--edited \"{x\" is not JSON"),
            "{e}"
        );
        let e = build_answer(&run, &args(&["r1", "--action", "edit-accept"])).unwrap_err();
        assert!(e.to_string().ends_with("give --edited JSON"), "{e}");
        // --feedback belongs to an action.
        assert!(Cli::try_parse_from(["resume", "r1", "--feedback", "x"]).is_err());
    }

    #[test]
    fn without_a_review_the_kubeconfig_user_is_named_unverified() {
        let k: kube::config::Kubeconfig = serde_json::from_value(json!({
            "current-context": "c",
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "alice"}}]
        }))
        .unwrap();
        assert_eq!(unverified_user(Some(&k)), "kubeconfig:alice (unverified)");
        assert_eq!(unverified_user(None), "kubeconfig user (unverified)");
    }

    #[test]
    fn mistakes_are_explained() {
        let e = build_answer(
            &waiting("clarification", &["q1"]),
            &args(&["r1", "--answer", "q9=x"]),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "interrupt i1 has no question \"q9\"; its questions are: q1"
        );
        let e = build_answer(
            &waiting("clarification", &["q1", "q2"]),
            &args(&["r1", "--answer", "q1=x"]),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("missing answers for question(s) q2"),
            "{e}"
        );
        let e = build_answer(
            &waiting("clarification", &["q1"]),
            &args(&["r1", "--approve"]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("not an approval"), "{e}");
        let e =
            build_answer(&waiting("approval", &[]), &args(&["r1", "--answer", "a=b"])).unwrap_err();
        assert!(e.to_string().contains("use --action ACTION"), "{e}");
        let e = build_answer(
            &waiting("clarification", &["q1"]),
            &args(&["r1", "--answer", "noequals"]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("expected QUESTION_ID=VALUE"), "{e}");
        let mut done = waiting("clarification", &["q1"]);
        done.status.as_mut().unwrap().pending_interrupts.clear();
        let e = build_answer(&done, &args(&["r1", "--answer", "q1=x"])).unwrap_err();
        assert!(e.to_string().contains("has no pending interrupt"), "{e}");
        // No decision: resume a paused run (`super::pause::resume`).
        assert!(Cli::try_parse_from(["resume", "r1"]).is_ok());
        assert!(Cli::try_parse_from(["resume", "r1", "--approve", "--reject"]).is_err());
    }

    #[test]
    fn patch_appends_and_is_conditional_on_the_resource_version() {
        let mut run = waiting("approval", &[]);
        run.spec.answers.push(InterruptAnswer {
            interrupt_id: "i0".into(),
            approved: Some(true),
            ..Default::default()
        });
        let a = build_answer(&run, &args(&["r1", "--approve"]))
            .unwrap()
            .answered("alice", "2026-05-18T10:00:00Z");
        let p = answers_patch(&run, &a).unwrap();
        assert_eq!(p["metadata"]["resourceVersion"], "42");
        assert_eq!(
            p["spec"]["answers"],
            json!([{"interruptId": "i0", "approved": true},
                   {"interruptId": "i1", "approved": true, "action": "accept", "nodeId": "n",
                    "answeredBy": "alice", "answeredAt": "2026-05-18T10:00:00Z"}])
        );
        let again =
            build_answer(&run, &args(&["r1", "--approve", "--interrupt", "i0"])).unwrap_err();
        assert!(again.to_string().contains("already answered"), "{again}");
    }
}
