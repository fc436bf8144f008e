//! A consumer dies while it searches (fail point `search.after_begin`: counted in the queue's
//! `searching` and recorded for its slot, before its first look): recovery takes it off the
//! count, so that pushes wake sleepers again; before recovery they skip the wake, as they do
//! for a live searcher.
//!
//! The dying process is this test binary re-run with `XTCQ_CRASH_ROLE` set. Needs
//! `--features failpoints`.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use xtcq_shm::recovery::forget_searchers;
use xtcq_shm::{Flavor, Owner, QueueSpec, Segment, SegmentConfig, Thief};

const CHILD_SLOT: u32 = 3;

/// The child: a thief that waits on the empty queue, and dies as it becomes a searcher.
#[test]
fn crash_child() {
    let Ok(seg_path) = std::env::var("XTCQ_CRASH_SEGMENT") else { return };
    let seg = Arc::new(Segment::attach(Path::new(&seg_path)).expect("attach"));
    let q = seg.queue_by_name("crash").expect("queue");
    let thief = Thief::new(seg, &q, CHILD_SLOT).expect("thief");
    let _ = thief.steal_wait(Some(Instant::now() + Duration::from_secs(5)));
    panic!("the fail point did not fire");
}

#[test]
fn search_after_begin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("seg");
    let cfg = SegmentConfig::small().with_queues(1, 2).with_deque_capacity(16).with_records(64);
    let seg = Arc::new(Segment::create(&path, &cfg, 0o600).expect("create"));
    let spec = QueueSpec {
        name: "crash".into(),
        flavor: Flavor::Fifo,
        deques: 1,
        capacity: 16,
        max_attempts: 0,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    };
    let q = seg.create_queue(&spec).expect("queue");
    let status = Command::new(std::env::current_exe().expect("exe"))
        .args(["crash_child", "--exact", "--nocapture", "--test-threads", "1"])
        .env("XTCQ_CRASH_SEGMENT", &path)
        .env("XTCQ_FAILPOINTS", "search.after_begin=abort")
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run child");
    assert_eq!(status.signal(), Some(6), "the child should have died at search.after_begin: {status}");
    let w = seg.wait_word(q.index).expect("wait word");
    assert_eq!(w.searching.load(Ordering::SeqCst), 1, "the dead searcher is still counted");

    // A sleeper (counted by hand): while the dead searcher counts, a push skips its wake.
    let waker = seg.waker(q.index).expect("waker");
    let sleep = waker.sleep_begins();
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    let before = w.seq.load(Ordering::SeqCst);
    owner.push(b"one").expect("push");
    assert_eq!(w.seq.load(Ordering::SeqCst), before, "a push skips the wake while a searcher counts");

    // Recovery takes it off and nudges the queue (a wake for the job the push skipped).
    assert_eq!(forget_searchers(&seg, CHILD_SLOT), 1);
    assert_eq!(w.searching.load(Ordering::SeqCst), 0, "off the count");
    let nudged = w.seq.load(Ordering::SeqCst);
    assert_ne!(nudged, before, "recovery woke a sleeper for the skipped job");
    owner.push(b"two").expect("push");
    assert_ne!(w.seq.load(Ordering::SeqCst), nudged, "pushes wake sleepers again");
    waker.sleep_ends(sleep);
    assert_eq!(forget_searchers(&seg, CHILD_SLOT), 0, "forgotten once");
}
