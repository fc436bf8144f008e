//! Per-queue record quotas and dead-letter caps: one queue whose jobs all
//! fail no longer fills the segment for the others, a queue's quota refuses its pushes past
//! it, `stats` shows both, and a daemon killed around the cap loses no job.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;
use xtcq_testkit::*;

/// Fails every queued job of `q` (one attempt allowed: each becomes a dead letter).
fn fail_all(d: &Daemon, q: &str) -> usize {
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let t = c.attach_thief(q).expect("attach");
    let mut n = 0;
    while let Some(j) = t.steal().expect("steal") {
        j.fail("boom").expect("fail");
        n += 1;
    }
    n
}

/// Steals and acks every queued job of `q`; their payloads as numbers, sorted.
fn drain(d: &Daemon, q: &str) -> Vec<usize> {
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let t = c.attach_thief(q).expect("attach");
    let mut got = Vec::new();
    while let Some(j) = t.steal().expect("steal") {
        let p = String::from_utf8(j.payload().expect("payload")).expect("utf-8");
        got.push(p.parse().expect("number"));
        j.ack().expect("ack");
    }
    got.sort_unstable();
    got
}

fn queue_stats(d: &Daemon, q: &str) -> serde_json::Value {
    let s = d.stats();
    let all = s["queues"].as_array().cloned().unwrap_or_default();
    all.into_iter().find(|x| x["info"]["name"] == q).unwrap_or_else(|| panic!("no queue {q} in {s}"))
}

fn lines(from: usize, to: usize) -> String {
    (from..to).map(|i| format!("{i}\n")).collect()
}

/// The scenario: 4,000 of the segment's 4,096 records dead in "farm" left 96 for
/// every other queue, and a push of 3,000 to another queue failed "queue full". With the
/// default cap (a quarter of the records, 1,024) the oldest dead letters are dropped.
#[test]
fn a_failing_queue_leaves_room_for_the_others() {
    let d = Daemon::start();
    ok(&d.run(&["create", "farm", "--max-attempts", "1"]));
    ok(&d.run(&["create", "other"]));
    ok(&d.run_in(&["push", "farm"], lines(0, 4000).as_bytes()));
    assert_eq!(fail_all(&d, "farm"), 4000);
    wait_until(Duration::from_secs(30), "the dead-letter cap applied", || {
        queue_stats(&d, "farm")["quota"]["dead_dropped"] == 4000 - 1024
    });
    ok(&d.run_in(&["push", "other", "--timeout", "5s"], lines(0, 3000).as_bytes()));

    let farm = queue_stats(&d, "farm");
    assert_eq!(farm["records"]["dead"], 1024, "{farm}");
    assert_eq!(farm["quota"]["max_dead"], 1024, "{farm}");
    // The newest dead letters are the ones kept.
    let dead: serde_json::Value =
        serde_json::from_str(&ok(&d.run(&["dead", "farm", "--json"]))).expect("json");
    let mut kept: Vec<u64> = dead
        .as_array()
        .expect("array")
        .iter()
        .map(|x| x["payload"].as_str().expect("payload").parse().expect("number"))
        .collect();
    kept.sort_unstable();
    assert_eq!(kept, (4000 - 1024..4000).collect::<Vec<u64>>());
    assert!(d.log_text().contains("dead-letter cap reached"), "{}", d.log_text());
    let text = ok(&d.run(&["stats", "farm"]));
    assert!(text.contains("dead letters capped at 1024, 2976 dropped by the cap"), "{text}");
    ok(&d.run(&["check"]));
}

/// `--max-records` refuses a queue's pushes once its jobs hold its quota; other queues go on.
#[test]
fn a_record_quota_stops_its_queue_only() {
    let d = Daemon::start();
    ok(&d.run(&["create", "small", "--max-records", "100", "--max-dead", "0"]));
    ok(&d.run(&["create", "half", "--max-records", "50%"]));
    ok(&d.run(&["create", "other"]));
    ok(&d.run_in(&["push", "small"], lines(0, 100).as_bytes()));
    wait_until(Duration::from_secs(30), "the records counted", || {
        queue_stats(&d, "small")["quota"]["records_used"] == 100
    });
    let o = d.run(&["push", "small", "--timeout", "300ms", "one-more"]);
    assert_ne!(code(&o), 0, "a push past the quota went through");
    assert!(stderr(&o).contains("record quota"), "{}", stderr(&o));
    ok(&d.run_in(&["push", "other"], lines(0, 1000).as_bytes()));

    let small = queue_stats(&d, "small");
    assert_eq!(
        (small["quota"]["max_records"].clone(), small["quota"]["max_dead"].clone()),
        (100.into(), 0.into())
    );
    assert_eq!(small["records"]["queued"], 100);
    assert_eq!(queue_stats(&d, "half")["quota"]["max_records"], 2048);
    assert!(ok(&d.run(&["stats", "small"])).contains("100 of 100 records in use"));

    // Drained, it takes pushes again.
    assert_eq!(drain(&d, "small"), (0..100).collect::<Vec<_>>());
    ok(&d.run(&["push", "small", "--timeout", "30s", "again"]));
    let bad = d.run(&["create", "huge", "--max-records", "5000"]);
    assert!(stderr(&bad).contains("more than the segment's 4096 records"), "{}", stderr(&bad));
}

/// The quota holds at every push and frees at every ack, with no scan in between (the scan
/// is an hour apart): a burst stops at the quota exactly, an ack or a purge of a dead letter
/// gives its record back at once, a push refused leaves the count where it was, and a quota
/// set on a queue that already holds jobs counts them.
#[test]
fn a_record_quota_is_kept_by_pushes_and_acks_without_a_scan() {
    let d = Daemon::start_with(&["--lease-scan-interval", "1h"]);
    ok(&d.run(&["create", "q", "--max-records", "10", "--max-attempts", "1"]));
    let o = d.run_in(&["push", "q", "--timeout", "100ms"], lines(0, 50).as_bytes());
    assert_ne!(code(&o), 0, "50 jobs went into a quota of 10");
    assert!(stderr(&o).contains("record quota"), "{}", stderr(&o));
    assert_eq!(queue_stats(&d, "q")["records"]["queued"], 10);
    for _ in 0..3 {
        let o = d.run(&["push", "q", "--timeout", "50ms", "refused"]);
        assert_ne!(code(&o), 0, "a push past the quota went through");
    }
    // One acked: exactly one more fits, at once.
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let t = c.attach_thief("q").expect("attach");
    t.steal().expect("steal").expect("a job").ack().expect("ack");
    ok(&d.run(&["push", "q", "--timeout", "50ms", "after-ack"]));
    assert_ne!(code(&d.run(&["push", "q", "--timeout", "50ms", "refused"])), 0);
    // Two dead letters purged: two more fit.
    for _ in 0..2 {
        t.steal().expect("steal").expect("a job").fail("boom").expect("fail");
    }
    assert_ne!(code(&d.run(&["push", "q", "--timeout", "50ms", "refused"])), 0);
    ok(&d.run(&["dead", "q", "--purge"]));
    ok(&d.run_in(&["push", "q", "--timeout", "50ms"], b"p1\np2\n"));
    assert_ne!(code(&d.run(&["push", "q", "--timeout", "50ms", "refused"])), 0);
    drop(t);

    // A quota set on a queue that holds 20 jobs: no push fits under 20, one more above it.
    ok(&d.run(&["create", "late"]));
    ok(&d.run_in(&["push", "late"], lines(0, 20).as_bytes()));
    ok(&d.run(&["limits", "late", "--max-records", "20"]));
    assert_ne!(code(&d.run(&["push", "late", "--timeout", "50ms", "refused"])), 0);
    ok(&d.run(&["limits", "late", "--max-records", "21"]));
    ok(&d.run(&["push", "late", "--timeout", "50ms", "fits"]));
    assert_ne!(code(&d.run(&["push", "late", "--timeout", "50ms", "refused"])), 0);
}

/// A consumer killed between its ack (the record free) and giving the record back to the
/// quota's count leaves the count one too high: the daemon's next walk that nothing raced
/// puts it right, and exactly the quota fits again.
#[test]
fn a_consumer_killed_mid_ack_leaves_the_quota_right_after_a_walk() {
    let d = Daemon::start_with(&["--lease-scan-interval", "50ms"]);
    ok(&d.run(&["create", "q", "--max-records", "5"]));
    ok(&d.run_in(&["push", "q"], lines(0, 5).as_bytes()));
    let o = run_bounded(
        d.xtcq().args(["steal", "q"]).env("XTCQ_FAILPOINTS", "ack.before_block_release=kill@1"),
        None,
    );
    assert_eq!(o.status.signal(), Some(libc::SIGKILL), "not killed mid-ack: {}", stderr(&o));
    wait_until(Duration::from_secs(30), "the count put right", || {
        code(&d.run(&["push", "q", "--timeout", "50ms", "fits"])) == 0
    });
    assert_ne!(code(&d.run(&["push", "q", "--timeout", "50ms", "refused"])), 0);
    assert_eq!(queue_stats(&d, "q")["records"]["queued"], 5);
}

/// `kill -9` of the daemon while a queue is past its dead-letter cap: the next daemon drops
/// only dead letters, every queued job is still there once, and the segment checks clean.
#[test]
fn a_daemon_killed_around_the_cap_loses_no_queued_job() {
    let mut d = Daemon::start();
    ok(&d.run(&["create", "farm", "--max-attempts", "1", "--max-dead", "100"]));
    for round in 0..3 {
        ok(&d.run_in(&["push", "farm"], lines(round * 1000, round * 1000 + 500).as_bytes()));
        fail_all(&d, "farm");
        ok(&d.run_in(&["push", "farm"], lines(round * 1000 + 500, round * 1000 + 600).as_bytes()));
        // Killed at once: before, during or after the scan that drops the excess.
        d.kill();
        d.restart_with(SMALL_SEGMENT, |_| {});
        wait_until(Duration::from_secs(30), "the cap applied", || {
            queue_stats(&d, "farm")["records"]["dead"] == 100
        });
        assert_eq!(queue_stats(&d, "farm")["records"]["queued"], 100);
        assert_eq!(drain(&d, "farm"), (round * 1000 + 500..round * 1000 + 600).collect::<Vec<_>>());
        ok(&d.run(&["check"]));
    }
}
