//! Unique jobs: the key table, where a job pushed with a key holds that key, in its queue,
//! for as long as it is queued, delayed or running.
//!
//! The table is `keys` entries of [`KeyEntry`] at the end of the segment, open addressing:
//! a key lives in one of the [`KEY_WINDOW`] entries from its home (its hash modulo the
//! table's size, wrapping). An entry's state word moves by CAS:
//!
//! ```text
//!   Free(g) --claim--> Writing(g + 1, me) --publish--> Bound(g + 1)
//!   Bound(g) --claim (its job ended, or it was garbage)--> Writing(g + 1, me)
//!   Writing(g, dead) --recovery of the dead slot--> Free(g + 1)
//! ```
//!
//! - **A key's job ends, its entry is free**: a bound entry names its job (`JobId`), and it
//!   holds the key only while that job's record is live (queued, delayed, claimed, being
//!   written, or filling at the job's birth generation, see `table`). So no ack, dead letter,
//!   cancel, purge or recovery writes the table: the entry of an ended job is reusable by the
//!   next push, of any key, and a retry, a delay or the recovery of a dead holder's job keeps
//!   it, since the record stays live.
//! - **One pusher decides at a time per home**: a push with key K takes the lock word of
//!   K's home entry (one CAS; the holder's process slot and its epoch), scans the whole window
//!   for a live entry of K (found: refused with its job's id), then claims a free or ended
//!   entry of the window, writes K and its job, and unlocks. Every push of K takes the same
//!   lock, so of two racing pushes of K the second sees the first's entry. Pushes of other
//!   keys whose windows overlap take other locks and may race for the same entry: its CAS
//!   decides, the loser scans again. No entry ever becomes K's but under K's home lock.
//! - **kill -9**: a lock held by a process that is gone (its slot not attached at that
//!   epoch) is taken over by the next pusher; the daemon's recovery of a dead slot frees its
//!   locks and the entries it left `Writing`. A lock held under the pusher's own word is
//!   another thread of its process's, and is waited for; a slot no daemon registered (epoch
//!   0: a segment used as a library) counts as live, since nothing would recover it. The job of a pusher killed after it bound the
//!   key is a `Filling` record of a dead slot, which recovery frees: the key then holds no
//!   more.
//! - **Untrusted**: an entry with a state no correct program writes, a length past
//!   [`MAX_KEY_LEN`] or a job that is not live is reusable; an entry counts as a key's only
//!   when its job's record is live and of the entry's queue.

use crate::record::state::JobId;
use crate::sync::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(not(xtcq_loom))]
mod table;
#[cfg(not(xtcq_loom))]
pub use table::KeyTable;

/// The longest key, in bytes.
pub const MAX_KEY_LEN: usize = 64;

/// Entries a key may live in, from its home on.
pub const KEY_WINDOW: usize = 32;

/// The largest key table a segment may have.
pub const MAX_KEY_ENTRIES: u32 = 1 << 24;

const WORDS: usize = MAX_KEY_LEN / 8;

/// Entry kind: free (never used, or freed by recovery).
const FREE: u64 = 0;
/// Entry kind: being written by the pusher in its low bits.
const WRITING: u64 = 1;
/// Entry kind: holds a key for a job, while that job is live.
const BOUND: u64 = 2;

const WRITER_MASK: u64 = 0x00FF_FFFF;

fn pack(generation: u32, kind: u64, writer: u32) -> u64 {
    (generation as u64) << 32 | kind << 24 | (writer as u64 & WRITER_MASK)
}

fn kind(w: u64) -> u64 {
    (w >> 24) & 0xFF
}

fn writer(w: u64) -> u32 {
    (w & WRITER_MASK) as u32
}

fn next_generation(w: u64) -> u32 {
    match ((w >> 32) as u32).wrapping_add(1) {
        0 => 1,
        g => g,
    }
}

/// One entry of the key table (two lines: the words, then the key's bytes' tail).
#[repr(C, align(128))]
#[derive(Debug)]
pub struct KeyEntry {
    /// Generation, kind and writer (see the module docs).
    pub state: AtomicU64,
    /// The lock of the keys whose home this entry is: 0, or the holder's
    /// [`holder_word`].
    pub lock: AtomicU64,
    /// The bound job: `birth << 32 | index`.
    pub job: AtomicU64,
    /// Queue-table index of the key's queue.
    pub queue: AtomicU32,
    /// Bytes of the key.
    pub len: AtomicU32,
    /// The key, little-endian words, zero past `len`.
    pub bytes: [AtomicU64; WORDS],
}

impl KeyEntry {
    /// A free entry (for tests over heap memory; the segment's start zeroed, the same).
    pub fn free() -> Self {
        KeyEntry {
            state: AtomicU64::new(0),
            lock: AtomicU64::new(0),
            job: AtomicU64::new(0),
            queue: AtomicU32::new(0),
            len: AtomicU32::new(0),
            bytes: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// A lock word: process slot `slot` at registration `epoch` (never 0).
pub fn holder_word(slot: u32, epoch: u32) -> u64 {
    (epoch as u64) << 32 | (slot as u64 + 1)
}

/// The process slot a lock word names.
pub fn holder_slot(word: u64) -> Option<u32> {
    match word & 0xFFFF_FFFF {
        0 => None,
        s => Some(s as u32 - 1),
    }
}

fn job_word(id: JobId) -> u64 {
    (id.birth as u64) << 32 | id.index as u64
}

fn job_of(word: u64) -> JobId {
    JobId { index: word as u32, birth: (word >> 32) as u32 }
}

/// A job's key: 1 to [`MAX_KEY_LEN`] bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Key {
    words: [u64; WORDS],
    len: u32,
}

impl core::fmt::Debug for Key {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Key({:?})", String::from_utf8_lossy(&self.bytes()))
    }
}

/// A key that cannot be one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadKey {
    /// No bytes.
    #[error("a key is 1 to {MAX_KEY_LEN} bytes; this one is empty")]
    Empty,
    /// Too many bytes.
    #[error("a key is 1 to {MAX_KEY_LEN} bytes; this one is {len}")]
    TooLong {
        /// Its length.
        len: usize,
    },
}

impl Key {
    /// `bytes` as a key.
    pub fn new(bytes: &[u8]) -> Result<Key, BadKey> {
        if bytes.is_empty() {
            return Err(BadKey::Empty);
        }
        if bytes.len() > MAX_KEY_LEN {
            return Err(BadKey::TooLong { len: bytes.len() });
        }
        let mut padded = [0u8; MAX_KEY_LEN];
        padded[..bytes.len()].copy_from_slice(bytes);
        let words = core::array::from_fn(|i| {
            u64::from_le_bytes(padded[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]))
        });
        Ok(Key { words, len: bytes.len() as u32 })
    }

    /// Its bytes.
    pub fn bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).take(self.len as usize).collect()
    }

    /// Its home in a table of `n` entries, for queue `queue` (FNV-1a, then a mix of the high
    /// bits into the low: the same in every process and build).
    pub fn home(&self, queue: u32, n: usize) -> usize {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let words = [queue as u64, self.len as u64].into_iter().chain(self.words);
        for b in words.flat_map(u64::to_le_bytes) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= h >> 29;
        (h % n.max(1) as u64) as usize
    }
}

/// Why a key could not be bound to a job.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A live job of the queue holds the key.
    #[error("job {existing} of this queue, queued, delayed or running, holds this key")]
    Duplicate {
        /// That job.
        existing: JobId,
    },
    /// Every entry the key may live in holds a live job's key.
    #[error(
        "the key table is full where this key goes ({window} entries of {keys} hold live jobs' keys); \
         start xtcqd with a larger --keys"
    )]
    Full {
        /// The table's entries.
        keys: u32,
        /// Entries a key may live in.
        window: u32,
    },
    /// The segment has no key table.
    #[error("this segment has no key table (xtcqd --keys 0); start xtcqd with --keys N to push with keys")]
    NoTable,
    /// The lock of the key's home stayed with a live process past the wait.
    #[error(
        "the key table's entry for this key stayed locked by process slot {slot}, which is still \
         attached; try again"
    )]
    Busy {
        /// The lock holder's process slot.
        slot: u32,
    },
}

/// What the protocol needs to know of the rest of the segment.
pub trait KeyEnv {
    /// Whether job `id` of queue `queue` is still queued, delayed, running or being pushed.
    fn live(&self, queue: u32, id: JobId) -> bool;
    /// Whether the process that lock word `word` names is still attached as it was then.
    fn holder_alive(&self, word: u64) -> bool;
    /// Whether to stop waiting for a lock held by a live process, after `tries` tries.
    fn give_up(&self, tries: u32) -> bool;
}

/// An entry's fields, read whole (`None`: it changed while read).
struct Seen {
    queue: u32,
    key: Key,
    job: JobId,
}

/// Reads `e`'s fields as of state word `w` (loaded with Acquire, which pairs with the
/// Release store that bound it): a seqlock read, checked by loading the word again after an
/// Acquire fence, which pairs with the claimer's Release fence before it writes the fields.
fn read(e: &KeyEntry, w: u64) -> Option<Seen> {
    let queue = e.queue.load(Ordering::Relaxed);
    let len = e.len.load(Ordering::Relaxed);
    let words: [u64; WORDS] = core::array::from_fn(|i| e.bytes[i].load(Ordering::Relaxed));
    let job = job_of(e.job.load(Ordering::Relaxed));
    fence(Ordering::Acquire);
    if e.state.load(Ordering::Relaxed) != w || len == 0 || len as usize > MAX_KEY_LEN {
        return None;
    }
    Some(Seen { queue, key: Key { words, len }, job })
}

/// Binds `key` of queue `queue` to job `job` in `entries`, as process slot `slot` whose lock
/// word is `me`. Fails with the existing job's id when a live job of the queue holds it.
pub fn bind(
    entries: &[KeyEntry],
    queue: u32,
    key: &Key,
    job: JobId,
    (slot, me): (u32, u64),
    env: &impl KeyEnv,
) -> Result<(), KeyError> {
    if entries.is_empty() {
        return Err(KeyError::NoTable);
    }
    let home = key.home(queue, entries.len());
    let lock = &entries[home].lock;
    acquire(lock, me, env)?;
    crate::fail_point!("key.locked");
    let bound = bind_locked(entries, home, queue, key, job, slot, env);
    // Release pairs with the next holder's Acquire: it sees the entry we wrote. A CAS, so a
    // word someone else wrote over ours (only a broken process would) is left alone.
    let _ = lock.compare_exchange(me, 0, Ordering::Release, Ordering::Relaxed);
    bound
}

/// Takes the lock word `lock` for `me`: from 0, or from a holder that is gone.
fn acquire(lock: &AtomicU64, me: u64, env: &impl KeyEnv) -> Result<(), KeyError> {
    let mut tries = 0u32;
    loop {
        // Acquire pairs with the last holder's Release: its entries are visible to our scan.
        let held = match lock.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return Ok(()),
            Err(held) => held,
        };
        // Held under our own word is held by another thread of this process: waited for.
        if held != me
            && !env.holder_alive(held)
            && lock.compare_exchange(held, me, Ordering::Acquire, Ordering::Relaxed).is_ok()
        {
            return Ok(());
        }
        tries += 1;
        if env.give_up(tries) {
            return Err(KeyError::Busy { slot: holder_slot(held).unwrap_or(u32::MAX) });
        }
        crate::sync::spin_hint();
    }
}

/// The window's entries from `home`, wrapping.
fn window(entries: &[KeyEntry], home: usize) -> impl Iterator<Item = &KeyEntry> {
    let n = entries.len();
    (0..KEY_WINDOW.min(n)).map(move |i| &entries[(home + i) % n])
}

/// [`bind`] with the home lock held: scans the whole window, then claims an entry.
fn bind_locked(
    entries: &[KeyEntry],
    home: usize,
    queue: u32,
    key: &Key,
    job: JobId,
    slot: u32,
    env: &impl KeyEnv,
) -> Result<(), KeyError> {
    loop {
        // The key's own ended entry first (so a key keeps its entry), else the first free,
        // else the first whose job ended.
        let (own, free) = scan(entries, home, queue, key, env)?;
        let Some((e, w)) = own.or(free).or_else(|| ended(entries, home, env)) else {
            return Err(KeyError::Full {
                keys: entries.len() as u32,
                window: KEY_WINDOW.min(entries.len()) as u32,
            });
        };
        if claim(e, w, queue, key, job, slot) {
            return Ok(());
        }
        // Another home's pusher took it first: scan again.
    }
}

/// An entry and the state word it was seen with (the claim's CAS expects that word).
type Spotted<'e> = Option<(&'e KeyEntry, u64)>;

/// The window's entry of `key` whose job ended, and its first free entry; refused when a
/// live job holds `key`. Only the entries of `key` cost a look at their job's record: the
/// others' jobs are looked at by [`ended`], and only when no entry is free.
fn scan<'e>(
    entries: &'e [KeyEntry],
    home: usize,
    queue: u32,
    key: &Key,
    env: &impl KeyEnv,
) -> Result<(Spotted<'e>, Spotted<'e>), KeyError> {
    let (mut own, mut free) = (None, None);
    for e in window(entries, home) {
        let w = e.state.load(Ordering::Acquire);
        match kind(w) {
            // Another home's pusher writing another key (only our lock writes this one).
            WRITING => {}
            // Another key's, by the fields on the entry's first line: no whole read needed,
            // since an entry of our key changes only when its job ended (a claim by another
            // home) or under our lock.
            BOUND if !may_be(e, queue, key) => {}
            BOUND => match read(e, w) {
                Some(s) if s.queue == queue && s.key == *key => {
                    if env.live(queue, s.job) {
                        return Err(KeyError::Duplicate { existing: s.job });
                    }
                    own = own.or(Some((e, w)));
                }
                // Another key's; or changed while read: claimed by another home, not for
                // our key.
                _ => {}
            },
            // Free, or a state no correct program writes: reusable.
            _ => free = free.or(Some((e, w))),
        }
    }
    Ok((own, free))
}

/// Whether `e` may hold `key` of `queue`: its queue, length and first 8 bytes (all on its
/// first line) say so. Relaxed: the caller's Acquire load of a `Bound` state word made them
/// visible.
fn may_be(e: &KeyEntry, queue: u32, key: &Key) -> bool {
    e.queue.load(Ordering::Relaxed) == queue
        && e.len.load(Ordering::Relaxed) == key.len
        && e.bytes[0].load(Ordering::Relaxed) == key.words[0]
}

/// The window's first entry of another key whose job ended, or that reads as garbage (a
/// length no key has; or it changed while read, and then the claim's CAS fails).
fn ended<'e>(entries: &'e [KeyEntry], home: usize, env: &impl KeyEnv) -> Spotted<'e> {
    window(entries, home).find_map(|e| {
        let w = e.state.load(Ordering::Acquire);
        if kind(w) != BOUND {
            return None;
        }
        match read(e, w) {
            Some(s) => (!env.live(s.queue, s.job)).then_some((e, w)),
            None => Some((e, w)),
        }
    })
}

/// Claims entry `e` seen as `w` and binds it: `-> Writing(g + 1, slot)`, the fields, then
/// `-> Bound(g + 1)`. `false` when `w` changed first.
fn claim(e: &KeyEntry, w: u64, queue: u32, key: &Key, job: JobId, slot: u32) -> bool {
    let g = next_generation(w);
    // Acquire pairs with the Release that bound the entry before: whoever read it then is
    // done with what it read before we write.
    if e.state.compare_exchange(w, pack(g, WRITING, slot), Ordering::Acquire, Ordering::Relaxed).is_err() {
        return false;
    }
    // The seqlock writer's fence: a reader that sees any field written below sees, after
    // its Acquire fence, a state word other than the one it started from.
    fence(Ordering::Release);
    crate::fail_point!("key.writing");
    e.queue.store(queue, Ordering::Relaxed);
    e.len.store(key.len, Ordering::Relaxed);
    for (b, w) in e.bytes.iter().zip(key.words) {
        b.store(w, Ordering::Relaxed);
    }
    e.job.store(job_word(job), Ordering::Relaxed);
    // Release publishes the fields to the Acquire load of the next scan.
    e.state.store(pack(g, BOUND, slot), Ordering::Release);
    true
}

/// The live job of queue `queue` that holds `key`, if any: a look, with no lock (a push that
/// races it may bind the key just after).
pub fn find(entries: &[KeyEntry], queue: u32, key: &Key, env: &impl KeyEnv) -> Option<JobId> {
    if entries.is_empty() {
        return None;
    }
    window(entries, key.home(queue, entries.len())).find_map(|e| {
        let w = e.state.load(Ordering::Acquire);
        let s = (kind(w) == BOUND).then(|| read(e, w)).flatten()?;
        (s.queue == queue && s.key == *key && env.live(queue, s.job)).then_some(s.job)
    })
}

/// Every live binding: `(queue, key, job)`.
pub fn bound<'e>(
    entries: &'e [KeyEntry],
    env: &'e impl KeyEnv,
) -> impl Iterator<Item = (u32, Key, JobId)> + 'e {
    entries.iter().filter_map(move |e| {
        let w = e.state.load(Ordering::Acquire);
        let s = (kind(w) == BOUND).then(|| read(e, w)).flatten()?;
        env.live(s.queue, s.job).then_some((s.queue, s.key, s.job))
    })
}

/// Frees what process slot `slot`, which died, left in the table: the locks it held and
/// the entries it was writing. For the daemon's recovery of that slot, before the slot is
/// used again. Returns how many words it freed.
pub fn release_slot(entries: &[KeyEntry], slot: u32) -> usize {
    let mut freed = 0;
    for e in entries {
        let l = e.lock.load(Ordering::Relaxed);
        if holder_slot(l) == Some(slot)
            && e.lock.compare_exchange(l, 0, Ordering::Release, Ordering::Relaxed).is_ok()
        {
            freed += 1;
        }
        let w = e.state.load(Ordering::Acquire);
        if kind(w) == WRITING
            && writer(w) == slot
            && e.state
                .compare_exchange(w, pack(next_generation(w), FREE, 0), Ordering::Release, Ordering::Relaxed)
                .is_ok()
        {
            freed += 1;
        }
    }
    freed
}

#[cfg(all(test, not(xtcq_loom)))]
mod tests;
