//! Red team 6: the overflow ring's `head <= tail <= head + capacity` (what `check` verifies)
//! after a process is killed inside it, with real processes and the daemon's recovery steps.
//!
//! - A consumer killed between taking a cell of a full ring and moving `head` (fail point
//!   `overflow.pop.after_cell`) leaves the cell free for the next lap; recovery re-indexes
//!   the job it took onto that same ring. `check` must find the ring consistent then, before
//!   any other pop, and every job must still come exactly once.
//!
//! The dying process is this test binary re-run with `XTCQ_RT6_ROLE` set. Needs
//! `--features failpoints`.

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use xtcq_shm::check::check_segment;
use xtcq_shm::recovery::{recover_holder, reindex_orphans, release_deque_leases};
use xtcq_shm::{Flavor, Owner, QueueSpec, Segment, SegmentConfig, Thief};

const CHILD_SLOT: u32 = 3;
const RING: u32 = 8;
const DEQUE: u32 = 2;

fn config() -> SegmentConfig {
    SegmentConfig::small()
        .with_queues(1, 1)
        .with_deque_capacity(DEQUE)
        .with_records(64)
        .with_overflow_capacity(RING)
}

fn id_of(p: &[u8]) -> u64 {
    u64::from_le_bytes(p[..8].try_into().expect("8-byte id"))
}

/// The child: pops the ring once as a thief (and dies at the fail point the parent set).
#[test]
fn crash_overflow_child() {
    let Ok(role) = std::env::var("XTCQ_RT6_ROLE") else { return };
    let seg = Arc::new(
        Segment::attach(Path::new(&std::env::var("XTCQ_RT6_SEGMENT").expect("seg"))).expect("attach"),
    );
    let q = seg.queue_by_name("rt6").expect("queue");
    assert_eq!(role, "pop_ring");
    let thief = Thief::new(seg.clone(), &q, CHILD_SLOT).expect("thief");
    let _ = thief.steal_overflow();
    // Not killed at the fail point: the parent sees exit status 3.
    std::process::exit(3);
}

#[test]
fn a_consumer_killed_in_a_full_ring_then_recovery_leaves_the_ring_consistent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("seg");
    let seg = Arc::new(Segment::create(&path, &config(), 0o600).expect("create"));
    let spec = QueueSpec {
        name: "rt6".into(),
        flavor: Flavor::Fifo,
        deques: 1,
        capacity: DEQUE,
        max_attempts: 0,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    };
    let q = seg.create_queue(&spec).expect("queue");
    let jobs = u64::from(DEQUE + RING);
    {
        let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
        for id in 0..jobs {
            owner.push(&id.to_le_bytes()).expect("push");
        }
    }
    let ring = seg.overflow(q.index).expect("ring");
    assert_eq!(ring.positions(), (0, u64::from(RING)), "the ring should be full");

    let status = Command::new(std::env::current_exe().expect("exe"))
        .args(["crash_overflow_child", "--exact", "--nocapture", "--test-threads", "1"])
        .env("XTCQ_RT6_ROLE", "pop_ring")
        .env("XTCQ_RT6_SEGMENT", &path)
        .env("XTCQ_FAILPOINTS", "overflow.pop.after_cell=abort@1")
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run child");
    assert_eq!(status.signal(), Some(6), "the child should have died at the fail point: {status}");

    // What the daemon does on the child's death.
    recover_holder(&seg, CHILD_SLOT);
    release_deque_leases(&seg, CHILD_SLOT);
    let orphans = reindex_orphans(&seg);
    assert_eq!(orphans.len(), 1, "the popped job is an orphan: {orphans:?}");

    let (head, tail) = ring.positions();
    let report = check_segment(&seg, true);
    assert!(
        report.is_consistent(),
        "check after recovery (head {head}, tail {tail}, capacity {RING}): {:?}",
        report.problems
    );

    let thief = Thief::new(seg.clone(), &q, 1).expect("thief");
    let mut got = BTreeSet::new();
    while let Some(j) = thief.steal().expect("steal") {
        let id = id_of(&j.payload().expect("payload"));
        j.ack().expect("ack");
        assert!(got.insert(id), "job {id} came twice");
    }
    assert_eq!(got, (0..jobs).collect::<BTreeSet<_>>(), "every job once");
    let report = check_segment(&seg, true);
    assert!(report.is_consistent(), "check after the drain: {:?}", report.problems);
}
