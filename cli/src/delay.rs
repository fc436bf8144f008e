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

/// Parses `--at`: RFC 3339 in UTC, or `@` and seconds since the Unix epoch.
pub fn parse_at(s: &str) -> Result<SystemTime, String> {
    if let Some(secs) = s.strip_prefix('@') {
        return secs
            .parse::<u64>()
            .ok()
            .and_then(|n| UNIX_EPOCH.checked_add(Duration::from_secs(n)))
            .ok_or_else(|| {
                format!("{s:?} is not @ followed by whole seconds since 1970 (e.g. @1893456000)")
            });
    }
    humantime::parse_rfc3339(s).map_err(|e| {
        format!("{s:?} is not a time: {e}; give RFC 3339 in UTC (e.g. 2030-01-02T03:04:05Z) or @UNIX_SECONDS")
    })
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
