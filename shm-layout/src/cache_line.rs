//! `CacheLine<T>`: a value alone on its own 128-byte line.
//!
//! Words that different processes write (a deque's indices, its lease, a queue's wait word)
//! each sit in one of these so that a write by one side does not invalidate the line the
//! other side is spinning on. The exception is a deque's `top` and `bottom`, which share one
//! line on purpose (layout v2): every steal reads both, and the benchmark measured one line
//! faster than two (see `layout::DequeHeader`). 128 bytes rather than 64 because the adjacent-line prefetcher
//! on x86 pulls lines in pairs. This is the project's own type, not `crossbeam_utils`'s
//! `CachePadded`, because the segment layout is a file format: its size and alignment must
//! not change when a dependency is upgraded.

use core::ops::Deref;

/// Size and alignment of [`CacheLine`].
pub const CACHE_LINE: usize = 128;

/// A `T` padded and aligned to [`CACHE_LINE`] bytes.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct CacheLine<T> {
    value: T,
}

impl<T> CacheLine<T> {
    /// Wraps `value`.
    pub const fn new(value: T) -> Self {
        Self { value }
    }
}

impl<T> Deref for CacheLine<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.value
    }
}

const _: () = assert!(core::mem::align_of::<CacheLine<u8>>() == CACHE_LINE);
const _: () = assert!(core::mem::size_of::<CacheLine<u64>>() == CACHE_LINE);
