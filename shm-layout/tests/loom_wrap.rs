//! loom models of the deque where the ring wraps around while a batch steal or the owner's
//! FIFO `take` is in flight (capacity 4, full): a thief's batch against the owner's take, pop
//! and pushes onto the slots the batch just read; a thief batching into its own deque that
//! wraps, while others steal from it. Every value must be taken exactly once.
//!
//! From a concurrency review of the layout-v2 / take / batch-steal changes: the models in
//! `loom_deque.rs` never let a push wrap onto a slot a batch in flight had read. They were
//! checked against mutations of `deque.rs` in a scratch copy (e.g. `room_up_to` ignoring the
//! room is caught by the `r3` models only). Run by `.ci/loom`.
#![cfg(xtcq_loom)]

mod loom_support;
use loom_support::{explore, Start};

use loom::sync::Arc;
use loom::thread;
use xtcq_shm::{DequeOwner, Flavor, HeapDeque, Steal};

fn batch_into(v: xtcq_shm::DequeRef<'_>) -> Result<Vec<u64>, &'static str> {
    let mut out = [0u64; 4];
    match v.steal_batch_into(&mut out) {
        Steal::Success(n) => Ok(out[..n].to_vec()),
        Steal::Empty => Err("empty"),
        Steal::Retry => Err("retry"),
    }
}

/// FIFO, capacity 4, full. A thief's range batch (wants 2: reads slots 0 and 1, then CAS 0->2)
/// while the owner takes once and pushes 5 into slot 0 (wrap). Each value exactly once.
#[test]
fn r1_fifo_batch_vs_take_and_wrapping_push() {
    let seen = explore("r1", 3, |start| {
        let d = Arc::new(HeapDeque::new(4));
        let owner = DequeOwner::adopt(d.view(Flavor::Fifo).unwrap());
        for v in 1..=4 {
            owner.push(v).unwrap();
        }
        let d2 = d.clone();
        let th = thread::spawn(move || batch_into(d2.view(Flavor::Fifo).unwrap()));
        start.after_spawn();
        let taken = owner.take();
        let pushed5 = owner.push(5).is_ok();
        let batch = th.join().unwrap();
        if !pushed5 {
            owner.push(5).unwrap();
        }
        let mut all: Vec<u64> = taken.into_iter().collect();
        all.extend(batch.iter().flatten());
        while let Some(x) = owner.take() {
            all.push(x);
        }
        all.sort_unstable();
        assert_eq!(all, [1, 2, 3, 4, 5], "duplicate or lost: took {taken:?} batch {batch:?}");
        (taken, batch, pushed5)
    });
    assert!(seen.iter().any(|(_, b, p)| b.is_err() && *p), "{seen:?}");
}

/// LIFO, capacity 4, full. A thief's LIFO batch (wants 2) while the owner pops, takes, and
/// pushes 5 and 6 (wrapping onto slots 0 and 1 as soon as `top` allows).
#[test]
fn r2_lifo_batch_vs_pop_take_wrap() {
    explore("r2", 3, |start| {
        let d = Arc::new(HeapDeque::new(4));
        let owner = DequeOwner::adopt(d.view(Flavor::Lifo).unwrap());
        for v in 1..=4 {
            owner.push(v).unwrap();
        }
        let d2 = d.clone();
        let th = thread::spawn(move || batch_into(d2.view(Flavor::Lifo).unwrap()));
        start.after_spawn();
        let mut all: Vec<u64> = Vec::new();
        all.extend(owner.pop());
        all.extend(owner.take());
        let p5 = owner.push(5).is_ok();
        let p6 = owner.push(6).is_ok();
        let batch = th.join().unwrap();
        if !p5 {
            owner.push(5).unwrap();
        }
        if !p6 {
            owner.push(6).unwrap();
        }
        all.extend(batch.iter().flatten());
        while let Some(x) = owner.pop() {
            all.push(x);
        }
        all.sort_unstable();
        assert_eq!(all, [1, 2, 3, 4, 5, 6], "duplicate or lost: batch {batch:?}");
        (batch, p5, p6)
    });
}

/// The thief's own deque `dest` (capacity 2, full with 10 and 11) is stolen from by another
/// thief (twice) while its owner batch-steals from a victim (LIFO 1,2,3) into it: the batch
/// may only fill slots whose handles were taken (room from `top`, cached or read).
fn r3(start: Start, flavor: Flavor, and_pop: bool) -> (Vec<u64>, Vec<u64>) {
    let victim = Arc::new(HeapDeque::new(4));
    let vo = DequeOwner::adopt(victim.view(flavor).unwrap());
    for v in 1..=3 {
        vo.push(v).unwrap();
    }
    let dest = Arc::new(HeapDeque::new(2));
    let mine = DequeOwner::adopt(dest.view(flavor).unwrap());
    mine.push(10).unwrap();
    mine.push(11).unwrap();
    let d2 = dest.clone();
    let th = thread::spawn(move || {
        let v = d2.view(flavor).unwrap();
        let mut got = Vec::new();
        for _ in 0..2 {
            if let Steal::Success(x) = v.steal() {
                got.push(x);
            }
        }
        got
    });
    start.after_spawn();
    let mut mine_got = Vec::new();
    let vref = victim.view(flavor).unwrap();
    if and_pop {
        if let Steal::Success(x) = vref.steal_batch_and_pop(&mine, 2) {
            mine_got.push(x);
        }
    } else {
        let _ = vref.steal_batch(&mine, 2);
    }
    let stolen = th.join().unwrap();
    while let Some(x) = mine.pop() {
        mine_got.push(x);
    }
    while let Some(x) = vo.pop() {
        mine_got.push(x);
    }
    let mut all = mine_got.clone();
    all.extend(&stolen);
    all.sort_unstable();
    assert_eq!(all, [1, 2, 3, 10, 11], "duplicate or lost: thief of dest got {stolen:?}, owner {mine_got:?}");
    (stolen, mine_got)
}

#[test]
fn r3_batch_into_own_wrapping_deque_lifo() {
    explore("r3 lifo", 3, |s| r3(s, Flavor::Lifo, false));
}
#[test]
fn r3_batch_into_own_wrapping_deque_fifo() {
    explore("r3 fifo", 3, |s| r3(s, Flavor::Fifo, false));
}
#[test]
fn r3_batch_and_pop_into_own_wrapping_deque_lifo() {
    explore("r3p lifo", 3, |s| r3(s, Flavor::Lifo, true));
}
#[test]
fn r3_batch_and_pop_into_own_wrapping_deque_fifo() {
    explore("r3p fifo", 3, |s| r3(s, Flavor::Fifo, true));
}

/// Victim owner pops concurrently with a LIFO batch into dest, and the batch's handles are
/// stolen back from dest by the victim's owner thread (E5 on the batch plus publish).
#[test]
fn r4_lifo_batch_into_dest_vs_pops_and_stealback() {
    explore("r4", 3, |start| {
        let victim = Arc::new(HeapDeque::new(4));
        let vo = DequeOwner::adopt(victim.view(Flavor::Lifo).unwrap());
        for v in 1..=3 {
            vo.push(v).unwrap();
        }
        let dest = Arc::new(HeapDeque::new(2));
        let (v2, l2) = (victim.clone(), dest.clone());
        let th = thread::spawn(move || {
            let mine = DequeOwner::adopt(l2.view(Flavor::Lifo).unwrap());
            let _ = v2.view(Flavor::Lifo).unwrap().steal_batch(&mine, 2);
            let mut got = Vec::new();
            while let Some(x) = mine.pop() {
                got.push(x);
            }
            got
        });
        start.after_spawn();
        let mut all: Vec<u64> = Vec::new();
        all.extend(vo.pop());
        all.extend(vo.pop());
        if let Steal::Success(x) = dest.view(Flavor::Lifo).unwrap().steal() {
            all.push(x);
        }
        let got = th.join().unwrap();
        all.extend(&got);
        while let Some(x) = vo.pop() {
            all.push(x);
        }
        all.sort_unstable();
        assert_eq!(all, [1, 2, 3], "duplicate or lost: thief kept {got:?}");
        got
    });
}
