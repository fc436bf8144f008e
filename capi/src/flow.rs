//! Flow control beyond pause (`client.rs` has pause and resume): a queue's concurrency and
//! rate limits, and cancelling a job by its id.
//!
//! - Only the queue's owner, root and the daemon's uid may (`XTCQ_E_UNAUTHORIZED` otherwise).
//! - A cancel's outcome is stored as one of the `XTCQ_CANCEL_*` values; the call returns
//!   `XTCQ_OK` whatever the outcome, an error only when the request could not be made.

use std::ffi::{c_char, c_int};

use ::xtcq_client::{CancelOutcome, JobId, RateLimit};

use crate::client::{client_and_name, xtcq_client};
use crate::entry::guarded;
use crate::status::{fail, from_error, XTCQ_E_INVALID, XTCQ_OK};

/// The job was queued: it will not run.
pub const XTCQ_CANCEL_WAS_QUEUED: c_int = 1;
/// The job was delayed: it will not run.
pub const XTCQ_CANCEL_WAS_DELAYED: c_int = 2;
/// The job was running: its holder's ack fails, and the command `xtcq work` ran for it was
/// stopped.
pub const XTCQ_CANCEL_WAS_RUNNING: c_int = 3;
/// The job was running and its command could not be stopped: it is a dead letter now.
pub const XTCQ_CANCEL_NOT_STOPPED: c_int = 4;
/// The job had finished already.
pub const XTCQ_CANCEL_FINISHED: c_int = 5;
/// The job is a dead letter (purge it instead).
pub const XTCQ_CANCEL_DEAD: c_int = 6;
/// Its producer or holder was writing it all the while: nothing done, try again.
pub const XTCQ_CANCEL_BUSY: c_int = 7;
/// The queue has no job with this id.
pub const XTCQ_CANCEL_UNKNOWN: c_int = 8;

/// Cancels job `index.birth` of queue `name` (the id `xtcq push --print-handle` prints): a
/// queued or delayed job never runs; a running one is taken from its holder and its `xtcq
/// work` command stopped before this returns. Stores what it did in `*outcome` (when not
/// NULL), one of the `XTCQ_CANCEL_*` values.
///
/// # Safety
/// `client` is a live client; `name` a NUL-terminated string; `outcome` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn xtcq_cancel_job(
    client: *mut xtcq_client,
    name: *const c_char,
    index: u32,
    birth: u32,
    outcome: *mut c_int,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (c, name) = match unsafe { client_and_name(client, name) } {
            Ok(v) => v,
            Err(code) => return code,
        };
        match c.inner.cancel_job(name, JobId { index, birth }) {
            Ok(out) => {
                if !outcome.is_null() {
                    // SAFETY: not NULL, and writable by the caller's contract.
                    unsafe { *outcome = outcome_code(out) };
                }
                XTCQ_OK
            }
            Err(e) => from_error(&e),
        }
    })
}

fn outcome_code(out: CancelOutcome) -> c_int {
    match out {
        CancelOutcome::WasQueued => XTCQ_CANCEL_WAS_QUEUED,
        CancelOutcome::WasDelayed => XTCQ_CANCEL_WAS_DELAYED,
        CancelOutcome::WasRunning { .. } => XTCQ_CANCEL_WAS_RUNNING,
        CancelOutcome::NotStopped { .. } => XTCQ_CANCEL_NOT_STOPPED,
        CancelOutcome::Finished => XTCQ_CANCEL_FINISHED,
        CancelOutcome::Dead => XTCQ_CANCEL_DEAD,
        CancelOutcome::BeingPushed | CancelOutcome::Busy => XTCQ_CANCEL_BUSY,
        CancelOutcome::Unknown => XTCQ_CANCEL_UNKNOWN,
    }
}

/// Sets queue `name`'s concurrency limit: at most `max` of its jobs claimed at once, across
/// every process (0: no limit).
///
/// # Safety
/// `client` is a live client; `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn xtcq_set_max_running(
    client: *mut xtcq_client,
    name: *const c_char,
    max: u32,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (c, name) = match unsafe { client_and_name(client, name) } {
            Ok(v) => v,
            Err(code) => return code,
        };
        c.inner.set_max_running(name, max).map_or_else(|e| from_error(&e), |()| XTCQ_OK)
    })
}

/// Sets queue `name`'s rate limit: at most `burst` of its jobs started at once after a quiet
/// spell, then one every `interval_ns` (0: no limit; `burst` then ignored), across every
/// process. `burst` is at least 1 with a limit.
///
/// # Safety
/// `client` is a live client; `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn xtcq_set_max_rate(
    client: *mut xtcq_client,
    name: *const c_char,
    interval_ns: u64,
    burst: u32,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (c, name) = match unsafe { client_and_name(client, name) } {
            Ok(v) => v,
            Err(code) => return code,
        };
        if interval_ns != 0 && burst == 0 {
            return fail(XTCQ_E_INVALID, "xtcq_set_max_rate: burst must be at least 1 with a rate limit");
        }
        let limit = RateLimit { interval_ns, burst: if interval_ns == 0 { 0 } else { burst } };
        c.inner.set_max_rate(name, limit).map_or_else(|e| from_error(&e), |()| XTCQ_OK)
    })
}
