//! `xtcq-shm`: xtcq's shared-memory segment format and the lock-free algorithms over it.
//!
//! This crate knows nothing of sockets, async or logging. It defines
//! - the segment file format ([`layout`]: every `#[repr(C)]` struct, pinned by compile-time
//!   asserts, with a drawing of the regions) and how to create, attach to and validate a
//!   segment ([`segment`]);
//! - the bounded Chase-Lev work-stealing deque ([`deque`]);
//! - the overflow ring any process may push to ([`overflow`]);
//! - priority levels, their hint word and aging ([`levels`]);
//! - job records, their state word and its one-CAS transitions ([`record`]);
//! - recovery of what a dead process held ([`recovery`]) and an invariant walk ([`check`]);
//! - what the daemon's periodic scan watches: claims with a lease ([`lease_watch`]) and
//!   whether anything moved since its last walk of the records ([`activity`]);
//! - delayed jobs, put in line by the daemon once due ([`delayed`]);
//! - batches, complete when their last job ended ([`batch`]);
//! - futex waiting on a queue's wait word ([`wait`]);
//! - fork detection, so a child leaves its parent's claims alone ([`fork`]);
//! - the typed API the client builds on ([`api`]: `Owner`, `Thief`, `Injector`,
//!   `ClaimedJob`).
//!
//! Invariants kept throughout:
//! - everything in the segment is addressed by offsets from its base, never by pointers, so
//!   every process (and every mapping within one process) may map it at its own address;
//! - nothing read from the segment is trusted: every index is masked or bounds-checked before
//!   use, every length is checked against its area, and a corrupt segment yields an error,
//!   never an out-of-bounds access or a panic;
//! - every record transition is one CAS on one word, so a process killed between any two
//!   instructions leaves state that recovery can read;
//! - every atomic, fence and spin goes through [`sync`], so the algorithms run under loom
//!   with `RUSTFLAGS="--cfg xtcq_loom"`.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod batch_seal;
pub mod cache_line;
pub mod cas_count;
pub mod deque;
pub mod failpoint;
/// Fork detection, shared by the client and the C API.
#[cfg(not(xtcq_loom))]
pub mod fork;
pub mod keys;
pub mod levels;
pub mod limit_words;
pub mod overflow;
pub mod record;
pub mod sync;
pub mod wake_protocol;

#[cfg(not(xtcq_loom))]
pub mod activity;
#[cfg(not(xtcq_loom))]
pub mod api;
#[cfg(not(xtcq_loom))]
pub mod batch;
#[cfg(not(xtcq_loom))]
pub mod cancel;
#[cfg(not(xtcq_loom))]
pub mod check;
#[cfg(not(xtcq_loom))]
pub mod dead_letter;
#[cfg(not(xtcq_loom))]
pub mod delayed;
#[cfg(not(xtcq_loom))]
pub mod futex_ring;
#[cfg(not(xtcq_loom))]
pub mod job_fate;
#[cfg(not(xtcq_loom))]
pub mod layout;
#[cfg(not(xtcq_loom))]
pub mod lease_watch;
#[cfg(not(xtcq_loom))]
pub mod metrics;
#[cfg(not(xtcq_loom))]
mod prefetch;
#[cfg(not(xtcq_loom))]
pub mod recovery;
#[cfg(not(xtcq_loom))]
pub mod segment;
#[cfg(not(xtcq_loom))]
pub mod sigbus;
#[cfg(not(xtcq_loom))]
pub mod strays;
#[cfg(not(xtcq_loom))]
pub mod transfer;
#[cfg(not(xtcq_loom))]
pub mod wait;

pub use deque::{DequeOwner, DequeRef, Flavor, Full, HeapDeque, Steal};
pub use keys::{BadKey, Key, KeyError};
pub use record::state::{JobHandle, JobId, RecordState, State, StateWord, NO_HOLDER};

#[cfg(not(xtcq_loom))]
pub use api::{
    Claim, ClaimedBatch, ClaimedJob, Injector, JobError, OwnedJob, Owner, PushBatchError, PushError, Thief,
};
#[cfg(not(xtcq_loom))]
pub use layout::SegmentConfig;
#[cfg(not(xtcq_loom))]
pub use segment::{DeleteError, QueueError, QueueInfo, QueueSpec, Segment, SegmentError};
