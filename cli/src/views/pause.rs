//! `kubectl-openwop pause RUN [--reason TEXT] [--drain-policy immediate|drain-current-node]`
//! and `kubectl-openwop resume RUN` (with no answer): set or remove the Run's `spec.pause`,
//! the same field the REST `:pause` / `:resume` patch, after the same checks
//! ([`openwop_protocol::run::pause`]). The patch carries the Run's resourceVersion, so a
//! concurrent change is re-read, never overwritten.

use anyhow::{Context as _, Result, bail};
use clap::Args;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use openwop_crds::{DrainPolicy, PauseRequest, Run};
use openwop_protocol::run::pause::{MAX_REASON_CHARS, check_pause, check_resume};
use serde_json::{Value, json};

use super::{NamespaceArg, client_and_namespace};

#[derive(Args, Debug)]
pub struct PauseArgs {
    /// Name of the running Run to pause.
    pub run: String,
    #[command(flatten)]
    pub ns: NamespaceArg,
    /// Why (recorded in the run's `run.paused` event).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// `drain-current-node` (default: the nodes executing finish first) or `immediate`
    /// (they are abandoned and run again from the start on resume).
    #[arg(long, value_name = "POLICY", default_value = "drain-current-node", value_parser = drain_policy)]
    pub drain_policy: DrainPolicy,
}

fn drain_policy(s: &str) -> Result<DrainPolicy, String> {
    DrainPolicy::ALL
        .into_iter()
        .find(|p| p.as_str() == s)
        .ok_or_else(|| {
            let all: Vec<_> = DrainPolicy::ALL.iter().map(|p| p.as_str()).collect();
            format!("{s:?} is not a drain policy; use one of {}", all.join(", "))
        })
}

fn phase(run: &Run) -> openwop_crds::RunPhase {
    run.status
        .as_ref()
        .and_then(|s| s.phase)
        .unwrap_or_default()
}

/// The merge patch setting `spec.pause` to `pause` (null removes it), guarded by `run`'s
/// resourceVersion.
pub fn pause_patch(run: &Run, pause: Option<&PauseRequest>) -> Result<Value> {
    Ok(json!({
        "metadata": {"resourceVersion": run.resource_version()},
        "spec": {"pause": serde_json::to_value(pause)?},
    }))
}

/// Reads the Run, checks it with `check`, patches it with what `patch` builds; retries on a
/// concurrent change.
async fn patch_checked(
    api: &Api<Run>,
    name: &str,
    what: &str,
    build: impl Fn(&Run) -> Result<Value>,
) -> Result<()> {
    for attempt in 1..=5 {
        let run = api
            .get_opt(name)
            .await
            .with_context(|| format!("cannot read Run {name}"))?
            .with_context(|| format!("Run {name:?} not found"))?;
        let patch = build(&run)?;
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 5 => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot {what} Run {name}")),
        }
    }
    bail!("Run {name} kept changing; try again")
}

pub async fn pause(args: PauseArgs) -> Result<()> {
    if let Some(r) = &args.reason
        && r.chars().count() > MAX_REASON_CHARS
    {
        bail!(
            "--reason has {} characters; at most {MAX_REASON_CHARS}",
            r.chars().count()
        );
    }
    let (client, namespace) = client_and_namespace(args.ns.namespace.as_deref()).await?;
    let api: Api<Run> = Api::namespaced(client, &namespace);
    patch_checked(&api, &args.run, "pause", |run| {
        check_pause(phase(run), run.spec.pause.is_some())
            .with_context(|| format!("cannot pause Run {namespace}/{}", args.run))?;
        let req = PauseRequest {
            reason: args.reason.clone(),
            drain_policy: args.drain_policy,
            requested_at: Some(Timestamp::now().to_string()),
        };
        pause_patch(run, Some(&req))
    })
    .await?;
    println!(
        "run.openwop.dev/{} pausing ({}): it stops at a safe point and holds no pod; `kubectl openwop resume {}` continues it",
        args.run,
        args.drain_policy.as_str(),
        args.run
    );
    Ok(())
}

/// `resume RUN` with no answer: removes `spec.pause`.
pub async fn resume(run_name: &str, ns: Option<&str>) -> Result<()> {
    let (client, namespace) = client_and_namespace(ns).await?;
    let api: Api<Run> = Api::namespaced(client, &namespace);
    patch_checked(&api, run_name, "resume", |run| {
        check_resume(phase(run), run.spec.pause.is_some()).with_context(|| {
            format!(
                "cannot resume Run {namespace}/{run_name} (to answer its interrupt pass --answer, --action, --approve or --reject)"
            )
        })?;
        pause_patch(run, None)
    })
    .await?;
    println!("run.openwop.dev/{run_name} resumed: a new worker replays its log and continues");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_sets_or_removes_spec_pause_under_the_resource_version() {
        let mut run: Run = serde_json::from_value(json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "ns", "resourceVersion": "7"},
            "spec": {"workflowRef": {"name": "w"}}}))
        .unwrap();
        let req = PauseRequest {
            drain_policy: DrainPolicy::Immediate,
            ..Default::default()
        };
        let p = pause_patch(&run, Some(&req)).unwrap();
        assert_eq!(p["metadata"]["resourceVersion"], "7");
        assert_eq!(p["spec"]["pause"], json!({"drainPolicy": "immediate"}));
        run.spec.pause = Some(req);
        assert_eq!(
            pause_patch(&run, None).unwrap()["spec"]["pause"],
            Value::Null
        );
        assert_eq!(drain_policy("immediate"), Ok(DrainPolicy::Immediate));
        assert!(
            drain_policy("later")
                .unwrap_err()
                .contains("drain-current-node")
        );
    }
}
