//! A count of the CASes on a deque's `top` that a thief lost, for benchmarks: how many times
//! consumers met on the line a steal writes (`fanout` prints it per job). Compiled in only
//! with the `cas-count` cargo feature; without it [`top_lost`] is empty, so the steal path of
//! a normal build carries no trace. The count is the calling thread's own (a thread-local
//! cell, never a shared counter: a count every thief bumped would be a second herd on one
//! line).

#[cfg(all(feature = "cas-count", not(xtcq_loom)))]
std::thread_local! {
    static LOST: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A thief of this thread lost a CAS on `top` (another consumer moved it first).
#[inline(always)]
pub fn top_lost() {
    #[cfg(all(feature = "cas-count", not(xtcq_loom)))]
    LOST.with(|c| c.set(c.get() + 1));
}

/// The CASes on `top` this thread lost so far; `None` when the count is not compiled in.
pub fn lost_top_cases() -> Option<u64> {
    #[cfg(all(feature = "cas-count", not(xtcq_loom)))]
    return Some(LOST.with(|c| c.get()));
    #[cfg(not(all(feature = "cas-count", not(xtcq_loom))))]
    None
}
