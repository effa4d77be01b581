//! `core.subWorkflow` (and `core.control.subWorkflow`): the worker never creates Kubernetes
//! objects. It records intent — `node.dispatched {nodeId, childWorkflowId, childRunName,
//! inputs}` at step `{node}/dispatch`, the child's name derived from (run, node) — and the
//! node goes dormant: the worker exits, the operator creates the child Run from the record,
//! and once the child ended writes its outcome into this run's snapshot and starts a worker
//! again. That worker finds the outcome and completes (or fails) the node; the dispatch is
//! recorded once, so no replay makes a second child.

use openwop_protocol::events::{ErrorInfo, EventType};
use openwop_protocol::graph::Node;
use openwop_protocol::run::waits::{
    ChildWait, SubWorkflowConfig, child_outcome, child_run_name, dispatch_step, dispatched_payload,
};
use serde_json::{Value, json};

use super::{Executor, NodeOutcome};
use crate::eventlog::{LogError, Publisher};

impl<P: Publisher> Executor<'_, P> {
    pub(super) async fn sub_workflow(
        &self,
        node: &Node,
        variables: &Value,
    ) -> Result<NodeOutcome, LogError> {
        let id = node.id.as_str();
        let cfg = match SubWorkflowConfig::parse(id, &node.config) {
            Ok(c) => c,
            Err(e) => return Ok(NodeOutcome::Failed(*e)),
        };
        if let Some(r) = self.snap.child_result(id) {
            return Ok(match child_outcome(&cfg, r) {
                Ok(outputs) => NodeOutcome::Completed(outputs),
                Err(e) => NodeOutcome::Failed(*e),
            });
        }
        let depth = self.snap.parent.as_ref().map_or(0, |p| p.depth) + 1;
        let limit = self.snap.host.max_sub_workflow_depth;
        if depth > limit {
            return Ok(NodeOutcome::Failed(ErrorInfo {
                code: "sub_workflow_depth_exceeded".into(),
                message: format!(
                    "node {id}: a child run here would be nested {depth} deep, beyond the host's limit of {limit} (chart value runs.maxSubWorkflowDepth); check the workflow does not call itself"
                ),
                details: Some(json!({"nodeId": id, "depth": depth, "limit": limit})),
                retryable: Some(false),
            }));
        }
        let child = ChildWait {
            node_id: id.to_owned(),
            child_run_name: child_run_name(&self.snap.run.name, id),
            child_workflow_id: cfg.workflow_id.clone(),
        };
        let inputs = cfg.child_inputs(variables);
        self.emit_value(
            &dispatch_step(id),
            Some(id),
            EventType::NodeDispatched,
            dispatched_payload(id, &child, &inputs),
        )
        .await?;
        Ok(NodeOutcome::Dormant)
    }
}
