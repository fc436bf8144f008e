//! How fast a sleeping consumer wakes: one producer process, one consumer process asleep
//! between messages, the modes side by side in one run:
//!
//! - `futex`: the consumer sleeps in `steal_wait` (the queue's futex);
//! - `fd-futex`: it sleeps in `poll(2)` on its thief's wake descriptor of the futex kind (an
//!   io_uring futex wait) and steals with `steal_or_arm` (what an event loop does);
//! - `fd-dgram`: the same on a datagram-kind descriptor (the fallback where io_uring is not
//!   allowed);
//! - `pipe`: it sleeps in a blocking `read(2)` of a pipe the producer writes 16 bytes to;
//! - `iceoryx2`: iceoryx2's publish-subscribe carries the 64-byte message and its event
//!   service's Notifier wakes the consumer asleep in its Listener's blocking wait.
//!
//! ```sh
//! cargo bench -p xtcq-benches --bench wake_latency            # 5 runs of 1,000 messages a mode
//! XTCQ_BENCH_RUNS=9 XTCQ_BENCH_GAP_US=300 cargo bench -p xtcq-benches --bench wake_latency
//! XTCQ_BENCH_IDLE_SECS=0 ...                                  # no idle-consumer figure
//! ```
//!
//! Each message carries the producer's `CLOCK_MONOTONIC` time just before it is sent; the
//! consumer subtracts it from its own time once it holds the message: one-way latency, woken.
//! The producer also writes its clock once the send returned (the push, the `write`, iceoryx2's
//! send and notify) into a page both map, which splits each latency into the sender's call and
//! what follows it (the wake-up and the consumer's way to the message). The producer waits
//! `XTCQ_BENCH_GAP_US` (default 500) between messages so that the consumer is back asleep for
//! each. Producer on CPU 0, consumer on CPU 1. Each run's p50 and p99, the median of the runs'
//! p50s and p99s per mode, and the ratios of the medians.
//!
//! Then the idle cost: `XTCQ_BENCH_IDLE_N` (100) consumers asleep for `XTCQ_BENCH_IDLE_SECS`
//! (10) in the futex, then on descriptors: the CPU seconds they and the daemon used.

mod iceoryx2_row;
mod idle;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use xtcq_benches::{bench_queue, env_u64, pin, start_daemon, SharedPage, BENCH_SEGMENT};
use xtcq_client::{Client, WakeKind};
use xtcq_testkit::monotonic_ns;

const QUEUE: &str = "wake";
const MODES: [&str; 5] = ["futex", "fd-futex", "fd-dgram", "pipe", "iceoryx2"];
/// Messages a run at most: the stamps page has a slot for each.
const MAX_N: usize = 8192;

/// The producer's clock after each send returned, by message.
type Stamps = [AtomicU64; MAX_N];

fn percentile<T: Ord + Copy>(v: &mut [T], p: f64) -> T {
    v.sort_unstable();
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

/// What a consumer saw of one run.
struct Seen {
    p50: u64,
    p99: u64,
    /// p50 of the sender's call: its clock before the send to its clock after.
    send_p50: i64,
    /// p50 of the rest: the sender's clock after the send to the consumer holding the message.
    after_p50: i64,
}

/// Takes `n` messages in `mode` (not `pipe`): (consumer's clock on taking, sender's clock).
fn take_all(mode: &str, socket: &str, n: usize) -> Vec<(u64, u64)> {
    let mut got = Vec::with_capacity(n);
    if mode == "iceoryx2" {
        let c = iceoryx2_row::Consumer::new(&std::env::var("XTCQ_WAKE_ICEORYX2").expect("service name"));
        ready();
        for _ in 0..n {
            got.push(c.recv());
        }
        return got;
    }
    let c = Client::connect(Some(std::path::Path::new(socket))).expect("connect");
    let t = c.attach_thief(QUEUE).expect("thief");
    let wake = match mode {
        "fd-futex" => Some(t.wake_fd_of(WakeKind::Futex).expect("a futex-kind wake descriptor")),
        "fd-dgram" => Some(t.wake_fd_of(WakeKind::Datagram).expect("a datagram wake descriptor")),
        _ => None,
    };
    ready();
    let mut buf = Vec::new();
    for _ in 0..n {
        let job = match &wake {
            None => t.steal_wait(None).expect("steal_wait").expect("a job"),
            Some(w) => loop {
                if let Some(j) = t.steal_or_arm(w).expect("steal_or_arm") {
                    break j;
                }
                let mut pfd = libc::pollfd { fd: w.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: poll(2) of one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, -1) };
            },
        };
        let now = monotonic_ns();
        buf.clear();
        job.read_payload(&mut buf).expect("payload");
        got.push((now, u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"))));
        job.ack().expect("ack");
    }
    got
}

fn ready() {
    println!("ready");
    std::io::stdout().flush().expect("flush");
}

/// The consumer role: receives `n` messages in `mode`, prints what it saw.
fn consumer(mode: &str, socket: &str, n: usize, pipe_fd: i32) {
    pin(1);
    let got = if mode == "pipe" {
        // SAFETY: the read end the parent passed, ours alone.
        let mut f = unsafe { std::fs::File::from_raw_fd(pipe_fd) };
        let mut buf = [0u8; 16];
        ready();
        (0..n)
            .map(|_| {
                f.read_exact(&mut buf).expect("read");
                (monotonic_ns(), u64::from_le_bytes(buf[..8].try_into().expect("8 bytes")))
            })
            .collect()
    } else {
        take_all(mode, socket, n)
    };
    let stamps = SharedPage::<Stamps>::open(
        std::path::Path::new(&std::env::var("XTCQ_WAKE_STAMPS").expect("stamps")),
        false,
    );
    let mut lat: Vec<u64> = got.iter().map(|(now, sent)| now.saturating_sub(*sent)).collect();
    let after = |i: usize| stamps.get()[i].load(Ordering::Acquire) as i64;
    let mut send: Vec<i64> = got.iter().enumerate().map(|(i, (_, sent))| after(i) - *sent as i64).collect();
    let mut rest: Vec<i64> = got.iter().enumerate().map(|(i, (now, _))| *now as i64 - after(i)).collect();
    let (p50, p99) = (percentile(&mut lat, 0.5), percentile(&mut lat, 0.99));
    println!("{p50} {p99} {} {}", percentile(&mut send, 0.5), percentile(&mut rest, 0.5));
}

/// Runs one mode: starts the consumer, sends `n` messages `gap` apart.
fn run(
    mode: &str,
    d: &xtcq_testkit::Daemon,
    owner: &xtcq_client::OwnerHandle,
    n: usize,
    gap: Duration,
) -> Seen {
    let ice_name = format!("xtcq-bench/wake-{}", std::process::id());
    let stamps_path = d.dir().join("wake-stamps");
    let _ = std::fs::remove_file(&stamps_path);
    let stamps = SharedPage::<Stamps>::open(&stamps_path, true);
    let mut fds = [0i32; 2];
    // SAFETY: pipe(2) into a valid array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .env("XTCQ_WAKE_ROLE", mode)
        .env("XTCQ_WAKE_SOCKET", &d.socket)
        .env("XTCQ_WAKE_N", n.to_string())
        .env("XTCQ_WAKE_PIPE", fds[0].to_string())
        .env("XTCQ_WAKE_STAMPS", &stamps_path)
        .env("XTCQ_WAKE_ICEORYX2", &ice_name)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn consumer");
    // SAFETY: the parent's ends, ours alone from here.
    let mut tx = unsafe { std::fs::File::from_raw_fd(fds[1]) };
    // SAFETY: the read end is the child's now.
    unsafe { libc::close(fds[0]) };
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).expect("ready line");
    assert_eq!(line.trim(), "ready");
    let ice = (mode == "iceoryx2").then(|| iceoryx2_row::Producer::new(&ice_name));
    pin(0);
    std::thread::sleep(Duration::from_millis(50));
    for i in 0..n {
        std::thread::sleep(gap);
        let mut msg = [0u8; 64];
        msg[..8].copy_from_slice(&monotonic_ns().to_le_bytes());
        match (mode, &ice) {
            ("pipe", _) => tx.write_all(&msg[..16]).expect("write"),
            (_, Some(p)) => p.send(&msg),
            _ => drop(owner.push(&msg).expect("push")),
        }
        stamps.get()[i].store(monotonic_ns(), Ordering::Release);
    }
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).expect("result line");
    assert!(child.wait().expect("wait").success(), "consumer failed");
    let v: Vec<i64> = line.split_whitespace().map(|v| v.parse().expect("a number")).collect();
    Seen { p50: v[0] as u64, p99: v[1] as u64, send_p50: v[2], after_p50: v[3] }
}

fn us(ns: impl Into<f64>) -> f64 {
    ns.into() / 1e3
}

fn latency(d: &xtcq_testkit::Daemon, owner: &xtcq_client::OwnerHandle, runs: usize, n: usize, gap: Duration) {
    println!(
        "wake_latency: {runs} runs, the modes alternating; {n} messages a run, {gap:?} apart, the consumer \
         asleep for each; one-way latency, woken (send: the sender's call; after: from its return to the \
         consumer holding the message)"
    );
    // `XTCQ_BENCH_MODES=futex,iceoryx2`: only those (a profile of one mode, say).
    let only = std::env::var("XTCQ_BENCH_MODES").ok();
    let picked = |mode: &str| only.as_deref().is_none_or(|o| o.split(',').any(|m| m == mode));
    let mut p50s: [Vec<u64>; MODES.len()] = Default::default();
    let mut p99s: [Vec<u64>; MODES.len()] = Default::default();
    for run_no in 0..runs {
        for (m, mode) in MODES.iter().enumerate().filter(|(_, m)| picked(m)) {
            let s = run(mode, d, owner, n, gap);
            println!(
                "run {run_no} {mode:>11}: p50 {:>7.1} us   p99 {:>8.1} us   send p50 {:>6.1} us   after p50 {:>6.1} us",
                us(s.p50 as f64),
                us(s.p99 as f64),
                us(s.send_p50 as f64),
                us(s.after_p50 as f64)
            );
            p50s[m].push(s.p50);
            p99s[m].push(s.p99);
        }
    }
    if p50s.iter().any(|v| v.is_empty()) {
        return;
    }
    let med: Vec<u64> = p50s.iter_mut().map(|v| percentile(v, 0.5)).collect();
    let med99: Vec<u64> = p99s.iter_mut().map(|v| percentile(v, 0.5)).collect();
    for (m, mode) in MODES.iter().enumerate() {
        println!(
            "median {mode:>11}: p50 {:>7.1} us   p99 {:>8.1} us   p50 / futex's {:.2}",
            us(med[m] as f64),
            us(med99[m] as f64),
            med[m] as f64 / med[0] as f64
        );
    }
    println!(
        "fd-futex / futex = {:.2}; fd-futex / iceoryx2 = {:.2}; fd-dgram / futex = {:.2}; fd-dgram / iceoryx2 = {:.2} \
         (medians of the runs' p50s)",
        med[1] as f64 / med[0] as f64,
        med[1] as f64 / med[4] as f64,
        med[2] as f64 / med[0] as f64,
        med[2] as f64 / med[4] as f64
    );
}

fn main() {
    if let Ok(mode) = std::env::var("XTCQ_WAKE_ROLE") {
        let env = |k: &str| std::env::var(k).expect(k);
        let n = env("XTCQ_WAKE_N").parse().expect("n");
        match mode.strip_prefix("idle-") {
            Some(m) => idle::consumers(m, &env("XTCQ_WAKE_SOCKET"), &env("XTCQ_WAKE_QUEUE"), n),
            None => consumer(&mode, &env("XTCQ_WAKE_SOCKET"), n, env("XTCQ_WAKE_PIPE").parse().expect("fd")),
        }
        return;
    }
    // `cargo bench` passes --bench; `cargo test --benches` runs this with nothing to prove.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let n = (env_u64("XTCQ_BENCH_N").unwrap_or(1000) as usize).clamp(1, MAX_N);
    let runs = env_u64("XTCQ_BENCH_RUNS").unwrap_or(5) as usize;
    let gap = Duration::from_micros(env_u64("XTCQ_BENCH_GAP_US").unwrap_or(500));
    let idle_n = env_u64("XTCQ_BENCH_IDLE_N").unwrap_or(100) as usize;
    let idle_secs = env_u64("XTCQ_BENCH_IDLE_SECS").unwrap_or(10);
    let d = start_daemon(BENCH_SEGMENT);
    let client = d.client();
    let owner = bench_queue(&client, QUEUE);
    if runs > 0 {
        latency(&d, &owner, runs, n, gap);
    }
    if idle_secs > 0 {
        let mut params = xtcq_client::QueueParams::new("idle");
        params.deques = 1;
        client.create_queue(&params).expect("create the idle queue");
        for mode in ["futex", "fd-futex", "fd-dgram"] {
            let (c, dm) = idle::measure(mode, &d, "idle", idle_n, idle_secs);
            println!(
                "idle {mode:>11}: {idle_n} consumers asleep {idle_secs} s: consumers {c:.3} CPU s, daemon {dm:.3} CPU s"
            );
        }
    }
}
