//! A queue's priority levels in the segment (`crate::levels` has the protocol): the level
//! count and aging words, each level's overflow ring, the hint word, and indexing a job on
//! the ring of the level its record names.
//!
//! Every word here comes from shared memory: a level count past [`MAX_LEVELS`] reads as one
//! level, a priority past the queue's levels goes to its last level, and a level past the
//! queue's count has no ring.

use super::*;
use crate::levels::{level_of, levels_of_word, mark, priority_of_flags, RingSplit, MAX_LEVELS};
use crate::overflow::RingError;
use crate::sync::AtomicU32;

impl Segment {
    /// The level count and aging words of queue-table entry `index`.
    fn level_words(&self, index: u32) -> Option<(&AtomicU32, &AtomicU32)> {
        let base = self.queue_entry_offset(index)? + core::mem::offset_of!(QueueEntry, control) as u64;
        // SAFETY: index < queues, so the control line lies inside the queue table, which
        // validation placed in the mapping; offsets 48 and 52 of a 128-aligned line are
        // 4-aligned, and the line holds atomics only.
        unsafe {
            Some((
                self.at(base + core::mem::offset_of!(QueueControl, levels) as u64),
                self.at(base + core::mem::offset_of!(QueueControl, aging) as u64),
            ))
        }
    }

    /// Writes the levels of a queue being created in entry `index` (held in `CREATING`) and
    /// clears its hints; published by the Release store of `ACTIVE`.
    pub(super) fn reset_levels(&self, index: u32, levels: u32, aging: u32) {
        if let Some((l, a)) = self.level_words(index) {
            l.store(levels, Ordering::Relaxed);
            a.store(aging, Ordering::Relaxed);
        }
        if let Some(h) = self.hints(index) {
            h.store(0, Ordering::Relaxed);
        }
    }

    /// `(levels, aging)` of entry `index` as its words hold them, `None` for a garbage count.
    pub(super) fn read_levels(&self, index: u32) -> Option<(u32, u32)> {
        let (l, a) = self.level_words(index)?;
        Some((levels_of_word(l.load(Ordering::Relaxed))?, a.load(Ordering::Relaxed)))
    }

    /// The levels entry `index`'s ring is cut into now, `None` for a garbage count: nothing is
    /// indexed in a ring cut otherwise than its pushes cut it (its positions would land in
    /// another level's cells), and nothing is read from one.
    pub(crate) fn ring_levels(&self, index: u32) -> Option<u32> {
        self.read_levels(index).map(|(l, _)| l)
    }

    /// The hint word of queue-table entry `queue` (`crate::levels`).
    pub fn hints(&self, queue: u32) -> Option<&AtomicU32> {
        self.wait_word(queue).map(|w| &w.hints)
    }

    /// The overflow ring of level `level` of entry `queue` cut into `levels` levels. `None`
    /// past the levels, or for a cut the ring cannot hold.
    pub fn level_ring(&self, queue: u32, levels: u32, level: u32) -> Option<OverflowRef<'_>> {
        let (h, cells) = self.overflow_words(queue)?;
        if levels <= 1 {
            return if level == 0 { OverflowRef::new(&h.head, &h.tail, cells).ok() } else { None };
        }
        if level >= levels || levels > MAX_LEVELS {
            return None;
        }
        let split = RingSplit::of(cells.len(), levels)?;
        let start = level as usize * split.chunk;
        let ring = cells.get(start..start + split.capacity)?;
        if level == 0 {
            return OverflowRef::new(&h.head, &h.tail, ring).ok();
        }
        let (head, tail) = split.header_cells(level);
        OverflowRef::new(cells.get(head)?, cells.get(tail)?, ring).ok()
    }

    /// The overflow ring of entry `queue`: the whole ring of a queue of one level, the ring
    /// of level 0 of a queue of several; `None` while its level count is garbage.
    pub fn overflow(&self, queue: u32) -> Option<OverflowRef<'_>> {
        self.level_ring(queue, self.ring_levels(queue)?, 0)
    }

    /// Every level's overflow ring of entry `queue`, most urgent first (none while its level
    /// count is garbage).
    pub fn overflow_rings(&self, queue: u32) -> Vec<OverflowRef<'_>> {
        let Some(levels) = self.ring_levels(queue) else { return Vec::new() };
        (0..levels).filter_map(|l| self.level_ring(queue, levels, l)).collect()
    }

    /// Jobs visible in each level of queue `q` (its deques and ring), most urgent first.
    pub fn level_depths(&self, q: &QueueInfo) -> Vec<u64> {
        (0..q.spec.levels)
            .map(|level| {
                let deques: u64 = (0..q.spec.deques)
                    .filter_map(|d| self.deque(q, level * q.spec.deques + d).ok())
                    .map(|dq| dq.len() as u64)
                    .sum();
                let ring = self.level_ring(q.index, q.spec.levels, level).map_or(0, |r| r.len() as u64);
                deques + ring
            })
            .collect()
    }

    /// Indexes `Queued` record `index` on the ring of the level its priority names in its
    /// queue `queue`, and marks the level's hint: where every give-back, due delayed job and
    /// recovered job goes.
    pub fn index_at_level(&self, queue: u32, index: u32) -> Result<(), RingError> {
        let levels = self
            .ring_levels(queue)
            .ok_or_else(|| RingError::Corrupt(format!("queue {queue}: its level count is garbage")))?;
        let priority =
            self.records().header(index).map_or(0, |h| priority_of_flags(h.flags.load(Ordering::Relaxed)));
        let level = level_of(priority, levels);
        let ring = self
            .level_ring(queue, levels, level)
            .ok_or_else(|| RingError::Corrupt(format!("no overflow ring {queue} level {level}")))?;
        ring.push(index)?;
        if levels > 1 {
            if let Some(h) = self.hints(queue) {
                mark(h, level);
            }
        }
        Ok(())
    }
}
