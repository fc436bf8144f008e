//! The bounded Chase-Lev work-stealing deque, over words that live in the segment.
//!
//! One owner pushes and pops at the *bottom*; any number of thieves steal from the *top*
//! with one CAS. `top` and `bottom` are signed 64-bit indices that only grow (the owner's
//! LIFO pop lowers `bottom` by one for a moment and puts it back); a slot is reached as
//! `index & (capacity - 1)`, so no index read from shared memory can reach outside the slot
//! array, however corrupt it is. Slots are `AtomicU64` holding job handles, so the racy read
//! a thief makes of a slot the owner may be rewriting is an atomic read, not UB.
//!
//! The deque never grows: `push` on a full deque returns [`Full`] and the caller falls back
//! to the queue's overflow ring. A fixed buffer is also why a steal needs no epoch pin, which
//! is where crossbeam-deque spends part of its steal.
//!
//! Invariants (for a deque used by a correct program):
//! - only the owner writes `bottom`;
//! - `top` only grows, and only by a successful CAS (thief steal, owner's last-item pop,
//!   owner's FIFO take) or by a new owner's repair `bottom = max(bottom, top)`;
//! - `bottom - top` lies in `[-1, capacity]` (`-1` only inside a LIFO pop that found the
//!   deque empty);
//! - the slot at `i & mask` for `top <= i < bottom` holds the handle pushed at index `i`.
//!
//! A handle that leaves the deque twice (a bug, a corrupted segment, or recovery re-queueing
//! conservatively) is harmless to correctness elsewhere: the claim CAS on the job record
//! decides who runs a job (see `record`). The deque still aims to hand each handle out once,
//! and the loom tests show it does.
//!
//! The two `fence(SeqCst)` — in the LIFO pop between lowering `bottom` and reading `top`, and
//! in steal between reading `top` and reading `bottom` — pair with each other. Without them
//! both sides can read the other's old value (store-buffer reordering): the owner thinks more
//! than one task is left and takes the last one without a CAS, while a thief thinks it is
//! still there and CASes `top` past it: one task taken twice. `tests/loom_deque.rs` finds that
//! interleaving when either fence is compiled out. The owner's FIFO `take` needs neither: it
//! never lowers `bottom` and always takes with the CAS (see [`DequeOwner::take`]).
//!
//! Files: this one holds the shared view and the single steal; `deque/batch.rs` the batch
//! steals; `deque/owner.rs` the owner's push, pop and take, and the heap-backed words.

use crate::sync::{fence, AtomicI64, AtomicU64, Ordering};

mod batch;
mod owner;
pub use owner::{DequeOwner, HeapDeque};

/// Most handles one batch steal moves.
pub const MAX_BATCH: usize = 128;

/// Which end the owner takes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Flavor {
    /// The owner pops the newest job (bottom); thieves take the oldest. Cache-friendly for
    /// producers that consume their own work.
    Lifo = 1,
    /// The owner takes the oldest job, racing thieves on `top`. Fair.
    Fifo = 2,
}

impl Flavor {
    /// Decodes the value stored in a queue descriptor.
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Flavor::Lifo),
            2 => Some(Flavor::Fifo),
            _ => None,
        }
    }
}

/// `push` found the deque full; use the overflow ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

/// The result of a steal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Steal<T> {
    /// The deque was empty when looked at.
    Empty,
    /// Took this.
    Success(T),
    /// Lost a race with another consumer; the deque may still hold work. Try again.
    Retry,
}

impl<T> Steal<T> {
    /// `Some` on success.
    pub fn success(self) -> Option<T> {
        match self {
            Steal::Success(v) => Some(v),
            _ => None,
        }
    }
    /// `true` for [`Steal::Retry`].
    pub fn is_retry(&self) -> bool {
        matches!(self, Steal::Retry)
    }
    /// `true` for [`Steal::Empty`].
    pub fn is_empty(&self) -> bool {
        matches!(self, Steal::Empty)
    }
}

/// The words of one deque, resolved: shared by the owner and the thieves. `Copy`, `Send`
/// and `Sync`; holds no state of its own.
#[derive(Clone, Copy, Debug)]
pub struct DequeRef<'a> {
    top: &'a AtomicI64,
    bottom: &'a AtomicI64,
    slots: &'a [AtomicU64],
    mask: i64,
    flavor: Flavor,
}

/// `slots` must have a power-of-two length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("deque capacity {0} is not a power of two between 1 and 2^30")]
pub struct BadCapacity(pub usize);

impl<'a> DequeRef<'a> {
    /// Resolves a deque from its words. `slots.len()` must be a power of two.
    pub fn new(
        top: &'a AtomicI64,
        bottom: &'a AtomicI64,
        slots: &'a [AtomicU64],
        flavor: Flavor,
    ) -> Result<Self, BadCapacity> {
        let n = slots.len();
        if n == 0 || !n.is_power_of_two() || n > (1 << 30) {
            return Err(BadCapacity(n));
        }
        Ok(Self { top, bottom, slots, mask: n as i64 - 1, flavor })
    }

    /// Fixed capacity.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The owner's order.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// Starts the transfer of slot `index`'s line (a hint; see `prefetch`).
    #[inline(always)]
    fn prefetch_slot(&self, index: i64) {
        #[cfg(not(xtcq_loom))]
        crate::prefetch::for_read(self.slot(index) as *const AtomicU64 as *const u8);
        #[cfg(xtcq_loom)]
        let _ = index;
    }

    #[inline]
    fn slot(&self, index: i64) -> &'a AtomicU64 {
        // The mask keeps any index, however corrupt, inside the slot array.
        &self.slots[(index & self.mask) as usize]
    }

    /// `(top, bottom, top_after)`: `top`, then `bottom`, then `top` again, for checks of a
    /// live deque. `top` only grows, so `top <= bottom + 1` holds against the first read and
    /// `bottom - top <= capacity` against the last; a `top` read before `bottom` may be one
    /// that thieves have since moved on from while the owner pushed past it.
    pub fn span(&self) -> (i64, i64, i64) {
        let top = self.top.load(Ordering::Acquire);
        let bottom = self.bottom.load(Ordering::Acquire);
        (top, bottom, self.top.load(Ordering::Acquire))
    }

    /// Raw `(top, bottom)` as read now, for checks and recovery. Not a consistent snapshot.
    pub fn indices(&self) -> (i64, i64) {
        (self.top.load(Ordering::Acquire), self.bottom.load(Ordering::Acquire))
    }

    /// The handle in the slot that index `i` maps to, for checks and recovery.
    pub fn slot_value(&self, index: i64) -> u64 {
        self.slot(index).load(Ordering::Relaxed)
    }

    /// The slot word that index `i` maps to, for fault-injection tests and repair tools.
    /// Writing it outside the protocol breaks the deque (never memory safety).
    pub fn raw_slot(&self, index: i64) -> &'a AtomicU64 {
        self.slot(index)
    }

    /// Approximate number of handles, as seen by a thief. Never negative.
    pub fn len(&self) -> usize {
        // Same shape as the front half of `steal`, for the same reason.
        let t = self.top.load(Ordering::Acquire);
        fence(Ordering::SeqCst);
        let b = self.bottom.load(Ordering::Acquire);
        b.wrapping_sub(t).clamp(0, self.mask + 1) as usize
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Thief steal: the oldest handle, with one CAS on `top`.
    pub fn steal(&self) -> Steal<u64> {
        // Acquire pairs with the SeqCst (so also Release) CAS that moved `top` here — a
        // thief's or the owner's — so the slot read below is ordered after that consumer's
        // slot read, as in crossbeam-deque.
        let t = self.top.load(Ordering::Acquire);
        // Slot `t` is the one to read if `bottom` says there is a job: start its transfer now
        // so that it overlaps `bottom`'s instead of following it.
        self.prefetch_slot(t);

        // Pairs with the fence in the owner's LIFO pop (see the module comment): either the
        // owner sees our `top`, or we see its lowered `bottom`.
        #[cfg(not(all(xtcq_loom, xtcq_loom_drop_steal_fence)))]
        fence(Ordering::SeqCst);

        // Acquire pairs with the Release store of `bottom` in `push`: the handle written
        // into slot `t` before that store is visible to the slot read below.
        let b = self.bottom.load(Ordering::Acquire);
        if b.wrapping_sub(t) <= 0 {
            return Steal::Empty;
        }

        // Relaxed: ordered after the push by the Acquire on `bottom`. The owner cannot be
        // rewriting this slot: it only reuses slot `t & mask` once `top > t`, i.e. after
        // this CAS or a rival's has succeeded, and then ours fails.
        let v = self.slot(t).load(Ordering::Relaxed);

        // SeqCst: the CAS is the single arbiter between thieves and the owner's last-item
        // pop; it also publishes (Release) that our slot read is done, for `push`'s
        // Acquire load of `top` before it reuses the slot.
        match self.top.compare_exchange(t, t.wrapping_add(1), Ordering::SeqCst, Ordering::Relaxed) {
            Ok(_) => Steal::Success(v),
            Err(_) => {
                crate::cas_count::top_lost();
                Steal::Retry
            }
        }
    }
}
