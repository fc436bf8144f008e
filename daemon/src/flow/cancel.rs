//! The registry's side of `CancelJob`: a job withdrawn, or taken from its holder with its
//! command fenced (`xtcq_shm::cancel`), for a user who may administer its queue.
//!
//! Rules kept:
//! - under the registry lock, as a lease expiry: a recovery or scan sees the claim either
//!   held or revoked and settled, and the fence's registrations change in one place;
//! - the holder's pid is the one this daemon watches its slot as, never the segment's copy.

use tracing::{info, warn};
use xtcq_proto as proto;
use xtcq_shm::cancel::{cancel_job, Cancelled};
use xtcq_shm::record::state::NO_HOLDER;

use crate::registry::{Access, Op, Registry};

impl Registry {
    /// Cancels job `job` (`index.birth`) of queue `name`, if `who` may administer it.
    pub fn cancel_job(
        &self,
        name: &str,
        job: proto::JobRef,
        who: &Access,
    ) -> Result<proto::CancelOutcome, proto::ErrorReply> {
        let mut t = self.lock();
        let q = self.queue(name)?;
        self.check_access(&t, q.index, &q.spec.name, Some(who), Op::Administer)?;
        let fences = &mut t.fences;
        let mut fence = |index: u32, holder: u32| {
            if holder == NO_HOLDER {
                fences.fence_record(index)
            } else {
                fences.fence(index, holder)
            }
        };
        let done = cancel_job(&self.seg, q.index, job.index, job.number, &mut fence);
        if t.fences.take_changed() {
            self.persist(&t);
        }
        let pid = |slot: u32| t.slots.get(&slot).map(|w| w.process.pid);
        let out = match done {
            Cancelled::WasQueued => proto::CancelOutcome::WasQueued,
            Cancelled::WasDelayed => proto::CancelOutcome::WasDelayed,
            Cancelled::WasRunning { holder } => proto::CancelOutcome::WasRunning { pid: pid(holder) },
            Cancelled::NotStopped { holder } => proto::CancelOutcome::NotStopped { pid: pid(holder) },
            Cancelled::Finished => proto::CancelOutcome::Finished,
            Cancelled::Dead => proto::CancelOutcome::Dead,
            Cancelled::BeingPushed => proto::CancelOutcome::BeingPushed,
            Cancelled::Busy => proto::CancelOutcome::Busy,
            Cancelled::Unknown => proto::CancelOutcome::Unknown,
        };
        match out {
            proto::CancelOutcome::NotStopped { pid } => {
                warn!(queue = name, job = %format!("{}.{}", job.index, job.number), ?pid,
                      "cancel: the job's command could not be stopped; it is a dead letter")
            }
            _ => info!(queue = name, job = %format!("{}.{}", job.index, job.number), ?out, "job cancel"),
        }
        if !matches!(out, proto::CancelOutcome::Finished | proto::CancelOutcome::Unknown) {
            t.scan.changed();
        }
        Ok(out)
    }
}
