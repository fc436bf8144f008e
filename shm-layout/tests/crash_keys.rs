//! A pusher with a key dies at each fail point of the key protocol (`key.locked`: holding its
//! home's lock; `key.writing`: an entry claimed and half written; `key.after_bind`: the key
//! bound to its `Filling` record); recovery of its process slot (what the daemon runs when a
//! pidfd says it exited) leaves no lock and no half-written entry of it, the key it died on
//! is free again, and every key whose job it pushed is still held by that job.
//!
//! The dying process is this test binary re-run with `XTCQ_CRASH_ROLE` set and
//! `XTCQ_FAILPOINTS=<point>=abort@N`; it logs `P key` after each push returned. Needs
//! `--features failpoints`.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use xtcq_shm::check::check_segment;
use xtcq_shm::keys::{Key, KeyError};
use xtcq_shm::recovery::recover_holder;
use xtcq_shm::{Injector, PushError, QueueSpec, Segment, SegmentConfig, Thief};

const CHILD_SLOT: u32 = 3;
const KEYS: usize = 10;

fn key(i: usize) -> Key {
    Key::new(format!("k{i}").as_bytes()).expect("key")
}

#[test]
fn crash_child() {
    let Ok(_role) = std::env::var("XTCQ_CRASH_ROLE") else { return };
    let seg = Arc::new(
        Segment::attach(Path::new(&std::env::var("XTCQ_CRASH_SEGMENT").expect("seg"))).expect("attach"),
    );
    let mut log = std::fs::File::create(std::env::var("XTCQ_CRASH_LOG").expect("log")).expect("log file");
    let q = seg.queue_by_name("keys").expect("queue");
    let inj = Injector::new(seg.clone(), &q, CHILD_SLOT).expect("injector");
    for i in 0..KEYS {
        inj.push_with_key(b"job", &key(i), None).expect("push");
        // Unbuffered: the process may die right after.
        log.write_all(format!("P {i}\n").as_bytes()).expect("log");
    }
}

fn crash_at(point: &str, nth: u32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("seg");
    let config = SegmentConfig::small().with_queues(1, 1).with_records(64).with_keys(64);
    let seg = Arc::new(Segment::create(&path, &config, 0o600).expect("create"));
    let q = seg.create_queue(&QueueSpec::new("keys")).expect("queue");
    let log = dir.path().join("child.log");
    let status = Command::new(std::env::current_exe().expect("exe"))
        .args(["crash_child", "--exact", "--nocapture", "--test-threads", "1"])
        .env("XTCQ_CRASH_ROLE", "keyed")
        .env("XTCQ_CRASH_SEGMENT", &path)
        .env("XTCQ_CRASH_LOG", &log)
        .env("XTCQ_FAILPOINTS", format!("{point}=abort@{nth}"))
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run child");
    assert_eq!(status.signal(), Some(6), "the child should have died at {point}: {status}");
    let pushed: Vec<usize> = std::fs::read_to_string(&log)
        .expect("child log")
        .lines()
        .map(|l| l.trim_start_matches("P ").parse().expect("a key number"))
        .collect();

    let rec = recover_holder(&seg, CHILD_SLOT);
    let table = seg.key_table();
    assert_eq!(table.release_slot(CHILD_SLOT), 0, "{point}: recovery left the dead slot's locks or entries");
    let report = check_segment(&seg, true);
    assert!(report.is_consistent(), "{point}: {:?} (recovery {rec:?})", report.problems);

    // The parent (another slot) pushes every key: those the child pushed are held by its
    // jobs, the one it died on and the rest are free.
    let inj = Injector::new(seg.clone(), &q, 1).expect("injector");
    for i in 0..KEYS {
        let r = inj.push_with_key(b"parent", &key(i), None);
        if pushed.contains(&i) {
            assert!(
                matches!(r, Err(PushError::Key(KeyError::Duplicate { .. }))),
                "{point}: key {i}, pushed by the child, is not held: {r:?}"
            );
        } else {
            assert!(r.is_ok(), "{point}: key {i} not free after the child died on it: {r:?}");
        }
    }
    let thief = Thief::new(seg.clone(), &q, 2).expect("thief");
    let mut n = 0;
    while let Some(j) = thief.steal().expect("steal") {
        j.ack().expect("ack");
        n += 1;
    }
    assert_eq!(n, KEYS, "{point}: each key's job once, the child's or the parent's");
}

#[test]
fn a_pusher_killed_holding_a_keys_lock() {
    crash_at("key.locked", 4);
}

#[test]
fn a_pusher_killed_writing_a_key_entry() {
    crash_at("key.writing", 4);
}

#[test]
fn a_pusher_killed_after_binding_its_key() {
    crash_at("key.after_bind", 4);
}
