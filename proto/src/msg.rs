//! The typed messages of the control protocol.
//!
//! A connection goes:
//!
//! ```text
//!  client                                daemon
//!  Hello {protocol_version, name, pid} ->
//!                                     <- HelloReply::Ok {segment path, daemon epoch, ..}
//!                                        | VersionMismatch {both versions}  (then close)
//!                                        | Refused {Unauthorized, ..}       (then close)
//!  RequestFrame {id, Request}          ->
//!                                     <- ServerMessage::Reply {id, Ok(Response) | Err(ErrorReply)}
//!  ...                                <- ServerMessage::Event (unsolicited, e.g. shutting down)
//! ```
//!
//! Rules of the conversation:
//! - one connection is one attached process: the slot, roles and deque leases its attach
//!   requests get last as long as the connection *and* the process (a lease is released once
//!   the connection is closed and the process has exited, or by [`Request::Detach`]).
//! - a process whose connection was lost but which lives on keeps its slot and leases; its
//!   first request on a new connection is [`Request::Resume`] of that slot and epoch, granted
//!   only when the slot is registered to exactly the connecting process (kernel pid, start
//!   time, uid), else answered [`ErrorCode::SlotNotHeld`] (the next attach takes a new slot).
//! - [`Request::DeleteQueue`] frees a queue's table entry; refused with
//!   [`ErrorCode::QueueInUse`] (naming the processes) while a process is attached to it or
//!   runs one of its jobs, and, unless `force`, with [`ErrorCode::QueueNotEmpty`] while it
//!   holds jobs or dead letters.
//! - new requests and codes come without a version bump: a daemon that predates a request
//!   answers `BadRequest` (unknown variant); a client that predates a code decodes it as
//!   [`ErrorCode::Unknown`].
//!
//! Invariants:
//! - [`Hello`] and [`HelloReply`] keep their shape across protocol versions (fields may be
//!   added, never removed or retyped), so a version mismatch is always reported as one;
//! - every reply carries the id of the request it answers; a request that could not even be
//!   decoded is answered with id [`UNKNOWN_REQUEST_ID`];
//! - error replies carry a typed [`ErrorCode`]; codes a newer daemon adds decode as
//!   [`ErrorCode::Unknown`] instead of failing.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use crate::dead::{DeadActed, DeadAction, DeadLetterInfo, DeadLetterPage, JobRef, DEAD_PAYLOAD_SHOWN};
pub use crate::job_msg::JobState;
pub use crate::queue_msg::{
    one_level, settings_differ, Attachment, Flavor, OwnerLease, QueueDeleted, QueueInfo, QueueParams,
};
pub use crate::stats_msg::{
    BlockClassStats, DequeStats, ProcessInfo, ProcessState, QueueMetrics, QueueStats, QuotaStats,
    RecordCounts, SegmentSummary, Stats,
};

use crate::PROTOCOL_VERSION;

/// The highest concurrency limit a queue takes (`SetQueueLimits::max_running`): more jobs
/// than this running at once is no limit at all, and a typo.
pub const MAX_RUNNING_LIMIT: u32 = 1 << 20;

/// The most claims a rate limit lets start at once (`RateLimit::burst`).
pub const MAX_RATE_BURST: u32 = 1 << 20;

/// The longest interval of a rate limit (`RateLimit::interval_ns`): one claim a day. A slower
/// rate is a paused queue, and a typo.
pub const MAX_RATE_INTERVAL_NS: u64 = 86_400 * 1_000_000_000;

/// A queue's rate limit: at most `burst` claims at once, then one every `interval_ns`, across
/// every process. `interval_ns` 0: no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimit {
    /// ns between claims at the limit's pace (0: no limit; at most [`MAX_RATE_INTERVAL_NS`]).
    pub interval_ns: u64,
    /// Claims that may start at once after a quiet spell (1 ..= [`MAX_RATE_BURST`]).
    pub burst: u32,
}

/// What a [`Request::CancelJob`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CancelOutcome {
    /// It was queued: it will not run.
    WasQueued,
    /// It was delayed: it will not run.
    WasDelayed,
    /// It was running: its command (if `xtcq work` ran one) was stopped, and its holder's
    /// ack fails.
    WasRunning {
        /// The holder's pid, as the daemon watches it (`None` when it is not known).
        pid: Option<u32>,
    },
    /// It was running and its command could not be stopped: it is a dead letter ("could not
    /// stop command") and may still run.
    NotStopped {
        /// The holder's pid, when known.
        pid: Option<u32>,
    },
    /// It had finished (acked, purged or cancelled) already.
    Finished,
    /// It is a dead letter: purge it (`xtcq dead purge`) instead.
    Dead,
    /// Its producer is still writing it: try again.
    BeingPushed,
    /// Its holder was giving it back or extending its lease all the while the cancel waited
    /// (stopped there, or racing it): nothing was done; try again.
    Busy,
    /// No job of the queue has this id.
    Unknown,
}

/// The id used in a reply to a request whose id could not be read.
pub const UNKNOWN_REQUEST_ID: u64 = 0;

/// Role bit in a process slot: owns a deque (has a lease).
pub const ROLE_OWNER: u32 = 1;
/// Role bit in a process slot: steals from a queue.
pub const ROLE_THIEF: u32 = 2;
/// Role bit in a process slot: pushes to a queue's overflow ring without a deque.
pub const ROLE_INJECTOR: u32 = 4;

/// First message of every connection, client to daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The protocol version the client speaks ([`PROTOCOL_VERSION`]).
    pub protocol_version: u32,
    /// A name for logs (e.g. the program name).
    pub client_name: String,
    /// The client's own idea of its pid (the daemon trusts only `SO_PEERCRED`).
    pub pid: u32,
}

impl Hello {
    /// A hello for this build's protocol version.
    pub fn new(client_name: impl Into<String>, pid: u32) -> Self {
        Self { protocol_version: PROTOCOL_VERSION, client_name: client_name.into(), pid }
    }
}

/// The daemon's answer to [`Hello`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HelloReply {
    /// Welcome.
    Ok(HelloOk),
    /// The versions differ; the daemon closes the connection.
    VersionMismatch {
        /// The version the daemon speaks.
        daemon_version: u32,
        /// The version the client said it speaks.
        client_version: u32,
        /// A sentence naming both.
        message: String,
    },
    /// Not admitted (e.g. [`ErrorCode::Unauthorized`]); the daemon closes the connection.
    Refused(ErrorReply),
}

/// What a client learns on connecting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelloOk {
    /// The protocol version in use.
    pub protocol_version: u32,
    /// The daemon's crate version, for messages.
    pub daemon_version: String,
    /// The daemon's pid.
    pub daemon_pid: u32,
    /// The segment's daemon epoch (bumped each time a daemon adopts the segment).
    pub daemon_epoch: u64,
    /// The segment file to map.
    pub segment_path: PathBuf,
    /// The digest of the segment descriptor the daemon validated
    /// (`xtcq_shm::Segment::descriptor_digest`): a client refuses a mapping whose header
    /// differs (rewritten since). 0 from a daemon that predates it: not checked.
    #[serde(default)]
    pub segment_digest: u64,
    /// The daemon's wake directory: where descriptor waiters' sockets are
    /// (`xtcq_shm::wait::WakeDir`). `None` from a daemon that predates descriptor waits, or
    /// one whose socket path leaves no room for the names.
    #[serde(default)]
    pub wake_dir: Option<PathBuf>,
}

/// A request with the id its reply will carry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestFrame {
    /// Chosen by the client; echoed in the reply. Use ids above [`UNKNOWN_REQUEST_ID`].
    pub id: u64,
    /// The request.
    pub request: Request,
}

/// A request from client to daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Liveness check; answered with [`Response::Pong`].
    Ping,
    /// Create a queue, owned by the caller's uid; [`Response::QueueCreated`].
    CreateQueue(QueueParams),
    /// Create a queue owned by the caller's uid that these users and the members of these
    /// groups may use too (attach to; only the owner, root and the daemon's uid may delete
    /// it); [`Response::QueueCreated`].
    CreateSharedQueue {
        /// The queue.
        params: QueueParams,
        /// Further uids allowed.
        allow_uids: Vec<u32>,
        /// Gids whose members are allowed.
        allow_gids: Vec<u32>,
    },
    /// List queues; [`Response::Queues`].
    ListQueues,
    /// Counters for one queue or all; [`Response::Stats`].
    Stats {
        /// One queue, or all of them.
        queue: Option<String>,
    },
    /// Become the owner of a deque of `queue`: a lease on `deque`, or on the first free one
    /// when `None`; [`Response::OwnerAttached`].
    AttachOwner {
        /// Queue name.
        queue: String,
        /// A particular deque, or any free one.
        deque: Option<u32>,
    },
    /// Attach as a thief of `queue`; [`Response::ThiefAttached`].
    AttachThief {
        /// Queue name.
        queue: String,
    },
    /// Attach as a deque-less producer of `queue` (pushes go to its overflow ring);
    /// [`Response::InjectorAttached`].
    AttachInjector {
        /// Queue name.
        queue: String,
    },
    /// Give back this connection's lease on `deque` of `queue`. The client promises that it
    /// no longer touches that deque as its owner; [`Response::Detached`].
    Detach {
        /// Queue name.
        queue: String,
        /// Deque index.
        deque: u32,
    },
    /// Ask the daemon to stop (allowed only to the daemon's own uid and root);
    /// [`Response::ShuttingDown`].
    Shutdown,
    /// Take back, for this connection, the process slot that this same process was given
    /// over an earlier connection (before a daemon restart, or a lost link), so that this
    /// connection's attachments share it instead of registering another, and so that the
    /// slot's leases and claims stay bound to the process's life. Sent before any attach
    /// on the connection; [`Response::Resumed`], or [`ErrorCode::SlotNotHeld`] when the slot
    /// is not registered to the connecting process at `slot_epoch` (recovered, reused, or
    /// another process's).
    Resume {
        /// The slot index ([`Attachment::process_slot`]).
        slot: u32,
        /// Its incarnation ([`Attachment::slot_epoch`]).
        slot_epoch: u64,
    },
    /// Delete queue `name` and free its table entry; [`Response::QueueDeleted`]. Refused with
    /// [`ErrorCode::QueueInUse`] while a process is (or may be) attached to it or one of its
    /// jobs is being run, and, unless `force`, with [`ErrorCode::QueueNotEmpty`] while it
    /// holds queued jobs or dead letters. With `force` those are dropped.
    DeleteQueue {
        /// Queue name.
        name: String,
        /// Drop its queued jobs and dead letters instead of refusing.
        force: bool,
    },
    /// Register process `pid` (a child of this process, of its uid, leading its own process
    /// group) as the command running the job this process holds in record `index` (stable id
    /// birth `birth`): before that job can be claimed again (this process died, or its lease
    /// expired) the daemon kills the command's process group and waits until it is empty;
    /// [`Response::Fenced`]. Refused when the job is not held by this process's slot or the
    /// process is not such a child, or the daemon could not signal it.
    FenceCommand {
        /// Record index of the held job.
        index: u32,
        /// Its birth generation (the `birth` of its stable job id).
        birth: u32,
        /// The generation of the claim as the caller holds it now (its handle's): names this
        /// claim, not the job, so that a registration delayed past a lease expiry and a
        /// re-claim by the same process is refused instead of taken for the new claim's.
        generation: u32,
        /// The command's pid (in the daemon's pid namespace).
        pid: u32,
    },
    /// [`Request::FenceCommand`] for a command that also runs in a cgroup (v2) of its own:
    /// two descriptors ride as `SCM_RIGHTS` on the frame's first bytes, the cgroup's directory
    /// (opened read-only) and its `cgroup.kill` (opened for writing, which proves the worker
    /// may kill that cgroup). Before the job can run again the daemon also writes `1` to that
    /// descriptor and waits until the cgroup is empty, so processes that left the command's
    /// process group (`setsid`, a double fork, `setpgid`) are stopped too. Refused besides
    /// when the descriptors are missing, are not a cgroup v2 directory and its own
    /// `cgroup.kill`, or `pid` is not in that cgroup. Added without a version bump: a daemon
    /// that predates it answers `BadRequest` (unknown variant).
    FenceCgroup {
        /// Record index of the held job.
        index: u32,
        /// Its birth generation.
        birth: u32,
        /// The claim's generation (see [`Request::FenceCommand`]).
        generation: u32,
        /// The command's pid (in the daemon's pid namespace).
        pid: u32,
    },
    /// The command `pid` registered for record `index` (birth `birth`) has exited and been
    /// reaped: forget it; [`Response::Unfenced`]. A registration of another pid for the same
    /// job (the job ran again, on this process, after its lease ran out) stays.
    Unfence {
        /// Record index.
        index: u32,
        /// Birth generation.
        birth: u32,
        /// The command's pid, as registered.
        pid: u32,
    },
    /// Job `index` at `generation` was left `Delayed` (a push with a due time, or a give-back
    /// with a retry delay): put it in line once due; [`Response::Scheduled`]. A record that
    /// is not `Delayed` at that generation is ignored (it was put in line already, or its
    /// queue was deleted). A process that dies before it sends this loses nothing: the
    /// daemon finds `Delayed` records by a scan when it recovers a dead process and when it
    /// adopts a segment. Added without a version bump, as `Resume` was.
    Schedule {
        /// Record index.
        index: u32,
        /// Its generation while `Delayed`.
        generation: u32,
    },
    /// Set (or with `None` clear) the retry backoff of queue `queue`, which clients learn at
    /// attach ([`QueueInfo::retry_backoff`]) and `xtcq work` applies on failure; only the
    /// queue's owner, root and the daemon's uid may; [`Response::BackoffSet`]. Added without
    /// a version bump, as `Resume` was.
    SetRetryBackoff {
        /// Queue name.
        queue: String,
        /// The policy.
        backoff: Option<crate::backoff::RetryBackoff>,
    },
    /// A page of the dead letters of `queue`, from record `from` on;
    /// [`Response::DeadLetters`]. Refused as an attach is to a user who may not use the queue.
    DeadLetters {
        /// Queue name.
        queue: String,
        /// The first record to look at (0, then the page's [`DeadLetterPage::next`]).
        from: u32,
    },
    /// Re-queue or purge dead letters of `queue`: the named ones, or all of them when `jobs`
    /// is `None`; [`Response::DeadActedOn`]. The daemon first attaches the caller to the queue
    /// as an injector (refused as that attach would be), and refuses the whole request before
    /// doing anything when a named job is not a dead letter of that queue.
    ActOnDead {
        /// Queue name.
        queue: String,
        /// Re-queue or purge.
        action: DeadAction,
        /// The jobs, or `None` for every dead letter of the queue.
        jobs: Option<Vec<JobRef>>,
    },
    /// Set queue `queue`'s record quota and dead-letter cap (each `None`: left as it is; 0:
    /// none); only the queue's owner, root and the daemon's uid may; [`Response::LimitsSet`].
    /// A queue is created with no quota and the daemon's default dead-letter cap. Added
    /// without a version bump, as `SetRetryBackoff` was.
    SetQueueLimits {
        /// Queue name.
        queue: String,
        /// Most records its jobs may hold at once.
        max_records: Option<u32>,
        /// Most dead letters kept; past it the oldest are dropped.
        max_dead: Option<u32>,
        /// Most of its jobs claimed at once, across every process (0: no limit; at most
        /// [`MAX_RUNNING_LIMIT`]). Absent from a client that predates it: unchanged.
        #[serde(default)]
        max_running: Option<u32>,
        /// Its rate limit (`interval_ns` 0: none). Absent from a client that predates it:
        /// unchanged.
        #[serde(default)]
        max_rate: Option<RateLimit>,
    },
    /// A wake descriptor for this connection's process on queue `queue` (to which it must be
    /// attached as a thief): [`Response::WakeDescriptor`], with the socket passed as
    /// `SCM_RIGHTS` on the reply's first bytes.
    WakeDescriptor {
        /// The queue.
        queue: String,
    },
    /// An idempotent create: creates the queue as [`Request::CreateSharedQueue`] does, or,
    /// when a queue of that name exists with exactly these settings and permissions, answers
    /// [`Response::QueueCreated`] with it. One whose settings or permissions differ is refused
    /// with [`ErrorCode::QueueMismatch`], the message naming each difference. Added without a
    /// version bump: a daemon that predates it answers `BadRequest` (unknown variant).
    CreateQueueExistOk {
        /// The queue.
        params: QueueParams,
        /// Further uids allowed.
        allow_uids: Vec<u32>,
        /// Gids whose members are allowed.
        allow_gids: Vec<u32>,
    },
    /// Pause (`paused`) or resume queue `queue`: while paused its consumers take no job
    /// (jobs being run finish), pushes are still taken and wake nobody; a resume wakes its
    /// sleepers. The state is in the segment, so it outlives a daemon restart, and in a
    /// dump. Only the queue's owner, root and the daemon's uid may; [`Response::PausedSet`].
    /// Added without a version bump, as `SetQueueLimits` was.
    SetPaused {
        /// Queue name.
        queue: String,
        /// Pause (true) or resume (false).
        paused: bool,
    },
    /// What became of job `job` (its stable id, `index.birth`) of queue `queue`;
    /// [`Response::JobFate`]. Refused as an attach is to a user who may not use the queue.
    /// Added without a version bump.
    JobFate {
        /// Queue name.
        queue: String,
        /// The job, by its id (`number` is its birth).
        job: JobRef,
    },
    /// Cancels job `job` (its stable id, `index.birth`) of queue `queue`: a queued or delayed
    /// job never runs, a running one's command is stopped (by the fence) before the answer;
    /// [`Response::JobCancelled`]. Only the queue's owner, root and xtcqd's uid may. Added
    /// without a version bump.
    CancelJob {
        /// Queue name.
        queue: String,
        /// The job, by its id (`number` is its birth).
        job: JobRef,
    },
    /// Opens, seals or looks at batch `name` of queue `queue` ([`Response::Batch`]). Those
    /// who may use the queue may (and, for a callback, its queue). Added without a version
    /// bump.
    Batch {
        /// Queue name.
        queue: String,
        /// Batch name.
        name: String,
        /// What to do.
        action: crate::BatchAction,
    },
    /// Gives wake descriptor `bit` of queue `queue` back ([`Response::WakeReleased`]); the
    /// daemon also takes them back when the process's slot is recovered.
    ReleaseWake {
        /// The queue.
        queue: String,
        /// The descriptor's bit ([`Response::WakeDescriptor`]).
        bit: u32,
    },
}

/// A successful reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// To [`Request::Ping`].
    Pong,
    /// To [`Request::CreateQueue`] and [`Request::CreateSharedQueue`].
    QueueCreated(QueueInfo),
    /// To [`Request::ListQueues`].
    Queues(Vec<QueueInfo>),
    /// To [`Request::Stats`].
    Stats(Stats),
    /// To [`Request::AttachOwner`].
    OwnerAttached(OwnerLease),
    /// To [`Request::AttachThief`].
    ThiefAttached(Attachment),
    /// To [`Request::AttachInjector`].
    InjectorAttached(Attachment),
    /// To [`Request::Detach`].
    Detached,
    /// To [`Request::Shutdown`]: the daemon is stopping.
    ShuttingDown,
    /// To [`Request::Resume`]: this connection now holds that slot again.
    Resumed {
        /// The slot index.
        process_slot: u32,
        /// Its incarnation (unchanged by a resume).
        slot_epoch: u64,
    },
    /// To [`Request::DeleteQueue`]: the queue is gone; its table entry is free.
    QueueDeleted(QueueDeleted),
    /// To [`Request::FenceCommand`] and [`Request::FenceCgroup`]: the daemon holds a pidfd
    /// for the command (and the cgroup's descriptors).
    Fenced,
    /// To [`Request::Unfence`].
    Unfenced,
    /// To [`Request::Schedule`].
    Scheduled,
    /// To [`Request::SetRetryBackoff`].
    BackoffSet,
    /// To [`Request::DeadLetters`].
    DeadLetters(DeadLetterPage),
    /// To [`Request::ActOnDead`].
    DeadActedOn(DeadActed),
    /// To [`Request::SetQueueLimits`].
    LimitsSet,
    /// To [`Request::WakeDescriptor`]: the socket is the fd passed with this reply; `bit` is
    /// its waiter bit in the queue's wait line (`xtcq_shm::wake_protocol`).
    WakeDescriptor {
        /// The waiter bit.
        bit: u32,
    },
    /// To [`Request::ReleaseWake`].
    WakeReleased,
    /// To [`Request::JobFate`].
    JobFate(JobState),
    /// To [`Request::CancelJob`]: what the cancel did.
    JobCancelled(CancelOutcome),
    /// To [`Request::Batch`]: the batch as it is after the action.
    Batch(crate::BatchInfo),
    /// To [`Request::SetPaused`].
    PausedSet {
        /// Whether the queue was paused before.
        was_paused: bool,
    },
}

/// Something the daemon tells a client without being asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// The daemon is stopping and will close the connection. Attached processes keep their
    /// slots and leases in the segment; a restarted daemon adopts them.
    ShuttingDown {
        /// Why (e.g. "SIGTERM").
        reason: String,
    },
}

/// A message from daemon to client after the handshake.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerMessage {
    /// The answer to request `id`.
    Reply {
        /// The request's id ([`UNKNOWN_REQUEST_ID`] if it could not be decoded).
        id: u64,
        /// The outcome.
        result: Result<Response, ErrorReply>,
    },
    /// Unsolicited.
    Event(Event),
}

/// Why a request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The queue does not exist.
    NoSuchQueue,
    /// A queue of that name exists.
    QueueExists,
    /// The queue table is full.
    QueueTableFull,
    /// Every deque of the queue is leased (or the deque asked for is).
    NoFreeDeque,
    /// Every process slot is in use.
    NoFreeSlot,
    /// The request is malformed or its arguments are invalid.
    BadRequest,
    /// The peer's uid/gid is not allowed, or the request is not allowed to it.
    Unauthorized,
    /// Protocol versions differ.
    VersionMismatch,
    /// A frame was too large.
    FrameTooLarge,
    /// The daemon is shutting down.
    ShuttingDown,
    /// The segment is corrupt.
    Corrupt,
    /// A fault inside the daemon.
    Internal,
    /// The process slot named by a [`Request::Resume`] is not registered to the connecting
    /// process at that epoch.
    SlotNotHeld,
    /// A [`Request::DeleteQueue`] was refused: a process is (or may be) attached to the
    /// queue, or one of its jobs is being run. The message names the processes.
    QueueInUse,
    /// A [`Request::DeleteQueue`] without `force` was refused: the queue holds queued jobs or
    /// dead letters. The message says how many.
    QueueNotEmpty,
    /// A per-user limit was reached (connections or process slots of one uid). The message
    /// names the limit and the `xtcqd` flag that raises it.
    LimitReached,
    /// The daemon's segment was truncated, unlinked or replaced under it: it takes no new
    /// work (the message says which, and what to do).
    SegmentLost,
    /// An idempotent create found a queue of that name whose settings or permissions differ
    /// from those asked; the message names each difference.
    QueueMismatch,
    /// A [`Request::Batch`] named no batch of its queue (never opened, or forgotten with its
    /// queue). Added without a version bump: an older client reads it as `Unknown`.
    NoSuchBatch,
    /// The segment has no room for what was asked: the batch table is full, or the queue a
    /// batch's callback job goes to is. The message names what and the flag or action that
    /// makes room. Added without a version bump: an older client reads it as `Unknown`.
    NoRoom,
    /// A code this build does not know (sent by a newer daemon).
    #[serde(other)]
    Unknown,
}

/// An error reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// What kind of failure.
    pub code: ErrorCode,
    /// A sentence for a human.
    pub message: String,
}

impl ErrorReply {
    /// An error reply.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

impl std::fmt::Display for ErrorReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl std::error::Error for ErrorReply {}
