//! The recovery's fence hook: called after the revoke and before the re-queue, with the
//! record and the holder; a fence that cannot stop the holder's work dead-letters the job
//! with its reason instead of letting it run again.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use xtcq_shm::layout::PROCESS_ACTIVE;
use xtcq_shm::recovery::{expire_leases_fenced, recover_holder_fenced};
use xtcq_shm::{Claim, Flavor, OwnedJob, Owner, QueueSpec, Segment, SegmentConfig, State, Thief};

fn setup(lease_ms: u32) -> (tempfile::TempDir, Arc<Segment>, xtcq_shm::QueueInfo) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SegmentConfig::small().with_deque_capacity(16).with_records(64).with_overflow_capacity(64);
    let seg = Arc::new(Segment::create(&dir.path().join("seg"), &cfg, 0o600).unwrap());
    let spec = QueueSpec {
        name: "f".into(),
        flavor: Flavor::Fifo,
        deques: 1,
        capacity: 16,
        max_attempts: 0,
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

fn claimed(seg: &Arc<Segment>, q: &xtcq_shm::QueueInfo, me: u32) -> OwnedJob {
    let owner = Owner::new(seg.clone(), q, 0, 0).unwrap();
    owner.push(b"j").unwrap();
    let thief = Thief::new(seg.clone(), q, me).unwrap();
    let job = thief.steal().unwrap().expect("a job");
    job.into_owned(seg.clone())
}

#[test]
fn an_unfenceable_holder_dead_letters_its_job_with_the_reason() {
    let (_d, seg, q) = setup(0);
    let job = claimed(&seg, &q, 2);
    let index = job.handle().index;
    let mut seen = Vec::new();
    let mut fence = |i: u32, holder: u32| {
        // Revoked before the fence runs: the holder can no longer ack.
        let w = seg.records().state(i).unwrap().load();
        seen.push((i, holder, w.holder()));
        Err("its command could not be killed".to_string())
    };
    let r = recover_holder_fenced(&seg, 2, &mut fence);
    assert_eq!(seen, vec![(index, 2, xtcq_shm::NO_HOLDER)]);
    assert_eq!(r.dead_lettered.len(), 1, "{r:?}");
    let dead = xtcq_shm::dead_letter::dead_letters(&seg, q.index);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].last_error, xtcq_shm::recovery::UNFENCED, "with the reason");
    assert!(job.ack().is_err(), "the holder's late ack fails");
}

#[test]
fn a_fenced_expiry_re_queues_only_after_the_fence() {
    let (_d, seg, q) = setup(1);
    let job = claimed(&seg, &q, 3);
    let index = job.handle().index;
    std::thread::sleep(std::time::Duration::from_millis(5));
    let mut fenced = 0;
    let mut fence = |i: u32, holder: u32| {
        assert_eq!((i, holder), (index, 3));
        // Not claimable yet while the fence runs.
        assert_eq!(seg.records().state(i).unwrap().load().state(), Some(State::Claimed));
        fenced += 1;
        Ok(())
    };
    let revoked = expire_leases_fenced(&seg, xtcq_shm::segment::monotonic_ns(), &mut fence);
    assert_eq!((revoked.len(), fenced), (1, 1));
    assert_eq!(seg.records().state(index).unwrap().load().state(), Some(State::Queued));
    drop(job);
}
