//! Forking a child of the test process that runs a closure and leaves with its exit code:
//! for the checks of what a client or handle inherited across `fork()` does in the child.
//!
//! - The child never unwinds into the harness's copy: a panic becomes exit code 101, and it
//!   leaves with `_exit` (no atexit handlers, no flush of the parent's buffers).
//! - The parent's wait is bounded: a child still running after 60 s is killed and the test
//!   fails, instead of hanging the run.
//! - Fork from a file with one test: a fork while other test threads run could copy a lock
//!   one of them holds.

use std::time::{Duration, Instant};

/// Runs `child` in a forked child and returns its exit code (101: it panicked).
pub fn in_forked_child(child: impl FnOnce() -> i32) -> i32 {
    wait_forked(fork_child(child))
}

/// Starts `child` in a forked child and returns its pid at once, for a parent that works
/// while the child runs; [`wait_forked`] gives its exit code (101: it panicked).
pub fn fork_child(child: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child runs `child`, then `_exit`s without unwinding.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
        // SAFETY: leaves the child at once, as a forked child of a threaded process must.
        unsafe { libc::_exit(code) };
    }
    pid
}

/// Waits for the forked child `pid` (of [`fork_child`]) and returns its exit code; a child
/// still running after 60 s is killed and the test fails.
pub fn wait_forked(pid: libc::pid_t) -> i32 {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            assert!(libc::WIFEXITED(status), "the forked child did not exit (status {status:#x})");
            return libc::WEXITSTATUS(status);
        }
        if start.elapsed() > Duration::from_secs(60) {
            // SAFETY: our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
