//! Strays: `Queued` records that no deque slot or overflow cell names, so that no consumer
//! will ever find them. A give-back whose overflow ring was full leaves one (the record is
//! re-queued first, then indexed, and the ring had no room), as does a process stopped or
//! killed between the two steps.
//!
//! A record can be unindexed for a few instructions legitimately (a push or a nack between
//! its state CAS and its index write), so a stray is one seen unindexed, with the same state
//! word, by two walks at least one sweep interval apart. The daemon runs a [`StraySweep`]
//! every scan interval and indexes each stray on its queue's overflow ring (retrying while
//! the ring is full); `check` reports one still there after an interval as an inconsistency.
//! Indexing a job twice is harmless: the claim CAS on its generation picks one winner.

use std::collections::HashMap;

use crate::record::state::{JobHandle, State, StateWord};
use crate::segment::Segment;

/// Every `Queued` record that no deque or ring references now, with its state word.
pub fn unindexed_queued(seg: &Segment) -> Vec<(u32, StateWord)> {
    let seen = Referenced::now(seg);
    let records = seg.records();
    (0..records.len())
        .filter_map(|i| {
            let w = records.state(i)?.load();
            seen.unindexed(i, w).then_some((i, w))
        })
        .collect()
}

/// The records some deque slot or overflow cell names, as read now: what a walk of the
/// records (read after it) tests each record against.
#[derive(Debug)]
pub struct Referenced(Vec<bool>);

impl Referenced {
    /// Reads every active queue's deques and overflow ring.
    pub fn now(seg: &Segment) -> Self {
        Referenced(crate::recovery::referenced(seg))
    }

    /// Whether record `i`, read as `w` after this was made, is `Queued` and unindexed.
    pub fn unindexed(&self, i: u32, w: StateWord) -> bool {
        w.state() == Some(State::Queued) && !self.0.get(i as usize).copied().unwrap_or(true)
    }
}

/// Of two walks' results, the records unindexed with the same word in both.
pub fn persistent(before: &[(u32, StateWord)], now: &[(u32, StateWord)]) -> Vec<(u32, StateWord)> {
    let before: HashMap<u32, StateWord> = before.iter().copied().collect();
    now.iter().copied().filter(|(i, w)| before.get(i) == Some(w)).collect()
}

/// What one sweep did.
#[derive(Debug, Default)]
pub struct SweepOutcome {
    /// Strays indexed on their queue's overflow ring.
    pub indexed: Vec<JobHandle>,
    /// Strays whose ring is still full (retried next sweep).
    pub waiting: usize,
}

/// The daemon's memory between sweeps: the unindexed records the last walk saw.
#[derive(Debug, Default)]
pub struct StraySweep {
    last: Vec<(u32, StateWord)>,
}

impl StraySweep {
    /// One sweep: indexes every record that was unindexed at the last sweep and still is,
    /// with the same word. Run it with nothing else recovering the segment (the daemon's
    /// registry lock).
    pub fn sweep(&mut self, seg: &Segment) -> SweepOutcome {
        let now = unindexed_queued(seg);
        self.index_persistent(seg, now)
    }

    /// A sweep that looks only at the records the last one saw unindexed (no walk of the
    /// records): for a scan between walks, when nothing moved that could make new strays.
    pub fn recheck(&mut self, seg: &Segment) -> SweepOutcome {
        if self.last.is_empty() {
            return SweepOutcome::default();
        }
        let seen = Referenced::now(seg);
        let records = seg.records();
        let now = self
            .last
            .iter()
            .filter_map(|&(i, _)| {
                let w = records.state(i)?.load();
                seen.unindexed(i, w).then_some((i, w))
            })
            .collect();
        self.index_persistent(seg, now)
    }

    /// A sweep over what a walk of the records found unindexed (tested against a
    /// [`Referenced`] made before the walk): the daemon's walk does the strays' share of its
    /// one pass this way.
    pub fn sweep_found(&mut self, seg: &Segment, now: Vec<(u32, StateWord)>) -> SweepOutcome {
        self.index_persistent(seg, now)
    }

    /// Records the last sweep saw unindexed (the next one indexes those still so).
    pub fn candidates(&self) -> usize {
        self.last.len()
    }

    /// Indexes what `now` (this sweep's unindexed records) and the last sweep share.
    fn index_persistent(&mut self, seg: &Segment, now: Vec<(u32, StateWord)>) -> SweepOutcome {
        let mut out = SweepOutcome::default();
        for (i, w) in persistent(&self.last, &now) {
            let Some(hdr) = seg.records().header(i) else { continue };
            let queue = hdr.queue.load(crate::sync::Ordering::Relaxed);
            // Re-read: a consumer may have claimed it (a stale index of it found) meanwhile.
            if seg.records().state(i).map(|s| s.load()) != Some(w) {
                continue;
            }
            match crate::recovery::index_on_overflow(seg, queue, i) {
                Ok(()) => out.indexed.push(JobHandle { index: i, generation: w.generation() }),
                // Still full: it stays in the baseline below, so it is retried next sweep.
                Err(_) => out.waiting += 1,
            }
        }
        // What this walk saw unindexed, except what was just indexed: next sweep's baseline.
        self.last = now.into_iter().filter(|(i, _)| !out.indexed.iter().any(|h| h.index == *i)).collect();
        out
    }
}

/// The strays of `seg` that stay unindexed, with the same word, across `window`: those a
/// live daemon's sweep (every scan interval) should have indexed by then. For `check`.
pub fn lasting_strays(seg: &Segment, window: std::time::Duration) -> Vec<String> {
    let before = unindexed_queued(seg);
    if before.is_empty() {
        return Vec::new();
    }
    std::thread::sleep(window);
    persistent(&before, &unindexed_queued(seg))
        .into_iter()
        .map(|(i, w)| {
            format!(
                "record {i}: Queued (generation {}) but no deque or overflow ring has referenced it \
                 for {window:?}: no consumer will find it",
                w.generation()
            )
        })
        .collect()
}
