//! The daemon's watch over claims with a lease: which claims can expire, and when, so that a
//! scan between two walks of the records looks only at the claims due.
//!
//! - A walk ([`LeaseWatch::walk`]) looks at every record: a claim whose deadline passed is
//!   revoked and re-queued (as [`recovery::expire_claim`]), the others are kept by due time:
//!   their deadline, or for a claim without one in a queue with a lease (its claimer stopped
//!   between its claim CAS and storing the deadline) one lease after it was first seen with
//!   that exact state word.
//! - Between walks, [`LeaseWatch::due`] looks again only at the claims due by now. Whatever a
//!   record holds then decides: a claim whose deadline moved on (an extension, or another
//!   claim of the record) is kept for its new time, a record no longer claimed is dropped.
//! - Claims made since the last walk are not known here; the daemon walks again whenever
//!   anything moved (see [`crate::activity`]).
//!
//! Nothing read is trusted: a deadline or state word scribbled on at worst expires a claim
//! early or late, never out of bounds or twice (the revoke is one CAS on the word seen).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::layout::RecordHeader;
use crate::record::state::{JobHandle, State, StateWord};
use crate::recovery::{self, Fence};
use crate::segment::Segment;
use crate::sync::Ordering;

/// Claims with a lease, by when to look at them again.
#[derive(Debug, Default)]
pub struct LeaseWatch {
    /// `(due ns, record index)`, earliest first; an index at most once.
    due: BinaryHeap<Reverse<(u64, u32)>>,
    /// Claims seen without a deadline: record index -> (claim word, first seen, ns).
    undated: HashMap<u32, (StateWord, u64)>,
}

/// One scan's time, fence and what it took back.
struct Pass<'f> {
    now: u64,
    fence: Fence<'f>,
    taken: Vec<JobHandle>,
}

impl LeaseWatch {
    /// Looks at every record (CLOCK_MONOTONIC `now_ns`): revokes the claims whose lease ran
    /// out, fencing each with `fence`, and keeps the others by due time. Returns the jobs
    /// taken back.
    pub fn walk(&mut self, seg: &Segment, now_ns: u64, fence: Fence<'_>) -> Vec<JobHandle> {
        self.walk_with(seg, now_ns, Some(fence), &mut |_, _, _| {})
    }

    /// [`walk`](Self::walk) (with a `fence`; without, it expires nothing and forgets every
    /// claim) that also hands every record to `visit` as read (index, state word, header):
    /// one pass over the records for everything the daemon's scan does with them.
    pub fn walk_with(
        &mut self,
        seg: &Segment,
        now_ns: u64,
        fence: Option<Fence<'_>>,
        visit: &mut dyn FnMut(u32, StateWord, &RecordHeader),
    ) -> Vec<JobHandle> {
        let seen = std::mem::take(&mut self.undated);
        self.due.clear();
        let mut no_fence = recovery::no_fence;
        let leases = fence.is_some();
        let mut pass = Pass { now: now_ns, fence: fence.unwrap_or(&mut no_fence), taken: Vec::new() };
        let records = seg.records();
        for i in 0..records.len() {
            let (Some(st), Some(hdr)) = (records.state(i), records.header(i)) else { break };
            let w = st.load();
            visit(i, w, hdr);
            if leases && w.state() == Some(State::Claimed) {
                self.look(seg, i, w, seen.get(&i).copied(), &mut pass);
            }
        }
        pass.taken
    }

    /// Looks only at the claims due by `now_ns` (see [`walk`](Self::walk)).
    pub fn due(&mut self, seg: &Segment, now_ns: u64, fence: Fence<'_>) -> Vec<JobHandle> {
        // Taken out first: a look may put a record back due now (it was moving), for the
        // next scan.
        let mut now_due = Vec::new();
        while let Some(&Reverse((at, i))) = self.due.peek() {
            if at > now_ns {
                break;
            }
            self.due.pop();
            now_due.push(i);
        }
        let mut pass = Pass { now: now_ns, fence, taken: Vec::new() };
        for i in now_due {
            let seen = self.undated.remove(&i);
            let Some(st) = seg.records().state(i) else { continue };
            self.look(seg, i, st.load(), seen, &mut pass);
        }
        pass.taken
    }

    /// The earliest time a known claim can expire.
    pub fn next_due(&self) -> Option<u64> {
        self.due.peek().map(|Reverse((at, _))| *at)
    }

    /// Claims known.
    pub fn len(&self) -> usize {
        self.due.len()
    }

    /// No claim known.
    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }

    /// Record `i`, read as `w`: revoked if its claim's lease ran out, else kept for when it
    /// can; `seen` is what an earlier look found of it undated.
    fn look(
        &mut self,
        seg: &Segment,
        i: u32,
        w: StateWord,
        seen: Option<(StateWord, u64)>,
        pass: &mut Pass<'_>,
    ) {
        let records = seg.records();
        let (Some(st), Some(hdr)) = (records.state(i), records.header(i)) else { return };
        if w.state() != Some(State::Claimed) {
            return;
        }
        let now = pass.now;
        let deadline = hdr.deadline_ns.load(Ordering::Relaxed);
        let queue = hdr.queue.load(Ordering::Relaxed);
        // Re-check: the deadline and queue read must belong to this claim. A record moving
        // now is looked at again at the next scan.
        if st.load() != w {
            self.due.push(Reverse((now, i)));
            return;
        }
        if deadline != 0 {
            if deadline <= now {
                pass.taken.extend(recovery::expire_claim(seg, i, w, &mut *pass.fence));
            } else {
                self.due.push(Reverse((deadline, i)));
            }
            return;
        }
        let lease_ns = seg.queue(queue).map_or(0, |q| u64::from(q.spec.lease_ms) * 1_000_000);
        if lease_ns == 0 {
            return; // no lease: the claim is its holder's until it settles or dies
        }
        let first = match seen {
            Some((old, at)) if old == w => at,
            _ => now,
        };
        if now.saturating_sub(first) >= lease_ns {
            pass.taken.extend(recovery::expire_claim(seg, i, w, &mut *pass.fence));
        } else {
            self.undated.insert(i, (w, first));
            self.due.push(Reverse((first.saturating_add(lease_ns), i)));
        }
    }
}
