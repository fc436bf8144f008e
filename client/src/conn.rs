//! The control connection: a blocking std Unix stream and a handshake, so a user needs no
//! async runtime. No thread and no signal handler: the library lives inside programs that
//! allow neither (a PostgreSQL backend).
//!
//! Rules kept:
//! - requests are written under a mutex, one in flight per connection, and the caller reads
//!   frames until its reply (matched by id; a stale reply, to a request that timed out, is
//!   skipped); events (the daemon shutting down) are recorded as they pass;
//! - between requests, [`Conn::is_connected`] and [`Conn::shutdown_reason`] read what the
//!   daemon sent meanwhile without blocking (whole frames only, seen with `MSG_PEEK` first),
//!   so a process learns that its daemon went away while idle when it asks;
//! - a reply not read whole in time leaves the stream mid-frame: the link is given up;
//! - once the stream ends or breaks, that link's `lost` is set and stays set; the next
//!   request opens a new link (a new handshake: a restarted daemon) or fails with
//!   [`Error::DaemonLost`].
//! - handles keep working in shared memory without a link: a restarted daemon adopts the
//!   process's slot and leases from the segment, not from the connection.
//! - a connection holds at most one process slot, remembered here; the first request on a new
//!   link is a `Resume` of it, so a process keeps one slot across daemon restarts.
//! - a daemon that predates `Resume` answers `BadRequest`: the link carries on (that daemon
//!   adopted our slot). One that refuses it (`SlotNotHeld`: it recovered the slot) is
//!   reported once as [`Error::SlotNotResumed`]; the next attach takes a fresh slot.
//! - dropping the last [`Conn`] shuts the socket down; the daemon then sees the connection
//!   close.
//! - in a child forked after connect ([`crate::fork`]) every request fails at once with
//!   [`Error::Forked`], before any lock is taken, and the drop does not shut down the
//!   socket (the parent's too); the child's copies of its fds go at exit or exec.

use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use xtcq_proto::frame;
use xtcq_proto::{
    ErrorCode, ErrorReply, Event, Hello, HelloOk, HelloReply, Request, RequestFrame, Response, ServerMessage,
};
use xtcq_shm::Segment;

use crate::Error;

/// What is known of a link without taking it.
#[derive(Default)]
struct Status {
    lost: AtomicBool,
    shutdown_reason: Mutex<Option<String>>,
}

/// One handshaken stream to the daemon.
struct Link {
    hello: HelloOk,
    /// The segment's fd, as the daemon handed it over with its handshake reply (a daemon
    /// that predates that sends none: the segment is then opened by its path).
    segment_fd: Option<Arc<std::os::fd::OwnedFd>>,
    writer: UnixStream,
    status: Arc<Status>,
}

/// What `p` is when it exists and is no socket (a directory, a regular file, a FIFO...):
/// connecting to it is refused like connecting to a socket nobody listens on.
fn not_a_socket(p: &Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = std::fs::metadata(p).ok()?.file_type();
    (!t.is_socket()).then(|| xtcq_proto::paths::file_kind(t))
}

impl Link {
    /// Connects and performs the handshake.
    fn open(p: &Path, client_name: &str, timeout: Duration, trusted: &[u32]) -> Result<Link, Error> {
        let mut stream = UnixStream::connect(p).map_err(|source| match source.kind() {
            std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound => match not_a_socket(p) {
                Some(kind) => {
                    let why = format!(
                        "{} is a {kind}, not a socket: point --socket (or XTCQ_SOCKET) at xtcqd's \
                         control socket",
                        p.display()
                    );
                    Error::Connect { path: p.to_path_buf(), source: std::io::Error::other(why) }
                }
                None => Error::DaemonNotRunning { path: p.to_path_buf(), source },
            },
            std::io::ErrorKind::PermissionDenied => Error::PermissionDenied { path: p.to_path_buf(), source },
            _ => Error::Connect { path: p.to_path_buf(), source },
        })?;
        // Before a byte is sent: an untrusted listener learns nothing, not even our Hello.
        crate::trust::check_daemon(&stream, p, trusted)?;
        let io_err = |source| Error::Connect { path: p.to_path_buf(), source };
        stream.set_read_timeout(Some(timeout)).map_err(io_err)?;
        stream.set_write_timeout(Some(timeout)).map_err(io_err)?;
        let timeout_err = || Error::Timeout { path: p.to_path_buf(), secs: timeout.as_secs() };
        let map = |e: frame::FrameError| match Error::from_frame(e, p) {
            Error::Timeout { .. } => timeout_err(),
            // A daemon stopping (a restart), or one closing refusals it has no room to answer:
            // both worth a retry, so still "lost", with what happened.
            Error::DaemonLost { .. } => Error::DaemonLost {
                path: p.to_path_buf(),
                reason: Some("it closed the connection during the handshake".into()),
            },
            other => other,
        };
        frame::write_frame(&mut stream, &Hello::new(client_name, std::process::id())).map_err(map)?;
        let mut rd = crate::fdpass::FdReader::new(&stream);
        let reply: Result<HelloReply, _> = frame::read_frame(&mut rd);
        let segment_fd = rd.fd.take().map(Arc::new);
        let reply = reply.map_err(|e| match e {
            frame::FrameError::Decode(d) => Error::Protocol {
                path: p.to_path_buf(),
                message: format!("unexpected handshake reply (is this an xtcqd socket?): {d}"),
            },
            other => map(other),
        })?;
        let hello = match reply {
            HelloReply::Ok(ok) => ok,
            HelloReply::VersionMismatch { daemon_version, client_version, .. } => {
                return Err(Error::VersionMismatch {
                    path: p.to_path_buf(),
                    daemon: daemon_version,
                    client: client_version,
                })
            }
            HelloReply::Refused(e) => return Err(Error::from_reply(e, None)),
        };
        Ok(Link { hello, segment_fd, writer: stream, status: Arc::new(Status::default()) })
    }
}

/// One control connection, re-established on the first request after it was lost.
pub(crate) struct Conn {
    path: PathBuf,
    client_name: String,
    /// The current link; held for the whole of a request, so requests go one at a time.
    link: Mutex<Link>,
    /// The fork generation at connect ([`crate::fork`]).
    born: u64,
    /// The current link's status and handshake, readable without waiting for a request in
    /// flight.
    current: Mutex<Current>,
    next_id: AtomicU64,
    pub(crate) timeout: Duration,
    /// Uids trusted to run the daemon besides ours and root (see `trust`).
    trusted: Vec<u32>,
    reconnects: AtomicU64,
    segment: Mutex<Option<Arc<Segment>>>,
    /// `(slot, slot epoch)` the daemon gave this connection at its first attach (or a
    /// resume): what a re-established link asks back.
    held_slot: Mutex<Option<(u32, u64)>>,
    /// Bumped each time the daemon refused to give the held slot back: handles attached
    /// before that no longer act for a slot of this process (see `handles::usable`).
    slots_lost: AtomicU64,
}

/// What callers read of the current link without taking it.
struct Current {
    status: Arc<Status>,
    hello: HelloOk,
    segment_fd: Option<Arc<std::os::fd::OwnedFd>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Conn {
    /// Connects and performs the handshake.
    #[cfg(test)]
    pub(crate) fn open(path: &Path, client_name: &str, timeout: Duration) -> Result<Conn, Error> {
        Self::open_trusting(path, client_name, timeout, Vec::new())
    }

    /// Connects and performs the handshake, trusting `trusted` besides our uid and root.
    pub(crate) fn open_trusting(
        path: &Path,
        client_name: &str,
        timeout: Duration,
        trusted: Vec<u32>,
    ) -> Result<Conn, Error> {
        // Read first: it installs the fork hook before any fork this connection must see.
        let born = crate::fork::generation();
        let link = Link::open(path, client_name, timeout, &trusted)?;
        Ok(Conn {
            born,
            path: path.to_path_buf(),
            client_name: client_name.to_string(),
            current: Mutex::new(Current {
                status: link.status.clone(),
                hello: link.hello.clone(),
                segment_fd: link.segment_fd.clone(),
            }),
            link: Mutex::new(link),
            next_id: AtomicU64::new(1),
            timeout,
            trusted,
            reconnects: AtomicU64::new(0),
            segment: Mutex::new(None),
            held_slot: Mutex::new(None),
            slots_lost: AtomicU64::new(0),
        })
    }

    /// Fails with [`Error::Forked`] in a child forked since connect: the socket and the
    /// process slot are the parent's.
    #[inline]
    pub(crate) fn not_forked(&self) -> Result<(), Error> {
        if crate::fork::forked_since(self.born) {
            return Err(Error::Forked);
        }
        Ok(())
    }

    /// The fork generation at connect: what a [`crate::fork::Held`] claim compares.
    #[inline]
    pub(crate) fn born(&self) -> u64 {
        self.born
    }

    /// How many times a held slot was lost (see `slots_lost`). Relaxed: a handle only needs
    /// to see the loss by the time the request that reported it has returned, which the
    /// link's mutex orders.
    #[inline]
    pub(crate) fn slots_lost(&self) -> u64 {
        self.slots_lost.load(Ordering::Relaxed)
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// What the daemon said in the last handshake.
    pub(crate) fn hello(&self) -> HelloOk {
        lock(&self.current).hello.clone()
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.read_pending();
        !lock(&self.current).status.lost.load(Ordering::Acquire)
    }

    /// Reads, without blocking, the whole frames the daemon sent since the last request (its
    /// shutdown notice), and notices a stream that ended. Skipped while a request is in
    /// flight: that request reads them.
    fn read_pending(&self) {
        if self.not_forked().is_err() {
            return;
        }
        let Ok(mut link) = self.link.try_lock() else { return };
        read_pending_on(&mut link);
    }

    /// The process slot this connection holds, if it attached.
    pub(crate) fn process_slot(&self) -> Option<u32> {
        lock(&self.held_slot).map(|(slot, _)| slot)
    }

    /// Times the connection was re-established after a loss.
    pub(crate) fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }

    pub(crate) fn shutdown_reason(&self) -> Option<String> {
        self.read_pending();
        let status = lock(&self.current).status.clone();
        let reason = lock(&status.shutdown_reason).clone();
        reason
    }

    fn lost(&self) -> Error {
        Error::DaemonLost { path: self.path.clone(), reason: self.shutdown_reason() }
    }

    /// Sends `req` and waits for its reply; `queue` names the queue for error messages.
    pub(crate) fn request(&self, req: Request, queue: Option<&str>) -> Result<Response, Error> {
        self.request_within(req, queue, self.timeout)
    }

    /// Re-establishes a lost link (a restarted daemon, or one that came back), and asks the
    /// daemon to give it the process slot this connection held. A daemon that is still
    /// unreachable is reported as the loss; any other failure (say, a version mismatch
    /// after an upgrade) as itself.
    fn reconnect(&self, link: &mut Link) -> Result<(), Error> {
        let mut new = match Link::open(&self.path, &self.client_name, self.timeout, &self.trusted) {
            Ok(new) => new,
            // Someone else now listens at the socket: say so, not merely "lost".
            Err(e @ Error::UntrustedDaemon { .. }) => return Err(e),
            // This process is out of fds or memory (EMFILE from the socket or from the copy
            // of it): that, not "lost", is what to fix; the daemon may be up.
            Err(e) if e.is_out_of_resources() => return Err(e),
            Err(e) if e.is_unreachable() => return Err(self.lost()),
            Err(e) => return Err(e),
        };
        // A daemon restarted with --recreate serves a new segment file: the mapping our
        // handles use is the old one, whose jobs no consumer of the new daemon will see.
        if let Some(old) = lock(&self.segment).as_ref() {
            match same_file(old.file(), new.segment_fd.as_deref(), &new.hello.segment_path) {
                Ok(true) => {}
                Ok(false) => {
                    let _ = new.writer.shutdown(std::net::Shutdown::Both);
                    return Err(Error::SegmentReplaced {
                        path: self.path.clone(),
                        segment: old.path().to_path_buf(),
                    });
                }
                // Out of fds or memory: say so (the segment may well be the same one).
                Err(source) => {
                    let _ = new.writer.shutdown(std::net::Shutdown::Both);
                    return Err(Error::Connect { path: self.path.clone(), source });
                }
            }
        }
        let held = *lock(&self.held_slot);
        if let Some((slot, slot_epoch)) = held {
            match self
                .exchange(&mut new, Request::Resume { slot, slot_epoch }, None, self.timeout, &[])
                .map(|(r, _)| r)
            {
                Ok(Response::Resumed { process_slot, slot_epoch: e })
                    if process_slot == slot && e == slot_epoch => {}
                Ok(other) => {
                    let _ = new.writer.shutdown(std::net::Shutdown::Both);
                    return Err(Error::Protocol {
                        path: self.path.clone(),
                        message: format!("the daemon answered a resume of slot {slot} with {other:?}"),
                    });
                }
                // A daemon that predates Resume cannot decode it. It adopted our slot from the
                // segment, so our handles still work; this link's next attach takes another
                // slot, as before Resume existed.
                Err(e) if e.code() == Some(ErrorCode::BadRequest) => {}
                Err(Error::Daemon(ErrorReply { code: ErrorCode::SlotNotHeld, message })) => {
                    // The slot is gone (recovered: the daemon took us for dead) or never was
                    // ours. Say so once; the link is good, and the next attach registers a
                    // fresh slot.
                    *lock(&self.held_slot) = None;
                    self.slots_lost.fetch_add(1, Ordering::Relaxed);
                    self.install(link, new);
                    return Err(Error::SlotNotResumed { path: self.path.clone(), slot, message });
                }
                Err(e) => {
                    let _ = new.writer.shutdown(std::net::Shutdown::Both);
                    return Err(if e.is_unreachable() { self.lost() } else { e });
                }
            }
        }
        self.install(link, new);
        Ok(())
    }

    /// Makes `new` the current link.
    fn install(&self, link: &mut Link, new: Link) {
        let _ = link.writer.shutdown(std::net::Shutdown::Both);
        *lock(&self.current) = Current {
            status: new.status.clone(),
            hello: new.hello.clone(),
            segment_fd: new.segment_fd.clone(),
        };
        *link = new;
        self.reconnects.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn request_within(
        &self,
        req: Request,
        queue: Option<&str>,
        t: Duration,
    ) -> Result<Response, Error> {
        Ok(self.request_full(req, queue, t, &[])?.0)
    }

    /// [`request_within`](Self::request_within), with `fds` passed (`SCM_RIGHTS`) on the
    /// request frame's first bytes.
    pub(crate) fn request_with_fds(
        &self,
        req: Request,
        queue: Option<&str>,
        t: Duration,
        fds: &[BorrowedFd<'_>],
    ) -> Result<Response, Error> {
        Ok(self.request_full(req, queue, t, fds)?.0)
    }

    /// [`request_within`](Self::request_within), with the fd the daemon passed with its reply,
    /// if it passed one (a wake descriptor).
    pub(crate) fn request_with_fd(
        &self,
        req: Request,
        queue: Option<&str>,
        t: Duration,
    ) -> Result<(Response, Option<std::os::fd::OwnedFd>), Error> {
        self.request_full(req, queue, t, &[])
    }

    /// A request with `fds` passed on its first bytes; its reply and the fd passed with it.
    fn request_full(
        &self,
        req: Request,
        queue: Option<&str>,
        t: Duration,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(Response, Option<std::os::fd::OwnedFd>), Error> {
        // Before the lock: a parent's thread may have held it at the fork, for good here.
        self.not_forked()?;
        let mut link = lock(&self.link);
        // A daemon that went away since the last request (stopped, restarted, or closed an
        // idle connection) left its stream ended: seen here, so this request reconnects.
        read_pending_on(&mut link);
        if link.status.lost.load(Ordering::Acquire) {
            self.reconnect(&mut link)?;
        }
        let (r, fd) = self.exchange(&mut link, req, queue, t, fds)?;
        // Remember the slot the daemon registered (or gave back) for this connection.
        let slot = match &r {
            Response::OwnerAttached(l) => Some((l.attachment.process_slot, l.attachment.slot_epoch)),
            Response::ThiefAttached(a) | Response::InjectorAttached(a) => {
                Some((a.process_slot, a.slot_epoch))
            }
            Response::Resumed { process_slot, slot_epoch } => Some((*process_slot, *slot_epoch)),
            _ => None,
        };
        if slot.is_some() {
            *lock(&self.held_slot) = slot;
        }
        Ok((r, fd))
    }

    /// Sends `req` without waiting for its reply (read and dropped by the next request, as a
    /// late one): for a word whose answer changes nothing for the sender. Never reconnects:
    /// a lost link is reported as the loss.
    pub(crate) fn post(&self, req: Request) -> Result<(), Error> {
        self.not_forked()?;
        let mut link = lock(&self.link);
        read_pending_on(&mut link);
        if link.status.lost.load(Ordering::Acquire) {
            return Err(self.lost());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = frame::write_frame(&mut link.writer, &RequestFrame { id, request: req }) {
            give_up(&mut link);
            return Err(match Error::from_frame(e, &self.path) {
                Error::DaemonLost { .. } => self.lost(),
                other => other,
            });
        }
        Ok(())
    }

    /// A copy of the current link's stream: it reports a hang-up when the daemon goes away
    /// (for a wake descriptor's epoll). A link lost meanwhile is reconnected first, as a
    /// request would: a futex-kind descriptor asks the daemon nothing, and one made on the
    /// copy of a dead stream would be born hung up, saying "daemon lost" for ever.
    pub(crate) fn link_stream(&self) -> Result<UnixStream, Error> {
        self.not_forked()?;
        let mut link = lock(&self.link);
        read_pending_on(&mut link);
        if link.status.lost.load(Ordering::Acquire) {
            self.reconnect(&mut link)?;
        }
        link.writer.try_clone().map_err(Error::Wake)
    }

    /// Sends `req` on `link` (with `fds` on its first bytes) and waits up to `t` for its reply
    /// (and the fd passed with it).
    fn exchange(
        &self,
        link: &mut Link,
        req: Request,
        queue: Option<&str>,
        t: Duration,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(Response, Option<std::os::fd::OwnedFd>), Error> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let f = RequestFrame { id, request: req };
        let failed = |link: &mut Link, e: frame::FrameError| {
            // Part of a frame may be out, or in: nothing more can be written or read on this
            // stream in step. The link is lost, and the next request reconnects.
            give_up(link);
            match Error::from_frame(e, &self.path) {
                Error::DaemonLost { .. } => self.lost(),
                Error::Timeout { path, .. } => Error::Timeout { path, secs: t.as_secs() },
                other => other,
            }
        };
        let written = if fds.is_empty() {
            frame::write_frame(&mut link.writer, &f)
        } else {
            crate::fdpass::write_frame_with_fds(&link.writer, &f, fds)
        };
        if let Err(e) = written {
            return Err(failed(link, e));
        }
        let deadline = std::time::Instant::now() + t;
        loop {
            // The time left; a zero read timeout would mean "none" to the kernel.
            let left =
                deadline.saturating_duration_since(std::time::Instant::now()).max(Duration::from_millis(1));
            if let Err(e) = link.writer.set_read_timeout(Some(left)) {
                return Err(failed(link, frame::FrameError::Io(e)));
            }
            // recvmsg: a reply may carry an fd (the first is kept; others are closed).
            let mut rd = crate::fdpass::FdReader::new(&link.writer);
            let got = frame::read_frame_within::<_, ServerMessage>(&mut rd, xtcq_proto::MAX_REPLY_LEN);
            let fd = rd.fd.take();
            match got {
                Ok(ServerMessage::Reply { id: rid, result })
                    if rid == id || rid == xtcq_proto::UNKNOWN_REQUEST_ID =>
                {
                    return result.map(|r| (r, fd)).map_err(|e| Error::from_reply(e, queue))
                }
                Ok(ServerMessage::Reply { .. }) => {} // a late reply to an earlier request that timed out
                Ok(ServerMessage::Event(Event::ShuttingDown { reason })) => {
                    *lock(&link.status.shutdown_reason) = Some(reason);
                }
                Err(e) => return Err(failed(link, e)),
            }
        }
    }

    /// The segment at `path`, mapped once per connection, laid out as the daemon laid it out.
    pub(crate) fn segment(&self, path: &Path) -> Result<Arc<Segment>, Error> {
        let mut s = lock(&self.segment);
        let seg = match s.as_ref().filter(|seg| seg.path() == path) {
            Some(seg) => seg.clone(),
            None => Arc::new(self.map_segment(path)?),
        };
        // A header rewritten since the daemon validated it (a forged class table with the
        // same region sizes passes validation) would have us lay the segment out unlike the
        // daemon and every other process, and write blocks over live jobs' blocks: refused.
        // Checked for a kept mapping too: a daemon restarted since may have validated another
        // header. 0: a daemon that predates the digest.
        let want = lock(&self.current).hello.segment_digest;
        if want != 0 && seg.descriptor_digest() != want {
            return Err(xtcq_shm::SegmentError::Inconsistent {
                path: path.to_path_buf(),
                what: "its header is not the one the daemon validated (a process rewrote it); not \
                       used, so as not to lay it out unlike the daemon and every other process: \
                       stop the writer, then restart xtcqd to validate the header again"
                    .into(),
            }
            .into());
        }
        // Producers of this process send descriptor waiters their wakes through it.
        if let Some(dir) = &lock(&self.current).hello.wake_dir {
            seg.set_wake_dir(dir).map_err(|e| Error::Connect { path: self.path.clone(), source: e })?;
        }
        *s = Some(seg.clone());
        Ok(seg)
    }

    /// Maps the segment: the fd the daemon handed over, when it did (what it serves, whatever
    /// the path names), else the file at `path`.
    fn map_segment(&self, path: &Path) -> Result<Segment, Error> {
        let fd = lock(&self.current).segment_fd.clone();
        Ok(match fd {
            Some(fd) => {
                let f = fd.try_clone().map_err(|e| xtcq_shm::SegmentError::Io {
                    path: path.to_path_buf(),
                    what: "cannot duplicate the fd the daemon passed",
                    source: e,
                })?;
                Segment::attach_file(std::fs::File::from(f), path)?
            }
            None => Segment::attach(path)?,
        })
    }
}

/// Whether `file` (open) and the daemon's segment (the fd it passed, else the file at `path`)
/// are one file (device and inode). The passed fd is read with `fstat` in place: a copy of it
/// would need a free fd, and a process out of them must not take its segment for replaced.
/// An error of the process's own (out of fds or memory) is returned, not taken for "no".
fn same_file(file: &std::fs::File, fd: Option<&std::os::fd::OwnedFd>, path: &Path) -> std::io::Result<bool> {
    let ours = rustix::fs::fstat(file).map(|s| (s.st_dev, s.st_ino));
    let theirs = match fd {
        Some(fd) => rustix::fs::fstat(fd).map(|s| (s.st_dev, s.st_ino)),
        None => rustix::fs::stat(path).map(|s| (s.st_dev, s.st_ino)),
    };
    match (ours, theirs) {
        (Ok(a), Ok(b)) => Ok(a == b),
        (Err(e), _) | (_, Err(e)) if crate::error::is_own_limit(e) => Err(e.into()),
        _ => Ok(false),
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if crate::fork::forked_since(self.born) {
            // A forked child: shutdown(2) would cut the parent's connection.
            return;
        }
        // Tells the daemon we are gone.
        let _ = lock(&self.link).writer.shutdown(std::net::Shutdown::Both);
    }
}

/// [`Conn::read_pending`] on a link already taken.
fn read_pending_on(link: &mut Link) {
    if link.status.lost.load(Ordering::Acquire) {
        return;
    }
    loop {
        match pending_frame(&link.writer) {
            Pending::Nothing => return,
            Pending::Frame => match frame::read_frame_within::<_, ServerMessage>(
                &mut link.writer,
                xtcq_proto::MAX_REPLY_LEN,
            ) {
                Ok(ServerMessage::Event(Event::ShuttingDown { reason })) => {
                    *lock(&link.status.shutdown_reason) = Some(reason);
                }
                Ok(ServerMessage::Reply { .. }) => {} // late, to a request that timed out
                Err(_) => return give_up(link),
            },
            Pending::Ended => return give_up(link),
        }
    }
}

/// Marks `link` lost and shuts its stream down.
fn give_up(link: &mut Link) {
    let _ = link.writer.shutdown(std::net::Shutdown::Both);
    link.status.lost.store(true, Ordering::Release);
}

/// What the daemon left on a stream between requests.
enum Pending {
    /// Nothing whole yet.
    Nothing,
    /// A whole frame.
    Frame,
    /// The stream ended or broke.
    Ended,
}

/// Looks (`MSG_PEEK`, without blocking) whether a whole frame waits on `s`.
fn pending_frame(s: &UnixStream) -> Pending {
    use rustix::net::RecvFlags;
    let peek = |buf: &mut [u8]| rustix::net::recv(s, buf, RecvFlags::PEEK | RecvFlags::DONTWAIT);
    let mut head = [0u8; frame::HEADER_LEN];
    match peek(&mut head) {
        Ok((0, _)) => return Pending::Ended,
        Ok((n, _)) if n < head.len() => return Pending::Nothing,
        Ok(_) => {}
        Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => return Pending::Nothing,
        Err(_) => return Pending::Ended,
    }
    let Ok(len) = frame::check_len_within(u32::from_be_bytes(head), xtcq_proto::MAX_REPLY_LEN) else {
        return Pending::Ended;
    };
    let mut whole = vec![0u8; frame::HEADER_LEN + len];
    match peek(&mut whole) {
        Ok((n, _)) if n == whole.len() => Pending::Frame,
        _ => Pending::Nothing,
    }
}

#[cfg(test)]
mod tests;
