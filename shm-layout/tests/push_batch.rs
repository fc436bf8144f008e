//! `Owner::push_batch` and `DequeOwner::push_many`: a batch queues what the deque has room
//! for, from the first, and every job of it is taken exactly once by a thief racing the
//! pushes; a failure part-way queues the jobs before it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use xtcq_shm::{Flavor, Owner, PushError, QueueSpec, Segment, SegmentConfig, Thief};

fn setup(records: u32, capacity: u32) -> (tempfile::TempDir, Arc<Segment>, xtcq_shm::QueueInfo) {
    let dir = tempfile::tempdir().unwrap();
    let config = SegmentConfig::small().with_queues(1, 1).with_deque_capacity(capacity).with_records(records);
    let seg = Arc::new(Segment::create(&dir.path().join("segment"), &config, 0o600).unwrap());
    let mut spec = QueueSpec::new("jobs");
    spec.flavor = Flavor::Fifo;
    spec.capacity = capacity;
    let q = seg.create_queue(&spec).unwrap();
    (dir, seg, q)
}

#[test]
fn a_batch_queues_what_the_deque_has_room_for_from_the_first() {
    let (_d, seg, q) = setup(256, 8);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    let payloads: Vec<Vec<u8>> = (0..12u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    assert_eq!(owner.push_batch(&refs).unwrap(), 8, "room for 8");
    assert_eq!(owner.push_batch(&refs[8..]).unwrap(), 0, "the deque is full");
    let thief = Thief::new(seg.clone(), &q, 1).unwrap();
    let mut got = Vec::new();
    while let Some(j) = thief.steal().unwrap() {
        got.push(u32::from_le_bytes(j.payload().unwrap().try_into().unwrap()));
        j.ack().unwrap();
    }
    assert_eq!(got, (0..8).collect::<Vec<_>>(), "FIFO: the batch's order");
    assert_eq!(owner.push_batch(&[]).unwrap(), 0);
}

#[test]
fn a_failure_part_way_queues_the_jobs_before_it() {
    let (_d, seg, q) = setup(256, 64);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    let big = vec![0u8; 4096]; // over the small segment's 64-byte payloads
    let refs: [&[u8]; 4] = [b"a", b"b", &big, b"d"];
    let e = owner.push_batch(&refs).unwrap_err();
    assert_eq!(e.queued, 2);
    assert!(matches!(e.error, PushError::PayloadTooLarge { .. }), "{e}");
    let thief = Thief::new(seg.clone(), &q, 1).unwrap();
    let mut got = Vec::new();
    while let Some(j) = thief.steal().unwrap() {
        got.push(j.payload().unwrap());
        j.ack().unwrap();
    }
    assert_eq!(got, vec![b"a".to_vec(), b"b".to_vec()]);
    let report = xtcq_shm::check::check_segment(&seg, true);
    assert!(report.is_consistent(), "{report:?}");
}

#[test]
fn a_thief_racing_batches_takes_every_job_once() {
    const JOBS: u32 = 200_000;
    let (_d, seg, q) = setup(4096, 256);
    let done = Arc::new(AtomicBool::new(false));
    let thief_seg = seg.clone();
    let thief_q = q.clone();
    let thief_done = done.clone();
    let consumer = std::thread::spawn(move || {
        let thief = Thief::new(thief_seg, &thief_q, 1).unwrap();
        let mut seen = BTreeSet::new();
        loop {
            match thief.steal().unwrap() {
                Some(j) => {
                    let v = u32::from_le_bytes(j.payload().unwrap().try_into().unwrap());
                    assert!(seen.insert(v), "job {v} taken twice");
                    j.ack().unwrap();
                }
                None if thief_done.load(Ordering::Acquire) => {
                    if thief.steal().unwrap().is_none() {
                        return seen;
                    }
                }
                None => std::hint::spin_loop(),
            }
        }
    });
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    let mut next = 0u32;
    while next < JOBS {
        let payloads: Vec<[u8; 4]> = (next..JOBS.min(next + 37)).map(u32::to_le_bytes).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        match owner.push_batch(&refs) {
            Ok(n) => next += n as u32,
            Err(e) if matches!(e.error, PushError::RecordsFull(_)) => next += e.queued as u32,
            Err(e) => panic!("{e}"),
        }
    }
    done.store(true, Ordering::Release);
    let seen = consumer.join().unwrap();
    assert_eq!(seen.len() as u32, JOBS, "every job once");
}
