//! `--idle-timeout`: a connection that said Hello but holds no process slot is closed once
//! it has been silent that long (so idle connections cannot hold every connection the daemon
//! allows); one that holds a slot is not (closing it would take nothing back, but its
//! process's reconnect would cost a Resume for nothing).

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use xtcq_proto::{frame, Flavor, Hello, HelloReply, QueueParams, Request, RequestFrame, ServerMessage};
use xtcq_testkit::*;

#[test]
fn a_connection_that_holds_nothing_is_closed_when_idle_one_with_a_slot_is_not() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).flags(["--idle-timeout", "1"]).start();
    let c = d.client();
    c.create_queue(&QueueParams {
        name: "q".into(),
        deques: 1,
        capacity: 64,
        flavor: Flavor::Fifo,
        max_attempts: 0,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    })
    .expect("create");
    let thief = c.attach_thief("q").expect("thief");
    // A library client that holds nothing: closed too, and it reconnects by itself.
    let quiet = d.client();

    let mut s = UnixStream::connect(&d.socket).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    frame::write_frame(&mut s, &Hello::new("idle", std::process::id())).expect("hello");
    assert!(matches!(frame::read_frame::<_, HelloReply>(&mut s).expect("reply"), HelloReply::Ok(_)));
    // Silent from now on: the daemon closes it (well within the read timeout).
    let mut buf = [0u8; 16];
    let n = s.read(&mut buf).expect("the daemon closes the idle connection, not the read timeout");
    assert_eq!(n, 0, "end of stream");
    assert!(d.log_text().contains("was idle for 1 s (--idle-timeout)"), "{}", d.log_text());

    // The thief's connection, silent as long, holds a slot: still open.
    let st = c.stats(None).expect("stats");
    let me = st.processes.iter().find(|p| p.slot == thief.process_slot()).expect("the thief's slot");
    assert!(me.connected, "the connection of a process holding a slot was closed: {me:?}");
    // `quiet` was silent longer than the raw connection, so it was closed first.
    quiet.ping().expect("an idle-closed client reconnects on its next request");
}

/// A process that attached and closed its connection lives on holding its slot (the daemon
/// waits for it to exit); it holds no connection: with `--max-connections 1`, the next
/// client gets in.
#[test]
fn a_process_that_lives_on_without_its_connection_holds_no_connection() {
    let d = Daemon::builder().flags(MEDIUM_SEGMENT).flags(["--max-connections", "1"]).start();
    let mut s = connect_until_admitted(&d);
    let create = Request::CreateQueue(QueueParams::new("q"));
    for (id, request) in [(1, create), (2, Request::AttachThief { queue: "q".into() })] {
        frame::write_frame(&mut s, &RequestFrame { id, request }).expect("write");
        match frame::read_frame::<_, ServerMessage>(&mut s).expect("reply") {
            ServerMessage::Reply { result: Ok(_), .. } => {}
            other => panic!("{other:?}"),
        }
    }
    drop(s); // this process, attached, lives on
    let mut again = connect_until_admitted(&d);
    frame::write_frame(&mut again, &RequestFrame { id: 3, request: Request::Stats { queue: None } })
        .expect("write");
    let st = match frame::read_frame::<_, ServerMessage>(&mut again).expect("reply") {
        ServerMessage::Reply { result: Ok(xtcq_proto::Response::Stats(st)), .. } => st,
        other => panic!("{other:?}"),
    };
    assert!(st.processes.iter().any(|p| p.pid == std::process::id() && !p.connected), "{:?}", st.processes);
}

/// A raw connection past its Hello, trying again (bounded) while the one connection allowed
/// is still taken by one that is closing.
fn connect_until_admitted(d: &Daemon) -> UnixStream {
    for _ in 0..500 {
        let mut s = UnixStream::connect(&d.socket).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        frame::write_frame(&mut s, &Hello::new("raw", std::process::id())).expect("hello");
        match frame::read_frame::<_, HelloReply>(&mut s).expect("hello reply") {
            HelloReply::Ok(_) => return s,
            HelloReply::Refused(e) => assert_eq!(e.code, xtcq_proto::ErrorCode::LimitReached, "{e:?}"),
            other => panic!("{other:?}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("never admitted; log:\n{}", d.log_text());
}
