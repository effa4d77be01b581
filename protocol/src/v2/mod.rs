//! OpenWOP v2 beside v1, from one engine (issue #41): the pure rules the REST API and the
//! worker need to answer a run in either major. Nothing here does I/O or knows HTTP types;
//! callers pass header bytes, paths and ids in, and get decisions and answers out.
//!
//! Layers, bottom up (arrows point down):
//!
//! * [`version`]: the `<major>.<minor>` grammar and [`version::Major`].
//! * [`errors`]: the v2 error codes this host emits with their registered status, the closed
//!   body `{error, message, details?}`, and the v1 → v2 code map, so one
//!   [`errors::Problem`] renders under either major. The REST builds a `Problem` where it
//!   builds an error today and renders it in the request's negotiated major.
//! * [`negotiate`]: which major a request is served in, from its path, its
//!   `OpenWOP-Version` and the advertised `protocolVersions`/`preferredVersion`; the
//!   response's `OpenWOP-Version` and `Vary`; `OpenWOP-Client-Version`. The REST runs it
//!   once per protocol request, before routing to a representation, and answers a refusal
//!   itself.
//! * [`ids`]: tenant-bound ids `<tenant>/<opaque>`: the one-segment path projection, the
//!   decoding of path parameters (`~2F`, `%2F`), the bare v1 form bound to the caller's
//!   tenant through the overlap, `403 id_tenant_mismatch`, and the opaque-id generator (the
//!   caller draws the randomness). The REST parses every tenant-bound path parameter with
//!   it and emits every link through it; v2 bodies carry the bound form.
//! * [`idempotency`]: the v2 `Idempotency-Key` grammar (`400 idempotency_key_invalid`).
//!   The REST's idempotency layer checks a v2 request's key with it.
//! * [`codemap`]: the v1 ↔ v2 event-type map (one table, a bijection checked at build) and
//!   the era rule of `eventLogSchemaVersion`. The worker appends in the run's era
//!   ([`codemap::Era::stored_type`]); every reader (stream, poll, fork, debug bundle)
//!   translates at the storage boundary ([`codemap::Era::read_type`]).

pub mod codemap;
pub mod errors;
pub mod idempotency;
pub mod ids;
pub mod negotiate;
pub mod version;
