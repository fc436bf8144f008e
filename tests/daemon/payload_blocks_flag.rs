//! Red team 6: `xtcqd --payload-blocks` repeated, split, reordered and from a config file,
//! against a segment that exists (a restart), with the real daemon.
//!
//! - The same classes given in another order, split over flags or over a file's list, with
//!   empty items, are the same sizes: the restart adopts the segment.
//! - A class left out is a different size: refused, naming the class and both counts.
//! - A size in two lists is refused even when both say 0; a count that would make the segment
//!   too large is refused with the segment's size, before anything is created.

use xtcq_testkit::{run_daemon_once, Daemon};

const SIZES: &[&str] = &[
    "--queues",
    "2",
    "--deques-per-queue",
    "2",
    "--deque-capacity",
    "64",
    "--records",
    "256",
    "--payload-bytes",
    "4096",
    "--process-slots",
    "8",
    "--overflow-capacity",
    "64",
];

fn with(blocks: &[&str]) -> Vec<String> {
    SIZES.iter().chain(blocks).map(|s| s.to_string()).collect()
}

#[test]
fn the_same_classes_in_another_order_or_split_adopt_the_segment() {
    let mut daemon = Daemon::builder().flags(with(&["--payload-blocks", "128=4,4KiB=2"])).start();
    let file = daemon.dir().join("xtcqd.toml");
    std::fs::write(&file, "payload-blocks = [\"4K=2\", \"\", \"128=4\"]\n").expect("config file");
    let file = file.to_str().expect("utf-8 path").to_string();
    let variants: [&[&str]; 4] = [
        &["--payload-blocks", "4KiB=2", "--payload-blocks", "128=4"],
        &["--payload-blocks", " 4096 = 2 ", "--payload-blocks", "", "--payload-blocks", ",128=4,"],
        &["--config", &file],
        // The command line's list replaces the file's: the same classes again.
        &["--config", &file, "--payload-blocks=128=4", "--payload-blocks", "4K=2"],
    ];
    for v in variants {
        daemon.kill();
        daemon.restart_with(&with(v), |_| {});
        let out = daemon.run(&["stats"]);
        assert!(out.status.success(), "{v:?}: stats failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    daemon.kill();
    let (status, stderr) = run_daemon_once(
        &daemon.socket,
        &daemon.segment,
        &with(&["--payload-blocks", "4K=2"]).iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!(!status.success(), "a class left out was adopted: {stderr}");
    assert!(stderr.contains("payload_blocks[128] = 4, but 0 was asked for"), "{stderr}");
}

#[test]
fn a_size_twice_and_a_segment_too_large_are_refused_before_creating_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (socket, segment) = (dir.path().join("s.sock"), dir.path().join("segment"));
    let run = |blocks: &[&str]| {
        let flags = with(blocks);
        run_daemon_once(&socket, &segment, &flags.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (status, stderr) = run(&["--payload-blocks", "128=0", "--payload-blocks", "128=0"]);
    assert!(!status.success() && stderr.contains("128-byte blocks are given twice"), "{stderr}");
    let (status, stderr) = run(&["--payload-blocks", "4K=2", "--payload-blocks", "16MiB=1073741824"]);
    assert!(!status.success() && stderr.contains("larger than a segment may be"), "{stderr}");
    assert!(!segment.exists(), "a refused start left a segment behind");
}
