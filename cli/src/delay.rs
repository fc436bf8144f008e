//! The flags of delayed jobs and retry backoff: `push --at`, and `create --retry-backoff`,
//! `--retry-backoff-max`, `--retry-jitter`.
//!
//! Rules kept:
//! - a time or a policy that cannot be used is refused before anything is sent, with a
//!   message that says what form is wanted;
//! - a policy is all or nothing: `--retry-backoff-max` or `--retry-jitter` without
//!   `--retry-backoff` is refused rather than ignored.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use xtcq_client::{Jitter, RetryBackoff};

/// Parses `--at`: RFC 3339 (`Z` or an offset), or `@` and seconds since the Unix epoch; at
/// most 100 years ahead, as `--delay` (a job due later would never come).
pub fn parse_at(s: &str) -> Result<SystemTime, String> {
    let t = parse_time(s)?;
    let ahead = t.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO);
    if ahead > xtcq_proto::duration::MAX {
        return Err(format!("{s:?} is too far ahead: at most 100 years from now, as for --delay"));
    }
    Ok(t)
}

/// `--at`'s forms, without the 100-year bound.
fn parse_time(s: &str) -> Result<SystemTime, String> {
    if let Some(secs) = s.strip_prefix('@') {
        return secs
            .parse::<u64>()
            .ok()
            .and_then(|n| UNIX_EPOCH.checked_add(Duration::from_secs(n)))
            .ok_or_else(|| {
                format!("{s:?} is not @ followed by whole seconds since 1970 (e.g. @1893456000)")
            });
    }
    let bad = |e: &dyn std::fmt::Display| {
        format!(
            "{s:?} is not a time: {e}; give RFC 3339 (e.g. 2030-01-02T03:04:05Z or 2030-01-02T05:04:05+02:00) \
             or @UNIX_SECONDS"
        )
    };
    let (utc, offset) = split_offset(s).ok_or_else(|| bad(&"its offset is not Z or +HH:MM / -HH:MM"))?;
    let t = humantime::parse_rfc3339(&utc).map_err(|e| bad(&e))?;
    // Local time = UTC + offset, so UTC = local time - offset.
    let shifted = if offset >= 0 {
        t.checked_sub(Duration::from_secs(offset as u64))
    } else {
        t.checked_add(Duration::from_secs(offset.unsigned_abs()))
    };
    shifted.ok_or_else(|| bad(&"out of range"))
}

/// `s` with its RFC 3339 offset replaced by `Z`, and the offset in seconds; `None` for an
/// offset that is not `Z`, `+HH:MM` or `-HH:MM`.
fn split_offset(s: &str) -> Option<(String, i64)> {
    if let Some(base) = s.strip_suffix('Z').or_else(|| s.strip_suffix('z')) {
        return Some((format!("{base}Z"), 0));
    }
    // `split_at_checked`: the sixth byte from the end may fall inside a multi-byte
    // character (any text can be typed after --at), which is "not an offset", not a panic.
    let (base, off) = s.split_at_checked(s.len().checked_sub(6)?)?;
    let sign = match off.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let (h, m) = off[1..].split_once(':')?;
    let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
    if !(0..24).contains(&h) || !(0..60).contains(&m) || !base.contains('T') {
        return None;
    }
    Some((format!("{base}Z"), sign * (h * 3600 + m * 60)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_offsets_and_unix_seconds_name_the_same_instant() {
        let z = parse_at("2030-01-02T03:04:05Z").unwrap();
        assert_eq!(parse_at("2030-01-02T05:04:05+02:00").unwrap(), z);
        assert_eq!(parse_at("2030-01-01T23:34:05-03:30").unwrap(), z);
        assert_eq!(parse_at("@1893553445").unwrap(), z);
        assert!(parse_at("9999-01-01T00:00:00Z").unwrap_err().contains("at most 100 years"));
        assert!(parse_at("@99999999999").unwrap_err().contains("at most 100 years"));
        for bad in
            ["2030-01-02T03:04:05", "2030-01-02T03:04:05+25:00", "x+01:00", "", "@", "+01:00", "é12345"]
        {
            assert!(parse_at(bad).is_err(), "{bad:?} accepted");
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum JitterArg {
    /// The exact delay.
    None,
    /// Anywhere from 0 to the delay.
    Full,
    /// From half the delay to the delay.
    Equal,
}

#[derive(Debug, Args)]
pub struct BackoffArgs {
    /// Wait this long before the first retry of a job that failed under `xtcq work`, twice
    /// as long before each next one (e.g. 1s). Without it a failed job is retried at once.
    #[arg(long, value_parser = crate::parse_duration)]
    retry_backoff: Option<Duration>,
    /// The longest wait between retries [default: 5m].
    #[arg(long, value_parser = crate::parse_duration, requires = "retry_backoff")]
    retry_backoff_max: Option<Duration>,
    /// How the wait is spread, so that jobs that failed together do not retry together.
    #[arg(long, value_enum, default_value = "equal")]
    retry_jitter: JitterArg,
}

impl BackoffArgs {
    /// The policy asked for, if any.
    pub fn policy(&self) -> Result<Option<RetryBackoff>> {
        let Some(base) = self.retry_backoff else { return Ok(None) };
        let max = self.retry_backoff_max.unwrap_or(Duration::from_secs(300).max(base));
        let b = RetryBackoff {
            base_ms: base.as_millis().min(u64::MAX as u128) as u64,
            max_ms: max.as_millis().min(u64::MAX as u128) as u64,
            jitter: match self.retry_jitter {
                JitterArg::None => Jitter::None,
                JitterArg::Full => Jitter::Full,
                JitterArg::Equal => Jitter::Equal,
            },
        };
        if let Err(e) = b.validate() {
            bail!("{e}");
        }
        Ok(Some(b))
    }
}

/// How `ls` shows a policy: `1s..5m equal`, or `-`.
pub fn backoff_label(b: Option<&RetryBackoff>) -> String {
    let Some(b) = b else { return "-".into() };
    let d = |ms| humantime::format_duration(Duration::from_millis(ms)).to_string();
    let jitter = match b.jitter {
        Jitter::None => "no jitter",
        Jitter::Full => "full jitter",
        Jitter::Equal => "equal jitter",
    };
    format!("{}..{} {jitter}", d(b.base_ms), d(b.max_ms))
}
