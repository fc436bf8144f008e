//! loom models of the Chase-Lev deque (`shm-layout/src/deque.rs`).
//!
//! Run with (see `.ci/loom`)
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg xtcq_loom" cargo test -p xtcq-shm --release --test loom_deque`.
//!
//! The main model is experiment E5 of seed 001 (crossbeam-deque's Chase-Lev): the owner
//! pushes 1 and 2; a thief steals twice while the owner pops once; then the owner drains.
//! Everything taken, sorted, must be exactly `[1, 2]`. One steal is not enough to show the
//! fences matter (design §9): the bad interleaving needs the thief to take 1 first, so that
//! its second steal and the owner's pop both go for 2.
//!
//! With `--cfg xtcq_loom_drop_pop_fence` or `--cfg xtcq_loom_drop_steal_fence` the
//! corresponding `fence(SeqCst)` is compiled out of `deque.rs` (for the steal: in `steal` and
//! in the batch steal, both its first fence and its per-handle one), and the only tests here
//! are the ones that expect loom to find a value taken twice (or lost): in E5 and in the same
//! race with a LIFO batch steal (`batch_e5`).
//!
//! **How far loom 0.7.3 can be trusted here.** Its DPOR remembers only the *last* access to
//! each atomic. When the spawned thread loads a word and then writes it (a thief: load `top`,
//! then CAS `top`), its own load replaces the main thread's earlier access of that word, and
//! the race between the two is never explored (tokio-rs/loom#166, #392): with the main thread
//! running first, some models here explore exactly one interleaving. So every model is
//! checked twice, once with the main thread running on after the spawn and once with it
//! yielding so that the spawned thread runs first, and each test asserts that the outcomes
//! it needs to have seen (the racy ones) were in fact reached.
#![cfg(xtcq_loom)]

mod loom_support;
use loom_support::{explore, Start};

use std::collections::BTreeSet;
use std::fmt::Debug;

use loom::sync::Arc;
use loom::thread;
use xtcq_shm::{DequeOwner, Flavor, HeapDeque, Steal};

/// Default preemption bound. The deque models are small: at 10 loom reports the same
/// interleaving counts as at 20 (E5: 65 with the main thread first, as in the seed, and 103
/// with the thief first), so raising it finds nothing more (within what loom's DPOR explores
/// at all, see above), and it takes milliseconds. The seed's
/// failing interleaving needs only one or two preemptions.
const PREEMPTIONS: usize = 10;

/// A [`Steal`] as an outcome (`Steal` itself is not `Ord`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum S {
    Empty,
    Got(u64),
    Retry,
}

impl S {
    fn got(self) -> Option<u64> {
        match self {
            S::Got(v) => Some(v),
            _ => None,
        }
    }
}

impl From<Steal<u64>> for S {
    fn from(s: Steal<u64>) -> Self {
        match s {
            Steal::Empty => S::Empty,
            Steal::Success(v) => S::Got(v),
            Steal::Retry => S::Retry,
        }
    }
}

/// What one E5 run took: the owner's pop, the thief's two steals, the owner's drain.
type E5Outcome = (Option<u64>, [S; 2], Vec<u64>);

/// Seed 001's E5. Panics (inside the model) with "duplicate or lost" when the values taken
/// are not exactly `[1, 2]`, saying who took what.
fn e5(start: Start) -> E5Outcome {
    let d = Arc::new(HeapDeque::new(4));
    let owner = DequeOwner::adopt(d.view(Flavor::Lifo).unwrap());
    owner.push(1).unwrap();
    owner.push(2).unwrap();

    let d2 = d.clone();
    let thief = thread::spawn(move || {
        let v = d2.view(Flavor::Lifo).unwrap();
        // Two steal attempts; a `Retry` counts as one (the owner drains what it leaves).
        let first = S::from(v.steal());
        let second = S::from(v.steal());
        [first, second]
    });
    start.after_spawn();

    let popped = owner.pop();
    let steals = thief.join().unwrap();
    let mut drained = Vec::new();
    while let Some(x) = owner.pop() {
        drained.push(x);
    }

    let mut all: Vec<u64> = popped.into_iter().collect();
    all.extend(steals.iter().filter_map(|s| s.got()));
    all.extend(&drained);
    all.sort_unstable();
    assert_eq!(
        all,
        [1, 2],
        "duplicate or lost value: owner's pop took {popped:?}, thief's steals returned \
         {steals:?}, owner drained {drained:?}"
    );
    // Consistent afterwards: empty, with `bottom == top` (a pop that is not the last item's
    // leaves `top` where it is, so `top` may be below 2).
    let (t, b) = d.view(Flavor::Lifo).unwrap().indices();
    assert_eq!(t, b, "indices after draining");
    (popped, steals, drained)
}

/// What one batch-E5 run took: the thief's batch, the owner's two pops, the owner's drain.
type BatchOutcome = (Result<Vec<u64>, S>, [Option<u64>; 2], Vec<u64>);

/// E5 with a LIFO batch steal: the owner pushes 1, 2, 3; the thief's `steal_batch_into` wants
/// two (half of three, rounded up), so it takes 1 and then, with a fence and a fresh load of
/// `bottom` but no fresh load of `top`, goes for 2, while the owner pops 3 and then 2. The
/// second handle of the batch and the owner's second pop meet exactly as E5's second steal and
/// pop do. Panics (inside the model) with "duplicate or lost" unless `[1, 2, 3]` each once.
fn batch_e5(start: Start) -> BatchOutcome {
    let d = Arc::new(HeapDeque::new(4));
    let owner = DequeOwner::adopt(d.view(Flavor::Lifo).unwrap());
    for v in 1..=3 {
        owner.push(v).unwrap();
    }
    let d2 = d.clone();
    let thief = thread::spawn(move || {
        let mut out = [0u64; 4];
        match d2.view(Flavor::Lifo).unwrap().steal_batch_into(&mut out) {
            Steal::Success(n) => Ok(out[..n].to_vec()),
            Steal::Empty => Err(S::Empty),
            Steal::Retry => Err(S::Retry),
        }
    });
    start.after_spawn();
    let pops = [owner.pop(), owner.pop()];
    let batch = thief.join().unwrap();
    let mut drained = Vec::new();
    while let Some(x) = owner.pop() {
        drained.push(x);
    }
    let mut all: Vec<u64> = pops.iter().flatten().copied().collect();
    all.extend(batch.iter().flatten());
    all.extend(&drained);
    all.sort_unstable();
    assert_eq!(
        all,
        [1, 2, 3],
        "duplicate or lost value: thief's batch {batch:?}, owner's pops {pops:?}, owner drained \
         {drained:?}"
    );
    let (t, b) = d.view(Flavor::Lifo).unwrap().indices();
    assert_eq!(t, b, "indices after draining");
    (batch, pops, drained)
}

#[cfg(not(any(xtcq_loom_drop_pop_fence, xtcq_loom_drop_steal_fence)))]
mod full_protocol {
    use super::*;

    #[test]
    fn e5_pop_races_two_steals_each_value_once() {
        let seen = explore("e5", PREEMPTIONS, e5);
        let s = S::Got;
        // The plain outcomes: the owner pops 2 while the thief takes 1, or the thief takes
        // both first.
        assert!(seen.contains(&(Some(2), [s(1), S::Empty], vec![])), "{seen:?}");
        assert!(seen.contains(&(None, [s(1), s(2)], vec![])), "{seen:?}");
        // The race the fences are for: the thief's second steal and the owner's pop both
        // went for 2 and met at the CAS on `top`. Either may win; both must have been seen.
        assert!(seen.contains(&(Some(2), [s(1), S::Retry], vec![])), "{seen:?}");
    }

    /// `push_many`: the owner pushes 1 and then 2, 3 as one batch (one store of `bottom`)
    /// while a thief steals twice. A steal sees a slot only once `bottom` covers it, so it
    /// never takes a slot's old value (0, as the heap deque starts), and every value is taken
    /// once, by the thief or by the owner draining afterwards.
    #[test]
    fn push_many_races_two_steals_each_value_once() {
        let seen = explore("push_many", PREEMPTIONS, |start| {
            let d = Arc::new(HeapDeque::new(4));
            let owner = DequeOwner::adopt(d.view(Flavor::Fifo).unwrap());
            owner.push(1).unwrap();
            let d2 = d.clone();
            let thief = thread::spawn(move || {
                let v = d2.view(Flavor::Fifo).unwrap();
                [S::from(v.steal()), S::from(v.steal())]
            });
            start.after_spawn();
            assert_eq!(owner.push_many(&[2, 3]), 2);
            let steals = thief.join().unwrap();
            let mut all: Vec<u64> = steals.iter().filter_map(|s| s.got()).collect();
            while let Some(x) = owner.pop() {
                all.push(x);
            }
            all.sort_unstable();
            assert_eq!(all, [1, 2, 3], "duplicate, lost or stale value: the thief took {steals:?}");
            steals
        });
        let s = S::Got;
        // The thief saw only the first push, and then the whole batch.
        assert!(seen.contains(&[s(1), S::Empty]), "{seen:?}");
        assert!(seen.contains(&[s(1), s(2)]), "{seen:?}");
    }

    /// The owner's last-item pop against one steal of that item: the CAS on `top` gives it
    /// to exactly one of them.
    #[test]
    fn last_item_pop_vs_steal() {
        let seen = explore("last_item_pop_vs_steal", PREEMPTIONS, |start| {
            let d = Arc::new(HeapDeque::new(2));
            let owner = DequeOwner::adopt(d.view(Flavor::Lifo).unwrap());
            owner.push(7).unwrap();
            let d2 = d.clone();
            let thief = thread::spawn(move || S::from(d2.view(Flavor::Lifo).unwrap().steal()));
            start.after_spawn();
            let popped = owner.pop();
            let stolen = thief.join().unwrap();
            let mut all: Vec<u64> = popped.into_iter().chain(stolen.got()).collect();
            all.extend(owner.pop());
            assert_eq!(all, [7], "popped {popped:?}, stole {stolen:?}");
            (popped, stolen)
        });
        assert!(seen.contains(&(Some(7), S::Retry)), "{seen:?}");
        assert!(seen.contains(&(Some(7), S::Empty)), "{seen:?}");
        assert!(seen.contains(&(None, S::Got(7))), "{seen:?}");
    }

    /// Slot reuse: on a deque of capacity 2 the owner pushes into the slot a thief is
    /// stealing from as soon as `top` has moved past it. The thief must still return the
    /// handle pushed at its index, never the one that overwrote it.
    #[test]
    fn push_reuses_slot_after_steal() {
        let seen = explore("push_reuses_slot_after_steal", PREEMPTIONS, |start| {
            let d = Arc::new(HeapDeque::new(2));
            let owner = DequeOwner::adopt(d.view(Flavor::Lifo).unwrap());
            owner.push(1).unwrap();
            owner.push(2).unwrap();
            let d2 = d.clone();
            let thief = thread::spawn(move || {
                let v = d2.view(Flavor::Lifo).unwrap();
                [S::from(v.steal()), S::from(v.steal())]
            });
            start.after_spawn();
            // Index 2 maps to slot 0, which holds 1 until a steal of index 0 succeeds.
            let pushed3 = owner.push(3).is_ok();
            let steals = thief.join().unwrap();
            if !pushed3 {
                owner.push(3).unwrap();
            }
            let stolen: Vec<u64> = steals.iter().filter_map(|s| s.got()).collect();
            let mut all = stolen.clone();
            while let Some(x) = owner.pop() {
                all.push(x);
            }
            all.sort_unstable();
            assert_eq!(all, [1, 2, 3], "thief's steals returned {steals:?}");
            // No consumer but the thief ran concurrently: it got 1 then 2, oldest first.
            assert_eq!(stolen, [1, 2], "thief's steals returned {steals:?}");
            pushed3
        });
        // The push found room (a steal had moved `top`) and found none.
        assert_eq!(seen, BTreeSet::from([false, true]));
    }

    /// A FIFO owner's `take` races a thief on `top`; both use the CAS, so each handle is
    /// taken once.
    #[test]
    fn fifo_take_vs_steal() {
        let seen = explore("fifo_take_vs_steal", PREEMPTIONS, |start| {
            let d = Arc::new(HeapDeque::new(2));
            let owner = DequeOwner::adopt(d.view(Flavor::Fifo).unwrap());
            owner.push(1).unwrap();
            owner.push(2).unwrap();
            let d2 = d.clone();
            let thief = thread::spawn(move || S::from(d2.view(Flavor::Fifo).unwrap().steal()));
            start.after_spawn();
            let taken = owner.pop();
            let stolen = thief.join().unwrap();
            let mut all: Vec<u64> = taken.into_iter().chain(stolen.got()).collect();
            while let Some(x) = owner.pop() {
                all.push(x);
            }
            all.sort_unstable();
            assert_eq!(all, [1, 2], "took {taken:?}, stole {stolen:?}");
            (taken, stolen)
        });
        // Both orders of the two consumers, and a thief that lost the CAS on `top`.
        assert!(seen.contains(&(Some(1), S::Got(2))), "{seen:?}");
        assert!(seen.contains(&(Some(2), S::Got(1))), "{seen:?}");
        assert!(seen.contains(&(Some(1), S::Retry)), "{seen:?}");
    }

    /// The LIFO batch steal against the owner's pops (see [`batch_e5`]).
    #[test]
    fn batch_e5_lifo_batch_races_two_pops_each_value_once() {
        let seen = explore("batch_e5", PREEMPTIONS, batch_e5);
        // The batch got 2, so the owner's second pop found nothing; or the owner got 2, and
        // the batch stopped at 1 (it lost the CAS, or saw the lowered `bottom`, or started
        // after the pops and wanted only one). These are the only two outcomes: 1 always
        // goes to the thief, 3 to the owner. That loom does reach the race on 2 is shown by
        // the fence-removed builds, where this model takes a value twice.
        let want = BTreeSet::from([
            (Ok(vec![1, 2]), [Some(3), None], vec![]),
            (Ok(vec![1]), [Some(3), Some(2)], vec![]),
        ]);
        assert_eq!(seen, want);
    }

    /// `steal_batch_and_pop` into the thief's own deque (handles written past its `bottom`,
    /// then one Release store of `bottom` for the batch) against the victim's owner popping,
    /// and a second thief stealing from the first thief's deque: each value once.
    #[test]
    fn batch_and_pop_into_own_deque() {
        let seen = explore("batch_and_pop_into_own_deque", PREEMPTIONS, |start| {
            let victim = Arc::new(HeapDeque::new(4));
            let owner = DequeOwner::adopt(victim.view(Flavor::Lifo).unwrap());
            for v in 1..=4 {
                owner.push(v).unwrap();
            }
            let local = Arc::new(HeapDeque::new(4));
            let (v2, l2) = (victim.clone(), local.clone());
            let thief = thread::spawn(move || {
                let mine = DequeOwner::adopt(l2.view(Flavor::Lifo).unwrap());
                let first = S::from(v2.view(Flavor::Lifo).unwrap().steal_batch_and_pop(&mine, 4));
                let mut rest = Vec::new();
                while let Some(x) = mine.pop() {
                    rest.push(x);
                }
                (first, rest)
            });
            start.after_spawn();
            // Meanwhile: the owner pops once, and steals once from the thief's deque.
            let popped = owner.pop();
            let from_local = S::from(local.view(Flavor::Lifo).unwrap().steal());
            let (first, rest) = thief.join().unwrap();
            let mut all: Vec<u64> = popped.into_iter().chain(first.got()).chain(from_local.got()).collect();
            all.extend(&rest);
            while let Some(x) = owner.pop() {
                all.push(x);
            }
            all.sort_unstable();
            assert_eq!(
                all,
                [1, 2, 3, 4],
                "popped {popped:?}, batch-and-pop {first:?} then {rest:?}, stole {from_local:?} \
                 from the thief's deque"
            );
            (popped, first, from_local, rest)
        });
        // The batch (two of four) taken whole, its second handle stolen back from the
        // thief's deque, and the batch meeting the owner's pop.
        assert!(seen.contains(&(Some(4), S::Got(1), S::Empty, vec![2])), "{seen:?}");
        assert!(seen.iter().any(|(_, _, l, _)| *l == S::Got(2)), "{seen:?}");
    }

    /// The owner's `take` (no fence, `bottom` read Relaxed) against two single steals, on a
    /// FIFO deque of three: every value is taken exactly once, and the owner's take also
    /// meets a thief at the CAS on `top` (the owner then retries at the new `top` itself).
    #[test]
    fn fifo_take_vs_two_steals() {
        let seen = explore("fifo_take_vs_two_steals", PREEMPTIONS, |start| {
            let d = Arc::new(HeapDeque::new(4));
            let owner = DequeOwner::adopt(d.view(Flavor::Fifo).unwrap());
            for v in 1..=3 {
                owner.push(v).unwrap();
            }
            let d2 = d.clone();
            let thief = thread::spawn(move || {
                let v = d2.view(Flavor::Fifo).unwrap();
                [S::from(v.steal()), S::from(v.steal())]
            });
            start.after_spawn();
            let taken = owner.take();
            let steals = thief.join().unwrap();
            let mut all: Vec<u64> = taken.into_iter().chain(steals.iter().filter_map(|s| s.got())).collect();
            while let Some(x) = owner.take() {
                all.push(x);
            }
            all.sort_unstable();
            assert_eq!(all, [1, 2, 3], "took {taken:?}, steals returned {steals:?}");
            let (t, b) = d.view(Flavor::Fifo).unwrap().indices();
            assert_eq!((t, b), (3, 3), "indices after draining");
            (taken, steals)
        });
        // The owner first, the thief first, and the thief losing its CAS to the owner.
        assert!(seen.contains(&(Some(1), [S::Got(2), S::Got(3)])), "{seen:?}");
        assert!(seen.contains(&(Some(3), [S::Got(1), S::Got(2)])), "{seen:?}");
        assert!(seen.iter().any(|(_, st)| st.contains(&S::Retry)), "{seen:?}");
    }

    /// `take` on a FIFO deque against a thief's batch steal, which takes its range with one
    /// CAS on `top`: the two CASes decide between them, each value is taken once.
    #[test]
    fn fifo_take_vs_batch_steal() {
        let seen = explore("fifo_take_vs_batch_steal", PREEMPTIONS, |start| {
            let d = Arc::new(HeapDeque::new(4));
            let owner = DequeOwner::adopt(d.view(Flavor::Fifo).unwrap());
            for v in 1..=3 {
                owner.push(v).unwrap();
            }
            let d2 = d.clone();
            let thief = thread::spawn(move || {
                let mut out = [0u64; 4];
                match d2.view(Flavor::Fifo).unwrap().steal_batch_into(&mut out) {
                    Steal::Success(n) => Ok(out[..n].to_vec()),
                    Steal::Empty => Err(S::Empty),
                    Steal::Retry => Err(S::Retry),
                }
            });
            start.after_spawn();
            let taken = owner.take();
            let batch = thief.join().unwrap();
            let mut all: Vec<u64> = taken.into_iter().collect();
            all.extend(batch.iter().flatten());
            while let Some(x) = owner.take() {
                all.push(x);
            }
            all.sort_unstable();
            assert_eq!(all, [1, 2, 3], "took {taken:?}, batch {batch:?}");
            (taken, batch)
        });
        // The batch first (half of three, rounded up), the owner first, and the batch's CAS
        // losing to the owner's.
        assert!(seen.contains(&(Some(3), Ok(vec![1, 2]))), "{seen:?}");
        assert!(seen.contains(&(Some(1), Ok(vec![2]))), "{seen:?}");
        assert!(seen.contains(&(Some(1), Err(S::Retry))), "{seen:?}");
    }

    /// `take` is right for a LIFO deque too: the owner takes the oldest, then pops the newest,
    /// while a thief steals twice. The thieves' fence pairs with the pop's; the take between
    /// them lowers nothing and takes only by CAS.
    #[test]
    fn lifo_take_then_pop_vs_two_steals() {
        let seen = explore("lifo_take_then_pop_vs_two_steals", PREEMPTIONS, |start| {
            let d = Arc::new(HeapDeque::new(4));
            let owner = DequeOwner::adopt(d.view(Flavor::Lifo).unwrap());
            for v in 1..=3 {
                owner.push(v).unwrap();
            }
            let d2 = d.clone();
            let thief = thread::spawn(move || {
                let v = d2.view(Flavor::Lifo).unwrap();
                [S::from(v.steal()), S::from(v.steal())]
            });
            start.after_spawn();
            let taken = owner.take();
            let popped = owner.pop();
            let steals = thief.join().unwrap();
            let mut all: Vec<u64> = taken.into_iter().chain(popped).collect();
            all.extend(steals.iter().filter_map(|s| s.got()));
            while let Some(x) = owner.pop() {
                all.push(x);
            }
            all.sort_unstable();
            assert_eq!(all, [1, 2, 3], "took {taken:?}, popped {popped:?}, steals returned {steals:?}");
            let (t, b) = d.view(Flavor::Lifo).unwrap().indices();
            assert_eq!(t, b, "indices after draining");
            (taken, popped, steals)
        });
        // The owner's pop and the thief's second steal meeting on the last handle.
        assert!(seen.contains(&(Some(1), Some(3), [S::Got(2), S::Empty])), "{seen:?}");
        assert!(seen.iter().any(|(_, _, st)| st[1] == S::Retry), "{seen:?}");
    }
}

/// With either fence compiled out, E5 must fail: loom has to find an interleaving in which
/// a value is taken twice or lost. If it did not, the model would not be showing that the
/// fence is needed.
#[cfg(any(xtcq_loom_drop_pop_fence, xtcq_loom_drop_steal_fence))]
#[test]
fn e5_without_a_fence_takes_a_value_twice() {
    expect_duplicate("e5", e5);
}

/// The same for the LIFO batch steal: without the pop's fence, or without the steal's fences
/// (the batch's first and its per-handle one), a value is taken twice or lost.
#[cfg(any(xtcq_loom_drop_pop_fence, xtcq_loom_drop_steal_fence))]
#[test]
fn batch_e5_without_a_fence_takes_a_value_twice() {
    expect_duplicate("batch_e5", batch_e5);
}

#[cfg(any(xtcq_loom_drop_pop_fence, xtcq_loom_drop_steal_fence))]
fn expect_duplicate<O, F>(name: &str, model: F)
where
    O: Ord + Debug + Send + 'static,
    F: Fn(Start) -> O + Sync + Send + 'static,
{
    let which = if cfg!(xtcq_loom_drop_pop_fence) { "pop" } else { "steal" };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        explore(&format!("{name} without a fence"), PREEMPTIONS, model)
    }));
    let payload = match r {
        Ok(seen) => panic!(
            "loom explored {name} (preemption bound {PREEMPTIONS}) without the {which} fence \
             and found no duplicate or lost value; outcomes {seen:?}"
        ),
        Err(payload) => payload,
    };
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(msg.contains("duplicate or lost"), "{name} failed, but not on its exactly-once assertion: {msg}");
    eprintln!("{name} without the {which} fence, loom found: {msg}");
}
