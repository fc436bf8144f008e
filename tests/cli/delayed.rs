//! Delayed jobs and retry backoff, with a real xtcqd and real `xtcq` processes: `push
//! --delay / --at` holds a job back from every consumer until due; `work` retries a failed
//! job after the queue's backoff and dead-letters it at the limit; waiting on many delayed
//! jobs costs no CPU; a delayed job outlives a daemon `kill -9` and a pusher that died before
//! it told the daemon. Only lower bounds on time are asserted; upper ones are deadlines.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use xtcq_testkit::*;

fn create(d: &Daemon, args: &[&str]) {
    let mut a = vec!["create"];
    a.extend_from_slice(args);
    ok(&d.run(&a));
}

/// Starts `xtcq steal q --wait` in the background.
fn waiting_steal(d: &Daemon, queue: &str, timeout: &str) -> std::process::Child {
    d.xtcq()
        .args(["steal", queue, "--wait", "--timeout", timeout])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn steal")
}

#[test]
fn a_delayed_job_is_not_stolen_before_it_is_due() {
    let d = Daemon::start();
    create(&d, &["q"]);
    let t0 = Instant::now();
    ok(&d.run(&["push", "q", "--delay", "1500ms", "later"]));
    // Not there yet for a steal that does not wait.
    let o = d.run(&["steal", "q"]);
    assert_eq!(stdout(&o), "", "stolen early: {}", stderr(&o));
    let s = waiting_steal(&d, "q", "30s");
    let o = wait_bounded(s, Duration::from_secs(40), "steal --wait");
    assert_eq!(ok(&o), "later\n");
    assert!(t0.elapsed() >= Duration::from_millis(1500), "received after {:?}", t0.elapsed());
}

#[test]
fn push_at_takes_rfc3339_and_unix_seconds_and_refuses_other_forms() {
    let d = Daemon::start();
    create(&d, &["q"]);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let at = format!("@{}", now + 2);
    let t0 = SystemTime::now();
    ok(&d.run(&["push", "q", "--at", &at, "unix"]));
    ok(&d.run(&["push", "q", "--at", "2001-02-03T04:05:06Z", "past"]));
    let o = wait_bounded(waiting_steal(&d, "q", "30s"), Duration::from_secs(40), "steal");
    assert_eq!(ok(&o), "past\n");
    let o = wait_bounded(waiting_steal(&d, "q", "30s"), Duration::from_secs(40), "steal");
    assert_eq!(ok(&o), "unix\n");
    let due = UNIX_EPOCH + Duration::from_secs(now + 2);
    assert!(SystemTime::now() >= due, "received before its time ({:?} after the push)", t0.elapsed());
    for bad in ["tomorrow", "2030-01-02 03:04:05", "@-5", "@12x"] {
        let o = d.run(&["push", "q", "--at", bad, "x"]);
        assert_eq!(code(&o), 2, "--at {bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("RFC 3339") || stderr(&o).contains("@"), "{}", stderr(&o));
    }
}

#[test]
fn work_retries_a_failing_job_after_its_backoff_then_dead_letters_it() {
    let d = Daemon::start();
    create(&d, &["q", "--max-attempts", "3", "--retry-backoff", "400ms", "--retry-jitter", "none"]);
    let ls = ok(&d.run(&["ls"]));
    assert!(ls.contains("400ms..5m no jitter"), "{ls}");
    let stats = ok(&d.run(&["stats", "q"]));
    assert!(stats.contains("retry backoff: 400ms..5m no jitter"), "{stats}");
    ok(&d.run(&["push", "q", "job"]));
    let log = d.dir().join("runs");
    let script = format!("date +%s%N >> {}; exit 1", log.display());
    let o = run_bounded(d.xtcq().args(["work", "q", "--idle-exit", "3s", "--", "sh", "-c", &script]), None);
    let runs: Vec<u128> =
        std::fs::read_to_string(&log).expect("runs").lines().map(|l| l.trim().parse().expect("ns")).collect();
    assert_eq!(runs.len(), 3, "runs {runs:?}; work said {}", stderr(&o));
    // Retry n waits 400ms * 2^(n-1) after failure n, which came after run n started.
    for (n, want_ms) in [(1, 400u128), (2, 800)] {
        let gap_ms = (runs[n] - runs[n - 1]) / 1_000_000;
        assert!(
            gap_ms >= want_ms,
            "retry {n} came {gap_ms} ms after run {n}, before its {want_ms} ms backoff"
        );
    }
    let st = d.stats();
    assert_eq!(st["queues"][0]["records"]["dead"], 1, "{st}");
    assert_eq!(st["queues"][0]["info"]["retry_backoff"]["base_ms"], 400, "{st}");
}

#[test]
fn create_refuses_a_backoff_it_cannot_use() {
    let d = Daemon::start();
    let o = d.run(&["create", "q", "--retry-backoff", "2s", "--retry-backoff-max", "1s"]);
    assert_ne!(code(&o), 0);
    assert!(stderr(&o).contains("below its base"), "{}", stderr(&o));
    let o = d.run(&["create", "q", "--retry-backoff-max", "1s"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command name (which may hold spaces), which ends at the last ')'.
    let rest = &s[s.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

fn ticks_per_second() -> u64 {
    let o = Command::new("getconf").arg("CLK_TCK").output().expect("getconf");
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or(100)
}

#[test]
fn waiting_on_100000_delayed_jobs_costs_no_cpu() {
    // The daemon's periodic scan (stray sweep, lease expiry) walks every record each
    // interval whatever their state: at 131,072 records in a debug build that alone is
    // ~0.16 s of CPU a second at the default 100ms, so it runs every 2s here, and what is
    // measured is what waiting on delayed jobs costs.
    let mut flags: Vec<&str> = SMALL_SEGMENT
        .iter()
        .map(|f| match *f {
            "4096" => "131072",
            f => f,
        })
        .collect();
    flags.extend(["--lease-scan-interval", "2s"]);
    let d = Daemon::start_with(&flags);
    create(&d, &["q"]);
    let input: String = (0..100_000).map(|i| format!("{i}\n")).collect();
    ok(&d.run_in(&["push", "q", "--delay", "10m"], input.as_bytes()));
    assert_eq!(d.stats()["queues"][0]["records"]["delayed"], 100_000);
    let steal = waiting_steal(&d, "q", "60s");
    let (steal_pid, daemon_pid) = (steal.id(), d.child.as_ref().expect("daemon").id());
    // Let it attach and fall asleep.
    std::thread::sleep(Duration::from_millis(700));
    let before = (cpu_ticks(steal_pid), cpu_ticks(daemon_pid));
    std::thread::sleep(Duration::from_secs(2));
    let after = (cpu_ticks(steal_pid), cpu_ticks(daemon_pid));
    let hz = ticks_per_second() as f64;
    let (c, dm) = ((after.0 - before.0) as f64 / hz, (after.1 - before.1) as f64 / hz);
    let _ = Command::new("kill").args(["-9", &steal_pid.to_string()]).status();
    let o = wait_bounded(steal, Duration::from_secs(10), "steal");
    assert_eq!(stdout(&o), "", "a job was handed out early");
    eprintln!("CPU over 2 s asleep: consumer {c} s, daemon {dm} s");
    // A spin detector, not a timing test: a poller burns the whole 2 s.
    assert!(c < 0.2, "the sleeping consumer used {c} s of CPU in 2 s");
    assert!(dm < 0.2, "the daemon used {dm} s of CPU in 2 s");
}

#[test]
fn a_delayed_job_and_the_retry_backoff_survive_a_daemon_kill_9() {
    let mut d = Daemon::start();
    create(&d, &["q", "--retry-backoff", "2s", "--retry-jitter", "full"]);
    let t0 = Instant::now();
    ok(&d.run(&["push", "q", "--delay", "1500ms", "kept"]));
    d.kill();
    d.restart_with(SMALL_SEGMENT, |_| {});
    let ls = ok(&d.run(&["ls"]));
    assert!(ls.contains("2s..5m full jitter"), "the backoff was not kept: {ls}");
    let o = wait_bounded(waiting_steal(&d, "q", "30s"), Duration::from_secs(40), "steal");
    assert_eq!(ok(&o), "kept\n");
    assert!(t0.elapsed() >= Duration::from_millis(1500));
}

#[test]
fn a_delayed_job_the_daemon_was_not_told_of_is_found_when_a_process_exits() {
    // What a pusher killed between writing the job and telling the daemon leaves: a Delayed
    // record nobody announced, written here straight into the segment.
    let d = Daemon::start();
    create(&d, &["q"]);
    create(&d, &["other"]);
    let seg = Arc::new(xtcq_shm::Segment::attach(&d.segment).expect("attach"));
    let q = seg.queue_by_name("q").expect("queue");
    let me = seg.config().process_slots - 1; // a slot no one holds, used for an instant
    let inj = xtcq_shm::Injector::new(seg.clone(), &q, me).expect("injector");
    let t0 = Instant::now();
    inj.push_delayed(b"orphan", xtcq_shm::segment::monotonic_ns() + 1_000_000_000).expect("push");
    drop(inj);
    let s = waiting_steal(&d, "q", "30s");
    // Any registered process that exits makes the daemon look.
    ok(&d.run(&["push", "other", "x"]));
    let o = wait_bounded(s, Duration::from_secs(40), "steal");
    assert_eq!(ok(&o), "orphan\n", "daemon log: {}", d.log_text());
    assert!(t0.elapsed() >= Duration::from_secs(1));
    let check = d.run(&["check"]);
    assert_eq!(code(&check), 0, "{} {}", stdout(&check), stderr(&check));
}

#[test]
fn check_accepts_a_waiting_delayed_job_and_delete_force_drops_it() {
    let d = Daemon::start();
    create(&d, &["q"]);
    ok(&d.run(&["push", "q", "--delay", "10m", "a", "b"]));
    let o = d.run(&["check"]);
    assert_eq!(code(&o), 0, "{} {}", stdout(&o), stderr(&o));
    assert_eq!(d.stats()["queues"][0]["records"]["delayed"], 2);
    // Waiting jobs are jobs: a plain delete refuses, --force drops them.
    let o = d.run(&["delete", "q"]);
    assert_ne!(code(&o), 0, "{}", stderr(&o));
    let o = d.run(&["delete", "q", "--force"]);
    ok(&o);
    assert!(stderr(&o).contains("dropping 2 queued"), "{}", stderr(&o));
    let o = d.run(&["check"]);
    assert_eq!(code(&o), 0, "{} {}", stdout(&o), stderr(&o));
}
