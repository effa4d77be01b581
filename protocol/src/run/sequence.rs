//! Applying a run's events strictly in `sequence` order.
//!
//! A run's events carry sequences `0, 1, 2, …` without gaps (the worker's event log stamps
//! them). Whoever folds them into a status (the operator's event consumer) may receive them
//! out of order, twice, or with holes — a NAK'd batch is redelivered after later events. The
//! fold is only correct when every event is applied exactly once in sequence order, so a
//! batch is split into what can be applied now (the contiguous run starting right after the
//! last applied sequence), what was already applied, and the hole that must be read back
//! from the stream before anything after it may be applied.

use std::collections::BTreeMap;
use std::ops::Range;

/// The sequence that must be applied next after `last` (`None`: nothing applied yet).
pub fn next_sequence(last: Option<u64>) -> u64 {
    last.map_or(0, |l| l.saturating_add(1))
}

/// A batch of one run's events, split against the last applied sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Ordered<T> {
    /// Events to apply now, in sequence order: `next_sequence(last)..` without a hole, each
    /// sequence once.
    pub ready: Vec<T>,
    /// Events at or below the last applied sequence, or second copies: already applied.
    pub duplicates: usize,
    /// Sequences missing before the first event that could not be applied: `None` when the
    /// batch holds nothing beyond `ready`.
    pub missing: Option<Range<u64>>,
    /// Events held back behind `missing` (applied once the hole is filled).
    pub held: usize,
}

/// Splits `events` (any order, duplicates allowed) of one run against `last`.
pub fn order<T>(last: Option<u64>, events: impl IntoIterator<Item = (u64, T)>) -> Ordered<T> {
    let start = next_sequence(last);
    let mut by_seq: BTreeMap<u64, T> = BTreeMap::new();
    let mut duplicates = 0;
    for (seq, e) in events {
        if seq < start || by_seq.contains_key(&seq) {
            duplicates += 1;
            continue;
        }
        by_seq.insert(seq, e);
    }
    let mut ready = Vec::new();
    let mut expected = start;
    let mut rest = by_seq.into_iter().peekable();
    while let Some((seq, _)) = rest.peek() {
        if *seq != expected {
            break;
        }
        if let Some((_, e)) = rest.next() {
            ready.push(e);
        }
        expected = expected.saturating_add(1);
    }
    let held: Vec<u64> = rest.map(|(s, _)| s).collect();
    Ordered {
        ready,
        duplicates,
        missing: held.first().map(|first| expected..*first),
        held: held.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seqs(o: &Ordered<u64>) -> Vec<u64> {
        o.ready.clone()
    }

    #[test]
    fn a_redelivered_batch_after_later_events_is_a_hole_not_a_skip() {
        // 0..=9 were NAK'd; 10..=14 arrive first.
        let o = order(None, (10..15).map(|s| (s, s)));
        assert!(o.ready.is_empty());
        assert_eq!(o.missing, Some(0..10));
        assert_eq!(o.held, 5);
        // Once the hole is read back, everything applies in order.
        let o = order(None, (10..15).chain(0..10).map(|s| (s, s)));
        assert_eq!(seqs(&o), (0..15).collect::<Vec<_>>());
        assert_eq!((o.missing, o.held, o.duplicates), (None, 0, 0));
    }

    #[test]
    fn replays_and_copies_are_duplicates() {
        let o = order(Some(4), [3, 4, 5, 5, 6].map(|s| (s, s)));
        assert_eq!(seqs(&o), vec![5, 6]);
        assert_eq!(o.duplicates, 3);
        assert_eq!(o.missing, None);
        let o = order(Some(4), [5, 7, 8].map(|s| (s, s)));
        assert_eq!(seqs(&o), vec![5]);
        assert_eq!((o.missing, o.held), (Some(6..7), 2));
        assert_eq!(next_sequence(None), 0);
        assert_eq!(next_sequence(Some(u64::MAX)), u64::MAX);
    }

    proptest! {
        /// Whatever the arrival order, duplication and loss, `ready` continues exactly at
        /// `last + 1`, is gapless and ascending, and anything not applied is either a
        /// duplicate or behind a reported hole — nothing is ever skipped.
        #[test]
        fn ready_is_the_gapless_continuation(
            last in proptest::option::of(0u64..20),
            arrivals in proptest::collection::vec(0u64..40, 0..80),
        ) {
            let o = order(last, arrivals.iter().map(|&s| (s, s)));
            let start = next_sequence(last);
            for (i, s) in o.ready.iter().enumerate() {
                prop_assert_eq!(*s, start + i as u64);
            }
            let end = start + o.ready.len() as u64;
            let fresh: std::collections::BTreeSet<u64> =
                arrivals.iter().copied().filter(|&s| s >= start).collect();
            prop_assert_eq!(o.duplicates, arrivals.len() - fresh.len());
            prop_assert_eq!(o.ready.len() + o.held, fresh.len());
            match &o.missing {
                None => prop_assert!(fresh.iter().all(|&s| s < end)),
                Some(hole) => {
                    prop_assert_eq!(hole.start, end);
                    prop_assert!(hole.end > hole.start);
                    prop_assert!(fresh.contains(&hole.end));
                    prop_assert!(!fresh.contains(&end));
                    prop_assert!((hole.start..hole.end).all(|s| !fresh.contains(&s)));
                }
            }
            // Filling the hole from the full log makes everything ready.
            let full = order(last, arrivals.iter().copied().chain(start..end + 50).map(|s| (s, s)));
            prop_assert!(full.missing.is_none());
        }
    }
}
