//! The connection against fake daemons: version mismatches, something that is not xtcqd,
//! replies matched to requests, daemon loss, reconnects with and without `Resume`, timeouts.

use super::*;
use std::io::Write;
use std::os::unix::net::UnixListener;
use std::sync::mpsc;
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
        segment_digest: 0,
        wake_dir: None,
    })
}

const T: Duration = Duration::from_secs(5);

#[test]
fn a_version_mismatch_names_both_versions_and_the_socket() {
    let (_d, p) = fake(|mut s| {
        let r = HelloReply::VersionMismatch { daemon_version: 7, client_version: 1, message: String::new() };
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
    // One that closes without a word may be a daemon stopping (a restart): "lost", which
    // callers retry, saying when it happened.
    let (_d, p) = fake(drop);
    let e = Conn::open(&p, "t", T).err().expect("closed");
    assert!(matches!(&e, Error::DaemonLost { reason: Some(r), .. } if r.contains("handshake")), "{e:?}");
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
        levels: 1,
        aging: 0,
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

/// A fake daemon for two connections in turn: the first attaches us as a thief in slot 3
/// (epoch 7) and closes, as a daemon killed after it; the second answers our first
/// request with `resume_reply` and every later one with Pong. Every request it reads is
/// sent to the returned channel.
fn restarting_fake(
    resume_reply: Result<Response, ErrorReply>,
) -> (tempfile::TempDir, PathBuf, mpsc::Receiver<Request>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake.sock");
    let l = UnixListener::bind(&path).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let _: Hello = frame::read_frame(&mut s).unwrap();
        frame::write_frame(&mut s, &ok()).unwrap();
        let f: RequestFrame = frame::read_frame(&mut s).unwrap();
        let _ = tx.send(f.request);
        let att = xtcq_proto::Attachment {
            process_slot: 3,
            slot_epoch: 7,
            segment_path: "/nonexistent".into(),
            queue: xtcq_proto::QueueInfo {
                index: 0,
                name: "q".into(),
                flavor: Flavor::Lifo,
                deques: 1,
                capacity: 2,
                max_attempts: 0,
                lease_ms: 0,
                levels: 1,
                aging: 0,
                retry_backoff: None,
                paused: false,
            },
        };
        let r = ServerMessage::Reply { id: f.id, result: Ok(Response::ThiefAttached(att)) };
        frame::write_frame(&mut s, &r).unwrap();
        drop(s);
        let (mut s, _) = l.accept().unwrap();
        let _: Hello = frame::read_frame(&mut s).unwrap();
        frame::write_frame(&mut s, &ok()).unwrap();
        let mut reply = Some(resume_reply);
        while let Ok(f) = frame::read_frame::<_, RequestFrame>(&mut s) {
            let _ = tx.send(f.request);
            let result = reply.take().unwrap_or(Ok(Response::Pong));
            frame::write_frame(&mut s, &ServerMessage::Reply { id: f.id, result }).unwrap();
        }
    });
    (dir, path, rx)
}

/// Attaches over the first fake connection and waits until its loss is noticed.
fn attached_then_lost(p: &Path) -> Conn {
    let c = Conn::open(p, "t", T).unwrap();
    c.request(Request::AttachThief { queue: "q".into() }, Some("q")).unwrap();
    assert_eq!(c.process_slot(), Some(3));
    let deadline = std::time::Instant::now() + T;
    while c.is_connected() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!c.is_connected());
    c
}

const RESUME: Request = Request::Resume { slot: 3, slot_epoch: 7 };

#[test]
fn a_reconnect_asks_for_the_slot_it_held_first() {
    let (_d, p, seen) = restarting_fake(Ok(Response::Resumed { process_slot: 3, slot_epoch: 7 }));
    let c = attached_then_lost(&p);
    assert_eq!(c.request(Request::Ping, None).unwrap(), Response::Pong);
    let seen: Vec<Request> = seen.try_iter().collect();
    assert_eq!(seen, vec![Request::AttachThief { queue: "q".into() }, RESUME, Request::Ping]);
    assert_eq!((c.reconnects(), c.process_slot()), (1, Some(3)));
}

#[test]
fn a_daemon_without_resume_is_used_as_before() {
    let old = ErrorReply::new(ErrorCode::BadRequest, "unknown variant `Resume`, expected one of `Ping`");
    let (_d, p, seen) = restarting_fake(Err(old));
    let c = attached_then_lost(&p);
    assert_eq!(c.request(Request::Ping, None).unwrap(), Response::Pong);
    assert_eq!(seen.try_iter().nth(1), Some(RESUME));
    assert_eq!(c.reconnects(), 1);
}

#[test]
fn a_refused_resume_is_reported_once_and_the_link_is_kept() {
    let (_d, p, seen) =
        restarting_fake(Err(ErrorReply::new(ErrorCode::SlotNotHeld, "it is registered to another process")));
    let c = attached_then_lost(&p);
    let e = c.request(Request::Ping, None).unwrap_err();
    assert!(matches!(e, Error::SlotNotResumed { slot: 3, .. }), "{e:?}");
    assert_eq!(e.code(), Some(ErrorCode::SlotNotHeld));
    let m = e.to_string();
    assert!(
        m.contains("slot 3") && m.contains("registered to another process") && m.contains("attach again"),
        "{m}"
    );
    // Not reported again: the link is up and holds no slot; no second Resume is sent.
    assert_eq!(c.request(Request::Ping, None).unwrap(), Response::Pong);
    assert_eq!(c.process_slot(), None);
    let seen: Vec<Request> = seen.try_iter().collect();
    assert_eq!(seen, vec![Request::AttachThief { queue: "q".into() }, RESUME, Request::Ping]);
    assert_eq!(c.reconnects(), 1);
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
