//! A job's state read from this process's own mapping of the segment, for handles that poll
//! their jobs without a request ([`crate::InjectorHandle::job_state`]).
//!
//! The engine's record read ([`xtcq_shm::job_fate`]) says which process slot runs a job; a
//! pid is the daemon's to tell (it watches the processes, the segment's copy is not
//! trusted), so a running job read here has no pid.

use xtcq_proto::JobState;
use xtcq_shm::job_fate::{job_fate, Fate};
use xtcq_shm::segment::monotonic_ns;
use xtcq_shm::{JobId, Segment};

/// The state of job `id` of queue-table entry `queue` in `seg`, as its record tells it now.
pub(crate) fn local(seg: &Segment, queue: u32, id: JobId) -> JobState {
    let now = monotonic_ns();
    let ms_until = |ns: u64| ns.saturating_sub(now) / 1_000_000;
    match job_fate(seg, queue, id.index, id.birth) {
        Fate::Unknown => JobState::Unknown,
        Fate::BeingPushed => JobState::BeingPushed,
        Fate::Queued { attempts } => JobState::Queued { attempts },
        Fate::Delayed { due_ns, attempts } => JobState::Delayed { due_in_ms: ms_until(due_ns), attempts },
        Fate::Running { deadline_ns, attempts, .. } => JobState::Running {
            pid: None,
            lease_left_ms: (deadline_ns != 0).then(|| ms_until(deadline_ns)),
            attempts,
        },
        Fate::Dead { attempts, last_error } => JobState::Dead { attempts, last_error },
        Fate::Finished => JobState::Finished,
        Fate::Cancelled => JobState::Cancelled,
    }
}
