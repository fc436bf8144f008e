//! Values the command line cannot honour are refused with a message (never a panic): how
//! many commands `work` runs at once, lease durations below what the daemon can measure.

use xtcq_testkit::*;

#[test]
fn work_refuses_more_jobs_than_it_can_serve_without_a_panic() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    for j in ["100000", "0", "4294967296"] {
        let o = d.run(&["work", "q", "-j", j, "--idle-exit", "100ms", "--", "true"]);
        let e = stderr(&o);
        assert_eq!(code(&o), 2, "-j {j}: {e}");
        assert!(!e.contains("panicked"), "-j {j}: {e}");
        assert!(e.contains("1..=1024") || e.contains("1024"), "-j {j} names the bound: {e}");
    }
    // Under a file limit too low for the commands, an error that says what to do.
    let mut cmd = d.xtcq();
    cmd.args(["work", "q", "-j", "1024", "--idle-exit", "100ms", "--", "true"]);
    set_nofile(&mut cmd, 128);
    let o = run_bounded(&mut cmd, None);
    let e = stderr(&o);
    assert_eq!(code(&o), 1, "{e}");
    assert!(e.contains("file descriptors") && e.contains("lower --jobs"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    // And the largest value it accepts does run.
    ok(&d.run(&["push", "q", "a", "b"]));
    let o = d.run(&["work", "q", "-j", "1024", "--max-jobs", "2", "--idle-exit", "200ms", "--", "true"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

/// Sets RLIMIT_NOFILE (soft and hard) of the child to `n`.
fn set_nofile(cmd: &mut std::process::Command, n: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing else.
    unsafe {
        cmd.pre_exec(move || {
            let l = rustix::process::Rlimit { current: Some(n), maximum: Some(n) };
            rustix::process::setrlimit(rustix::process::Resource::Nofile, l)
                .map_err(|e| std::io::Error::from_raw_os_error(e.raw_os_error()))
        });
    }
}

#[test]
fn leases_below_the_resolution_are_refused_naming_the_smallest() {
    let d = Daemon::start();
    for (lease, says) in [("500us", "smallest accepted is 1ms"), ("1.9ms", "1ms or 2ms"), ("0.0005", "1ms")] {
        let o = d.run(&["create", "q", "--lease", lease]);
        let e = stderr(&o);
        assert_eq!(code(&o), 2, "--lease {lease}: {e}");
        assert!(e.contains(says), "--lease {lease}: {e}");
    }
    assert!(!ok(&d.run(&["ls"])).contains("\nq "), "no queue was created with a wrong lease");
    ok(&d.run(&["create", "q", "--lease", "1ms"]));
    for lease in ["500us", "0", "2.5ms"] {
        let o = d.run(&["work", "q", "--lease", lease, "--idle-exit", "100ms", "--", "true"]);
        let e = stderr(&o);
        assert_eq!(code(&o), 2, "work --lease {lease}: {e}");
        assert!(e.contains("1ms"), "work --lease {lease}: {e}");
    }
}

#[test]
fn work_refuses_a_lease_it_cannot_keep_while_a_command_runs() {
    let d = Daemon::start();
    ok(&d.run(&["create", "short", "--lease", "5ms"]));
    ok(&d.run(&["push", "short", "j"]));
    for extra in [&[][..], &["--lease", "10ms"][..]] {
        let o = d.run(&[&["work", "short", "--idle-exit", "100ms"][..], extra, &["--", "true"][..]].concat());
        let e = stderr(&o);
        assert_ne!(code(&o), 0, "work {extra:?}: {e}");
        assert!(e.contains("--lease 50ms or more"), "work {extra:?}: {e}");
    }
    // The job was not taken: a worker with a lease it can keep runs it.
    ok(&d.run(&["work", "short", "--lease", "200ms", "--max-jobs", "1", "--", "true"]));
}
