//! What the daemon's scan relies on to skip walking the records:
//! - the activity snapshot changes with every job transition of a process that keeps the
//!   protocol (push, steal, claim, ack, nack) and stays the same while nothing happens;
//! - between walks, the lease watch expires exactly the claims due, follows an extension
//!   and another claim of the same record, and expires an undated claim one lease after the
//!   walk first saw it. Times are given, not waited for.

use std::sync::Arc;

use xtcq_shm::activity::snapshot;
use xtcq_shm::lease_watch::LeaseWatch;
use xtcq_shm::recovery::no_fence;
use xtcq_shm::segment::monotonic_ns;
use xtcq_shm::{Flavor, Injector, Owner, QueueInfo, QueueSpec, Segment, SegmentConfig, State, Thief};

const MS: u64 = 1_000_000;

fn segment(lease_ms: u32) -> (tempfile::TempDir, Arc<Segment>, QueueInfo) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = SegmentConfig::small()
        .with_queues(2, 2)
        .with_deque_capacity(16)
        .with_records(64)
        .with_overflow_capacity(64)
        .with_payload_bytes(16);
    let seg = Arc::new(Segment::create(&dir.path().join("seg"), &cfg, 0o600).expect("create"));
    let spec = QueueSpec {
        name: "q".into(),
        flavor: Flavor::Fifo,
        deques: 1,
        capacity: 16,
        max_attempts: 0,
        lease_ms,
        levels: 1,
        aging: 0,
    };
    let q = seg.create_queue(&spec).expect("queue");
    (dir, seg, q)
}

fn snap(seg: &Segment, slots: &[u32]) -> Vec<u64> {
    let mut v = Vec::new();
    snapshot(seg, slots, &mut v);
    v
}

#[test]
fn the_activity_snapshot_moves_with_every_transition_and_only_then() {
    let (_d, seg, q) = segment(0);
    let slots = [0, 1, 2];
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    let inj = Injector::new(seg.clone(), &q, 2).expect("injector");
    let thief = Thief::new(seg.clone(), &q, 1).expect("thief");
    let mut last = snap(&seg, &slots);
    assert_eq!(last, snap(&seg, &slots), "nothing happened");
    let mut moved = |what: &str| {
        let now = snap(&seg, &slots);
        assert_ne!(now, last, "{what} left the snapshot as it was");
        assert_eq!(now, snap(&seg, &slots), "nothing happened after {what}");
        last = now;
    };
    owner.push(b"a").expect("push");
    moved("an owner's push");
    inj.push(b"b").expect("push");
    moved("an injector's push");
    let a = thief.steal().expect("steal").expect("a job");
    moved("a steal");
    a.nack().expect("nack");
    moved("a nack");
    let b = thief.steal().expect("steal").expect("a job");
    moved("a steal");
    b.ack().expect("ack");
    moved("an ack");
    // A queue created or another slot registered changes what is read.
    let spec = QueueSpec::new("r");
    seg.create_queue(&QueueSpec { deques: 1, capacity: 16, ..spec }).expect("queue");
    moved("a queue created");
    assert_ne!(snap(&seg, &[0, 1, 2, 3]), last, "another slot");
}

#[test]
fn between_walks_the_lease_watch_expires_exactly_what_is_due() {
    const S: u64 = 1_000 * MS;
    // Leases of 60 s, so that the claims made just before `t0` are not due at the walk.
    let (_d, seg, q) = segment(60_000);
    let inj = Injector::new(seg.clone(), &q, 0).expect("injector");
    let thief = Thief::new(seg.clone(), &q, 1).expect("thief");
    for p in [b"a", b"b", b"c"] {
        inj.push(p).expect("push");
    }
    let a = thief.steal().expect("steal").expect("a");
    let b = thief.steal().expect("steal").expect("b");
    let c = thief.steal().expect("steal").expect("c");
    let t0 = monotonic_ns();
    let mut w = LeaseWatch::default();
    assert!(w.walk(&seg, t0, &mut no_fence).is_empty(), "nothing due yet");
    assert_eq!(w.len(), 3, "three claims with a lease");
    // a: extended to 600 s (its word and deadline change, nothing else); b: acked; c: held.
    a.extend_lease(std::time::Duration::from_secs(600)).expect("extend");
    let b_index = b.handle().index;
    b.ack().expect("ack");
    assert!(w.due(&seg, t0 + 30 * S, &mut no_fence).is_empty(), "before any deadline");
    let taken = w.due(&seg, t0 + 60 * S, &mut no_fence);
    assert_eq!(taken.iter().map(|h| h.index).collect::<Vec<_>>(), vec![c.handle().index], "only c's ran out");
    assert!(c.ack().is_err(), "c was taken back");
    assert!(w.due(&seg, t0 + 599 * S, &mut no_fence).is_empty(), "a's extension holds");
    let records = seg.records();
    assert_eq!(records.state(b_index).map(|s| s.load().state()), Some(Some(State::Free)));
    let taken = w.due(&seg, monotonic_ns() + 601 * S, &mut no_fence);
    assert_eq!(taken.iter().map(|h| h.index).collect::<Vec<_>>(), vec![a.handle().index], "a, at last");
    assert!(w.is_empty(), "nothing left to watch");
}

#[test]
fn an_undated_claim_expires_one_lease_after_the_walk_saw_it() {
    let (_d, seg, q) = segment(1000);
    let inj = Injector::new(seg.clone(), &q, 0).expect("injector");
    inj.push(b"j").expect("push");
    // A claimer stopped between its claim CAS and its deadline: the claim as it leaves it.
    let records = seg.records();
    let i = (0..records.len())
        .find(|&i| records.state(i).is_some_and(|s| s.load().state() == Some(State::Queued)))
        .expect("the job");
    let st = records.state(i).expect("state");
    st.claim(st.load().generation(), 5).expect("claim");
    let t0 = 1_000 * MS;
    let mut w = LeaseWatch::default();
    assert!(w.walk(&seg, t0, &mut no_fence).is_empty());
    assert_eq!(w.next_due(), Some(t0 + 1000 * MS), "one lease after it was first seen");
    assert!(w.due(&seg, t0 + 999 * MS, &mut no_fence).is_empty(), "not before");
    // A walk meanwhile keeps when it was first seen.
    assert!(w.walk(&seg, t0 + 500 * MS, &mut no_fence).is_empty());
    let taken = w.due(&seg, t0 + 1000 * MS, &mut no_fence);
    assert_eq!(taken.iter().map(|h| h.index).collect::<Vec<_>>(), vec![i]);
    assert_eq!(st.load().state(), Some(State::Queued), "re-queued");
}
