//! The spawn of `xtcq work`'s commands: `clone(CLONE_VM | CLONE_VFORK)`, as `posix_spawn`
//! does, instead of the `fork` that `std::process::Command` needs for its `pre_exec` steps.
//!
//! Why: a fork of the worker, a multi-threaded process, copies its page tables and
//! write-protects its memory; until the command's exec (a hold that lasts the daemon's
//! registration round trip), every page a thread of the worker writes is a copy-on-write
//! fault and a TLB shootdown to the other cores. Measured on 5,000 `true` commands, the fork
//! and those faults took more of the machine than the daemon's side of the fence did.
//!
//! Rules kept (the child shares the worker's memory until its exec or exit):
//! - the thread that spawns waits (`CLONE_VFORK`) until the child execs or exits, so the
//!   child runs on a stack in that thread's frame, and reads what that frame holds;
//! - the child allocates nothing, takes no lock, calls only async-signal-safe functions,
//!   and writes to the shared memory only its stack and its error word;
//! - every signal is blocked across the clone; the child sets each handled one back to its
//!   default before it unblocks them, so no handler of the worker runs in it;
//! - the steps, in order: stdin, its own process group, signals, the caller's steps (see
//!   `work_start`), exec. A failed step or exec is reported as the spawn's error, and the
//!   child exits 127 without running anything.

use std::ffi::{c_int, c_void, CString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};

use rustix::pipe::{pipe_with, PipeFlags};
use rustix::process::{Pid, Signal, WaitOptions};

/// What to exec: the program's file, its argv and its whole environment.
pub(crate) struct Spec {
    program: CString,
    argv: Vec<CString>,
    env: Vec<CString>,
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in an argument"))
}

impl Spec {
    /// `program` run as `argv`, with `env` (`NAME=value` strings) as its whole environment.
    pub(crate) fn new(program: &Path, argv: &[String], env: Vec<CString>) -> io::Result<Spec> {
        Ok(Spec {
            program: c_string(program.as_os_str().as_bytes())?,
            argv: argv.iter().map(|a| c_string(a.as_bytes())).collect::<io::Result<_>>()?,
            env,
        })
    }
}

/// `NAME=value` for the environment of a `Spec`.
pub(crate) fn env_entry(name: &str, value: &[u8]) -> io::Result<CString> {
    let mut s = Vec::with_capacity(name.len() + 1 + value.len());
    s.extend_from_slice(name.as_bytes());
    s.push(b'=');
    s.extend_from_slice(value);
    c_string(&s)
}

/// This process's environment less the variables named in `except`, as `Spec` takes it.
pub(crate) fn environment_except(except: &[&str]) -> io::Result<Vec<CString>> {
    std::env::vars_os()
        .filter(|(k, _)| !except.iter().any(|e| k.as_bytes() == e.as_bytes()))
        .map(|(k, v)| {
            let mut s = k.as_bytes().to_vec();
            s.push(b'=');
            s.extend_from_slice(v.as_bytes());
            c_string(&s)
        })
        .collect()
}

/// A close-on-exec pipe above the standard descriptors: the child's stdin is set up over
/// descriptor 0, which would replace an end that had that number.
pub(crate) fn pipe_above_stdio() -> io::Result<(OwnedFd, OwnedFd)> {
    let above_stdio = |fd: OwnedFd| -> io::Result<OwnedFd> {
        Ok(if fd.as_raw_fd() < 3 { rustix::io::fcntl_dupfd_cloexec(&fd, 3)? } else { fd })
    };
    let (r, w) = pipe_with(PipeFlags::CLOEXEC)?;
    Ok((above_stdio(r)?, above_stdio(w)?))
}

/// A spawned command, reaped by `wait` (not on drop, as with `std::process::Child`).
pub(crate) struct Child {
    pid: Pid,
    /// The write end of its stdin.
    pub(crate) stdin: Option<std::fs::File>,
    status: Option<ExitStatus>,
}

impl Child {
    pub(crate) fn id(&self) -> u32 {
        self.pid.as_raw_nonzero().get() as u32
    }

    /// SIGKILL, unless it was reaped already (its pid may name another process then).
    pub(crate) fn kill(&mut self) -> io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        Ok(rustix::process::kill_process(self.pid, Signal::KILL)?)
    }

    /// Closes its stdin, waits for it to exit and reaps it.
    pub(crate) fn wait(&mut self) -> io::Result<ExitStatus> {
        drop(self.stdin.take());
        if let Some(st) = self.status {
            return Ok(st);
        }
        let st = reap(self.pid)?;
        self.status = Some(st);
        Ok(st)
    }
}

fn reap(pid: Pid) -> io::Result<ExitStatus> {
    loop {
        match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(Some((_, st))) => return Ok(ExitStatus::from_raw(st.as_raw())),
            Ok(None) => return Err(io::Error::other("waitpid returned no status")),
        }
    }
}

/// What the child reads: all of it in the spawning thread's frame, built before the clone.
struct Shared<'a> {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    stdin: RawFd,
    /// The caller's steps between the process group and the exec (async-signal-safe).
    steps: &'a (dyn Fn() -> Result<(), i32> + Sync),
    /// The errno of the step or the exec that failed; 0 while none did.
    error: AtomicI32,
}

/// The child's stack: on the spawning thread's stack, which is idle until the child execs.
const CHILD_STACK: usize = 64 * 1024;

/// Starts `spec` with a new pipe as its stdin, in a process group of its own, with `steps`
/// run in the child just before its exec (they must be async-signal-safe and allocate
/// nothing). Returns once the child has exec'd; `Err` with the errno of the step or exec
/// that failed, the child reaped (it ran nothing).
pub(crate) fn spawn(spec: &Spec, steps: &(dyn Fn() -> Result<(), i32> + Sync)) -> io::Result<Child> {
    let (stdin_r, stdin_w) = pipe_above_stdio()?;
    let argv: Vec<*const libc::c_char> =
        spec.argv.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let envp: Vec<*const libc::c_char> =
        spec.env.iter().map(|e| e.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let shared = Shared {
        program: spec.program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        stdin: stdin_r.as_raw_fd(),
        steps,
        error: AtomicI32::new(0),
    };
    let mut stack = MaybeUninit::<[u128; CHILD_STACK / 16]>::uninit();
    // SAFETY: the stack grows down from its end, 16-byte aligned (u128); the child runs
    // `child_main` on it with `shared`, both alive in this frame, which does not return
    // before the child execs or exits (CLONE_VFORK). Signals are blocked across the clone
    // (see `child_main`) and the mask restored after.
    let pid = unsafe {
        let top = stack.as_mut_ptr().cast::<u8>().add(CHILD_STACK).cast::<c_void>();
        let mut all = MaybeUninit::<libc::sigset_t>::uninit();
        let mut old = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr());
        let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
        let arg = std::ptr::from_ref(&shared).cast_mut().cast::<c_void>();
        let pid = libc::clone(child_main, top, flags, arg);
        let clone_error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut());
        if pid < 0 {
            return Err(clone_error);
        }
        pid
    };
    drop(stdin_r);
    let pid = Pid::from_raw(pid).ok_or_else(|| io::Error::other("clone returned pid 0"))?;
    match shared.error.load(Ordering::Relaxed) {
        0 => Ok(Child { pid, stdin: Some(stdin_w.into()), status: None }),
        e => {
            let _ = reap(pid);
            Err(io::Error::from_raw_os_error(e))
        }
    }
}

/// The child, until its exec: the steps of `spawn`, then exec; on a failure, the errno in
/// `error` and exit 127.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Shared` of `spawn`'s frame, alive until this child execs or exits.
    let shared = unsafe { &*arg.cast::<Shared<'_>>() };
    // SAFETY: the steps are system calls on descriptors and strings `spawn` keeps open and
    // alive; nothing here allocates or locks.
    let e = unsafe { child_steps(shared) };
    shared.error.store(e, Ordering::Relaxed);
    // SAFETY: _exit ends this process only (no CLONE_THREAD) and runs no handler.
    unsafe { libc::_exit(127) }
}

/// Returns only on a failure, with its errno.
unsafe fn child_steps(s: &Shared<'_>) -> c_int {
    let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL);
    // Handlers of the worker (its signal-hook ones, std's stack-overflow ones) must not run
    // here, on the worker's memory; SIGPIPE, which std ignores, goes back to its default,
    // as std's spawn does. (32 and 33 are glibc's own, refused here, and never sent to us.)
    for sig in 1..=libc::SIGRTMAX() {
        let mut old = MaybeUninit::<libc::sigaction>::zeroed();
        if libc::sigaction(sig, std::ptr::null(), old.as_mut_ptr()) != 0 {
            continue;
        }
        let handler = old.assume_init().sa_sigaction;
        if (handler != libc::SIG_DFL && handler != libc::SIG_IGN) || sig == libc::SIGPIPE {
            let mut dfl = MaybeUninit::<libc::sigaction>::zeroed().assume_init();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
        }
    }
    if libc::dup2(s.stdin, 0) < 0 {
        return errno();
    }
    // Its own process group: a Ctrl-C at the terminal reaches the worker, not the command.
    if libc::setpgid(0, 0) != 0 {
        return errno();
    }
    let mut none = MaybeUninit::<libc::sigset_t>::uninit();
    libc::sigemptyset(none.as_mut_ptr());
    libc::pthread_sigmask(libc::SIG_SETMASK, none.as_ptr(), std::ptr::null_mut());
    if let Err(e) = (s.steps)() {
        return e;
    }
    libc::execve(s.program, s.argv, s.envp);
    errno()
}
