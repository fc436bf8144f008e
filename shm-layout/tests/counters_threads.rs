//! A (process slot, queue) counter block keeps every total exact whatever threads and
//! handles do, and garbage in it crashes nothing. (Written by a red-team pass against the
//! per-handle lane, since removed; the totals' promise stands.)
//!
//! - Each test moves handles, jobs and batches between threads, or makes and drops handles
//!   of one slot while others count, then checks Pushed == Claimed == Acked == jobs run.
//! - Loops are bounded by job counts, never by time; every wait has a deadline.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xtcq_shm::metrics::{Counter, COUNTERS};
use xtcq_shm::{ClaimedBatch, ClaimedJob, Injector, Owner, QueueSpec, Segment, SegmentConfig, Thief};

fn segment() -> (tempfile::TempDir, Arc<Segment>) {
    let dir = tempfile::tempdir().unwrap();
    let config = SegmentConfig::small()
        .with_queues(2, 2)
        .with_deque_capacity(1024)
        .with_records(4096)
        .with_overflow_capacity(65536)
        .with_process_slots(4);
    let seg = Arc::new(Segment::create(&dir.path().join("segment"), &config, 0o600).unwrap());
    (dir, seg)
}

/// Pushes through `push` until it succeeds (the records may be briefly all in use).
fn push_retry(push: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !push() {
        assert!(Instant::now() < deadline, "no room for a push within 60 s");
        std::thread::yield_now();
    }
}

/// Steals and acks until `done` jobs were acked in all, with a deadline.
fn drain(thief: &Thief, acked: &AtomicU64, total: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.load(Ordering::Relaxed) < total {
        assert!(Instant::now() < deadline, "jobs left after 60 s");
        if let Some(j) = thief.steal().unwrap() {
            j.ack().unwrap();
            acked.fetch_add(1, Ordering::Relaxed);
        } else {
            std::thread::yield_now();
        }
    }
}

fn assert_exact(seg: &Segment, queue: u32, jobs: u64) {
    let t = seg.queue_totals(queue);
    assert_eq!(
        (t.get(Counter::Pushed), t.get(Counter::Claimed), t.get(Counter::Acked)),
        (jobs, jobs, jobs),
        "pushed, claimed, acked"
    );
}

/// A thief (holding its slot's lane, bound to its first thread) moved from thread to
/// thread; on each, it is shared with a second thread while a third acks borrowed claims
/// and a fourth acks owned ones, and the owner pushes and pops meanwhile.
#[test]
fn a_thief_moved_between_threads_with_its_claims_acked_elsewhere() {
    let (_dir, seg) = segment();
    let q = seg.create_queue(&QueueSpec::new("jobs")).unwrap();
    const JOBS: u64 = 60_000;
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    let mut thief = Thief::new(seg.clone(), &q, 1).unwrap();
    let acked_total = AtomicU64::new(0);
    let acked = &acked_total;
    let ack = |j: ClaimedJob<'_>| {
        j.ack().unwrap();
        acked.fetch_add(1, Ordering::Relaxed);
    };
    std::thread::scope(|s| {
        s.spawn(move || {
            for i in 0..JOBS {
                push_retry(|| owner.push(&i.to_le_bytes()).is_ok());
                if i % 5 == 0 {
                    if let Some(j) = owner.pop().unwrap() {
                        ack(j);
                    }
                }
            }
        });
        for _ in 0..4 {
            let (seg, ack) = (seg.clone(), &ack);
            thief = s
                .spawn(move || {
                    std::thread::scope(|inner| {
                        let t = &thief;
                        let (borrowed, to_acker) = mpsc::channel::<ClaimedJob<'_>>();
                        let (owned, to_owned_acker) = mpsc::channel();
                        inner.spawn(move || to_acker.iter().for_each(ack));
                        inner.spawn(move || {
                            for j in to_owned_acker {
                                xtcq_shm::Claim::ack(j).unwrap();
                                acked.fetch_add(1, Ordering::Relaxed);
                            }
                        });
                        for k in 0..2 {
                            let (borrowed, owned, seg) = (borrowed.clone(), owned.clone(), seg.clone());
                            inner.spawn(move || {
                                for n in 0..3_000u32 {
                                    let Some(j) = t.steal().unwrap() else { continue };
                                    match (n + k) % 3 {
                                        0 => borrowed.send(j).unwrap(),
                                        1 => owned.send(j.into_owned(seg.clone())).unwrap(),
                                        _ => ack(j),
                                    }
                                }
                            });
                        }
                    });
                    thief
                })
                .join()
                .unwrap();
        }
        drain(&thief, acked, JOBS);
    });
    assert_exact(&seg, q.index, JOBS);
}

/// Handles of one (slot, queue) made and dropped over and over on two threads (the lane
/// going back and forth between them) while a long-lived thief and injector of the same
/// slot count on others, a clone of the thief among them.
#[test]
fn handles_of_one_slot_made_and_dropped_while_others_count() {
    let (_dir, seg) = segment();
    let q = seg.create_queue(&QueueSpec::new("jobs")).unwrap();
    const JOBS: u64 = 100_000;
    let injector = Injector::new(seg.clone(), &q, 1).unwrap();
    let long = Thief::new(seg.clone(), &q, 1).unwrap();
    let clone = long.clone();
    let acked = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (seg, q, acked) = (seg.clone(), q.clone(), &acked);
            s.spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                while acked.load(Ordering::Relaxed) < JOBS {
                    assert!(Instant::now() < deadline, "jobs left after 60 s");
                    // A fresh handle of slot 1: it may get the lane the last one gave back.
                    let short = Thief::new(seg.clone(), &q, 1).unwrap();
                    let push = Injector::new(seg.clone(), &q, 1).unwrap();
                    for _ in 0..4 {
                        if let Some(j) = short.steal().unwrap() {
                            j.ack().unwrap();
                            acked.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    drop(push);
                }
            });
        }
        s.spawn(|| drain(&clone, &acked, JOBS));
        s.spawn(|| drain(&long, &acked, JOBS));
        for i in 0..JOBS {
            push_retry(|| injector.push(&i.to_le_bytes()).is_ok());
        }
    });
    assert_eq!(acked.into_inner(), JOBS);
    assert_exact(&seg, q.index, JOBS);
}

/// Two mappings of one segment in one process: handles of the same slot on each must not
/// both count into its lane (the registry knows the segment by its descriptor, not by the
/// mapping's address).
#[test]
fn two_mappings_of_one_segment_give_one_lane() {
    let (dir, seg) = segment();
    let other = Arc::new(Segment::attach(&dir.path().join("segment")).unwrap());
    let q = seg.create_queue(&QueueSpec::new("jobs")).unwrap();
    const JOBS: u64 = 100_000;
    let a = Injector::new(seg.clone(), &q, 2).unwrap();
    let b = Injector::new(other.clone(), &q, 2).unwrap();
    let thief_a = Thief::new(seg.clone(), &q, 3).unwrap();
    let thief_b = Thief::new(other.clone(), &q, 3).unwrap();
    let acked = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(move || (0..JOBS / 2).for_each(|_| push_retry(|| a.push(b"a").is_ok())));
        s.spawn(move || (0..JOBS / 2).for_each(|_| push_retry(|| b.push(b"b").is_ok())));
        s.spawn(|| drain(&thief_a, &acked, JOBS));
        drain(&thief_b, &acked, JOBS);
    });
    assert_exact(&seg, q.index, JOBS);
    assert_exact(&other, q.index, JOBS);
}

/// A batch claimed on one thread and settled job by job on others.
#[test]
fn a_claimed_batch_settled_on_other_threads() {
    let (_dir, seg) = segment();
    let q = seg.create_queue(&QueueSpec::new("jobs")).unwrap();
    const JOBS: u64 = 4_000;
    let injector = Injector::new(seg.clone(), &q, 0).unwrap();
    let thief = Thief::new(seg.clone(), &q, 0).unwrap();
    for i in 0..JOBS {
        injector.push(&i.to_le_bytes()).unwrap();
    }
    let mut settled = 0u64;
    let mut batch = ClaimedBatch::new();
    while settled < JOBS {
        let n = thief.steal_batch_claimed(64, &mut batch).unwrap() as u64;
        assert!(n > 0, "jobs left: {}", JOBS - settled);
        let jobs = std::mem::take(&mut batch).into_jobs();
        let (even, odd): (Vec<_>, Vec<_>) = jobs.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
        std::thread::scope(|s| {
            s.spawn(move || even.into_iter().for_each(|(_, j)| j.ack().unwrap()));
            s.spawn(move || odd.into_iter().for_each(|(_, j)| j.ack().unwrap()));
        });
        settled += n;
    }
    assert_exact(&seg, q.index, JOBS);
}

/// A queue deleted while a handle still holds its slot's lane, then made again in the same
/// table entry: the new queue starts from zero, its handles count exactly (into the shared
/// lane while the old handle lives, into the lane once it is dropped).
#[test]
fn a_queue_deleted_and_made_again_while_an_old_handle_holds_the_lane() {
    let (_dir, seg) = segment();
    let q = seg.create_queue(&QueueSpec::new("jobs")).unwrap();
    let old = Injector::new(seg.clone(), &q, 1).unwrap();
    let old_thief = Thief::new(seg.clone(), &q, 1).unwrap();
    for _ in 0..100 {
        old.push(b"old").unwrap();
    }
    for _ in 0..60 {
        old_thief.steal().unwrap().unwrap().ack().unwrap();
    }
    seg.delete_queue_at(q.index, true).unwrap();
    seg.reset_queue_metrics(q.index);
    let q2 = seg.create_queue(&QueueSpec::new("again")).unwrap();
    assert_eq!(q2.index, q.index, "the same table entry");
    assert_eq!(seg.queue_totals(q2.index), Default::default());
    let run = |n: u64| {
        let inj = Injector::new(seg.clone(), &q2, 1).unwrap();
        let t = Thief::new(seg.clone(), &q2, 1).unwrap();
        for _ in 0..n {
            inj.push(b"new").unwrap();
            t.steal().unwrap().unwrap().ack().unwrap();
        }
    };
    run(500);
    assert_exact(&seg, q2.index, 500);
    drop((old, old_thief));
    run(700);
    assert_exact(&seg, q2.index, 1200);
}

/// Garbage a hostile attached process writes into every lane of every block (the handle
/// lanes of the daemon's block and the baseline too): totals read, reset and count on
/// without a panic, and a reset then a new queue reads zero.
#[test]
fn garbage_in_the_counters_crashes_nothing() {
    let (_dir, seg) = segment();
    let q = seg.create_queue(&QueueSpec::new("jobs")).unwrap();
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    let thief = Thief::new(seg.clone(), &q, 1).unwrap();
    owner.push(b"x").unwrap();
    for fill in [u64::MAX, u64::MAX - 1, 1 << 63, 0x9E37_79B9_7F4A_7C15] {
        for b in seg.metrics_blocks(q.index).unwrap() {
            for c in b.counters.iter() {
                c.store(fill, Ordering::Relaxed);
            }
        }
        let t = seg.queue_totals(q.index);
        for c in COUNTERS {
            // Saturated sums minus a saturated baseline: a wrong figure, never a panic.
            let _ = t.get(c);
        }
        for _ in 0..3 {
            owner.push(b"y").unwrap();
            thief.steal().unwrap().unwrap().ack().unwrap();
        }
        let _ = seg.queue_totals(q.index);
    }
    for b in seg.metrics_blocks(q.index).unwrap() {
        for c in &b.counters {
            c.store(u64::MAX, Ordering::Relaxed);
        }
    }
    drop((owner, thief));
    seg.delete_queue_at(q.index, true).unwrap();
    seg.reset_queue_metrics(q.index);
    let q2 = seg.create_queue(&QueueSpec::new("again")).unwrap();
    assert_eq!(seg.queue_totals(q2.index), Default::default(), "a reset after garbage reads zero");
    let owner = Owner::new(seg.clone(), &q2, 0, 0).unwrap();
    owner.push(b"z").unwrap();
    owner.pop().unwrap().unwrap().ack().unwrap();
    let _ = seg.queue_totals(q2.index);
}
