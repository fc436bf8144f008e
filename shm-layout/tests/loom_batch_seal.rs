//! loom model of a batch's seal against a push into it (`shm-layout/src/batch_seal.rs`).
//!
//! Run with (see `.ci/loom`)
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg xtcq_loom" cargo test -p xtcq-shm --release --test loom_batch_seal`.
//!
//! A producer joins a record to an open batch while the daemon seals it and walks the
//! references. Property, at the end of every interleaving: a push that found the batch open
//! (and so keeps its job) is seen by the walk after the seal; otherwise the daemon could
//! complete the batch with that job still to run. With `--cfg xtcq_loom_drop_batch_fence`
//! the push's fence is gone and the model must find the interleaving that loses it.
#![cfg(xtcq_loom)]

mod loom_support;
use loom_support::explore;

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use xtcq_shm::batch_seal::{before_walk, join, seal};

const OPEN: u64 = 1;
const SEALED: u64 = 2;
const REFERENCE: u64 = 7;

/// `(the push kept its job, the walk after the seal saw its reference)`.
fn model(start: loom_support::Start) -> (bool, bool) {
    let batch = Arc::new(AtomicU64::new(OPEN));
    let record = Arc::new(AtomicU64::new(0));
    let (b, r) = (batch.clone(), record.clone());
    let push = thread::spawn(move || join(&r, REFERENCE, &b) == OPEN);
    start.after_spawn();
    assert!(seal(&batch, OPEN, SEALED));
    let w = before_walk(&batch);
    assert_eq!(w, SEALED);
    let seen = record.load(Ordering::Relaxed) == REFERENCE;
    let kept = push.join().unwrap();
    (kept, seen)
}

#[test]
fn a_push_that_found_the_batch_open_is_seen_by_the_walk_after_the_seal() {
    let outcomes = explore("batch seal", 3, model);
    let lost = outcomes.contains(&(true, false));
    if cfg!(xtcq_loom_drop_batch_fence) {
        assert!(lost, "without the push's fence the model must lose a push: {outcomes:?}");
    } else {
        assert!(!lost, "a push kept in a sealed batch the walk did not see: {outcomes:?}");
    }
}
