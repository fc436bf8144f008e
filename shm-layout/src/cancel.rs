//! Cancelling a job by id: a queued or delayed job is withdrawn (it never runs); a running
//! one is taken from its holder, its command stopped by the daemon's fence, then freed.
//! Counted as cancelled in the daemon's metrics block, never as a dead letter.
//!
//! Rules kept:
//! - the record's state CAS is the one arbiter, as for a claim: `Queued(g) -> Free(g + 1)`
//!   and `Delayed(g) -> Free(g + 1)` (a consumer whose index still names it finds a stale
//!   handle and skips it), or the revoke `Claimed(g, holder) -> Claimed(g, NO_HOLDER)` that
//!   a lease expiry uses, after which the holder's ack, nack or lease extension fails; a
//!   holder in `Writing` is waited for, never revoked (its header stores would land on the
//!   freed record's next job);
//! - a revoked claim is freed only after the fence reported its command stopped; one it
//!   could not stop becomes a dead letter "could not stop command" (as a lease expiry's does)
//!   and the cancel says so;
//! - a revoked claim's slot of a concurrency limit goes back with the record, as a give-back
//!   by the daemon does (`segment::running`);
//! - a job that is being pushed, was finished, is dead or is unknown is left as it is, and
//!   the answer says which;
//! - the caller (the daemon) is the only one that revokes: a cancel that dies between the
//!   revoke and the free leaves `Claimed(g, NO_HOLDER)`, which the next start's recovery
//!   gives back (the job runs again rather than being lost).

use crate::dead_letter::{mark_cancelled, unmark_cancelled};
use crate::layout::RecordHeader;
use crate::metrics::Counter;
use crate::record::state::{RecordState, State, StateWord, NO_HOLDER};
use crate::recovery::{Fence, UNFENCED};
use crate::segment::{Held, Segment};
use crate::sync::Ordering;

/// What a cancel did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancelled {
    /// It was queued: withdrawn, it will not run.
    WasQueued,
    /// It was delayed: withdrawn, it will not run.
    WasDelayed,
    /// It was running (held by process slot `holder`): taken back, its command stopped.
    WasRunning {
        /// The slot that held it.
        holder: u32,
    },
    /// It was running, and the command the fence knew of could not be stopped: it became a
    /// dead letter ("could not stop command").
    NotStopped {
        /// The slot that held it.
        holder: u32,
    },
    /// It finished (acked, purged or cancelled) before.
    Finished,
    /// It is a dead letter (purge it instead).
    Dead,
    /// Its producer is still writing it.
    BeingPushed,
    /// Its holder was giving it back or extending its lease all the while the cancel waited
    /// (stopped there, or racing it): nothing was done; try again.
    Busy,
    /// No job of this queue has this id.
    Unknown,
}

/// Cancels job `index.birth` of queue-table entry `queue`, fencing a running one's command
/// with `fence` (called with the record and its holder) before its record is freed.
pub fn cancel_job(seg: &Segment, queue: u32, index: u32, birth: u32, fence: Fence<'_>) -> Cancelled {
    let records = seg.records();
    let (Some(st), Some(hdr)) = (records.state(index), records.header(index)) else {
        return Cancelled::Unknown;
    };
    // The state may move under us (claimed, settled) between the read and the CAS; each try
    // reads it again. A holder in `Writing` is left to finish its give-back or extension
    // (a few stores), so past the first tries each waits a little.
    for attempt in 0..TRIES {
        if attempt >= 16 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let w = st.load();
        if !names(hdr, index, queue, birth) {
            return Cancelled::Unknown;
        }
        // Read while the record is still this job, freed once the CAS succeeded.
        let block = records.held_block(index);
        let batch = crate::batch::batch_of(seg, index, w);
        let done = match w.state() {
            None => return Cancelled::Unknown,
            Some(State::Free) => return Cancelled::Finished,
            Some(State::Dead) => return Cancelled::Dead,
            Some(State::Filling) => return Cancelled::BeingPushed,
            Some(from @ (State::Queued | State::Delayed)) => withdraw(hdr, st, w.generation(), from),
            Some(State::Claimed | State::Writing) => running(seg, hdr, index, w, fence),
        };
        let Some(done) = done else { continue };
        if !matches!(done, Cancelled::NotStopped { .. }) {
            if let Some(b) = batch {
                crate::batch::count_cancelled(seg, b);
            }
            records.release_block(block);
            if let Some(l) = seg.queue_limits(queue) {
                Held::give_if_limited(l);
            }
        }
        let daemon = seg.daemon_metrics(queue);
        crate::metrics::bump(
            daemon,
            if matches!(done, Cancelled::NotStopped { .. }) { Counter::Dead } else { Counter::Cancelled },
        );
        return done;
    }
    // Moved on every try (a storm of claims and give-backs), or its holder stayed in
    // `Writing` (stopped there): report what it is now, never "unknown" for a job that is.
    match crate::job_fate::job_fate(seg, queue, index, birth) {
        crate::job_fate::Fate::Finished | crate::job_fate::Fate::Cancelled => Cancelled::Finished,
        crate::job_fate::Fate::Dead { .. } => Cancelled::Dead,
        crate::job_fate::Fate::Unknown => Cancelled::Unknown,
        _ => Cancelled::Busy,
    }
}

/// Tries before a cancel of a record that keeps moving (or stays `Writing`) reports what it
/// is now: 16 at once, then about 100 ms at 1 ms apart (the daemon holds its registry lock
/// meanwhile, so a holder stopped in `Writing` must not stall it for long).
const TRIES: u32 = 16 + 100;

/// Withdraws a queued or delayed job (`None`: it moved first). Marked cancelled before the
/// CAS and unmarked if it fails: once the CAS frees the record a push may take it and store
/// its own flags, which a later mark would land on. A failed CAS left it claimed or queued,
/// where nothing reads the mark (its reason reads as the mark's length until then).
fn withdraw(hdr: &RecordHeader, st: RecordState<'_>, g: u32, from: State) -> Option<Cancelled> {
    let marks = mark_cancelled(hdr);
    if st.withdraw(g, from).is_err() {
        unmark_cancelled(hdr, marks);
        return None;
    }
    Some(if from == State::Queued { Cancelled::WasQueued } else { Cancelled::WasDelayed })
}

/// Whether record `index` (header `hdr`) is job `birth` of queue `queue`.
fn names(hdr: &RecordHeader, index: u32, queue: u32, birth: u32) -> bool {
    crate::dead_letter::job_id(hdr, index).birth == birth && hdr.queue.load(Ordering::Relaxed) == queue
}

/// A running job seen as `w`: revoked from its holder, its command fenced, then freed (or
/// dead-lettered when the command could not be stopped). `None`: the record moved first.
fn running(
    seg: &Segment,
    hdr: &RecordHeader,
    index: u32,
    w: StateWord,
    fence: Fence<'_>,
) -> Option<Cancelled> {
    let holder = w.holder();
    // A live holder in `Writing` is storing into the header (a give-back's attempts, error
    // and due time, or a lease extension's deadline) until its closing CAS: revoked now, the
    // record would be freed under those stores, which would land on the record's next job.
    // Wait for it to leave `Writing`, as a lease expiry does.
    if holder != NO_HOLDER && w.state() == Some(State::Writing) {
        return None;
    }
    let records = seg.records();
    let st = records.state(index)?;
    if holder != NO_HOLDER && !crate::recovery::revoke(st, w, holder) {
        return None;
    }
    let g = w.generation();
    // Marked while the record is `Claimed(g, NO_HOLDER)`, which only we move: the holder's
    // `cancelled()` and a failed ack or lease extension tell a cancel from other losses by it.
    mark_cancelled(hdr);
    let fenced = fence(index, holder);
    let q = hdr.queue.load(Ordering::Relaxed);
    if fenced.is_err() {
        crate::dead_letter::store_last_error(hdr, UNFENCED);
        let _ = st.dead_letter(g, NO_HOLDER);
        seg.running_given_back(q);
        return Some(Cancelled::NotStopped { holder });
    }
    // Only we may move `Claimed(g, NO_HOLDER)` now: the ack's CAS with no holder frees it.
    st.ack(g, NO_HOLDER).ok()?;
    seg.running_given_back(q);
    Some(Cancelled::WasRunning { holder })
}

#[cfg(test)]
mod tests {
    use super::{cancel_job, Cancelled};
    use crate::job_fate::{job_fate, Fate};
    use crate::segment::one_queue_segment;
    use crate::{JobId, Owner, Thief};

    fn no_fence(_: u32, _: u32) -> Result<(), String> {
        Ok(())
    }

    #[test]
    fn queued_and_running_jobs_are_cancelled_once_and_never_run() {
        let (_dir, seg, q) = one_queue_segment();
        let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
        let thief = Thief::new(seg.clone(), &q, 1).unwrap();
        let a = JobId::of_push(owner.push(b"a").unwrap());
        let b = JobId::of_push(owner.push(b"b").unwrap());
        let c = JobId::of_push(owner.push(b"c").unwrap());
        assert_eq!(cancel_job(&seg, q.index, a.index, a.birth, &mut no_fence), Cancelled::WasQueued);
        assert_eq!(cancel_job(&seg, q.index, a.index, a.birth, &mut no_fence), Cancelled::Finished);
        let held = thief.steal().unwrap().expect("a job");
        let running = if held.payload().unwrap() == b"b" { b } else { c };
        let mut fenced = Vec::new();
        let mut fence = |i: u32, h: u32| {
            fenced.push((i, h));
            Ok(())
        };
        assert_eq!(
            cancel_job(&seg, q.index, running.index, running.birth, &mut fence),
            Cancelled::WasRunning { holder: 1 }
        );
        assert_eq!(fenced, [(running.index, 1)], "the command was fenced");
        assert!(held.cancelled(), "the holder sees the cancel");
        assert!(
            matches!(held.ack(), Err(crate::JobError::Cancelled { .. })),
            "the holder's ack reports the cancel"
        );
        assert_eq!(job_fate(&seg, q.index, running.index, running.birth), Fate::Cancelled);
        assert_eq!(job_fate(&seg, q.index, a.index, a.birth), Fate::Cancelled, "a withdrawn job too");
        let rest: Vec<_> = std::iter::from_fn(|| thief.steal().unwrap()).collect();
        assert_eq!(rest.len(), 1, "only the job not cancelled is left");
        assert_eq!(cancel_job(&seg, q.index, 9, 1234, &mut no_fence), Cancelled::Unknown);
        let m = seg.queue_totals(q.index);
        assert_eq!(m.get(crate::metrics::Counter::Cancelled), 2);
    }

    #[test]
    fn only_a_cancel_reads_as_cancelled_and_a_reused_record_forgets_it() {
        let (_dir, seg, q) = one_queue_segment();
        let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
        let thief = Thief::new(seg.clone(), &q, 1).unwrap();
        // Taken back by a lease's expiry: lost, but not cancelled.
        owner.push(b"a").unwrap();
        let held = thief.steal().unwrap().expect("a job");
        let st = seg.records().state(held.handle().index).unwrap();
        assert!(crate::recovery::revoke(st, st.load(), 1));
        assert!(!held.cancelled());
        assert!(matches!(held.ack(), Err(crate::JobError::NotHeld { .. })));
        // Cancelled, then the record is pushed into again: the new job is not cancelled,
        // the old holder can no longer tell (its ack says "not held").
        let (_dir, seg, q) = one_queue_segment();
        let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
        let thief = Thief::new(seg.clone(), &q, 1).unwrap();
        let b = JobId::of_push(owner.push(b"b").unwrap());
        let held = thief.steal().unwrap().expect("a job");
        assert_eq!(
            cancel_job(&seg, q.index, b.index, b.birth, &mut no_fence),
            Cancelled::WasRunning { holder: 1 }
        );
        // Jobs through the queue until one lands in the cancelled job's record.
        let mut c = JobId::of_push(owner.push(b"c").unwrap());
        for _ in 0..10_000 {
            if c.index == b.index {
                break;
            }
            thief.steal().unwrap().expect("c").ack().unwrap();
            c = JobId::of_push(owner.push(b"c").unwrap());
        }
        assert_eq!(c.index, b.index, "the freed record is reused");
        assert!(!held.cancelled());
        assert_eq!(job_fate(&seg, q.index, c.index, c.birth), Fate::Queued { attempts: 0 });
        let next = thief.steal().unwrap().expect("c");
        assert!(!next.cancelled());
        next.ack().unwrap();
        assert_eq!(job_fate(&seg, q.index, c.index, c.birth), Fate::Finished, "acked, not cancelled");
        assert!(matches!(held.ack(), Err(crate::JobError::NotHeld { .. })));
    }

    #[test]
    fn a_command_that_cannot_be_stopped_makes_a_dead_letter() {
        let (_dir, seg, q) = one_queue_segment();
        let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
        let thief = Thief::new(seg.clone(), &q, 1).unwrap();
        let a = JobId::of_push(owner.push(b"a").unwrap());
        let _held = thief.steal().unwrap().expect("a job");
        let mut fence = |_: u32, _: u32| Err("stuck".to_string());
        assert_eq!(
            cancel_job(&seg, q.index, a.index, a.birth, &mut fence),
            Cancelled::NotStopped { holder: 1 }
        );
        assert_eq!(cancel_job(&seg, q.index, a.index, a.birth, &mut no_fence), Cancelled::Dead);
    }
}
