//! RFC 0033 envelope-completion contract: stop-reason normalisation, the retry router
//! state machine, corrective fragments, and RFC 0030 reasoning directives.

pub mod fragment;
pub mod journal;
pub mod mock;
pub mod reasoning;
pub mod response;
pub mod router;

pub use journal::{Journal, ResponseRecord};
pub use mock::{MockCursor, MockExhausted, MockProgram, MockResponse};
pub use reasoning::ReasoningPosture;
pub use response::{NormalizedResponse, StopReason, Usage};
pub use router::{
    Accepted, Action, CallPurpose, CallRequest, Failure, FailureCode, FragmentKind, NlToFormat,
    PayloadValidator, Router, RouterConfig, RouterConfigError, RouterError, Step, SystemFragment,
};
