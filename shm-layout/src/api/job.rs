//! [`ClaimedJob`]: a job this process holds, until it acks, nacks, fails or releases it.
//!
//! - Every action is a CAS from `Claimed(generation, me)`: a claim taken back meanwhile (lease
//!   expiry, recovery) makes it fail with a [`JobError`], never touch the next holder's job.
//! - Dropping an unsettled job nacks it, so a panic in the job's code re-queues the job.

use super::{JobError, QueueCtx};
use crate::metrics::Counter;
use crate::overflow::RingError;
use crate::record::state::{next_generation, JobHandle, State, StateWord, NO_HOLDER};
use crate::segment::monotonic_ns;
use crate::sync::Ordering;

/// A job this process has claimed: run it, then [`ack`](Self::ack) or [`nack`](Self::nack).
/// Dropped without either, it is nacked (so a panic in the job's code re-queues it).
#[derive(Debug)]
pub struct ClaimedJob<'q> {
    pub(super) ctx: &'q QueueCtx<'q>,
    /// Our lease deadline, CLOCK_MONOTONIC ns (0: none).
    pub(super) deadline: std::cell::Cell<u64>,
    /// `(index, generation)` of our claim; the generation moves on when we extend the lease.
    pub(super) handle: std::cell::Cell<JobHandle>,
    pub(super) me: u32,
    pub(super) done: bool,
}

impl ClaimedJob<'_> {
    /// `(record index, generation)` of the claim; the generation moves on with each
    /// [`extend_lease`](Self::extend_lease).
    pub fn handle(&self) -> JobHandle {
        self.handle.get()
    }

    /// A copy of the payload.
    pub fn payload(&self) -> Result<Vec<u8>, JobError> {
        let mut v = Vec::new();
        self.read_payload(&mut v)?;
        Ok(v)
    }

    /// Appends the payload to `out` (reuse one buffer across jobs).
    #[inline]
    pub fn read_payload(&self, out: &mut Vec<u8>) -> Result<(), JobError> {
        let st = self
            .ctx
            .records
            .state(self.handle.get().index)
            .ok_or_else(|| JobError::Corrupt("record out of range".into()))?;
        let ours = StateWord::pack(self.handle.get().generation, State::Claimed, self.me);
        let before = out.len();
        // SAFETY: we hold the record in Claimed(me): our claim CAS succeeded, and only we move
        // it on, except recovery of a dead holder (not us: we run) and lease expiry, which
        // revokes a live holder whose lease ran out. In that case a producer may be rewriting
        // the payload while we copy it; the copy stays inside the record (its length is
        // bounds-checked) and the check below throws it away.
        unsafe { self.ctx.records.read_payload(self.handle.get().index, out) }?;
        // The fence keeps the copy's reads before the re-check (an Acquire load alone orders
        // only what comes after it; as in a seqlock reader), and makes the check see a revoke
        // whose Release preceded a rewrite we might have copied from.
        crate::sync::fence(Ordering::Acquire);
        let now = StateWord(st.0.load(Ordering::Acquire));
        if now != ours {
            out.truncate(before);
            return Err(self.not_held(now.0));
        }
        Ok(())
    }

    /// The job's stable id (the handle it was pushed as), the same at every attempt.
    pub fn id(&self) -> crate::JobId {
        match self.ctx.records.header(self.handle.get().index) {
            Some(h) => crate::dead_letter::job_id(h, self.handle.get().index),
            None => crate::JobId::of_push(self.handle.get()),
        }
    }

    /// Times this job was given back before this claim.
    pub fn attempts(&self) -> u32 {
        self.ctx
            .records
            .header(self.handle.get().index)
            .map(|h| h.attempts.load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    /// When it was queued: CLOCK_MONOTONIC ns at the kernel tick's resolution (1-4 ms; a
    /// job's age, not a latency measurement).
    pub fn enqueued_ns(&self) -> u64 {
        self.ctx
            .records
            .header(self.handle.get().index)
            .map(|h| h.enqueued_ns.load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    /// The claim's lease deadline (CLOCK_MONOTONIC ns), `None` without a lease.
    pub fn lease_deadline_ns(&self) -> Option<u64> {
        Some(self.deadline.get()).filter(|&d| d != 0)
    }

    /// Extends (or sets) the claim's lease to `lease` from now: a heartbeat for a long job.
    /// Fails with `LeaseExpired` / `NotHeld` when the job is no longer ours.
    pub fn extend_lease(&self, lease: std::time::Duration) -> Result<(), JobError> {
        let (Some(st), Some(hdr)) = (
            self.ctx.records.state(self.handle.get().index),
            self.ctx.records.header(self.handle.get().index),
        ) else {
            return Err(JobError::Corrupt("record out of range".into()));
        };
        // Writing(me) while we store the deadline: a revoke cannot slip in between a check
        // and the store and leave our deadline on the record's next claim.
        st.begin_write(self.handle.get().generation, self.me).map_err(|c| self.not_held(c.found.0))?;
        let d = monotonic_ns().saturating_add(lease.as_nanos().min(u64::MAX as u128) as u64);
        // Relaxed: published by end_write's Release.
        hdr.deadline_ns.store(d, Ordering::Relaxed);
        self.deadline.set(d);
        let g = st.end_write(self.handle.get().generation, self.me).map_err(|c| self.not_held(c.found.0))?;
        self.handle.set(JobHandle { index: self.handle.get().index, generation: g });
        Ok(())
    }

    /// Whether the job was cancelled (`xtcq cancel`) while we held it: the daemon took it back
    /// and marked it. `false` while it is still ours, and once its record holds another job
    /// (records are reused; a job no longer ours then fails its ack with
    /// [`JobError::NotHeld`]). A long job may look now and then, and stop.
    pub fn cancelled(&self) -> bool {
        let (Some(st), Some(hdr)) = (
            self.ctx.records.state(self.handle.get().index),
            self.ctx.records.header(self.handle.get().index),
        ) else {
            return false;
        };
        was_cancelled(hdr, st.load(), self.handle.get().generation, self.me)
    }

    pub(super) fn not_held(&self, found: u64) -> JobError {
        let handle = self.handle.get();
        if let Some(hdr) = self.ctx.records.header(handle.index) {
            if was_cancelled(hdr, StateWord(found), handle.generation, self.me) {
                return JobError::Cancelled { handle };
            }
        }
        let d = self.deadline.get();
        if d != 0 && monotonic_ns() >= d {
            return JobError::LeaseExpired { handle: self.handle.get() };
        }
        let w = StateWord(found);
        JobError::NotHeld {
            handle: self.handle.get(),
            found: format!("{:?} generation {} holder {}", w.state(), w.generation(), w.holder()),
        }
    }

    /// Done: frees the record.
    #[inline]
    pub fn ack(mut self) -> Result<(), JobError> {
        self.ack_uncounted()?;
        self.ctx.count(self.me, Counter::Acked);
        Ok(())
    }

    /// The ack's CAS `Claimed(g, me) -> Free(g + 1)` without the `Acked` count (a batch counts
    /// once for all its acks). Settles the job whatever the outcome: a failed CAS means the
    /// job is no longer ours, and there is nothing to give back.
    pub(super) fn ack_uncounted(&mut self) -> Result<(), JobError> {
        self.done = true;
        let st = self
            .ctx
            .records
            .state(self.handle.get().index)
            .ok_or_else(|| JobError::Corrupt("record out of range".into()))?;
        // Read while we hold the job; given back once the ack freed the record, never
        // before: a job re-queued by recovery must keep its payload.
        let block = self.ctx.records.held_block(self.handle.get().index);
        crate::fail_point!("ack.before_cas");
        st.ack(self.handle.get().generation, self.me).map_err(|c| self.not_held(c.found.0))?;
        crate::fail_point!("ack.before_block_release");
        self.ctx.records.release_block(block);
        crate::segment::Held::give_if_limited(self.ctx.limits);
        self.ctx.settled();
        Ok(())
    }

    /// Whether the job is settled (acked or given back).
    pub(super) fn is_settled(&self) -> bool {
        self.done
    }

    /// Failed: re-queues the job (attempt + 1) on the overflow ring, or dead-letters it when
    /// the queue's attempt limit is reached.
    pub fn nack(mut self) -> Result<(), JobError> {
        self.done = true;
        self.give_back(None)
    }

    /// Like [`nack`](Self::nack), recording why (the first
    /// [`LAST_ERROR_BYTES`](crate::dead_letter::LAST_ERROR_BYTES) bytes), which a dead
    /// letter keeps.
    pub fn fail(mut self, reason: &str) -> Result<(), JobError> {
        self.done = true;
        self.give_back(Some(reason))
    }

    /// Gives the job back *without* counting an attempt, for a job this consumer did not run
    /// (it could not hand the payload on, or was told to stop before it finished): re-queued
    /// on the overflow ring, never dead-lettered.
    pub fn release(mut self) -> Result<(), JobError> {
        self.done = true;
        self.give_back_as(None, false)
    }

    /// Failed: like [`fail`](Self::fail) (or [`nack`](Self::nack) without a reason), but the
    /// job waits `delay` before it is in line again (a retry backoff): it is left `Delayed`,
    /// in no index, and the caller must tell the daemon the returned handle (it re-queues
    /// the job once due). `Ok(None)`: the job reached the attempt limit and is a dead letter
    /// now, with nothing to tell.
    pub fn fail_after(
        mut self,
        reason: Option<&str>,
        delay: std::time::Duration,
    ) -> Result<Option<JobHandle>, JobError> {
        self.done = true;
        let due = monotonic_ns().saturating_add(delay.as_nanos().min(u64::MAX as u128) as u64);
        self.give_back_until(reason, true, Some(due))
    }

    pub(super) fn give_back(&self, reason: Option<&str>) -> Result<(), JobError> {
        self.give_back_as(reason, true)
    }

    pub(super) fn give_back_as(&self, reason: Option<&str>, count_attempt: bool) -> Result<(), JobError> {
        self.give_back_until(reason, count_attempt, None).map(|_| ())
    }

    /// Gives the job back: re-queued now (`due_ns` `None`) or `Delayed` until `due_ns`
    /// (returns the delayed job's handle), or dead-lettered at the attempt limit.
    fn give_back_until(
        &self,
        reason: Option<&str>,
        count_attempt: bool,
        due_ns: Option<u64>,
    ) -> Result<Option<JobHandle>, JobError> {
        let idx = self.handle.get().index;
        let (Some(hdr), Some(st)) = (self.ctx.records.header(idx), self.ctx.records.state(idx)) else {
            return Err(JobError::Corrupt("record out of range".into()));
        };
        let g = self.handle.get().generation;
        // Claimed(me) -> Writing(me) first: if lease expiry took the job back, this fails and
        // we write nothing (the header may already be the next claim's, or another job's);
        // once it succeeds, nothing but our own death moves the record until we leave
        // Writing, so the header writes below cannot land on another job.
        st.begin_write(g, self.me).map_err(|c| self.not_held(c.found.0))?;
        crate::fail_point!("give_back.writing");
        if let Some(reason) = reason {
            crate::dead_letter::store_last_error(hdr, reason);
        }
        // Relaxed: published by the Release of the CAS that leaves Writing.
        let attempts = hdr.attempts.load(Ordering::Relaxed).saturating_add(count_attempt as u32);
        hdr.attempts.store(attempts, Ordering::Relaxed);
        // Cleared before the Release CAS that gives the job back: the next claim's CAS
        // continues that release sequence, so a lease scan that Acquires `Claimed(g, next)`
        // reads 0 or the next claim's deadline, never ours (which may have passed while the
        // job waited in line, and would expire the next claim at once).
        hdr.deadline_ns.store(0, Ordering::Relaxed);
        if count_attempt {
            // Counted once the give-back is ours to finish (we hold Writing).
            self.ctx.count(self.me, if reason.is_some() { Counter::Failed } else { Counter::Nacked });
        }
        if count_attempt && self.ctx.max_attempts != 0 && attempts >= self.ctx.max_attempts {
            st.dead_letter_written(g, self.me).map_err(|c| self.not_held(c.found.0))?;
            self.ctx.count(self.me, Counter::Dead);
            self.ctx.settled();
            return Ok(None);
        }
        if let Some(due) = due_ns {
            // Relaxed: published by delay_written's Release. The due time is the time the
            // job joins the line again (see `RecordHeader::enqueued_ns`).
            hdr.enqueued_ns.store(due.max(1), Ordering::Relaxed);
            st.delay_written(g, self.me).map_err(|c| self.not_held(c.found.0))?;
            crate::fail_point!("delay.after_publish");
            self.ctx.settled();
            return Ok(Some(JobHandle { index: idx, generation: next_generation(g) }));
        }
        // State first, then index: a crash in between leaves a Queued, unindexed record,
        // which recovery re-indexes. The other order could leave an index whose claim fails
        // while we still hold the record, and the job would wait for recovery.
        st.requeue_written(g, self.me).map_err(|c| self.not_held(c.found.0))?;
        crate::fail_point!("nack.after_requeue");
        // The ring of the job's level (`levels`), its hint marked.
        match self.ctx.requeue_index(idx) {
            Ok(()) => crate::wait::notify(self.ctx.wait),
            // The job is queued but the ring has no room for its index: the daemon's stray
            // sweep indexes it once there is (`recovery::StraySweep`), so the give-back is
            // done; failing it would tell the caller a queued job was lost.
            Err(RingError::Full) => {}
            Err(source) => {
                self.ctx.settled();
                return Err(JobError::Requeue { handle: self.handle.get(), source });
            }
        }
        self.ctx.settled();
        Ok(None)
    }
}

/// Whether our claim `Claimed(generation, me)`, now seen as `now`, was taken by a cancel: the
/// daemon's revoke left `Claimed(generation, NO_HOLDER)` (its fence under way) or its free
/// `Free(generation + 1)`, and the record carries the cancel mark. Any other word means the
/// record moved on further (or is still ours). The mark is stored after the revoke and before
/// the free's Release (`cancel`): the Acquire load of `now` sees it with the free.
fn was_cancelled(hdr: &crate::layout::RecordHeader, now: StateWord, generation: u32, me: u32) -> bool {
    let revoked = StateWord::pack(generation, State::Claimed, NO_HOLDER);
    let freed = StateWord::pack(next_generation(generation), State::Free, NO_HOLDER);
    now != StateWord::pack(generation, State::Claimed, me)
        && (now == revoked || now == freed)
        && crate::dead_letter::is_cancelled(hdr)
}

impl Drop for ClaimedJob<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.give_back(None);
        }
    }
}
