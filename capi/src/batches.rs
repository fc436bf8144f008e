//! Batches from C: open, seal, push into, and wait for a batch (`xtcq_client` batches).
//!
//! - Each call returns `XTCQ_OK` or an `XTCQ_E_*` code; `xtcq_batch_wait` returns
//!   `XTCQ_EMPTY` when its timeout passed before the batch completed.
//! - A push into a sealed batch fails with `XTCQ_E_OTHER` (the message says it is sealed)
//!   and leaves no job behind.

use std::ffi::{c_char, c_int};
use std::time::Duration;

use ::xtcq_client::{BatchInfo, BatchStatus, OnComplete};

use crate::client::{client_and_name, not_forked, xtcq_client};
use crate::entry::{arg, c_str, guarded};
use crate::producer::{xtcq_injector, xtcq_owner};
use crate::status::{fail, from_error, XTCQ_EMPTY, XTCQ_E_INVALID, XTCQ_OK};

/// `xtcq_batch_info::status`: the batch takes pushes.
pub const XTCQ_BATCH_OPEN: c_int = 1;
/// `xtcq_batch_info::status`: sealed, not yet complete.
pub const XTCQ_BATCH_SEALED: c_int = 2;
/// `xtcq_batch_info::status`: every job acked, dead or cancelled.
pub const XTCQ_BATCH_COMPLETE: c_int = 3;

/// A batch's counts, as the daemon last counted them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct xtcq_batch_info {
    /// `XTCQ_BATCH_OPEN`, `XTCQ_BATCH_SEALED` or `XTCQ_BATCH_COMPLETE`.
    pub status: c_int,
    /// Jobs pushed into it.
    pub pushed: u64,
    /// Jobs not yet ended.
    pub running: u64,
    /// Jobs acked.
    pub acked: u64,
    /// Dead letters.
    pub dead: u64,
    /// Jobs cancelled.
    pub cancelled: u64,
}

fn progress_of(b: &BatchInfo) -> xtcq_batch_info {
    xtcq_batch_info {
        status: match b.status {
            BatchStatus::Open => XTCQ_BATCH_OPEN,
            BatchStatus::Sealed => XTCQ_BATCH_SEALED,
            BatchStatus::Complete => XTCQ_BATCH_COMPLETE,
        },
        pushed: b.pushed,
        running: b.running,
        acked: b.acked,
        dead: b.dead,
        cancelled: b.cancelled,
    }
}

fn store_progress(out: *mut xtcq_batch_info, b: &BatchInfo) {
    if !out.is_null() {
        // SAFETY: not NULL, and writable by the caller's contract.
        unsafe { *out = progress_of(b) };
    }
}

/// Opens batch `batch` of queue `queue`. With `payload` not NULL, `payload_len` bytes are a
/// callback job pushed once into `callback_queue` (NULL: `queue`) when the batch completes.
///
/// # Safety
/// `client` is a live client; `queue`, `batch` and `callback_queue` (unless NULL)
/// NUL-terminated strings; `payload` NULL or valid for `payload_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn xtcq_batch_open(
    client: *mut xtcq_client,
    queue: *const c_char,
    batch: *const c_char,
    callback_queue: *const c_char,
    payload: *const u8,
    payload_len: usize,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (c, queue) = match unsafe { client_and_name(client, queue) } {
            Ok(v) => v,
            Err(code) => return code,
        };
        // SAFETY: the caller's contract.
        let name = match unsafe { c_str(batch, "batch") } {
            Ok(n) => n,
            Err(code) => return code,
        };
        let on_complete = if payload.is_null() {
            None
        } else {
            let to = if callback_queue.is_null() {
                queue
            } else {
                // SAFETY: the caller's contract.
                match unsafe { c_str(callback_queue, "callback_queue") } {
                    Ok(q) => q,
                    Err(code) => return code,
                }
            };
            // SAFETY: not NULL, valid for `payload_len` bytes by the caller's contract.
            let bytes = unsafe { std::slice::from_raw_parts(payload, payload_len) };
            Some(OnComplete { queue: to.to_string(), payload: bytes.to_vec() })
        };
        match c.inner.open_batch(queue, name, on_complete) {
            Ok(_) => XTCQ_OK,
            Err(e) => from_error(&e),
        }
    })
}

/// Seals batch `batch` of queue `queue`: it takes no more jobs and completes when its last
/// job ended.
///
/// # Safety
/// `client` is a live client; `queue` and `batch` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn xtcq_batch_seal(
    client: *mut xtcq_client,
    queue: *const c_char,
    batch: *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { with_batch(client, queue, batch, |c, q, b| c.seal_batch(q, b).map(|_| XTCQ_OK)) }
}

/// Stores batch `batch`'s counts in `*out` (when not NULL).
///
/// # Safety
/// As [`xtcq_batch_seal`]; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn xtcq_batch_progress(
    client: *mut xtcq_client,
    queue: *const c_char,
    batch: *const c_char,
    out: *mut xtcq_batch_info,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        with_batch(client, queue, batch, |c, q, b| {
            c.batch_progress(q, b).map(|info| {
                store_progress(out, &info);
                XTCQ_OK
            })
        })
    }
}

/// Sleeps until batch `batch` is complete (`XTCQ_OK`, its counts in `*out`) or `timeout_ms`
/// passed (`XTCQ_EMPTY`; negative: no timeout).
///
/// # Safety
/// As [`xtcq_batch_progress`].
#[no_mangle]
pub unsafe extern "C" fn xtcq_batch_wait(
    client: *mut xtcq_client,
    queue: *const c_char,
    batch: *const c_char,
    timeout_ms: i64,
    out: *mut xtcq_batch_info,
) -> c_int {
    let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
    // SAFETY: the caller's contract.
    unsafe {
        with_batch(client, queue, batch, |c, q, b| {
            c.wait_batch(q, b, timeout).map(|done| match done {
                Some(info) => {
                    store_progress(out, &info);
                    XTCQ_OK
                }
                None => XTCQ_EMPTY,
            })
        })
    }
}

/// Makes every later push of `owner` join batch `batch` of the owner's queue (NULL: no
/// batch), looked up through `client`.
///
/// # Safety
/// `owner` a live owner, `client` a live client; `batch` NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn xtcq_owner_set_batch(
    owner: *mut xtcq_owner,
    client: *mut xtcq_client,
    batch: *const c_char,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (o, c) = match unsafe { (arg(owner, "owner"), arg(client, "client")) } {
            (Ok(o), Ok(c)) => (o, c),
            (Err(code), _) | (_, Err(code)) => return code,
        };
        // SAFETY: the caller's contract.
        unsafe { join_batch(o.born, c, &o.inner.queue().name, batch, |b| o.inner.set_batch(b)) }
    })
}

/// `f` with the client and the two names, its error mapped to a code.
unsafe fn with_batch(
    client: *mut xtcq_client,
    queue: *const c_char,
    batch: *const c_char,
    f: impl FnOnce(&::xtcq_client::Client, &str, &str) -> Result<c_int, ::xtcq_client::Error>,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (c, queue) = match unsafe { client_and_name(client, queue) } {
            Ok(v) => v,
            Err(code) => return code,
        };
        // SAFETY: the caller's contract.
        let name = match unsafe { c_str(batch, "batch") } {
            Ok(n) => n,
            Err(code) => return code,
        };
        f(&c.inner, queue, name).unwrap_or_else(|e| from_error(&e))
    })
}

/// Makes every later push of `injector` join batch `batch` of the injector's queue (NULL: no
/// batch), looked up through `client`, as [`xtcq_owner_set_batch`].
///
/// # Safety
/// `injector` a live injector, `client` a live client; `batch` NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn xtcq_injector_set_batch(
    injector: *mut xtcq_injector,
    client: *mut xtcq_client,
    batch: *const c_char,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (i, c) = match unsafe { (arg(injector, "injector"), arg(client, "client")) } {
            (Ok(i), Ok(c)) => (i, c),
            (Err(code), _) | (_, Err(code)) => return code,
        };
        // SAFETY: the caller's contract.
        unsafe { join_batch(i.born, c, &i.inner.queue().name, batch, |b| i.inner.set_batch(b)) }
    })
}

/// The set-batch call of a handle born in process `born` on `queue`: refused in a forked
/// child (of the handle or the client), else `set` given the batch to join (see
/// [`batch_to_join`]).
///
/// # Safety
/// `batch` NULL or a NUL-terminated string.
unsafe fn join_batch(
    born: u64,
    c: &xtcq_client,
    queue: &str,
    batch: *const c_char,
    set: impl FnOnce(Option<&BatchInfo>),
) -> c_int {
    if let Err(code) = not_forked(born).and_then(|_| not_forked(c.born)) {
        return code;
    }
    // SAFETY: the caller's contract.
    match unsafe { batch_to_join(c, queue, batch) } {
        Ok(info) => {
            set(info.as_ref());
            XTCQ_OK
        }
        Err(code) => code,
    }
}

/// The batch a handle of `queue` is to join: `None` for NULL (no batch), else batch `batch`
/// looked up through `c`, refused unless it takes pushes.
///
/// # Safety
/// `batch` NULL or a NUL-terminated string.
unsafe fn batch_to_join(
    c: &xtcq_client,
    queue: &str,
    batch: *const c_char,
) -> Result<Option<BatchInfo>, c_int> {
    if batch.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let name = unsafe { c_str(batch, "batch") }?;
    let info = c.inner.batch_progress(queue, name).map_err(|e| from_error(&e))?;
    takes_pushes(&info, queue)?;
    Ok(Some(info))
}

/// `XTCQ_E_INVALID` for a batch that takes no more pushes: joined anyway, every push would
/// fail, and the caller learns why here, once.
fn takes_pushes(info: &BatchInfo, queue: &str) -> Result<(), c_int> {
    if info.status == BatchStatus::Open {
        return Ok(());
    }
    Err(fail(
        XTCQ_E_INVALID,
        format!(
            "batch {} of queue {queue} is {}: it takes no more jobs (open another one with `xtcq batch open`)",
            info.name,
            if info.status == BatchStatus::Sealed { "sealed" } else { "complete" }
        ),
    ))
}
