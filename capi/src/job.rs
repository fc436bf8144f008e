//! `xtcq_job`: a claimed job, made once with `xtcq_job_new` and filled by each pop or steal.
//!
//! - One thread at a time; the handle may move between threads.
//! - A pop or steal into a handle that still holds a job is refused (`XTCQ_E_INVALID`):
//!   settle it first (ack, nack, fail or release), so no claim is given back by surprise.
//! - Its payload buffer keeps its capacity across jobs, so steady-state steals allocate
//!   nothing; `xtcq_job_payload`'s pointer is valid until the handle's next pop, steal or
//!   free.
//! - Freed while holding a job, the job is nacked (re-queued). In a forked child the
//!   handle is only forgotten: the claim is the parent's.

use std::ffi::{c_char, c_int};
use std::time::Duration;

use ::xtcq_client::{Error, Job, OwnedJob};

use crate::client::not_forked;
use crate::entry::{arg, free_handle, guarded, store};
use crate::fork;
use crate::status::{fail, from_error, XTCQ_E_BUFFER_TOO_SMALL, XTCQ_E_INVALID, XTCQ_OK};

/// A claimed job's handle (opaque).
pub struct xtcq_job {
    held: Option<OwnedJob>,
    payload: Vec<u8>,
    payload_read: bool,
    born: u64,
}

/// What a claimed job is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct xtcq_job_info {
    /// The job's record in the segment.
    pub index: u32,
    /// The record's generation for this claim (it moves on with each attempt).
    pub generation: u32,
    /// With `index`, the job's stable id (`index.birth`), the same across its attempts: the
    /// id `xtcq work`, `xtcq dead` and the daemon's logs print.
    pub birth: u32,
    /// Times the job was given back before this claim.
    pub attempts: u32,
    /// The claim's lease deadline, CLOCK_MONOTONIC ns; 0 when it has no lease.
    pub lease_deadline_ns: u64,
}

impl xtcq_job {
    /// Fails unless the handle may take a new job (made in this process, holding none).
    pub(crate) fn ready_for_claim(&self) -> Result<(), c_int> {
        not_forked(self.born)?;
        match &self.held {
            Some(j) => Err(fail(
                XTCQ_E_INVALID,
                format!(
                    "job handle still holds job {}; ack, nack, fail or release it before the next pop or steal",
                    j.handle()
                ),
            )),
            None => Ok(()),
        }
    }

    /// Takes `job` (a pop or steal result) into the handle.
    pub(crate) fn hold(&mut self, job: Job<'_>) {
        self.held = Some(job.into_owned());
        self.payload.clear();
        self.payload_read = false;
    }

    fn held(&mut self) -> Result<&mut OwnedJob, c_int> {
        not_forked(self.born)?;
        self.held
            .as_mut()
            .ok_or_else(|| fail(XTCQ_E_INVALID, "job handle holds no job (pop or steal one first)"))
    }

    fn settle(&mut self, how: impl FnOnce(OwnedJob) -> Result<(), Error>) -> c_int {
        if let Err(code) = self.held() {
            return code;
        }
        let job = self.held.take().expect("checked above");
        self.payload_read = false;
        match how(job) {
            Ok(()) => XTCQ_OK,
            Err(e) => from_error(&e),
        }
    }
}

/// Runs `f` on the job handle `job`.
fn with_job(job: *mut xtcq_job, f: impl FnOnce(&mut xtcq_job) -> c_int) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract (a live handle, one thread at a time).
        match unsafe { arg(job, "job") } {
            Ok(j) => f(j),
            Err(code) => code,
        }
    })
}

/// Makes an empty job handle in `*out`, to pass to pops and steals.
///
/// # Safety
/// `out` points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn xtcq_job_new(out: *mut *mut xtcq_job) -> c_int {
    guarded(|| {
        if out.is_null() {
            return fail(XTCQ_E_INVALID, "out is NULL");
        }
        let job = xtcq_job { held: None, payload: Vec::new(), payload_read: false, born: fork::generation() };
        // SAFETY: `out` is non-null and writable (the caller's contract).
        unsafe { store(out, job) };
        XTCQ_OK
    })
}

/// Frees a job handle (NULL is ignored); a job it still holds is nacked.
///
/// # Safety
/// `job` is NULL or came from `xtcq_job_new` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn xtcq_job_free(job: *mut xtcq_job) {
    guarded(|| {
        // SAFETY: the caller's contract.
        unsafe { free_handle(job, |j| j.born) };
        XTCQ_OK
    });
}

/// Whether the handle holds a claimed job: 1 yes, 0 no (or NULL).
///
/// # Safety
/// `job` is NULL or a live job handle.
#[no_mangle]
pub unsafe extern "C" fn xtcq_job_held(job: *const xtcq_job) -> c_int {
    // SAFETY: the caller's contract.
    c_int::from(unsafe { job.as_ref() }.is_some_and(|j| j.held.is_some()))
}

/// Whether the held job was cancelled (`xtcq cancel`) while this process held it: 1 yes, 0
/// no (still ours, no job held, NULL, or its record holds another job by now). A long job may
/// look now and then and stop; its ack then returns [`XTCQ_E_CANCELLED`].
///
/// # Safety
/// `job` is NULL or a live job handle.
#[no_mangle]
pub unsafe extern "C" fn xtcq_job_cancelled(job: *const xtcq_job) -> c_int {
    // SAFETY: the caller's contract.
    let held = unsafe { job.as_ref() }.and_then(|j| j.held.as_ref());
    c_int::from(held.is_some_and(|h| h.cancelled()))
}

/// The held job's payload: `*data` points into the handle (valid until its next pop, steal
/// or free), `*len` its length.
///
/// # Safety
/// `job` is a live job handle; `data` and `len` point to writable storage.
#[no_mangle]
pub unsafe extern "C" fn xtcq_job_payload(
    job: *mut xtcq_job,
    data: *mut *const u8,
    len: *mut usize,
) -> c_int {
    with_job(job, |j| {
        if data.is_null() || len.is_null() {
            return fail(XTCQ_E_INVALID, "data or len is NULL");
        }
        if let Err(code) = read_into_handle(j) {
            return code;
        }
        // SAFETY: both non-null and writable (the caller's contract).
        unsafe {
            *data = j.payload.as_ptr();
            *len = j.payload.len();
        }
        XTCQ_OK
    })
}

/// Copies the held job's payload into `buf` of `cap` bytes and stores its length in `*len`.
/// When `cap` is too small nothing is copied, `*len` says how much is needed, and the
/// status is `XTCQ_E_BUFFER_TOO_SMALL`.
///
/// # Safety
/// `job` is a live job handle; `buf` is valid for `cap` bytes (or NULL with `cap` 0); `len`
/// points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn xtcq_job_copy_payload(
    job: *mut xtcq_job,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> c_int {
    with_job(job, |j| {
        if len.is_null() || (buf.is_null() && cap != 0) {
            return fail(XTCQ_E_INVALID, "len is NULL, or buf is NULL with a non-zero cap");
        }
        if let Err(code) = read_into_handle(j) {
            return code;
        }
        let n = j.payload.len();
        // SAFETY: `len` is non-null and writable (the caller's contract).
        unsafe { *len = n };
        if n > cap {
            return fail(XTCQ_E_BUFFER_TOO_SMALL, format!("the payload is {n} bytes, the buffer {cap}"));
        }
        // SAFETY: `buf` is valid for `cap >= n` bytes and does not overlap the handle's buffer.
        unsafe { std::ptr::copy_nonoverlapping(j.payload.as_ptr(), buf, n) };
        XTCQ_OK
    })
}

fn read_into_handle(j: &mut xtcq_job) -> Result<(), c_int> {
    // The held check comes first: an empty handle must not answer with the last job's bytes.
    j.held()?;
    if !j.payload_read {
        let held = j.held.as_mut().expect("checked above");
        j.payload.clear();
        held.read_payload(&mut j.payload).map_err(|e| from_error(&e))?;
        j.payload_read = true;
    }
    Ok(())
}

/// Stores what the held job is in `*info`.
///
/// # Safety
/// `job` is a live job handle; `info` points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn xtcq_job_get_info(job: *mut xtcq_job, info: *mut xtcq_job_info) -> c_int {
    with_job(job, |j| {
        if info.is_null() {
            return fail(XTCQ_E_INVALID, "info is NULL");
        }
        let held = match j.held() {
            Ok(h) => h,
            Err(code) => return code,
        };
        let h = held.handle();
        let value = xtcq_job_info {
            index: h.index,
            generation: h.generation,
            birth: held.id().birth,
            attempts: held.attempts(),
            lease_deadline_ns: held.lease_deadline_ns().unwrap_or(0),
        };
        // SAFETY: non-null and writable (the caller's contract).
        unsafe { *info = value };
        XTCQ_OK
    })
}

/// Done: frees the job's record. `XTCQ_E_NOT_HELD` when its lease expired or it was
/// recovered meanwhile (its result is not recorded; it may run elsewhere). The handle is
/// empty afterwards either way.
///
/// # Safety
/// `job` is a live job handle.
#[no_mangle]
pub unsafe extern "C" fn xtcq_job_ack(job: *mut xtcq_job) -> c_int {
    with_job(job, |j| j.settle(OwnedJob::ack))
}

/// Failed: re-queues the job (attempt + 1), or dead-letters it at the queue's limit.
///
/// # Safety
/// `job` is a live job handle.
#[no_mangle]
pub unsafe extern "C" fn xtcq_job_nack(job: *mut xtcq_job) -> c_int {
    with_job(job, |j| j.settle(OwnedJob::nack))
}

/// Like `xtcq_job_nack`, keeping `reason` (its first bytes; any encoding, bytes that are not
/// UTF-8 become U+FFFD) as the job's last error, which its dead letter shows.
///
/// # Safety
/// `job` is a live job handle; `reason` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn xtcq_job_fail(job: *mut xtcq_job, reason: *const c_char) -> c_int {
    with_job(job, |j| {
        if reason.is_null() {
            return fail(XTCQ_E_INVALID, "reason is NULL");
        }
        // A backend's message may be in its database's encoding: keep it, lossily.
        // SAFETY: non-null and NUL-terminated (the caller's contract).
        let text = unsafe { std::ffi::CStr::from_ptr(reason) }.to_string_lossy();
        j.settle(|h| h.fail(&text))
    })
}

/// Failed, retried after `delay_ms` at the earliest: like `xtcq_job_fail` (attempt + 1,
/// dead-lettered at the queue's limit), but the job is held back that long (a retry
/// backoff). `reason` may be NULL (no last error kept).
///
/// # Safety
/// `job` is a live job handle; `reason` NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn xtcq_job_fail_after(
    job: *mut xtcq_job,
    reason: *const c_char,
    delay_ms: u64,
) -> c_int {
    with_job(job, |j| {
        // SAFETY: NULL, or non-null and NUL-terminated (the caller's contract).
        let text = (!reason.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(reason) }.to_string_lossy());
        j.settle(|h| h.fail_after(text.as_deref(), Duration::from_millis(delay_ms)))
    })
}

/// Not run after all: re-queues the job without counting an attempt.
///
/// # Safety
/// `job` is a live job handle.
#[no_mangle]
pub unsafe extern "C" fn xtcq_job_release(job: *mut xtcq_job) -> c_int {
    with_job(job, |j| j.settle(OwnedJob::release))
}

/// Sets the held job's lease to `lease_ms` from now (a heartbeat for a long job).
/// `XTCQ_E_NOT_HELD` once the daemon has re-queued it.
///
/// # Safety
/// `job` is a live job handle.
#[no_mangle]
pub unsafe extern "C" fn xtcq_job_extend_lease(job: *mut xtcq_job, lease_ms: u32) -> c_int {
    with_job(job, |j| match j.held() {
        Ok(h) => match h.extend_lease(Duration::from_millis(lease_ms.into())) {
            Ok(()) => XTCQ_OK,
            Err(e) => from_error(&e),
        },
        Err(code) => code,
    })
}
