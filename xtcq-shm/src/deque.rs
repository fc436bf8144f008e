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

use core::cell::Cell;
use core::marker::PhantomData;

use crate::sync::{fence, AtomicI64, AtomicU64, Ordering};

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

    #[inline]
    fn slot(&self, index: i64) -> &'a AtomicU64 {
        // The mask keeps any index, however corrupt, inside the slot array.
        &self.slots[(index & self.mask) as usize]
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
            Err(_) => Steal::Retry,
        }
    }

    /// Thief batch steal into `out`: up to `out.len()` (at most [`MAX_BATCH`]) handles, about
    /// half of what is there, oldest first. Returns how many were written. On
    /// [`Steal::Retry`] or [`Steal::Empty`] the contents of `out` mean nothing.
    ///
    /// From a FIFO deque the batch is taken with one CAS on `top`. From a LIFO deque it is
    /// taken one CAS per handle, as crossbeam-deque does: the owner's LIFO pop takes from the
    /// bottom without a CAS while more than one handle is left, so a range CAS could cover a
    /// handle the owner has already popped.
    pub fn steal_batch_into(&self, out: &mut [u64]) -> Steal<usize> {
        let limit = out.len().min(MAX_BATCH);
        self.steal_batch_with(limit, |i, h| out[i] = h)
    }

    /// The batch steal behind [`steal_batch_into`](Self::steal_batch_into),
    /// [`steal_batch`](Self::steal_batch) and [`steal_batch_and_pop`](Self::steal_batch_and_pop):
    /// up to `limit` handles (about half of what is there, at least one), handed to
    /// `put(i, handle)` for `i = 0, 1, ...`, oldest first. Returns `Success(n)` with `n >= 1`,
    /// `Empty` when `limit` is 0 or the deque looked empty, `Retry` when the first CAS lost.
    ///
    /// `put` may be called for handles that are then not taken (the FIFO path reads its range
    /// before its CAS): whatever it wrote beyond the `n` returned must stay unpublished.
    #[inline]
    fn steal_batch_with(&self, limit: usize, mut put: impl FnMut(usize, u64)) -> Steal<usize> {
        if limit == 0 {
            return Steal::Empty;
        }
        // The front half of `steal`, once per batch, with the same orderings for the same
        // pairs: Acquire `top` (the CAS that moved it), the fence (the LIFO pop's fence),
        // Acquire `bottom` (`push`'s Release store).
        let mut t = self.top.load(Ordering::Acquire);
        #[cfg(not(all(xtcq_loom, xtcq_loom_drop_steal_fence)))]
        fence(Ordering::SeqCst);
        let b = self.bottom.load(Ordering::Acquire);
        let len = b.wrapping_sub(t);
        if len <= 0 {
            return Steal::Empty;
        }
        // About half, as crossbeam-deque takes; a corrupt `len` is clamped to the capacity.
        let want = limit.min((len.min(self.mask + 1) as usize).div_ceil(2));
        match self.flavor {
            Flavor::Fifo => {
                for i in 0..want {
                    // Relaxed, as the slot read in `steal`.
                    put(i, self.slot(t.wrapping_add(i as i64)).load(Ordering::Relaxed));
                }
                // The owner of a FIFO deque also only ever moves `top` by CAS (its `take`),
                // so one CAS over the whole range is arbitrated against it exactly like a
                // single steal. SeqCst as in `steal`.
                match self.top.compare_exchange(
                    t,
                    t.wrapping_add(want as i64),
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => Steal::Success(want),
                    Err(_) => Steal::Retry,
                }
            }
            Flavor::Lifo => {
                let mut n = 0;
                loop {
                    // Each handle is one `steal`: read the slot, CAS `top` from `t`.
                    let v = self.slot(t).load(Ordering::Relaxed);
                    if self
                        .top
                        .compare_exchange(t, t.wrapping_add(1), Ordering::SeqCst, Ordering::Relaxed)
                        .is_err()
                    {
                        // Another consumer moved `top`: stop with what we have.
                        return if n == 0 { Steal::Retry } else { Steal::Success(n) };
                    }
                    put(n, v);
                    n += 1;
                    if n == want {
                        return Steal::Success(n);
                    }
                    // The next handle is a steal of its own whose load of `top` is the CAS
                    // that just succeeded: a read-modify-write reads the latest value, so
                    // `top` was `t` and is now `t + 1`, and the CAS is sequenced before the
                    // fence below. The fence then pairs with the LIFO pop's exactly as in
                    // `steal` (either the owner's pop reads our `t + 1` or later, or we see
                    // its lowered `bottom`), so only `bottom` needs reading again, not `top`
                    // (as crossbeam-deque does). `tests/loom_deque.rs` (`batch_e5`) takes a
                    // value twice without this fence.
                    t = t.wrapping_add(1);
                    #[cfg(not(all(xtcq_loom, xtcq_loom_drop_steal_fence)))]
                    fence(Ordering::SeqCst);
                    let b = self.bottom.load(Ordering::Acquire);
                    if b.wrapping_sub(t) <= 0 {
                        return Steal::Success(n);
                    }
                }
            }
        }
    }

    /// Moves about half of this deque (at most `limit`, at most the free room in `dest`) into
    /// `dest`, the caller's own deque. [`Full`] when `dest` has no room for even one (nothing
    /// is taken: an `Empty` there would say this deque had nothing while it may hold work).
    pub fn steal_batch(&self, dest: &DequeOwner<'_>, limit: usize) -> Result<Steal<usize>, Full> {
        if limit == 0 {
            return Ok(Steal::Empty);
        }
        let room = dest.room_up_to(limit.min(MAX_BATCH));
        if room == 0 {
            return Err(Full);
        }
        // The handles go straight into `dest`'s slots past its `bottom`, as pushes would put
        // them, and `bottom` moves once for the whole batch (see `DequeOwner::publish`).
        let db = dest.deque.bottom.load(Ordering::Relaxed);
        Ok(match self.steal_batch_with(room, |i, h| dest.write_slot(db, i, h)) {
            Steal::Success(k) => {
                dest.publish(db, k);
                Steal::Success(k)
            }
            other => other,
        })
    }

    /// Like [`steal_batch`](Self::steal_batch), but returns the oldest stolen handle instead
    /// of pushing it.
    pub fn steal_batch_and_pop(&self, dest: &DequeOwner<'_>, limit: usize) -> Steal<u64> {
        let n = dest.room_up_to(limit.clamp(1, MAX_BATCH) - 1) + 1;
        let db = dest.deque.bottom.load(Ordering::Relaxed);
        let mut first = 0;
        let r = self.steal_batch_with(n, |i, h| {
            if i == 0 {
                first = h;
            } else {
                dest.write_slot(db, i - 1, h);
            }
        });
        match r {
            Steal::Success(k) => {
                dest.publish(db, k - 1);
                Steal::Success(first)
            }
            Steal::Empty => Steal::Empty,
            Steal::Retry => Steal::Retry,
        }
    }
}

/// The owner's handle on a deque: the only way to push, pop or take.
///
/// The deque moves job handles (`u64` words), not jobs; here over words on the heap, where
/// the segment keeps them in shared memory:
///
/// ```
/// use xtcq_shm::{DequeOwner, Flavor, HeapDeque, Steal};
/// let words = HeapDeque::new(4);
/// let owner = DequeOwner::adopt(words.view(Flavor::Lifo)?);
/// for h in 1..=4 {
///     owner.push(h).expect("room for four");
/// }
/// assert!(owner.push(5).is_err(), "a full deque says Full");
/// assert_eq!(owner.pop(), Some(4)); // the owner's end: newest first (LIFO)
/// let thief = owner.deque(); // a thief's view: `Copy`, `Sync`
/// assert!(matches!(thief.steal(), Steal::Success(1))); // the other end: oldest first
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// `Send` but not `Sync` (the `Cell` sees to that): the protocol relies on a single writer of
/// `bottom`, and the type system keeps one handle from being used by two threads at once.
/// Across processes the single-owner rule is kept by the daemon's lease. Two owners of one
/// deque are a logic error, not memory unsafety: every access is atomic and masked, and job
/// records arbitrate duplicates.
#[derive(Debug)]
pub struct DequeOwner<'a> {
    deque: DequeRef<'a>,
    /// A lower bound of `top`, so that `push` reads the thieves' line only when the deque
    /// looks full. `top` only grows, so a stale value can only make the deque look fuller.
    cached_top: Cell<i64>,
    _not_sync: PhantomData<Cell<()>>,
}

impl<'a> DequeOwner<'a> {
    /// Takes ownership of a deque, repairing `bottom = max(bottom, top)`: a previous owner
    /// that died inside a LIFO pop can leave `bottom` one below `top`, and a push from there
    /// would write a slot no one can ever steal.
    ///
    /// The caller must be the deque's only owner (the daemon's lease says so).
    pub fn adopt(deque: DequeRef<'a>) -> Self {
        // Acquire: as in `push`, pairs with the CAS that last moved `top`.
        let t = deque.top.load(Ordering::Acquire);
        let b = deque.bottom.load(Ordering::Relaxed);
        let b = if b.wrapping_sub(t) < 0 {
            // Release: a thief reading `bottom` must not see it before `top`'s slots.
            deque.bottom.store(t, Ordering::Release);
            t
        } else if b.wrapping_sub(t) > deque.mask + 1 {
            // Corrupt (more handles than slots): keep the newest `capacity` so that the
            // deque is usable again; the dropped handles' records are found by recovery.
            let nb = t.wrapping_add(deque.mask + 1);
            deque.bottom.store(nb, Ordering::Release);
            nb
        } else {
            b
        };
        let _ = b;
        Self { deque, cached_top: Cell::new(t), _not_sync: PhantomData }
    }

    /// The shared view, e.g. to hand out to thieves.
    pub fn deque(&self) -> DequeRef<'a> {
        self.deque
    }

    /// Pushes a handle at the bottom. [`Full`] when `capacity` handles are in.
    #[inline]
    pub fn push(&self, v: u64) -> Result<(), Full> {
        let d = &self.deque;
        // Relaxed: only we write `bottom`.
        let b = d.bottom.load(Ordering::Relaxed);
        let mut t = self.cached_top.get();
        if b.wrapping_sub(t) > d.mask {
            // Acquire pairs with the SeqCst CAS that moved `top` (a steal, or our own
            // last-item pop): that consumer's read of the slot we are about to reuse
            // happened before, so we cannot overwrite a handle not yet read.
            t = d.top.load(Ordering::Acquire);
            self.cached_top.set(t);
            if b.wrapping_sub(t) > d.mask {
                return Err(Full);
            }
        }
        // Relaxed: published by the Release store of `bottom` below.
        d.slot(b).store(v, Ordering::Relaxed);
        crate::fail_point!("push.after_slot_write");
        // Release pairs with the Acquire load of `bottom` in `steal`: a thief that sees the
        // new `bottom` sees the handle in the slot.
        d.bottom.store(b.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// `min(want, free slots)`, reading `top` only when its cached copy says there may be
    /// fewer than `want` (the same rule as `push`).
    #[inline]
    fn room_up_to(&self, want: usize) -> usize {
        let d = &self.deque;
        // Relaxed: only we write `bottom`.
        let b = d.bottom.load(Ordering::Relaxed);
        let cap = d.mask + 1;
        let room = |t: i64| (cap - b.wrapping_sub(t).clamp(0, cap)) as usize;
        // `cached_top` is a lower bound of `top` that we read with Acquire (or set from our
        // own CAS), so the room it gives is safe to fill, as in `push`.
        let r = room(self.cached_top.get());
        if r >= want {
            return want;
        }
        // Acquire as in `push`.
        let t = d.top.load(Ordering::Acquire);
        self.cached_top.set(t);
        room(t).min(want)
    }

    /// Writes handle `i` of a batch into the slot of index `bottom + i`, past `bottom` where
    /// no thief looks until [`publish`](Self::publish). The caller made sure of the room with
    /// [`room_up_to`](Self::room_up_to).
    #[inline]
    fn write_slot(&self, bottom: i64, i: usize, h: u64) {
        // Relaxed: published by the Release store in `publish`, as in `push`.
        self.deque.slot(bottom.wrapping_add(i as i64)).store(h, Ordering::Relaxed);
    }

    /// Publishes `n` handles written by [`write_slot`](Self::write_slot) from `bottom` on, with
    /// one store of `bottom` for the whole batch.
    #[inline]
    fn publish(&self, bottom: i64, n: usize) {
        if n > 0 {
            // Release pairs with the Acquire load of `bottom` in `steal`, as in `push`: a thief
            // that sees the new `bottom` sees every handle of the batch in its slot.
            self.deque.bottom.store(bottom.wrapping_add(n as i64), Ordering::Release);
        }
    }

    /// Free slots, exactly (only we add, so the true room is at least this).
    pub fn free_room(&self) -> usize {
        let d = &self.deque;
        let b = d.bottom.load(Ordering::Relaxed);
        let t = d.top.load(Ordering::Acquire);
        self.cached_top.set(t);
        (d.mask + 1 - b.wrapping_sub(t).clamp(0, d.mask + 1)) as usize
    }

    /// Takes the next handle in the deque's [`Flavor`]: newest for LIFO, oldest for FIFO.
    #[inline]
    pub fn pop(&self) -> Option<u64> {
        match self.deque.flavor {
            Flavor::Lifo => self.pop_lifo(),
            Flavor::Fifo => self.take(),
        }
    }

    /// Takes the oldest handle, from the steal end: the owner stealing from itself, so it is
    /// arbitrated against thieves by the same CAS on `top`. Right for either flavor.
    ///
    /// Cheaper than a thief's [`steal`](DequeRef::steal): `bottom` is read Relaxed and there
    /// is no `fence(SeqCst)`, so the CAS is the only locked instruction. Why that is enough:
    /// - `bottom`: only we write it, and `DequeOwner` is not `Sync`, so no push or pop of
    ///   ours runs meanwhile; program order gives us our own last store, and with it the
    ///   handles our pushes wrote into the slots.
    /// - the fence: the steal's fence pairs with the one in the LIFO pop, for the one race in
    ///   which a consumer takes a handle *without* a CAS (the pop of a non-last handle, after
    ///   lowering `bottom`). That consumer would be us, and we are here, not in a pop. A take
    ///   never lowers `bottom` and never takes without the CAS, so against thieves (and
    ///   their range CAS on a FIFO deque) the modification order of `top` alone decides:
    ///   exactly one CAS from `t` to anything larger succeeds. Thieves keep their fence, which
    ///   still pairs with our pops' fences.
    ///
    /// `tests/loom_deque.rs` checks take against single and batch steals (FIFO), and take
    /// mixed with LIFO pops against steals.
    pub fn take(&self) -> Option<u64> {
        let d = &self.deque;
        // Relaxed: only we write `bottom` (see above).
        let b = d.bottom.load(Ordering::Relaxed);
        // Acquire, as in `steal`: pairs with the SeqCst (so Release) CAS that moved `top`
        // here, so that the consumer's read of the slot below `t` happened before; the value
        // goes into `cached_top`, which lets `push` reuse those slots without reading `top`.
        let mut t = d.top.load(Ordering::Acquire);
        loop {
            if b.wrapping_sub(t) <= 0 {
                self.cached_top.set(t);
                return None;
            }
            // Relaxed: we wrote it ourselves (program order). No one rewrites it meanwhile:
            // only we push.
            let v = d.slot(t).load(Ordering::Relaxed);
            // SeqCst as in `steal`, whose CAS this one races. On failure, Acquire for the
            // same reason as the load of `top` above: the value becomes our next `t`.
            match d.top.compare_exchange(t, t.wrapping_add(1), Ordering::SeqCst, Ordering::Acquire) {
                Ok(_) => {
                    self.cached_top.set(t.wrapping_add(1));
                    return Some(v);
                }
                // Another consumer took index `t` (or a batch from it): each lost race is
                // someone's progress, and `top` only grows toward our fixed `b`.
                Err(now) => t = now,
            }
        }
    }

    fn pop_lifo(&self) -> Option<u64> {
        let d = &self.deque;
        // Relaxed: only we write `bottom`.
        let b = d.bottom.load(Ordering::Relaxed);
        // A cheap emptiness test first, so an empty pop pays no fence. Relaxed: a stale
        // (smaller) `top` only sends us down the full path below, which re-reads it.
        let t = d.top.load(Ordering::Relaxed);
        if b.wrapping_sub(t) <= 0 {
            return None;
        }

        // Claim the bottom slot before looking at `top`.
        let b = b.wrapping_sub(1);
        d.bottom.store(b, Ordering::Relaxed);
        crate::fail_point!("pop.after_bottom_decrement");

        // Pairs with the fence in `steal` (see the module comment). This is what makes the
        // Relaxed store above and the load of `top` below safe.
        #[cfg(not(all(xtcq_loom, xtcq_loom_drop_pop_fence)))]
        fence(Ordering::SeqCst);

        // Acquire (not needed by the pop itself, which the fence covers): the value goes into
        // `cached_top`, and `push` reuses slots below it without reading `top` again, so the
        // consumers' reads of those slots must happen before (pairs with their SeqCst CAS).
        let t = d.top.load(Ordering::Acquire);
        self.cached_top.set(t);
        let len = b.wrapping_sub(t);
        if len < 0 {
            // Emptied by thieves meanwhile: put `bottom` back.
            d.bottom.store(b.wrapping_add(1), Ordering::Relaxed);
            return None;
        }
        // Relaxed: we wrote it ourselves.
        let v = d.slot(b).load(Ordering::Relaxed);
        if len > 0 {
            // At least one handle below ours: no thief can reach slot `b`.
            return Some(v);
        }
        // The last handle: a thief may be taking it too. The CAS on `top` decides; SeqCst as
        // in `steal`, whose CAS it races.
        let won = d.top.compare_exchange(t, t.wrapping_add(1), Ordering::SeqCst, Ordering::Relaxed).is_ok();
        // Either way the deque is now empty at index b + 1.
        d.bottom.store(b.wrapping_add(1), Ordering::Relaxed);
        if won {
            self.cached_top.set(t.wrapping_add(1));
            Some(v)
        } else {
            None
        }
    }

    /// Handles in the deque, exact up to concurrent steals.
    pub fn len(&self) -> usize {
        let d = &self.deque;
        let b = d.bottom.load(Ordering::Relaxed);
        let t = d.top.load(Ordering::Acquire);
        b.wrapping_sub(t).clamp(0, d.mask + 1) as usize
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Deque words on the heap, for tests, benchmarks and the loom models: the same algorithm
/// as over the segment, without one.
#[derive(Debug)]
pub struct HeapDeque {
    top: AtomicI64,
    bottom: AtomicI64,
    slots: Box<[AtomicU64]>,
}

impl HeapDeque {
    /// `capacity` must be a power of two.
    pub fn new(capacity: usize) -> Self {
        Self {
            top: AtomicI64::new(0),
            bottom: AtomicI64::new(0),
            slots: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The resolved view.
    pub fn view(&self, flavor: Flavor) -> Result<DequeRef<'_>, BadCapacity> {
        DequeRef::new(&self.top, &self.bottom, &self.slots, flavor)
    }
}
