//! The daemon's periodic scan (every `--lease-scan-interval`): lease expiry, claims that
//! never got a deadline, and strays.
//!
//! - **Expired leases**: claims whose deadline passed are fenced and re-queued
//!   (`xtcq_shm::lease_watch`).
//! - **Claims without a deadline** in a queue with a lease: the claimer stores its deadline
//!   just after its claim CAS; one stopped (SIGSTOP, a debugger) or wedged between the two
//!   would hold the job forever. The scan remembers when it first saw each such claim (by
//!   its exact state word, which an extension or a give-back changes) and expires it one
//!   lease after that.
//! - **Strays**: `Queued` records nothing indexes (a give-back met a full overflow ring, or
//!   a process stopped between re-queuing and indexing); `xtcq_shm::strays` indexes each
//!   one seen on two scans in a row.
//! - **Quotas**: each queue's records are counted for its record quota, and dead letters
//!   past its cap dropped (`quota`).
//!
//! **Idle costs nothing.** Walking every record is what costs (a 4 M-record segment is half
//! a gigabyte of record lines), so a scan walks them only when something can have changed:
//! - when the activity snapshot (`xtcq_shm::activity`: the queues' deque and ring indices
//!   and the registered processes' counters, which every job transition moves) differs
//!   from the last scan's, and once more at the scan after (what a count announced may reach
//!   the records a little later on weakly ordered machines);
//! - when this daemon changed jobs itself (recovery, deletes, dead-letter actions, lease
//!   expiries: [`ScanMemory::changed`]);
//! - at least every [`WALK_EVERY_NS`], for what no snapshot shows: a process stopped for good
//!   within the few instructions between a job transition and its count, or one that
//!   scribbled over the segment.
//!
//! Between walks a scan looks only at the claims due to expire by then and at the strays the
//! last walk saw, so its cost follows the claims and the queues, not the records.
//!
//! All under the registry lock, so a scan never races a recovery.

use std::sync::atomic::Ordering;

use tracing::{error, warn};
use xtcq_shm::activity;
use xtcq_shm::lease_watch::LeaseWatch;
use xtcq_shm::record::state::{JobHandle, State, StateWord};
use xtcq_shm::recovery;
use xtcq_shm::segment::QueueRecordCount;
use xtcq_shm::strays::{Referenced, StraySweep};
use xtcq_shm::Segment;

use crate::registry::{Bookkeeping, Registry};

/// What a walk found for the rest of the scan.
#[derive(Default)]
struct Walked {
    /// `Queued` records nothing indexed, with their words.
    unindexed: Vec<(u32, StateWord)>,
    /// The queues' records (`None`: no walk).
    counts: Option<Vec<QueueRecordCount>>,
}

/// What the scan keeps between runs.
#[derive(Default)]
pub(crate) struct ScanMemory {
    strays: StraySweep,
    leases: LeaseWatch,
    /// The activity snapshot the last scan took, and a buffer for the next.
    seen: Vec<u64>,
    spare: Vec<u64>,
    /// Walks owed to changes seen: the one now and the one after.
    owed: u8,
    /// When the records were last walked (monotonic ns; 0: never).
    walked_at: u64,
    /// When finished fence registrations were last looked for (monotonic ns).
    forgot_at: u64,
    /// What the last walk counted of each queue's running claims (`quota::enforce_quotas`).
    pub(crate) running: Vec<Option<xtcq_shm::segment::RunningWalk>>,
}

impl ScanMemory {
    /// This daemon changed jobs in the segment: the next two scans walk the records.
    pub(crate) fn changed(&mut self) {
        self.owed = 2;
    }

    /// Whether this scan walks the records (see the module docs).
    fn must_walk(&mut self, seg: &Segment, slots: &[u32], now: u64) -> bool {
        activity::snapshot(seg, slots, &mut self.spare);
        if self.spare != self.seen {
            std::mem::swap(&mut self.seen, &mut self.spare);
            self.owed = 2;
        }
        let backstop = self.walked_at == 0 || now.saturating_sub(self.walked_at) >= WALK_EVERY_NS;
        if self.owed > 0 {
            self.owed -= 1;
            return true;
        }
        backstop
    }
}

/// How often the scan looks for fence registrations whose command is over.
const FORGET_EVERY_NS: u64 = 1_000_000_000;

/// The longest time between two walks of every record, whatever the activity snapshot says.
pub const WALK_EVERY_NS: u64 = 10_000_000_000;

impl Registry {
    /// One scan: with `leases`, expire claims past their lease (dated or not); always,
    /// index strays. Returns how many jobs were taken back or indexed.
    pub fn scan(&self, leases: bool) -> usize {
        let mut t = self.lock();
        let now = xtcq_shm::segment::monotonic_ns();
        let slots: Vec<u32> = t.slots.keys().copied().collect();
        let walk = t.scan.must_walk(&self.seg, &slots, now);
        let (taken, walked) = if walk {
            self.walk(&mut t, now, leases)
        } else {
            (self.due(&mut t, now, leases), Walked::default())
        };
        if now.saturating_sub(t.scan.forgot_at) >= FORGET_EVERY_NS {
            t.scan.forgot_at = now;
            t.fences.forget_finished();
        }
        if t.fences.take_changed() {
            self.persist(&t);
        }
        self.log_expired(&taken);
        self.nudge_waiters(&mut t);
        let swept = if walk {
            t.scan.strays.sweep_found(&self.seg, walked.unindexed)
        } else {
            t.scan.strays.recheck(&self.seg)
        };
        if !swept.indexed.is_empty() || swept.waiting > 0 {
            warn!(
                indexed = swept.indexed.len(),
                waiting_for_room = swept.waiting,
                "queued jobs no deque or overflow ring referenced (a give-back met a full ring) \
                 put back on their queue's overflow ring"
            );
        }
        // A header some process rewrote (a forged class table would have later attachers lay
        // blocks over live jobs' blocks): the validated copy is written back.
        if self.seg.restore_descriptor() {
            error!(
                "the segment header was rewritten by another process; this daemon's validated \
                 copy was written back (clients that mapped it meanwhile were refused)"
            );
        }
        if walk {
            self.complete_batches();
        }
        let (blocks, dropped) = match walked.counts {
            Some(counts) => self.after_walk(&mut t, counts),
            None => (0, 0),
        };
        if !taken.is_empty() || !swept.indexed.is_empty() || dropped > 0 {
            t.scan.changed();
        }
        taken.len() + swept.indexed.len() + dropped as usize + blocks as usize
    }

    /// One pass over every record: leases (with `leases`), strays, the queues' counts.
    fn walk(&self, t: &mut Bookkeeping, now: u64, leases: bool) -> (Vec<JobHandle>, Walked) {
        t.scan.walked_at = now;
        // Read before the records, as `strays::unindexed_queued` does.
        let referenced = Referenced::now(&self.seg);
        let (mut unindexed, mut counts) = (Vec::new(), self.seg.queue_record_counts());
        let (fences, mem) = t.split_scan();
        let mut fence = |i: u32, holder: u32| fences.fence(i, holder);
        let fence: Option<recovery::Fence<'_>> = if leases { Some(&mut fence) } else { None };
        let taken = mem.leases.walk_with(&self.seg, now, fence, &mut |i, w, hdr| {
            if referenced.unindexed(i, w) {
                unindexed.push((i, w));
            }
            QueueRecordCount::tally(&mut counts, i, w, hdr);
        });
        (taken, Walked { unindexed, counts: Some(counts) })
    }

    /// Between walks: only the claims due now (with `leases`).
    fn due(&self, t: &mut Bookkeeping, now: u64, leases: bool) -> Vec<JobHandle> {
        if !leases {
            return Vec::new();
        }
        let (fences, mem) = t.split_scan();
        mem.leases.due(&self.seg, now, &mut |i, holder| fences.fence(i, holder))
    }

    /// What follows a walk: frees orphan payload blocks, enforces the queues' quotas with
    /// the walk's `counts`. Returns the blocks freed and the dead letters dropped.
    fn after_walk(&self, t: &mut Bookkeeping, counts: Vec<QueueRecordCount>) -> (u32, u64) {
        // Payload blocks whose record moved on (a process died between freeing a record and
        // giving its block back, and its recovery ran before that): freed.
        let blocks = recovery::sweep_blocks(&self.seg);
        if blocks > 0 {
            warn!(blocks, "payload blocks held by no live job were freed");
        }
        (blocks, self.enforce_quotas(t, counts))
    }

    fn log_expired(&self, revoked: &[JobHandle]) {
        let records = self.seg.records();
        for h in revoked.iter().take(16) {
            let Some(hdr) = records.header(h.index) else { continue };
            let (attempts, queue) = (hdr.attempts.load(Ordering::Relaxed), hdr.queue.load(Ordering::Relaxed));
            let queue = self.seg.queue(queue).map(|q| q.spec.name).unwrap_or_else(|_| "?".into());
            let dead = records.state(h.index).is_some_and(|st| st.load().state() == Some(State::Dead));
            warn!(
                job = %xtcq_shm::dead_letter::job_id(hdr, h.index),
                %queue,
                attempts,
                dead_lettered = dead,
                "lease expired: job taken back from its (live) consumer"
            );
        }
        if revoked.len() > 16 {
            warn!(more = revoked.len() - 16, "lease expired for more jobs");
        }
    }
}
