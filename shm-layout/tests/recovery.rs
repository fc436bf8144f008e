//! Recovery building blocks over a real segment: what a dead process held is given back,
//! orphans are re-indexed, leases expire, and `check_segment` sees both the consistent and
//! the broken cases.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use xtcq_shm::check::check_segment;
use xtcq_shm::layout::PROCESS_ACTIVE;
use xtcq_shm::recovery::{expire_leases, lease_word, recover_holder, reindex_orphans, release_deque_leases};
use xtcq_shm::{Flavor, Owner, QueueSpec, Segment, SegmentConfig, State, Steal, Thief};

fn setup(max_attempts: u32) -> (tempfile::TempDir, Arc<Segment>, xtcq_shm::QueueInfo) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SegmentConfig::small().with_deque_capacity(16).with_records(64).with_overflow_capacity(64);
    let seg = Arc::new(Segment::create(&dir.path().join("seg"), &cfg, 0o600).unwrap());
    let q = seg
        .create_queue(&QueueSpec {
            name: "r".into(),
            flavor: Flavor::Fifo,
            deques: 1,
            capacity: 16,
            max_attempts,
            lease_ms: 0,
            levels: 1,
            aging: 0,
        })
        .unwrap();
    for s in 0..4 {
        seg.process_slot(s).unwrap().state.store(PROCESS_ACTIVE, Ordering::Release);
    }
    (dir, seg, q)
}

fn id(j: &xtcq_shm::ClaimedJob<'_>) -> u8 {
    j.payload().unwrap()[0]
}

#[test]
fn claimed_by_a_dead_thief_is_requeued_with_an_attempt_more() {
    let (_d, seg, q) = setup(0);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(&[7]).unwrap();
    let thief = Thief::new(seg.clone(), &q, 2).unwrap();
    let j = thief.steal().unwrap().unwrap();
    // The thief "dies" holding the job: no ack, no nack-on-drop.
    std::mem::forget(j);
    assert!(check_segment(&seg, false).is_consistent());
    assert!(!check_segment(&seg, true).is_consistent(), "a claim with nobody attached is a problem");
    let rec = recover_holder(&seg, 2);
    assert_eq!(rec.requeued.len(), 1);
    let j = thief.steal().unwrap().expect("requeued job");
    assert_eq!(id(&j), 7);
    assert_eq!(j.attempts(), 1);
    j.ack().unwrap();
    assert!(check_segment(&seg, true).is_consistent());
    // Idempotent.
    assert_eq!(recover_holder(&seg, 2), Default::default());
}

#[test]
fn claimed_at_the_attempt_limit_is_dead_lettered() {
    let (_d, seg, q) = setup(1);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(&[1]).unwrap();
    let thief = Thief::new(seg.clone(), &q, 3).unwrap();
    std::mem::forget(thief.steal().unwrap().unwrap());
    let rec = recover_holder(&seg, 3);
    assert_eq!(rec.dead_lettered.len(), 1);
    assert!(thief.steal().unwrap().is_none());
    assert_eq!(check_segment(&seg, true).counts.dead, 1);
}

#[test]
fn filling_by_a_dead_producer_is_freed() {
    let (_d, seg, _q) = setup(0);
    let mut cursor = 0;
    let (i, g) = seg.records().allocate(1, &mut cursor).unwrap();
    let rec = recover_holder(&seg, 1);
    assert_eq!(rec.freed_filling, 1);
    let w = seg.records().state(i).unwrap().load();
    assert_eq!(w.state(), Some(State::Free));
    assert_ne!(w.generation(), g, "the generation moves on so a stale handle cannot claim");
}

#[test]
fn thief_dead_between_top_cas_and_claim_leaves_an_orphan_that_is_reindexed() {
    let (_d, seg, q) = setup(0);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(&[9]).unwrap();
    owner.push(&[10]).unwrap();
    // Win the CAS on top, then "die" before the claim.
    let dq = seg.deque(&q, 0).unwrap();
    assert!(matches!(dq.steal(), Steal::Success(_)));
    assert!(!check_segment(&seg, true).is_consistent(), "an unreferenced Queued record is a problem");
    let orphans = reindex_orphans(&seg);
    assert_eq!(orphans.len(), 1);
    assert!(reindex_orphans(&seg).is_empty(), "nothing left to re-index");
    let thief = Thief::new(seg.clone(), &q, 2).unwrap();
    let mut got = Vec::new();
    while let Some(j) = thief.steal().unwrap() {
        got.push(id(&j));
        j.ack().unwrap();
    }
    got.sort();
    assert_eq!(got, [9, 10]);
    assert!(check_segment(&seg, true).is_consistent());
}

#[test]
fn expired_lease_requeues_and_the_late_ack_fails() {
    let (_d, seg, q) = setup(0);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(&[5]).unwrap();
    let thief = Thief::new(seg.clone(), &q, 2).unwrap();
    let j = thief.steal().unwrap().unwrap();
    let hdr = seg.records().header(j.handle().index).unwrap();
    hdr.deadline_ns.store(1, Ordering::Relaxed);
    assert_eq!(expire_leases(&seg, 2).len(), 1);
    let err = j.ack().unwrap_err();
    assert!(err.to_string().contains("no longer held"), "{err}");
    let again = thief.steal().unwrap().expect("requeued");
    assert_eq!(id(&again), 5);
    again.ack().unwrap();
}

#[test]
fn dead_owner_lease_is_released_and_bottom_repaired() {
    let (_d, seg, q) = setup(0);
    let h = seg.deque_header(q.index, 0).unwrap();
    h.lease.store(lease_word(1, 7), Ordering::Release);
    {
        let owner = Owner::new(seg.clone(), &q, 0, 1).unwrap();
        owner.push(&[1]).unwrap();
        owner.push(&[2]).unwrap();
    }
    // A pop that died after its decrement, with a thief having taken both: bottom < top.
    let dq = seg.deque(&q, 0).unwrap();
    let thief = Thief::new(seg.clone(), &q, 2).unwrap();
    while let Some(j) = thief.steal().unwrap() {
        j.ack().unwrap();
    }
    h.bottom.fetch_sub(1, Ordering::AcqRel);
    assert!(dq.indices().1 < dq.indices().0);
    assert_eq!(release_deque_leases(&seg, 1), vec![(q.index, 0)]);
    assert_eq!(h.lease.load(Ordering::Acquire), 0);
    let (top, bottom) = dq.indices();
    assert_eq!(top, bottom);
    assert!(check_segment(&seg, true).is_consistent());
}

#[test]
fn check_reports_corruption() {
    let (_d, seg, q) = setup(0);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(&[1]).unwrap();
    let dq = seg.deque(&q, 0).unwrap();
    let (top, _) = dq.indices();
    let h = seg.deque_header(q.index, 0).unwrap();
    h.bottom.store(top + 1000, Ordering::Release);
    let r = check_segment(&seg, false);
    assert!(r.problems.iter().any(|p| p.contains("capacity")), "{:?}", r.problems);
    h.bottom.store(top + 1, Ordering::Release);
    seg.records().state(5).unwrap().0.store(0xFFFF_FFFF_FFFF_FFFF, Ordering::Release);
    let r = check_segment(&seg, false);
    assert!(r.problems.iter().any(|p| p.contains("record 5")), "{:?}", r.problems);
}

#[test]
fn queue_lease_expires_a_hung_claim_and_a_heartbeat_keeps_it() {
    let (_d, seg, _q) = setup(0);
    let q = seg
        .create_queue(&QueueSpec {
            name: "leased".into(),
            flavor: Flavor::Fifo,
            deques: 1,
            capacity: 16,
            max_attempts: 0,
            lease_ms: 20,
            levels: 1,
            aging: 0,
        })
        .unwrap();
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(&[1]).unwrap();
    owner.push(&[2]).unwrap();
    let thief = Thief::new(seg.clone(), &q, 2).unwrap();
    let hung = thief.steal().unwrap().unwrap();
    let alive = thief.steal().unwrap().unwrap();
    assert!(hung.lease_deadline_ns().is_some());
    std::thread::sleep(std::time::Duration::from_millis(5));
    alive.extend_lease(std::time::Duration::from_secs(60)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    let expired = expire_leases(&seg, xtcq_shm::segment::monotonic_ns());
    // Reported as the job now is: the re-queue moved its generation on.
    let requeued = xtcq_shm::JobHandle {
        index: hung.handle().index,
        generation: xtcq_shm::record::state::next_generation(hung.handle().generation),
    };
    assert_eq!(expired, vec![requeued], "only the claim without a heartbeat expires");
    let err = hung.ack().unwrap_err();
    assert!(err.to_string().starts_with("lease expired"), "{err}");
    alive.ack().unwrap();
    let again = thief.steal().unwrap().expect("re-queued after expiry");
    assert_eq!(again.attempts(), 1);
    again.ack().unwrap();
    assert!(check_segment(&seg, true).is_consistent());
}

#[test]
fn dead_letters_keep_payload_and_last_error_and_can_be_requeued_or_purged() {
    use xtcq_shm::dead_letter::{dead_letters, purge_dead, requeue_dead};
    let (_d, seg, q) = setup(2);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(b"first").unwrap();
    owner.push(b"second").unwrap();
    let thief = Thief::new(seg.clone(), &q, 2).unwrap();
    // Two failures each: dead after the second.
    for round in 0..2 {
        for _ in 0..2 {
            let j = thief.steal().unwrap().unwrap();
            j.fail(&format!("exit status {round} with a long explanation")).unwrap();
        }
    }
    assert!(thief.steal().unwrap().is_none());
    let mut dead = dead_letters(&seg, q.index);
    dead.sort_by(|a, b| a.payload.cmp(&b.payload));
    assert_eq!(dead.len(), 2);
    assert_eq!(dead[0].payload, b"first");
    assert_eq!(dead[0].attempts, 2);
    // Cut to LAST_ERROR_BYTES.
    assert!(dead[0].last_error.starts_with("exit status "), "{:?}", dead[0].last_error);
    assert_eq!(dead[0].last_error.len(), xtcq_shm::dead_letter::LAST_ERROR_BYTES);
    requeue_dead(&seg, dead[0].handle, 1).unwrap();
    assert!(requeue_dead(&seg, dead[0].handle, 1).is_err(), "requeued twice");
    purge_dead(&seg, dead[1].handle).unwrap();
    assert!(purge_dead(&seg, dead[1].handle).is_err(), "purged twice");
    let j = thief.steal().unwrap().unwrap();
    assert_eq!(j.payload().unwrap(), b"first");
    assert_eq!(j.attempts(), 0);
    j.ack().unwrap();
    assert!(dead_letters(&seg, q.index).is_empty());
    let r = check_segment(&seg, true);
    assert!(r.is_consistent(), "{:?}", r.problems);
    assert_eq!(r.counts.free, seg.records().len());
}

/// A holder in `Writing` (writing its header: a nack or a lease extension) whose deadline has
/// passed: lease expiry leaves it alone (revoking it is what would let the holder's writes
/// land on another job), `check_segment` counts it as claimed, and once its holder is dead,
/// recovery gives it back like a claim.
#[test]
fn a_writing_record_is_left_by_expiry_counted_as_claimed_and_recovered_when_its_holder_dies() {
    let (_d, seg, q) = setup(0);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(&[9]).unwrap();
    let thief = Thief::new(seg.clone(), &q, 2).unwrap();
    let j = thief.steal().unwrap().unwrap();
    let h = j.handle();
    std::mem::forget(j);
    let st = seg.records().state(h.index).unwrap();
    st.begin_write(h.generation, 2).unwrap();
    seg.records().header(h.index).unwrap().deadline_ns.store(1, Ordering::Relaxed);
    assert!(expire_leases(&seg, u64::MAX).is_empty(), "expiry revoked a Writing record");
    assert_eq!(st.load().state(), Some(State::Writing));
    let r = check_segment(&seg, false);
    assert!(r.is_consistent(), "{:?}", r.problems);
    assert_eq!(r.counts.claimed, 1);
    let rec = recover_holder(&seg, 2);
    assert_eq!(rec.requeued.len(), 1);
    let again = thief.steal().unwrap().expect("re-queued");
    assert_eq!(id(&again), 9);
    assert_eq!(again.attempts(), 1);
    again.ack().unwrap();
    assert!(check_segment(&seg, true).is_consistent());
}

/// The same process slot claims a job again after lease expiry re-queued it (another thread
/// of a worker): the first thread's stale claim can neither extend nor ack the new one,
/// because every give-back moves the generation on.
#[test]
fn a_stale_claim_cannot_act_on_a_re_claim_by_the_same_slot() {
    let (_d, seg, q) = setup(0);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(&[5]).unwrap();
    let thief = Thief::new(seg.clone(), &q, 2).unwrap();
    let stale = thief.steal().unwrap().unwrap();
    stale.extend_lease(std::time::Duration::from_nanos(1)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1));
    assert_eq!(expire_leases(&seg, xtcq_shm::segment::monotonic_ns()).len(), 1);
    let fresh = thief.steal().unwrap().expect("re-queued after expiry");
    assert_ne!(fresh.handle().generation, stale.handle().generation);
    assert!(stale.extend_lease(std::time::Duration::from_secs(60)).is_err(), "a stale heartbeat succeeded");
    assert!(stale.ack().is_err(), "a stale ack succeeded");
    assert_eq!(id(&fresh), 5);
    fresh.ack().expect("the live claim is intact");
    assert!(check_segment(&seg, true).is_consistent());
}

/// A lease extension moves the generation on, so a lease scan that read the old deadline
/// before the extension cannot revoke the extended claim with the word it read.
#[test]
fn an_extension_changes_the_word_a_lease_scan_read() {
    let (_d, seg, q) = setup(0);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    owner.push(&[6]).unwrap();
    let thief = Thief::new(seg.clone(), &q, 2).unwrap();
    let j = thief.steal().unwrap().unwrap();
    let st = seg.records().state(j.handle().index).unwrap();
    let seen_by_scan = st.load();
    j.extend_lease(std::time::Duration::from_secs(60)).unwrap();
    assert_ne!(st.load(), seen_by_scan);
    assert_eq!(st.load().state(), Some(State::Claimed));
    j.ack().unwrap();
}

/// A job indexed twice (the orphan sweep re-indexed it on the ring while its producer was
/// still on its way to the deque push), claimed through the ring and given back by a nacker
/// that died before indexing it again: the record is `Queued(g + 1)` and the deque still holds
/// the stale `(i, g)`, whose claim fails. The sweep must not count that handle as a reference,
/// or the job is stranded. (Found by review; failed before the generation check.)
#[test]
fn a_stale_deque_handle_does_not_hide_a_re_queued_orphan() {
    let (_d, seg, q) = setup(0);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    let h = owner.push(&[42]).unwrap();
    seg.overflow(q.index).unwrap().push(h.index).unwrap();
    let thief = Thief::new(seg.clone(), &q, 2).unwrap();
    let j = thief.steal_overflow().unwrap().expect("claimed through the ring");
    let g = j.handle().generation;
    std::mem::forget(j);
    let st = seg.records().state(h.index).unwrap();
    st.begin_write(g, 2).unwrap();
    st.requeue_written(g, 2).unwrap();
    // The nacker died here, before its ring push.
    assert!(!check_segment(&seg, true).is_consistent(), "an unreachable job passed the check");
    recover_holder(&seg, 2);
    assert_eq!(reindex_orphans(&seg).len(), 1, "the orphan was not re-indexed");
    let mut got = 0;
    for _ in 0..4 {
        if let Some(j) = thief.steal().unwrap() {
            assert_eq!(id(&j), 42);
            got += 1;
            j.ack().unwrap();
        }
    }
    assert_eq!(got, 1, "job stranded: Queued but unreachable");
    assert!(check_segment(&seg, true).is_consistent());
}
