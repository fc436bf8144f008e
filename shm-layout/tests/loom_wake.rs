//! loom models of the wait protocol (`shm-layout/src/wake_protocol.rs`): consumers that wait on
//! a descriptor (arm, look again, poll) against producers that publish and notify; datagram
//! waiters first, then futex-kind ones (`futex_ring`) alone and beside datagram ones.
//!
//! Run with (see `.ci/loom`)
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg xtcq_loom" cargo test -p xtcq-shm --release --test loom_wake`.
//!
//! The queue is one job slot (a Release store, taken with a swap, as a claim is one RMW).
//! Properties, checked at the end of every interleaving:
//! - **no lost wake-up**: a job left untaken has a woken consumer (its bit claimed: the
//!   datagram was sent to it) — never only armed consumers nobody will wake;
//! - **wake-one**: one push claims at most one waiter;
//! - **one decrement per arm**: `sleepers` is back to the number of waiters still armed;
//! - a consumer that was woken but took nothing hands the wake on, so with two consumers and
//!   one job, the job is taken or a still-waiting consumer holds a wake.
#![cfg(xtcq_loom)]

mod loom_support;
use loom_support::explore;

use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use xtcq_shm::wake_protocol::{Disarmed, Sleepers, Wake, WAKE_WORDS};

const PREEMPTIONS: usize = 3;

/// A queue of at most one job, its wait words, and the wakes sent (a bit each).
struct Queue {
    job: AtomicU32,
    sleepers: AtomicU32,
    armed: [AtomicU64; WAKE_WORDS],
    /// Datagrams sent, by bit: what each waiter's descriptor would read.
    sent: AtomicU64,
    takes: AtomicU32,
}

impl Queue {
    fn new() -> Self {
        Queue {
            job: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            armed: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            sent: AtomicU64::new(0),
            takes: AtomicU32::new(0),
        }
    }

    fn s(&self) -> Sleepers<'_> {
        Sleepers { sleepers: &self.sleepers, armed: &self.armed }
    }

    fn take(&self) -> bool {
        // A claim: the job's one arbiter, with the steal's fence before it.
        loom::sync::atomic::fence(Ordering::SeqCst);
        // A CAS, not a swap: loom 0.7.3 lets a swap read a value older than the last store
        // (a model of one store and one swap ends with neither seeing the other).
        let got = self.job.compare_exchange(1, 0, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if got {
            self.takes.fetch_add(1, Ordering::SeqCst);
        }
        got
    }

    /// A producer's push: publish, then notify; a descriptor wake is a datagram to its bit.
    fn push(&self) -> Wake {
        self.job.store(1, Ordering::Release);
        self.notify()
    }

    fn notify(&self) -> Wake {
        let w = self.s().notify(true);
        if let Wake::Descriptor(bit) = w {
            self.sent.fetch_or(1 << bit, Ordering::SeqCst);
        }
        w
    }

    /// A consumer's `steal_or_arm`: true when it took the job; else it is armed and polls.
    fn steal_or_arm(&self, bit: u32) -> bool {
        if self.take() {
            return true;
        }
        self.s().arm(bit);
        if self.take() {
            // A wake sent meanwhile was for a job, and this consumer took one.
            self.s().disarm(bit);
            return true;
        }
        false
    }

    /// A waiter that gives up (its future dropped): a wake it was sent and will not use is
    /// handed on.
    fn give_up(&self, bit: u32) {
        if self.s().disarm(bit) == Disarmed::Woken {
            self.notify();
        }
    }
}

/// One producer, one consumer: the job is taken, or the consumer was sent its wake.
#[test]
fn a_push_never_misses_an_armed_consumer() {
    let outcomes = explore("one consumer", PREEMPTIONS, |start| {
        let q = Arc::new(Queue::new());
        let c = {
            let q = q.clone();
            thread::spawn(move || q.steal_or_arm(0))
        };
        start.after_spawn();
        let wake = q.push();
        let took = c.join().unwrap();
        let woken = q.sent.load(Ordering::SeqCst) & 1 != 0;
        let job_left = q.job.load(Ordering::SeqCst) == 1;
        assert!(!job_left || woken, "lost wake-up: the job waits, the consumer is armed and never woken");
        let armed = q.armed[0].load(Ordering::SeqCst) & 1 != 0;
        assert_eq!(q.sleepers.load(Ordering::SeqCst), u32::from(armed), "one decrement per arm");
        assert_eq!(q.takes.load(Ordering::SeqCst), u32::from(took));
        (took, format!("{wake:?}"))
    });
    assert!(outcomes.contains(&(true, "Nobody".to_string())), "{outcomes:?}");
    assert!(outcomes.contains(&(false, "Descriptor(0)".to_string())), "{outcomes:?}");
}

/// Two consumers, one job: at most one wake (wake-one), and the job is taken or a consumer
/// that is still waiting holds a wake.
#[test]
fn one_push_wakes_one_and_a_wasted_wake_is_handed_on() {
    let outcomes = explore("two consumers", PREEMPTIONS, |start| {
        let q = Arc::new(Queue::new());
        let cs: Vec<_> = (0..2u32)
            .map(|bit| {
                let q = q.clone();
                thread::spawn(move || q.steal_or_arm(bit))
            })
            .collect();
        start.after_spawn();
        q.push();
        let took: Vec<bool> = cs.into_iter().map(|c| c.join().unwrap()).collect();
        let sent = q.sent.load(Ordering::SeqCst);
        let job_left = q.job.load(Ordering::SeqCst) == 1;
        // A consumer still waiting: it took nothing and is armed or was sent a wake.
        let waiting_with_wake = (0..2).any(|b| !took[b] && sent & (1 << b) != 0);
        assert!(
            !job_left || waiting_with_wake,
            "the job waits and no waiting consumer holds a wake: {took:?} {sent:b}"
        );
        assert!(took.iter().filter(|&&t| t).count() <= 1, "one job taken twice");
        assert!(sent.count_ones() <= 1, "one push woke {} waiters", sent.count_ones());
        let armed = q.armed[0].load(Ordering::SeqCst).count_ones();
        assert_eq!(q.sleepers.load(Ordering::SeqCst), armed, "one decrement per arm");
        (took.contains(&true), sent.count_ones())
    });
    assert!(outcomes.iter().any(|&(_, wakes)| wakes == 1), "{outcomes:?}");
}

/// A waiter that gives up while another waits: if the push's wake went to the one that gave
/// up, it is handed on, so the job is taken or the other holds a wake.
#[test]
fn a_waiter_that_gives_up_hands_its_wake_on() {
    let outcomes = explore("give up", PREEMPTIONS, |start| {
        let q = Arc::new(Queue::new());
        let quitter = {
            let q = q.clone();
            thread::spawn(move || {
                if !q.steal_or_arm(1) {
                    q.give_up(1);
                }
            })
        };
        start.after_spawn();
        let stayed = q.steal_or_arm(0);
        q.push();
        quitter.join().unwrap();
        let sent = q.sent.load(Ordering::SeqCst);
        let job_left = q.job.load(Ordering::SeqCst) == 1;
        assert!(
            !job_left || stayed || sent & 1 != 0,
            "the job waits, the waiter that stayed was never woken: {sent:b}"
        );
        sent
    });
    assert!(outcomes.contains(&0b1), "{outcomes:?}");
}

/// Futex-kind waiters (`futex_ring`: an io_uring futex wait behind a descriptor) beside
/// datagram ones. The kernel's futex is modelled as a lock over its wait queue: a wait checks
/// the word under the lock and queues itself (or ends at once, as `EAGAIN`); `FUTEX_WAKE 1`
/// dequeues the first waiter under the same lock; a cancel dequeues a waiter still queued.
/// What the ring adds to a futex sleeper is the disarm: the wait of a waiter that stops must
/// be gone from the queue, else a later wake would go to it.
mod futex_kind {
    use super::*;
    use loom::sync::Mutex;

    #[derive(Default)]
    struct Kernel {
        queued: Vec<u32>,
        /// Waiters whose wait a wake ended (the ring's completion `0`), by id.
        woken: u64,
        /// Waiters whose wait ended at once: the word had moved (`EAGAIN`).
        moved: u64,
    }

    /// [`Queue`] plus the futex word and the kernel's side of it.
    struct FQueue {
        q: Queue,
        seq: AtomicU32,
        kernel: Mutex<Kernel>,
    }

    impl FQueue {
        fn new() -> Self {
            FQueue { q: Queue::new(), seq: AtomicU32::new(0), kernel: Mutex::new(Kernel::default()) }
        }

        /// The producer: publish, then the notify of `wait::notify_sleeper`: an armed datagram
        /// waiter if any, else `seq += 1` and `FUTEX_WAKE 1`.
        fn push(&self) {
            self.q.job.store(1, Ordering::Release);
            self.notify();
        }

        fn notify(&self) {
            match self.q.s().notify(true) {
                Wake::Nobody => {}
                Wake::Descriptor(bit) => {
                    self.q.sent.fetch_or(1 << bit, Ordering::SeqCst);
                }
                Wake::Futex => {
                    self.seq.fetch_add(1, Ordering::Release);
                    let mut k = self.kernel.lock().unwrap();
                    if !k.queued.is_empty() {
                        let id = k.queued.remove(0);
                        k.woken |= 1 << id;
                    }
                }
            }
        }

        /// `steal_or_arm` of futex-kind waiter `id`: true when it took the job; else its wait
        /// is in the kernel (or ended at once).
        fn steal_or_arm(&self, id: u32) -> bool {
            if self.q.take() {
                return true;
            }
            let seen = self.seq.load(Ordering::Acquire);
            self.q.s().enter();
            if self.q.take() {
                self.disarm(id);
                return true;
            }
            let mut k = self.kernel.lock().unwrap();
            if self.seq.load(Ordering::SeqCst) == seen {
                k.queued.push(id);
            } else {
                k.moved |= 1 << id;
            }
            false
        }

        /// The ring's disarm: cancel a queued wait, or read how it ended; then the waiter's
        /// own decrement.
        fn disarm(&self, id: u32) -> Disarmed {
            let woken = {
                let mut k = self.kernel.lock().unwrap();
                k.queued.retain(|&w| w != id);
                let woken = k.woken & (1 << id) != 0;
                k.woken &= !(1 << id);
                woken
            };
            self.q.s().leave();
            if woken {
                Disarmed::Woken
            } else {
                Disarmed::Quiet
            }
        }

        fn give_up(&self, id: u32) {
            if self.disarm(id) == Disarmed::Woken {
                self.notify();
            }
        }

        /// Whether waiter `id`'s descriptor is readable: its wait ended.
        fn readable(&self, id: u32) -> bool {
            let k = self.kernel.lock().unwrap();
            (k.woken | k.moved) & (1 << id) != 0
        }
    }

    /// Two futex-kind waiters, one push: the job is taken or a waiter that did not take it is
    /// readable; at most one wake; the count is back to the waiters still waiting.
    #[test]
    fn a_push_wakes_one_futex_waiter_and_loses_none() {
        let outcomes = explore("futex kind, two waiters", PREEMPTIONS, |start| {
            let q = Arc::new(FQueue::new());
            let cs: Vec<_> = (0..2u32)
                .map(|id| {
                    let q = q.clone();
                    thread::spawn(move || q.steal_or_arm(id))
                })
                .collect();
            start.after_spawn();
            q.push();
            let took: Vec<bool> = cs.into_iter().map(|c| c.join().unwrap()).collect();
            let job_left = q.q.job.load(Ordering::SeqCst) == 1;
            let readable: Vec<bool> = (0..2).map(|id| !took[id as usize] && q.readable(id)).collect();
            assert!(!job_left || readable.contains(&true), "lost wake-up: {took:?}");
            assert!(took.iter().filter(|&&t| t).count() <= 1, "one job taken twice");
            let k = q.kernel.lock().unwrap();
            assert!(k.woken.count_ones() <= 1, "one push woke {} waiters", k.woken.count_ones());
            let waiting = took.iter().filter(|&&t| !t).count() as u32;
            assert_eq!(q.q.sleepers.load(Ordering::SeqCst), waiting, "one decrement per arm");
            (took.contains(&true), k.woken.count_ones(), k.moved.count_ones())
        });
        assert!(outcomes.iter().any(|&(took, woken, _)| !took && woken == 1), "{outcomes:?}");
    }

    /// A futex-kind waiter that gives up beside one that stays: its wait is gone from the
    /// kernel (a push then wakes the one that stays), and a wake it took first is handed on.
    #[test]
    fn a_futex_waiter_that_gives_up_leaves_no_wait_and_hands_its_wake_on() {
        let outcomes = explore("futex kind, give up", PREEMPTIONS, |start| {
            let q = Arc::new(FQueue::new());
            let quitter = {
                let q = q.clone();
                thread::spawn(move || {
                    if !q.steal_or_arm(1) {
                        q.give_up(1);
                    }
                })
            };
            start.after_spawn();
            let stayed = q.steal_or_arm(0);
            q.push();
            quitter.join().unwrap();
            let job_left = q.q.job.load(Ordering::SeqCst) == 1;
            assert!(!job_left || stayed || q.readable(0), "the job waits, the waiter that stayed is asleep");
            let k = q.kernel.lock().unwrap();
            assert!(!k.queued.contains(&1), "the waiter that gave up left its wait queued");
            (stayed, k.woken)
        });
        assert!(outcomes.contains(&(false, 0b1)), "{outcomes:?}");
    }

    /// One datagram waiter and one futex-kind waiter, one push: wake-one across the kinds,
    /// and none lost.
    #[test]
    fn a_push_wakes_one_waiter_across_the_two_kinds() {
        explore("datagram and futex kinds", PREEMPTIONS, |start| {
            let q = Arc::new(FQueue::new());
            let dgram = {
                let q = q.clone();
                thread::spawn(move || q.q.steal_or_arm(0))
            };
            start.after_spawn();
            let futex_took = q.steal_or_arm(1);
            q.push();
            let dgram_took = dgram.join().unwrap();
            let sent = q.q.sent.load(Ordering::SeqCst) & 1 != 0;
            let job_left = q.q.job.load(Ordering::SeqCst) == 1;
            let futex_ready = !futex_took && q.readable(1);
            assert!(!job_left || (!dgram_took && sent) || futex_ready, "lost wake-up");
            let k = q.kernel.lock().unwrap();
            assert!(u32::from(sent) + k.woken.count_ones() <= 1, "one push woke both kinds");
            (dgram_took, futex_took, sent, k.woken)
        });
    }
}
