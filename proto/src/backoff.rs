//! A queue's retry backoff: how long a failed job waits before it is in line again.
//!
//! Rules kept:
//! - the delay before retry `n` (the job has failed `n` times, `n >= 1`) is
//!   `min(max, base * 2^(n - 1))`, then jittered: `Full` draws it uniformly from
//!   `[0, delay]`, `Equal` from `[delay / 2, delay]`, `None` keeps it (AWS's "Exponential
//!   Backoff And Jitter" names);
//! - no arithmetic here overflows or panics, whatever the numbers (a policy comes from a
//!   peer): the doubling saturates at `max`;
//! - the policy lives in the daemon (its state file), not in the segment; clients learn it
//!   with the queue at attach ([`crate::QueueInfo::retry_backoff`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How the delay is spread, so that jobs that failed together do not retry together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Jitter {
    /// The exact delay.
    None,
    /// Uniform in `[0, delay]`.
    Full,
    /// Uniform in `[delay / 2, delay]`.
    Equal,
}

/// Exponential backoff with jitter, capped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RetryBackoff {
    /// The delay before the first retry, ms (at least 1).
    pub base_ms: u64,
    /// The longest delay, ms (at least `base_ms`).
    pub max_ms: u64,
    /// The spread.
    pub jitter: Jitter,
}

/// A backoff that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackoffError {
    /// Base below 1 ms.
    #[error("the retry backoff must be at least 1ms (give e.g. --retry-backoff 1s)")]
    ZeroBase,
    /// Cap below the base.
    #[error("the retry backoff's maximum ({max_ms} ms) is below its base ({base_ms} ms); give a --retry-backoff-max at least as long")]
    MaxBelowBase {
        /// Given base.
        base_ms: u64,
        /// Given cap.
        max_ms: u64,
    },
}

impl RetryBackoff {
    /// Checks the numbers.
    pub fn validate(&self) -> Result<(), BackoffError> {
        if self.base_ms == 0 {
            return Err(BackoffError::ZeroBase);
        }
        if self.max_ms < self.base_ms {
            return Err(BackoffError::MaxBelowBase { base_ms: self.base_ms, max_ms: self.max_ms });
        }
        Ok(())
    }

    /// The delay before the retry of a job that has failed `failures` times, before
    /// jitter: `min(max, base * 2^(failures - 1))`.
    pub fn ceiling(&self, failures: u32) -> Duration {
        let shift = failures.saturating_sub(1).min(63);
        let d = self.base_ms.checked_shl(shift).filter(|d| d >> shift == self.base_ms).unwrap_or(u64::MAX);
        Duration::from_millis(d.min(self.max_ms))
    }

    /// The shortest delay jitter can give for `failures` (what a test may assert as a lower
    /// bound).
    pub fn floor(&self, failures: u32) -> Duration {
        match self.jitter {
            Jitter::None => self.ceiling(failures),
            Jitter::Full => Duration::ZERO,
            Jitter::Equal => self.ceiling(failures) / 2,
        }
    }

    /// The delay for `failures`, jittered with `random` (any 64 random bits).
    pub fn delay(&self, failures: u32, random: u64) -> Duration {
        let c = self.ceiling(failures).as_millis() as u64;
        let spread = |lo: u64, hi: u64| lo + random % (hi - lo).saturating_add(1);
        Duration::from_millis(match self.jitter {
            Jitter::None => c,
            Jitter::Full => spread(0, c),
            Jitter::Equal => spread(c / 2, c),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_then_caps_and_jitters_within_bounds() {
        let b = RetryBackoff { base_ms: 100, max_ms: 1000, jitter: Jitter::Equal };
        let ms = |n| b.ceiling(n).as_millis();
        assert_eq!([ms(1), ms(2), ms(3), ms(4), ms(5), ms(100)], [100, 200, 400, 800, 1000, 1000]);
        for r in [0, 1, 77, u64::MAX] {
            let d = b.delay(3, r);
            assert!(d >= b.floor(3) && d <= b.ceiling(3), "{d:?}");
            let full = RetryBackoff { jitter: Jitter::Full, ..b }.delay(3, r);
            assert!(full <= b.ceiling(3));
        }
        let huge = RetryBackoff { base_ms: u64::MAX / 2, max_ms: u64::MAX, jitter: Jitter::Full };
        assert_eq!(huge.ceiling(u32::MAX), Duration::from_millis(u64::MAX));
        let _ = huge.delay(u32::MAX, u64::MAX);
    }

    #[test]
    fn refuses_zero_base_and_cap_below_base() {
        let b = RetryBackoff { base_ms: 0, max_ms: 0, jitter: Jitter::None };
        assert_eq!(b.validate(), Err(BackoffError::ZeroBase));
        let b = RetryBackoff { base_ms: 10, max_ms: 5, jitter: Jitter::None };
        assert!(matches!(b.validate(), Err(BackoffError::MaxBelowBase { .. })));
    }
}
