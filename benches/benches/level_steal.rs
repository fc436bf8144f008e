//! What priority levels cost a steal: one thread pushes N jobs, then steals and acks them, on
//! a queue of one level, on a queue of four levels whose pushes all use the least urgent one
//! (so every steal passes three empty levels, skipped by their hint bits), and on a queue of
//! four levels with the pushes spread over all four (so the steals drain level after level,
//! clearing each bit once it is empty). The three alternate in each run so that all see the
//! same noise; the median, min and max per steal + ack are printed.
//!
//! ```sh
//! cargo bench -p xtcq-benches --bench level_steal     # XTCQ_BENCH_N (jobs per run, 100,000), XTCQ_BENCH_RUNS (15)
//! ```
//!
//! One process, one thread, no daemon: the segment is made in a temporary directory.

use std::sync::Arc;
use std::time::Instant;

use xtcq_shm::{Owner, QueueSpec, Segment, SegmentConfig, Thief};

fn env_u64(k: &str, default: u64) -> u64 {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Median, min and max.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// ns per steal + ack of `n` jobs pushed beforehand, the `i`-th at `priority(i)`.
fn run(owner: &Owner, thief: &Thief, n: u64, priority: impl Fn(u64) -> u32) -> f64 {
    for i in 0..n {
        owner.push_priority(&i.to_le_bytes(), priority(i)).expect("push");
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
    let config = SegmentConfig::small().with_queues(3, 4).with_records(cap).with_deque_capacity(cap);
    let seg = Arc::new(Segment::create(&dir.path().join("segment"), &config, 0o600).expect("segment"));
    let one = seg.create_queue(&QueueSpec { capacity: cap, ..QueueSpec::new("one") }).expect("queue");
    let four = QueueSpec { capacity: cap, levels: 4, ..QueueSpec::new("four-one-used") };
    let four_one = seg.create_queue(&four).expect("queue");
    let four_all = seg.create_queue(&QueueSpec { name: "four-all-used".into(), ..four }).expect("queue");
    let pairs = [&one, &four_one, &four_all].map(|q| {
        (Owner::new(seg.clone(), q, 0, 0).expect("owner"), Thief::new(seg.clone(), q, 1).expect("thief"))
    });
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        a.push(run(&pairs[0].0, &pairs[0].1, n, |_| 0));
        b.push(run(&pairs[1].0, &pairs[1].1, n, |_| 3));
        c.push(run(&pairs[2].0, &pairs[2].1, n, |i| (i % 4) as u32));
    }
    println!("level_steal: steal + ack, one thread, {n} jobs x {runs} runs (median, min-max)");
    for (what, v) in [("1 level", a), ("4 levels, one used (3)", b), ("4 levels, all used", c)] {
        let (med, lo, hi) = spread(v);
        println!("  {what:<24} {med:6.1} ns  ({lo:.1}-{hi:.1})");
    }
}
