//! The one way the tests wait for a child process, and what they read from its output.
//!
//! - Every wait has a limit; past it the child is killed and the test fails with what the
//!   child printed, so a hung child never hangs the run.
//! - Piped output is drained by a thread while waiting, so a child that writes more than a
//!   pipe holds cannot deadlock against us.

use std::io::Write;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// How long [`run_bounded`] lets a command run: generous, since a loaded CI machine is slow;
/// reaching it means the command hung.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(60);

/// Runs `cmd` to its end within [`COMMAND_LIMIT`], feeding it `stdin` (or /dev/null) and
/// capturing stdout and stderr.
pub fn run_bounded(cmd: &mut Command, stdin: Option<&[u8]>) -> Output {
    run_fed(cmd, stdin, COMMAND_LIMIT)
}

/// Runs `cmd` to its end within `limit`, stdin /dev/null, stdout and stderr captured.
pub fn run_within(cmd: &mut Command, limit: Duration) -> Output {
    run_fed(cmd, None, limit)
}

fn run_fed(cmd: &mut Command, stdin: Option<&[u8]>, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    if let Some(input) = stdin {
        let mut w = child.stdin.take().expect("stdin");
        // A command may exit before reading all of it; that is its answer, not ours.
        let _ = w.write_all(input);
    }
    wait_bounded(child, limit, &format!("{cmd:?}"))
}

/// Waits for `child` within `limit`, collecting its piped output; past the limit, kills it
/// and fails the test with what it printed.
pub fn wait_bounded(child: Child, limit: Duration, what: &str) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap_or_else(|e| panic!("waiting for {what}: {e}")),
        Err(_) => {
            // SAFETY: kill has no memory preconditions; `pid` is our child, not yet reaped
            // (the waiter thread reaps it only after it exits).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            // Bounded too: a process the child started may hold its pipes open for good
            // (a forked backend of a hung pool held a CI run for ten minutes).
            let out = rx.recv_timeout(Duration::from_secs(10)).ok().and_then(Result::ok);
            let (o, e) = out.map(|o| (stdout(&o), stderr(&o))).unwrap_or_else(|| {
                ("(not read: a process it started still holds its output open)".into(), String::new())
            });
            panic!("{what} did not finish in {limit:?}; stdout:\n{o}\nstderr:\n{e}");
        }
    }
}

/// Reads `child`'s piped stdout up to its first newline, the way a child that holds
/// something (a claimed batch, a mapping) says it is ready; `false` when its stdout ended
/// first (the caller says what that means). Byte by byte, so that nothing after the line is
/// taken from the caller.
pub fn first_line_seen(child: &mut Child) -> bool {
    let out = child.stdout.as_mut().expect("the child's stdout is piped");
    let mut byte = [0u8];
    while byte[0] != b'\n' {
        if std::io::Read::read(out, &mut byte).expect("read the child's stdout") != 1 {
            return false;
        }
    }
    true
}

/// Waits for `child` (output not piped, or read elsewhere) within `t`; past it, kills and
/// reaps it and returns `None`.
pub fn wait_timeout(child: &mut Child, t: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + t;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The exit code, -1 for a signal.
pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// Stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Stdout of a command that must have succeeded.
#[track_caller]
pub fn ok(o: &Output) -> String {
    assert_eq!(code(o), 0, "expected success; stdout: {} stderr: {}", stdout(o), stderr(o));
    stdout(o)
}

/// Polls `f` every 10 ms until it holds, failing the test after `limit`.
#[track_caller]
pub fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls `f` every 10 ms until it returns `Some`, for at most `t`.
pub fn eventually<T>(t: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + t;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
