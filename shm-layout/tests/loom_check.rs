//! Red team 6: a loom model of `check`'s reads of a live deque (`shm-layout/src/check.rs`).
//!
//! Run with
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg xtcq_loom" cargo test -p xtcq-shm --release --test loom_check`.
//!
//! - While the owner pushes and a thief steals, `check`'s reads of `top` and `bottom` see
//!   neither `top <= bottom + 1` nor `bottom - top <= capacity` broken: the first against the
//!   `top` read before `bottom`, the second against a `top` read after it (`top` only grows,
//!   so a `top` read before `bottom` may be one the deque has since left behind).
#![cfg(xtcq_loom)]

mod loom_support;
use loom_support::explore;

use loom::sync::Arc;
use loom::thread;
use xtcq_shm::{DequeOwner, Flavor, HeapDeque, Steal};

/// As in `loom_deque.rs`'s small models.
const PREEMPTIONS: usize = 3;

#[test]
fn a_check_of_a_live_deque_sees_no_overfull_deque() {
    explore("a_check_of_a_live_deque", PREEMPTIONS, |start| {
        let d = Arc::new(HeapDeque::new(2));
        let d2 = d.clone();
        let worker = thread::spawn(move || {
            let owner = DequeOwner::adopt(d2.view(Flavor::Fifo).unwrap());
            owner.push(1).unwrap();
            owner.push(2).unwrap();
            assert!(matches!(d2.view(Flavor::Fifo).unwrap().steal(), Steal::Success(1)));
            owner.push(3).unwrap();
        });
        start.after_spawn();
        let (top, bottom, top_after) = d.view(Flavor::Fifo).unwrap().span();
        assert!(top <= bottom + 1, "check saw top {top} > bottom {bottom} + 1");
        assert!(bottom - top_after <= 2, "check saw bottom {bottom} - top {top_after} > 2");
        worker.join().unwrap();
    });
}
