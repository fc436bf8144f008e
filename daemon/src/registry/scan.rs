//! The daemon's periodic scan (every `--lease-scan-interval`): lease expiry, claims that
//! never got a deadline, and strays.
//!
//! - **Expired leases**: claims whose deadline passed are fenced and re-queued
//!   (`recovery::expire_leases_fenced`).
//! - **Claims without a deadline** in a queue with a lease: the claimer stores its deadline
//!   just after its claim CAS; one stopped (SIGSTOP, a debugger) or wedged between the two
//!   would hold the job forever. The scan remembers when it first saw each such claim (by
//!   its exact state word, which an extension or a give-back changes) and expires it one
//!   lease after that.
//! - **Strays**: `Queued` records nothing indexes (a give-back met a full overflow ring, or
//!   a process stopped between re-queuing and indexing); `xtcq_shm::strays` indexes each
//!   one seen on two scans in a row.
//!
//! - **Quotas**: each queue's records are counted for its record quota, and dead letters
//!   past its cap dropped (`quota`).
//!
//! All under the registry lock, so a scan never races a recovery.

use std::collections::HashMap;

use std::sync::atomic::Ordering;
use tracing::{error, warn};
use xtcq_shm::record::state::{JobHandle, State, StateWord};
use xtcq_shm::recovery;
use xtcq_shm::strays::StraySweep;

use super::Registry;

/// What the scan keeps between runs.
#[derive(Default)]
pub(super) struct ScanMemory {
    strays: StraySweep,
    /// Claims seen without a deadline: record index -> (claim word, first seen, ns).
    undated: HashMap<u32, (StateWord, u64)>,
    /// When finished fence registrations were last looked for (monotonic ns).
    forgot_at: u64,
}

/// How often the scan looks for fence registrations whose command is over.
const FORGET_EVERY_NS: u64 = 1_000_000_000;

impl Registry {
    /// One scan: with `leases`, expire claims past their lease (dated or not); always,
    /// index strays. Returns how many jobs were taken back or indexed.
    pub fn scan(&self, leases: bool) -> usize {
        let mut t = self.lock();
        let now = xtcq_shm::segment::monotonic_ns();
        let mut taken = Vec::new();
        if leases {
            let (fences, mem) = t.split_scan();
            let mut fence = |i: u32, holder: u32| fences.fence(i, holder);
            taken = recovery::expire_leases_fenced(&self.seg, now, &mut fence);
            for (i, w) in self.undated_expired(&mut mem.undated, now) {
                taken.extend(recovery::expire_claim(&self.seg, i, w, &mut fence));
            }
        }
        if now.saturating_sub(t.scan.forgot_at) >= FORGET_EVERY_NS {
            t.scan.forgot_at = now;
            t.fences.forget_finished();
        }
        if t.fences.take_changed() {
            self.persist(&t);
        }
        self.log_expired(&taken);
        self.nudge_waiters(&mut t);
        let swept = t.scan.strays.sweep(&self.seg);
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
        // Payload blocks whose record moved on (a process died between freeing a record and
        // giving its block back, and its recovery ran before that): freed, at each scan.
        let blocks = recovery::sweep_blocks(&self.seg);
        if blocks > 0 {
            warn!(blocks, "payload blocks held by no live job were freed");
        }
        let dropped = self.enforce_quotas();
        taken.len() + swept.indexed.len() + dropped as usize + blocks as usize
    }

    /// Claims without a deadline in a queue with a lease, first seen at least one lease
    /// ago with the same word; updates `undated` with what this scan sees.
    fn undated_expired(
        &self,
        undated: &mut HashMap<u32, (StateWord, u64)>,
        now: u64,
    ) -> Vec<(u32, StateWord)> {
        let records = self.seg.records();
        let mut seen = HashMap::new();
        let mut due = Vec::new();
        for i in 0..records.len() {
            let (Some(st), Some(hdr)) = (records.state(i), records.header(i)) else { break };
            let w = st.load();
            if w.state() != Some(State::Claimed) || hdr.deadline_ns.load(Ordering::Relaxed) != 0 {
                continue;
            }
            let lease_ms =
                self.seg.queue(hdr.queue.load(Ordering::Relaxed)).map(|q| q.spec.lease_ms).unwrap_or(0);
            // Re-check: the deadline we read must belong to this claim.
            if lease_ms == 0 || st.load() != w {
                continue;
            }
            let first = match undated.get(&i) {
                Some(&(old, at)) if old == w => at,
                _ => now,
            };
            if now.saturating_sub(first) >= u64::from(lease_ms) * 1_000_000 {
                due.push((i, w));
            } else {
                seen.insert(i, (w, first));
            }
        }
        *undated = seen;
        due
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
