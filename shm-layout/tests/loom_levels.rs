//! loom model of the priority levels' hint word (`shm-layout/src/levels.rs`): a producer that
//! indexes a job at a level and marks the level's bit, against a consumer that finds the level
//! empty and clears the bit.
//!
//! Run with (see `.ci/loom`)
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg xtcq_loom" cargo test -p xtcq-shm --release --test loom_levels`.
//!
//! The level is one job slot (a Release store, taken with a CAS, as a claim is one RMW).
//! Property, checked at the end of every interleaving: **no hidden job** — a job left in the
//! level has its bit set, so the next consumer looks there first. With
//! `--cfg xtcq_loom_drop_hint_fence` (the consumer's fence compiled out) loom must find the
//! interleaving where the bit stays clear over a job.
#![cfg(xtcq_loom)]

mod loom_support;
use loom_support::explore;

use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;
use xtcq_shm::levels::{clear, mark};

const PREEMPTIONS: usize = 3;
const LEVEL: u32 = 1;
const BIT: u32 = 1 << LEVEL;

struct Level {
    job: AtomicU32,
    hints: AtomicU32,
}

impl Level {
    /// A consumer's take at the level: the job if there is one, else the bit is cleared and
    /// the level looked at again.
    fn take(&self) -> bool {
        if self.hints.load(Ordering::Relaxed) & BIT == 0 {
            return false;
        }
        if self.job.compare_exchange(1, 0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            return true;
        }
        clear(&self.hints, LEVEL, || self.job.load(Ordering::Acquire) == 0);
        false
    }
}

fn model(start: loom_support::Start) -> (bool, bool) {
    // The bit is set, as a push earlier left it; the level is empty.
    let level = Arc::new(Level { job: AtomicU32::new(0), hints: AtomicU32::new(BIT) });
    let producer = {
        let level = level.clone();
        thread::spawn(move || {
            level.job.store(1, Ordering::Release);
            mark(&level.hints, LEVEL);
        })
    };
    start.after_spawn();
    let took = level.take();
    producer.join().unwrap();
    let left = level.job.load(Ordering::Acquire) == 1;
    let bit = level.hints.load(Ordering::Acquire) & BIT != 0;
    assert!(!left || bit, "a job left at the level with its bit clear (took {took})");
    (took, left)
}

#[test]
#[cfg(not(xtcq_loom_drop_hint_fence))]
fn a_cleared_bit_never_hides_a_pushed_job() {
    let seen = explore("hints", PREEMPTIONS, model);
    // Both outcomes reached: the consumer took the job, and it left it (bit set) for later.
    assert!(seen.contains(&(true, false)) && seen.contains(&(false, true)), "{seen:?}");
}

#[test]
#[cfg(xtcq_loom_drop_hint_fence)]
fn without_the_fence_a_bit_is_left_clear_over_a_job() {
    let r = std::panic::catch_unwind(|| explore("hints without the fence", PREEMPTIONS, model));
    assert!(r.is_err(), "loom found no hidden job without the consumer's fence");
}
