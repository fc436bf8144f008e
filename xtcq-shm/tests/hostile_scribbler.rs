//! A hostile or broken peer: one thread scribbles random words over deque indices and slots,
//! overflow cells and record words while an owner and two thieves keep working on a second
//! mapping. Nobody may panic, read out of bounds or wedge (every worker must notice the stop
//! flag within a deadline); errors are expected and counted; `check_segment` reports the
//! damage afterwards.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use xtcq_shm::check::check_segment;
use xtcq_shm::{Flavor, Owner, QueueSpec, Segment, SegmentConfig, Thief};

// xorshift64*, the one harness's: this package cannot link testkit (testkit links this
// crate, through the client), so it includes testkit's file by path.
#[path = "../../testkit/src/rng.rs"]
mod rng;
use rng::Rng;

fn run(seed: u64, flavor: Flavor) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("seg");
    let cfg = SegmentConfig::small().with_deque_capacity(64);
    let seg = Arc::new(Segment::create(&path, &cfg, 0o600).expect("create"));
    let q = seg
        .create_queue(&QueueSpec {
            name: "victim".into(),
            flavor,
            deques: 2,
            capacity: 64,
            max_attempts: 3,
            lease_ms: 0,
        })
        .expect("queue");
    let other = Arc::new(Segment::attach(&path).expect("attach"));
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = mpsc::channel::<&'static str>();

    let mut handles = Vec::new();
    {
        let (seg, q, stop, ops, errors, tx) =
            (other.clone(), q.clone(), stop.clone(), ops.clone(), errors.clone(), done_tx.clone());
        handles.push(std::thread::spawn(move || {
            let owner = Owner::new(seg, &q, 0, 0).expect("owner");
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                if owner.push(&i.to_le_bytes()).is_err() {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                if i.is_multiple_of(3) {
                    match owner.pop() {
                        Ok(Some(j)) => {
                            let _ = j.payload();
                            if j.ack().is_err() {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Ok(None) => {}
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                ops.fetch_add(1, Ordering::Relaxed);
            }
            let _ = owner.len();
            let _ = tx.send("owner");
        }));
    }
    for t in 0..2u32 {
        let (seg, q, stop, ops, errors, tx) =
            (other.clone(), q.clone(), stop.clone(), ops.clone(), errors.clone(), done_tx.clone());
        handles.push(std::thread::spawn(move || {
            let thief = Thief::new(seg, &q, 1 + t).expect("thief");
            let mut batch = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match thief.steal() {
                    Ok(Some(j)) => match j.payload() {
                        Ok(_) if t == 0 => {
                            let _ = j.ack();
                        }
                        Ok(_) => {
                            let _ = j.nack();
                        }
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    },
                    Ok(None) => {}
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let _ = thief.steal_batch_from(1, 16, &mut batch);
                for j in batch.drain(..) {
                    let _ = j.payload();
                    let _ = j.ack();
                }
                let _ = thief.steal_wait(Some(Instant::now() + Duration::from_micros(50)));
                let _ = thief.len();
                ops.fetch_add(1, Ordering::Relaxed);
            }
            let _ = tx.send("thief");
        }));
    }

    // The scribbler: raw words of the first mapping, chosen among the hot structures.
    let mut rng = Rng::new(seed);
    let records = seg.records();
    let ring = seg.overflow(q.index).expect("ring");
    let started = Instant::now();
    let mut writes = 0u64;
    while started.elapsed() < Duration::from_millis(700) {
        let value = match rng.below(4) {
            0 => rng.next_u64(),
            1 => rng.below(512),
            2 => rng.next_u64() & 0xFFFF_FFFF,
            _ => u64::MAX - rng.below(4),
        };
        let d = rng.below(2) as u32;
        match rng.below(6) {
            0 => {
                let h = seg.deque_header(q.index, d).expect("deque");
                if rng.below(2) == 0 {
                    h.top.store(value as i64, Ordering::Relaxed);
                } else {
                    h.bottom.store(value as i64, Ordering::Relaxed);
                }
            }
            1 => {
                let dq = seg.deque(&q, d).expect("deque");
                dq.raw_slot(rng.below(64) as i64).store(value, Ordering::Relaxed);
            }
            2 => {
                let hdr = records.header(rng.below(256) as u32).expect("header");
                hdr.payload_len.store(value as u32, Ordering::Relaxed);
            }
            3 => {
                let hdr = records.header(rng.below(256) as u32).expect("header");
                hdr.queue.store(value as u32, Ordering::Relaxed);
            }
            4 => {
                let pos = rng.below(256);
                if rng.below(2) == 0 {
                    ring.raw_cell(pos).store(value, Ordering::Relaxed);
                } else {
                    let hdr = records.header(rng.below(256) as u32).expect("header");
                    hdr.attempts.store(value as u32, Ordering::Relaxed);
                }
            }
            _ => {
                let st = records.state(rng.below(256) as u32).expect("state");
                st.0.store(value, Ordering::Relaxed);
            }
        }
        writes += 1;
        if writes.is_multiple_of(64) {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    stop.store(true, Ordering::Relaxed);
    drop(done_tx);
    let deadline = Instant::now() + Duration::from_secs(20);
    for _ in 0..3 {
        let left = deadline.saturating_duration_since(Instant::now());
        match done_rx.recv_timeout(left) {
            Ok(_) => {}
            Err(_) => panic!("a worker wedged on the scribbled segment (seed {seed})"),
        }
    }
    for h in handles {
        h.join().expect("a worker panicked on the scribbled segment");
    }
    let report = check_segment(&seg, false);
    eprintln!(
        "seed {seed}: {writes} scribbles, {} ops, {} errors seen by workers, check found {} problems",
        ops.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed),
        report.problems.len()
    );
    assert!(!report.is_consistent(), "check_segment missed the scribbling");
    assert!(errors.load(Ordering::Relaxed) > 0, "no worker reported the corruption");
}

#[test]
fn workers_survive_a_scribbler_lifo() {
    run(0x5eed_0001, Flavor::Lifo);
}

#[test]
fn workers_survive_a_scribbler_fifo() {
    run(0x5eed_0002, Flavor::Fifo);
}
