//! RFC 0033 envelope-completion contract: stop-reason normalisation, the retry router
//! state machine, corrective fragments, and RFC 0030 reasoning directives.

pub mod fragment;
pub mod journal;
pub mod mock;
pub mod reasoning;
pub mod response;
pub mod router;

pub use journal::{Journal, ResponseRecord, calls_in_earlier_attempts, dispatch_budgets, step_key};
pub use mock::{
    MAX_DELAY_MS, MockCursor, MockError, MockExhausted, MockProgram, MockResponse, ProviderMock,
};
pub use reasoning::ReasoningPosture;
pub use response::{
    NormalizedResponse, StopReason, Usage, normalize_anthropic, normalize_any, normalize_gemini,
    normalize_openai_chat,
};
pub use router::{
    Accepted, Action, CallPurpose, CallRequest, Failure, FailureCode, FragmentKind, NlToFormat,
    PayloadValidator, Router, RouterConfig, RouterConfigError, RouterError, Step, SystemFragment,
};
