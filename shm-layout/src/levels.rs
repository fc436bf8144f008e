//! Priority levels: a queue of `levels` levels (1 to [`MAX_LEVELS`]) keeps a set of deques and
//! an overflow ring per level, and a consumer takes from the most urgent non-empty level
//! first (0 the most urgent). A queue of one level has no hint word in use and takes exactly
//! the path of a queue without levels.
//!
//! **Where a level lives.** Deque `d` of level `l` is the queue's deque `l * deques + d` (the
//! daemon leases deques `0..deques`; an owner of deque `d` owns it at every level). The
//! queue's overflow ring is cut into levels ([`RingSplit`]): level `l` takes cells
//! `[l * chunk, l * chunk + capacity)`; level 0 keeps the ring's own header, and each other
//! level keeps its `head` and `tail` in the unused half of its chunk, a line each.
//!
//! **Hints.** The wait line's `hints` word has a bit per level that may hold jobs. A consumer
//! looks only at levels whose bit is set, most urgent first, so a queue whose pushes all use
//! one level looks at one level's deques per steal. The word is a hint, never the truth:
//!
//! - a push indexes its job first, then `fence(SeqCst)`, then sets its level's bit if it was
//!   clear ([`mark`]);
//! - a consumer that finds a level empty clears its bit, then `fence(SeqCst)`, then looks at
//!   the level once more and sets the bit again if it is not empty ([`clear`]).
//!
//! The two fences pair (a Dekker pair, as the wait protocol's): if the consumer's second look
//! misses the push, its fence came first, so the push's load of `hints` sees the bit cleared
//! and sets it; a bit is never left clear over a job pushed before a consumer's look. A set
//! bit over an empty level costs one spurious look. A garbage word (another process wrote it)
//! cannot hide a job for long either: a take that finds nothing under its set bits looks at
//! every level before it reports the queue empty, and sets the bits of those it finds jobs in.
//!
//! **Aging.** With `aging` N > 0, every N-th job a consumer handle takes comes from the least
//! urgent non-empty level: the handle counts its takes itself, so no shared word is written.

use crate::sync::{fence, AtomicU32, Ordering};

/// The most priority levels a queue can have (a priority fits the record's three bits).
pub const MAX_LEVELS: u32 = 8;

/// The fewest overflow cells a level of a queue with several levels gets: the level's
/// `head` and `tail` lines take 32 cells of the chunk's other half.
pub const MIN_LEVEL_RING: u32 = 32;

/// Where the priority sits in a record header's `flags` (above the last error's length).
pub const PRIORITY_SHIFT: u32 = 5;
/// The priority's bits in `flags`, once shifted down.
pub const PRIORITY_MASK: u32 = MAX_LEVELS - 1;

/// The `flags` bits of priority `priority` (kept to its three bits).
#[inline]
pub fn priority_flags(priority: u32) -> u32 {
    (priority & PRIORITY_MASK) << PRIORITY_SHIFT
}

/// The priority a record's `flags` word holds.
#[inline]
pub fn priority_of_flags(flags: u32) -> u32 {
    (flags >> PRIORITY_SHIFT) & PRIORITY_MASK
}

/// The level a job of `priority` goes to in a queue of `levels` levels: a priority past the
/// last level (only a garbage word holds one: pushes refuse them) goes to the last.
#[inline]
pub fn level_of(priority: u32, levels: u32) -> u32 {
    priority.min(levels.max(1) - 1)
}

/// A level count as read from a shared word: 0 (a segment made before levels) is 1, and a
/// garbage count past [`MAX_LEVELS`] is `None`.
#[inline]
pub fn levels_of_word(word: u32) -> Option<u32> {
    match word {
        0 => Some(1),
        n if n <= MAX_LEVELS => Some(n),
        _ => None,
    }
}

/// How a queue's overflow ring of `cells` cells is cut into `levels` rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingSplit {
    /// Cells from one level's start to the next.
    pub chunk: usize,
    /// Cells each level's ring uses (a power of two).
    pub capacity: usize,
}

impl RingSplit {
    /// The split of a ring of `cells` cells (a power of two) into `levels` levels, `None`
    /// when a level would get fewer than [`MIN_LEVEL_RING`] cells. One level: the whole ring.
    pub fn of(cells: usize, levels: u32) -> Option<RingSplit> {
        if levels <= 1 {
            return Some(RingSplit { chunk: cells, capacity: cells });
        }
        let chunk = cells >> (levels.next_power_of_two().trailing_zeros());
        let capacity = chunk / 2;
        (capacity >= MIN_LEVEL_RING as usize).then_some(RingSplit { chunk, capacity })
    }

    /// Cell offsets of level `level`'s `head` and `tail` in the whole ring (levels past 0).
    pub fn header_cells(&self, level: u32) -> (usize, usize) {
        let base = level as usize * self.chunk + self.capacity;
        (base, base + 16)
    }
}

/// After a push indexed a job at `level`: sets the level's bit unless it is set.
#[inline]
pub fn mark(hints: &AtomicU32, level: u32) {
    let bit = 1u32 << (level % MAX_LEVELS);
    // SeqCst fence: pairs with the one in `clear`. Before it, the job's index store (the
    // deque's `bottom`, the ring's cell CAS); after it, the load of `hints`. Without it the
    // load may be served before the index store is visible (store buffering): the push reads
    // the bit still set while a consumer, clearing it, reads the level still empty.
    fence(Ordering::SeqCst);
    // Relaxed: the word orders nothing else. A consumer that reads the bit set finds the job
    // through the index's own Acquire loads; one that reads it clear and misses the job is
    // the case the fences exclude.
    if hints.load(Ordering::Relaxed) & bit == 0 {
        hints.fetch_or(bit, Ordering::Relaxed);
    }
}

/// A consumer found `level` empty: clears its bit, then looks again (`empty`) after the
/// fence that pairs with [`mark`]'s, and sets the bit back when a push came in between.
/// Returns whether the level is still empty.
#[inline]
pub fn clear(hints: &AtomicU32, level: u32, empty: impl FnOnce() -> bool) -> bool {
    let bit = 1u32 << (level % MAX_LEVELS);
    hints.fetch_and(!bit, Ordering::Relaxed);
    // SeqCst fence: pairs with the one in `mark`. Before it, the clear; after it, the second
    // look at the level's indices. Of the two fences one comes first in their single total
    // order: if ours does, the push's load of `hints` sees the clear and sets the bit; if
    // theirs does, our look sees the job's index. `.ci/loom` compiles it out once to see the
    // model (`tests/loom_levels.rs`) find the hidden job.
    #[cfg(not(xtcq_loom_drop_hint_fence))]
    fence(Ordering::SeqCst);
    if empty() {
        return true;
    }
    hints.fetch_or(bit, Ordering::Relaxed);
    false
}

/// The levels a take looks at, in order: those whose bit is set in `hints` (bits past
/// `levels` ignored), most urgent first, or least urgent first when `aged`.
#[derive(Clone, Copy, Debug)]
pub struct Order {
    mask: u32,
    aged: bool,
}

impl Order {
    /// The order for hint word `hints` of a queue of `levels` levels.
    #[inline]
    pub fn new(hints: u32, levels: u32, aged: bool) -> Order {
        let all = if levels >= 32 { u32::MAX } else { (1u32 << levels) - 1 };
        Order { mask: hints & all, aged }
    }
}

impl Iterator for Order {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        if self.mask == 0 {
            return None;
        }
        let level = if self.aged { 31 - self.mask.leading_zeros() } else { self.mask.trailing_zeros() };
        self.mask &= !(1 << level);
        Some(level)
    }
}

/// Whether a handle that has taken `taken` jobs takes its next one least urgent first.
#[inline]
pub fn aged(aging: u32, taken: u32) -> bool {
    aging != 0 && taken % aging == aging - 1
}

#[cfg(all(test, not(xtcq_loom)))]
mod tests {
    use super::*;

    #[test]
    fn order_takes_set_levels_most_urgent_first_and_aged_least_urgent_first() {
        assert_eq!(Order::new(0b1011, 4, false).collect::<Vec<_>>(), [0, 1, 3]);
        assert_eq!(Order::new(0b1011, 4, true).collect::<Vec<_>>(), [3, 1, 0]);
        assert_eq!(Order::new(0, 4, false).count(), 0);
    }

    #[test]
    fn garbage_hint_bits_past_the_levels_are_ignored() {
        assert_eq!(Order::new(u32::MAX, 2, false).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(Order::new(0xFFFF_FFF0, 4, true).count(), 0);
        assert_eq!(Order::new(u32::MAX, 1, true).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn a_garbage_priority_or_level_count_stays_in_range() {
        assert_eq!(level_of(7, 4), 3);
        assert_eq!(level_of(u32::MAX, 1), 0);
        assert_eq!(level_of(2, 0), 0);
        assert_eq!(levels_of_word(0), Some(1));
        assert_eq!(levels_of_word(9), None);
        assert_eq!(priority_of_flags(u32::MAX), 7);
        assert_eq!(priority_of_flags(priority_flags(5) | 24 | 0xABC << 8), 5);
    }

    #[test]
    fn ring_split_keeps_each_level_inside_its_chunk() {
        assert_eq!(RingSplit::of(1024, 1), Some(RingSplit { chunk: 1024, capacity: 1024 }));
        let s = RingSplit::of(1024, 3).unwrap();
        assert_eq!((s.chunk, s.capacity), (256, 128));
        for level in 1..3 {
            let (head, tail) = s.header_cells(level);
            assert!(head >= level as usize * s.chunk + s.capacity && tail < (level as usize + 1) * s.chunk);
        }
        assert_eq!(RingSplit::of(128, 4), None);
    }

    #[test]
    fn aging_picks_every_nth_take() {
        let picks: Vec<u32> = (0..9).filter(|&t| aged(3, t)).collect();
        assert_eq!(picks, [2, 5, 8]);
        assert!((0..100).all(|t| !aged(0, t)));
    }

    #[test]
    fn a_clear_that_races_a_push_sets_the_bit_back() {
        let hints = AtomicU32::new(0b10);
        assert!(!clear(&hints, 1, || false));
        assert_eq!(hints.load(Ordering::Relaxed), 0b10);
        assert!(clear(&hints, 1, || true));
        assert_eq!(hints.load(Ordering::Relaxed), 0);
        mark(&hints, 2);
        assert_eq!(hints.load(Ordering::Relaxed), 0b100);
    }
}
