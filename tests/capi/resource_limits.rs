//! Red team 6: the C API's `XTCQ_E_RESOURCE` (-16) under this process's own limits, through
//! `tests/c/resource_limits.c` against a real daemon.
//!
//! - With no fd free, the calls that use only the mapped segment (push, batch push, steal,
//!   steal_wait, ack) work, and no job is lost or comes twice.
//! - A reconnect after a daemon restart with 0, 1, 2 or 3 fds free either works or says
//!   `XTCQ_E_RESOURCE`: never "unreachable" (the daemon is up) nor "segment" (it is the same
//!   segment); once fds are free again every job is there, each once.
//! - A connect, and a first attach (which maps the segment), with 0 to 3 fds free either
//!   work or say `XTCQ_E_RESOURCE`; a job pushed is there.
//! - A connect, and a first attach (which maps the segment), with the address space used up
//!   say `XTCQ_E_RESOURCE`.
//! - A connect to a daemon that is itself out of fds (its `RLIMIT_NOFILE` lowered, every fd
//!   taken by idle connections) is not `XTCQ_E_RESOURCE`: this process has fds to spare;
//!   the daemon's refusal names the connection limit its fds set, and `ulimit -n`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use xtcq_testkit::{compile_c, run_within, Daemon};

const RESOURCE: i32 = -16;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_segment_only_calls_work_with_no_fd_free() {
    let daemon = Daemon::start();
    let exe = compile_c("tests/c/resource_limits.c", daemon.dir(), &[]);
    let out =
        run_within(Command::new(&exe).arg(&daemon.socket).args(["shm", "nofd"]), Duration::from_secs(60));
    assert!(
        out.status.success() && text(&out.stdout).contains("shm ok, 1 left after"),
        "({}):\n{}\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    let report = daemon.client().check(false).expect("xtcq check");
    assert!(report.is_consistent(), "xtcq check: {:?}", report.problems);
}

#[test]
fn a_reconnect_with_few_fds_free_says_resource_and_loses_nothing() {
    let mut daemon = Daemon::start();
    let exe = compile_c("tests/c/resource_limits.c", daemon.dir(), &[]);
    let mut child = Command::new(&exe)
        .arg(&daemon.socket)
        .args(["reconnect", "again"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("read");
    assert_eq!(first, "ready");
    daemon.kill();
    daemon.restart_with(xtcq_testkit::SMALL_SEGMENT, |_| {});
    child.stdin.take().expect("stdin").write_all(b"go\n").expect("write");
    let rest: Vec<String> = lines.map(|l| l.expect("read")).collect();
    let out = xtcq_testkit::wait_bounded(child, Duration::from_secs(60), "the C program");
    let all = rest.join("\n");
    assert!(out.status.success(), "({}):\n{all}\n{}", out.status, text(&out.stderr));
    for l in rest.iter().filter(|l| l.starts_with("free ")) {
        let rc: i32 = l.split_whitespace().nth(2).and_then(|s| s.parse().ok()).expect("rc");
        assert!(rc == 0 || rc == RESOURCE, "a reconnect out of fds said {rc}, not -16:\n{all}");
    }
    assert!(all.contains("acked 3"), "jobs lost or repeated:\n{all}");
}

#[test]
fn a_connect_with_no_address_space_left_says_resource() {
    let daemon = Daemon::start();
    let exe = compile_c("tests/c/resource_limits.c", daemon.dir(), &[]);
    let out =
        run_within(Command::new(&exe).arg(&daemon.socket).arg("address_space"), Duration::from_secs(60));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "({}):\n{stdout}\n{}", out.status, text(&out.stderr));
    let rc = connect_rc(&stdout);
    assert!(rc == 0 || rc == RESOURCE, "a connect out of address space said {rc}, not -16:\n{stdout}");
}

/// `connect: RC` from the C program's output.
fn connect_rc(stdout: &str) -> i32 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("connect: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("connect: RC")
}

#[test]
fn a_daemon_out_of_fds_is_not_this_process_out_of_resources() {
    use std::os::unix::process::CommandExt;
    let daemon = Daemon::builder()
        .flags(["--io-timeout", "10m", "--max-connections", "4096"])
        .command(|c| {
            // SAFETY: setrlimit is async-signal-safe; the child is about to exec.
            unsafe {
                c.pre_exec(|| {
                    let l = libc::rlimit { rlim_cur: 48, rlim_max: 48 };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                })
            };
        })
        .start();
    let exe = compile_c("tests/c/resource_limits.c", daemon.dir(), &[]);
    // Idle connections (no Hello) the daemon holds for --io-timeout: more than it has fds.
    let held: Vec<_> =
        (0..64).filter_map(|_| std::os::unix::net::UnixStream::connect(&daemon.socket).ok()).collect();
    assert!(held.len() > 48, "only {} connections made", held.len());
    xtcq_testkit::wait_until(Duration::from_secs(60), "the daemon to run out of fds", || {
        daemon.log_text().contains("accept failed")
    });
    let out = run_within(Command::new(&exe).arg(&daemon.socket).arg("connect"), Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "({}):\n{stdout}\n{}", out.status, text(&out.stderr));
    let rc = connect_rc(&stdout);
    assert!(rc != RESOURCE, "the daemon's lack of fds was reported as this process's:\n{stdout}");
    // The daemon lowered --max-connections to what its fds allow: its refusal must say that
    // limit and what raises it, not the 4096 asked for and "a higher --max-connections".
    assert!(
        !stdout.contains("has 4096 connections") && stdout.contains("ulimit -n"),
        "the refusal names the wrong limit:\n{stdout}"
    );
    drop(held);
}

#[test]
fn a_connect_and_a_first_attach_with_few_fds_free_say_resource() {
    let daemon = Daemon::start();
    let exe = compile_c("tests/c/resource_limits.c", daemon.dir(), &[]);
    let out =
        run_within(Command::new(&exe).arg(&daemon.socket).args(["fresh", "fresh"]), Duration::from_secs(60));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "({}):\n{stdout}\n{}", out.status, text(&out.stderr));
    for l in stdout.lines().filter(|l| l.starts_with("connect ") || l.starts_with("attach ")) {
        let rc: i32 = l.split_whitespace().nth(2).and_then(|s| s.parse().ok()).expect("rc");
        assert!(rc == 0 || rc == RESOURCE, "{l}\n{stdout}");
    }
    let pushed: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("pushed "))
        .and_then(|n| n.trim().parse().ok())
        .expect("pushed N");
    assert_eq!(daemon.drain("fresh").len(), pushed, "{stdout}");
}

#[test]
fn a_first_attach_with_no_address_space_left_says_resource() {
    // A segment of several MiB, past the 1 MiB of address space the program leaves itself.
    let mut sizes = xtcq_testkit::SMALL_SEGMENT.to_vec();
    let records = sizes.iter().position(|&f| f == "--records").expect("--records") + 1;
    sizes[records] = "65536";
    let daemon = Daemon::builder().flags(sizes).start();
    let exe = compile_c("tests/c/resource_limits.c", daemon.dir(), &[]);
    let out = run_within(
        Command::new(&exe).arg(&daemon.socket).args(["attach_address_space", "mapped"]),
        Duration::from_secs(60),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "({}):\n{stdout}\n{}", out.status, text(&out.stderr));
    let rc: i32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("attach: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("attach: RC");
    assert_eq!(rc, RESOURCE, "an attach out of address space:\n{stdout}");
}
