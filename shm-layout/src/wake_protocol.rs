//! The one wait protocol of a queue: who sleeps, and which sleeper a push wakes.
//!
//! A consumer waits either in a futex (`wait::wait_for`, or an io_uring's futex wait behind a
//! descriptor: `futex_ring`) or on a datagram descriptor its event loop polls (an epoll,
//! tokio, asyncio, PostgreSQL's `WaitEventSet`). All count in the queue's `sleepers`; a
//! datagram waiter also sets its bit in `armed` (one bit per descriptor the daemon handed out
//! for the queue). A producer that published work wakes one sleeper: it claims an armed bit
//! (and sends that waiter a datagram) or, when none is armed, wakes one futex sleeper (the
//! kernel picks one of them, in `FUTEX_WAIT` or in a ring alike).
//!
//! ```text
//!  consumer (descriptor)                       producer
//!  armed |= bit        (SeqCst)                publish the job (Release)
//!  sleepers += 1       (SeqCst)                fence(SeqCst)
//!  look for work again -> found: disarm        s = sleepers (Acquire)
//!  poll the descriptor                         s != 0: claim a bit (clear it, sleepers -= 1)
//!                                                      and send it a datagram, else FUTEX_WAKE 1
//! ```
//!
//! Rules kept:
//! - **no system call on a push when nobody waits**: the producer's fast path is a fence and
//!   one load, as before;
//! - **no lost wake-up**: the sleepers increment and the producer's fence are the same Dekker
//!   pair as the futex's: either the producer sees the increment, or the consumer's second
//!   look sees the job. The bit is set *before* the increment, so a producer whose Acquire
//!   load saw the increment also sees the bit;
//! - **wake-one**: a claim clears one bit with one RMW; two producers never claim the same
//!   bit, and a claimed waiter is no longer counted;
//! - **exactly one decrement per arm**: whoever clears the bit (the producer's claim or the
//!   consumer's disarm) takes it off `sleepers`. A consumer whose disarm finds the bit
//!   already clear was sent a wake; if it will not take a job, it hands the wake on (a
//!   notify of its own), so that no job waits while another consumer sleeps.
//!
//! Words in shared memory are not trusted: a bit index is always masked, and garbage can only
//! cause spurious wakes or a waiter left to the daemon's nudge (`sleepers` wrapping is
//! harmless: a non-zero count only costs a producer a look at the bits).

use crate::sync::{fence, AtomicU32, AtomicU64, Ordering};

/// Words of armed bits per queue.
pub const WAKE_WORDS: usize = 4;
/// Descriptor waiters one queue can have armed at once.
pub const WAKE_BITS: u32 = (WAKE_WORDS * 64) as u32;

/// A queue's sleeper count and armed bits, as resolved views.
#[derive(Clone, Copy)]
pub struct Sleepers<'a> {
    /// Consumers inside a wait, of either kind.
    pub sleepers: &'a AtomicU32,
    /// Descriptor waiters armed ([`WAKE_WORDS`] words).
    pub armed: &'a [AtomicU64],
}

/// What a producer's notify found to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Nobody sleeps.
    Nobody,
    /// Descriptor waiter `bit` was claimed: send it its wake.
    Descriptor(u32),
    /// Sleepers, but none armed on a descriptor: wake one futex sleeper.
    Futex,
}

/// What a consumer's disarm found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disarmed {
    /// The bit was still set: no wake was sent, and the waiter is no longer counted.
    Quiet,
    /// A producer claimed it: a wake is on its way (or arrived). Hand it on unless a job is
    /// taken.
    Woken,
}

fn split(bit: u32) -> (usize, u64) {
    let bit = bit % WAKE_BITS;
    ((bit / 64) as usize, 1u64 << (bit % 64))
}

impl Sleepers<'_> {
    /// Arms descriptor waiter `bit`; the caller then looks for work once more before it
    /// polls its descriptor.
    pub fn arm(&self, bit: u32) {
        let (w, m) = split(bit);
        if let Some(word) = self.armed.get(w) {
            // Set before the increment: see the module comment.
            word.fetch_or(m, Ordering::SeqCst);
        }
        // Pairs with the producer's fence(SeqCst) (the Dekker pair).
        self.sleepers.fetch_add(1, Ordering::SeqCst);
    }

    /// A futex waiter (in `FUTEX_WAIT`, or in an io_uring's futex wait) begins to sleep: it
    /// read the futex word first, and looks for work once more after this.
    pub fn enter(&self) {
        // Pairs with the producer's fence(SeqCst) (the Dekker pair).
        self.sleepers.fetch_add(1, Ordering::SeqCst);
    }

    /// A futex waiter stops sleeping (woken or not): its own decrement, as nobody claims it.
    pub fn leave(&self) {
        self.sleepers.fetch_sub(1, Ordering::Release);
    }

    /// Disarms descriptor waiter `bit`.
    pub fn disarm(&self, bit: u32) -> Disarmed {
        let (w, m) = split(bit);
        let Some(word) = self.armed.get(w) else { return Disarmed::Woken };
        if word.fetch_and(!m, Ordering::AcqRel) & m != 0 {
            self.sleepers.fetch_sub(1, Ordering::Release);
            Disarmed::Quiet
        } else {
            Disarmed::Woken
        }
    }

    /// Called by a producer after it published work: whom to wake. `descriptors`: whether
    /// this process can send descriptor wakes (it knows the daemon's wake directory); if
    /// not, it leaves armed waiters alone and wakes a futex sleeper.
    #[inline]
    pub fn notify(&self, descriptors: bool) -> Wake {
        if !self.any() {
            return Wake::Nobody;
        }
        match descriptors.then(|| self.claim()).flatten() {
            Some(bit) => Wake::Descriptor(bit),
            None => Wake::Futex,
        }
    }

    /// The producer's half of the Dekker pair: whether anyone sleeps, after a fence. A
    /// producer that sees nobody makes no system call; one that sees someone then claims a
    /// waiter ([`claim`](Self::claim)) or wakes a futex sleeper, as [`notify`](Self::notify)
    /// says.
    #[inline]
    pub fn any(&self) -> bool {
        // Pairs with the consumer's SeqCst increment of `sleepers`.
        fence(Ordering::SeqCst);
        // Acquire: a bit set before the increment this load sees is visible to the claim.
        self.sleepers.load(Ordering::Acquire) != 0
    }

    /// Claims one armed waiter: clears its bit and takes it off the count.
    pub fn claim(&self) -> Option<u32> {
        for (i, word) in self.armed.iter().enumerate().take(WAKE_WORDS) {
            loop {
                let v = word.load(Ordering::Acquire);
                if v == 0 {
                    break;
                }
                let b = v.trailing_zeros();
                let m = 1u64 << b;
                if word.fetch_and(!m, Ordering::AcqRel) & m != 0 {
                    self.sleepers.fetch_sub(1, Ordering::Release);
                    return Some(i as u32 * 64 + b);
                }
            }
        }
        None
    }
}

/// A queue's count of searchers: consumers in a wait that keep looking for work instead of
/// sleeping. At most a bound of them look at once; the others sleep at once, and are woken one
/// at a time (by a push while nobody searches, or by the last searcher, which hands the
/// search on when it takes a job and more are left). Without the bound every idle consumer
/// looked at each new `bottom` and raced for `top`: a transfer of one line per consumer per
/// job, through the producer's core.
///
/// ```text
///  searcher                                      producer
///  searching += 1 if under the bound (SeqCst),   publish the job (Release)
///      else not counted: look once, then sleep   fence(SeqCst)
///  look, look, ... (a while)                     sleepers != 0 && searching == 0:
///  took a job, or gives up:                          wake one sleeper
///      searching -= 1 (SeqCst)
///      the last one: fence(SeqCst), look whether jobs are left:
///          took a job: notify (wake one sleeper, as a push does)
///          gave up: search again instead of sleeping
///  (gave up, nothing left: the sleep protocol)
/// ```
///
/// No lost wake-up: a producer that skips the wake saw a searcher counted, after its fence.
/// The decrement that brings the count back to zero comes after that fence in the single
/// total order, and its searcher then fences and looks, so it sees the job (or the job was
/// taken): it hands the search on to a sleeper, or keeps searching itself. Every leaver that
/// is not the last leaves someone counted, whose own leaving does the same. A refused
/// consumer was never counted, so no producer skipped a wake for it. The count is in shared
/// memory and not trusted: it only decides whether a wake is skipped, and a count left high
/// (garbage, or a searcher that died and was not yet taken off) leaves a job to the
/// daemon's nudge, never lost.
#[derive(Clone, Copy)]
pub struct Searchers<'a> {
    /// Consumers looking for work now.
    pub searching: &'a AtomicU32,
}

impl Searchers<'_> {
    /// Tries to become a searcher: false (and not counted) when `bound` already search.
    pub fn begin(&self, bound: u32) -> bool {
        // SeqCst: the count a producer's `idle` reads after its fence. A CAS, not an
        // increment undone when over the bound: a consumer refused and briefly counted would
        // make a producer skip its wake, and could then take a job at its own look and leave
        // without looking whether others were left (loom found it).
        self.searching
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < bound).then_some(n + 1))
            .is_ok()
    }

    /// A searcher stops searching (it took a job, or gives up). True when it was the last
    /// one: the caller must then look whether jobs are left, and if so wake a sleeper (it
    /// took a job) or search again (it gave up), for producers skipped their wakes while it
    /// was counted.
    pub fn end(&self) -> bool {
        // SeqCst: the decrement the Dekker pair orders. Never below zero: a dead searcher's
        // record taken off by recovery may have taken a live one's count with it, and a
        // count wrapped round would read as searchers for good.
        let was = self.searching.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if was.unwrap_or(0) != 1 {
            // Another searcher is still counted: its own leaving looks for what is left.
            return false;
        }
        // SeqCst fence: pairs with the producer's (`Sleepers::any`). Before it, our
        // decrement; after it, the caller's look at the queue. Of the two fences one comes
        // first: if ours, the producer's load of `searching` sees zero and wakes a sleeper
        // itself; if theirs, our look sees its job. `.ci/loom` compiles it out once to see
        // `tests/loom_search.rs` find a job left with its sleeper asleep.
        #[cfg(not(xtcq_loom_drop_search_fence))]
        fence(Ordering::SeqCst);
        true
    }

    /// Sets the count to zero (the daemon's nudge of stranded jobs, `wait::nudge_stranded`): a count no searcher is
    /// behind (garbage, or one a dead searcher left that recovery could not take off) would
    /// otherwise make every push skip its wake for good, and `end` never takes it below
    /// zero. Safe under live searchers: a low count only costs wakes (pushes
    /// wake sleepers themselves), a live searcher that then ends finds itself not the last
    /// and sleeps by the sleep protocol, which looks once more after it is counted asleep,
    /// and the jobs pushes skipped their wakes for are the nudge's, which wakes a sleeper
    /// after this store. Only written when nonzero, so an idle queue's line is not taken.
    pub fn forget(&self) {
        // SeqCst: in the total order with the producers' fences, as `end`'s decrement.
        if self.searching.load(Ordering::SeqCst) != 0 {
            self.searching.store(0, Ordering::SeqCst);
        }
    }

    /// The producer's check, after [`Sleepers::any`]'s fence saw a sleeper: true when
    /// nobody searches, so a sleeper must be woken for the job just published.
    #[inline]
    pub fn idle(&self) -> bool {
        // Relaxed: ordered by the fence in `any`, which comes before this load.
        self.searching.load(Ordering::Relaxed) == 0
    }
}
