//! Random-kill soak (ignored by default): 1 producer process and 4 worker processes over a
//! real `xtcqd`; every few hundred ms a random worker or the producer is `kill -9`ed and
//! restarted, and a few times the daemon itself is `kill -9`ed and restarted on the same
//! socket and segment (the clients keep working in shared memory; the new daemon adopts them).
//!
//! ```sh
//! cargo test --release -p xtcq-tests --test soak -- --ignored --nocapture
//! XTCQ_SOAK_JOBS=20000 cargo test -p xtcq-tests --test soak -- --ignored --nocapture   # small
//! ```
//!
//! Sizes from the environment: `XTCQ_SOAK_JOBS` (default 200,000), `XTCQ_SOAK_SECS` (stop
//! producing after this long; default none), `XTCQ_SOAK_WORK_US` (a job's run time, default
//! 200 µs), `XTCQ_SOAK_KILL_MS` (mean time between kills, default 300), `XTCQ_SOAK_DAEMON_KILLS`
//! (default 3), `XTCQ_SOAK_SEED`.
//!
//! Accounting: the producer logs each id after its push returned; a worker logs `id attempts`
//! for each job it is about to run, before acking it (one `write(2)` per batch, so a kill
//! leaves whole lines). At the end: every id logged as pushed was run; ids run but never logged
//! as pushed are at most one per producer kill (killed between push and log); an id run more
//! than once was run each time at a different attempt (each re-run follows a give-back), and
//! the re-runs are bounded by worker kills × batch size; the segment is consistent; every
//! record is free. Time to recover: from the `kill -9` (CLOCK_MONOTONIC, the same clock in
//! every process) to the daemon's log line saying the dead process's jobs are re-queued
//! (`done_mono_ns`).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xtcq_client::{Client, Error, ThiefHandle};
use xtcq_shm::segment::monotonic_ns;
use xtcq_testkit::*;

const QUEUE: &str = "soak";
const BATCH: usize = 8;
const WORKERS: usize = 4;
const RECORDS: u64 = 16384;
/// The module whose `child_main` the children run (`fleet` spawns them from its own module).
const ROLES: &str = module_path!();

/// The entry point of child processes; an ordinary (empty) test when `XTCQ_TEST_ROLE` is
/// unset.
#[test]
fn child_main() {
    child_entry(run_role);
}

/// Connects, retrying while the daemon is down (it may be being restarted).
fn connect() -> Result<Client, Error> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Client::connect(None) {
            Ok(c) => return Ok(c),
            Err(e) if e.is_unreachable() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => return Err(e),
        }
    }
}

/// Retries `f` while the daemon is down or (for owners) the deque of a just-killed owner is
/// not released yet.
fn retry<T>(mut f: impl FnMut() -> Result<T, Error>) -> Result<T, Error> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e)
                if (e.is_unreachable() || matches!(e, Error::NoFreeDeque { .. }))
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => return Err(e),
        }
    }
}

fn log_file() -> std::fs::File {
    let p = std::env::var("XTCQ_TEST_LOG").expect("XTCQ_TEST_LOG");
    std::fs::OpenOptions::new().create(true).append(true).open(p).expect("log file")
}

fn run_role(role: &str) -> Result<(), Error> {
    match role {
        // Push ids base..base+n, logging each after its push returned.
        "producer" => {
            let base: u64 = env_or("XTCQ_TEST_BASE", 0);
            let n: u64 = env_or("XTCQ_TEST_N", 0);
            let mut log = log_file();
            let owner = retry(|| connect()?.attach_owner(QUEUE))?;
            for id in base..base + n {
                loop {
                    match owner.push(id.to_string().as_bytes()) {
                        Ok(_) => break,
                        Err(Error::QueueFull { .. } | Error::RecordsFull(_)) => {
                            std::thread::sleep(Duration::from_micros(200))
                        }
                        Err(e) => return Err(e),
                    }
                }
                log.write_all(format!("{id}\n").as_bytes()).expect("log");
            }
            out("done");
            Ok(())
        }
        // Steal (batches, else a blocking single steal), log, run, ack; after stdin closes,
        // exit once the queue stays empty.
        "worker" => {
            let stop = stop_when_stdin_closes();
            let thief = retry(|| connect()?.attach_thief(QUEUE))?;
            out("attached");
            work(&thief, &stop)
        }
        other => Err(Error::Corrupt(format!("unknown role {other}"))),
    }
}

/// A flag set once the parent closes our stdin (the signal to finish).
fn stop_when_stdin_closes() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        let mut s = String::new();
        while std::io::stdin().lock().read_line(&mut s).map(|n| n > 0).unwrap_or(false) {
            s.clear();
        }
        flag.store(true, Ordering::Relaxed);
    });
    stop
}

/// The worker's loop: until `stop` and three empty looks in a row.
fn work(thief: &ThiefHandle, stop: &AtomicBool) -> Result<(), Error> {
    let work = Duration::from_micros(env_or("XTCQ_SOAK_WORK_US", 200));
    let mut log = log_file();
    let mut runs = std::env::var("XTCQ_SOAK_RUNLOG")
        .ok()
        .map(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).expect("run log"));
    let mut idle = 0;
    loop {
        let mut jobs = thief.steal_batch(BATCH)?;
        if jobs.is_empty() {
            jobs.extend(thief.steal_wait(Some(Duration::from_millis(50)))?);
        }
        if jobs.is_empty() {
            idle += 1;
            if stop.load(Ordering::Relaxed) && idle >= 3 {
                return Ok(());
            }
            continue;
        }
        idle = 0;
        let mut text = String::new();
        for j in &jobs {
            let p = j.payload()?;
            text.push_str(&format!("{} {}\n", String::from_utf8_lossy(&p), j.attempts()));
        }
        // One write for the batch: a kill leaves whole lines.
        log.write_all(text.as_bytes()).expect("log");
        for j in jobs {
            // Start and end of the run, CLOCK_MONOTONIC, by job id: the parent checks that no
            // two runs of one id overlap.
            let id = String::from_utf8_lossy(&j.payload()?).into_owned();
            let mut mark = |kind: &str| {
                if let Some(r) = runs.as_mut() {
                    r.write_all(format!("{kind} {id} {}\n", monotonic_ns()).as_bytes()).expect("run log");
                }
            };
            mark("S");
            if !work.is_zero() {
                std::thread::sleep(work);
            }
            mark("E");
            j.ack()?;
        }
    }
}

// ---------------------------------------------------------------------------------------
// The parent side.

mod fleet;
mod tally;

#[test]
#[ignore = "long: the random-kill soak; run with --ignored (see the module docs)"]
fn random_kill_soak() {
    let settings = fleet::Settings::from_env();
    let mut rng = Rng::new(settings.seed);
    eprintln!(
        "soak: {} jobs, 1 producer + {WORKERS} workers, a kill every ~{} ms, {} daemon kills, seed {}",
        settings.jobs, settings.kill_ms, settings.daemon_kills, settings.seed
    );
    let t0 = Instant::now();
    let mut fleet = fleet::Fleet::start(settings.jobs);
    fleet.under_fire(&settings, &mut rng);
    let under_fire = t0.elapsed();
    let client = fleet.drain();
    let elapsed = t0.elapsed();

    let tally = tally::Tally::account(&fleet);
    let s = client.stats(None).expect("stats");
    assert_eq!(s.records.free, RECORDS, "every record free at the end: {:?}", s.records);
    let seg = xtcq_shm::Segment::attach(&fleet.daemon().segment).expect("attach");
    let report = xtcq_shm::check::check_segment(&seg, true);
    assert!(report.is_consistent(), "check_segment: {:#?}", report.problems);

    let figures =
        tally::figures(&fleet, &tally, settings.seed, under_fire.as_secs_f64(), elapsed.as_secs_f64());
    eprintln!("{figures}");
    if let Ok(p) = std::env::var("XTCQ_SOAK_REPORT") {
        let _ = std::fs::write(p, &figures);
    }
}

/// The overlap check itself: a run cut by its worker's kill ends at the kill, and one that
/// goes on past the next run's start is reported.
#[test]
fn the_overlap_check_finds_a_run_that_outlived_its_kill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (dir.path().join("worker.1.log"), dir.path().join("worker.2.log"));
    std::fs::write(tally::run_log(&a), "S 7 100\nE 7 150\nS 8 160\n").expect("write");
    std::fs::write(tally::run_log(&b), "S 8 300\nE 8 310\n").expect("write");
    let mut killed = BTreeMap::new();
    killed.insert(a.clone(), 200);
    assert!(
        tally::overlapping_runs(&[a.clone(), b.clone()], &killed).is_empty(),
        "cut at 200, re-run at 300"
    );
    killed.insert(a.clone(), 400);
    assert_eq!(tally::overlapping_runs(&[a, b], &killed).len(), 1, "cut at 400, re-run at 300: overlap");
}
