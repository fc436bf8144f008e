//! `--idle-timeout`: a connection that said Hello but holds no process slot is closed once
//! it has been silent that long (so idle connections cannot hold every connection the daemon
//! allows); one that holds a slot is not (closing it would take nothing back, but its
//! process's reconnect would cost a Resume for nothing).

mod common;

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::*;
use xtcq_proto::{frame, Flavor, Hello, HelloReply, QueueParams};

#[test]
fn a_connection_that_holds_nothing_is_closed_when_idle_one_with_a_slot_is_not() {
    let d = Daemon::start(&["--idle-timeout", "1"]);
    let c = d.client();
    c.create_queue(&QueueParams {
        name: "q".into(),
        deques: 1,
        capacity: 64,
        flavor: Flavor::Fifo,
        max_attempts: 0,
        lease_ms: 0,
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
