//! The control connection: a blocking std Unix stream, a handshake, and a reader thread.
//!
//! Requests are written by the caller under a mutex, one at a time; a small reader thread
//! reads every frame the daemon sends, hands replies to the waiting caller through a channel
//! and records events (the daemon shutting down) and the connection's loss. So a user needs
//! no async runtime, and a process learns that its daemon went away even while idle.
//!
//! Invariants:
//! - at most one request is in flight per connection; a reply is matched to it by id, and
//!   stale replies (to a request that timed out) are skipped;
//! - once the reader sees the stream end or break, `lost` is set and stays set; every later
//!   request fails with [`Error::DaemonLost`] at once;
//! - dropping the last [`Conn`] shuts the socket down, which ends the reader thread; the
//!   daemon then sees the connection close (and releases leases once the process exits).

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use shm_layout::Segment;
use xtcq_proto::frame;
use xtcq_proto::{
    ErrorReply, Event, Hello, HelloOk, HelloReply, Request, RequestFrame, Response, ServerMessage,
};

use crate::Error;

type Reply = (u64, Result<Response, ErrorReply>);

/// State the reader thread shares with callers.
#[derive(Default)]
struct Status {
    lost: AtomicBool,
    shutdown_reason: Mutex<Option<String>>,
}

struct Call {
    writer: UnixStream,
    replies: Receiver<Reply>,
}

/// One control connection.
pub(crate) struct Conn {
    path: PathBuf,
    hello: HelloOk,
    call: Mutex<Call>,
    status: Arc<Status>,
    next_id: AtomicU64,
    timeout: Duration,
    segment: Mutex<Option<Arc<Segment>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Conn {
    /// Connects and performs the handshake.
    pub(crate) fn open(path: &Path, client_name: &str, timeout: Duration) -> Result<Conn, Error> {
        let p = path.to_path_buf();
        let mut stream = UnixStream::connect(path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                Error::DaemonNotRunning { path: p.clone(), source }
            }
            std::io::ErrorKind::PermissionDenied => Error::PermissionDenied { path: p.clone(), source },
            _ => Error::Connect { path: p.clone(), source },
        })?;
        let io_err = |source| Error::Connect { path: p.clone(), source };
        stream.set_read_timeout(Some(timeout)).map_err(io_err)?;
        stream.set_write_timeout(Some(timeout)).map_err(io_err)?;
        let timeout_err = || Error::Timeout { path: p.clone(), secs: timeout.as_secs() };
        let map = |e: frame::FrameError| match Error::from_frame(e, &p) {
            Error::Timeout { .. } => timeout_err(),
            Error::DaemonLost { .. } => Error::Protocol {
                path: p.clone(),
                message: "the daemon closed the connection during the handshake".into(),
            },
            other => other,
        };
        frame::write_frame(&mut stream, &Hello::new(client_name, std::process::id())).map_err(map)?;
        let reply: HelloReply = frame::read_frame(&mut stream).map_err(|e| match e {
            frame::FrameError::Decode(d) => Error::Protocol {
                path: p.clone(),
                message: format!("unexpected handshake reply (is this an xtcqd socket?): {d}"),
            },
            other => map(other),
        })?;
        let hello = match reply {
            HelloReply::Ok(ok) => ok,
            HelloReply::VersionMismatch { daemon_version, client_version, .. } => {
                return Err(Error::VersionMismatch {
                    path: p,
                    daemon: daemon_version,
                    client: client_version,
                })
            }
            HelloReply::Refused(e) => return Err(Error::from_reply(e, None)),
        };
        // The reader waits indefinitely; writes keep their timeout.
        let reader = stream.try_clone().map_err(io_err)?;
        reader.set_read_timeout(None).map_err(io_err)?;
        let (tx, rx) = mpsc::channel();
        let status = Arc::new(Status::default());
        {
            let status = status.clone();
            std::thread::Builder::new()
                .name("xtcq-control".into())
                .spawn(move || read_loop(reader, tx, status))
                .map_err(io_err)?;
        }
        Ok(Conn {
            path: p,
            hello,
            call: Mutex::new(Call { writer: stream, replies: rx }),
            status,
            next_id: AtomicU64::new(1),
            timeout,
            segment: Mutex::new(None),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn hello(&self) -> &HelloOk {
        &self.hello
    }

    pub(crate) fn is_connected(&self) -> bool {
        !self.status.lost.load(Ordering::Acquire)
    }

    pub(crate) fn shutdown_reason(&self) -> Option<String> {
        lock(&self.status.shutdown_reason).clone()
    }

    fn lost(&self) -> Error {
        Error::DaemonLost { path: self.path.clone(), reason: self.shutdown_reason() }
    }

    /// Sends `req` and waits for its reply; `queue` names the queue for error messages.
    pub(crate) fn request(&self, req: Request, queue: Option<&str>) -> Result<Response, Error> {
        self.request_within(req, queue, self.timeout)
    }

    pub(crate) fn request_within(
        &self,
        req: Request,
        queue: Option<&str>,
        t: Duration,
    ) -> Result<Response, Error> {
        if !self.is_connected() {
            return Err(self.lost());
        }
        let mut call = lock(&self.call);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let f = RequestFrame { id, request: req };
        if let Err(e) = frame::write_frame(&mut call.writer, &f) {
            return Err(match Error::from_frame(e, &self.path) {
                Error::DaemonLost { .. } => self.lost(),
                Error::Timeout { path, .. } => Error::Timeout { path, secs: t.as_secs() },
                other => other,
            });
        }
        loop {
            match call.replies.recv_timeout(t) {
                Ok((rid, r)) if rid == id || rid == xtcq_proto::UNKNOWN_REQUEST_ID => {
                    return r.map_err(|e| Error::from_reply(e, queue))
                }
                Ok(_) => continue, // a late reply to an earlier request that timed out
                Err(RecvTimeoutError::Timeout) => {
                    return Err(Error::Timeout { path: self.path.clone(), secs: t.as_secs() })
                }
                Err(RecvTimeoutError::Disconnected) => return Err(self.lost()),
            }
        }
    }

    /// The segment at `path`, mapped once per connection.
    pub(crate) fn segment(&self, path: &Path) -> Result<Arc<Segment>, Error> {
        let mut s = lock(&self.segment);
        if let Some(seg) = s.as_ref().filter(|seg| seg.path() == path) {
            return Ok(seg.clone());
        }
        let seg = Arc::new(Segment::attach(path)?);
        *s = Some(seg.clone());
        Ok(seg)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Ends the reader thread (its read returns 0) and tells the daemon we are gone.
        let _ = lock(&self.call).writer.shutdown(std::net::Shutdown::Both);
    }
}

fn read_loop(mut s: UnixStream, tx: Sender<Reply>, status: Arc<Status>) {
    loop {
        match frame::read_frame::<_, ServerMessage>(&mut s) {
            Ok(ServerMessage::Reply { id, result }) => {
                if tx.send((id, result)).is_err() {
                    break;
                }
            }
            Ok(ServerMessage::Event(Event::ShuttingDown { reason })) => {
                *lock(&status.shutdown_reason) = Some(reason);
            }
            // A frame we cannot decode means the stream is no longer one we understand.
            Err(_) => break,
        }
    }
    status.lost.store(true, Ordering::Release);
    // Dropping `tx` wakes a caller waiting for a reply.
}
