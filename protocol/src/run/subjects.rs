//! Run identity on NATS: one subject per run, keyed by the runId (never by the Run's name,
//! which a new Run may reuse), and the one JetStream stream that holds every run's log.
//!
//! * run events: `openwop.events.<namespace>.<runId>`;
//! * reasoning transparency: `openwop.reasoning.<namespace>.<runId>`;
//! * the operator's messages to a run's live worker (a pause): `openwop.control.<namespace>.<runId>`
//!   (plain NATS request/reply, outside the stream: a message only matters to a worker running
//!   now, and the operator repeats it until the worker answers or the run's log says paused).
//!
//! A namespace is a DNS label and a runId a Kubernetes uid: neither contains a dot, so a
//! subject has exactly four tokens.

use std::time::Duration;

/// First tokens of run event subjects.
pub const EVENTS_PREFIX: &str = "openwop.events";
/// First tokens of reasoning subjects.
pub const REASONING_PREFIX: &str = "openwop.reasoning";
/// First tokens of control subjects (not in the stream).
pub const CONTROL_PREFIX: &str = "openwop.control";
/// Subjects of the stream (both families: one dedup window and one retention per run).
pub const STREAM_SUBJECTS: [&str; 2] = ["openwop.events.>", "openwop.reasoning.>"];
/// Default stream name (operator config `worker.eventsStream`).
pub const DEFAULT_STREAM: &str = "OPENWOP_EVENTS";
/// Dedup window: a re-executed step within it is dropped by the server itself; beyond it the
/// worker's replay (which skips every recorded eventId) still prevents duplicates.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(15 * 60);

/// `openwop.events.<namespace>.<runId>`.
pub fn events_subject(namespace: &str, run_id: &str) -> String {
    format!("{EVENTS_PREFIX}.{namespace}.{run_id}")
}

/// `openwop.reasoning.<namespace>.<runId>`.
pub fn reasoning_subject(namespace: &str, run_id: &str) -> String {
    format!("{REASONING_PREFIX}.{namespace}.{run_id}")
}

/// `openwop.control.<namespace>.<runId>`.
pub fn control_subject(namespace: &str, run_id: &str) -> String {
    format!("{CONTROL_PREFIX}.{namespace}.{run_id}")
}

/// Both subjects of one run (what a deleted Run's purge removes).
pub fn run_subjects(namespace: &str, run_id: &str) -> [String; 2] {
    [
        events_subject(namespace, run_id),
        reasoning_subject(namespace, run_id),
    ]
}

/// Filter of the run events of every namespace (`None`) or of one.
pub fn events_filter(namespace: Option<&str>) -> String {
    match namespace {
        None => format!("{EVENTS_PREFIX}.>"),
        Some(ns) => format!("{EVENTS_PREFIX}.{ns}.>"),
    }
}

/// Where a run event came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSubject {
    pub namespace: String,
    pub run_id: String,
}

/// A subject that is not `openwop.events.<namespace>.<runId>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("subject {0:?} is not {EVENTS_PREFIX}.<namespace>.<runId>")]
pub struct SubjectError(pub String);

/// Parses a run event subject.
pub fn parse_events_subject(subject: &str) -> Result<RunSubject, SubjectError> {
    let bad = || SubjectError(subject.to_owned());
    let rest = subject
        .strip_prefix(EVENTS_PREFIX)
        .and_then(|r| r.strip_prefix('.'))
        .ok_or_else(bad)?;
    match rest.split_once('.') {
        Some((ns, id)) if !ns.is_empty() && !id.is_empty() && !id.contains('.') => Ok(RunSubject {
            namespace: ns.to_owned(),
            run_id: id.to_owned(),
        }),
        _ => Err(bad()),
    }
}

/// The stream's settings, as both the operator and the worker create or update it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    pub name: String,
    /// How long a run's events are kept; `None` keeps them until purged (a deleted Run's
    /// events are purged by the operator either way).
    pub max_age: Option<Duration>,
    pub duplicate_window: Duration,
}

impl StreamSpec {
    pub fn new(name: impl Into<String>, max_age: Option<Duration>) -> Self {
        StreamSpec {
            name: name.into(),
            max_age: max_age.filter(|d| !d.is_zero()),
            // JetStream refuses a dedup window longer than the retention.
            duplicate_window: max_age
                .filter(|d| !d.is_zero())
                .map_or(DUPLICATE_WINDOW, |a| a.min(DUPLICATE_WINDOW)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_keyed_by_run_id_and_parse_back() {
        let s = events_subject("team-a", "0b6f-11aa");
        assert_eq!(s, "openwop.events.team-a.0b6f-11aa");
        assert_eq!(
            parse_events_subject(&s).unwrap(),
            RunSubject {
                namespace: "team-a".into(),
                run_id: "0b6f-11aa".into()
            }
        );
        assert_eq!(
            reasoning_subject("a", "u"),
            "openwop.reasoning.a.u".to_owned()
        );
        assert_eq!(events_filter(Some("team-a")), "openwop.events.team-a.>");
        assert_eq!(events_filter(None), "openwop.events.>");
        for bad in [
            "openwop.reasoning.a.b",
            "openwop.events.a",
            "openwop.events..b",
            "openwop.events.a.b.c",
            "openwop.eventsx.a.b",
        ] {
            let e = parse_events_subject(bad).unwrap_err();
            assert!(e.to_string().contains("<runId>"), "{bad}: {e}");
        }
    }

    #[test]
    fn stream_spec_bounds_the_dedup_window_by_the_retention() {
        let s = StreamSpec::new("S", Some(Duration::from_secs(60)));
        assert_eq!(s.duplicate_window, Duration::from_secs(60));
        let s = StreamSpec::new("S", Some(Duration::ZERO));
        assert_eq!((s.max_age, s.duplicate_window), (None, DUPLICATE_WINDOW));
        let s = StreamSpec::new("S", Some(Duration::from_secs(7 * 86400)));
        assert_eq!(s.duplicate_window, DUPLICATE_WINDOW);
    }
}
