//! Why a segment, a queue-table entry or a delete failed.

use std::io;
use std::path::PathBuf;

use super::*;

/// Why a segment could not be created or attached.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    /// The configuration cannot be laid out. (Not a `source`: the message already says
    /// it, and a printer of the error's chain would say it twice.)
    #[error("invalid segment configuration: {0}")]
    Config(ConfigError),
    /// `create` found a file there.
    #[error("segment {path} already exists; attach to it, or remove it first")]
    Exists {
        /// The path.
        path: PathBuf,
    },
    /// tmpfs or the disk is full.
    #[error(
        "not enough space for segment {path}: it needs {len} bytes; free space on the file \
         system it goes in (`df -h` of its directory) or choose fewer records (--records) or \
         payload blocks (--payload-blocks), smaller payloads (--payload-bytes, --inline-bytes) \
         or fewer, smaller deques (--queues, --deques-per-queue, --deque-capacity)"
    )]
    NoSpace {
        /// The path.
        path: PathBuf,
        /// Bytes needed.
        len: u64,
        /// The OS error.
        source: io::Error,
    },
    /// Another OS error on `path`.
    #[error("segment {path}: {what}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The file is smaller than the header, or than the header says.
    #[error("segment {path} is {actual} bytes but must be at least {needed}: truncated, or not a segment")]
    Truncated {
        /// The path.
        path: PathBuf,
        /// File length.
        actual: u64,
        /// Length needed.
        needed: u64,
    },
    /// Not an xtcq segment.
    #[error("{path} is not an xtcq segment (first bytes {found:02x?}, expected {expected:02x?})")]
    BadMagic {
        /// The path.
        path: PathBuf,
        /// What was found.
        found: [u8; 8],
        /// [`MAGIC`].
        expected: [u8; 8],
    },
    /// Made by an incompatible build.
    #[error(
        "segment {path} has layout version {found}; this build reads version {expected}. \
         Stop the daemon that made it and recreate the segment, or use a matching xtcq. To \
         keep its jobs: `xtcq export --segment {path} FILE` (this build reads layouts 4 and 5 \
         for that), then `xtcq import FILE` into the new segment"
    )]
    Version {
        /// The path.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// [`LAYOUT_VERSION`].
        expected: u32,
    },
    /// A daemon started with `--recreate` replaced the segment.
    #[error(
        "segment {path} was replaced by a daemon started with --recreate; connect to the daemon \
         again to use the new one"
    )]
    Retired {
        /// The path.
        path: PathBuf,
    },
    /// The ready word is not set.
    #[error(
        "segment {path} is not ready: its creator has not finished (or died while creating \
         it); wait, or remove it and let the daemon recreate it"
    )]
    NotReady {
        /// The path.
        path: PathBuf,
    },
    /// The header disagrees with itself or the file.
    #[error("segment {path} header is inconsistent: {what}")]
    Inconsistent {
        /// The path.
        path: PathBuf,
        /// What differs.
        what: String,
    },
}

/// A queue-table lookup or creation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// No such queue.
    #[error("no such queue: {0}")]
    NoSuchQueue(String),
    /// The table index is out of range or unused.
    #[error("queue index {index} is not an active queue (the segment has {queues} entries)")]
    NotActive {
        /// The index.
        index: u32,
        /// Table size.
        queues: u32,
    },
    /// A queue of that name exists.
    #[error("a queue named {0:?} already exists")]
    Exists(String),
    /// The table is full.
    #[error("all {0} queue-table entries are in use; create the segment with more queues")]
    TableFull(u32),
    /// The spec does not fit the segment.
    #[error("invalid queue: {0}")]
    BadSpec(String),
    /// The queue's descriptor in the segment is invalid.
    #[error("queue {index} in the segment is corrupt: {what}")]
    Corrupt {
        /// The index.
        index: u32,
        /// What is wrong.
        what: String,
    },
    /// Deque index out of range.
    #[error("queue {queue} has {count} deques; there is no deque {index}")]
    NoSuchDeque {
        /// Queue name.
        queue: String,
        /// Index asked for.
        index: u32,
        /// Deques in the queue.
        count: u32,
    },
}

/// Why a queue was not deleted ([`Segment::delete_queue_at`]). Nothing was changed, except
/// that a forced delete that ran into a process it was not told about may have dropped some
/// of the queue's queued jobs before it put the queue back (see `delete_queue_at`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeleteError {
    /// No such queue, not an active one, or its descriptor is corrupt.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// Some of its deques have an owner.
    #[error(
        "queue {queue} has owners (deque, process slot): {leases:?}; an owner's lease ends when it \
         detaches or its process exits"
    )]
    Leased {
        /// Queue name.
        queue: String,
        /// `(deque, owner's process slot)` of each leased deque.
        leases: Vec<(u32, u32)>,
    },
    /// Some of its jobs are being run (claimed, or held while their holder writes the header).
    #[error(
        "queue {queue} has {claimed} job(s) being run ((process slot, jobs): {holders:?}); wait until \
         they are acked or given back"
    )]
    JobsHeld {
        /// Queue name.
        queue: String,
        /// Jobs claimed.
        claimed: u32,
        /// `(process slot, jobs)` holding them ([`NO_HOLDER`] is left out).
        holders: Vec<(u32, u32)>,
    },
    /// It holds jobs, and the delete was not forced.
    #[error(
        "queue {queue} still holds {queued} queued job(s) and {dead} dead letter(s); consume or purge \
         them, or force the delete to drop them"
    )]
    NotEmpty {
        /// Queue name.
        queue: String,
        /// Jobs waiting to be claimed.
        queued: u32,
        /// Dead letters.
        dead: u32,
    },
    /// Jobs of the queue kept coming back while a forced delete was dropping them: some
    /// process the caller did not keep away is still giving jobs back to it.
    #[error(
        "jobs of queue {queue} kept coming back while it was being deleted: a process is still using it"
    )]
    StillInUse {
        /// Queue name.
        queue: String,
    },
}

impl From<ConfigError> for SegmentError {
    fn from(e: ConfigError) -> Self {
        SegmentError::Config(e)
    }
}
