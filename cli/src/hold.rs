//! A command of `xtcq work` starts held: its child process (see `spawn`), after the other
//! steps before its `exec`, writes its pid on one pipe and waits for a go-ahead on another. A
//! thread of the worker reads the pid, registers it with the daemon for fencing, and only
//! then lets the child exec the command; the process the daemon registered is the one that
//! runs (an exec changes neither pid, process group nor start time).
//!
//! Rules kept:
//! - nothing of the command runs before the daemon has answered its registration; a refusal
//!   (the job's lease ran out meanwhile, the daemon cannot fence it) makes the child exit
//!   without exec (`ECANCELED` from the spawn), so nothing ran;
//! - the child does only async-signal-safe system calls before its exec (it shares the
//!   memory of a multi-threaded process): no allocation, no lock;
//! - the go-ahead and its withdrawal are both bytes, never an end of file: another thread's
//!   child, spawned meanwhile, holds copies of these pipes until its own exec;
//! - the pipes are close-on-exec: the command inherits none of them.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use anyhow::{Context, Result};

const GO: u8 = b'1';
const WITHDRAW: u8 = b'0';

/// The child's ends: kept by the worker until the spawn returned.
pub struct HoldChild {
    ready_w: OwnedFd,
    go_r: OwnedFd,
}

/// The worker's ends: the thread that registers the command reads the pid and answers.
pub struct HoldParent {
    ready_r: OwnedFd,
    go_w: OwnedFd,
}

/// A new hold's two halves.
pub fn hold() -> Result<(HoldChild, HoldParent)> {
    let (ready_r, ready_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    Ok((HoldChild { ready_w, go_r }, HoldParent { ready_r, go_w }))
}

/// A pipe of the hold: close-on-exec, above the standard descriptors.
fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    crate::spawn::pipe_above_stdio().context("cannot create a pipe to hold a command until it is fenced")
}

impl HoldChild {
    /// The descriptors `child_waits` takes in the child: (ready, go). They stay open until
    /// `spawned`, so they are open in the child.
    pub fn descriptors(&self) -> (RawFd, RawFd) {
        (self.ready_w.as_raw_fd(), self.go_r.as_raw_fd())
    }

    /// After the spawn returned: wakes the registering thread if the child never said its
    /// pid (the spawn failed before), then closes the child's ends.
    pub fn spawned(self) {
        let _ = rustix::io::write(&self.ready_w, &0u32.to_ne_bytes());
    }
}

/// In the child, last before its exec: says its pid on `ready` and waits for the go-ahead on
/// `go` (see `HoldChild::descriptors`); `Err(errno)`, `ECANCELED` when it was withdrawn.
/// Async-signal-safe: getpid, write and read, nothing allocated.
pub fn child_waits(ready: RawFd, go: RawFd) -> Result<(), i32> {
    // SAFETY: `spawn` keeps both descriptors open until the child execs or exits.
    let (ready, go) = unsafe { (BorrowedFd::borrow_raw(ready), BorrowedFd::borrow_raw(go)) };
    let pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
    rustix::io::write(ready, &pid.to_ne_bytes()).map_err(|e| e.raw_os_error())?;
    let mut byte = [0u8; 1];
    loop {
        match rustix::io::read(go, &mut byte) {
            Err(rustix::io::Errno::INTR) => continue,
            Ok(1) if byte[0] == GO => return Ok(()),
            Err(e) => return Err(e.raw_os_error()),
            Ok(_) => return Err(rustix::io::Errno::CANCELED.raw_os_error()),
        }
    }
}

/// Whether a spawn failed because the go-ahead was withdrawn (nothing ran).
pub fn was_withdrawn(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::CANCELED.raw_os_error())
}

impl HoldParent {
    /// The child's pid, once it waits for the go-ahead; `None` when the spawn failed first.
    pub fn pid(&self) -> Option<u32> {
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < buf.len() {
            match rustix::io::read(&self.ready_r, &mut buf[got..]) {
                Err(rustix::io::Errno::INTR) => continue,
                Ok(0) | Err(_) => return None,
                Ok(n) => got += n,
            }
        }
        Some(u32::from_ne_bytes(buf)).filter(|&p| p != 0)
    }

    /// Lets the command run (`true`) or makes its child exit unrun (`false`).
    pub fn answer(self, go: bool) {
        // A child that is gone (killed meanwhile) needs no answer.
        let _ = rustix::io::write(&self.go_w, &[if go { GO } else { WITHDRAW }]);
    }
}
