//! Red-team pass 7: a daemon started with a queue table of a few hundred entries (`--queues`
//! takes up to 4096) and that many queues in it.
//!
//! - Before: the answer to a whole-segment `stats` (and `ls`, which shows the same figures)
//!   outgrew the 64 KiB frame limit at about a hundred queues; the daemon logged "cannot
//!   encode a reply" and dropped the connection, so `xtcq ls`, `xtcq stats` and `top` said
//!   only "lost the connection to xtcqd", and `xtcq create` (which asks for the segment's
//!   limits that way) could not create another queue.
//! - Kept here: a reply the daemon cannot send is answered with an error that says so and
//!   what to ask instead, on a connection that stays usable; `create` works whatever the
//!   number of queues.

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

#[test]
fn an_answer_too_large_says_so_and_the_connection_goes_on() {
    let d = daemon_with_many_queues();
    let c = d.client();
    let e = c.stats(None).expect_err("a whole-segment answer of this size is over the frame limit");
    let msg = e.to_string();
    assert!(
        msg.contains("frame limit") && msg.contains("one queue"),
        "the error must say the answer is too large and what to ask instead: {msg}"
    );
    // The same connection still answers.
    let one = c.stats(Some("queue-007")).expect("stats of one queue on the same connection");
    assert_eq!(one.queues.len(), 1);
    let o = d.run(&["stats", "queue-007"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
#[ignore = "red-team break: `xtcq ls` / `xtcq stats` / `top` cannot list a segment of ~100+ \
            queues: Stats and ListQueues answers are not paginated and outgrow the 64 KiB \
            frame (needs a paged answer or a larger daemon-to-client frame limit; a protocol \
            decision)"]
fn ls_and_stats_list_every_queue() {
    let d = daemon_with_many_queues();
    let o = d.run(&["ls"]);
    assert_eq!(code(&o), 0, "ls: {}", stderr(&o));
    assert_eq!(stdout(&o).lines().filter(|l| l.starts_with("queue-")).count(), QUEUES);
    let o = d.run(&["stats"]);
    assert_eq!(code(&o), 0, "stats: {}", stderr(&o));
}
