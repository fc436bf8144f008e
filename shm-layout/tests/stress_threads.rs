//! Exactly-once stress over a real segment file, with threads: one owner thread pushing
//! 1,000,000 jobs (and popping some itself) while three thief threads steal, for LIFO and FIFO
//! queues, single and batch steals, a deque small enough that pushes keep falling back to the
//! overflow ring, and thieves on a second mapping of the same file.
//!
//! Every job's payload is its id; every consumer counts what it claimed in one shared array,
//! and the test asserts every id was consumed exactly once, every record is free again, and
//! the queue's pushed, claimed and acked totals are exactly the job count.
//!
//! `XTCQ_STRESS_JOBS` overrides the job count (default 1,000,000).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use xtcq_shm::metrics::Counter;
use xtcq_shm::{
    ClaimedJob, Flavor, Owner, PushError, QueueInfo, QueueSpec, Segment, SegmentConfig, State, Steal, Thief,
};

const THIEVES: u32 = 3;

fn jobs() -> u64 {
    std::env::var("XTCQ_STRESS_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000)
}

#[derive(Clone, Copy, Debug)]
struct Case {
    flavor: Flavor,
    batch: bool,
    /// Deque capacity of the queue; small means many pushes go to the overflow ring.
    capacity: u32,
    /// Thieves use their own mapping of the segment file.
    second_mapping: bool,
}

struct Tally {
    counts: Vec<AtomicU8>,
    consumed: AtomicU64,
}

impl Tally {
    fn record(&self, job: ClaimedJob<'_>, buf: &mut Vec<u8>) {
        buf.clear();
        job.read_payload(buf).expect("payload");
        let id = u64::from_le_bytes(buf[..8].try_into().expect("8-byte payload"));
        let prev = self.counts[id as usize].fetch_add(1, Ordering::Relaxed);
        assert_eq!(prev, 0, "job {id} consumed twice");
        job.ack().expect("ack");
        self.consumed.fetch_add(1, Ordering::Relaxed);
    }
}

/// What one run's threads share: the owner's segment and queue, the thieves' (a second
/// mapping or the same), the tally and the owner's "all pushed" flag.
struct Run {
    case: Case,
    n: u64,
    seg: Arc<Segment>,
    q: QueueInfo,
    thief_seg: Arc<Segment>,
    thief_q: QueueInfo,
    tally: Arc<Tally>,
    pushed_all: Arc<AtomicBool>,
}

impl Run {
    fn new(case: Case, path: &std::path::Path) -> Run {
        let n = jobs();
        let cfg =
            SegmentConfig::small().with_deque_capacity(1024).with_records(8192).with_overflow_capacity(8192);
        let seg = Arc::new(Segment::create(path, &cfg, 0o600).expect("create"));
        let q = seg
            .create_queue(&QueueSpec {
                name: "stress".into(),
                flavor: case.flavor,
                deques: 1,
                capacity: case.capacity,
                max_attempts: 0,
                lease_ms: 0,
                levels: 1,
                aging: 0,
            })
            .expect("queue");
        let thief_seg = if case.second_mapping {
            let s = Arc::new(Segment::attach(path).expect("attach"));
            assert_ne!(s.base_addr(), seg.base_addr());
            s
        } else {
            seg.clone()
        };
        let thief_q = thief_seg.queue_by_name("stress").expect("queue by name");
        let tally = Arc::new(Tally {
            counts: (0..n).map(|_| AtomicU8::new(0)).collect(),
            consumed: AtomicU64::new(0),
        });
        Run { case, n, seg, q, thief_seg, thief_q, tally, pushed_all: Arc::new(AtomicBool::new(false)) }
    }

    /// The owner thread: pushes every job (helping drain when the queue is full), pops one
    /// in seven itself, then pops what is left.
    fn spawn_owner(&self) -> thread::JoinHandle<()> {
        let (seg, q, tally, pushed_all) =
            (self.seg.clone(), self.q.clone(), self.tally.clone(), self.pushed_all.clone());
        let (case, n) = (self.case, self.n);
        thread::spawn(move || {
            let owner = Owner::new(seg, &q, 0, 0).expect("owner");
            let mut buf = Vec::new();
            let own_pop = |buf: &mut Vec<u8>| -> bool {
                let j = if case.flavor == Flavor::Lifo { owner.pop() } else { owner.take() };
                match j.expect("pop") {
                    Some(j) => {
                        tally.record(j, buf);
                        true
                    }
                    None => false,
                }
            };
            for id in 0..n {
                let mut payload = [0u8; 24];
                payload[..8].copy_from_slice(&id.to_le_bytes());
                loop {
                    match owner.push(&payload) {
                        Ok(_) => break,
                        Err(PushError::RecordsFull(_)) | Err(PushError::QueueFull { .. }) => {
                            // Back-pressure: help drain, as a real producer would.
                            if !own_pop(&mut buf) {
                                thread::yield_now();
                            }
                        }
                        Err(e) => panic!("push {id}: {e}"),
                    }
                }
                if id % 7 == 0 {
                    own_pop(&mut buf);
                }
            }
            pushed_all.store(true, Ordering::Release);
            while own_pop(&mut buf) {}
        })
    }

    /// Thief thread `t` (process slot 1 + t): steals, single or in batches, until every job
    /// was consumed.
    fn spawn_thief(&self, t: u32) -> thread::JoinHandle<()> {
        let (seg, q, tally, pushed_all) =
            (self.thief_seg.clone(), self.thief_q.clone(), self.tally.clone(), self.pushed_all.clone());
        let (batch_steals, n) = (self.case.batch, self.n);
        thread::spawn(move || {
            let thief = Thief::new(seg, &q, 1 + t).expect("thief");
            let mut buf = Vec::new();
            let mut batch = Vec::new();
            loop {
                let got = if batch_steals {
                    let mut got = false;
                    if let Steal::Success(_) = thief.steal_batch_from(0, 32, &mut batch) {
                        got = true;
                    }
                    if let Some(j) = thief.steal_overflow().expect("overflow") {
                        batch.push(j);
                        got = true;
                    }
                    for j in batch.drain(..) {
                        tally.record(j, &mut buf);
                    }
                    got
                } else {
                    match thief.steal().expect("steal") {
                        Some(j) => {
                            tally.record(j, &mut buf);
                            true
                        }
                        None => false,
                    }
                };
                if !got {
                    if pushed_all.load(Ordering::Acquire) && tally.consumed.load(Ordering::Relaxed) == n {
                        return;
                    }
                    thread::yield_now();
                }
            }
        })
    }

    /// Every job consumed exactly once, every record free, every count exact (the owner and
    /// each thief count into their slots' handle lanes), and the ring used when it must be.
    fn check(&self) -> u64 {
        let n = self.n;
        let missing: Vec<u64> =
            (0..n).filter(|&i| self.tally.counts[i as usize].load(Ordering::Relaxed) != 1).take(10).collect();
        assert!(missing.is_empty(), "jobs not consumed exactly once: {missing:?}");
        assert_eq!(self.tally.consumed.load(Ordering::Relaxed), n);
        let records = self.seg.records();
        for i in 0..records.len() {
            let st = records.state(i).expect("state").load();
            assert_eq!(st.state(), Some(State::Free), "record {i} left in {st:?}");
        }
        let totals = self.seg.queue_totals(self.q.index);
        for c in [Counter::Pushed, Counter::Claimed, Counter::Acked] {
            assert_eq!(totals.get(c), n, "{c:?}");
        }
        // Only the owner's pushes reach the ring here (nothing is nacked), so its tail
        // position counts the pushes that found the deque full.
        let of = self.seg.overflow(self.q.index).expect("overflow ring").positions().1;
        if self.case.capacity <= 16 {
            assert!(of > 0, "the small-deque case never used the overflow ring");
        }
        of
    }
}

fn run(case: Case) {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = Run::new(case, &dir.path().join("seg"));
    let started = Instant::now();
    let owner = run.spawn_owner();
    let thieves: Vec<_> = (0..THIEVES).map(|t| run.spawn_thief(t)).collect();
    let deadline = Instant::now() + Duration::from_secs(300);
    owner.join().expect("owner thread");
    for t in thieves {
        t.join().expect("thief thread");
    }
    assert!(Instant::now() < deadline, "stress run took too long");
    let elapsed = started.elapsed();
    let of = run.check();
    eprintln!("{case:?}: {} jobs in {elapsed:?}, {of} via the overflow ring", run.n);
}

#[test]
fn lifo_single_steals() {
    run(Case { flavor: Flavor::Lifo, batch: false, capacity: 256, second_mapping: false });
}

#[test]
fn fifo_single_steals() {
    run(Case { flavor: Flavor::Fifo, batch: false, capacity: 256, second_mapping: false });
}

#[test]
fn lifo_batch_steals() {
    run(Case { flavor: Flavor::Lifo, batch: true, capacity: 256, second_mapping: false });
}

#[test]
fn fifo_batch_steals() {
    run(Case { flavor: Flavor::Fifo, batch: true, capacity: 256, second_mapping: false });
}

#[test]
fn full_deque_falls_back_to_overflow() {
    run(Case { flavor: Flavor::Lifo, batch: false, capacity: 8, second_mapping: false });
}

#[test]
fn thieves_on_a_second_mapping_lifo_batch() {
    run(Case { flavor: Flavor::Lifo, batch: true, capacity: 16, second_mapping: true });
}

#[test]
fn thieves_on_a_second_mapping_fifo_single() {
    run(Case { flavor: Flavor::Fifo, batch: false, capacity: 256, second_mapping: true });
}
