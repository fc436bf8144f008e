//! A queue's concurrency limit (layout version 8): at most `max_running` of its jobs claimed
//! at once, counted across every process in the `running` word of its control line.
//!
//! Rules kept:
//! - only the daemon writes `max_running` (0 at every create, `SetQueueLimits` after);
//! - a consumer of a limited queue takes a slot (one CAS on `running`, never past the limit)
//!   before it takes a handle off an index, and gives it back when the take found nothing;
//!   the holder gives it back once its ack or give-back CAS succeeded, and the daemon once
//!   its give-back of a revoked claim (lease expiry, a dead holder) is done, which is after
//!   the fence reported the holder's command stopped: a revoked claim still counts while its
//!   fence is under way, so K means K commands running, never K + 1;
//! - exactly one of the holder and the daemon settles a claim (the record's CAS decides), so
//!   exactly one gives its slot back;
//! - a process that dies between the slot CAS and the claim CAS (or between the settle CAS
//!   and the slot CAS) leaves the count one too high: the daemon's walk counts the queue's
//!   claimed records and lowers the word to that only when two walks in a row agree and
//!   the word did not move from the start of the first to the end of the second; it raises
//!   a count lower than the claims it saw at once (that is always safe);
//! - a free slot given back wakes one sleeper (`wait::notify`); a push to a queue at its limit
//!   wakes nobody;
//! - every value read back is only compared: garbage can stop its own queue's consumers or let
//!   more of them run, nothing else.

use std::sync::atomic::{AtomicU32, AtomicU64};

use super::*;

/// What the daemon's walk proposes for a queue's running count: the word as it was before the
/// walk and the claims the walk counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunningWalk {
    /// The `running` word read before the walk.
    pub before: u64,
    /// Records of the queue `Claimed` or `Writing` that the walk saw.
    pub claimed: u32,
}

impl Segment {
    /// Queue-table entry `index`'s `max_running` and `running` words, `None` out of range.
    pub fn running_words(&self, index: u32) -> Option<(&AtomicU32, &AtomicU64)> {
        let base = self.queue_entry_offset(index)? + core::mem::offset_of!(QueueEntry, control) as u64;
        // SAFETY: index < queues, so the control line lies inside the queue table, which
        // validation placed in the mapping; offsets 8 and 16 of a 128-aligned line are
        // aligned for their words, and the line holds atomics only.
        unsafe {
            Some((
                self.at(base + core::mem::offset_of!(QueueControl, max_running) as u64),
                self.at(base + core::mem::offset_of!(QueueControl, running) as u64),
            ))
        }
    }

    /// Entry `index`'s concurrency limit (0: none, and out of range).
    pub fn max_running(&self, index: u32) -> u32 {
        self.running_words(index).map_or(0, |(m, _)| m.load(Ordering::Relaxed))
    }

    /// Entry `index`'s running count (0 out of range).
    pub fn running(&self, index: u32) -> u32 {
        self.running_words(index).map_or(0, |(_, r)| Running::count(r.load(Ordering::Relaxed)))
    }

    /// Sets entry `index`'s concurrency limit to `max` (0: none). From no limit to one, the
    /// count starts from the claims a walk finds (consumers kept none meanwhile); a higher
    /// limit wakes sleepers, who may now take more.
    pub fn set_max_running(&self, index: u32, max: u32) {
        let Some((m, r)) = self.running_words(index) else { return };
        let had = m.load(Ordering::Relaxed);
        if had == 0 && max != 0 {
            let claimed = self.count_queue_records().get(index as usize).map_or(0, |c| c.claimed);
            let w = r.load(Ordering::Relaxed);
            r.store(Running::next(w, claimed), Ordering::Relaxed);
        }
        m.store(max, Ordering::SeqCst);
        if max == 0 || max > had {
            if let Some(wk) = self.waker(index) {
                crate::wait::wake_all(wk);
            }
        }
    }

    /// A claim of entry `index` was given back by the daemon (after its fence): its slot
    /// goes back if the queue has a limit, and wakes one sleeper.
    pub fn running_given_back(&self, index: u32) {
        let (Some((m, r)), Some(w)) = (self.running_words(index), self.waker(index)) else { return };
        if m.load(Ordering::Relaxed) != 0 {
            Running::give(r);
            crate::wait::notify(w);
        }
    }

    /// Clears entry `index`'s limit and count; the caller holds the entry in `QUEUE_CREATING`.
    pub(super) fn reset_running(&self, index: u32) {
        if let Some((m, r)) = self.running_words(index) {
            m.store(0, Ordering::Relaxed);
            r.store(0, Ordering::Relaxed);
        }
    }

    /// Puts entry `index`'s running count right from two walks in a row (`earlier`, then
    /// `now`): raised at once to a count of claims higher than the word's; lowered only when
    /// both walks saw the same count and the word did not move from before the first to
    /// after the second (a consumer that took its slot before the first walk and claims
    /// during it would otherwise be missed, and one more job could start). Whether it
    /// changed the count.
    pub fn correct_running(&self, index: u32, earlier: Option<RunningWalk>, now: RunningWalk) -> bool {
        let Some((m, r)) = self.running_words(index) else { return false };
        if m.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let have = Running::count(now.before);
        let lower = earlier.is_some_and(|e| e.before == now.before && e.claimed == now.claimed)
            && now.claimed < have
            && r.load(Ordering::Relaxed) == now.before;
        if now.claimed <= have && !lower {
            return false;
        }
        r.compare_exchange(
            now.before,
            Running::next(now.before, now.claimed),
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_stops_at_the_limit_and_never_goes_below_zero() {
        let w = AtomicU64::new(0);
        assert!(Running::take(&w, 2) && Running::take(&w, 2));
        assert!(!Running::take(&w, 2));
        Running::give(&w);
        assert!(Running::take(&w, 2));
        for _ in 0..4 {
            Running::give(&w);
        }
        assert_eq!(Running::count(w.load(Ordering::Relaxed)), 0);
        assert_eq!(w.load(Ordering::Relaxed) >> 32, 8, "every change moved the sequence");
    }
}
