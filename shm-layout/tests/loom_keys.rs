//! loom models of the key table's protocol (`shm-layout/src/keys.rs`): bind under the home
//! lock, the claim of an entry by CAS, the seqlock read of an entry, and a job that ends
//! while a push of its key looks at it.
//!
//! Run with (see `.ci/loom`)
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg xtcq_loom" cargo test -p xtcq-shm --release --test loom_keys`.
//!
//! A job's liveness stands for its record's state word: set before the bind (the record is
//! `Filling` first), cleared with Release when the job ends (the ack's Release CAS), read
//! with Acquire by the protocol (the record's Acquire load). "Never two live jobs of one
//! key" is checked with a counter each winner raises while its job is live: it must find it
//! at zero.
#![cfg(xtcq_loom)]

mod loom_support;
use loom_support::explore;

use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;
use xtcq_shm::keys::{bind, find, Key, KeyEntry, KeyEnv, KeyError};
use xtcq_shm::JobId;

const PREEMPTIONS: usize = 10;
const QUEUE: u32 = 0;

/// The jobs' liveness and the "running" counter of the key under test.
struct World {
    entries: Vec<KeyEntry>,
    live: Vec<AtomicU32>,
    running: AtomicU32,
}

impl KeyEnv for World {
    fn live(&self, _queue: u32, id: JobId) -> bool {
        self.live.get(id.index as usize).is_some_and(|l| l.load(Ordering::Acquire) == 1)
    }
    fn holder_alive(&self, _word: u64) -> bool {
        true
    }
    fn give_up(&self, _tries: u32) -> bool {
        false
    }
}

fn world(entries: usize, jobs: usize) -> Arc<World> {
    Arc::new(World {
        entries: (0..entries).map(|_| KeyEntry::free()).collect(),
        live: (0..jobs).map(|_| AtomicU32::new(0)).collect(),
        running: AtomicU32::new(0),
    })
}

fn job(index: u32) -> JobId {
    JobId { index, birth: 1 }
}

/// A key named `prefix` + a number whose home in a table of `n` is `home`.
fn key_at(prefix: &str, home: usize, n: usize) -> Key {
    (0..)
        .map(|i| Key::new(format!("{prefix}{i}").as_bytes()).unwrap())
        .find(|k| k.home(QUEUE, n) == home)
        .unwrap()
}

/// A push of `key` as job `j` by slot `slot`: live first, bound, then (if it won) run and
/// ended. Returns whether it won.
fn push_and_run(w: &World, key: &Key, j: u32, slot: u32) -> Result<(), KeyError> {
    w.live[j as usize].store(1, Ordering::Relaxed);
    let r = bind(&w.entries, QUEUE, key, job(j), (slot, slot as u64 + 1), w);
    match r {
        Ok(()) => {
            assert_eq!(w.running.fetch_add(1, Ordering::SeqCst), 0, "two live jobs of one key");
            w.running.fetch_sub(1, Ordering::SeqCst);
            // The ack: Release, as the record's.
            w.live[j as usize].store(0, Ordering::Release);
        }
        Err(_) => w.live[j as usize].store(0, Ordering::Relaxed),
    }
    r
}

#[test]
fn two_pushers_of_one_key_never_both_hold_it() {
    let seen = explore("two_pushers_of_one_key", PREEMPTIONS, |start| {
        let w = world(2, 3);
        let k = key_at("k", 0, 2);
        let (w2, k2) = (w.clone(), k.clone());
        let b = thread::spawn(move || push_and_run(&w2, &k2, 2, 2).is_ok());
        start.after_spawn();
        let a = push_and_run(&w, &k, 1, 1).is_ok();
        (a, b.join().unwrap())
    });
    // One after the other (the first had ended), or one refused.
    assert!(seen.contains(&(true, true)) && seen.contains(&(true, false)) && seen.contains(&(false, true)));
    assert!(!seen.contains(&(false, false)), "one of them always gets it: {seen:?}");
}

#[test]
fn two_threads_of_one_process_never_both_hold_a_key() {
    // One process slot, one lock word: the second thread waits for the first's lock.
    let seen = explore("two_threads_one_slot", PREEMPTIONS, |start| {
        let w = world(2, 3);
        let k = key_at("k", 0, 2);
        let (w2, k2) = (w.clone(), k.clone());
        let b = thread::spawn(move || push_and_run(&w2, &k2, 2, 1).is_ok());
        start.after_spawn();
        let a = push_and_run(&w, &k, 1, 1).is_ok();
        (a, b.join().unwrap())
    });
    assert!(seen.contains(&(true, false)) && seen.contains(&(false, true)), "{seen:?}");
}

#[test]
fn two_keys_racing_for_one_entry_one_claims_it() {
    let seen = explore("two_keys_one_entry", PREEMPTIONS, |start| {
        let w = world(2, 4);
        // Entry 1 holds a live job of another key: both windows have only entry 0 free.
        w.live[3].store(1, Ordering::Relaxed);
        let x = key_at("x", 1, 2);
        bind(&w.entries, QUEUE, &x, job(3), (3, 4), &*w).unwrap();
        let (a_key, b_key) = (key_at("a", 0, 2), key_at("b", 1, 2));
        let (w2, bk) = (w.clone(), b_key.clone());
        let b = thread::spawn(move || {
            w2.live[2].store(1, Ordering::Relaxed);
            bind(&w2.entries, QUEUE, &bk, job(2), (2, 3), &*w2)
        });
        start.after_spawn();
        w.live[1].store(1, Ordering::Relaxed);
        let a = bind(&w.entries, QUEUE, &a_key, job(1), (1, 2), &*w);
        let b = b.join().unwrap();
        // The winner's entry reads back whole: its key with its job.
        match (&a, &b) {
            (Ok(()), Err(KeyError::Full { .. })) => {
                assert_eq!(find(&w.entries, QUEUE, &a_key, &*w), Some(job(1)))
            }
            (Err(KeyError::Full { .. }), Ok(())) => {
                assert_eq!(find(&w.entries, QUEUE, &b_key, &*w), Some(job(2)))
            }
            other => panic!("both or neither claimed the one entry: {other:?}"),
        }
        a.is_ok()
    });
    assert_eq!(seen.len(), 2, "either may win: {seen:?}");
}

#[test]
fn a_push_racing_the_end_of_its_keys_job() {
    let seen = explore("push_vs_end", PREEMPTIONS, |start| {
        let w = world(2, 3);
        let k = key_at("k", 0, 2);
        w.live[1].store(1, Ordering::Relaxed);
        bind(&w.entries, QUEUE, &k, job(1), (1, 2), &*w).unwrap();
        let w2 = w.clone();
        let ender = thread::spawn(move || w2.live[1].store(0, Ordering::Release));
        start.after_spawn();
        w.live[2].store(1, Ordering::Relaxed);
        let r = bind(&w.entries, QUEUE, &k, job(2), (2, 3), &*w);
        ender.join().unwrap();
        match r {
            Ok(()) => {
                assert_eq!(find(&w.entries, QUEUE, &k, &*w), Some(job(2)));
                "took over"
            }
            Err(KeyError::Duplicate { existing }) => {
                assert_eq!(existing, job(1));
                "refused"
            }
            Err(e) => panic!("{e:?}"),
        }
    });
    assert_eq!(seen.len(), 2, "both outcomes reached: {seen:?}");
}

#[test]
fn a_reader_never_sees_an_entry_half_rewritten() {
    let seen = explore("seqlock_read", PREEMPTIONS, |start| {
        let w = world(1, 3);
        let old = key_at("o", 0, 1);
        let new = key_at("n", 0, 1);
        // The old key's job ended; its entry is taken over by a push of another key.
        w.live[1].store(1, Ordering::Relaxed);
        bind(&w.entries, QUEUE, &old, job(1), (1, 2), &*w).unwrap();
        w.live[1].store(0, Ordering::Relaxed);
        w.live[2].store(1, Ordering::Relaxed);
        let (w2, n2) = (w.clone(), new.clone());
        let writer = thread::spawn(move || bind(&w2.entries, QUEUE, &n2, job(2), (2, 3), &*w2).unwrap());
        start.after_spawn();
        // The old key is never found with the new job, whatever the reader meets.
        let found = find(&w.entries, QUEUE, &old, &*w);
        assert_eq!(found, None, "the old key read with the new job: a torn entry");
        let found_new = find(&w.entries, QUEUE, &new, &*w);
        writer.join().unwrap();
        found_new.is_some()
    });
    assert_eq!(seen.len(), 2, "the reader ran both before and after the write: {seen:?}");
}
