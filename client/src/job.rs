//! Claimed jobs: [`Job`] borrows the handle that claimed it, [`OwnedJob`] owns what it needs
//! (for another thread, a C handle, a Python object). Both are [`JobOf`], one type whose
//! parameter says what keeps the claim's attachment alive, so each operation is written once.
//!
//! Invariants:
//! - a claim is held in a [`Held`]: in a forked child every operation fails with
//!   [`Error::Forked`] before it touches the segment, and a drop settles nothing (it leaks
//!   the claim rather than nack the parent's job);
//! - a job keeps the control connection (and so its process slot) for as long as it lives,
//!   borrowed from its handle or owned;
//! - reads and [`extend_lease`](JobOf::extend_lease) take `&self`, outcomes take `self`:
//!   what an extension changes (the claim's generation) is decided by a CAS on the record's
//!   state word, not by a unique borrow, so `&self` is as safe and lets an owned job be
//!   shared with a heartbeat thread; one job is settled once.

use std::sync::Arc;
use std::time::Duration;

use xtcq_shm::fork::Held;
use xtcq_shm::{Claim, ClaimedJob, JobHandle, JobId, Segment};

use crate::conn::Conn;
use crate::Error;

/// A job this process has claimed. Run it, then [`ack`](JobOf::ack) it (done) or
/// [`nack`](JobOf::nack) it (re-queued, attempt + 1, dead-lettered at the queue's limit).
/// Dropped without either, it is nacked.
pub type Job<'a> = JobOf<Borrowed<'a>>;

/// A claimed job that owns its claim: made by [`Job::into_owned`]. `Send + Sync`. It keeps
/// the process's control connection (and so its process slot) open while it lives, so its
/// claim stays this process's after the thief or owner handle that took it is dropped. The
/// same checks as [`Job`]: a stale job (lease expired, re-claimed) acks nothing.
pub type OwnedJob = JobOf<Owned>;

/// A claimed job, kept alive by `K`: [`Job`] (`K` = [`Borrowed`]) or [`OwnedJob`]
/// (`K` = [`Owned`]); every operation is the same for both.
pub struct JobOf<K: Keep> {
    pub(crate) inner: Held<K::Claim>,
    keep: K,
}

/// What a [`Job`] borrows from the handle that claimed it.
pub struct Borrowed<'a> {
    /// What [`into_owned`](JobOf::into_owned) needs to outlive the handle.
    seg: &'a Arc<Segment>,
    conn: &'a Arc<Conn>,
}

/// What an [`OwnedJob`] owns: the connection (the claim owns its segment mapping).
pub struct Owned {
    conn: Arc<Conn>,
}

mod sealed {
    /// What keeps a claim's attachment alive, and the engine's claim it keeps.
    pub trait Keep {
        /// The engine's claim.
        type Claim: xtcq_shm::Claim;
        /// The type's name, for `Debug`.
        const NAME: &'static str;
        /// Tells the daemon of a job left `Delayed` by a retry after a delay.
        fn announce(&self, h: xtcq_shm::JobHandle);
    }
}

/// What keeps a claimed job's attachment alive: [`Borrowed`] or [`Owned`] (sealed).
pub trait Keep: sealed::Keep {}

impl<'a> sealed::Keep for Borrowed<'a> {
    type Claim = ClaimedJob<'a>;
    const NAME: &'static str = "Job";
    fn announce(&self, h: JobHandle) {
        crate::delay::announce(self.conn, h);
    }
}
impl Keep for Borrowed<'_> {}

impl sealed::Keep for Owned {
    type Claim = xtcq_shm::OwnedJob;
    const NAME: &'static str = "OwnedJob";
    fn announce(&self, h: JobHandle) {
        crate::delay::announce(&self.conn, h);
    }
}
impl Keep for Owned {}

impl<'a> Job<'a> {
    pub(crate) fn new(seg: &'a Arc<Segment>, conn: &'a Arc<Conn>) -> impl Fn(ClaimedJob<'a>) -> Self {
        move |inner| Self { inner: Held::new(inner, conn.born()), keep: Borrowed { seg, conn } }
    }

    /// This job as an [`OwnedJob`], which no longer borrows the handle that claimed it: keep
    /// it in another thread, a C handle or a Python object, and settle it there.
    pub fn into_owned(self) -> OwnedJob {
        let Borrowed { seg, conn } = self.keep;
        let seg = seg.clone();
        JobOf { inner: self.inner.map(|j| j.into_owned(seg)), keep: Owned { conn: conn.clone() } }
    }
}

impl<K: Keep> std::fmt::Debug for JobOf<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(K::NAME).field("handle", &self.inner.unchecked().handle()).finish()
    }
}

impl<K: Keep> JobOf<K> {
    /// The claim, unless this is a forked child.
    #[inline]
    fn claim(&self) -> Result<&K::Claim, Error> {
        self.inner.get().ok_or(Error::Forked)
    }

    /// The claim, to settle (leaked in a forked child).
    #[inline]
    fn settle(self) -> Result<K::Claim, Error> {
        self.inner.take().ok_or(Error::Forked)
    }

    /// A copy of the payload.
    pub fn payload(&self) -> Result<Vec<u8>, Error> {
        Ok(self.claim()?.payload()?)
    }

    /// Appends the payload to `out` (to reuse one buffer across jobs).
    pub fn read_payload(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        Ok(self.claim()?.read_payload(out)?)
    }

    /// `(record index, generation)` of the claim: the generation moves on at each give-back
    /// and lease extension. For the job's identity see [`id`](Self::id).
    pub fn handle(&self) -> JobHandle {
        self.inner.unchecked().handle()
    }

    /// The job's stable id (`index.birth`, as `push` returned it and every command prints
    /// it): the same at every attempt, while [`handle`](Self::handle)'s generation moves on.
    pub fn id(&self) -> JobId {
        self.inner.unchecked().id()
    }

    /// Whether the job was cancelled (`xtcq cancel`) while this process held it: the daemon
    /// took it back, and its ack, give-back or lease extension fails with
    /// [`JobError::Cancelled`](xtcq_shm::JobError::Cancelled). `false` while it is still ours,
    /// and once its record holds another job (records are reused; the settle then fails with
    /// `NotHeld`). A long job may look now and then, and stop.
    pub fn cancelled(&self) -> bool {
        self.inner.unchecked().cancelled()
    }

    /// Times the job was given back before this claim.
    pub fn attempts(&self) -> u32 {
        self.inner.unchecked().attempts()
    }

    /// When it was queued: CLOCK_MONOTONIC ns (the same clock in every process) at the kernel
    /// tick's resolution, 1-4 ms — a job's age, not a latency measurement. For a job that was
    /// delayed (a delayed push, or a retry after a delay), when it was due.
    pub fn enqueued_ns(&self) -> u64 {
        self.inner.unchecked().enqueued_ns()
    }

    /// The claim's lease deadline (CLOCK_MONOTONIC ns), `None` when the queue has no lease
    /// and none was set.
    pub fn lease_deadline_ns(&self) -> Option<u64> {
        self.inner.unchecked().lease_deadline_ns()
    }

    /// Sets the claim's lease to `lease` from now: a heartbeat for a long job, or a per-steal
    /// override of the queue's default. At least 1 ms, in whole milliseconds. Fails with
    /// "lease expired" once the daemon has re-queued the job.
    pub fn extend_lease(&self, lease: Duration) -> Result<(), Error> {
        Ok(self.claim()?.extend_lease(xtcq_proto::lease::check_lease(lease)?)?)
    }

    /// Done: frees the record.
    pub fn ack(self) -> Result<(), Error> {
        Ok(self.settle()?.ack()?)
    }

    /// Failed: re-queues it (or dead-letters it at the queue's attempt limit).
    pub fn nack(self) -> Result<(), Error> {
        Ok(self.settle()?.nack()?)
    }

    /// Like [`nack`](Self::nack), keeping `reason` (its first bytes) as the job's last
    /// error, which a dead letter shows.
    pub fn fail(self, reason: &str) -> Result<(), Error> {
        Ok(self.settle()?.fail(reason)?)
    }

    /// Not run after all (the payload could not be handed on, or the consumer is stopping):
    /// re-queues it without counting an attempt, so it never becomes a dead letter this way.
    pub fn release(self) -> Result<(), Error> {
        Ok(self.settle()?.release()?)
    }

    /// Failed: like [`fail`](Self::fail) (attempt + 1, dead-lettered at the queue's limit),
    /// but the job is in line again only after `delay` (a retry backoff). `reason` is kept
    /// as its last error when given.
    pub fn fail_after(self, reason: Option<&str>, delay: Duration) -> Result<(), Error> {
        let JobOf { inner, keep } = self;
        if let Some(h) = inner.take().ok_or(Error::Forked)?.fail_after(reason, delay)? {
            keep.announce(h);
        }
        Ok(())
    }

    /// [`nack`](Self::nack) with a delay: retried after `delay` at the earliest.
    pub fn nack_after(self, delay: Duration) -> Result<(), Error> {
        self.fail_after(None, delay)
    }
}
