//! `xtcq dead Q --requeue` / `--purge` of every dead letter is one request to xtcqd, which
//! walks the records once and acts on each in shared memory; 65,536 dead letters are done
//! well inside the harness's 60 s bound (before the bulk path: an attach and a full scan per
//! job, minutes for this many). The daemon resolves named jobs against the queue's own dead
//! letters.

use xtcq_testkit::*;

const N: usize = 65536;

/// Room for N dead letters: as many records, an overflow ring that takes them all back.
const BIG: &[&str] = &[
    "--queues",
    "2",
    "--deques-per-queue",
    "2",
    "--deque-capacity",
    "256",
    "--records",
    "65536",
    "--payload-bytes",
    "64",
    "--process-slots",
    "16",
    "--overflow-capacity",
    "65536",
];

/// Steals every queued job of `q` and fails it (one attempt allowed: each becomes dead).
fn fail_all(d: &Daemon) {
    fail_n(d, N)
}

fn fail_n(d: &Daemon, want: usize) {
    fail_in(d, "q", want)
}

/// Steals every queued job of queue `q` and fails it; `want` of them.
fn fail_in(d: &Daemon, q: &str, want: usize) {
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let t = c.attach_thief(q).expect("attach");
    let mut n = 0;
    while let Some(j) = t.steal().expect("steal") {
        j.fail("boom").expect("fail");
        n += 1;
    }
    assert_eq!(n, want);
}

fn records(d: &Daemon) -> (u64, u64) {
    let s = d.stats();
    let r = &s["queues"][0]["records"];
    (r["queued"].as_u64().unwrap_or(0), r["dead"].as_u64().unwrap_or(0))
}

#[test]
fn requeue_and_purge_of_65536_dead_letters_are_one_pass() {
    let d = Daemon::start_with(BIG);
    ok(&d.run(&["create", "q", "--max-attempts", "1", "--max-dead", "0"]));
    let jobs: String = (0..N).map(|i| format!("{i}\n")).collect();
    ok(&d.run_in(&["push", "q"], jobs.as_bytes()));
    fail_all(&d);
    assert_eq!(records(&d), (0, N as u64));

    let o = d.run(&["dead", "q", "--requeue"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("re-queued {N} dead letter(s) of q")), "{}", stderr(&o));
    assert_eq!(records(&d), (N as u64, 0), "every one back in line");

    fail_all(&d);
    let o = d.run(&["dead", "q", "--purge"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("purged {N} dead letter(s) of q")), "{}", stderr(&o));
    assert_eq!(records(&d), (0, 0));
    let s = d.stats();
    assert_eq!(s["records"]["free"], N, "{s}");
}

/// The ids `xtcq dead Q` lists, in its order.
fn dead_ids(d: &Daemon, q: &str) -> Vec<String> {
    let o = d.run(&["dead", q]);
    stdout(&o).lines().skip(1).filter_map(|l| l.split_whitespace().next()).map(str::to_string).collect()
}

/// (queued, dead) of queue `q`, from `stats --json`.
fn counts(d: &Daemon, q: &str) -> (u64, u64) {
    let s = d.stats();
    let row = s["queues"].as_array().expect("queues").iter().find(|r| r["info"]["name"] == q).cloned();
    let r = &row.unwrap_or_default()["records"];
    (r["queued"].as_u64().unwrap_or(0), r["dead"].as_u64().unwrap_or(0))
}

/// The daemon resolves the named jobs against the queue's own dead letters: a dead letter of
/// another queue, or a queued job, named beside a real one, is refused and nothing moves.
#[test]
fn requeue_of_a_job_that_is_not_a_dead_letter_of_the_queue_changes_nothing() {
    let d = Daemon::start();
    for q in ["a", "b"] {
        ok(&d.run(&["create", q, "--max-attempts", "1"]));
        ok(&d.run_in(&["push", q], format!("{q}-dead\n").as_bytes()));
        fail_in(&d, q, 1);
    }
    let queued = ok(&d.run_in(&["push", "a", "--print-handle"], b"a-queued\n"));
    let (a_dead, b_dead) = (dead_ids(&d, "a"), dead_ids(&d, "b"));
    assert_eq!((a_dead.len(), b_dead.len()), (1, 1), "{a_dead:?} {b_dead:?}");
    let before = (counts(&d, "a"), counts(&d, "b"));
    assert_eq!(before, ((1, 1), (0, 1)));
    for stranger in [b_dead[0].as_str(), queued.trim()] {
        for verb in ["--requeue", "--purge"] {
            let o = d.run(&["dead", "a", verb, &a_dead[0], stranger]);
            assert_eq!(code(&o), 1, "{verb} {stranger}: {}", stderr(&o));
            assert!(
                stderr(&o).contains(&format!("job {stranger} is not a dead letter of queue a")),
                "{}",
                stderr(&o)
            );
            assert_eq!((counts(&d, "a"), counts(&d, "b")), before, "{verb} {stranger} changed something");
        }
    }
    assert_eq!((dead_ids(&d, "a"), dead_ids(&d, "b")), (a_dead, b_dead));
}

/// The figures of the report: `time xtcq dead q --requeue` of `XTCQ_MEASURE_N`
/// dead letters (default 65536) with the `xtcq` at `XTCQ_MEASURE_BIN` (default this build),
/// e.g. `XTCQ_MEASURE_BIN=/path/to/old/xtcq XTCQ_MEASURE_N=4096 cargo test -p xtcq-tests
/// --test cli -- --ignored --nocapture dead_bulk::`.
#[test]
#[ignore = "a measurement, not a test"]
fn measure_requeue() {
    let n: usize = std::env::var("XTCQ_MEASURE_N").ok().and_then(|v| v.parse().ok()).unwrap_or(N);
    let bin = std::env::var("XTCQ_MEASURE_BIN").unwrap_or_else(|_| xtcq_exe().display().to_string());
    let d = Daemon::start_with(BIG);
    ok(&d.run(&["create", "q", "--max-attempts", "1", "--max-dead", "0"]));
    let jobs: String = (0..n).map(|i| format!("{i}\n")).collect();
    ok(&d.run_in(&["push", "q"], jobs.as_bytes()));
    fail_n(&d, n);
    for op in ["--requeue", "--purge"] {
        if op == "--purge" {
            fail_n(&d, n);
        }
        let t0 = std::time::Instant::now();
        let mut cmd = std::process::Command::new(&bin);
        cmd.arg("--socket").arg(&d.socket).args(["dead", "q", op]).env_remove("XTCQ_SOCKET");
        let o = wait_bounded(
            cmd.stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn"),
            std::time::Duration::from_secs(3600),
            "xtcq dead",
        );
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        println!("xtcq dead q {op} of {n} dead letters ({bin}): {:.2} s", t0.elapsed().as_secs_f64());
    }
}
