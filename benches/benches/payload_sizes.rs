//! Push + steal + ack rate by payload size, in one process (no daemon), for a segment that
//! takes 64 KiB payloads laid out two ways:
//! - `max-inline`: every record holds 64 KiB inline (what layout 5 had to do: `inline_bytes`
//!   = `payload_bytes` = 65536, no blocks);
//! - `blocks`: 64-byte inline areas and a block class per size (layout 6's way).
//!
//! ```sh
//! cargo bench -p xtcq-benches --bench payload_sizes   # about 10 s
//! ```
//!
//! One owner pushes a batch of 32 jobs, one thief (same thread) steals, reads and acks them;
//! rate = jobs / wall time, median of 5 runs of `XTCQ_BENCH_PAYLOAD_N` jobs (default 200,000;
//! 20,000 for 64 KiB). Every job's first byte is checked, and every job is acked once.

use std::sync::Arc;
use std::time::Instant;

use xtcq_shm::layout::payload::{class_size, PAYLOAD_CLASSES};
use xtcq_shm::{Flavor, Owner, QueueSpec, Segment, SegmentConfig, Thief};

const BATCH: usize = 32;

fn config(blocks: bool) -> SegmentConfig {
    let mut payload_blocks = [0u32; PAYLOAD_CLASSES];
    if blocks {
        for (k, n) in payload_blocks.iter_mut().enumerate() {
            *n = if class_size(k) <= 65536 { 256 } else { 0 };
        }
    }
    SegmentConfig {
        queues: 1,
        deques_per_queue: 1,
        deque_capacity: 64,
        job_records: 256,
        payload_bytes: 65536,
        process_slots: 4,
        overflow_capacity: 64,
        inline_bytes: if blocks { 64 } else { 65536 },
        payload_blocks,
        keys: 0,
    }
}

/// Jobs per second for `n` jobs of `size` bytes.
fn rate(blocks: bool, size: usize, n: usize) -> f64 {
    let dir = tempfile::Builder::new().prefix("xtcq-bench").tempdir_in("/dev/shm").expect("tempdir");
    let seg = Arc::new(Segment::create(&dir.path().join("seg"), &config(blocks), 0o600).expect("segment"));
    let spec = QueueSpec {
        name: "b".into(),
        flavor: Flavor::Fifo,
        deques: 1,
        capacity: 64,
        max_attempts: 0,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    };
    let q = seg.create_queue(&spec).expect("queue");
    let owner = Owner::new(seg.clone(), &q, 0, 0).expect("owner");
    let thief = Thief::new(seg.clone(), &q, 1).expect("thief");
    let payload: Vec<u8> = (0..size).map(|k| k as u8).collect();
    let mut buf = Vec::with_capacity(size);
    let t0 = Instant::now();
    let mut done = 0;
    while done < n {
        for _ in 0..BATCH {
            owner.push(&payload).expect("push");
        }
        for _ in 0..BATCH {
            let j = thief.steal().expect("steal").expect("a job");
            buf.clear();
            j.read_payload(&mut buf).expect("payload");
            assert_eq!((buf.len(), buf.first()), (size, payload.first()));
            j.ack().expect("ack");
        }
        done += BATCH;
    }
    let r = done as f64 / t0.elapsed().as_secs_f64();
    assert!(thief.steal().expect("steal").is_none(), "a job left over");
    r
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let n: usize = std::env::var("XTCQ_BENCH_PAYLOAD_N").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    println!("push+steal+ack, one thread, batches of {BATCH}; median of 5 runs (M jobs/s, GB/s of payload)");
    println!("{:>8} {:>22} {:>22} {:>8}", "payload", "max-inline (layout 5)", "blocks (layout 6)", "ratio");
    for size in [16usize, 256, 4096, 65536] {
        let n = if size >= 65536 { n / 10 } else { n };
        let mut runs = [Vec::new(), Vec::new()];
        for _ in 0..5 {
            // Alternated, so that a slow spell of the machine hits both.
            runs[0].push(rate(false, size, n));
            runs[1].push(rate(true, size, n));
        }
        let (a, b) = (median(runs[0].clone()), median(runs[1].clone()));
        let show = |r: f64| format!("{:.3} M/s {:.2} GB/s", r / 1e6, r * size as f64 / 1e9);
        println!("{:>8} {:>22} {:>22} {:>7.2}x", size, show(a), show(b), b / a);
    }
}
