//! Random-kill soak (ignored by default): 1 producer process and 4 worker processes over a
//! real `xtcqd`; every few hundred ms a random worker or the producer is `kill -9`ed and
//! restarted, and a few times the daemon itself is `kill -9`ed and restarted on the same
//! socket and segment (the clients keep working in shared memory; the new daemon adopts them).
//!
//! ```sh
//! cargo test --release -p xtcq-tests --test daemon_soak -- --ignored --nocapture
//! XTCQ_SOAK_JOBS=20000 cargo test -p xtcq-tests --test daemon_soak -- --ignored --nocapture   # small
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
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xtcq_client::{Client, Error, Flavor, QueueParams};
use xtcq_shm::segment::monotonic_ns;
use xtcq_testkit::*;

const QUEUE: &str = "soak";
const BATCH: usize = 8;
const RECORDS: u64 = 16384;

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
            let work = Duration::from_micros(env_or("XTCQ_SOAK_WORK_US", 200));
            let mut log = log_file();
            let stop = Arc::new(AtomicBool::new(false));
            {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut s = String::new();
                    while std::io::stdin().lock().read_line(&mut s).map(|n| n > 0).unwrap_or(false) {
                        s.clear();
                    }
                    stop.store(true, Ordering::Relaxed);
                });
            }
            let mut runs = std::env::var("XTCQ_SOAK_RUNLOG")
                .ok()
                .map(|p| std::fs::OpenOptions::new().create(true).append(true).open(p).expect("run log"));
            let thief = retry(|| connect()?.attach_thief(QUEUE))?;
            out("attached");
            let mut idle = 0;
            let mut text = String::new();
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
                text.clear();
                for j in &jobs {
                    let p = j.payload()?;
                    let id = String::from_utf8_lossy(&p);
                    text.push_str(&format!("{id} {}\n", j.attempts()));
                }
                // One write for the batch: a kill leaves whole lines.
                log.write_all(text.as_bytes()).expect("log");
                for j in jobs {
                    // Start and end of the run, CLOCK_MONOTONIC, by job id: the parent checks
                    // that no two runs of one id overlap.
                    let id = String::from_utf8_lossy(&j.payload()?).into_owned();
                    if let Some(r) = runs.as_mut() {
                        r.write_all(format!("S {id} {}\n", monotonic_ns()).as_bytes()).expect("run log");
                    }
                    if !work.is_zero() {
                        std::thread::sleep(work);
                    }
                    if let Some(r) = runs.as_mut() {
                        r.write_all(format!("E {id} {}\n", monotonic_ns()).as_bytes()).expect("run log");
                    }
                    j.ack()?;
                }
            }
        }
        other => Err(Error::Corrupt(format!("unknown role {other}"))),
    }
}

// ---------------------------------------------------------------------------------------
// The parent side.

struct Child {
    role: Role,
    log: PathBuf,
}

struct Kill {
    pid: u32,
    at_ns: u64,
    /// Index of the daemon instance running when it was killed.
    daemon: usize,
}

fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p).unwrap_or_default().lines().map(str::to_string).collect()
}

/// Lines in the logs (ids pushed, or jobs run).
fn pushed_count(logs: &[PathBuf]) -> u64 {
    logs.iter()
        .map(|p| std::fs::read(p).map(|b| b.iter().filter(|&&c| c == b'\n').count()).unwrap_or(0) as u64)
        .sum()
}

fn spawn_producer(socket: &Path, dir: &Path, k: usize, n: u64) -> Child {
    let log = dir.join(format!("producer.{k}.log"));
    let env = [
        ("XTCQ_TEST_LOG", log.display().to_string()),
        ("XTCQ_TEST_BASE", ((k as u64 + 1) << 32).to_string()),
        ("XTCQ_TEST_N", n.to_string()),
    ];
    Child { role: spawn_role("producer", socket, &env), log }
}

fn spawn_worker(socket: &Path, dir: &Path, k: usize) -> Child {
    let log = dir.join(format!("worker.{k}.log"));
    let env = [
        ("XTCQ_TEST_LOG", log.display().to_string()),
        ("XTCQ_SOAK_RUNLOG", run_log(&log).display().to_string()),
        ("XTCQ_SOAK_WORK_US", env_or("XTCQ_SOAK_WORK_US", 200).to_string()),
    ];
    Child { role: spawn_role("worker", socket, &env), log }
}

/// The start / end log beside a worker's log.
fn run_log(log: &Path) -> PathBuf {
    log.with_extension("runs")
}

/// Runs of one job id that overlap in time. A run with a start and no end was cut by its
/// worker's kill: it ends at `killed_at` of that worker's log (or never, if not killed).
fn overlapping_runs(worker_logs: &[PathBuf], killed_at: &BTreeMap<PathBuf, u64>) -> Vec<String> {
    let mut runs: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for w in worker_logs {
        let cut = killed_at.get(w).copied().unwrap_or(u64::MAX);
        let mut open: Option<(String, u64)> = None;
        for l in lines(&run_log(w)) {
            let mut f = l.split(' ');
            let (Some(kind), Some(id), Some(ns)) =
                (f.next(), f.next(), f.next().and_then(|n| n.parse().ok()))
            else {
                continue;
            };
            match kind {
                "S" => {
                    if let Some((id, s)) = open.take() {
                        runs.entry(id).or_default().push((s, cut));
                    }
                    open = Some((id.to_string(), ns));
                }
                _ => {
                    if let Some((oid, s)) = open.take() {
                        runs.entry(oid).or_default().push((s, ns));
                    }
                }
            }
        }
        if let Some((id, s)) = open {
            runs.entry(id).or_default().push((s, cut));
        }
    }
    let mut out = Vec::new();
    for (id, mut r) in runs {
        r.sort_unstable();
        for pair in r.windows(2) {
            if pair[0].1 > pair[1].0 {
                out.push(format!(
                    "job {id}: a run [{}, {}] overlaps the next, from {}",
                    pair[0].0, pair[0].1, pair[1].0
                ));
            }
        }
    }
    out
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// `(pid, done_mono_ns)` of every recovery a daemon log reports.
fn recoveries(log: &str) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for line in log.lines() {
        if !(line.contains("recovered jobs of an exited process")
            || line.contains("process exited; slot freed"))
        {
            continue;
        }
        let field = |name: &str| -> Option<u64> {
            let at = line.find(&format!(" {name}="))? + name.len() + 2;
            line[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
        };
        if let (Some(pid), Some(done)) = (field("pid"), field("done_mono_ns")) {
            out.insert(pid as u32, done);
        }
    }
    out
}

#[test]
#[ignore = "long: the random-kill soak; run with --ignored (see the module docs)"]
fn random_kill_soak() {
    let jobs = env_or("XTCQ_SOAK_JOBS", 200_000);
    let secs = env_or("XTCQ_SOAK_SECS", 0);
    let kill_ms = env_or("XTCQ_SOAK_KILL_MS", 300).max(10);
    let daemon_kills = env_or("XTCQ_SOAK_DAEMON_KILLS", 3);
    let seed = env_or("XTCQ_SOAK_SEED", monotonic_ns() | 1);
    let mut rng = Rng::new(seed);
    eprintln!(
        "soak: {jobs} jobs, 1 producer + 4 workers, a kill every ~{kill_ms} ms, {daemon_kills} daemon kills, seed {seed}"
    );

    let mut daemons = vec![Daemon::builder().flags(MEDIUM_SEGMENT).start()];
    let dir = daemons[0].dir().to_path_buf();
    let socket = daemons[0].socket.clone();
    daemons[0]
        .client()
        .create_queue(&QueueParams {
            name: QUEUE.into(),
            deques: 4,
            capacity: 256,
            flavor: Flavor::Lifo,
            max_attempts: 0,
            lease_ms: 0,
        })
        .expect("create queue");

    let t0 = Instant::now();
    let mut producer_logs = Vec::new();
    let mut worker_logs = Vec::new();
    let mut incarnation = 0usize;
    let mut producer = Some(spawn_producer(&socket, &dir, incarnation, jobs));
    producer_logs.push(producer.as_ref().unwrap().log.clone());
    let mut workers: Vec<Child> = (0..4)
        .map(|_| {
            incarnation += 1;
            let w = spawn_worker(&socket, &dir, incarnation);
            worker_logs.push(w.log.clone());
            w
        })
        .collect();

    let mut kills: Vec<Kill> = Vec::new();
    let mut killed_at: BTreeMap<PathBuf, u64> = BTreeMap::new();
    let (mut worker_kills, mut producer_kills) = (0u64, 0u64);
    let mut daemon_restarts: Vec<Duration> = Vec::new();
    let mut next_daemon_kill = 1;
    let deadline = t0 + Duration::from_secs(if secs > 0 { secs + 600 } else { 1800 });

    // Production under fire.
    loop {
        assert!(Instant::now() < deadline, "soak did not finish in time");
        if let Some(p) = producer.as_mut() {
            if let Some(ch) = p.role.child.as_mut() {
                if let Ok(Some(st)) = ch.try_wait() {
                    assert!(st.success(), "the producer failed: {st:?}");
                    producer = None;
                }
            }
        }
        let pushed = pushed_count(&producer_logs);
        let run = pushed_count(&worker_logs);
        if producer.is_none() && pushed >= jobs {
            // Everything pushed; go on killing until it has all been run.
            let idle = Client::connect(Some(&socket))
                .ok()
                .and_then(|c| c.stats(Some(QUEUE)).ok())
                .is_some_and(|s| {
                    let r = &s.queues[0].records;
                    r.queued == 0 && r.claimed == 0 && r.filling == 0
                });
            if idle && run >= pushed {
                break;
            }
        } else if producer.is_none() {
            // Killed and not restarted (time cap) or exited early: restart with the rest.
            incarnation += 1;
            let p = spawn_producer(&socket, &dir, incarnation, jobs - pushed);
            producer_logs.push(p.log.clone());
            producer = Some(p);
        }
        if secs > 0 && t0.elapsed() > Duration::from_secs(secs) {
            if let Some(mut p) = producer.take() {
                p.role.kill9();
                producer_kills += 1;
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(kill_ms / 2 + rng.below(kill_ms)));

        // The daemon, a few times, spread over the run.
        if next_daemon_kill <= daemon_kills && run * (daemon_kills + 1) >= jobs * next_daemon_kill {
            next_daemon_kill += 1;
            let d = daemons.last_mut().unwrap();
            d.signal(libc::SIGKILL);
            let _ = d.wait_exit(Duration::from_secs(10));
            let t = Instant::now();
            // Clients keep working in shared memory meanwhile; a short gap, then restart.
            std::thread::sleep(Duration::from_millis(50 + rng.below(200)));
            let mut d2 = Daemon::builder().at(&dir).flags(MEDIUM_SEGMENT).start();
            d2.adopt_dir(daemons.last_mut().unwrap());
            daemon_restarts.push(t.elapsed());
            daemons.push(d2);
            continue;
        }

        // A worker (4 in 5) or the producer (unless it has just finished). The first kill is
        // the producer's, so that even a short run covers a producer dying mid-stream.
        let daemon = daemons.len() - 1;
        let producer_running = producer
            .as_mut()
            .and_then(|p| p.role.child.as_mut())
            .is_some_and(|ch| matches!(ch.try_wait(), Ok(None)));
        if (rng.below(5) == 0 || producer_kills == 0) && producer_running {
            let mut p = producer.take().unwrap();
            let pid = p.role.pid();
            let at_ns = monotonic_ns();
            p.role.kill9();
            kills.push(Kill { pid, at_ns, daemon });
            producer_kills += 1;
            let pushed = pushed_count(&producer_logs);
            if pushed < jobs {
                incarnation += 1;
                let p = spawn_producer(&socket, &dir, incarnation, jobs - pushed);
                producer_logs.push(p.log.clone());
                producer = Some(p);
            }
        } else {
            let i = rng.below(workers.len() as u64) as usize;
            let pid = workers[i].role.pid();
            let at_ns = monotonic_ns();
            workers[i].role.kill9();
            // After the wait: the process is gone by then, so its runs ended before it.
            killed_at.insert(workers[i].log.clone(), monotonic_ns());
            kills.push(Kill { pid, at_ns, daemon });
            worker_kills += 1;
            incarnation += 1;
            workers[i] = spawn_worker(&socket, &dir, incarnation);
            worker_logs.push(workers[i].log.clone());
        }
    }
    let under_fire = t0.elapsed();

    // Drain: the workers stop once the queue stays empty.
    for w in &mut workers {
        w.role.release();
    }
    for w in &mut workers {
        let _ = w.role.finish(Duration::from_secs(120));
    }
    let elapsed = t0.elapsed();
    let d = daemons.last().unwrap();
    let c = Client::connect(Some(&socket)).expect("connect");
    eventually(Duration::from_secs(10), || {
        c.stats(None).ok().filter(|s| s.processes.iter().all(|p| p.pid == std::process::id())).map(|_| ())
    })
    .unwrap_or_else(|| panic!("children not recovered; daemon log:\n{}", d.log_text()));

    // Accounting.
    let mut pushed: Vec<u64> = Vec::new();
    let mut logged_in: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for p in &producer_logs {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        for l in lines(p) {
            let id = l.parse::<u64>().unwrap_or_else(|e| panic!("producer log line {l:?} in {name}: {e}"));
            pushed.push(id);
            logged_in.entry(id).or_default().push(name.clone());
        }
    }
    let twice: Vec<_> = logged_in.iter().filter(|(_, f)| f.len() > 1).take(10).collect();
    assert!(
        twice.is_empty(),
        "ids logged as pushed more than once (id, logs): {twice:?}; producer logs {producer_logs:?}"
    );
    let mut runs: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for w in &worker_logs {
        for l in lines(w) {
            let (id, attempts) = l.split_once(' ').expect("worker log line");
            runs.entry(id.parse().expect("id")).or_default().push(attempts.parse().expect("attempts"));
        }
    }
    let lost: Vec<_> = pushed.iter().filter(|id| !runs.contains_key(id)).take(20).collect();
    assert!(lost.is_empty(), "pushed ids never run (lost): {lost:?}");
    let pushed_set: std::collections::BTreeSet<u64> = pushed.iter().copied().collect();
    assert_eq!(pushed_set.len(), pushed.len(), "an id logged as pushed twice");
    let unlogged = runs.keys().filter(|id| !pushed_set.contains(id)).count() as u64;
    assert!(
        unlogged <= producer_kills,
        "{unlogged} ids run whose push was never logged, with only {producer_kills} producer kills"
    );
    let mut duplicates = 0u64;
    let mut max_runs = 1;
    for (id, attempts) in &runs {
        if attempts.len() > 1 {
            duplicates += attempts.len() as u64 - 1;
            max_runs = max_runs.max(attempts.len());
            let mut a = attempts.clone();
            a.sort_unstable();
            a.dedup();
            assert_eq!(
                a.len(),
                attempts.len(),
                "job {id} run twice at the same attempt {attempts:?} (run twice at once?)"
            );
        }
    }
    assert!(
        duplicates <= worker_kills * BATCH as u64,
        "{duplicates} re-runs, more than {worker_kills} worker kills x {BATCH} jobs each could cause"
    );
    let overlaps = overlapping_runs(&worker_logs, &killed_at);
    assert!(
        overlaps.is_empty(),
        "{} overlapping runs of one job: {:?}",
        overlaps.len(),
        &overlaps[..overlaps.len().min(10)]
    );
    let s = c.stats(None).expect("stats");
    assert_eq!(s.records.free, RECORDS, "every record free at the end: {:?}", s.records);
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("attach");
    let report = xtcq_shm::check::check_segment(&seg, true);
    assert!(report.is_consistent(), "check_segment: {:#?}", report.problems);

    // Time to recover: from the kill to the daemon's log of the re-queue.
    let per_daemon: Vec<BTreeMap<u32, u64>> = daemons.iter().map(|d| recoveries(&d.log_text())).collect();
    let mut same = Vec::new();
    let mut on_adopt = 0;
    for k in &kills {
        if let Some(done) = per_daemon[k.daemon].get(&k.pid) {
            same.push(done.saturating_sub(k.at_ns) as f64 / 1e6);
        } else if per_daemon[k.daemon + 1..].iter().any(|m| m.contains_key(&k.pid)) {
            on_adopt += 1;
        }
    }
    same.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let restarts: Vec<String> =
        daemon_restarts.iter().map(|t| format!("{:.0} ms", t.as_secs_f64() * 1e3)).collect();
    let figures = format!(
        "soak figures:\n\
         \x20 jobs pushed (logged)         {}\n\
         \x20 jobs run (distinct ids)      {}\n\
         \x20 pushed, unlogged (killed between push and log) {unlogged}\n\
         \x20 kills survived               workers {worker_kills}, producer {producer_kills}, daemon {}\n\
         \x20 overlapping runs of one job  0\n\
         \x20 re-runs (duplicates)         {duplicates} (bound {} = worker kills x batch {BATCH}); most runs of one job {max_runs}\n\
         \x20 kill -> re-queued (ms)       p50 {:.2}, p90 {:.2}, max {:.2} over {} recoveries by the running daemon; {on_adopt} recovered by the next daemon on adopt\n\
         \x20 daemon restart (kill -> ready) {}\n\
         \x20 time                         {:.1} s under fire, {:.1} s in all; seed {seed}\n\
         \x20 check_segment                consistent; every record free",
        pushed.len(),
        runs.len(),
        daemon_restarts.len(),
        worker_kills * BATCH as u64,
        percentile(&same, 0.5),
        percentile(&same, 0.9),
        same.last().copied().unwrap_or(f64::NAN),
        same.len(),
        restarts.join(", "),
        under_fire.as_secs_f64(),
        elapsed.as_secs_f64(),
    );
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
    std::fs::write(run_log(&a), "S 7 100\nE 7 150\nS 8 160\n").expect("write");
    std::fs::write(run_log(&b), "S 8 300\nE 8 310\n").expect("write");
    let mut killed = BTreeMap::new();
    killed.insert(a.clone(), 200);
    assert!(overlapping_runs(&[a.clone(), b.clone()], &killed).is_empty(), "cut at 200, re-run at 300");
    killed.insert(a.clone(), 400);
    assert_eq!(overlapping_runs(&[a, b], &killed).len(), 1, "cut at 400, re-run at 300: overlap");
}
