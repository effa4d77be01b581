//! The worker's exit codes: what the worker reports and what the operator decides on.

/// The run is terminal and its terminal event is durable in the stream.
pub const TERMINAL: i32 = 0;
/// The worker crashed (e.g. an event could not be made durable); the operator retries.
pub const CRASHED: i32 = 1;
/// The snapshot or the worker's configuration is unusable: another attempt cannot succeed.
pub const BAD_INPUT: i32 = 2;
/// Suspended waiting for input or approval; the termination message says which.
pub const SUSPENDED: i32 = 3;
/// Stopped by SIGTERM at a safe point (128 + SIGTERM); a later worker replays.
pub const STOPPED: i32 = 143;

/// What an exit code means, for messages.
pub fn describe(code: i32) -> &'static str {
    match code {
        TERMINAL => "the run ended",
        CRASHED => "the worker crashed",
        BAD_INPUT => "the worker refused its input",
        SUSPENDED => "the run is waiting for an answer",
        STOPPED => "the worker was stopped at a safe point",
        137 => "the worker was killed (SIGKILL, e.g. out of memory)",
        _ => "the worker exited unexpectedly",
    }
}
