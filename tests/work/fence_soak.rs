//! The fence under fire: `xtcq work` processes whose commands run for tens of milliseconds,
//! while workers are `kill -9`ed, stopped (SIGSTOP) past their lease and resumed, and the
//! daemon itself is `kill -9`ed and restarted, each time with one worker killed and another
//! stopped while it is down. Every command logs its start, heartbeats and
//! end with CLOCK_MONOTONIC timestamps; the test fails if a line of one run of a job comes
//! after the start of a later run, if two processes ran one attempt, or if a job never ran
//! to its end. Knobs: `XTCQ_FENCE_SOAK_JOBS` (300), `XTCQ_FENCE_SOAK_SEED`.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use xtcq_testkit::runs::*;
use xtcq_testkit::*;

const ROLE: &str = "XTCQ_FENCE_SOAK_LOG";
/// How long each command runs, heartbeating every 2 ms; the first attempt of every 20th job
/// runs `LONG_RUN`, so that some outlive a daemon's downtime and the wait for a free worker.
const RUN: Duration = Duration::from_millis(30);
const LONG_RUN: Duration = Duration::from_secs(3);
const LEASE: &str = "150ms";
const WORKERS: usize = 3;
const DAEMON_KILLS: usize = 5;

/// The command: `start`, a heartbeat every 2 ms for `RUN` (or `LONG_RUN`), `end`.
#[test]
fn soak_command_main() {
    let Ok(log) = std::env::var(ROLE) else { return };
    let job = std::env::var("XTCQ_PAYLOAD").unwrap_or_default();
    let attempt: u32 = std::env::var("XTCQ_ATTEMPT").ok().and_then(|a| a.parse().ok()).unwrap_or(0);
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log");
    log_line(&mut f, "start", &job, attempt);
    let long = attempt == 0 && job.trim_start_matches('j').parse::<u32>().is_ok_and(|i| i % 20 == 0);
    let run = if long { LONG_RUN } else { RUN };
    let t0 = Instant::now();
    while t0.elapsed() < run {
        std::thread::sleep(Duration::from_millis(2));
        log_line(&mut f, "alive", &job, attempt);
    }
    log_line(&mut f, "end", &job, attempt);
    std::process::exit(0);
}

/// xorshift64*: enough to pick victims, reproducible from the printed seed.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn worker(d: &Daemon, log: &std::path::Path) -> Child {
    let exe = std::env::current_exe().expect("exe");
    // A grandchild in the command's group (`sh` waits for it), as real scripts have.
    let script = format!(
        "'{}' --exact {} --nocapture --test-threads 1 >/dev/null 2>&1 & wait",
        exe.display(),
        test_name(module_path!(), "soak_command_main")
    );
    d.xtcq()
        .args(["work", "q", "-j", "3", "--", "sh", "-c", &script])
        .env(ROLE, log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn work")
}

fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// Jobs that logged an `end`.
fn ended(log: &std::path::Path) -> std::collections::BTreeSet<String> {
    lines(log).into_iter().filter(|l| l.what == "end").map(|l| l.job).collect()
}

#[test]
fn no_job_runs_twice_at_once_while_workers_and_the_daemon_are_killed() {
    let jobs: usize = std::env::var("XTCQ_FENCE_SOAK_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let seed = std::env::var("XTCQ_FENCE_SOAK_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
            | 1
    });
    eprintln!("fence soak: {jobs} jobs, seed {seed}");
    let mut dice = Dice(seed);
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--lease-scan-interval", "10ms"]);
    let mut d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "q", "--lease", LEASE, "--max-attempts", "1000"]));
    let payloads: String = (0..jobs).map(|i| format!("j{i}\n")).collect();
    ok(&d.run_in(&["push", "q"], payloads.as_bytes()));
    let log = d.dir().join("runs");
    let mut workers: Vec<Child> = (0..WORKERS).map(|_| worker(&d, &log)).collect();
    let (mut killed, mut stopped, mut daemon_kills) = (0, 0, 0);
    let deadline = Instant::now() + Duration::from_secs(240);
    while ended(&log).len() < jobs {
        assert!(Instant::now() < deadline, "not every job ended in 240 s\n{}", d.log_text());
        std::thread::sleep(Duration::from_millis(100 + dice.below(200)));
        let done = ended(&log).len();
        match dice.below(10) {
            // A daemon kill at each sixth of the jobs; while it is down, one worker is killed
            // and another stopped, so neither can register its commands again with the
            // next daemon, which must know them from the state file.
            _ if daemon_kills < DAEMON_KILLS && done * (DAEMON_KILLS + 1) > jobs * (daemon_kills + 1) => {
                d.kill();
                let victim = dice.below(WORKERS as u64) as usize;
                let sleeper = (victim + 1) % WORKERS;
                let _ = workers[victim].kill();
                let _ = workers[victim].wait();
                signal(workers[sleeper].id(), "-STOP");
                std::thread::sleep(Duration::from_millis(dice.below(300)));
                d.restart_with(&flags, |_| {});
                std::thread::sleep(Duration::from_millis(400));
                signal(workers[sleeper].id(), "-CONT");
                workers[victim] = worker(&d, &log);
                daemon_kills += 1;
                killed += 1;
                stopped += 1;
            }
            0..=3 => {
                let w = &mut workers[dice.below(WORKERS as u64) as usize];
                let _ = w.kill();
                let _ = w.wait();
                *w = worker(&d, &log);
                killed += 1;
            }
            4..=5 => {
                // Past the lease: its jobs are taken back while it (and its commands, which
                // are not stopped) would go on.
                let w = &workers[dice.below(WORKERS as u64) as usize];
                signal(w.id(), "-STOP");
                std::thread::sleep(Duration::from_millis(400));
                signal(w.id(), "-CONT");
                stopped += 1;
            }
            _ => {}
        }
    }
    for w in &mut workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    let all = lines(&log);
    let bad = overlaps(&all);
    kill_logged(&all);
    let starts = all.iter().filter(|l| l.what == "start").count();
    eprintln!(
        "fence soak: {jobs} jobs ended; {starts} runs started; {killed} worker kills, {stopped} stops past \
         the lease, {daemon_kills} daemon kills; {} overlaps",
        bad.len()
    );
    assert!(
        bad.is_empty(),
        "{} overlapping runs, e.g. {:?}\n{}",
        bad.len(),
        &bad[..bad.len().min(5)],
        d.log_text()
    );
}
