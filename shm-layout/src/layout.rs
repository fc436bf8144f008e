//! The segment's on-disk (on-tmpfs) format: every struct, its size, and where each region
//! starts. Pinned by compile-time asserts; a change to any of it bumps [`LAYOUT_VERSION`].
//!
//! ```text
//!  offset 0
//!  +------------------------------------------------------------------+
//!  | SegmentHeader                                            384 B    |
//!  |   SegmentDescriptor (plain data, written once before `ready`)     |
//!  |     magic "XTCQSEG\0", layout version, struct sizes,              |
//!  |     SegmentConfig, RegionOffsets, creator pid/uid/time            |
//!  |   HeaderLive (own line): ready word, daemon pid, daemon epoch     |
//!  +------------------------------------------------------------------+
//!  | queue table: `queues` x QueueEntry                       384 B ea |
//!  |   QueueDescriptor (name, flavor, deques, capacity, limits)        |
//!  |   QueueControl (own line): state word                            |
//!  |   WaitWord (own line): futex sequence + sleeper count             |
//!  +------------------------------------------------------------------+
//!  | deques: `queues * deques_per_queue` x                             |
//!  |   DequeHeader: top + bottom (one line) | lease (own line)  256 B  |
//!  |   slots: `deque_capacity` x AtomicU64 (job handles)               |
//!  +------------------------------------------------------------------+
//!  | overflow rings: `queues` x                                        |
//!  |   OverflowHeader: head | tail, own lines                   256 B  |
//!  |   cells: `overflow_capacity` x AtomicU64                          |
//!  +------------------------------------------------------------------+
//!  | job records: `job_records` x                                      |
//!  |   RecordHeader (64 B): state word, payload length, queue,         |
//!  |     attempts, timestamps                                          |
//!  |   inline area: `inline_bytes` (rounded up to 64): a small         |
//!  |     payload, or the (class, block) of a large one                 |
//!  +------------------------------------------------------------------+
//!  | payload blocks (see `payload`): owner words (8 B a block), then   |
//!  |   per size class (128 B .. 16 MiB) `payload_blocks[k]` blocks     |
//!  +------------------------------------------------------------------+
//!  | process table: `process_slots` x ProcessSlot             128 B ea |
//!  +------------------------------------------------------------------+
//!  | metrics: `queues` x (`process_slots` + 2) x MetricsBlock 128 B ea |
//!  |   per queue: one block per process slot (written only by the      |
//!  |   slot's holder), the daemon's own block, the reset baseline      |
//!  +------------------------------------------------------------------+
//!  | batches (version 10): [`BATCH_SLOTS`] x BatchEntry       128 B ea |
//!  |   then `job_records` x AtomicU64: each record's batch reference   |
//!  | key table: `keys` x KeyEntry (unique jobs, see `keys`)   128 B ea |
//!  +------------------------------------------------------------------+
//!  total_len (a multiple of 4096)
//! ```
//!
//! Every offset is from the segment base: each process maps the segment at its own address.
//! An attacher recomputes the whole layout from the configuration and refuses the segment
//! unless every offset, size and the length agree (see `segment`).

mod config_error;
pub mod payload;
mod sizes;

pub use crate::limit_words::RateWords;
pub use config_error::ConfigError;

use crate::cache_line::CacheLine;
use crate::record::state::MAX_PROCESS_SLOTS;
use core::mem::{align_of, offset_of, size_of};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64};

/// First 8 bytes of every segment.
pub const MAGIC: [u8; 8] = *b"XTCQSEG\0";

/// Bumped on any change to this file, and on any new value a shared word can hold. What
/// each version changed is in CHANGELOG.md ("Segment layout versions").
pub const LAYOUT_VERSION: u32 = 10;

/// `HeaderLive::ready` once the creator has initialised everything.
pub const READY: u32 = 0x5245_4459; // "READY"

/// `HeaderLive::ready` of a segment a daemon replaced (`xtcqd --recreate`) just before it
/// unlinked the file: processes still mapping it stop using it instead of pushing jobs that
/// no consumer of the new segment will see.
pub const RETIRED: u32 = 0x5245_5449; // "RETI"

/// Queue names are at most this many bytes of UTF-8.
pub const MAX_QUEUE_NAME: usize = 64;

/// Record headers are this big; payloads follow.
pub const RECORD_HEADER_SIZE: usize = 64;

/// What a segment holds. Fixed at creation.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentConfig {
    /// Queue table entries.
    pub queues: u32,
    /// Deques each queue has room for.
    pub deques_per_queue: u32,
    /// Slots per deque (a power of two).
    pub deque_capacity: u32,
    /// Job records shared by all queues.
    pub job_records: u32,
    /// The largest payload a job may carry.
    pub payload_bytes: u32,
    /// Process table entries.
    pub process_slots: u32,
    /// Cells per overflow ring (a power of two).
    pub overflow_capacity: u32,
    /// Payload bytes kept in the record itself (layout version 6); larger payloads go to a
    /// block (see [`payload`]).
    pub inline_bytes: u32,
    /// Blocks of each size class (`128 << k` bytes), or [`payload::AUTO_BLOCKS`].
    pub payload_blocks: [u32; payload::PAYLOAD_CLASSES],
    /// Entries of the key table, which unique jobs take (0: no table, a push with a key is
    /// refused). Layout version 10; `xtcqd --keys`.
    pub keys: u32,
}

impl SegmentConfig {
    /// What [`Default`] gives (in a `const`, for the named sizes built from it).
    pub const DEFAULT: SegmentConfig = SegmentConfig {
        queues: 16,
        deques_per_queue: 16,
        deque_capacity: 1024,
        job_records: 65536,
        payload_bytes: 448,
        process_slots: 256,
        overflow_capacity: 65536,
        inline_bytes: 64,
        payload_blocks: [payload::AUTO_BLOCKS; payload::PAYLOAD_CLASSES],
        keys: 4096,
    };
}

impl Default for SegmentConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl SegmentConfig {
    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        fn range(field: &'static str, v: u32, min: u64, max: u64) -> Result<(), ConfigError> {
            let value = v as u64;
            if value < min || value > max {
                return Err(ConfigError::OutOfRange { field, value, min, max });
            }
            Ok(())
        }
        fn pow2(field: &'static str, v: u32) -> Result<(), ConfigError> {
            if !v.is_power_of_two() {
                return Err(ConfigError::NotPowerOfTwo { field, value: v as u64 });
            }
            Ok(())
        }
        range("queues", self.queues, 1, 4096)?;
        range("deques_per_queue", self.deques_per_queue, 1, 4096)?;
        range("deque_capacity", self.deque_capacity, 2, 1 << 24)?;
        pow2("deque_capacity", self.deque_capacity)?;
        range("job_records", self.job_records, 1, 1 << 30)?;
        range("payload_bytes", self.payload_bytes, 0, 1 << 24)?;
        range("process_slots", self.process_slots, 1, MAX_PROCESS_SLOTS as u64 - 1)?;
        range("overflow_capacity", self.overflow_capacity, 2, 1 << 30)?;
        pow2("overflow_capacity", self.overflow_capacity)?;
        range("keys", self.keys, 0, crate::keys::MAX_KEY_ENTRIES as u64)?;
        payload::validate(self)
    }
}

/// The size of every struct the segment was built with, so that an attacher built from
/// other sources refuses it instead of misreading it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StructSizes {
    /// `size_of::<SegmentHeader>()`
    pub header: u32,
    /// `size_of::<QueueEntry>()`
    pub queue_entry: u32,
    /// `size_of::<DequeHeader>()`
    pub deque_header: u32,
    /// `size_of::<OverflowHeader>()`
    pub overflow_header: u32,
    /// `RECORD_HEADER_SIZE`
    pub record_header: u32,
    /// `size_of::<ProcessSlot>()`
    pub process_slot: u32,
}

impl StructSizes {
    /// The sizes this build uses.
    pub const CURRENT: StructSizes = StructSizes {
        header: size_of::<SegmentHeader>() as u32,
        queue_entry: size_of::<QueueEntry>() as u32,
        deque_header: size_of::<DequeHeader>() as u32,
        overflow_header: size_of::<OverflowHeader>() as u32,
        record_header: RECORD_HEADER_SIZE as u32,
        process_slot: size_of::<ProcessSlot>() as u32,
    };
}

/// Where each region starts, and the stride of repeated items.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RegionOffsets {
    /// Queue table.
    pub queue_table: u64,
    /// First deque.
    pub deques: u64,
    /// Bytes from one deque to the next.
    pub deque_stride: u64,
    /// First overflow ring.
    pub overflow: u64,
    /// Bytes from one ring to the next.
    pub overflow_stride: u64,
    /// First job record.
    pub records: u64,
    /// Bytes from one record to the next.
    pub record_stride: u64,
    /// Payload block region (layout version 6; see [`payload::block_layout`]).
    pub blocks: u64,
    /// Process table.
    pub processes: u64,
    /// Metrics region (counter blocks, see [`MetricsBlock`]).
    pub metrics: u64,
    /// Length of the whole segment.
    pub total_len: u64,
}

/// The plain-data part of the header: written once by the creator before `ready` is set,
/// never changed after. Any bit pattern is a valid value of this type, so it can be copied
/// out of a hostile segment and then validated.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentDescriptor {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`LAYOUT_VERSION`].
    pub layout_version: u32,
    /// Zero.
    pub flags: u32,
    /// Struct sizes of the creator's build.
    pub sizes: StructSizes,
    /// What the segment holds.
    pub config: SegmentConfig,
    /// Where it is.
    pub regions: RegionOffsets,
    /// Creator's pid.
    pub creator_pid: u32,
    /// Creator's uid.
    pub creator_uid: u32,
    /// Creation time, ns since the Unix epoch.
    pub created_unix_ns: u64,
}

/// The header's live words.
#[repr(C)]
#[derive(Debug)]
pub struct HeaderLive {
    /// [`READY`] once initialised (stored last, Release).
    pub ready: AtomicU32,
    /// Pid of the daemon serving the segment now (0 when none).
    pub daemon_pid: AtomicU32,
    /// Bumped each time a daemon adopts the segment.
    pub daemon_epoch: AtomicU64,
}

/// Offset 0 of the segment.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct SegmentHeader {
    /// Plain data, padded to two lines.
    pub desc: DescriptorBlock,
    /// Own line.
    pub live: CacheLine<HeaderLive>,
}

/// [`SegmentDescriptor`] padded to 256 bytes.
#[repr(C, align(128))]
#[derive(Debug, Clone, Copy)]
pub struct DescriptorBlock {
    /// The descriptor.
    pub desc: SegmentDescriptor,
}

/// Queue-table entry state: unused (never used, or its queue was deleted); its deques and
/// overflow ring are all zero.
pub const QUEUE_FREE: u32 = 0;
/// Queue-table entry state: being written by the daemon.
pub const QUEUE_CREATING: u32 = 1;
/// Queue-table entry state: in use; the descriptor is final.
pub const QUEUE_ACTIVE: u32 = 2;
/// Queue-table entry state: being deleted by the daemon (`ACTIVE -> DELETING -> FREE`). No
/// lookup returns it, so nothing new attaches; its jobs are dropped and its deques, overflow
/// ring and descriptor reset before it becomes [`QUEUE_FREE`]. A daemon that finds one when
/// it adopts a segment (its predecessor died during the delete) finishes the delete.
pub const QUEUE_DELETING: u32 = 3;

/// A queue's fixed properties. Plain data, written while the entry is [`QUEUE_CREATING`],
/// before `QueueControl::state` becomes [`QUEUE_ACTIVE`] (Release), and not written again
/// until the entry is created anew after a delete (a delete leaves it as it was, so a reader
/// that saw `ACTIVE` just before the delete copies a whole descriptor, not a half-zeroed one).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueDescriptor {
    /// UTF-8 name, `name_len` bytes used.
    pub name: [u8; MAX_QUEUE_NAME],
    /// Bytes of `name` used.
    pub name_len: u32,
    /// `Flavor as u32`.
    pub flavor: u32,
    /// Deques in use, `<= deques_per_queue`.
    pub deque_count: u32,
    /// Slots used per deque, a power of two `<= deque_capacity`.
    pub capacity: u32,
    /// Attempts before a job is dead-lettered (0: no limit).
    pub max_attempts: u32,
    /// Default claim lease, ms (0: none).
    pub lease_ms: u32,
    /// Creation time, ns since the Unix epoch.
    pub created_unix_ns: u64,
}

/// A queue's state word, and its flow word beside it.
#[repr(C)]
#[derive(Debug)]
pub struct QueueControl {
    /// `QUEUE_*`.
    pub state: AtomicU32,
    /// Flow bits ([`FLOW_PAUSED`]), written only by the daemon and read by every consumer
    /// before it takes a job: a line that changes only on create, delete, pause and resume,
    /// so it stays in every consumer's cache. Layout version 7; zero (no bit set) in a
    /// segment made before.
    pub flow: AtomicU32,
    /// Most of the queue's jobs claimed at once, across every process (0: no limit). Written
    /// only by the daemon. Layout version 8.
    pub max_running: AtomicU32,
    /// Slots of `max_running` taken: the count in the low 32 bits, a sequence every change
    /// moves in the high 32 (`segment::running`). Kept only while the queue has a limit.
    /// Layout version 8.
    pub running: AtomicU64,
    /// The queue's rate limit (`segment::rate`), read only while [`FLOW_RATED`] is set.
    /// Layout version 9.
    pub rate: RateWords,
    /// Priority levels (`levels`): 0 or 1 for a queue of one level, which takes no other
    /// path than a queue of a segment made before. Written only by the daemon, before the
    /// entry becomes active. Layout version 10.
    pub levels: AtomicU32,
    /// Aging (`levels`): every `aging`-th job a consumer handle takes comes from the least
    /// urgent non-empty level (0: never). Written as `levels` is. Layout version 10.
    pub aging: AtomicU32,
}

/// [`QueueControl::flow`] bit: the queue is paused, consumers take nothing from it and
/// pushes wake nobody.
pub const FLOW_PAUSED: u32 = 1;

/// [`QueueControl::flow`] bit: the queue has a rate limit ([`QueueControl::rate`]), which a
/// consumer checks before it takes a job. Layout version 9.
pub const FLOW_RATED: u32 = 2;

/// A futex word, the sleeper count and the armed descriptor waiters: consumers sleep on
/// `seq` or on a descriptor, producers wake one only when `sleepers` is non-zero (see
/// `wait` and `wake_protocol`).
#[repr(C)]
#[derive(Debug)]
pub struct WaitWord {
    /// Futex word; bumped by a producer that saw sleepers.
    pub seq: AtomicU32,
    /// Consumers inside a wait, futex or descriptor.
    pub sleepers: AtomicU32,
    /// Descriptor waiters armed, a bit each (in the line's spare bytes: a segment made before
    /// reads zero, none armed).
    pub armed: [AtomicU64; crate::wake_protocol::WAKE_WORDS],
    /// Of a queue with several priority levels, a bit per level that may hold jobs, set by
    /// pushes and cleared by consumers that find the level empty (`levels`). On this line
    /// because a push reads `sleepers` here anyway. Layout version 10.
    pub hints: AtomicU32,
    /// Unused: keeps `searching` off the 64 bytes every push reads.
    pub spare: [u32; 5],
    /// Consumers in a wait looking for work now, at most a bound of them
    /// (`wake_protocol::Searchers`); a push while one searches wakes nobody. In the second
    /// half of the line: searchers write it at each search, and a push reads it only once
    /// it saw sleepers, so a push with nobody asleep does not take the line from a searcher
    /// (sharing the first half cost one consumer about a fifth of its rate). Zero in a
    /// segment made before it: nobody searching, every sleeper woken as before.
    pub searching: AtomicU32,
}

impl WaitWord {
    /// The sleeper count and armed bits, for the wait protocol.
    pub fn sleepers(&self) -> crate::wake_protocol::Sleepers<'_> {
        crate::wake_protocol::Sleepers { sleepers: &self.sleepers, armed: &self.armed }
    }

    /// The searcher count, for the wait protocol.
    pub fn searchers(&self) -> crate::wake_protocol::Searchers<'_> {
        crate::wake_protocol::Searchers { searching: &self.searching }
    }
}

/// One queue-table entry.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct QueueEntry {
    /// Fixed properties (own line).
    pub desc: QueueDescBlock,
    /// State (own line).
    pub control: CacheLine<QueueControl>,
    /// Waiting (own line).
    pub wait: CacheLine<WaitWord>,
}

/// [`QueueDescriptor`] on its own line, then the queue's limits in the line's spare bytes.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct QueueDescBlock {
    /// The descriptor.
    pub desc: QueueDescriptor,
    /// Record quota and dead-letter cap (layout version 5). Offset 96.
    pub limits: QueueLimits,
}

/// A queue's record quota and dead-letter cap, what the daemon's scan last counted, and the
/// records its jobs hold as pushes and frees keep them.
///
/// The limits and the scan's counts are written only by the daemon: the limits when it
/// creates the queue (reset to zero by every create, before the entry becomes active), the
/// counts by its periodic scan and only when they change. A push reads `max_records`; only
/// when it is not zero (a queue with a quota) do pushes and frees write `held`. Zero in a
/// segment of a build before version 5, which means "no limit".
#[repr(C)]
#[derive(Debug)]
pub struct QueueLimits {
    /// Most records the queue's jobs may hold at once (0: no quota).
    pub max_records: AtomicU32,
    /// Most dead letters kept; past it the daemon drops the oldest (0: no cap).
    pub max_dead: AtomicU32,
    /// Records the queue's jobs held (any state but free) at the daemon's last scan.
    pub records_used: AtomicU32,
    /// Dead letters at the daemon's last scan.
    pub dead: AtomicU32,
    /// Dead letters dropped by the cap since the queue was created.
    pub dead_dropped: AtomicU64,
    /// Records the queue's jobs hold, kept exactly by pushes and frees while the queue has
    /// a quota (`segment::quota::Held`): the count in the low 32 bits, a sequence every
    /// change moves in the high 32. Zero in older segments, where it was reserved.
    pub held: AtomicU64,
}

/// A deque's indices, together on one line, then its lease on its own line; slots follow on
/// lines of their own.
///
/// `top` and `bottom` share a line on purpose, although thieves write `top` and the owner
/// writes `bottom`, against the rule that hot words written by different processes get their
/// own lines (design §3). That rule is for a word one side writes while the other side only
/// needs a *different* word; here every steal reads both (load `top`, fence, load `bottom`,
/// CAS `top`), and the owner's LIFO pop reads `top` right after writing `bottom`. With a line
/// each, every steal misses on two lines the other core has written instead of one. Measured
/// (benches/results/2026-12-03.md, "Deque"): the same deque code over heap words reached 1.00-1.05x
/// crossbeam-deque with single steals and 1.05-1.18x with batch steals (LIFO) with both words
/// on one line, against 0.36-0.80x with a line each; crossbeam-deque also keeps its `front`
/// and `back` together. The price: thieves polling an idle deque share the line the owner's
/// pushes write. (The owner's `push` reads `top` only when its cached copy says the deque is
/// full, so it does not pull the line back on every push.) Layout version 2; version 1 had a
/// line per index.
///
/// `lease` (written by the daemon, read on attach and recovery) keeps a line of its own; the
/// rest of the first line is padding (zero in a fresh segment, never read).
#[repr(C, align(128))]
#[derive(Debug)]
pub struct DequeHeader {
    /// Next index to steal; written by thieves (CAS) and the owner's last-item pop. Offset 0.
    pub top: AtomicI64,
    /// Next index to push; written only by the owner. Offset 8, on `top`'s line.
    pub bottom: AtomicI64,
    /// Lease: `0` none, else `epoch << 32 | (owner process slot + 1)`. Written by the daemon.
    /// Offset 128, its own line.
    pub lease: CacheLine<AtomicU64>,
}

/// Lease word of a deque held by process slot `slot` at `epoch` (see [`DequeHeader::lease`]).
pub fn lease_word(slot: u32, epoch: u32) -> u64 {
    (epoch as u64) << 32 | (slot as u64 + 1)
}

/// The process slot a lease word names, `None` for no lease.
pub fn lease_holder(word: u64) -> Option<u32> {
    match word & 0xFFFF_FFFF {
        0 => None,
        s => Some(s as u32 - 1),
    }
}

/// An overflow ring's positions, each on its own line; cells follow.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct OverflowHeader {
    /// Next position to pop.
    pub head: CacheLine<AtomicU64>,
    /// Next position to push.
    pub tail: CacheLine<AtomicU64>,
}

/// The fixed fields of a job record; the payload follows at [`RECORD_HEADER_SIZE`].
#[repr(C, align(64))]
#[derive(Debug)]
pub struct RecordHeader {
    /// Generation, state and holder (see `record::state`).
    pub state: AtomicU64,
    /// Payload bytes used.
    pub payload_len: AtomicU32,
    /// Queue-table index of the queue the job belongs to.
    pub queue: AtomicU32,
    /// Times claimed and given back.
    pub attempts: AtomicU32,
    /// The last error's length (bits 0-4, `dead_letter`), the priority the job was pushed at
    /// (bits 5-7, `levels`; layout version 10, zero before) and the birth generation (bits
    /// 8-31, `JobId`).
    pub flags: AtomicU32,
    /// When it was published, CLOCK_MONOTONIC ns; for a `Delayed` record (and after it, the
    /// `Queued` one it becomes) when it is due, which is when it joins the line.
    pub enqueued_ns: AtomicU64,
    /// Claim lease deadline, CLOCK_MONOTONIC ns (0: none).
    pub deadline_ns: AtomicU64,
    /// Reserved.
    pub reserved: [AtomicU64; 3],
}

/// Process-slot state: unused.
pub const PROCESS_FREE: u32 = 0;
/// Process-slot state: attached.
pub const PROCESS_ACTIVE: u32 = 1;
/// Process-slot state: died; recovery in progress.
pub const PROCESS_RECOVERING: u32 = 2;

/// One attached process, as the daemon registered it.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct ProcessSlot {
    /// `PROCESS_*`.
    pub state: AtomicU32,
    /// Role bits (1 owner, 2 thief).
    pub role: AtomicU32,
    /// Pid in the daemon's namespace (0 if unknown).
    pub pid: AtomicU32,
    /// Uid.
    pub uid: AtomicU32,
    /// Process start time (clock ticks since boot, from /proc/PID/stat), so a reused pid
    /// is not taken for the old process.
    pub start_time: AtomicU64,
    /// Incarnation counter of this slot, bumped on each registration.
    pub epoch: AtomicU64,
    /// When registered, ns since the Unix epoch.
    pub attached_unix_ns: AtomicU64,
}

/// Counters in a [`MetricsBlock`]: the index of each running total.
pub const METRIC_COUNTERS: usize = 9;

/// A block of running totals for one (process slot, queue), or the daemon's own totals of a
/// queue, or a queue's reset baseline (see `metrics`). Its own two lines: only one process
/// writes it. Its second line is padding: the next block starts on its own pair of lines.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct MetricsBlock {
    /// Indexed by `metrics::Counter`: any thread of the process, `fetch_add`.
    pub counters: [AtomicU64; METRIC_COUNTERS],
    /// The futex sleepers this process slot has counted in the queue's `sleepers` (in
    /// `steal_wait`, or armed on a futex-kind wake descriptor): what the daemon takes off the
    /// count when the process dies asleep (`recovery::forget_sleepers`). The low half counts
    /// them; the high half is the generation that forget moves on, so that a sleep it took
    /// off does not come off again when it ends (`wait::Waker::sleep_ends`). In what was
    /// padding until it (zero in older segments: nothing recorded, nothing taken off).
    pub asleep: AtomicU64,
    /// The searchers this process slot has counted in the queue's `searching` (in a wait,
    /// looking for work): what the daemon takes off the count when the process dies searching
    /// (`recovery::forget_sleepers`), so that a dead searcher does not keep producers from
    /// waking sleepers. In what was padding until it (zero in older segments).
    pub searching: AtomicU64,
}

// The layout is a file format: pin it.
const _: () = {
    assert!(size_of::<SegmentDescriptor>() <= 256);
    assert!(size_of::<DescriptorBlock>() == 256);
    assert!(size_of::<SegmentHeader>() == 384);
    assert!(offset_of!(SegmentHeader, live) == 256);
    assert!(offset_of!(SegmentDescriptor, magic) == 0);
    assert!(offset_of!(SegmentDescriptor, layout_version) == 8);
    assert!(offset_of!(SegmentDescriptor, sizes) == 16);
    assert!(offset_of!(SegmentDescriptor, config) == 40);
    assert!(offset_of!(SegmentDescriptor, regions) == 152);
    assert!(size_of::<SegmentDescriptor>() == 256);
    assert!(size_of::<SegmentConfig>() == 108);
    assert!(size_of::<crate::keys::KeyEntry>() == 128);
    assert!(size_of::<RegionOffsets>() == 88);
    assert!(size_of::<QueueDescriptor>() == 96);
    assert!(size_of::<QueueEntry>() == 384);
    assert!(size_of::<QueueDescBlock>() == 128);
    assert!(offset_of!(QueueDescBlock, limits) == 96);
    assert!(size_of::<QueueLimits>() == 32);
    assert!(offset_of!(QueueEntry, control) == 128);
    assert!(offset_of!(QueueControl, flow) == 4);
    assert!(offset_of!(QueueControl, max_running) == 8);
    assert!(offset_of!(QueueControl, running) == 16);
    assert!(offset_of!(QueueControl, rate) == 24);
    assert!(size_of::<RateWords>() == 24);
    assert!(offset_of!(RateWords, burst) == 8);
    assert!(offset_of!(RateWords, theoretical) == 16);
    assert!(offset_of!(QueueControl, levels) == 48);
    assert!(offset_of!(QueueControl, aging) == 52);
    assert!(size_of::<QueueControl>() <= 128);
    assert!(offset_of!(WaitWord, hints) == 40);
    assert!(offset_of!(WaitWord, searching) == 64);
    assert!(size_of::<WaitWord>() <= 128);
    assert!(offset_of!(QueueEntry, wait) == 256);
    // `top` and `bottom` on the first line, `lease` on the second; slots start on the third.
    assert!(size_of::<DequeHeader>() == 256);
    assert!(align_of::<DequeHeader>() == 128);
    assert!(offset_of!(DequeHeader, top) == 0);
    assert!(offset_of!(DequeHeader, bottom) == 8);
    assert!(offset_of!(DequeHeader, lease) == 128);
    assert!(size_of::<OverflowHeader>() == 256);
    assert!(size_of::<RecordHeader>() == RECORD_HEADER_SIZE);
    assert!(align_of::<RecordHeader>() == 64);
    assert!(offset_of!(RecordHeader, state) == 0);
    assert!(offset_of!(RecordHeader, payload_len) == 8);
    assert!(offset_of!(RecordHeader, queue) == 12);
    assert!(size_of::<ProcessSlot>() == 128);
    assert!(size_of::<MetricsBlock>() == 128);
    assert!(offset_of!(MetricsBlock, searching) == 80);
    assert!(size_of::<AtomicU64>() == 8 && align_of::<AtomicU64>() == 8);
    assert!(size_of::<AtomicI64>() == 8 && align_of::<AtomicI64>() == 8);
};

const PAGE: u64 = 4096;

pub(crate) fn round_up(v: u64, to: u64) -> Option<u64> {
    v.checked_add(to - 1).map(|x| x / to * to)
}

/// The largest segment we will lay out (1 TiB).
pub const MAX_SEGMENT_LEN: u64 = 1 << 40;

/// Where the key table of a segment laid out as `regions` for `c` starts: past the metrics
/// and batch regions, on a line of its own (not in [`RegionOffsets`], which had no room left for it).
pub fn key_table_offset(c: &SegmentConfig, regions: &RegionOffsets) -> u64 {
    let blocks = c.queues as u64 * (c.process_slots as u64 + 2);
    let metrics_end = regions.metrics + blocks * size_of::<MetricsBlock>() as u64;
    // Past the batch region (which a configuration that lays out at all never overflows).
    batch_region(c, metrics_end).map_or(metrics_end, |b| b.end).next_multiple_of(128)
}

/// Computes the regions of a configuration. The same function serves creation and
/// validation at attach, so the two can never disagree.
pub fn compute_regions(c: &SegmentConfig) -> Result<RegionOffsets, ConfigError> {
    c.validate()?;
    let too_large = ConfigError::TooLarge { max: MAX_SEGMENT_LEN };
    let mul = |a: u64, b: u64| a.checked_mul(b).ok_or(too_large.clone());
    let add = |a: u64, b: u64| a.checked_add(b).ok_or(too_large.clone());
    let line = 128u64;

    let queue_table = size_of::<SegmentHeader>() as u64;
    let deques = add(queue_table, mul(c.queues as u64, size_of::<QueueEntry>() as u64)?)?;
    let deque_stride =
        round_up(add(size_of::<DequeHeader>() as u64, mul(c.deque_capacity as u64, 8)?)?, line)
            .ok_or(too_large.clone())?;
    let n_deques = mul(c.queues as u64, c.deques_per_queue as u64)?;
    let overflow = add(deques, mul(n_deques, deque_stride)?)?;
    let overflow_stride =
        round_up(add(size_of::<OverflowHeader>() as u64, mul(c.overflow_capacity as u64, 8)?)?, line)
            .ok_or(too_large.clone())?;
    let records = add(overflow, mul(c.queues as u64, overflow_stride)?)?;
    let record_stride = add(RECORD_HEADER_SIZE as u64, payload::inline_area(c))?;
    let payload_blocks =
        round_up(add(records, mul(c.job_records as u64, record_stride)?)?, line).ok_or(too_large.clone())?;
    let block_len = payload::block_layout(c).ok_or(too_large.clone())?.len;
    let processes = round_up(add(payload_blocks, block_len)?, line).ok_or(too_large.clone())?;
    let metrics = add(processes, mul(c.process_slots as u64, size_of::<ProcessSlot>() as u64)?)?;
    let blocks = mul(c.queues as u64, c.process_slots as u64 + 2)?;
    let metrics_end = add(metrics, mul(blocks, size_of::<MetricsBlock>() as u64)?)?;
    let batches_end = batch_region(c, metrics_end).ok_or(too_large.clone())?.end;
    // The key table last, after the batch region.
    let keys = round_up(batches_end, line).ok_or(too_large.clone())?;
    let end = add(keys, mul(c.keys as u64, size_of::<crate::keys::KeyEntry>() as u64)?)?;
    let total_len = round_up(end, PAGE).ok_or(too_large.clone())?;
    if total_len > MAX_SEGMENT_LEN || total_len > isize::MAX as u64 {
        return Err(too_large);
    }
    Ok(RegionOffsets {
        queue_table,
        deques,
        deque_stride,
        overflow,
        overflow_stride,
        records,
        record_stride,
        blocks: payload_blocks,
        processes,
        metrics,
        total_len,
    })
}

/// Batch-table entries in a segment (layout version 10); a full table refuses
/// `batch open` until a completed batch's entry is reused.
pub const BATCH_SLOTS: u32 = 1024;

/// Where the batch region of a configuration lies, after the metrics region that ends at
/// `metrics_end`: the table, then one reference word per job record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRegion {
    /// First [`BatchEntry`].
    pub table: u64,
    /// First record's reference word (`batch::RecordBatch`).
    pub refs: u64,
    /// Where the region ends.
    pub end: u64,
}

/// The batch region after a metrics region ending at `metrics_end`; `None` on overflow.
pub fn batch_region(c: &SegmentConfig, metrics_end: u64) -> Option<BatchRegion> {
    let table = round_up(metrics_end, 128)?;
    let refs = table.checked_add(u64::from(BATCH_SLOTS) * size_of::<BatchEntry>() as u64)?;
    let end = refs.checked_add(u64::from(c.job_records).checked_mul(8)?)?;
    Some(BatchRegion { table, refs, end })
}

/// One batch-table entry (layout version 10, see `batch`): written by the daemon, except
/// `pushed`, which producers add to.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct BatchEntry {
    /// `generation << 32 | status << 24 | queue` (`batch::BatchWord`); daemon only.
    pub word: AtomicU64,
    /// Futex word, bumped by the daemon when the batch is sealed or completes.
    pub seq: AtomicU32,
    /// Bytes of `name` used.
    pub name_len: AtomicU32,
    /// Jobs pushed into the batch (added by producers after each publish).
    pub pushed: AtomicU64,
    /// Jobs not yet ended at the daemon's last count.
    pub live: AtomicU64,
    /// Dead letters at the daemon's last count, plus those purged since.
    pub dead: AtomicU64,
    /// Jobs the daemon cancelled.
    pub cancelled: AtomicU64,
    /// The held callback job's handle word (0: none).
    pub callback: AtomicU64,
    /// The name's bytes, 8 to a word.
    pub name: [AtomicU64; 8],
}

const _: () = {
    assert!(size_of::<BatchEntry>() == 128);
};
