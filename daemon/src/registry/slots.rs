//! Which process slots a daemon trusts: those it registered itself (in memory) and, on
//! adopting a segment, those its predecessor recorded in the state file whose process it can
//! verify (pid and a known start time, alive). Anything else the segment shows in use was
//! written by someone else (or its process cannot be told from a reused pid): it is
//! reclaimed, with a log line.

use std::sync::atomic::Ordering;

use tracing::warn;
use xtcq_shm::layout::{PROCESS_ACTIVE, PROCESS_FREE};
use xtcq_shm::recovery;

use xtcq_proto::{self as proto, names};

use super::{Adopted, Bookkeeping, ProcessId, Registry, SlotId};
use crate::persistence::state::DaemonState;

/// Log at most this many reclaimed slots one by one; then a count.
const LOG_EACH: usize = 8;

impl Registry {
    /// Splits the segment's non-free slots into the live ones `known` vouches for (same
    /// epoch, a start time, `alive`) and the rest, to recover. A start time of 0 verifies
    /// nothing: with it, any process that reused the pid would pass.
    pub(crate) fn verify_slots(
        &self,
        known: &DaemonState,
        alive: impl Fn(u32, u64) -> bool,
    ) -> (Vec<Adopted>, Vec<SlotId>) {
        let n = self.seg.config().process_slots;
        let (mut live, mut dead, mut unverified) = (Vec::new(), Vec::new(), 0usize);
        for i in 0..n {
            let Some(s) = self.seg.process_slot(i) else { break };
            let state = s.state.load(Ordering::Acquire);
            if state == PROCESS_FREE {
                continue;
            }
            let slot = SlotId { slot: i, epoch: s.epoch.load(Ordering::Relaxed) };
            let rec = known.slots.get(&i).filter(|r| r.epoch == slot.epoch);
            match rec {
                Some(r) if state == PROCESS_ACTIVE && r.start_time != 0 && alive(r.pid, r.start_time) => {
                    let process = ProcessId { pid: r.pid, uid: r.uid, start_time: r.start_time };
                    live.push(Adopted { slot, process, keeper: self.keeper() });
                }
                // Recorded, and exited (or being recovered when the last daemon stopped).
                Some(r) if r.start_time != 0 || state != PROCESS_ACTIVE => dead.push(slot),
                _ => {
                    unverified += 1;
                    if unverified <= LOG_EACH {
                        warn!(
                            slot = i,
                            segment_pid = s.pid.load(Ordering::Relaxed),
                            segment_start_time = s.start_time.load(Ordering::Relaxed),
                            "process slot in use in the segment, but xtcqd's state file does not show it \
                             registered to a process it can verify (an attached process may have written \
                             it): reclaiming it"
                        );
                    }
                    dead.push(slot);
                }
            }
        }
        if unverified > 0 {
            warn!(
                reclaimed = unverified,
                live = live.len(),
                "reclaimed process slots no verifiable process holds"
            );
        }
        (live, dead)
    }

    /// Refuses a registration for `p` when its uid already holds its share of the slots
    /// (so one user cannot take them all, through however many processes or connections).
    pub(crate) fn check_slot_limit(&self, t: &Bookkeeping, p: &ProcessId) -> Result<(), proto::ErrorReply> {
        let Some((per_uid, exempt)) = self.slot_limit else { return Ok(()) };
        if exempt.contains(&p.uid) {
            return Ok(());
        }
        let held = t.slots.values().filter(|k| k.process.uid == p.uid).count();
        if held < per_uid as usize {
            return Ok(());
        }
        Err(proto::ErrorReply::new(
            proto::ErrorCode::LimitReached,
            format!(
                "{} already holds {held} of this xtcqd's {} process slots, the most one user may hold                  (--process-slots-per-uid {per_uid}); stop some of its attached processes, or restart                  xtcqd with a higher --process-slots-per-uid",
                names::uid_label(p.uid),
                self.seg.config().process_slots
            ),
        ))
    }

    /// Makes slot `i`, which this daemon registered to no process but the segment shows in
    /// use, free for a registration: gives back any record or lease naming it (no live
    /// process of ours holds them), and logs who scribbled it, as far as the segment says.
    pub(crate) fn reclaim_unregistered(&self, i: u32) {
        let Some(s) = self.seg.process_slot(i) else { return };
        let r = recovery::recover_holder(&self.seg, i);
        let leases = recovery::release_deque_leases(&self.seg, i);
        if !r.requeued.is_empty() {
            recovery::reindex_orphans(&self.seg);
        }
        warn!(
            slot = i,
            state = s.state.load(Ordering::Relaxed),
            segment_pid = s.pid.load(Ordering::Relaxed),
            segment_start_time = s.start_time.load(Ordering::Relaxed),
            requeued = r.requeued.len(),
            leases_released = leases.len(),
            "process slot marked in use in the segment, but xtcqd registered no process to it (an \
             attached process may have written it): reclaiming it"
        );
    }
}
