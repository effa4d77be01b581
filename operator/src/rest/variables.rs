//! `RunSnapshot.variables` of `GET /v1/runs/{runId}`: protocol's fold
//! ([`openwop_protocol::run::variables::Variables`]) of the run's inputs over the workflow's
//! declared defaults and, when the workflow has variable-writing nodes, their writes read
//! from the run's log; `sensitive` variables masked. A workflow without writer nodes costs no
//! log read.

use kube::{Resource as _, ResourceExt};
use openwop_crds::Run;
use openwop_protocol::graph::Graph;
use openwop_protocol::run::events_subject;
use openwop_protocol::run::variables::Variables;
use serde_json::{Map, Value};

use super::log::read_subject_events;
use super::state::RestState;
use super::support::find_workflow;

/// The run's variables as served, `None` when they cannot be known now: the Workflow is no
/// longer in the cache or no longer valid, or the log of a run with writer nodes cannot be
/// read (omitted rather than shown without the writes).
pub async fn variables_of(s: &RestState, run: &Run) -> Option<Map<String, Value>> {
    let ns = run.namespace().unwrap_or_default();
    let st = run.status.as_ref();
    let name = run
        .spec
        .workflow_ref
        .id
        .as_deref()
        .or(st.and_then(|st| st.workflow.as_deref()))
        .or(run.spec.workflow_ref.name.as_deref())?;
    let wf = find_workflow(s, &ns, name)?;
    let stored = s.definitions.of(&wf);
    stored.read.as_ref().ok()?;
    let graph = Graph::from_definition(&stored.definition).ok()?;
    let inputs = run
        .spec
        .inputs
        .clone()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let vars = Variables::new(&graph, &inputs);
    let bag = if vars.has_writers() {
        let uid = run.meta().uid.as_deref().unwrap_or_default();
        match read_subject_events(s, events_subject(&ns, uid)).await {
            Ok(events) => vars.of_events(&events),
            Err(e) => {
                tracing::warn!(run_id = %uid, error = %e.body.message, "variables omitted from the run snapshot: its log is unreadable");
                return None;
            }
        }
    } else {
        vars.run_bag(|_| None)
    };
    Some(vars.masked(bag))
}
