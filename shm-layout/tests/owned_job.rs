//! `OwnedJob`: a claim that outlives the thief that took it, with the same checks.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use xtcq_shm::check::check_segment;
use xtcq_shm::layout::PROCESS_ACTIVE;
use xtcq_shm::recovery::expire_leases;
use xtcq_shm::{Claim, Flavor, JobError, OwnedJob, Owner, QueueSpec, Segment, SegmentConfig, Thief};

fn setup(max_attempts: u32, lease_ms: u32) -> (tempfile::TempDir, Arc<Segment>, xtcq_shm::QueueInfo) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SegmentConfig::small().with_deque_capacity(16).with_records(64).with_overflow_capacity(64);
    let seg = Arc::new(Segment::create(&dir.path().join("seg"), &cfg, 0o600).unwrap());
    let spec = QueueSpec {
        name: "o".into(),
        flavor: Flavor::Fifo,
        deques: 1,
        capacity: 16,
        max_attempts,
        lease_ms,
        levels: 1,
        aging: 0,
    };
    let q = seg.create_queue(&spec).unwrap();
    for s in 0..4 {
        seg.process_slot(s).unwrap().state.store(PROCESS_ACTIVE, Ordering::Release);
    }
    (dir, seg, q)
}

/// Steals one job and lets the thief go, keeping only the owned claim.
fn steal_owned(seg: &Arc<Segment>, q: &xtcq_shm::QueueInfo, me: u32) -> OwnedJob {
    let thief = Thief::new(seg.clone(), q, me).unwrap();
    let job = thief.steal().unwrap().expect("a job");
    job.into_owned(seg.clone())
}

#[test]
fn an_owned_job_is_read_and_acked_after_its_thief_is_gone_and_in_another_thread() {
    let (_d, seg, q) = setup(0, 0);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(b"payload").unwrap();
    let job = steal_owned(&seg, &q, 2);
    let job = std::thread::spawn(move || {
        assert_eq!(job.payload().unwrap(), b"payload");
        assert_eq!(job.attempts(), 0);
        job
    })
    .join()
    .unwrap();
    job.ack().unwrap();
    assert!(check_segment(&seg, true).is_consistent(), "{:?}", check_segment(&seg, true));
}

#[test]
fn nack_fail_release_and_drop_give_an_owned_job_back() {
    let (_d, seg, q) = setup(0, 0);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(b"x").unwrap();
    steal_owned(&seg, &q, 2).nack().unwrap();
    let j = steal_owned(&seg, &q, 2);
    assert_eq!(j.attempts(), 1, "a nack counts an attempt");
    j.fail("boom").unwrap();
    let j = steal_owned(&seg, &q, 2);
    assert_eq!(j.attempts(), 2);
    j.release().unwrap();
    let j = steal_owned(&seg, &q, 2);
    assert_eq!(j.attempts(), 2, "a release counts no attempt");
    drop(j);
    let j = steal_owned(&seg, &q, 2);
    assert_eq!(j.attempts(), 3, "dropped: nacked");
    j.ack().unwrap();
    assert!(check_segment(&seg, true).is_consistent());
}

#[test]
fn a_stale_owned_job_acks_nothing_and_does_not_touch_the_next_claim() {
    let (_d, seg, q) = setup(0, 1);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(b"x").unwrap();
    let stale = steal_owned(&seg, &q, 2);
    assert_eq!(expire_leases(&seg, u64::MAX).len(), 1, "the lease ran out and the job was re-queued");
    // Another process claims it again; the stale owned job must not act on that claim.
    let fresh = steal_owned(&seg, &q, 3);
    let e = stale.extend_lease(Duration::from_secs(60)).unwrap_err();
    assert!(matches!(e, JobError::LeaseExpired { .. } | JobError::NotHeld { .. }), "{e}");
    assert!(stale.payload().is_err());
    assert!(stale.ack().is_err(), "a stale job acks nothing");
    assert_eq!(fresh.payload().unwrap(), b"x");
    fresh.extend_lease(Duration::from_secs(60)).unwrap();
    fresh.ack().unwrap();
    assert!(check_segment(&seg, true).is_consistent());
}

#[test]
fn extending_an_owned_lease_moves_its_generation_on_and_keeps_it_actionable() {
    let (_d, seg, q) = setup(0, 60_000);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(b"x").unwrap();
    let j = steal_owned(&seg, &q, 2);
    let before = (j.handle(), j.lease_deadline_ns().unwrap());
    j.extend_lease(Duration::from_secs(120)).unwrap();
    assert_ne!(j.handle().generation, before.0.generation);
    assert!(j.lease_deadline_ns().unwrap() > before.1);
    assert_eq!(j.payload().unwrap(), b"x");
    j.ack().unwrap();
    assert!(check_segment(&seg, true).is_consistent());
}
