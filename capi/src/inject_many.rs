//! `xtcq_injector_push_many`: many jobs through an injector in one call, each with its id,
//! for a caller that has them all at once (the PostgreSQL extension's array push).
//!
//! A run of `xtcq_injector_push_at` calls pays, per job, the entry checks, the handle's
//! checks against the segment, a clock read and a wake check (a fence); this pays them once
//! per chunk of `XTCQ_MAX_BATCH` jobs. Each job still takes the single push's path in shared
//! memory (`Injector::push_many`), so what a process killed part way leaves is what a run of
//! single pushes would.

use std::ffi::c_int;

use ::xtcq_client::JobId;

use crate::client::not_forked;
use crate::entry::{arg, guarded};
use crate::producer::{batch_args, outputs_apart_from_jobs, payload_arg, within, xtcq_injector, Overlap};
use crate::report::packed;
use crate::status::{fail, from_error, XTCQ_E_INVALID, XTCQ_OK};

/// Jobs per call into the engine: one wake each, so a sleeping consumer starts on the first
/// ones while the rest are pushed.
const CHUNK: usize = crate::thief::XTCQ_MAX_BATCH;

/// Queues `n` jobs in order at `priority` (see `xtcq_injector_push_priority`) on the queue's
/// overflow ring, job `i` being the `lens[i]` bytes at `payloads[i]` (NULL with length 0 is
/// an empty payload), and stores job `i`'s id in `ids[i]` (`index << 32 | birth`, as
/// `xtcq_injector_push_id`; `ids` NULL: not stored). As many `xtcq_injector_push_at` calls
/// would, with the checks and the wake made once per chunk of `XTCQ_MAX_BATCH` jobs.
///
/// `*queued` is set to how many were queued, always the first ones: `n` on `XTCQ_OK`. An
/// invalid argument and a payload larger than the segment's records hold
/// (`XTCQ_E_TOO_LARGE`) are found before anything is queued. On a failure part way
/// (`XTCQ_E_FULL`, ...) jobs `0 .. *queued` are queued, with their ids stored, and the others
/// are not.
///
/// # Safety
/// `injector` is a live injector, used by this thread only for the call; `payloads` and
/// `lens` point to `n` readable elements each, `payloads[i]` to `lens[i]` readable bytes;
/// `ids` is NULL or points to `n` writable elements; `queued` is writable. `ids` and
/// `queued` may not overlap `payloads`, `lens`, a payload's bytes or each other
/// (`XTCQ_E_INVALID`; `*queued` is left alone when it is what overlaps).
#[no_mangle]
pub unsafe extern "C" fn xtcq_injector_push_many(
    injector: *mut xtcq_injector,
    payloads: *const *const u8,
    lens: *const usize,
    n: usize,
    priority: u32,
    ids: *mut u64,
    queued: *mut usize,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let i = match unsafe { arg(injector, "injector") } {
            Ok(i) => i,
            Err(code) => return code,
        };
        if let Err(code) = outputs_apart(payloads, lens, n, ids, queued) {
            return code;
        }
        // SAFETY: the caller's contract; the arrays are read only where `batch_args` would.
        match unsafe { outputs_apart_from_jobs(payloads, lens, n, ids, queued, i.inner.payload_capacity()) } {
            Ok(()) => {}
            // Nothing written: the count would land in a job's bytes.
            Err(Overlap::Queued(code)) => return code,
            Err(Overlap::Ids(code)) => {
                // SAFETY: non-null, writable by the caller's contract, apart from every job.
                unsafe { queued.write(0) };
                return code;
            }
        }
        // SAFETY: non-null, writable by the caller's contract, and outside every array.
        unsafe { queued.write(0) };
        let mut done = 0;
        // SAFETY: the caller's contract, with the outputs checked apart from the inputs.
        let code = unsafe { push_chunks(i, payloads, lens, n, priority, ids, &mut done) };
        // SAFETY: as above.
        unsafe { queued.write(done) };
        code
    })
}

/// Refuses outputs that are NULL (`queued`), misaligned, or that overlap an array the call
/// reads or each other: writing there would change a job or a length under the call (and
/// break Rust's aliasing rules).
fn outputs_apart(
    payloads: *const *const u8,
    lens: *const usize,
    n: usize,
    ids: *mut u64,
    queued: *mut usize,
) -> Result<(), c_int> {
    if queued.is_null() {
        return Err(fail(XTCQ_E_INVALID, "queued is NULL"));
    }
    if within(queued, payloads, n) || within(queued, lens, n) {
        return Err(fail(XTCQ_E_INVALID, "queued points into payloads or lens"));
    }
    if ids.is_null() || n == 0 {
        return Ok(());
    }
    if !ids.is_aligned() || n > isize::MAX as usize / std::mem::size_of::<u64>() {
        return Err(fail(XTCQ_E_INVALID, "ids is not aligned, or longer than any array"));
    }
    let ids_bytes = n * std::mem::size_of::<u64>();
    let word = std::mem::size_of::<usize>();
    let overlaps = |start: usize, bytes: usize| {
        start != 0
            && start < (ids as usize).saturating_add(ids_bytes)
            && (ids as usize) < start.saturating_add(bytes)
    };
    let array_bytes = n.saturating_mul(word);
    if overlaps(payloads as usize, array_bytes)
        || overlaps(lens as usize, array_bytes)
        || overlaps(queued as usize, word)
    {
        return Err(fail(XTCQ_E_INVALID, "ids overlaps payloads, lens or queued"));
    }
    Ok(())
}

/// The body of [`xtcq_injector_push_many`]: `*done` counts the jobs queued.
///
/// # Safety
/// As `xtcq_injector_push_many`, with its outputs checked by [`outputs_apart`].
unsafe fn push_chunks(
    inj: &xtcq_injector,
    payloads: *const *const u8,
    lens: *const usize,
    n: usize,
    priority: u32,
    ids: *mut u64,
    done: &mut usize,
) -> c_int {
    if let Err(code) = not_forked(inj.born) {
        return code;
    }
    // SAFETY: the caller's contract.
    let (ptrs, lens) = match unsafe { batch_args(payloads, lens, n, inj.inner.payload_capacity()) } {
        Ok(v) => v,
        Err(code) => return code,
    };
    let mut chunk: [&[u8]; CHUNK] = [&[]; CHUNK];
    while *done < n {
        let len = (n - *done).min(CHUNK);
        for (k, slot) in chunk[..len].iter_mut().enumerate() {
            let i = *done + k;
            // SAFETY: checked by `batch_args`; checked again as read, as `push_all` does.
            *slot = match unsafe { payload_arg(ptrs[i], lens[i]) } {
                Ok(bytes) => bytes,
                Err(code) => return code,
            };
        }
        let first = *done;
        let pushed = inj.inner.push_many(&chunk[..len], priority, |k, h| {
            if !ids.is_null() {
                // SAFETY: `first + k < n`, and `ids` holds `n` writable elements apart from
                // every input (`outputs_apart`).
                unsafe { ids.add(first + k).write(packed(JobId::of_push(h))) };
            }
        });
        match pushed {
            Ok(k) => *done += k,
            Err(e) => return from_error(&e),
        }
    }
    XTCQ_OK
}
