//! A job's command is dead before the job can run again: `xtcq work` `kill -9`ed mid-command,
//! or stopped (SIGSTOP) past its lease, then a second worker takes the job. Each command
//! (this test binary in a role, started by `sh` so that it is a grandchild in the command's
//! process group) logs its start and, while it runs, a heartbeat, with CLOCK_MONOTONIC
//! timestamps; the test fails if any line of one run of a job comes after the start of the
//! job's next run.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;
use xtcq_testkit::runs::*;
use xtcq_testkit::*;

const ROLE: &str = "XTCQ_FENCE_TEST_LOG";

/// The command: logs `start`, then (first attempt) a heartbeat every 2 ms forever, or
/// (later attempts) one more line and exits.
#[test]
fn child_main() {
    heartbeat_role(ROLE);
}

fn work(d: &Daemon, queue: &str, log: &Path, extra: &[&str]) -> Child {
    work_running(d, queue, log, extra, "{child} & wait")
}

/// `xtcq work` whose command is `sh -c SCRIPT`, where `{child}` in `script` stands for the
/// logging child (`child_main`).
fn work_running(d: &Daemon, queue: &str, log: &Path, extra: &[&str], script: &str) -> Child {
    let exe = std::env::current_exe().expect("exe");
    let child = format!(
        "'{}' --exact {} --nocapture --test-threads 1 >/dev/null 2>&1",
        exe.display(),
        test_name(module_path!(), "child_main")
    );
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
        panic!("job {job}: {bad:?}\n{}", d.log_text());
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
        d.log_text()
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
    let log = d.dir().join("runs");
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
        xtcq_testkit::skipped("needs root (a command that changes uid with setpriv)");
        return;
    }
    if std::process::Command::new("setpriv").arg("--version").output().is_err() {
        xtcq_testkit::skipped("setpriv not found");
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
    let log = d.dir().join("runs");
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
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--lease-scan-interval", "10ms"]);
    let d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "s", "--lease", "150ms"]));
    let log = d.dir().join("runs");
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
    let mut d = Daemon::builder()
        .in_dir(tempfile::tempdir().expect("tempdir"))
        .flags(SMALL_SEGMENT)
        .command(debug)
        .start();
    ok(&d.run(&["create", "q"]));
    let log = d.dir().join("runs");
    ok(&d.run(&["push", "q", "r0"]));
    let mut first = work(&d, "q", &log, &[]);
    wait_line(&log, "alive", "r0", 0);
    wait_until(Duration::from_secs(20), "registered", || d.log_text().contains(REGISTERED));
    // The new daemon knows the command from the state file: the worker registers nothing
    // again, and is killed right after the restart.
    d.kill();
    d.restart_with(SMALL_SEGMENT, debug);
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
        let e = c.fence_command(id, job.handle().generation, pid).expect_err(why).to_string();
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
    c.fence_command(id, job.handle().generation, own.id()).expect("a child leading its own group");
    let other = xtcq_client::JobId { index: id.index + 1, birth: 1 };
    let e = c.fence_command(other, job.handle().generation, own.id()).expect_err("not held").to_string();
    assert!(e.contains("not held by this process"), "{e}");
    // A child of another uid (needs root to start one; a bare uid needs no user entry).
    let mut other_uid = None;
    if rustix::process::geteuid().is_root() {
        let ch =
            std::process::Command::new("sleep").arg("30").process_group(0).uid(65534).spawn().expect("sleep");
        refused(ch.id(), "belongs to uid 65534");
        other_uid = Some(ch);
    } else {
        xtcq_testkit::skipped("the other-uid case needs root");
    }
    c.unfence_command(id, own.id()).expect("unfence");
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
    let done = d.dir().join("done");
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
    d.restart_with(SMALL_SEGMENT, |_| {});
    let out = wait_bounded(worker, Duration::from_secs(60), "worker");
    assert!(out.status.success(), "the worker gave up: {}\n{}", stderr(&out), d.log_text());
    let ran = std::fs::read_to_string(&done).unwrap_or_default();
    let mut names: Vec<&str> = ran.lines().collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 6, "every job ran: {ran}\n{}", stderr(&out));
}

/// After a restart with the first worker (of queue `s`) stopped: a second worker runs the
/// job to its end, and no line of the first run comes after the second's start.
fn runs_once_after(d: &Daemon, first: &mut Child, log: &Path) {
    let second = work(d, "s", log, &["--idle-exit", "20s"]);
    let _ = wait_bounded(second, Duration::from_secs(60), "second worker");
    signal(first.id(), "-CONT");
    let _ = first.kill();
    let _ = first.wait();
    check_no_overlap(d, log, 1);
}

/// After a restart the daemon could not trust, with the first worker (of queue `s`)
/// stopped: the job is a dead letter, and no second run started beside the first.
fn dead_lettered_not_run_again(d: &Daemon, first: &mut Child, log: &Path) {
    let second = work(d, "s", log, &["--idle-exit", "2s"]);
    let _ = wait_bounded(second, Duration::from_secs(60), "second worker");
    let dead = stdout(&d.run(&["dead", "s"]));
    signal(first.id(), "-CONT");
    let _ = first.kill();
    let _ = first.wait();
    let all = lines(log);
    let bad = overlaps(&all);
    kill_logged(&all);
    assert!(bad.is_empty(), "{bad:?}\n{}", d.log_text());
    assert!(dead.contains("could not stop command"), "the job is a dead letter: {dead}\n{}", d.log_text());
}

fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill").args([sig, &pid.to_string()]).status();
}

#[test]
fn a_worker_stopped_across_a_daemon_restart_has_its_command_fenced() {
    // The new daemon never hears from the worker (stopped before it could register again):
    // it must know the command from the previous daemon's state file when the lease expires.
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--lease-scan-interval", "10ms"]);
    let mut d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "s", "--lease", "300ms"]));
    let log = d.dir().join("runs");
    ok(&d.run(&["push", "s", "t0"]));
    let mut first = work(&d, "s", &log, &[]);
    wait_line(&log, "alive", "t0", 0);
    d.kill();
    signal(first.id(), "-STOP");
    d.restart_with(&flags, |_| {});
    runs_once_after(&d, &mut first, &log);
}

#[test]
fn a_worker_killed_while_the_daemon_was_down_has_its_command_fenced() {
    // The worker's death signal kills its direct child (`sh`), not the command's other
    // processes; the next daemon finds them from the state file when it recovers the slot.
    let mut d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let log = d.dir().join("runs");
    ok(&d.run(&["push", "q", "w0"]));
    let mut first = work(&d, "q", &log, &[]);
    wait_line(&log, "alive", "w0", 0);
    d.kill();
    let _ = first.kill();
    let _ = first.wait();
    d.restart_with(SMALL_SEGMENT, |_| {});
    let second = work(&d, "q", &log, &["--idle-exit", "20s"]);
    let _ = wait_bounded(second, Duration::from_secs(60), "second worker");
    check_no_overlap(&d, &log, 1);
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

#[test]
fn a_command_does_not_start_before_the_daemon_registered_it() {
    // The daemon is stopped (SIGSTOP) when the worker takes a job through shared memory: the
    // registration waits, and so must the command, or a lease expiring meanwhile would let
    // the job run again beside a command nobody fences.
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let started = d.dir().join("started");
    let script = format!("echo \"$XTCQ_PAYLOAD\" >> '{}'", started.display());
    let worker = d
        .xtcq()
        .args(["work", "q", "--max-jobs", "1", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn work");
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let injector = c.attach_injector("q").expect("injector");
    wait_until(Duration::from_secs(20), "the worker attached", || {
        d.stats()["processes"].as_array().is_some_and(|ps| ps.iter().any(|p| p["pid"] == worker.id()))
    });
    let daemon = d.child.as_ref().expect("daemon").id();
    signal(daemon, "-STOP");
    injector.push(b"h0").expect("push");
    wait_until(Duration::from_secs(20), "the worker started its command", || {
        !children_of(worker.id()).is_empty()
    });
    // Long enough for an unheld `sh -c echo` to have run many times over.
    std::thread::sleep(Duration::from_millis(500));
    let early = std::fs::read_to_string(&started).unwrap_or_default();
    signal(daemon, "-CONT");
    let out = wait_bounded(worker, Duration::from_secs(60), "worker");
    assert_eq!(early, "", "the command ran before the daemon had registered it");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&started).unwrap_or_default(), "h0\n");
}

#[test]
fn a_late_unfence_of_a_first_run_leaves_the_next_run_fenced() {
    // The job's lease runs out after its first command exited; the same process claims the
    // job again and registers a second command; then the word that the first command exited
    // arrives. It must not unfence the second, which the next lease expiry has to kill.
    use std::os::unix::process::CommandExt;
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--lease-scan-interval", "10ms"]);
    let d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "q", "--lease", "200ms"]));
    ok(&d.run(&["push", "q", "a"]));
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let thief = c.attach_thief("q").expect("thief");
    let sleeper = || std::process::Command::new("sleep").arg("30").process_group(0).spawn().expect("sleep");
    let first_run = thief.steal().expect("steal").expect("a job");
    let id = first_run.id();
    let mut first = sleeper();
    c.fence_command(id, first_run.handle().generation, first.id()).expect("fence the first command");
    let _ = first.kill();
    let _ = first.wait();
    let mut again = None;
    wait_until(Duration::from_secs(20), "the job re-queued after its lease", || {
        again = thief.steal().expect("steal");
        again.is_some()
    });
    let second_run = again.expect("the job again");
    assert_eq!(second_run.id(), id, "the same job");
    let mut second = sleeper();
    c.fence_command(id, second_run.handle().generation, second.id()).expect("fence the second command");
    c.unfence_command(id, first.id()).expect("the late unfence of the first");
    let mut gone = false;
    wait_until(Duration::from_secs(20), "the second command killed at the next lease expiry", || {
        gone = second.try_wait().expect("try_wait").is_some();
        gone
    });
    drop((first_run, second_run));
}

#[test]
fn a_claim_a_daemon_revoked_before_it_died_is_fenced_by_the_next() {
    // A daemon that dies right after revoking the claim of a stopped worker (inside the
    // give-back, before the fence) leaves the record claimed by no one; the next daemon must
    // find the command by record before it re-queues the job. The test plays the dying
    // daemon: it kills it, then revokes the claim in the segment as it would have.
    use xtcq_shm::record::state::{State, StateWord};
    let mut d = Daemon::start();
    ok(&d.run(&["create", "s"]));
    let log = d.dir().join("runs");
    ok(&d.run(&["push", "s", "v0"]));
    let mut first = work(&d, "s", &log, &[]);
    wait_line(&log, "alive", "v0", 0);
    signal(first.id(), "-STOP");
    d.kill();
    let seg = xtcq_shm::Segment::attach(&d.segment).expect("segment");
    let records = seg.records();
    let revoked = (0..records.len()).filter_map(|i| records.state(i)).any(|st| {
        let w = st.load();
        let to = StateWord::pack(w.generation(), State::Claimed, xtcq_shm::NO_HOLDER);
        w.state() == Some(State::Claimed)
            && st
                .0
                .compare_exchange(
                    w.0,
                    to.0,
                    std::sync::atomic::Ordering::AcqRel,
                    std::sync::atomic::Ordering::Acquire,
                )
                .is_ok()
    });
    assert!(revoked, "the worker's claim");
    d.restart_with(SMALL_SEGMENT, |_| {});
    runs_once_after(&d, &mut first, &log);
}

#[test]
fn without_a_trusted_state_file_a_taken_back_claim_is_dead_lettered_not_run_again() {
    // The registrations are in the state file; a next daemon that finds none it trusts (here
    // made readable by others) cannot know which commands still run, so it must not run their
    // jobs again: they go to the dead letters.
    let mut d = Daemon::start();
    ok(&d.run(&["create", "s"]));
    let log = d.dir().join("runs");
    ok(&d.run(&["push", "s", "u0"]));
    let mut first = work(&d, "s", &log, &[]);
    wait_line(&log, "alive", "u0", 0);
    signal(first.id(), "-STOP");
    d.kill();
    let state = d.dir().join("xtcqd.sock.state");
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o644)).expect("chmod");
    d.restart_with(SMALL_SEGMENT, |_| {});
    dead_lettered_not_run_again(&d, &mut first, &log);
}

#[test]
fn a_registration_whose_command_ended_unannounced_is_forgotten() {
    // The worker reaped its command but its Unfence never arrived (the daemon was down at
    // that moment): the registration must not outlive the group, whose id may later name
    // another user's group that a fence would then kill.
    use std::os::unix::process::CommandExt;
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    ok(&d.run(&["push", "q", "a"]));
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let thief = c.attach_thief("q").expect("thief");
    let job = thief.steal().expect("steal").expect("a job");
    let mut child = std::process::Command::new("sleep").arg("30").process_group(0).spawn().expect("sleep");
    c.fence_command(job.id(), job.handle().generation, child.id()).expect("fence");
    let registered = || {
        xtcqd::persistence::state::StateFile::beside(&d.socket)
            .expect("state file")
            .load()
            .map_or(0, |s| s.fences.len())
    };
    assert_eq!(registered(), 1, "kept in the state file");
    let _ = child.kill();
    let _ = child.wait();
    wait_until(Duration::from_secs(20), "the registration of an ended command forgotten", || {
        registered() == 0
    });
    job.ack().expect("ack");
}

#[test]
fn a_registration_for_a_claim_taken_back_is_refused_after_a_re_claim() {
    // One worker process, two threads: the first stole the job and was delayed before its
    // registration; the lease ran out; the second stole the job again. The first thread's
    // registration must be refused (its claim is gone), not taken for the second claim's.
    use std::os::unix::process::CommandExt;
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--lease-scan-interval", "10ms"]);
    let d = Daemon::start_with(&flags);
    ok(&d.run(&["create", "q", "--lease", "200ms"]));
    ok(&d.run(&["push", "q", "a"]));
    let c = xtcq_client::Client::connect(Some(&d.socket)).expect("connect");
    let thief = c.attach_thief("q").expect("thief");
    let first_claim = thief.steal().expect("steal").expect("a job");
    let stale = first_claim.handle().generation;
    let mut again = None;
    wait_until(Duration::from_secs(20), "the job re-queued after its lease", || {
        again = thief.steal().expect("steal");
        again.is_some()
    });
    let second_claim = again.expect("the job again");
    let mut late = std::process::Command::new("sleep").arg("30").process_group(0).spawn().expect("sleep");
    let e = c.fence_command(first_claim.id(), stale, late.id()).expect_err("a stale claim's registration");
    assert!(e.to_string().contains("not held by this process"), "{e}");
    let mut current = std::process::Command::new("sleep").arg("30").process_group(0).spawn().expect("sleep");
    c.fence_command(second_claim.id(), second_claim.handle().generation, current.id())
        .expect("the claim held now");
    c.unfence_command(second_claim.id(), current.id()).expect("unfence");
    for ch in [&mut late, &mut current] {
        let _ = ch.kill();
        let _ = ch.wait();
    }
    drop(first_claim);
    second_claim.ack().expect("ack");
}

#[test]
fn a_state_file_another_daemon_served_past_is_not_trusted() {
    // Daemon 1 leaves its state file; daemon 2 serves the segment with another --state and
    // dies while a worker runs a command; daemon 3 is started on the first file again. That
    // file says nothing of the command: trusting it would re-run the job beside it.
    let mut d = Daemon::start();
    ok(&d.run(&["create", "s"]));
    ok(&d.run(&["shutdown"]));
    if let Some(mut c) = d.child.take() {
        let _ = c.wait();
    }
    let other = d.dir().join("other.state");
    let mut flags = SMALL_SEGMENT.to_vec();
    flags.extend(["--state", other.to_str().expect("path")]);
    d.restart_with(&flags, |_| {});
    let log = d.dir().join("runs");
    ok(&d.run(&["push", "s", "e0"]));
    let mut first = work(&d, "s", &log, &[]);
    wait_line(&log, "alive", "e0", 0);
    signal(first.id(), "-STOP");
    d.kill();
    d.restart_with(SMALL_SEGMENT, |_| {});
    dead_lettered_not_run_again(&d, &mut first, &log);
}
