//! Red-team pass 7: a daemon started with a queue table of a few hundred entries (`--queues`
//! takes up to 4096) and that many queues in it.
//!
//! - Before: the answer to a whole-segment `stats` (and `ls`, which shows the same figures)
//!   outgrew the 64 KiB frame limit at about a hundred queues; the daemon logged "cannot
//!   encode a reply" and dropped the connection, so `xtcq ls`, `xtcq stats` and `top` said
//!   only "lost the connection to xtcqd", and `xtcq create` (which asks for the segment's
//!   limits that way) could not create another queue.
//! - Kept here: `ls` and `stats` list every queue (an answer may be up to 16 MiB, a request
//!   still only 64 KiB), and `create` works whatever the number of queues. An answer over
//!   even that would be replaced by an error that says so and what to ask instead.

use xtcq_testkit::*;

/// Queues enough that one whole-segment stats answer (about 700 bytes a queue) is well over
/// 64 KiB.
const QUEUES: usize = 160;

/// A daemon with room for `QUEUES` queues and `QUEUES` of them created (through the client:
/// the CLI's plain `create` is what is under test).
fn daemon_with_many_queues() -> Daemon {
    let qs = (QUEUES + 8).to_string();
    let d = Daemon::start_with(&["--queues", &qs, "--records", "1024", "--process-slots", "16"]);
    let c = d.client();
    for i in 0..QUEUES {
        let mut p = xtcq_client::QueueParams::new(format!("queue-{i:03}"));
        p.deques = 2;
        p.capacity = 2;
        c.create_queue(&p).expect("create through the client");
    }
    d
}

#[test]
fn create_without_sizes_works_with_many_queues() {
    let d = daemon_with_many_queues();
    let o = d.run(&["create", "one-more"]);
    assert_eq!(code(&o), 0, "create failed: {}\nlog:\n{}", stderr(&o), d.log_text());
    ok(&d.run(&["push", "one-more", "job"]));
    assert_eq!(d.drain("one-more"), ["job"]);
}

/// Answers may be larger than requests (`proto::MAX_REPLY_LEN`, 16 MiB): 160 queues take
/// about 110 KiB, and the whole table's 4096 about 3 MiB.
#[test]
fn ls_and_stats_list_every_queue() {
    let d = daemon_with_many_queues();
    let o = d.run(&["ls"]);
    assert_eq!(code(&o), 0, "ls: {}", stderr(&o));
    assert_eq!(stdout(&o).lines().filter(|l| l.starts_with("queue-")).count(), QUEUES);
    let o = d.run(&["stats"]);
    assert_eq!(code(&o), 0, "stats: {}", stderr(&o));
}
