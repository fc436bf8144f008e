//! What became of a job the bridge pushed into the local queue, read from its record.
//!
//! The daemon has no "tell me when job X is settled" call, so the `in` bridge watches the
//! record it pushed (by index, and the job's stable id that the record keeps across its
//! attempts): read-only loads of the state word and header, the same as `xtcq dead` does.
//!
//! Invariants:
//! - `Held` only while the record holds *this* job (same index, queue and birth id) in a
//!   live state: a record freed and reused by another job reads as `Gone`, never `Held`;
//! - `Dead` only for a `Dead` record of this job, with its payload, attempts and last error;
//! - a retired segment (daemon restarted with `--recreate`) reads as `Lost`: its jobs will
//!   never be run or acked, so nothing may be acked upstream for them.

use xtcq_shm::dead_letter::{dead_letters, job_id};
use xtcq_shm::{JobId, Segment, State};

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

/// Where to look: the segment, and the queue's table index.
pub struct Watch<'a> {
    /// The daemon's segment.
    pub seg: &'a Segment,
    /// The queue's table index.
    pub queue: u32,
}

impl Watch<'_> {
    /// What became of job `id`.
    pub fn fate(&self, id: JobId) -> Fate {
        if self.seg.is_retired() {
            return Fate::Lost;
        }
        let records = self.seg.records();
        let (Some(st), Some(hdr)) = (records.state(id.index), records.header(id.index)) else {
            return Fate::Lost;
        };
        let w = st.load();
        let ours =
            job_id(hdr, id.index) == id && hdr.queue.load(std::sync::atomic::Ordering::Relaxed) == self.queue;
        let attempts = hdr.attempts.load(std::sync::atomic::Ordering::Relaxed);
        // Read again: a word that moved while we read the header may mix two jobs' fields.
        if st.load() != w {
            return Fate::Held { attempts };
        }
        match w.state() {
            Some(State::Queued | State::Claimed | State::Writing | State::Filling | State::Delayed)
                if ours =>
            {
                Fate::Held { attempts }
            }
            Some(State::Dead) if ours => {
                let last_error = dead_letters(self.seg, self.queue)
                    .into_iter()
                    .find(|d| d.id == id)
                    .map(|d| d.last_error)
                    .unwrap_or_default();
                Fate::Dead { attempts, last_error }
            }
            _ => Fate::Gone,
        }
    }
}
