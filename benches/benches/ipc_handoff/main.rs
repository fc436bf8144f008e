//! Cross-process hand-off: xtcq vs a pipe, a Unix stream socket, a POSIX message queue and
//! Redis.
//!
//! ```sh
//! cargo bench -p xtcq-benches --bench ipc_handoff                      # full: a few minutes
//! XTCQ_BENCH_QUICK=1 cargo bench -p xtcq-benches --bench ipc_handoff   # quick: under a minute
//! ```
//!
//! One producer process (this one) and one consumer process (this binary again, in a role),
//! 64-byte messages. xtcq runs over a real daemon (`xtcq-bench-daemon`, xtcqd's own main): the
//! producer owns a deque and `push`es; the consumer `steal`s (claim included), copies the
//! payload out and `ack`s. The others move the same 64 bytes with write(2) / mq_send(3) and
//! read(2) / mq_receive(3).
//!
//! Redis, when `redis-server` is on PATH (or `XTCQ_BENCH_REDIS_SERVER` names one): a private
//! server in a temporary directory, on a Unix socket only, killed at the end. The producer
//! sends `LPUSH` and reads its reply per message, as a job queue built on Redis does; the
//! consumer `RPOP`s in a loop (spinning; a nil reply is retried) or blocks in `BRPOP q 0`
//! (asleep). The server is a third process: it is not pinned. Fewer messages than for the
//! others (`XTCQ_BENCH_REDIS_N`, `XTCQ_BENCH_REDIS_N_LAT`): each costs two round trips through
//! it. Without a server the bench says so in one line and goes on.
//!
//! Each transport runs with the consumer spinning (xtcq: `steal` in a loop; the others:
//! `O_NONBLOCK` reads retried on EAGAIN) and sleeping (xtcq: `steal_wait`, a futex; the
//! others: blocking reads). Two phases per consumer process:
//! - throughput: the producer sends N messages as fast as the transport takes them (xtcq:
//!   a full queue is retried; pipes and sockets block); rate = N / (consumer's time of the
//!   last message - producer's time before the first). In the batch rows Redis pipelines
//!   its LPUSHes; xtcq's producer pushes one at a time unless `XTCQ_BENCH_PUSH_BATCH=1`,
//!   which makes it `push_batch` as many as the consumer steals at once (off by default, so
//!   the row stays comparable with earlier runs);
//! - latency: one message at a time. The producer writes CLOCK_MONOTONIC into the payload
//!   just before sending; the consumer subtracts it from CLOCK_MONOTONIC just after
//!   receiving (same clock in both processes), then acks and bumps a counter in a shared
//!   page; the producer waits for the counter, then a gap (long enough for a sleeping
//!   consumer to be back asleep), then sends the next.
//!
//! Producer and consumer are pinned to CPUs 0 and 1 (`XTCQ_BENCH_NO_PIN=1` to not pin).
//! Every figure is the median over the repetitions (3 full, 1 quick).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use xtcq_benches::line_chain::{dependent_chain_ns, in_dependent_lines, ns_per_line};
use xtcq_benches::{bench_queue, env_u64, ncpus, pin, start_daemon, wait_for, SharedPage, BENCH_SEGMENT};
use xtcq_client::{Client, JobBatch, OwnerHandle};
use xtcq_testkit::{monotonic_ns, Daemon};

const MSG: usize = 64;
const QUEUE: &str = "bench";

/// Depth asked of the POSIX queue: the 64 KiB a pipe holds, in 64-byte messages.
const MQ_DEPTH: i64 = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Xtcq,
    Pipe,
    Unix,
    Mq,
    Redis,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Xtcq => "xtcq",
            Transport::Pipe => "pipe",
            Transport::Unix => "unix-stream",
            Transport::Mq => "posix-mq",
            Transport::Redis => "redis",
        }
    }
    fn parse(s: &str) -> Transport {
        match s {
            "xtcq" => Transport::Xtcq,
            "pipe" => Transport::Pipe,
            "unix-stream" => Transport::Unix,
            "posix-mq" => Transport::Mq,
            "redis" => Transport::Redis,
            _ => panic!("unknown transport {s}"),
        }
    }
}

/// The page producer and consumer share for pacing (a file mapped by both).
#[repr(C, align(128))]
struct Ctl {
    /// Set by the consumer once it is ready to receive.
    ready: AtomicU64,
    _pad0: [u64; 15],
    /// Messages the consumer has taken (bumped per message in the latency phase, once at
    /// the end of the throughput phase).
    done: AtomicU64,
    _pad1: [u64; 15],
    /// CLOCK_MONOTONIC when the consumer took the throughput phase's last message.
    t_end: AtomicU64,
}

fn encode(seq: u64, buf: &mut [u8; MSG]) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..16].copy_from_slice(&monotonic_ns().to_le_bytes());
}

fn decode(b: &[u8]) -> (u64, u64) {
    (u64::from_le_bytes(b[..8].try_into().unwrap()), u64::from_le_bytes(b[8..16].try_into().unwrap()))
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

mod calibrate;
mod consumer;
mod producer;
mod redis;
mod targets;

use calibrate::*;
use consumer::*;
use producer::*;
use redis::*;
use targets::*;

/// One consumer process's figures.
#[derive(Clone, Copy, Debug)]
struct Run {
    mps: f64,
    /// The producer's own rate: messages / time until its last send returned.
    send_mps: f64,
    p50: u64,
    p99: u64,
    p999: u64,
}

struct Bench {
    daemon: Daemon,
    owner: OwnerHandle,
    _client: Client,
    n_thr: u64,
    n_lat: u64,
    mq_depth: i64,
    runs: u32,
    sleep_gap_ns: u64,
    redis: Option<RedisServer>,
    redis_n_thr: u64,
    redis_n_lat: u64,
    /// `XTCQ_BENCH_PUSH_BATCH=1`: xtcq's batch row pushes in batches too.
    push_batch: bool,
}

fn spin_until(t: u64) {
    while monotonic_ns() < t {
        std::hint::spin_loop();
    }
}

impl Bench {
    /// Throughput and latency messages per run. Redis gets fewer (each is a round trip
    /// through its server), and its pipelined variant no latency phase: one message at a
    /// time has nothing to pipeline.
    fn sizes(&self, transport: Transport, batch: usize) -> (u64, u64) {
        match transport {
            Transport::Redis if batch > 1 => (self.redis_n_thr, 0),
            Transport::Redis => (self.redis_n_thr, self.redis_n_lat),
            _ => (self.n_thr, self.n_lat),
        }
    }

    /// For Redis, `batch` > 1 is the producer pipelining that many `LPUSH`es per write.
    fn one(&self, transport: Transport, spin: bool, batch: usize, k: u32) -> Run {
        let (n_thr, n_lat) = self.sizes(transport, batch);
        let ctl_path = self.daemon.dir().join(format!("ctl.{}.{spin}.{batch}.{k}", transport.name()));
        let ctl_map = SharedPage::<Ctl>::open(&ctl_path, true);
        let ctl = ctl_map.get();
        let mut cmd = Command::new(std::env::current_exe().expect("current exe"));
        cmd.env("XTCQ_BENCH_ROLE", "consumer")
            .env("XTCQ_BENCH_TRANSPORT", transport.name())
            .env("XTCQ_BENCH_MODE", if spin { "spin" } else { "sleep" })
            .env("XTCQ_BENCH_BATCH", batch.to_string())
            .env("XTCQ_BENCH_N_THR", n_thr.to_string())
            .env("XTCQ_BENCH_N_LAT", n_lat.to_string())
            .env("XTCQ_BENCH_CTL", &ctl_path)
            .env("XTCQ_SOCKET", &self.daemon.socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let (mut tx, mq_name) = open_tx(self, transport, (spin, batch, k), &mut cmd);
        let mut child = cmd.spawn().expect("spawn consumer");
        drop(cmd); // closes our copy of the consumer's end of a pipe or socket

        wait_for(&mut [&mut child], "the consumer to be ready", CHILD_LIMIT, || {
            ctl.ready.load(Ordering::Acquire) == 1
        });
        let t0 = monotonic_ns();
        self.send_all(&mut tx, transport, batch, n_thr);
        let t_sent = monotonic_ns();
        wait_for(&mut [&mut child], "the throughput phase", CHILD_LIMIT, || {
            ctl.done.load(Ordering::Acquire) == n_thr
        });
        let mps = n_thr as f64 * 1e3 / (ctl.t_end.load(Ordering::Relaxed) - t0) as f64;
        let send_mps = n_thr as f64 * 1e3 / (t_sent - t0) as f64;
        // A sleeping consumer needs a few µs to be back asleep after it bumps `done`; give it
        // far more, so that each message finds it asleep.
        let gap = if spin { 2_000 } else { self.sleep_gap_ns };
        send_one_at_a_time(&mut tx, &mut child, ctl, n_thr..n_thr + n_lat, gap);

        let v = latency_line(&mut child);
        close_tx(tx, mq_name);
        let _ = std::fs::remove_file(&ctl_path);
        Run { mps, send_mps, p50: v[1], p99: v[2], p999: v[3] }
    }

    /// The throughput phase's sends: messages `0..n`, as fast as the transport takes them.
    fn send_all(&self, tx: &mut Tx<'_>, transport: Transport, batch: usize, n: u64) {
        let mut m = [0xabu8; MSG];
        if transport == Transport::Redis && batch > 1 {
            for i in (0..n).step_by(batch) {
                tx.send_pipelined(i..(i + batch as u64).min(n), &mut m);
            }
        } else if transport == Transport::Xtcq && batch > 1 && self.push_batch {
            let mut bufs = vec![[0xabu8; MSG]; batch];
            for i in (0..n).step_by(batch) {
                tx.send_batched(i..(i + batch as u64).min(n), &mut bufs);
            }
        } else {
            for i in 0..n {
                encode(i, &mut m);
                tx.send(&m);
            }
        }
    }
}

/// How long the producer waits for a consumer process at each step before it fails.
const CHILD_LIMIT: Duration = Duration::from_secs(120);

/// The latency phase's sends: each of `seqs` once the consumer has taken the one before,
/// `gap_ns` after it did.
fn send_one_at_a_time(
    tx: &mut Tx<'_>,
    child: &mut Child,
    ctl: &Ctl,
    seqs: std::ops::Range<u64>,
    gap_ns: u64,
) {
    let mut m = [0xabu8; MSG];
    for seq in seqs {
        encode(seq, &mut m);
        tx.send(&m);
        wait_for(&mut [&mut *child], "a latency message", CHILD_LIMIT, || {
            ctl.done.load(Ordering::Acquire) == seq + 1
        });
        spin_until(monotonic_ns() + gap_ns);
    }
}

/// The consumer's `@@ lat` line (count, p50, p99, p99.9 in ns), once it exited successfully.
fn latency_line(child: &mut Child) -> Vec<u64> {
    let out = child.stdout.take().expect("stdout");
    let mut line = None;
    for l in BufReader::new(out).lines() {
        let l = l.expect("consumer stdout");
        if let Some(rest) = l.strip_prefix("@@ lat ") {
            line = Some(rest.to_string());
        }
    }
    let st = child.wait().expect("wait consumer");
    assert!(st.success(), "consumer failed: {st}");
    line.expect("consumer printed no latency line").split_whitespace().map(|x| x.parse().unwrap()).collect()
}

/// M msgs/s: two decimals, three significant digits below 1 (Redis runs at hundredths).
fn rate(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.2}")
    } else {
        let decimals = (2.0 - v.log10().floor()).clamp(2.0, 6.0) as usize;
        format!("{v:.decimals$}")
    }
}

fn median_f(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn median_u(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    if std::env::var_os("XTCQ_BENCH_ROLE").is_some() {
        consumer();
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing we need to act on.
    let quick = std::env::var("XTCQ_BENCH_QUICK").is_ok_and(|v| v != "0");
    let only = std::env::var("XTCQ_BENCH_ONLY").ok();
    let wanted = |t: Transport| only.as_deref().is_none_or(|o| o.split(',').any(|x| x == t.name()));
    let (bench, cal, redis_skipped) = Bench::start(quick, wanted(Transport::Redis));
    bench.print_header(&cal, quick);
    let handoff_before = if ncpus() >= 2 { line_handoff_ns(200_000) } else { 0.0 };
    let mut targets = Targets::default();
    for transport in [Transport::Xtcq, Transport::Pipe, Transport::Unix, Transport::Mq, Transport::Redis] {
        if !wanted(transport) || (transport == Transport::Redis && bench.redis.is_none()) {
            continue;
        }
        if transport == Transport::Mq && bench.mq_depth == 0 {
            println!("| {:<11} | skipped: cannot create a POSIX message queue here |", transport.name());
            continue;
        }
        bench.rows(transport, &mut targets);
    }
    if bench.redis.is_some() {
        println!(
            "\nredis rows: {} throughput + {} latency messages per run (the others: {} + {}); the \
             pipelined row has no latency phase",
            bench.redis_n_thr, bench.redis_n_lat, bench.n_thr, bench.n_lat
        );
    }
    if let Some(why) = &redis_skipped {
        println!("\nredis: skipped: {}", why.trim_end().replace('\n', " | "));
    }
    if ncpus() >= 2 {
        // The host places the two vCPUs of a VM where it likes; this figure (cheap: ~30 ns,
        // same core complex; dear: ~150 ns, across) moves every cross-core figure above.
        println!(
            "\ncache-line hand-off CPU 0 <-> 1, one way: {:.0} ns before the table, {:.0} ns after",
            handoff_before,
            line_handoff_ns(200_000)
        );
    }
    targets.print();
}

impl Bench {
    /// The daemon, the queue, the Redis server when one is wanted and found (else why not),
    /// this process pinned, and the per-operation calibration; sizes from the environment.
    fn start(quick: bool, want_redis: bool) -> (Bench, Vec<(&'static str, f64)>, Option<String>) {
        let daemon = start_daemon(BENCH_SEGMENT);
        // Before pinning, so that the server is not pinned with us: it is a third process on
        // whichever CPU the scheduler gives it.
        let redis = want_redis.then(RedisServer::start);
        pin(0); // after starting the daemon, which should not be pinned with us
        let client = daemon.client();
        let owner = bench_queue(&client, QUEUE);
        let cal = calibrate(&owner, &client);
        let (redis, redis_skipped) = match redis {
            Some(Ok(server)) => (Some(server), None),
            Some(Err(why)) => (None, Some(why)),
            None => (None, None),
        };
        let bench = Bench {
            owner,
            _client: client,
            daemon,
            n_thr: env_u64("XTCQ_BENCH_N").unwrap_or(if quick { 200_000 } else { 1_000_000 }),
            n_lat: env_u64("XTCQ_BENCH_N_LAT").unwrap_or(if quick { 3_000 } else { 20_000 }),
            mq_depth: mq_depth(),
            runs: env_u64("XTCQ_BENCH_RUNS").unwrap_or(if quick { 1 } else { 3 }) as u32,
            sleep_gap_ns: env_u64("XTCQ_BENCH_GAP_US").unwrap_or(50) * 1000,
            redis,
            redis_n_thr: env_u64("XTCQ_BENCH_REDIS_N").unwrap_or(if quick { 20_000 } else { 100_000 }),
            redis_n_lat: env_u64("XTCQ_BENCH_REDIS_N_LAT").unwrap_or(if quick { 1_000 } else { 5_000 }),
            push_batch: std::env::var("XTCQ_BENCH_PUSH_BATCH").is_ok_and(|v| v == "1"),
        };
        (bench, cal, redis_skipped)
    }

    /// What runs where, the calibration, and the table's head.
    fn print_header(&self, cal: &[(&'static str, f64)], quick: bool) {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            })
            .unwrap_or_default();
        println!(
            "ipc_handoff: {} CPUs ({cpu}), 64-byte messages, {} throughput + {} latency messages per run, \
             median of {} run(s){}; POSIX mq depth {}{}",
            ncpus(),
            self.n_thr,
            self.n_lat,
            self.runs,
            if quick { " (quick)" } else { "" },
            self.mq_depth,
            if self.push_batch { "; xtcq's batch row pushes with push_batch(32)" } else { "" }
        );
        for (what, ns) in cal {
            println!("  per op: {what:<40} {ns:>7.1} ns");
        }
        if let Some(server) = &self.redis {
            println!(
                "redis: server {} on a Unix socket, not pinned (a third process); {} throughput + {} \
                 latency messages per run",
                server.version, self.redis_n_thr, self.redis_n_lat
            );
        }
        println!();
        println!(
            "| {:<11} | {:<34} | {:>12} | {:>10} | {:>8} | {:>8} | {:>9} |",
            "transport", "consumer", "M msgs/s", "sender M/s", "p50 µs", "p99 µs", "p99.9 µs"
        );
        println!(
            "|{:-<13}|{:-<36}|{:->14}|{:->12}|{:->10}|{:->10}|{:->11}|",
            "", "", ":", ":", ":", ":", ":"
        );
    }

    /// The rows of one transport: each of its consumer modes, `runs` times, medians printed.
    fn rows(&self, transport: Transport, targets: &mut Targets) {
        let modes: &[(bool, usize)] = match transport {
            Transport::Xtcq => &[(true, 1), (true, 32), (false, 1)],
            Transport::Redis => &[(true, 1), (false, 1), (false, 32)],
            _ => &[(true, 1), (false, 1)],
        };
        for &(spin, batch) in modes {
            // The probe right before and right after the row whose latency is divided by it.
            let probed = transport == Transport::Xtcq && spin && batch == 1 && ncpus() >= 2;
            let probe_before = probed.then(|| line_handoff_ns(200_000));
            let runs: Vec<Run> = (0..self.runs).map(|k| self.one(transport, spin, batch, k)).collect();
            if let Some(before) = probe_before {
                targets.probe = Some((before, line_handoff_ns(200_000)));
                targets.chain = dependent_chain_ns(CHAIN_LINES, 100_000);
            }
            targets.record(transport, spin, batch, &runs);
            let us = |f: fn(&Run) -> u64| {
                if self.sizes(transport, batch).1 == 0 {
                    "n/a".to_string()
                } else {
                    format!("{:.2}", median_u(runs.iter().map(f).collect()) as f64 / 1e3)
                }
            };
            println!(
                "| {:<11} | {:<34} | {:>12} | {:>10} | {:>8} | {:>8} | {:>9} |",
                transport.name(),
                consumer_label(transport, spin, batch),
                rate(median_f(runs.iter().map(|r| r.mps).collect())),
                rate(median_f(runs.iter().map(|r| r.send_mps).collect())),
                us(|r| r.p50),
                us(|r| r.p99),
                us(|r| r.p999),
            );
        }
    }
}

/// The table's "consumer" column.
fn consumer_label(transport: Transport, spin: bool, batch: usize) -> &'static str {
    match (transport, spin) {
        (Transport::Xtcq, true) if batch > 1 => "spinning on steal_batch(32)",
        (Transport::Xtcq, true) => "spinning on steal",
        (Transport::Xtcq, false) => "asleep in steal_wait (futex)",
        (Transport::Mq, true) => "spinning, O_NONBLOCK mq_receive",
        (Transport::Mq, false) => "asleep in mq_receive",
        (Transport::Redis, true) => "spinning, RPOP loop",
        (Transport::Redis, false) if batch > 1 => "BRPOP; producer pipelines 32",
        (Transport::Redis, false) => "asleep in BRPOP",
        (_, true) => "spinning, O_NONBLOCK read",
        (_, false) => "asleep in read",
    }
}
