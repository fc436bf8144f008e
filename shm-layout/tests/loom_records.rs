//! loom models of the job record's state word (`shm-layout/src/record/state.rs`).
//!
//! Run with (see `.ci/loom`)
//! `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg xtcq_loom" cargo test -p xtcq-shm --release --test loom_records`.
//!
//! Every transition is one CAS on one word, so "exactly one of two racing transitions wins"
//! is the property; the orderings are checked by a payload in a `loom::cell::UnsafeCell`,
//! whose accesses loom reports as a causality violation unless they are ordered by
//! happens-before (publish → claim, ack → the next begin_fill), and by a Relaxed field that
//! must not be read stale (the attempt count a nack publishes).
//!
//! As in `loom_deque.rs`, each model is checked twice — main thread first and spawned thread
//! first — because loom 0.7.3's DPOR can miss a race when the spawned thread's own access of
//! a word hides the main thread's (tokio-rs/loom#166, #392), and each test asserts that the
//! racy outcomes were in fact reached.
#![cfg(xtcq_loom)]

mod loom_support;
use loom_support::explore;

use std::collections::BTreeSet;
use std::fmt::Debug;

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use xtcq_shm::{RecordState, State, StateWord, NO_HOLDER};

/// Default preemption bound: every record model has two threads and a handful of CASes, so at
/// 10 raising it finds nothing more (same counts as at 20), and it takes milliseconds.
const PREEMPTIONS: usize = 10;

/// Process slots of the model's actors.
const A: u32 = 1;
const B: u32 = 2;
const C: u32 = 3;

fn word(generation: u32, state: State, holder: u32) -> u64 {
    StateWord::pack(generation, state, holder).0
}

/// A record: its state word, a payload that is not atomic, and the attempt count.
struct Record {
    state: AtomicU64,
    payload: UnsafeCell<u64>,
    attempts: AtomicU32,
}

// SAFETY: the payload is only touched under the record protocol (by the filler between
// `begin_fill` and `publish`, by the holder between `claim` and `ack`); loom checks that
// those accesses are ordered, which is what these tests are about.
unsafe impl Sync for Record {}

impl Record {
    fn new(w: u64) -> Arc<Self> {
        Arc::new(Record {
            state: AtomicU64::new(w),
            payload: UnsafeCell::new(0),
            attempts: AtomicU32::new(0),
        })
    }
    fn st(&self) -> RecordState<'_> {
        RecordState(&self.state)
    }
    fn read_payload(&self) -> u64 {
        // SAFETY: see `impl Sync`; a racing write is reported by loom, not executed as UB.
        self.payload.with(|p| unsafe { *p })
    }
    fn write_payload(&self, v: u64) {
        // SAFETY: as above.
        self.payload.with_mut(|p| unsafe { *p = v })
    }
}

/// Two consumers claim the same `Queued` handle (a handle that left a deque twice, or a
/// thief and an overflow popper that found the same record): exactly one wins, and the loser
/// is told who holds it.
#[test]
fn two_claimers_exactly_one_wins() {
    let seen = explore("two_claimers_exactly_one_wins", PREEMPTIONS, |start| {
        let r = Record::new(word(1, State::Queued, NO_HOLDER));
        let r2 = r.clone();
        let b = thread::spawn(move || r2.st().claim(1, B));
        start.after_spawn();
        let a = r.st().claim(1, A);
        let b = b.join().unwrap();
        let winner = match (a, b) {
            (Ok(()), Err(c)) => {
                assert_eq!(c.found, StateWord::pack(1, State::Claimed, A));
                assert!(!c.is_stale(1));
                A
            }
            (Err(c), Ok(())) => {
                assert_eq!(c.found, StateWord::pack(1, State::Claimed, B));
                B
            }
            other => panic!("not exactly one claim won: {other:?}"),
        };
        assert_eq!(r.st().load(), StateWord::pack(1, State::Claimed, winner));
        winner
    });
    assert_eq!(seen, BTreeSet::from([A, B]));
}

/// What the consumer with the old handle saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum OldHandle {
    /// Its claim of generation 1 won (it came first) and it acked.
    Won,
    /// Generation 1 was held by A.
    Busy,
    /// The record had moved on to generation 2.
    Stale,
}

/// A claims generation 1, acks it (the generation goes to 2) and reuses the record for a
/// new job; B holds a duplicate of the generation-1 handle and claims it. Exactly one of
/// them runs generation 1, and once the generation has moved on the old handle's claim
/// fails as stale — it never claims the new job.
#[test]
fn stale_generation_claim_fails() {
    let seen = explore("stale_generation_claim_fails", PREEMPTIONS, |start| {
        let r = Record::new(word(1, State::Queued, NO_HOLDER));
        let r2 = r.clone();
        let b = thread::spawn(move || match r2.st().claim(1, B) {
            Ok(()) => {
                r2.st().ack(1, B).unwrap();
                OldHandle::Won
            }
            Err(c) if c.is_stale(1) => {
                assert_eq!(c.found.generation(), 2);
                OldHandle::Stale
            }
            Err(c) => {
                assert_eq!(c.found, StateWord::pack(1, State::Claimed, A));
                OldHandle::Busy
            }
        });
        start.after_spawn();
        let a_won = r.st().claim(1, A).is_ok();
        if a_won {
            r.st().ack(1, A).unwrap();
            // Reuse: only A touches the freed record, so this cannot fail.
            assert_eq!(r.st().begin_fill(A), Ok(2));
            r.st().publish(2, A).unwrap();
        }
        let b = b.join().unwrap();
        assert_eq!(a_won, b != OldHandle::Won, "A won: {a_won}, B saw {b:?}");
        let expect = if a_won {
            StateWord::pack(2, State::Queued, NO_HOLDER)
        } else {
            StateWord::pack(2, State::Free, NO_HOLDER)
        };
        assert_eq!(r.st().load(), expect);
        b
    });
    assert_eq!(seen, BTreeSet::from([OldHandle::Won, OldHandle::Busy, OldHandle::Stale]));
}

/// The holder acks while recovery (or an expired lease) re-queues the same claim: exactly
/// one transition applies, and the word is what that one leaves.
#[test]
fn ack_vs_requeue_claimed() {
    let seen = explore("ack_vs_requeue_claimed", PREEMPTIONS, |start| {
        let r = Record::new(word(1, State::Claimed, A));
        let r2 = r.clone();
        let recovery = thread::spawn(move || r2.st().requeue_claimed(1, A));
        start.after_spawn();
        let ack = r.st().ack(1, A);
        let requeue = recovery.join().unwrap();
        let acked = match (ack, requeue) {
            (Ok(()), Err(c)) => {
                assert_eq!(c.found, StateWord::pack(2, State::Free, NO_HOLDER));
                assert!(c.is_stale(1));
                true
            }
            (Err(c), Ok(())) => {
                // Re-queued under the next generation: the holder learns its ack was late,
                // and its handle can never match the job's next claim.
                assert_eq!(c.found, StateWord::pack(2, State::Queued, NO_HOLDER));
                assert!(c.is_stale(1));
                false
            }
            other => panic!("not exactly one of ack / requeue applied: {other:?}"),
        };
        let w = r.st().load();
        if acked {
            assert_eq!(w, StateWord::pack(2, State::Free, NO_HOLDER));
            assert!(r.st().claim(1, B).is_err(), "an acked job was claimed again");
        } else {
            assert_eq!(w, StateWord::pack(2, State::Queued, NO_HOLDER));
            r.st().claim(2, B).expect("a re-queued job can be claimed again");
        }
        acked
    });
    assert_eq!(seen, BTreeSet::from([false, true]));
}

/// The holder dead-letters while recovery re-queues; then a purge (`withdraw` from Dead)
/// races a requeue of the dead letter (`take_dead` + `requeue_written`, as `requeue_dead`
/// does). Each pair has exactly one winner, and each ending moves the generation on.
#[test]
fn dead_letter_vs_requeue_then_revive_vs_purge() {
    let seen = explore("dead_letter_vs_requeue_then_revive_vs_purge", PREEMPTIONS, |start| {
        let r = Record::new(word(1, State::Claimed, A));
        let r2 = r.clone();
        let other = thread::spawn(move || {
            let requeued = r2.st().requeue_claimed(1, A).is_ok();
            // An operator's purge of the dead letter, if there is one.
            let purged = r2.st().withdraw(2, State::Dead).is_ok();
            (requeued, purged)
        });
        start.after_spawn();
        let dead = r.st().dead_letter(1, A).is_ok();
        let revived = r.st().take_dead(2, B).is_ok();
        if revived {
            r.st().requeue_written(2, B).expect("nothing moves a Writing record but its holder");
        }
        let (requeued, purged) = other.join().unwrap();
        assert!(dead != requeued, "dead {dead}, requeued {requeued}");
        assert!(!(revived && purged), "a dead letter was both revived and purged");
        if !dead {
            assert!(!revived && !purged);
        }
        let expect = match (requeued, revived, purged) {
            (true, ..) => StateWord::pack(2, State::Queued, NO_HOLDER),
            (false, true, false) => StateWord::pack(3, State::Queued, NO_HOLDER),
            (false, false, true) => StateWord::pack(3, State::Free, NO_HOLDER),
            (false, false, false) => StateWord::pack(2, State::Dead, NO_HOLDER),
            (false, true, true) => unreachable!(),
        };
        assert_eq!(r.st().load(), expect);
        (dead, revived, purged)
    });
    // Re-queued; dead then revived; dead then purged (revive came too late or too early).
    assert!(seen.contains(&(false, false, false)), "{seen:?}");
    assert!(seen.contains(&(true, true, false)), "{seen:?}");
    assert!(seen.contains(&(true, false, true)), "{seen:?}");
}

/// publish → claim is a happens-before edge: a consumer whose claim succeeds sees the
/// payload the filler wrote before publishing (a plain, non-atomic write).
#[test]
fn publish_claim_orders_payload() {
    let seen = explore("publish_claim_orders_payload", PREEMPTIONS, |start| {
        let r = Record::new(word(1, State::Free, NO_HOLDER));
        let r2 = r.clone();
        let consumer = thread::spawn(move || {
            let claimed = r2.st().claim(1, B).is_ok();
            if claimed {
                assert_eq!(r2.read_payload(), 42, "claimed a job before its payload");
            }
            claimed
        });
        start.after_spawn();
        assert_eq!(r.st().begin_fill(A), Ok(1));
        r.write_payload(42);
        r.st().publish(1, A).unwrap();
        consumer.join().unwrap()
    });
    assert_eq!(seen, BTreeSet::from([false, true]));
}

/// Control for the test above: publishing with a Relaxed store instead of `publish`'s
/// Release CAS is caught by loom as a causality violation on the payload. (Shows that the
/// payload check has teeth; it goes around `RecordState` on purpose.)
#[test]
fn control_relaxed_publish_is_caught() {
    let r = std::panic::catch_unwind(|| {
        explore("control_relaxed_publish_is_caught", PREEMPTIONS, |start| {
            let r = Record::new(word(1, State::Filling, A));
            let r2 = r.clone();
            let consumer = thread::spawn(move || {
                if r2.st().claim(1, B).is_ok() {
                    r2.read_payload();
                }
            });
            start.after_spawn();
            r.write_payload(42);
            r.state.store(word(1, State::Queued, NO_HOLDER), Ordering::Relaxed);
            consumer.join().unwrap();
        })
    });
    let payload = r.expect_err("loom did not catch a payload published with a Relaxed store");
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(msg.contains("Causality violation"), "failed for another reason: {msg}");
    eprintln!("control: loom caught the Relaxed publish, as it should: {msg}");
}

/// ack → begin_fill is a happens-before edge: the previous holder's read of the payload is
/// done before the next filler overwrites it.
#[test]
fn ack_orders_payload_reads_before_reuse() {
    let seen = explore("ack_orders_payload_reads_before_reuse", PREEMPTIONS, |start| {
        let r = Record::new(word(1, State::Claimed, A));
        r.write_payload(7);
        let r2 = r.clone();
        let holder = thread::spawn(move || {
            assert_eq!(r2.read_payload(), 7);
            r2.st().ack(1, A).unwrap();
        });
        start.after_spawn();
        let reused = match r.st().begin_fill(B) {
            Ok(g) => {
                assert_eq!(g, 2);
                r.write_payload(8);
                true
            }
            Err(_) => false,
        };
        holder.join().unwrap();
        reused
    });
    assert_eq!(seen, BTreeSet::from([false, true]));
}

/// A nack (`requeue_claimed` by the holder) publishes the attempt count it wrote while
/// holding the job: the next claimer reads it, Relaxed, and never the old value.
#[test]
fn nack_publishes_attempt_count() {
    let seen = explore("nack_publishes_attempt_count", PREEMPTIONS, |start| {
        let r = Record::new(word(1, State::Claimed, A));
        let r2 = r.clone();
        let holder = thread::spawn(move || {
            r2.st().begin_write(1, A).unwrap();
            let n = r2.attempts.load(Ordering::Relaxed);
            r2.attempts.store(n + 1, Ordering::Relaxed);
            r2.st().requeue_written(1, A).unwrap();
        });
        start.after_spawn();
        let claimed = r.st().claim(2, B).is_ok();
        if claimed {
            assert_eq!(r.attempts.load(Ordering::Relaxed), 1, "stale attempt count");
        }
        holder.join().unwrap();
        claimed
    });
    assert_eq!(seen, BTreeSet::from([false, true]));
}

/// Lease expiry revokes a live holder's claim while the holder gives the job back itself;
/// the revoker re-runs the job (claim and ack by B) and the record is refilled by another
/// job (C). The holder writes the header (the payload cell stands for its attempt count)
/// only inside `Writing`, so its write is ordered against the revoker's and the next job's
/// (loom would report an unordered one) and never lands on the next job.
#[test]
fn give_back_in_writing_vs_revoke_and_reuse() {
    let seen = explore("give_back_in_writing_vs_revoke_and_reuse", PREEMPTIONS, |start| {
        let r = Record::new(word(1, State::Claimed, A));
        let r2 = r.clone();
        let expiry = thread::spawn(move || revoke_rerun_and_refill(&r2));
        start.after_spawn();
        let gave_back = r.st().begin_write(1, A).is_ok();
        if gave_back {
            r.write_payload(r.read_payload() + 1);
            r.st().requeue_written(1, A).expect("nothing moves a Writing record but its holder");
        }
        let revoked = expiry.join().unwrap();
        assert!(gave_back != revoked, "gave back {gave_back}, revoked {revoked}");
        if revoked {
            assert_eq!(r.st().load(), StateWord::pack(3, State::Queued, NO_HOLDER));
            assert_eq!(r.read_payload(), 100, "the late holder wrote on the next job's header");
        } else {
            assert_eq!(r.st().load(), StateWord::pack(2, State::Queued, NO_HOLDER));
            assert_eq!(r.read_payload(), 1);
        }
        revoked
    });
    assert_eq!(seen, BTreeSet::from([false, true]));
}

/// What lease expiry and the jobs after it do in the two models above and below: revoke A's
/// claim (as `recovery::give_back` does), count the attempt, re-queue; B claims and acks; C
/// fills the record with a new job whose header says 100. `false` if A's claim was gone.
fn revoke_rerun_and_refill(r: &Record) -> bool {
    let (from, to) = (word(1, State::Claimed, A), word(1, State::Claimed, NO_HOLDER));
    if r.state.compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return false;
    }
    r.write_payload(r.read_payload() + 1);
    r.st().requeue_claimed(1, NO_HOLDER).unwrap();
    r.st().claim(2, B).unwrap();
    r.st().ack(2, B).unwrap();
    assert_eq!(r.st().begin_fill(C).unwrap(), 3);
    r.write_payload(100);
    r.st().publish(3, C).unwrap();
    true
}

/// Control for the test above: the give-back as it was before `Writing` (check the word is
/// still ours, write the header, then CAS `Claimed -> Queued`) lets the holder's write race
/// the revoker's and the next job's, and loom finds it. Shows the model above has teeth.
#[test]
fn control_check_then_write_give_back_is_caught() {
    let r = std::panic::catch_unwind(|| {
        explore("control_check_then_write_give_back_is_caught", PREEMPTIONS, |start| {
            let r = Record::new(word(1, State::Claimed, A));
            let r2 = r.clone();
            let expiry = thread::spawn(move || revoke_rerun_and_refill(&r2));
            start.after_spawn();
            if r.st().load() == StateWord::pack(1, State::Claimed, A) {
                r.write_payload(r.read_payload() + 1);
                let _ = r.st().requeue_claimed(1, A);
            }
            if expiry.join().unwrap() {
                assert_eq!(r.read_payload(), 100, "the late holder wrote on the next job's header");
            }
        })
    });
    let payload = r.expect_err("loom did not catch the check-then-write give-back");
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(
        msg.contains("Causality violation") || msg.contains("the late holder wrote"),
        "failed for another reason: {msg}"
    );
    eprintln!("control: loom caught the check-then-write give-back, as it should: {msg}");
}

/// A lease extension (`begin_write`, deadline store, `end_write`) races lease expiry: exactly
/// one wins; a lost extension writes nothing.
#[test]
fn extend_lease_vs_revoke() {
    let seen = explore("extend_lease_vs_revoke", PREEMPTIONS, |start| {
        let r = Record::new(word(1, State::Claimed, A));
        let r2 = r.clone();
        let expiry = thread::spawn(move || revoke_rerun_and_refill(&r2));
        start.after_spawn();
        let extended = r.st().begin_write(1, A).is_ok();
        if extended {
            r.write_payload(50);
            r.st().end_write(1, A).expect("nothing moves a Writing record but its holder");
        }
        let revoked = expiry.join().unwrap();
        if revoked {
            assert_eq!(r.read_payload(), 100, "a lost extension wrote on the next job's header");
        } else {
            assert!(extended);
            assert_eq!(
                r.st().load(),
                StateWord::pack(2, State::Claimed, A),
                "the extension moves the generation on"
            );
            assert_eq!(r.read_payload(), 50);
        }
        (extended, revoked)
    });
    // The extension first (expiry then finds Writing, or the next generation, and gives up),
    // or the revoke first (the extension fails). Never both: the revoke works from the word
    // it read before the extension, which the extension changed.
    assert_eq!(seen, BTreeSet::from([(true, false), (false, true)]), "{seen:?}");
}

/// A give-back with a delay (`delay_written`, publishing the attempt count) races the
/// daemon's release of the due job (`release_due`, then a claim), and a forced queue delete
/// (`withdraw` from `Delayed`) comes after the give-back. A release before the give-back
/// fails; after it, exactly one of release and withdraw wins; a claim after the release
/// reads the attempt count the give-back wrote.
#[test]
fn delayed_give_back_then_release_vs_withdraw() {
    let seen = explore("delayed_give_back_then_release_vs_withdraw", PREEMPTIONS, |start| {
        let r = Record::new(word(1, State::Writing, A));
        let r2 = r.clone();
        let daemon = thread::spawn(move || {
            let released = r2.st().release_due(2).is_ok();
            let attempts =
                (released && r2.st().claim(2, B).is_ok()).then(|| r2.attempts.load(Ordering::Relaxed));
            (released, attempts)
        });
        start.after_spawn();
        r.attempts.store(1, Ordering::Relaxed);
        r.st().delay_written(1, A).expect("nothing moves a Writing record but its holder");
        let withdrawn = r.st().withdraw(2, State::Delayed).is_ok();
        let (released, attempts) = daemon.join().unwrap();
        assert!(released != withdrawn, "released {released}, withdrawn {withdrawn}");
        if released {
            assert_eq!(attempts, Some(1), "the claim read a stale attempt count");
            assert_eq!(r.st().load(), StateWord::pack(2, State::Claimed, B));
        } else {
            assert_eq!(r.st().load(), StateWord::pack(3, State::Free, NO_HOLDER));
        }
        released
    });
    assert_eq!(seen, BTreeSet::from([false, true]));
}
