//! What a command of `xtcq work` starts with, now that the worker spawns it itself (a vfork,
//! not std's fork): what std's spawn gave it. No signal blocked, SIGPIPE not ignored (the
//! worker ignores it and blocks every signal across the spawn), no descriptor of the worker
//! beyond stdin, stdout and stderr, and the worker's environment with the job's variables
//! in place of any the worker had.

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;

use xtcq_testkit::*;

/// The `/proc/self/status` line `name` in `out`.
fn status_line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} line in:\n{out}"))
}

/// SIGPIPE's bit in a `/proc/PID/status` signal set.
const SIGPIPE_BIT: u64 = 1 << (libc::SIGPIPE - 1);

/// `xtcq work` for one job of `q` with `cmd`, started with its stdio only (not what this
/// test process inherited, so that any other descriptor a command has is one the worker
/// leaked) and a stale `$XTCQ_PAYLOAD` and `$XTCQ_JOB`; its stdout (the command's).
fn work_one(d: &Daemon, cmd: &[&str]) -> String {
    let mut work = d.xtcq();
    work.args(["work", "q", "--max-jobs", "1", "--"])
        .args(cmd)
        .env("XTCQ_PAYLOAD", "stale")
        .env("XTCQ_JOB", "stale")
        .env("XTCQ_TEST_KEPT", "yes")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: close_range is one async-signal-safe system call.
    unsafe {
        work.pre_exec(|| {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        });
    }
    let out = wait_bounded(work.spawn().expect("spawn work"), Duration::from_secs(60), "worker");
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

#[test]
fn a_command_starts_with_no_signal_blocked_sigpipe_default_and_only_its_stdio() {
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    // Read by the command itself: a shell would clear its signal mask first.
    ok(&d.run(&["push", "q", "signals"]));
    let signals = work_one(&d, &["grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"]);
    assert_eq!(status_line(&signals, "SigBlk:"), "SigBlk:\t0000000000000000", "{signals}");
    let ignored = u64::from_str_radix(status_line(&signals, "SigIgn:")["SigIgn:".len()..].trim(), 16);
    assert_eq!(ignored.map(|s| s & SIGPIPE_BIT), Ok(0), "SIGPIPE ignored:\n{signals}");
    // A payload that is not text: no $XTCQ_PAYLOAD, whatever the worker's environment says.
    ok(&d.run_in(&["push", "q"], b"\xff\xfe\n"));
    let script =
        "echo \"payload=${XTCQ_PAYLOAD-unset} job=$XTCQ_JOB kept=$XTCQ_TEST_KEPT\"; ls /proc/self/fd";
    let out = work_one(&d, &["sh", "-c", script]);
    let vars = out.lines().next().unwrap_or_default();
    assert!(vars.starts_with("payload=unset job=") && !vars.contains("stale"), "{out}");
    assert!(vars.ends_with(" kept=yes"), "{out}");
    // `ls` has its directory open as 3.
    assert_eq!(out.lines().skip(1).collect::<Vec<_>>(), ["0", "1", "2", "3"], "{out}");
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

/// Whether `pid` is gone or a zombie (its new parent may not have reaped it yet).
fn dead(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
}

#[test]
fn a_held_command_dies_unrun_with_its_killed_worker() {
    // The child shares the worker's memory until its exec: the worker is killed while the
    // child is held for a registration that the stopped daemon does not answer. The child
    // must die with it, and the command never run.
    let d = Daemon::start();
    ok(&d.run(&["create", "q"]));
    let ran = d.dir().join("ran");
    let script = format!("echo ran >> '{}'", ran.display());
    let mut worker = d
        .xtcq()
        .args(["work", "q", "--max-jobs", "1", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn work");
    d.wait_attached(worker.id());
    let c = d.client();
    let injector = c.attach_injector("q").expect("injector");
    d.signal(libc::SIGSTOP);
    injector.push(b"h0").expect("push");
    let mut held = Vec::new();
    wait_until(Duration::from_secs(20), "the worker spawned its command", || {
        held = children_of(worker.id());
        !held.is_empty() || ran.exists()
    });
    assert!(!ran.exists(), "the command ran before the daemon registered it");
    let _ = worker.kill();
    let _ = worker.wait();
    wait_until(Duration::from_secs(20), "the held command dead", || held.iter().all(|&p| dead(p)));
    d.signal(libc::SIGCONT);
    // Long enough for a command let go to have run.
    std::thread::sleep(Duration::from_millis(500));
    assert!(!ran.exists(), "the command of a killed worker ran");
}
