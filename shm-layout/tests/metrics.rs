//! The metrics region: totals counted by the job path, summed across slots, reset by a
//! delete, and garbage in the region read without a panic.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use xtcq_shm::metrics::Counter;
use xtcq_shm::{ClaimedJob, Owner, QueueSpec, Segment, SegmentConfig, Thief};

fn segment() -> (tempfile::TempDir, Arc<Segment>) {
    let dir = tempfile::tempdir().unwrap();
    let config = SegmentConfig::small()
        .with_deque_capacity(1024)
        .with_records(64)
        .with_overflow_capacity(65536)
        .with_payload_bytes(448)
        .with_process_slots(4);
    let seg = Arc::new(Segment::create(&dir.path().join("segment"), &config, 0o600).unwrap());
    (dir, seg)
}

#[test]
fn the_job_path_counts_per_queue_across_slots() {
    let (_dir, seg) = segment();
    let spec = QueueSpec { max_attempts: 2, ..QueueSpec::new("jobs") };
    let q = seg.create_queue(&spec).unwrap();
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    for i in 0..5u8 {
        owner.push(&[i]).unwrap();
    }
    let thief = Thief::new(seg.clone(), &q, 1).unwrap();
    thief.steal().unwrap().unwrap().ack().unwrap();
    thief.steal().unwrap().unwrap().nack().unwrap();
    thief.steal().unwrap().unwrap().fail("boom").unwrap();
    owner.pop().unwrap().unwrap().ack().unwrap();
    let t = seg.queue_totals(q.index);
    assert_eq!(t.get(Counter::Pushed), 5);
    assert_eq!(t.get(Counter::Claimed), 4);
    assert_eq!(t.get(Counter::Acked), 2);
    assert_eq!(t.get(Counter::Nacked), 1);
    assert_eq!(t.get(Counter::Failed), 1);
    assert_eq!(seg.queue_totals(1 - q.index), Default::default());
}

#[test]
fn a_delete_resets_the_totals_and_a_new_queue_starts_from_zero() {
    let (_dir, seg) = segment();
    let q = seg.create_queue(&QueueSpec::new("jobs")).unwrap();
    let owner = Owner::new(seg.clone(), &q, 0, 2).unwrap();
    owner.push(b"x").unwrap();
    owner.pop().unwrap().unwrap().ack().unwrap();
    drop(owner);
    assert_eq!(seg.queue_totals(q.index).get(Counter::Acked), 1);
    seg.delete_queue_at(q.index, false).unwrap();
    // Twice, as a daemon redoing an interrupted delete would.
    seg.reset_queue_metrics(q.index);
    let q2 = seg.create_queue(&QueueSpec::new("again")).unwrap();
    assert_eq!(seg.queue_totals(q2.index), Default::default());
    let owner = Owner::new(seg.clone(), &q2, 0, 2).unwrap();
    owner.push(b"y").unwrap();
    assert_eq!(seg.queue_totals(q2.index).get(Counter::Pushed), 1);
}

#[test]
fn garbage_in_the_region_reads_without_a_panic() {
    let (_dir, seg) = segment();
    let q = seg.create_queue(&QueueSpec::new("jobs")).unwrap();
    for b in seg.metrics_blocks(q.index).unwrap() {
        for c in &b.counters {
            c.store(u64::MAX - 3, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let t = seg.queue_totals(q.index);
    // Saturated sums minus a saturated baseline: some number, no overflow panic.
    let _ = t.get(Counter::Pushed);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    // The hot path's add wraps on garbage; it must not panic either.
    for _ in 0..8 {
        owner.push(b"z").unwrap();
        owner.pop().unwrap().unwrap().ack().unwrap();
    }
    let _ = seg.queue_totals(q.index);
    seg.reset_queue_metrics(q.index);
}

#[test]
fn recovery_and_lease_expiry_count_in_the_daemon_block() {
    let (_dir, seg) = segment();
    let spec = QueueSpec { max_attempts: 2, ..QueueSpec::new("jobs") };
    let q = seg.create_queue(&spec).unwrap();
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(b"a").unwrap();
    let thief = Thief::new(seg.clone(), &q, 1).unwrap();
    std::mem::forget(thief.steal().unwrap().unwrap());
    let r = xtcq_shm::recovery::recover_holder(&seg, 1);
    assert_eq!(r.requeued.len(), 1);
    let t = seg.queue_totals(q.index);
    assert_eq!((t.get(Counter::Recovered), t.get(Counter::Dead)), (1, 0));
    // Second attempt: claimed again, its lease "expires", and it reaches the limit.
    let job = thief.steal().unwrap().unwrap();
    job.extend_lease(std::time::Duration::from_nanos(1)).unwrap();
    std::mem::forget(job);
    let expired = xtcq_shm::recovery::expire_leases(&seg, u64::MAX);
    assert_eq!(expired.len(), 1);
    let t = seg.queue_totals(q.index);
    assert_eq!((t.get(Counter::LeaseExpiries), t.get(Counter::Dead), t.get(Counter::Claimed)), (1, 1, 2));
}

/// Steals until `JOBS` are taken in all, acking every other job itself and sending the rest
/// to `acker`, another thread.
fn take_and_ack<'t>(t: &'t Thief, taken: &AtomicU32, acker: Sender<ClaimedJob<'t>>) {
    let mut mine = 0u32;
    while taken.load(Ordering::Relaxed) < JOBS {
        let Some(job) = t.steal().unwrap() else { continue };
        taken.fetch_add(1, Ordering::Relaxed);
        mine += 1;
        if mine.is_multiple_of(2) {
            acker.send(job).unwrap();
        } else {
            job.ack().unwrap();
        }
    }
}

const JOBS: u32 = 40_000;

/// A thief shared by threads, its clone, and jobs acked on a thread that did not claim them:
/// only one thread may count into a handle's lane with its plain load and store, so every
/// count must survive (a second writer would lose some of the concurrent ones).
#[test]
fn threads_sharing_a_thief_and_acking_elsewhere_lose_no_count() {
    let dir = tempfile::tempdir().unwrap();
    let config = SegmentConfig::small()
        .with_deque_capacity(1024)
        .with_records(4096)
        .with_overflow_capacity(65536)
        .with_process_slots(4);
    let seg = Arc::new(Segment::create(&dir.path().join("segment"), &config, 0o600).unwrap());
    let q = seg.create_queue(&QueueSpec::new("jobs")).unwrap();
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    let thief = Thief::new(seg.clone(), &q, 1).unwrap();
    let clone = thief.clone();
    let taken = AtomicU32::new(0);
    std::thread::scope(|s| {
        let (to_acker, acker) = std::sync::mpsc::channel::<ClaimedJob<'_>>();
        for t in [&thief, &thief, &clone] {
            let (tx, taken) = (to_acker.clone(), &taken);
            s.spawn(move || take_and_ack(t, taken, tx));
        }
        drop(to_acker);
        s.spawn(move || acker.iter().for_each(|j| j.ack().unwrap()));
        for i in 0..JOBS {
            while owner.push(&i.to_le_bytes()).is_err() {
                std::thread::yield_now();
            }
            if i.is_multiple_of(3) {
                if let Some(j) = owner.pop().unwrap() {
                    taken.fetch_add(1, Ordering::Relaxed);
                    j.ack().unwrap();
                }
            }
        }
    });
    let t = seg.queue_totals(q.index);
    assert_eq!(taken.into_inner(), JOBS);
    assert_eq!(t.get(Counter::Pushed), u64::from(JOBS));
    assert_eq!(t.get(Counter::Claimed), u64::from(JOBS));
    assert_eq!(t.get(Counter::Acked), u64::from(JOBS));
}
