//! The Workflow reconciler: validates the definition against the node registry and the
//! advertised kinds, and reports `Ready` (reason `Valid`) or not (reason = first problem).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use openwop_crds::{Workflow, WorkflowStatus};
use openwop_protocol::workflow_check::{CheckOptions, check_workflow};
use serde_json::json;

use super::common::{condition, publish, set_condition};
use super::context::{Context, Error};
use crate::definitions::StoredDefinition;
use crate::discovery::advertised_kinds;
use crate::names::MANAGER;
use crate::reasons::{ConditionType, Reason};

/// How many problems a Workflow's Ready message quotes.
const MESSAGE_PROBLEMS: usize = 5;

/// Validates a Workflow and reports `Ready` (reason `Valid`) or not (reason = first problem).
pub async fn reconcile_workflow(wf: Arc<Workflow>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    ctx.metrics.reconcile_started("workflow");
    let ns = wf.namespace().ok_or_else(|| Error::NoNamespace {
        kind: "Workflow",
        name: wf.name_any(),
    })?;
    let kinds: BTreeSet<String> = advertised_kinds().into_iter().collect();
    let opts = CheckOptions {
        registry: &ctx.registry,
        advertised_kinds: &kinds,
        tier1: ctx.config.tier_one_subset_compliance,
        mock_agent_opt_in: ctx.config.conformance.mock_agent_allowed_in(&ns),
    };
    let now = (ctx.now)();
    let old = wf.status.clone().unwrap_or_default();
    let generation = wf.metadata.generation;
    let ready = if let Some(refused) = crate::snapshot::Refused::undecodable_workflow(&wf) {
        // Checked first: the definition is never built from the marker.
        condition(
            ConditionType::Ready,
            false,
            refused.reason(),
            refused.to_string(),
            generation,
            now,
            &old.conditions,
        )
    } else {
        validity(
            &wf,
            &ctx.definitions.of(&wf),
            &opts,
            (generation, now),
            &old.conditions,
        )
    };
    let mut status = WorkflowStatus {
        observed_generation: generation,
        conditions: old.conditions.clone(),
        node_count: Some(wf.spec.nodes.len() as u32),
    };
    set_condition(&mut status.conditions, ready.clone());
    if status != old {
        let api: Api<Workflow> = Api::namespaced(ctx.client.clone(), &ns);
        let patch =
            json!({"apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow", "status": status});
        api.patch_status(
            &wf.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
        let previous = old
            .conditions
            .iter()
            .find(|c| c.type_ == ConditionType::Ready.as_str());
        if previous.map(|c| (&c.status, &c.message)) != Some((&ready.status, &ready.message)) {
            let (t, reason) = if ready.status == "True" {
                (EventType::Normal, Reason::Validated)
            } else {
                (EventType::Warning, Reason::Invalid)
            };
            publish(&ctx, wf.as_ref(), t, reason, ready.message.clone()).await;
        }
    }
    ctx.metrics
        .observe_duration("workflow", started.elapsed().as_secs_f64());
    Ok(Action::requeue(Duration::from_secs(600)))
}

/// `Ready` from the definition's check.
fn validity(
    wf: &Workflow,
    stored: &StoredDefinition,
    opts: &CheckOptions<'_>,
    (generation, now): (Option<i64>, k8s_openapi::jiff::Timestamp),
    previous: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    let definition = &stored.document;
    let mut report = check_workflow(definition, opts);
    let declared: Vec<&str> = wf.spec.secrets.iter().map(|s| s.name.as_str()).collect();
    report
        .errors
        .extend(openwop_protocol::workflow_check::secret_problems(
            definition, &declared,
        ));
    if report.is_valid() {
        let mut msg = format!("definition is valid ({} nodes)", wf.spec.nodes.len());
        if !report.warnings.is_empty() {
            let w: Vec<String> = report
                .warnings
                .iter()
                .take(MESSAGE_PROBLEMS)
                .map(ToString::to_string)
                .collect();
            msg.push_str(&format!(
                "; {} warning(s): {}",
                report.warnings.len(),
                w.join("; ")
            ));
        }
        let valid = Reason::Valid.as_str();
        condition(
            ConditionType::Ready,
            true,
            valid,
            msg,
            generation,
            now,
            previous,
        )
    } else {
        let e: Vec<String> = report
            .errors
            .iter()
            .take(MESSAGE_PROBLEMS)
            .map(ToString::to_string)
            .collect();
        let more = report.errors.len().saturating_sub(MESSAGE_PROBLEMS);
        let mut msg = format!("Invalid: {}", e.join("; "));
        if more > 0 {
            msg.push_str(&format!(" (and {more} more)"));
        }
        condition(
            ConditionType::Ready,
            false,
            report.errors[0].code.as_str(),
            msg,
            generation,
            now,
            previous,
        )
    }
}
