//! Batch steals: a thief takes several handles from the top of a deque at once.
//!
//! - The front half of a steal (`top`, the fence, `bottom`) is paid once per batch.
//! - From a FIFO deque a batch is one CAS on `top` over the whole range: the FIFO owner also
//!   only ever moves `top` by CAS, so the range CAS is arbitrated exactly like a single steal.
//! - From a LIFO deque each handle is its own CAS, as in crossbeam-deque: the owner's LIFO pop
//!   takes from the bottom without a CAS while more than one handle is left, so a range CAS
//!   could cover a handle the owner has already popped.
//! - A batch into a destination deque with no room says [`Full`] and takes nothing.

use super::{DequeOwner, DequeRef, Flavor, Full, Steal, MAX_BATCH};
use crate::sync::{fence, Ordering};

/// How much of what a thief sees a batch steal takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Share {
    /// About half (rounded up), as work-stealing deques take, so that the victim keeps work.
    Half,
    /// All of it (up to the limit).
    All,
}

impl<'a> DequeRef<'a> {
    /// Thief batch steal into `out`: up to `out.len()` (at most [`MAX_BATCH`]) handles, about
    /// half of what is there, oldest first. Returns how many were written. On
    /// [`Steal::Retry`] or [`Steal::Empty`] the contents of `out` mean nothing.
    ///
    /// From a FIFO deque the batch is taken with one CAS on `top`. From a LIFO deque it is
    /// taken one CAS per handle (see the module docs).
    pub fn steal_batch_into(&self, out: &mut [u64]) -> Steal<usize> {
        let limit = out.len().min(MAX_BATCH);
        self.steal_batch_with(limit, Share::Half, |i, h| out[i] = h)
    }

    /// Like [`steal_batch_into`](Self::steal_batch_into), but takes everything there is, up
    /// to `out.len()` (at most [`MAX_BATCH`]), not about half: for a consumer that runs the
    /// jobs itself and asked for that many, not a worker balancing its own deque against
    /// others. Same CASes: one for the whole range from a FIFO deque, one per handle from a
    /// LIFO one.
    pub fn steal_up_to_into(&self, out: &mut [u64]) -> Steal<usize> {
        let limit = out.len().min(MAX_BATCH);
        self.steal_batch_with(limit, Share::All, |i, h| out[i] = h)
    }

    /// The batch steal behind [`steal_batch_into`](Self::steal_batch_into),
    /// [`steal_batch`](Self::steal_batch) and [`steal_batch_and_pop`](Self::steal_batch_and_pop):
    /// up to `limit` handles (about half of what is there, or all of it for [`Share::All`]; at
    /// least one), handed to
    /// `put(i, handle)` for `i = 0, 1, ...`, oldest first. Returns `Success(n)` with `n >= 1`,
    /// `Empty` when `limit` is 0 or the deque looked empty, `Retry` when the first CAS lost.
    ///
    /// `put` may be called for handles that are then not taken (the FIFO path reads its range
    /// before its CAS): whatever it wrote beyond the `n` returned must stay unpublished.
    #[inline]
    fn steal_batch_with(&self, limit: usize, share: Share, put: impl FnMut(usize, u64)) -> Steal<usize> {
        if limit == 0 {
            return Steal::Empty;
        }
        // The front half of `steal`, once per batch, with the same orderings for the same
        // pairs: Acquire `top` (the CAS that moved it), the fence (the LIFO pop's fence),
        // Acquire `bottom` (`push`'s Release store).
        let t = self.top.load(Ordering::Acquire);
        #[cfg(not(all(xtcq_loom, xtcq_loom_drop_steal_fence)))]
        fence(Ordering::SeqCst);
        let b = self.bottom.load(Ordering::Acquire);
        let len = b.wrapping_sub(t);
        if len <= 0 {
            return Steal::Empty;
        }
        // A corrupt `len` is clamped to the capacity.
        let there = len.min(self.mask + 1) as usize;
        let want = limit.min(match share {
            // About half, as crossbeam-deque takes.
            Share::Half => there.div_ceil(2),
            Share::All => there,
        });
        match self.flavor {
            Flavor::Fifo => self.steal_range(t, want, put),
            Flavor::Lifo => self.steal_each(t, want, put),
        }
    }

    /// FIFO: reads the `want` slots from `t` on, then takes them all with one CAS on `top`.
    #[inline]
    fn steal_range(&self, t: i64, want: usize, mut put: impl FnMut(usize, u64)) -> Steal<usize> {
        for i in 0..want {
            // Relaxed, as the slot read in `steal`.
            put(i, self.slot(t.wrapping_add(i as i64)).load(Ordering::Relaxed));
        }
        // The owner of a FIFO deque also only ever moves `top` by CAS (its `take`), so one CAS
        // over the whole range is arbitrated against it exactly like a single steal. SeqCst as
        // in `steal`.
        match self.top.compare_exchange(t, t.wrapping_add(want as i64), Ordering::SeqCst, Ordering::Relaxed) {
            Ok(_) => Steal::Success(want),
            Err(_) => {
                crate::cas_count::top_lost();
                Steal::Retry
            }
        }
    }

    /// LIFO: up to `want` single steals from `t` on, each with its own CAS; stops at the first
    /// lost CAS or when `bottom` says the deque is empty.
    #[inline]
    fn steal_each(&self, mut t: i64, want: usize, mut put: impl FnMut(usize, u64)) -> Steal<usize> {
        let mut n = 0;
        loop {
            // Each handle is one `steal`: read the slot, CAS `top` from `t`.
            let v = self.slot(t).load(Ordering::Relaxed);
            if self.top.compare_exchange(t, t.wrapping_add(1), Ordering::SeqCst, Ordering::Relaxed).is_err() {
                // Another consumer moved `top`: stop with what we have.
                crate::cas_count::top_lost();
                return if n == 0 { Steal::Retry } else { Steal::Success(n) };
            }
            put(n, v);
            n += 1;
            if n == want {
                return Steal::Success(n);
            }
            // The next handle is a steal of its own whose load of `top` is the CAS that just
            // succeeded: a read-modify-write reads the latest value, so `top` was `t` and is now
            // `t + 1`, and the CAS is sequenced before the fence below. The fence then pairs
            // with the LIFO pop's exactly as in `steal` (either the owner's pop reads our
            // `t + 1` or later, or we see its lowered `bottom`), so only `bottom` needs reading
            // again, not `top` (as crossbeam-deque does). `tests/loom_deque.rs` (`batch_e5`)
            // takes a value twice without this fence.
            t = t.wrapping_add(1);
            #[cfg(not(all(xtcq_loom, xtcq_loom_drop_steal_fence)))]
            fence(Ordering::SeqCst);
            let b = self.bottom.load(Ordering::Acquire);
            if b.wrapping_sub(t) <= 0 {
                return Steal::Success(n);
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
        Ok(match self.steal_batch_with(room, Share::Half, |i, h| dest.write_slot(db, i, h)) {
            Steal::Success(k) => {
                dest.publish(db, k);
                Steal::Success(k)
            }
            other => other,
        })
    }

    /// Like [`steal_batch`](Self::steal_batch), but returns the oldest stolen handle instead
    /// of pushing it. A full `dest` is no obstacle: the one handle returned needs no room.
    pub fn steal_batch_and_pop(&self, dest: &DequeOwner<'_>, limit: usize) -> Steal<u64> {
        let n = dest.room_up_to(limit.clamp(1, MAX_BATCH) - 1) + 1;
        let db = dest.deque.bottom.load(Ordering::Relaxed);
        let mut first = 0;
        let r = self.steal_batch_with(n, Share::Half, |i, h| {
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
