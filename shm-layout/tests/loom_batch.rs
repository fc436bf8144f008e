//! loom models of the consumer's batch path (`Thief::steal_batch_claimed`): a batch of
//! handles taken with `DequeRef::steal_up_to_into` (all there is, up to the limit: one CAS on
//! `top` from a FIFO deque, one per handle from a LIFO one), then each record claimed with its
//! own CAS and acked with its own CAS.
//!
//! Run with (see `.ci/loom`)
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg xtcq_loom" cargo test -p xtcq-shm --release --test loom_batch`.
//!
//! The properties: every handle leaves the deque once (the range CAS against the FIFO owner's
//! `take`, the per-handle CAS against the LIFO owner's pops), and, with a duplicated handle in
//! the deque, every record is claimed (and so run) once: the claim CAS is the arbiter, not the
//! index. With `--cfg xtcq_loom_drop_steal_fence` the LIFO model must be caught taking a
//! value twice, as `loom_deque.rs`'s `batch_e5` is. As there, each model runs with either
//! thread first and asserts the racy outcomes were reached (see `loom_deque.rs` on loom's
//! DPOR).
#![cfg(xtcq_loom)]

mod loom_support;
use loom_support::{explore, Start};

use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;
use xtcq_shm::{DequeOwner, Flavor, HeapDeque, RecordState, State, StateWord, Steal, NO_HOLDER};

const PREEMPTIONS: usize = 10;

/// Process slots of the model's two consumers.
const A: u32 = 1;
const B: u32 = 2;

/// What a batch steal took: the handles, or why none.
type Batch = Result<Vec<u64>, &'static str>;

fn batch_of(d: &HeapDeque, flavor: Flavor) -> Batch {
    let mut out = [0u64; 4];
    match d.view(flavor).unwrap().steal_up_to_into(&mut out) {
        Steal::Success(n) => Ok(out[..n].to_vec()),
        Steal::Empty => Err("empty"),
        Steal::Retry => Err("retry"),
    }
}

/// Everything taken, sorted, must be exactly `expect`.
fn exactly_once(mut all: Vec<u64>, expect: &[u64], what: String) {
    all.sort_unstable();
    assert_eq!(all, expect, "duplicate or lost value: {what}");
}

/// FIFO: the owner pushes 1, 2, 3; a thief takes all it sees with one CAS while the owner
/// takes twice from the same end.
fn fifo_up_to_vs_take(start: Start) -> (Batch, [Option<u64>; 2]) {
    let d = Arc::new(HeapDeque::new(4));
    let owner = DequeOwner::adopt(d.view(Flavor::Fifo).unwrap());
    for v in 1..=3 {
        owner.push(v).unwrap();
    }
    let d2 = d.clone();
    let thief = thread::spawn(move || batch_of(&d2, Flavor::Fifo));
    start.after_spawn();
    let takes = [owner.take(), owner.take()];
    let batch = thief.join().unwrap();
    let mut all: Vec<u64> = takes.iter().flatten().copied().collect();
    all.extend(batch.iter().flatten());
    while let Some(x) = owner.take() {
        all.push(x);
    }
    exactly_once(all, &[1, 2, 3], format!("batch {batch:?}, owner's takes {takes:?}"));
    (batch, takes)
}

/// LIFO: the owner pushes 1, 2, 3; a thief takes all it sees, one CAS per handle, while the
/// owner pops twice from the other end (without a CAS while more than one is left).
fn lifo_up_to_vs_pop(start: Start) -> (Batch, [Option<u64>; 2]) {
    let d = Arc::new(HeapDeque::new(4));
    let owner = DequeOwner::adopt(d.view(Flavor::Lifo).unwrap());
    for v in 1..=3 {
        owner.push(v).unwrap();
    }
    let d2 = d.clone();
    let thief = thread::spawn(move || batch_of(&d2, Flavor::Lifo));
    start.after_spawn();
    let pops = [owner.pop(), owner.pop()];
    let batch = thief.join().unwrap();
    let mut all: Vec<u64> = pops.iter().flatten().copied().collect();
    all.extend(batch.iter().flatten());
    while let Some(x) = owner.pop() {
        all.push(x);
    }
    exactly_once(all, &[1, 2, 3], format!("batch {batch:?}, owner's pops {pops:?}"));
    (batch, pops)
}

#[cfg(not(any(xtcq_loom_drop_pop_fence, xtcq_loom_drop_steal_fence)))]
mod full_protocol {
    use super::*;

    #[test]
    fn fifo_batch_up_to_vs_owner_take_each_value_once() {
        let seen = explore("fifo_up_to_vs_take", PREEMPTIONS, fifo_up_to_vs_take);
        // The thief first: all three in one CAS. The owner first: the thief takes the rest.
        assert!(seen.contains(&(Ok(vec![1, 2, 3]), [None, None])), "{seen:?}");
        assert!(seen.contains(&(Ok(vec![3]), [Some(1), Some(2)])), "{seen:?}");
        // The race: the owner's take moved `top` between the thief's read and its CAS.
        assert!(seen.iter().any(|(b, _)| *b == Err("retry")), "{seen:?}");
    }

    #[test]
    fn lifo_batch_up_to_vs_owner_pops_each_value_once() {
        let seen = explore("lifo_up_to_vs_pop", PREEMPTIONS, lifo_up_to_vs_pop);
        assert!(seen.contains(&(Ok(vec![1, 2, 3]), [None, None])), "{seen:?}");
        assert!(seen.contains(&(Ok(vec![1]), [Some(3), Some(2)])), "{seen:?}");
        // The batch cut short by the owner's pops (its fresh `bottom` said empty, or its CAS
        // on the last handle lost): fewer than three, none twice.
        assert!(
            seen.iter().any(|(b, p)| b.as_ref().is_ok_and(|v| v.len() == 2) && p[0] == Some(3)),
            "{seen:?}"
        );
    }

    /// A FIFO deque holds handles for records 1 and 2 with record 1's handle twice (a
    /// duplicate: recovery re-indexing conservatively, or a scribbled slot). Consumer A takes
    /// a batch and claims each record; consumer B steals one handle at a time and claims.
    /// Every record is claimed exactly once, whoever got which handles, and each claimer acks
    /// what it claimed (the ack CAS of a record it does not hold would fail).
    #[test]
    fn duplicated_handle_in_a_batch_is_claimed_once() {
        let seen = explore("duplicated_handle_in_a_batch", PREEMPTIONS, |start| {
            let records: Arc<[AtomicU64; 2]> = Arc::new(std::array::from_fn(|_| {
                AtomicU64::new(StateWord::pack(1, State::Queued, NO_HOLDER).0)
            }));
            let d = Arc::new(HeapDeque::new(4));
            let owner = DequeOwner::adopt(d.view(Flavor::Fifo).unwrap());
            for h in [0u64, 0, 1] {
                owner.push(h).unwrap();
            }
            let claim_all = |handles: &[u64], me: u32, recs: &[AtomicU64; 2]| -> Vec<u64> {
                let won: Vec<u64> = handles
                    .iter()
                    .copied()
                    .filter(|&h| RecordState(&recs[h as usize]).claim(1, me).is_ok())
                    .collect();
                for &h in &won {
                    RecordState(&recs[h as usize]).ack(1, me).expect("ack of a record we claimed");
                }
                won
            };
            let (d2, r2) = (d.clone(), records.clone());
            let a =
                thread::spawn(move || claim_all(&batch_of(&d2, Flavor::Fifo).unwrap_or_default(), A, &r2));
            start.after_spawn();
            let mut b_took = Vec::new();
            for _ in 0..3 {
                if let Steal::Success(h) = d.view(Flavor::Fifo).unwrap().steal() {
                    b_took.push(h);
                }
            }
            let b_won = claim_all(&b_took, B, &records);
            let a_won = a.join().unwrap();
            let mut all = a_won.clone();
            all.extend(&b_won);
            exactly_once(all, &[0, 1], format!("A claimed {a_won:?}, B claimed {b_won:?}"));
            for r in records.iter() {
                assert_eq!(
                    StateWord(r.load(loom::sync::atomic::Ordering::Relaxed)).state(),
                    Some(State::Free)
                );
            }
            (a_won, b_won)
        });
        // The batch took all three (and its duplicate's claim failed), or B took some.
        assert!(seen.contains(&(vec![0, 1], vec![])), "{seen:?}");
        assert!(seen.iter().any(|(_, b)| !b.is_empty()), "{seen:?}");
    }
}

/// Without the LIFO pop's fence or the steal's (the batch's first and its per-handle one),
/// the batch's second handle can meet the owner's second pop with neither seeing the other:
/// loom must find a value taken twice or lost.
#[cfg(any(xtcq_loom_drop_pop_fence, xtcq_loom_drop_steal_fence))]
#[test]
fn lifo_batch_up_to_without_a_fence_takes_a_value_twice() {
    let r = std::panic::catch_unwind(|| {
        explore("lifo_up_to_vs_pop without a fence", PREEMPTIONS, lifo_up_to_vs_pop)
    });
    let payload = match r {
        Ok(seen) => panic!("loom found no duplicate or lost value without the fence: {seen:?}"),
        Err(p) => p,
    };
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(msg.contains("duplicate or lost"), "failed, but not on its exactly-once assertion: {msg}");
    eprintln!("lifo_up_to_vs_pop without a fence, loom found: {msg}");
}
