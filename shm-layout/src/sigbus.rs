//! Surviving a segment file that another process truncates under us.
//!
//! A file-backed segment can be shortened by anyone who may open it (`truncate -s 0`). Every
//! later touch of a page past the new end is SIGBUS, whose default action kills the process:
//! the daemon in its next scan, a consumer in its next look. This module makes that an error
//! instead, the way Wayland compositors guard client-supplied shm pools:
//!
//! - every mapped segment registers its address range here (a [`Guard`] while it is mapped);
//! - a process-wide SIGBUS handler, installed once, looks up the faulting address; inside a
//!   registered range ([`Guard`]) it maps private zero pages over the *whole* range (`MAP_FIXED`: the
//!   faulting instruction then re-runs and reads zero), writes [`RETIRED`] into the copy's
//!   ready word (so every handle's existing `is_retired` check stops at its next call, with
//!   no new check on the push / steal path) and marks the range lost ([`Guard::is_lost`]);
//! - outside every registered range it puts back the previous disposition and returns, so
//!   the fault repeats and ends the process as it would have (a real bug stays a crash).
//!
//! Invariants: the handler only does atomic loads and stores and two system calls (`mmap`,
//! `sigaction`), all async-signal-safe; a range is unregistered before it is unmapped.
//! What is lost is lost: the zero copy holds no jobs, and this process never sees the file
//! again through that mapping.
//!
//! [`RETIRED`]: crate::layout::RETIRED

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Once;

/// Mapped segments one process can hold at once and still be guarded. A process maps one or
/// two (the daemon's, a `--recreate`'s old one); tests map a few more.
const SLOTS: usize = 64;

struct Range {
    start: AtomicUsize,
    len: AtomicUsize,
    /// Offset of the header's ready word from `start`.
    ready_at: AtomicUsize,
    lost: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Range = Range {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    ready_at: AtomicUsize::new(0),
    lost: AtomicBool::new(false),
};

static RANGES: [Range; SLOTS] = [EMPTY; SLOTS];
static INSTALL: Once = Once::new();
/// The disposition before ours, to hand a fault that is not ours back to.
static mut PREVIOUS: Option<libc::sigaction> = None;
/// Faults taken inside a segment (for tests and logs).
static TAKEN: AtomicU32 = AtomicU32::new(0);

/// A registered range; unregisters when dropped (drop it before unmapping the range).
#[derive(Debug)]
pub struct Guard(usize);

impl Guard {
    /// Guards `[start, start + len)`; `ready_at` is the offset of the header's ready word.
    /// `None` when every slot is taken (the range then stays unguarded, as before this
    /// module existed).
    pub fn register(start: usize, len: usize, ready_at: usize) -> Option<Guard> {
        INSTALL.call_once(install);
        for (i, r) in RANGES.iter().enumerate() {
            if r.start.compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                r.lost.store(false, Ordering::Relaxed);
                r.ready_at.store(ready_at, Ordering::Relaxed);
                // Release: the handler that sees `len` sees the rest.
                r.len.store(len, Ordering::Release);
                return Some(Guard(i));
            }
        }
        None
    }

    /// Whether the range took a SIGBUS (its file was truncated) and now maps zero pages.
    pub fn is_lost(&self) -> bool {
        RANGES[self.0].lost.load(Ordering::Acquire)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let r = &RANGES[self.0];
        r.len.store(0, Ordering::Release);
        r.start.store(0, Ordering::Release);
    }
}

/// How many SIGBUS faults inside a segment this process has survived.
pub fn faults_taken() -> u32 {
    TAKEN.load(Ordering::Relaxed)
}

fn install() {
    // SAFETY: a zeroed sigaction with an SA_SIGINFO handler that only does what the module's
    // invariants list. `PREVIOUS` is written here once (under `INSTALL`), just after the
    // handler is in place: a foreign SIGBUS in between finds it unset and gets the default
    // disposition, which is what it almost always holds anyway.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
            as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &sa, &mut old) == 0 {
            PREVIOUS = Some(old);
        }
    }
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for r in RANGES.iter() {
        let len = r.len.load(Ordering::Acquire);
        let start = r.start.load(Ordering::Acquire);
        if len == 0 || addr < start || addr >= start + len {
            continue;
        }
        // SAFETY: `[start, start + len)` is a live mapping of ours (registered until just
        // before it is unmapped); replacing it with private zero pages makes every access
        // to it valid again. The ready word is inside the range and aligned (checked at
        // attach).
        unsafe {
            let p = libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                break;
            }
            let ready = &*((start + r.ready_at.load(Ordering::Relaxed)) as *const AtomicU32);
            ready.store(crate::layout::RETIRED, Ordering::Release);
        }
        r.lost.store(true, Ordering::Release);
        TAKEN.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // Not a segment's fault: put the previous disposition back; returning re-runs the faulting
    // instruction, which then faults under it (the default: the process dies of SIGBUS).
    // SAFETY: `PREVIOUS` is written once, at installation, and never again.
    unsafe {
        #[allow(static_mut_refs)]
        match PREVIOUS.as_ref() {
            Some(old) if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN => {
                if old.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(old.sa_sigaction);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(old.sa_sigaction);
                    f(sig);
                }
            }
            _ => {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
            }
        }
    }
}
