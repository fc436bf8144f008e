//! `stats`: the daemon's counters as a table, as JSON, or (`--watch`) as a line per queue
//! every interval with rates from the running totals' deltas.
//!
//! - Every figure comes from one `Stats` answer; rates need two answers and are per second
//!   of the time between them (measured here, not assumed from `--interval`).
//! - A total that went down (the queue was deleted and created anew) gives a rate of 0, not
//!   a huge number.
//! - A closed stdout ends the watch as it ends any command (see `out`).
//! - The payload-block table lists the classes the daemon reports, as it reports them; an
//!   older daemon that reports none (and no inline size) gets no table rather than a wrong one.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use xtcq_proto::msg::{QueueMetrics, QueueStats, Stats};
use xtcq_proto::queue_name::escaped;

use crate::cmd::{connect, lease_or_dash};
use crate::exit;
use crate::out::{self, outln};
use crate::parse_interval;

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Only this queue.
    queue: Option<String>,
    /// JSON (the daemon's whole answer) instead of a table.
    #[arg(long, conflicts_with = "watch")]
    json: bool,
    /// Print a line per queue every --interval, with rates, until interrupted.
    #[arg(long)]
    watch: bool,
    /// Time between two --watch lines (e.g. 500ms, 2s).
    #[arg(long, default_value = "1s", value_parser = parse_interval, requires = "watch")]
    interval: Duration,
}

/// Runs `xtcq stats`.
pub fn stats(socket: Option<&Path>, args: StatsArgs) -> Result<i32> {
    if args.watch {
        return watch(socket, args.queue.as_deref(), args.interval);
    }
    let client = connect(socket)?;
    let s = client.stats(args.queue.as_deref())?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(exit::OK);
    }
    let mut text = summary_text(&s);
    text.push_str(&blocks_text(&s));
    for q in &s.queues {
        text.push_str(&queue_text(q));
    }
    text.push_str(&processes_text(&s));
    out::print(&text)?;
    Ok(exit::OK)
}

/// The daemon, segment and record lines.
fn summary_text(s: &Stats) -> String {
    let (r, g) = (&s.records, &s.segment);
    let mut t = String::new();
    let _ = writeln!(
        t,
        "xtcqd pid {}, segment {} ({} MiB), {} connection(s)",
        s.daemon_pid,
        g.path.display(),
        g.total_len >> 20,
        s.connections
    );
    let corrupt = if r.corrupt > 0 { format!(", {} CORRUPT", r.corrupt) } else { String::new() };
    let _ = writeln!(
        t,
        "records: {} total, {} free, {} filling, {} queued, {} running, {} dead, {} delayed{corrupt}",
        g.job_records, r.free, r.filling, r.queued, r.claimed, r.dead, r.delayed
    );
    let _ = writeln!(
        t,
        "limits:  {} queues, {} deques per queue, deque capacity {}, payload {} bytes, {} process slots, overflow ring {}",
        g.queues, g.deques_per_queue, g.deque_capacity, g.payload_bytes, g.process_slots, g.overflow_capacity
    );
    t
}

/// The payload-block section: each class's size, blocks, blocks held and free ones.
fn blocks_text(s: &Stats) -> String {
    let (inline, largest) = (s.segment.inline_bytes, s.segment.payload_bytes);
    let mut t = String::new();
    if s.payload_blocks.is_empty() {
        if inline > 0 {
            let _ =
                writeln!(t, "payload blocks: none (every payload, up to {largest} bytes, is kept inline)");
        }
        return t;
    }
    let _ = writeln!(t, "payload blocks (payloads over {inline} bytes, up to {largest}):");
    t.push_str("  SIZE     TOTAL      IN USE     FREE\n");
    for b in &s.payload_blocks {
        let full = if b.free == 0 { "  FULL" } else { "" };
        let _ = writeln!(t, "  {:<8} {:<10} {:<10} {}{full}", size_label(b.size), b.total, b.in_use, b.free);
    }
    t
}

/// A block size as `--payload-blocks` spells it: `512`, `4KiB`, `16MiB`.
pub(crate) fn size_label(bytes: u32) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}KiB", b >> 10),
        b => b.to_string(),
    }
}

/// One queue's block: properties, jobs, totals, deques.
fn queue_text(q: &QueueStats) -> String {
    let (i, m) = (&q.info, &q.metrics);
    let mut t = String::new();
    let attempts = if i.max_attempts == 0 { "-".to_string() } else { i.max_attempts.to_string() };
    let _ = writeln!(
        t,
        "\nqueue {} ({}, {} deques x {}, max attempts {attempts}, lease {})",
        escaped(&i.name),
        i.flavor.name(),
        i.deques,
        i.capacity,
        lease_or_dash(i.lease_ms)
    );
    if i.paused {
        let _ = writeln!(t, "  paused:   consumers take no job until `xtcq resume {}`", escaped(&i.name));
    }
    let r = &q.records;
    let _ = writeln!(
        t,
        "  jobs:     {} queued, {} running, {} dead, {} being pushed, {} delayed; oldest queued {}; {} asleep",
        r.queued,
        r.claimed,
        r.dead,
        r.filling,
        r.delayed,
        age(m.oldest_queued_ns),
        m.sleepers
    );
    let _ = writeln!(
        t,
        "  totals:   {} pushed, {} claimed, {} acked, {} nacked, {} failed, {} dead, {} lease expiries, {} recovered, \
         {} cancelled",
        m.pushed,
        m.claimed,
        m.acked,
        m.nacked,
        m.failed,
        m.dead_total,
        m.lease_expiries,
        m.recovered,
        m.cancelled
    );
    if let Some(b) = &i.retry_backoff {
        let _ = writeln!(t, "  retry backoff: {}", crate::delay::backoff_label(Some(b)));
    }
    t.push_str(&crate::quota::stats_line(&q.quota));
    for b in &q.batches {
        let _ = writeln!(t, "  {}", crate::batches::line(b));
    }
    let _ = writeln!(t, "  overflow: {}", q.overflow_len);
    if i.levels > 1 {
        let depths: Vec<String> = q.level_depths.iter().map(u64::to_string).collect();
        let aging =
            if i.aging == 0 { "no aging".to_string() } else { format!("aging every {} takes", i.aging) };
        let _ = writeln!(
            t,
            "  levels:   {} waiting by priority 0..{} ({aging})",
            depths.join(" / "),
            i.levels - 1
        );
    }
    t.push_str("  DEQUE  LEN     OWNER\n");
    for d in &q.deques {
        let owner = d.owner_slot.map(|s| format!("slot {s}")).unwrap_or_else(|| "-".into());
        let _ = writeln!(t, "  {:<6} {:<7} {owner}", d.index, d.len);
    }
    t
}

/// The process table, if any process is registered.
fn processes_text(s: &Stats) -> String {
    let mut t = String::new();
    if s.processes.is_empty() {
        return t;
    }
    t.push_str("\nSLOT  PID      USER              STATE       CONNECTED\n");
    for p in &s.processes {
        let user = match xtcq_proto::names::user_name(p.uid) {
            Some(name) => format!("{} ({name})", p.uid),
            None => p.uid.to_string(),
        };
        let state = format!("{:?}", p.state).to_lowercase();
        let connected = if p.connected { "yes" } else { "no" };
        let _ = writeln!(t, "{:<5} {:<8} {:<17} {:<11} {connected}", p.slot, p.pid, user, state);
    }
    t
}

/// An age in ns as `1.5s`, `-` for none.
pub(crate) fn age(ns: u64) -> String {
    if ns == 0 {
        return "-".into();
    }
    format!("{:.1}s", ns as f64 / 1e9)
}

/// Per-second rates of a queue's totals between two answers `secs` apart.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Rates {
    /// Pushes per second.
    pub pushed: f64,
    /// Acks per second.
    pub acked: f64,
    /// Nacks and fails per second.
    pub failed: f64,
}

impl Rates {
    /// The rates from `before` to `now`; 0 for a total that went down.
    pub(crate) fn between(before: &QueueMetrics, now: &QueueMetrics, secs: f64) -> Rates {
        let per_s = |a: u64, b: u64| if secs > 0.0 { b.saturating_sub(a) as f64 / secs } else { 0.0 };
        Rates {
            pushed: per_s(before.pushed, now.pushed),
            acked: per_s(before.acked, now.acked),
            failed: per_s(before.nacked.saturating_add(before.failed), now.nacked.saturating_add(now.failed)),
        }
    }
}

/// `stats --watch`: a header, then a line per queue every `interval`.
fn watch(socket: Option<&Path>, queue: Option<&str>, interval: Duration) -> Result<i32> {
    let client = connect(socket)?;
    let mut before: HashMap<String, QueueMetrics> = HashMap::new();
    let mut last = Instant::now();
    out::print(format!(
        "{:<8} {:<20} {:>10} {:>10} {:>10} {:>9} {:>9} {:>7} {:>9} {:>7}\n",
        "TIME", "QUEUE", "PUSH/s", "ACK/s", "FAIL/s", "QUEUED", "RUNNING", "DEAD", "OLDEST", "ASLEEP"
    ))?;
    loop {
        let s = client.stats(queue)?;
        let secs = last.elapsed().as_secs_f64();
        last = Instant::now();
        let clock = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        let hms = clock.get(11..19).unwrap_or("").to_string();
        let mut text = String::new();
        for q in &s.queues {
            let m = &q.metrics;
            let r = before.get(&q.info.name).map(|b| Rates::between(b, m, secs)).unwrap_or_default();
            let _ = writeln!(
                text,
                "{hms:<8} {:<20} {:>10.1} {:>10.1} {:>10.1} {:>9} {:>9} {:>7} {:>9} {:>7}",
                escaped(&q.info.name),
                r.pushed,
                r.acked,
                r.failed,
                m.queued,
                m.running,
                m.dead,
                age(m.oldest_queued_ns),
                m.sleepers
            );
            before.insert(q.info.name.clone(), m.clone());
        }
        out::print(&text)?;
        std::thread::sleep(interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_read_as_the_flag_writes_them() {
        let labels: Vec<String> = [128, 512, 1024, 4096, 65536, 1 << 20, 16 << 20].map(size_label).into();
        assert_eq!(labels, ["128", "512", "1KiB", "4KiB", "64KiB", "1MiB", "16MiB"]);
    }
}
