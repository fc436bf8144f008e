//! A queue's rate limit (`--max-rate N/s --burst B`), through real processes: starts across
//! every consumer stay within the bucket's bound (`B + elapsed / interval`) through a kill -9
//! of the daemon; a consumer out of tokens takes nothing and sleeps until the next is due,
//! also on a wake descriptor; `none` lifts the limit; bad values are refused naming the flag.

use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use xtcq_testkit::*;

/// Five seconds of starts at the limit; unlimited, the three workers below start these in
/// about 1.6 s on a loaded 2-core machine, so a limit not kept fails the bound.
const JOBS: usize = 1000;
/// 200 claims a second: 5 ms apart, and a burst of 5.
const RATE: &str = "200/s";
const INTERVAL: Duration = Duration::from_millis(5);
const BURST: usize = 5;

fn spawn_worker(d: &Daemon, done: &Path) -> Child {
    d.xtcq()
        .args(["work", "paced", "--jobs", "4", "--", "sh", "-c"])
        .arg(format!("echo \"$XTCQ_PAYLOAD\" >> {}", done.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn xtcq work")
}

fn distinct_lines(path: &Path) -> usize {
    let mut v: Vec<String> =
        std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect();
    v.sort();
    v.dedup();
    v.len()
}

#[test]
fn starts_across_consumers_stay_within_the_bucket_through_a_daemon_kill() {
    let mut d = Daemon::start();
    ok(&d.run(&["create", "paced", "--max-rate", RATE, "--burst", &BURST.to_string()]));
    let stats = ok(&d.run(&["stats", "paced"]));
    assert!(stats.contains("rate:     at most 200/s, burst 5"), "{stats}");
    let input: String = (0..JOBS).map(|i| format!("job-{i}\n")).collect();
    ok(&d.run_in(&["push", "paced"], input.as_bytes()));
    let done = d.dir().join("done");
    // Every claim happens after this instant (no consumer exists before it) ...
    let started = Instant::now();
    let mut workers: Vec<Child> = (0..3).map(|_| spawn_worker(&d, &done)).collect();
    wait_until(Duration::from_secs(120), "a first jobs done", || distinct_lines(&done) >= 200);
    let (early, early_elapsed) =
        (std::fs::read_to_string(&done).unwrap_or_default().lines().count(), started.elapsed());
    let allowed_early = BURST + (early_elapsed.as_nanos() / INTERVAL.as_nanos()) as usize + 1;
    assert!(
        early <= allowed_early,
        "{early} jobs started in {early_elapsed:?} under {RATE} (at most {allowed_early})"
    );
    d.kill();
    std::thread::sleep(Duration::from_millis(200));
    d.restart_with(SMALL_SEGMENT, |_| {});
    wait_until(Duration::from_secs(180), "every job done", || distinct_lines(&done) == JOBS);
    // ... and before this one: however slow the machine, no more than the bucket allows can
    // have started in between. (A fast run is the failure; a slow one passes.)
    let elapsed = started.elapsed();
    for mut w in workers.drain(..) {
        let _ = w.kill();
        let _ = w.wait();
    }
    let allowed = BURST + (elapsed.as_nanos() / INTERVAL.as_nanos()) as usize + 1;
    let claimed = std::fs::read_to_string(&done).unwrap_or_default().lines().count();
    assert!(
        claimed <= allowed,
        "{claimed} jobs started in {elapsed:?} under {RATE} with a burst of {BURST} (at most {allowed})\n{}",
        d.log_text()
    );
    let s = d.stats();
    let r = &s["queues"][0]["quota"]["max_rate"];
    assert_eq!((r["interval_ns"].as_u64(), r["burst"].as_u64()), (Some(5_000_000), Some(5)), "{s}");
}

#[test]
fn a_consumer_out_of_tokens_takes_nothing_until_the_next_is_due_or_the_limit_is_lifted() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--max-rate", "1/h", "--burst", "2"]));
    ok(&d.run_in(&["push", "q"], b"a\nb\nc\nd\n"));
    let c = d.client();
    let thief = c.attach_thief("q").expect("thief");
    thief.steal().expect("steal").expect("first of the burst").ack().expect("ack");
    thief.steal().expect("steal").expect("second of the burst").ack().expect("ack");
    assert!(thief.steal().expect("steal").is_none(), "a third job an hour early");
    assert!(
        thief.steal_wait(Some(Duration::from_millis(300))).expect("steal_wait").is_none(),
        "a waiting consumer took a job an hour early"
    );
    // A descriptor waiter is not made readable by a push while out of tokens ... (a
    // spurious readiness is allowed: it then finds nothing and arms again).
    let wake = thief.wake_fd().expect("wake fd");
    assert!(thief.steal_or_arm(&wake).expect("steal_or_arm").is_none());
    ok(&d.run_in(&["push", "q"], b"e\n"));
    if readable(&wake, 300) {
        assert!(thief.steal_or_arm(&wake).expect("steal_or_arm").is_none(), "taken an hour early");
    }
    // ... and lifting the limit wakes it, and every job left can be taken.
    let waiter = std::thread::spawn({
        let socket = d.socket.clone();
        move || {
            let c = xtcq_client::Client::connect(Some(&socket)).expect("connect");
            let t = c.attach_thief("q").expect("thief");
            let j = t.steal_wait(Some(Duration::from_secs(60))).expect("steal_wait");
            j.expect("a job once the limit is lifted").ack().expect("ack");
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished(), "a sleeping consumer took a job an hour early");
    let out = ok(&d.run(&["limits", "q", "--max-rate", "none"]));
    assert!(!out.contains("rate:"), "{out}");
    waiter.join().expect("the sleeper woke once the limit was lifted");
    assert!(readable(&wake, 10_000), "the descriptor waiter was not woken by the lift");
    let mut left = 0;
    while let Some(j) = thief.steal_or_arm(&wake).expect("steal_or_arm") {
        j.ack().expect("ack");
        left += 1;
    }
    assert_eq!(left, 2, "the jobs left after the sleeper took one");
}

#[test]
fn a_sleeper_out_of_tokens_wakes_when_the_next_is_due() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--max-rate", "2/s"]));
    ok(&d.run_in(&["push", "q"], b"a\nb\nc\n"));
    let c = d.client();
    let thief = c.attach_thief("q").expect("thief");
    thief.steal().expect("steal").expect("the burst of one").ack().expect("ack");
    // Nothing pushes or settles from here: only the token's time can end these waits.
    let j = thief.steal_wait(Some(Duration::from_secs(30))).expect("steal_wait");
    j.expect("the next token came without any event").ack().expect("ack");
    let wake = thief.wake_fd().expect("wake fd");
    let mut got = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.is_none() && Instant::now() < deadline {
        got = thief.steal_or_arm(&wake).expect("steal_or_arm");
        if got.is_none() {
            readable(&wake, 1_000);
        }
    }
    got.expect("the descriptor became readable when the next token was due").ack().expect("ack");
}

#[test]
fn bad_rates_are_refused_naming_the_flag() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    for bad in ["200", "0/s", "-5/s", "lots/s", "5/fortnight", "1/h/2", "0.001/h"] {
        let o = d.run(&["limits", "q", "--max-rate", bad]);
        assert_eq!(code(&o), 2, "--max-rate {bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("--max-rate"), "{}", stderr(&o));
    }
    for bad in ["0", "-1", "many"] {
        let o = d.run(&["limits", "q", "--max-rate", "5/s", "--burst", bad]);
        assert_eq!(code(&o), 2, "--burst {bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("--burst"), "{}", stderr(&o));
    }
    let o = d.run(&["limits", "q", "--burst", "3"]);
    assert_eq!(code(&o), 2, "--burst alone: {}", stderr(&o));
    assert!(stderr(&o).contains("--max-rate"), "{}", stderr(&o));
    // Over the wire too (a client that skips the CLI's checks).
    let c = d.client();
    let e = c
        .set_max_rate("q", xtcq_proto::RateLimit { interval_ns: 1_000_000, burst: 0 })
        .expect_err("a burst of 0");
    assert!(e.to_string().contains("--burst"), "{e}");
    let e = c
        .set_max_rate("q", xtcq_proto::RateLimit { interval_ns: u64::MAX, burst: 1 })
        .expect_err("slower than one a day");
    assert!(e.to_string().contains("--max-rate"), "{e}");
    assert!(
        ok(&d.run(&["limits", "q", "--max-rate", "30/min"])).contains("rate:     at most 30/min, burst 1")
    );
}

/// Whether `wake` becomes readable within `ms`.
fn readable(wake: &xtcq_client::WakeFd, ms: i32) -> bool {
    let fd = wake.as_fd();
    let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
    let t =
        rustix::time::Timespec { tv_sec: i64::from(ms / 1000), tv_nsec: i64::from(ms % 1000) * 1_000_000 };
    rustix::event::poll(&mut fds, Some(&t)).is_ok_and(|n| n > 0)
}

#[test]
fn the_rate_outlives_a_daemon_kill_and_an_export_and_import_and_shows_in_metrics() {
    let flags = [SMALL_SEGMENT, &METRICS_ON_ANY_PORT[..]].concat();
    let mut d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "r", "--max-rate", "30/min", "--burst", "2"]));
    ok(&d.run(&["create", "other"]));
    let m = scrape_metrics(&d.metrics_addr());
    assert!(m.contains("xtcq_queue_max_rate{queue=\"r\"} 0.5"), "{m}");
    assert!(m.contains("xtcq_queue_max_rate{queue=\"other\"} 0"), "{m}");
    d.kill();
    d.restart_with(&flags, |_| {});
    assert!(
        ok(&d.run(&["stats", "r"])).contains("rate:     at most 30/min, burst 2"),
        "kept across a kill -9"
    );
    let dump = d.dir().join("dump.jsonl");
    ok(&d.run(&["export", dump.to_str().expect("utf-8 path")]));
    let e = Daemon::start();
    ok(&e.run(&["import", dump.to_str().expect("utf-8 path")]));
    assert!(ok(&e.run(&["stats", "r"])).contains("rate:     at most 30/min, burst 2"), "imported");
    assert!(!ok(&e.run(&["stats", "other"])).contains("rate:"));
}
