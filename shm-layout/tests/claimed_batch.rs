//! The consumer's batch path (`Thief::steal_batch_claimed`, `ClaimedBatch`): a batch takes
//! what a deque holds up to its limit with one steal, claims each record with its own CAS
//! (a stale or duplicated handle is left out), acks each with its own CAS, counts once, and
//! gives back (nacks) whatever it still holds when it is dropped or refilled.

use std::sync::Arc;

use xtcq_shm::metrics::Counter;
use xtcq_shm::{ClaimedBatch, Flavor, JobHandle, Owner, QueueInfo, QueueSpec, Segment, SegmentConfig, Thief};

fn setup(flavor: Flavor) -> (tempfile::TempDir, Arc<Segment>, QueueInfo) {
    let dir = tempfile::tempdir().unwrap();
    let config = SegmentConfig::small()
        .with_deque_capacity(64)
        .with_queues(1, 1)
        .with_records(128)
        .with_overflow_capacity(65536)
        .with_payload_bytes(448)
        .with_process_slots(4);
    let seg = Arc::new(Segment::create(&dir.path().join("segment"), &config, 0o600).unwrap());
    let mut spec = QueueSpec::new("jobs");
    spec.flavor = flavor;
    spec.capacity = 64;
    let q = seg.create_queue(&spec).unwrap();
    (dir, seg, q)
}

fn ids(batch: &ClaimedBatch<'_>) -> Vec<u8> {
    batch.jobs().iter().map(|j| j.payload().unwrap()[0]).collect()
}

#[test]
fn a_batch_takes_what_is_there_up_to_its_limit_oldest_first() {
    for flavor in [Flavor::Fifo, Flavor::Lifo] {
        let (_d, seg, q) = setup(flavor);
        let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
        for i in 0..10u8 {
            owner.push(&[i]).unwrap();
        }
        let thief = Thief::new(seg.clone(), &q, 1).unwrap();
        let mut batch = ClaimedBatch::new();
        // Not "about half" (5): all it asked for.
        assert_eq!(thief.steal_batch_claimed(8, &mut batch).unwrap(), 8, "{flavor:?}");
        assert_eq!(ids(&batch), (0..8).collect::<Vec<u8>>(), "{flavor:?}");
        assert_eq!(batch.ack_all().unwrap(), 8);
        assert!(batch.is_empty());
        // Fewer there than asked for: all of them.
        assert_eq!(thief.steal_batch_claimed(8, &mut batch).unwrap(), 2, "{flavor:?}");
        assert_eq!(ids(&batch), [8, 9]);
        assert_eq!(batch.ack_all().unwrap(), 2);
        assert_eq!(thief.steal_batch_claimed(8, &mut batch).unwrap(), 0, "empty");
        let t = seg.queue_totals(q.index);
        assert_eq!((t.get(Counter::Claimed), t.get(Counter::Acked)), (10, 10), "{flavor:?}");
    }
}

#[test]
fn a_stale_or_duplicated_handle_fails_its_claim_and_is_left_out() {
    let (_d, seg, q) = setup(Flavor::Fifo);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    let first = owner.push(&[1]).unwrap();
    let thief = Thief::new(seg.clone(), &q, 1).unwrap();
    thief.steal().unwrap().unwrap().ack().unwrap(); // `first` is stale now
    let second = owner.push(&[2]).unwrap();
    // Scribble the deque: the stale handle, then `second` twice.
    let d = seg.deque(&q, 0).unwrap();
    let (top, bottom) = d.indices();
    assert_eq!(bottom - top, 1);
    d.raw_slot(bottom).store(first.to_word(), std::sync::atomic::Ordering::Relaxed);
    d.raw_slot(bottom + 1).store(second.to_word(), std::sync::atomic::Ordering::Relaxed);
    seg.deque_header(q.index, 0).unwrap().bottom.store(bottom + 2, std::sync::atomic::Ordering::Release);

    let mut batch = ClaimedBatch::new();
    assert_eq!(thief.steal_batch_claimed(8, &mut batch).unwrap(), 1, "three handles, one job");
    let handles: Vec<JobHandle> = batch.handles().collect();
    assert_eq!(handles, [second]);
    assert_eq!(batch.ack_all().unwrap(), 1);
    assert_eq!(thief.steal_batch_claimed(8, &mut batch).unwrap(), 0);
    let t = seg.queue_totals(q.index);
    assert_eq!((t.get(Counter::Claimed), t.get(Counter::Acked)), (2, 2));
}

#[test]
fn unsettled_jobs_are_nacked_when_a_batch_is_dropped_or_refilled() {
    let (_d, seg, q) = setup(Flavor::Fifo);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    for i in 0..4u8 {
        owner.push(&[i]).unwrap();
    }
    let thief = Thief::new(seg.clone(), &q, 1).unwrap();
    {
        let mut batch = ClaimedBatch::new();
        assert_eq!(thief.steal_batch_claimed(2, &mut batch).unwrap(), 2);
        batch.ack(0).unwrap();
        assert!(batch.ack(0).is_err(), "acked twice");
        // Refilling gives job 1 back; the next two come in.
        assert_eq!(thief.steal_batch_claimed(2, &mut batch).unwrap(), 1, "job 1 from the ring first");
        assert_eq!(ids(&batch), [1]);
        assert_eq!(batch.get(0).unwrap().attempts(), 1);
        batch.nack(0).unwrap();
        // Dropped while holding job 1 again and jobs 2 and 3.
        assert_eq!(thief.steal_batch_claimed(3, &mut batch).unwrap(), 1);
        let mut more = ClaimedBatch::new();
        assert_eq!(thief.steal_batch_claimed(3, &mut more).unwrap(), 2);
        assert_eq!(ids(&more), [2, 3]);
        more.release(1).unwrap();
    }
    let mut left = Vec::new();
    while let Some(j) = thief.steal().unwrap() {
        left.push((j.payload().unwrap()[0], j.attempts()));
        j.ack().unwrap();
    }
    left.sort_unstable();
    assert_eq!(left, [(1, 3), (2, 1), (3, 0)], "(job, attempts): dropped = nacked, release = no attempt");
    let t = seg.queue_totals(q.index);
    assert_eq!(t.get(Counter::Acked), 4);
}
