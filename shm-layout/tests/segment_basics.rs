//! Basic end-to-end use of a real segment file: create, queue, push, pop, steal, ack, nack,
//! two mappings of one file in one process.

use std::sync::Arc;

use xtcq_shm::{Flavor, Owner, QueueSpec, Segment, SegmentConfig, Thief};

fn small_config() -> SegmentConfig {
    SegmentConfig::small()
        .with_deque_capacity(64)
        .with_queues(4, 4)
        .with_records(1024)
        .with_overflow_capacity(1024)
        .with_process_slots(16)
}

fn spec(name: &str, flavor: Flavor) -> QueueSpec {
    QueueSpec {
        name: name.into(),
        flavor,
        deques: 2,
        capacity: 16,
        max_attempts: 3,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    }
}

#[test]
fn push_pop_steal_ack_across_two_mappings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seg");
    let a = Arc::new(Segment::create(&path, &small_config(), 0o600).unwrap());
    let q = a.create_queue(&spec("jobs", Flavor::Lifo)).unwrap();
    let b = Arc::new(Segment::attach(&path).unwrap());
    assert_ne!(a.base_addr(), b.base_addr(), "two mappings must be at different addresses");
    let qb = b.queue_by_name("jobs").unwrap();
    assert_eq!(qb, q);

    let owner = Owner::new(a.clone(), &q, 0, 1).unwrap();
    let thief = Thief::new(b.clone(), &qb, 2).unwrap();
    for i in 0..40u32 {
        owner.push(&i.to_le_bytes()).unwrap();
    }
    // 16 in the deque, 24 in the overflow ring.
    assert_eq!(owner.len(), 16);
    let mut seen = Vec::new();
    // LIFO owner pops the newest from its deque.
    let j = owner.pop().unwrap().unwrap();
    seen.push(u32::from_le_bytes(j.payload().unwrap().try_into().unwrap()));
    j.ack().unwrap();
    assert_eq!(seen[0], 15);
    while let Some(j) = thief.steal().unwrap() {
        seen.push(u32::from_le_bytes(j.payload().unwrap().try_into().unwrap()));
        j.ack().unwrap();
    }
    seen.sort();
    assert_eq!(seen, (0..40).collect::<Vec<_>>());
}

#[test]
fn nack_requeues_and_dead_letters_after_max_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seg");
    let seg = Arc::new(Segment::create(&path, &small_config(), 0o600).unwrap());
    let q = seg.create_queue(&spec("retry", Flavor::Fifo)).unwrap();
    let owner = Owner::new(seg.clone(), &q, 0, 1).unwrap();
    let thief = Thief::new(seg.clone(), &q, 2).unwrap();
    owner.push(b"hello").unwrap();
    let j = thief.steal().unwrap().unwrap();
    assert_eq!(j.attempts(), 0);
    j.nack().unwrap();
    let j = thief.steal().unwrap().unwrap();
    assert_eq!(j.attempts(), 1);
    assert_eq!(j.payload().unwrap(), b"hello");
    drop(j); // dropped without ack: nacked
    let j = thief.steal().unwrap().unwrap();
    assert_eq!(j.attempts(), 2);
    j.nack().unwrap(); // third failure: dead-lettered (max_attempts = 3)
    assert!(thief.steal().unwrap().is_none());
}

#[test]
fn payload_too_large_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seg");
    let seg = Arc::new(Segment::create(&path, &small_config(), 0o600).unwrap());
    let q = seg.create_queue(&spec("big", Flavor::Lifo)).unwrap();
    let owner = Owner::new(seg.clone(), &q, 0, 1).unwrap();
    let err = owner.push(&[0u8; 65]).unwrap_err();
    assert!(err.to_string().starts_with("payload too large: 65 > 64 bytes, the largest"), "{err}");
    owner.push(&[0u8; 64]).unwrap();
}

#[test]
fn create_refuses_existing_and_world_modes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seg");
    Segment::create(&path, &small_config(), 0o600).unwrap();
    let e = Segment::create(&path, &small_config(), 0o600).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    let e = Segment::create(&dir.path().join("w"), &small_config(), 0o666).unwrap_err();
    assert!(e.to_string().contains("world"), "{e}");
}
