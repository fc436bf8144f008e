//! Dead letters: jobs that failed `max_attempts` times stay in their record in state `Dead`,
//! with their payload, attempt count and last error, until someone re-queues or purges them.
//!
//! The last error lives in the record header's `reserved` words (up to
//! [`LAST_ERROR_BYTES`] bytes, length in `flags`), written by the holder before the CAS that
//! gives the job back, so the Release of that CAS publishes it.
//!
//! A `Dead` record has no holder, so listing reads it racily: every read is volatile and
//! bounds-checked, and a record whose state word changed during the copy is skipped.

use crate::layout::RecordHeader;
use crate::record::state::{JobHandle, State};
use crate::segment::Segment;
use crate::sync::Ordering;

/// The most bytes of a last error kept.
pub const LAST_ERROR_BYTES: usize = 24;

/// Records why a job failed. Caller holds the record.
pub(crate) fn store_last_error(hdr: &RecordHeader, reason: &str) {
    let mut b = [0u8; LAST_ERROR_BYTES];
    // Cut at a char boundary so the stored bytes stay UTF-8.
    let mut n = reason.len().min(LAST_ERROR_BYTES);
    while !reason.is_char_boundary(n) {
        n -= 1;
    }
    b[..n].copy_from_slice(&reason.as_bytes()[..n]);
    for (w, chunk) in hdr.reserved.iter().zip(b.chunks_exact(8)) {
        // Relaxed: published by the Release CAS that gives the job back.
        w.store(u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])), Ordering::Relaxed);
    }
    // The birth generation above the length stays (the job's stable id).
    let kept = hdr.flags.load(Ordering::Relaxed) & !LEN_MASK;
    hdr.flags.store(kept | n as u32, Ordering::Relaxed);
}

/// The last error's length in `flags`; the bits above are the priority (`levels`) and the
/// birth generation ([`crate::JobId`]).
const LEN_MASK: u32 = (1 << crate::levels::PRIORITY_SHIFT) - 1;

/// The cancel mark (`cancel`): a last-error length no reason has (one is at most
/// [`LAST_ERROR_BYTES`]), so the mark needs no bit of its own. Stored only where no reason is
/// read any more: a claim the daemon took back for a cancel (next comes its free, or a dead
/// letter's reason that replaces the mark), and a queued job while the withdraw's CAS decides
/// (taken back if that CAS loses). A push's first store of `flags` clears it.
const CANCEL_MARK: u32 = LEN_MASK;

/// Marks the job in this record cancelled; the word as marked and as it was before, for
/// [`unmark_cancelled`].
pub(crate) fn mark_cancelled(hdr: &RecordHeader) -> (u32, u32) {
    let before = hdr.flags.fetch_or(CANCEL_MARK, Ordering::Relaxed);
    (before | CANCEL_MARK, before)
}

/// Takes back a mark that `mark_cancelled` made (`marks`), unless `flags` moved since: a
/// reason stored meanwhile, or a push into the freed record, is left as it is.
pub(crate) fn unmark_cancelled(hdr: &RecordHeader, (marked, before): (u32, u32)) {
    let _ = hdr.flags.compare_exchange(marked, before, Ordering::Relaxed, Ordering::Relaxed);
}

/// Whether the job in this record was cancelled (meaningful only while the record is still
/// that job's: free or taken back, and not pushed into again).
pub(crate) fn is_cancelled(hdr: &RecordHeader) -> bool {
    hdr.flags.load(Ordering::Relaxed) & LEN_MASK == CANCEL_MARK
}

/// The stable id of the job in record `index` (caller knows the record holds a job).
pub fn job_id(hdr: &RecordHeader, index: u32) -> crate::JobId {
    let birth = hdr.flags.load(Ordering::Relaxed) >> crate::record::state::BIRTH_SHIFT;
    crate::JobId { index, birth }
}

/// The stored last error (a dead letter's or a given-back job's reason).
pub(crate) fn load_last_error(hdr: &RecordHeader) -> String {
    let n = last_error_len(hdr);
    let mut b = Vec::with_capacity(LAST_ERROR_BYTES);
    for w in &hdr.reserved {
        b.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    b.truncate(n);
    String::from_utf8_lossy(&b).into_owned()
}

/// The stored last error's length, at most [`LAST_ERROR_BYTES`] whatever `flags` holds.
fn last_error_len(hdr: &RecordHeader) -> usize {
    ((hdr.flags.load(Ordering::Relaxed) & LEN_MASK) as usize).min(LAST_ERROR_BYTES)
}

/// One dead letter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The job (its current generation: what `requeue` and `purge` take).
    pub handle: JobHandle,
    /// Its stable id, the same through all its attempts.
    pub id: crate::JobId,
    /// Times it was run and given back.
    pub attempts: u32,
    /// Why it last failed (empty if its consumer gave no reason, or died).
    pub last_error: String,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// Why a dead letter could not be re-queued or purged.
#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    /// Not a dead letter (any more) at that generation.
    #[error("job {0} is not a dead letter (it was re-queued or purged already, or never died)")]
    NotDead(JobHandle),
    /// The queue's overflow ring is full.
    #[error("queue is full: could not re-queue {0}; try again after consumers have drained it")]
    QueueFull(JobHandle),
    /// The segment holds values no correct program writes.
    #[error("segment corruption: {0}")]
    Corrupt(String),
}

/// The dead letters of queue-table entry `queue`.
pub fn dead_letters(seg: &Segment, queue: u32) -> Vec<DeadLetter> {
    dead_letters_from(seg, queue, 0, usize::MAX).0
}

/// At most `max` dead letters of queue-table entry `queue`, from record `from` on, in record
/// order; and the record to go on from when more may follow (a page of a listing that a
/// reply frame could not hold whole).
pub fn dead_letters_from(seg: &Segment, queue: u32, from: u32, max: usize) -> (Vec<DeadLetter>, Option<u32>) {
    let records = seg.records();
    let mut out = Vec::new();
    for i in from..records.len() {
        if out.len() >= max {
            return (out, Some(i));
        }
        let Some(d) = read_dead_letter(seg, queue, i) else { continue };
        out.push(d);
    }
    (out, None)
}

/// The dead letter in record `i`, if it is one of queue `queue` (a racy copy, see the module
/// doc: `None` when it changed meanwhile).
fn read_dead_letter(seg: &Segment, queue: u32, i: u32) -> Option<DeadLetter> {
    let records = seg.records();
    let (st, hdr) = (records.state(i)?, records.header(i)?);
    let w = st.load();
    if w.state() != Some(State::Dead) || hdr.queue.load(Ordering::Relaxed) != queue {
        return None;
    }
    // Inline or from its block, length and reference checked (a bad one: not listed).
    let payload = records.copy_payload_racy(i)?;
    let d = DeadLetter {
        handle: JobHandle { index: i, generation: w.generation() },
        id: job_id(hdr, i),
        attempts: hdr.attempts.load(Ordering::Relaxed),
        last_error: load_last_error(hdr),
        payload,
    };
    // Changed while we copied: re-queued or purged; not a dead letter any more.
    (st.load() == w).then_some(d)
}

/// The handles of every dead letter of queue-table entry `queue`, without their payloads.
pub fn dead_handles(seg: &Segment, queue: u32) -> Vec<JobHandle> {
    let records = seg.records();
    (0..records.len()).filter_map(|i| dead_handle(seg, queue, i)).collect()
}

/// The handle of the dead letter in record `index`, if it is one of queue `queue`.
fn dead_handle(seg: &Segment, queue: u32, index: u32) -> Option<JobHandle> {
    let records = seg.records();
    let (st, hdr) = (records.state(index)?, records.header(index)?);
    // The word first (Acquire), then the queue field written before the job died.
    let w = st.load();
    (w.state() == Some(State::Dead) && hdr.queue.load(Ordering::Relaxed) == queue)
        .then_some(JobHandle { index, generation: w.generation() })
}

/// The dead letter of queue `queue` that `index.number` names, as people name jobs: by its
/// stable id (`number` is its birth) or by its current handle (`number` is its generation).
pub fn find_dead(seg: &Segment, queue: u32, index: u32, number: u32) -> Option<JobHandle> {
    let h = dead_handle(seg, queue, index)?;
    let hdr = seg.records().header(index)?;
    (job_id(hdr, index).birth == number || h.generation == number).then_some(h)
}

/// Puts dead letter `handle` back in line with its attempts reset to 0, as process slot `me`
/// (the caller's slot: if it dies half-way, recovery re-queues the job).
///
/// `Dead(g) -> Writing(g, me)` first, then the header writes, then `Writing -> Queued(g + 1)`:
/// a second requeuer's CAS fails before it writes anything, so its stores cannot land on the
/// claim that follows the first one's re-queue.
pub fn requeue_dead(seg: &Segment, handle: JobHandle, me: u32) -> Result<(), DeadLetterError> {
    let records = seg.records();
    let (Some(st), Some(hdr)) = (records.state(handle.index), records.header(handle.index)) else {
        return Err(DeadLetterError::Corrupt(format!("record {} out of range", handle.index)));
    };
    let w = st.load();
    if w.state() != Some(State::Dead) || w.generation() != handle.generation {
        return Err(DeadLetterError::NotDead(handle));
    }
    let q = hdr.queue.load(Ordering::Relaxed);
    // The ring of the job's level (`levels`).
    let levels = seg.queue(q).map_or(1, |info| info.spec.levels);
    let level =
        crate::levels::level_of(crate::levels::priority_of_flags(hdr.flags.load(Ordering::Relaxed)), levels);
    let ring = seg
        .level_ring(q, levels, level)
        .ok_or_else(|| DeadLetterError::Corrupt(format!("record {handle} names queue {q}")))?;
    if ring.len() >= ring.capacity() {
        return Err(DeadLetterError::QueueFull(handle));
    }
    st.take_dead(handle.generation, me).map_err(|_| DeadLetterError::NotDead(handle))?;
    // Relaxed: published by the Release of `requeue_written`. The deadline is cleared for the
    // same reason as in a nack: the next claim must not inherit a deadline that passed while
    // the job was dead.
    hdr.attempts.store(0, Ordering::Relaxed);
    hdr.deadline_ns.store(0, Ordering::Relaxed);
    st.requeue_written(handle.generation, me).map_err(|_| DeadLetterError::NotDead(handle))?;
    // A full ring here (raced with pushers) leaves the job Queued and unindexed, which
    // recovery's orphan sweep re-indexes; it is not lost.
    if ring.push(handle.index).is_err() {
        return Err(DeadLetterError::QueueFull(handle));
    }
    if let (true, Some(h)) = (levels > 1, seg.hints(q)) {
        crate::levels::mark(h, level);
    }
    if let Some(w) = seg.waker(q) {
        crate::wait::notify(w);
    }
    Ok(())
}

/// Deletes dead letter `handle` (its record becomes free).
pub fn purge_dead(seg: &Segment, handle: JobHandle) -> Result<(), DeadLetterError> {
    let records = seg.records();
    let st = records
        .state(handle.index)
        .ok_or_else(|| DeadLetterError::Corrupt(format!("record {} out of range", handle.index)))?;
    // Its block, read while it is still this dead letter, is given back once it is freed (a
    // block read from a record that moved on meanwhile fails the withdraw, or is another
    // job's, whose owner word the release's CAS does not match).
    let block = records.held_block(handle.index);
    // Read while it is still this dead letter, as the block is.
    let queue = records.header(handle.index).map(|h| h.queue.load(Ordering::Relaxed));
    st.withdraw(handle.generation, State::Dead).map_err(|_| DeadLetterError::NotDead(handle))?;
    records.release_block(block);
    if let Some(l) = queue.and_then(|q| seg.queue_limits(q)) {
        crate::segment::Held::give_if_limited(l);
    }
    Ok(())
}
