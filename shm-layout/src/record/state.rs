//! The job record's state word and every transition on it.
//!
//! One `AtomicU64` per record:
//!
//! ```text
//!  63                32 31      24 23                0
//! +--------------------+----------+-------------------+
//! |     generation     |  state   |   holder slot     |
//! +--------------------+----------+-------------------+
//! ```
//!
//! `holder` is the process slot that the state belongs to (`NO_HOLDER` when none). Every
//! transition is one atomic step from an exact expected word (a CAS, but for leaving
//! `Filling(me)`, which only `me` writes: a store), so a process that dies between any two
//! instructions leaves each record in a state that names its holder, and recovery is a scan
//! by holder:
//!
//! ```text
//!   Free(g) --begin_fill(me)--> Filling(g, me) --publish--> Queued(g) --claim(me)--> Claimed(g, me)
//!      ^                              |                      ^    |                     |  |  |
//!      |      free_filling (recovery) |      requeue_claimed (recovery, lease expiry):  |  |  |
//!      +------------------------------+      Queued(g + 1) <------------------------------+  |  |
//!      +-- abandon (could not be indexed) --------------------------+                       |  |
//!      +-- ack(me): Free(g + 1) --------------------------------------------------------------+  |
//!                                          Dead(g + 1) <-- dead_letter (recovery) -------------+
//!
//!   Claimed(g, me) --begin_write--> Writing(g, me) --end_write--> Claimed(g + 1, me)   (extend a lease)
//!                                   Writing(g, me) --requeue_written / dead_letter_written--> Queued(g + 1) / Dead(g + 1)
//!   Dead(g) --take_dead(me)--> Writing(g, me)   (requeue a dead letter: attempts reset)
//!
//!   Filling(g, me) --publish_delayed--> Delayed(g)      (a push with a due time)
//!   Writing(g, me) --delay_written--> Delayed(g + 1)    (a nack with a delay)
//!   Delayed(g) --release_due--> Queued(g)               (the daemon, once due; then indexed)
//!   Delayed(g) --withdraw--> Free(g + 1)                (a queue deleted with --force)
//! ```
//!
//! `Delayed(g)` has no holder and is in no index: its due time is in the header
//! (`RecordHeader::due_ns`), and only the daemon's timer moves it on, so no steal can see it
//! early. A process that dies after writing it leaves nothing to recover but the job itself,
//! which the daemon finds by a record scan.
//!
//! `Writing(g, me)` is the holder's claim while it writes the record's header (attempt count,
//! last error, lease deadline): lease expiry only revokes `Claimed`, so from `begin_write` to
//! the CAS that leaves `Writing` nobody else can take the record, and the holder's header
//! writes cannot land on the record's next job. Recovery of a dead holder treats `Writing`
//! exactly like `Claimed`.
//!
//! Every transition that ends a claim or a holder's write (`ack`, a give-back, a dead
//! letter, `end_write`) moves the generation on, so a word never comes back to a value it
//! had: a stale `ClaimedJob` of a process whose job was revoked, re-queued and claimed again
//! by the same process slot (another thread of it, or the process that got the slot next)
//! cannot act on the new claim, and a lease scan cannot revoke a claim extended since it
//! read the deadline.
//!
//! **The claim CAS `Queued(g) -> Claimed(g, me)` is the one arbiter of who runs a job.**
//! Deques and overflow rings are only indexes; a stale handle (older generation) or a
//! duplicated one fails its claim, and the consumer moves on.
//!
//! Generations start at 1 and skip 0 on wrap, so a handle word of 0 is never valid and an
//! empty slot can be told from a handle.

use crate::sync::{AtomicU64, Ordering};

/// `holder` value meaning "no process".
pub const NO_HOLDER: u32 = 0x00FF_FFFF;

/// The most process slots a segment can have (holder ids are 24 bits, one value reserved).
pub const MAX_PROCESS_SLOTS: u32 = NO_HOLDER;

/// The state field of a record's state word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum State {
    /// Unused; may be allocated.
    Free = 0,
    /// Being written by its holder.
    Filling = 1,
    /// Waiting to be claimed; no holder.
    Queued = 2,
    /// Being run by its holder.
    Claimed = 3,
    /// Failed too often; kept for inspection, not run.
    Dead = 4,
    /// Still held by its holder, which is writing the header (giving the job back, or
    /// extending its lease); lease expiry leaves it alone, recovery treats it as `Claimed`.
    Writing = 5,
    /// Waiting for its due time (`RecordHeader::due_ns`); no holder, in no index. The
    /// daemon makes it `Queued` once due.
    Delayed = 6,
}

impl State {
    fn from_bits(b: u8) -> Option<Self> {
        Some(match b {
            0 => State::Free,
            1 => State::Filling,
            2 => State::Queued,
            3 => State::Claimed,
            4 => State::Dead,
            5 => State::Writing,
            6 => State::Delayed,
            _ => return None,
        })
    }
}

/// A decoded state word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateWord(pub u64);

impl StateWord {
    /// Packs the three fields.
    pub const fn pack(generation: u32, state: State, holder: u32) -> Self {
        StateWord((generation as u64) << 32 | (state as u64) << 24 | (holder & NO_HOLDER) as u64)
    }
    /// The generation.
    pub const fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
    /// The state, `None` when the bits are not one a correct program writes.
    pub fn state(self) -> Option<State> {
        State::from_bits((self.0 >> 24) as u8)
    }
    /// The holder's process slot.
    pub const fn holder(self) -> u32 {
        (self.0 as u32) & NO_HOLDER
    }
}

/// The generation after `g`, skipping 0.
pub const fn next_generation(g: u32) -> u32 {
    match g.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

/// A job handle: `(record index, generation)` in one word, as deque slots hold it. It names
/// one state of a record (a claim, a place in line), not a job: the generation moves on at
/// every transition. A job's identity, the one people see, is its [`JobId`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobHandle {
    /// Record index.
    pub index: u32,
    /// Record generation when the handle was made.
    pub generation: u32,
}

impl JobHandle {
    /// Encodes for a slot: `generation << 32 | index`; never 0 for a valid handle.
    pub const fn to_word(self) -> u64 {
        (self.generation as u64) << 32 | self.index as u64
    }
    /// Decodes a slot word; `None` for 0 (generation 0 is never issued).
    pub const fn from_word(w: u64) -> Option<Self> {
        let h = JobHandle { index: w as u32, generation: (w >> 32) as u32 };
        if h.generation == 0 {
            None
        } else {
            Some(h)
        }
    }
}

/// A job's stable id: its record and the generation it was pushed at (the handle `push`
/// returned), the same across every attempt, re-queue and lease extension, while the
/// handle's generation moves on at each. The one job identity every layer shows and takes:
/// printed and read back as `index.birth` (`Display` / `FromStr`) by the CLI, the C API's
/// `index` and `birth`, Python's `Job.id`; the wire carries it as its two numbers. The birth generation is kept to 24 bits (it lives
/// beside the last error's length in the header's `flags`), so it equals the push handle's
/// generation until a record has been reused 16 million times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId {
    /// Record index.
    pub index: u32,
    /// Generation at publish, low 24 bits.
    pub birth: u32,
}

/// Bits of `RecordHeader::flags` below the birth generation (the last error's length).
pub const BIRTH_SHIFT: u32 = 8;

impl JobId {
    /// The id of the job pushed as `h`.
    pub const fn of_push(h: JobHandle) -> JobId {
        JobId { index: h.index, birth: h.generation & (u32::MAX >> BIRTH_SHIFT) }
    }
}

impl core::fmt::Display for JobId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{}", self.index, self.birth)
    }
}

/// A job id as [`JobId`]'s `Display` prints it (`index.birth`) is not one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadJobId;

impl core::fmt::Display for BadJobId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("not a job id: two numbers joined by a dot, like 12.3")
    }
}

impl std::error::Error for BadJobId {}

/// Reads the printed form back: `index.birth`, each a decimal `u32`. A handle's
/// `index.generation` reads as well (the same shape), which the daemon's dead-letter lookup
/// accepts beside the birth.
impl core::str::FromStr for JobId {
    type Err = BadJobId;
    fn from_str(s: &str) -> Result<Self, BadJobId> {
        let (i, b) = s.split_once('.').ok_or(BadJobId)?;
        Ok(JobId { index: i.parse().map_err(|_| BadJobId)?, birth: b.parse().map_err(|_| BadJobId)? })
    }
}

impl core::fmt::Display for JobHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{}", self.index, self.generation)
    }
}

/// A transition did not apply: the word was not what it expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The word actually found.
    pub found: StateWord,
}

impl Conflict {
    /// `true` when the record has moved on to a later generation (or was never this one).
    pub fn is_stale(&self, generation: u32) -> bool {
        self.found.generation() != generation
    }
}

/// The record's state word, with the transitions as methods.
#[derive(Clone, Copy, Debug)]
pub struct RecordState<'a>(pub &'a AtomicU64);

impl<'a> RecordState<'a> {
    /// The current word. Acquire: a caller that acts on what it sees (a check, recovery)
    /// sees the record's fields as of the transition that wrote the word.
    pub fn load(&self) -> StateWord {
        StateWord(self.0.load(Ordering::Acquire))
    }

    fn cas(&self, from: StateWord, to: StateWord, success: Ordering) -> Result<(), Conflict> {
        self.0
            .compare_exchange(from.0, to.0, success, Ordering::Acquire)
            .map(|_| ())
            .map_err(|w| Conflict { found: StateWord(w) })
    }

    /// `Free(g) -> Filling(g, me)`: allocation. Returns the generation on success.
    ///
    /// Acquire pairs with the Release of the `ack` / `free_filling` / `abandon` that freed
    /// the record: the previous holder's reads of the payload are done before we write it.
    pub fn begin_fill(&self, me: u32) -> Result<u32, Conflict> {
        let w = self.load();
        if w.state() != Some(State::Free) {
            return Err(Conflict { found: w });
        }
        let g = w.generation();
        self.cas(w, StateWord::pack(g, State::Filling, me), Ordering::Acquire).map(|_| g)
    }

    /// `Filling(g, me) -> Queued(g)`. Release publishes the payload and fields written while
    /// filling; pairs with the Acquire of `claim`. A store, not a CAS: see
    /// [`leave_filling`](Self::leave_filling).
    #[inline]
    pub fn publish(&self, generation: u32, me: u32) -> Result<(), Conflict> {
        self.leave_filling(generation, me, State::Queued)
    }

    /// `Filling(g, me) -> to(g)`, with no holder, as one Release store.
    ///
    /// No CAS is needed to leave `Filling(g, me)`: in that state the word is written by `me`
    /// alone. No other process of a correct program moves a record it does not hold, and
    /// recovery frees it (`free_filling`) only once the kernel has said `me` is dead (its
    /// pidfd, or the exit that closed its connection), when `me` publishes nothing. The load
    /// before the store refuses a word that is no longer ours (a process that wrote garbage
    /// into the segment, or freed our slot by hand): it narrows what such a writer can make
    /// us do, not all of it, as nothing can.
    #[inline]
    fn leave_filling(&self, generation: u32, me: u32, to: State) -> Result<(), Conflict> {
        let ours = StateWord::pack(generation, State::Filling, me);
        // Relaxed: the last store to this word was ours (`begin_fill`), in this thread.
        let found = StateWord(self.0.load(Ordering::Relaxed));
        if found != ours {
            return Err(Conflict { found });
        }
        self.0.store(StateWord::pack(generation, to, NO_HOLDER).0, Ordering::Release);
        Ok(())
    }

    /// `Queued(g) -> Claimed(g, me)`: the one arbiter of who runs the job. Acquire pairs with
    /// `publish` (or `nack`): the payload is visible once this succeeds.
    pub fn claim(&self, generation: u32, me: u32) -> Result<(), Conflict> {
        self.cas(
            StateWord::pack(generation, State::Queued, NO_HOLDER),
            StateWord::pack(generation, State::Claimed, me),
            Ordering::Acquire,
        )
    }

    /// `Claimed(g, me) -> Free(g + 1)`: done. Release: our payload reads are ordered before
    /// the next `begin_fill`'s writes.
    pub fn ack(&self, generation: u32, me: u32) -> Result<(), Conflict> {
        self.cas(
            StateWord::pack(generation, State::Claimed, me),
            StateWord::pack(next_generation(generation), State::Free, NO_HOLDER),
            Ordering::Release,
        )
    }

    /// `Claimed(g, holder) -> Queued(g + 1)`: give the job back (recovery after the holder
    /// died, or an expired lease). Release publishes the attempt count the caller wrote
    /// while holding the job. The caller must then index the record again (by index: the
    /// overflow ring does not carry generations).
    pub fn requeue_claimed(&self, generation: u32, holder: u32) -> Result<(), Conflict> {
        self.cas(
            StateWord::pack(generation, State::Claimed, holder),
            StateWord::pack(next_generation(generation), State::Queued, NO_HOLDER),
            Ordering::Release,
        )
    }

    /// `Claimed(g, me) -> Writing(g, me)`: the holder takes the header for itself before it
    /// writes it, so that a lease revoke cannot hand the record to another job in between.
    /// Fails when the claim is no longer ours (lease expired, or a stale handle).
    pub fn begin_write(&self, generation: u32, me: u32) -> Result<(), Conflict> {
        self.cas(
            StateWord::pack(generation, State::Claimed, me),
            StateWord::pack(generation, State::Writing, me),
            Ordering::Acquire,
        )
    }

    /// `Writing(g, me) -> Claimed(g + 1, me)`; returns `g + 1`, the claim's generation from
    /// now on. Release publishes the new lease deadline to a lease scan that Acquires the
    /// word. The new generation makes the word differ from the one a lease scan may have
    /// read (with the old, expired deadline) before the extension: the scan's revoking CAS
    /// fails instead of taking back a claim that was just extended.
    pub fn end_write(&self, generation: u32, me: u32) -> Result<u32, Conflict> {
        let next = next_generation(generation);
        self.cas(
            StateWord::pack(generation, State::Writing, me),
            StateWord::pack(next, State::Claimed, me),
            Ordering::Release,
        )
        .map(|_| next)
    }

    /// `Dead(g) -> Writing(g, me)`: process slot `me` takes a dead letter to put it back in
    /// line (attempts reset), then leaves with [`requeue_written`](Self::requeue_written). A
    /// second requeuer's CAS fails; if `me` dies in between, recovery re-queues the job as
    /// it does any `Writing` record of a dead holder.
    pub fn take_dead(&self, generation: u32, me: u32) -> Result<(), Conflict> {
        self.cas(
            StateWord::pack(generation, State::Dead, NO_HOLDER),
            StateWord::pack(generation, State::Writing, me),
            Ordering::Acquire,
        )
    }

    /// `Writing(g, me) -> Queued(g + 1)`: a nack. Release publishes the attempt count and
    /// last error; pairs with the next `claim`. The caller must then index the record again.
    pub fn requeue_written(&self, generation: u32, me: u32) -> Result<(), Conflict> {
        self.cas(
            StateWord::pack(generation, State::Writing, me),
            StateWord::pack(next_generation(generation), State::Queued, NO_HOLDER),
            Ordering::Release,
        )
    }

    /// `Writing(g, me) -> Dead(g + 1)`: a nack at the attempt limit. Release publishes the
    /// last error to whoever lists the dead letters.
    pub fn dead_letter_written(&self, generation: u32, me: u32) -> Result<(), Conflict> {
        self.cas(
            StateWord::pack(generation, State::Writing, me),
            StateWord::pack(next_generation(generation), State::Dead, NO_HOLDER),
            Ordering::Release,
        )
    }

    /// `Claimed(g, me) -> Dead(g + 1)`: too many attempts.
    pub fn dead_letter(&self, generation: u32, me: u32) -> Result<(), Conflict> {
        self.cas(
            StateWord::pack(generation, State::Claimed, me),
            StateWord::pack(next_generation(generation), State::Dead, NO_HOLDER),
            Ordering::Release,
        )
    }

    /// `Filling(g, holder) -> Free(g + 1)`: recovery of a record whose filler died.
    pub fn free_filling(&self, generation: u32, holder: u32) -> Result<(), Conflict> {
        self.cas(
            StateWord::pack(generation, State::Filling, holder),
            StateWord::pack(next_generation(generation), State::Free, NO_HOLDER),
            Ordering::Release,
        )
    }

    /// `Queued(g) -> Free(g + 1)`: a just-published job that could be indexed nowhere (deque
    /// and overflow full) is withdrawn, so the push fails cleanly instead of leaving it to
    /// recovery. Also frees `Dead(g)` records (purge) when `from` is `State::Dead`, and
    /// `Delayed(g)` ones (a forced queue delete) when `from` is `State::Delayed`.
    pub fn withdraw(&self, generation: u32, from: State) -> Result<(), Conflict> {
        self.cas(
            StateWord::pack(generation, from, NO_HOLDER),
            StateWord::pack(next_generation(generation), State::Free, NO_HOLDER),
            Ordering::Release,
        )
    }

    /// `Filling(g, me) -> Delayed(g)`: a push with a due time. Release publishes the payload
    /// and the due time to the daemon's scan and to `release_due`. A store, as `publish`.
    pub fn publish_delayed(&self, generation: u32, me: u32) -> Result<(), Conflict> {
        self.leave_filling(generation, me, State::Delayed)
    }

    /// `Writing(g, me) -> Delayed(g + 1)`: a nack with a delay. Release publishes the attempt
    /// count, last error and due time.
    pub fn delay_written(&self, generation: u32, me: u32) -> Result<(), Conflict> {
        self.cas(
            StateWord::pack(generation, State::Writing, me),
            StateWord::pack(next_generation(generation), State::Delayed, NO_HOLDER),
            Ordering::Release,
        )
    }

    /// `Delayed(g) -> Queued(g)`: the job is due. AcqRel: Acquire pairs with the Release that
    /// made it `Delayed`, Release with the next `claim`. The caller must then index it.
    pub fn release_due(&self, generation: u32) -> Result<(), Conflict> {
        self.cas(
            StateWord::pack(generation, State::Delayed, NO_HOLDER),
            StateWord::pack(generation, State::Queued, NO_HOLDER),
            Ordering::AcqRel,
        )
    }

    /// `Dead(g) -> Queued(g)`: put a dead letter back in line as it is. (`requeue_dead`
    /// goes through [`take_dead`](Self::take_dead) instead, to reset the attempt count.)
    pub fn revive(&self, generation: u32) -> Result<(), Conflict> {
        self.cas(
            StateWord::pack(generation, State::Dead, NO_HOLDER),
            StateWord::pack(generation, State::Queued, NO_HOLDER),
            Ordering::Release,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{BadJobId, JobId};

    #[test]
    fn a_job_id_reads_back_as_it_prints_and_nothing_else_reads() {
        let id = JobId { index: 12, birth: 3 };
        assert_eq!(id.to_string().parse::<JobId>(), Ok(id));
        assert_eq!("4294967295.16777216".parse::<JobId>(), Ok(JobId { index: u32::MAX, birth: 1 << 24 }));
        for bad in ["", "12", "12.", ".3", "12.3.4", "a.3", "12.b", "-1.3", "12 .3", "4294967296.1"] {
            assert_eq!(bad.parse::<JobId>(), Err(BadJobId), "{bad:?}");
        }
    }
}
