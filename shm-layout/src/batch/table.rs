//! The daemon's side of the batch table: open, seal, find, and completion after a walk.
//! Only the daemon calls these, under its registry lock, so entries change one at a time.

use super::{release_callback, reopened, tally, BatchRef, BatchStatus, BatchWord};
use crate::layout::{BatchEntry, BATCH_SLOTS};
use crate::record::state::JobHandle;
use crate::segment::Segment;
use crate::sync::Ordering;

/// The longest batch name, in bytes of UTF-8.
pub const MAX_BATCH_NAME: usize = 64;

/// What the table refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Every entry holds an open or sealed batch.
    #[error(
        "the batch table is full: all {BATCH_SLOTS} entries hold batches not yet complete \
         (seal them, or wait for them to complete; a complete batch's entry is reused)"
    )]
    TableFull,
    /// A batch of that name is open or sealed in the queue already.
    #[error("batch {0:?} exists in this queue and is not complete")]
    Exists(String),
    /// No batch of that name in the queue.
    #[error("the queue has no batch {0:?} (open it with `xtcq batch open`)")]
    NotFound(String),
    /// The name is empty or too long.
    #[error("a batch name is 1 to {MAX_BATCH_NAME} bytes")]
    BadName,
    /// The segment was made before batches (layout version 10).
    #[error("this segment has no batch table (made by an older xtcqd; `xtcqd --recreate` makes one)")]
    NoTable,
}

/// A batch and its counts, as the table shows them now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchProgress {
    /// Which batch.
    pub batch: BatchRef,
    /// Its name.
    pub name: String,
    /// Its queue's table index.
    pub queue: u32,
    /// Where it is.
    pub status: BatchStatus,
    /// Jobs pushed into it.
    pub pushed: u64,
    /// Jobs not ended at the daemon's last count.
    pub live: u64,
    /// Dead letters.
    pub dead: u64,
    /// Jobs cancelled.
    pub cancelled: u64,
    /// Whether it has a callback job.
    pub has_callback: bool,
}

impl BatchProgress {
    /// Jobs that ended by an ack (or a purge): pushed and neither running, dead nor cancelled.
    /// Saturating: the counts are read from the segment, where any attached process may have
    /// written any value.
    pub fn acked(&self) -> u64 {
        self.pushed.saturating_sub(self.live.saturating_add(self.dead).saturating_add(self.cancelled))
    }
}

/// The progress of entry `slot`, `None` when it is free or unreadable.
pub fn progress(seg: &Segment, slot: u32) -> Option<BatchProgress> {
    let e = seg.batch_entry(slot)?;
    let w = BatchWord(e.word.load(Ordering::Acquire));
    let status = w.status().filter(|s| *s != BatchStatus::Free)?;
    Some(BatchProgress {
        batch: BatchRef { slot, generation: w.generation() },
        name: super::name_of(e),
        queue: w.queue(),
        status,
        pushed: e.pushed.load(Ordering::Relaxed),
        live: e.live.load(Ordering::Relaxed),
        dead: e.dead.load(Ordering::Relaxed),
        cancelled: e.cancelled.load(Ordering::Relaxed),
        has_callback: e.callback.load(Ordering::Relaxed) != 0,
    })
}

/// Every batch of queue `queue`.
pub fn list(seg: &Segment, queue: u32) -> Vec<BatchProgress> {
    (0..BATCH_SLOTS).filter_map(|s| progress(seg, s)).filter(|p| p.queue == queue).collect()
}

/// Batch `name` of queue `queue`.
pub fn find(seg: &Segment, queue: u32, name: &str) -> Option<BatchProgress> {
    (0..BATCH_SLOTS).filter_map(|s| progress(seg, s)).find(|p| p.queue == queue && p.name == name)
}

/// Opens batch `name` in queue `queue`, with `callback` (a `Delayed` job with no due time,
/// which completion releases). A complete batch of the same name is replaced; a free entry
/// is taken first, then the entry of any complete batch.
pub fn open(
    seg: &Segment,
    queue: u32,
    name: &str,
    callback: Option<JobHandle>,
) -> Result<BatchRef, BatchError> {
    if name.is_empty() || name.len() > MAX_BATCH_NAME {
        return Err(BatchError::BadName);
    }
    seg.batch_entry(0).ok_or(BatchError::NoTable)?;
    let slot = match find(seg, queue, name) {
        Some(p) if p.status != BatchStatus::Complete => return Err(BatchError::Exists(name.into())),
        Some(p) => p.batch.slot,
        None => free_slot(seg).ok_or(BatchError::TableFull)?,
    };
    let e = seg.batch_entry(slot).ok_or(BatchError::NoTable)?;
    let generation = reopened(BatchWord(e.word.load(Ordering::Relaxed)).generation());
    // Free first: a waiter on the old batch sees its generation gone before the new fields.
    e.word.store(BatchWord::pack(generation, BatchStatus::Free, queue).0, Ordering::Release);
    write_name(e, name);
    for c in [&e.pushed, &e.live, &e.dead, &e.cancelled] {
        c.store(0, Ordering::Relaxed);
    }
    e.callback.store(callback.map_or(0, JobHandle::to_word), Ordering::Relaxed);
    // Release: the fields above are seen by whoever Acquires the open word.
    e.word.store(BatchWord::pack(generation, BatchStatus::Open, queue).0, Ordering::Release);
    wake(e);
    Ok(BatchRef { slot, generation })
}

fn free_slot(seg: &Segment) -> Option<u32> {
    let status = |s: u32| seg.batch_entry(s).and_then(|e| BatchWord(e.word.load(Ordering::Relaxed)).status());
    (0..BATCH_SLOTS)
        .find(|&s| status(s) == Some(BatchStatus::Free))
        .or_else(|| (0..BATCH_SLOTS).find(|&s| status(s) == Some(BatchStatus::Complete)))
}

fn write_name(e: &BatchEntry, name: &str) {
    let mut bytes = [0u8; MAX_BATCH_NAME];
    bytes[..name.len()].copy_from_slice(name.as_bytes());
    for (w, chunk) in e.name.iter().zip(bytes.chunks_exact(8)) {
        w.store(u64::from_le_bytes(chunk.try_into().unwrap_or_default()), Ordering::Relaxed);
    }
    e.name_len.store(name.len() as u32, Ordering::Relaxed);
}

/// Seals `batch`: no push lands in it from now on. Whether it was open (a second seal is
/// not an error). The caller then completes what it can ([`complete_sealed`]).
pub fn seal(seg: &Segment, batch: BatchRef) -> Result<bool, BatchError> {
    let e = seg.batch_entry(batch.slot).ok_or(BatchError::NoTable)?;
    let w = BatchWord(e.word.load(Ordering::Acquire));
    if w.generation() != batch.generation {
        return Err(BatchError::NotFound(super::name_of(e)));
    }
    if w.status() != Some(BatchStatus::Open) {
        return Ok(false);
    }
    let sealed = BatchWord::pack(w.generation(), BatchStatus::Sealed, w.queue());
    // The daemon's side of the seal's Dekker pair (`batch_seal`).
    let won = crate::batch_seal::seal(&e.word, w.0, sealed.0);
    wake(e);
    Ok(won)
}

/// A batch [`complete_sealed`] completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completed {
    /// Its counts when it completed.
    pub progress: BatchProgress,
    /// Whether this call released its callback.
    pub callback_released: bool,
}

/// Walks the records, stores each batch's counts, and completes every batch that was
/// sealed before the walk and has no job left to end. The daemon calls it after a seal and
/// whenever its scan walks the records.
pub fn complete_sealed(seg: &Segment) -> Vec<Completed> {
    if seg.batch_entry(0).is_none() {
        return Vec::new();
    }
    let sealed: Vec<Option<u64>> = (0..BATCH_SLOTS)
        .map(|s| {
            // Each read with the fence that orders the walk after every push that did not
            // see the seal (`batch_seal`).
            let w = seg.batch_entry(s).map(|e| BatchWord(crate::batch_seal::before_walk(&e.word)));
            w.filter(|w| matches!(w.status(), Some(BatchStatus::Open | BatchStatus::Sealed))).map(|w| w.0)
        })
        .collect();
    if sealed.iter().all(Option::is_none) {
        return Vec::new(); // no batch to count: no walk
    }
    let t = tally(seg);
    let mut done = Vec::new();
    for (slot, before) in sealed.iter().enumerate() {
        let (Some(before), Some(e)) = (before, seg.batch_entry(slot as u32)) else { continue };
        let before = BatchWord(*before);
        if e.word.load(Ordering::Acquire) != before.0 {
            continue; // moved on during the walk; the next walk counts it
        }
        e.live.store(t.live[slot], Ordering::Relaxed);
        e.dead.store(t.dead[slot], Ordering::Relaxed);
        if before.status() == Some(BatchStatus::Sealed) && t.live[slot] == 0 {
            if let Some(c) = complete(seg, slot as u32, before) {
                done.push(c);
            }
        }
    }
    done
}

/// `Sealed -> Complete` on entry `slot`, then the callback's release and the waiters' wake.
fn complete(seg: &Segment, slot: u32, before: BatchWord) -> Option<Completed> {
    let e = seg.batch_entry(slot)?;
    let after = BatchWord::pack(before.generation(), BatchStatus::Complete, before.queue());
    e.word.compare_exchange(before.0, after.0, Ordering::AcqRel, Ordering::Relaxed).ok()?;
    crate::fail_point!("batch.after_complete");
    let callback_released = release_callback(seg, e);
    wake(e);
    Some(Completed { progress: progress(seg, slot)?, callback_released })
}

/// Counts a job of `batch` the daemon cancelled (called after the cancel's CAS, under the
/// registry lock, as completion is). Not once the batch is complete: its counts are final
/// (a dead letter re-queued after the completion, then cancelled, was counted dead).
pub fn count_cancelled(seg: &Segment, batch: BatchRef) {
    if let Some(e) = seg.batch_entry(batch.slot) {
        let w = BatchWord(e.word.load(Ordering::Relaxed));
        if w.generation() == batch.generation
            && matches!(w.status(), Some(BatchStatus::Open | BatchStatus::Sealed))
        {
            e.cancelled.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn wake(e: &BatchEntry) {
    e.seq.fetch_add(1, Ordering::Release);
    crate::wait::wake_all_word(&e.seq);
}

/// Forgets every batch of queue `queue` (being deleted): each entry is freed, waiters are
/// woken, and the callback of a batch that had not completed is withdrawn.
pub fn forget_queue(seg: &Segment, queue: u32) {
    for slot in 0..BATCH_SLOTS {
        let Some(e) = seg.batch_entry(slot) else { break };
        let w = BatchWord(e.word.load(Ordering::Acquire));
        if w.queue() != queue || matches!(w.status(), Some(BatchStatus::Free)) {
            continue;
        }
        e.word.store(BatchWord::pack(w.generation(), BatchStatus::Free, queue).0, Ordering::Release);
        if w.status() != Some(BatchStatus::Complete) {
            withdraw_callback(seg, e);
        }
        wake(e);
    }
}

/// Frees a held callback job (still `Delayed` at its generation) and its payload block.
fn withdraw_callback(seg: &Segment, e: &BatchEntry) {
    let Some(h) = JobHandle::from_word(e.callback.load(Ordering::Relaxed)) else { return };
    let records = seg.records();
    let Some(st) = records.state(h.index) else { return };
    let block = records.held_block(h.index);
    if st.withdraw(h.generation, crate::record::state::State::Delayed).is_ok() {
        records.release_block(block);
    }
}
