//! The typed API the client crate builds on: [`Owner`] (push a payload, pop or take a claimed
//! job), [`Thief`] (steal claimed jobs), [`ClaimedJob`] (payload, ack, nack).
//!
//! A push is: allocate a record (`Free -> Filling(me)`), write the payload, publish
//! (`-> Queued`), index the handle in the owner's deque or, when that is full, in the queue's
//! overflow ring, then wake sleepers if any. A steal or pop takes a handle from an index and
//! claims the record (`Queued -> Claimed(me)`); a handle whose claim fails (stale generation,
//! or claimed by someone else via a duplicate) is skipped. A crash between any two steps
//! leaves a record in a state recovery can read (see `record::state`).

use std::sync::Arc;

use crate::layout::{MetricsBlock, QueueLimits, RecordHeader};
use crate::metrics::Counter;
use crate::overflow::{OverflowRef, RingError};
use crate::record::arena::{ArenaFull, BadPayloadLen, RecordArena};
use crate::record::blocks::BlocksFull;
use crate::record::state::{JobHandle, State};
use crate::segment::{monotonic_ns, QueueError, QueueInfo, Rate, Running, Segment};
use crate::sync::Ordering;

mod batch;
mod claim;
mod inject_many;
mod job;
mod owned;
mod owner;
#[cfg(test)]
mod priorities_tests;
mod publish;
mod thief;
pub use batch::ClaimedBatch;
pub use claim::Claim;
pub use job::ClaimedJob;
pub use owned::OwnedJob;
pub use owner::{Injector, Owner};
pub use thief::Thief;

/// Why a batch push stopped: the jobs before the one that failed were queued.
#[derive(Debug, thiserror::Error)]
#[error("{queued} jobs of the batch were queued, then one failed: {error}")]
pub struct PushBatchError {
    /// Jobs queued, the batch's first ones.
    pub queued: usize,
    /// Why the next one was not.
    #[source]
    pub error: PushError,
}

/// Why a push failed. The job was not queued.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// Payload bigger than the segment's largest payload (its `payload_bytes`).
    #[error(
        "payload too large: {len} > {max} bytes, the largest payload this segment takes \
         (xtcqd --payload-bytes, with --payload-blocks for a class that holds it)"
    )]
    PayloadTooLarge {
        /// Given.
        len: usize,
        /// The segment's largest payload.
        max: u32,
    },
    /// No free record.
    #[error(transparent)]
    RecordsFull(#[from] ArenaFull),
    /// No free payload block of the class the payload needs, nor of a larger one.
    #[error(transparent)]
    BlocksFull(#[from] BlocksFull),
    /// Deque and overflow ring both full.
    #[error("queue {queue} is full: its deque and its overflow ring ({overflow} jobs) are full")]
    QueueFull {
        /// Queue name.
        queue: String,
        /// Overflow ring capacity.
        overflow: usize,
    },
    /// The queue's jobs hold its record quota: the queue must
    /// drain, or its dead letters be purged, before it takes more.
    #[error(
        "the queue is at its record quota: its jobs hold {used} of the {max} records it may use \
         (queued, running and dead letters); let consumers drain it or purge its dead letters \
         (`xtcq dead QUEUE --purge`), or create it with a larger --max-records"
    )]
    QuotaFull {
        /// Records its jobs hold.
        used: u32,
        /// Its quota.
        max: u32,
    },
    /// A priority past the queue's levels.
    #[error(
        "--priority {priority} is past queue {queue}'s levels: it has --levels {levels}, so \
         priorities 0 (the most urgent) to {last}; push at one of those, or create the queue \
         with more --levels"
    )]
    Priority {
        /// Queue name.
        queue: String,
        /// Asked for.
        priority: u32,
        /// The queue's levels.
        levels: u32,
        /// Its least urgent priority.
        last: u32,
    },
    /// The batch named for the push takes no more jobs.
    #[error(transparent)]
    BatchClosed(#[from] crate::batch::BatchClosed),
    /// The job's key could not be bound: a live job of the queue holds it, or the key
    /// table has no room for it.
    #[error(transparent)]
    Key(#[from] crate::keys::KeyError),
    /// The segment holds values no correct program writes.
    #[error("segment corruption while pushing: {0}")]
    Corrupt(String),
}

/// Why a claimed job could not be acked, nacked or read.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The claim's lease ran out before the ack or nack; the job was re-queued (or
    /// dead-lettered) and may already be running elsewhere.
    #[error("lease expired, the job was re-queued; its result was not recorded")]
    LeaseExpired {
        /// The job.
        handle: JobHandle,
    },
    /// The record is no longer ours: recovery or an expired lease gave it to someone else.
    #[error(
        "job {handle} is no longer held by this process (record is now {found}); it was re-queued or freed"
    )]
    NotHeld {
        /// The job.
        handle: JobHandle,
        /// What the record holds now.
        found: String,
    },
    /// The job was cancelled (`xtcq cancel`) while this process held it: the daemon took it
    /// back (and stopped the command it knew of); there is nothing to settle.
    #[error("job {handle} was cancelled while this process held it; its result was not recorded")]
    Cancelled {
        /// The job.
        handle: JobHandle,
    },
    /// Bad payload length.
    #[error(transparent)]
    BadPayload(#[from] BadPayloadLen),
    /// The overflow ring could not take a nacked job back.
    #[error("could not re-queue job {handle}: {source}")]
    Requeue {
        /// The job.
        handle: JobHandle,
        /// Why.
        source: RingError,
    },
    /// The segment holds values no correct program writes.
    #[error("segment corruption: {0}")]
    Corrupt(String),
}

/// What a consumer needs of one queue: resolved once, shared by its jobs.
#[derive(Clone, Copy, Debug)]
struct QueueCtx<'a> {
    queue: u32,
    max_attempts: u32,
    /// Default claim lease, ns (0: none).
    lease_ns: u64,
    records: RecordArena<'a>,
    overflow: OverflowRef<'a>,
    wait: crate::wait::Waker<'a>,
    /// The queue's record quota and the daemon's last count of its records.
    limits: &'a QueueLimits,
    /// This queue's per-process-slot counter blocks (see `metrics`).
    slots: &'a [MetricsBlock],
    /// Priority levels (`levels`); with one, `overflow` is the whole ring and no hint is
    /// marked.
    levels: u32,
    /// The segment, for the rings of levels past 0 (reached only by queues with several)
    /// and for the batch table (`batch`).
    seg: &'a Segment,
}

/// What the gate let through ([`QueueCtx::enter`]): how many takes, whether each holds a
/// slot of the queue's concurrency limit, and the rate tokens they hold.
#[derive(Clone, Copy, Debug)]
struct Pass {
    n: usize,
    slots: bool,
    tokens: Option<crate::segment::Tokens>,
}

impl<'a> QueueCtx<'a> {
    /// The context of a handle of queue `q`.
    fn for_handle(seg: &'a Segment, q: &QueueInfo) -> Result<Self, QueueError> {
        let lease_ns = q.spec.lease_ms as u64 * 1_000_000;
        Self::from_parts(seg, q.index, q.spec.max_attempts, lease_ns, q.spec.levels)
    }

    fn from_parts(
        seg: &'a Segment,
        queue: u32,
        max_attempts: u32,
        lease_ns: u64,
        levels: u32,
    ) -> Result<Self, QueueError> {
        let corrupt = |what: &str| QueueError::Corrupt { index: queue, what: what.to_string() };
        let levels = levels.max(1);
        Ok(Self {
            queue,
            max_attempts,
            lease_ns,
            records: seg.records(),
            overflow: seg.level_ring(queue, levels, 0).ok_or_else(|| corrupt("no overflow ring"))?,
            wait: seg.waker(queue).ok_or_else(|| corrupt("no wait word"))?,
            limits: seg.queue_limits(queue).ok_or_else(|| corrupt("no limit words"))?,
            slots: seg
                .metrics_blocks(queue)
                .and_then(|b| b.get(..seg.config().process_slots as usize))
                .ok_or_else(|| corrupt("no metrics blocks"))?,
            levels,
            seg,
        })
    }

    /// The overflow ring of level `level` (level 0's is `overflow`).
    fn ring(&self, level: u32) -> Result<OverflowRef<'a>, RingError> {
        if level == 0 {
            return Ok(self.overflow);
        }
        self.seg
            .level_ring(self.queue, self.levels, level)
            .ok_or_else(|| RingError::Corrupt(format!("queue {} has no ring for level {level}", self.queue)))
    }

    /// Marks `level`'s hint after a job was indexed there, on a queue of several levels.
    #[inline]
    fn mark(&self, level: u32) {
        if self.levels > 1 {
            if let Some(h) = self.seg.hints(self.queue) {
                crate::levels::mark(h, level);
            }
        }
    }

    /// Indexes `Queued` record `index` on the ring of its level: a give-back's re-queue.
    fn requeue_index(&self, index: u32) -> Result<(), RingError> {
        if self.levels == 1 {
            return self.overflow.push(index);
        }
        self.seg.index_at_level(self.queue, index)
    }

    /// Counts one `c` for process slot `me` (on its own block: no other process writes it).
    #[inline(always)]
    fn count(&self, me: u32, c: Counter) {
        self.add(me, c, 1);
    }

    /// Adds `n` to `c` for process slot `me` (a batch's claims or acks, counted once).
    #[inline(always)]
    fn add(&self, me: u32, c: Counter, n: u64) {
        if n == 0 {
            return;
        }
        crate::metrics::add(self.slots.get(me as usize), c, n);
    }

    /// Claims the job a deque slot word names. `None`: stale, duplicate or garbage handle.
    #[inline]
    fn claim_word(&self, word: u64, me: u32) -> Option<ClaimedJob<'_>> {
        let h = JobHandle::from_word(word)?;
        // The claim loads the state word, then CASes it, then the payload is read: fetch
        // the header for writing and the payload together, one transfer each, overlapped.
        self.records.prefetch_for_claim(h.index);
        self.claim(h.index, Some(h.generation), me)
    }

    /// Claims record `index` if it is `Queued` for this queue (at `generation`, when given).
    // Always: returned through memory, the job costs a store-forwarding stall (see
    // `Owner::pop`); `#[inline]` alone once left it out of the thief's steal, and steal +
    // payload + ack went from 50 to 58 ns on one core (benches/results/).
    #[inline(always)]
    fn claim(&self, index: u32, generation: Option<u32>, me: u32) -> Option<ClaimedJob<'_>> {
        let (hdr, g) = self.claim_cas(index, generation, me)?;
        // Counted right after the CAS, before the deadline: the count is what tells the
        // daemon's scan that a claim was made (`activity`), also of a claimer stopped before
        // it stores its deadline.
        self.count(me, Counter::Claimed);
        Some(self.claimed(hdr, index, g, me, self.lease_deadline()))
    }

    /// The lease deadline a claim made now gets (0: the queue has no lease).
    #[inline]
    fn lease_deadline(&self) -> u64 {
        if self.lease_ns == 0 {
            0
        } else {
            monotonic_ns().saturating_add(self.lease_ns)
        }
    }

    /// [`claim`](Self::claim) without the `Claimed` count, with the lease `deadline` given
    /// (a batch reads the clock and counts once for all its claims). The claim CAS is the same.
    fn claim_uncounted(
        &self,
        index: u32,
        generation: Option<u32>,
        me: u32,
        deadline: u64,
    ) -> Option<ClaimedJob<'_>> {
        let (hdr, g) = self.claim_cas(index, generation, me)?;
        Some(self.claimed(hdr, index, g, me, deadline))
    }

    /// The claim CAS `Queued(g) -> Claimed(g, me)` of record `index` if it is `Queued` for
    /// this queue (at `generation`, when given): its header and generation.
    #[inline(always)]
    fn claim_cas(&self, index: u32, generation: Option<u32>, me: u32) -> Option<(&RecordHeader, u32)> {
        let hdr = self.records.header(index)?;
        let st = self.records.state(index)?;
        let w = st.load();
        if w.state() != Some(State::Queued) || generation.is_some_and(|g| g != w.generation()) {
            return None;
        }
        // The queue field was written while Filling and published with the state word we
        // just loaded (Acquire); if the record moves on, the CAS below fails.
        if hdr.queue.load(Ordering::Relaxed) != self.queue {
            return None;
        }
        st.claim(w.generation(), me).ok()?;
        Some((hdr, w.generation()))
    }

    /// A claim just won: stores its lease `deadline` and makes the job.
    #[inline(always)]
    fn claimed(
        &self,
        hdr: &RecordHeader,
        index: u32,
        generation: u32,
        me: u32,
        deadline: u64,
    ) -> ClaimedJob<'_> {
        crate::fail_point!("claim.after_cas");
        // Relaxed: every give-back (nack, fail, recovery, lease expiry, requeue of a dead
        // letter) clears the deadline before its Release CAS, and our claim CAS continues that
        // release sequence, so a lease scan that sees `Claimed(g, me)` reads 0 or this value,
        // never a deadline of an earlier claim.
        hdr.deadline_ns.store(deadline, Ordering::Relaxed);
        ClaimedJob {
            deadline: std::cell::Cell::new(deadline),
            ctx: self,
            handle: std::cell::Cell::new(JobHandle { index, generation }),
            me,
            done: false,
        }
    }

    /// The job of a claim already won (its deadline stored), made again from its words.
    #[inline(always)]
    fn job(&self, handle: JobHandle, me: u32, deadline: u64) -> ClaimedJob<'_> {
        ClaimedJob {
            deadline: std::cell::Cell::new(deadline),
            ctx: self,
            handle: std::cell::Cell::new(handle),
            me,
            done: false,
        }
    }

    /// The gate before handles are taken off an index, for up to `want` takes: `None` when
    /// the queue is paused (`segment::flow`), at its concurrency limit (`segment::running`)
    /// or out of rate tokens (`segment::rate`), so its jobs stay where they are; else the
    /// [`Pass`] of how many may be taken and what each holds, which
    /// [`leave_unused`](Self::leave_unused) gives back for takes that found nothing. Without
    /// a limit, two loads of one line that only the daemon writes, and rarely. `empty`: whether
    /// the indices the take would look at are empty now, asked only of a rated queue.
    #[inline(always)]
    fn enter(&self, want: usize, empty: impl FnOnce() -> bool) -> Option<Pass> {
        let flow = self.wait.flow.load(Ordering::Relaxed);
        let max = self.wait.limit.0.load(Ordering::Relaxed);
        if flow == 0 && max == 0 {
            return Some(Pass { n: want, slots: false, tokens: None });
        }
        self.enter_limited(want, empty)
    }

    /// [`enter`](Self::enter) for a queue with a flow bit or a concurrency limit: tokens
    /// first (they go back only to an unmoved bucket), then one slot per take. A rated queue
    /// whose indices look empty takes no token: a token given back can be lost to a racing
    /// take (`segment::rate`), and consumers looking at an idle queue would spend its burst.
    #[inline(never)]
    fn enter_limited(&self, want: usize, empty: impl FnOnce() -> bool) -> Option<Pass> {
        // Acquire: pairs with the daemon's store of the bit, which follows the rate words.
        let flow = self.wait.flow.load(Ordering::Acquire);
        if flow & crate::layout::FLOW_PAUSED != 0 {
            return None;
        }
        let mut tokens = None;
        let mut n = want;
        if flow & crate::layout::FLOW_RATED != 0 {
            if empty() {
                return None;
            }
            let t = Rate::take(self.wait.rate, want, monotonic_ns()).ok()?;
            n = t.count;
            tokens = Some(t);
        }
        let (max, running) = self.wait.limit;
        let max = max.load(Ordering::Relaxed);
        if max == 0 {
            return Some(Pass { n, slots: false, tokens });
        }
        let mut slots = 0;
        while slots < n && Running::take(running, max) {
            slots += 1;
        }
        let tokens = tokens.map(|t| Rate::give_back(self.wait.rate, t, n - slots, monotonic_ns));
        (slots > 0).then_some(Pass { n: slots, slots: true, tokens })
    }

    /// Gives back what `pass` held for the takes beyond the `used` that found a job.
    #[inline(always)]
    fn leave_unused(&self, pass: Pass, used: usize) {
        if pass.slots || pass.tokens.is_some() {
            self.leave_held(pass, pass.n.saturating_sub(used));
        }
    }

    #[cold]
    fn leave_held(&self, pass: Pass, unused: usize) {
        if let Some(t) = pass.tokens {
            Rate::give_back(self.wait.rate, t, unused, monotonic_ns);
        }
        if pass.slots {
            self.leave(unused);
        }
    }

    /// Runs `take` behind the gate ([`enter`](Self::enter)): nothing when the queue is
    /// closed; what the take held goes back when it found nothing.
    #[inline(always)]
    fn gated<T, E>(
        &self,
        empty: impl FnOnce() -> bool,
        take: impl FnOnce() -> Result<Option<T>, E>,
    ) -> Result<Option<T>, E> {
        let Some(pass) = self.enter(1, empty) else { return Ok(None) };
        let r = take();
        if !matches!(r, Ok(Some(_))) {
            self.leave_unused(pass, 0);
        }
        r
    }

    /// Gives back `n` slots a take held and did not use, waking a sleeper for each.
    #[cold]
    fn leave(&self, n: usize) {
        for _ in 0..n {
            Running::give(self.wait.limit.1);
            crate::wait::notify(self.wait);
        }
    }

    /// A claim of this queue was settled by its holder (acked, given back, dead-lettered,
    /// delayed): its slot goes back if the queue has a limit, and wakes one sleeper.
    #[inline(always)]
    fn settled(&self) {
        if self.wait.limit.0.load(Ordering::Relaxed) != 0 {
            self.leave(1);
        }
    }

    fn pop_overflow(&self, me: u32) -> Result<Option<ClaimedJob<'_>>, RingError> {
        self.pop_ring(&self.overflow, me)
    }

    /// Takes a job from `ring` (one of this queue's level rings).
    #[inline]
    fn pop_ring(&self, ring: &OverflowRef<'_>, me: u32) -> Result<Option<ClaimedJob<'_>>, RingError> {
        while let Some(i) = ring.pop()? {
            if let Some(j) = self.claim(i, None, me) {
                return Ok(Some(j));
            }
        }
        Ok(None)
    }
}

/// Extends a borrow of the segment to `'static` for a view stored beside the `Arc` that
/// keeps the segment alive.
///
/// # Safety
/// The returned reference must not outlive `seg`'s `Arc` clone stored in the same struct, and
/// must not escape it with the `'static` lifetime.
unsafe fn extend(seg: &Arc<Segment>) -> &'static Segment {
    // SAFETY: the Segment lives inside the Arc's allocation, which does not move and lives
    // as long as any clone of the Arc; see the contract for the lifetime.
    unsafe { &*Arc::as_ptr(seg) }
}
