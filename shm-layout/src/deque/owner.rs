//! [`DequeOwner`], the owner's end of a deque (push, LIFO pop, FIFO take), and [`HeapDeque`],
//! deque words on the heap for tests and benchmarks.
//!
//! - Only the owner writes `bottom`; `DequeOwner` is `Send`, not `Sync`, so one thread at a
//!   time does.
//! - A slot is reused only below a `top` read with Acquire (or set by our own CAS), so no
//!   handle is overwritten before the consumer that took it has read it.
//! - The fence and orderings are explained in the parent module and at each access.

use core::cell::Cell;
use core::marker::PhantomData;

use super::{BadCapacity, DequeRef, Flavor, Full};
use crate::sync::{fence, AtomicI64, AtomicU64, Ordering};

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
    pub(super) deque: DequeRef<'a>,
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

    /// Pushes as many of `handles` as there is room for, from the first, with one store of
    /// `bottom` for all of them (a thief sees none or, once it reads the new `bottom`, every
    /// one: the slots are written first, past `bottom`, where no thief looks). Returns how
    /// many were pushed; the rest are the caller's.
    ///
    /// ```
    /// use xtcq_shm::{DequeOwner, Flavor, HeapDeque};
    /// let d = HeapDeque::new(4);
    /// let owner = DequeOwner::adopt(d.view(Flavor::Fifo).unwrap());
    /// assert_eq!(owner.push_many(&[1, 2, 3, 4, 5, 6]), 4); // room for 4
    /// assert_eq!(owner.pop(), Some(1));
    /// assert_eq!(owner.push_many(&[5, 6]), 1);
    /// ```
    pub fn push_many(&self, handles: &[u64]) -> usize {
        let n = self.room_up_to(handles.len());
        // Relaxed: only we write `bottom`.
        let b = self.deque.bottom.load(Ordering::Relaxed);
        for (i, &h) in handles[..n].iter().enumerate() {
            self.write_slot(b, i, h);
        }
        self.publish(b, n);
        n
    }

    /// `min(want, free slots)`, reading `top` only when its cached copy says there may be
    /// fewer than `want` (the same rule as `push`).
    #[inline]
    pub(crate) fn room_up_to(&self, want: usize) -> usize {
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
    pub(super) fn write_slot(&self, bottom: i64, i: usize, h: u64) {
        // Relaxed: published by the Release store in `publish`, as in `push`.
        self.deque.slot(bottom.wrapping_add(i as i64)).store(h, Ordering::Relaxed);
    }

    /// Publishes `n` handles written by [`write_slot`](Self::write_slot) from `bottom` on, with
    /// one store of `bottom` for the whole batch.
    #[inline]
    pub(super) fn publish(&self, bottom: i64, n: usize) {
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
