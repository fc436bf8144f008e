//! [`OwnedJob`]: a claimed job that owns what it needs (the segment's `Arc` and the queue's
//! description) instead of borrowing the thief or owner that claimed it, so it can be held
//! by a C handle, a Python object or another thread after that handle is gone.
//!
//! - Every action builds a [`ClaimedJob`] over a fresh view of the queue and calls it, so the
//!   state machine, its fences and its fail points stay in one place; an owned job is only a
//!   claim kept in a place with a longer life.
//! - A stale owned job (its lease expired, the record was recovered and re-claimed) acts on
//!   nothing: the claim's `(index, generation, holder)` is checked by the record's state
//!   word at each step, exactly as for a borrowed claim.
//! - Dropped without an outcome, it is nacked, as a [`ClaimedJob`] is.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use super::{Claim, ClaimedJob, JobError, QueueCtx};
use crate::record::state::{JobHandle, JobId};
use crate::segment::Segment;
use crate::sync::{AtomicU64, Ordering};

/// A claimed job that outlives the handle that claimed it. `Send + Sync`; its operations
/// are those of [`Claim`] (import the trait to call them): reads and lease extensions take
/// `&self`, outcomes take `self`, so one job is settled once.
#[derive(Debug)]
pub struct OwnedJob {
    seg: Arc<Segment>,
    /// The queue's table index, attempt limit and default lease (ns), as the claim saw them.
    queue: u32,
    max_attempts: u32,
    lease_ns: u64,
    /// The claim's handle ([`JobHandle::to_word`]) and lease deadline (CLOCK_MONOTONIC ns, 0:
    /// none): the copies a lease extension moves on. Atomics so that `&self` may extend: the
    /// record's state word decides which of two racing extensions wins, and only the winner
    /// stores here.
    handle: AtomicU64,
    deadline: AtomicU64,
    me: u32,
    done: bool,
}

impl ClaimedJob<'_> {
    /// This claim as an [`OwnedJob`] over `seg` (the segment the claiming handle mapped): the
    /// borrow ends, the claim does not.
    pub fn into_owned(mut self, seg: Arc<Segment>) -> OwnedJob {
        self.done = true;
        OwnedJob {
            queue: self.ctx.queue,
            max_attempts: self.ctx.max_attempts,
            lease_ns: self.ctx.lease_ns,
            seg,
            handle: AtomicU64::new(self.handle.get().to_word()),
            deadline: AtomicU64::new(self.deadline.get()),
            me: self.me,
            done: false,
        }
    }
}

impl OwnedJob {
    /// The claim's handle as last stored.
    fn current(&self) -> JobHandle {
        // Relaxed: a copy of our own claim; the state word is what every action checks.
        JobHandle::from_word(self.handle.load(Ordering::Relaxed))
            .unwrap_or(JobHandle { index: 0, generation: 0 })
    }

    /// Runs `f` on the borrowed claim this job stands for (which never nacks on drop: its
    /// outcome is this job's to give). A read that lost a race with another thread's lease
    /// extension (it checked the old generation) runs again with the new one.
    fn with_claim<T>(
        &self,
        mut f: impl FnMut(&ClaimedJob<'_>) -> Result<T, JobError>,
    ) -> Result<T, JobError> {
        // Borrows the segment through the field (no Arc clone: two atomic RMWs a call).
        let ctx = view(&self.seg, self.queue, self.max_attempts, self.lease_ns)?;
        loop {
            let handle = self.current();
            let claim = self.claim(&ctx, handle, true);
            let out = f(&claim);
            if out.is_ok() || self.current() == handle {
                return out;
            }
        }
    }

    /// The borrowed claim over `ctx`; `done` says whether its drop leaves the job alone.
    fn claim<'c>(&self, ctx: &'c QueueCtx<'c>, handle: JobHandle, done: bool) -> ClaimedJob<'c> {
        ClaimedJob {
            ctx,
            deadline: Cell::new(self.deadline.load(Ordering::Relaxed)),
            handle: Cell::new(handle),
            me: self.me,
            done,
        }
    }

    /// Settles the job with `outcome`, once.
    fn settle<T>(
        mut self,
        outcome: impl FnOnce(ClaimedJob<'_>) -> Result<T, JobError>,
    ) -> Result<T, JobError> {
        self.done = true;
        let ctx = view(&self.seg, self.queue, self.max_attempts, self.lease_ns)?;
        outcome(self.claim(&ctx, self.current(), false))
    }

    /// The table index of the queue the job belongs to.
    pub fn queue_index(&self) -> u32 {
        self.queue
    }

    /// The segment the job lives in.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }
}

impl Claim for OwnedJob {
    fn handle(&self) -> JobHandle {
        self.current()
    }

    fn id(&self) -> JobId {
        self.with_claim(|c| Ok(c.id())).unwrap_or(JobId { index: 0, birth: 0 })
    }

    fn attempts(&self) -> u32 {
        self.with_claim(|c| Ok(c.attempts())).unwrap_or(0)
    }

    fn enqueued_ns(&self) -> u64 {
        self.with_claim(|c| Ok(c.enqueued_ns())).unwrap_or(0)
    }

    fn lease_deadline_ns(&self) -> Option<u64> {
        Some(self.deadline.load(Ordering::Relaxed)).filter(|&d| d != 0)
    }

    fn cancelled(&self) -> bool {
        self.with_claim(|c| Ok(c.cancelled())).unwrap_or(false)
    }

    fn read_payload(&self, out: &mut Vec<u8>) -> Result<(), JobError> {
        self.with_claim(|c| c.read_payload(out))
    }

    fn extend_lease(&self, lease: Duration) -> Result<(), JobError> {
        let ctx = view(&self.seg, self.queue, self.max_attempts, self.lease_ns)?;
        let claim = self.claim(&ctx, self.current(), true);
        claim.extend_lease(lease)?;
        // Only the extension whose CAS won gets here: the deadline first, so that a reader
        // of the new handle finds a deadline at least as new.
        self.deadline.store(claim.deadline.get(), Ordering::Relaxed);
        self.handle.store(claim.handle.get().to_word(), Ordering::Relaxed);
        Ok(())
    }

    fn ack(self) -> Result<(), JobError> {
        self.settle(|c| c.ack())
    }

    fn nack(self) -> Result<(), JobError> {
        self.settle(|c| c.nack())
    }

    fn fail(self, reason: &str) -> Result<(), JobError> {
        self.settle(|c| c.fail(reason))
    }

    fn release(self) -> Result<(), JobError> {
        self.settle(|c| c.release())
    }

    fn fail_after(self, reason: Option<&str>, delay: Duration) -> Result<Option<JobHandle>, JobError> {
        self.settle(|c| c.fail_after(reason, delay))
    }
}

/// A fresh view of queue `queue` in `seg` (offsets only; no system call).
fn view(seg: &Segment, queue: u32, max_attempts: u32, lease_ns: u64) -> Result<QueueCtx<'_>, JobError> {
    let levels = seg
        .ring_levels(queue)
        .ok_or_else(|| JobError::Corrupt(format!("queue {queue}: its level count is garbage")))?;
    QueueCtx::from_parts(seg, queue, max_attempts, lease_ns, levels)
        .map_err(|e| JobError::Corrupt(e.to_string()))
}

impl Drop for OwnedJob {
    fn drop(&mut self) {
        if !self.done {
            self.done = true;
            let ctx = match view(&self.seg, self.queue, self.max_attempts, self.lease_ns) {
                Ok(ctx) => ctx,
                Err(_) => return,
            };
            let _ = self.claim(&ctx, self.current(), true).give_back(None);
        }
    }
}
