//! Logs of job runs, for the tests that prove one job never runs twice at once: each command
//! writes `WHAT JOB ATTEMPT MONO_NS PID` lines (`start`, heartbeats, `end`) to one file, and
//! the checks read them back.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use xtcq_client::monotonic_ns;

/// Appends one line for this process to `log` (one write, so lines of concurrent processes
/// do not interleave).
pub fn log_line(log: &mut std::fs::File, what: &str, job: &str, attempt: u32) {
    let _ = log
        .write_all(format!("{what} {job} {attempt} {} {}\n", monotonic_ns(), std::process::id()).as_bytes());
}

/// The body of a fenced test's command role, run when environment variable `role` names a
/// log (else it returns: the ordinary test run): logs `start`, then on a job's first attempt
/// `alive` every 2 ms until it is killed, or on a later attempt `end` and exits.
pub fn heartbeat_role(role: &str) {
    let Ok(log) = std::env::var(role) else { return };
    let job = std::env::var("XTCQ_PAYLOAD").unwrap_or_default();
    let attempt: u32 = std::env::var("XTCQ_ATTEMPT").ok().and_then(|a| a.parse().ok()).unwrap_or(0);
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log");
    let mut line = |what: &str| log_line(&mut f, what, &job, attempt);
    line("start");
    if attempt == 0 {
        loop {
            std::thread::sleep(std::time::Duration::from_millis(2));
            line("alive");
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(5));
    line("end");
    std::process::exit(0);
}

pub struct Line {
    pub what: String,
    pub job: String,
    pub attempt: u32,
    pub ns: u64,
    pub pid: u32,
}

pub fn lines(log: &Path) -> Vec<Line> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Some(Line {
                what: f.first()?.to_string(),
                job: f.get(1)?.to_string(),
                attempt: f.get(2)?.parse().ok()?,
                ns: f.get(3)?.parse().ok()?,
                pid: f.get(4)?.parse().ok()?,
            })
        })
        .collect()
}

/// Runs of one job that overlap: a line of attempt a after the start of attempt b > a; and
/// two runs of one attempt (two processes started it), which the first check cannot see.
pub fn overlaps(all: &[Line]) -> Vec<String> {
    let mut runs: BTreeMap<(&str, u32), (u64, u64)> = BTreeMap::new();
    let mut starters: BTreeMap<(&str, u32), Vec<u32>> = BTreeMap::new();
    for l in all {
        let e = runs.entry((&l.job, l.attempt)).or_insert((u64::MAX, 0));
        if l.what == "start" {
            e.0 = e.0.min(l.ns);
            starters.entry((&l.job, l.attempt)).or_default().push(l.pid);
        }
        e.1 = e.1.max(l.ns);
    }
    let mut out = Vec::new();
    for (&(job, a), &(_, last)) in &runs {
        for (&(j2, b), &(start, _)) in runs.range((job, a + 1)..) {
            if j2 == job && b > a && last > start {
                out.push(format!(
                    "job {job}: attempt {a} still ran {} us after attempt {b} started",
                    (last - start) / 1000
                ));
            }
        }
    }
    for ((job, a), pids) in starters {
        if pids.len() > 1 {
            out.push(format!("job {job}: attempt {a} was started by {} processes {pids:?}", pids.len()));
        }
    }
    out
}

/// Kills every process that logged (the runs a missing fence left behind).
pub fn kill_logged(all: &[Line]) {
    for l in all {
        // SAFETY: kill has no memory preconditions; a pid that is gone already is ESRCH.
        unsafe { libc::kill(l.pid as i32, libc::SIGKILL) };
    }
}
