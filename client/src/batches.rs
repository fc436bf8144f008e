//! Batches: jobs pushed under one name, and a wait for the last of them to end
//! (`xtcq_shm::batch`).
//!
//! - [`Client::open_batch`], push with [`OwnerHandle::set_batch`], [`Client::seal_batch`]:
//!   a batch completes only once sealed, when none of its jobs is left to run;
//! - [`Client::wait_batch`] sleeps on the batch's futex word in the segment, which the daemon
//!   bumps when it seals or completes the batch; each sleep lasts at most
//!   [`WAIT_STEP`], so a wait outlives a daemon restart (the segment, and the word, stay).

use std::time::{Duration, Instant};

use xtcq_proto::{BatchAction, BatchInfo, BatchStatus, OnComplete, Request, Response};
use xtcq_shm::batch::BatchRef;

use crate::{Client, Error, InjectorHandle, OwnerHandle};

/// The longest one sleep of [`Client::wait_batch`] lasts before it asks the daemon again.
pub const WAIT_STEP: Duration = Duration::from_secs(1);

impl Client {
    /// Opens batch `name` of queue `queue`; `on_complete` is the callback job, pushed once
    /// when the batch completes. A complete batch of that name is replaced.
    pub fn open_batch(
        &self,
        queue: &str,
        name: &str,
        on_complete: Option<OnComplete>,
    ) -> Result<BatchInfo, Error> {
        self.batch(queue, name, BatchAction::Open { on_complete })
    }

    /// Seals batch `name`: it takes no more jobs, and completes when its last job ends.
    pub fn seal_batch(&self, queue: &str, name: &str) -> Result<BatchInfo, Error> {
        self.batch(queue, name, BatchAction::Seal)
    }

    /// Batch `name` and its counts, as the daemon last counted them.
    pub fn batch_progress(&self, queue: &str, name: &str) -> Result<BatchInfo, Error> {
        self.batch(queue, name, BatchAction::Progress)
    }

    /// Sleeps until batch `name` is complete (its counts then), or `timeout` passed (`None`).
    pub fn wait_batch(
        &self,
        queue: &str,
        name: &str,
        timeout: Option<Duration>,
    ) -> Result<Option<BatchInfo>, Error> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let seg = self.segment()?;
        let first = self.batch_progress(queue, name)?;
        let entry = seg
            .batch_entry(first.slot)
            .ok_or_else(|| Error::Corrupt("the batch's slot is outside the batch table".into()))?;
        loop {
            // Read before the progress: a seal or completion after it moves the word, and
            // the sleep below returns at once.
            let seen = entry.seq.load(std::sync::atomic::Ordering::Acquire);
            match self.batch_progress(queue, name) {
                Ok(now) if now.generation != first.generation => {
                    return Err(Error::NoSuchBatch(format!(
                        "batch {name:?} of queue {queue} was replaced while waiting"
                    )));
                }
                Ok(now) if now.status == BatchStatus::Complete => return Ok(Some(now)),
                Ok(_) => {}
                // A daemon restarting: the batch lives in the segment; ask again.
                Err(e) if e.is_unreachable() => {}
                Err(e) => return Err(e),
            }
            let step = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(WAIT_STEP),
                    _ => return Ok(None),
                },
                None => WAIT_STEP,
            };
            xtcq_shm::wait::sleep_on_word(&entry.seq, seen, step);
        }
    }

    fn batch(&self, queue: &str, name: &str, action: BatchAction) -> Result<BatchInfo, Error> {
        let req = Request::Batch { queue: queue.to_string(), name: name.to_string(), action };
        match self.call(req)? {
            Response::Batch(info) => Ok(info),
            r => Err(self.unexpected(r)),
        }
    }
}

impl OwnerHandle {
    /// Makes every later push join batch `batch` (`None`: no batch). A push into a batch
    /// that is sealed fails with [`Error::BatchClosed`] and leaves no job behind.
    pub fn set_batch(&self, batch: Option<&BatchInfo>) {
        self.owner.set_batch(batch.map(|b| BatchRef { slot: b.slot, generation: b.generation }));
    }
}

impl InjectorHandle {
    /// Makes every later push join batch `batch` (`None`: no batch), as
    /// [`OwnerHandle::set_batch`].
    pub fn set_batch(&self, batch: Option<&BatchInfo>) {
        self.inj.set_batch(batch.map(|b| BatchRef { slot: b.slot, generation: b.generation }));
    }
}
