//! One connection of the control channel: its handshake, its requests, its end, and the
//! wait for its process's exit that recovers the slot it kept.
//!
//! Rules kept:
//! - a frame that cannot be parsed costs only this connection: an error reply while the
//!   stream is in sync, else the connection is closed;
//! - a slot's leases are released only after the connection is closed *and* the process has
//!   exited (pidfd readable, or `/proc` polled where there is no pidfd), never on a mere
//!   disconnect, and only by the keeper that still keeps it;
//! - a stopping daemon ends the connection without recovering anything: the next daemon adopts
//!   the slot.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::watch;
use tracing::{debug, info, warn};
use xtcq_proto::frame::{self, FrameError};
use xtcq_proto::names;
use xtcq_proto::{self as proto, ErrorCode, ErrorReply, Request, Response, ServerMessage};

use crate::limits::connections::UidConnection;
use crate::registry::{Access, Keeper, ProcessId, SlotId};
use crate::server::fdrecv;
use crate::server::framing;
use crate::server::framing::FrameReader;
use crate::server::peer::{self, Peer};
use crate::server::{refuse_early, shutdown_requested, sleep_or_never, Shared, REFUSAL_WAIT};

mod requests;

/// How a connection ended.
enum ConnectionEnd {
    /// The peer closed it (or broke it).
    Closed,
    /// The daemon is stopping.
    Shutdown,
}

pub(crate) struct Conn {
    pub(crate) st: Arc<Shared>,
    pub(crate) stream: UnixStream,
    /// Frames read from `stream`, and the bytes of the next one already read.
    pub(crate) reader: FrameReader,
    /// Descriptors passed with the bytes read (see `fdrecv`).
    pub(crate) inbox: fdrecv::FdInbox,
    /// Those that came inside the request being answered.
    pub(crate) frame_fds: Vec<OwnedFd>,
    pub(crate) peer: Peer,
    pub(crate) name: String,
    /// This connection as the keeper of the slot it registers or resumes.
    pub(crate) keeper: Keeper,
    pub(crate) slot: Option<SlotId>,
    /// This connection, counted against its uid's limit.
    pub(crate) uid_conn: Option<UidConnection>,
    /// The peer's uid and groups, for queue permissions (read once, when first needed).
    pub(crate) access: Option<Access>,
    /// `(queue index, queue name, deque, lease word)`.
    pub(crate) leases: Vec<(u32, String, u32, u64)>,
    /// An fd the handler of the current request passes with its reply (a wake descriptor).
    pub(crate) reply_fd: Option<OwnedFd>,
}

/// Serves one connection; `permit` (its place under `--max-connections`) is given back when
/// the connection closes, not after the wait for its process to exit that may follow (a
/// process that lives on without a connection holds no connection).
pub(super) async fn connection(
    st: Arc<Shared>,
    stream: UnixStream,
    permit: tokio::sync::OwnedSemaphorePermit,
    uid_conn: Option<crate::limits::connections::UidConnection>,
) {
    let peer = match peer::identify(stream.as_fd()) {
        Ok(p) => p,
        Err(e) => {
            warn!(error = %e, "cannot identify a peer; closing");
            st.connections.fetch_sub(1, Ordering::Relaxed);
            return;
        }
    };
    debug!(pid = peer.pid, uid = peer.uid, pidfd = peer.pidfd.is_some(), "connection");
    // Counted at accept when the kernel gave the peer's uid there; else here.
    let uid_conn = match uid_conn.map(Ok).unwrap_or_else(|| st.per_uid.enter(peer.uid)) {
        Ok(g) => g,
        Err(reply) => {
            info!(pid = peer.pid, uid = peer.uid, "connection refused: {}", reply.message);
            drop(permit);
            refuse_early(stream, reply, st.cfg.io_timeout.min(REFUSAL_WAIT)).await;
            st.connections.fetch_sub(1, Ordering::Relaxed);
            return;
        }
    };
    let keeper = st.reg.keeper();
    let mut c = Conn {
        st: st.clone(),
        stream,
        reader: FrameReader::default(),
        inbox: fdrecv::FdInbox::default(),
        frame_fds: Vec::new(),
        peer,
        name: String::new(),
        keeper,
        slot: None,
        uid_conn: Some(uid_conn),
        access: None,
        leases: Vec::new(),
        reply_fd: None,
    };
    let end = c.run().await;
    st.connections.fetch_sub(1, Ordering::Relaxed);
    drop(c.uid_conn.take());
    drop(permit);
    let process = c.process_id();
    let Conn { stream, peer, slot, .. } = c;
    drop(stream);
    let Some(slot) = slot else { return };
    let keeps = st.reg.disconnected(slot, keeper);
    if matches!(end, ConnectionEnd::Shutdown) {
        return; // the slot and its leases stay for the next daemon
    }
    if !keeps {
        // The process resumed the slot over a newer connection, which watches it now.
        debug!(slot = slot.slot, pid = peer.pid, "connection closed; its slot is kept by a newer one");
        return;
    }
    watch_exit(st, slot, keeper, peer.pidfd, process).await;
}

/// One `sendmsg` of (a first part of) `bytes` with `fd` as `SCM_RIGHTS`.
fn send_fd(stream: &UnixStream, bytes: &[u8], fd: std::os::fd::BorrowedFd<'_>) -> io::Result<usize> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    anc.push(SendAncillaryMessage::ScmRights(&fds));
    Ok(rustix::net::sendmsg(stream, &[io::IoSlice::new(bytes)], &mut anc, SendFlags::NOSIGNAL)?)
}

/// Waits until `process` has exited (unless the daemon stops first), then recovers `slot`
/// if `keeper` still keeps it (a resume may have handed it to a newer connection).
pub(super) async fn watch_exit(
    st: Arc<Shared>,
    slot: SlotId,
    keeper: Keeper,
    pidfd: Option<OwnedFd>,
    process: ProcessId,
) {
    let mut rx = st.shutdown.subscribe();
    let exited = async {
        if let Some(fd) = pidfd {
            match watch_pidfd(fd) {
                Ok(afd) => {
                    let _ = afd.readable().await;
                    return;
                }
                Err(e) => warn!(error = %e, "cannot watch a pidfd; polling /proc instead"),
            }
        }
        if process.pid == 0 {
            // Neither a pidfd nor a pid we can see: the connection's end is all we know.
            return;
        }
        while peer::is_alive(process.pid, process.start_time) {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    tokio::select! {
        _ = exited => {}
        _ = shutdown_requested(&mut rx) => return,
    }
    let reg = st.reg.clone();
    match tokio::task::spawn_blocking(move || reg.recover_kept(slot, keeper)).await {
        Ok(true) => {}
        Ok(false) => {
            debug!(slot = slot.slot, pid = process.pid, "process exited; its slot is kept elsewhere")
        }
        Err(e) => warn!(slot = slot.slot, error = %e, "recovery task failed"),
    }
}

/// `fd`, a pidfd, registered with the runtime: it polls readable once its process exited.
fn watch_pidfd(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: `OwnedFd` returns the same open descriptor from every `as_raw_fd` and keeps it
    // open until the `AsyncFd` that owns it is dropped.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

/// Resolves once the process behind `pidfd` has exited (a pidfd polls readable then);
/// never without one.
async fn peer_exited(pidfd: Option<&AsyncFd<OwnedFd>>) {
    match pidfd {
        Some(fd) => {
            let _ = fd.readable().await;
        }
        None => std::future::pending().await,
    }
}

fn sanitize(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(64).collect()
}

impl Conn {
    async fn send<T: serde::Serialize>(&mut self, msg: &T) -> bool {
        let bytes = match framing::encode(msg) {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "cannot encode a reply");
                return false;
            }
        };
        self.write_frame(&bytes).await
    }

    /// Writes an encoded frame within the io-timeout; false when it could not.
    async fn write_frame(&mut self, bytes: &[u8]) -> bool {
        matches!(tokio::time::timeout(self.st.cfg.io_timeout, self.stream.write_all(bytes)).await, Ok(Ok(())))
    }

    /// [`send`](Self::send), with the segment's fd attached to the frame's first bytes.
    async fn send_with_segment<T: serde::Serialize>(&mut self, msg: &T) -> bool {
        let seg = self.st.reg.segment().clone();
        self.send_with_fd(msg, seg.file().as_fd()).await
    }

    /// [`send`](Self::send), with `fd` attached to the frame's first bytes.
    async fn send_with_fd<T: serde::Serialize>(&mut self, msg: &T, fd: std::os::fd::BorrowedFd<'_>) -> bool {
        let bytes = match framing::encode(msg) {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "cannot encode a reply");
                return false;
            }
        };
        let first = async {
            loop {
                self.stream.writable().await?;
                match self.stream.try_io(tokio::io::Interest::WRITABLE, || send_fd(&self.stream, &bytes, fd))
                {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    r => return r,
                }
            }
        };
        let sent = match tokio::time::timeout(self.st.cfg.io_timeout, first).await {
            Ok(Ok(n)) => n,
            _ => return false,
        };
        matches!(
            tokio::time::timeout(self.st.cfg.io_timeout, self.stream.write_all(&bytes[sent..])).await,
            Ok(Ok(()))
        )
    }

    async fn refuse(&mut self, e: ErrorReply) {
        warn!(pid = self.peer.pid, uid = self.peer.uid, code = ?e.code, "refused: {}", e.message);
        self.send(&proto::HelloReply::Refused(e)).await;
    }

    fn authorized(&self) -> bool {
        let cfg = &self.st.cfg;
        if cfg.allow_uids.contains(&self.peer.uid) || cfg.allow_gids.contains(&self.peer.gid) {
            return true;
        }
        if cfg.allow_gids.is_empty() {
            return false;
        }
        self.supplementary_groups().iter().any(|g| cfg.allow_gids.contains(g))
    }

    /// The peer's supplementary groups (empty when they cannot be read for sure).
    fn supplementary_groups(&self) -> Vec<u32> {
        if self.peer.pid == 0 {
            return Vec::new();
        }
        let Ok(groups) = peer::groups(self.peer.pid) else { return Vec::new() };
        // The groups were read by pid: trust them only if the pidfd says the process we
        // accepted is still the one alive (so the pid was not reused meanwhile).
        let still_ours = self.peer.pidfd.as_ref().is_some_and(|fd| !peer::pidfd_exited(fd.as_fd()));
        if still_ours {
            groups
        } else {
            Vec::new()
        }
    }

    /// Who this connection is, for a queue's permissions.
    pub(crate) fn access(&mut self) -> Access {
        if self.access.is_none() {
            let mut gids = self.supplementary_groups();
            gids.push(self.peer.gid);
            self.access = Some(Access { uid: self.peer.uid, gids });
        }
        self.access.clone().unwrap_or_default()
    }

    async fn run(&mut self) -> ConnectionEnd {
        let mut stop = self.st.shutdown.subscribe();
        let hello = match self.read_hello(&mut stop).await {
            Ok(h) => h,
            Err(end) => return end,
        };
        if !self.admit(hello).await {
            return ConnectionEnd::Closed;
        }
        info!(pid = self.peer.pid, uid = self.peer.uid, client = %self.name, "client connected");
        self.serve_requests(&mut stop).await
    }

    /// The Hello that opens the connection, within the io-timeout; a refusal is sent here.
    async fn read_hello(
        &mut self,
        stop: &mut watch::Receiver<Option<String>>,
    ) -> Result<proto::Hello, ConnectionEnd> {
        let t = self.st.cfg.io_timeout;
        let body = tokio::select! {
            r = tokio::time::timeout(t, self.reader.next(self.inbox.reader(&self.stream), t)) => r,
            _ = shutdown_requested(stop) => return Err(ConnectionEnd::Shutdown),
        };
        let refusal = match body {
            Ok(Ok(body)) => match frame::decode(&body) {
                Ok(h) => return Ok(h),
                Err(e) => {
                    ErrorReply::new(ErrorCode::BadRequest, format!("the first message must be a Hello: {e}"))
                }
            },
            Ok(Err(FrameError::Closed)) => return Err(ConnectionEnd::Closed),
            Ok(Err(e @ FrameError::TooLarge { .. })) => {
                ErrorReply::new(ErrorCode::FrameTooLarge, e.to_string())
            }
            Ok(Err(e)) => {
                debug!(pid = self.peer.pid, error = %e, "connection broke before its Hello");
                return Err(ConnectionEnd::Closed);
            }
            Err(_) => ErrorReply::new(ErrorCode::BadRequest, format!("no Hello within {} s", t.as_secs())),
        };
        self.refuse(refusal).await;
        Err(ConnectionEnd::Closed)
    }

    /// Checks the Hello's version and the peer's right to connect, and answers it: `HelloOk`
    /// (with the segment's fd) when both pass, else the reason.
    async fn admit(&mut self, hello: proto::Hello) -> bool {
        self.name = sanitize(&hello.client_name);
        if hello.protocol_version != proto::PROTOCOL_VERSION {
            let message = format!(
                "protocol version mismatch: xtcqd speaks version {}, the client speaks version {}",
                proto::PROTOCOL_VERSION,
                hello.protocol_version
            );
            warn!(pid = self.peer.pid, client = %self.name, "{message}");
            self.send(&proto::HelloReply::VersionMismatch {
                daemon_version: proto::PROTOCOL_VERSION,
                client_version: hello.protocol_version,
                message,
            })
            .await;
            return false;
        }
        if !self.authorized() {
            let refusal = self.unauthorized();
            self.refuse(refusal).await;
            return false;
        }
        // The segment's fd rides on the reply (SCM_RIGHTS on its first byte): an authorised
        // client maps what the daemon serves, never what a path names now. A client that
        // reads with plain read(2) (an older build) simply does not get it.
        let ok = proto::HelloReply::Ok(self.st.hello.clone());
        self.send_with_segment(&ok).await
    }

    /// Why this peer may not connect. A name-service lookup per refusal only (never per
    /// accepted connection): a slow LDAP server then delays only those who are turned away.
    fn unauthorized(&self) -> ErrorReply {
        let cfg = &self.st.cfg;
        ErrorReply::new(
            ErrorCode::Unauthorized,
            format!(
                "{}, {}, is not allowed by this xtcqd (allowed: users [{}], groups [{}])",
                names::uid_label(self.peer.uid),
                names::gid_label(self.peer.gid),
                names::uid_list_label(&cfg.allow_uids),
                names::gid_list_label(&cfg.allow_gids)
            ),
        )
    }

    /// Requests and their replies, until the peer closes, breaks the connection or exits,
    /// idles past `--idle-timeout` holding no slot, or the daemon stops.
    async fn serve_requests(&mut self, stop: &mut watch::Receiver<Option<String>>) -> ConnectionEnd {
        // A forked child (without exec) inherits the connection and may hold it open long
        // after this process died: its exit, not the connection's end, is what frees its
        // jobs. The child never speaks on it (libxtcq refuses inherited handles).
        let exit_watch =
            self.peer.pidfd.as_ref().and_then(|fd| fd.try_clone().ok()).and_then(|fd| watch_pidfd(fd).ok());
        loop {
            let body = match self.next_request(stop, exit_watch.as_ref()).await {
                Ok(body) => body,
                Err(end) => return end,
            };
            let answered = self.answer(&body).await;
            // Descriptors the request did not take are closed now.
            self.frame_fds.clear();
            if !answered {
                return ConnectionEnd::Closed;
            }
        }
    }

    /// The next request frame's body, or how the connection ends instead.
    async fn next_request(
        &mut self,
        stop: &mut watch::Receiver<Option<String>>,
        exit_watch: Option<&AsyncFd<OwnedFd>>,
    ) -> Result<Vec<u8>, ConnectionEnd> {
        // A connection that holds no slot holds nothing a close would take away: it may
        // not sit on a connection others need (its client reconnects when it next asks).
        let idle = self.st.cfg.idle_timeout.filter(|_| self.slot.is_none());
        let t = self.st.cfg.io_timeout;
        let body = tokio::select! {
            biased;
            reason = shutdown_requested(stop) => {
                self.send(&ServerMessage::Event(proto::Event::ShuttingDown { reason })).await;
                return Err(ConnectionEnd::Shutdown);
            }
            _ = peer_exited(exit_watch) => {
                info!(pid = self.peer.pid, client = %self.name, "process exited while its connection stays open (inherited by a child); recovering");
                return Err(ConnectionEnd::Closed);
            }
            r = self.reader.next(self.inbox.reader(&self.stream), t) => r,
            _ = sleep_or_never(idle) => {
                info!(pid = self.peer.pid, client = %self.name, "closing a connection that holds no process slot and was idle for {} s (--idle-timeout)", idle.unwrap_or_default().as_secs());
                return Err(ConnectionEnd::Closed);
            }
        };
        match body {
            Ok(b) => {
                let end = self.reader.consumed();
                self.frame_fds = self.inbox.take(end - (frame::HEADER_LEN + b.len()) as u64, end);
                Ok(b)
            }
            Err(FrameError::Closed) => {
                debug!(pid = self.peer.pid, client = %self.name, "client closed the connection");
                Err(ConnectionEnd::Closed)
            }
            Err(e @ FrameError::TooLarge { .. }) => {
                warn!(pid = self.peer.pid, client = %self.name, "{e}; closing");
                self.send(&ServerMessage::Reply {
                    id: proto::UNKNOWN_REQUEST_ID,
                    result: Err(ErrorReply::new(ErrorCode::FrameTooLarge, e.to_string())),
                })
                .await;
                Err(ConnectionEnd::Closed)
            }
            Err(e) => {
                warn!(pid = self.peer.pid, client = %self.name, error = %e, "connection broken");
                Err(ConnectionEnd::Closed)
            }
        }
    }

    /// Handles one request frame and sends its reply; false when the reply could not be
    /// sent. A granted Shutdown is answered, then stops the daemon (the next wait sees it).
    async fn answer(&mut self, body: &[u8]) -> bool {
        let (id, result) = match frame::decode::<proto::RequestFrame>(body) {
            Ok(f) => {
                let is_shutdown = matches!(f.request, Request::Shutdown);
                let r = self.handle(f.request).await;
                if is_shutdown && r.is_ok() {
                    self.send(&ServerMessage::Reply { id: f.id, result: r }).await;
                    self.st.stop(format!("Shutdown request from pid {}", self.peer.pid));
                    return true;
                }
                if let (Ok(reply), Some(fd)) = (&r, self.reply_fd.take()) {
                    return self
                        .send_with_fd(
                            &ServerMessage::Reply { id: f.id, result: Ok(reply.clone()) },
                            fd.as_fd(),
                        )
                        .await;
                }
                (f.id, r)
            }
            Err(e) => {
                let id = serde_json::from_slice::<serde_json::Value>(body)
                    .ok()
                    .and_then(|v| v.get("id")?.as_u64())
                    .unwrap_or(proto::UNKNOWN_REQUEST_ID);
                debug!(pid = self.peer.pid, error = %e, "malformed request");
                (id, Err(ErrorReply::new(ErrorCode::BadRequest, e.to_string())))
            }
        };
        self.send_reply(id, result).await
    }

    /// Sends the reply to request `id`. An answer over the frame limit (a whole-segment
    /// `Stats` or `ListQueues` of a big queue table) is replaced by an error that says so
    /// and what to ask instead, so the client learns why and its connection goes on.
    async fn send_reply(&mut self, id: u64, result: Result<Response, ErrorReply>) -> bool {
        let e = match framing::encode_reply(&ServerMessage::Reply { id, result }) {
            Ok(bytes) => return self.write_frame(&bytes).await,
            Err(e) => e,
        };
        warn!(pid = self.peer.pid, client = %self.name, error = %e, "answer too large; sending an error instead");
        let message = format!(
            "the answer is too large to send ({e}): there are too many queues or processes to \
             describe in one answer; ask about one queue instead (e.g. `xtcq stats QUEUE`)"
        );
        let result = Err(ErrorReply::new(ErrorCode::FrameTooLarge, message));
        self.send(&ServerMessage::Reply { id, result }).await
    }
}
