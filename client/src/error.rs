//! The client's error type: one enum, each variant a message a person can act on.
//!
//! Invariant: errors that come from the daemon keep its typed code ([`ErrorCode`]) where no
//! dedicated variant exists, and the socket path is named in every connection error.

use std::io;
use std::path::PathBuf;

use rustix::io::Errno;
use xtcq_proto::{ErrorCode, ErrorReply, FrameError};
use xtcq_shm::{JobError, JobId, PushError, QueueError, SegmentError};

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing listens at the socket.
    #[error("daemon not running at {path} (is xtcqd started?)")]
    DaemonNotRunning {
        /// The socket path tried.
        path: PathBuf,
        /// The OS error (`ENOENT` or `ECONNREFUSED`).
        #[source]
        source: io::Error,
    },
    /// The socket exists but we may not connect to it.
    #[error(
        "permission denied connecting to xtcqd at {path}: the socket (or its directory) is not \
         accessible to this user; ask to be added to the daemon's group"
    )]
    PermissionDenied {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The daemon at the socket, or the directory the socket is in, belongs to a uid this
    /// client does not trust: it may be another user impersonating the daemon.
    #[error(
        "refusing xtcqd at {path}: {what} {found}, which this user does not trust (trusted: {trusted}); \
         if that is the daemon you mean to use, set XTCQ_TRUST_UID={uid}, otherwise another user may be \
         impersonating it: check who runs it and who owns the socket's directory"
    )]
    UntrustedDaemon {
        /// The socket path.
        path: PathBuf,
        /// What was found to belong to `uid` ("the process listening there (pid 7) runs as").
        what: String,
        /// The uid found.
        uid: u32,
        /// That uid with its name, `uid 1002 (mallory)`.
        found: String,
        /// The trusted uids, labelled.
        trusted: String,
    },
    /// `$XTCQ_TRUST_UID` names a user that does not resolve.
    #[error("{var}: {source}")]
    TrustSetting {
        /// The variable.
        var: &'static str,
        /// What the name service said.
        source: xtcq_proto::names::NameError,
    },
    /// Another connection error.
    #[error("cannot connect to xtcqd at {path}: {source}")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The daemon speaks another protocol version.
    #[error(
        "protocol version mismatch: xtcqd at {path} speaks version {daemon}, this client speaks version \
         {client}; use matching xtcq and xtcqd builds"
    )]
    VersionMismatch {
        /// The socket path.
        path: PathBuf,
        /// The daemon's version.
        daemon: u32,
        /// Ours.
        client: u32,
    },
    /// The daemon does not admit this process's uid/gid, or refuses the request to it.
    #[error("not authorized: {0}")]
    Unauthorized(String),
    /// No such queue.
    #[error("no such queue: {0}")]
    NoSuchQueue(String),
    /// The queue has no batch of that name (the message names both).
    #[error("no such batch: {0}")]
    NoSuchBatch(String),
    /// A queue of that name exists.
    #[error("queue already exists: {0}")]
    QueueExists(String),
    /// The queue table is full.
    #[error("cannot create queue: {0}")]
    QueueTableFull(String),
    /// The segment has no room for it (the batch table, or the queue of a batch's callback):
    /// the message says which, and what makes room.
    #[error("{0}")]
    NoRoom(String),
    /// A delete was refused: a process is (or may be) attached to the queue, or one of its
    /// jobs is being run. The message names the processes and what to do.
    #[error("{message}")]
    QueueInUse {
        /// The queue.
        queue: String,
        /// The daemon's explanation.
        message: String,
    },
    /// An idempotent create ([`Client::create_queue_with`](crate::Client::create_queue_with)
    /// with `exist_ok`) found a queue of that name with other settings or permissions than
    /// those asked (flavor, deques, capacity, max_attempts, lease_ms, allowed uids or gids).
    #[error("{message}")]
    QueueMismatch {
        /// The queue.
        queue: String,
        /// The daemon's explanation: each setting that differs, what it is and what was asked.
        message: String,
    },
    /// A delete without force was refused: the queue holds queued jobs or dead letters.
    #[error("{message}")]
    QueueNotEmpty {
        /// The queue.
        queue: String,
        /// The daemon's explanation (how many).
        message: String,
    },
    /// Every deque of the queue has a live owner.
    #[error("no free deque in queue {queue}: {message}")]
    NoFreeDeque {
        /// The queue.
        queue: String,
        /// The daemon's explanation.
        message: String,
    },
    /// Every process slot is in use.
    #[error("no free process slot: {0}")]
    NoFreeSlot(String),
    /// A per-user limit of the daemon (connections or process slots of one uid) was
    /// reached. The message names the limit and the `xtcqd` flag that raises it.
    #[error("refused by xtcqd: {0}")]
    LimitReached(String),
    /// The queue's deque and overflow ring are full.
    #[error("queue full: {queue} (its deque and its overflow ring of {overflow} jobs are full)")]
    QueueFull {
        /// The queue.
        queue: String,
        /// Overflow ring capacity.
        overflow: usize,
    },
    /// A push with a key was refused: a live job of the queue (queued, delayed or running)
    /// holds the key.
    #[error("a job with key {key:?} is already queued, delayed or running: {existing}")]
    DuplicateKey {
        /// The key, as text (bytes that are not UTF-8 replaced).
        key: String,
        /// The job that holds it.
        existing: JobId,
    },
    /// A push with a key could not take the key: the key table is full where it goes, the
    /// segment has none, the key is empty or too long, or its entry stayed locked (the
    /// message says which, and the flag to change).
    #[error("cannot push with this key: {0}")]
    KeyRefused(String),
    /// Every job record of the segment is in use, or every payload block of the size a large
    /// payload needs (`xtcqd --payload-blocks`), or the queue's jobs hold its record quota
    /// (`xtcq create --max-records`); the message says which. All pass once consumers drain.
    #[error("queue full: {0}")]
    RecordsFull(String),
    /// The payload is larger than the segment's largest payload.
    #[error(
        "payload too large: {len} > {max} bytes, the largest payload this segment takes \
         (xtcqd --payload-bytes, with --payload-blocks for a class that holds it)"
    )]
    PayloadTooLarge {
        /// Its length.
        len: usize,
        /// The segment's largest payload.
        max: u32,
    },
    /// A push's priority is past the queue's levels (0 is the most urgent, `levels - 1` the
    /// least).
    #[error(
        "--priority {priority} is past queue {queue}'s levels: it has --levels {levels}, so \
         priorities 0 (the most urgent) to {last}; push at one of those, or create the queue \
         with more --levels"
    )]
    Priority {
        /// The queue.
        queue: String,
        /// Asked for.
        priority: u32,
        /// The queue's levels.
        levels: u32,
        /// Its least urgent priority.
        last: u32,
    },
    /// Not a valid queue name (see `xtcq_proto::queue_name`).
    #[error(transparent)]
    BadQueueName(#[from] xtcq_proto::queue_name::QueueNameError),
    /// A lease the daemon cannot honour (below its 1 ms resolution, or zero).
    #[error(transparent)]
    Lease(#[from] xtcq_proto::lease::LeaseError),
    /// The daemon found the request malformed or its arguments invalid.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// Another error from the daemon.
    #[error("xtcqd: {0}")]
    Daemon(ErrorReply),
    /// The control connection is gone (the daemon stopped or crashed).
    #[error("lost the connection to xtcqd at {path}{}", reason.as_ref().map(|r| format!(" (daemon shutting down: {r})")).unwrap_or_default())]
    DaemonLost {
        /// The socket path.
        path: PathBuf,
        /// What the daemon said when stopping, if it did.
        reason: Option<String>,
    },
    /// No reply in time.
    #[error("xtcqd at {path} did not answer within {secs} s")]
    Timeout {
        /// The socket path.
        path: PathBuf,
        /// The timeout.
        secs: u64,
    },
    /// The daemon sent something this client does not understand.
    #[error("protocol error talking to xtcqd at {path}: {message}")]
    Protocol {
        /// The socket path.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The segment could not be mapped or is invalid.
    #[error("cannot attach to the segment: {0}")]
    Segment(#[from] SegmentError),
    /// A queue in the segment could not be resolved.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// A claimed job could not be read, acked or nacked.
    #[error(transparent)]
    Job(#[from] JobError),
    /// The segment holds values no correct program writes.
    #[error("segment corruption: {0}")]
    Corrupt(String),
    /// A push named a batch that takes no more jobs (sealed, or no longer there).
    #[error(transparent)]
    BatchClosed(#[from] xtcq_shm::batch::BatchClosed),
    /// The daemon came back with a new segment (restarted with `--recreate`): this client's
    /// handles still map the old one, so their jobs reach nobody.
    #[error(
        "xtcqd at {path} now serves a new segment; this client's handles map the old one ({segment}), \
         whose jobs no consumer will see: stop using them and connect again"
    )]
    SegmentReplaced {
        /// The socket path.
        path: PathBuf,
        /// The segment file this client had mapped.
        segment: PathBuf,
    },
    /// The segment's file was truncated under this process (by another process that could
    /// open it): what it held is gone, and this process's mapping of it now reads as zero.
    #[error(
        "segment {segment} was truncated by another process while this process had it mapped; \
         the jobs in it are lost and its handles cannot act. Find out who truncated it (`xtcqd` \
         logs it), then restart xtcqd with --recreate and connect again"
    )]
    SegmentLost {
        /// The segment file this client had mapped.
        segment: PathBuf,
    },
    /// After its connection was re-established (a daemon restart), the daemon would not give
    /// this process back the process slot it held: it recovered it (it took the process for
    /// dead) or the slot is not this process's. Handles attached under that slot are no
    /// longer backed by it. Reported once; the connection is up, and the next attach takes a
    /// fresh slot.
    #[error(
        "xtcqd at {path} did not give this process back its process slot {slot} after reconnecting \
         ({message}); handles attached before the reconnect may no longer be valid (their jobs and \
         deque leases may have been given back): drop them and attach again"
    )]
    SlotNotResumed {
        /// The socket path.
        path: PathBuf,
        /// The slot this process held.
        slot: u32,
        /// The daemon's reason.
        message: String,
    },
    /// A dead letter could not be re-queued or purged.
    #[error("{0}")]
    DeadLetter(String),
    /// The client or handle was made before `fork()` and this is the child: it shares the
    /// parent's socket and process slot, so it does nothing here (see [`crate::fork`]).
    #[error(
        "this client or handle was made before fork(); it belongs to the parent process and does \
         nothing in the child: connect again in the child (Client::connect)"
    )]
    Forked,
    /// A wake descriptor could not be made or read (this process's fds or memory, most likely).
    #[error("wake descriptor: {0}")]
    Wake(#[source] std::io::Error),
}

impl Error {
    /// The daemon's error code, for errors that came from the daemon.
    pub fn code(&self) -> Option<ErrorCode> {
        Some(match self {
            Error::Unauthorized(_) => ErrorCode::Unauthorized,
            Error::NoSuchQueue(_) => ErrorCode::NoSuchQueue,
            Error::NoSuchBatch(_) => ErrorCode::NoSuchBatch,
            Error::QueueExists(_) => ErrorCode::QueueExists,
            Error::QueueTableFull(_) => ErrorCode::QueueTableFull,
            Error::NoRoom(_) => ErrorCode::NoRoom,
            Error::QueueInUse { .. } => ErrorCode::QueueInUse,
            Error::QueueNotEmpty { .. } => ErrorCode::QueueNotEmpty,
            Error::QueueMismatch { .. } => ErrorCode::QueueMismatch,
            Error::NoFreeDeque { .. } => ErrorCode::NoFreeDeque,
            Error::NoFreeSlot(_) => ErrorCode::NoFreeSlot,
            Error::LimitReached(_) => ErrorCode::LimitReached,
            Error::BadRequest(_) | Error::BadQueueName(_) => ErrorCode::BadRequest,
            Error::VersionMismatch { .. } => ErrorCode::VersionMismatch,
            Error::SlotNotResumed { .. } => ErrorCode::SlotNotHeld,
            Error::Daemon(e) => e.code,
            _ => return None,
        })
    }

    /// Whether the daemon could not be reached at all (not running, no permission, lost).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            Error::DaemonNotRunning { .. }
                | Error::PermissionDenied { .. }
                | Error::UntrustedDaemon { .. }
                | Error::Connect { .. }
                | Error::DaemonLost { .. }
                | Error::Timeout { .. }
        )
    }

    /// Whether this process ran out of file descriptors or memory on the way (`EMFILE`,
    /// `ENFILE`, `ENOMEM` anywhere in the error's causes): the daemon and the segment may be
    /// fine, and closing something or raising the limit (`ulimit -n`) is what helps.
    ///
    /// ```
    /// use std::io;
    /// let e = xtcq_client::Error::Connect {
    ///     path: "/run/xtcq.sock".into(),
    ///     source: io::Error::from_raw_os_error(24), // EMFILE
    /// };
    /// assert!(e.is_out_of_resources() && e.is_unreachable());
    /// ```
    pub fn is_out_of_resources(&self) -> bool {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(c) = cause {
            if let Some(io) = c.downcast_ref::<io::Error>() {
                if io.kind() == io::ErrorKind::OutOfMemory
                    || io.raw_os_error().is_some_and(|e| is_own_limit(Errno::from_raw_os_error(e)))
                {
                    return true;
                }
            }
            cause = c.source();
        }
        false
    }

    /// Whether the daemon refused this user: not allowed (by the daemon or by the queue's
    /// permissions), or a per-user limit reached.
    pub fn is_refused(&self) -> bool {
        matches!(self, Error::Unauthorized(_) | Error::LimitReached(_))
    }

    /// Converts a daemon error reply; `queue` names the queue the request was about.
    pub(crate) fn from_reply(e: ErrorReply, queue: Option<&str>) -> Error {
        let q = || queue.map(str::to_string).unwrap_or_else(|| e.message.clone());
        match e.code {
            ErrorCode::NoSuchQueue => Error::NoSuchQueue(q()),
            ErrorCode::NoSuchBatch => Error::NoSuchBatch(e.message),
            ErrorCode::QueueExists => Error::QueueExists(q()),
            ErrorCode::QueueTableFull => Error::QueueTableFull(e.message),
            ErrorCode::NoRoom => Error::NoRoom(e.message),
            ErrorCode::QueueInUse => Error::QueueInUse { queue: q(), message: e.message },
            ErrorCode::QueueNotEmpty => Error::QueueNotEmpty { queue: q(), message: e.message },
            ErrorCode::QueueMismatch => Error::QueueMismatch { queue: q(), message: e.message },
            ErrorCode::NoFreeDeque => Error::NoFreeDeque { queue: q(), message: e.message },
            ErrorCode::NoFreeSlot => Error::NoFreeSlot(e.message),
            ErrorCode::LimitReached => Error::LimitReached(e.message),
            ErrorCode::Unauthorized => Error::Unauthorized(e.message),
            ErrorCode::BadRequest => Error::BadRequest(e.message),
            _ => Error::Daemon(e),
        }
    }

    pub(crate) fn from_push(e: PushError) -> Error {
        match e {
            PushError::PayloadTooLarge { len, max } => Error::PayloadTooLarge { len, max },
            PushError::QueueFull { queue, overflow } => Error::QueueFull { queue, overflow },
            PushError::RecordsFull(full) => Error::RecordsFull(full.to_string()),
            PushError::BlocksFull(full) => Error::RecordsFull(full.to_string()),
            e @ PushError::QuotaFull { .. } => Error::RecordsFull(e.to_string()),
            PushError::Priority { queue, priority, levels, last } => {
                Error::Priority { queue, priority, levels, last }
            }
            PushError::Key(xtcq_shm::KeyError::Duplicate { existing }) => {
                Error::DuplicateKey { key: String::new(), existing }
            }
            PushError::Key(e) => Error::KeyRefused(e.to_string()),
            PushError::Corrupt(m) => Error::Corrupt(m),
            PushError::BatchClosed(c) => Error::BatchClosed(c),
        }
    }

    pub(crate) fn from_frame(e: FrameError, path: &std::path::Path) -> Error {
        match e {
            FrameError::Closed | FrameError::Truncated { .. } => {
                Error::DaemonLost { path: path.to_path_buf(), reason: None }
            }
            FrameError::Io(io)
                if io.kind() == io::ErrorKind::WouldBlock || io.kind() == io::ErrorKind::TimedOut =>
            {
                Error::Timeout { path: path.to_path_buf(), secs: 0 }
            }
            FrameError::Io(_) => Error::DaemonLost { path: path.to_path_buf(), reason: None },
            other => Error::Protocol { path: path.to_path_buf(), message: other.to_string() },
        }
    }
}

/// Whether `e` says this process reached a limit of its own (file descriptors, the system's
/// file table, memory), not that its peer or its file failed.
pub(crate) fn is_own_limit(e: Errno) -> bool {
    [Errno::MFILE, Errno::NFILE, Errno::NOMEM].contains(&e)
}
