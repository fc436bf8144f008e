//! The one door through which `xtcq-shm` reaches atomics, fences and spin hints.
//!
//! Normal builds use `std::sync::atomic`. With `RUSTFLAGS="--cfg xtcq_loom"` the same names
//! come from loom, so the deque, overflow and record algorithms — written against resolved
//! views (`&AtomicI64`, `&[AtomicU64]`) rather than against the mapping — run under the model
//! checker over heap memory. The cfg is crate-specific on purpose: a global `--cfg loom`
//! would also switch tokio and break the rest of the workspace.

#[cfg(xtcq_loom)]
pub use loom::sync::atomic::{fence, AtomicI64, AtomicU32, AtomicU64, Ordering};

#[cfg(not(xtcq_loom))]
pub use std::sync::atomic::{fence, AtomicI64, AtomicU32, AtomicU64, Ordering};

/// A hint that we are busy-waiting. Under loom it yields to the scheduler so that a spin
/// loop cannot starve the thread it waits for.
#[inline]
pub fn spin_hint() {
    #[cfg(xtcq_loom)]
    loom::thread::yield_now();
    #[cfg(not(xtcq_loom))]
    std::hint::spin_loop();
}
