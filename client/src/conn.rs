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
//! - once the reader sees the stream end or break, that link's `lost` is set and stays set;
//!   the next request opens a new link (a new handshake on the same socket: a restarted
//!   daemon), or fails with [`Error::DaemonLost`] when the daemon is still unreachable.
//!   Handles keep working in shared memory meanwhile: a restarted daemon adopts the
//!   process's slot and leases from the segment, not from the connection;
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

/// One handshaken stream to the daemon and its reader thread.
struct Link {
    hello: HelloOk,
    writer: UnixStream,
    replies: Receiver<Reply>,
    status: Arc<Status>,
}

impl Link {
    /// Connects and performs the handshake.
    fn open(p: &Path, client_name: &str, timeout: Duration) -> Result<Link, Error> {
        let mut stream = UnixStream::connect(p).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                Error::DaemonNotRunning { path: p.to_path_buf(), source }
            }
            std::io::ErrorKind::PermissionDenied => Error::PermissionDenied { path: p.to_path_buf(), source },
            _ => Error::Connect { path: p.to_path_buf(), source },
        })?;
        let io_err = |source| Error::Connect { path: p.to_path_buf(), source };
        stream.set_read_timeout(Some(timeout)).map_err(io_err)?;
        stream.set_write_timeout(Some(timeout)).map_err(io_err)?;
        let timeout_err = || Error::Timeout { path: p.to_path_buf(), secs: timeout.as_secs() };
        let map = |e: frame::FrameError| match Error::from_frame(e, p) {
            Error::Timeout { .. } => timeout_err(),
            Error::DaemonLost { .. } => Error::Protocol {
                path: p.to_path_buf(),
                message: "the daemon closed the connection during the handshake".into(),
            },
            other => other,
        };
        frame::write_frame(&mut stream, &Hello::new(client_name, std::process::id())).map_err(map)?;
        let reply: HelloReply = frame::read_frame(&mut stream).map_err(|e| match e {
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
        Ok(Link { hello, writer: stream, replies: rx, status })
    }
}

/// One control connection, re-established on the first request after it was lost.
pub(crate) struct Conn {
    path: PathBuf,
    client_name: String,
    /// The current link; held for the whole of a request, so requests go one at a time.
    link: Mutex<Link>,
    /// The current link's status and handshake, readable without waiting for a request in
    /// flight.
    current: Mutex<Current>,
    next_id: AtomicU64,
    timeout: Duration,
    reconnects: AtomicU64,
    segment: Mutex<Option<Arc<Segment>>>,
}

/// What callers read of the current link without taking it.
struct Current {
    status: Arc<Status>,
    hello: HelloOk,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Conn {
    /// Connects and performs the handshake.
    pub(crate) fn open(path: &Path, client_name: &str, timeout: Duration) -> Result<Conn, Error> {
        let link = Link::open(path, client_name, timeout)?;
        Ok(Conn {
            path: path.to_path_buf(),
            client_name: client_name.to_string(),
            current: Mutex::new(Current { status: link.status.clone(), hello: link.hello.clone() }),
            link: Mutex::new(link),
            next_id: AtomicU64::new(1),
            timeout,
            reconnects: AtomicU64::new(0),
            segment: Mutex::new(None),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// What the daemon said in the last handshake.
    pub(crate) fn hello(&self) -> HelloOk {
        lock(&self.current).hello.clone()
    }

    pub(crate) fn is_connected(&self) -> bool {
        !lock(&self.current).status.lost.load(Ordering::Acquire)
    }

    /// Times the connection was re-established after a loss.
    pub(crate) fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }

    pub(crate) fn shutdown_reason(&self) -> Option<String> {
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

    /// Re-establishes a lost link (a restarted daemon, or one that came back). A daemon that
    /// is still unreachable is reported as the loss; any other failure (say, a version
    /// mismatch after an upgrade) as itself.
    fn reconnect(&self, link: &mut Link) -> Result<(), Error> {
        let new = match Link::open(&self.path, &self.client_name, self.timeout) {
            Ok(new) => new,
            Err(e) if e.is_unreachable() => return Err(self.lost()),
            Err(e) => return Err(e),
        };
        // A daemon restarted with --recreate serves a new segment file: the mapping our
        // handles use is the old one, whose jobs no consumer of the new daemon will see.
        if let Some(old) = lock(&self.segment).as_ref() {
            if !same_file(old.file(), &new.hello.segment_path) {
                let _ = new.writer.shutdown(std::net::Shutdown::Both);
                return Err(Error::SegmentReplaced {
                    path: self.path.clone(),
                    segment: old.path().to_path_buf(),
                });
            }
        }
        let _ = link.writer.shutdown(std::net::Shutdown::Both);
        *lock(&self.current) = Current { status: new.status.clone(), hello: new.hello.clone() };
        *link = new;
        self.reconnects.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn request_within(
        &self,
        req: Request,
        queue: Option<&str>,
        t: Duration,
    ) -> Result<Response, Error> {
        let mut link = lock(&self.link);
        if link.status.lost.load(Ordering::Acquire) {
            self.reconnect(&mut link)?;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let f = RequestFrame { id, request: req };
        if let Err(e) = frame::write_frame(&mut link.writer, &f) {
            // Part of the frame may be out: nothing more can be written on this stream. Closing
            // it makes the reader mark the link lost, and the next request reconnects.
            let _ = link.writer.shutdown(std::net::Shutdown::Both);
            return Err(match Error::from_frame(e, &self.path) {
                Error::DaemonLost { .. } => self.lost(),
                Error::Timeout { path, .. } => Error::Timeout { path, secs: t.as_secs() },
                other => other,
            });
        }
        loop {
            match link.replies.recv_timeout(t) {
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

/// Whether `file` (open) and the file at `path` are one file (device and inode).
fn same_file(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Ends the reader thread (its read returns 0) and tells the daemon we are gone.
        let _ = lock(&self.link).writer.shutdown(std::net::Shutdown::Both);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixListener;
    use xtcq_proto::{ErrorCode, Flavor, QueueParams};

    /// A fake daemon: accepts one connection, reads the Hello, then runs `script`.
    fn fake(script: impl FnOnce(UnixStream) + Send + 'static) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fake.sock");
        let l = UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let _: Hello = frame::read_frame(&mut s).unwrap();
            script(s);
        });
        (dir, path)
    }

    fn ok() -> HelloReply {
        HelloReply::Ok(HelloOk {
            protocol_version: xtcq_proto::PROTOCOL_VERSION,
            daemon_version: "test".into(),
            daemon_pid: 1,
            daemon_epoch: 1,
            segment_path: "/nonexistent".into(),
        })
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn a_version_mismatch_names_both_versions_and_the_socket() {
        let (_d, p) = fake(|mut s| {
            let r =
                HelloReply::VersionMismatch { daemon_version: 7, client_version: 1, message: String::new() };
            frame::write_frame(&mut s, &r).unwrap();
        });
        let e = Conn::open(&p, "t", T).err().expect("mismatch");
        let m = e.to_string();
        assert!(matches!(e, Error::VersionMismatch { daemon: 7, client: 1, .. }), "{e:?}");
        assert!(
            m.contains("version 7") && m.contains("version 1") && m.contains(&p.display().to_string()),
            "{m}"
        );
    }

    #[test]
    fn something_that_is_not_xtcqd_is_a_protocol_error() {
        let (_d, p) = fake(|mut s| {
            let _ = s.write_all(b"\x00\x00\x00\x05hello");
        });
        let e = Conn::open(&p, "t", T).err().expect("not a daemon");
        assert!(matches!(e, Error::Protocol { .. }), "{e:?}");
        let (_d, p) = fake(drop);
        assert!(matches!(Conn::open(&p, "t", T).err(), Some(Error::Protocol { .. })));
    }

    #[test]
    fn replies_are_matched_and_daemon_loss_is_noticed() {
        let (_d, p) = fake(|mut s| {
            frame::write_frame(&mut s, &ok()).unwrap();
            for _ in 0..2 {
                let f: RequestFrame = frame::read_frame(&mut s).unwrap();
                // A stale reply first, then the real one.
                let stale = ServerMessage::Reply { id: f.id + 1000, result: Ok(Response::Detached) };
                frame::write_frame(&mut s, &stale).unwrap();
                let result = match f.request {
                    Request::Ping => Ok(Response::Pong),
                    _ => Err(ErrorReply::new(ErrorCode::QueueExists, "exists")),
                };
                frame::write_frame(&mut s, &ServerMessage::Reply { id: f.id, result }).unwrap();
            }
            let ev = ServerMessage::Event(Event::ShuttingDown { reason: "test over".into() });
            frame::write_frame(&mut s, &ev).unwrap();
        });
        let c = Conn::open(&p, "t", T).unwrap();
        assert_eq!(c.hello().daemon_version, "test");
        assert_eq!(c.request(Request::Ping, None).unwrap(), Response::Pong);
        let q = QueueParams {
            name: "q".into(),
            deques: 1,
            capacity: 2,
            flavor: Flavor::Fifo,
            max_attempts: 0,
            lease_ms: 0,
        };
        let e = c.request(Request::CreateQueue(q), Some("q")).unwrap_err();
        assert_eq!(e.to_string(), "queue already exists: q");
        let deadline = std::time::Instant::now() + T;
        while c.is_connected() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!c.is_connected());
        let e = c.request(Request::Ping, None).unwrap_err();
        assert!(matches!(&e, Error::DaemonLost { reason: Some(r), .. } if r == "test over"), "{e:?}");
        assert!(e.to_string().contains("test over"));
    }

    #[test]
    fn a_silent_daemon_times_out() {
        let (_d, p) = fake(|mut s| {
            frame::write_frame(&mut s, &ok()).unwrap();
            std::thread::sleep(Duration::from_secs(2));
            drop(s);
        });
        let c = Conn::open(&p, "t", Duration::from_millis(200)).unwrap();
        let e = c.request(Request::Ping, None).unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
    }
}
