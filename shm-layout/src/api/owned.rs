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

use super::{ClaimedJob, JobError, QueueCtx};
use crate::record::state::JobHandle;
use crate::segment::Segment;

/// A claimed job that outlives the handle that claimed it. `Send + Sync`; its outcome
/// methods take `self`, so one job is settled once.
#[derive(Debug)]
pub struct OwnedJob {
    seg: Arc<Segment>,
    /// The queue's table index, attempt limit and default lease (ns), as the claim saw them.
    queue: u32,
    max_attempts: u32,
    lease_ns: u64,
    handle: JobHandle,
    /// Our lease deadline, CLOCK_MONOTONIC ns (0: none).
    deadline: u64,
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
            handle: self.handle.get(),
            deadline: self.deadline.get(),
            me: self.me,
            done: false,
        }
    }
}

impl OwnedJob {
    /// Runs `f` on the borrowed claim this job stands for, then takes back what it moved on
    /// (the generation and deadline after an extension). The borrowed claim never nacks on
    /// drop: its outcome is this job's to give.
    fn with_claim<T>(
        &mut self,
        f: impl FnOnce(&ClaimedJob<'_>) -> Result<T, JobError>,
    ) -> Result<T, JobError> {
        // Borrows the segment through the field (no Arc clone: two atomic RMWs a call).
        let ctx = view(&self.seg, self.queue, self.max_attempts, self.lease_ns)?;
        let claim = ClaimedJob {
            ctx: &ctx,
            deadline: Cell::new(self.deadline),
            handle: Cell::new(self.handle),
            me: self.me,
            done: true,
        };
        let out = f(&claim);
        (self.handle, self.deadline) = (claim.handle.get(), claim.deadline.get());
        out
    }

    /// Settles the job with `outcome`, once.
    fn settle<T>(
        mut self,
        outcome: impl FnOnce(ClaimedJob<'_>) -> Result<T, JobError>,
    ) -> Result<T, JobError> {
        self.done = true;
        let ctx = view(&self.seg, self.queue, self.max_attempts, self.lease_ns)?;
        let claim = ClaimedJob {
            ctx: &ctx,
            deadline: Cell::new(self.deadline),
            handle: Cell::new(self.handle),
            me: self.me,
            done: false,
        };
        outcome(claim)
    }

    /// `(record index, generation)` of the claim.
    pub fn handle(&self) -> JobHandle {
        self.handle
    }

    /// The table index of the queue the job belongs to.
    pub fn queue_index(&self) -> u32 {
        self.queue
    }

    /// The segment the job lives in.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    /// The claim's lease deadline (CLOCK_MONOTONIC ns), `None` without a lease.
    pub fn lease_deadline_ns(&self) -> Option<u64> {
        Some(self.deadline).filter(|&d| d != 0)
    }

    /// Appends the payload to `out`; see [`ClaimedJob::read_payload`].
    pub fn read_payload(&mut self, out: &mut Vec<u8>) -> Result<(), JobError> {
        self.with_claim(|c| c.read_payload(out))
    }

    /// A copy of the payload.
    pub fn payload(&mut self) -> Result<Vec<u8>, JobError> {
        self.with_claim(|c| c.payload())
    }

    /// The job's stable id; see [`ClaimedJob::id`].
    pub fn id(&mut self) -> crate::JobId {
        self.with_claim(|c| Ok(c.id())).unwrap_or(crate::JobId { index: 0, birth: 0 })
    }

    /// Times the job was given back before this claim.
    pub fn attempts(&mut self) -> u32 {
        self.with_claim(|c| Ok(c.attempts())).unwrap_or(0)
    }

    /// When it was queued (CLOCK_MONOTONIC ns, tick resolution).
    pub fn enqueued_ns(&mut self) -> u64 {
        self.with_claim(|c| Ok(c.enqueued_ns())).unwrap_or(0)
    }

    /// Sets the lease to `lease` from now; see [`ClaimedJob::extend_lease`].
    pub fn extend_lease(&mut self, lease: Duration) -> Result<(), JobError> {
        self.with_claim(|c| c.extend_lease(lease))
    }

    /// Done: frees the record.
    pub fn ack(self) -> Result<(), JobError> {
        self.settle(|c| c.ack())
    }

    /// Failed: re-queued (attempt + 1), or dead-lettered at the queue's limit.
    pub fn nack(self) -> Result<(), JobError> {
        self.settle(|c| c.nack())
    }

    /// Like [`nack`](Self::nack), keeping `reason` as the job's last error.
    pub fn fail(self, reason: &str) -> Result<(), JobError> {
        self.settle(|c| c.fail(reason))
    }

    /// Not run after all: re-queued without counting an attempt.
    pub fn release(self) -> Result<(), JobError> {
        self.settle(|c| c.release())
    }

    /// Failed, to be retried after `delay` (see [`ClaimedJob::fail_after`]): the handle of
    /// the `Delayed` job to tell the daemon, `None` when it became a dead letter.
    pub fn fail_after(self, reason: Option<&str>, delay: Duration) -> Result<Option<JobHandle>, JobError> {
        self.settle(|c| c.fail_after(reason, delay))
    }
}

/// A fresh view of queue `queue` in `seg` (offsets only; no system call).
fn view(seg: &Segment, queue: u32, max_attempts: u32, lease_ns: u64) -> Result<QueueCtx<'_>, JobError> {
    QueueCtx::from_parts(seg, queue, max_attempts, lease_ns).map_err(|e| JobError::Corrupt(e.to_string()))
}

impl Drop for OwnedJob {
    fn drop(&mut self) {
        if !self.done {
            self.done = true;
            let _ = self.with_claim(|c| c.give_back(None));
        }
    }
}
