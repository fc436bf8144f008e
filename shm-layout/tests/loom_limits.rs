//! loom models of a queue's limit words (`shm-layout/src/limit_words.rs`): the running count
//! of a concurrency limit against claims, settles and the daemon's give-back of a revoked
//! claim, and the rate limit's token bucket against racing takes and give-backs.
//!
//! Run with (see `.ci/loom`)
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg xtcq_loom" cargo test -p xtcq-shm --release --test loom_limits`.
//!
//! Not modelled: the daemon's correction of a count left high by a process killed between
//! its slot and its claim (`Segment::correct_running`). It lowers a count only after two
//! walks far apart in time agree, an assumption about time a model checker has no notion of.
#![cfg(xtcq_loom)]

mod loom_support;
use loom_support::explore;

use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use xtcq_shm::limit_words::{Rate, RateWords, Running};

const PREEMPTIONS: usize = 2;

/// Record words of the concurrency model: queued, claimed by consumer 1 or 2, acked, or taken
/// back by the daemon (its fence reported the command stopped).
const QUEUED: u32 = 0;
const ACKED: u32 = 3;
const REVOKED: u32 = 4;

/// Two jobs of a queue limited to one running at once.
struct Limited {
    running: AtomicU64,
    jobs: [AtomicU32; 2],
    /// Slots held by consumers and by the daemon for the claims it took back: what the count
    /// must never let past the limit (a claim, and its command, runs only inside one).
    live: AtomicU32,
    takes: AtomicU32,
    gives: AtomicU32,
}

const MAX: u32 = 1;

impl Limited {
    /// A slot given back: it no longer holds a claim.
    fn give(&self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
        Running::give(&self.running);
        self.gives.fetch_add(1, Ordering::SeqCst);
    }

    /// A consumer: a slot, then a claim, then its ack; the slot goes back when the take found
    /// nothing, or once the ack's CAS won (a revoked claim's slot is the daemon's to give).
    fn consume(&self, me: u32) {
        if !Running::take(&self.running, MAX) {
            return;
        }
        let before = self.live.fetch_add(1, Ordering::SeqCst);
        assert!(before < MAX, "{} slots held under a limit of {MAX}", before + 1);
        self.takes.fetch_add(1, Ordering::SeqCst);
        let Some(job) = self
            .jobs
            .iter()
            .find(|j| j.compare_exchange(QUEUED, me, Ordering::AcqRel, Ordering::Acquire).is_ok())
        else {
            self.give();
            return;
        };
        if job.compare_exchange(me, ACKED, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.give();
        }
    }

    /// The daemon's lease expiry: takes a claimed job back (its slot with it), and once its
    /// fence stopped the command, gives the slot back.
    fn revoke_one(&self) {
        for job in &self.jobs {
            let w = job.load(Ordering::Acquire);
            if (w == 1 || w == 2)
                && job.compare_exchange(w, REVOKED, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                self.give();
                return;
            }
        }
    }
}

#[test]
fn the_running_count_never_lets_two_run_and_each_slot_goes_back_once() {
    let outcomes = explore("running count", PREEMPTIONS, |start| {
        let q = Arc::new(Limited {
            running: AtomicU64::new(0),
            jobs: [AtomicU32::new(QUEUED), AtomicU32::new(QUEUED)],
            live: AtomicU32::new(0),
            takes: AtomicU32::new(0),
            gives: AtomicU32::new(0),
        });
        let other = {
            let q = q.clone();
            thread::spawn(move || q.consume(2))
        };
        let daemon = {
            let q = q.clone();
            thread::spawn(move || q.revoke_one())
        };
        start.after_spawn();
        q.consume(1);
        other.join().unwrap();
        daemon.join().unwrap();
        let (takes, gives) = (q.takes.load(Ordering::SeqCst), q.gives.load(Ordering::SeqCst));
        assert_eq!(takes, gives, "every slot taken went back exactly once");
        assert_eq!(Running::count(q.running.load(Ordering::SeqCst)), 0, "the count is restored");
        assert_eq!(q.live.load(Ordering::SeqCst), 0);
        let settled: Vec<u32> = q.jobs.iter().map(|j| j.load(Ordering::SeqCst)).collect();
        (takes, settled)
    });
    // Both consumers ran a job in some interleavings, a revoke took one in others, and a
    // consumer found the limit reached (fewer takes) in yet others.
    assert!(outcomes.iter().any(|(_, s)| s == &[ACKED, ACKED]), "{outcomes:?}");
    assert!(outcomes.iter().any(|(_, s)| s.contains(&REVOKED)), "{outcomes:?}");
    assert!(outcomes.iter().any(|(t, _)| *t < 2), "{outcomes:?}");
}

const INTERVAL: u64 = 10;
const BURST: u32 = 2;

fn bucket() -> RateWords {
    RateWords {
        interval_ns: AtomicU64::new(INTERVAL),
        burst: AtomicU32::new(BURST),
        theoretical: AtomicU64::new(0),
    }
}

#[test]
fn racing_takes_and_give_backs_keep_the_bound_and_a_whole_give_back_loses_no_burst() {
    let outcomes = explore("token bucket", PREEMPTIONS, |start| {
        let words = Arc::new(bucket());
        // A looks at an empty queue at t=100 with one token and gives it back at t=110; B
        // takes at t=105 and keeps what it got (the bucket A gives back to may have moved).
        let a = {
            let words = words.clone();
            thread::spawn(move || {
                if let Ok(t) = Rate::take(&words, 1, 100) {
                    Rate::give_back(&words, t, t.count, || 110);
                }
            })
        };
        start.after_spawn();
        let b = Rate::take(&words, 2, 105).map_or(0, |t| t.count);
        a.join().unwrap();
        // Whatever else is due at t=110 is taken too: between t=100 and t=110 at most
        // BURST + 10 / INTERVAL claims may start, and only B's and these did.
        let c = Rate::take(&words, 4, 110).map_or(0, |t| t.count);
        let bound = BURST as usize + 1;
        assert!(b + c <= bound, "{b} + {c} tokens used between t=100 and t=110 (at most {bound})");
        // Nothing is lost for good: by the time the bucket refilled, the whole burst is there.
        let later = Rate::take(&words, 4, 1_000).map_or(0, |t| t.count);
        assert_eq!(later, BURST as usize, "the burst after a quiet spell");
        (b, c)
    });
    // B got the whole burst when A's give-back came first, and one token while A held one.
    assert!(outcomes.iter().any(|&(b, _)| b == 2), "{outcomes:?}");
    assert!(outcomes.iter().any(|&(b, _)| b == 1), "{outcomes:?}");
}
