//! Red team: the counters of the counter blocks seen through the real daemon. What
//! `stats --json` and `/metrics` say must be the jobs really run, whatever the client's
//! threads, clones and owned jobs do, after a worker is killed -9 holding jobs and the
//! daemon is killed -9 and restarted on the segment; garbage in the lanes crashes no reader.
//!
//! - The worker is this test binary run again (`lane_worker_child`, a no-op unless its
//!   environment names a socket): a real process with a real slot, killed while it holds
//!   claims and sleeps, so that no claim or ack is half counted when it dies (a kill between
//!   a claim's CAS and its count is a window the lanes neither open nor close).
//! - Every wait has a deadline.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use xtcq_testkit::*;

fn flags() -> Vec<&'static str> {
    let mut f = SMALL_SEGMENT.to_vec();
    f.extend(METRICS_ON_ANY_PORT);
    f
}

/// The value of the sample `name{queue="q"}` in a scrape.
fn sample(body: &str, name: &str, queue: &str) -> u64 {
    let key = format!("{name}{{queue=\"{queue}\"}} ");
    let line = body.lines().find(|l| l.starts_with(&key)).unwrap_or_else(|| panic!("no {key} in {body}"));
    line[key.len()..].parse::<f64>().expect("a number") as u64
}

/// `stats --json`'s totals of `queue`.
fn totals(d: &Daemon, queue: &str) -> serde_json::Value {
    let s = d.stats();
    let q = s["queues"].as_array().unwrap().iter().find(|q| q["info"]["name"] == queue).expect("queue");
    q["metrics"].clone()
}

fn counts(d: &Daemon, queue: &str) -> [u64; 4] {
    let m = totals(d, queue);
    ["pushed", "claimed", "acked", "recovered"].map(|k| m[k].as_u64().unwrap_or_else(|| panic!("{k} in {m}")))
}

/// Pushes until one succeeds (records may all be in use for a moment).
fn push_retry(push: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !push() {
        assert!(Instant::now() < deadline, "no room for a push within 60 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}

const CLIENT_JOBS: u64 = 6_000;

/// One client process: an injector on one thread, an owner moved between threads, a thief
/// and its clone shared by three threads, a third of the jobs acked as owned jobs on a
/// fourth, a third as borrowed jobs on a fifth. `stats --json` and `/metrics` then say
/// exactly the jobs run.
#[test]
fn a_client_used_from_many_threads_is_counted_exactly() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q"]));
    let client = d.client();
    let injector = client.attach_injector("q").unwrap();
    let mut owner = client.attach_owner("q").unwrap();
    let thief = client.attach_thief("q").unwrap();
    let clone = thief.clone();
    let acked = AtomicU64::new(0);
    let claimed = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(move || {
            (0..CLIENT_JOBS / 2).for_each(|_| push_retry(|| injector.push(b"i").is_ok()));
        });
        let (owned_tx, owned_rx) = mpsc::channel::<xtcq_client::OwnedJob>();
        let (borrowed_tx, borrowed_rx) = mpsc::channel();
        let acked = &acked;
        s.spawn(move || {
            for j in owned_rx {
                j.ack().unwrap();
                acked.fetch_add(1, Ordering::Relaxed);
            }
        });
        s.spawn(move || {
            for j in borrowed_rx {
                xtcq_client::Job::ack(j).unwrap();
                acked.fetch_add(1, Ordering::Relaxed);
            }
        });
        let claimed = &claimed;
        for (k, t) in [&thief, &thief, &clone].into_iter().enumerate() {
            let (owned_tx, borrowed_tx) = (owned_tx.clone(), borrowed_tx.clone());
            s.spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                while claimed.load(Ordering::Relaxed) < CLIENT_JOBS {
                    assert!(Instant::now() < deadline, "jobs left after 60 s");
                    let Some(j) = t.steal().unwrap() else {
                        std::thread::yield_now();
                        continue;
                    };
                    match (claimed.fetch_add(1, Ordering::Relaxed) + k as u64) % 3 {
                        0 => owned_tx.send(j.into_owned()).unwrap(),
                        1 => borrowed_tx.send(j).unwrap(),
                        _ => {
                            j.ack().unwrap();
                            acked.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        // The owner pushes a quarter on one thread, then the last quarter on another.
        for _ in 0..2 {
            owner = s
                .spawn(move || {
                    (0..CLIENT_JOBS / 4).for_each(|_| push_retry(|| owner.push(b"o").is_ok()));
                    owner
                })
                .join()
                .unwrap();
        }
    });
    assert_eq!(acked.into_inner(), CLIENT_JOBS);
    let n = CLIENT_JOBS;
    assert_eq!(counts(&d, "q"), [n, n, n, 0]);
    let body = scrape_metrics(&d.metrics_addr());
    for (name, want) in
        [("xtcq_jobs_pushed_total", n), ("xtcq_jobs_claimed_total", n), ("xtcq_jobs_acked_total", n)]
    {
        assert_eq!(sample(&body, name, "q"), want, "{name}");
    }
}

const WORKER_ACKS: u64 = 3_000;
const WORKER_HELD: u64 = 3;

/// The worker of [`a_killed_worker_and_a_restarted_daemon_keep_the_totals_exact`]: three
/// threads share one thief and ack `WORKER_ACKS` jobs, then the main thread claims
/// `WORKER_HELD` more, says so in the file `$RED8_READY`, and sleeps until killed.
/// With `$RED8_STREAM` set it instead steals and acks on three threads until killed.
#[test]
fn lane_worker_child() {
    let Some(socket) = std::env::var_os("RED8_SOCKET") else { return };
    let client = xtcq_client::Client::connect(Some(socket.as_ref())).unwrap();
    let thief = client.attach_thief("q").unwrap();
    if std::env::var_os("RED8_STREAM").is_some() {
        return stream_until_orphaned(&thief);
    }
    let acked = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                // Each ack is reserved before its steal: exactly WORKER_ACKS claims.
                while acked.fetch_add(1, Ordering::Relaxed) < WORKER_ACKS {
                    loop {
                        if let Some(j) = thief.steal().unwrap() {
                            j.ack().unwrap();
                            break;
                        }
                    }
                }
            });
        }
    });
    let held: Vec<_> = (0..WORKER_HELD).map(|_| thief.steal().unwrap().expect("a job to hold")).collect();
    std::fs::write(std::env::var_os("RED8_READY").unwrap(), b"ready").unwrap();
    // Until killed; or, should the test have died first, until orphaned (at most 2 min).
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline && unsafe { libc::getppid() } == parent {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(held);
}

/// Three threads steal and ack until this process is killed (or orphaned: at most 2 min).
fn stream_until_orphaned(thief: &xtcq_client::ThiefHandle) {
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    let deadline = Instant::now() + Duration::from_secs(120);
    std::thread::scope(|s| {
        for _ in 0..STREAM_THREADS {
            s.spawn(|| {
                while Instant::now() < deadline && unsafe { libc::getppid() } == parent {
                    match thief.steal().unwrap() {
                        Some(j) => {
                            // Held a moment, so that the kill likely finds claims in hand.
                            assert_eq!(j.payload().unwrap(), b"s");
                            std::thread::yield_now();
                            j.ack().unwrap();
                        }
                        None => std::thread::yield_now(),
                    }
                }
            });
        }
    });
}

const STREAM_THREADS: u64 = 3;

/// A worker killed -9 in the middle of its stream (its three threads stealing and acking
/// as fast as they can), the rest drained by a new process: every count the dead worker
/// made stays in its slot's lanes. A claim or ack whose CAS was done when the kill came
/// may miss its count (one per thread at most, as before the lanes), so the claimed and
/// acked totals are checked within that; the rest is exact.
#[test]
fn a_worker_killed_mid_stream_keeps_its_counts() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q"]));
    let client = d.client();
    let injector = client.attach_injector("q").unwrap();
    let ready = d.dir().join("unused");
    let mut worker = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &test_name(module_path!(), "lane_worker_child"), "--nocapture", "--test-threads=1"])
        .env("RED8_SOCKET", &d.socket)
        .env("RED8_READY", &ready)
        .env("RED8_STREAM", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Pushes go on until the worker is dead, so that it dies with work in flight.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let jobs = std::thread::scope(|s| {
        let stop = &stop;
        let pusher = s.spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match injector.push(b"s") {
                    Ok(_) => n += 1,
                    Err(_) => std::thread::yield_now(),
                }
            }
            n
        });
        wait_until(Duration::from_secs(60), "the worker to ack 5,000 jobs", || counts(&d, "q")[2] >= 5_000);
        worker.kill().unwrap();
        worker.wait().unwrap();
        stop.store(true, Ordering::Relaxed);
        pusher.join().unwrap()
    });
    let before = counts(&d, "q");
    wait_until(Duration::from_secs(30), "the daemon to recover what the worker held", || {
        totals(&d, "q")["running"] == 0
    });
    let recovered = counts(&d, "q")[3];
    let drained = d.drain("q").len() as u64;
    let [pushed, claimed, acked, rec] = counts(&d, "q");
    assert_eq!((pushed, rec), (jobs, recovered));
    // Every job was acked once in fact: by the worker (before[2] counted, at most
    // STREAM_THREADS acks uncounted) or by the drain.
    assert!(acked <= jobs && acked + STREAM_THREADS >= jobs, "acked {acked} of {jobs}");
    assert_eq!(acked, before[2] + drained, "the drain's acks add to the worker's");
    // Claims in fact: the jobs + the recovered ones (each claimed twice).
    assert!(
        claimed <= jobs + rec && claimed + STREAM_THREADS >= jobs + rec,
        "claimed {claimed}, jobs {jobs}, recovered {rec}"
    );
}

/// A worker process killed -9 while it holds claims, then the daemon killed -9 and
/// restarted on the segment (it recovers the dead worker's jobs), while this process's
/// injector pushes before and after: the totals are the jobs run, no more, no less.
#[test]
fn a_killed_worker_and_a_restarted_daemon_keep_the_totals_exact() {
    let mut d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q"]));
    let client = d.client();
    let injector = client.attach_injector("q").unwrap();
    const FIRST: u64 = WORKER_ACKS + 1_000;
    for _ in 0..FIRST {
        push_retry(|| injector.push(b"a").is_ok());
    }
    let ready = d.dir().join("worker-ready");
    let mut worker = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &test_name(module_path!(), "lane_worker_child"), "--nocapture", "--test-threads=1"])
        .env("RED8_SOCKET", &d.socket)
        .env("RED8_READY", &ready)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(60), "the worker to ack its jobs and hold some", || ready.exists());
    let before = counts(&d, "q");
    assert_eq!(
        before,
        [FIRST, WORKER_ACKS + WORKER_HELD, WORKER_ACKS, 0],
        "pushed, claimed, acked, recovered"
    );
    worker.kill().unwrap();
    worker.wait().unwrap();
    d.kill();
    d.restart_with(&flags(), |_| {});
    wait_until(Duration::from_secs(30), "the restarted daemon to recover the held jobs", || {
        counts(&d, "q")[3] == WORKER_HELD
    });
    // This process's injector goes on counting in its slot's lane after the restart.
    const MORE: u64 = 500;
    for _ in 0..MORE {
        push_retry(|| injector.push(b"b").is_ok());
    }
    let left = (FIRST + MORE - WORKER_ACKS) as usize;
    assert_eq!(d.drain("q").len(), left);
    let pushed = FIRST + MORE;
    assert_eq!(counts(&d, "q"), [pushed, pushed + WORKER_HELD, pushed, WORKER_HELD]);
    let body = scrape_metrics(&d.metrics_addr());
    assert_eq!(sample(&body, "xtcq_jobs_acked_total", "q"), pushed);
}

/// Garbage a hostile attached process writes into the counters (u64::MAX, alternating
/// bits, a value that wraps on the next count): `stats`, `stats --json`, `stats --watch`
/// and `/metrics` answer, the job path goes on, and a delete and re-create reads zero.
/// (The new queue's totals then stay frozen at zero: garbage saturates the slots' sums.)
#[test]
fn garbage_in_the_counters_crashes_no_reader() {
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "a"]));
    let addr = d.metrics_addr();
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("attach");
    let q = seg.queue_by_name("q").unwrap();
    for fill in [u64::MAX, 0xAAAA_AAAA_AAAA_AAAA, u64::MAX - 1] {
        for b in seg.metrics_blocks(q.index).unwrap() {
            for c in &b.counters {
                c.store(fill, Ordering::Relaxed);
            }
        }
        ok(&d.run(&["stats"]));
        ok(&d.run(&["stats", "--json"]));
        ok(&d.run(&["stats", "q"]));
        scrape_metrics(&addr);
        ok(&d.run(&["push", "q", "b", "c"]));
        ok(&d.run(&["steal", "q", "-n", "2"]));
    }
    let script = format!(
        "{} --socket {} stats --watch --interval 50ms | head -n 4",
        xtcq_exe().display(),
        d.socket.display()
    );
    ok(&run_bounded(Command::new("sh").args(["-c", &script]), None));
    ok(&d.run(&["delete", "q", "--force"]));
    ok(&d.run(&["create", "q"]));
    assert_eq!(counts(&d, "q"), [0; 4], "a re-created queue starts from zero");
    ok(&d.run(&["push", "q", "x"]));
    ok(&d.run(&["steal", "q", "-n", "1"]));
    // Wrong figures, as documented: the slots' lanes still hold the garbage (only their own
    // process writes them), so the saturated sum minus the saturated baseline stays 0.
    ok(&d.run(&["stats", "--json"]));
    scrape_metrics(&addr);
}

/// `xtcq top` (under tmux, skipped without it) while the counters go from small values
/// to garbage and back to zero between its refreshes: its rates saturate, it keeps drawing,
/// and quits on `q` with status 0.
#[test]
fn top_draws_through_garbage_in_the_counters() {
    if !Tmux::installed() {
        return;
    }
    let d = Daemon::start_with(&flags());
    ok(&d.run(&["create", "lanesq"]));
    ok(&d.run(&["push", "lanesq", "a", "b"]));
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("attach");
    let q = seg.queue_by_name("lanesq").unwrap();
    let t = Tmux::top(&d, "red8top");
    let mut screen = String::new();
    wait_until(Duration::from_secs(30), "top to draw the queue", || {
        screen = t.capture();
        screen.contains("lanesq")
    });
    for fill in [u64::MAX, 0, u64::MAX - 7, 0] {
        for b in seg.metrics_blocks(q.index).unwrap() {
            for c in &b.counters {
                c.store(fill, Ordering::Relaxed);
            }
        }
        // Each value on screen for a refresh or two.
        std::thread::sleep(Duration::from_millis(500));
    }
    screen = t.capture();
    assert!(screen.contains("PUSH/s"), "top stopped drawing: {screen}");
    t.keys(&["q"]);
    wait_until(Duration::from_secs(30), "top to quit", || {
        screen = t.capture();
        screen.contains("TOP-EXITED")
    });
    assert!(screen.contains("TOP-EXITED 0"), "{screen}");
}
