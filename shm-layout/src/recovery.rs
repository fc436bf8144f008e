//! Recovery: giving back what a dead process held, and re-indexing jobs nothing points at.
//!
//! Called by the daemon when a process's pidfd says it exited (and on start for processes
//! registered in the segment that are no longer alive), and by lease expiry for live but hung
//! consumers. Everything here is built from the one-CAS record transitions, so it is safe to
//! run while every other process keeps working:
//! - a record `Filling(g, dead)` is freed (`Free(g + 1)`): its push never returned, so its
//!   producer never got a handle and nothing indexes it; then every payload block whose
//!   record moved on from the incarnation that took it (that record's, or one an acker freed
//!   and died before giving back) is freed ([`sweep_blocks`]);
//! - a record `Claimed(g, dead)` or `Writing(g, dead)` is first revoked (`Claimed(g,
//!   NO_HOLDER)`, one CAS), then gets attempt + 1 and is re-queued on its queue's overflow
//!   ring, or dead-lettered at the queue's attempt limit (lease expiry does the same to the
//!   `Claimed` record of a live holder, never to a `Writing` one: that holder is writing the
//!   header itself). A holder that died in `Writing` while giving the job back may already
//!   have counted its attempt, so that job may count one attempt more than it ran;
//! - a record `Queued(g)` that no deque slot in `[top, bottom)` and no overflow cell in
//!   `[head, tail)` names — a thief died between its winning CAS on `top` and its claim — is
//!   put on the overflow ring again. Only records seen `Queued` and unreferenced with the same
//!   state word on two passes are touched; a record that only looked unreferenced because it
//!   moved while we scanned gets a duplicate index, which is harmless: the claim CAS is the
//!   one arbiter, and a duplicate's claim fails.
//!
//! - the futex sleepers it had counted in queues' `sleepers` (its slot's
//!   `MetricsBlock::asleep`) are taken off the counts ([`forget_sleepers`]): a process killed
//!   asleep would otherwise leave a count that makes every later push a system call;
//! - the key-table locks the holder held and the entries it was writing are freed
//!   (`keys::release_slot`); the keys of its jobs hold while those jobs stay live.
//!
//! Invariants: recovery never changes a record held by a live process (callers pass only dead
//! holders, or expired leases, which the holder learns of through a failed ack); it writes
//! deque `bottom` only for deques whose owner is dead (see [`release_deque_leases`]).

use crate::layout::DequeHeader;
use crate::metrics::Counter;
use crate::overflow::RingError;
use crate::record::state::{next_generation, JobHandle, RecordState, State, StateWord, NO_HOLDER};
use crate::segment::Segment;
use crate::sync::{AtomicU32, Ordering};

/// More sleepers than any process could have on one queue: a record above it is garbage an
/// attached process wrote, and is not taken off the count.
const MAX_RECORDED_SLEEPERS: u64 = 1 << 20;

/// Takes the futex sleepers dead process slot `slot` recorded off each queue's `sleepers`
/// (saturating: a count never goes below zero), and clears its records, moving each on a
/// generation. Returns how many. Meant for a dead slot; a live one (a restarted daemon can
/// take a live process for dead) has its sleepers taken off while they sleep, but each of
/// those sleeps then ends without taking the count down again (`wait::Waker::sleep_ends`
/// sees the generation moved), so the count is never left below the sleepers it counts.
pub fn forget_sleepers(seg: &Segment, slot: u32) -> u64 {
    // Cleared and moved on in one step: a sleep that began before ends under the old
    // generation (not taken off twice), one that begins after under the new.
    let take = |b: &crate::layout::MetricsBlock| {
        let next = |v| Some(u64::from(crate::wait::asleep_generation(v).wrapping_add(1)) << 32);
        b.asleep.fetch_update(Ordering::Relaxed, Ordering::Relaxed, next).map_or(0, crate::wait::asleep_count)
    };
    forget_counted(seg, slot, take, |w| &w.sleepers, |_| {})
}

/// Takes the searchers dead process slot `slot` recorded off each queue's `searching`
/// (`wake_protocol::Searchers`), as [`forget_sleepers`] does its sleepers: a consumer that
/// died looking for work must not keep producers from waking sleepers. Each queue it
/// searched is nudged (one sleeper woken): pushes it saw may have skipped their wakes while
/// it was counted. Returns how many.
pub fn forget_searchers(seg: &Segment, slot: u32) -> u64 {
    let nudge = |q| {
        if let Some(w) = seg.waker(q) {
            crate::wait::nudge(w);
        }
    };
    forget_counted(seg, slot, |b| b.searching.swap(0, Ordering::Relaxed), |w| &w.searching, nudge)
}

/// Takes what `slot` recorded in its metrics blocks off each queue's count (`count`),
/// saturating: `take` clears a block's record and returns what it held; a record too large to
/// be real is taken off nothing. `after` is called with each queue something was taken off.
fn forget_counted(
    seg: &Segment,
    slot: u32,
    take: impl Fn(&crate::layout::MetricsBlock) -> u64,
    count: impl Fn(&crate::layout::WaitWord) -> &AtomicU32,
    after: impl Fn(u32),
) -> u64 {
    let mut forgotten = 0;
    for q in 0..seg.config().queues {
        let (Some(block), Some(w)) = (seg.slot_metrics(q, slot), seg.wait_word(q)) else { continue };
        let n = take(block);
        if n == 0 || n > MAX_RECORDED_SLEEPERS {
            continue;
        }
        let count = count(w);
        let mut cur = count.load(Ordering::Relaxed);
        loop {
            let next = cur.saturating_sub(n as u32);
            match count.compare_exchange_weak(cur, next, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => break,
                Err(v) => cur = v,
            }
        }
        forgotten += n;
        after(q);
    }
    forgotten
}

/// What [`recover_holder`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HolderRecovery {
    /// `Filling` records freed.
    pub freed_filling: u32,
    /// Claimed jobs put back in line.
    pub requeued: Vec<JobHandle>,
    /// Claimed jobs that reached the attempt limit.
    pub dead_lettered: Vec<JobHandle>,
    /// Jobs re-queued whose overflow ring was full; they stay `Queued` and unindexed and a
    /// later [`reindex_orphans`] puts them back.
    pub unindexed: u32,
    /// Records whose state or queue field made no sense (corruption), left alone.
    pub corrupt: u32,
    /// Payload blocks freed whose record had moved on: the holder died after freeing a
    /// record and before giving its block back, or while filling it.
    pub freed_blocks: u32,
    /// Key-table locks and half-written entries of the holder freed (see `keys`).
    pub freed_keys: u32,
}

/// The daemon's fence, called for a claim after its revoke and before the job can be claimed
/// again, with the record index and the slot that held it: `Ok` once the holder's work (a
/// command it registered for the claim) is stopped, or nothing was registered; `Err(why)`
/// when that cannot be proven, and the job becomes a dead letter with that reason rather
/// than run twice at once.
pub type Fence<'a> = &'a mut dyn FnMut(u32, u32) -> Result<(), String>;

/// The last error of a job dead-lettered because its holder's work could not be stopped.
pub const UNFENCED: &str = "could not stop command";

/// A fence for callers with nothing to stop (the in-process tests, a library-only setup).
pub fn no_fence(_index: u32, _holder: u32) -> Result<(), String> {
    Ok(())
}

/// Gives back every record held by process slot `holder`, which must be dead (or whose
/// claims are being revoked). Safe to run more than once. With `holder == NO_HOLDER` it gives
/// back claims that a daemon revoked and died before re-queuing (run on adopting a segment).
pub fn recover_holder(seg: &Segment, holder: u32) -> HolderRecovery {
    recover_holder_fenced(seg, holder, &mut no_fence)
}

/// [`recover_holder`], fencing each claim with `fence` before it is given back.
pub fn recover_holder_fenced(seg: &Segment, holder: u32, fence: Fence<'_>) -> HolderRecovery {
    let mut out = HolderRecovery::default();
    let records = seg.records();
    for i in 0..records.len() {
        let Some(st) = records.state(i) else { break };
        let w = st.load();
        if w.holder() != holder {
            continue;
        }
        match w.state() {
            Some(State::Filling) if st.free_filling(w.generation(), holder).is_ok() => {
                out.freed_filling += 1;
            }
            Some(State::Claimed | State::Writing) => {
                // As the job is now: a give-back moves the generation on, and this is the id
                // `xtcq dead --requeue` takes for a dead letter.
                let handle = JobHandle { index: i, generation: next_generation(w.generation()) };
                match give_back(seg, i, w, holder, "its consumer died", &mut *fence) {
                    Ok(GiveBack::Requeued) => out.requeued.push(handle),
                    Ok(GiveBack::Unindexed) => {
                        out.requeued.push(handle);
                        out.unindexed += 1;
                    }
                    Ok(GiveBack::DeadLettered) => out.dead_lettered.push(handle),
                    Ok(GiveBack::Moved) => {}
                    Err(()) => out.corrupt += 1,
                }
            }
            _ => {}
        }
    }
    // After the records: a `Filling` record freed above leaves the block its push took.
    out.freed_blocks = sweep_blocks(seg);
    // The key of a `Filling` record freed above holds no more (its job is not live); what
    // the holder left mid-push in the key table is freed here. Not for `NO_HOLDER`: no
    // pusher has that slot.
    if holder != NO_HOLDER {
        out.freed_keys = seg.key_table().release_slot(holder) as u32;
    }
    out
}

/// Frees every payload block whose record has moved on from the incarnation that took it
/// (see `record::blocks`): safe beside every other process, so the daemon also runs it at
/// each scan. Returns how many.
pub fn sweep_blocks(seg: &Segment) -> u32 {
    let records = seg.records();
    records.blocks().sweep(&records)
}

enum GiveBack {
    Requeued,
    Unindexed,
    DeadLettered,
    /// The record changed under us (someone else recovered it, or its lease holder acked).
    Moved,
}

/// `Claimed(w, holder)` (or `Writing(w, holder)` of a dead holder) → `Claimed(w, NO_HOLDER)`
/// (revoked: taken from its holder, so only we may write its header now) → attempt + 1 →
/// `Queued` + overflow index, or `Dead` at the limit. `w` is the word as the caller saw it.
///
/// The revoking CAS comes first because the holder of an expired lease is alive: it may ack
/// at any moment, and once the record is freed a producer may be filling it for another job.
/// Header writes made before owning the record could land in that other job. After the CAS
/// the holder's ack or nack fails (with `LeaseExpired`), and two recoveries racing for the
/// same record (lease expiry and a dead-holder scan) cannot both count an attempt.
///
/// A daemon that dies between the revoke and the re-queue leaves `Claimed(g, NO_HOLDER)`;
/// [`recover_holder`]`(seg, NO_HOLDER)` on the next start gives it back.
fn give_back(
    seg: &Segment,
    index: u32,
    w: StateWord,
    holder: u32,
    why: &str,
    fence: Fence<'_>,
) -> Result<GiveBack, ()> {
    let queue = seg.records().header(index).map(|h| h.queue.load(Ordering::Relaxed));
    let r = give_back_uncounted(seg, index, w, holder, why, fence);
    if let (Some(q), Ok(done @ (GiveBack::Requeued | GiveBack::Unindexed | GiveBack::DeadLettered))) =
        (queue, &r)
    {
        // The daemon's own block: only the daemon gives claims back.
        // The claim's slot of the queue's concurrency limit, only now that the fence reported
        // its command stopped (`segment::running`).
        seg.running_given_back(q);
        let block = seg.daemon_metrics(q);
        let event = if why == LEASE_EXPIRED { Counter::LeaseExpiries } else { Counter::Recovered };
        crate::metrics::bump(block, event);
        if matches!(done, GiveBack::DeadLettered) {
            crate::metrics::bump(block, Counter::Dead);
        }
    }
    r
}

/// The reason a lease-expiry give-back records (and how `give_back` tells it from recovery).
const LEASE_EXPIRED: &str = "lease expired";

/// [`give_back`] without its counting.
fn give_back_uncounted(
    seg: &Segment,
    index: u32,
    w: StateWord,
    holder: u32,
    why: &str,
    fence: Fence<'_>,
) -> Result<GiveBack, ()> {
    let records = seg.records();
    let (Some(st), Some(hdr)) = (records.state(index), records.header(index)) else { return Err(()) };
    let g = w.generation();
    // A record whose queue field makes no sense is corruption: leave it as it is (counted).
    if seg.queue(hdr.queue.load(Ordering::Relaxed)).is_err() {
        return Err(());
    }
    if holder != NO_HOLDER && !revoke(st, w, holder) {
        return Ok(GiveBack::Moved);
    }
    crate::failpoint::point("daemon.recovery.mid");
    // Revoked (the holder can no longer ack or extend); before anyone can claim it again,
    // whatever the holder runs for it is stopped, or the job is not run again at all. Also
    // for a claim a previous daemon revoked and died before re-queuing (`NO_HOLDER`): its
    // fence finds the command by record.
    let fenced = fence(index, holder);
    let q = hdr.queue.load(Ordering::Relaxed);
    let limit = seg.queue(q).map(|info| info.spec.max_attempts).ok();
    // Relaxed: published by the Release CAS below, as in `ClaimedJob::nack`.
    let attempts = hdr.attempts.load(Ordering::Relaxed).saturating_add(1);
    hdr.attempts.store(attempts, Ordering::Relaxed);
    hdr.deadline_ns.store(0, Ordering::Relaxed);
    if fenced.is_err() {
        // The fence logs its detail; the record keeps what fits its 24 bytes.
        crate::dead_letter::store_last_error(hdr, UNFENCED);
        let _ = st.dead_letter(g, NO_HOLDER);
        return Ok(GiveBack::DeadLettered);
    }
    crate::dead_letter::store_last_error(hdr, why);
    let Some(limit) = limit else {
        // The queue field changed under us (only corruption does that): nowhere to put the
        // job back; keep it as a dead letter rather than claimed by nobody.
        let _ = st.dead_letter(g, NO_HOLDER);
        return Err(());
    };
    if limit != 0 && attempts >= limit {
        return Ok(match st.dead_letter(g, NO_HOLDER) {
            Ok(()) => GiveBack::DeadLettered,
            Err(_) => GiveBack::Moved,
        });
    }
    if st.requeue_claimed(g, NO_HOLDER).is_err() {
        return Ok(GiveBack::Moved);
    }
    Ok(match index_on_overflow(seg, q, index) {
        Ok(()) => GiveBack::Requeued,
        Err(_) => GiveBack::Unindexed,
    })
}

/// Revokes `holder`'s claim (or write) seen as `w`: `Claimed | Writing (g, holder) ->
/// Claimed(g, NO_HOLDER)`, so the holder can no longer ack or extend it. False when the
/// record moved on since `w` was read.
pub(crate) fn revoke(st: RecordState<'_>, w: StateWord, holder: u32) -> bool {
    if !matches!(w.state(), Some(State::Claimed | State::Writing)) || w.holder() != holder {
        return false;
    }
    let to = StateWord::pack(w.generation(), State::Claimed, NO_HOLDER).0;
    // AcqRel: Acquire sees the holder's header writes made while it held the record (they
    // were published by the claim it made or by its own later stores before any Release it
    // did); Release orders our revoke before our header writes for a reader that Acquires
    // the state word.
    st.0.compare_exchange(w.0, to, Ordering::AcqRel, Ordering::Acquire).is_ok()
}

pub(crate) fn index_on_overflow(seg: &Segment, queue: u32, index: u32) -> Result<(), RingError> {
    // The ring of the level the record's priority names, with its hint marked.
    seg.index_at_level(queue, index)?;
    if let Some(w) = seg.waker(queue) {
        crate::wait::notify(w);
    }
    Ok(())
}

/// Revokes every claim whose lease deadline (CLOCK_MONOTONIC ns) is before `now_ns`: the
/// job is re-queued (or dead-lettered) and the holder's late ack or nack fails with
/// `LeaseExpired`. Returns the jobs revoked. The daemon runs it every `--lease-scan-interval`.
pub fn expire_leases(seg: &Segment, now_ns: u64) -> Vec<JobHandle> {
    expire_leases_fenced(seg, now_ns, &mut no_fence)
}

/// [`expire_leases`], fencing each claim with `fence` before it is given back.
pub fn expire_leases_fenced(seg: &Segment, now_ns: u64, fence: Fence<'_>) -> Vec<JobHandle> {
    let mut out = Vec::new();
    let records = seg.records();
    for i in 0..records.len() {
        let (Some(st), Some(hdr)) = (records.state(i), records.header(i)) else { break };
        let w = st.load();
        if w.state() != Some(State::Claimed) {
            continue;
        }
        let deadline = hdr.deadline_ns.load(Ordering::Relaxed);
        if deadline == 0 || deadline > now_ns {
            continue;
        }
        // Re-check the word: the deadline we read may belong to a later claim.
        if st.load() != w {
            continue;
        }
        if let Ok(GiveBack::Requeued | GiveBack::Unindexed | GiveBack::DeadLettered) =
            give_back(seg, i, w, w.holder(), LEASE_EXPIRED, &mut *fence)
        {
            out.push(JobHandle { index: i, generation: next_generation(w.generation()) });
        }
    }
    out
}

/// Revokes the claim `w` of record `index` (its lease ran out by the caller's reckoning: a
/// claim whose holder never stored a deadline) as lease expiry does: re-queued or
/// dead-lettered, fenced first. `None` if the record is no longer `w`.
pub fn expire_claim(seg: &Segment, index: u32, w: StateWord, fence: Fence<'_>) -> Option<JobHandle> {
    if w.state() != Some(State::Claimed) || seg.records().state(index)?.load() != w {
        return None;
    }
    match give_back(seg, index, w, w.holder(), LEASE_EXPIRED, fence) {
        Ok(GiveBack::Requeued | GiveBack::Unindexed | GiveBack::DeadLettered) => {
            Some(JobHandle { index, generation: next_generation(w.generation()) })
        }
        _ => None,
    }
}

/// Marks every record index that some deque slot in `[top, bottom)` (with the record's
/// current generation) or some overflow cell in `[head, tail)` names.
pub(crate) fn referenced(seg: &Segment) -> Vec<bool> {
    let records = seg.records();
    let mut seen = vec![false; records.len() as usize];
    for q in seg.queues().into_iter().flatten() {
        for d in 0..q.spec.level_deques() {
            let Ok(dq) = seg.deque(&q, d) else { continue };
            let (top, bottom) = dq.indices();
            let n = bottom.saturating_sub(top).clamp(0, dq.capacity() as i64);
            for k in 0..n {
                // A stale handle (see `is_current`) leaves its job an orphan.
                if let Some(h) = JobHandle::from_word(dq.slot_value(top.wrapping_add(k))) {
                    if let (true, Some(s)) = (records.is_current(h), seen.get_mut(h.index as usize)) {
                        *s = true;
                    }
                }
            }
        }
        for ring in seg.overflow_rings(q.index) {
            let (head, tail) = ring.positions();
            for (_, i) in ring.held(head, tail) {
                if let Some(s) = seen.get_mut(i as usize) {
                    *s = true;
                }
            }
        }
    }
    seen
}

/// Finds `Queued` records that no deque or overflow ring references (twice, with the same
/// state word both times) and puts them on their queue's overflow ring. Returns the jobs
/// re-indexed.
pub fn reindex_orphans(seg: &Segment) -> Vec<JobHandle> {
    let records = seg.records();
    let candidates = |seen: &[bool]| -> Vec<(u32, StateWord)> {
        (0..records.len())
            .filter_map(|i| {
                let w = records.state(i)?.load();
                (w.state() == Some(State::Queued) && !seen.get(i as usize).copied().unwrap_or(true))
                    .then_some((i, w))
            })
            .collect()
    };
    let first = candidates(&referenced(seg));
    if first.is_empty() {
        return Vec::new();
    }
    let again = referenced(seg);
    let mut out = Vec::new();
    for (i, w) in first {
        let Some(st) = records.state(i) else { continue };
        if again.get(i as usize).copied().unwrap_or(true) || st.load() != w {
            continue;
        }
        let Some(hdr) = records.header(i) else { continue };
        if index_on_overflow(seg, hdr.queue.load(Ordering::Relaxed), i).is_ok() {
            out.push(JobHandle { index: i, generation: w.generation() });
        }
    }
    out
}

// The lease format lives beside `DequeHeader::lease`; re-exported for the daemon.
pub use crate::layout::{lease_holder, lease_word};

/// Releases the deque leases held by dead process slot `slot`, repairing each deque's
/// `bottom = max(bottom, top)` (a pop that died after its decrement can leave it below `top`).
/// Jobs still in a deque stay where they are, stealable. Returns `(queue, deque)` of each.
pub fn release_deque_leases(seg: &Segment, slot: u32) -> Vec<(u32, u32)> {
    let c = seg.config();
    let mut out = Vec::new();
    for q in 0..c.queues {
        for d in 0..c.deques_per_queue {
            let Some(h) = seg.deque_header(q, d) else { continue };
            let lease = h.lease.load(Ordering::Acquire);
            if lease_holder(lease) != Some(slot) {
                continue;
            }
            repair_bottom(h);
            repair_level_deques(seg, q, d);
            if h.lease.compare_exchange(lease, 0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                out.push((q, d));
            }
        }
    }
    out
}

/// Repairs the owner's deque `d` of queue `q` at every level past 0 (`levels`): they have no
/// lease word of their own, but the same owner, dead too.
fn repair_level_deques(seg: &Segment, q: u32, d: u32) {
    let Ok(info) = seg.queue(q) else { return };
    if d >= info.spec.deques {
        return;
    }
    for level in 1..info.spec.levels {
        if let Some(h) = seg.deque_header(q, level * info.spec.deques + d) {
            repair_bottom(h);
        }
    }
}

/// `bottom = max(bottom, top)`, for a deque whose owner is dead.
fn repair_bottom(h: &DequeHeader) {
    let top = h.top.load(Ordering::Acquire);
    let bottom = h.bottom.load(Ordering::Acquire);
    if bottom < top {
        // Only the owner writes `bottom`, and it is dead; Release pairs with the thieves'
        // Acquire load of `bottom`.
        h.bottom.store(top, Ordering::Release);
    }
}

/// Holder values that name a process slot (not `NO_HOLDER`, in range).
pub fn holder_slot(seg: &Segment, w: StateWord) -> Option<u32> {
    let h = w.holder();
    (h != NO_HOLDER && h < seg.config().process_slots).then_some(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dead slot's recorded sleepers come off the count, never below zero; a record too
    /// large to be real (garbage an attached process wrote) is cleared and taken off nothing.
    #[test]
    fn forget_sleepers_takes_off_what_the_slot_recorded_and_no_garbage() {
        let (_dir, seg, q) = crate::segment::one_queue_segment();
        let w = seg.waker(q.index).unwrap();
        let (mine, theirs) = (w.of_slot(&seg, 1), w.of_slot(&seg, 2));
        let _ = (mine.sleep_begins(), mine.sleep_begins(), theirs.sleep_begins());
        assert_eq!(w.word.sleepers.load(Ordering::Relaxed), 3);
        assert_eq!(forget_sleepers(&seg, 1), 2);
        assert_eq!(w.word.sleepers.load(Ordering::Relaxed), 1, "the live slot's sleeper stays counted");
        assert_eq!(forget_sleepers(&seg, 1), 0, "forgotten once");
        seg.slot_metrics(q.index, 2).unwrap().asleep.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(forget_sleepers(&seg, 2), 0);
        assert_eq!(w.word.sleepers.load(Ordering::Relaxed), 1, "garbage took a sleeper off");
        seg.slot_metrics(q.index, 3).unwrap().asleep.store(5, Ordering::Relaxed);
        assert_eq!(forget_sleepers(&seg, 3), 5);
        assert_eq!(w.word.sleepers.load(Ordering::Relaxed), 0, "below zero");
    }

    /// A slot taken for dead while its process lives (a restarted daemon that cannot verify
    /// it, or a scribbled slot table): the sleep it forgot ends later without taking the
    /// count down again, and a sleep begun after the forget is still counted when it ends.
    #[test]
    fn a_forgotten_sleep_that_ends_takes_nothing_more_off_the_count() {
        let (_dir, seg, q) = crate::segment::one_queue_segment();
        let w = seg.waker(q.index).unwrap();
        let count = || w.word.sleepers.load(Ordering::Relaxed);
        let slot = w.of_slot(&seg, 1);
        let before = slot.sleep_begins();
        assert_eq!(forget_sleepers(&seg, 1), 1);
        let after = slot.sleep_begins();
        slot.sleep_ends(before);
        assert_eq!(count(), 1, "the thread asleep since the forget is still counted");
        slot.sleep_ends(after);
        assert_eq!(count(), 0, "each sleep counted once");
    }

    /// A dead slot's recorded searchers come off the queue's `searching`, a live slot's
    /// stay: a consumer killed while it looked for work leaves no count that would keep
    /// producers from waking sleepers.
    #[test]
    fn forget_searchers_takes_off_what_the_slot_recorded() {
        let (_dir, seg, q) = crate::segment::one_queue_segment();
        let w = seg.waker(q.index).unwrap();
        for slot in [1, 2] {
            seg.slot_metrics(q.index, slot).unwrap().searching.fetch_add(1, Ordering::Relaxed);
            w.word.searching.fetch_add(1, Ordering::Relaxed);
        }
        assert_eq!(forget_searchers(&seg, 1), 1);
        assert_eq!(w.word.searching.load(Ordering::Relaxed), 1, "the live slot's searcher stays counted");
        assert_eq!(forget_searchers(&seg, 1), 0, "forgotten once");
        assert_eq!(w.word.sleepers.load(Ordering::Relaxed), 0, "sleepers untouched");
    }
}
