//! What a key costs a push: one thread pushes N jobs without a key, N with a new key each
//! (the home lock, a scan of the key's window, the claim of an entry) and N with a key a
//! live job holds (refused after the scan), alternating the three in each run so that all
//! see the same noise; the queue is drained (steal + ack, not timed) after each. Prints the
//! median ns per push of each, with the spread (fastest and slowest run).
//!
//! ```sh
//! cargo bench -p xtcq-benches --bench unique_push    # XTCQ_BENCH_N (jobs per run, 10,000), XTCQ_BENCH_RUNS (15), XTCQ_BENCH_PLAIN=1 (no key only), XTCQ_BENCH_KEYS (key table entries, 8 per job)
//! ```
//!
//! One process, one thread, no daemon: the segment is made in a temporary directory, its
//! key table 8 entries per job of a run. From the second run on the table holds the entries
//! of the jobs of earlier runs, ended: a keyed push meets them in its window, as a
//! long-running queue's pushes do.

use std::sync::Arc;
use std::time::Instant;

use xtcq_shm::{Key, Owner, QueueSpec, Segment, SegmentConfig, Thief};

fn env_u64(k: &str, default: u64) -> u64 {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Median, fastest and slowest.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn drain(thief: &Thief) -> u64 {
    let mut n = 0;
    while let Some(j) = thief.steal().expect("steal") {
        j.ack().expect("ack");
        n += 1;
    }
    n
}

/// ns per push of `n` jobs, each pushed by `push(i)`.
fn timed(n: u64, mut push: impl FnMut(u64)) -> f64 {
    let t = Instant::now();
    for i in 0..n {
        push(i);
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let n = env_u64("XTCQ_BENCH_N", 10_000);
    let runs = env_u64("XTCQ_BENCH_RUNS", 15);
    // In /dev/shm, as the daemon keeps its segment: a file on disk adds writeback faults.
    let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).expect("tempdir");
    let cap = (n as u32).next_power_of_two();
    let config = SegmentConfig::small()
        .with_queues(1, 1)
        .with_records(cap * 2)
        .with_deque_capacity(cap * 2)
        .with_keys(env_u64("XTCQ_BENCH_KEYS", n * 8).min(xtcq_shm::keys::MAX_KEY_ENTRIES as u64) as u32);
    let seg = Arc::new(Segment::create(&dir.path().join("segment"), &config, 0o600).expect("segment"));
    let mut spec = QueueSpec::new("jobs");
    spec.capacity = cap * 2;
    let q = seg.create_queue(&spec).expect("queue");
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    let thief = Thief::new(seg.clone(), &q, 1).expect("thief");
    let payload = [b'x'; 8];
    let held = Key::new(b"held").expect("key");
    let (mut plain, mut keyed, mut refused) = (Vec::new(), Vec::new(), Vec::new());
    // XTCQ_BENCH_PLAIN=1: pushes without a key only, so that no keyed run between them
    // takes the caches (to compare with a build before keys).
    let plain_only = env_u64("XTCQ_BENCH_PLAIN", 0) == 1;
    for run in 0..runs {
        plain.push(timed(n, |_| {
            owner.push(&payload).expect("push");
        }));
        assert_eq!(drain(&thief), n);
        if plain_only {
            continue;
        }
        let names: Vec<String> = (0..n).map(|i| format!("job-{run}-{i}")).collect();
        keyed.push(timed(n, |i| {
            let key = Key::new(names[i as usize].as_bytes()).expect("key");
            owner.push_with_key(&payload, &key).expect("a new key");
        }));
        assert_eq!(drain(&thief), n);
        owner.push_with_key(&payload, &held).expect("the held key");
        refused.push(timed(n, |_| assert!(owner.push_with_key(&payload, &held).is_err())));
        assert_eq!(drain(&thief), 1);
    }
    println!(
        "unique_push: push of an 8-byte job, one thread, {n} jobs x {runs} runs (median [fastest, slowest])"
    );
    for (what, v) in [("no key", plain), ("a new key", keyed), ("a held key (refused)", refused)] {
        if v.is_empty() {
            continue;
        }
        let (m, lo, hi) = spread(v);
        println!("  {what:<22} {m:7.1} ns  [{lo:.1}, {hi:.1}]");
    }
}
