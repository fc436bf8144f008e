//! What an array push from SQL costs the C API per job: the PostgreSQL extension's jobs (its
//! header line, then "job <i>") pushed through an injector, 1,000 per call as a statement's
//! array, one `xtcq_injector_push_at` each against one `xtcq_injector_push_many` for the
//! lot, by 1 process and by 4 at once onto one queue (the bench's 4 pushing backends).
//!
//! ```sh
//! cargo bench -p xtcq-benches --bench inject_many   # XTCQ_BENCH_N (jobs per call, 1,000), XTCQ_BENCH_RUNS (40)
//! ```
//!
//! Each process alternates the two forms, so both meet the same machine; the median over
//! its runs of each is shown (for several processes, the median of their medians), in ns
//! per job. Nothing takes the jobs: the daemon holds them all.

use std::process::{Command, Stdio};
use std::time::Duration;

use xtcq_benches::start_daemon;
use xtcq_client::{Flavor, QueueParams};
use xtcq_testkit::{compile_c, wait_bounded};

fn env_u64(k: &str, default: u64) -> u64 {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Parses "one_ns=A many_ns=B".
fn parse_row(stdout: &[u8]) -> (f64, f64) {
    let text = String::from_utf8_lossy(stdout);
    let field = |k: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {text:?}"))
    };
    (field("one_ns="), field("many_ns="))
}

fn main() {
    let n = env_u64("XTCQ_BENCH_N", 1000);
    let runs = env_u64("XTCQ_BENCH_RUNS", 40);
    let procs = [1u64, 4];
    // Every job of every process stays queued: room for all of them, in records and ring.
    let need = (2 * n * runs * procs.iter().sum::<u64>()).next_power_of_two().to_string();
    let sizes = ["--queues", "2", "--records", &need, "--overflow-capacity", &need, "--payload-bytes", "128"];
    let daemon = start_daemon(&sizes);
    let exe = compile_c("benches/c/bench_inject.c", daemon.dir(), &["-O2"]);
    println!("inject_many: {n} jobs per call, median of {runs} runs, ns per job");
    println!("{:<12} {:>14} {:>14} {:>8}", "processes", "push_at each", "push_many", "ratio");
    for p in procs {
        let queue = format!("p{p}");
        let mut params = QueueParams::new(&queue);
        params.flavor = Flavor::Fifo;
        daemon.client().create_queue(&params).expect("create queue");
        let children: Vec<_> = (0..p)
            .map(|_| {
                Command::new(&exe)
                    .arg(&daemon.socket)
                    .arg(&queue)
                    .arg(n.to_string())
                    .arg(runs.to_string())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn bench_inject")
            })
            .collect();
        let rows: Vec<(f64, f64)> = children
            .into_iter()
            .map(|c| {
                let out = wait_bounded(c, Duration::from_secs(600), "bench_inject");
                assert!(out.status.success(), "bench_inject: {}", String::from_utf8_lossy(&out.stderr));
                parse_row(&out.stdout)
            })
            .collect();
        let one = median(rows.iter().map(|r| r.0).collect());
        let many = median(rows.iter().map(|r| r.1).collect());
        println!("{p:<12} {one:>14.1} {many:>14.1} {:>8.2}", many / one);
    }
}
