//! Red team 6: a loom model of the overflow ring's `tail <= head + capacity` after a popper
//! died in a full ring (`shm-layout/src/overflow.rs`).
//!
//! Run with
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg xtcq_loom" cargo test -p xtcq-shm --release --test loom_overflow_full`.
//!
//! - The ring (capacity 2) is full, and the popper of its `head` cell died after its cell CAS,
//!   before its `head` CAS. A pusher into the freed cell races a popper: whoever comes first,
//!   no thread sees `tail` past `head + capacity` (each reads `tail` before `head`: `head`
//!   never moves back, so a pair past it would be a real crossing), and the indices left in
//!   the ring come out once.
//! - `check`'s reads of a live ring (`OverflowRef::span`) see neither invariant broken while a
//!   pusher and a popper move the ring on.
#![cfg(xtcq_loom)]

mod loom_support;
use loom_support::explore;

use std::collections::BTreeSet;

use loom::sync::atomic::Ordering;
use loom::sync::Arc;
use loom::thread;
use xtcq_shm::overflow::HeapOverflow;

/// As in `loom_overflow.rs`.
const PREEMPTIONS: usize = 4;

/// `tail - head` read in that order, for the invariant.
fn span(v: &xtcq_shm::overflow::OverflowRef<'_>) -> (u64, u64) {
    let (_, t) = v.positions();
    let (h, _) = v.positions();
    (h, t)
}

#[test]
fn a_pusher_after_a_dead_popper_of_a_full_ring_never_passes_head_plus_capacity() {
    let seen = explore("a_pusher_after_a_dead_popper_of_a_full_ring", PREEMPTIONS, |start| {
        let ring = Arc::new(HeapOverflow::new(2));
        {
            let v = ring.view().unwrap();
            v.push(9).unwrap();
            assert_eq!(v.pop().unwrap(), Some(9));
            v.push(5).unwrap();
            v.push(6).unwrap();
        }
        // Position 1 (cell 1, lap 0) popped by a process that died before moving `head`:
        // the cell is EMPTY(lap 1), `head` still 1, `tail` 3.
        ring.cells()[1].store(1u64 << 32, Ordering::Release);
        let r2 = ring.clone();
        let popper = thread::spawn(move || {
            let v = r2.view().unwrap();
            let got = v.pop().unwrap();
            let (h, t) = span(&v);
            assert!(t <= h + 2, "popper saw tail {t} past head {h} + 2");
            got
        });
        start.after_spawn();
        let v = ring.view().unwrap();
        v.push(7).unwrap();
        let (h, t) = span(&v);
        assert!(t <= h + 2, "pusher saw tail {t} past head {h} + 2");
        let first = popper.join().unwrap();
        let mut popped: Vec<u32> = first.into_iter().collect();
        while let Some(i) = v.pop().unwrap() {
            popped.push(i);
        }
        assert_eq!(popped, [6, 7], "first pop {first:?}");
        assert_eq!(v.positions(), (4, 4));
        first
    });
    assert_eq!(seen, BTreeSet::from([Some(6)]));
}

/// `check` on a live ring: a reader takes `span` (as `check` does) while a pusher and popper
/// move on. Neither invariant may look broken to it when none is: `head <= tail` against its
/// first `head`, `tail <= head + capacity` against the `head` read after `tail`. (With the
/// one `head` read before `tail` that `check` compared against, loom finds tail 4, head 1.)
#[test]
fn a_check_of_a_live_ring_sees_no_crossing_that_did_not_happen() {
    explore("a_check_of_a_live_ring", PREEMPTIONS, |start| {
        let ring = Arc::new(HeapOverflow::new(2));
        {
            let v = ring.view().unwrap();
            v.push(9).unwrap();
            assert_eq!(v.pop().unwrap(), Some(9));
        }
        let r2 = ring.clone();
        let worker = thread::spawn(move || {
            let v = r2.view().unwrap();
            v.push(1).unwrap();
            v.push(2).unwrap();
            assert_eq!(v.pop().unwrap(), Some(1));
            v.push(3).unwrap();
        });
        start.after_spawn();
        let v = ring.view().unwrap();
        let (head, tail, head_after) = v.span();
        assert!(head <= tail, "check saw head {head} past tail {tail}");
        assert!(tail <= head_after + 2, "check saw tail {tail} past head {head_after} + 2");
        worker.join().unwrap();
    });
}
