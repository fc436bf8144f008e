//! Priority levels through the typed API: the level a take chooses, what survives a
//! give-back, and garbage in the words the levels read from the segment.

use std::sync::Arc;

use crate::layout::QueueControl;
use crate::levels::{priority_flags, PRIORITY_MASK, PRIORITY_SHIFT};
use crate::segment::{QueueError, QueueInfo, QueueSpec, Segment};
use crate::sync::Ordering;
use crate::{Flavor, Injector, Owner, PushError, SegmentConfig, Thief};

/// A segment with two queues of 8 deques' room: `q` with `levels` levels and `other`, of one.
fn segment(
    levels: u32,
    aging: u32,
    flavor: Flavor,
) -> (tempfile::TempDir, Arc<Segment>, QueueInfo, QueueInfo) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = SegmentConfig::small().with_queues(2, 8).with_records(256);
    let seg = Arc::new(Segment::create(&dir.path().join("s"), &config, 0o600).expect("segment"));
    let q = seg.create_queue(&QueueSpec { flavor, levels, aging, ..QueueSpec::new("q") }).expect("queue");
    let other = seg.create_queue(&QueueSpec::new("other")).expect("other queue");
    (dir, seg, q, other)
}

/// The priority of a payload pushed as `[priority, n]`.
fn take_all(thief: &Thief) -> Vec<[u8; 2]> {
    let mut out = Vec::new();
    while let Some(j) = thief.steal().expect("steal") {
        let p = j.payload().expect("payload");
        out.push([p[0], p[1]]);
        j.ack().expect("ack");
    }
    out
}

fn hints<'s>(seg: &'s Segment, q: &QueueInfo) -> &'s crate::sync::AtomicU32 {
    seg.hints(q.index).expect("hint word")
}

#[test]
fn priorities_a_take_picks_the_most_urgent_level_and_the_flavor_within_it() {
    for flavor in [Flavor::Lifo, Flavor::Fifo] {
        let (_dir, seg, q, _) = segment(4, 0, flavor);
        let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
        let injector = Injector::new(seg.clone(), &q, 1).unwrap();
        for n in 0..40u8 {
            let p = n as u32 * 7 % 4;
            if n % 3 == 0 {
                injector.push_priority(&[p as u8, n], p).unwrap();
            } else {
                owner.push_priority(&[p as u8, n], p).unwrap();
            }
        }
        let got = take_all(&Thief::new(seg.clone(), &q, 2).unwrap());
        assert_eq!(got.len(), 40);
        let priorities: Vec<u8> = got.iter().map(|j| j[0]).collect();
        assert!(priorities.windows(2).all(|w| w[0] <= w[1]), "{flavor:?}: {priorities:?}");
        // A thief takes the oldest of a deque and the ring is FIFO: within a level, the
        // owner's jobs come in push order, as do the injector's.
        for p in 0..4u8 {
            let owned: Vec<u8> = got.iter().filter(|j| j[0] == p && j[1] % 3 != 0).map(|j| j[1]).collect();
            assert!(owned.windows(2).all(|w| w[0] < w[1]), "level {p}: {owned:?}");
        }
    }
}

#[test]
fn priorities_an_owner_pops_by_level_and_lifo_within_one() {
    let (_dir, seg, q, _) = segment(3, 0, Flavor::Lifo);
    let owner = Owner::new(seg, &q, 0, 0).unwrap();
    for (p, n) in [(2, 0), (0, 1), (1, 2), (0, 3), (2, 4)] {
        owner.push_priority(&[p as u8, n], p).unwrap();
    }
    let mut got = Vec::new();
    while let Some(j) = owner.pop().unwrap() {
        got.push(j.payload().unwrap()[1]);
        j.ack().unwrap();
    }
    assert_eq!(got, [3, 1, 2, 4, 0]);
}

#[test]
fn priorities_a_priority_past_the_levels_is_refused_naming_the_flags() {
    let (_dir, seg, q, other) = segment(4, 0, Flavor::Lifo);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    let e = owner.push_priority(b"x", 4).unwrap_err();
    assert!(matches!(e, PushError::Priority { priority: 4, levels: 4, .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("--priority 4") && msg.contains("--levels 4"), "{msg}");
    let one = Injector::new(seg, &other, 1).unwrap();
    assert!(matches!(one.push_priority(b"x", 1), Err(PushError::Priority { levels: 1, .. })));
}

#[test]
fn priorities_levels_that_do_not_fit_are_refused_at_create() {
    let (_dir, seg, _, _) = segment(1, 0, Flavor::Lifo);
    seg.delete_queue_at(1, false).unwrap();
    for spec in [
        QueueSpec { levels: 0, ..QueueSpec::new("a") },
        QueueSpec { levels: 9, ..QueueSpec::new("a") },
        QueueSpec { levels: 3, deques: 3, ..QueueSpec::new("a") },
    ] {
        let e = seg.create_queue(&spec).unwrap_err();
        assert!(matches!(&e, QueueError::BadSpec(m) if m.contains("--levels")), "{e}");
    }
}

#[test]
fn priorities_a_one_level_queue_writes_no_hint() {
    let (_dir, seg, _, other) = segment(4, 0, Flavor::Lifo);
    let owner = Owner::new(seg.clone(), &other, 0, 0).unwrap();
    owner.push(b"a").unwrap();
    let thief = Thief::new(seg.clone(), &other, 1).unwrap();
    thief.steal().unwrap().unwrap().ack().unwrap();
    assert!(thief.steal().unwrap().is_none());
    assert_eq!(hints(&seg, &other).load(Ordering::Relaxed), 0);
}

#[test]
fn priorities_a_give_back_keeps_the_level() {
    let (_dir, seg, q, _) = segment(4, 0, Flavor::Fifo);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    let thief = Thief::new(seg.clone(), &q, 1).unwrap();
    owner.push_priority(&[2, 0], 2).unwrap();
    thief.steal().unwrap().unwrap().nack().unwrap();
    owner.push_priority(&[3, 1], 3).unwrap();
    owner.push_priority(&[1, 2], 1).unwrap();
    let got = take_all(&thief);
    assert_eq!(got, [[1, 2], [2, 0], [3, 1]]);
}

#[test]
fn priorities_aging_takes_from_the_least_urgent_level_every_nth_take() {
    let (_dir, seg, q, _) = segment(4, 3, Flavor::Fifo);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    for n in 0..6u8 {
        owner.push_priority(&[0, n], 0).unwrap();
    }
    owner.push_priority(&[3, 6], 3).unwrap();
    owner.push_priority(&[2, 7], 2).unwrap();
    let got: Vec<u8> = take_all(&Thief::new(seg, &q, 1).unwrap()).iter().map(|j| j[1]).collect();
    // Takes 3 and 6 (every third) are aged: the least urgent non-empty level first.
    assert_eq!(got, [0, 1, 6, 2, 3, 7, 4, 5]);
}

#[test]
fn priorities_a_cleared_or_garbage_hint_word_hides_no_job() {
    let (_dir, seg, q, other) = segment(4, 0, Flavor::Lifo);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    let bystander = Owner::new(seg.clone(), &other, 0, 2).unwrap();
    bystander.push(b"other").unwrap();
    for (p, n) in [(3, 0), (1, 1), (2, 2), (0, 3)] {
        owner.push_priority(&[p as u8, n], p).unwrap();
    }
    let thief = Thief::new(seg.clone(), &q, 1).unwrap();
    for garbage in [0, u32::MAX, 0xFFFF_FF00, 0b0100] {
        hints(&seg, &q).store(garbage, Ordering::Relaxed);
        let j = thief.steal().unwrap().expect("a job despite the hint word");
        j.ack().unwrap();
    }
    assert!(thief.steal().unwrap().is_none());
    let other_thief = Thief::new(seg.clone(), &other, 1).unwrap();
    assert_eq!(other_thief.steal().unwrap().unwrap().payload().unwrap(), b"other");
}

#[test]
fn priorities_a_garbage_priority_or_level_count_stays_in_its_queue() {
    let (_dir, seg, q, other) = segment(2, 0, Flavor::Fifo);
    let owner = Owner::new(seg.clone(), &q, 0, 0).unwrap();
    let h = owner.push_priority(&[1, 0], 1).unwrap();
    let thief = Thief::new(seg.clone(), &q, 1).unwrap();
    let j = thief.steal().unwrap().unwrap();
    // Every priority bit set: the give-back goes to the last level, not past it.
    let hdr = seg.records().header(h.index).unwrap();
    hdr.flags.fetch_or(PRIORITY_MASK << PRIORITY_SHIFT, Ordering::Relaxed);
    j.nack().unwrap();
    assert_eq!(seg.level_depths(&q), [0, 1]);
    thief.steal().unwrap().expect("the job, from the last level").ack().unwrap();
    assert_eq!(hdr.flags.load(Ordering::Relaxed) & priority_flags(PRIORITY_MASK), priority_flags(7));
    // A garbage level count: the queue reads as corrupt, the other queue as it was.
    let control: &QueueControl = seg.queue_control(q.index).unwrap();
    control.levels.store(1000, Ordering::Relaxed);
    assert!(matches!(seg.queue(q.index), Err(QueueError::Corrupt { .. })));
    assert!(seg.overflow(q.index).is_none() && seg.overflow_rings(q.index).is_empty());
    assert!(seg.index_at_level(q.index, h.index).is_err(), "nothing indexed in a ring cut unknown");
    assert_eq!(seg.queue(other.index).unwrap(), other);
    control.levels.store(2, Ordering::Relaxed);
    assert_eq!(seg.queue(q.index).unwrap(), q);
}

#[test]
fn priorities_a_dead_owners_deques_are_repaired_at_every_level() {
    let (_dir, seg, q, _) = segment(3, 0, Flavor::Lifo);
    let deque = |d: u32| seg.deque_header(q.index, d).unwrap();
    // Deque 0 leased by slot 5; its level-2 deque (index 2) left by a pop that died after
    // lowering `bottom` below `top`.
    deque(0).lease.store(crate::layout::lease_word(5, 1), Ordering::Relaxed);
    deque(2).top.store(7, Ordering::Relaxed);
    deque(2).bottom.store(6, Ordering::Relaxed);
    assert_eq!(crate::recovery::release_deque_leases(&seg, 5), [(q.index, 0)]);
    assert_eq!(deque(2).bottom.load(Ordering::Relaxed), 7);
    assert_eq!(deque(0).lease.load(Ordering::Relaxed), 0);
}
