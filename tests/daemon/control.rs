//! The control channel against the real `xtcqd`: startup refusals, hostile and malformed
//! input, typed errors, authorisation, modes, readiness and clean shutdown. Every test that
//! feeds the daemon bad input ends by checking that it still serves a fresh client.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::time::{Duration, Instant};

use xtcq_client::{Client, Error, Flavor, QueueParams};
use xtcq_proto::frame;
use xtcq_proto::{ErrorCode, Hello, HelloReply, Request, RequestFrame, Response, ServerMessage};
use xtcq_testkit::*;

fn raw(d: &Daemon) -> UnixStream {
    let s = UnixStream::connect(&d.socket).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

fn hello(s: &mut UnixStream, version: u32) -> HelloReply {
    let mut h = Hello::new("raw-test", std::process::id());
    h.protocol_version = version;
    frame::write_frame(s, &h).unwrap();
    frame::read_frame(s).expect("hello reply")
}

fn request(s: &mut UnixStream, id: u64, r: Request) -> ServerMessage {
    frame::write_frame(s, &RequestFrame { id, request: r }).unwrap();
    frame::read_frame(s).expect("reply")
}

/// The daemon closes the connection (after any reply still in flight): reads reach the end
/// of the stream, or a reset, before the read timeout.
fn expect_closed(s: &mut UnixStream) {
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                panic!("the daemon did not close the connection")
            }
            Err(_) => return,
        }
    }
}

fn still_serves(d: &Daemon) {
    let c = d.client();
    c.ping().expect("ping after bad input");
    c.list_queues().expect("list after bad input");
}

fn params(name: &str) -> QueueParams {
    QueueParams {
        name: name.into(),
        deques: 2,
        capacity: 64,
        flavor: Flavor::Lifo,
        max_attempts: 0,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    }
}

#[test]
fn hostile_frames_get_errors_and_the_daemon_keeps_serving() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).flags(["--io-timeout", "1"]).start();

    // Garbage instead of a Hello: "GET " read as a length is ~1.2 GB, over the limit.
    let mut s = raw(&d);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    match frame::read_frame::<_, HelloReply>(&mut s).expect("a refusal") {
        HelloReply::Refused(e) => assert_eq!(e.code, ErrorCode::FrameTooLarge, "{e:?}"),
        other => panic!("{other:?}"),
    }
    expect_closed(&mut s);

    // A well-framed first message that is not a Hello.
    let mut s = raw(&d);
    s.write_all(&[0, 0, 0, 5]).unwrap();
    s.write_all(b"hello").unwrap();
    match frame::read_frame::<_, HelloReply>(&mut s).unwrap() {
        HelloReply::Refused(e) => {
            assert_eq!(e.code, ErrorCode::BadRequest);
            assert!(e.message.contains("Hello"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    expect_closed(&mut s);

    // A zero-length frame.
    let mut s = raw(&d);
    s.write_all(&[0, 0, 0, 0]).unwrap();
    assert!(matches!(frame::read_frame::<_, HelloReply>(&mut s).unwrap(), HelloReply::Refused(_)));

    // A half-written frame, then close.
    let mut s = raw(&d);
    s.write_all(&[0, 0, 0, 100]).unwrap();
    s.write_all(b"{\"protocol").unwrap();
    drop(s);

    // A half-written frame left hanging: the daemon gives up on it after --io-timeout and
    // meanwhile serves others.
    let mut stalled = raw(&d);
    stalled.write_all(&[0, 0, 0, 100, b'{']).unwrap();
    still_serves(&d);
    let t0 = Instant::now();
    expect_closed(&mut stalled);
    assert!(t0.elapsed() < Duration::from_secs(4), "stalled frame held for {:?}", t0.elapsed());

    // After a good Hello: malformed JSON, an unknown request, wrong field types. Each gets a
    // BadRequest reply carrying the request id where it could be read, and the connection
    // stays usable.
    let mut s = raw(&d);
    assert!(matches!(hello(&mut s, xtcq_proto::PROTOCOL_VERSION), HelloReply::Ok(_)));
    s.write_all(&[0, 0, 0, 3]).unwrap();
    s.write_all(b"{{{").unwrap();
    match frame::read_frame::<_, ServerMessage>(&mut s).unwrap() {
        ServerMessage::Reply { id: 0, result: Err(e) } => assert_eq!(e.code, ErrorCode::BadRequest),
        other => panic!("{other:?}"),
    }
    for body in [
        &br#"{"id":7,"request":"SelfDestruct"}"#[..],
        br#"{"id":7,"request":{"CreateQueue":{"name":5}}}"#,
        br#"{"id":7,"request":{"AttachOwner":{"queue":"q","deque":-1}}}"#,
    ] {
        s.write_all(&(body.len() as u32).to_be_bytes()).unwrap();
        s.write_all(body).unwrap();
        match frame::read_frame::<_, ServerMessage>(&mut s).unwrap() {
            ServerMessage::Reply { id: 7, result: Err(e) } => assert_eq!(e.code, ErrorCode::BadRequest),
            other => panic!("{other:?}"),
        }
    }
    // Hostile arguments in well-formed requests.
    for (i, r) in [
        Request::CreateQueue(QueueParams { capacity: 1000, ..params("bad-cap") }),
        Request::CreateQueue(QueueParams { deques: 0, ..params("bad-deques") }),
        Request::CreateQueue(QueueParams { deques: 1 << 30, ..params("huge") }),
        Request::CreateQueue(params(&"x".repeat(65))),
        Request::CreateQueue(params("has space")),
        Request::CreateQueue(params("")),
        Request::AttachOwner { queue: "nope".into(), deque: None },
        Request::Detach { queue: "nope".into(), deque: 3 },
        Request::Stats { queue: Some("\u{0}".into()) },
    ]
    .into_iter()
    .enumerate()
    {
        let id = 100 + i as u64;
        match request(&mut s, id, r.clone()) {
            ServerMessage::Reply { id: rid, result: Err(e) } => {
                assert_eq!(rid, id);
                assert!(matches!(e.code, ErrorCode::BadRequest | ErrorCode::NoSuchQueue), "{r:?}: {e:?}");
            }
            other => panic!("{r:?}: {other:?}"),
        }
    }
    assert!(matches!(
        request(&mut s, 200, Request::Ping),
        ServerMessage::Reply { id: 200, result: Ok(Response::Pong) }
    ));

    // An oversized length after the Hello: an error reply, then the connection is closed
    // (the stream can no longer be re-synchronised).
    s.write_all(&u32::MAX.to_be_bytes()).unwrap();
    match frame::read_frame::<_, ServerMessage>(&mut s).unwrap() {
        ServerMessage::Reply { result: Err(e), .. } => assert_eq!(e.code, ErrorCode::FrameTooLarge),
        other => panic!("{other:?}"),
    }
    expect_closed(&mut s);

    // Random bytes on many connections.
    let mut x = 0x1234_5678_9abc_def1u64;
    for _ in 0..50 {
        let mut s = raw(&d);
        let mut buf = vec![0u8; (x % 200) as usize + 1];
        for b in buf.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let _ = s.write_all(&buf);
    }
    still_serves(&d);
    assert!(d.log_text().contains("xtcqd ready"));
}

#[test]
fn unknown_protocol_version_is_refused_naming_both_versions() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let mut s = raw(&d);
    match hello(&mut s, 999) {
        HelloReply::VersionMismatch { daemon_version, client_version, message } => {
            assert_eq!(daemon_version, xtcq_proto::PROTOCOL_VERSION);
            assert_eq!(client_version, 999);
            assert!(message.contains("999") && message.contains(&xtcq_proto::PROTOCOL_VERSION.to_string()));
        }
        other => panic!("{other:?}"),
    }
    expect_closed(&mut s);
    still_serves(&d);
}

#[test]
fn client_without_a_daemon_names_the_socket_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nobody-home.sock");
    let e = Client::connect(Some(&missing)).expect_err("no daemon");
    assert!(matches!(e, Error::DaemonNotRunning { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("daemon not running at") && msg.contains(&missing.display().to_string()), "{msg}");
    assert!(e.is_unreachable());

    // A stale socket file nobody listens on reads the same.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let e = Client::connect(Some(&stale)).expect_err("stale socket");
    assert!(e.to_string().contains(&stale.display().to_string()), "{e}");
}

#[test]
fn disallowed_uid_is_unauthorized_and_the_daemon_keeps_serving() {
    if !rustix::process::geteuid().is_root() {
        // --allow-uid needs --group, and only root may give the files a group it is not in.
        xtcq_testkit::skipped("needs root to share with a group this user is not in");
        return;
    }
    let d = Daemon::builder()
        .flags(MEDIUM_SEGMENT)
        .flags(["--no-allow-self", "--allow-uid", "12345", "--group", "12345"])
        .start();
    let me = rustix::process::getuid().as_raw();
    for _ in 0..3 {
        let e = d.client_result().expect_err("our uid is not allowed");
        match &e {
            Error::Unauthorized(m) => assert!(m.contains(&format!("uid {me}")) && m.contains("12345"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(e.to_string().starts_with("not authorized"), "{e}");
    }
    assert!(d.log_text().contains("Unauthorized"));
    // Still serving: a raw Hello still gets a (refusing) answer, and the process runs.
    let mut s = raw(&d);
    assert!(matches!(hello(&mut s, xtcq_proto::PROTOCOL_VERSION), HelloReply::Refused(_)));
}

trait ClientResult {
    fn client_result(&self) -> Result<Client, Error>;
}

impl ClientResult for Daemon {
    fn client_result(&self) -> Result<Client, Error> {
        Client::connect(Some(&self.socket))
    }
}

#[test]
fn a_second_daemon_on_the_same_socket_is_refused() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let other_segment = d.dir().join("other-segment");
    let (st, err) = run_daemon_once(&d.socket, &other_segment, &[MEDIUM_SEGMENT, &[]].concat());
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("already serving") && err.contains(&d.socket.display().to_string()), "{err}");
    assert!(!other_segment.exists(), "the refused daemon must not create its segment");
    still_serves(&d);
}

#[test]
fn a_second_daemon_on_the_same_segment_is_refused() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let other_socket = d.dir().join("other.sock");
    let (st, err) = run_daemon_once(&other_socket, &d.segment, &[MEDIUM_SEGMENT, &[]].concat());
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("in use by another live xtcqd") && err.contains(&d.pid().to_string()), "{err}");
    assert!(!other_socket.exists());
    // --recreate does not pull the segment from under the live daemon either.
    let (st, err) = run_daemon_once(&other_socket, &d.segment, &[MEDIUM_SEGMENT, &["--recreate"]].concat());
    assert_eq!(st.code(), Some(1), "{err}");
    still_serves(&d);
}

#[test]
fn something_else_at_the_socket_path_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("xtcqd.sock");
    std::fs::write(&socket, b"precious").unwrap();
    let (st, err) = run_daemon_once(&socket, &dir.path().join("seg"), &[MEDIUM_SEGMENT, &[]].concat());
    assert_eq!(st.code(), Some(1));
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(&socket).unwrap(), b"precious");
}

#[test]
fn queue_errors_are_typed_and_clear() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    let q = c.create_queue(&QueueParams { deques: 1, ..params("jobs") }).unwrap();
    assert_eq!((q.name.as_str(), q.deques, q.capacity), ("jobs", 1, 64));
    assert_eq!(c.list_queues().unwrap(), vec![q.clone()]);

    let e = c.create_queue(&params("jobs")).unwrap_err();
    assert!(matches!(&e, Error::QueueExists(n) if n == "jobs"), "{e:?}");

    for e in [
        c.attach_owner("nope").unwrap_err(),
        c.attach_thief("nope").unwrap_err(),
        c.attach_injector("nope").unwrap_err(),
        c.stats(Some("nope")).unwrap_err(),
    ] {
        assert_eq!(e.to_string(), "no such queue: nope");
    }

    let e = c.create_queue(&QueueParams { capacity: 3, ..params("odd") }).unwrap_err();
    assert!(matches!(&e, Error::BadRequest(m) if m.contains("power of two")), "{e:?}");

    let owner = c.attach_owner("jobs").unwrap();
    assert_eq!(owner.deque(), 0);
    let e = c.attach_owner("jobs").unwrap_err();
    assert!(matches!(e, Error::NoFreeDeque { .. }), "{e:?}");

    let cap = owner.payload_capacity() as usize;
    assert_eq!(cap, 64);
    owner.push(&vec![7u8; cap]).unwrap();
    let e = owner.push(&vec![7u8; cap + 1]).unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("payload too large: {} > {cap} bytes,", cap + 1)), "{msg}");
    assert!(msg.contains("--payload-bytes"), "{msg}");

    // Explicit detach gives the deque back at once (the owner promised to stop using it).
    owner.detach().unwrap();
    let again = c.attach_owner("jobs").unwrap();
    let j = again.pop().unwrap().expect("the job pushed before the detach is still there");
    assert_eq!(j.payload().unwrap(), vec![7u8; cap]);
    j.ack().unwrap();

    let stats = c.stats(Some("jobs")).unwrap();
    assert_eq!(stats.queues.len(), 1);
    assert_eq!(stats.queues[0].deques[0].owner_slot, Some(again.process_slot()));
    assert_eq!(stats.records.free, 16384);
    assert_eq!(stats.processes.len(), 1);
    assert!(stats.processes[0].connected);
    assert_eq!(stats.processes[0].pid, std::process::id());
}

#[test]
fn a_full_queue_is_reported_as_full() {
    // 1 deque of 2 slots and an overflow ring of 16 cells: the 19th push is refused.
    let sizes = [
        "--queues",
        "2",
        "--deques-per-queue",
        "2",
        "--deque-capacity",
        "16",
        "--records",
        "64",
        "--payload-bytes",
        "16",
        "--process-slots",
        "8",
        "--overflow-capacity",
        "16",
    ];
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::builder().at(tmp.path()).flags(sizes).start();
    let c = d.client();
    c.create_queue(&QueueParams { deques: 1, capacity: 2, ..params("small") }).unwrap();
    let owner = c.attach_owner("small").unwrap();
    for i in 0..18 {
        owner.push(format!("{i}").as_bytes()).unwrap();
    }
    let e = owner.push(b"one too many").unwrap_err();
    assert!(matches!(e, Error::QueueFull { .. }), "{e:?}");
    assert!(e.to_string().starts_with("queue full: small"), "{e}");
    // Everything pushed is still there, once.
    let thief = c.attach_thief("small").unwrap();
    let mut got = Vec::new();
    while let Some(j) = thief.steal().unwrap() {
        got.push(String::from_utf8(j.payload().unwrap()).unwrap().parse::<u32>().unwrap());
        j.ack().unwrap();
    }
    got.sort_unstable();
    assert_eq!(got, (0..18).collect::<Vec<_>>());
}

#[test]
fn size_flags_must_match_an_adopted_segment() {
    let mut d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    assert!(d.stop().success());
    let (st, err) = run_daemon_once(&d.socket, &d.segment, &["--records", "1024"]);
    assert_eq!(st.code(), Some(1));
    assert!(err.contains("job_records = 16384") && err.contains("--recreate"), "{err}");
    // An unknown flag is a usage error: exit status 2.
    let (st, err) = run_daemon_once(&d.socket, &d.segment, &["--bogus-flag"]);
    assert_eq!(st.code(), Some(2), "{err}");
    // With --recreate it starts afresh with the new size.
    let mut d2 = Daemon::builder().at(d.dir()).flags(["--records", "1024"]).flags(["--recreate"]).start();
    d2.adopt_dir(&mut d);
    assert_eq!(d2.client().stats(None).unwrap().segment.job_records, 1024);
}

#[test]
fn files_are_never_world_accessible() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&d.socket), 0o600);
    assert_eq!(mode(&d.segment), 0o600);
    drop(d);
    let g = Daemon::builder().flags(MEDIUM_SEGMENT).flags(["--group", "0"]).start();
    assert_eq!(mode(&g.socket), 0o660);
    assert_eq!(mode(&g.segment), 0o660);
    still_serves(&g);
}

#[test]
fn ready_is_notified_to_systemd() {
    let dir = tempfile::tempdir().unwrap();
    let notify = dir.path().join("notify");
    let rx = UnixDatagram::bind(&notify).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let log = dir.path().join("log");
    let mut child = xtcqd()
        .arg("--socket")
        .arg(dir.path().join("s.sock"))
        .arg("--segment")
        .arg(dir.path().join("seg"))
        .args(MEDIUM_SEGMENT)
        .env("NOTIFY_SOCKET", &notify)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 256];
    let n = rx.recv(&mut buf).expect("READY=1 datagram");
    let msg = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(msg.starts_with("READY=1\nMAINPID="), "{msg}");
    assert!(msg.ends_with(&child.id().to_string()), "{msg}");
    // SAFETY: kill(2) on our child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let n = rx.recv(&mut buf).expect("STOPPING=1 datagram");
    assert_eq!(&buf[..n], b"STOPPING=1");
    assert!(wait_timeout(&mut child, Duration::from_secs(10)).unwrap().success());
}

#[test]
fn sigterm_stops_cleanly_removes_the_socket_and_tells_clients() {
    let mut d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    let c = d.client();
    c.create_queue(&params("q")).unwrap();
    let _thief = c.attach_thief("q").unwrap();
    let st = d.stop();
    assert!(st.success(), "exit status {st:?}; log:\n{}", d.log_text());
    assert!(!d.socket.exists(), "socket removed");
    assert!(eventually(Duration::from_secs(3), || (!c.is_connected()).then_some(())).is_some());
    assert_eq!(c.shutdown_notice().as_deref(), Some("SIGTERM"));
    let e = c.ping().unwrap_err();
    assert!(matches!(&e, Error::DaemonLost { .. }) && e.to_string().contains("SIGTERM"), "{e}");
    let log = d.log_text();
    assert!(log.contains("SIGTERM") && log.contains("xtcqd stopped"), "{log}");

    // The next daemon adopts the segment and this (live) process's registration.
    let mut d2 = Daemon::builder().at(d.dir()).flags(MEDIUM_SEGMENT).start();
    d2.adopt_dir(&mut d);
    let c2 = d2.client();
    assert_eq!(c2.list_queues().unwrap()[0].name, "q");
    let s = c2.stats(None).unwrap();
    assert_eq!(s.daemon_epoch, 2);
    assert!(
        s.processes.iter().any(|p| p.pid == std::process::id() && !p.connected),
        "our old registration is kept while we live: {:?}",
        s.processes
    );
    assert!(d2.log_text().contains("adopted a live attached process"));
}

#[test]
fn a_shutdown_request_stops_the_daemon() {
    let mut d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    d.client().shutdown_daemon().unwrap();
    assert!(d.wait_exit(Duration::from_secs(10)).success());
    assert!(!d.socket.exists());
}

#[test]
fn after_kill_9_the_stale_socket_is_replaced_and_the_segment_adopted() {
    let mut d = Daemon::builder().flags(MEDIUM_SEGMENT).start();
    {
        let c = d.client();
        c.create_queue(&params("survivor")).unwrap();
        let inj = c.attach_injector("survivor").unwrap();
        inj.push(b"still here").unwrap();
    }
    d.signal(libc::SIGKILL);
    let _ = d.wait_exit(Duration::from_secs(5));
    assert!(d.socket.exists(), "kill -9 leaves the socket file");
    let mut d2 = Daemon::builder().at(d.dir()).flags(MEDIUM_SEGMENT).start();
    d2.adopt_dir(&mut d);
    assert!(d2.log_text().contains("removed stale socket"));
    let c = d2.client();
    let t = c.attach_thief("survivor").unwrap();
    let j = t.steal().unwrap().expect("the job survived the daemon's death");
    assert_eq!(j.payload().unwrap(), b"still here");
    j.ack().unwrap();
}
