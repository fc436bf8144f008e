//! `xtcq_owner_push_batch` from C (`tests/c/push_batch.c`) against a real daemon.
//!
//! - Every job a call says it queued comes out exactly once, in another process too, and
//!   none it did not: batches past 128 and past the deque's room spill to the overflow ring;
//!   a batch into a full segment stops part-way and says how many went in.
//! - Arguments a C caller can get wrong are refused before anything is queued, lengths no
//!   buffer has included (those aborted the process before).
//! - A producer stopped (SIGSTOP) in the middle of a batch and then `kill -9`ed loses none
//!   of the jobs it had reported queued and duplicates none.
//! - A producer killed at a crash point inside a batch (its records published, the deque's
//!   `bottom` not yet stored) leaves each published job to come exactly once.
//! - A batch stolen before a daemon `kill -9` and restart is acked after it, each job once;
//!   after a restart that replaced the segment, the next batch fails and queues nothing.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xtcq_testkit::{compile_c, first_line_seen, run_within, Daemon};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs the C program with `args` and fails the test with its output and the daemon's log
/// unless it exits 0; returns its stdout.
fn run_ok(daemon: &Daemon, exe: &std::path::Path, args: &[&str]) -> String {
    let out = run_within(Command::new(exe).arg(&daemon.socket).args(args), Duration::from_secs(120));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "push_batch {args:?} failed ({}):\n{stdout}\n{stderr}\ndaemon log:\n{}",
        out.status,
        daemon.log_text()
    );
    stdout
}

#[test]
fn a_thousand_jobs_pushed_in_c_batches_are_stolen_once_by_another_process() {
    let daemon = Daemon::start();
    let exe = compile_c("tests/c/push_batch.c", daemon.dir(), &[]);
    let consumer = Command::new(&exe)
        .arg(&daemon.socket)
        .args(["consume", "thousand", "1000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the consumer");
    let pushed = run_ok(&daemon, &exe, &["produce", "thousand", "1000", "100"]);
    assert!(pushed.contains("queued 1000 jobs in calls of 100"), "{pushed}");
    let out = xtcq_testkit::wait_bounded(consumer, Duration::from_secs(120), "the consumer");
    assert!(
        out.status.success() && text(&out.stdout).contains("consumed 1000 jobs, each once"),
        "consumer ({}):\n{}\n{}\ndaemon log:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr),
        daemon.log_text()
    );
    let report = daemon.client().check(true).expect("xtcq check");
    assert!(report.is_consistent(), "xtcq check: {:?}", report.problems);
}

#[test]
fn a_c_batch_refuses_bad_arguments_before_queueing_and_spills_past_the_deque() {
    let daemon = Daemon::start();
    let exe = compile_c("tests/c/push_batch.c", daemon.dir(), &[]);
    let out = run_ok(&daemon, &exe, &["edges"]);
    assert!(out.contains("edges as documented"), "{out}");
}

#[test]
fn a_c_batch_into_a_full_segment_says_exactly_how_many_went_in() {
    let daemon = Daemon::builder()
        .flags([
            "--queues",
            "2",
            "--deques-per-queue",
            "1",
            "--deque-capacity",
            "256",
            "--records",
            "100",
            "--payload-bytes",
            "64",
            "--process-slots",
            "8",
            "--overflow-capacity",
            "256",
        ])
        .start();
    let exe = compile_c("tests/c/push_batch.c", daemon.dir(), &[]);
    let out = run_ok(&daemon, &exe, &["full", "full", "300"]);
    assert!(out.contains("300 jobs through a full segment, each once"), "{out}");
}

#[test]
fn a_push_of_a_length_no_buffer_has_is_refused_not_an_abort() {
    let daemon = Daemon::start();
    let exe = compile_c("tests/c/push_batch.c", daemon.dir(), &[]);
    let out = run_ok(&daemon, &exe, &["huge_len"]);
    assert!(out.contains("lengths past any buffer refused"), "{out}");
}

/// Steals and acks on a thread until stopped, keeping each payload seen.
fn consumer(daemon: &Daemon, queue: &str, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<u64>> {
    let client = daemon.client();
    let mut q = xtcq_client::QueueParams::new(queue);
    q.deques = 2;
    q.capacity = 256;
    client.create_queue(&q).expect("create");
    let queue = queue.to_string();
    std::thread::spawn(move || {
        let thief = client.attach_thief(&queue).expect("thief");
        let mut seen = Vec::new();
        let mut batch = xtcq_client::JobBatch::new();
        while !stop.load(Ordering::Relaxed) {
            let n = thief.steal_into(32, &mut batch).expect("steal");
            for i in 0..n {
                let p = batch.payload(i).expect("payload");
                seen.push(text(&p).parse::<u64>().unwrap_or_else(|_| panic!("payload {p:?}")));
            }
            batch.ack_all().expect("ack");
            if n == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        seen
    })
}

#[test]
fn a_producer_stopped_and_killed_mid_batch_loses_and_repeats_no_reported_job() {
    let daemon = Daemon::start();
    let exe = compile_c("tests/c/push_batch.c", daemon.dir(), &[]);
    for round in 0..4u64 {
        // A queue a round: the segment has 4.
        let queue = format!("killed{round}");
        let stop = Arc::new(AtomicBool::new(false));
        let taker = consumer(&daemon, &queue, stop.clone());
        let mut producer = Command::new(&exe)
            .arg(&daemon.socket)
            .args(["forever", &queue])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the producer");
        // Stop it at a different depth each round, in whatever call it is in then.
        let target = 500 + 700 * round;
        let mut reported = 0u64;
        let mut lines = BufReader::new(producer.stdout.take().expect("stdout")).lines();
        let mut last_report = |line: std::io::Result<String>| {
            let line = line.expect("read");
            reported = line.strip_prefix("queued ").and_then(|n| n.parse().ok()).expect("queued K");
            reported
        };
        for line in lines.by_ref() {
            if last_report(line) >= target {
                break;
            }
        }
        let pid = producer.id() as i32;
        // SAFETY: signals to the child this test spawned.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        producer.wait().expect("reap");
        // What it printed before the kill and this test had not read yet counts too.
        for line in lines {
            last_report(line);
        }
        // Every reported job must come; the killed call's may (its records were published),
        // each once. Wait until the daemon's books show nothing queued, indexed or stray.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = &daemon.stats()["records"];
            let left: u64 = ["filling", "queued", "claimed"].iter().filter_map(|k| r[k].as_u64()).sum();
            if left == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{left} records still filling, queued or claimed after 60 s: {r}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
        let mut got = taker.join().expect("consumer");
        got.sort_unstable();
        let n = got.len();
        got.dedup();
        assert_eq!(got.len(), n, "round {round}: a job came twice");
        let missing: Vec<u64> = (0..reported).filter(|i| got.binary_search(i).is_err()).collect();
        assert!(missing.is_empty(), "round {round}: reported queued, never came: {missing:?}");
        assert!(
            got.iter().all(|&i| i < reported + 64),
            "round {round}: a job past the killed call's batch came: {:?}",
            got.last()
        );
    }
    let report = daemon.client().check(true).expect("xtcq check");
    assert!(report.is_consistent(), "xtcq check: {:?}", report.problems);
}

#[test]
fn a_batch_stolen_before_a_daemon_restart_is_acked_after_it_each_job_once() {
    use std::io::Write;
    let mut daemon = Daemon::start();
    let exe = compile_c("tests/c/push_batch.c", daemon.dir(), &[]);
    let mut holder = Command::new(&exe)
        .arg(&daemon.socket)
        .args(["hold", "restart"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the holder");
    // Byte by byte, so the rest stays in the pipe for `wait_bounded`.
    let mut line = Vec::new();
    let mut byte = [0u8];
    while line.last() != Some(&b'\n') {
        let n = std::io::Read::read(holder.stdout.as_mut().expect("stdout"), &mut byte).expect("read");
        assert_eq!(n, 1, "the holder exited early: {}", text(&line));
        line.push(byte[0]);
    }
    let line = text(&line);
    assert_eq!(line.trim(), "stolen 10", "daemon log:\n{}", daemon.log_text());
    daemon.kill();
    daemon.restart_with(xtcq_testkit::SMALL_SEGMENT, |_| {});
    holder.stdin.take().expect("stdin").write_all(b"go\n").expect("write");
    let out = xtcq_testkit::wait_bounded(holder, Duration::from_secs(60), "the holder");
    let report = text(&out.stdout);
    assert!(
        out.status.success(),
        "holder ({}):\n{report}\n{}\ndaemon log:\n{}",
        out.status,
        text(&out.stderr),
        daemon.log_text()
    );
    // A job whose ack failed must come back; one acked must not.
    let mut back: Vec<String> = report
        .lines()
        .filter_map(|l| l.strip_prefix("ack "))
        .filter(|l| !l.ends_with(" 0"))
        .map(|l| l.split(' ').next().unwrap_or_default().to_string())
        .collect();
    assert!(report.contains("push_batch after 0 queued 10"), "{report}");
    back.extend((10..20).map(|i| i.to_string()));
    back.sort();
    assert_eq!(daemon.drain("restart"), back, "holder said:\n{report}");
    let check = daemon.client().check(true).expect("xtcq check");
    assert!(check.is_consistent(), "xtcq check: {:?}", check.problems);
}

/// The same holder across a restart that replaced the segment (`--recreate`): its next batch
/// fails with `XTCQ_E_SEGMENT` and queues nothing, and nothing crashes.
#[test]
fn a_batch_into_a_segment_replaced_meanwhile_fails_and_queues_nothing() {
    use std::io::Write;
    let mut daemon = Daemon::start();
    let exe = compile_c("tests/c/push_batch.c", daemon.dir(), &[]);
    let mut holder = Command::new(&exe)
        .arg(&daemon.socket)
        .args(["hold", "replaced"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the holder");
    assert!(first_line_seen(&mut holder), "the holder exited early");
    daemon.kill();
    daemon.restart_with(&[xtcq_testkit::SMALL_SEGMENT, &["--recreate"]].concat(), |_| {});
    holder.stdin.take().expect("stdin").write_all(b"go\n").expect("write");
    let out = xtcq_testkit::wait_bounded(holder, Duration::from_secs(60), "the holder");
    let report = text(&out.stdout);
    assert!(out.status.success(), "holder ({}):\n{report}\n{}", out.status, text(&out.stderr));
    let acks: Vec<&str> = report.lines().filter(|l| l.starts_with("ack ")).collect();
    assert_eq!(acks.len(), 10, "{report}");
    // An ack lands in the old mapping (the job was run; the operator dropped the queue's
    // jobs with the segment): success or XTCQ_E_SEGMENT, never a crash.
    assert!(acks.iter().all(|l| l.ends_with(" 0") || l.ends_with(" -10")), "acks: {report}");
    assert!(report.contains("push_batch after -10 queued 0"), "{report}");
    let stats = daemon.stats();
    assert_eq!(stats["records"]["queued"], 0, "the new segment got a job: {stats}");
}

/// Steals and acks `queue`'s jobs until `want` came and the segment holds no job filling,
/// queued or claimed (strays take the daemon's `--stray-window`); returns their numbers.
pub(crate) fn collect(daemon: &Daemon, queue: &str, want: usize) -> Vec<u64> {
    let client = daemon.client();
    let thief = client.attach_thief(queue).expect("thief");
    let mut batch = xtcq_client::JobBatch::new();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n = thief.steal_into(32, &mut batch).expect("steal");
        for i in 0..n {
            let p = batch.payload(i).expect("payload");
            got.push(text(&p).parse::<u64>().unwrap_or_else(|_| panic!("payload {p:?}")));
        }
        batch.ack_all().expect("ack");
        if n > 0 {
            continue;
        }
        let r = daemon.stats()["records"].clone();
        let left: u64 = ["filling", "queued", "claimed"].iter().filter_map(|k| r[k].as_u64()).sum();
        if got.len() >= want && left == 0 {
            return got;
        }
        assert!(Instant::now() < deadline, "{} of {want} jobs came in 60 s; records: {r}", got.len());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A producer killed (its fail point: `kill -9` of itself) inside its second batch of 100,
/// at job 170: before the batch's one store of `bottom`, so the jobs it published are in no
/// deque (strays the daemon indexes). Each published job comes once; none after.
#[test]
fn a_producer_killed_inside_a_batch_leaves_each_published_job_exactly_once() {
    use std::os::unix::process::ExitStatusExt;
    let daemon = Daemon::start();
    let exe = compile_c("tests/c/push_batch.c", daemon.dir(), &[]);
    // (fail point, jobs published when it kills: the 170th is published at the first, only
    // allocated at the second).
    for (round, (point, published)) in
        [("publish.before_index", 170u64), ("alloc.after_begin_fill", 169)].into_iter().enumerate()
    {
        let queue = format!("crash{round}");
        let out = run_within(
            Command::new(&exe)
                .arg(&daemon.socket)
                .args(["produce", &queue, "200", "100"])
                .env("XTCQ_FAILPOINTS", format!("{point}=kill@170")),
            Duration::from_secs(60),
        );
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGKILL),
            "the producer was to kill itself at {point} ({}):\n{}{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        let mut got = collect(&daemon, &queue, published as usize);
        got.sort_unstable();
        assert_eq!(got, (0..published).collect::<Vec<_>>(), "{point}: each published job once, no other");
    }
    let report = daemon.client().check(true).expect("xtcq check");
    assert!(report.is_consistent(), "xtcq check: {:?}", report.problems);
}
