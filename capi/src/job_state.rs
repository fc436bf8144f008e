//! A job's fate by its id (`xtcq job QUEUE ID`, Rust `Client::job_state`): queued, delayed,
//! running (by which process, how much lease left), dead, finished, cancelled or unknown.
//!
//! - Answered by the daemon from the job's record: a finished or cancelled job is known only
//!   until its record holds another job, then it is `XTCQ_JOB_UNKNOWN`.
//! - A dead letter's reason is not copied here: `xtcq_dead_json` lists it.

use std::ffi::{c_char, c_int};

use ::xtcq_client::{JobId, JobState};

use crate::client::{client_and_name, xtcq_client};
use crate::entry::guarded;
use crate::status::{fail, from_error, XTCQ_E_INVALID, XTCQ_OK};

/// No job of this id in the queue (never was, or finished and its record was reused).
pub const XTCQ_JOB_UNKNOWN: c_int = 0;
/// Its push is under way.
pub const XTCQ_JOB_BEING_PUSHED: c_int = 1;
/// Waiting in line.
pub const XTCQ_JOB_QUEUED: c_int = 2;
/// Waiting for its due time (`due_in_ms`).
pub const XTCQ_JOB_DELAYED: c_int = 3;
/// Claimed by a consumer (`pid`, `lease_left_ms`).
pub const XTCQ_JOB_RUNNING: c_int = 4;
/// A dead letter.
pub const XTCQ_JOB_DEAD: c_int = 5;
/// Acked (or purged as a dead letter).
pub const XTCQ_JOB_FINISHED: c_int = 6;
/// Cancelled.
pub const XTCQ_JOB_CANCELLED: c_int = 7;

/// What became of one job.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct xtcq_job_state_info {
    /// One of the `XTCQ_JOB_*` values.
    pub state: c_int,
    /// Runs given back so far (queued, delayed, running: before this run; dead: all runs).
    pub attempts: u32,
    /// Running: the consumer's pid; 0 when the daemon took the job back and is stopping its
    /// command, or does not know the process.
    pub pid: u32,
    /// Running: milliseconds left on its lease; -1 without a lease.
    pub lease_left_ms: i64,
    /// Delayed: milliseconds until it joins the line (0: due now).
    pub due_in_ms: u64,
}

/// What became of job `index.birth` of queue `name` (the id `xtcq push --print-handle`
/// prints), stored in `*out`.
///
/// # Safety
/// `client` is a live client; `name` a NUL-terminated string; `out` points to writable
/// storage.
#[no_mangle]
pub unsafe extern "C" fn xtcq_job_state(
    client: *mut xtcq_client,
    name: *const c_char,
    index: u32,
    birth: u32,
    out: *mut xtcq_job_state_info,
) -> c_int {
    guarded(|| {
        if out.is_null() {
            return fail(XTCQ_E_INVALID, "out is NULL");
        }
        // SAFETY: the caller's contract.
        let (c, name) = match unsafe { client_and_name(client, name) } {
            Ok(v) => v,
            Err(code) => return code,
        };
        match c.inner.job_state(name, JobId { index, birth }) {
            Ok(state) => {
                // SAFETY: not NULL, and writable by the caller's contract.
                unsafe { *out = info(state) };
                XTCQ_OK
            }
            Err(e) => from_error(&e),
        }
    })
}

fn info(state: JobState) -> xtcq_job_state_info {
    let none = xtcq_job_state_info { lease_left_ms: -1, ..Default::default() };
    let with = |state, attempts| xtcq_job_state_info { state, attempts, ..none };
    match state {
        JobState::Unknown => with(XTCQ_JOB_UNKNOWN, 0),
        JobState::BeingPushed => with(XTCQ_JOB_BEING_PUSHED, 0),
        JobState::Queued { attempts } => with(XTCQ_JOB_QUEUED, attempts),
        JobState::Delayed { due_in_ms, attempts } => {
            xtcq_job_state_info { due_in_ms, ..with(XTCQ_JOB_DELAYED, attempts) }
        }
        JobState::Running { pid, lease_left_ms, attempts } => xtcq_job_state_info {
            pid: pid.unwrap_or(0),
            lease_left_ms: lease_left_ms.map_or(-1, |ms| i64::try_from(ms).unwrap_or(i64::MAX)),
            ..with(XTCQ_JOB_RUNNING, attempts)
        },
        JobState::Dead { attempts, .. } => with(XTCQ_JOB_DEAD, attempts),
        JobState::Finished => with(XTCQ_JOB_FINISHED, 0),
        JobState::Cancelled => with(XTCQ_JOB_CANCELLED, 0),
    }
}
