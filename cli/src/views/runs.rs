//! `kubectl-openwop runs` (table) and `kubectl-openwop describe RUN`.

use std::fmt::Write as _;

use anyhow::{Context as _, Result};
use clap::Args;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use openwop_crds::{PendingInterrupt, Run, RunPhase, RunStatus};

use super::{NamespaceArg, client_and_namespace, format_age, one_line};

#[derive(Args, Debug)]
pub struct RunsArgs {
    #[command(flatten)]
    pub ns: NamespaceArg,
    /// List runs in every namespace (adds a NAMESPACE column).
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
}

#[derive(Args, Debug)]
pub struct DescribeArgs {
    /// Name of the Run.
    pub run: String,
    #[command(flatten)]
    pub ns: NamespaceArg,
}

pub async fn list(args: RunsArgs) -> Result<()> {
    let (client, namespace) = client_and_namespace(args.ns.namespace.as_deref()).await?;
    let api: Api<Run> = if args.all_namespaces {
        Api::all(client)
    } else {
        Api::namespaced(client, &namespace)
    };
    let list = api.list(&ListParams::default()).await.context(
        "cannot list Runs (are the openwop CRDs installed? `kubectl get crd runs.openwop.dev`)",
    )?;
    let mut runs = list.items;
    runs.sort_by_key(|a| (a.namespace(), a.name_any()));
    if runs.is_empty() {
        if args.all_namespaces {
            eprintln!("No runs found.");
        } else {
            eprintln!("No runs found in {namespace} namespace.");
        }
        return Ok(());
    }
    print!(
        "{}",
        runs_table(&runs, Timestamp::now(), args.all_namespaces)
    );
    Ok(())
}

fn age_of(run: &Run, now: Timestamp) -> String {
    run.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| format_age(now.as_second() - t.0.as_second()))
        .unwrap_or_else(|| "<unknown>".into())
}

/// The `runs` table: NAME, WORKFLOW, PHASE, NODE, AGE (NAMESPACE first with `-A`).
pub fn runs_table(runs: &[Run], now: Timestamp, with_namespace: bool) -> String {
    let mut rows: Vec<Vec<String>> = Vec::with_capacity(runs.len() + 1);
    let mut head = vec!["NAME", "WORKFLOW", "PHASE", "NODE", "AGE"];
    if with_namespace {
        head.insert(0, "NAMESPACE");
    }
    rows.push(head.into_iter().map(String::from).collect());
    for run in runs {
        let status = run.status.clone().unwrap_or_default();
        let mut row = vec![
            run.name_any(),
            status
                .workflow
                .clone()
                .unwrap_or_else(|| run.spec.workflow_ref.to_string()),
            status.phase.unwrap_or_default().as_str().to_owned(),
            status.current_node.clone().unwrap_or_else(|| "-".into()),
            age_of(run, now),
        ];
        if with_namespace {
            row.insert(0, run.namespace().unwrap_or_default());
        }
        rows.push(row);
    }
    let cols = rows[0].len();
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == cols {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}   ", w = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub async fn describe(args: DescribeArgs) -> Result<()> {
    let (client, namespace) = client_and_namespace(args.ns.namespace.as_deref()).await?;
    let api: Api<Run> = Api::namespaced(client, &namespace);
    let run = api
        .get_opt(&args.run)
        .await
        .with_context(|| format!("cannot read Run {namespace}/{}", args.run))?
        .with_context(|| {
            format!(
                "Run {:?} not found in namespace {namespace} (list them with `kubectl openwop runs -n {namespace}`)",
                args.run
            )
        })?;
    print!("{}", describe_text(&run, Timestamp::now()));
    Ok(())
}

/// What to type to answer `pending`, one of the Run's pending interrupts (`--node` when
/// several wait).
pub fn resume_hint(run: &Run, pending: &PendingInterrupt) -> Option<String> {
    let all = &run.status.as_ref()?.pending_interrupts;
    let name = run.name_any();
    let ns = run.namespace().unwrap_or_default();
    let name = if all.len() > 1 {
        format!("{name} --node {}", pending.node_id)
    } else {
        name
    };
    Some(if pending.kind == "approval" {
        let others: Vec<String> = pending
            .offered_actions()
            .into_iter()
            .filter(|a| a != "accept")
            .collect();
        format!(
            "kubectl openwop resume {name} -n {ns} --action accept   (or --action {} --reason TEXT)",
            others.join("|")
        )
    } else if pending.questions.is_empty() {
        format!("kubectl openwop resume {name} -n {ns} --answer ID=VALUE")
    } else {
        let answers: Vec<String> = pending
            .questions
            .iter()
            .map(|q| format!("--answer {}=VALUE", q.id))
            .collect();
        format!(
            "kubectl openwop resume {name} -n {ns} {}",
            answers.join(" ")
        )
    })
}

/// `describe` output: identity, status, conditions, pending interrupt, error, worker pod.
/// Each section is written by its own function, in this order.
pub fn describe_text(run: &Run, now: Timestamp) -> String {
    let status = run.status.clone().unwrap_or_default();
    let mut o = String::new();
    describe_summary(&mut o, run, &status, now);
    describe_conditions(&mut o, &status);
    describe_waits(&mut o, &status);
    for p in &status.pending_interrupts {
        describe_interrupt(&mut o, run, &status, p);
    }
    describe_answers(&mut o, run, &status);
    o
}

/// The Run's identity and status fields, one per line (`-` when unset), and its error.
fn describe_summary(o: &mut String, run: &Run, status: &RunStatus, now: Timestamp) {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let _ = writeln!(o, "Name:          {}", run.name_any());
    let _ = writeln!(o, "Namespace:     {}", run.namespace().unwrap_or_default());
    let workflow = status
        .workflow
        .clone()
        .unwrap_or_else(|| run.spec.workflow_ref.to_string());
    let _ = writeln!(o, "Workflow:      {workflow}");
    let _ = writeln!(o, "Run ID:        {}", opt(status.run_id.clone()));
    let _ = writeln!(
        o,
        "Phase:         {}",
        status.phase.unwrap_or_default().as_str()
    );
    let _ = writeln!(o, "Current node:  {}", opt(status.current_node.clone()));
    let _ = writeln!(o, "Age:           {}", age_of(run, now));
    let _ = writeln!(
        o,
        "Events:        {} (last sequence {})",
        status.events.map_or("-".into(), |e| e.to_string()),
        status.last_sequence.map_or("-".into(), |e| e.to_string())
    );
    let _ = writeln!(
        o,
        "Attempts:      {} ({} failed)",
        status.attempts.unwrap_or(0),
        status.failed_attempts.unwrap_or(0)
    );
    let _ = writeln!(o, "Worker pod:    {}", opt(status.worker_pod.clone()));
    if let Some(t) = &status.start_time {
        let _ = writeln!(o, "Started:       {}", t.0);
    }
    if let Some(t) = &status.completion_time {
        let _ = writeln!(o, "Completed:     {}", t.0);
    }
    if let Some(t) = &status.retry_after {
        let _ = writeln!(o, "Retry after:   {}", t.0);
    }
    if run.spec.cancel == Some(true) {
        let _ = writeln!(o, "Cancel:        requested");
    }
    if let Some(e) = &status.error {
        let _ = writeln!(
            o,
            "Error:         {}: {}",
            e.code,
            one_line(&e.message, 300)
        );
    }
}

/// The Run's conditions as a small table (nothing when there are none).
fn describe_conditions(o: &mut String, status: &RunStatus) {
    if !status.conditions.is_empty() {
        let _ = writeln!(o, "Conditions:");
        for c in &status.conditions {
            let _ = writeln!(
                o,
                "  {:<10} {:<6} {:<20} {}",
                c.type_,
                c.status,
                c.reason,
                one_line(&c.message, 200)
            );
        }
    }
}

/// What the run waits on besides a person: "none" when no interrupt is pending, the running
/// nodes, durable waits (a delay's wake time, a child run) and child runs, with where a
/// child's question is answered.
fn describe_waits(o: &mut String, status: &RunStatus) {
    if status.pending_interrupts.is_empty() {
        let _ = writeln!(o, "Pending interrupt: none");
    }
    if !status.running_nodes.is_empty() {
        let nodes: Vec<&str> = status.running_nodes.iter().map(String::as_str).collect();
        let _ = writeln!(o, "Running nodes: {}", nodes.join(", "));
    }
    // Durable waits: what a waiting delay or child needs (nothing from a person: the
    // operator starts a worker at the wake time, or once the child ended).
    for t in &status.timers {
        let _ = writeln!(
            o,
            "Waiting delay: node {} wakes at {} (no worker pod meanwhile; the operator starts one then)",
            t.node_id, t.wake_at
        );
    }
    for c in &status.child_waits {
        let _ = writeln!(
            o,
            "Waiting child: node {} waits for child Run {} (workflow {}); see `kubectl openwop describe {}`",
            c.node_id, c.child_run_name, c.child_workflow_id, c.child_run_name
        );
    }
    for c in &status.child_runs {
        let _ = writeln!(
            o,
            "Child run:     {} (node {}, {})",
            c.name,
            c.node_id,
            c.phase.unwrap_or_default().as_str()
        );
        // The parent shows its child's wait as its own phase: say where the answer goes.
        if let Some(node) = &c.waiting_node
            && c.phase.is_some_and(RunPhase::is_waiting)
        {
            let _ = writeln!(
                o,
                "  Needs:       an answer to child Run {} at its node {node}; see `kubectl openwop describe {}` (answering it resumes this run too)",
                c.name, c.name
            );
        }
    }
}

/// One pending interrupt: what it asks, and how to answer it with kubectl and over REST.
fn describe_interrupt(o: &mut String, run: &Run, status: &RunStatus, p: &PendingInterrupt) {
    let _ = writeln!(o, "Pending interrupt:");
    let _ = writeln!(o, "  ID:        {}", p.interrupt_id);
    let _ = writeln!(o, "  Kind:      {}", p.kind);
    let _ = writeln!(o, "  Node:      {}", p.node_id);
    if let Some(t) = &p.title {
        let _ = writeln!(o, "  Title:     {}", one_line(t, 300));
    }
    if p.is_approval() {
        let _ = writeln!(o, "  Actions:   {}", p.offered_actions().join(", "));
    }
    if let Some(r) = &p.reason {
        let _ = writeln!(o, "  Reason:    {r}");
    }
    if let Some(a) = &p.agent_id {
        let _ = writeln!(o, "  Agent:     {a}");
    }
    if let (Some(t), Some(obs)) = (p.threshold, p.observed) {
        let _ = writeln!(o, "  Confidence: {obs} (threshold {t})");
    }
    if !p.questions.is_empty() {
        let _ = writeln!(o, "  Questions:");
        for q in &p.questions {
            let _ = writeln!(o, "    {}: {}", q.id, one_line(&q.question, 300));
        }
    }
    if let Some(hint) = resume_hint(run, p) {
        let _ = writeln!(o, "  Answer with: {hint}");
        let _ = writeln!(
            o,
            "  or REST:   POST /v1/runs/{}/interrupts/{} {}",
            status.run_id.as_deref().unwrap_or("RUN_ID"),
            p.node_id,
            rest_resume_body(p)
        );
    }
}

/// The body of the REST request that answers `p` (placeholders where a person fills in).
fn rest_resume_body(p: &PendingInterrupt) -> String {
    if p.is_approval() {
        r#"{"resumeValue": {"action": "accept"}}"#.to_owned()
    } else if p.questions.is_empty() {
        r#"{"resumeValue": {...}}"#.to_owned()
    } else {
        let ids: Vec<String> = p
            .questions
            .iter()
            .map(|q| format!("\"{}\": ...", q.id))
            .collect();
        format!(
            r#"{{"resumeValue": {{"answers": {{{}}}}}}}"#,
            ids.join(", ")
        )
    }
}

/// The answers in the Run's spec: what was answered, where, by whom, and whether a worker
/// has consumed it yet.
fn describe_answers(o: &mut String, run: &Run, status: &RunStatus) {
    if !run.spec.answers.is_empty() {
        let _ = writeln!(o, "Answers:");
        for a in &run.spec.answers {
            let what = match (a.approval_action(), &a.value) {
                (Some("accept"), _) => "approved".to_owned(),
                (Some("reject"), _) => "rejected".to_owned(),
                (Some(action), _) => action.to_owned(),
                (None, Some(v)) => one_line(&v.to_string(), 200),
                (None, None) => "-".to_owned(),
            };
            let consumed = status.answered_interrupts.contains(&a.interrupt_id);
            let node = a
                .node_id
                .as_deref()
                .map(|n| format!(" at {n}"))
                .unwrap_or_default();
            let by = format!(
                " by {}{}",
                a.principal(),
                a.answered_at
                    .as_deref()
                    .map(|t| format!(" at {t}"))
                    .unwrap_or_default()
            );
            let _ = writeln!(
                o,
                "  {}{node}: {what}{by}{}{}",
                a.interrupt_id,
                a.comment
                    .as_deref()
                    .map(|c| format!(" ({})", one_line(c, 120)))
                    .unwrap_or_default(),
                if consumed { "" } else { " [not yet consumed]" }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use openwop_crds::{
        PendingInterrupt, PendingQuestion, RunError, RunPhase, RunSpec, RunStatus, WorkflowRef,
    };

    pub(crate) fn sample(name: &str, status: Option<RunStatus>) -> Run {
        let mut run = Run::new(
            name,
            RunSpec {
                workflow_ref: WorkflowRef {
                    name: Some("triage".into()),
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
        run.metadata.namespace = Some("team-a".into());
        run.metadata.creation_timestamp = Some(Time("2026-05-18T10:00:00Z".parse().unwrap()));
        run.status = status;
        run
    }

    fn now() -> Timestamp {
        "2026-05-18T10:05:00Z".parse().unwrap()
    }

    #[test]
    fn table_aligns_columns_and_defaults_missing_status() {
        let running = sample(
            "r-long-name",
            Some(RunStatus {
                phase: Some(RunPhase::Running),
                workflow: Some("triage".into()),
                current_node: Some("classify".into()),
                ..Default::default()
            }),
        );
        let fresh = sample("r2", None);
        let t = runs_table(&[running, fresh], now(), false);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "NAME          WORKFLOW   PHASE     NODE       AGE"
        );
        assert_eq!(lines[1], "r-long-name   triage     running   classify   5m");
        assert_eq!(lines[2], "r2            triage     pending   -          5m");
        let all = runs_table(&[sample("r2", None)], now(), true);
        assert!(all.starts_with("NAMESPACE   NAME"), "{all}");
        assert!(all.lines().nth(1).unwrap().starts_with("team-a      r2"));
    }

    #[test]
    fn describe_shows_what_a_waiting_delay_or_child_needs() {
        let run = sample(
            "r1",
            Some(RunStatus {
                phase: Some(RunPhase::Running),
                wake_at: Some("2026-05-18T10:10:00.000Z".into()),
                timers: vec![openwop_crds::ArmedTimer {
                    node_id: "wait".into(),
                    wake_at: "2026-05-18T10:10:00.000Z".into(),
                }],
                child_waits: vec![openwop_crds::ChildWait {
                    node_id: "call".into(),
                    child_run_name: "r1-c0123456789".into(),
                    child_workflow_id: "child".into(),
                }],
                ..Default::default()
            }),
        );
        let text = describe_text(&run, now());
        assert!(
            text.contains("Waiting delay: node wait wakes at 2026-05-18T10:10:00.000Z (no worker pod meanwhile"),
            "{text}"
        );
        assert!(
            text.contains(
                "Waiting child: node call waits for child Run r1-c0123456789 (workflow child)"
            ),
            "{text}"
        );
    }

    #[test]
    fn describe_says_which_child_node_a_parent_waits_on() {
        let run = sample(
            "r1",
            Some(RunStatus {
                phase: Some(RunPhase::WaitingApproval),
                child_waits: vec![openwop_crds::ChildWait {
                    node_id: "call".into(),
                    child_run_name: "r1-c0123456789".into(),
                    child_workflow_id: "child".into(),
                }],
                child_runs: vec![openwop_crds::ChildRun {
                    node_id: "call".into(),
                    name: "r1-c0123456789".into(),
                    run_id: Some("cuid".into()),
                    phase: Some(RunPhase::WaitingApproval),
                    waiting_node: Some("gate".into()),
                }],
                ..Default::default()
            }),
        );
        let text = describe_text(&run, now());
        assert!(
            text.contains("Child run:     r1-c0123456789 (node call, waiting-approval)"),
            "{text}"
        );
        assert!(
            text.contains("  Needs:       an answer to child Run r1-c0123456789 at its node gate; see `kubectl openwop describe r1-c0123456789`"),
            "{text}"
        );
    }

    #[test]
    fn describe_shows_questions_error_and_how_to_answer() {
        let run = sample(
            "r1",
            Some(RunStatus {
                phase: Some(RunPhase::WaitingInput),
                current_node: Some("ask".into()),
                pending_interrupts: vec![PendingInterrupt {
                    interrupt_id: "i1".into(),
                    node_id: "ask".into(),
                    kind: "clarification".into(),
                    questions: vec![PendingQuestion {
                        id: "region".into(),
                        question: "Which region?".into(),
                    }],
                    ..Default::default()
                }],
                error: Some(RunError {
                    code: "run_timeout".into(),
                    message: "too slow".into(),
                }),
                worker_pod: Some("r1-worker-1".into()),
                ..Default::default()
            }),
        );
        let d = describe_text(&run, now());
        assert!(d.contains("Phase:         waiting-input"), "{d}");
        assert!(d.contains("Workflow:      triage"), "{d}");
        assert!(d.contains("Worker pod:    r1-worker-1"), "{d}");
        assert!(d.contains("Error:         run_timeout: too slow"), "{d}");
        assert!(d.contains("    region: Which region?"), "{d}");
        assert!(
            d.contains("kubectl openwop resume r1 -n team-a --answer region=VALUE"),
            "{d}"
        );
        assert!(describe_text(&sample("r2", None), now()).contains("Pending interrupt: none"));
    }

    #[test]
    fn describe_shows_every_pending_interrupt_with_its_node() {
        let pending = |node: &str, kind: &str| PendingInterrupt {
            interrupt_id: format!("int-{node}"),
            node_id: node.into(),
            kind: kind.into(),
            ..Default::default()
        };
        let run = sample(
            "r1",
            Some(RunStatus {
                phase: Some(RunPhase::WaitingInput),
                pending_interrupts: vec![
                    pending("ask", "clarification"),
                    pending("review", "approval"),
                ],
                ..Default::default()
            }),
        );
        let d = describe_text(&run, now());
        assert!(d.contains("  ID:        int-ask"), "{d}");
        assert!(d.contains("  ID:        int-review"), "{d}");
        assert!(
            d.contains("kubectl openwop resume r1 --node ask -n team-a --answer ID=VALUE"),
            "{d}"
        );
        assert!(
            d.contains("kubectl openwop resume r1 --node review -n team-a --action accept   (or --action reject --reason TEXT)"),
            "{d}"
        );
        assert!(
            d.contains(r#"or REST:   POST /v1/runs/RUN_ID/interrupts/review {"resumeValue": {"action": "accept"}}"#),
            "{d}"
        );
        assert!(!d.contains("Pending interrupt: none"), "{d}");
    }

    #[test]
    fn describe_shows_what_a_gate_needs_and_who_answered() {
        let mut run = sample(
            "r1",
            Some(RunStatus {
                phase: Some(RunPhase::WaitingApproval),
                run_id: Some("u-1".into()),
                pending_interrupts: vec![PendingInterrupt {
                    interrupt_id: "int-2".into(),
                    node_id: "ship".into(),
                    kind: "approval".into(),
                    title: Some("Ship the release?".into()),
                    actions: vec!["accept".into(), "reject".into(), "refine".into()],
                    ..Default::default()
                }],
                answered_interrupts: vec!["int-1".into()],
                ..Default::default()
            }),
        );
        run.spec.answers.push(
            serde_json::from_value(serde_json::json!({"interruptId": "int-1", "nodeId": "ask",
                "value": {"q1": "blue"}, "answeredBy": "alice", "answeredAt": "2026-05-18T10:01:00Z"}))
            .unwrap(),
        );
        run.spec.answers.push(
            serde_json::from_value(serde_json::json!({"interruptId": "int-0", "approved": false}))
                .unwrap(),
        );
        let d = describe_text(&run, now());
        assert!(d.contains("  Title:     Ship the release?"), "{d}");
        assert!(d.contains("  Actions:   accept, reject, refine"), "{d}");
        assert!(
            d.contains("--action accept   (or --action reject|refine --reason TEXT)"),
            "{d}"
        );
        assert!(
            d.contains(r#"or REST:   POST /v1/runs/u-1/interrupts/ship {"resumeValue": {"action": "accept"}}"#),
            "{d}"
        );
        assert!(
            d.contains(r#"  int-1 at ask: {"q1":"blue"} by alice at 2026-05-18T10:01:00Z"#),
            "{d}"
        );
        assert!(
            d.contains("  int-0: rejected by unattributed (spec.answers written directly) [not yet consumed]"),
            "{d}"
        );
    }
}
