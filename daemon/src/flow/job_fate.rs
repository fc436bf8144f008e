//! The registry's side of `JobFate`: a job's record read for a user who may use its queue,
//! its holder's slot named by the pid this daemon watches it as (never the segment's copy).

use xtcq_proto as proto;
use xtcq_shm::job_fate::{job_fate, Fate};

use crate::registry::{Access, Op, Registry};

impl Registry {
    /// What became of job `job` (`index.birth`) of queue `name`, if `who` may use it.
    pub fn job_state(
        &self,
        name: &str,
        job: proto::JobRef,
        who: &Access,
    ) -> Result<proto::JobState, proto::ErrorReply> {
        let t = self.lock();
        let q = self.queue(name)?;
        self.check_access(&t, q.index, &q.spec.name, Some(who), Op::Use)?;
        let now = xtcq_shm::segment::monotonic_ns();
        let ms_until = |ns: u64| ns.saturating_sub(now) / 1_000_000;
        Ok(match job_fate(&self.seg, q.index, job.index, job.number) {
            Fate::Unknown => proto::JobState::Unknown,
            Fate::BeingPushed => proto::JobState::BeingPushed,
            Fate::Queued { attempts } => proto::JobState::Queued { attempts },
            Fate::Delayed { due_ns, attempts } => {
                proto::JobState::Delayed { due_in_ms: ms_until(due_ns), attempts }
            }
            Fate::Running { holder, deadline_ns, attempts } => proto::JobState::Running {
                pid: holder.and_then(|h| t.slots.get(&h)).map(|w| w.process.pid),
                lease_left_ms: (deadline_ns != 0).then(|| ms_until(deadline_ns)),
                attempts,
            },
            Fate::Dead { attempts, last_error } => proto::JobState::Dead { attempts, last_error },
            Fate::Finished => proto::JobState::Finished,
            Fate::Cancelled => proto::JobState::Cancelled,
        })
    }
}
