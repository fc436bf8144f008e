//! How fast a sleeping consumer wakes: one producer process, one consumer process asleep
//! between messages, side by side in one run:
//!
//! - `futex`: the consumer sleeps in `steal_wait` (the queue's futex);
//! - `descriptor`: it sleeps in `poll(2)` on its thief's wake descriptor and steals with
//!   `steal_or_arm` (what an event loop does);
//! - `pipe`: it sleeps in a blocking `read(2)` of a pipe the producer writes 16 bytes to.
//!
//! ```sh
//! cargo bench -p xtcq-benches --bench wake_latency            # 5 runs of 1,000 messages a mode
//! XTCQ_BENCH_RUNS=9 XTCQ_BENCH_GAP_US=300 cargo bench -p xtcq-benches --bench wake_latency
//! ```
//!
//! Each message carries the producer's `CLOCK_MONOTONIC` time just before it is sent; the
//! consumer subtracts it from its own time on receipt: one-way latency, woken. The producer
//! waits `XTCQ_BENCH_GAP_US` (default 500) between messages so that the consumer is back
//! asleep for each. Producer on CPU 0, consumer on CPU 1 (both cores busy on a 2-core
//! machine: the figures are for that placement). Each run's p50 and p99, the median of the
//! runs' p50s per mode, and the descriptor's as a ratio of the futex's and the pipe's.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::process::{Command, Stdio};
use std::time::Duration;

use xtcq_benches::{bench_queue, env_u64, pin, start_daemon, BENCH_SEGMENT};
use xtcq_client::Client;
use xtcq_testkit::monotonic_ns;

const QUEUE: &str = "wake";

fn percentile(v: &mut [u64], p: f64) -> u64 {
    v.sort_unstable();
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

/// The consumer role: receives `n` messages in `mode`, prints the latencies' p50 and p99.
fn consumer(mode: &str, socket: &str, n: usize, pipe_fd: i32) {
    pin(1);
    let mut lat = Vec::with_capacity(n);
    if mode == "pipe" {
        // SAFETY: the read end the parent passed, ours alone.
        let mut f = unsafe { std::fs::File::from_raw_fd(pipe_fd) };
        let mut buf = [0u8; 16];
        println!("ready");
        std::io::stdout().flush().expect("flush");
        for _ in 0..n {
            f.read_exact(&mut buf).expect("read");
            let sent = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
            lat.push(monotonic_ns().saturating_sub(sent));
        }
    } else {
        let c = Client::connect(Some(std::path::Path::new(socket))).expect("connect");
        let t = c.attach_thief(QUEUE).expect("thief");
        let wake = (mode == "descriptor").then(|| t.wake_fd().expect("wake_fd"));
        println!("ready");
        std::io::stdout().flush().expect("flush");
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
            let sent = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
            lat.push(now.saturating_sub(sent));
            job.ack().expect("ack");
        }
    }
    let (p50, p99) = (percentile(&mut lat, 0.5), percentile(&mut lat, 0.99));
    println!("{p50} {p99}");
}

/// Runs one mode: starts the consumer, sends `n` messages `gap` apart; returns (p50, p99) ns.
fn run(
    mode: &str,
    d: &xtcq_testkit::Daemon,
    owner: &xtcq_client::OwnerHandle,
    n: usize,
    gap: Duration,
) -> (u64, u64) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe(2) into a valid array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .env("XTCQ_WAKE_ROLE", mode)
        .env("XTCQ_WAKE_SOCKET", &d.socket)
        .env("XTCQ_WAKE_N", n.to_string())
        .env("XTCQ_WAKE_PIPE", fds[0].to_string())
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
    pin(0);
    std::thread::sleep(Duration::from_millis(50));
    for _ in 0..n {
        std::thread::sleep(gap);
        let mut msg = [0u8; 64];
        msg[..8].copy_from_slice(&monotonic_ns().to_le_bytes());
        if mode == "pipe" {
            tx.write_all(&msg[..16]).expect("write");
        } else {
            owner.push(&msg).expect("push");
        }
    }
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).expect("result line");
    assert!(child.wait().expect("wait").success(), "consumer failed");
    let mut it = line.split_whitespace().map(|v| v.parse().expect("a number"));
    (it.next().expect("p50"), it.next().expect("p99"))
}

fn main() {
    if let Ok(mode) = std::env::var("XTCQ_WAKE_ROLE") {
        let env = |k: &str| std::env::var(k).expect(k);
        consumer(
            &mode,
            &env("XTCQ_WAKE_SOCKET"),
            env("XTCQ_WAKE_N").parse().expect("n"),
            env("XTCQ_WAKE_PIPE").parse().expect("fd"),
        );
        return;
    }
    // `cargo bench` passes --bench; `cargo test --benches` runs this with nothing to prove.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let n = env_u64("XTCQ_BENCH_N").unwrap_or(1000) as usize;
    let runs = env_u64("XTCQ_BENCH_RUNS").unwrap_or(5) as usize;
    let gap = Duration::from_micros(env_u64("XTCQ_BENCH_GAP_US").unwrap_or(500));
    let d = start_daemon(BENCH_SEGMENT);
    let client = d.client();
    let owner = bench_queue(&client, QUEUE);
    println!(
        "wake_latency: {runs} runs, the modes alternating; {n} messages a run, {gap:?} apart, the consumer \
         asleep for each; one-way latency, woken"
    );
    const MODES: [&str; 3] = ["futex", "descriptor", "pipe"];
    let mut p50s: [Vec<u64>; 3] = Default::default();
    for run_no in 0..runs {
        for (m, mode) in MODES.iter().enumerate() {
            let (p50, p99) = run(mode, &d, &owner, n, gap);
            println!(
                "run {run_no} {mode:>11}: p50 {:>7.1} us   p99 {:>8.1} us",
                p50 as f64 / 1e3,
                p99 as f64 / 1e3
            );
            p50s[m].push(p50);
        }
    }
    let med: Vec<u64> = p50s.iter_mut().map(|v| percentile(v, 0.5)).collect();
    for (m, mode) in MODES.iter().enumerate() {
        println!("median p50 {mode:>11}: {:>7.1} us", med[m] as f64 / 1e3);
    }
    println!(
        "descriptor / futex = {:.2}; descriptor / pipe = {:.2} (medians of the runs' p50s)",
        med[1] as f64 / med[0] as f64,
        med[1] as f64 / med[2] as f64
    );
}
