//! Unique jobs from C: `xtcq_injector_push_key`, a push refused while a job of the queue
//! pushed with the same key is queued, delayed or running.

use std::ffi::c_int;

use ::xtcq_client::{JobId, OnDuplicate, Pushed};

use crate::client::not_forked;
use crate::entry::{arg, guarded};
use crate::producer::{payload_arg, xtcq_injector};
use crate::status::{fail, from_error, XTCQ_EXISTING, XTCQ_E_DUPLICATE, XTCQ_E_INVALID, XTCQ_OK};

/// `xtcq_injector_push_key` flag: when a live job holds the key, push nothing and return
/// `XTCQ_EXISTING` with that job's id, instead of `XTCQ_E_DUPLICATE`.
pub const XTCQ_KEY_OR_EXISTING: u32 = 1;

/// The longest key, in bytes.
pub const XTCQ_MAX_KEY: usize = 64;

/// Stores `id` where the caller asked (each pointer may be NULL).
///
/// # Safety
/// `index` and `birth` are NULL or writable.
unsafe fn store(id: JobId, index: *mut u32, birth: *mut u32) {
    // SAFETY: checked non-null; writable by the caller's contract.
    unsafe {
        if !index.is_null() {
            *index = id.index;
        }
        if !birth.is_null() {
            *birth = id.birth;
        }
    }
}

/// Queues a job of `len` bytes holding the key of `key_len` bytes (1 to `XTCQ_MAX_KEY`) in
/// its queue while it is queued, delayed or running. Returns `XTCQ_OK` (the new job's id in
/// `*index` and `*birth`), or, when a live job of the queue holds the key,
/// `XTCQ_E_DUPLICATE` (that job's id stored, its message naming it), or with
/// `XTCQ_KEY_OR_EXISTING` in `flags`, `XTCQ_EXISTING` (that job's id stored, nothing
/// pushed). A full key table (`xtcqd --keys`) is `XTCQ_E_NO_ROOM`.
///
/// # Safety
/// As `xtcq_injector_push`; `key` is valid for `key_len` bytes; `index` and `birth` are
/// NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn xtcq_injector_push_key(
    injector: *mut xtcq_injector,
    data: *const u8,
    len: usize,
    key: *const u8,
    key_len: usize,
    flags: u32,
    index: *mut u32,
    birth: *mut u32,
) -> c_int {
    guarded(|| {
        if flags & !XTCQ_KEY_OR_EXISTING != 0 {
            return fail(XTCQ_E_INVALID, format!("unknown flags {flags:#x}"));
        }
        if key.is_null() || key_len == 0 || key_len > XTCQ_MAX_KEY {
            return fail(XTCQ_E_INVALID, format!("a key is 1 to {XTCQ_MAX_KEY} bytes (key_len = {key_len})"));
        }
        // SAFETY: the caller's contract.
        let (i, bytes) = match unsafe { (arg(injector, "injector"), payload_arg(data, len)) } {
            (Ok(i), Ok(b)) => (i, b),
            (Err(code), _) | (_, Err(code)) => return code,
        };
        if let Err(code) = not_forked(i.born) {
            return code;
        }
        // SAFETY: non-null (checked) and valid for `key_len` bytes by the caller's contract.
        let key = unsafe { std::slice::from_raw_parts(key, key_len) };
        let on_duplicate =
            if flags & XTCQ_KEY_OR_EXISTING != 0 { OnDuplicate::ReturnExisting } else { OnDuplicate::Refuse };
        let (code, id) = match i.inner.push_with_key(bytes, key, on_duplicate) {
            Ok(Pushed::New(h)) => (XTCQ_OK, JobId::of_push(h)),
            Ok(Pushed::Existing(id)) => (XTCQ_EXISTING, id),
            Err(e @ ::xtcq_client::Error::DuplicateKey { existing, .. }) => {
                (fail(XTCQ_E_DUPLICATE, e.to_string()), existing)
            }
            Err(e) => return from_error(&e),
        };
        // SAFETY: the caller's contract.
        unsafe { store(id, index, birth) };
        code
    })
}
