//! `xtcq-client`: connect to `xtcqd`, create, inspect and delete queues, and attach as an owner
//! (a producer with its own deque) or a thief (a consumer that steals from every deque).
//!
//! ```no_run
//! use xtcq_client::{Client, QueueParams};
//! let client = Client::connect(None)?;                 // --socket / $XTCQ_SOCKET / default
//! client.create_queue(&QueueParams::new("jobs"))?;
//! let owner = client.attach_owner("jobs")?;            // a deque lease, in shared memory
//! owner.push(b"hello")?;                               // no system call
//! let thief = client.attach_thief("jobs")?;            // usually in another process
//! if let Some(job) = thief.steal_wait(Some(std::time::Duration::from_secs(1)))? {
//!     println!("{}", String::from_utf8_lossy(&job.payload()?));
//!     job.ack()?;                                      // or job.nack()?, or drop = nack
//! }
//! # Ok::<(), xtcq_client::Error>(())
//! ```
//!
//! The control connection is a blocking Unix stream, read by the caller of each request: no
//! thread, no signal handler, no async runtime (it runs inside a PostgreSQL backend). Handles keep it open: a process's slot and leases live as long as its
//! connection and the process itself; the daemon releases them once both are gone.
//!
//! Invariants:
//! - the socket path is resolved exactly as the daemon resolves it
//!   ([`xtcq_proto::paths`]), plus a fallback to the system daemon's socket;
//! - every handle holds the connection and the segment mapping it needs, so no handle can
//!   outlive what it points into;
//! - errors are [`Error`], typed, with messages that name the socket, queue or sizes.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod batch;
mod batches;
mod conn;
mod dead_bulk;
mod delay;
mod error;
mod fdpass;
mod handles;
mod job;
mod job_state;
mod trust;
mod unique;
mod wake;
#[cfg(feature = "tokio")]
mod wake_async;

use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use batch::JobBatch;
pub use batches::WAIT_STEP;
pub use dead_bulk::{BulkDead, DeadAction, NAMED_PER_REQUEST};
pub use delay::Due;
pub use error::Error;
pub use handles::{InjectorHandle, OwnerHandle, ThiefHandle};
pub use job::{Borrowed, Job, JobOf, Keep, Owned, OwnedJob};
pub use trust::TRUST_ENV;
pub use unique::{OnDuplicate, Pushed, MAX_KEY_LEN};
pub use wake::{WakeFd, WakeKind, WAKE_FD_ENV};
#[cfg(feature = "tokio")]
pub use wake_async::AsyncWake;
pub use xtcq_proto::{
    self as proto, BatchInfo, BatchStatus, CancelOutcome, Flavor, HelloOk, Jitter, JobState, OnComplete,
    QueueDeleted, QueueInfo, QueueParams, RateLimit, Request, Response, RetryBackoff, Stats,
    PROTOCOL_VERSION,
};
pub use xtcq_shm::check::CheckReport;
pub use xtcq_shm::dead_letter::DeadLetter;
/// Fork detection ([`Error::Forked`]), shared with the C API.
pub use xtcq_shm::fork;
pub use xtcq_shm::segment::monotonic_ns;
pub use xtcq_shm::{JobError, JobHandle, JobId};

use conn::Conn;
use xtcq_proto::paths;

/// How to connect.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// The socket; `None` resolves `$XTCQ_SOCKET`, then the defaults.
    pub socket: Option<PathBuf>,
    /// A name for the daemon's logs.
    pub client_name: String,
    /// How long to wait for the daemon to answer a request.
    pub timeout: Duration,
    /// Uids, besides this process's own and root, that may run the daemon and own the
    /// socket's directory (e.g. a service user); `$XTCQ_TRUST_UID` adds more.
    pub trusted_uids: Vec<u32>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        let name = std::env::args_os()
            .next()
            .and_then(|a| Path::new(&a).file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "xtcq-client".into());
        Self { socket: None, client_name: name, timeout: Duration::from_secs(30), trusted_uids: Vec::new() }
    }
}

/// How [`Client::create_queue_with`] creates a queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateOptions {
    /// Succeed when a queue of that name exists with the same settings and permissions;
    /// refuse ([`Error::QueueMismatch`]) when they differ.
    pub exist_ok: bool,
    /// Further uids that may use the queue (see [`Client::create_shared_queue`]).
    pub allow_uids: Vec<u32>,
    /// Gids whose members may use the queue.
    pub allow_gids: Vec<u32>,
}

/// A connection to `xtcqd`. Cheap to clone (clones share the connection); `Send + Sync`.
#[derive(Clone)]
pub struct Client {
    conn: Arc<Conn>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("socket", &self.conn.path()).finish()
    }
}

/// The socket path a client would connect to for `socket` (`--socket`), after
/// `$XTCQ_SOCKET` and the defaults.
pub fn resolve_socket(socket: Option<&Path>) -> PathBuf {
    paths::resolve_client_socket(socket).0
}

impl Client {
    /// Connects to the daemon at `socket`, or at `$XTCQ_SOCKET`, or at the default path.
    ///
    /// A socket nobody listens on is [`Error::DaemonNotRunning`], naming the path:
    ///
    /// ```
    /// use xtcq_client::{Client, Error};
    /// let dir = tempfile::tempdir()?;
    /// match Client::connect(Some(&dir.path().join("xtcqd.sock"))) {
    ///     Err(Error::DaemonNotRunning { .. }) => {} // start xtcqd, or set $XTCQ_SOCKET
    ///     other => panic!("no daemon listens there, yet: {other:?}"),
    /// }
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn connect(socket: Option<&Path>) -> Result<Client, Error> {
        Self::connect_with(ConnectOptions {
            socket: socket.map(Path::to_path_buf),
            ..ConnectOptions::default()
        })
    }

    /// Connects with explicit options.
    pub fn connect_with(opts: ConnectOptions) -> Result<Client, Error> {
        let path = resolve_socket(opts.socket.as_deref());
        let mut trusted = opts.trusted_uids;
        trusted.extend(trust::env_trusted_uids()?);
        let conn = Conn::open_trusting(&path, &opts.client_name, opts.timeout, trusted)?;
        Ok(Client { conn: Arc::new(conn) })
    }

    /// The socket connected to.
    pub fn socket_path(&self) -> &Path {
        self.conn.path()
    }

    /// What the daemon said on connecting, or on the last reconnect (its pid, epoch, segment
    /// path).
    pub fn daemon(&self) -> HelloOk {
        self.conn.hello()
    }

    /// Times this client re-established its control connection after losing it (a daemon
    /// restart). Requests reconnect by themselves; this is for logs and tests.
    pub fn reconnects(&self) -> u64 {
        self.conn.reconnects()
    }

    /// The process slot this client's connection holds in the segment (the `me` of its
    /// handles), once it has attached; `None` before. Kept across daemon restarts: the
    /// connection asks for it back when it reconnects.
    pub fn process_slot(&self) -> Option<u32> {
        self.conn.process_slot()
    }

    /// `false` while the control connection is gone (daemon stopped or crashed) and no
    /// request has re-established it yet. Attached handles keep working in shared memory; a
    /// restarted daemon keeps their leases, and the next request reconnects.
    pub fn is_connected(&self) -> bool {
        self.conn.is_connected()
    }

    /// The reason the daemon gave when it announced its shutdown, if it did.
    pub fn shutdown_notice(&self) -> Option<String> {
        self.conn.shutdown_reason()
    }

    /// Sends a raw request (for tools that need the whole protocol).
    pub fn call(&self, req: Request) -> Result<Response, Error> {
        let queue = match &req {
            Request::CreateQueue(p)
            | Request::CreateSharedQueue { params: p, .. }
            | Request::CreateQueueExistOk { params: p, .. } => Some(p.name.clone()),
            Request::DeleteQueue { name, .. } => Some(name.clone()),
            Request::Stats { queue } => queue.clone(),
            Request::AttachOwner { queue, .. }
            | Request::AttachThief { queue }
            | Request::AttachInjector { queue }
            | Request::Detach { queue, .. }
            | Request::SetRetryBackoff { queue, .. }
            | Request::DeadLetters { queue, .. }
            | Request::ActOnDead { queue, .. }
            | Request::SetQueueLimits { queue, .. }
            | Request::SetPaused { queue, .. }
            | Request::JobFate { queue, .. }
            | Request::Batch { queue, .. } => Some(queue.clone()),
            _ => None,
        };
        self.conn.request(req, queue.as_deref())
    }

    /// Registers `pid`, a child of this process leading its own process group, as the
    /// command running job `id` (held by this process): if this process dies or the job's
    /// lease expires, the daemon kills that process group, and waits until it is empty,
    /// before the job can be claimed again (or dead-letters it when it cannot). For
    /// executors that run a job outside their own process; see the book's guarantees, "Fencing".
    ///
    /// `generation` is the claim's, as its handle has it now (`Job::handle().generation`):
    /// a registration for a claim that was taken back meanwhile is refused, even if this
    /// process has claimed the same job again since.
    pub fn fence_command(&self, id: JobId, generation: u32, pid: u32) -> Result<(), Error> {
        match self.call(Request::FenceCommand { index: id.index, birth: id.birth, generation, pid })? {
            Response::Fenced => Ok(()),
            r => Err(self.unexpected(r)),
        }
    }

    /// [`fence_command`](Self::fence_command) for a command that runs in a cgroup (v2) of
    /// its own: `dir` is that cgroup's directory (opened read-only) and `kill` its
    /// `cgroup.kill` (opened for writing). Both go to the daemon over the control socket;
    /// before the job can run again it also kills the cgroup through `kill` and waits until
    /// the cgroup is empty, so processes that left the command's process group are stopped
    /// too. Refused by a daemon that predates cgroup fencing (`BadRequest`).
    pub fn fence_command_in_cgroup(
        &self,
        id: JobId,
        generation: u32,
        pid: u32,
        (dir, kill): (BorrowedFd<'_>, BorrowedFd<'_>),
    ) -> Result<(), Error> {
        let req = Request::FenceCgroup { index: id.index, birth: id.birth, generation, pid };
        match self.conn.request_with_fds(req, None, self.conn.timeout(), &[dir, kill])? {
            Response::Fenced => Ok(()),
            r => Err(self.unexpected(r)),
        }
    }

    /// Sets queue `queue`'s retry backoff (`None` clears it): clients that attach learn it
    /// ([`QueueInfo::retry_backoff`]) and `xtcq work` waits that long before a failed job
    /// runs again. Only the queue's owner, root and the daemon's uid may.
    pub fn set_retry_backoff(&self, queue: &str, backoff: Option<RetryBackoff>) -> Result<(), Error> {
        match self.call(Request::SetRetryBackoff { queue: queue.to_string(), backoff })? {
            Response::BackoffSet => Ok(()),
            r => Err(self.unexpected(r)),
        }
    }

    /// Sets queue `queue`'s record quota (the most records its jobs may hold at once) and
    /// dead-letter cap (past it the daemon drops the oldest dead letters); `None` leaves one
    /// as it is, 0 removes it. Only the queue's owner, root and the daemon's uid may.
    pub fn set_queue_limits(
        &self,
        queue: &str,
        max_records: Option<u32>,
        max_dead: Option<u32>,
    ) -> Result<(), Error> {
        let req = Request::SetQueueLimits {
            queue: queue.to_string(),
            max_records,
            max_dead,
            max_running: None,
            max_rate: None,
        };
        match self.call(req)? {
            Response::LimitsSet => Ok(()),
            r => Err(self.unexpected(r)),
        }
    }

    /// Sets queue `queue`'s concurrency limit: at most `max` of its jobs claimed at once,
    /// across every process (0: no limit; at most [`xtcq_proto::MAX_RUNNING_LIMIT`]).
    /// Consumers that find the queue at its limit sleep until a job of it is settled. Only
    /// the queue's owner, root and the daemon's uid may.
    pub fn set_max_running(&self, queue: &str, max: u32) -> Result<(), Error> {
        let req = Request::SetQueueLimits {
            queue: queue.to_string(),
            max_records: None,
            max_dead: None,
            max_running: Some(max),
            max_rate: None,
        };
        match self.call(req)? {
            Response::LimitsSet => Ok(()),
            r => Err(self.unexpected(r)),
        }
    }

    /// Sets queue `queue`'s rate limit: at most `limit.burst` of its jobs claimed at once
    /// after a quiet spell, then one every `limit.interval_ns`, across every process
    /// (`interval_ns` 0: no limit). Consumers out of tokens sleep until the next is due. Only
    /// the queue's owner, root and the daemon's uid may.
    pub fn set_max_rate(&self, queue: &str, limit: xtcq_proto::RateLimit) -> Result<(), Error> {
        let req = Request::SetQueueLimits {
            queue: queue.to_string(),
            max_records: None,
            max_dead: None,
            max_running: None,
            max_rate: Some(limit),
        };
        match self.call(req)? {
            Response::LimitsSet => Ok(()),
            r => Err(self.unexpected(r)),
        }
    }

    /// Pauses queue `queue`: its consumers, in every process, take no job until it is
    /// resumed (jobs being run finish; pushes are still taken). Only the queue's owner, root
    /// and the daemon's uid may. Whether it was paused already.
    pub fn pause_queue(&self, queue: &str) -> Result<bool, Error> {
        self.set_paused(queue, true)
    }

    /// Resumes queue `queue` ([`pause_queue`](Self::pause_queue)) and wakes its sleeping consumers.
    /// Whether it was paused.
    pub fn resume_queue(&self, queue: &str) -> Result<bool, Error> {
        self.set_paused(queue, false)
    }

    /// What became of job `id` of queue `queue` (queued, delayed, running and by whom, dead
    /// and why, finished, or unknown), as its record tells it now.
    pub fn job_state(&self, queue: &str, id: JobId) -> Result<xtcq_proto::JobState, Error> {
        let job = xtcq_proto::JobRef { index: id.index, number: id.birth };
        match self.call(Request::JobFate { queue: queue.to_string(), job })? {
            Response::JobFate(s) => Ok(s),
            r => Err(self.unexpected(r)),
        }
    }

    /// Cancels job `id` of queue `queue`: a queued or delayed job never runs; a running one
    /// is taken from its holder (whose ack then fails) and the command `xtcq work` ran for it
    /// is stopped before this returns. Only the queue's owner, root and xtcqd's uid may. What
    /// the cancel did (or why there was nothing to cancel).
    pub fn cancel_job(&self, queue: &str, id: JobId) -> Result<xtcq_proto::CancelOutcome, Error> {
        let job = xtcq_proto::JobRef { index: id.index, number: id.birth };
        match self.call(Request::CancelJob { queue: queue.to_string(), job })? {
            Response::JobCancelled(out) => Ok(out),
            r => Err(self.unexpected(r)),
        }
    }

    fn set_paused(&self, queue: &str, paused: bool) -> Result<bool, Error> {
        match self.call(Request::SetPaused { queue: queue.to_string(), paused })? {
            Response::PausedSet { was_paused } => Ok(was_paused),
            r => Err(self.unexpected(r)),
        }
    }

    /// The command `pid` registered for job `id` has exited and been reaped.
    pub fn unfence_command(&self, id: JobId, pid: u32) -> Result<(), Error> {
        match self.call(Request::Unfence { index: id.index, birth: id.birth, pid })? {
            Response::Unfenced => Ok(()),
            r => Err(self.unexpected(r)),
        }
    }

    /// [`unfence_command`](Self::unfence_command) without waiting for the daemon's answer:
    /// it is sent, and the daemon handles it before this connection's next request. A word
    /// that is lost with the connection is made up for by the daemon, which forgets a
    /// registration whose command and group are gone by itself.
    pub fn unfence_command_nowait(&self, id: JobId, pid: u32) -> Result<(), Error> {
        self.conn.post(Request::Unfence { index: id.index, birth: id.birth, pid })
    }

    fn unexpected(&self, r: Response) -> Error {
        Error::Protocol { path: self.conn.path().to_path_buf(), message: format!("unexpected reply {r:?}") }
    }

    /// Round trip to the daemon.
    pub fn ping(&self) -> Result<(), Error> {
        match self.call(Request::Ping)? {
            Response::Pong => Ok(()),
            r => Err(self.unexpected(r)),
        }
    }

    /// Creates a queue.
    pub fn create_queue(&self, params: &QueueParams) -> Result<QueueInfo, Error> {
        // The daemon refuses it too; checked here for an error before any request.
        xtcq_proto::queue_name::check(&params.name)?;
        match self.call(Request::CreateQueue(params.clone()))? {
            Response::QueueCreated(q) => Ok(q),
            r => Err(self.unexpected(r)),
        }
    }

    /// Creates a queue as `options` say: shared with other users, and idempotent with
    /// `exist_ok`. With `exist_ok`, a queue of that name with the same settings and permissions
    /// is the answer (so a program can create its queue on every start), and one with other
    /// settings is refused with [`Error::QueueMismatch`], naming each difference:
    ///
    /// ```no_run
    /// use xtcq_client::{Client, CreateOptions, Error, Flavor, QueueParams};
    /// let client = Client::connect(None)?;
    /// let exist_ok = CreateOptions { exist_ok: true, ..Default::default() };
    /// client.create_queue_with(&QueueParams::new("jobs"), &exist_ok)?; // creates it
    /// client.create_queue_with(&QueueParams::new("jobs"), &exist_ok)?; // finds it: Ok
    /// let fifo = QueueParams { flavor: Flavor::Fifo, ..QueueParams::new("jobs") };
    /// match client.create_queue_with(&fifo, &exist_ok) {
    ///     Err(Error::QueueMismatch { message, .. }) => eprintln!("{message}"), // flavor is lifo, not fifo
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok::<(), xtcq_client::Error>(())
    /// ```
    ///
    /// A daemon that predates the idempotent create answers [`Error::BadRequest`], saying so.
    pub fn create_queue_with(
        &self,
        params: &QueueParams,
        options: &CreateOptions,
    ) -> Result<QueueInfo, Error> {
        if !options.exist_ok {
            return if options.allow_uids.is_empty() && options.allow_gids.is_empty() {
                self.create_queue(params)
            } else {
                self.create_shared_queue(params, &options.allow_uids, &options.allow_gids)
            };
        }
        xtcq_proto::queue_name::check(&params.name)?;
        let req = Request::CreateQueueExistOk {
            params: params.clone(),
            allow_uids: options.allow_uids.clone(),
            allow_gids: options.allow_gids.clone(),
        };
        match self.call(req) {
            Ok(Response::QueueCreated(q)) => Ok(q),
            Ok(r) => Err(self.unexpected(r)),
            // Ours never answers it with BadRequest for a valid name; one that cannot decode it does.
            Err(Error::BadRequest(m)) if m.contains("unknown variant") => Err(Error::BadRequest(format!(
                "xtcqd at {} predates the idempotent create (exist_ok); upgrade it: {m}",
                self.conn.path().display()
            ))),
            Err(e) => Err(e),
        }
    }

    /// Creates a queue owned by this process's uid that the users `allow_uids` and the
    /// members of the groups `allow_gids` may use too (attach to, re-queue and purge its dead
    /// letters). Only its owner, root and the daemon's uid may delete it. The daemon enforces
    /// this on the control socket; within the segment, every attached process can read and
    /// write every queue, so users who must not see each other's jobs need separate daemons.
    pub fn create_shared_queue(
        &self,
        params: &QueueParams,
        allow_uids: &[u32],
        allow_gids: &[u32],
    ) -> Result<QueueInfo, Error> {
        let req = Request::CreateSharedQueue {
            params: params.clone(),
            allow_uids: allow_uids.to_vec(),
            allow_gids: allow_gids.to_vec(),
        };
        match self.call(req)? {
            Response::QueueCreated(q) => Ok(q),
            r => Err(self.unexpected(r)),
        }
    }

    /// Deletes `queue`, freeing its table entry for another queue (of that name or not).
    ///
    /// Refused with [`Error::QueueInUse`] while a process is attached to the queue (an owner
    /// until it detaches or exits; a thief or injector until it exits; after a daemon restart,
    /// every process attached before it, since the daemon cannot tell which queues those
    /// use), naming them, or while one of its jobs is being run; and unless `force`, with
    /// [`Error::QueueNotEmpty`] while it holds queued jobs or dead letters. With `force` those
    /// are dropped (handles to them no longer claim, re-queue or purge anything). A daemon
    /// that predates deletion answers [`Error::BadRequest`], saying so.
    pub fn delete_queue(&self, queue: &str, force: bool) -> Result<QueueDeleted, Error> {
        match self.call(Request::DeleteQueue { name: queue.to_string(), force }) {
            Ok(Response::QueueDeleted(d)) => Ok(d),
            Ok(r) => Err(self.unexpected(r)),
            // Our daemon never answers a DeleteQueue with BadRequest; one that cannot decode it
            // does (unknown variant).
            Err(Error::BadRequest(m)) => Err(Error::BadRequest(format!(
                "xtcqd at {} does not know how to delete a queue (it predates DeleteQueue; upgrade it): {m}",
                self.conn.path().display()
            ))),
            Err(e) => Err(e),
        }
    }

    /// Lists queues.
    pub fn list_queues(&self) -> Result<Vec<QueueInfo>, Error> {
        match self.call(Request::ListQueues)? {
            Response::Queues(q) => Ok(q),
            r => Err(self.unexpected(r)),
        }
    }

    /// Counters of one queue, or of all.
    pub fn stats(&self, queue: Option<&str>) -> Result<Stats, Error> {
        match self.call(Request::Stats { queue: queue.map(str::to_string) })? {
            Response::Stats(s) => Ok(s),
            r => Err(self.unexpected(r)),
        }
    }

    /// Asks the daemon to stop (allowed to its own uid and root).
    pub fn shutdown_daemon(&self) -> Result<(), Error> {
        match self.call(Request::Shutdown)? {
            Response::ShuttingDown => Ok(()),
            r => Err(self.unexpected(r)),
        }
    }

    /// The identity of the daemon's segment: its creation time (Unix ns). A segment made
    /// anew (`xtcqd --recreate`) has another, and its job ids start over, so a job id names
    /// one job only beside this (the bridge keys its message ids and its state file by it).
    pub fn segment_created_unix_ns(&self) -> Result<u64, Error> {
        Ok(self.segment()?.descriptor().created_unix_ns)
    }

    /// The daemon's segment, mapped in this process (shared by every handle of this client).
    pub fn segment(&self) -> Result<Arc<xtcq_shm::Segment>, Error> {
        self.conn.segment(&self.conn.hello().segment_path)
    }

    /// Walks the daemon's segment and verifies every invariant (see
    /// [`xtcq_shm::check`]). With `quiescent`, also that no job is being filled or run and
    /// every queued job is indexed: only meaningful when no process is attached.
    pub fn check(&self, quiescent: bool) -> Result<CheckReport, Error> {
        Ok(xtcq_shm::check::check_segment(&*self.segment()?, quiescent))
    }

    /// Verifies every invariant of a segment file that no daemon serves (a copy, or one
    /// left by a stopped daemon), as [`Client::check`] does for the daemon's own.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let not_a_segment = dir.path().join("junk");
    /// std::fs::write(&not_a_segment, b"junk").unwrap();
    /// assert!(xtcq_client::Client::check_segment_file(&not_a_segment, false).is_err());
    /// ```
    pub fn check_segment_file(path: &Path, quiescent: bool) -> Result<CheckReport, Error> {
        let seg = xtcq_shm::Segment::attach(path)?;
        Ok(xtcq_shm::check::check_segment(&seg, quiescent))
    }

    /// [`check`](Self::check), then also the queued jobs that no deque or overflow ring
    /// references across `window` (longer than the daemon's sweep interval: it should have
    /// indexed them): no consumer would ever find them. Takes `window` when there is any
    /// unindexed queued record at the start.
    pub fn check_with_strays(
        &self,
        quiescent: bool,
        window: std::time::Duration,
    ) -> Result<CheckReport, Error> {
        let seg = self.segment()?;
        let mut r = xtcq_shm::check::check_segment(&seg, quiescent);
        r.problems.extend(xtcq_shm::strays::lasting_strays(&seg, window));
        Ok(r)
    }

    /// [`check_segment_file`](Self::check_segment_file) with the stray check of
    /// [`check_with_strays`](Self::check_with_strays).
    pub fn check_segment_file_with_strays(
        path: &Path,
        quiescent: bool,
        window: std::time::Duration,
    ) -> Result<CheckReport, Error> {
        let seg = xtcq_shm::Segment::attach(path)?;
        let mut r = xtcq_shm::check::check_segment(&seg, quiescent);
        r.problems.extend(xtcq_shm::strays::lasting_strays(&seg, window));
        Ok(r)
    }

    /// Becomes the owner of a free deque of `queue`.
    pub fn attach_owner(&self, queue: &str) -> Result<OwnerHandle, Error> {
        self.attach_owner_at(queue, None)
    }

    /// Becomes the owner of deque `deque` of `queue`.
    pub fn attach_owner_deque(&self, queue: &str, deque: u32) -> Result<OwnerHandle, Error> {
        self.attach_owner_at(queue, Some(deque))
    }

    fn attach_owner_at(&self, queue: &str, deque: Option<u32>) -> Result<OwnerHandle, Error> {
        let lease = match self.call(Request::AttachOwner { queue: queue.to_string(), deque })? {
            Response::OwnerAttached(l) => l,
            r => return Err(self.unexpected(r)),
        };
        match handles::OwnerHandle::new(self.conn.clone(), lease.clone()) {
            Ok(h) => Ok(h),
            Err(e) => {
                // Give the lease back: we never touched the deque.
                let _ = self.conn.request(
                    Request::Detach { queue: lease.attachment.queue.name.clone(), deque: lease.deque },
                    Some(queue),
                );
                Err(e)
            }
        }
    }

    /// Attaches as a thief of `queue`.
    pub fn attach_thief(&self, queue: &str) -> Result<ThiefHandle, Error> {
        match self.call(Request::AttachThief { queue: queue.to_string() })? {
            Response::ThiefAttached(a) => handles::ThiefHandle::new(self.conn.clone(), a),
            r => Err(self.unexpected(r)),
        }
    }

    /// Attaches as a deque-less producer of `queue`: pushes go to its overflow ring. For
    /// one-shot pushes and occasional producers; a steady producer should be an owner.
    pub fn attach_injector(&self, queue: &str) -> Result<InjectorHandle, Error> {
        match self.call(Request::AttachInjector { queue: queue.to_string() })? {
            Response::InjectorAttached(a) => handles::InjectorHandle::new(self.conn.clone(), a),
            r => Err(self.unexpected(r)),
        }
    }
}
