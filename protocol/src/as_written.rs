//! A member of a workflow definition kept exactly as written, with its typed reading.
//!
//! The Workflow CRD admits some members more loosely than the workflow-definition schema
//! types them: `agent`, node and workflow `settings` and `triggers` are free-form objects
//! there, and an input source is a flat object whose `type` names the variant. The operator
//! must decode every object the apiserver admits (one that fails to decode fails the
//! operator's whole list of Workflows) and must report what does not fit the schema rather
//! than drop it. So such a member keeps the JSON as written — what serializes, compares and
//! is schema-checked — and [`AsWritten::typed`] is its reading as `T`: `None` when it does
//! not fit, which [`crate::workflow::WorkflowDefinition::from_value`]'s schema check refuses
//! first, so a definition read that way always has it.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::lenient::Lenient;

/// JSON as written plus its reading as `T`.
#[derive(Debug, Clone)]
pub struct AsWritten<T> {
    raw: Value,
    typed: Option<T>,
}

impl<T: DeserializeOwned> AsWritten<T> {
    /// The member `raw`, read as `T` where it fits.
    pub fn from_raw(raw: Value) -> Self {
        let typed = T::deserialize(&raw).ok();
        AsWritten { raw, typed }
    }
}

impl<T: Serialize> AsWritten<T> {
    /// The member written as `value` serializes.
    pub fn new(value: T) -> Self {
        // Workflow members are strings, numbers, maps and JSON values: cannot fail.
        let raw = serde_json::to_value(&value).unwrap_or(Value::Null);
        AsWritten {
            raw,
            typed: Some(value),
        }
    }
}

impl<T> AsWritten<T> {
    /// The typed reading, `None` when the JSON does not fit `T`.
    pub fn typed(&self) -> Option<&T> {
        self.typed.as_ref()
    }

    /// The JSON as written (the lenient marker when it was nested too deep to decode).
    pub fn raw(&self) -> &Value {
        &self.raw
    }
}

impl<T> PartialEq for AsWritten<T> {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl<T> Serialize for AsWritten<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for AsWritten<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(AsWritten::from_raw(Lenient::deserialize(d)?.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Agent {
        #[serde(rename = "agentId")]
        agent_id: String,
    }

    #[test]
    fn what_fits_is_typed_and_what_does_not_is_kept() {
        let a: AsWritten<Agent> =
            serde_json::from_value(json!({"agentId": "w-1", "extra": 1})).unwrap();
        assert_eq!(a.typed().unwrap().agent_id, "w-1");
        // Written back as given, unknown member included (the schema check sees it).
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            json!({"agentId": "w-1", "extra": 1})
        );
        let b: AsWritten<Agent> = serde_json::from_value(json!({"agent": 5})).unwrap();
        assert!(b.typed().is_none());
        assert_eq!(b.raw(), &json!({"agent": 5}));
        assert_eq!(
            AsWritten::new(Agent {
                agent_id: "x".into()
            })
            .raw(),
            &json!({"agentId": "x"})
        );
    }

    #[test]
    fn a_value_too_deep_is_the_lenient_marker_not_an_error() {
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        let a: AsWritten<Agent> = serde_json::from_str(&deep).unwrap();
        assert!(crate::lenient::undecodable(a.raw()).is_some());
        assert!(a.typed().is_none());
    }
}
