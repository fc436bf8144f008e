//! Batches: [`ThiefHandle::steal_into`] fills a [`JobBatch`] with up to N claimed jobs taken
//! with one steal, and [`JobBatch::ack_all`] settles them together; on the producer's side
//! [`OwnerHandle::push_batch`] queues up to N jobs with one store of the deque's `bottom`.
//!
//! - Each job of a batch is claimed and acked by its own CAS on its record, exactly as a
//!   single steal's job is: a stale or duplicated handle fails its claim and is left out.
//! - What a batch saves: one CAS on the deque's `top` for the whole batch (FIFO queues), one
//!   handle check, one clock read and one update of each counter per batch, and no
//!   allocation once the batch's buffer has grown.
//! - A job left unsettled is nacked when the batch is refilled, cleared or dropped; in a
//!   forked child ([`crate::fork`]) nothing is: every call fails with `Error::Forked` and
//!   the drop leaks the parent's claims.
//! - A pushed batch is published record by record as single pushes are; only the deque
//!   sees it at once (a thief sees none of it or all of it). A producer killed before that
//!   store leaves queued records in no index, which the daemon's stray scan indexes.

use std::sync::Arc;

use xtcq_shm::{ClaimedBatch, JobHandle, JobId, Segment};

use crate::conn::Conn;
use crate::handles::{overflow_ring_error, usable, OwnerHandle, ThiefHandle};
use crate::job::Job;
use crate::Error;
use xtcq_shm::fork::Held;

/// Claimed jobs from one batch steal: run them by index, then [`ack_all`](Self::ack_all).
/// Keep one batch and refill it with [`ThiefHandle::steal_into`]: its buffer is reused.
#[derive(Default)]
pub struct JobBatch<'a> {
    inner: Held<ClaimedBatch<'a>>,
    /// The handle that filled it: what [`into_jobs`](Self::into_jobs) needs.
    from: Option<(&'a Arc<Segment>, &'a Arc<Conn>)>,
}

impl std::fmt::Debug for JobBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobBatch")
            .field("jobs", &self.inner.unchecked().handles().collect::<Vec<_>>())
            .finish()
    }
}

impl<'a> JobBatch<'a> {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Jobs in the batch, settled ones included, until the next refill or clear.
    pub fn len(&self) -> usize {
        self.inner.unchecked().len()
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.inner.unchecked().is_empty()
    }

    /// Appends job `i`'s payload to `out`; starts moving job `i + 1`'s payload meanwhile.
    pub fn read_payload(&self, i: usize, out: &mut Vec<u8>) -> Result<(), Error> {
        Ok(self.inner.get().ok_or(Error::Forked)?.read_payload(i, out)?)
    }

    /// A copy of job `i`'s payload.
    pub fn payload(&self, i: usize) -> Result<Vec<u8>, Error> {
        let mut v = Vec::new();
        self.read_payload(i, &mut v)?;
        Ok(v)
    }

    /// Job `i`'s `(record index, generation)`; `None` out of range.
    pub fn handle(&self, i: usize) -> Option<JobHandle> {
        self.inner.unchecked().get(i).map(|j| j.handle())
    }

    /// Job `i`'s stable id; `None` out of range.
    pub fn id(&self, i: usize) -> Option<JobId> {
        self.inner.unchecked().get(i).map(|j| j.id())
    }

    /// Times job `i` was given back before this claim; `None` out of range.
    pub fn attempts(&self, i: usize) -> Option<u32> {
        self.inner.unchecked().get(i).map(|j| j.attempts())
    }

    /// Acks job `i` now (its counter is updated with the batch's).
    pub fn ack(&mut self, i: usize) -> Result<(), Error> {
        Ok(self.inner.get_mut().ok_or(Error::Forked)?.ack(i)?)
    }

    /// Nacks job `i`: re-queued, attempt + 1 (dead-lettered at the queue's limit).
    pub fn nack(&mut self, i: usize) -> Result<(), Error> {
        Ok(self.inner.get_mut().ok_or(Error::Forked)?.nack(i)?)
    }

    /// Like [`nack`](Self::nack), keeping `reason` as the job's last error.
    pub fn fail(&mut self, i: usize, reason: &str) -> Result<(), Error> {
        Ok(self.inner.get_mut().ok_or(Error::Forked)?.fail(i, reason)?)
    }

    /// Gives job `i` back without counting an attempt.
    pub fn release(&mut self, i: usize) -> Result<(), Error> {
        Ok(self.inner.get_mut().ok_or(Error::Forked)?.release(i)?)
    }

    /// Acks every job not yet settled and empties the batch; the counters move once.
    /// Returns how many were acked. A job no longer ours (lease expired) is skipped, and the
    /// first such error returned once the others are acked.
    pub fn ack_all(&mut self) -> Result<usize, Error> {
        Ok(self.inner.get_mut().ok_or(Error::Forked)?.ack_all()?)
    }

    /// Nacks the jobs not yet settled and empties the batch.
    /// Does nothing in a forked child (the jobs are the parent's).
    pub fn clear(&mut self) {
        if let Some(b) = self.inner.get_mut() {
            b.clear();
        }
    }

    /// The jobs as single [`Job`]s, to settle one by one. None in a forked child.
    pub fn into_jobs(self) -> Vec<Job<'a>> {
        match self.from {
            Some((seg, conn)) => match self.inner.take() {
                Some(b) => b.into_jobs().into_iter().map(Job::new(seg, conn)).collect(),
                None => Vec::new(),
            },
            // Never filled: nothing in it.
            None => Vec::new(),
        }
    }
}

impl ThiefHandle {
    /// Refills `batch` with up to `limit` (at most 128) claimed jobs: from the overflow ring
    /// while it has any, else what one deque holds (up to `limit`), taken with one CAS on its `top` (FIFO
    /// queues; a LIFO deque's owner pops without a CAS, so there each job is its own CAS).
    /// Jobs left unsettled in `batch` are nacked first. `Ok(0)` when the queue looked empty,
    /// or `limit` is 0.
    pub fn steal_into<'s>(&'s self, limit: usize, batch: &mut JobBatch<'s>) -> Result<usize, Error> {
        usable(&self.seg, &self.conn, &self.att, self.lost_at)?;
        batch.from = Some((&self.seg, &self.conn));
        self.thief
            .steal_batch_claimed(limit, batch.inner.get_mut().ok_or(Error::Forked)?)
            .map_err(overflow_ring_error)
    }

    /// Up to `limit` jobs at once, as [`steal_into`](Self::steal_into) takes them, as single
    /// [`Job`]s. Empty when nothing was found.
    pub fn steal_batch(&self, limit: usize) -> Result<Vec<Job<'_>>, Error> {
        let mut batch = JobBatch::new();
        self.steal_into(limit, &mut batch)?;
        Ok(batch.into_jobs())
    }
}

impl OwnerHandle {
    /// Queues the first of `payloads` at once, as many as our deque has room for (at most
    /// 128), with one store of the deque's `bottom` and one wake for all of them. Returns how
    /// many were queued, like a short `write(2)`: fewer than given when the deque filled up
    /// or a job failed after some were queued (the next push then says why); an error only
    /// when none was. Push the rest with [`push`](Self::push), which spills to the overflow
    /// ring, or in a later batch. When the deque is full, do not retry at once in a loop:
    /// each try reads the line every steal CASes, and topping the deque up a slot at a time
    /// writes the line its consumer reads next (a consumer drained about a fifth slower so;
    /// benches/results/2026-12-04.md, "A full deque"). Back off, or spill as below.
    ///
    /// ```no_run
    /// # let client = xtcq_client::Client::connect(None)?;
    /// let owner = client.attach_owner("jobs")?;
    /// let jobs: Vec<Vec<u8>> = (0..100).map(|i| format!("job {i}").into_bytes()).collect();
    /// let mut rest: Vec<&[u8]> = jobs.iter().map(Vec::as_slice).collect();
    /// while !rest.is_empty() {
    ///     let n = owner.push_batch(&rest)?;
    ///     if n == 0 {
    ///         owner.push(rest[0])?; // the deque is full: this one goes to the overflow ring
    ///         rest.remove(0);
    ///     }
    ///     rest.drain(..n);
    /// }
    /// # Ok::<(), xtcq_client::Error>(())
    /// ```
    pub fn push_batch(&self, payloads: &[&[u8]]) -> Result<usize, Error> {
        self.usable()?;
        match self.owner.push_batch(payloads) {
            Ok(n) => Ok(n),
            Err(e) if e.queued > 0 => Ok(e.queued),
            Err(e) => Err(Error::from_push(e.error)),
        }
    }
}
