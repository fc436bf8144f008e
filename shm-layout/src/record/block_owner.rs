//! The payload block's owner word and its transitions, apart from the region that holds it,
//! so that loom can check them (`tests/loom_blocks.rs`) next to the record's state word.
//!
//! - `0`: free. Else `generation << 32 | record`: held by `record` for its incarnation born
//!   at `generation` (never 0, so a held word is never 0).
//! - [`take`]: `0 -> owner`, one CAS. Acquire: the last holder's reads are done. Release:
//!   a sweep that sees the new owner word sees the record's `Filling` word written before
//!   it (else it could read the record's older `Free` word, take the block for an orphan and
//!   free it under the filler; loom found that, `tests/loom_blocks.rs`).
//! - [`give_back`]: `owner -> 0`, one CAS from the exact word read (Release: our reads are
//!   done); a word that moved on (a sweep freed it, another record took it) is left alone.
//! - [`is_live`]: whether an owner word's incarnation still holds its record, from the
//!   record's state word and birth; the sweep frees a block only when it is not.

use crate::record::state::{State, StateWord, BIRTH_SHIFT};
use crate::sync::{AtomicU64, Ordering};

/// The owner word of a block held by `record` filled at `generation`.
pub const fn owner_word(record: u32, generation: u32) -> u64 {
    (generation as u64) << 32 | record as u64
}

/// `0 -> owner`: takes a free block. A plain load first, so a scan over held blocks reads
/// shared lines instead of writing each one.
#[inline]
pub fn take(word: &AtomicU64, owner: u64) -> bool {
    word.load(Ordering::Relaxed) == 0
        && word.compare_exchange(0, owner, Ordering::AcqRel, Ordering::Relaxed).is_ok()
}

/// `owner -> 0`: gives a block back if it still holds `owner`.
#[inline]
pub fn give_back(word: &AtomicU64, owner: u64) -> bool {
    owner != 0 && word.compare_exchange(owner, 0, Ordering::Release, Ordering::Relaxed).is_ok()
}

/// Whether owner word `owner` names the incarnation record `owner as u32` is in, given that
/// record's state word `state` (loaded with Acquire, first) and then its `flags` word (birth
/// generation above the last error's length): `Filling` at that generation, or a job
/// (queued, running, dead, delayed) of that birth (24 bits). An undecodable state counts as
/// live: its block is left for `check` to report, never freed under a job.
pub fn is_live(owner: u64, state: StateWord, flags: u32) -> bool {
    let generation = (owner >> 32) as u32;
    match state.state() {
        Some(State::Free) => false,
        Some(State::Filling) => state.generation() == generation,
        Some(_) => flags >> BIRTH_SHIFT == generation & (u32::MAX >> BIRTH_SHIFT),
        None => true,
    }
}
