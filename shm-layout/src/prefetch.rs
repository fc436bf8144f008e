//! Cache-line prefetches on the job path: hints that start a line's transfer early, so that
//! two misses overlap instead of following one another.
//!
//! - A prefetch is only a hint: it never faults (an address outside any mapping is dropped by
//!   the CPU), never changes memory and orders nothing, so no protocol relies on one.
//! - `for_write` asks for the line in a state this core may write (x86 `PREFETCHW`): a thief
//!   that is about to CAS a record's state word gets it in one transfer, not a shared read
//!   followed by an upgrade. CPUs without `PREFETCHW` execute its encoding as a no-op.
//! - On other architectures both are no-ops. (The loom models do not build this module: the
//!   record arena it serves is not modelled.)

/// Starts bringing the line at `p` in for reading.
#[inline(always)]
pub(crate) fn for_read(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 reads no memory architecturally and never faults, whatever `p` is.
    unsafe {
        core::arch::asm!("prefetcht0 [{p}]", p = in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Starts bringing the line at `p` in for writing.
#[inline(always)]
pub(crate) fn for_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHW writes no memory architecturally and never faults, whatever `p` is.
    unsafe {
        core::arch::asm!("prefetchw [{p}]", p = in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
