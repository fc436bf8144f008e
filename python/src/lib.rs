//! `xtcq._xtcq`: the Python extension module over `xtcq-client` (PyO3, the stable ABI).
//! The package `xtcq` (python/xtcq/) re-exports its classes and defines the exceptions.
//!
//! Rules:
//! - Every call that can wait (for the daemon, or for a job) releases the GIL; a steal
//!   that waits checks for signals at least every 100 ms, so Ctrl-C interrupts it.
//! - The classes are `frozen` (no per-call borrow flag); what changes (a closed handle, a
//!   settled job) lives behind a mutex. A mutex held while the GIL is released is taken
//!   with [`lock_py`], which waits for it without the GIL.
//! - Every argument is checked, with an `InvalidArgument` naming it; every error of the
//!   client is an exception of `xtcq.errors`, one class per kind.

mod args;
mod batches;
mod client;
mod error;
mod job;
mod job_state;
mod producer;
mod thief;

use std::sync::{Mutex, MutexGuard, TryLockError};

use pyo3::prelude::*;

/// Locks `m`; a poisoned mutex (a panic mid-call, reported as an exception) is still used:
/// the handle inside stays consistent, as the client's calls settle or fail whole.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Locks `m`, which a thread may hold while it has released the GIL: a thread that waited
/// for it holding the GIL would keep that one from taking the GIL back. So the wait is
/// without the GIL.
pub(crate) fn lock_py<'a, T: Send>(py: Python<'_>, m: &'a Mutex<T>) -> MutexGuard<'a, T> {
    loop {
        match m.try_lock() {
            Ok(g) => return g,
            Err(TryLockError::Poisoned(p)) => return p.into_inner(),
            Err(TryLockError::WouldBlock) => py.detach(|| drop(lock(m))),
        }
    }
}

/// Drops `value` with the GIL released where it can be (dropping an owner handle gives its
/// lease back to the daemon: a request). While the interpreter shuts down it is dropped
/// as it is.
pub(crate) fn drop_detached<T: Send>(value: T) {
    let mut slot = Some(value);
    let _ = Python::try_attach(|py| py.detach(|| drop(slot.take())));
    drop(slot);
}

#[pymodule]
fn _xtcq(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_class::<producer::Owner>()?;
    m.add_class::<producer::Injector>()?;
    m.add_class::<thief::Thief>()?;
    m.add_class::<job::Job>()?;
    m.add("MAX_BATCH", producer::MAX_BATCH)?;
    Ok(())
}
