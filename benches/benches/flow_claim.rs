//! What the flow gate costs a claim: one thread pushes N jobs, then steals and acks them, on
//! a queue with no limit, on one with a concurrency limit it never reaches (so every steal
//! takes a slot with a CAS and every ack gives it back) and on one with a rate limit it never
//! reaches (so every steal reads the clock and takes a token with a CAS), alternating the
//! three in each run so that all see the same noise; the medians per steal + ack are printed.
//!
//! ```sh
//! cargo bench -p xtcq-benches --bench flow_claim     # XTCQ_BENCH_N (jobs per run, 100,000), XTCQ_BENCH_RUNS (15), XTCQ_BENCH_CONTROL=1 (no limit on either)
//! ```
//!
//! One process, one thread, no daemon: the segment is made in a temporary directory and the
//! limits written as the daemon writes them (`Segment::set_max_running`,
//! `Segment::set_rate_limit`).

use std::sync::Arc;
use std::time::Instant;

use xtcq_shm::segment::RateLimit;
use xtcq_shm::{Owner, QueueSpec, Segment, SegmentConfig, Thief};

fn env_u64(k: &str, default: u64) -> u64 {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// ns per steal + ack of `n` jobs pushed beforehand.
fn run(owner: &Owner, thief: &Thief, n: u64) -> f64 {
    for i in 0..n {
        owner.push(&i.to_le_bytes()).expect("push");
    }
    let t = Instant::now();
    let mut got = 0;
    while let Some(j) = thief.steal().expect("steal") {
        j.ack().expect("ack");
        got += 1;
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    assert_eq!(got, n, "every job taken");
    ns
}

fn main() {
    let n = env_u64("XTCQ_BENCH_N", 100_000);
    let runs = env_u64("XTCQ_BENCH_RUNS", 15);
    // In /dev/shm, as the daemon keeps its segment: a file on disk adds writeback faults.
    let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).expect("tempdir");
    let cap = (n as u32).next_power_of_two();
    let config = SegmentConfig::small().with_queues(3, 1).with_records(cap).with_deque_capacity(cap);
    let seg = Arc::new(Segment::create(&dir.path().join("segment"), &config, 0o600).expect("segment"));
    let mut spec = QueueSpec::new("free");
    spec.capacity = cap;
    let free = seg.create_queue(&spec).expect("queue");
    spec.name = "limited".into();
    let limited = seg.create_queue(&spec).expect("queue");
    spec.name = "rated".into();
    let rated = seg.create_queue(&spec).expect("queue");
    // XTCQ_BENCH_CONTROL=1 leaves the other queues without a limit too: what the queues
    // differ by besides the limit (their memory), for comparison.
    if env_u64("XTCQ_BENCH_CONTROL", 0) == 0 {
        seg.set_max_running(limited.index, u32::MAX >> 1);
        // One claim a nanosecond with a burst of 2^20: never out of tokens at ~40 ns a claim.
        seg.set_rate_limit(rated.index, RateLimit { interval_ns: 1, burst: 1 << 20 });
    }
    let pairs = [&free, &limited, &rated].map(|q| {
        (Owner::new(seg.clone(), q, 0, 0).expect("owner"), Thief::new(seg.clone(), q, 1).expect("thief"))
    });
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        a.push(run(&pairs[0].0, &pairs[0].1, n));
        b.push(run(&pairs[1].0, &pairs[1].1, n));
        c.push(run(&pairs[2].0, &pairs[2].1, n));
    }
    let (a, b, c) = (median(a), median(b), median(c));
    println!("flow_claim: steal + ack, one thread, {n} jobs x {runs} runs (medians)");
    println!("  no limit:             {a:6.1} ns");
    println!("  under a limit (CAS):  {b:6.1} ns  ({:+.1} ns)", b - a);
    println!("  under a rate (clock + CAS): {c:6.1} ns  ({:+.1} ns)", c - a);
}
