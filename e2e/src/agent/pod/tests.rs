use super::*;

#[test]
fn a_finished_pod_ignores_restart_and_refresh_deadlines() {
    let now = Instant::now();
    let past = now - Duration::from_secs(5);
    let wake = next_wake(
        now,
        true,
        [past].into_iter(),
        [Some(past), Some(past)],
        [None, None],
    );
    assert!(
        wake >= now + Duration::from_secs(3600),
        "a finished pod must sleep"
    );
}

#[test]
fn a_finished_pod_still_wakes_for_termination_and_status_retries() {
    let now = Instant::now();
    let soon = now + Duration::from_secs(2);
    let later = now + Duration::from_secs(9);
    let past = now - Duration::from_secs(5);
    assert_eq!(
        next_wake(
            now,
            true,
            [past].into_iter(),
            [Some(past), None],
            [Some(later), Some(soon)]
        ),
        soon
    );
}

#[test]
fn a_live_pod_wakes_at_its_earliest_deadline() {
    let now = Instant::now();
    let at = |s| now + Duration::from_secs(s);
    let wake = next_wake(
        now,
        false,
        [at(30), at(4)].into_iter(),
        [Some(at(8)), Some(at(10))],
        [None, Some(at(6))],
    );
    assert_eq!(wake, at(4));
    let wake = next_wake(
        now,
        false,
        std::iter::empty(),
        [Some(at(8)), None],
        [None, None],
    );
    assert_eq!(wake, at(8));
}
