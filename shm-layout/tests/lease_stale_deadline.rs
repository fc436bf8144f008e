//! A claim must not inherit the lease deadline of an earlier claim of the same job. A job is
//! claimed, nacked, and waits in line past that first claim's deadline; the next claim is
//! held (by the `claim.after_cas` fail point, 300 ms) between its claim CAS and the store of
//! its own deadline, and a lease scan runs in that window: it must find no expired lease.
//! Before every give-back cleared the deadline, the scan revoked the new claim, and the job
//! would have run twice at once.
//!
//! Its own test binary: the fail point is armed by environment for the whole process.
//! Needs `--features failpoints` (as `cargo test --workspace` builds it).

use std::sync::Arc;
use std::time::Duration;

use xtcq_shm::recovery::expire_leases;
use xtcq_shm::segment::monotonic_ns;
use xtcq_shm::{Flavor, Owner, QueueSpec, Segment, SegmentConfig, Thief};

#[test]
fn a_new_claim_does_not_inherit_an_expired_deadline() {
    // The second claim of the process (the first is the one nacked) sleeps after its CAS.
    std::env::set_var("XTCQ_FAILPOINTS", "claim.after_cas=sleep:300@2");
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = SegmentConfig::small()
        .with_queues(1, 1)
        .with_deque_capacity(16)
        .with_records(64)
        .with_overflow_capacity(64)
        .with_payload_bytes(16);
    let seg = Arc::new(Segment::create(&dir.path().join("seg"), &cfg, 0o600).expect("create"));
    let spec = QueueSpec {
        name: "l".into(),
        flavor: Flavor::Fifo,
        deques: 1,
        capacity: 16,
        max_attempts: 0,
        lease_ms: 50,
        levels: 1,
        aging: 0,
    };
    let q = seg.create_queue(&spec).expect("queue");
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    owner.push(b"job").expect("push");

    let a = Thief::new(seg.clone(), &q, 1).expect("thief a");
    let first = a.steal().expect("steal").expect("the job");
    first.nack().expect("nack");
    // The first claim's deadline (50 ms) passes while the job waits in line.
    std::thread::sleep(Duration::from_millis(120));

    std::thread::scope(|s| {
        let b = s.spawn(|| {
            let thief = Thief::new(seg.clone(), &q, 2).expect("thief b");
            let job = thief.steal().expect("steal").expect("the job again");
            assert_eq!(job.attempts(), 1);
            job.ack()
        });
        // B is inside its 300 ms window: claimed, its own deadline not stored yet.
        std::thread::sleep(Duration::from_millis(100));
        let revoked = expire_leases(&seg, monotonic_ns());
        assert!(
            revoked.is_empty(),
            "the scan revoked a claim made {revoked:?} ago by a deadline not its own"
        );
        b.join().expect("thief b").expect("b's ack: the job was still b's");
    });
}
