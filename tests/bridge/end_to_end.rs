//! xtcq-bridge end to end: two (or three) xtcqd "hosts" on this machine, a real nats-server
//! with JetStream, `xtcq-bridge out` on host A and `xtcq-bridge in` on B, real `xtcq work`
//! workers. No timed assertions: every wait is a bounded wait for a condition.

use xtcq_testkit::bridge::*;
use xtcq_testkit::*;

use std::path::Path;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(45);

fn in_args<'a>(consumer: &'a str, ack_wait: &'a str) -> Vec<&'a str> {
    vec!["--consumer", consumer, "--ack-wait", ack_wait]
}

fn append(file: &Path) -> String {
    format!("echo \"$XTCQ_PAYLOAD\" >> {}", file.display())
}

#[test]
fn round_trip_runs_every_job_once() {
    let Some(nats) = Nats::start("round_trip_runs_every_job_once") else { return };
    let (a, b) = (Host::start("A"), Host::start("B"));
    a.ok(&["create", "q"], b"");
    b.ok(&["create", "q", "--max-attempts", "3", "--lease", "2s"], b"");
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &[]);
    let mut inb = Bridge::start(&b, &nats, "in", "q", "JOBS", &in_args("B", "10s"), &[]);
    // XTCQ_BRIDGE_JOBS=20000 for the run (about a minute: one `sh` per job).
    let n: usize = std::env::var("XTCQ_BRIDGE_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(600);
    let (names, text) = payloads(n);
    a.ok(&["push", "q"], &text);
    let runs = b.dir().join("runs");
    let _w = b.worker("q", "60s", &append(&runs));
    let _w2 = b.worker("q", "60s", &append(&runs));
    wait_until(LONG * 10, "every job acked upstream by in", || inb.stat("acked") == n as u64);
    let counts = line_counts(&runs);
    for name in &names {
        assert_eq!(counts.get(name), Some(&1), "{name} runs exactly once on B");
    }
    assert_eq!(counts.len(), n, "no other job ran");
    assert_eq!((out.stat("published"), out.stat("duplicates"), out.stat("acked")), (n as u64, 0, n as u64));
    assert_eq!(nats.messages("JOBS"), 0, "the work-queue stream is empty once every job is acked");
    assert_eq!(nats.consumer("JOBS", "B"), (0, 0, 0), "nothing pending, nothing redelivered");
    assert_eq!((a.live("q"), b.live("q")), (0, 0));
    a.check();
    b.check();
    out.stop();
    inb.stop();
}

#[test]
fn a_crash_between_publish_and_local_ack_is_dropped_as_a_duplicate() {
    let Some(nats) = Nats::start("a_crash_between_publish_and_local_ack_is_dropped_as_a_duplicate") else {
        return;
    };
    let a = Host::start("A");
    a.ok(&["create", "q", "--max-attempts", "10"], b"");
    let n = 200;
    let (names, text) = payloads(n);
    a.ok(&["push", "q"], &text);
    // Aborts (no cleanup, as kill -9) after its first round's publish acks, before any local ack.
    let mut crashing =
        Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &[("XTCQ_BRIDGE_TEST_CRASH_AFTER_PUBLISH", "1")]);
    let status = crashing.proc.wait(LONG);
    assert!(!status.success(), "the crash hook aborts: {}", crashing.proc.log_text());
    let stored_by_crashed = nats.messages("JOBS");
    assert!(stored_by_crashed >= 1, "the crashed bridge published before dying");
    // Its jobs were never acked locally: the daemon re-queues them, and a new bridge publishes
    // them again under the same ids.
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &[]);
    wait_until(LONG, "every job published and acked on A", || {
        a.live("q") == 0 && out.stat("acked") >= n as u64 - stored_by_crashed
    });
    out.stop();
    assert!(
        out.stat("duplicates") >= stored_by_crashed,
        "the re-published copies were recognised: {}",
        out.proc.log_text()
    );
    assert_eq!(out.stat("published") + stored_by_crashed, n as u64, "the rest were new");
    assert_eq!(nats.messages("JOBS"), n as u64, "the stream holds each job once");
    let mut stored: Vec<String> =
        nats.read_all("JOBS").into_iter().map(|(p, _)| String::from_utf8(p).expect("utf8")).collect();
    stored.sort();
    let mut want = names.clone();
    want.sort();
    assert_eq!(stored, want, "each job stored exactly once");
    a.check();
}

#[test]
fn a_job_failing_every_attempt_is_one_dead_letter_and_terminated() {
    let Some(nats) = Nats::start("a_job_failing_every_attempt_is_one_dead_letter_and_terminated") else {
        return;
    };
    let (a, b) = (Host::start("A"), Host::start("B"));
    a.ok(&["create", "q"], b"");
    b.ok(&["create", "q", "--max-attempts", "2", "--lease", "2s"], b"");
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &[]);
    let mut inb = Bridge::start(&b, &nats, "in", "q", "JOBS", &in_args("B", "10s"), &[]);
    a.ok(&["push", "q"], b"doomed\n");
    let tries = b.dir().join("tries");
    let _w = b.worker("q", "60s", &format!("{}; exit 1", append(&tries)));
    wait_until(LONG, "terminated upstream", || inb.stat("terminated") == 1);
    let dead = b.dead("q");
    assert_eq!(dead.len(), 1, "one dead letter on B");
    assert_eq!((dead[0].payload.as_slice(), dead[0].attempts), (&b"doomed"[..], 2));
    assert_eq!(line_counts(&tries).get("doomed"), Some(&2), "run max-attempts times, no more");
    assert_eq!(nats.messages("JOBS"), 0, "terminated: gone from the work-queue stream");
    assert_eq!(nats.consumer("JOBS", "B"), (0, 0, 0), "not pending, not redelivered");
    let copies = nats.read_all("JOBS_DEAD");
    assert_eq!(copies.len(), 1, "one copy on the dead-letter subject");
    assert_eq!(copies[0].0, b"doomed");
    assert!(copies[0].1.contains("exit 1"), "the copy says why: {}", copies[0].1);
    assert_eq!(inb.stat("acked"), 0, "never acked");
    b.check();
    out.stop();
    inb.stop();
}

/// nats-server#4786: after a redelivery, a late `+ACK` from the first holder is accepted while
/// a second holder runs the message. Reproduced with two `in` bridges on one consumer (hosts B
/// and C): B's bridge is stopped (SIGSTOP) past AckWait while B's worker runs the job, the
/// server redelivers to C, B's bridge resumes and acks once B's run has succeeded, and the
/// server drops the message while C still runs it. Harmless through the bridge: it acks only
/// a job that succeeded locally, so the job ran once in full before the stream let it go; C's
/// run is an extra run (at least once), and C's later ack is a no-op.
#[test]
fn a_late_ack_after_redelivery_is_harmless() {
    let Some(nats) = Nats::start("a_late_ack_after_redelivery_is_harmless") else { return };
    let (a, b, c) = (Host::start("A"), Host::start("B"), Host::start("C"));
    a.ok(&["create", "q"], b"");
    for h in [&b, &c] {
        h.ok(&["create", "q", "--lease", "1s"], b"");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let f = |n: &str| dir.path().join(n);
    let gated = |who: &str| {
        format!(
            "touch {s}; while [ ! -e {g} ]; do sleep 0.05; done; echo {who} >> {r}",
            s = f(&format!("{who}-started")).display(),
            g = f(&format!("{who}-gate")).display(),
            r = f("runs").display()
        )
    };
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &[]);
    let mut in_b = Bridge::start(&b, &nats, "in", "q", "JOBS", &in_args("W", "2s"), &[]);
    let _wb = b.worker("q", "60s", &gated("b"));
    a.ok(&["push", "q"], b"slow\n");
    wait_until(LONG, "B runs the job", || f("b-started").exists());
    in_b.proc.signal(libc::SIGSTOP);
    let mut in_c = Bridge::start(&c, &nats, "in", "q", "JOBS", &in_args("W", "2s"), &[]);
    let _wc = c.worker("q", "60s", &gated("c"));
    wait_until(LONG, "the server redelivers to C after AckWait", || f("c-started").exists());
    in_b.proc.signal(libc::SIGCONT);
    std::fs::write(f("b-gate"), b"").expect("gate");
    wait_until(LONG, "B's bridge acks, late", || in_b.stat("acked") == 1);
    assert_eq!(in_b.stat("late_acks"), 1, "the ack came after B's hold lapsed: {}", in_b.proc.log_text());
    // The upstream behaviour: the late ack is accepted and the message dropped while C runs it.
    wait_until(LONG, "the server drops the message", || nats.messages("JOBS") == 0);
    let runs = line_counts(&f("runs"));
    assert_eq!(runs.get("b"), Some(&1), "the job had run to success on B before the stream let it go");
    assert_eq!(runs.get("c"), None, "C's run is still going");
    std::fs::write(f("c-gate"), b"").expect("gate");
    wait_until(LONG, "C's bridge settles its copy", || in_c.stat("acked") == 1 && in_c.stat("held") == 0);
    assert_eq!(line_counts(&f("runs")).get("c"), Some(&1), "an extra run, complete");
    assert!(b.dead("q").is_empty() && c.dead("q").is_empty(), "no dead letter anywhere");
    assert_eq!(nats.consumer("JOBS", "W").1, 0, "nothing left pending");
    assert_eq!(nats.messages("JOBS"), 0);
    for h in [&b, &c] {
        assert_eq!(h.live("q"), 0);
        h.check();
    }
    out.stop();
    in_b.stop();
    in_c.stop();
}

#[test]
fn sigterm_of_out_publishes_or_keeps_every_job() {
    let Some(nats) = Nats::start("sigterm_of_out_publishes_or_keeps_every_job") else { return };
    let a = Host::start("A");
    a.ok(&["create", "q"], b"");
    let n = 2000u64;
    let (_, text) = payloads(n as usize);
    a.ok(&["push", "q"], &text);
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &["--batch", "8"], &[]);
    wait_until(LONG, "some jobs published", || out.stat("acked") >= 50);
    out.stop();
    let (published, acked) = (out.stat("published"), out.stat("acked"));
    assert_eq!(published, acked, "every job acked locally was published, and every published one acked");
    assert_eq!(nats.messages("JOBS"), published, "the stream has what was published, once");
    assert_eq!(a.live("q") + published, n, "nothing lost: the rest is still queued on A");
    a.check();
}

#[test]
fn sigterm_of_in_settles_what_it_holds_before_exiting() {
    let Some(nats) = Nats::start("sigterm_of_in_settles_what_it_holds_before_exiting") else { return };
    let (a, b) = (Host::start("A"), Host::start("B"));
    a.ok(&["create", "q"], b"");
    b.ok(&["create", "q", "--lease", "2s"], b"");
    let n = 100u64;
    let (_, text) = payloads(n as usize);
    a.ok(&["push", "q"], &text);
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &[]);
    wait_until(LONG, "all published", || nats.messages("JOBS") == n);
    let mut inb = Bridge::start(
        &b,
        &nats,
        "in",
        "q",
        "JOBS",
        &["--consumer", "B", "--ack-wait", "10s", "--max-inflight", "40"],
        &[],
    );
    wait_until(LONG, "in holds 40 jobs, no worker yet", || inb.stat("held") == 40);
    inb.proc.signal(libc::SIGTERM);
    // Draining: nothing is acked while the jobs wait for a worker.
    wait_until(LONG, "in says it is stopping", || inb.proc.log_text().contains("stopping"));
    assert_eq!(inb.stat("acked"), 0, "no ack before the local jobs ran");
    let runs = b.dir().join("runs");
    let _w = b.worker("q", "60s", &append(&runs));
    let status = inb.proc.wait(LONG);
    assert!(status.success(), "clean exit: {}", inb.proc.log_text());
    assert_eq!((inb.stat("fetched"), inb.stat("acked"), inb.stat("held")), (40, 40, 0));
    let counts = line_counts(&runs);
    assert_eq!((counts.len(), counts.values().all(|&c| c == 1)), (40, true), "the 40 held ran once each");
    assert_eq!(nats.messages("JOBS"), n - 40, "the rest stays in the stream");
    assert_eq!(nats.consumer("JOBS", "B").1, 0, "nothing left pending on the consumer");
    b.check();
    out.stop();
}

/// `kill -9` of `in` while it holds jobs queued on B: the server redelivers them after AckWait
/// to the restarted bridge, which finds them in its `--state` file and adopts them instead of
/// pushing second copies (two local copies could run at the same time on two workers).
#[test]
fn a_killed_in_bridge_restarted_does_not_push_its_jobs_twice() {
    let Some(nats) = Nats::start("a_killed_in_bridge_restarted_does_not_push_its_jobs_twice") else { return };
    let (a, b) = (Host::start("A"), Host::start("B"));
    a.ok(&["create", "q"], b"");
    b.ok(&["create", "q", "--lease", "1s"], b"");
    let n = 30u64;
    let (_, text) = payloads(n as usize);
    a.ok(&["push", "q"], &text);
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &[]);
    wait_until(LONG, "all published", || nats.messages("JOBS") == n);
    let state = b.dir().join("bridge.state");
    let state = state.to_str().expect("utf8 path");
    let args = ["--consumer", "B", "--ack-wait", "2s", "--state", state];
    let mut first = Bridge::start(&b, &nats, "in", "q", "JOBS", &args, &[]);
    wait_until(LONG, "the first bridge holds every job", || first.stat("held") == n);
    // The state file is written after each batch's pushes, not with each push (a crash
    // between may push a job again, as journal.rs says): kill once it records every job.
    let recorded = || std::fs::read_to_string(state).unwrap_or_default().lines().count() as u64;
    wait_until(LONG, "the state file records every job held", || recorded() == n + 1);
    first.proc.kill9();
    let mut second = Bridge::start(&b, &nats, "in", "q", "JOBS", &args, &[]);
    wait_until(LONG, "the redeliveries are adopted", || second.stat("adopted") == n);
    assert_eq!(second.stat("pushed"), 0, "no second copy: {}", second.proc.log_text());
    let runs = b.dir().join("runs");
    let _w = b.worker("q", "60s", &append(&runs));
    wait_until(LONG, "every job acked upstream", || second.stat("acked") == n && second.stat("held") == 0);
    let counts = line_counts(&runs);
    assert_eq!(
        (counts.len() as u64, counts.values().all(|&c| c == 1)),
        (n, true),
        "each job ran once: {counts:?}"
    );
    assert_eq!(nats.messages("JOBS"), 0);
    assert_eq!(b.live("q"), 0);
    b.check();
    second.stop();
    out.stop();
}

#[test]
fn in_refuses_a_consumer_whose_ack_wait_is_not_longer_than_the_lease() {
    let Some(nats) = Nats::start("in_refuses_a_consumer_whose_ack_wait_is_not_longer_than_the_lease") else {
        return;
    };
    let b = Host::start("B");
    b.ok(&["create", "q", "--lease", "5s"], b"");
    let start = |ack_wait: &str| {
        let log = b.dir().join(format!("in-{ack_wait}.log"));
        let mut c = std::process::Command::new(xtcq_testkit::exe::bridge_exe());
        c.args([
            "in",
            "q",
            "--nats",
            &nats.url(),
            "--stream",
            "JOBS",
            "--consumer",
            "B",
            "--ack-wait",
            ack_wait,
        ])
        .arg("--socket")
        .arg(b.socket());
        let mut p = Proc::spawn(c, log);
        let status = p.wait(LONG);
        (status.code(), p.log_text())
    };
    let (code, log) = start("3s");
    assert_eq!(code, Some(2), "refused: {log}");
    assert!(log.contains("AckWait (3s) must be longer than the local queue's lease (5s)"), "{log}");
    // The consumer exists now with 3 s: a longer --ack-wait does not change it, and the bridge
    // checks the consumer's own AckWait.
    let (code, log) = start("60s");
    assert_eq!(code, Some(2), "still refused: {log}");
    assert!(log.contains("AckWait (3s)"), "{log}");
}

/// A message whose holders died before settling it (the server redelivered it each time) is
/// dead-lettered once its delivery count passes the local queue's max attempts, unrun.
#[test]
fn a_message_delivered_more_than_max_attempts_times_is_dead_lettered_unrun() {
    let Some(nats) = Nats::start("a_message_delivered_more_than_max_attempts_times_is_dead_lettered_unrun")
    else {
        return;
    };
    let (a, b) = (Host::start("A"), Host::start("B"));
    a.ok(&["create", "q"], b"");
    b.ok(&["create", "q", "--max-attempts", "2"], b"");
    let mut out = Bridge::start(&a, &nats, "out", "q", "JOBS", &[], &[]);
    a.ok(&["push", "q"], b"orphan\n");
    wait_until(LONG, "published", || nats.messages("JOBS") == 1);
    // Holders that never ack: deliveries 1 and 2.
    let (dropped, _holder) = nats.fetch_and_drop("JOBS", "B", Duration::from_secs(1), 2);
    assert_eq!(dropped, 2, "each redelivery reached the waiting fetch");
    let mut inb = Bridge::start(&b, &nats, "in", "q", "JOBS", &["--consumer", "B"], &[]);
    inb.wait_for(LONG, "dead-lettered past max attempts", |b| b.stat("terminated") == 1);
    assert_eq!(inb.stat("pushed"), 0, "not run on B");
    let copies = nats.read_all("JOBS_DEAD");
    assert_eq!(copies.len(), 1);
    assert!(copies[0].1.contains("delivered 3 times, more than max attempts 2"), "{}", copies[0].1);
    assert_eq!(nats.messages("JOBS"), 0, "terminated");
    out.stop();
    inb.stop();
}

/// A stream that is not a work queue would keep acked jobs (limits) or give each to every
/// consumer (interest): `out` refuses it rather than publish into it.
#[test]
fn out_refuses_a_stream_that_is_not_a_work_queue() {
    let Some(nats) = Nats::start("out_refuses_a_stream_that_is_not_a_work_queue") else { return };
    let a = Host::start("A");
    a.ok(&["create", "q"], b"");
    nats.create_limits_stream("JOBS", "xtcq.jobs.q");
    let mut c = std::process::Command::new(xtcq_testkit::exe::bridge_exe());
    c.args(["out", "q", "--nats", &nats.url(), "--stream", "JOBS"]).arg("--socket").arg(a.socket());
    c.arg("--id-secret").arg(a.id_secret());
    let mut p = Proc::spawn(c, a.dir().join("out.log"));
    let status = p.wait(LONG);
    let log = p.log_text();
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(log.contains("has retention Limits; the bridge needs WorkQueue"), "{log}");
    a.ok(&["check"], b"");
    assert_eq!(a.live("q"), 0);
}
