//! loom models of the Chase-Lev deque (`shm-layout/src/deque.rs`).
//!
//! Run with (see `.ci/loom`)
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg xtcq_loom" cargo test -p shm-layout --release --test loom_deque`.
//!
//! The main model is experiment E5 of seed 001 (crossbeam-deque's Chase-Lev): the owner
//! pushes 1 and 2; a thief steals twice while the owner pops once; then the owner drains.
//! Everything taken, sorted, must be exactly `[1, 2]`. One steal is not enough to show the
//! fences matter (design §9): the bad interleaving needs the thief to take 1 first, so that
//! its second steal and the owner's pop both go for 2.
//!
//! With `--cfg xtcq_loom_drop_pop_fence` or `--cfg xtcq_loom_drop_steal_fence` the
//! corresponding `fence(SeqCst)` is compiled out of `deque.rs`, and the only test here is
//! the one that expects loom to find a value taken twice (or lost).
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

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
use std::sync::Mutex;

use loom::sync::Arc;
use loom::thread;
use shm_layout::{DequeOwner, Flavor, HeapDeque, Steal};

/// Default preemption bound. The deque models are small: at 10 loom reports the same
/// interleaving counts as at 20 (E5: 65 with the main thread first, as in the seed, and 103
/// with the thief first), so raising it finds nothing more (within what loom's DPOR explores
/// at all, see above), and it takes milliseconds. The seed's
/// failing interleaving needs only one or two preemptions.
const PREEMPTIONS: usize = 10;

/// Which thread the scheduler runs first after the model's `spawn` (see the module comment).
#[derive(Clone, Copy, Debug)]
enum Start {
    MainFirst,
    SpawnedFirst,
}

impl Start {
    /// Call right after spawning.
    fn after_spawn(self) {
        if let Start::SpawnedFirst = self {
            thread::yield_now();
        }
    }
}

/// Checks `model` under both starts and returns every outcome seen.
fn explore<O, F>(name: &str, model: F) -> BTreeSet<O>
where
    O: Ord + Debug + Send + 'static,
    F: Fn(Start) -> O + Sync + Send + 'static,
{
    let seen = std::sync::Arc::new(Mutex::new(BTreeSet::new()));
    let model = std::sync::Arc::new(model);
    for start in [Start::MainFirst, Start::SpawnedFirst] {
        let iterations = std::sync::Arc::new(AtomicUsize::new(0));
        let mut b = loom::model::Builder::new();
        // `LOOM_MAX_PREEMPTIONS` (read by `Builder::new`) overrides the default bound.
        let bound = *b.preemption_bound.get_or_insert(PREEMPTIONS);
        let t0 = std::time::Instant::now();
        {
            let (seen, model, counter) = (seen.clone(), model.clone(), iterations.clone());
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                b.check(move || {
                    counter.fetch_add(1, StdOrdering::Relaxed);
                    let o = model(start);
                    seen.lock().unwrap().insert(o);
                })
            }));
            if let Err(payload) = r {
                eprintln!(
                    "{name} ({start:?}): failed in interleaving {} (preemption bound {bound})",
                    iterations.load(StdOrdering::Relaxed)
                );
                std::panic::resume_unwind(payload);
            }
        }
        eprintln!(
            "{name} ({start:?}): {} interleavings, preemption bound {bound}, {:.2?}",
            iterations.load(StdOrdering::Relaxed),
            t0.elapsed()
        );
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    eprintln!("{name}: outcomes {seen:?}");
    seen
}

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

#[cfg(not(any(xtcq_loom_drop_pop_fence, xtcq_loom_drop_steal_fence)))]
mod full_protocol {
    use super::*;

    #[test]
    fn e5_pop_races_two_steals_each_value_once() {
        let seen = explore("e5", e5);
        let s = S::Got;
        // The plain outcomes: the owner pops 2 while the thief takes 1, or the thief takes
        // both first.
        assert!(seen.contains(&(Some(2), [s(1), S::Empty], vec![])), "{seen:?}");
        assert!(seen.contains(&(None, [s(1), s(2)], vec![])), "{seen:?}");
        // The race the fences are for: the thief's second steal and the owner's pop both
        // went for 2 and met at the CAS on `top`. Either may win; both must have been seen.
        assert!(seen.contains(&(Some(2), [s(1), S::Retry], vec![])), "{seen:?}");
    }

    /// The owner's last-item pop against one steal of that item: the CAS on `top` gives it
    /// to exactly one of them.
    #[test]
    fn last_item_pop_vs_steal() {
        let seen = explore("last_item_pop_vs_steal", |start| {
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
        let seen = explore("push_reuses_slot_after_steal", |start| {
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
        let seen = explore("fifo_take_vs_steal", |start| {
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

    /// The owner's `take` (no fence, `bottom` read Relaxed) against two single steals, on a
    /// FIFO deque of three: every value is taken exactly once, and the owner's take also
    /// meets a thief at the CAS on `top` (the owner then retries at the new `top` itself).
    #[test]
    fn fifo_take_vs_two_steals() {
        let seen = explore("fifo_take_vs_two_steals", |start| {
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
        let seen = explore("fifo_take_vs_batch_steal", |start| {
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
        let seen = explore("lifo_take_then_pop_vs_two_steals", |start| {
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
    let which = if cfg!(xtcq_loom_drop_pop_fence) { "pop" } else { "steal" };
    let r = std::panic::catch_unwind(|| explore("e5 without a fence", e5));
    let payload = match r {
        Ok(seen) => panic!(
            "loom explored E5 (preemption bound {PREEMPTIONS}) without the {which} fence and \
             found no duplicate or lost value; outcomes {seen:?}"
        ),
        Err(payload) => payload,
    };
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(msg.contains("duplicate or lost"), "the model failed, but not on the E5 assertion: {msg}");
    eprintln!("without the {which} fence, loom found: {msg}");
}
