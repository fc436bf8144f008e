//! The overflow ring: a bounded multi-producer multi-consumer queue of record indices that
//! any process may push to without owning a deque.
//!
//! It is the slow path: where an owner goes when its deque is full (as in the XTC seed), and
//! where non-owners — a one-shot `xtcq push`, a nack, recovery — put jobs.
//!
//! **Why it cannot be wedged by a process that dies inside it.** Every step of a push and of
//! a pop is one CAS, and every state between two steps is one that any other process can
//! finish on the dead one's behalf:
//!
//! ```text
//!  cell at position p, lap L = p / capacity:   EMPTY(L) --push CAS--> FULL(L, idx)
//!                                              FULL(L)  --pop  CAS--> EMPTY(L + 1)
//!  tail: advanced past p by anyone who sees FULL(L) or EMPTY(L + 1) at p ("helping")
//!        (a popper does so before it advances head past p)
//!  head: advanced past p by anyone who sees EMPTY(L + 1) at p
//!        (a pusher does so before it fills p + capacity)
//! ```
//!
//! A pusher that dies after its cell CAS leaves `tail` behind a full cell: the next pusher
//! helps `tail` on, and so does a popper before it moves `head` past that cell, so that
//! `head <= tail` holds in every state (`check` relies on it). A push of many
//! (`push_run`) fills the cells after its first one while they are free and moves `tail`
//! past them once: until then, the state of as many pushers stopped after their cell CAS,
//! helped past alike. A popper that dies after its
//! cell CAS leaves `head` behind an emptied cell: the next popper helps `head` on, and so
//! does a pusher before it fills that cell for the next lap, so that `tail <= head +
//! capacity` holds too; the index it took is lost from the ring, but the record it names is
//! still `Queued` and unreferenced, which is exactly what recovery looks for (a popper's
//! death between taking an index and claiming the record is the same window as a thief's
//! between its CAS on `top` and its claim). No lock, so no lock holder to die.
//!
//! Cells hold record *indices*, not full handles: the lap has to share the word. A consumer
//! claims whatever generation the record holds if it is `Queued` for this queue, which is
//! sound because the claim CAS on the record is the one arbiter (see `record`).
//!
//! Cell word: `lap: u32 << 32 | FULL_BIT (1 << 31) | index (31 bits)`.

use crate::sync::{AtomicU64, Ordering};

const FULL_BIT: u64 = 1 << 31;
const INDEX_MASK: u64 = FULL_BIT - 1;

/// The largest record index a cell can carry.
pub const MAX_INDEX: u32 = INDEX_MASK as u32;

/// Why a push onto the ring failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The ring holds `capacity` indices already.
    #[error("overflow ring is full")]
    Full,
    /// The ring's words hold values no correct program writes.
    #[error("overflow ring is corrupt: {0}")]
    Corrupt(String),
}

/// The words of one overflow ring, resolved.
#[derive(Clone, Copy, Debug)]
pub struct OverflowRef<'a> {
    head: &'a AtomicU64,
    tail: &'a AtomicU64,
    cells: &'a [AtomicU64],
    shift: u32,
    mask: u64,
}

#[inline]
fn empty(lap: u32) -> u64 {
    (lap as u64) << 32
}
#[inline]
fn full(lap: u32, index: u32) -> u64 {
    (lap as u64) << 32 | FULL_BIT | index as u64
}
#[inline]
fn lap_of(cell: u64) -> u32 {
    (cell >> 32) as u32
}
#[inline]
fn is_full(cell: u64) -> bool {
    cell & FULL_BIT != 0
}

/// How many times a push or pop re-reads before calling the ring corrupt. Each lost race is
/// another process's progress, so a healthy ring never gets near this.
const MAX_ROUNDS: u32 = 1 << 20;

impl<'a> OverflowRef<'a> {
    /// Resolves a ring; `cells.len()` must be a power of two.
    pub fn new(
        head: &'a AtomicU64,
        tail: &'a AtomicU64,
        cells: &'a [AtomicU64],
    ) -> Result<Self, crate::deque::BadCapacity> {
        let n = cells.len();
        if n == 0 || !n.is_power_of_two() || n > (1 << 30) {
            return Err(crate::deque::BadCapacity(n));
        }
        Ok(Self { head, tail, cells, shift: n.trailing_zeros(), mask: n as u64 - 1 })
    }

    /// Fixed capacity.
    pub fn capacity(&self) -> usize {
        self.cells.len()
    }

    #[inline]
    fn cell(&self, pos: u64) -> &'a AtomicU64 {
        &self.cells[(pos & self.mask) as usize]
    }

    #[inline]
    fn lap(&self, pos: u64) -> u32 {
        (pos >> self.shift) as u32
    }

    /// Approximate number of indices in the ring.
    pub fn len(&self) -> usize {
        let h = self.head.load(Ordering::Acquire);
        let t = self.tail.load(Ordering::Acquire);
        t.saturating_sub(h).min(self.mask + 1) as usize
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cell that position `pos` maps to, for fault-injection tests and repair tools.
    /// Writing it outside the protocol breaks the ring (never memory safety).
    pub fn raw_cell(&self, pos: u64) -> &'a AtomicU64 {
        self.cell(pos)
    }

    /// Raw `(head, tail)`, for checks.
    pub fn positions(&self) -> (u64, u64) {
        (self.head.load(Ordering::Acquire), self.tail.load(Ordering::Acquire))
    }

    /// `(head, tail, head_after)`: `head`, then `tail`, then `head` again, for checks of a
    /// live ring. Both only grow, so `head <= tail` holds against the first read and
    /// `tail <= head + capacity` against the last; a `head` read before `tail` may be one
    /// the ring has since left more than `capacity` behind.
    pub fn span(&self) -> (u64, u64, u64) {
        let head = self.head.load(Ordering::Acquire);
        let tail = self.tail.load(Ordering::Acquire);
        (head, tail, self.head.load(Ordering::Acquire))
    }

    /// The record index at ring position `pos` if that cell is full for `pos`'s lap.
    pub fn index_at(&self, pos: u64) -> Option<u32> {
        let c = self.cell(pos).load(Ordering::Acquire);
        (is_full(c) && lap_of(c) == self.lap(pos)).then_some((c & INDEX_MASK) as u32)
    }

    /// Appends a record index.
    pub fn push(&self, index: u32) -> Result<(), RingError> {
        let t = self.fill_at_tail(index)?;
        self.move_tail(t, t.wrapping_add(1));
        Ok(())
    }

    /// Appends `indices` in order, as that many [`push`](Self::push)es would, but moves `tail`
    /// once per run of cells filled in a row rather than once per index. `Err((n, why))`:
    /// the first `n` are in the ring, the rest not.
    ///
    /// A run: the first index goes where `push` puts it (at `tail`, helping as `push` does);
    /// each next one into the cell after the last while that cell is free for its lap, with
    /// `tail` left at the run's first cell; then `tail` jumps past the run from wherever
    /// helpers took it. Every state in between is the one a pusher that stopped after its
    /// cell CAS leaves, several cells long: full cells from `tail` on, which every push and
    /// pop helps `tail` past one at a time, and which [`held`](Self::held) counts as
    /// indexed. `head` never passes `tail` (a popper helps `tail` past a full cell before it
    /// moves `head` past it); `tail` never passes `head + capacity` (before each cell of the
    /// run `head` is helped past the cell's previous lap, as `push` does, and by induction
    /// along the run it is never further behind than that).
    pub fn push_run(&self, indices: &[u32]) -> Result<(), (usize, RingError)> {
        let mut done = 0;
        while let Some(&first) = indices.get(done) {
            let start = self.fill_at_tail(first).map_err(|e| (done, e))?;
            done += 1;
            let mut next = start.wrapping_add(1);
            while let Some(&index) = indices.get(done) {
                if !self.fill_after_run(next, index) {
                    break;
                }
                done += 1;
                next = next.wrapping_add(1);
            }
            self.move_tail(start, next);
        }
        Ok(())
    }

    /// Fills the cell at `pos`, one past a run this thread is filling, if it is free for
    /// `pos`'s lap; `false` when it is not (another pusher took it, the ring is full there,
    /// or it holds what no correct program writes: [`push`](Self::push)'s path, taken next,
    /// tells which).
    #[inline]
    fn fill_after_run(&self, pos: u64, index: u32) -> bool {
        // Acquire, as in `fill_at_tail`: the popper of the previous lap read its index first.
        let c = self.cell(pos).load(Ordering::Acquire);
        index <= MAX_INDEX && c == empty(self.lap(pos)) && self.fill_free(pos, index)
    }

    /// The cell CAS of a push into the cell at `pos`, which the caller saw free for `pos`'s
    /// lap: the last lap's index there was popped and `head` belongs past it; its popper may
    /// have died before moving it, so `head` is helped first, and `tail` never passes `head +
    /// capacity`. False when another pusher filled it first.
    #[inline]
    fn fill_free(&self, pos: u64, index: u32) -> bool {
        let lap = self.lap(pos);
        self.help_head_past(pos.wrapping_sub(self.mask + 1));
        // AcqRel: Release publishes nothing extra here (the record was published by its own
        // state word) but orders us after the popper of the previous lap.
        let filled = self
            .cell(pos)
            .compare_exchange(empty(lap), full(lap, index), Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if filled {
            crate::fail_point!("overflow.push.after_cell");
        }
        filled
    }

    /// Moves `tail` to `to` from `from` or wherever helpers took it on the way: every cell in
    /// `[from, to)` was filled by this thread (a push, or a run). Stops once `tail` is at or past `to`,
    /// or found behind `from` (it never moves back: garbage, left to the others' checks).
    fn move_tail(&self, from: u64, to: u64) {
        let mut t = from;
        // Each failure finds `tail` further on: at most `to - from` rounds.
        while let Err(now) = self.tail.compare_exchange(t, to, Ordering::AcqRel, Ordering::Acquire) {
            if now >= to || now <= t {
                return;
            }
            t = now;
        }
    }

    /// The cell CAS of a push: fills the cell at `tail` (helping `tail` and `head` on as
    /// needed) and returns its position, leaving `tail` for the caller to move past it.
    fn fill_at_tail(&self, index: u32) -> Result<u64, RingError> {
        if index > MAX_INDEX {
            return Err(RingError::Corrupt(format!("record index {index} does not fit a cell")));
        }
        let mut stuck = 0;
        for _ in 0..MAX_ROUNDS {
            // Acquire pairs with the AcqRel CAS that advanced `tail`, so the cell load
            // below sees at least the cell state that justified it.
            let t = self.tail.load(Ordering::Acquire);
            let lap = self.lap(t);
            let cell = self.cell(t);
            // Acquire pairs with the popper's AcqRel cell CAS (EMPTY(lap)) so that its read
            // of the old index is done before we overwrite it.
            let c = cell.load(Ordering::Acquire);
            if c == empty(lap) {
                if self.fill_free(t, index) {
                    return Ok(t);
                }
                continue;
            }
            let cl = lap_of(c);
            if cl == lap || cl == lap.wrapping_add(1) {
                // FULL(lap): pushed, tail not yet advanced (maybe never: the pusher died).
                // EMPTY/FULL(lap + 1): pushed and popped already. Help `tail` on.
                let _ = self.tail.compare_exchange(t, t.wrapping_add(1), Ordering::AcqRel, Ordering::Relaxed);
                continue;
            }
            if cl == lap.wrapping_sub(1) && is_full(c) {
                // Last lap's index at this cell is not popped yet.
                if self.tail.load(Ordering::Acquire) == t {
                    return Err(RingError::Full);
                }
                continue;
            }
            // Our `tail` may be far behind; if it is not, the cell is garbage.
            if self.tail.load(Ordering::Acquire) == t {
                stuck += 1;
                if stuck > 3 {
                    return Err(RingError::Corrupt(format!(
                        "cell at position {t} holds {c:#x}, which lap {lap} cannot have"
                    )));
                }
            }
        }
        Err(RingError::Corrupt("push made no progress in 2^20 rounds".to_string()))
    }

    /// Moves `tail` from `pos` to `pos + 1` if it is still at `pos`: called by a popper that
    /// read `head == pos` (Acquire) and saw the cell at `pos` pushed. The load first, so that
    /// the usual pop, with `tail` well ahead, does not take the pushers' line for a CAS. A
    /// value other than `pos` is past it: `tail` never moves back, and whoever moved `head`
    /// to `pos` had made `tail` reach `pos` first, which our Acquire of `head` makes us see.
    #[inline]
    fn help_tail_past(&self, pos: u64) {
        help_past(self.tail, pos);
    }

    /// Moves `head` from `pos` to `pos + 1` if it is still at `pos`: called by a pusher about
    /// to fill the cell at `pos + capacity` (at `tail`, or the next cell of its run), which
    /// it saw free, so the cell at `pos` was popped. For `pos` "below 0" (the first lap) it
    /// never matches. The load first, as in [`help_tail_past`](Self::help_tail_past), so
    /// that the usual push, with `head` well ahead, does not take the poppers' line for a
    /// CAS. A value other than `pos` is past it: `head` never moves back, and whoever filled
    /// the cell before `pos + capacity` had made `head` reach `pos` first, which the move of
    /// `tail` past that cell and our Acquire of `tail` make us see (in a run, that filler
    /// was this thread).
    #[inline]
    fn help_head_past(&self, pos: u64) {
        help_past(self.head, pos);
    }

    /// Position and record index of each job the ring holds between `head` and `tail` as
    /// the caller read them: the cells in `[head, tail)` full for their lap, then those from
    /// `tail` on that are, up to the capacity. The second run is a push whose pusher filled
    /// its cell and stopped (or died) before moving `tail`: its job is indexed (the next push
    /// or pop moves `tail` past it). Not when `head` is past `tail` (a corrupt ring): pops
    /// would never reach those cells.
    pub fn held(&self, head: u64, tail: u64) -> impl Iterator<Item = (u64, u32)> + '_ {
        let cap = self.capacity() as u64;
        let n = tail.saturating_sub(head).min(cap);
        let past_tail = if head <= tail { cap - n } else { 0 };
        let within = (0..n).filter_map(move |k| self.index_at(head + k).map(|i| (head + k, i)));
        let beyond = (0..past_tail)
            .map(move |k| tail.wrapping_add(k))
            .map_while(move |p| self.index_at(p).map(|i| (p, i)));
        within.chain(beyond)
    }

    /// Removes the oldest record index, `None` when empty.
    pub fn pop(&self) -> Result<Option<u32>, RingError> {
        let mut stuck = 0;
        for _ in 0..MAX_ROUNDS {
            let h = self.head.load(Ordering::Acquire);
            let lap = self.lap(h);
            let cell = self.cell(h);
            // Acquire pairs with the pusher's AcqRel cell CAS.
            let c = cell.load(Ordering::Acquire);
            if is_full(c) && lap_of(c) == lap {
                // The cell is pushed, so `tail` belongs past it; its pusher may have died
                // before moving it. Help first, so `head` never passes `tail`.
                self.help_tail_past(h);
                if cell
                    .compare_exchange(c, empty(lap.wrapping_add(1)), Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    crate::fail_point!("overflow.pop.after_cell");
                    let _ =
                        self.head.compare_exchange(h, h.wrapping_add(1), Ordering::AcqRel, Ordering::Relaxed);
                    return Ok(Some((c & INDEX_MASK) as u32));
                }
                continue;
            }
            if c == empty(lap) {
                // Nothing pushed at `head` yet. If `head` has not moved, the ring is empty.
                if self.head.load(Ordering::Acquire) == h {
                    return Ok(None);
                }
                continue;
            }
            if lap_of(c) == lap.wrapping_add(1) {
                // Popped, head not yet advanced (maybe never: the popper died). Help both
                // on, `tail` first (see above).
                self.help_tail_past(h);
                let _ = self.head.compare_exchange(h, h.wrapping_add(1), Ordering::AcqRel, Ordering::Relaxed);
                continue;
            }
            if self.head.load(Ordering::Acquire) == h {
                stuck += 1;
                if stuck > 3 {
                    return Err(RingError::Corrupt(format!(
                        "cell at position {h} holds {c:#x}, which lap {lap} cannot have"
                    )));
                }
            }
        }
        Err(RingError::Corrupt("pop made no progress in 2^20 rounds".to_string()))
    }
}

/// Moves `word` (`head` or `tail`) from `pos` to `pos + 1` if it is still at `pos`. The load
/// first: the usual caller finds it well ahead and must not take its line for a CAS. Each
/// caller says why a value other than `pos` is past it.
#[inline]
fn help_past(word: &AtomicU64, pos: u64) {
    if word.load(Ordering::Acquire) == pos {
        // Failure means someone else helped.
        let _ = word.compare_exchange(pos, pos.wrapping_add(1), Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Ring words on the heap, for tests and the loom models.
#[derive(Debug)]
pub struct HeapOverflow {
    head: AtomicU64,
    tail: AtomicU64,
    cells: Box<[AtomicU64]>,
}

impl HeapOverflow {
    /// `capacity` must be a power of two.
    pub fn new(capacity: usize) -> Self {
        Self {
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            cells: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The resolved view.
    pub fn view(&self) -> Result<OverflowRef<'_>, crate::deque::BadCapacity> {
        OverflowRef::new(&self.head, &self.tail, &self.cells)
    }

    /// The raw cell words, so tests can leave the ring as a dead process would.
    pub fn cells(&self) -> &[AtomicU64] {
        &self.cells
    }
}

/// What a ring cell looks like after a push of `index` at position `pos` of a ring of
/// `capacity`, for tests that simulate a pusher dying between its two CASes.
pub fn full_cell_for(pos: u64, capacity: usize, index: u32) -> u64 {
    full((pos >> capacity.trailing_zeros()) as u32, index)
}

#[cfg(all(test, not(xtcq_loom)))]
mod tests {
    use super::*;

    /// A pusher killed between its cell CAS and its `tail` CAS, then a pop: `head` must not
    /// pass `tail` (the state `check` calls inconsistent), and the ring keeps working.
    #[test]
    fn a_pop_after_a_dead_pusher_keeps_head_behind_tail() {
        let ring = HeapOverflow::new(4);
        let v = ring.view().unwrap();
        v.push(7).unwrap();
        ring.cells()[1].store(full_cell_for(1, 4, 8), Ordering::Release);
        assert_eq!(v.positions(), (0, 1));
        assert_eq!(v.pop().unwrap(), Some(7));
        assert_eq!(v.pop().unwrap(), Some(8));
        assert_eq!(v.positions(), (2, 2));
        assert_eq!(v.pop().unwrap(), None);
        v.push(9).unwrap();
        assert_eq!(v.pop().unwrap(), Some(9));
        assert_eq!(v.positions(), (3, 3));
    }

    /// A popper killed between its cell CAS and its `head` CAS in a full ring, then a push
    /// into the cell it freed: `tail` must not pass `head + capacity` (`check` calls that
    /// inconsistent, and scans only `capacity` cells from `head`).
    #[test]
    fn a_push_after_a_dead_popper_of_a_full_ring_keeps_tail_within_capacity() {
        let ring = HeapOverflow::new(4);
        let v = ring.view().unwrap();
        for i in 0..4 {
            v.push(i).unwrap();
        }
        ring.cells()[0].store(empty(1), Ordering::Release);
        assert_eq!(v.positions(), (0, 4));
        v.push(9).unwrap();
        let (h, t) = v.positions();
        assert!(t - h <= 4, "tail {t} passed head {h} + capacity 4");
        let popped: Vec<u32> = std::iter::from_fn(|| v.pop().unwrap()).collect();
        assert_eq!(popped, [1, 2, 3, 9]);
        assert_eq!(v.positions(), (5, 5));
    }

    /// The same after a popper died between its cell CAS and its `head` CAS: the helping
    /// popper moves `tail` first.
    #[test]
    fn a_popper_helping_a_dead_popper_keeps_head_behind_tail() {
        let ring = HeapOverflow::new(4);
        let v = ring.view().unwrap();
        // Dead pusher at 0, then a dead popper of that cell: EMPTY(lap 1), head and tail 0.
        ring.cells()[0].store(empty(1), Ordering::Release);
        assert_eq!(v.positions(), (0, 0));
        assert_eq!(v.pop().unwrap(), None);
        let (h, t) = v.positions();
        assert!(h <= t, "head {h} passed tail {t}");
        v.push(5).unwrap();
        assert_eq!(v.pop().unwrap(), Some(5));
        assert_eq!(v.positions(), (2, 2));
    }

    /// A run across a lap boundary, into a ring with room for part of it: the part goes in,
    /// in order, `tail` past it, and the error says how many.
    #[test]
    fn a_run_fills_what_room_there_is_and_says_how_much() {
        let ring = HeapOverflow::new(4);
        let v = ring.view().unwrap();
        v.push(1).unwrap();
        assert_eq!(v.pop().unwrap(), Some(1));
        v.push_run(&[10, 11]).unwrap();
        assert_eq!(v.positions(), (1, 3));
        assert_eq!(v.push_run(&[12, 13, 14, 15]), Err((2, RingError::Full)));
        assert_eq!(v.positions(), (1, 5));
        let popped: Vec<u32> = std::iter::from_fn(|| v.pop().unwrap()).collect();
        assert_eq!(popped, [10, 11, 12, 13]);
        v.push_run(&[]).unwrap();
        assert_eq!(v.positions(), (5, 5));
    }

    /// A cell after the run's first holding what no push writes ends the run there; the
    /// push of that index then reports the ring corrupt, with the run's first in the ring.
    #[test]
    fn a_run_stops_at_a_garbage_cell_and_says_so() {
        let ring = HeapOverflow::new(4);
        let v = ring.view().unwrap();
        ring.cells()[1].store(empty(7), Ordering::Release);
        let e = v.push_run(&[1, 2, 3]).unwrap_err();
        assert_eq!(e.0, 1);
        assert!(matches!(e.1, RingError::Corrupt(_)), "{e:?}");
        assert_eq!(v.positions(), (0, 1));
        assert_eq!(v.pop().unwrap(), Some(1));
        let too_big = v.push_run(&[MAX_INDEX + 1]).unwrap_err();
        assert!(matches!(too_big, (0, RingError::Corrupt(_))), "{too_big:?}");
    }

    /// A pusher of a run killed before it moved `tail`: its cells are held (indexed), the
    /// next push helps `tail` past them, and everything comes out once, in order.
    #[test]
    fn a_run_whose_pusher_died_before_moving_tail_is_helped_past() {
        let ring = HeapOverflow::new(8);
        let v = ring.view().unwrap();
        for (pos, index) in [(0u64, 20u32), (1, 21), (2, 22)] {
            ring.cells()[pos as usize].store(full_cell_for(pos, 8, index), Ordering::Release);
        }
        let (head, tail) = v.positions();
        assert_eq!(v.held(head, tail).map(|(_, i)| i).collect::<Vec<_>>(), [20, 21, 22]);
        v.push_run(&[23, 24]).unwrap();
        assert_eq!(v.positions(), (0, 5));
        let popped: Vec<u32> = std::iter::from_fn(|| v.pop().unwrap()).collect();
        assert_eq!(popped, [20, 21, 22, 23, 24]);
    }

    /// Stress on a ring of 8 (many laps, full inside most runs): two threads pushing runs
    /// of 1 to 13, one pushing singly, two popping, and a watcher reading `span` between.
    /// Every index a push said went in comes out exactly once, none that it said did not,
    /// each pusher's in its order, and `head <= tail <= head + capacity` in every sample.
    #[test]
    fn runs_singles_and_pops_on_a_small_ring_index_each_job_once() {
        use std::collections::HashSet;
        use std::sync::atomic::AtomicBool;
        const PER: u32 = 10_000;
        let ring = HeapOverflow::new(8);
        let v = ring.view().unwrap();
        let done = AtomicBool::new(false);
        let (pushed, popped) = std::thread::scope(|s| {
            let pushers: Vec<_> = (0..3u32)
                .map(|t| {
                    s.spawn(move || {
                        let mut ok = Vec::new();
                        let mut next = 0u32;
                        while next < PER {
                            let len = if t == 2 { 1 } else { 1 + (next % 13) };
                            let run: Vec<u32> = (next..(next + len).min(PER)).map(|k| t << 24 | k).collect();
                            let n = match v.push_run(&run) {
                                Ok(()) => run.len(),
                                Err((n, RingError::Full)) => n,
                                Err(e) => panic!("{e:?}"),
                            };
                            ok.extend_from_slice(&run[..n]);
                            // What did not go in is pushed again later: order within a
                            // pusher stays the order of `ok`.
                            next = run.get(n).map_or(next + len, |i| i & 0xFF_FFFF);
                            if n == 0 {
                                std::thread::yield_now();
                            }
                        }
                        ok
                    })
                })
                .collect();
            let poppers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let mut got = Vec::new();
                        loop {
                            let finished = done.load(Ordering::Acquire);
                            match v.pop().unwrap() {
                                Some(i) => got.push(i),
                                None if finished => break got,
                                None => std::thread::yield_now(),
                            }
                        }
                    })
                })
                .collect();
            let watcher = s.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    let (head, tail, head_after) = v.span();
                    assert!(head <= tail, "head {head} passed tail {tail}");
                    assert!(tail <= head_after + 8, "tail {tail} more than a ring past head {head_after}");
                }
            });
            let pushed: Vec<Vec<u32>> = pushers.into_iter().map(|h| h.join().unwrap()).collect();
            done.store(true, Ordering::Release);
            let popped: Vec<Vec<u32>> = poppers.into_iter().map(|h| h.join().unwrap()).collect();
            watcher.join().unwrap();
            (pushed, popped)
        });
        assert_eq!(v.pop().unwrap(), None);
        let (head, tail) = v.positions();
        assert_eq!(head, tail, "drained");
        let all: Vec<u32> = popped.iter().flatten().copied().collect();
        let unique: HashSet<u32> = all.iter().copied().collect();
        assert_eq!(unique.len(), all.len(), "an index came out twice");
        let want: HashSet<u32> = pushed.iter().flatten().copied().collect();
        assert_eq!(unique, want, "what came out is what went in");
        for got in &popped {
            for t in 0..3u32 {
                let mine: Vec<u32> = got.iter().copied().filter(|i| i >> 24 == t).collect();
                assert!(mine.windows(2).all(|w| w[0] < w[1]), "pusher {t}'s jobs out of order");
            }
        }
    }

    /// Garbage in `tail` written in the middle of a run (moved back, moved far on, at the
    /// top of the word): the run's move of `tail` ends, nothing panics, and the ring says
    /// corrupt or keeps working.
    #[test]
    fn garbage_tail_or_head_mid_run_ends_every_call() {
        for garbage in [0u64, 1, 3, 1 << 40, u64::MAX - 2, u64::MAX] {
            for word in 0..2 {
                let ring = HeapOverflow::new(8);
                let v = ring.view().unwrap();
                v.push_run(&[1, 2, 3]).unwrap();
                assert_eq!(v.pop().unwrap(), Some(1));
                // As an attached process could, between a run's cells and its move of tail.
                let target = if word == 0 { &ring.tail } else { &ring.head };
                target.store(garbage, Ordering::Release);
                let _ = v.push_run(&[4, 5, 6, 7, 8, 9, 10, 11, 12, 13]);
                for _ in 0..20 {
                    let _ = v.pop();
                    let _ = v.push(14);
                }
                let (head, tail) = v.positions();
                let _ = v.held(head, tail).count();
                let _ = v.len();
            }
        }
    }
}
