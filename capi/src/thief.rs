//! `xtcq_thief`: a consumer of one queue, stealing from its overflow ring and every deque.
//!
//! - Thread-safe: several threads may steal through one thief at once, each into its own
//!   job handle.
//! - A steal is one CAS on the shared deque, no system call; `xtcq_thief_steal_wait` sleeps
//!   on a futex and is woken by a push in any process.

use std::ffi::{c_char, c_int};
use std::time::Duration;

use ::xtcq_client::{Error, Job, ThiefHandle};

use crate::client::{not_forked, xtcq_client};
use crate::entry::{arg, free_handle, guarded, shared};
use crate::job::xtcq_job;
use crate::producer::attach;
use crate::status::{fail, from_error, XTCQ_EMPTY, XTCQ_E_INVALID, XTCQ_OK};

/// `timeout_ms` for [`xtcq_thief_steal_wait`]: wait with no limit.
pub const XTCQ_WAIT_FOREVER: u32 = u32::MAX;

/// A consumer of one queue (opaque).
pub struct xtcq_thief {
    pub(crate) inner: ThiefHandle,
    pub(crate) born: u64,
    /// Its wake descriptor, once asked for (`xtcq_thief_wait_fd`).
    pub(crate) wake: std::sync::Mutex<Option<::xtcq_client::WakeFd>>,
}

/// Attaches to `queue` as a thief and stores the handle in `*out`.
///
/// # Safety
/// `client` is a live client; `queue` a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn xtcq_thief_attach(
    client: *const xtcq_client,
    queue: *const c_char,
    out: *mut *mut xtcq_thief,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        attach(client, queue, out, |c, q| {
            Ok(xtcq_thief { inner: c.inner.attach_thief(q)?, born: c.born, wake: Default::default() })
        })
    }
}

/// Frees a thief (NULL is ignored). Jobs claimed through it stay claimed in their handles.
///
/// # Safety
/// `thief` is NULL or came from `xtcq_thief_attach`, no other thread uses it, and it is not
/// used again.
#[no_mangle]
pub unsafe extern "C" fn xtcq_thief_free(thief: *mut xtcq_thief) {
    guarded(|| {
        // SAFETY: the caller's contract.
        unsafe { free_handle(thief, |t| t.born) };
        XTCQ_OK
    });
}

/// One steal attempt round and what became of it.
pub(crate) fn claim_into(
    thief: *const xtcq_thief,
    job: *mut xtcq_job,
    steal: impl for<'t> FnOnce(&'t ThiefHandle) -> Result<Option<Job<'t>>, Error>,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract (a live thief; the job used by this thread only).
        let (t, j) = match unsafe { (shared(thief, "thief"), arg(job, "job")) } {
            (Ok(t), Ok(j)) => (t, j),
            (Err(code), _) | (_, Err(code)) => return code,
        };
        if let Err(code) = not_forked(t.born).and_then(|()| j.ready_for_claim()) {
            return code;
        }
        match steal(&t.inner) {
            Ok(Some(claimed)) => {
                j.hold(claimed);
                XTCQ_OK
            }
            Ok(None) => XTCQ_EMPTY,
            Err(e) => from_error(&e),
        }
    })
}

/// Claims one job into `job` without waiting; `XTCQ_EMPTY` when the queue looked empty.
///
/// # Safety
/// `thief` is a live thief; `job` a live job handle used by this thread only.
#[no_mangle]
pub unsafe extern "C" fn xtcq_thief_steal(thief: *const xtcq_thief, job: *mut xtcq_job) -> c_int {
    claim_into(thief, job, ThiefHandle::steal)
}

/// Claims one job into `job`, sleeping up to `timeout_ms` for one to arrive
/// ([`XTCQ_WAIT_FOREVER`]: no limit; 0: do not sleep). `XTCQ_EMPTY` on timeout. Wait in
/// short steps (say 100 ms) to check for interrupts between them.
///
/// # Safety
/// `thief` is a live thief; `job` a live job handle used by this thread only.
#[no_mangle]
pub unsafe extern "C" fn xtcq_thief_steal_wait(
    thief: *const xtcq_thief,
    job: *mut xtcq_job,
    timeout_ms: u32,
) -> c_int {
    let timeout = (timeout_ms != XTCQ_WAIT_FOREVER).then(|| Duration::from_millis(timeout_ms.into()));
    claim_into(thief, job, |t| t.steal_wait(timeout))
}

/// Most jobs one [`xtcq_thief_steal_batch`] takes; also the chunk `xtcq_owner_push_batch`
/// puts in the owner's deque with one store.
pub const XTCQ_MAX_BATCH: usize = 128;

/// Claims up to `n` jobs (1 to [`XTCQ_MAX_BATCH`]) with one steal, into `jobs[0]` ..
/// `jobs[*count - 1]`: from the overflow ring while it has any, else what one deque holds, up
/// to `n`, taken with one CAS on its `top` (FIFO queues; one CAS per job from a LIFO deque).
/// Each job is still claimed by its own CAS on its record. `XTCQ_EMPTY` (`*count` 0) when the
/// queue looked empty. Every handle in `jobs` must hold no job; settle each job as one taken
/// by `xtcq_thief_steal`.
///
/// # Safety
/// `thief` is a live thief; `jobs` points to `n` distinct live job handles used by this
/// thread only; `count` is writable.
#[no_mangle]
pub unsafe extern "C" fn xtcq_thief_steal_batch(
    thief: *const xtcq_thief,
    jobs: *const *mut xtcq_job,
    n: usize,
    count: *mut usize,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (t, count) = match unsafe { (shared(thief, "thief"), arg(count, "count")) } {
            (Ok(t), Ok(c)) => (t, c),
            (Err(code), _) | (_, Err(code)) => return code,
        };
        *count = 0;
        if jobs.is_null() || n == 0 || n > XTCQ_MAX_BATCH {
            return fail(
                XTCQ_E_INVALID,
                format!("jobs must point to 1 to {XTCQ_MAX_BATCH} job handles (n = {n})"),
            );
        }
        // SAFETY: the caller's contract: `n` readable pointers.
        let ptrs = unsafe { std::slice::from_raw_parts(jobs, n) };
        // Two entries naming one handle would be two `&mut` of it.
        let mut sorted = ptrs.to_vec();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return fail(XTCQ_E_INVALID, "jobs names one job handle twice");
        }
        let mut handles = Vec::with_capacity(n);
        for &p in ptrs {
            // SAFETY: the caller's contract; distinct, checked above.
            match unsafe { arg(p, "a job handle in jobs") } {
                Ok(j) => handles.push(j),
                Err(code) => return code,
            }
        }
        if let Err(code) =
            not_forked(t.born).and_then(|()| handles.iter().try_for_each(|j| j.ready_for_claim()))
        {
            return code;
        }
        match t.inner.steal_batch(n) {
            Ok(got) if got.is_empty() => XTCQ_EMPTY,
            Ok(got) => {
                *count = got.len();
                for (j, job) in handles.into_iter().zip(got) {
                    j.hold(job);
                }
                XTCQ_OK
            }
            Err(e) => from_error(&e),
        }
    })
}

/// Jobs visible in the queue (approximate); 0 for NULL.
///
/// # Safety
/// `thief` is NULL or a live thief.
#[no_mangle]
pub unsafe extern "C" fn xtcq_thief_len(thief: *const xtcq_thief) -> usize {
    // SAFETY: the caller's contract.
    unsafe { thief.as_ref() }.filter(|t| !crate::fork::forked_since(t.born)).map_or(0, |t| t.inner.len())
}
