//! Red-team pass 7 on `xtcq work` stopped (Ctrl-Z, SIGSTOP) past its job's lease, then
//! continued.
//!
//! - The daemon takes the job back when the lease runs out (killing the command's group
//!   first) and re-queues it, counting the attempt in the job's record.
//! - Before: the continued worker read the attempt count from that record when it settled,
//!   so it reported "attempt 2" for the first attempt, and with `--max-attempts 2` counted
//!   the job as dead in its summary though the daemon had re-queued it.
//! - Kept here: the worker reports the attempt it ran and does not call a re-queued job dead.

use std::process::Stdio;
use std::time::Duration;

use xtcq_testkit::*;

#[test]
fn a_worker_stopped_past_its_lease_reports_the_attempt_it_ran() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--lease", "1s", "--max-attempts", "2"]));
    ok(&d.run(&["push", "q", "job"]));
    let started = d.dir().join("started");
    let script = format!("echo x > {}; sleep 60", started.display());
    let worker = d
        .xtcq()
        .args(["work", "q", "--max-jobs", "1", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn xtcq work");
    let pid = worker.id() as libc::pid_t;
    wait_until(Duration::from_secs(30), "the command started", || started.exists());
    // SAFETY: signals to our own child, not yet reaped.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    wait_until(Duration::from_secs(60), "the daemon took the job back", || {
        d.log_text().contains("lease expired")
    });
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let o = wait_bounded(worker, Duration::from_secs(60), "xtcq work");
    let err = stderr(&o);
    assert!(err.contains("attempt 1 of q"), "the worker ran attempt 1 and must say so:\n{err}");
    assert!(!err.contains("attempt 2"), "the worker ran no second attempt:\n{err}");
    assert!(err.contains("0 dead"), "the job was re-queued, not dead:\n{err}");
    // The daemon re-queued it: it runs (and succeeds) once more.
    let o = d.run(&["work", "q", "--max-jobs", "1", "--", "true"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(d.drain("q"), Vec::<String>::new());
}
