//! A thief's take on a queue of several priority levels (`crate::levels`): the levels most
//! urgent first by their hint bits, a level found empty cleared and looked at again, the
//! levels whose bit is clear looked at before the queue is called empty, and aging.

use std::sync::Arc;

use super::Thief;
use crate::api::ClaimedJob;
use crate::levels::{aged, clear, mark, Order};
use crate::overflow::{OverflowRef, RingError};
use crate::segment::{QueueError, QueueInfo, Segment};
use crate::sync::{AtomicU32, Ordering};

/// What a thief needs of a queue's levels.
pub(super) struct Levels {
    /// Each level's overflow ring, most urgent first.
    pub(super) rings: Vec<OverflowRef<'static>>,
    /// The queue's hint word.
    pub(super) hints: &'static AtomicU32,
    /// Deques per level.
    pub(super) deques: u32,
    /// Every `aging`-th take starts at the least urgent level (0: never).
    pub(super) aging: u32,
}

/// How many times a level whose bit was cleared is looked at again because pushes keep
/// coming in between: past it the take moves on to the next level, which is no worse than a
/// consumer that arrived a moment earlier.
const MAX_RELOOKS: u32 = 4;

impl Thief {
    /// The level views of a queue of several levels.
    pub(super) fn levels(s: &'static Segment, queue: &QueueInfo) -> Result<Option<Arc<Levels>>, QueueError> {
        let n = queue.spec.levels;
        if n <= 1 {
            return Ok(None);
        }
        let corrupt = |what: &str| QueueError::Corrupt { index: queue.index, what: what.to_string() };
        let rings = (0..n)
            .map(|l| s.level_ring(queue.index, n, l).ok_or_else(|| corrupt("no overflow ring for a level")))
            .collect::<Result<Vec<_>, _>>()?;
        let hints = s.hints(queue.index).ok_or_else(|| corrupt("no hint word"))?;
        Ok(Some(Arc::new(Levels { rings, hints, deques: queue.spec.deques, aging: queue.spec.aging })))
    }

    /// Up to `limit` jobs of level `level` into `jobs`: from its ring while it has any, else
    /// what one of its deques holds.
    pub(super) fn steal_batch_level<'s>(
        &'s self,
        lv: &Levels,
        level: u32,
        limit: usize,
        jobs: &mut Vec<ClaimedJob<'s>>,
    ) -> Result<Option<usize>, RingError> {
        let Some(ring) = lv.rings.get(level as usize) else { return Ok(None) };
        let mut got = 0;
        let ring_error = loop {
            if got >= limit {
                return Ok(Some(got));
            }
            match self.ctx.pop_ring(ring, self.me) {
                Ok(Some(j)) => {
                    jobs.push(j);
                    got += 1;
                }
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        if got > 0 {
            return Ok(Some(got));
        }
        let first = level * lv.deques;
        self.walk_deques_in(first, lv.deques, ring_error, |d, skipped| {
            self.steal_batch_counted(d, limit, jobs, skipped)
        })
    }

    /// One job of level `level`: from its ring, else from its deques. Always inlined (see
    /// `steal`).
    #[inline(always)]
    pub(super) fn steal_level(&self, lv: &Levels, level: u32) -> Result<Option<ClaimedJob<'_>>, RingError> {
        let Some(ring) = lv.rings.get(level as usize) else { return Ok(None) };
        let ring_error = match self.ctx.pop_ring(ring, self.me) {
            Ok(Some(j)) => return Ok(Some(j)),
            Ok(None) => None,
            Err(e) => Some(e),
        };
        let first = level * lv.deques;
        self.walk_deques_in(first, lv.deques, ring_error, |d, skipped| self.steal_counted(d, skipped))
    }

    /// Whether level `level`'s ring and deques look empty now.
    pub(super) fn level_empty(&self, lv: &Levels, level: u32) -> bool {
        let first = (level * lv.deques) as usize;
        let deques = self.deques.get(first..first + lv.deques as usize).unwrap_or(&[]);
        lv.rings.get(level as usize).is_none_or(|r| r.is_empty()) && deques.iter().all(|d| d.is_empty())
    }

    /// The take of a queue of several levels: `take` at each level whose hint is set, most
    /// urgent first (least urgent first on an aged take, `levels::aged`), clearing the bit
    /// of a level found empty; then, when those gave nothing, at each other level that
    /// holds jobs (a hint word another process wrote must not hide them). A level whose
    /// ring is corrupt does not hide the others: its error is reported only when no level
    /// gave a job. Always inlined (see `steal`).
    #[inline(always)]
    pub(super) fn by_level<T>(
        &self,
        lv: &Levels,
        mut take: impl FnMut(u32) -> Result<Option<T>, RingError>,
    ) -> Result<Option<T>, RingError> {
        let taken = self.taken.load(Ordering::Relaxed);
        let old = aged(lv.aging, taken);
        let n = lv.rings.len() as u32;
        // Relaxed: only which levels to look at first. A stale set bit costs a look; a stale
        // clear one is looked at by the second loop before the queue is called empty.
        let hints = lv.hints.load(Ordering::Relaxed);
        let mut error = None;
        let found = |x: T| {
            // A load and a store, as `rotate`: two threads of one handle may count one take.
            self.taken.store(taken.wrapping_add(1), Ordering::Relaxed);
            Ok(Some(x))
        };
        for level in Order::new(hints, n, old) {
            for _ in 0..MAX_RELOOKS {
                match take(level) {
                    Ok(Some(x)) => return found(x),
                    Ok(None) => {}
                    Err(e) => {
                        error.get_or_insert(e);
                        break;
                    }
                }
                if clear(lv.hints, level, || self.level_empty(lv, level)) {
                    break;
                }
            }
        }
        for level in Order::new(!hints, n, old) {
            if self.level_empty(lv, level) {
                continue;
            }
            mark(lv.hints, level);
            match take(level) {
                Ok(Some(x)) => return found(x),
                Ok(None) => {}
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        error.map_or(Ok(None), Err)
    }

    /// [`steal`](Self::steal) of a queue of several levels: the job taken as its handle's
    /// word and lease deadline (`(0, 0)`: none, and `error` says why when a ring was corrupt).
    #[inline(never)]
    pub(super) fn steal_by_level(&self, lv: &Levels, error: &mut Option<RingError>) -> (u64, u64) {
        match self.ctx.gated(|| self.all_empty(), || self.by_level(lv, |l| self.steal_level(lv, l))) {
            Ok(Some(job)) => {
                let taken = (job.handle.get().to_word(), job.deadline.get());
                // Handed on, not given back: `steal` makes the job again from its words.
                std::mem::forget(job);
                taken
            }
            Ok(None) => (0, 0),
            Err(e) => {
                *error = Some(e);
                (0, 0)
            }
        }
    }
}
