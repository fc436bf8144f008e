//! What the language boundary costs: push, then steal + read + ack, per 64-byte job, from
//! Rust (`xtcq-client`), from C (`libxtcq.a`, through `include/xtcq.h`) and from Python
//! (`python/`, the native extension over `xtcq-client`, its wheel built with `--release`
//! and installed in a fresh venv), in one run against one daemon.
//!
//! ```sh
//! cargo bench -p xtcq-benches --bench api_cost      # XTCQ_BENCH_N (jobs per phase, 10,000), XTCQ_BENCH_RUNS (11)
//! ```
//!
//! One process, one thread, no contention: the figures are the API's own cost per call
//! (the hand-off between cores is ipc_handoff's job). Each language pushes N jobs, then
//! steals, copies out and acks them; the median over the runs of each phase is shown, with
//! its ratio to Rust's. C is compiled with `-O2` by `xtcq_testkit::compile_c` (as the
//! tests' C is, warnings failing the build); Python's row is skipped when python3, its venv
//! and pip, or maturin are missing. The goal for Python is at most 3x Rust's cost for each
//! phase; the last lines say whether it was met.

use std::process::Command;
use std::time::{Duration, Instant};

use xtcq_benches::start_daemon;
use xtcq_client::{Client, Flavor, QueueParams};
use xtcq_testkit::python::{missing_python_tools, PythonEnv, WheelProfile};
use xtcq_testkit::{compile_c, run_within, workspace_root, Daemon};

const SIZES: &[&str] =
    &["--queues", "4", "--deques-per-queue", "1", "--deque-capacity", "131072", "--records", "262144"];

fn env_u64(k: &str, default: u64) -> u64 {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Rust: the same loop as bench_api.c; with `owned`, each job becomes an `OwnedJob` (what
/// the C and Python handles hold) before it is read and acked.
fn rust_row(client: &Client, queue: &str, n: u64, runs: u64, owned: bool) -> (f64, f64) {
    let owner = client.attach_owner(queue).expect("attach owner");
    let thief = client.attach_thief(queue).expect("attach thief");
    let msg = [b'x'; 64];
    let mut out = Vec::with_capacity(64);
    let (mut push, mut take) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t0 = Instant::now();
        for _ in 0..n {
            owner.push(&msg).expect("push");
        }
        let t1 = Instant::now();
        for _ in 0..n {
            let job = thief.steal().expect("steal").expect("a job");
            out.clear();
            if owned {
                let job = job.into_owned();
                job.read_payload(&mut out).expect("payload");
                job.ack().expect("ack");
            } else {
                job.read_payload(&mut out).expect("payload");
                job.ack().expect("ack");
            }
        }
        let t2 = Instant::now();
        push.push((t1 - t0).as_nanos() as f64 / n as f64);
        take.push((t2 - t1).as_nanos() as f64 / n as f64);
    }
    (median(push), median(take))
}

/// Parses "push_ns=P steal_ack_ns=S".
fn parse_row(stdout: &[u8]) -> (f64, f64) {
    let text = String::from_utf8_lossy(stdout);
    let field = |k: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {text:?}"))
    };
    (field("push_ns="), field("steal_ack_ns="))
}

fn c_row(daemon: &Daemon, queue: &str, n: u64, runs: u64) -> (f64, f64) {
    let exe = compile_c("benches/c/bench_api.c", daemon.dir(), &["-O2"]);
    let out = run_within(
        Command::new(&exe).arg(&daemon.socket).arg(queue).arg(n.to_string()).arg(runs.to_string()),
        Duration::from_secs(600),
    );
    assert!(out.status.success(), "bench_api: {}", String::from_utf8_lossy(&out.stderr));
    parse_row(&out.stdout)
}

fn python_row(daemon: &Daemon, queue: &str, n: u64, runs: u64) -> Option<(f64, f64)> {
    if let Some(why) = missing_python_tools() {
        eprintln!("python row skipped: {why}");
        return None;
    }
    let env = PythonEnv::build(WheelProfile::Release);
    let out = run_within(
        env.command()
            .arg(workspace_root().join("python/examples/bench_api.py"))
            .arg(&daemon.socket)
            .arg(queue)
            .arg(n.to_string())
            .arg(runs.to_string()),
        Duration::from_secs(600),
    );
    if !out.status.success() {
        eprintln!("python row skipped: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    Some(parse_row(&out.stdout))
}

fn main() {
    // 10,000 jobs keep a phase's records in cache, so the rows compare the calls, not how
    // each process meets a cold arena (at 100,000 the C row's payload reads miss: 290 ns vs
    // 160 ns a job, measured with `perf`).
    let n = env_u64("XTCQ_BENCH_N", 10_000);
    let runs = env_u64("XTCQ_BENCH_RUNS", 11);
    let daemon = start_daemon(SIZES);
    let client = daemon.client();
    for q in ["rust", "owned", "c", "python"] {
        let mut p = QueueParams::new(q);
        p.deques = 1;
        p.capacity = 131072;
        p.flavor = Flavor::Fifo;
        client.create_queue(&p).expect("create queue");
    }
    let rust = rust_row(&client, "rust", n, runs, false);
    let owned = rust_row(&client, "owned", n, runs, true);
    let c = c_row(&daemon, "c", n, runs);
    let python = python_row(&daemon, "python", n, runs.min(5));
    println!("api_cost: {n} jobs per phase, median of {runs} runs (Python {}), ns per job", runs.min(5));
    println!("{:<16} {:>10} {:>8} {:>16} {:>8}", "from", "push", "x Rust", "steal+read+ack", "x Rust");
    let row = |name: &str, (p, s): (f64, f64)| {
        println!("{name:<16} {p:>10.1} {:>8.2} {s:>16.1} {:>8.2}", p / rust.0, s / rust.1);
    };
    row("Rust", rust);
    row("Rust, OwnedJob", owned);
    row("C", c);
    match python {
        Some(py) => {
            row("Python", py);
            let verdict = |ratio: f64| if ratio <= 3.0 { "met" } else { "NOT met" };
            println!("goal Python push <= 3x Rust: {:.2}x, {}", py.0 / rust.0, verdict(py.0 / rust.0));
            println!(
                "goal Python steal+read+ack <= 3x Rust: {:.2}x, {}",
                py.1 / rust.1,
                verdict(py.1 / rust.1)
            );
        }
        None => println!("Python   skipped (python3, venv, pip or maturin not found, or it failed)"),
    }
}
