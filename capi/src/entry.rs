//! One way into the library from C: [`guarded`] catches a panic before it can unwind across
//! `extern "C"` (which would abort the backend, and PostgreSQL would restart them all) and
//! turns it into `XTCQ_E_PANIC`.

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::status::{fail, XTCQ_E_INVALID, XTCQ_E_PANIC};

/// Runs `f`, mapping a panic to `XTCQ_E_PANIC`.
pub(crate) fn guarded(f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(code) => code,
        Err(_) => fail(XTCQ_E_PANIC, "a bug inside libxtcq was caught; please report it"),
    }
}

/// A C string argument as UTF-8; `Err` holds the status to return.
///
/// # Safety
/// `s` is null or points to a NUL-terminated string valid for the call.
pub(crate) unsafe fn c_str<'a>(s: *const c_char, what: &str) -> Result<&'a str, c_int> {
    if s.is_null() {
        return Err(fail(XTCQ_E_INVALID, format!("{what} is NULL")));
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(s) }.to_str().map_err(|_| fail(XTCQ_E_INVALID, format!("{what} is not UTF-8")))
}

/// `p` as a reference; `Err` holds the status to return.
///
/// # Safety
/// `p` is null or a live pointer of the right type that no other thread mutates meanwhile.
pub(crate) unsafe fn arg<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, c_int> {
    // SAFETY: the caller's contract.
    unsafe { p.as_mut() }.ok_or_else(|| fail(XTCQ_E_INVALID, format!("{what} is NULL")))
}

/// `p` as a shared reference, for handles several threads may use at once.
///
/// # Safety
/// `p` is null or a live pointer of the right type.
pub(crate) unsafe fn shared<'a, T>(p: *const T, what: &str) -> Result<&'a T, c_int> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.ok_or_else(|| fail(XTCQ_E_INVALID, format!("{what} is NULL")))
}

/// Frees a handle made by `Box::into_raw`, except in a forked child, where the parent's
/// copy is forgotten: dropping it would give back (detach, nack) what the parent holds.
///
/// # Safety
/// `p` is null or came from `Box::into_raw` and is not used again.
pub(crate) unsafe fn free_handle<T>(p: *mut T, born: impl FnOnce(&T) -> u64) {
    if p.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let b = unsafe { Box::from_raw(p) };
    if crate::fork::forked_since(born(&b)) {
        std::mem::forget(b);
    }
}

/// Stores a new handle in `*out`.
///
/// # Safety
/// `out` is non-null and writable.
pub(crate) unsafe fn store<T>(out: *mut *mut T, value: T) {
    // SAFETY: the caller's contract.
    unsafe { *out = Box::into_raw(Box::new(value)) };
}
