//! What the flow gate costs a claim: one thread pushes N jobs, then steals and acks them, on
//! a queue with no limit and on one with a concurrency limit it never reaches (so every
//! steal takes a slot with a CAS and every ack gives it back), alternating the two in each
//! run so that both see the same noise; the medians per steal + ack are printed.
//!
//! ```sh
//! cargo bench -p xtcq-benches --bench flow_claim     # XTCQ_BENCH_N (jobs per run, 100,000), XTCQ_BENCH_RUNS (15), XTCQ_BENCH_CONTROL=1 (no limit on either)
//! ```
//!
//! One process, one thread, no daemon: the segment is made in a temporary directory and the
//! limit written as the daemon writes it (`Segment::set_max_running`).

use std::sync::Arc;
use std::time::Instant;

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
    let config = SegmentConfig::small().with_queues(2, 1).with_records(cap).with_deque_capacity(cap);
    let seg = Arc::new(Segment::create(&dir.path().join("segment"), &config, 0o600).expect("segment"));
    let mut spec = QueueSpec::new("free");
    spec.capacity = cap;
    let free = seg.create_queue(&spec).expect("queue");
    spec.name = "limited".into();
    let limited = seg.create_queue(&spec).expect("queue");
    // XTCQ_BENCH_CONTROL=1 leaves the second queue without a limit too: what the two
    // queues differ by besides the limit (their memory), for comparison.
    if env_u64("XTCQ_BENCH_CONTROL", 0) == 0 {
        seg.set_max_running(limited.index, u32::MAX >> 1);
    }
    let pairs = [&free, &limited].map(|q| {
        (Owner::new(seg.clone(), q, 0, 0).expect("owner"), Thief::new(seg.clone(), q, 1).expect("thief"))
    });
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        a.push(run(&pairs[0].0, &pairs[0].1, n));
        b.push(run(&pairs[1].0, &pairs[1].1, n));
    }
    let (a, b) = (median(a), median(b));
    println!("flow_claim: steal + ack, one thread, {n} jobs x {runs} runs (medians)");
    println!("  no limit:             {a:6.1} ns");
    println!("  under a limit (CAS):  {b:6.1} ns  ({:+.1} ns)", b - a);
}
