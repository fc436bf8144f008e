//! Re-queueing or purging many dead letters at once, in time linear in their number.
//!
//! [`Client::requeue_dead`] and [`Client::purge_dead`] each attach to the queue (a control
//! round trip, a process slot, a detach) and scan every record to check that the job is a
//! dead letter of that queue: done once per job, 65,535 dead letters took minutes. Here the
//! process attaches once, the queue's dead letters are found in one scan, and each job is then
//! one CAS (or two, and a ring push, for a re-queue) in shared memory.

use std::collections::HashSet;

use xtcq_shm::dead_letter::{self, DeadLetterError};

use crate::{Client, Error, JobHandle};

/// What a bulk re-queue or purge did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BulkDead {
    /// Jobs re-queued (or purged).
    pub done: u64,
    /// Jobs no longer dead letters when their turn came (another process re-queued or
    /// purged them meanwhile): left alone.
    pub gone: u64,
}

/// Which bulk operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadAction {
    /// Back on the queue, attempts reset.
    Requeue,
    /// Deleted.
    Purge,
}

impl Client {
    /// Re-queues or purges `jobs`, dead letters of `queue`, attaching once and scanning the
    /// records once; `progress(done_so_far)` is called after each job. A job that is not a
    /// dead letter of `queue` when this starts is refused before anything is done; one that
    /// stops being one meanwhile is counted in [`BulkDead::gone`]. A full overflow ring stops
    /// a re-queue with an error that says how many were re-queued.
    pub fn act_on_dead(
        &self,
        queue: &str,
        jobs: &[JobHandle],
        action: DeadAction,
        mut progress: impl FnMut(u64),
    ) -> Result<BulkDead, Error> {
        // Attached first, as for one job: the daemon checks that this user may use the queue,
        // and a re-queue pushes onto its ring as this process's slot.
        let attached = self.attach_injector(queue)?;
        let (seg, index) = self.queue_index(queue)?;
        let dead: HashSet<JobHandle> =
            dead_letter::dead_letters(&seg, index).into_iter().map(|d| d.handle).collect();
        if let Some(j) = jobs.iter().find(|j| !dead.contains(j)) {
            return Err(Error::DeadLetter(format!(
                "job {j} is not a dead letter of queue {queue} (see `xtcq dead {queue}`)"
            )));
        }
        let me = attached.process_slot();
        let verb = if action == DeadAction::Requeue { "re-queued" } else { "purged" };
        let mut out = BulkDead::default();
        for &j in jobs {
            let r = match action {
                DeadAction::Requeue => dead_letter::requeue_dead(&seg, j, me),
                DeadAction::Purge => dead_letter::purge_dead(&seg, j),
            };
            match r {
                Ok(()) => out.done += 1,
                Err(DeadLetterError::NotDead(_)) => out.gone += 1,
                Err(e) => {
                    return Err(Error::DeadLetter(format!(
                        "{e} ({} of {} {verb} before it)",
                        out.done,
                        jobs.len()
                    )))
                }
            }
            progress(out.done + out.gone);
        }
        Ok(out)
    }
}
