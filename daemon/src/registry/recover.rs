//! Recovery: giving back what an exited process held, and adopting a segment a previous
//! daemon served.
//!
//! Rules kept:
//! - a claim is given back only after the commands registered for it are dead (`fence`);
//! - on adopt, the previous daemon's fence registrations are taken over before anything is
//!   recovered, and every record or lease naming a slot no live process holds is given back;
//! - a slot this daemon tracks is recovered whatever the segment's epoch says; an untracked
//!   one only at its epoch (it may have been recovered and reused already).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use tracing::{info, warn};
use xtcq_shm::layout::{PROCESS_FREE, PROCESS_RECOVERING};
use xtcq_shm::record::state::State;
use xtcq_shm::recovery::{self, lease_holder};

use crate::registry::{Adopted, Bookkeeping, Keeper, QueuesUsed, Registry, SlotId, WatchedSlot};

impl Registry {
    /// [`recover_process`](Self::recover_process), if `keeper` still keeps `slot` at its
    /// epoch; else nothing (another task keeps it, or it was recovered already). Returns
    /// whether it recovered.
    pub fn recover_kept(&self, slot: SlotId, keeper: Keeper) -> bool {
        let mut t = self.lock();
        match t.slots.get(&slot.slot) {
            Some(k) if k.keeper == keeper && k.epoch == slot.epoch => {}
            _ => return false,
        }
        self.recover_locked(&mut t, slot);
        true
    }

    /// Everything to do when a registered process has exited and its connection is closed:
    /// free the records it was filling, re-queue those it had claimed, release its deque
    /// leases (repairing `bottom`), re-index orphaned queued records, free the slot.
    pub fn recover_process(&self, slot: SlotId) {
        let mut t = self.lock();
        self.recover_locked(&mut t, slot);
    }

    pub(crate) fn recover_locked(&self, t: &mut Bookkeeping, slot: SlotId) {
        let tracked = t.slots.get(&slot.slot).is_some_and(|k| k.epoch == slot.epoch);
        if tracked {
            t.slots.remove(&slot.slot);
            self.persist(t);
            self.release_wakes_of(t, slot.slot);
        }
        let Some(s) = self.seg.process_slot(slot.slot) else { return };
        t.scan.changed();
        // A slot this daemon tracks is recovered whatever the segment's epoch says (an
        // attached process may have changed it); an untracked one only at its epoch.
        if !tracked && s.epoch.load(Ordering::Relaxed) != slot.epoch {
            return; // already recovered and reused
        }
        let pid = s.pid.load(Ordering::Relaxed);
        s.state.store(PROCESS_RECOVERING, Ordering::Release);
        // A crash here (or inside `recover_holder`, which has the fail point after revoking a
        // claim) leaves the slot RECOVERING; the next daemon's `adopt` recovers it again.
        xtcq_shm::failpoint::point("daemon.recovery.mid");
        // Each claimed job's command (registered by `xtcq work`) is killed before the job
        // is re-queued; then whatever else it had registered.
        let r = recovery::recover_holder_fenced(&self.seg, slot.slot, &mut |i, h| t.fences.fence(i, h));
        for e in t.fences.fence_all_of(slot.slot) {
            warn!(slot = slot.slot, pid, "a command of an exited process could not be stopped: {e}");
        }
        if t.fences.take_changed() {
            self.persist(t);
        }
        let leases = recovery::release_deque_leases(&self.seg, slot.slot);
        // Asleep when it died: off the counts, or every later push would make a futex wake.
        let asleep = recovery::forget_sleepers(&self.seg, slot.slot);
        if asleep > 0 {
            info!(slot = slot.slot, pid, asleep, "took the sleepers of an exited process off their queues");
        }
        // Searching when it died: off the counts, or producers would leave sleepers asleep
        // for a searcher that is gone (until the nudge of jobs that outlast two scans).
        let searching = recovery::forget_searchers(&self.seg, slot.slot);
        if searching > 0 {
            info!(
                slot = slot.slot,
                pid, searching, "took the searchers of an exited process off their queues"
            );
        }
        // A thief that died between its winning CAS on `top` and its claim leaves a queued
        // record nothing indexes; a dying injector or overflow popper likewise.
        let orphans = recovery::reindex_orphans(&self.seg);
        // It may have left a job Delayed and died before it told us.
        let delayed = self.timers.scan(&self.seg);
        if delayed > 0 {
            info!(slot = slot.slot, pid, delayed, "found delayed jobs an exited process had not announced");
        }
        s.role.store(0, Ordering::Relaxed);
        s.pid.store(0, Ordering::Relaxed);
        s.start_time.store(0, Ordering::Relaxed);
        s.state.store(PROCESS_FREE, Ordering::Release);
        log_recovered(slot, pid, &r, orphans.len(), leases.len());
    }

    /// On adopting a segment: recovers every registered process that is no longer alive (and
    /// any record or lease naming a slot that is not registered), and returns the live ones,
    /// each with the keeper to watch it until it exits (or until its process resumes it
    /// over a connection).
    pub fn adopt(&self, alive: impl Fn(u32, u64) -> bool) -> Vec<Adopted> {
        self.finish_interrupted_deletes();
        let (known, trusted) = self.load_state();
        {
            let mut t = self.lock();
            t.queues = known.queues.clone();
            // Before any recovery: a dead holder's commands are killed before its jobs are
            // given back, whichever daemon they were registered with. Without the file, no
            // claim can be proven fenced: they go to the dead letters, not to a second run.
            t.fences.adopt(&known.fences);
            if !trusted {
                warn!(
                    "no trusted state file for this segment: claims taken back now go to the dead letters \
                     (re-queue them with `xtcq dead QUEUE --requeue` once their commands are known to be gone)"
                );
                t.fences.set_lost(true);
            }
        }
        let (live, dead) = self.verify_slots(&known, alive);
        for slot in &dead {
            self.recover_process(*slot);
        }
        self.track_adopted(&live);
        self.recover_revoked_claims();
        let live_slots: BTreeSet<u32> = live.iter().map(|a| a.slot.slot).collect();
        self.recover_strays(&live_slots);
        self.fence_unheld(&live_slots);
        self.lock().fences.set_lost(false);
        self.release_batch_callbacks();
        let delayed = self.timers.scan(&self.seg);
        if delayed > 0 {
            info!(delayed, "delayed jobs in the segment; each is put in line when due");
        }
        live
    }

    /// A daemon that died half-way through deleting a queue: finish the delete (it had
    /// passed its checks), so the entry is free again and nothing names the queue.
    fn finish_interrupted_deletes(&self) {
        let _t = self.lock();
        for (index, dropped) in self.seg.finish_interrupted_deletes() {
            warn!(
                index,
                dropped_queued = dropped.queued,
                dropped_dead = dropped.dead,
                "finished deleting a queue whose delete a previous daemon did not complete"
            );
        }
    }

    /// Watches the live adopted slots (keeper: their watcher) and writes the state file.
    fn track_adopted(&self, live: &[Adopted]) {
        let mut t = self.lock();
        for a in live {
            let kept = WatchedSlot {
                epoch: a.slot.epoch,
                process: a.process,
                keeper: a.keeper,
                connected: false,
                uses: QueuesUsed::Unknown,
            };
            t.slots.insert(a.slot.slot, kept);
        }
        self.adopt_queue_acls(&mut t);
        self.persist(&t);
    }

    /// Claims a previous daemon revoked (lease expiry or recovery) and died before
    /// re-queuing: they name no holder, so their commands are found by record (the previous
    /// daemon kept them).
    fn recover_revoked_claims(&self) {
        let mut t = self.lock();
        let r = recovery::recover_holder_fenced(&self.seg, xtcq_shm::NO_HOLDER, &mut |i, _| {
            t.fences.fence_record(i)
        });
        if !r.requeued.is_empty() || !r.dead_lettered.is_empty() {
            warn!(
                requeued = r.requeued.len(),
                dead_lettered = r.dead_lettered.len(),
                "re-queued claims a previous daemon revoked but did not give back"
            );
        }
    }

    /// Holders named by records or leases but not registered (a slot freed by hand, or a
    /// corrupt table): give their holdings back too.
    fn recover_strays(&self, live_slots: &BTreeSet<u32>) {
        let strays = self.unregistered_holders(live_slots);
        if strays.is_empty() {
            return;
        }
        let mut t = self.lock();
        for s in &strays {
            let r = recovery::recover_holder_fenced(&self.seg, *s, &mut |i, h| t.fences.fence(i, h));
            let l = recovery::release_deque_leases(&self.seg, *s);
            warn!(
                slot = s,
                requeued = r.requeued.len(),
                leases = l.len(),
                "recovered holdings of an unregistered slot"
            );
        }
        recovery::reindex_orphans(&self.seg);
    }

    /// Slots that hold a record or a deque lease and are not in `live_slots`.
    fn unregistered_holders(&self, live_slots: &BTreeSet<u32>) -> BTreeSet<u32> {
        let mut strays = BTreeSet::new();
        let records = self.seg.records();
        for i in 0..records.len() {
            let Some(st) = records.state(i) else { break };
            let w = st.load();
            if matches!(w.state(), Some(State::Filling | State::Claimed | State::Writing)) {
                if let Some(h) = recovery::holder_slot(&self.seg, w) {
                    strays.insert(h);
                }
            }
        }
        let c = self.seg.config();
        for q in 0..c.queues {
            for d in 0..c.deques_per_queue {
                let lease = self.seg.deque_header(q, d).map(|h| h.lease.load(Ordering::Acquire));
                if let Some(s) = lease.and_then(lease_holder) {
                    strays.insert(s);
                }
            }
        }
        strays.retain(|s| !live_slots.contains(s));
        strays
    }

    /// Kills the adopted commands whose slot no live process holds (their worker is gone,
    /// and whatever they ran for must not go on beside the job's next run), and writes the
    /// state file if that changed it.
    pub(crate) fn fence_unheld(&self, live_slots: &BTreeSet<u32>) {
        let mut t = self.lock();
        let gone: BTreeSet<u32> =
            t.fences.records().iter().map(|r| r.slot).filter(|s| !live_slots.contains(s)).collect();
        for slot in gone {
            for e in t.fences.fence_all_of(slot) {
                warn!(slot, "a command of a process that exited could not be stopped: {e}");
            }
        }
        if t.fences.take_changed() {
            self.persist(&t);
        }
    }
}

/// Says what recovering `slot` did: a warning when it touched jobs (or found corruption), else
/// one line that the slot was freed.
fn log_recovered(slot: SlotId, pid: u32, r: &recovery::HolderRecovery, orphans: usize, leases: usize) {
    let touched = r.freed_filling as usize
        + r.requeued.len()
        + r.dead_lettered.len()
        + orphans
        + r.freed_blocks as usize;
    if touched > 0 || r.corrupt > 0 || r.unindexed > 0 {
        warn!(
            slot = slot.slot,
            pid,
            freed_filling = r.freed_filling,
            requeued = r.requeued.len(),
            dead_lettered = r.dead_lettered.len(),
            unindexed = r.unindexed,
            corrupt = r.corrupt,
            freed_blocks = r.freed_blocks,
            orphans_reindexed = orphans,
            leases_released = leases,
            done_mono_ns = xtcq_shm::segment::monotonic_ns(),
            "recovered jobs of an exited process"
        );
    } else {
        info!(
            slot = slot.slot,
            pid,
            leases_released = leases,
            done_mono_ns = xtcq_shm::segment::monotonic_ns(),
            "process exited; slot freed"
        );
    }
}
