//! `xtcq_owner` (a producer that owns one deque of a queue) and `xtcq_injector` (a producer
//! without a deque: pushes go to the queue's overflow ring).
//!
//! - One thread at a time per handle (the Chase-Lev owner end is single-threaded); the
//!   handle may move between threads.
//! - A push copies the payload into a record in shared memory: no lock, no allocation, and
//!   a system call only when a consumer sleeps waiting.
//! - Freeing an owner gives its deque back; jobs left in it stay there for thieves.

use std::ffi::{c_char, c_int};

use ::xtcq_client::{InjectorHandle, OwnerHandle};

use crate::client::{not_forked, xtcq_client};
use crate::entry::{arg, c_str, free_handle, guarded, shared, store};
use crate::job::xtcq_job;
use crate::status::{fail, from_error, XTCQ_EMPTY, XTCQ_E_INVALID, XTCQ_E_TOO_LARGE, XTCQ_OK};

/// A queue's deque, owned by this process (opaque).
pub struct xtcq_owner {
    pub(crate) inner: OwnerHandle,
    pub(crate) born: u64,
}

/// A pusher onto a queue's overflow ring (opaque).
pub struct xtcq_injector {
    pub(crate) inner: InjectorHandle,
    pub(crate) born: u64,
}

/// One attach: checks `client`, `queue` and `out`, makes the handle with `make` and stores
/// it in `*out`.
///
/// # Safety
/// As the attach functions: `client` is a live client, `queue` a NUL-terminated string,
/// `out` writable.
pub(crate) unsafe fn attach<T>(
    client: *const xtcq_client,
    queue: *const c_char,
    out: *mut *mut T,
    make: impl FnOnce(&xtcq_client, &str) -> Result<T, ::xtcq_client::Error>,
) -> c_int {
    guarded(|| {
        if out.is_null() {
            return fail(XTCQ_E_INVALID, "out is NULL");
        }
        // SAFETY: the caller's contract.
        let (c, q) = match unsafe { (shared(client, "client"), c_str(queue, "queue")) } {
            (Ok(c), Ok(q)) => (c, q),
            (Err(code), _) | (_, Err(code)) => return code,
        };
        if let Err(code) = not_forked(c.born) {
            return code;
        }
        match make(c, q) {
            Ok(handle) => {
                // SAFETY: `out` checked non-null; writable by the caller's contract.
                unsafe { store(out, handle) };
                XTCQ_OK
            }
            Err(e) => from_error(&e),
        }
    })
}

/// The bytes of a push.
///
/// # Safety
/// `data` is valid for `len` bytes, or NULL with `len` 0.
pub(crate) unsafe fn payload_arg<'a>(data: *const u8, len: usize) -> Result<&'a [u8], c_int> {
    // No buffer spans more than isize::MAX bytes, and making such a slice is undefined
    // behaviour (a debug build aborts the process there, past `guarded`'s reach).
    if len > isize::MAX as usize {
        return Err(fail(
            XTCQ_E_TOO_LARGE,
            format!("len = {len} is larger than any buffer (a length gone negative?)"),
        ));
    }
    if data.is_null() {
        return if len == 0 {
            Ok(&[])
        } else {
            Err(fail(XTCQ_E_INVALID, "data is NULL with a non-zero len"))
        };
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(data, len) })
}

/// Takes a free deque of `queue` as its owner and stores the handle in `*out`.
/// `XTCQ_E_NO_ROOM` when every deque has a live owner.
///
/// # Safety
/// `client` is a live client; `queue` a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn xtcq_owner_attach(
    client: *const xtcq_client,
    queue: *const c_char,
    out: *mut *mut xtcq_owner,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        attach(client, queue, out, |c, q| Ok(xtcq_owner { inner: c.inner.attach_owner(q)?, born: c.born }))
    }
}

/// Gives the deque back and frees the handle (NULL is ignored).
///
/// # Safety
/// `owner` is NULL or came from `xtcq_owner_attach` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn xtcq_owner_free(owner: *mut xtcq_owner) {
    guarded(|| {
        // SAFETY: the caller's contract.
        unsafe { free_handle(owner, |o| o.born) };
        XTCQ_OK
    });
}

/// Queues a job of `len` bytes: into the owner's deque, or the overflow ring when it is
/// full. `XTCQ_E_FULL` when both are (retry after consumers catch up).
///
/// # Safety
/// `owner` is a live owner, used by this thread only for the call; `data` valid for `len`.
#[no_mangle]
pub unsafe extern "C" fn xtcq_owner_push(owner: *mut xtcq_owner, data: *const u8, len: usize) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (o, bytes) = match unsafe { (arg(owner, "owner"), payload_arg(data, len)) } {
            (Ok(o), Ok(b)) => (o, b),
            (Err(code), _) | (_, Err(code)) => return code,
        };
        if let Err(code) = not_forked(o.born) {
            return code;
        }
        match o.inner.push(bytes) {
            Ok(_) => XTCQ_OK,
            Err(e) => from_error(&e),
        }
    })
}

/// Queues a job of `len` bytes at `priority`: 0 the most urgent (what `xtcq_owner_push`
/// uses), up to the queue's levels minus 1; consumers take from the most urgent non-empty
/// level first. `XTCQ_E_INVALID` for a priority past the queue's levels (the message says
/// how many it has).
///
/// # Safety
/// As `xtcq_owner_push`.
#[no_mangle]
pub unsafe extern "C" fn xtcq_owner_push_priority(
    owner: *mut xtcq_owner,
    data: *const u8,
    len: usize,
    priority: u32,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (o, bytes) = match unsafe { (arg(owner, "owner"), payload_arg(data, len)) } {
            (Ok(o), Ok(b)) => (o, b),
            (Err(code), _) | (_, Err(code)) => return code,
        };
        if let Err(code) = not_forked(o.born) {
            return code;
        }
        match o.inner.push_priority(bytes, priority) {
            Ok(_) => XTCQ_OK,
            Err(e) => from_error(&e),
        }
    })
}

/// Most jobs the engine puts in a deque with one store of `bottom`: a longer batch of
/// [`xtcq_owner_push_batch`] is queued in chunks of this many.
const CHUNK: usize = crate::thief::XTCQ_MAX_BATCH;

/// Queues `n` jobs in order, job `i` being the `lens[i]` bytes at `payloads[i]` (NULL with
/// length 0 is an empty payload): in chunks of up to `XTCQ_MAX_BATCH`, each put in the
/// owner's deque with one store and one wake; what the deque has no room for goes to the
/// overflow ring, one job at a time, as `xtcq_owner_push` does. `n` 0 queues nothing.
///
/// `*queued` is set to how many were queued, always the first ones: `n` on `XTCQ_OK`. An
/// invalid argument (a NULL array with `n` > 0, a NULL payload with a non-zero length) and
/// a payload larger than the segment's records hold (`XTCQ_E_TOO_LARGE`) are found before
/// anything is queued. On a failure part-way (`XTCQ_E_FULL`: the deque and the ring are
/// full, or the records; ...) jobs `0 .. *queued` are queued and the others are not: retry
/// from `payloads + *queued` once consumers caught up.
///
/// # Safety
/// `owner` is a live owner, used by this thread only for the call; `payloads` and `lens`
/// point to `n` readable elements each, and `payloads[i]` to `lens[i]` readable bytes;
/// `queued` is writable (pointing into `payloads`, `lens` or a payload's bytes is refused,
/// `XTCQ_E_INVALID`, and `*queued` left alone).
#[no_mangle]
pub unsafe extern "C" fn xtcq_owner_push_batch(
    owner: *mut xtcq_owner,
    payloads: *const *const u8,
    lens: *const usize,
    n: usize,
    queued: *mut usize,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let o = match unsafe { arg(owner, "owner") } {
            Ok(o) => o,
            Err(code) => return code,
        };
        if queued.is_null() {
            return fail(XTCQ_E_INVALID, "queued is NULL");
        }
        // Writing the count into an array the call reads would change a job or a length
        // under it (and break Rust's aliasing rules): refused before anything is written.
        if within(queued, payloads, n) || within(queued, lens, n) {
            return fail(XTCQ_E_INVALID, "queued points into payloads or lens");
        }
        // Nor into a job's bytes: the count would go in as part of the job.
        // SAFETY: the caller's contract; the arrays are read only where `batch_args` would.
        let max = o.inner.payload_capacity();
        if let Err(Overlap::Queued(code) | Overlap::Ids(code)) =
            unsafe { outputs_apart_from_jobs(payloads, lens, n, std::ptr::null_mut(), queued, max) }
        {
            return code;
        }
        // SAFETY: non-null, writable by the caller's contract, and outside both arrays and
        // every job.
        unsafe { queued.write(0) };
        let mut done = 0;
        let code = push_all(o, payloads, lens, n, &mut done);
        // SAFETY: as above; the arrays are read no more.
        unsafe { queued.write(done) };
        code
    })
}

/// Whether `p` points into the `n` elements at `array` (NULL: nowhere).
pub(crate) fn within<T>(p: *const usize, array: *const T, n: usize) -> bool {
    let start = array as usize;
    let bytes = n.saturating_mul(std::mem::size_of::<T>());
    !array.is_null()
        && (p as usize) < start.saturating_add(bytes)
        && (p as usize).saturating_add(std::mem::size_of::<usize>()) > start
}

/// Which output overlapped a job's bytes (the code to return says which job).
pub(crate) enum Overlap {
    Ids(c_int),
    Queued(c_int),
}

/// Refuses `ids` or `queued` that overlap the bytes of a job the call pushes: the call writes
/// them while later jobs are still to be read, so a job would go in with an id (or a count)
/// in place of the caller's bytes, and Rust's aliasing rules would be broken. Arrays and
/// lengths (over `max`) that `batch_args` refuses are left to it, to say what is wrong.
///
/// # Safety
/// `payloads` and `lens` as a batch push's (`xtcq_injector_push_many`,
/// `xtcq_owner_push_batch`); `ids` NULL or checked to hold `n` elements.
pub(crate) unsafe fn outputs_apart_from_jobs(
    payloads: *const *const u8,
    lens: *const usize,
    n: usize,
    ids: *mut u64,
    queued: *mut usize,
    max: u32,
) -> Result<(), Overlap> {
    let word = std::mem::size_of::<usize>();
    if n == 0
        || n > isize::MAX as usize / word
        || payloads.is_null()
        || lens.is_null()
        || !payloads.is_aligned()
        || !lens.is_aligned()
    {
        return Ok(());
    }
    // SAFETY: non-null, aligned, `n` elements by the caller's contract, size checked above.
    let (ptrs, lens) =
        unsafe { (std::slice::from_raw_parts(payloads, n), std::slice::from_raw_parts(lens, n)) };
    // `outputs_apart` checked that `n` ids fit an array when `ids` is not NULL.
    let ids_bytes = if ids.is_null() { 0 } else { n * std::mem::size_of::<u64>() };
    let overlaps = |out: usize, bytes: usize, start: usize, len: usize| {
        bytes != 0 && start < out.saturating_add(bytes) && out < start.saturating_add(len)
    };
    for (i, (&p, &len)) in ptrs.iter().zip(lens).enumerate() {
        if p.is_null() || len == 0 || len > max as usize {
            continue;
        }
        if overlaps(queued as usize, word, p as usize, len) {
            return Err(Overlap::Queued(fail(
                XTCQ_E_INVALID,
                format!("queued points into payloads[{i}]: give it a variable of its own"),
            )));
        }
        if overlaps(ids as usize, ids_bytes, p as usize, len) {
            return Err(Overlap::Ids(fail(
                XTCQ_E_INVALID,
                format!(
                    "ids overlaps payloads[{i}]: the ids would be written into jobs not yet queued; \
                     give the ids an array of their own"
                ),
            )));
        }
    }
    Ok(())
}

/// The body of [`xtcq_owner_push_batch`]: `*done` counts the jobs queued.
///
/// # Safety
/// As `xtcq_owner_push_batch`.
unsafe fn push_all(
    o: &xtcq_owner,
    payloads: *const *const u8,
    lens: *const usize,
    n: usize,
    done: &mut usize,
) -> c_int {
    if let Err(code) = not_forked(o.born) {
        return code;
    }
    // SAFETY: the caller's contract.
    let (ptrs, lens) = match unsafe { batch_args(payloads, lens, n, o.inner.payload_capacity()) } {
        Ok(v) => v,
        Err(code) => return code,
    };
    let mut chunk: [&[u8]; CHUNK] = [&[]; CHUNK];
    while *done < n {
        let len = (n - *done).min(CHUNK);
        for (k, slot) in chunk[..len].iter_mut().enumerate() {
            let i = *done + k;
            // SAFETY: checked by `batch_args`; readable by the caller's contract. Checked
            // again as read: an entry changed since (another thread's write) fails here
            // rather than going in as an empty payload.
            *slot = match unsafe { payload_arg(ptrs[i], lens[i]) } {
                Ok(bytes) => bytes,
                Err(code) => return code,
            };
        }
        let step = match o.inner.push_batch(&chunk[..len]) {
            // The deque is full: this one spills to the overflow ring.
            Ok(0) => o.inner.push(chunk[0]).map(|_| 1),
            other => other,
        };
        match step {
            Ok(k) => *done += k,
            Err(e) => return from_error(&e),
        }
    }
    XTCQ_OK
}

/// The two arrays of [`xtcq_owner_push_batch`], each entry checked: no NULL payload with a
/// length, none longer than `max` (the segment's largest payload). `Err` holds the status.
///
/// # Safety
/// `payloads` and `lens` are NULL or point to `n` readable elements each.
pub(crate) unsafe fn batch_args<'a>(
    payloads: *const *const u8,
    lens: *const usize,
    n: usize,
    max: u32,
) -> Result<(&'a [*const u8], &'a [usize]), c_int> {
    if n == 0 {
        return Ok((&[], &[]));
    }
    // A slice may not span more than isize::MAX bytes; a larger `n` is no real array.
    if n > isize::MAX as usize / std::mem::size_of::<usize>() {
        return Err(fail(XTCQ_E_INVALID, format!("n = {n} is larger than any array")));
    }
    if payloads.is_null() || lens.is_null() {
        return Err(fail(XTCQ_E_INVALID, format!("payloads and lens must point to n = {n} entries each")));
    }
    if !payloads.is_aligned() || !lens.is_aligned() {
        return Err(fail(XTCQ_E_INVALID, "payloads or lens is not aligned for its type"));
    }
    // SAFETY: non-null, aligned, `n` elements by the caller's contract, size checked above.
    let (ptrs, lens) =
        unsafe { (std::slice::from_raw_parts(payloads, n), std::slice::from_raw_parts(lens, n)) };
    for (i, (&p, &len)) in ptrs.iter().zip(lens).enumerate() {
        if p.is_null() && len > 0 {
            return Err(fail(XTCQ_E_INVALID, format!("payloads[{i}] is NULL with lens[{i}] = {len}")));
        }
        if len > max as usize {
            return Err(fail(
                XTCQ_E_TOO_LARGE,
                format!(
                    "payload {i} of the batch is too large: {len} > {max} bytes, the largest this \
                     segment takes (xtcqd --payload-bytes); nothing of the batch was queued"
                ),
            ));
        }
    }
    Ok((ptrs, lens))
}

/// Claims the owner's next job (the queue's order) into `job`; `XTCQ_EMPTY` when none.
///
/// # Safety
/// `owner` is a live owner and `job` a live job handle, each used by this thread only.
#[no_mangle]
pub unsafe extern "C" fn xtcq_owner_pop(owner: *mut xtcq_owner, job: *mut xtcq_job) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (o, j) = match unsafe { (arg(owner, "owner"), arg(job, "job")) } {
            (Ok(o), Ok(j)) => (o, j),
            (Err(code), _) | (_, Err(code)) => return code,
        };
        if let Err(code) = not_forked(o.born).and_then(|()| j.ready_for_claim()) {
            return code;
        }
        match o.inner.pop() {
            Ok(Some(claimed)) => {
                j.hold(claimed);
                XTCQ_OK
            }
            Ok(None) => XTCQ_EMPTY,
            Err(e) => from_error(&e),
        }
    })
}

/// Jobs in the owner's deque (approximate while thieves steal); 0 for NULL.
///
/// # Safety
/// `owner` is NULL or a live owner.
#[no_mangle]
pub unsafe extern "C" fn xtcq_owner_len(owner: *const xtcq_owner) -> usize {
    // SAFETY: the caller's contract.
    unsafe { owner.as_ref() }.filter(|o| !crate::fork::forked_since(o.born)).map_or(0, |o| o.inner.len())
}

/// Attaches to `queue` as an injector and stores the handle in `*out`.
///
/// # Safety
/// `client` is a live client; `queue` a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn xtcq_injector_attach(
    client: *const xtcq_client,
    queue: *const c_char,
    out: *mut *mut xtcq_injector,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        attach(client, queue, out, |c, q| {
            Ok(xtcq_injector { inner: c.inner.attach_injector(q)?, born: c.born })
        })
    }
}

/// Frees an injector (NULL is ignored).
///
/// # Safety
/// `injector` is NULL or came from `xtcq_injector_attach` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn xtcq_injector_free(injector: *mut xtcq_injector) {
    guarded(|| {
        // SAFETY: the caller's contract.
        unsafe { free_handle(injector, |i| i.born) };
        XTCQ_OK
    });
}

/// Queues a job of `len` bytes on the queue's overflow ring. `XTCQ_E_FULL` when it is full.
///
/// # Safety
/// `injector` is a live injector, used by this thread only for the call; `data` valid for
/// `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn xtcq_injector_push(
    injector: *mut xtcq_injector,
    data: *const u8,
    len: usize,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { injector_push_with(injector, data, len, |i, bytes| i.push(bytes).map(drop)) }
}

/// Queues a job of `len` bytes at `priority` (see `xtcq_owner_push_priority`) on the
/// overflow ring of its level.
///
/// # Safety
/// As `xtcq_injector_push`.
#[no_mangle]
pub unsafe extern "C" fn xtcq_injector_push_priority(
    injector: *mut xtcq_injector,
    data: *const u8,
    len: usize,
    priority: u32,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { injector_push_with(injector, data, len, |i, bytes| i.push_priority(bytes, priority).map(drop)) }
}

/// Queues a job of `len` bytes that no consumer sees for `delay_ms`: the daemon puts it in
/// line once due and wakes sleeping consumers then.
///
/// # Safety
/// As `xtcq_injector_push`.
#[no_mangle]
pub unsafe extern "C" fn xtcq_injector_push_delayed(
    injector: *mut xtcq_injector,
    data: *const u8,
    len: usize,
    delay_ms: u64,
) -> c_int {
    let due = ::xtcq_client::Due::In(std::time::Duration::from_millis(delay_ms));
    // SAFETY: the caller's contract.
    unsafe { injector_push_with(injector, data, len, |i, bytes| i.push_delayed(bytes, due).map(drop)) }
}

/// The argument and fork checks of every injector push, then `push` with the payload.
///
/// # Safety
/// As `xtcq_injector_push`.
unsafe fn injector_push_with(
    injector: *mut xtcq_injector,
    data: *const u8,
    len: usize,
    push: impl FnOnce(&InjectorHandle, &[u8]) -> Result<(), ::xtcq_client::Error>,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (i, bytes) = match unsafe { (arg(injector, "injector"), payload_arg(data, len)) } {
            (Ok(i), Ok(b)) => (i, b),
            (Err(code), _) | (_, Err(code)) => return code,
        };
        if let Err(code) = not_forked(i.born) {
            return code;
        }
        match push(&i.inner, bytes) {
            Ok(()) => XTCQ_OK,
            Err(e) => from_error(&e),
        }
    })
}
