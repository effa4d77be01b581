//! The v2 error registry as this host uses it (`errors.md`, `spec/v2/errors.json`): the codes
//! it emits with their registered HTTP status and retriability, the closed body
//! `{error, message, details?}`, and the map from the codes the v1 REST answers with today to
//! their v2 counterparts, so one [`Problem`] renders under either major.
//!
//! Under v2 a host MUST answer with the registered status of the code, so a v2 rendering
//! takes its status from [`Code::http_status`]; a v1 rendering keeps the status and code the
//! v1 handler chose (v1 used some codes at more than one status). Retry timing lives in the
//! `Retry-After` header only under v2: `details.retryAfter`, `retryAfterMs` and
//! `retryAfterSeconds` are dropped from a v2 body (`errors.md` §Retry timing).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::version::Major;

macro_rules! registry {
    ($($variant:ident => $code:literal, $status:literal, $retriable:literal;)*) => {
        /// A v2 registry code this host emits.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code { $($variant,)* }

        impl Code {
            /// Every code this host emits, by status.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The registered code, e.g. `"id_tenant_mismatch"`.
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $code,)* }
            }

            /// The registered HTTP status: the only status a v2 answer may carry.
            pub fn http_status(self) -> u16 {
                match self { $(Code::$variant => $status,)* }
            }

            /// The registry's `retriable`: a client may repeat the request unchanged.
            pub fn retriable(self) -> bool {
                match self { $(Code::$variant => $retriable,)* }
            }

            /// `None` for a code this host does not emit (registered or not).
            pub fn from_wire(s: &str) -> Option<Code> {
                match s { $($code => Some(Code::$variant),)* _ => None }
            }
        }
    };
}

// The rows of `spec/v2/errors.json` this host answers with: the codes its v1 REST answers
// with today (through `V1Code`), and the ones v2 adds for negotiation, tenant-bound ids,
// idempotency keys, interrupt tokens and era-2 reads.
registry! {
    ValidationError => "validation_error", 400, false;
    ProtocolVersionMismatch => "protocol_version_mismatch", 400, false;
    IdempotencyKeyInvalid => "idempotency_key_invalid", 400, false;
    UnsupportedStreamMode => "unsupported_stream_mode", 400, false;
    WebhookUrlRejected => "webhook_url_rejected", 400, false;
    Unauthenticated => "unauthenticated", 401, false;
    InterruptTokenInvalid => "interrupt_token_invalid", 401, false;
    Forbidden => "forbidden", 403, false;
    IdTenantMismatch => "id_tenant_mismatch", 403, false;
    NotFound => "not_found", 404, false;
    InterruptNotFound => "interrupt_not_found", 404, false;
    ProtocolVersionUnsupported => "protocol_version_unsupported", 406, false;
    IdempotencyKeyMismatch => "idempotency_key_mismatch", 409, false;
    IdempotencyInFlight => "idempotency_in_flight", 409, false;
    InterruptAlreadyResolved => "interrupt_already_resolved", 409, false;
    RunTerminal => "run_terminal", 409, false;
    RunStateConflict => "run_state_conflict", 409, false;
    VersionConflict => "version_conflict", 409, false;
    InterruptExpired => "interrupt_expired", 410, false;
    PayloadTooLarge => "payload_too_large", 413, false;
    UnsupportedMediaType => "unsupported_media_type", 415, false;
    CapabilityNotProvided => "capability_not_provided", 422, false;
    CapabilityRequired => "capability_required", 422, false;
    ResidencyUnavailable => "residency_unavailable", 422, true;
    ClientVersionUnsupported => "client_version_unsupported", 426, false;
    RateLimited => "rate_limited", 429, true;
    EventTypeUnmapped => "event_type_unmapped", 500, false;
    InternalError => "internal_error", 500, true;
    RunnerUnavailable => "runner_unavailable", 503, true;
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

macro_rules! v1_codes {
    ($($variant:ident => $code:literal => $v2:ident,)*) => {
        /// A code the v1 REST answers with, and the v2 code the same condition carries.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum V1Code { $($variant,)* }

        impl V1Code {
            pub const ALL: &'static [V1Code] = &[$(V1Code::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self { $(V1Code::$variant => $code,)* }
            }

            /// The v2 code of the same condition.
            pub fn v2(self) -> Code {
                match self { $(V1Code::$variant => Code::$v2,)* }
            }

            /// `None` for a code the v1 REST does not answer with.
            pub fn from_wire(s: &str) -> Option<V1Code> {
                match s { $($code => Some(V1Code::$variant),)* _ => None }
            }
        }
    };
}

// Every code in `operator/src/rest` (`ApiError::new`/`conflict` and its helpers) and in the
// protocol types whose `code()` the REST answers with. Where v2 registers the same code the
// row is the identity; the others name the registered code of the same condition.
v1_codes! {
    ValidationError => "validation_error" => ValidationError,
    Unauthenticated => "unauthenticated" => Unauthenticated,
    Forbidden => "forbidden" => Forbidden,
    NotFound => "not_found" => NotFound,
    PayloadTooLarge => "payload_too_large" => PayloadTooLarge,
    UnsupportedMediaType => "unsupported_media_type" => UnsupportedMediaType,
    RateLimited => "rate_limited" => RateLimited,
    InternalError => "internal_error" => InternalError,
    UnsupportedStreamMode => "unsupported_stream_mode" => UnsupportedStreamMode,
    WebhookUrlRejected => "webhook_url_rejected" => WebhookUrlRejected,
    CapabilityRequired => "capability_required" => CapabilityRequired,
    CapabilityNotProvided => "capability_not_provided" => CapabilityNotProvided,
    ResidencyUnavailable => "residency_unavailable" => ResidencyUnavailable,
    RunTerminal => "run_terminal" => RunTerminal,
    RunStateConflict => "run_state_conflict" => RunStateConflict,
    IdempotencyKeyMismatch => "idempotency_key_mismatch" => IdempotencyKeyMismatch,
    IdempotencyInFlight => "idempotency_in_flight" => IdempotencyInFlight,
    InterruptNotFound => "interrupt_not_found" => InterruptNotFound,
    InterruptExpired => "interrupt_expired" => InterruptExpired,
    InterruptAlreadyResolved => "interrupt_already_resolved" => InterruptAlreadyResolved,
    // A Kubernetes write lost to a concurrent one ("retry the request"): optimistic
    // concurrency, which v2 registers as `version_conflict`.
    Conflict => "conflict" => VersionConflict,
    // The Kubernetes API or JetStream is down (503 + Retry-After): v2's one retriable 503
    // for the host's execution side.
    Unavailable => "unavailable" => RunnerUnavailable,
    // `POST /v1/runs/{x}:<verb>` with an unknown verb: under v2 that is no operation at all.
    MethodNotAllowed => "method_not_allowed" => NotFound,
    SubscriptionNotFound => "subscription_not_found" => NotFound,
    // A per-tenant quota that waiting does not clear (so not `rate_limited`): a policy
    // refusal of an authenticated caller.
    WebhookLimitReached => "webhook_limit_reached" => Forbidden,
    // An external event that is not the one the interrupt awaits: v2 registers no 422 for
    // it; `interrupt.md` answers a resume value the interrupt does not accept with 400.
    CorrelationMismatch => "correlation_mismatch" => ValidationError,
}

/// The closed error body: `{error, message, details?}` and nothing else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    pub error: String,
    /// Never empty.
    pub message: String,
    /// An object when present; contextual data lives here, never at the top level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Map<String, Value>>,
}

/// An error answer as one value: its v2 code, and the v1 code and status when the condition
/// was first answered by the v1 REST.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    code: Code,
    v1: Option<(u16, V1Code)>,
    message: String,
    details: Option<Map<String, Value>>,
}

/// A rendered answer: status and body.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub status: u16,
    pub body: ErrorBody,
}

/// The `details` keys v2 forbids: retry timing travels in `Retry-After` only.
pub const V2_FORBIDDEN_DETAILS: [&str; 3] = ["retryAfter", "retryAfterMs", "retryAfterSeconds"];

impl Problem {
    /// A condition v2 names first (negotiation, tenant-bound ids, ...). Under v1 it renders
    /// as itself with the registered status: no v1 code existed for it.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Problem {
            code,
            v1: None,
            message: non_empty(message.into(), code),
            details: None,
        }
    }

    /// A condition the v1 REST answers with `status` and `code`.
    pub fn from_v1(status: u16, code: V1Code, message: impl Into<String>) -> Self {
        Problem {
            code: code.v2(),
            v1: Some((status, code)),
            message: non_empty(message.into(), code.v2()),
            details: None,
        }
    }

    /// Sets one `details` member.
    pub fn with_detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details
            .get_or_insert_with(Map::new)
            .insert(key.to_owned(), value.into());
        self
    }

    pub fn code(&self) -> Code {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn details(&self) -> Option<&Map<String, Value>> {
        self.details.as_ref()
    }

    /// The answer under `major`.
    pub fn render(&self, major: Major) -> Rendered {
        match major {
            Major::V1 => self.render_v1(),
            Major::V2 => self.render_v2(),
        }
    }

    fn render_v1(&self) -> Rendered {
        let (status, error) = match self.v1 {
            Some((status, code)) => (status, code.as_str()),
            None => (self.code.http_status(), self.code.as_str()),
        };
        Rendered {
            status,
            body: ErrorBody {
                error: error.to_owned(),
                message: self.message.clone(),
                details: self.details.clone(),
            },
        }
    }

    fn render_v2(&self) -> Rendered {
        let details = self.details.as_ref().and_then(|d| {
            let kept: Map<String, Value> = d
                .iter()
                .filter(|(k, _)| !V2_FORBIDDEN_DETAILS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            (!kept.is_empty()).then_some(kept)
        });
        Rendered {
            status: self.code.http_status(),
            body: ErrorBody {
                error: self.code.as_str().to_owned(),
                message: self.message.clone(),
                details,
            },
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Problem {}

/// The body's `message` must not be empty; a caller that has nothing to say gets the code.
fn non_empty(message: String, code: Code) -> String {
    if message.trim().is_empty() {
        code.as_str().to_owned()
    } else {
        message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashSet;

    /// `errors.md` §Retry timing: "The retriable rows are `residency_unavailable`,
    /// `rate_limited`, `internal_error`, `pack_registry_unreachable`, `runner_unavailable`."
    const RETRIABLE_ROWS: [&str; 5] = [
        "residency_unavailable",
        "rate_limited",
        "internal_error",
        "pack_registry_unreachable",
        "runner_unavailable",
    ];

    #[test]
    fn the_table_is_one_row_per_code_in_the_registry_grammar() {
        let mut seen = HashSet::new();
        for c in Code::ALL {
            assert!(seen.insert(c.as_str()), "{c} twice");
            assert_eq!(Code::from_wire(c.as_str()), Some(*c));
            // Registered codes are snake_case; vendor codes carry a dot and are not ours.
            assert!(
                c.as_str()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{c}"
            );
            assert!((400..600).contains(&c.http_status()), "{c}");
        }
        assert_eq!(Code::from_wire("conflict"), None);
    }

    #[test]
    fn retriability_matches_the_registry_prose() {
        for c in Code::ALL {
            assert_eq!(
                c.retriable(),
                RETRIABLE_ROWS.contains(&c.as_str()),
                "{c}: errors.md lists the retriable rows"
            );
        }
    }

    #[test]
    fn statuses_match_the_registry_rows() {
        // A sample of rows across statuses, as `spec/v2/errors.json` registers them.
        for (code, status) in [
            ("protocol_version_mismatch", 400),
            ("protocol_version_unsupported", 406),
            ("id_tenant_mismatch", 403),
            ("idempotency_key_invalid", 400),
            ("capability_required", 422),
            ("capability_not_provided", 422),
            ("residency_unavailable", 422),
            ("client_version_unsupported", 426),
            ("event_type_unmapped", 500),
            ("interrupt_token_invalid", 401),
            ("interrupt_expired", 410),
            ("runner_unavailable", 503),
        ] {
            assert_eq!(
                Code::from_wire(code).unwrap().http_status(),
                status,
                "{code}"
            );
        }
    }

    #[test]
    fn every_v1_code_maps_and_registered_v1_codes_map_to_themselves() {
        let mut seen = HashSet::new();
        for c in V1Code::ALL {
            assert!(seen.insert(c.as_str()), "{} twice", c.as_str());
            assert_eq!(V1Code::from_wire(c.as_str()), Some(*c));
            if let Some(same) = Code::from_wire(c.as_str()) {
                assert_eq!(c.v2(), same, "{} is registered in v2 as itself", c.as_str());
            }
        }
        // Every code this host emits under v2 is reachable from a v1 code or is one v2 adds.
        let v2_only = [
            Code::ProtocolVersionMismatch,
            Code::ProtocolVersionUnsupported,
            Code::IdempotencyKeyInvalid,
            Code::InterruptTokenInvalid,
            Code::IdTenantMismatch,
            Code::VersionConflict,
            Code::RunnerUnavailable,
            Code::ClientVersionUnsupported,
            Code::EventTypeUnmapped,
        ];
        for c in Code::ALL {
            assert!(
                V1Code::ALL.iter().any(|v| v.v2() == *c) || v2_only.contains(c),
                "{c} is neither mapped from v1 nor a v2 condition"
            );
        }
    }

    #[test]
    fn the_codes_protocol_already_names_for_the_v1_rest_are_mapped() {
        use crate::run::pause::PauseConflict;
        use crate::run::status::RunPhase;
        let named = [
            crate::run::IDEMPOTENCY_KEY_MISMATCH,
            crate::run::IDEMPOTENCY_IN_FLIGHT,
            crate::run::correlation::CORRELATION_MISMATCH,
            crate::run::stream_modes::UNSUPPORTED_STREAM_MODE,
            PauseConflict::Ended(RunPhase::Completed).code(),
            PauseConflict::AlreadyPaused.code(),
        ];
        for code in named {
            assert!(
                V1Code::from_wire(code).is_some(),
                "{code} has no v2 mapping"
            );
        }
    }

    #[test]
    fn one_problem_renders_under_either_major() {
        // The v1 REST answers a lost Kubernetes write with 409 `conflict`.
        let p = Problem::from_v1(409, V1Code::Conflict, "the run changed meanwhile; retry");
        let v1 = p.render(Major::V1);
        assert_eq!((v1.status, v1.body.error.as_str()), (409, "conflict"));
        let v2 = p.render(Major::V2);
        assert_eq!(
            (v2.status, v2.body.error.as_str()),
            (409, "version_conflict")
        );
        assert_eq!(v1.body.message, v2.body.message);

        // v1 answered `capability_required` with 404 (webhooks off); v2 has one status.
        let p = Problem::from_v1(404, V1Code::CapabilityRequired, "webhooks are off");
        assert_eq!(p.render(Major::V1).status, 404);
        assert_eq!(p.render(Major::V2).status, 422);

        // A v2-born condition renders as itself under v1.
        let p = Problem::new(Code::ProtocolVersionMismatch, "send OpenWOP-Version: 1");
        let r = p.render(Major::V1);
        assert_eq!(
            (r.status, r.body.error.as_str()),
            (400, "protocol_version_mismatch")
        );
    }

    #[test]
    fn retry_timing_leaves_the_v2_body() {
        let p = Problem::from_v1(429, V1Code::RateLimited, "slow down")
            .with_detail("retryAfter", 3)
            .with_detail("retryAfterMs", 3000)
            .with_detail("scope", "tenant");
        let v1 = p.render(Major::V1).body.details.unwrap();
        assert_eq!(v1.len(), 3);
        let v2 = p.render(Major::V2).body.details.unwrap();
        assert_eq!(Value::Object(v2), json!({"scope": "tenant"}));

        // Nothing left: no `details` at all.
        let p = Problem::from_v1(409, V1Code::IdempotencyInFlight, "busy")
            .with_detail("retryAfterSeconds", 1);
        assert_eq!(p.render(Major::V2).body.details, None);
    }

    #[test]
    fn the_body_is_closed_and_its_message_never_empty() {
        let body = Problem::new(Code::NotFound, "  ").render(Major::V2).body;
        assert_eq!(body.message, "not_found");
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({"error": "not_found", "message": "not_found"})
        );
        assert!(
            serde_json::from_value::<ErrorBody>(
                json!({"error": "x", "message": "y", "retryAfter": 1})
            )
            .is_err()
        );
        assert!(
            serde_json::from_value::<ErrorBody>(
                json!({"error": "x", "message": "y", "details": []})
            )
            .is_err(),
            "details is an object"
        );
    }
}
