//! The registry's side of delayed jobs and retry backoff.
//!
//! Rules kept:
//! - a due job is put in line under the registry lock, so that it cannot interleave with a
//!   queue delete (which frees the queue's delayed jobs and resets its ring under that lock);
//! - a `Schedule` request is a hint, checked against the segment: only a record that is
//!   `Delayed` at the named generation is added, so a peer can neither invent a job nor
//!   move one's due time;
//! - a queue's retry backoff is kept with its permissions (`state::QueueAcl`), set only by
//!   those who may delete the queue, and written to the state file before it is answered.

use std::sync::Arc;

use tracing::warn;
use xtcq_proto as proto;
use xtcq_proto::RetryBackoff;
use xtcq_shm::delayed::{self, Released};
use xtcq_shm::JobHandle;

use crate::registry::{Access, Op, Registry};

impl Registry {
    /// The delayed jobs this daemon knows of.
    pub fn timers(&self) -> &Arc<crate::delay::Timers> {
        &self.timers
    }

    /// Puts each of `due` in line (those still `Delayed`), under the lock.
    pub fn release_due(&self, due: &[JobHandle]) {
        let mut t = self.lock();
        t.scan.changed();
        let (mut queued, mut unindexed) = (0u32, 0u32);
        for &h in due {
            match delayed::release_due(&self.seg, h) {
                Released::Queued { .. } => queued += 1,
                Released::Unindexed { .. } => unindexed += 1,
                Released::Gone => {}
            }
        }
        if unindexed > 0 {
            warn!(unindexed, "due jobs found their queue's overflow ring full; the stray sweep indexes them");
        }
        tracing::debug!(queued, "delayed jobs put in line");
    }

    /// `Schedule`: the job `h` was left `Delayed`; put it in line when due. Refused when the
    /// record is not `Delayed` at that generation now (it may have been put in line already).
    pub fn schedule(&self, h: JobHandle) -> Result<(), proto::ErrorReply> {
        match delayed::delayed_job(&self.seg, h) {
            Some(job) => {
                // Entries of jobs freed meanwhile (a forced delete) linger until their due
                // time: past twice the records, rebuild from the segment instead of growing.
                if self.timers.len() > 2 * self.seg.config().job_records as usize {
                    self.timers.scan(&self.seg);
                }
                self.timers.add(job);
                Ok(())
            }
            None => Err(proto::ErrorReply::new(
                proto::ErrorCode::BadRequest,
                format!("record {h} is not a delayed job at that generation (put in line already, or freed)"),
            )),
        }
    }

    /// Sets queue `name`'s retry backoff, if `who` may delete the queue.
    pub fn set_retry_backoff(
        &self,
        name: &str,
        backoff: Option<RetryBackoff>,
        who: Option<&Access>,
    ) -> Result<(), proto::ErrorReply> {
        if let Some(b) = &backoff {
            b.validate().map_err(|e| proto::ErrorReply::new(proto::ErrorCode::BadRequest, e.to_string()))?;
        }
        let mut t = self.lock();
        let q = self.queue(name)?;
        self.check_access(&t, q.index, &q.spec.name, who, Op::Delete)?;
        let Some(acl) = t.queues.get_mut(&q.index) else {
            return Err(proto::ErrorReply::new(
                proto::ErrorCode::BadRequest,
                format!(
                    "queue {name} has no recorded owner (made by an older xtcqd, or its state file was lost), so \
                     xtcqd keeps nothing for it; delete it and create it again"
                ),
            ));
        };
        acl.retry_backoff = backoff;
        if !self.persist(&t) {
            warn!(queue = name, "the retry backoff is set but not kept for the next daemon");
        }
        Ok(())
    }

    /// The retry backoff of queue-table entry `index` (named `name`), if one is set.
    pub fn retry_backoff(&self, index: u32, name: &str) -> Option<RetryBackoff> {
        let t = self.lock();
        t.queues.get(&index).filter(|a| a.name == name).and_then(|a| a.retry_backoff)
    }

    /// `info` with its retry backoff and its pause state filled in.
    pub fn with_backoff(&self, mut info: proto::QueueInfo) -> proto::QueueInfo {
        info.retry_backoff = self.retry_backoff(info.index, &info.name);
        self.with_flow(info)
    }
}
