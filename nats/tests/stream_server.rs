//! `ensure_stream` and `purge_run` against a real nats-server (feature `testing`).

use std::time::Duration;

use async_nats::jetstream;
use openwop_nats::stream::{ensure_stream, purge_run, read_subject, runs_in_stream};
use openwop_nats::testing::NatsServer;
use openwop_protocol::run::subjects::{
    RunSubject, StreamSpec, events_filter, events_subject, reasoning_subject,
};

#[tokio::test]
async fn the_stream_is_created_then_its_retention_updated_and_one_run_purged() {
    let nats = NatsServer::start();
    let js = jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let week = Duration::from_secs(7 * 86_400);
    let mut s = ensure_stream(&js, &StreamSpec::new("EV", Some(week)))
        .await
        .unwrap();
    assert_eq!(s.info().await.unwrap().config.max_age, week);

    // A second caller with another retention updates it; the same spec again is a no-op.
    let hour = Duration::from_secs(3600);
    let mut s = ensure_stream(&js, &StreamSpec::new("EV", Some(hour)))
        .await
        .unwrap();
    let c = s.info().await.unwrap().config.clone();
    assert_eq!(
        (c.max_age, c.duplicate_window),
        (hour, Duration::from_secs(900))
    );
    ensure_stream(&js, &StreamSpec::new("EV", Some(hour)))
        .await
        .unwrap();
    let mut s2 = ensure_stream(&js, &StreamSpec::new("EV", None))
        .await
        .unwrap();
    assert_eq!(s2.info().await.unwrap().config.max_age, Duration::ZERO);

    for subject in [
        events_subject("ns", "uid-old"),
        reasoning_subject("ns", "uid-old"),
        events_subject("ns", "uid-new"),
    ] {
        js.publish(subject, "{}".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let run = |ns: &str, id: &str| RunSubject {
        namespace: ns.into(),
        run_id: id.into(),
    };
    js.publish(events_subject("other", "uid-x"), "{}".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let mut listed = runs_in_stream(&js, "EV", &events_filter(None))
        .await
        .unwrap();
    listed.sort_by(|a, b| (&a.namespace, &a.run_id).cmp(&(&b.namespace, &b.run_id)));
    assert_eq!(
        listed,
        [
            run("ns", "uid-new"),
            run("ns", "uid-old"),
            run("other", "uid-x")
        ]
    );
    let in_ns = runs_in_stream(&js, "EV", &events_filter(Some("other")))
        .await
        .unwrap();
    assert_eq!(in_ns, [run("other", "uid-x")]);
    assert_eq!(purge_run(&js, "EV", "other", "uid-x").await.unwrap(), 1);
    assert_eq!(purge_run(&js, "EV", "ns", "uid-old").await.unwrap(), 2);
    assert_eq!(
        runs_in_stream(&js, "EV", &events_filter(None))
            .await
            .unwrap(),
        [run("ns", "uid-new")],
        "a purged run is not listed"
    );
    assert_eq!(
        s.info().await.unwrap().state.messages,
        1,
        "the other run is kept"
    );
    let e = purge_run(&js, "MISSING", "ns", "u").await.unwrap_err();
    assert!(
        e.to_string()
            .starts_with("JetStream stream MISSING: cannot read it"),
        "{e}"
    );
}

/// The run-log reader behind `kubectl openwop events` and the REST event endpoints: only the
/// run's own subject, in order, with pending counts that tell a non-following reader where
/// the log ends, from the start or from a stream sequence; a follower sees later messages.
#[tokio::test]
async fn the_run_log_reader_reads_one_run_in_order_and_follows() {
    use futures::StreamExt;
    use openwop_nats::reader::{From, RunLog};
    let nats = NatsServer::start();
    let js = jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    ensure_stream(&js, &StreamSpec::new("EV", None))
        .await
        .unwrap();
    let mine = events_subject("ns", "uid-1");
    for (subject, body) in [
        (mine.clone(), "a"),
        (events_subject("ns", "uid-2"), "other"),
        (mine.clone(), "b"),
        (mine.clone(), "c"),
    ] {
        js.publish(subject, body.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let log = RunLog::open(&js, "EV", vec![mine.clone()], From::Start)
        .await
        .unwrap();
    assert_eq!(log.pending_at_start, 3);
    let mut msgs = Box::pin(log.messages());
    let mut got = Vec::new();
    loop {
        let m = msgs.next().await.unwrap().unwrap();
        got.push((
            String::from_utf8(m.payload.to_vec()).unwrap(),
            m.stream_sequence,
            m.pending,
        ));
        if m.pending == 0 {
            break;
        }
    }
    assert_eq!(
        got,
        vec![("a".into(), 1, 2), ("b".into(), 3, 1), ("c".into(), 4, 0)]
    );
    // Following: a message published later arrives on the same reader.
    js.publish(mine.clone(), "d".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let m = tokio::time::timeout(Duration::from_secs(5), msgs.next())
        .await
        .expect("a follower sees new messages")
        .unwrap()
        .unwrap();
    assert_eq!((&m.payload[..], m.stream_sequence), (&b"d"[..], 5));
    // From a stream sequence: earlier messages are skipped.
    let log = RunLog::open(&js, "EV", vec![mine], From::StreamSequence(4))
        .await
        .unwrap();
    assert_eq!(log.pending_at_start, 2);
    // An unknown stream is named in the error.
    let e = RunLog::open(&js, "NOPE", vec!["x".into()], From::Start)
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("NOPE"), "{e}");
}

#[tokio::test]
async fn append_after_never_lands_behind_a_concurrent_append_and_is_deduplicated() {
    use openwop_nats::stream::{Appended, append_after, last_on_subject};
    let nats = NatsServer::start();
    let js = jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    ensure_stream(&js, &StreamSpec::new("EV", None))
        .await
        .unwrap();
    let subject = events_subject("ns", "uid-1");
    assert_eq!(last_on_subject(&js, "EV", &subject).await.unwrap(), None);
    // Another run's message does not count for this subject's expected sequence.
    js.publish(events_subject("ns", "other"), "x".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let a = append_after(&js, &subject, "m0", 0, "first".into()).await;
    assert_eq!(a.unwrap(), Appended::Stored);
    let (seq, body) = last_on_subject(&js, "EV", &subject).await.unwrap().unwrap();
    assert_eq!(&body[..], b"first");
    // A worker appends meanwhile: an append expecting the old last sequence writes nothing.
    js.publish(subject.clone(), "worker".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let a = append_after(&js, &subject, "m1", seq, "late".into()).await;
    assert_eq!(a.unwrap(), Appended::Moved);
    let (seq2, body) = last_on_subject(&js, "EV", &subject).await.unwrap().unwrap();
    assert_eq!(&body[..], b"worker");
    assert_eq!(
        append_after(&js, &subject, "m1", seq2, "end".into())
            .await
            .unwrap(),
        Appended::Stored
    );
    let (seq3, _) = last_on_subject(&js, "EV", &subject).await.unwrap().unwrap();
    // The same message id again (a retried reconcile) is dropped by the dedup window.
    let again = append_after(&js, &subject, "m1", seq3, "end".into()).await;
    assert_eq!(again.unwrap(), Appended::Stored);
    assert_eq!(
        last_on_subject(&js, "EV", &subject)
            .await
            .unwrap()
            .unwrap()
            .0,
        seq3
    );
}

/// A run's first start reads its (empty) log: answered without a consumer on the server. A
/// subject with messages is read whole, in order.
#[tokio::test]
async fn an_empty_subject_is_read_without_a_consumer() {
    let nats = NatsServer::start();
    let js = jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let mut s = ensure_stream(&js, &StreamSpec::new("EV", None))
        .await
        .unwrap();
    let full = events_subject("ns", "uid-1");
    for body in ["a", "b"] {
        js.publish(full.clone(), body.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let wait = Duration::from_secs(5);
    let empty = read_subject(&s, &events_subject("ns", "uid-2"), wait)
        .await
        .unwrap();
    assert!(empty.is_empty());
    assert_eq!(s.info().await.unwrap().state.consumer_count, 0);
    let read = read_subject(&s, &full, wait).await.unwrap();
    let bodies: Vec<&[u8]> = read.iter().map(|m| &m.payload[..]).collect();
    assert_eq!(bodies, [&b"a"[..], &b"b"[..]]);
    assert_eq!(read[1].stream_sequence, 2);
}
