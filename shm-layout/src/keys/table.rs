//! The key table of a mapped segment: where it is, and what the protocol asks of the rest of
//! the segment (is a job live, is a lock holder still attached).

use std::cell::Cell;

use super::{holder_word, Key, KeyEntry, KeyEnv, KeyError};
use crate::layout::{key_table_offset, PROCESS_ACTIVE};
use crate::record::state::{JobId, State, BIRTH_SHIFT};
use crate::segment::{monotonic_ns, Segment};
use crate::sync::Ordering;

/// How long a push waits for a key's lock held by a live process (a holder only scans a
/// window and writes an entry, so a longer hold means a stopped process).
const LOCK_WAIT_NS: u64 = 2_000_000_000;

/// A segment's key table.
#[derive(Clone, Copy, Debug)]
pub struct KeyTable<'a> {
    seg: &'a Segment,
    entries: &'a [KeyEntry],
}

impl Segment {
    /// The key table (empty when the segment has none: `keys` 0, or an older layout).
    pub fn key_table(&self) -> KeyTable<'_> {
        let d = self.descriptor();
        // An older layout has none (and, for version 4, no metrics region to put it after).
        if d.layout_version < 10 || d.config.keys == 0 {
            return KeyTable { seg: self, entries: &[] };
        }
        let off = key_table_offset(&d.config, &d.regions);
        // SAFETY: `compute_regions` (checked against the mapping at create and attach) puts
        // `keys` entries of 128 bytes at this 128-aligned offset, before `total_len`. Atomics
        // only.
        let entries = unsafe { self.slice_at(off, d.config.keys as usize) };
        KeyTable { seg: self, entries }
    }
}

impl<'a> KeyTable<'a> {
    /// Its entries.
    pub fn entries(&self) -> &'a [KeyEntry] {
        self.entries
    }

    /// Binds `key` of queue `queue` to job `job`, pushed by process slot `me` (see
    /// [`super::bind`]).
    pub fn bind(&self, queue: u32, key: &Key, job: JobId, me: u32) -> Result<(), KeyError> {
        let epoch = self.seg.process_slot(me).map_or(0, |p| p.epoch.load(Ordering::Relaxed) as u32);
        let env = Env { seg: self.seg, since: Cell::new(None) };
        super::bind(self.entries, queue, key, job, (me, holder_word(me, epoch)), &env)
    }

    /// The live job of queue `queue` holding `key`, if any.
    pub fn find(&self, queue: u32, key: &Key) -> Option<JobId> {
        super::find(self.entries, queue, key, &Env { seg: self.seg, since: Cell::new(None) })
    }

    /// Every live binding, `(queue, key, job)`.
    pub fn bound(&self) -> Vec<(u32, Key, JobId)> {
        let env = Env { seg: self.seg, since: Cell::new(None) };
        super::bound(self.entries, &env).collect()
    }

    /// Frees the locks and half-written entries of process slot `slot`, which died.
    pub fn release_slot(&self, slot: u32) -> usize {
        super::release_slot(self.entries, slot)
    }
}

struct Env<'a> {
    seg: &'a Segment,
    /// When the wait for a lock began.
    since: Cell<Option<u64>>,
}

impl KeyEnv for Env<'_> {
    fn live(&self, queue: u32, id: JobId) -> bool {
        job_is_live(self.seg, queue, id)
    }

    fn holder_alive(&self, word: u64) -> bool {
        let epoch = (word >> 32) as u32;
        if epoch == 0 {
            // A pusher whose slot no daemon registered (a segment used as a library, as the
            // tests and benches do): nothing would recover it, and nothing says it is gone.
            return true;
        }
        let Some(slot) = super::holder_slot(word).and_then(|s| self.seg.process_slot(s)) else {
            return false;
        };
        // Acquire pairs with the daemon's registration of the slot.
        slot.state.load(Ordering::Acquire) == PROCESS_ACTIVE
            && slot.epoch.load(Ordering::Relaxed) as u32 == epoch
    }

    fn give_up(&self, _tries: u32) -> bool {
        let now = monotonic_ns();
        let since = *self.since.get().get_or_insert(now);
        self.since.set(Some(since));
        if now.saturating_sub(since) > LOCK_WAIT_NS {
            return true;
        }
        std::thread::yield_now();
        false
    }
}

/// Whether job `id` of queue `queue` is live: its record is filling at the job's birth
/// generation (a push between its bind and its publish), or queued, delayed, claimed or
/// being written by its holder with the job's birth and queue. Ended (acked, dead, freed,
/// reused) or out of range: not live.
pub(crate) fn job_is_live(seg: &Segment, queue: u32, id: JobId) -> bool {
    let records = seg.records();
    let (Some(st), Some(hdr)) = (records.state(id.index), records.header(id.index)) else {
        return false;
    };
    let w = st.load();
    let birth_mask = u32::MAX >> BIRTH_SHIFT;
    match w.state() {
        Some(State::Filling) => w.generation() & birth_mask == id.birth,
        Some(State::Queued | State::Claimed | State::Writing | State::Delayed) => {
            // The header as of the transition the Acquire load above saw.
            hdr.flags.load(Ordering::Relaxed) >> BIRTH_SHIFT == id.birth
                && hdr.queue.load(Ordering::Relaxed) == queue
        }
        _ => false,
    }
}
