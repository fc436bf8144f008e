//! The words of a queue's limits and the protocols on them, apart from the segment so that
//! loom can check them over heap memory (`tests/loom_limits.rs`): the running count of a
//! concurrency limit ([`Running`]) and the token bucket of a rate limit ([`Rate`] on
//! [`RateWords`]). Their rules are in `segment::running` and `segment::rate`, which place
//! them in a queue's control line.

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// The `running` word: the count in the low 32 bits, a sequence that every change moves in
/// the high 32 (so that the daemon's walk can tell the word did not move).
pub struct Running;

impl Running {
    const ONE_CHANGE: u64 = 1 << 32;

    /// The count of word `w`.
    pub fn count(w: u64) -> u32 {
        w as u32
    }

    /// Word `w` moved on to count `count`.
    pub fn next(w: u64, count: u32) -> u64 {
        (w & !0xFFFF_FFFF).wrapping_add(Self::ONE_CHANGE) | u64::from(count)
    }

    /// Takes one of `max` slots; false when all are taken. Acquire: pairs with the Release
    /// of the give-back that freed the slot, so the job that held it was settled before.
    #[inline]
    pub fn take(word: &AtomicU64, max: u32) -> bool {
        let mut w = word.load(Ordering::Relaxed);
        loop {
            let n = Self::count(w);
            if n >= max {
                return false;
            }
            match word.compare_exchange_weak(w, Self::next(w, n + 1), Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => w = now,
            }
        }
    }

    /// Gives one slot back (never below zero).
    #[inline]
    pub fn give(word: &AtomicU64) {
        let mut w = word.load(Ordering::Relaxed);
        loop {
            let n = Self::count(w).saturating_sub(1);
            match word.compare_exchange_weak(w, Self::next(w, n), Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => w = now,
            }
        }
    }
}

/// A queue's rate limit: at most `burst` claims at once, then one every `interval_ns`, across
/// every process (`segment::rate`).
#[repr(C)]
#[derive(Debug)]
pub struct RateWords {
    /// ns between two claims at the limit's pace (0: no limit). Written only by the daemon.
    pub interval_ns: AtomicU64,
    /// Claims that may start at once after a quiet spell (at least 1). Written only by the
    /// daemon.
    pub burst: AtomicU32,
    /// The bucket: the CLOCK_MONOTONIC time at which it would be empty again, advanced by
    /// `interval_ns` for each claim let through (a generic cell rate algorithm).
    pub theoretical: AtomicU64,
}

/// The token bucket's arithmetic on a [`RateWords`].
pub struct Rate;

/// Tokens a take got: how many, the bucket word as the take left it, and the clock and limit
/// it counted with (to give unused ones back: see [`Rate::give_back`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tokens {
    /// Tokens taken.
    pub count: usize,
    /// `theoretical` as this take wrote it.
    pub left_at: u64,
    /// The clock the take read (ns, CLOCK_MONOTONIC).
    pub taken_at: u64,
    /// The interval and burst it counted with.
    pub limit: (u64, u32),
}

impl Rate {
    /// Takes up to `want` tokens at time `now` (ns, CLOCK_MONOTONIC): `Ok` with what it got
    /// (at least one), `Err(ns)` when none is due for `ns` more nanoseconds.
    #[inline]
    pub fn take(words: &RateWords, want: usize, now: u64) -> Result<Tokens, u64> {
        let interval = words.interval_ns.load(Ordering::Relaxed).max(1);
        let burst_word = words.burst.load(Ordering::Relaxed);
        let burst = u64::from(burst_word.max(1));
        let full_until = now.saturating_add(burst.saturating_mul(interval));
        // Relaxed throughout: the word only counts; the jobs themselves are published and
        // claimed through the deques and the records' CASes.
        let mut t = words.theoretical.load(Ordering::Relaxed);
        loop {
            let from = t.max(now);
            let room = full_until.saturating_sub(from) / interval;
            if room == 0 {
                return Err(from.saturating_add(interval).saturating_sub(full_until).max(1));
            }
            let count = (want as u64).min(room);
            let left_at = from.saturating_add(count * interval);
            match words.theoretical.compare_exchange_weak(t, left_at, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    return Ok(Tokens {
                        count: count as usize,
                        left_at,
                        taken_at: now,
                        limit: (interval, burst_word),
                    })
                }
                Err(now_t) => t = now_t,
            }
        }
    }

    /// Gives `n` of `tokens` back; the tokens left. Whole to a bucket as `tokens` left it;
    /// to a bucket moved since, less the time since the take (`now`, read only then): a
    /// later take that found the bucket empty counted from its own clock, not from ours, and
    /// gained at most that time from our tokens, so the bound holds without them. Nothing
    /// goes back to a bucket of another limit (set since the take).
    pub fn give_back(words: &RateWords, tokens: Tokens, n: usize, now: impl FnOnce() -> u64) -> Tokens {
        let n = n.min(tokens.count);
        if n == 0 {
            return tokens;
        }
        let left = Tokens { count: tokens.count - n, ..tokens };
        let limit = (words.interval_ns.load(Ordering::Relaxed).max(1), words.burst.load(Ordering::Relaxed));
        if limit != tokens.limit {
            return left;
        }
        let whole = (n as u64).saturating_mul(limit.0);
        let back = tokens.left_at.saturating_sub(whole);
        let Err(mut t) =
            words.theoretical.compare_exchange(tokens.left_at, back, Ordering::Relaxed, Ordering::Relaxed)
        else {
            return Tokens { left_at: back, ..left };
        };
        let owed = whole.saturating_sub(now().saturating_sub(tokens.taken_at));
        if owed == 0 {
            return left;
        }
        loop {
            match words.theoretical.compare_exchange_weak(
                t,
                t.saturating_sub(owed),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return left,
                Err(now_t) => t = now_t,
            }
        }
    }

    /// ns until a token is due at `now` (0: one is there).
    pub fn wait_ns(words: &RateWords, now: u64) -> u64 {
        let interval = words.interval_ns.load(Ordering::Relaxed).max(1);
        let burst = u64::from(words.burst.load(Ordering::Relaxed).max(1));
        let full_until = now.saturating_add(burst.saturating_mul(interval));
        let from = words.theoretical.load(Ordering::Relaxed).max(now);
        from.saturating_add(interval).saturating_sub(full_until)
    }
}
