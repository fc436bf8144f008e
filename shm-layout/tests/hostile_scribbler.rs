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

/// What the workers share: the stop flag, their counts, and the channel each says it
/// stopped on.
#[derive(Clone)]
struct Crew {
    seg: Arc<Segment>,
    q: xtcq_shm::QueueInfo,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    done: mpsc::Sender<&'static str>,
}

impl Crew {
    fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The owner of deque 0: pushes, and pops and acks every third round.
    fn owner(self) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let owner = Owner::new(self.seg.clone(), &self.q, 0, 0).expect("owner");
            let mut i = 0u64;
            while !self.stop.load(Ordering::Relaxed) {
                i += 1;
                if owner.push(&i.to_le_bytes()).is_err() {
                    self.error();
                }
                if i.is_multiple_of(3) {
                    match owner.pop() {
                        Ok(Some(j)) => {
                            let _ = j.payload();
                            if j.ack().is_err() {
                                self.error();
                            }
                        }
                        Ok(None) => {}
                        Err(_) => self.error(),
                    }
                }
                self.ops.fetch_add(1, Ordering::Relaxed);
            }
            let _ = owner.len();
            let _ = self.done.send("owner");
        })
    }

    /// Thief `t` (slot 1 + t): steals one (thief 0 acks it, thief 1 nacks it), a batch from
    /// deque 1, waits briefly.
    fn thief(self, t: u32) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let thief = Thief::new(self.seg.clone(), &self.q, 1 + t).expect("thief");
            let mut batch = Vec::new();
            while !self.stop.load(Ordering::Relaxed) {
                match thief.steal() {
                    Ok(Some(j)) => match j.payload() {
                        Ok(_) if t == 0 => {
                            let _ = j.ack();
                        }
                        Ok(_) => {
                            let _ = j.nack();
                        }
                        Err(_) => self.error(),
                    },
                    Ok(None) => {}
                    Err(_) => self.error(),
                }
                let _ = thief.steal_batch_from(1, 16, &mut batch);
                for j in batch.drain(..) {
                    let _ = j.payload();
                    let _ = j.ack();
                }
                let _ = thief.steal_wait(Some(Instant::now() + Duration::from_micros(50)));
                let _ = thief.len();
                self.ops.fetch_add(1, Ordering::Relaxed);
            }
            let _ = self.done.send("thief");
        })
    }
}

/// Writes random words over the hot structures of queue `q` of `seg` for 700 ms; returns how
/// many.
fn scribble(seg: &Segment, q: &xtcq_shm::QueueInfo, seed: u64) -> u64 {
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
                let word = if rng.below(2) == 0 { &h.top } else { &h.bottom };
                word.store(value as i64, Ordering::Relaxed);
            }
            1 => {
                seg.deque(q, d).expect("deque").raw_slot(rng.below(64) as i64).store(value, Ordering::Relaxed)
            }
            2 => records
                .header(rng.below(256) as u32)
                .expect("header")
                .payload_len
                .store(value as u32, Ordering::Relaxed),
            3 => records
                .header(rng.below(256) as u32)
                .expect("header")
                .queue
                .store(value as u32, Ordering::Relaxed),
            4 if rng.below(2) == 0 => ring.raw_cell(rng.below(256)).store(value, Ordering::Relaxed),
            4 => records
                .header(rng.below(256) as u32)
                .expect("header")
                .attempts
                .store(value as u32, Ordering::Relaxed),
            _ => records.state(rng.below(256) as u32).expect("state").0.store(value, Ordering::Relaxed),
        }
        writes += 1;
        if writes.is_multiple_of(64) {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    writes
}

fn run(seed: u64, flavor: Flavor) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("seg");
    let cfg = SegmentConfig::small().with_deque_capacity(64);
    let seg = Arc::new(Segment::create(&path, &cfg, 0o600).expect("create"));
    let spec = QueueSpec {
        name: "victim".into(),
        flavor,
        deques: 2,
        capacity: 64,
        max_attempts: 3,
        lease_ms: 0,
        levels: 1,
        aging: 0,
    };
    let q = seg.create_queue(&spec).expect("queue");
    let (done_tx, done_rx) = mpsc::channel::<&'static str>();
    let crew = Crew {
        seg: Arc::new(Segment::attach(&path).expect("attach")),
        q: q.clone(),
        stop: Arc::new(AtomicBool::new(false)),
        ops: Arc::new(AtomicU64::new(0)),
        errors: Arc::new(AtomicU64::new(0)),
        done: done_tx,
    };
    let handles = [crew.clone().owner(), crew.clone().thief(0), crew.clone().thief(1)];

    // The scribbler: raw words of the first mapping, chosen among the hot structures.
    let writes = scribble(&seg, &q, seed);
    crew.stop.store(true, Ordering::Relaxed);
    let (ops, errors) = (crew.ops.clone(), crew.errors.clone());
    drop(crew);
    let deadline = Instant::now() + Duration::from_secs(20);
    for _ in 0..handles.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if done_rx.recv_timeout(left).is_err() {
            panic!("a worker wedged on the scribbled segment (seed {seed})");
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
