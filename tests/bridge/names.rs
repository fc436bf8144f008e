//! `xtcq-bridge` refuses a stream or consumer name JetStream would not take, before it
//! connects: a create with one only timed out ("timed out", after 10 s; red team 7).

use std::process::Command;

use xtcq_testkit::*;

#[test]
fn a_stream_or_consumer_name_jetstream_refuses_is_refused_at_once() {
    for args in [
        &["in", "q", "--stream", "S", "--consumer", "a.b*>"][..],
        &["in", "q", "--stream", "S", "--consumer", "has space"][..],
        &["in", "q", "--stream", "S", "--consumer", "c", "--dead-stream", "D.x"][..],
        &["out", "q", "--stream", "a/b"][..],
        &["out", "q", "--stream", ""][..],
    ] {
        // A NATS address nobody listens at: the refusal must come before any connect.
        let o = run_bounded(
            Command::new(xtcq_testkit::exe::bridge_exe()).args(args).args(["--nats", "nats://127.0.0.1:1"]),
            None,
        );
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("JetStream does not take") || stderr(&o).contains("empty name"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
}
