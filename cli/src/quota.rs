//! `xtcq create --max-records / --max-dead`, `xtcq limits` (the same flags for a queue that
//! exists), and the quota line of `xtcq stats`.
//!
//! Rules kept:
//! - a quota is a count of records or a percentage of the segment's records, resolved here
//!   against the segment's size (from `stats`) and sent as a count;
//! - without the flags nothing is sent: the queue keeps the daemon's defaults (no record
//!   quota, a dead-letter cap of a quarter of the records).

use anyhow::{Context, Result};
use clap::Args;
use xtcq_client::Client;

/// The queue-limit flags of `xtcq create` and `xtcq limits`.
#[derive(Debug, Args)]
pub struct QuotaArgs {
    /// The most job records the queue's jobs (queued, running and dead) may hold at once: a
    /// count, or a percentage of the segment's records (`25%`); 0: no quota. A push past it
    /// waits or fails like a push into a full queue. [default: no quota]
    #[arg(long, value_name = "N|PCT%", value_parser = parse_quota)]
    max_records: Option<Quota>,
    /// The most dead letters the queue keeps; past it the daemon drops the oldest (by the
    /// time they were queued), logs it and counts it in `stats`. 0: no cap. [default: a
    /// quarter of the segment's records]
    #[arg(long, value_name = "N")]
    max_dead: Option<u32>,
    /// The most of the queue's jobs claimed (running) at once, across every process:
    /// consumers that find that many running sleep until one is settled. `none`: no limit.
    /// [default: none]
    #[arg(long, value_name = "K|none", value_parser = parse_max_running, allow_negative_numbers = true)]
    max_running: Option<u32>,
    /// The most of the queue's jobs that start per second (or minute, hour), across every
    /// process: `200/s`, `30/min`, `5/h`; consumers out of turn sleep until the next start is
    /// due. `none`: no limit. [default: none]
    #[arg(long, value_name = "N/s|N/min|N/h|none", value_parser = crate::rate::parse_max_rate, allow_hyphen_values = true)]
    max_rate: Option<u64>,
    /// With --max-rate: how many jobs may start at once after a quiet spell. [default: 1]
    #[arg(long, value_name = "N", value_parser = crate::rate::parse_burst, requires = "max_rate", allow_hyphen_values = true)]
    burst: Option<u32>,
}

/// Parses `K` (1 to [`xtcq_proto::MAX_RUNNING_LIMIT`]) or `none` (sent as 0).
pub fn parse_max_running(s: &str) -> std::result::Result<u32, String> {
    if s.trim() == "none" {
        return Ok(0);
    }
    let max = xtcq_proto::MAX_RUNNING_LIMIT;
    match s.trim().parse::<u64>() {
        Ok(0) => Err("0 would run nothing: give 1 or more, or `none` for no limit".into()),
        Ok(n) if n <= u64::from(max) => Ok(n as u32),
        Ok(n) => Err(format!("{n} is more than {max}, the most a queue takes; give fewer, or `none`")),
        Err(_) if s.trim().starts_with('-') => {
            Err(format!("{s}: a limit is not negative; give 1 to {max}, or `none`"))
        }
        Err(_) => Err(format!("{s:?}: give a whole number of jobs from 1 to {max}, or `none`")),
    }
}

/// A record quota as given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quota {
    /// A count of records.
    Records(u32),
    /// A percentage (1 to 100) of the segment's records.
    Percent(u32),
}

/// Parses `N` or `PCT%`.
pub fn parse_quota(s: &str) -> std::result::Result<Quota, String> {
    if let Some(p) = s.strip_suffix('%') {
        return match p.trim().parse::<u32>() {
            Ok(n) if (1..=100).contains(&n) => Ok(Quota::Percent(n)),
            _ => Err(format!("{s:?}: a percentage is a whole number from 1% to 100%")),
        };
    }
    s.trim()
        .parse::<u32>()
        .map(Quota::Records)
        .map_err(|_| format!("{s:?}: give a count of records (e.g. 10000) or a percentage (e.g. 25%)"))
}

/// The count `q` means in a segment of `job_records` records (a percentage rounds up, so
/// that it is never 0, which would mean no quota).
pub fn resolve(q: Quota, job_records: u32) -> u32 {
    match q {
        Quota::Records(n) => n,
        Quota::Percent(p) => ((u64::from(job_records) * u64::from(p)).div_ceil(100)) as u32,
    }
}

impl QuotaArgs {
    /// Refuses a `--max-records` count over the segment's records before the queue is
    /// created: the daemon would refuse it after, leaving a queue without its quota.
    pub fn check(&self, client: &Client) -> Result<()> {
        let Some(Quota::Records(n)) = self.max_records else { return Ok(()) };
        let records = client.stats(None)?.segment.job_records;
        if n > records {
            anyhow::bail!(
                "--max-records {n} is more than the segment's {records} records; give at most {records} (or 0 for no quota)"
            );
        }
        Ok(())
    }

    /// Whether no limit was given.
    pub fn is_empty(&self) -> bool {
        self.max_records.is_none()
            && self.max_dead.is_none()
            && self.max_running.is_none()
            && self.max_rate.is_none()
    }

    /// Sends the limits given, if any, for the queue just created.
    pub fn apply(&self, client: &Client, queue: &str) -> Result<()> {
        self.send(client, queue).with_context(|| {
            format!("queue {queue} was created, but its --max-records / --max-dead / --max-running / --max-rate could not be set")
        })
    }

    /// Sends the limits given, if any, for `queue`.
    fn send(&self, client: &Client, queue: &str) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let max_records = match self.max_records {
            Some(q @ Quota::Percent(_)) => Some(resolve(q, client.stats(None)?.segment.job_records)),
            Some(q) => Some(resolve(q, 0)),
            None => None,
        };
        if max_records.is_some() || self.max_dead.is_some() {
            client.set_queue_limits(queue, max_records, self.max_dead)?;
        }
        if let Some(k) = self.max_running {
            client.set_max_running(queue, k)?;
        }
        if let Some(interval_ns) = self.max_rate {
            let burst = if interval_ns == 0 { 0 } else { self.burst.unwrap_or(1) };
            client.set_max_rate(queue, xtcq_proto::RateLimit { interval_ns, burst })?;
        }
        Ok(())
    }
}

/// `xtcq limits`: the arguments.
#[derive(Debug, Args)]
pub struct LimitsArgs {
    /// Queue name.
    queue: String,
    #[command(flatten)]
    quota: QuotaArgs,
}

/// `xtcq limits QUEUE --max-records ... --max-dead ...`: changes the limits of a queue that
/// exists (those not given stay), as its owner or root may; prints the queue's quota line.
pub fn limits(socket: Option<&std::path::Path>, args: LimitsArgs) -> Result<i32> {
    if args.quota.is_empty() {
        eprintln!(
            "xtcq: error: give --max-records, --max-dead, --max-running or --max-rate: the limits to set"
        );
        return Ok(crate::exit::USAGE);
    }
    let client = crate::cmd::connect(socket)?;
    args.quota.check(&client)?;
    args.quota
        .send(&client, &args.queue)
        .with_context(|| format!("cannot set the limits of queue {}", args.queue))?;
    let stats = client.stats(Some(&args.queue))?;
    if let Some(q) = stats.queues.iter().find(|q| q.info.name == args.queue) {
        print!("{}", stats_line(&q.quota));
    }
    Ok(crate::exit::OK)
}

/// The quota line of a queue in `xtcq stats`.
pub fn stats_line(q: &xtcq_proto::QuotaStats) -> String {
    let dash = |n: u32| if n == 0 { "-".to_string() } else { n.to_string() };
    let mut line = format!(
        "  quota:    {} of {} records in use, dead letters capped at {}, {} dropped by the cap\n",
        q.records_used,
        dash(q.max_records),
        dash(q.max_dead),
        q.dead_dropped
    );
    if q.max_running != 0 {
        line.push_str(&format!("  running:  {} of at most {} at once\n", q.running, q.max_running));
    }
    if q.max_rate.interval_ns != 0 {
        line.push_str(&format!("  rate:     at most {}\n", crate::rate::describe(q.max_rate)));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_parse_and_resolve() {
        assert_eq!(parse_quota("100"), Ok(Quota::Records(100)));
        assert_eq!(parse_quota("25%"), Ok(Quota::Percent(25)));
        assert!(parse_quota("0%").is_err() && parse_quota("101%").is_err() && parse_quota("x").is_err());
        assert_eq!(resolve(Quota::Percent(25), 65536), 16384);
        assert_eq!(resolve(Quota::Percent(1), 10), 1);
        assert_eq!(resolve(Quota::Records(7), 10), 7);
    }
}
