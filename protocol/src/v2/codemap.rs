//! The v1 ↔ v2 event-type map (`spec/v2/event-codemap.json`, the only authority for it:
//! `persistence.md` §The codemap is data) and the era rule that says which spelling a run's
//! log holds and which one each reader gets.
//!
//! * The map is [`ROWS`], one table. It is a bijection, checked when this crate compiles
//!   (`persistence.md` requires a host to verify it rather than assume it: if two v1 names
//!   ever folded onto one v2 name, the v1 wire of an era-3 log would stop being well
//!   defined). Every event type this crate emits is checked to have a row, the same way.
//! * `eventLogSchemaVersion` is the era key, fixed when the run is created: `2` (or absent:
//!   this store has been written by a v1 host) is a log in v1 spellings, `3` a log in v2
//!   spellings. The writer appends in the run's own vocabulary for its whole life, so an
//!   era-2 run still open after the upgrade keeps v1 spellings ([`Era::stored_type`]).
//! * Readers translate at the storage boundary: a v2 reader of an era-2 log maps v1 → v2, a
//!   v1 reader of an era-3 log maps back through the same row. A type with no row is read
//!   unchanged when its first segment is a registered vendor org, and is otherwise
//!   `500 event_type_unmapped` ([`Era::read_type`]).

use std::collections::HashMap;
use std::sync::LazyLock;

use super::errors::{Code, Problem};
use super::version::Major;
use crate::events::EventType;

/// `(v1, v2)`, in the order of `spec/v2/event-codemap.json` (version "2.0", updated
/// 2026-09-03: 117 rows, 36 renamed).
pub const ROWS: &[(&str, &str)] = &[
    ("run.started", "run.started"),
    ("run.completed", "run.completed"),
    ("run.failed", "run.failed"),
    ("run.cancelled", "run.cancelled"),
    ("run.resuming", "run.resume-started"),
    ("run.paused", "run.paused"),
    ("run.resumed", "run.resumed"),
    ("run.restored-from-snapshot", "run.restored-from-snapshot"),
    ("run.dead_lettered", "run.dead-lettered"),
    ("node.started", "node.started"),
    ("node.completed", "node.completed"),
    ("node.failed", "node.failed"),
    ("node.suspended", "node.suspended"),
    ("node.suspend-failed", "node.suspend-failed"),
    ("node.resumed", "node.resumed"),
    ("node.retried", "node.retried"),
    ("node.skipped", "node.skipped"),
    ("node.cancelled", "node.cancelled"),
    ("approval.requested", "approval.requested"),
    ("approval.received", "approval.received"),
    ("approval.granted", "approval.granted"),
    ("approval.rejected", "approval.rejected"),
    ("approval.overridden", "approval.overridden"),
    ("clarification.requested", "clarification.requested"),
    ("clarification.resolved", "clarification.resolved"),
    ("interrupt.requested", "interrupt.requested"),
    ("interrupt.resolved", "interrupt.resolved"),
    ("channel.written", "channel.written"),
    ("channel.presence", "channel.presence"),
    ("context.summarized", "context.summarized"),
    ("artifact.created", "artifact.created"),
    ("output.chunk", "output.chunk"),
    ("variable.changed", "variable.changed"),
    ("log.appended", "log.appended"),
    ("version.pinned", "version.pinned"),
    ("workflow.restored", "workflow.restored"),
    ("workflow.loopback-limit", "workflow.loopback-limit"),
    ("workflow.stalled", "workflow.stalled"),
    ("cap.breached", "cap.breached"),
    ("lease.acquired", "lease.acquired"),
    ("lease.renewed", "lease.renewed"),
    ("lease.lost", "lease.lost"),
    ("lease.handed-off", "lease.handed-off"),
    ("replay.diverged", "replay.diverged"),
    ("replay.divergedAtRefusal", "replay.diverged-at-refusal"),
    ("agent.reasoned", "agent.reasoned"),
    ("agent.reasoning.delta", "agent.reasoning-delta"),
    ("provider.usage", "provider.usage"),
    ("prompt.composed", "prompt.composed"),
    ("agent.promptResolved", "agent.prompt-resolved"),
    (
        "model.capability.substituted",
        "model.capability-substituted",
    ),
    (
        "model.capability.insufficient",
        "model.capability-insufficient",
    ),
    ("envelope.retry.attempted", "envelope.retry-attempted"),
    ("envelope.retry.exhausted", "envelope.retry-exhausted"),
    ("envelope.refusal", "envelope.refusal"),
    ("envelope.truncated", "envelope.truncated"),
    (
        "envelope.nlToFormat.engaged",
        "envelope.nl-to-format-engaged",
    ),
    ("envelope.recovery.applied", "envelope.recovery-applied"),
    ("agent.toolCalled", "agent.tool-called"),
    ("agent.toolReturned", "agent.tool-returned"),
    ("agent.handoff", "agent.handoff"),
    ("agent.decided", "agent.decided"),
    ("agent.verified", "agent.verified"),
    ("agent.invocation.started", "agent.invocation-started"),
    ("agent.invocation.completed", "agent.invocation-completed"),
    ("eval.started", "eval.started"),
    ("eval.scored", "eval.scored"),
    ("eval.completed", "eval.completed"),
    ("deployment.promoted", "deployment.promoted"),
    ("deployment.rolled-back", "deployment.rolled-back"),
    ("deployment.canary.adjusted", "deployment.canary-adjusted"),
    ("deployment.state.changed", "deployment.state-changed"),
    ("roster.run.initiated", "roster.run-initiated"),
    ("tool.session.opened", "tool.session-opened"),
    ("tool.session.closed", "tool.session-closed"),
    ("egress.decided", "egress.decided"),
    (
        "trigger.subscription.state.changed",
        "trigger.subscription-state-changed",
    ),
    ("trigger.delivery.attempted", "trigger.delivery-attempted"),
    ("budget.reserved", "budget.reserved"),
    ("budget.consumed", "budget.consumed"),
    ("budget.threshold.crossed", "budget.threshold-crossed"),
    ("budget.exhausted", "budget.exhausted"),
    ("runOrchestrator.decided", "orchestrator.decided"),
    ("node.dispatched", "node.dispatched"),
    ("core.dispatch.fanOut", "dispatch.fanned-out"),
    ("core.dispatch.join", "dispatch.joined"),
    ("conversation.opened", "conversation.opened"),
    ("conversation.exchanged", "conversation.exchanged"),
    ("conversation.closed", "conversation.closed"),
    ("memory.compacted", "memory.compacted"),
    ("memory.written", "memory.written"),
    ("agent.memory.consolidated", "agent.memory-consolidated"),
    ("commitment.fired", "commitment.fired"),
    ("workspace.updated", "workspace.updated"),
    ("core.workflowChain.event", "workflow-chain.event"),
    (
        "core.workflowChain.confidence-escalated",
        "workflow-chain.confidence-escalated",
    ),
    ("connector.authorized", "connector.authorized"),
    ("connector.auth_expired", "connector.auth-expired"),
    ("authorization.decided", "authorization.decided"),
    ("proposal.created", "proposal.created"),
    ("proposal.activated", "proposal.activated"),
    ("goal.evaluated", "goal.evaluated"),
    ("goal.closed", "goal.closed"),
    ("import.applied", "import.applied"),
    ("voice.speech_start", "voice.speech-start"),
    ("voice.transcript", "voice.transcript"),
    ("voice.endpoint_candidate", "voice.endpoint-candidate"),
    ("voice.turn_commit", "voice.turn-commit"),
    ("voice.synthesis_chunk", "voice.synthesis-chunk"),
    ("voice.barge_in", "voice.barge-in"),
    ("voice.cancelled", "voice.cancelled"),
    ("compensation.requested", "compensation.requested"),
    ("compensation.started", "compensation.started"),
    ("compensation.completed", "compensation.completed"),
    ("compensation.failed", "compensation.failed"),
    ("compensation.paused", "compensation.paused"),
    (
        "compensation.manual_intervention_required",
        "compensation.manual-intervention-required",
    ),
];

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Whether no two rows share a v1 name and no two share a v2 name, so both directions are
/// functions and each inverts the other.
pub const fn is_bijection(rows: &[(&str, &str)]) -> bool {
    let mut i = 0;
    while i < rows.len() {
        let mut j = i + 1;
        while j < rows.len() {
            if same(rows[i].0, rows[j].0) || same(rows[i].1, rows[j].1) {
                return false;
            }
            j += 1;
        }
        i += 1;
    }
    true
}

/// Whether every name in `v1_names` has a row.
pub const fn maps_all(rows: &[(&str, &str)], v1_names: &[&str]) -> bool {
    let mut i = 0;
    while i < v1_names.len() {
        let mut found = false;
        let mut j = 0;
        while j < rows.len() {
            if same(rows[j].0, v1_names[i]) {
                found = true;
            }
            j += 1;
        }
        if !found {
            return false;
        }
        i += 1;
    }
    true
}

// The build fails if the table stops being a bijection, or if an event type this crate
// emits (`schema::EVENT_TYPES`, one schema per type) has no row.
const _: () = assert!(is_bijection(ROWS), "event codemap: two rows share a name");
const _: () = assert!(
    maps_all(ROWS, crate::schema::EVENT_TYPES),
    "event codemap: an emitted event type has no row"
);

static V1_TO_V2: LazyLock<HashMap<&'static str, &'static str>> =
    LazyLock::new(|| ROWS.iter().copied().collect());
static V2_TO_V1: LazyLock<HashMap<&'static str, &'static str>> =
    LazyLock::new(|| ROWS.iter().map(|(v1, v2)| (*v2, *v1)).collect());

/// The v2 spelling of a v1 event type.
pub fn to_v2(v1: &str) -> Option<&'static str> {
    V1_TO_V2.get(v1).copied()
}

/// The v1 spelling of a v2 event type.
pub fn to_v1(v2: &str) -> Option<&'static str> {
    V2_TO_V1.get(v2).copied()
}

/// `eventLogSchemaVersion` of a log in v1 spellings.
pub const ERA_V1_LOG: u32 = 2;
/// `eventLogSchemaVersion` of a log in v2 spellings: what a host serving v2 stamps on every
/// run it creates, and the one value its discovery advertises.
pub const ERA_V2_LOG: u32 = 3;

/// A run's era: the vocabulary of its stored log, fixed when the run is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// `eventLogSchemaVersion` 2, below 2, or absent.
    V1Log,
    /// `eventLogSchemaVersion` 3.
    V2Log,
}

/// A log this host cannot read under the asked major.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("this run's log is stamped eventLogSchemaVersion {0}, an era this host does not know")]
    UnknownEra(u64),
    #[error(
        "this run's log holds event type '{stored}', which has no {reader} spelling: the run cannot be read under major {reader}"
    )]
    Unmapped { stored: String, reader: Major },
}

impl ReadError {
    /// `500 event_type_unmapped`: the run is not readable under that contract.
    pub fn problem(&self) -> Problem {
        let p = Problem::new(Code::EventTypeUnmapped, self.to_string());
        match self {
            ReadError::Unmapped { stored, .. } => p.with_detail("type", stored.as_str()),
            ReadError::UnknownEra(_) => p,
        }
    }
}

impl Era {
    /// The era of a run from its stored `eventLogSchemaVersion`. Absent reads as the v1 era
    /// (this store has been written by a v1 host) and is never backfilled; below 2 is the
    /// v1 era too (v1's own snapshot-fallback rule is unchanged).
    pub fn of_stamp(stamp: Option<u64>) -> Result<Era, ReadError> {
        match stamp {
            None => Ok(Era::V1Log),
            Some(n) if n <= u64::from(ERA_V1_LOG) => Ok(Era::V1Log),
            Some(n) if n == u64::from(ERA_V2_LOG) => Ok(Era::V2Log),
            Some(n) => Err(ReadError::UnknownEra(n)),
        }
    }

    /// The era a new run is created in: v2 spellings as soon as the host serves v2 (on every
    /// creation path at once: a run left unstamped would read as era 2, silently).
    pub fn for_new_runs(serves_v2: bool) -> Era {
        if serves_v2 { Era::V2Log } else { Era::V1Log }
    }

    /// The stamp a run of this era carries on the wire (a v1-era run's is synthesized: the
    /// store has none).
    pub fn stamp(self) -> u32 {
        match self {
            Era::V1Log => ERA_V1_LOG,
            Era::V2Log => ERA_V2_LOG,
        }
    }

    /// The major whose spellings the log holds.
    pub fn vocabulary(self) -> Major {
        match self {
            Era::V1Log => Major::V1,
            Era::V2Log => Major::V2,
        }
    }

    /// The writer rule: the name an event is appended under in a log of this era.
    pub fn stored_type(self, event: EventType) -> &'static str {
        match self {
            Era::V1Log => event.as_str(),
            Era::V2Log => to_v2(event.as_str())
                .expect("every emitted event type has a row (checked at build)"),
        }
    }

    /// The reader rule: the type a reader of `reader`'s major sees for a stored `stored`.
    /// `vendor_orgs` are the orgs registered in `spec/v2/declaration.json`: a type with no
    /// row under one of them passes unchanged; any other type with no row fails the read.
    pub fn read_type<'a>(
        self,
        stored: &'a str,
        reader: Major,
        vendor_orgs: &[&str],
    ) -> Result<&'a str, ReadError> {
        if self.vocabulary() == reader {
            return Ok(stored);
        }
        let mapped = match reader {
            Major::V2 => to_v2(stored),
            Major::V1 => to_v1(stored),
        };
        match mapped {
            Some(name) => Ok(name),
            None if stored
                .split_once('.')
                .is_some_and(|(org, _)| vendor_orgs.contains(&org)) =>
            {
                Ok(stored)
            }
            None => Err(ReadError::Unmapped {
                stored: stored.to_owned(),
                reader,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The v2 naming rule (`event-codemap.json` `grammar`): two kebab-case segments.
    fn v2_grammar(name: &str) -> bool {
        let segment = |s: &str| {
            s.split('-').enumerate().all(|(i, part)| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                    && (i > 0 || part.as_bytes()[0].is_ascii_lowercase())
            })
        };
        matches!(name.split_once('.'), Some((a, b)) if segment(a) && segment(b))
    }

    #[test]
    fn the_table_is_the_published_one_and_a_bijection() {
        // The file's own counts.
        assert_eq!(ROWS.len(), 117);
        assert_eq!(ROWS.iter().filter(|(a, b)| a != b).count(), 36);
        assert!(is_bijection(ROWS));
        for (v1, v2) in ROWS {
            assert!(v2_grammar(v2), "{v2} breaks the v2 naming rule");
            assert!(
                !v2.starts_with("core.") && !v2.starts_with("openwop."),
                "{v2}"
            );
            assert_eq!(to_v2(v1), Some(*v2));
            assert_eq!(to_v1(v2), Some(*v1));
        }
        // A name is never a v1 spelling of one row and the v2 spelling of another, so a
        // name read from a log never depends on which era the reader assumed.
        for (v1, v2) in ROWS {
            assert!(to_v1(v1).is_none_or(|back| back == *v1), "{v1}");
            assert!(to_v2(v2).is_none_or(|fwd| fwd == *v2), "{v2}");
        }
    }

    #[test]
    fn the_bijection_check_catches_a_fold_and_a_split() {
        assert!(is_bijection(&[("a.x", "a.y"), ("b.x", "b.y")]));
        // Two v1 names folded onto one v2 name: the v1 wire of an era-3 log is undefined.
        assert!(!is_bijection(&[("a.x", "a.y"), ("b.x", "a.y")]));
        // One v1 name mapped twice.
        assert!(!is_bijection(&[("a.x", "a.y"), ("a.x", "b.y")]));
        assert!(maps_all(&[("a.x", "a.y")], &["a.x"]));
        assert!(!maps_all(&[("a.x", "a.y")], &["a.x", "b.x"]));
    }

    #[test]
    fn every_event_type_this_crate_emits_maps_both_ways() {
        let emitted: HashSet<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
        let schemas: HashSet<&str> = crate::schema::EVENT_TYPES.iter().copied().collect();
        assert_eq!(
            emitted, schemas,
            "events::EventType and schema::EVENT_TYPES differ"
        );
        for t in EventType::ALL {
            let v2 = to_v2(t.as_str()).unwrap_or_else(|| panic!("{t} has no v2 name"));
            assert_eq!(to_v1(v2), Some(t.as_str()));
            assert_eq!(Era::V1Log.stored_type(*t), t.as_str());
            assert_eq!(Era::V2Log.stored_type(*t), v2);
        }
        // The renamed ones among them, spelled out.
        for (t, v2) in [
            (EventType::AgentReasoningDelta, "agent.reasoning-delta"),
            (EventType::AgentToolCalled, "agent.tool-called"),
            (EventType::AgentToolReturned, "agent.tool-returned"),
            (
                EventType::EnvelopeRetryAttempted,
                "envelope.retry-attempted",
            ),
            (
                EventType::EnvelopeRetryExhausted,
                "envelope.retry-exhausted",
            ),
            (
                EventType::EnvelopeNlToFormatEngaged,
                "envelope.nl-to-format-engaged",
            ),
            (
                EventType::EnvelopeRecoveryApplied,
                "envelope.recovery-applied",
            ),
        ] {
            assert_eq!(Era::V2Log.stored_type(t), v2);
        }
    }

    #[test]
    fn the_era_key() {
        assert_eq!(Era::of_stamp(None), Ok(Era::V1Log));
        assert_eq!(Era::of_stamp(Some(0)), Ok(Era::V1Log));
        assert_eq!(Era::of_stamp(Some(1)), Ok(Era::V1Log));
        assert_eq!(Era::of_stamp(Some(2)), Ok(Era::V1Log));
        assert_eq!(Era::of_stamp(Some(3)), Ok(Era::V2Log));
        let e = Era::of_stamp(Some(4)).unwrap_err();
        assert_eq!(e.problem().code(), Code::EventTypeUnmapped);
        assert_eq!(Era::V1Log.stamp(), 2);
        assert_eq!(Era::V2Log.stamp(), 3);
        assert_eq!(Era::for_new_runs(true), Era::V2Log);
        assert_eq!(Era::for_new_runs(false), Era::V1Log);
    }

    /// Who reads what: each era's own major reads its log as stored; the other major reads
    /// it through the map; vendor types pass; anything else fails the read.
    #[test]
    fn the_reader_table() {
        let orgs = ["acme"];
        let cases: [(Era, &str, Major, Result<&str, ()>); 12] = [
            (
                Era::V1Log,
                "agent.toolCalled",
                Major::V1,
                Ok("agent.toolCalled"),
            ),
            (
                Era::V1Log,
                "agent.toolCalled",
                Major::V2,
                Ok("agent.tool-called"),
            ),
            (Era::V1Log, "run.started", Major::V2, Ok("run.started")),
            (
                Era::V1Log,
                "acme.widget.built",
                Major::V2,
                Ok("acme.widget.built"),
            ),
            (Era::V1Log, "mystery.thing", Major::V2, Err(())),
            // An already-mapped name in an era-2 log is a writer bug, not a v1 name.
            (Era::V1Log, "agent.tool-called", Major::V2, Err(())),
            (
                Era::V2Log,
                "agent.tool-called",
                Major::V2,
                Ok("agent.tool-called"),
            ),
            (
                Era::V2Log,
                "agent.tool-called",
                Major::V1,
                Ok("agent.toolCalled"),
            ),
            (
                Era::V2Log,
                "dispatch.fanned-out",
                Major::V1,
                Ok("core.dispatch.fanOut"),
            ),
            (
                Era::V2Log,
                "acme.widget-built",
                Major::V1,
                Ok("acme.widget-built"),
            ),
            (Era::V2Log, "agent.toolCalled", Major::V1, Err(())),
            (Era::V2Log, "globex.thing", Major::V1, Err(())),
        ];
        for (era, stored, reader, want) in cases {
            let got = era.read_type(stored, reader, &orgs).map_err(|_| ());
            assert_eq!(got, want, "{era:?} {stored} read as v{reader}");
        }
        let e = Era::V1Log
            .read_type("mystery.thing", Major::V2, &[])
            .unwrap_err();
        let r = e.problem().render(Major::V2);
        assert_eq!(
            (r.status, r.body.error.as_str()),
            (500, "event_type_unmapped")
        );
        assert_eq!(r.body.details.unwrap()["type"], "mystery.thing");
    }

    /// An era-2 run still open after the upgrade keeps appending v1 spellings, and both
    /// majors read every event of it: the whole log, round trip.
    #[test]
    fn an_open_era_2_run_reads_under_both_majors() {
        for era in [Era::V1Log, Era::V2Log] {
            for t in EventType::ALL {
                let stored = era.stored_type(*t);
                assert_eq!(era.read_type(stored, Major::V1, &[]), Ok(t.as_str()));
                assert_eq!(
                    era.read_type(stored, Major::V2, &[]),
                    Ok(to_v2(t.as_str()).unwrap())
                );
            }
        }
    }
}
