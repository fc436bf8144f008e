//! [`Claim`]: what every claimed job offers, borrowed ([`ClaimedJob`]) or owned
//! ([`OwnedJob`](super::OwnedJob)), so that the layers above (the client's job, the C and
//! Python jobs over it) write each operation once for both.
//!
//! - The state machine lives in [`ClaimedJob`]; its impl here only names its methods, and an
//!   owned job's impl runs them on a fresh borrowed view ([`super::owned`]).
//! - Reads and [`extend_lease`](Claim::extend_lease) take `&self`: what they change (the
//!   claim's generation after an extension) is arbitrated by the record's state word, not by
//!   Rust's borrow, so a shared claim is as safe as a unique one. Outcomes take `self`: a job
//!   is settled once.

use std::time::Duration;

use super::{ClaimedJob, JobError};
use crate::record::state::{JobHandle, JobId};

/// A job this process has claimed: read it, keep its lease, then settle it once.
pub trait Claim: Sized {
    /// `(record index, generation)` of the claim; the generation moves on with each
    /// [`extend_lease`](Self::extend_lease).
    fn handle(&self) -> JobHandle;

    /// The job's stable id (the handle it was pushed as), the same at every attempt.
    fn id(&self) -> JobId;

    /// Times the job was given back before this claim.
    fn attempts(&self) -> u32;

    /// When it was queued (or, for a delayed job, due): CLOCK_MONOTONIC ns at the kernel
    /// tick's resolution, 1-4 ms.
    fn enqueued_ns(&self) -> u64;

    /// The claim's lease deadline (CLOCK_MONOTONIC ns), `None` without a lease.
    fn lease_deadline_ns(&self) -> Option<u64>;

    /// Whether the job was cancelled while we held it (see [`ClaimedJob::cancelled`]).
    fn cancelled(&self) -> bool;

    /// Appends the payload to `out` (reuse one buffer across jobs).
    fn read_payload(&self, out: &mut Vec<u8>) -> Result<(), JobError>;

    /// A copy of the payload.
    fn payload(&self) -> Result<Vec<u8>, JobError> {
        let mut v = Vec::new();
        self.read_payload(&mut v)?;
        Ok(v)
    }

    /// Sets the claim's lease to `lease` from now: a heartbeat for a long job. Fails with
    /// `LeaseExpired` / `NotHeld` once the job is no longer ours.
    fn extend_lease(&self, lease: Duration) -> Result<(), JobError>;

    /// Done: frees the record.
    fn ack(self) -> Result<(), JobError>;

    /// Failed: re-queued (attempt + 1), or dead-lettered at the queue's attempt limit.
    fn nack(self) -> Result<(), JobError>;

    /// Like [`nack`](Self::nack), keeping `reason` as the job's last error.
    fn fail(self, reason: &str) -> Result<(), JobError>;

    /// Not run after all: re-queued without counting an attempt.
    fn release(self) -> Result<(), JobError>;

    /// Failed, in line again only after `delay`: the handle of the `Delayed` job to tell
    /// the daemon, `None` when it became a dead letter (see [`ClaimedJob::fail_after`]).
    fn fail_after(self, reason: Option<&str>, delay: Duration) -> Result<Option<JobHandle>, JobError>;
}

impl Claim for ClaimedJob<'_> {
    #[inline]
    fn handle(&self) -> JobHandle {
        ClaimedJob::handle(self)
    }
    #[inline]
    fn id(&self) -> JobId {
        ClaimedJob::id(self)
    }
    #[inline]
    fn attempts(&self) -> u32 {
        ClaimedJob::attempts(self)
    }
    #[inline]
    fn enqueued_ns(&self) -> u64 {
        ClaimedJob::enqueued_ns(self)
    }
    #[inline]
    fn lease_deadline_ns(&self) -> Option<u64> {
        ClaimedJob::lease_deadline_ns(self)
    }
    #[inline]
    fn cancelled(&self) -> bool {
        ClaimedJob::cancelled(self)
    }
    #[inline]
    fn read_payload(&self, out: &mut Vec<u8>) -> Result<(), JobError> {
        ClaimedJob::read_payload(self, out)
    }
    #[inline]
    fn extend_lease(&self, lease: Duration) -> Result<(), JobError> {
        ClaimedJob::extend_lease(self, lease)
    }
    #[inline]
    fn ack(self) -> Result<(), JobError> {
        ClaimedJob::ack(self)
    }
    #[inline]
    fn nack(self) -> Result<(), JobError> {
        ClaimedJob::nack(self)
    }
    #[inline]
    fn fail(self, reason: &str) -> Result<(), JobError> {
        ClaimedJob::fail(self, reason)
    }
    #[inline]
    fn release(self) -> Result<(), JobError> {
        ClaimedJob::release(self)
    }
    #[inline]
    fn fail_after(self, reason: Option<&str>, delay: Duration) -> Result<Option<JobHandle>, JobError> {
        ClaimedJob::fail_after(self, reason, delay)
    }
}
