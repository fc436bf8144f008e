//! Copying jobs out of a segment and into another: the engine side of `xtcq export`,
//! `xtcqd --export-on-stop` and `--import-on-start` (the dump format is the daemon's).
//!
//! Rules kept:
//! - a copy only reads: it works on a segment mapped read-only
//!   ([`Segment::open_read_only`]), of this layout version or an older readable one;
//! - everything read is bounds-checked, and a record whose state word changed during its
//!   copy is copied again (a few times, then skipped and counted), so a live segment gives a
//!   racy but never torn copy;
//! - a job claimed or being given back when copied is copied as queued: it runs again
//!   after an import (at least once, as after a crash); a delayed job is copied as queued;
//! - batches are not copied, nor the callback held for a batch not yet complete (a
//!   `Delayed` job only that completion may put in line): imported as queued, it would run
//!   for a batch that never completed;
//! - an import writes each job through the same transitions as a push and a give-back
//!   ([`crate::Injector::import`]), so a process killed half-way leaves records that
//!   recovery knows.

use crate::record::state::{JobHandle, State};
use crate::segment::{QueueInfo, QuotaState, Segment};
use crate::sync::Ordering;

/// One job copied out of a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobCopy {
    /// Queue-table index of its queue.
    pub queue: u32,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Times it was run and given back.
    pub attempts: u32,
    /// Whether it is a dead letter (else queued).
    pub dead: bool,
    /// Why it last failed (may be empty).
    pub last_error: String,
    /// The priority it was pushed at (`levels`).
    pub priority: u32,
    /// The key it holds (a unique job that is queued, delayed or running).
    pub key: Option<Vec<u8>>,
}

/// Everything an import needs of a segment.
#[derive(Clone, Debug, Default)]
pub struct SegmentCopy {
    /// Its active queues, with their limits.
    pub queues: Vec<(QueueInfo, QuotaState)>,
    /// Its queued (or running, or delayed) jobs and dead letters, by record index.
    pub jobs: Vec<JobCopy>,
    /// Records that kept changing while copied (a live segment) and were left out.
    pub skipped: u32,
    /// The queue-table indices of the queues that were paused.
    pub paused: Vec<u32>,
}

/// Copies every queue and job of `seg`.
pub fn copy_segment(seg: &Segment) -> SegmentCopy {
    // A quota word past the segment's records (any attached process can write one) means no
    // more than "all of them": copied as that, so that a dump of it imports where its jobs fit.
    let records = seg.config().job_records;
    let quota = |index| {
        let mut s = seg.quota_state(index);
        s.quota.max_records = s.quota.max_records.min(records);
        s
    };
    let queues: Vec<(QueueInfo, QuotaState)> =
        seg.queues().into_iter().flatten().map(|q| (q.clone(), quota(q.index))).collect();
    let paused = queues.iter().map(|(q, _)| q.index).filter(|&i| seg.is_paused(i)).collect();
    let mut out = SegmentCopy { queues, paused, ..SegmentCopy::default() };
    // Each live job's key, by its record: `bound` names only jobs whose record is live.
    let keys: std::collections::HashMap<u32, (u32, Vec<u8>)> =
        seg.key_table().bound().into_iter().map(|(q, k, id)| (id.index, (q, k.bytes()))).collect();
    let records = seg.records();
    let callbacks: std::collections::HashSet<JobHandle> =
        crate::batch::pending_callbacks(seg).into_iter().collect();
    for i in 0..records.len() {
        let mut copied = None;
        for _ in 0..4 {
            match copy_record(seg, i, &callbacks) {
                Some(c) => {
                    copied = Some(c);
                    break;
                }
                None => continue,
            }
        }
        match copied {
            Some(Some(mut job)) if out.queues.iter().any(|(q, _)| q.index == job.queue) => {
                job.key = keys.get(&i).filter(|(q, _)| *q == job.queue && !job.dead).map(|(_, k)| k.clone());
                out.jobs.push(job)
            }
            Some(_) => {}
            None => out.skipped += 1,
        }
    }
    out
}

/// Record `i`'s job: `Some(None)` when it holds none, `None` when it changed during the copy.
fn copy_record(
    seg: &Segment,
    i: u32,
    callbacks: &std::collections::HashSet<JobHandle>,
) -> Option<Option<JobCopy>> {
    let records = seg.records();
    let (Some(st), Some(hdr)) = (records.state(i), records.header(i)) else { return Some(None) };
    let w = st.load();
    if w.state() == Some(State::Delayed)
        && callbacks.contains(&JobHandle { index: i, generation: w.generation() })
    {
        return Some(None); // a held callback: its batch is not copied
    }
    let dead = match w.state() {
        Some(State::Dead) => true,
        Some(State::Queued | State::Delayed | State::Claimed | State::Writing) => false,
        _ => return Some(None),
    };
    // Inline or from its block, every length and reference checked; a bad one reads as a
    // record that kept changing (skipped and counted), never as a cut payload.
    let payload = records.copy_payload_racy(i)?;
    let job = JobCopy {
        queue: hdr.queue.load(Ordering::Relaxed),
        payload,
        attempts: hdr.attempts.load(Ordering::Relaxed),
        dead,
        last_error: if dead { crate::dead_letter::load_last_error(hdr) } else { String::new() },
        priority: crate::levels::priority_of_flags(hdr.flags.load(Ordering::Relaxed)),
        key: None,
    };
    (st.load() == w).then_some(Some(job))
}
