//! RFC 0030 reasoning posture: the system-prompt directive asking the model for a
//! `reasoning` field. Reasoning is never routed on: the router neither retries nor
//! refuses because it is missing or present.

use serde::{Deserialize, Serialize};

/// `capabilities.envelopes.reasoning.promptDirective`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningPosture {
    #[default]
    Advisory,
    Mandatory,
    Off,
}

impl ReasoningPosture {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Advisory => "advisory",
            Self::Mandatory => "mandatory",
            Self::Off => "off",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "advisory" => Some(Self::Advisory),
            "mandatory" => Some(Self::Mandatory),
            "off" => Some(Self::Off),
            _ => None,
        }
    }

    /// The directive injected into every call's system prompt, if any.
    pub fn directive(self) -> Option<&'static str> {
        match self {
            Self::Advisory => Some(
                "Where the output schema has a `reasoning` field, you may fill it with a short \
                 explanation of how you reached the answer. Never put secrets or credentials in it.",
            ),
            Self::Mandatory => Some(
                "Where the output schema has a `reasoning` field, fill it with a short explanation \
                 of how you reached the answer. Never put secrets or credentials in it.",
            ),
            Self::Off => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_per_posture() {
        assert!(
            ReasoningPosture::Advisory
                .directive()
                .unwrap()
                .contains("may")
        );
        assert!(
            !ReasoningPosture::Mandatory
                .directive()
                .unwrap()
                .contains("may")
        );
        assert_eq!(ReasoningPosture::Off.directive(), None);
        assert_eq!(ReasoningPosture::default(), ReasoningPosture::Advisory);
        for p in [
            ReasoningPosture::Advisory,
            ReasoningPosture::Mandatory,
            ReasoningPosture::Off,
        ] {
            assert_eq!(ReasoningPosture::parse(p.as_str()), Some(p));
        }
        assert_eq!(ReasoningPosture::parse("always"), None);
    }
}
