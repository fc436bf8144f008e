//! Batches: jobs pushed under one name, and the moment the last of them ended.
//!
//! A batch is an entry of the segment's batch table ([`BatchEntry`], layout version 10) and,
//! for each job pushed into it, a reference word beside the job's record (`RecordBatch`:
//! the batch's slot and generation, and the job's birth, so that a word left over from a
//! record's earlier job names nothing).
//!
//! Rules kept:
//! - **the records are the count.** A batch is complete when it is sealed and no record
//!   referring to it is still to run (filling, queued, delayed, claimed, being written):
//!   every job acked, dead or cancelled. Only the daemon decides it, from a walk of the
//!   records ([`tally`]) that starts after it saw the batch sealed; nothing on the job path
//!   counts an end, so a process killed between a job's last transition and anything else
//!   leaves nothing to correct, and retries and recovery (a job back in line) are never
//!   counted as an end;
//! - **no push lands in a sealed batch unseen.** A push writes its reference, then (a
//!   SeqCst fence) reads the batch's word and withdraws the job if the batch is no longer
//!   open; the daemon stores `Sealed`, then (a SeqCst fence) walks. Either the push sees the
//!   seal, or the walk sees the pushed record;
//! - **the callback is released once.** It is a job made at `open` and kept `Delayed` with
//!   no due time in its queue; completion is the CAS `Sealed -> Complete` on the batch's
//!   word, after which the daemon releases the callback with the record's own CAS
//!   `Delayed(g) -> Queued(g)` ([`crate::delayed::release_due`]). A daemon killed between
//!   the two finds the batch complete and the callback still `Delayed` when it adopts the
//!   segment ([`release_callbacks`]); a second release fails its CAS;
//! - **counts shown are the daemon's**: `live` and `dead` from its last walk, `cancelled`
//!   from its cancels, `pushed` added by producers after each publish (a producer killed
//!   between its publish and that add leaves `pushed` one short: only the counts shown, not
//!   completion, depend on it);
//! - nothing read from the segment is trusted: a reference word is used only when its slot
//!   is in the table, its generation is the entry's, its queue is the record's and its
//!   birth the record's job's; a garbage word can hold back only the batch it names.

mod table;

pub use table::{
    complete_sealed, count_cancelled, find, forget_queue, list, open, progress, seal, BatchError,
    BatchProgress, Completed, MAX_BATCH_NAME,
};

use crate::layout::{BatchEntry, BATCH_SLOTS};
use crate::record::state::{next_generation, JobHandle, State, StateWord, BIRTH_SHIFT};
use crate::segment::Segment;
use crate::sync::{AtomicU64, Ordering};

/// Where a batch is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BatchStatus {
    /// The entry is unused.
    Free = 0,
    /// Takes pushes.
    Open = 1,
    /// Takes no more pushes; completes when its last job ends.
    Sealed = 2,
    /// Sealed and every job ended; the callback, if any, released.
    Complete = 3,
}

/// A decoded [`BatchEntry::word`]: `generation << 32 | status << 24 | queue`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchWord(pub u64);

impl BatchWord {
    /// Packs the three fields.
    pub const fn pack(generation: u32, status: BatchStatus, queue: u32) -> Self {
        BatchWord((generation as u64) << 32 | (status as u64) << 24 | (queue & 0x00FF_FFFF) as u64)
    }
    /// The generation: moved on each time the entry is opened.
    pub const fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// The status; `None` for bits no correct program writes.
    pub fn status(self) -> Option<BatchStatus> {
        Some(match (self.0 >> 24) as u8 {
            0 => BatchStatus::Free,
            1 => BatchStatus::Open,
            2 => BatchStatus::Sealed,
            3 => BatchStatus::Complete,
            _ => return None,
        })
    }
    /// The queue-table index of the batch's queue.
    pub const fn queue(self) -> u32 {
        (self.0 as u32) & 0x00FF_FFFF
    }
}

/// A batch, as a push names it: its table slot and the generation it was opened at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchRef {
    /// Batch-table slot.
    pub slot: u32,
    /// The entry's generation when the batch was opened.
    pub generation: u32,
}

const REF_MASK: u32 = 0x00FF_FFFF;

/// The reference word beside a record: `birth << 40 | (slot + 1) << 24 | generation`, each
/// generation to 24 bits; 0 names no batch.
fn record_word(batch: BatchRef, birth: u32) -> u64 {
    u64::from(birth & REF_MASK) << 40
        | u64::from(batch.slot + 1) << 24
        | u64::from(batch.generation & REF_MASK)
}

/// `(batch, birth)` of a reference word, `None` for 0 or a slot out of the table.
fn decode_record_word(w: u64) -> Option<(BatchRef, u32)> {
    let slot = ((w >> 24) & 0xFFFF) as u32;
    if slot == 0 || slot > BATCH_SLOTS {
        return None;
    }
    Some((BatchRef { slot: slot - 1, generation: (w as u32) & REF_MASK }, (w >> 40) as u32 & REF_MASK))
}

/// A push into a batch that does not take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BatchClosed {
    /// Sealed or complete: it takes no more jobs.
    #[error("the batch is sealed: it takes no more jobs (open another one with `xtcq batch open`)")]
    Sealed,
    /// No such batch in this queue (deleted, or another queue's).
    #[error("no such open batch in this queue (it was reused, or belongs to another queue)")]
    Unknown,
}

impl Segment {
    /// Batch-table entry `slot`; `None` out of the table or in a segment older than version 10.
    pub fn batch_entry(&self, slot: u32) -> Option<&BatchEntry> {
        let region = self.batch_region()?;
        if slot >= BATCH_SLOTS {
            return None;
        }
        let off = region.table + u64::from(slot) * core::mem::size_of::<BatchEntry>() as u64;
        // SAFETY: slot < BATCH_SLOTS; the table lies inside the validated mapping (its length
        // was checked against this layout), 128-aligned; atomics only.
        Some(unsafe { self.at(off) })
    }

    /// The batch reference word beside record `index`.
    pub fn record_batch(&self, index: u32) -> Option<&AtomicU64> {
        let region = self.batch_region()?;
        if index >= self.config().job_records {
            return None;
        }
        // SAFETY: index < job_records; one word per record inside the validated mapping.
        Some(unsafe { self.at(region.refs + u64::from(index) * 8) })
    }

    fn batch_region(&self) -> Option<crate::layout::BatchRegion> {
        let d = self.descriptor();
        if d.layout_version < 10 {
            return None;
        }
        let blocks = u64::from(d.config.queues) * (u64::from(d.config.process_slots) + 2);
        crate::layout::batch_region(&d.config, d.regions.metrics + blocks * 128)
    }
}

/// The push side, between filling record `index` (pushed at generation `generation` for
/// queue `queue`) and publishing it: writes its reference, then checks the batch still
/// takes jobs. On `Err` the caller must withdraw the record.
pub fn join(
    seg: &Segment,
    index: u32,
    generation: u32,
    queue: u32,
    batch: BatchRef,
) -> Result<(), BatchClosed> {
    let (Some(word), Some(entry)) = (seg.record_batch(index), seg.batch_entry(batch.slot)) else {
        return Err(BatchClosed::Unknown);
    };
    let birth = crate::JobId::of_push(JobHandle { index, generation }).birth;
    // The push side of the seal's Dekker pair (`batch_seal`).
    let w = BatchWord(crate::batch_seal::join(word, record_word(batch, birth), &entry.word));
    if w.generation() != batch.generation || w.queue() != queue {
        return Err(BatchClosed::Unknown);
    }
    match w.status() {
        Some(BatchStatus::Open) => Ok(()),
        Some(BatchStatus::Sealed | BatchStatus::Complete) => Err(BatchClosed::Sealed),
        _ => Err(BatchClosed::Unknown),
    }
}

/// The push side, after the publish: one more job shown as pushed.
pub fn count_pushed(seg: &Segment, batch: BatchRef) {
    if let Some(e) = seg.batch_entry(batch.slot) {
        e.pushed.fetch_add(1, Ordering::Relaxed);
    }
}

/// The push side, after a job counted by [`count_pushed`] was withdrawn (no ring had room
/// for it): one fewer shown as pushed, for it never ran, and `acked` (pushed less the
/// others) would otherwise show it acked. Only while the batch is the one the job joined
/// and not complete: a complete batch's counts are final (as `count_cancelled`). Saturating:
/// the count is in the segment, where any attached process may have written any value.
pub fn uncount_pushed(seg: &Segment, batch: BatchRef) {
    let Some(e) = seg.batch_entry(batch.slot) else { return };
    let w = BatchWord(e.word.load(Ordering::Relaxed));
    if w.generation() == batch.generation
        && matches!(w.status(), Some(BatchStatus::Open | BatchStatus::Sealed))
    {
        let _ = e.pushed.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

/// Jobs of each batch still to end, and dead letters, as one walk of the records found them.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Per slot: jobs not ended.
    pub live: Vec<u64>,
    /// Per slot: dead letters.
    pub dead: Vec<u64>,
}

/// The batch a live record `index` (state word `w`) belongs to, if its reference checks out.
pub fn batch_of(seg: &Segment, index: u32, w: StateWord) -> Option<BatchRef> {
    let (batch, birth) = decode_record_word(seg.record_batch(index)?.load(Ordering::Relaxed))?;
    let hdr = seg.records().header(index)?;
    // A record being filled may not have its birth in the header yet: it is its generation.
    let record_birth = match w.state() {
        Some(State::Filling) => w.generation() & REF_MASK,
        _ => (hdr.flags.load(Ordering::Relaxed) >> BIRTH_SHIFT) & REF_MASK,
    };
    let entry = BatchWord(seg.batch_entry(batch.slot)?.word.load(Ordering::Relaxed));
    let ok = record_birth == birth
        && entry.generation() & REF_MASK == batch.generation
        && entry.queue() == hdr.queue.load(Ordering::Relaxed);
    ok.then_some(BatchRef { slot: batch.slot, generation: entry.generation() })
}

/// Walks every record and counts, per batch slot, those still to end and the dead letters.
pub fn tally(seg: &Segment) -> Tally {
    let n = BATCH_SLOTS as usize;
    let mut t = Tally { live: vec![0; n], dead: vec![0; n] };
    if seg.batch_entry(0).is_none() {
        return t;
    }
    let records = seg.records();
    for i in 0..records.len() {
        let Some(st) = records.state(i) else { break };
        let w = st.load();
        let dead = match w.state() {
            Some(State::Free) | None => continue,
            Some(State::Dead) => true,
            Some(_) => false,
        };
        if let Some(b) = batch_of(seg, i, w) {
            let slot = b.slot as usize;
            if dead {
                t.dead[slot] += 1;
            } else {
                t.live[slot] += 1;
            }
        }
    }
    t
}

/// A batch's name, as the daemon wrote it.
pub fn name_of(entry: &BatchEntry) -> String {
    let len = (entry.name_len.load(Ordering::Relaxed) as usize).min(entry.name.len() * 8);
    let bytes: Vec<u8> = entry.name.iter().flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes()).collect();
    String::from_utf8_lossy(&bytes[..len]).into_owned()
}

/// The callback a completed batch still holds `Delayed`, released now (the daemon, when it
/// adopts a segment: its predecessor may have died between completing a batch and releasing
/// its callback). Returns how many it released.
pub fn release_callbacks(seg: &Segment) -> usize {
    let mut released = 0;
    for slot in 0..BATCH_SLOTS {
        let Some(e) = seg.batch_entry(slot) else { break };
        if BatchWord(e.word.load(Ordering::Acquire)).status() == Some(BatchStatus::Complete)
            && release_callback(seg, e)
        {
            released += 1;
        }
    }
    released
}

/// The callbacks held for batches not yet complete (open or sealed): jobs that only their
/// batch's completion may put in line, which a copy of the segment (`transfer`) leaves out.
pub fn pending_callbacks(seg: &Segment) -> Vec<JobHandle> {
    (0..BATCH_SLOTS)
        .map_while(|slot| seg.batch_entry(slot))
        .filter(|e| {
            matches!(
                BatchWord(e.word.load(Ordering::Acquire)).status(),
                Some(BatchStatus::Open | BatchStatus::Sealed)
            )
        })
        .filter_map(|e| JobHandle::from_word(e.callback.load(Ordering::Relaxed)))
        .collect()
}

/// Releases `e`'s callback if it is still held; whether this call released it.
pub(crate) fn release_callback(seg: &Segment, e: &BatchEntry) -> bool {
    let Some(h) = JobHandle::from_word(e.callback.load(Ordering::Relaxed)) else { return false };
    !matches!(crate::delayed::release_due(seg, h), crate::delayed::Released::Gone)
}

/// The generation an entry is opened at after `g`.
pub(crate) fn reopened(g: u32) -> u32 {
    next_generation(g)
}

#[cfg(test)]
mod tests;
