//! loom model of the searchers (`shm-layout/src/wake_protocol.rs`, `Searchers`): at most a
//! bound of waiting consumers look for work, the others sleep at once; a push wakes a sleeper
//! only while nobody searches, and the last searcher to take a job wakes one when jobs are
//! left (it hands the search on).
//!
//! Run with (see `.ci/loom`)
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg xtcq_loom" cargo test -p xtcq-shm --release --test loom_search`.
//!
//! The queue is a count of jobs (a push is a Release increment, a take a CAS decrement after
//! the steal's fence); the futex is its sequence word: a sleeper whose read of it is stale
//! when the model ends was woken (the kernel compares under its lock: `FUTEX_WAIT` returns at
//! once or is woken). One producer pushes two jobs against two consumers that each take at
//! most one job, with a bound of one searcher. Property, checked at the end of every
//! interleaving: **no job waits while a consumer sleeps** — jobs left and a consumer asleep
//! means some sleeper was woken. Two variants must fail: a searcher that does not hand the
//! search on, and (with `--cfg xtcq_loom_drop_search_fence`) one whose look at what is left
//! comes without the fence after its leaving.
#![cfg(xtcq_loom)]

mod loom_support;
use loom_support::explore;

use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use xtcq_shm::wake_protocol::{Searchers, Sleepers};

const PREEMPTIONS: usize = 3;
/// Searchers at once.
const BOUND: u32 = 1;

struct Queue {
    jobs: AtomicU32,
    seq: AtomicU32,
    sleepers: AtomicU32,
    armed: [AtomicU64; 4],
    searching: AtomicU32,
}

/// How a consumer's wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum End {
    /// Took a job (as a searcher or not).
    Took { searcher: bool },
    /// Asleep, having read `seq` as this.
    Asleep(u32),
}

impl Queue {
    fn new() -> Self {
        Queue {
            jobs: AtomicU32::new(0),
            seq: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            armed: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            searching: AtomicU32::new(0),
        }
    }

    fn sleepers(&self) -> Sleepers<'_> {
        Sleepers { sleepers: &self.sleepers, armed: &self.armed }
    }

    fn searchers(&self) -> Searchers<'_> {
        Searchers { searching: &self.searching }
    }

    /// A steal: its fence, then one RMW decides who takes a job.
    fn take(&self) -> bool {
        fence(Ordering::SeqCst);
        let mut n = self.jobs.load(Ordering::Acquire);
        while n > 0 {
            match self.jobs.compare_exchange(n, n - 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(v) => n = v,
            }
        }
        false
    }

    /// `wait::notify`: a futex wake when someone sleeps and nobody searches.
    fn notify(&self) {
        if self.sleepers().any() && self.searchers().idle() {
            self.seq.fetch_add(1, Ordering::Release);
        }
    }

    fn push(&self) {
        self.jobs.fetch_add(1, Ordering::Release);
        self.notify();
    }

    /// `wait::wait_for` until the consumer takes a job or sleeps: a first look, a search
    /// (one look stands for the many of a real search) if the bound lets it, then the sleep
    /// protocol with its second look.
    fn consumer(&self, hand_on: bool) -> End {
        if self.take() {
            return End::Took { searcher: false };
        }
        let s = self.searchers();
        while s.begin(BOUND) {
            if self.take() {
                if s.end() && hand_on && self.jobs.load(Ordering::Acquire) != 0 {
                    self.notify();
                }
                return End::Took { searcher: true };
            }
            // Gave up: the last one searches again while jobs are left (one look of a real
            // search stands for them all).
            if !(s.end() && self.jobs.load(Ordering::Acquire) != 0) {
                break;
            }
        }
        if self.take() {
            return End::Took { searcher: false };
        }
        let seen = self.seq.load(Ordering::Acquire);
        self.sleepers().enter();
        if self.take() {
            self.sleepers().leave();
            return End::Took { searcher: false };
        }
        End::Asleep(seen)
    }
}

/// Two consumers, two pushes; checks the property and returns the two ends.
fn model(hand_on: bool, start: loom_support::Start) -> [End; 2] {
    let q = Arc::new(Queue::new());
    let cs: Vec<_> = (0..2)
        .map(|_| {
            let q = q.clone();
            thread::spawn(move || q.consumer(hand_on))
        })
        .collect();
    start.after_spawn();
    q.push();
    q.push();
    let ends: Vec<End> = cs.into_iter().map(|c| c.join().unwrap()).collect();
    let left = q.jobs.load(Ordering::SeqCst);
    let seq = q.seq.load(Ordering::SeqCst);
    let took = ends.iter().filter(|e| matches!(e, End::Took { .. })).count() as u32;
    assert_eq!(took + left, 2, "a job taken twice or lost");
    let asleep: Vec<u32> =
        ends.iter().filter_map(|e| if let End::Asleep(s) = e { Some(*s) } else { None }).collect();
    let woken = asleep.iter().any(|&s| s != seq);
    assert!(left == 0 || asleep.is_empty() || woken, "{left} job(s) wait while {ends:?} sleep unwoken");
    assert_eq!(q.searching.load(Ordering::SeqCst), 0, "a searcher left counted");
    [ends[0], ends[1]]
}

#[test]
#[cfg(not(xtcq_loom_drop_search_fence))]
fn no_job_waits_while_a_consumer_sleeps() {
    let seen = explore("searchers", PREEMPTIONS, |start| model(true, start));
    let searcher_took = |e: &[End; 2]| e.contains(&End::Took { searcher: true });
    let slept = |e: &[End; 2]| e.iter().any(|x| matches!(x, End::Asleep(_)));
    // Reached: a searcher took a job while the other consumer slept (the hand-on's case).
    assert!(seen.iter().any(|e| searcher_took(e) && slept(e)), "{seen:?}");
}

#[test]
#[cfg(not(xtcq_loom_drop_search_fence))]
fn without_the_hand_on_a_job_waits_while_a_consumer_sleeps() {
    let r = std::panic::catch_unwind(|| {
        explore("searchers without the hand-on", PREEMPTIONS, |s| model(false, s))
    });
    assert!(r.is_err(), "loom found no job left to a sleeper without the searcher's hand-on");
}

#[test]
#[cfg(xtcq_loom_drop_search_fence)]
fn without_the_fence_a_job_waits_while_a_consumer_sleeps() {
    let r =
        std::panic::catch_unwind(|| explore("searchers without the fence", PREEMPTIONS, |s| model(true, s)));
    assert!(r.is_err(), "loom found no job left to a sleeper without the searcher's fence");
}
