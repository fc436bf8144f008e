//! What became of one job, by its stable id (`index.birth`, as `push --print-handle`
//! prints it): read from its record, for `xtcq job` and the APIs through the daemon.
//!
//! Rules kept:
//! - a record is another job's once its birth generation differs, or its queue field names
//!   another queue: that id is `Unknown`, never another job's fate;
//! - the state word is read before and after the header: a record that moved meanwhile is
//!   read again (a few times), then reported as it was last seen;
//! - a free record whose birth is still the id's held this job last: it was acked, purged
//!   as a dead letter or cancelled (the record's cancel mark says which), and nothing newer
//!   took the record yet. Once one does, the job is
//!   `Unknown`: records are reused, and nothing else remembers finished jobs.

use crate::layout::RecordHeader;
use crate::record::state::{State, NO_HOLDER};
use crate::segment::Segment;
use crate::sync::Ordering;

/// A job's fate as its record tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// No job of that id in that queue (never was, or its record was reused since).
    Unknown,
    /// Its push is under way (the record is being filled).
    BeingPushed,
    /// Waiting in line, after `attempts` runs.
    Queued {
        /// Runs given back so far.
        attempts: u32,
    },
    /// Waiting for its due time (monotonic ns), after `attempts` runs.
    Delayed {
        /// When it joins the line, on the monotonic clock.
        due_ns: u64,
        /// Runs given back so far.
        attempts: u32,
    },
    /// Claimed by process slot `holder` (`None`: taken back from its holder by the daemon,
    /// which is stopping its command before it gives the job back).
    Running {
        /// The holder's process slot.
        holder: Option<u32>,
        /// Its lease's end, monotonic ns (0: no lease).
        deadline_ns: u64,
        /// Runs given back before this one.
        attempts: u32,
    },
    /// A dead letter.
    Dead {
        /// Runs.
        attempts: u32,
        /// Why it last failed.
        last_error: String,
    },
    /// Acked, or purged as a dead letter; its record is free and not reused yet.
    Finished,
    /// Cancelled (`cancel`); its record is free and not reused yet.
    Cancelled,
}

/// The fate of job `index.birth` of queue-table entry `queue`.
pub fn job_fate(seg: &Segment, queue: u32, index: u32, birth: u32) -> Fate {
    let records = seg.records();
    let (Some(st), Some(hdr)) = (records.state(index), records.header(index)) else { return Fate::Unknown };
    let mut fate = Fate::Unknown;
    for _ in 0..4 {
        let w = st.load();
        fate = read(hdr, w.state(), w.holder(), index, queue, birth);
        if st.load() == w {
            break;
        }
    }
    fate
}

fn read(hdr: &RecordHeader, state: Option<State>, holder: u32, index: u32, queue: u32, birth: u32) -> Fate {
    if crate::dead_letter::job_id(hdr, index).birth != birth || hdr.queue.load(Ordering::Relaxed) != queue {
        return Fate::Unknown;
    }
    let attempts = hdr.attempts.load(Ordering::Relaxed);
    match state {
        None => Fate::Unknown,
        Some(State::Free) if crate::dead_letter::is_cancelled(hdr) => Fate::Cancelled,
        Some(State::Free) => Fate::Finished,
        Some(State::Filling) => Fate::BeingPushed,
        Some(State::Queued) => Fate::Queued { attempts },
        Some(State::Delayed) => Fate::Delayed { due_ns: hdr.enqueued_ns.load(Ordering::Relaxed), attempts },
        Some(State::Claimed | State::Writing) => Fate::Running {
            holder: (holder != NO_HOLDER).then_some(holder),
            deadline_ns: hdr.deadline_ns.load(Ordering::Relaxed),
            attempts,
        },
        Some(State::Dead) => Fate::Dead { attempts, last_error: crate::dead_letter::load_last_error(hdr) },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{job_fate, Fate};
    use crate::segment::{QueueSpec, Segment};
    use crate::{JobId, Owner, SegmentConfig, Thief};

    #[test]
    fn a_job_goes_from_queued_to_running_to_finished_and_another_id_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let config = SegmentConfig::small().with_queues(2, 1).with_records(64);
        let seg = Arc::new(Segment::create(&dir.path().join("s"), &config, 0o600).unwrap());
        let q = seg.create_queue(&QueueSpec::new("jobs")).unwrap();
        let other = seg.create_queue(&QueueSpec::new("other")).unwrap();
        let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
        let id = JobId::of_push(owner.push(b"a").unwrap());
        let fate = |queue| job_fate(&seg, queue, id.index, id.birth);
        assert_eq!(fate(q.index), Fate::Queued { attempts: 0 });
        assert_eq!(fate(other.index), Fate::Unknown, "the id is not the other queue's");
        assert_eq!(job_fate(&seg, q.index, id.index, id.birth + 1), Fate::Unknown);
        let thief = Thief::new(seg.clone(), &q, 1).unwrap();
        let job = thief.steal().unwrap().unwrap();
        assert!(matches!(fate(q.index), Fate::Running { holder: Some(1), attempts: 0, .. }));
        job.fail("boom").unwrap();
        assert_eq!(fate(q.index), Fate::Queued { attempts: 1 });
        thief.steal().unwrap().unwrap().ack().unwrap();
        assert_eq!(fate(q.index), Fate::Finished);
    }
}
