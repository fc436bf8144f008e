//! `xtcq work` prints its final summary (jobs ok / failed / dead / given back, attempts) on
//! every exit, its stderr a pipe as under a service manager, not only on a terminal; jobs
//! are counted once each, not once per attempt; a SIGINT that gives jobs back is no failure.

use xtcq_testkit::*;

use std::process::{Child, Stdio};
use std::time::Duration;

fn summary_line(err: &str) -> &str {
    err.lines().rev().find(|l| l.starts_with("xtcq work ")).unwrap_or_else(|| panic!("no summary in: {err}"))
}

#[test]
fn the_summary_counts_jobs_not_attempts_with_stderr_a_pipe() {
    let d = Daemon::start();
    // "bad" fails both of its attempts and becomes a dead letter; "good" succeeds.
    ok(&d.run(&["create", "q", "--max-attempts", "2"]));
    ok(&d.run(&["push", "q", "good", "bad"]));
    let cmd = ["sh", "-c", r#"test "$XTCQ_PAYLOAD" = good"#];
    let mut args = vec!["work", "q", "--idle-exit", "300ms", "--"];
    args.extend(cmd);
    let o = d.run(&args);
    let e = stderr(&o);
    assert_eq!(code(&o), 5, "{e}");
    let line = summary_line(&e);
    assert!(
        line.starts_with("xtcq work q: 1 job(s) ok, 0 failed, 1 dead, 0 given back; 3 attempt(s)"),
        "{e}"
    );

    // No attempt limit: one job failing three times is one failed job, three attempts.
    ok(&d.run(&["create", "r"]));
    ok(&d.run(&["push", "r", "bad"]));
    let mut args = vec!["work", "r", "--max-jobs", "3", "--"];
    args.extend(cmd);
    let o = d.run(&args);
    let e = stderr(&o);
    assert_eq!(code(&o), 5, "{e}");
    assert!(
        summary_line(&e)
            .starts_with("xtcq work r: 0 job(s) ok, 1 failed, 0 dead, 0 given back; 3 attempt(s)"),
        "{e}"
    );
}

fn sigint(c: &Child) {
    let pid = rustix::process::Pid::from_raw(c.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
}

#[test]
fn a_sigint_ends_with_the_summary_and_jobs_given_back_are_no_failure() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q", "--max-attempts", "1"]));
    ok(&d.run(&["push", "q", "short", "long"]));
    let started = d.dir().join("started");
    // Each command says it started (a file), so the signals come while it runs.
    let script = format!(
        r#"echo "$XTCQ_PAYLOAD" >> {}; case "$XTCQ_PAYLOAD" in short) sleep 0.5;; long) sleep 30;; esac"#,
        started.display()
    );
    let spawn = || {
        d.xtcq()
            .args(["work", "q", "--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn work")
    };
    let ran = |what: &str| std::fs::read_to_string(&started).unwrap_or_default().contains(what);

    // One SIGINT while "short" runs: it finishes, work stops, and says what it did.
    let w = spawn();
    wait_until(Duration::from_secs(20), "short started", || ran("short"));
    sigint(&w);
    let o = wait_bounded(w, Duration::from_secs(20), "xtcq work");
    let e = stderr(&o);
    assert_eq!(code(&o), 0, "{e}");
    assert!(
        summary_line(&e)
            .starts_with("xtcq work q: 1 job(s) ok, 0 failed, 0 dead, 0 given back; 1 attempt(s)"),
        "{e}"
    );

    // Two while "long" runs: it is killed and given back, not failed (exit 0, not 5).
    let w = spawn();
    wait_until(Duration::from_secs(20), "long started", || ran("long"));
    sigint(&w);
    std::thread::sleep(Duration::from_millis(300));
    sigint(&w);
    let o = wait_bounded(w, Duration::from_secs(20), "xtcq work");
    let e = stderr(&o);
    assert_eq!(code(&o), 0, "{e}");
    assert!(
        summary_line(&e)
            .starts_with("xtcq work q: 0 job(s) ok, 0 failed, 0 dead, 1 given back; 1 attempt(s)"),
        "{e}"
    );
    assert_eq!(ok(&d.run(&["steal", "q"])), "long\n", "back in the queue, not a dead letter");
}
