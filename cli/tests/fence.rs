//! A job's command is dead before the job can run again: `xtcq work` `kill -9`ed mid-command,
//! or stopped (SIGSTOP) past its lease, then a second worker takes the job. Each command
//! (this test binary in a role, started by `sh` so that it is a grandchild in the command's
//! process group) logs its start and, while it runs, a heartbeat, with CLOCK_MONOTONIC
//! timestamps; the test fails if any line of one run of a job comes after the start of the
//! job's next run.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

const ROLE: &str = "XTCQ_FENCE_TEST_LOG";

fn mono_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The command: logs `start`, then (first attempt) a heartbeat every 2 ms forever, or
/// (later attempts) one more line and exits.
#[test]
fn child_main() {
    let Ok(log) = std::env::var(ROLE) else { return };
    let job = std::env::var("XTCQ_PAYLOAD").unwrap_or_default();
    let attempt: u32 = std::env::var("XTCQ_ATTEMPT").ok().and_then(|a| a.parse().ok()).unwrap_or(0);
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log");
    let mut line = |what: &str| {
        let _ =
            f.write_all(format!("{what} {job} {attempt} {} {}\n", mono_ns(), std::process::id()).as_bytes());
    };
    line("start");
    if attempt == 0 {
        loop {
            std::thread::sleep(Duration::from_millis(2));
            line("alive");
        }
    }
    std::thread::sleep(Duration::from_millis(5));
    line("end");
    std::process::exit(0);
}

struct Line {
    what: String,
    job: String,
    attempt: u32,
    ns: u64,
    pid: u32,
}

fn lines(log: &Path) -> Vec<Line> {
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

/// Runs of one job that overlap: a line of attempt a after the start of attempt b > a.
fn overlaps(all: &[Line]) -> Vec<String> {
    let mut runs: BTreeMap<(&str, u32), (u64, u64)> = BTreeMap::new();
    for l in all {
        let e = runs.entry((&l.job, l.attempt)).or_insert((u64::MAX, 0));
        if l.what == "start" {
            e.0 = e.0.min(l.ns);
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
    out
}

/// Kills every process that logged (the runs a missing fence left behind).
fn kill_logged(all: &[Line]) {
    for l in all {
        let _ = std::process::Command::new("kill").args(["-9", &l.pid.to_string()]).status();
    }
}

fn work(d: &Daemon, queue: &str, log: &Path, extra: &[&str]) -> Child {
    work_running(d, queue, log, extra, "{child} & wait")
}

/// `xtcq work` whose command is `sh -c SCRIPT`, where `{child}` in `script` stands for the
/// logging child (`child_main`).
fn work_running(d: &Daemon, queue: &str, log: &Path, extra: &[&str], script: &str) -> Child {
    let exe = std::env::current_exe().expect("exe");
    let child =
        format!("'{}' --exact child_main --nocapture --test-threads 1 >/dev/null 2>&1", exe.display());
    let script = script.replace("{child}", &child);
    d.xtcq()
        .args(["work", queue, "--max-jobs", "1"])
        .args(extra)
        .args(["--", "sh", "-c", &script])
        .env(ROLE, log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn work")
}

fn wait_line(log: &Path, what: &str, job: &str, attempt: u32) {
    wait_until(Duration::from_secs(30), &format!("{what} of job {job} attempt {attempt}"), || {
        lines(log).iter().any(|l| l.what == what && l.job == job && l.attempt == attempt)
    });
}

/// One round: a first worker starts the job's command, is disabled by `disable`, a second
/// worker runs the job again to its end.
fn round(d: &Daemon, queue: &str, log: &Path, job: &str, disable: impl FnOnce(&mut Child)) {
    ok(&d.run(&["push", queue, job]));
    let mut first = work(d, queue, log, &[]);
    wait_line(log, "alive", job, 0);
    disable(&mut first);
    let second = work(d, queue, log, &["--idle-exit", "20s"]);
    let out = wait_bounded(second, Duration::from_secs(60), "second worker");
    let _ = first.kill();
    let _ = first.wait();
    // Fail at the first overlap (a run left behind keeps logging, and the log would grow).
    let all = lines(log);
    let bad = overlaps(&all);
    if !bad.is_empty() {
        kill_logged(&all);
        panic!("job {job}: {bad:?}\n{}", d.log());
    }
    assert!(all.iter().any(|l| l.what == "end" && l.job == job), "{}", stderr(&out));
}

fn check_no_overlap(d: &Daemon, log: &Path, rounds: usize) {
    let all = lines(log);
    let bad = overlaps(&all);
    kill_logged(&all);
    assert!(
        bad.is_empty(),
        "{} overlapping run(s), e.g. {:?}\n{}",
        bad.len(),
        &bad[..bad.len().min(5)],
        d.log()
    );
    let ends = all.iter().filter(|l| l.what == "end").count();
    assert_eq!(ends, rounds, "every job ran to its end once");
}

#[test]
fn what_a_failed_command_left_running_is_dead_before_its_job_runs_again() {
    // A script that starts a step in the background and then fails (`set -e`): the worker
    // must stop the step before the job is given back and run again.
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let log = d.dir.path().join("runs");
    const ROUNDS: usize = 5;
    for r in 0..ROUNDS {
        let job = format!("x{r}");
        ok(&d.run(&["push", "q", &job]));
        let first = work_running(&d, "q", &log, &[], "{child} & sleep 0.2; exit 1");
        wait_bounded(first, Duration::from_secs(60), "first worker");
        let second = work(&d, "q", &log, &["--idle-exit", "20s"]);
        wait_bounded(second, Duration::from_secs(60), "second worker");
    }
    check_no_overlap(&d, &log, ROUNDS);
}

#[test]
fn a_group_member_that_changed_uid_is_fenced_too() {
    if !is_root() {
        eprintln!("skipped: needs root (a command that changes uid with setpriv)");
        return;
    }
    if std::process::Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: setpriv not found");
        return;
    }
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    // A log the other uid can write, in a directory it can reach.
    let shared = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(shared.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let log = shared.path().join("runs");
    std::fs::write(&log, "").unwrap();
    std::fs::set_permissions(&log, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    const ROUNDS: usize = 3;
    for r in 0..ROUNDS {
        let job = format!("u{r}");
        ok(&d.run(&["push", "q", &job]));
        let mut first = work_running(
            &d,
            "q",
            &log,
            &[],
            "setpriv --reuid=65534 --regid=65534 --clear-groups {child} & wait",
        );
        wait_line(&log, "alive", &job, 0);
        let _ = first.kill();
        let _ = first.wait();
        let second = work(&d, "q", &log, &["--idle-exit", "20s"]);
        wait_bounded(second, Duration::from_secs(60), "second worker");
    }
    check_no_overlap(&d, &log, ROUNDS);
}

#[test]
fn a_killed_workers_command_is_dead_before_its_job_runs_again() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let log = d.dir.path().join("runs");
    const ROUNDS: usize = 50;
    for r in 0..ROUNDS {
        round(&d, "q", &log, &format!("k{r}"), |w| {
            let _ = w.kill(); // SIGKILL
            let _ = w.wait();
        });
    }
    check_no_overlap(&d, &log, ROUNDS);
}

#[test]
fn a_stopped_workers_command_is_dead_before_its_expired_job_runs_again() {
    let mut flags = SIZES.to_vec();
    flags.extend(["--lease-scan-interval", "10ms"]);
    let d = Daemon::start_with(tempfile::tempdir().expect("tempdir"), &flags);
    ok(&d.run(&["create", "s", "--lease", "150ms"]));
    let log = d.dir.path().join("runs");
    const ROUNDS: usize = 20;
    let mut stopped = Vec::new();
    for r in 0..ROUNDS {
        round(&d, "s", &log, &format!("s{r}"), |w| {
            let _ = std::process::Command::new("kill").args(["-STOP", &w.id().to_string()]).status();
            stopped.push(w.id());
        });
    }
    for pid in stopped {
        let _ = std::process::Command::new("kill").args(["-CONT", &pid.to_string()]).status();
    }
    check_no_overlap(&d, &log, ROUNDS);
}

#[test]
fn a_command_stays_fenced_across_a_daemon_restart() {
    const REGISTERED: &str = "command registered for fencing";
    let debug = |c: &mut std::process::Command| {
        c.env("RUST_LOG", "info,xtcqd=debug");
    };
    let mut d = Daemon::start_cmd(tempfile::tempdir().expect("tempdir"), SIZES, debug);
    ok(&d.run(&["create", "q"]));
    let log = d.dir.path().join("runs");
    ok(&d.run(&["push", "q", "r0"]));
    let mut first = work(&d, "q", &log, &[]);
    wait_line(&log, "alive", "r0", 0);
    wait_until(Duration::from_secs(20), "registered", || d.log().contains(REGISTERED));
    // The new daemon knows nothing of the command until the worker registers it again.
    d.kill();
    let before = d.log().len();
    d.spawn(SIZES, debug);
    wait_until(Duration::from_secs(20), "registered again after the restart", || {
        d.log()[before..].contains(REGISTERED)
    });
    let _ = first.kill();
    let _ = first.wait();
    let second = work(&d, "q", &log, &["--idle-exit", "20s"]);
    let _ = wait_bounded(second, Duration::from_secs(60), "second worker");
    check_no_overlap(&d, &log, 1);
}

#[test]
fn the_daemon_fences_only_a_child_of_the_holder_leading_its_own_group() {
    use std::os::unix::process::CommandExt;
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "a"]));
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let thief = c.attach_thief("q").expect("thief");
    let job = thief.steal().expect("steal").expect("a job");
    let id = job.id();
    let refused = |pid: u32, why: &str| {
        let e = c.fence_command(id, pid).expect_err(why).to_string();
        assert!(e.contains(why), "pid {pid}: {e}");
    };
    // Not a child of ours (ourselves; init).
    refused(std::process::id(), "not a child of this process");
    refused(1, "not a child of this process");
    // A child, but in our process group.
    let mut same_group = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
    refused(same_group.id(), "does not lead its own process group");
    // A child leading its own group: accepted; but not for a job we do not hold.
    let mut own = std::process::Command::new("sleep").arg("30").process_group(0).spawn().expect("sleep");
    c.fence_command(id, own.id()).expect("a child leading its own group");
    let other = xtcq_client::JobId { index: id.index + 1, birth: 1 };
    let e = c.fence_command(other, own.id()).expect_err("not held").to_string();
    assert!(e.contains("not held by this process"), "{e}");
    // A child of another uid (needs root to start one; a bare uid needs no user entry).
    let mut other_uid = None;
    if rustix::process::geteuid().is_root() {
        let ch =
            std::process::Command::new("sleep").arg("30").process_group(0).uid(65534).spawn().expect("sleep");
        refused(ch.id(), "belongs to uid 65534");
        other_uid = Some(ch);
    } else {
        eprintln!("skipped: the other-uid case needs root");
    }
    c.unfence_command(id).expect("unfence");
    for ch in [Some(&mut same_group), Some(&mut own), other_uid.as_mut()].into_iter().flatten() {
        let _ = ch.kill();
        let _ = ch.wait();
    }
    job.ack().expect("ack");
}

#[test]
fn a_busy_worker_keeps_working_through_a_daemon_restart() {
    // Jobs claimed while the daemon is down are registered once it is back (the command
    // waits for that), instead of the worker giving up on them and exiting.
    let mut d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let done = d.dir.path().join("done");
    for i in 0..6 {
        ok(&d.run(&["push", "q", &format!("j{i}")]));
    }
    let script = format!("sleep 0.2; echo \"$XTCQ_PAYLOAD\" >> {}", done.display());
    let worker = d
        .xtcq()
        .args(["work", "q", "--idle-exit", "3s", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn work");
    wait_until(Duration::from_secs(30), "the first job done", || {
        std::fs::read_to_string(&done).is_ok_and(|t| !t.is_empty())
    });
    d.kill();
    std::thread::sleep(Duration::from_millis(500)); // a job or two is claimed meanwhile
    d.spawn(SIZES, |_| {});
    let out = wait_bounded(worker, Duration::from_secs(60), "worker");
    assert!(out.status.success(), "the worker gave up: {}\n{}", stderr(&out), d.log());
    let ran = std::fs::read_to_string(&done).unwrap_or_default();
    let mut names: Vec<&str> = ran.lines().collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 6, "every job ran: {ran}\n{}", stderr(&out));
}
