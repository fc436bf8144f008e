//! loom models of the payload block's owner word (`shm-layout/src/record/block_owner.rs`)
//! beside the record's state word.
//!
//! Run with (see `.ci/loom`)
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg xtcq_loom" cargo test -p xtcq-shm --release --test loom_blocks`.
//!
//! The block's bytes are a `loom::cell::UnsafeCell`: loom reports a causality violation
//! unless the last holder's read of them happens before the next holder's write, whichever
//! of the acker and the sweep gave the block back. The properties: exactly one process takes
//! a free block; the sweep never frees a block whose job is alive (being filled, queued or
//! held), so the holder's read never races a new owner's write; after an ack the block is
//! free again, given back by the acker or by the sweep, never twice.
#![cfg(xtcq_loom)]

mod loom_support;
use loom_support::explore;

use std::collections::BTreeSet;

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use xtcq_shm::record::block_owner::{give_back, is_live, owner_word, take};
use xtcq_shm::record::state::BIRTH_SHIFT;
use xtcq_shm::{RecordState, State, StateWord, NO_HOLDER};

const PREEMPTIONS: usize = 10;
const A: u32 = 1;
const B: u32 = 2;

/// One record (index 0) and one block.
struct World {
    state: AtomicU64,
    flags: AtomicU32,
    owner: AtomicU64,
    bytes: UnsafeCell<u64>,
}

// SAFETY: `bytes` is touched only by the block's holder; loom checks the accesses are ordered.
unsafe impl Sync for World {}

impl World {
    fn new(state: u64, birth: u32, owner: u64) -> Arc<Self> {
        Arc::new(World {
            state: AtomicU64::new(state),
            flags: AtomicU32::new(birth << BIRTH_SHIFT),
            owner: AtomicU64::new(owner),
            bytes: UnsafeCell::new(0),
        })
    }
    fn st(&self) -> RecordState<'_> {
        RecordState(&self.state)
    }
    /// One pass of the sweep over the one block: frees it when its job is not alive.
    fn sweep(&self) -> bool {
        let w = self.owner.load(Ordering::Acquire);
        if w == 0 {
            return false;
        }
        let s = StateWord(self.state.load(Ordering::Acquire));
        !is_live(w, s, self.flags.load(Ordering::Relaxed)) && give_back(&self.owner, w)
    }
    fn read(&self) -> u64 {
        // SAFETY: see `impl Sync`.
        self.bytes.with(|p| unsafe { *p })
    }
    fn write(&self, v: u64) {
        // SAFETY: see `impl Sync`.
        self.bytes.with_mut(|p| unsafe { *p = v })
    }
}

/// A holds the job (Claimed, its block held since its birth at generation 1), reads the
/// block, acks, gives the block back; the sweep runs meanwhile; B fills the record again
/// (generation 2) once it is free, waits for the block and writes it. B's write never races
/// A's read, the sweep never frees B's block, and A's is given back exactly once.
#[test]
fn acker_sweep_and_next_allocator() {
    // Two spinning threads: 4 preemptions reach both outcomes in seconds, 10 take minutes.
    let seen = explore("acker_sweep_and_next_allocator", 4, |start| {
        let w = World::new(StateWord::pack(1, State::Claimed, A).0, 1, owner_word(0, 1));
        let (w2, w3) = (w.clone(), w.clone());
        let sweeper = thread::spawn(move || w2.sweep());
        let next = thread::spawn(move || {
            let g = loop {
                match w3.st().begin_fill(B) {
                    Ok(g) => break g,
                    Err(_) => thread::yield_now(),
                }
            };
            while !take(&w3.owner, owner_word(0, g)) {
                thread::yield_now();
            }
            w3.write(42);
        });
        start.after_spawn();
        assert_eq!(w.read(), 0);
        w.st().ack(1, A).unwrap();
        let by_acker = give_back(&w.owner, owner_word(0, 1));
        let by_sweep = sweeper.join().unwrap();
        next.join().unwrap();
        assert!(by_acker ^ by_sweep, "given back once: acker {by_acker}, sweep {by_sweep}");
        assert_eq!(w.owner.load(Ordering::Relaxed), owner_word(0, 2));
        by_sweep
    });
    assert_eq!(seen, BTreeSet::from([false, true]), "both the acker and the sweep gave it back");
}

/// P fills the record (Filling at generation 1), takes the block, writes its birth and the
/// block, publishes; the sweep runs meanwhile and must leave the block alone.
#[test]
fn sweep_leaves_a_block_being_filled() {
    explore("sweep_leaves_a_block_being_filled", PREEMPTIONS, |start| {
        let w = World::new(StateWord::pack(1, State::Free, NO_HOLDER).0, 0, 0);
        let w2 = w.clone();
        let sweeper = thread::spawn(move || w2.sweep());
        start.after_spawn();
        let g = w.st().begin_fill(A).unwrap();
        assert!(take(&w.owner, owner_word(0, g)));
        w.write(5);
        w.flags.store(g << BIRTH_SHIFT, Ordering::Relaxed);
        w.st().publish(g, A).unwrap();
        assert!(!sweeper.join().unwrap(), "the sweep freed a block being filled");
        assert_eq!(w.owner.load(Ordering::Relaxed), owner_word(0, g));
    });
}

/// A filler dies after taking the block (recovery frees its record, Filling -> Free); the
/// sweep frees the block, and the next allocator's write is ordered after the first
/// filler's, or the sweep saw the record still Filling and left the block.
#[test]
fn sweep_frees_the_block_of_a_dead_filler() {
    let seen = explore("sweep_frees_the_block_of_a_dead_filler", PREEMPTIONS, |start| {
        let w = World::new(StateWord::pack(1, State::Filling, A).0, 0, owner_word(0, 1));
        w.write(3);
        let w2 = w.clone();
        let recovery = thread::spawn(move || w2.st().free_filling(1, A).is_ok());
        start.after_spawn();
        let freed = w.sweep();
        assert!(recovery.join().unwrap());
        if freed {
            assert!(take(&w.owner, owner_word(0, 2)));
            w.write(4);
        }
        freed
    });
    assert_eq!(seen, BTreeSet::from([false, true]));
}

/// Two allocators race for one free block: exactly one takes it.
#[test]
fn two_allocators_one_block() {
    let seen = explore("two_allocators_one_block", PREEMPTIONS, |start| {
        let w = World::new(0, 0, 0);
        let w2 = w.clone();
        let b = thread::spawn(move || take(&w2.owner, owner_word(B, 1)));
        start.after_spawn();
        let a = take(&w.owner, owner_word(A, 1));
        let b = b.join().unwrap();
        assert!(a ^ b, "exactly one allocator wins: {a} {b}");
        if a {
            A
        } else {
            B
        }
    });
    assert_eq!(seen, BTreeSet::from([A, B]));
}
