//! OpenWOP v2 beside v1, from one engine (issue #41): the pure rules the REST API and the
//! worker need to answer a run in either major.

pub mod codemap;
pub mod errors;
pub mod idempotency;
pub mod ids;
pub mod negotiate;
pub mod version;
