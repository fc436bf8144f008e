//! The seal of a batch against a push into it (`batch`), over bare words so that loom checks
//! it (`shm-layout/tests/loom_batch_seal.rs`): a Dekker pair.
//!
//! - the push stores the job's batch reference, then (SeqCst fence) reads the batch's word,
//!   and withdraws the job unless the batch is open;
//! - the daemon moves the batch's word to sealed, then (SeqCst fence) walks the references.
//!
//! Both fences in the one total order: if the push read the word before the seal, the fence
//! of the push comes first, so the walk after the seal's fence sees the reference. No push
//! lands in a sealed batch unseen by the walk that completes it.

use crate::sync::{fence, AtomicU64, Ordering};

/// The push side: stores `reference` in the record's word, then returns the batch's word as
/// it is after that store (the caller keeps the job only if it says open).
#[inline]
pub fn join(record_word: &AtomicU64, reference: u64, batch_word: &AtomicU64) -> u64 {
    record_word.store(reference, Ordering::Relaxed);
    #[cfg(not(xtcq_loom_drop_batch_fence))]
    fence(Ordering::SeqCst);
    batch_word.load(Ordering::Relaxed)
}

/// The daemon's side: `open -> sealed` on the batch's word; whether this call moved it. The
/// walk that may complete the batch comes after [`before_walk`].
pub fn seal(batch_word: &AtomicU64, open: u64, sealed: u64) -> bool {
    let won = batch_word.compare_exchange(open, sealed, Ordering::AcqRel, Ordering::Relaxed).is_ok();
    fence(Ordering::SeqCst);
    won
}

/// Before a walk of the references: the batch's word, read with the fence that orders the
/// walk after every push that did not see the seal.
pub fn before_walk(batch_word: &AtomicU64) -> u64 {
    let w = batch_word.load(Ordering::Acquire);
    fence(Ordering::SeqCst);
    w
}
