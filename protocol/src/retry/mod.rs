//! RFC 0033 envelope-completion contract: stop-reason normalisation, the retry router
//! state machine, corrective fragments, and RFC 0030 reasoning directives.

pub mod mock;
pub mod response;

pub use mock::{MockCursor, MockExhausted, MockProgram, MockResponse};
pub use response::{NormalizedResponse, StopReason, TruncationStopReason, Usage};
