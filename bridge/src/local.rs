//! What became of a job the bridge pushed into the local queue.
//!
//! The daemon has no "tell me when job X is settled" call, so the `in` bridge watches the
//! jobs it pushed through its injector ([`InjectorHandle::job_state`]: a read of the job's
//! record by its stable id, with no request, as often as the bridge polls).
//!
//! Invariants:
//! - `Held` only while the record holds *this* job (same index, queue and birth id) in a
//!   live state: a record freed and reused by another job reads as `Gone`, never `Held`;
//! - `Dead` only for a dead letter of this job, with its attempts and last error;
//! - a job pushed into another segment than the injector's, or a retired segment (daemon
//!   restarted with `--recreate`), reads as `Lost`: its jobs will never be run or acked, and
//!   ids start over in the new segment, so nothing may be acked upstream for them.

use xtcq_client::proto::JobState;
use xtcq_client::{Error, InjectorHandle, JobId};

/// The fate of one pushed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Queued or running (or being given back): still this host's to finish.
    Held {
        /// Attempts so far on this host.
        attempts: u32,
    },
    /// The record no longer holds the job and it is not a dead letter: a consumer acked it.
    Gone,
    /// It reached the queue's attempt limit here.
    Dead {
        /// Attempts made.
        attempts: u32,
        /// Why it last failed.
        last_error: String,
    },
    /// The segment was replaced; the job will never be settled here.
    Lost,
}

/// Where to look: the injector, and the identity of the segment it pushes to
/// ([`xtcq_client::Client::segment_created_unix_ns`]).
pub struct Watch<'a> {
    /// The bridge's injector.
    pub injector: &'a InjectorHandle,
    /// Its segment's identity.
    pub segment: u64,
}

impl Watch<'_> {
    /// What became of job `id`, pushed into the segment whose identity is `segment`.
    pub fn fate(&self, id: JobId, segment: u64) -> Fate {
        if segment != self.segment {
            return Fate::Lost;
        }
        match self.injector.job_state(id) {
            Ok(JobState::BeingPushed) => Fate::Held { attempts: 0 },
            Ok(
                JobState::Queued { attempts }
                | JobState::Delayed { attempts, .. }
                | JobState::Running { attempts, .. },
            ) => Fate::Held { attempts },
            Ok(JobState::Dead { attempts, last_error }) => Fate::Dead { attempts, last_error },
            Ok(JobState::Finished | JobState::Cancelled | JobState::Unknown) => Fate::Gone,
            Err(Error::SegmentReplaced { .. } | Error::SegmentLost { .. }) => Fate::Lost,
            // Nothing else is answered by a read; were it, looking again is the safe side.
            Err(_) => Fate::Held { attempts: 0 },
        }
    }
}
