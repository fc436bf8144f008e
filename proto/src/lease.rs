//! Lease durations: what the daemon can honour.
//!
//! A queue's lease is stored in whole milliseconds (`lease_ms`) and the daemon's expiry scan
//! runs on a millisecond period (`--lease-scan-interval`), so one millisecond is the
//! resolution. A shorter lease used to be stored as 0 (no lease at all) and `1.9ms` as 1 ms;
//! such values are refused here, with the smallest accepted one in the message.

use std::time::Duration;

/// The resolution of a lease: the smallest non-zero lease accepted, and its unit.
pub const LEASE_RESOLUTION: Duration = Duration::from_millis(1);

/// A lease duration that cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// Non-zero but below the resolution.
    #[error(
        "a lease of {0:?} is shorter than the daemon can measure: the smallest accepted is 1ms \
         (or 0 for no lease where that is allowed)"
    )]
    TooShort(Duration),
    /// Not a whole number of milliseconds.
    #[error(
        "a lease of {0:?} is not a whole number of milliseconds (the resolution, and the \
         smallest accepted lease, is 1ms): say {lo}ms or {hi}ms",
        lo = .0.as_millis(),
        hi = .0.as_millis() + 1
    )]
    NotWholeMillis(Duration),
    /// Longer than a `u32` of milliseconds.
    #[error("a lease of {0:?} is too long: at most {max}ms (about 49 days)", max = u32::MAX)]
    TooLong(Duration),
    /// Zero where a lease is required.
    #[error("a lease of 0 is not a lease here: the smallest accepted is 1ms")]
    Zero,
}

/// The lease `d` in whole milliseconds, as a queue stores it; 0 (no lease) is accepted.
pub fn lease_ms(d: Duration) -> Result<u32, LeaseError> {
    if d.is_zero() {
        return Ok(0);
    }
    if d < LEASE_RESOLUTION {
        return Err(LeaseError::TooShort(d));
    }
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(LeaseError::NotWholeMillis(d));
    }
    u32::try_from(d.as_millis()).map_err(|_| LeaseError::TooLong(d))
}

/// Checks a lease that must be one (a heartbeat, a per-claim override): non-zero, and
/// honoured to the resolution.
pub fn check_lease(d: Duration) -> Result<Duration, LeaseError> {
    match lease_ms(d)? {
        0 => Err(LeaseError::Zero),
        _ => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_the_resolution_is_refused_naming_the_smallest() {
        let e = lease_ms(Duration::from_micros(500)).unwrap_err();
        assert!(e.to_string().contains("smallest accepted is 1ms"), "{e}");
        let e = lease_ms(Duration::from_micros(1900)).unwrap_err();
        assert!(e.to_string().contains("1ms or 2ms"), "{e}");
        assert!(check_lease(Duration::ZERO).unwrap_err().to_string().contains("1ms"));
        assert_eq!(lease_ms(Duration::ZERO), Ok(0));
        assert_eq!(lease_ms(Duration::from_millis(1)), Ok(1));
        assert_eq!(lease_ms(Duration::from_secs(30)), Ok(30_000));
        assert!(lease_ms(Duration::from_secs(100 * 86_400)).is_err());
    }
}
