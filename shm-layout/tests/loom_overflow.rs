//! loom models of the overflow ring (`shm-layout/src/overflow.rs`).
//!
//! Run with (see `.ci/loom`)
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg xtcq_loom" cargo test -p xtcq-shm --release --test loom_overflow`.
//!
//! The ring has capacity 2 and is first advanced by one push and pop, so that the model's
//! pushes straddle a lap boundary (position 1 is lap 0, position 2 is lap 1 of cell 0).
//! Each model is checked with the main thread first and with the spawned threads first (see
//! `loom_deque.rs` for why), and asserts that the racy outcomes were reached.
#![cfg(xtcq_loom)]

mod loom_support;
use loom_support::explore;

use std::collections::BTreeSet;

use loom::sync::atomic::Ordering;
use loom::sync::Arc;
use loom::thread;
use xtcq_shm::overflow::{full_cell_for, HeapOverflow};

/// Default preemption bound. Three threads on a retrying ring grow fast (the two-pusher
/// model: ~3k interleavings at 3, ~32k at 5, ~570k at 20, a minute); 4 keeps it near a second.
const PREEMPTIONS: usize = 4;

/// A ring of capacity 2 with `head == tail == 1`.
fn advanced_ring() -> Arc<HeapOverflow> {
    let ring = Arc::new(HeapOverflow::new(2));
    let v = ring.view().unwrap();
    v.push(9).unwrap();
    assert_eq!(v.pop().unwrap(), Some(9));
    ring
}

/// After the dead pusher's 5 (position 1) and a live push of 6, and `first` popped while
/// they raced: the rest drains so that 5 and 6 each came out once, in FIFO order (6 can
/// only go to position 2), and `head == tail` past both.
fn drain_after_dead_pusher(ring: &HeapOverflow, first: Option<u32>) {
    let v = ring.view().unwrap();
    let mut popped: Vec<u32> = first.into_iter().collect();
    while let Some(i) = v.pop().unwrap() {
        popped.push(i);
    }
    assert_eq!(popped, [5, 6], "first pop {first:?}");
    assert_eq!(v.positions(), (3, 3));
}

/// Two pushers and one popper: every index comes out exactly once.
#[test]
fn two_pushers_one_popper_each_index_once() {
    let seen = explore("two_pushers_one_popper_each_index_once", PREEMPTIONS, |start| {
        let ring = advanced_ring();
        let pushers: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|i| {
                let ring = ring.clone();
                thread::spawn(move || ring.view().unwrap().push(i).unwrap())
            })
            .collect();
        start.after_spawn();
        let v = ring.view().unwrap();
        let mut popped = Vec::new();
        for _ in 0..2 {
            if let Some(i) = v.pop().unwrap() {
                popped.push(i);
            }
        }
        for p in pushers {
            p.join().unwrap();
        }
        let concurrent = popped.clone();
        while let Some(i) = v.pop().unwrap() {
            popped.push(i);
        }
        popped.sort_unstable();
        assert_eq!(popped, [1, 2], "popped while pushing: {concurrent:?}");
        assert_eq!(v.positions(), (3, 3));
        concurrent
    });
    // Popped nothing, one (either), or both in either order while the pushes ran.
    for want in [&[][..], &[1], &[2], &[1, 2], &[2, 1]] {
        assert!(seen.contains(want), "never saw {want:?}: {seen:?}");
    }
}

/// A pusher died between its cell CAS and its `tail` CAS (the cell at position 1 is full,
/// `tail` still 1). A live pusher must help `tail` on and push after it, and a popper must
/// find both indices; neither may be lost or popped twice.
#[test]
fn dead_pusher_is_helped_past() {
    let seen = explore("dead_pusher_is_helped_past", PREEMPTIONS, |start| {
        let ring = advanced_ring();
        ring.cells()[1].store(full_cell_for(1, 2, 5), Ordering::Release);
        let r2 = ring.clone();
        let pusher = thread::spawn(move || r2.view().unwrap().push(6).unwrap());
        start.after_spawn();
        let v = ring.view().unwrap();
        let first = v.pop().unwrap();
        pusher.join().unwrap();
        drain_after_dead_pusher(&ring, first);
        first
    });
    assert_eq!(seen, BTreeSet::from([Some(5)]));
}

/// A pusher died between its cell CAS and its `tail` CAS, and a popper races a live pusher.
/// Whoever comes first, `head` never passes `tail` (each reads `head` before `tail`, and
/// `tail` never moves back, so a read pair with `head > tail` would be a real crossing), and
/// both indices come out once.
#[test]
fn a_popper_after_a_dead_pusher_never_passes_tail() {
    let seen = explore("a_popper_after_a_dead_pusher_never_passes_tail", PREEMPTIONS, |start| {
        let ring = advanced_ring();
        ring.cells()[1].store(full_cell_for(1, 2, 5), Ordering::Release);
        let r2 = ring.clone();
        let popper = thread::spawn(move || {
            let v = r2.view().unwrap();
            let got = v.pop().unwrap();
            let (h, t) = v.positions();
            assert!(h <= t, "popper saw head {h} past tail {t}");
            got
        });
        start.after_spawn();
        let v = ring.view().unwrap();
        v.push(6).unwrap();
        let (h, t) = v.positions();
        assert!(h <= t, "pusher saw head {h} past tail {t}");
        let first = popper.join().unwrap();
        drain_after_dead_pusher(&ring, first);
        first
    });
    assert_eq!(seen, BTreeSet::from([Some(5)]));
}

/// A ring of capacity 4 with `head == tail == 3`: a run of two from there straddles a lap.
fn ring_before_a_lap() -> Arc<HeapOverflow> {
    let ring = Arc::new(HeapOverflow::new(4));
    let v = ring.view().unwrap();
    for i in 0..3 {
        v.push(i).unwrap();
        assert_eq!(v.pop().unwrap(), Some(i));
    }
    ring
}

/// A run of two (`push_run`, `tail` moved once past both) beside a single push and a
/// popper: every index comes out exactly once, the run's in its order, `head` never past
/// `tail` as the popper reads them, and the ring ends empty past all three.
#[test]
fn a_run_beside_a_pusher_and_a_popper_each_index_once() {
    let seen = explore("a_run_beside_a_pusher_and_a_popper_each_index_once", 3, |start| {
        let ring = ring_before_a_lap();
        let r1 = ring.clone();
        let run = thread::spawn(move || r1.view().unwrap().push_run(&[1, 2]).unwrap());
        let r2 = ring.clone();
        let single = thread::spawn(move || r2.view().unwrap().push(3).unwrap());
        start.after_spawn();
        let v = ring.view().unwrap();
        let mut popped = Vec::new();
        for _ in 0..2 {
            if let Some(i) = v.pop().unwrap() {
                popped.push(i);
            }
            let (h, t) = v.positions();
            assert!(h <= t, "popper saw head {h} past tail {t}");
        }
        run.join().unwrap();
        single.join().unwrap();
        let concurrent = popped.len();
        while let Some(i) = v.pop().unwrap() {
            popped.push(i);
        }
        let run_order: Vec<u32> = popped.iter().copied().filter(|&i| i != 3).collect();
        assert_eq!(run_order, [1, 2], "the run's order, in {popped:?}");
        assert_eq!(popped.len(), 3, "each once: {popped:?}");
        assert_eq!(v.positions(), (6, 6));
        (concurrent, popped.iter().position(|&i| i == 3).unwrap())
    });
    // The single push lands before, between or after the run's two, and the popper took
    // none, some or all while they raced.
    for place in 0..3 {
        assert!(seen.iter().any(|&(_, p)| p == place), "3 never came out at place {place}: {seen:?}");
    }
    assert!(seen.iter().any(|&(c, _)| c == 2), "the popper never took two while they pushed: {seen:?}");
}
