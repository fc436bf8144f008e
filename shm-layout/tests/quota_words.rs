//! The quota words of a queue (`QueueLimits`, layout version 5) as pushes, acks and the
//! daemon's counting see them: a quota refuses pushes past it with `QuotaFull` and nothing is
//! allocated, with no scan in between; garbage in the words (which any attached process can write) refuses or allows
//! pushes to that queue only, and never panics or hangs; a new create clears them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use xtcq_shm::segment::QueueQuota;
use xtcq_shm::{Injector, PushError, QueueSpec, Segment, SegmentConfig, Thief};

fn seg(dir: &tempfile::TempDir) -> Arc<Segment> {
    let c = SegmentConfig::small()
        .with_queues(2, 16)
        .with_deque_capacity(1024)
        .with_records(64)
        .with_overflow_capacity(65536)
        .with_payload_bytes(16);
    Arc::new(Segment::create(&dir.path().join("seg"), &c, 0o600).unwrap())
}

#[test]
fn a_quota_refuses_pushes_past_it_and_counts_are_the_scan_s() {
    let dir = tempfile::tempdir().unwrap();
    let s = seg(&dir);
    let spec = QueueSpec { capacity: 16, ..QueueSpec::new("q") };
    let q = s.create_queue_limited(&spec, QueueQuota { max_records: 5, max_dead: 2 }).unwrap();
    let other = s.create_queue(&QueueSpec { capacity: 16, ..QueueSpec::new("o") }).unwrap();
    let inj = Injector::new(s.clone(), &q, 0).unwrap();
    for i in 0..5u8 {
        inj.push(&[i]).unwrap();
    }
    // The pushes counted themselves: no scan has run.
    assert_eq!(s.held(q.index), 5);
    let counts = s.count_queue_records();
    assert_eq!(counts[q.index as usize].used, 5);
    s.store_queue_counts(q.index, counts[q.index as usize].used, 0, 0);
    let free_before = (0..64)
        .filter(|&i| s.records().state(i).unwrap().load().state() == Some(xtcq_shm::State::Free))
        .count();
    assert!(matches!(inj.push(b"x"), Err(PushError::QuotaFull { used: 5, max: 5 })));
    let free_after = (0..64)
        .filter(|&i| s.records().state(i).unwrap().load().state() == Some(xtcq_shm::State::Free))
        .count();
    assert_eq!(free_before, free_after, "a refused push took a record");
    Injector::new(s.clone(), &other, 0).unwrap().push(b"other").unwrap();
    let st = s.quota_state(q.index);
    assert_eq!((st.quota.max_records, st.quota.max_dead, st.records_used), (5, 2, 5));

    // Garbage in every word: compared, never trusted as an index.
    let l = s.queue_limits(q.index).unwrap();
    l.held.store(u64::from(u32::MAX), Ordering::Relaxed);
    l.records_used.store(u32::MAX, Ordering::Relaxed);
    l.max_records.store(u32::MAX, Ordering::Relaxed);
    assert!(matches!(inj.push(b"x"), Err(PushError::QuotaFull { .. })));
    // A count below the truth admits pushes to this queue only, up to the quota.
    l.max_records.store(5, Ordering::Relaxed);
    l.held.store(4, Ordering::Relaxed);
    inj.push(b"z").unwrap();
    assert!(matches!(inj.push(b"x"), Err(PushError::QuotaFull { used: 5, max: 5 })));
    l.max_records.store(0, Ordering::Relaxed);
    inj.push(b"y").unwrap();
    let t = Thief::new(s.clone(), &q, 1).unwrap();
    let mut n = 0;
    while let Some(j) = t.steal().unwrap() {
        j.ack().unwrap();
        n += 1;
    }
    assert_eq!(n, 7);

    // A create anew clears the last queue's counts and sets its own limits.
    s.delete_queue_at(q.index, true).unwrap();
    let again =
        s.create_queue_at_limited(q.index, &spec, QueueQuota { max_records: 7, max_dead: 0 }).unwrap();
    let st = s.quota_state(again.index);
    assert_eq!((st.quota.max_records, st.quota.max_dead, st.records_used, st.dead_dropped), (7, 0, 0, 0));
}
