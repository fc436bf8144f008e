//! [`ClaimedBatch`]: the jobs one batch steal claimed, settled together.
//!
//! - Every job in a batch was claimed by its own CAS `Queued(g) -> Claimed(g, me)`, exactly as
//!   a single steal claims: the claim stays the one arbiter of who runs a job, and a stale or
//!   duplicated handle fails it and is left out of the batch.
//! - Every ack is its own CAS `Claimed(g, me) -> Free(g + 1)`; what a batch saves is the
//!   rest: the `Claimed` and `Acked` counters move once per batch, the clock is read once for
//!   the lease deadlines, and the buffers are reused from batch to batch.
//! - A job left unsettled is nacked when the batch is cleared, refilled or dropped, as a
//!   dropped [`ClaimedJob`] is; counts not yet added are added then.
//! - A crash while holding a batch: its claimed jobs are `Claimed(me)` records that recovery
//!   gives back like any other; handles stolen and not yet claimed name `Queued` records in no
//!   index, which recovery's orphan scan and the daemon's stray sweep index again.

use super::{ClaimedJob, JobError, QueueCtx};
use crate::metrics::Counter;
use crate::record::state::JobHandle;

/// The jobs a batch steal claimed (see [`Thief::steal_batch_claimed`](super::Thief::steal_batch_claimed)):
/// run them in order, then [`ack_all`](Self::ack_all). Reuse one batch across steals.
///
/// ```
/// use std::sync::Arc;
/// use xtcq_shm::{ClaimedBatch, Flavor, Owner, QueueSpec, Segment, SegmentConfig, Thief};
/// let dir = tempfile::tempdir()?;
/// let config = SegmentConfig::small().with_queues(1, 1).with_records(64);
/// let seg = Arc::new(Segment::create(&dir.path().join("segment"), &config, 0o600)?);
/// let mut spec = QueueSpec::new("jobs");
/// spec.flavor = Flavor::Fifo;
/// let queue = seg.create_queue(&spec)?;
/// let owner = Owner::new(seg.clone(), &queue, 0, 0)?;
/// for p in [b"a", b"b", b"c", b"d"] {
///     owner.push(p)?;
/// }
/// let thief = Thief::new(seg.clone(), &queue, 1)?;
/// let mut batch = ClaimedBatch::new();
/// assert_eq!(thief.steal_batch_claimed(2, &mut batch)?, 2); // the two oldest
/// let mut buf = Vec::new();
/// for i in 0..batch.len() {
///     buf.clear();
///     batch.read_payload(i, &mut buf)?;
/// }
/// assert_eq!(buf, b"b");
/// assert_eq!(batch.ack_all()?, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct ClaimedBatch<'q> {
    jobs: Vec<ClaimedJob<'q>>,
    /// Acks done by [`ack`](Self::ack) and not yet added to the `Acked` counter.
    acked_uncounted: u64,
}

impl<'q> ClaimedBatch<'q> {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Jobs in the batch, settled ones included (until the next clear or refill).
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Job `i`, for its handle, id, attempts or lease. `None` out of range.
    pub fn get(&self, i: usize) -> Option<&ClaimedJob<'q>> {
        self.jobs.get(i)
    }

    /// The jobs, oldest first.
    pub fn jobs(&self) -> &[ClaimedJob<'q>] {
        &self.jobs
    }

    /// Appends job `i`'s payload to `out`, after starting the transfer of job `i + 1`'s, so
    /// that the next job's payload line travels while this one runs.
    pub fn read_payload(&self, i: usize, out: &mut Vec<u8>) -> Result<(), JobError> {
        if let Some(next) = self.jobs.get(i + 1) {
            next.ctx.records.prefetch_for_claim(next.handle.get().index);
        }
        self.job(i)?.read_payload(out)
    }

    fn job(&self, i: usize) -> Result<&ClaimedJob<'q>, JobError> {
        self.jobs
            .get(i)
            .ok_or_else(|| JobError::Corrupt(format!("job {i} of a batch of {} asked for", self.jobs.len())))
    }

    fn job_mut(&mut self, i: usize) -> Result<&mut ClaimedJob<'q>, JobError> {
        let n = self.jobs.len();
        self.jobs.get_mut(i).ok_or_else(|| JobError::Corrupt(format!("job {i} of a batch of {n} asked for")))
    }

    /// Acks job `i` (its own CAS); the `Acked` count waits for the end of the batch.
    /// Acking a settled job fails with `NotHeld`.
    pub fn ack(&mut self, i: usize) -> Result<(), JobError> {
        let j = self.job_mut(i)?;
        if j.is_settled() {
            return Err(settled(j));
        }
        j.ack_uncounted()?;
        self.acked_uncounted += 1;
        Ok(())
    }

    /// Nacks job `i` (re-queued, attempt + 1), as [`ClaimedJob::nack`].
    pub fn nack(&mut self, i: usize) -> Result<(), JobError> {
        self.give_back(i, None, true)
    }

    /// Fails job `i` with a reason, as [`ClaimedJob::fail`].
    pub fn fail(&mut self, i: usize, reason: &str) -> Result<(), JobError> {
        self.give_back(i, Some(reason), true)
    }

    /// Gives job `i` back without counting an attempt, as [`ClaimedJob::release`].
    pub fn release(&mut self, i: usize) -> Result<(), JobError> {
        self.give_back(i, None, false)
    }

    fn give_back(&mut self, i: usize, reason: Option<&str>, count_attempt: bool) -> Result<(), JobError> {
        let j = self.job_mut(i)?;
        if j.is_settled() {
            return Err(settled(j));
        }
        j.done = true;
        j.give_back_as(reason, count_attempt)
    }

    /// Acks every job not yet settled, each with its own CAS, and adds the batch's acks to
    /// the `Acked` counter once; empties the batch. Returns how many this call acked. A job
    /// no longer ours (its lease expired) is skipped and the first such error returned, after
    /// the others are acked.
    pub fn ack_all(&mut self) -> Result<usize, JobError> {
        let mut n = 0;
        let mut first_err = None;
        for j in self.jobs.iter_mut() {
            if j.is_settled() {
                continue;
            }
            if n == 1 {
                // One of the batch acked, the rest still claimed (once per call, so that a
                // test knows which).
                crate::fail_point!("ack_batch.mid");
            }
            match j.ack_uncounted() {
                Ok(()) => n += 1,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        self.acked_uncounted += n as u64;
        self.clear();
        first_err.map_or(Ok(n), Err)
    }

    /// Nacks every job not yet settled (as dropping them does), adds the counts not yet
    /// added, and empties the batch for the next steal.
    pub fn clear(&mut self) {
        self.flush_counts();
        // Dropping an unsettled `ClaimedJob` nacks it.
        self.jobs.clear();
    }

    /// The handles of the jobs, oldest first.
    pub fn handles(&self) -> impl Iterator<Item = JobHandle> + '_ {
        self.jobs.iter().map(|j| j.handle())
    }

    /// Adds the batch's deferred `Acked` count to the holder's counter block.
    fn flush_counts(&mut self) {
        if self.acked_uncounted != 0 {
            if let Some(j) = self.jobs.first() {
                j.ctx.add(j.me, Counter::Acked, self.acked_uncounted);
            }
            self.acked_uncounted = 0;
        }
    }

    /// The jobs, for a steal to append to (after [`clear`](Self::clear)).
    pub(super) fn jobs_mut(&mut self) -> &mut Vec<ClaimedJob<'q>> {
        &mut self.jobs
    }

    /// Appends a job claimed elsewhere (the overflow ring: already counted).
    pub(super) fn push_claimed(&mut self, j: ClaimedJob<'q>) {
        self.jobs.push(j);
    }

    /// Moves the jobs out, to be settled one by one; the deferred counts are added first.
    pub fn into_jobs(mut self) -> Vec<ClaimedJob<'q>> {
        self.flush_counts();
        std::mem::take(&mut self.jobs)
    }
}

/// Claims the handles `words` (one batch steal's) into `out`, prefetching every record first
/// so that the transfers overlap; stale, duplicated or garbage handles fail their claim and
/// are left out. Reads the clock and counts the claims once. Returns how many were claimed.
pub(super) fn claim_words_into<'q>(
    ctx: &'q QueueCtx<'q>,
    words: &[u64],
    me: u32,
    out: &mut Vec<ClaimedJob<'q>>,
) -> usize {
    for h in words.iter().filter_map(|&w| JobHandle::from_word(w)) {
        ctx.records.prefetch_for_claim(h.index);
    }
    let deadline = ctx.lease_deadline();
    let before = out.len();
    out.extend(words.iter().filter_map(|&w| {
        let h = JobHandle::from_word(w)?;
        ctx.claim_uncounted(h.index, Some(h.generation), me, deadline)
    }));
    let n = out.len() - before;
    ctx.add(me, Counter::Claimed, n as u64);
    n
}

/// The error for a job of a batch that was already acked or given back.
fn settled(j: &ClaimedJob<'_>) -> JobError {
    JobError::NotHeld { handle: j.handle(), found: "already acked or given back from this batch".into() }
}

impl Drop for ClaimedBatch<'_> {
    fn drop(&mut self) {
        self.clear();
    }
}
