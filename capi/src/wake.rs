//! Waiting for a thief's work from an event loop: a descriptor to poll (`epoll`, `poll`,
//! libuv, PostgreSQL's `AddWaitEventToSet(set, WL_SOCKET_READABLE, fd, ...)`), with no thread
//! and no signal handler in the library.
//!
//! The loop:
//! ```c
//! int fd; xtcq_thief_wait_fd(thief, &fd);           // once; register fd for reading
//! for (;;) {
//!     int st = xtcq_thief_steal_or_arm(thief, job); // never blocks
//!     if (st == XTCQ_OK) { run(job); xtcq_job_ack(job); continue; }
//!     if (st == XTCQ_E_UNREACHABLE) {               // daemon gone: a new fd once it is back
//!         while (xtcq_thief_wait_fd(thief, &fd) == XTCQ_E_UNREACHABLE) sleep(1);
//!         continue;
//!     }
//!     if (st != XTCQ_EMPTY) break;                  // an error
//!     wait until fd is readable (and whatever else the loop waits for);
//! }
//! ```
//!
//! Rules kept: one descriptor per thief, made on the first `xtcq_thief_wait_fd`, of the futex
//! kind where the kernel allows io_uring futex waits (else the datagram kind, which costs the
//! daemon a socket; a queue has room for 256; `XTCQ_WAKE_FD` picks one, see `xtcq_client`'s
//! `wake` module); readiness may be spurious, never missed;
//! `xtcq_thief_steal_or_arm` consumes the readiness itself just before it arms (woken, the
//! first thing it does is the steal); the daemon going away makes the descriptor readable and
//! `xtcq_thief_steal_or_arm` (or `xtcq_thief_wait_clear`) return `XTCQ_E_UNREACHABLE`, after
//! which the thief drops it (the fd closes) and the next `xtcq_thief_wait_fd` makes a new one
//! (to register in place of the old); in a forked child every call is `XTCQ_E_FORKED`.

use std::ffi::c_int;
use std::os::fd::AsRawFd;
use std::sync::MutexGuard;

use ::xtcq_client::{Error, WakeFd};

use crate::client::not_forked;
use crate::entry::{arg, guarded, shared};
use crate::job::xtcq_job;
use crate::status::{fail, from_error, XTCQ_E_INVALID, XTCQ_E_UNREACHABLE, XTCQ_OK};
use crate::thief::{claim_into, xtcq_thief};

fn lock(t: &xtcq_thief) -> MutexGuard<'_, Option<WakeFd>> {
    t.wake.lock().unwrap_or_else(|p| p.into_inner())
}

/// Stores in `*fd` the thief's wake descriptor, made on the first call: it becomes readable
/// when a job may be there to steal (after `xtcq_thief_steal_or_arm` said `XTCQ_EMPTY`), or
/// when the daemon went away. Close-on-exec; do not close it (the thief owns it). Where it
/// is an io_uring futex wait (Linux 6.7+; `XTCQ_WAKE_FD=datagram` in the environment asks for
/// the datagram kind instead), a thread asleep in `epoll_wait` on it after arming it may get
/// `EINTR` once per wake: wait again.
///
/// # Safety
/// `thief` is a live thief; `fd` writable.
#[no_mangle]
pub unsafe extern "C" fn xtcq_thief_wait_fd(thief: *const xtcq_thief, fd: *mut c_int) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (t, out) = match unsafe { (shared(thief, "thief"), arg(fd, "fd")) } {
            (Ok(t), Ok(o)) => (t, o),
            (Err(code), _) | (_, Err(code)) => return code,
        };
        if let Err(code) = not_forked(t.born) {
            return code;
        }
        let mut w = lock(t);
        if w.is_none() {
            match t.inner.wake_fd() {
                Ok(made) => *w = Some(made),
                Err(e) => return from_error(&e),
            }
        }
        *out = w.as_ref().map_or(-1, |w| w.as_raw_fd());
        XTCQ_OK
    })
}

/// Claims one job into `job`, or, when there is none, consumes the wake descriptor's
/// readiness, arms it and returns `XTCQ_EMPTY`: wait until it is readable and call this
/// again. Never blocks. `XTCQ_E_UNREACHABLE` once the daemon went away (the descriptor is
/// closed then: get a new one with `xtcq_thief_wait_fd`); `XTCQ_E_INVALID` before
/// `xtcq_thief_wait_fd`.
///
/// # Safety
/// `thief` is a live thief; `job` a live job handle used by this thread only.
#[no_mangle]
pub unsafe extern "C" fn xtcq_thief_steal_or_arm(thief: *const xtcq_thief, job: *mut xtcq_job) -> c_int {
    // SAFETY: the caller's contract.
    let Ok(t) = (unsafe { shared(thief, "thief") }) else {
        return fail(XTCQ_E_INVALID, "thief is NULL");
    };
    let mut w = lock(t);
    let Some(wake) = w.as_ref() else {
        return fail(XTCQ_E_INVALID, "this thief has no wake descriptor: call xtcq_thief_wait_fd first");
    };
    let code = claim_into(thief, job, |th| th.steal_or_arm(wake));
    if code == XTCQ_E_UNREACHABLE {
        *w = None;
    }
    code
}

/// Consumes the wake descriptor's readiness (`xtcq_thief_steal_or_arm` does it before it
/// arms; this is for a loop that wants to read it at once). `XTCQ_E_UNREACHABLE` when the
/// daemon went away:
/// the descriptor is then closed; get a new one with `xtcq_thief_wait_fd` (and register it
/// in place of the old).
///
/// # Safety
/// `thief` is a live thief.
#[no_mangle]
pub unsafe extern "C" fn xtcq_thief_wait_clear(thief: *const xtcq_thief) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let t = match unsafe { shared(thief, "thief") } {
            Ok(t) => t,
            Err(code) => return code,
        };
        if let Err(code) = not_forked(t.born) {
            return code;
        }
        let mut w = lock(t);
        let r = match w.as_ref() {
            Some(wake) => wake.clear(),
            None => {
                return fail(
                    XTCQ_E_INVALID,
                    "this thief has no wake descriptor: call xtcq_thief_wait_fd first",
                )
            }
        };
        match r {
            Ok(()) => XTCQ_OK,
            Err(e) => {
                if matches!(e, Error::DaemonLost { .. }) {
                    *w = None;
                }
                from_error(&e)
            }
        }
    })
}

/// Stops waiting without stealing (the loop is about to do something else for a while): a
/// wake sent to this thief meanwhile goes to another waiter. The next
/// `xtcq_thief_steal_or_arm` arms again.
///
/// # Safety
/// `thief` is a live thief.
#[no_mangle]
pub unsafe extern "C" fn xtcq_thief_wait_cancel(thief: *const xtcq_thief) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let t = match unsafe { shared(thief, "thief") } {
            Ok(t) => t,
            Err(code) => return code,
        };
        if let Err(code) = not_forked(t.born) {
            return code;
        }
        if let Some(wake) = lock(t).as_ref() {
            wake.disarm_and_hand_on();
        }
        XTCQ_OK
    })
}
