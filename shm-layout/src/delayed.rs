//! Delayed jobs: records in state `Delayed`, waiting for their due time (the header's
//! `enqueued_ns`, CLOCK_MONOTONIC ns) in no index, so that no steal can see them early.
//!
//! Rules kept:
//! - a producer (`Injector::push_delayed`) or a consumer giving a job back with a delay
//!   (`ClaimedJob::fail_after`) writes the due time, then makes the record `Delayed` with one
//!   Release store (a push, leaving `Filling`) or CAS (a give-back), then tells the daemon; the daemon also finds the ones it was not told of
//!   ([`scan_delayed`]) when it adopts a segment and when it recovers a dead process;
//! - only [`release_due`] moves a `Delayed` record on (besides a forced queue delete, which
//!   frees it): `Delayed(g) -> Queued(g)`, then the record's index on its queue's overflow
//!   ring, then a wake of the queue's sleepers. A crash between the CAS and the index leaves
//!   a `Queued` record no index names, which the daemon's stray sweep indexes (`strays`);
//! - nothing read from the segment is trusted: the queue field is bounds-checked, and a
//!   record that is not `Delayed` at the expected generation is left alone.

use crate::overflow::RingError;
use crate::record::state::{JobHandle, State};
use crate::segment::Segment;
use crate::sync::Ordering;

/// A `Delayed` record and when it is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DelayedJob {
    /// Due, CLOCK_MONOTONIC ns (first, so that the derived order is by due time).
    pub due_ns: u64,
    /// The record and its generation while `Delayed`.
    pub handle: JobHandle,
}

/// The delayed job `h` names, when record `h.index` is `Delayed` at `h.generation` now.
pub fn delayed_job(seg: &Segment, h: JobHandle) -> Option<DelayedJob> {
    let records = seg.records();
    let (st, hdr) = (records.state(h.index)?, records.header(h.index)?);
    let w = st.load();
    if w.state() != Some(State::Delayed) || w.generation() != h.generation {
        return None;
    }
    // Relaxed: written before the Release CAS that made the word we just Acquired.
    Some(DelayedJob { due_ns: hdr.enqueued_ns.load(Ordering::Relaxed), handle: h })
}

/// Every `Delayed` record in the segment: one walk of the records.
pub fn scan_delayed(seg: &Segment) -> Vec<DelayedJob> {
    let records = seg.records();
    let mut out = Vec::new();
    for i in 0..records.len() {
        let (Some(st), Some(hdr)) = (records.state(i), records.header(i)) else { break };
        let w = st.load();
        if w.state() == Some(State::Delayed) {
            let handle = JobHandle { index: i, generation: w.generation() };
            out.push(DelayedJob { due_ns: hdr.enqueued_ns.load(Ordering::Relaxed), handle });
        }
    }
    out
}

/// What [`release_due`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// `Queued` and on queue `queue`'s overflow ring; its sleepers were woken.
    Queued {
        /// Queue-table index.
        queue: u32,
    },
    /// `Queued`, but the ring was full: the stray sweep indexes it once there is room.
    Unindexed {
        /// Queue-table index.
        queue: u32,
    },
    /// The record is not `Delayed` at that generation (released already, or freed by a
    /// queue delete), or names no queue (corruption, which `check` reports): left alone.
    Gone,
}

/// Puts the delayed job `h` in line: `Delayed(g) -> Queued(g)`, index, wake. Safe to call
/// for a handle that is stale or released already (it does nothing then).
pub fn release_due(seg: &Segment, h: JobHandle) -> Released {
    let records = seg.records();
    let (Some(st), Some(hdr)) = (records.state(h.index), records.header(h.index)) else {
        return Released::Gone;
    };
    // The word first (Acquire), then the queue field written before it was made Delayed.
    let w = st.load();
    if w.state() != Some(State::Delayed) || w.generation() != h.generation {
        return Released::Gone;
    }
    let queue = hdr.queue.load(Ordering::Relaxed);
    let (Some(_), Some(wait)) = (seg.overflow(queue), seg.waker(queue)) else {
        return Released::Gone;
    };
    if st.release_due(h.generation).is_err() {
        return Released::Gone;
    }
    crate::fail_point!("delay.after_release");
    // The ring of the level the record's priority names (`levels`).
    match seg.index_at_level(queue, h.index) {
        Ok(()) => {
            crate::wait::notify(wait);
            Released::Queued { queue }
        }
        Err(RingError::Full) | Err(RingError::Corrupt(_)) => Released::Unindexed { queue },
    }
}
