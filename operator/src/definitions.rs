//! The stored workflow definitions, read once per Workflow generation.
//!
//! A Workflow's spec is protocol's [`WorkflowDefinition`], decoded leniently by the watch
//! (`openwop-crds`). What the rest of the operator needs of it is always the same three
//! things: the definition with the members a Workflow may leave out filled
//! ([`WorkflowDefinition::filled`]), that definition as a JSON document (the snapshot,
//! `GET /v1/workflows/{id}`, the registration check, the debug bundle), and whether the
//! document reads as a definition read from JSON must (the workflow-definition schema, unique
//! node ids, edges and inputs that name nodes). Filling, serializing and validating cost a
//! schema validation each time; a Workflow changes only with its generation. So they are
//! computed here once per (Workflow uid, generation) and shared: [`Definitions::of`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use openwop_crds::Workflow;
use openwop_protocol::workflow::{WorkflowDefinition, WorkflowError};
use serde_json::Value;

/// Most Workflows remembered; past it the memo starts again (entries of deleted Workflows
/// are not tracked one by one).
const MAX_REMEMBERED: usize = 4096;

/// A Workflow's definition as the operator reads it.
#[derive(Debug)]
pub struct StoredDefinition {
    /// The definition, with what a Workflow may leave out filled.
    pub definition: WorkflowDefinition,
    /// [`Self::definition`] as JSON.
    pub document: Value,
    /// `Ok` when [`Self::document`] reads as a workflow definition from JSON must
    /// ([`WorkflowDefinition::from_value`]); why not otherwise.
    pub read: Result<(), WorkflowError>,
}

impl StoredDefinition {
    /// Reads `wf`'s definition (the work [`Definitions::of`] does once per generation).
    pub fn read(wf: &Workflow) -> StoredDefinition {
        let definition = wf.spec.definition.filled();
        let document = definition.to_value();
        let read = WorkflowDefinition::from_value(document.clone()).map(|_| ());
        StoredDefinition {
            definition,
            document,
            read,
        }
    }
}

/// Workflow uid → (the generation read, its reading).
type Memo = HashMap<String, (Option<i64>, Arc<StoredDefinition>)>;

/// The definitions read so far, by Workflow uid and generation; cheap to clone (shared).
#[derive(Clone, Default)]
pub struct Definitions {
    memo: Arc<Mutex<Memo>>,
}

impl Definitions {
    /// `wf`'s definition, read now only if this generation of it was not read before.
    pub fn of(&self, wf: &Workflow) -> Arc<StoredDefinition> {
        // A Workflow without a uid (one built in memory) is read every time.
        let Some(uid) = wf.uid() else {
            return Arc::new(StoredDefinition::read(wf));
        };
        let generation = wf.metadata.generation;
        if let Some((g, d)) = self.lock().get(&uid)
            && *g == generation
            && generation.is_some()
        {
            return d.clone();
        }
        // Read outside the lock: a schema validation, and other Workflows are wanted meanwhile.
        let read = Arc::new(StoredDefinition::read(wf));
        let mut memo = self.lock();
        if memo.len() >= MAX_REMEMBERED {
            memo.clear();
        }
        memo.insert(uid, (generation, read.clone()));
        read
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memo> {
        // A panic elsewhere while holding it leaves a map that is still whole.
        self.memo.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn workflow(uid: Option<&str>, generation: i64, nodes: Value) -> Workflow {
        serde_json::from_value(json!({
            "apiVersion": "openwop.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "w", "namespace": "ns", "uid": uid, "generation": generation},
            "spec": {"id": "w", "nodes": nodes},
        }))
        .unwrap()
    }

    #[test]
    fn a_generation_is_read_once_and_a_new_one_again() {
        let defs = Definitions::default();
        let one = json!([{"id": "a", "typeId": "core.identity"}]);
        let first = defs.of(&workflow(Some("u1"), 1, one.clone()));
        let again = defs.of(&workflow(Some("u1"), 1, one));
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same generation is not read again"
        );
        assert!(first.read.is_ok());
        assert_eq!(
            first.document["nodes"][0]["name"], "a",
            "filled: {}",
            first.document
        );
        let two =
            json!([{"id": "a", "typeId": "core.identity"}, {"id": "a", "typeId": "core.identity"}]);
        let next = defs.of(&workflow(Some("u1"), 2, two));
        assert!(!Arc::ptr_eq(&first, &next));
        assert!(
            matches!(next.read, Err(WorkflowError::DuplicateNodeId { .. })),
            "{:?}",
            next.read
        );
        // Another Workflow of the same generation is its own entry.
        let other = defs.of(&workflow(
            Some("u2"),
            2,
            json!([{"id": "b", "typeId": "core.identity"}]),
        ));
        assert_eq!(other.definition.nodes[0].id, "b");
        assert!(
            defs.of(&workflow(
                None,
                1,
                json!([{"id": "c", "typeId": "core.identity"}])
            ))
            .read
            .is_ok()
        );
    }
}
