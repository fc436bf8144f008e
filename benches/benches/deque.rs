//! xtcq's bounded Chase-Lev deque against crossbeam-deque 0.8.8, in one run.
//!
//! Workloads, each on two layers where that means something:
//! - `xtcq_raw`: the deque of job handles alone (`DequeOwner` / `DequeRef` over a real
//!   segment file), the apples-to-apples rival of crossbeam's `Worker<u64>` / `Stealer<u64>`;
//! - `xtcq_jobs`: the full job path (`Owner::push` allocates a record, writes an 8-byte
//!   payload and publishes it; `pop` / `Thief::steal*` claims it; the consumer reads the
//!   payload and acks), so the cost of the records shows beside the deque's.
//!
//! (a) `a_push_pop_pair`: one thread, push then pop on an empty deque (ns per pair);
//! (b) `b_push_one_thief`: the owner pushes N jobs while one thief thread steals them one at a
//!     time; the owner keeps at most 256 jobs in its deque and spins when it is full;
//! (c) `c_push_pop_batch_thief_{lifo,fifo}`: the owner pushes N jobs and pops one after every
//!     second push (and whenever its deque holds 256), while one thief thread steals batches of
//!     up to 128 into its own deque (`steal_batch_and_pop` / crossbeam's
//!     `steal_batch_with_limit_and_pop`) and pops them from there;
//! (d) `d_process_handoff`: as (b) across processes: this process owns the deque and pushes,
//!     a second process (this binary re-run with `XTCQ_BENCH_CHILD` set, mapping the same
//!     segment file) steals, one job at a time or in batches of 128.
//!
//! A layout probe in (b) and (c), `xtcq_raw_heap_1line` / `xtcq_raw_heap_2lines`, runs the
//! same xtcq deque code (`DequeRef::new` over words on the heap) with `top` and `bottom` on one
//! cache line, as crossbeam keeps `front` and `back` (and the segment since layout v2), or on
//! two, as layout v1 did: it shows how much of a gap to crossbeam is the layout rather than the
//! algorithm.
//!
//! "At most 256 in the deque" is kept the same way on every side: xtcq's `push` reads the
//! thieves' `top` only when its cached copy says the deque may be full; crossbeam's `Worker`
//! and `Owner` (whose deque has room for 256, so a push never falls back to the overflow
//! ring) get the same treatment from [`Bound`], which reads `len()` only when a local count of
//! pushes says the bound may be reached. Nobody reads the thieves' cache line on every push.
//!
//! After criterion's groups a table gives the medians of the recorded samples and the ratios
//! xtcq / crossbeam for (a)-(c), as speed (> 1: xtcq is faster).
//!
//! Run: `cargo bench -p xtcq-benches --bench deque` (about 1.5 minutes on 2 cores; figures and
//! analysis in benches/results/);
//! `XTCQ_BENCH_QUICK=1` for a short run (fewer samples, 200,000 jobs); `XTCQ_BENCH_JOBS=N`
//! overrides the job count of (b)-(d). A thief thread (or process) and the owner each keep a
//! core busy, so (b)-(d) want two otherwise idle cores.

use std::collections::BTreeMap;
use std::hint::{black_box, spin_loop};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput};
use crossbeam_deque::{Steal as CbSteal, Stealer, Worker};
use xtcq_shm::{
    ClaimedJob, DequeOwner, DequeRef, Flavor, Owner, PushError, QueueInfo, QueueSpec, Segment, SegmentConfig,
    Steal, Thief,
};

/// The most jobs an owner keeps in its deque, and the xtcq deques' capacity.
const CAP: usize = 256;
/// Largest batch a thief steals in (c) and in the batch variant of (d).
const BATCH: usize = 128;
/// A run that takes longer than this is stuck (a dead child, a lost job): fail loudly.
const STUCK: Duration = Duration::from_secs(120);

const OWNER_SLOT: u32 = 0;
const THIEF_SLOT: u32 = 1;

// ---------------------------------------------------------------------------------------
// Settings and the sample record behind the ratio table.

#[derive(Clone, Copy, Debug)]
struct Settings {
    quick: bool,
    /// Jobs per iteration of (b)-(d).
    jobs: u64,
}

impl Settings {
    fn from_env() -> Self {
        let quick = std::env::var("XTCQ_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let jobs = std::env::var("XTCQ_BENCH_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(if quick {
            200_000
        } else {
            1_000_000
        });
        Self { quick, jobs }
    }

    /// Criterion settings for (a): many short samples.
    fn pairs_group<'c>(&self, c: &'c mut Criterion, name: &str) -> BenchmarkGroup<'c, WallTime> {
        let mut g = c.benchmark_group(name);
        if self.quick {
            g.sample_size(20)
                .warm_up_time(Duration::from_millis(300))
                .measurement_time(Duration::from_secs(1));
        } else {
            g.sample_size(50).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
        }
        g
    }

    /// Criterion settings for (b)-(d): each iteration is a whole run of `jobs` jobs.
    fn runs_group<'c>(&self, c: &'c mut Criterion, name: &str) -> BenchmarkGroup<'c, WallTime> {
        let mut g = c.benchmark_group(name);
        g.sampling_mode(SamplingMode::Flat).sample_size(10).throughput(Throughput::Elements(self.jobs));
        if self.quick {
            g.warm_up_time(Duration::from_millis(200)).measurement_time(Duration::from_millis(500));
        } else {
            g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
        }
        g
    }
}

/// Per-iteration nanoseconds of every call criterion made of a routine, by benchmark id. The
/// last `sample_size` calls are the measured samples (earlier ones are warm-up).
static SAMPLES: Mutex<BTreeMap<String, (usize, Vec<f64>)>> = Mutex::new(BTreeMap::new());

/// CPU time (ns) of the owner and thief threads of this process's runs, plus what thief
/// processes report. Over the wall time it says how many cores a run really had: about 2
/// when owner and thief ran at the same time on two cores, about 1 or less when they took
/// turns on a busy machine (and then the figure is not one of a parallel hand-off).
static BUSY_NS: AtomicU64 = AtomicU64::new(0);

/// `(busy ns, wall ns)` of each call of a routine, by benchmark id.
static BUSY_BY_ID: Mutex<BTreeMap<String, Vec<(u64, u64)>>> = Mutex::new(BTreeMap::new());

fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Counts this thread's CPU time from `start` to `stop` into [`BUSY_NS`].
struct Cpu(u64);

impl Cpu {
    fn start() -> Self {
        Self(thread_cpu_ns())
    }

    fn stop(self) {
        BUSY_NS.fetch_add(thread_cpu_ns().saturating_sub(self.0), Ordering::Relaxed);
    }
}

fn record(id: &str, sample_size: usize, iters: u64, d: Duration) {
    let per_iter = d.as_nanos() as f64 / iters.max(1) as f64;
    let mut m = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    let e = m.entry(id.to_string()).or_insert_with(|| (sample_size, Vec::new()));
    e.1.push(per_iter);
}

/// Median per-iteration ns of the measured samples of `id`.
fn median_ns(id: &str) -> Option<f64> {
    let m = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    let (n, v) = m.get(id)?;
    let mut s: Vec<f64> = v[v.len().saturating_sub(*n)..].to_vec();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let k = s.len();
    Some(if k % 2 == 1 { s[k / 2] } else { (s[k / 2 - 1] + s[k / 2]) / 2.0 })
}

/// Cores busy on average (CPU time of owner and thief over wall time) in the measured
/// samples of `id`.
fn cores_busy(id: &str, n: usize) -> Option<f64> {
    let m = BUSY_BY_ID.lock().unwrap_or_else(|e| e.into_inner());
    let v = m.get(id)?;
    let s = &v[v.len().saturating_sub(n)..];
    let (busy, wall) = s.iter().fold((0u64, 0u64), |(b, w), &(x, y)| (b + x, w + y));
    (wall > 0).then(|| busy as f64 / wall as f64)
}

/// Runs `f(iters)` as a criterion `iter_custom` routine and records its samples under
/// `group/name`.
fn bench(
    g: &mut BenchmarkGroup<'_, WallTime>,
    group: &str,
    sample_size: usize,
    name: &str,
    mut f: impl FnMut(u64) -> Duration,
) {
    let id = format!("{group}/{name}");
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let b0 = BUSY_NS.load(Ordering::Relaxed);
            let d = f(iters);
            record(&id, sample_size, iters, d);
            let busy = BUSY_NS.load(Ordering::Relaxed) - b0;
            BUSY_BY_ID
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(id.clone())
                .or_default()
                .push((busy, d.as_nanos() as u64));
            d
        })
    });
}

// ---------------------------------------------------------------------------------------
// Segments, bounds, spinning.

/// A segment file in a fresh directory under /dev/shm (else the default temp dir).
struct Shm {
    _dir: tempfile::TempDir,
    path: PathBuf,
    seg: Arc<Segment>,
}

impl Shm {
    /// One queue per `(name, flavor)`, each with two deques of `CAP` slots.
    fn new(queues: &[(&str, Flavor)]) -> (Self, Vec<QueueInfo>) {
        let dir = if Path::new("/dev/shm").is_dir() {
            tempfile::Builder::new().prefix("xtcq-bench").tempdir_in("/dev/shm")
        } else {
            tempfile::Builder::new().prefix("xtcq-bench").tempdir()
        }
        .expect("temp dir");
        let path = dir.path().join("seg");
        let cfg = SegmentConfig::small()
            .with_queues(queues.len() as u32, 2)
            .with_deque_capacity(CAP as u32)
            .with_records(4096)
            .with_overflow_capacity(4096)
            .with_process_slots(4);
        let seg = Arc::new(Segment::create(&path, &cfg, 0o600).expect("create segment"));
        let infos = queues
            .iter()
            .map(|&(name, flavor)| {
                seg.create_queue(&QueueSpec {
                    name: name.into(),
                    flavor,
                    deques: 2,
                    capacity: CAP as u32,
                    max_attempts: 0,
                    lease_ms: 0,
                    levels: 1,
                    aging: 0,
                })
                .expect("create queue")
            })
            .collect();
        (Self { _dir: dir, path, seg }, infos)
    }

    fn deque(&self, q: &QueueInfo, d: u32) -> DequeRef<'_> {
        self.seg.deque(q, d).expect("deque")
    }
}

/// xtcq's deque words on the heap, with `top` and `bottom` on one cache line (as the segment
/// has done since layout v2) or on two (as layout v1 did).
#[repr(C, align(128))]
struct HeapWords {
    top: AtomicI64,
    bottom_same_line: AtomicI64,
    _pad: [u8; 112],
    bottom_own_line: AtomicI64,
    _pad2: [u8; 120],
    slots: [AtomicU64; CAP],
    one_line: bool,
}

impl HeapWords {
    fn new(one_line: bool) -> Box<Self> {
        Box::new(Self {
            top: AtomicI64::new(0),
            bottom_same_line: AtomicI64::new(0),
            _pad: [0; 112],
            bottom_own_line: AtomicI64::new(0),
            _pad2: [0; 120],
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
            one_line,
        })
    }

    fn deque(&self, flavor: Flavor) -> DequeRef<'_> {
        let bottom = if self.one_line { &self.bottom_same_line } else { &self.bottom_own_line };
        DequeRef::new(&self.top, bottom, &self.slots, flavor).expect("capacity")
    }
}

/// Keeps an owner at most [`CAP`] jobs deep, reading the shared `len` only when a local count
/// says the bound may be reached (what xtcq's `push` does with its cached `top`).
struct Bound {
    room: usize,
}

impl Bound {
    fn new() -> Self {
        Self { room: CAP }
    }

    /// May the owner push now? `len` is read only when the local room is used up.
    #[inline]
    fn admit(&mut self, len: impl FnOnce() -> usize) -> bool {
        if self.room == 0 {
            self.room = CAP.saturating_sub(len());
            if self.room == 0 {
                return false;
            }
        }
        self.room -= 1;
        true
    }

    /// The owner took one job out itself.
    #[inline]
    fn popped(&mut self) {
        self.room += 1;
    }
}

/// A busy-wait: `spin_loop` for a while, then `yield_now` (a machine busier than its cores
/// would otherwise let a waiter burn its whole time slice while the thread it waits for is
/// not running); gives up (panics) after [`STUCK`]. The same on every side of every race.
struct Spin {
    start: Instant,
    n: u32,
    /// Consecutive waits since the last [`reset`](Self::reset).
    idle: u32,
}

impl Spin {
    /// Spins before the first yield.
    const SPINS: u32 = 128;

    fn new() -> Self {
        Self { start: Instant::now(), n: 0, idle: 0 }
    }

    #[inline]
    fn spin(&mut self, what: &str) {
        self.idle += 1;
        if self.idle < Self::SPINS {
            spin_loop();
        } else {
            thread::yield_now();
        }
        self.n = self.n.wrapping_add(1);
        if self.n.is_multiple_of(1 << 12) && self.start.elapsed() > STUCK {
            panic!("stuck for {STUCK:?}: {what}");
        }
    }

    /// Progress was made: the next wait starts spinning again.
    #[inline]
    fn reset(&mut self) {
        self.idle = 0;
    }
}

/// Waits (spinning, then yielding) until `ready()`; the fast path is one call of it.
#[inline]
fn wait_until(spin: &mut Spin, what: &str, mut ready: impl FnMut() -> bool) {
    if !ready() {
        while !ready() {
            spin.spin(what);
        }
        spin.reset();
    }
}

/// What a consumer took: count and sum of the values, checked against what was pushed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    n: u64,
    sum: u64,
}

impl Tally {
    #[inline]
    fn add(&mut self, v: u64) {
        self.n += 1;
        self.sum = self.sum.wrapping_add(v);
    }

    fn merge(self, o: Tally) -> Tally {
        Tally { n: self.n + o.n, sum: self.sum.wrapping_add(o.sum) }
    }

    /// Values `0..n`.
    fn expected(n: u64) -> Tally {
        Tally { n, sum: (n.wrapping_mul(n.wrapping_sub(1)) / 2) }
    }
}

fn job_id(job: &ClaimedJob<'_>, buf: &mut Vec<u8>) -> u64 {
    buf.clear();
    job.read_payload(buf).expect("payload");
    u64::from_le_bytes(buf[..8].try_into().expect("8-byte payload"))
}

/// Reads the payload of a claimed job and acks it.
#[inline]
fn consume(job: ClaimedJob<'_>, buf: &mut Vec<u8>, t: &mut Tally) {
    t.add(job_id(&job, buf));
    job.ack().expect("ack");
}

/// `Owner::push` of job `id`, spinning while the records are all in use.
#[inline]
fn owner_push(owner: &Owner, id: u64, spin: &mut Spin) {
    loop {
        match owner.push(&id.to_le_bytes()) {
            Ok(_) => return spin.reset(),
            Err(PushError::RecordsFull(_) | PushError::QueueFull { .. }) => spin.spin("owner push"),
            Err(e) => panic!("push {id}: {e}"),
        }
    }
}

/// A consumer loop's end condition: `done` is set by the owner once it has pushed (and, in
/// (c), drained) everything; after seeing it, the next `Empty` means nothing is left.
struct Finish<'a> {
    done: &'a AtomicBool,
    finishing: bool,
    spin: Spin,
}

impl<'a> Finish<'a> {
    fn new(done: &'a AtomicBool) -> Self {
        Self { done, finishing: false, spin: Spin::new() }
    }

    /// Called after taking something: the next `Empty` spins again before yielding.
    #[inline]
    fn got(&mut self) {
        self.spin.reset();
    }

    /// Called on `Empty`: `true` when the consumer may stop.
    #[inline]
    fn on_empty(&mut self) -> bool {
        if self.finishing {
            return true;
        }
        // Acquire pairs with the owner's Release store: every push happened before.
        if self.done.load(Ordering::Acquire) {
            self.finishing = true;
        } else {
            self.spin.spin("thief waiting for jobs");
        }
        false
    }
}

// ---------------------------------------------------------------------------------------
// (a) single-thread push + pop pairs.

fn group_a(c: &mut Criterion, s: &Settings) {
    const G: &str = "a_push_pop_pair";
    let n = if s.quick { 20 } else { 50 };
    let mut g = s.pairs_group(c, G);
    let (shm, qs) = Shm::new(&[("a-raw", Flavor::Lifo), ("a-jobs", Flavor::Lifo)]);

    {
        let owner = DequeOwner::adopt(shm.deque(&qs[0], 0));
        bench(&mut g, G, n, "xtcq_raw", |iters| {
            let t0 = Instant::now();
            for i in 0..iters {
                let r = owner.push(black_box(i));
                debug_assert!(r.is_ok());
                black_box(owner.pop());
            }
            t0.elapsed()
        });
    }
    {
        let w = Worker::<u64>::new_lifo();
        bench(&mut g, G, n, "crossbeam", |iters| {
            let t0 = Instant::now();
            for i in 0..iters {
                w.push(black_box(i));
                black_box(w.pop());
            }
            t0.elapsed()
        });
    }
    {
        let owner = Owner::new(shm.seg.clone(), &qs[1], 0, OWNER_SLOT).expect("owner");
        let mut buf = Vec::with_capacity(64);
        bench(&mut g, G, n, "xtcq_jobs", |iters| {
            let mut t = Tally::default();
            let mut spin = Spin::new();
            let t0 = Instant::now();
            for i in 0..iters {
                owner_push(&owner, i, &mut spin);
                let j = owner.pop().expect("pop").expect("a job");
                consume(j, &mut buf, &mut t);
            }
            let d = t0.elapsed();
            assert_eq!(t, Tally::expected(iters));
            d
        });
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------
// (b) owner pushes, one thief steals one at a time.

fn b_xtcq_raw(owner: &DequeOwner<'_>, victim: DequeRef<'_>, jobs: u64) -> Duration {
    let done = AtomicBool::new(false);
    let t0 = Instant::now();
    let owner_cpu = Cpu::start();
    let got = thread::scope(|sc| {
        let thief = sc.spawn(|| {
            let cpu = Cpu::start();
            let (mut t, mut fin) = (Tally::default(), Finish::new(&done));
            loop {
                match victim.steal() {
                    Steal::Success(v) => {
                        t.add(v);
                        fin.got();
                    }
                    Steal::Retry => spin_loop(),
                    Steal::Empty if fin.on_empty() => {
                        cpu.stop();
                        return t;
                    }
                    Steal::Empty => {}
                }
            }
        });
        let mut spin = Spin::new();
        for i in 0..jobs {
            wait_until(&mut spin, "owner push (deque full)", || owner.push(i).is_ok());
        }
        done.store(true, Ordering::Release);
        thief.join().expect("thief")
    });
    let d = t0.elapsed();
    owner_cpu.stop();
    assert_eq!(got, Tally::expected(jobs));
    d
}

fn b_crossbeam(jobs: u64) -> Duration {
    let w = Worker::<u64>::new_lifo();
    let st: Stealer<u64> = w.stealer();
    let done = AtomicBool::new(false);
    let t0 = Instant::now();
    let owner_cpu = Cpu::start();
    let got = thread::scope(|sc| {
        let thief = sc.spawn(|| {
            let cpu = Cpu::start();
            let (mut t, mut fin) = (Tally::default(), Finish::new(&done));
            loop {
                match st.steal() {
                    CbSteal::Success(v) => {
                        t.add(v);
                        fin.got();
                    }
                    CbSteal::Retry => spin_loop(),
                    CbSteal::Empty if fin.on_empty() => {
                        cpu.stop();
                        return t;
                    }
                    CbSteal::Empty => {}
                }
            }
        });
        let (mut bound, mut spin) = (Bound::new(), Spin::new());
        for i in 0..jobs {
            wait_until(&mut spin, "owner push (deque full)", || bound.admit(|| w.len()));
            w.push(i);
        }
        done.store(true, Ordering::Release);
        thief.join().expect("thief")
    });
    let d = t0.elapsed();
    owner_cpu.stop();
    assert_eq!(got, Tally::expected(jobs));
    d
}

fn b_xtcq_jobs(owner: &Owner, thief: &Thief, jobs: u64) -> Duration {
    let done = AtomicBool::new(false);
    let t0 = Instant::now();
    let owner_cpu = Cpu::start();
    let got = thread::scope(|sc| {
        let th = sc.spawn(|| {
            let cpu = Cpu::start();
            let (mut t, mut fin, mut buf) = (Tally::default(), Finish::new(&done), Vec::with_capacity(64));
            loop {
                match thief.steal().expect("steal") {
                    Some(j) => {
                        consume(j, &mut buf, &mut t);
                        fin.got();
                    }
                    None if fin.on_empty() => {
                        cpu.stop();
                        return t;
                    }
                    None => {}
                }
            }
        });
        let (mut bound, mut spin) = (Bound::new(), Spin::new());
        for i in 0..jobs {
            wait_until(&mut spin, "owner push (deque full)", || bound.admit(|| owner.len()));
            owner_push(owner, i, &mut spin);
        }
        done.store(true, Ordering::Release);
        th.join().expect("thief")
    });
    let d = t0.elapsed();
    owner_cpu.stop();
    assert_eq!(got, Tally::expected(jobs));
    d
}

fn group_b(c: &mut Criterion, s: &Settings) {
    const G: &str = "b_push_one_thief";
    let jobs = s.jobs;
    let mut g = s.runs_group(c, G);
    let (shm, qs) = Shm::new(&[("b-raw", Flavor::Lifo), ("b-jobs", Flavor::Lifo)]);
    {
        let owner = DequeOwner::adopt(shm.deque(&qs[0], 0));
        let victim = shm.deque(&qs[0], 0);
        bench(&mut g, G, 10, "xtcq_raw", |iters| (0..iters).map(|_| b_xtcq_raw(&owner, victim, jobs)).sum());
    }
    bench(&mut g, G, 10, "crossbeam", |iters| (0..iters).map(|_| b_crossbeam(jobs)).sum());
    for (name, one_line) in [("xtcq_raw_heap_1line", true), ("xtcq_raw_heap_2lines", false)] {
        let h = HeapWords::new(one_line);
        let owner = DequeOwner::adopt(h.deque(Flavor::Lifo));
        let victim = h.deque(Flavor::Lifo);
        bench(&mut g, G, 10, name, |iters| (0..iters).map(|_| b_xtcq_raw(&owner, victim, jobs)).sum());
    }
    {
        let owner = Owner::new(shm.seg.clone(), &qs[1], 0, OWNER_SLOT).expect("owner");
        let thief = Thief::new(shm.seg.clone(), &qs[1], THIEF_SLOT).expect("thief");
        bench(&mut g, G, 10, "xtcq_jobs", |iters| {
            (0..iters).map(|_| b_xtcq_jobs(&owner, &thief, jobs)).sum()
        });
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------
// (c) owner pushes and pops, one thief steals batches of up to 128.

fn c_xtcq_raw(owner: &DequeOwner<'_>, victim: DequeRef<'_>, local: DequeRef<'_>, jobs: u64) -> Duration {
    let done = AtomicBool::new(false);
    let t0 = Instant::now();
    let owner_cpu = Cpu::start();
    let got = thread::scope(|sc| {
        let thief = sc.spawn(|| {
            let cpu = Cpu::start();
            // The thief's own deque (deque 1 of the same queue), owned by this thread.
            let local = DequeOwner::adopt(local);
            let (mut t, mut fin) = (Tally::default(), Finish::new(&done));
            loop {
                match victim.steal_batch_and_pop(&local, BATCH) {
                    Steal::Success(v) => {
                        fin.got();
                        t.add(v);
                        while let Some(v) = local.pop() {
                            t.add(v);
                        }
                    }
                    Steal::Retry => spin_loop(),
                    Steal::Empty if fin.on_empty() => {
                        cpu.stop();
                        return t;
                    }
                    Steal::Empty => {}
                }
            }
        });
        let mut mine = Tally::default();
        for i in 0..jobs {
            while owner.push(i).is_err() {
                // Full: take one back ourselves (the thief may have emptied it meanwhile).
                if let Some(v) = owner.pop() {
                    mine.add(v);
                }
            }
            if i & 1 == 1 {
                if let Some(v) = owner.pop() {
                    mine.add(v);
                }
            }
        }
        while let Some(v) = owner.pop() {
            mine.add(v);
        }
        done.store(true, Ordering::Release);
        mine.merge(thief.join().expect("thief"))
    });
    let d = t0.elapsed();
    owner_cpu.stop();
    assert_eq!(got, Tally::expected(jobs));
    d
}

fn c_crossbeam(flavor: Flavor, jobs: u64) -> Duration {
    let new = || if flavor == Flavor::Lifo { Worker::<u64>::new_lifo() } else { Worker::<u64>::new_fifo() };
    let w = new();
    let st = w.stealer();
    let done = AtomicBool::new(false);
    let t0 = Instant::now();
    let owner_cpu = Cpu::start();
    let got = thread::scope(|sc| {
        let thief = sc.spawn(|| {
            let cpu = Cpu::start();
            let local = new();
            let (mut t, mut fin) = (Tally::default(), Finish::new(&done));
            loop {
                match st.steal_batch_with_limit_and_pop(&local, BATCH) {
                    CbSteal::Success(v) => {
                        fin.got();
                        t.add(v);
                        while let Some(v) = local.pop() {
                            t.add(v);
                        }
                    }
                    CbSteal::Retry => spin_loop(),
                    CbSteal::Empty if fin.on_empty() => {
                        cpu.stop();
                        return t;
                    }
                    CbSteal::Empty => {}
                }
            }
        });
        let (mut mine, mut bound) = (Tally::default(), Bound::new());
        for i in 0..jobs {
            while !bound.admit(|| w.len()) {
                if let Some(v) = w.pop() {
                    mine.add(v);
                    bound.popped();
                }
            }
            w.push(i);
            if i & 1 == 1 {
                if let Some(v) = w.pop() {
                    mine.add(v);
                    bound.popped();
                }
            }
        }
        while let Some(v) = w.pop() {
            mine.add(v);
        }
        done.store(true, Ordering::Release);
        mine.merge(thief.join().expect("thief"))
    });
    let d = t0.elapsed();
    owner_cpu.stop();
    assert_eq!(got, Tally::expected(jobs));
    d
}

fn c_xtcq_jobs(owner: &Owner, thief: &Thief, jobs: u64) -> Duration {
    let done = AtomicBool::new(false);
    let t0 = Instant::now();
    let owner_cpu = Cpu::start();
    let got = thread::scope(|sc| {
        let th = sc.spawn(|| {
            let cpu = Cpu::start();
            let (mut t, mut fin, mut buf) = (Tally::default(), Finish::new(&done), Vec::with_capacity(64));
            let mut batch = Vec::with_capacity(BATCH);
            loop {
                match thief.steal_batch_from(0, BATCH, &mut batch) {
                    Steal::Success(_) => {
                        fin.got();
                        for j in batch.drain(..) {
                            consume(j, &mut buf, &mut t);
                        }
                    }
                    Steal::Retry => spin_loop(),
                    Steal::Empty if fin.on_empty() => {
                        cpu.stop();
                        return t;
                    }
                    Steal::Empty => {}
                }
            }
        });
        let (mut mine, mut bound, mut spin, mut buf) =
            (Tally::default(), Bound::new(), Spin::new(), Vec::new());
        let mut own_pop = |mine: &mut Tally, bound: &mut Bound| {
            if let Some(j) = owner.pop().expect("pop") {
                consume(j, &mut buf, mine);
                bound.popped();
            }
        };
        for i in 0..jobs {
            while !bound.admit(|| owner.len()) {
                own_pop(&mut mine, &mut bound);
            }
            owner_push(owner, i, &mut spin);
            if i & 1 == 1 {
                own_pop(&mut mine, &mut bound);
            }
        }
        while !owner.is_empty() {
            own_pop(&mut mine, &mut bound);
        }
        done.store(true, Ordering::Release);
        mine.merge(th.join().expect("thief"))
    });
    let d = t0.elapsed();
    owner_cpu.stop();
    assert_eq!(got, Tally::expected(jobs));
    d
}

fn group_c(c: &mut Criterion, s: &Settings, flavor: Flavor) {
    let group = match flavor {
        Flavor::Lifo => "c_push_pop_batch_thief_lifo",
        Flavor::Fifo => "c_push_pop_batch_thief_fifo",
    };
    let jobs = s.jobs;
    let mut g = s.runs_group(c, group);
    let (shm, qs) = Shm::new(&[("c-raw", flavor), ("c-jobs", flavor)]);
    {
        let owner = DequeOwner::adopt(shm.deque(&qs[0], 0));
        let (victim, local) = (shm.deque(&qs[0], 0), shm.deque(&qs[0], 1));
        bench(&mut g, group, 10, "xtcq_raw", |iters| {
            (0..iters).map(|_| c_xtcq_raw(&owner, victim, local, jobs)).sum()
        });
    }
    bench(&mut g, group, 10, "crossbeam", |iters| (0..iters).map(|_| c_crossbeam(flavor, jobs)).sum());
    for (name, one_line) in [("xtcq_raw_heap_1line", true), ("xtcq_raw_heap_2lines", false)] {
        let (h, l) = (HeapWords::new(one_line), HeapWords::new(one_line));
        let owner = DequeOwner::adopt(h.deque(flavor));
        let (victim, local) = (h.deque(flavor), l.deque(flavor));
        bench(&mut g, group, 10, name, |iters| {
            (0..iters).map(|_| c_xtcq_raw(&owner, victim, local, jobs)).sum()
        });
    }
    {
        let owner = Owner::new(shm.seg.clone(), &qs[1], 0, OWNER_SLOT).expect("owner");
        let thief = Thief::new(shm.seg.clone(), &qs[1], THIEF_SLOT).expect("thief");
        bench(&mut g, group, 10, "xtcq_jobs", |iters| {
            (0..iters).map(|_| c_xtcq_jobs(&owner, &thief, jobs)).sum()
        });
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------
// (d) owner process -> thief process through the segment file.

const CHILD_MODE: &str = "XTCQ_BENCH_CHILD";
const CHILD_SEGMENT: &str = "XTCQ_BENCH_CHILD_SEGMENT";
const CHILD_JOBS: &str = "XTCQ_BENCH_CHILD_JOBS";
const D_RAW: &str = "d-raw";
const D_JOBS: &str = "d-jobs";

/// The thief process: maps the segment, says `ready`, takes `jobs` jobs, prints
/// `done <count> <sum>`.
fn child_main(mode: &str) {
    let path = PathBuf::from(std::env::var(CHILD_SEGMENT).expect(CHILD_SEGMENT));
    let jobs: u64 = std::env::var(CHILD_JOBS).expect(CHILD_JOBS).parse().expect("job count");
    let seg = Arc::new(Segment::attach(&path).expect("attach segment"));
    let mut out = std::io::stdout().lock();
    let mut t = Tally::default();
    let mut spin = Spin::new();
    let cpu0;
    let ready = |out: &mut std::io::StdoutLock<'_>| {
        writeln!(out, "ready").and_then(|_| out.flush()).expect("stdout");
        thread_cpu_ns()
    };
    match mode {
        "raw" => {
            let q = seg.queue_by_name(D_RAW).expect("queue");
            let victim = seg.deque(&q, 0).expect("deque");
            cpu0 = ready(&mut out);
            while t.n < jobs {
                match victim.steal() {
                    Steal::Success(v) => {
                        t.add(v);
                        spin.reset();
                    }
                    _ => spin.spin("child waiting for jobs"),
                }
            }
        }
        "jobs" | "jobs-batch" => {
            let q = seg.queue_by_name(D_JOBS).expect("queue");
            let thief = Thief::new(seg.clone(), &q, THIEF_SLOT).expect("thief");
            let mut buf = Vec::with_capacity(64);
            let mut batch = Vec::with_capacity(BATCH);
            cpu0 = ready(&mut out);
            while t.n < jobs {
                if mode == "jobs" {
                    match thief.steal().expect("steal") {
                        Some(j) => {
                            consume(j, &mut buf, &mut t);
                            spin.reset();
                        }
                        None => spin.spin("child waiting for jobs"),
                    }
                } else {
                    match thief.steal_batch_from(0, BATCH, &mut batch) {
                        Steal::Success(_) => {
                            spin.reset();
                            for j in batch.drain(..) {
                                consume(j, &mut buf, &mut t);
                            }
                        }
                        _ => spin.spin("child waiting for jobs"),
                    }
                }
            }
        }
        other => panic!("unknown {CHILD_MODE}={other}"),
    }
    writeln!(out, "done {} {} {}", t.n, t.sum, thread_cpu_ns().saturating_sub(cpu0))
        .and_then(|_| out.flush())
        .expect("stdout");
}

/// One run of (d): starts the thief process, waits until it has mapped the segment, then
/// times `push_all` and the child's last steal.
fn d_run(shm: &Shm, mode: &str, jobs: u64, push_all: impl FnOnce(u64)) -> Duration {
    let mut child = Command::new(std::env::current_exe().expect("current exe"))
        .env(CHILD_MODE, mode)
        .env(CHILD_SEGMENT, &shm.path)
        .env(CHILD_JOBS, jobs.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn thief process");
    let mut lines = BufReader::new(child.stdout.take().expect("child stdout")).lines();
    let mut next_line = || lines.next().expect("thief process ended early").expect("read thief process");
    assert_eq!(next_line(), "ready");
    let t0 = Instant::now();
    let cpu = Cpu::start();
    push_all(jobs);
    let done = next_line();
    let d = t0.elapsed();
    cpu.stop();
    let status = child.wait().expect("wait thief process");
    assert!(status.success(), "thief process: {status}");
    let e = Tally::expected(jobs);
    let (took, busy) = done.rsplit_once(' ').expect("done line");
    assert_eq!(took, format!("done {} {}", e.n, e.sum), "thief process took other jobs than were pushed");
    BUSY_NS.fetch_add(busy.parse().expect("child CPU time"), Ordering::Relaxed);
    d
}

fn group_d(c: &mut Criterion, s: &Settings) {
    const G: &str = "d_process_handoff";
    let jobs = s.jobs;
    let mut g = s.runs_group(c, G);
    let (shm, qs) = Shm::new(&[(D_RAW, Flavor::Lifo), (D_JOBS, Flavor::Lifo)]);
    {
        let owner = DequeOwner::adopt(shm.deque(&qs[0], 0));
        bench(&mut g, G, 10, "xtcq_raw", |iters| {
            d_run(&shm, "raw", iters * jobs, |n| {
                let mut spin = Spin::new();
                for i in 0..n {
                    wait_until(&mut spin, "owner push (deque full)", || owner.push(i).is_ok());
                }
            })
        });
    }
    {
        let owner = Owner::new(shm.seg.clone(), &qs[1], 0, OWNER_SLOT).expect("owner");
        let push_all = |n: u64| {
            let (mut bound, mut spin) = (Bound::new(), Spin::new());
            for i in 0..n {
                wait_until(&mut spin, "owner push (deque full)", || bound.admit(|| owner.len()));
                owner_push(&owner, i, &mut spin);
            }
        };
        bench(&mut g, G, 10, "xtcq_jobs", |iters| d_run(&shm, "jobs", iters * jobs, push_all));
        bench(&mut g, G, 10, "xtcq_jobs_batch128", |iters| d_run(&shm, "jobs-batch", iters * jobs, push_all));
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------
// The table.

/// Whether group `g` is measured per pair ((a)) rather than per run of `jobs`.
fn per_pair(g: &str) -> bool {
    g.starts_with("a_")
}

/// ns per iteration of group `g` in the unit shown: ns per pair for (a), million jobs/s
/// otherwise.
fn shown(s: &Settings, g: &str, ns: f64) -> String {
    if per_pair(g) {
        format!("{ns:.2} ns/pair")
    } else {
        format!("{:.2} M/s", s.jobs as f64 / ns * 1e3)
    }
}

/// The "cores busy" of bench `name` of group `g` ("-" for (a), "?" when unknown).
fn cores_shown(g: &str, name: &str) -> String {
    if per_pair(g) {
        return "-".to_string();
    }
    let id = format!("{g}/{name}");
    let samples = SAMPLES.lock().unwrap_or_else(|e| e.into_inner()).get(&id).map(|e| e.0);
    samples.and_then(|n| cores_busy(&id, n)).map(|c| format!("{c:.2}")).unwrap_or_else(|| "?".into())
}

/// One table line: a label and six columns.
fn table_line(label: &str, cols: [&str; 6]) {
    let [a, b, c, d, e, f] = cols;
    println!("{label:<33} {a:>14} {b:>14} {c:>7} {d:>7} {e:>4} {f:>13}");
}

fn print_table(s: &Settings) {
    println!();
    println!("== deque: xtcq vs crossbeam-deque 0.8.8 (medians of criterion's measured samples) ==");
    println!(
        "   {} jobs per run in (b)-(d){}; ratio = speed of xtcq / speed of crossbeam (> 1: xtcq faster)",
        s.jobs,
        if s.quick { ", XTCQ_BENCH_QUICK" } else { "" }
    );
    print_rivals(s);
    println!();
    print_layout_probe(s);
    println!();
    print_job_path(s);
    println!("layout probe: the same deque code over heap words with `top` and `bottom` on one cache");
    println!("    line (as crossbeam keeps `front` and `back`) or on two (as layout v1 did).");
    println!("(d) has no crossbeam rival (its deque cannot be shared between processes); its raw row is");
    println!("    the handle deque alone across the two processes. cores busy: CPU time of owner and");
    println!("    thief over wall time (first / second column); near 2 = they ran at once on two cores,");
    println!("    near 1 = they took turns on a busy machine and the figure is not a parallel hand-off.");
}

/// The raw deque against crossbeam-deque, with the targets.
fn print_rivals(s: &Settings) {
    table_line("workload", ["xtcq_raw", "crossbeam", "ratio", "target", "met", "cores busy"]);
    for (label, g, target) in [
        ("(a) push+pop pair, 1 thread", "a_push_pop_pair", 1.0),
        ("(b) push, 1 thief steals", "b_push_one_thief", 1.2),
        ("(c) push/pop, batch thief, LIFO", "c_push_pop_batch_thief_lifo", 1.0),
        ("(c) push/pop, batch thief, FIFO", "c_push_pop_batch_thief_fifo", 1.0),
    ] {
        let (Some(x), Some(cb)) = (median_ns(&format!("{g}/xtcq_raw")), median_ns(&format!("{g}/crossbeam")))
        else {
            continue;
        };
        let ratio = cb / x;
        table_line(
            label,
            [
                &shown(s, g, x),
                &shown(s, g, cb),
                &format!("{ratio:.2}x"),
                &format!("{target:.1}x"),
                if ratio >= target { "yes" } else { "NO" },
                &format!("{} / {}", cores_shown(g, "xtcq_raw"), cores_shown(g, "crossbeam")),
            ],
        );
    }
}

/// The same deque code over heap words, `top` and `bottom` on one line or two.
fn print_layout_probe(s: &Settings) {
    table_line(
        "layout probe (xtcq code, heap)",
        ["top+bottom 1", "2 lines", "1 / cb", "2 / cb", "", "cores busy"],
    );
    for (label, g) in [
        ("(b) push, 1 thief steals", "b_push_one_thief"),
        ("(c) push/pop, batch thief, LIFO", "c_push_pop_batch_thief_lifo"),
        ("(c) push/pop, batch thief, FIFO", "c_push_pop_batch_thief_fifo"),
    ] {
        let (Some(one), Some(two)) =
            (median_ns(&format!("{g}/xtcq_raw_heap_1line")), median_ns(&format!("{g}/xtcq_raw_heap_2lines")))
        else {
            continue;
        };
        let vs = |x: f64| {
            median_ns(&format!("{g}/crossbeam")).map(|cb| format!("{:.2}x", cb / x)).unwrap_or_default()
        };
        table_line(
            label,
            [
                &shown(s, g, one),
                &shown(s, g, two),
                &vs(one),
                &vs(two),
                "",
                &format!(
                    "{} / {}",
                    cores_shown(g, "xtcq_raw_heap_1line"),
                    cores_shown(g, "xtcq_raw_heap_2lines")
                ),
            ],
        );
    }
}

/// The full job path against the raw deque. The job path's targets, as its speed /
/// speed of the raw deque: (a) at most 3x the raw pair's time, (b) at least half its rate,
/// (d) single steals at least 0.6 of it.
fn print_job_path(s: &Settings) {
    table_line("full job path (records)", ["xtcq_jobs", "xtcq_raw", "ratio", "target", "met", "cores busy"]);
    for (label, g, name, target) in [
        ("(a) push+pop pair, 1 thread", "a_push_pop_pair", "xtcq_jobs", Some(1.0 / 3.0)),
        ("(b) push, 1 thief steals", "b_push_one_thief", "xtcq_jobs", Some(0.5)),
        ("(c) push/pop, batch thief, LIFO", "c_push_pop_batch_thief_lifo", "xtcq_jobs", None),
        ("(c) push/pop, batch thief, FIFO", "c_push_pop_batch_thief_fifo", "xtcq_jobs", None),
        ("(d) process hand-off, steal", "d_process_handoff", "xtcq_jobs", Some(0.6)),
        ("(d) process hand-off, batch 128", "d_process_handoff", "xtcq_jobs_batch128", None),
    ] {
        let Some(j) = median_ns(&format!("{g}/{name}")) else { continue };
        let raw = median_ns(&format!("{g}/xtcq_raw"));
        let ratio = raw.map(|r| r / j);
        let met = match (ratio, target) {
            (Some(r), Some(t)) if r >= t => "yes",
            (Some(_), Some(_)) => "NO",
            _ => "",
        };
        table_line(
            label,
            [
                &shown(s, g, j),
                &raw.map(|r| shown(s, g, r)).unwrap_or_default(),
                &ratio.map(|r| format!("{r:.2}x")).unwrap_or_default(),
                &target.map(|t| format!("{t:.2}x")).unwrap_or_default(),
                met,
                &format!("{} / {}", cores_shown(g, name), cores_shown(g, "xtcq_raw")),
            ],
        );
    }
}

fn main() {
    if let Ok(mode) = std::env::var(CHILD_MODE) {
        child_main(&mode);
        return;
    }
    let s = Settings::from_env();
    let mut c = Criterion::default().configure_from_args();
    group_a(&mut c, &s);
    group_b(&mut c, &s);
    group_c(&mut c, &s, Flavor::Lifo);
    group_c(&mut c, &s, Flavor::Fifo);
    group_d(&mut c, &s);
    c.final_summary();
    // Only a measuring run (`cargo bench`) has samples worth a table; `cargo test --benches`
    // runs each routine once.
    if std::env::args().any(|a| a == "--bench")
        && !SAMPLES.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    {
        print_table(&s);
    }
}
