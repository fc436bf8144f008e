//! A command of `xtcq work` starts held: the worker spawns `xtcq` itself as a shim
//! (`/proc/self/exe __xtcq-held-exec FD CMD ARGS...`) that waits for the go-ahead on the
//! pipe FD and only then replaces itself with the command, in the same process. The worker
//! registers the shim's pid with the daemon for fencing in between, so the process the
//! daemon registered is the one that runs (same pid, process group and start time: an exec
//! changes none of them).
//!
//! Rules kept:
//! - nothing of the command runs before the daemon has answered its registration; a refusal
//!   (the job's lease ran out meanwhile, the daemon cannot fence it) closes the pipe and the
//!   shim exits without running anything;
//! - the pipe's read end is the only descriptor the shim adds, and the command does not
//!   inherit it (close-on-exec again before the exec);
//! - the shim dies with the worker: `PR_SET_PDEATHSIG`, armed before the shim's exec,
//!   survives it and the command's exec (neither is set-uid).

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use anyhow::{Context, Result};
use rustix::io::FdFlags;

/// The hidden first argument that makes `xtcq` the shim.
const SHIM_ARG: &str = "__xtcq-held-exec";

/// The shim's exit status when the worker withdrew its go-ahead (nothing ran).
const WITHDRAWN: i32 = 125;

/// The go-ahead a worker gives one held command.
pub struct Hold {
    read: Option<OwnedFd>,
    write: OwnedFd,
}

impl Hold {
    /// A new hold: a close-on-exec pipe whose read end is above the standard descriptors
    /// (the child's stdio is set up over 0-2 before the shim starts).
    pub fn new() -> Result<Hold> {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .context("cannot create the pipe that holds a command until it is fenced")?;
        let read = if read.as_raw_fd() < 3 { rustix::io::fcntl_dupfd_cloexec(&read, 3)? } else { read };
        Ok(Hold { read: Some(read), write })
    }

    /// The command that runs `argv` once released: the shim, with the read end passed to
    /// it (and to no other child, which a concurrent spawn of another thread would be).
    pub fn command(&self, argv: &[String]) -> Command {
        let fd = self.read.as_ref().map_or(-1, |r| r.as_raw_fd());
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg0("xtcq").arg(SHIM_ARG).arg(fd.to_string()).args(argv);
        // SAFETY: fcntl is an async-signal-safe system call; nothing is allocated.
        unsafe {
            cmd.pre_exec(move || {
                let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
                rustix::io::fcntl_setfd(fd, FdFlags::empty())
                    .map_err(|e| std::io::Error::from_raw_os_error(e.raw_os_error()))
            });
        }
        cmd
    }

    /// After the spawn: the read end is the child's alone now.
    pub fn spawned(&mut self) {
        self.read = None;
    }

    /// Lets the command run. Dropping a hold without releasing it withdraws the go-ahead.
    pub fn release(self) -> Result<()> {
        let mut w = std::fs::File::from(self.write);
        w.write_all(b"1").context("cannot start the held command (its shim is gone)")
    }
}

/// When this process was started as the shim: waits for the go-ahead and execs the command
/// (returning only if that failed, with the exit status to use), or exits at once when the
/// go-ahead was withdrawn. `None` for any other invocation.
pub fn run_if_shim() -> Option<i32> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != SHIM_ARG {
        return None;
    }
    let fd: i32 = args.next()?.to_str()?.parse().ok()?;
    let argv: Vec<OsString> = args.collect();
    Some(wait_then_exec(fd, &argv))
}

fn wait_then_exec(fd: i32, argv: &[OsString]) -> i32 {
    // SAFETY: the worker passed us this descriptor, open and ours alone (see `Hold`).
    let go = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut byte = [0u8; 1];
    let got = loop {
        match rustix::io::read(&go, &mut byte) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r,
        }
    };
    if got != Ok(1) || argv.is_empty() {
        return WITHDRAWN;
    }
    drop(go);
    let e = Command::new(&argv[0]).args(&argv[1..]).exec();
    eprintln!("xtcq work: cannot run {:?}: {e}", argv[0]);
    // As a shell says it: 126 found but not executable, 127 not found.
    if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}
