//! A queue's rate limit (layout version 9): at most `burst` claims at once, then one every
//! `interval_ns`, across every process, in one word of the queue's control line.
//!
//! The bucket is a generic cell rate algorithm: `theoretical` is the CLOCK_MONOTONIC time at
//! which the bucket would be empty again; a claim at `now` may start when
//! `max(theoretical, now) + interval <= now + burst * interval`, and moves `theoretical` on by
//! `interval`. So in any span of `w` ns at most `burst + w / interval` claims start.
//!
//! Rules kept:
//! - only the daemon writes `interval_ns` and `burst`, and sets [`FLOW_RATED`] after them (and
//!   clears it before it clears them), so a consumer that saw the bit reads a whole limit;
//! - a consumer takes its tokens before its slot of a concurrency limit and before it takes a
//!   handle off an index; tokens it did not use (the take found nothing, or no slot was free)
//!   go back whole to a bucket nobody moved since; to a moved one, less the time since the
//!   take (a take after ours may have counted from its own clock, not from our tokens: the
//!   time elapsed is the most it can have gained from them), and nothing to a bucket of
//!   another limit. So the bound holds, and consumers that look at an empty queue together
//!   do not spend its burst;
//! - a push to a queue that is out of tokens still wakes a sleeper (a sleeper's next chance
//!   is a time, not an event): woken, it finds no token and sleeps until the next one is due
//!   (`wait::wait_for`, and the wake descriptor's timer);
//! - the clock is read only on a rated queue: an unlimited claim pays nothing for it;
//! - values read back are only compared and added with saturation: garbage can stop or
//!   release its own queue's consumers, nothing else, and never panics.

use super::Segment;
use crate::layout::{QueueControl, QueueEntry, RateWords, FLOW_RATED};
use crate::sync::Ordering;

/// A queue's rate limit as the daemon sets it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateLimit {
    /// ns between claims at the limit's pace (0: no limit).
    pub interval_ns: u64,
    /// Claims that may start at once (at least 1 when limited).
    pub burst: u32,
}

impl Segment {
    /// Queue-table entry `index`'s rate words, `None` out of range.
    pub fn rate_words(&self, index: u32) -> Option<&RateWords> {
        let off = self.queue_entry_offset(index)?
            + core::mem::offset_of!(QueueEntry, control) as u64
            + core::mem::offset_of!(QueueControl, rate) as u64;
        // SAFETY: index < queues, so the control line lies inside the queue table, which
        // validation placed in the mapping; offset 24 of a 128-aligned line is 8-aligned, and
        // the words are atomics only.
        Some(unsafe { self.at(off) })
    }

    /// Entry `index`'s rate limit (none out of range, or while the flow word says none).
    pub fn rate_limit(&self, index: u32) -> RateLimit {
        let (Some(w), Some(flow)) = (self.rate_words(index), self.flow_word(index)) else {
            return RateLimit::default();
        };
        if flow.load(Ordering::Acquire) & FLOW_RATED == 0 {
            return RateLimit::default();
        }
        RateLimit {
            interval_ns: w.interval_ns.load(Ordering::Relaxed),
            burst: w.burst.load(Ordering::Relaxed),
        }
    }

    /// Sets entry `index`'s rate limit (`interval_ns` 0: none). A new limit starts with a
    /// full bucket (the same one set again keeps its bucket); lifting one wakes every
    /// sleeper, who may now take at once.
    pub fn set_rate_limit(&self, index: u32, limit: RateLimit) {
        let (Some(w), Some(flow)) = (self.rate_words(index), self.flow_word(index)) else { return };
        if limit.interval_ns == 0 {
            // The bit first: a consumer that still sees it reads a whole limit.
            flow.fetch_and(!FLOW_RATED, Ordering::SeqCst);
            w.interval_ns.store(0, Ordering::Relaxed);
            w.burst.store(0, Ordering::Relaxed);
            if let Some(wk) = self.waker(index) {
                crate::wait::wake_all(wk);
            }
            return;
        }
        // The same limit set again (a script or config tool that sets it on every run) keeps
        // its bucket: refilled, it would let a whole burst more start, past the bound.
        if self.rate_limit(index) == (RateLimit { interval_ns: limit.interval_ns, burst: limit.burst.max(1) })
        {
            return;
        }
        w.interval_ns.store(limit.interval_ns, Ordering::Relaxed);
        w.burst.store(limit.burst.max(1), Ordering::Relaxed);
        w.theoretical.store(0, Ordering::Relaxed);
        // Release: pairs with the consumer's load of the flow word, so the words above are
        // seen with the bit. SeqCst as the pause's: a sleeper's next look reads it.
        flow.fetch_or(FLOW_RATED, Ordering::SeqCst);
        if let Some(wk) = self.waker(index) {
            crate::wait::wake_all(wk);
        }
    }

    /// Clears entry `index`'s rate words; the caller holds the entry in `QUEUE_CREATING` (the
    /// flow word, bit included, is cleared beside).
    pub(super) fn reset_rate(&self, index: u32) {
        if let Some(w) = self.rate_words(index) {
            w.interval_ns.store(0, Ordering::Relaxed);
            w.burst.store(0, Ordering::Relaxed);
            w.theoretical.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, AtomicU64};

    use super::{RateLimit, RateWords};
    use crate::limit_words::{Rate, Tokens};
    use crate::segment::{one_queue_segment, QueueSpec};
    use crate::sync::Ordering;

    fn words(interval_ns: u64, burst: u32) -> RateWords {
        RateWords {
            interval_ns: AtomicU64::new(interval_ns),
            burst: AtomicU32::new(burst),
            theoretical: AtomicU64::new(0),
        }
    }

    #[test]
    fn a_full_bucket_gives_its_burst_then_one_per_interval() {
        let w = words(1_000, 3);
        let now = 1_000_000;
        assert_eq!(Rate::take(&w, 5, now).map(|t| t.count), Ok(3));
        assert_eq!(Rate::take(&w, 1, now), Err(1_000));
        assert_eq!(Rate::wait_ns(&w, now), 1_000);
        assert_eq!(Rate::take(&w, 1, now + 999), Err(1));
        assert_eq!(Rate::take(&w, 2, now + 1_000).map(|t| t.count), Ok(1));
        assert_eq!(Rate::take(&w, 9, now + 10_000).map(|t| t.count), Ok(3), "refilled to the burst only");
    }

    #[test]
    fn starts_in_any_span_stay_within_the_bound() {
        let (interval, burst) = (250u64, 4u32);
        let w = words(interval, burst);
        let mut starts = Vec::new();
        // A clock that moves in uneven steps, with takes of varying sizes.
        let mut now = 10_000u64;
        for i in 0..5_000u64 {
            now += (i * 7919) % 300;
            if let Ok(t) = Rate::take(&w, 1 + (i % 3) as usize, now) {
                starts.extend(std::iter::repeat_n(now, t.count));
            }
        }
        for (i, &a) in starts.iter().enumerate() {
            for (j, &b) in starts.iter().enumerate().skip(i).take(64) {
                let bound = u64::from(burst) + (b - a) / interval;
                assert!((j - i + 1) as u64 <= bound, "{} starts in {} ns", j - i + 1, b - a);
            }
        }
        assert!(starts.len() as u64 >= (now - 10_000) / interval, "the pace was kept: {}", starts.len());
    }

    #[test]
    fn unused_tokens_go_back_whole_to_an_unmoved_bucket_and_less_the_time_since_to_a_moved_one() {
        let w = words(100, 2);
        let t = Rate::take(&w, 2, 1_000).unwrap();
        let t = Rate::give_back(&w, t, 1, || 1_000);
        assert_eq!(t.count, 1);
        assert_eq!(Rate::take(&w, 5, 1_000).map(|t| t.count), Ok(1), "one came back");
        let mine = Rate::take(&w, 1, 1_200).unwrap();
        let _other = Rate::take(&w, 1, 1_200).unwrap();
        Rate::give_back(&w, mine, 1, || 1_230);
        // A moved bucket took ours back less the 30 ns since the take: due at 1,230, not
        // at 1,200 (the other's token is still spent), nor at 1,300 (ours lost).
        assert_eq!(Rate::wait_ns(&w, 1_200), 30);
        assert_eq!(Rate::take(&w, 1, 1_230).map(|t| t.count), Ok(1));
        assert_eq!(Rate::take(&w, 1, 1_230), Err(100), "one came back, not two");
        // Nothing back to a bucket of another limit.
        let w = words(100, 2);
        let t = Rate::take(&w, 2, 1_000).unwrap();
        w.burst.store(3, Ordering::Relaxed);
        w.theoretical.store(0, Ordering::Relaxed);
        let _ = Rate::take(&w, 3, 1_000).unwrap();
        Rate::give_back(&w, t, 2, || 1_000);
        assert_eq!(Rate::take(&w, 1, 1_000), Err(100), "a new limit owes the old one's tokens nothing");
    }

    #[test]
    fn racing_takes_and_give_backs_keep_the_bound_and_lose_no_burst() {
        // Interleavings of takes and give-backs by several consumers, in CAS order on one
        // thread with a clock that moves unevenly: the starts (tokens not given back) stay
        // within the bound, and looks that all give back leave the burst whole.
        let (interval, burst) = (1_000u64, 4u32);
        let w = words(interval, burst);
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut now = 1_000_000u64;
        let mut held: Vec<Tokens> = Vec::new();
        let mut starts = Vec::new();
        for _ in 0..20_000 {
            now += next() % 400;
            if held.len() < 4 && next() % 2 == 0 {
                if let Ok(t) = Rate::take(&w, 1 + (next() % 3) as usize, now) {
                    held.push(t);
                }
            } else if !held.is_empty() {
                let t = held.swap_remove((next() % held.len() as u64) as usize);
                let used = (next() % (t.count as u64 + 1)) as usize;
                // A start happens at its take.
                starts.extend(std::iter::repeat_n(t.taken_at, used));
                Rate::give_back(&w, t, t.count - used, || now);
            }
        }
        starts.sort_unstable();
        for (i, &a) in starts.iter().enumerate() {
            for (j, &b) in starts.iter().enumerate().skip(i).take(64) {
                let bound = u64::from(burst) + (b - a) / interval;
                assert!((j - i + 1) as u64 <= bound, "{} starts in {} ns", j - i + 1, b - a);
            }
        }
        // Looks that use nothing, overlapping in every order, at one instant after a quiet
        // spell: the whole burst is there after them.
        let now = now + 10 * interval;
        for _ in 0..1_000 {
            let a = Rate::take(&w, 1, now).unwrap();
            let b = Rate::take(&w, 1, now).unwrap();
            let (first, second) = if next() % 2 == 0 { (a, b) } else { (b, a) };
            Rate::give_back(&w, first, 1, || now);
            Rate::give_back(&w, second, 1, || now);
        }
        assert_eq!(Rate::take(&w, 9, now).map(|t| t.count), Ok(burst as usize), "the burst, whole");
    }

    #[test]
    fn garbage_words_never_panic() {
        for (interval, burst, tat) in [(0, 0, u64::MAX), (u64::MAX, u32::MAX, 0), (1, u32::MAX, u64::MAX - 1)]
        {
            let w = words(interval, burst);
            w.theoretical.store(tat, Ordering::Relaxed);
            let _ = Rate::take(&w, usize::MAX, u64::MAX);
            let _ = Rate::take(&w, 1, 0);
            let _ = Rate::wait_ns(&w, u64::MAX);
            if let Ok(t) = Rate::take(&w, 3, 5) {
                Rate::give_back(&w, t, usize::MAX, || u64::MAX);
                Rate::give_back(&w, t, usize::MAX, || 0);
            }
        }
    }

    const HOUR_NS: u64 = 3_600_000_000_000;

    #[test]
    fn a_rated_queue_gives_its_burst_and_no_more_until_lifted() {
        let (_dir, seg, q) = one_queue_segment();
        let owner = crate::Owner::new(seg.clone(), &q, 0, 0).unwrap();
        let thief = crate::Thief::new(seg.clone(), &q, 1).unwrap();
        for i in 0..5u8 {
            owner.push(&[i]).unwrap();
        }
        seg.set_rate_limit(q.index, RateLimit { interval_ns: HOUR_NS, burst: 2 });
        assert_eq!(seg.rate_limit(q.index), RateLimit { interval_ns: HOUR_NS, burst: 2 });
        thief.steal().unwrap().expect("first of the burst").ack().unwrap();
        owner.pop().unwrap().expect("second of the burst").ack().unwrap();
        assert!(thief.steal().unwrap().is_none(), "no token for an hour");
        assert!(owner.pop().unwrap().is_none(), "the owner's pop is rated too");
        let w = seg.waker(q.index).unwrap();
        assert!(w.rate_wait_ns() > HOUR_NS / 2, "{}", w.rate_wait_ns());
        seg.set_rate_limit(q.index, RateLimit::default());
        assert_eq!(w.rate_wait_ns(), 0);
        thief.steal().unwrap().expect("unlimited again").ack().unwrap();
    }

    #[test]
    fn a_batch_steal_takes_no_more_than_the_tokens_and_an_empty_look_spends_none() {
        let (_dir, seg, q) = one_queue_segment();
        let owner = crate::Owner::new(seg.clone(), &q, 0, 0).unwrap();
        let thief = crate::Thief::new(seg.clone(), &q, 1).unwrap();
        seg.set_rate_limit(q.index, RateLimit { interval_ns: HOUR_NS, burst: 3 });
        for _ in 0..10 {
            assert!(thief.steal().unwrap().is_none(), "empty");
        }
        for i in 0..8u8 {
            owner.push(&[i]).unwrap();
        }
        let mut batch = crate::ClaimedBatch::new();
        assert_eq!(
            thief.steal_batch_claimed(8, &mut batch).unwrap(),
            3,
            "the whole burst, after empty looks"
        );
        batch.ack_all().unwrap();
        assert_eq!(thief.steal_batch_claimed(8, &mut batch).unwrap(), 0);
    }

    #[test]
    fn a_new_queue_in_a_rated_entry_starts_unlimited() {
        let (_dir, seg, q) = one_queue_segment();
        seg.set_rate_limit(q.index, RateLimit { interval_ns: HOUR_NS, burst: 1 });
        seg.delete_queue_at(q.index, true).unwrap();
        let q = seg.create_queue(&QueueSpec::new("again")).unwrap();
        assert_eq!(seg.rate_limit(q.index), RateLimit::default());
        assert_eq!(seg.waker(q.index).unwrap().rate_wait_ns(), 0);
    }
}
