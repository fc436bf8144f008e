//! One producer process to N consumer processes: how the job path scales with thieves.
//!
//! ```sh
//! cargo bench -p xtcq-benches --bench fanout                         # N = 1, 2, 4, ... up to the cores
//! XTCQ_BENCH_CONSUMERS=1,2,3 XTCQ_BENCH_N=200000 cargo bench -p xtcq-benches --bench fanout
//! ```
//!
//! - The producer (this process, pinned to CPU 0) owns the queue's one deque and pushes N
//!   64-byte jobs as fast as the deque takes them (a full deque is retried after a backoff,
//!   `FullWait`), one at a time or
//!   `XTCQ_BENCH_PUSH_BATCH=K` at a time (`push_batch`: one store of `bottom` a batch).
//!   `XTCQ_BENCH_PRODUCERS=P` (P > 1): P producer processes (CPUs 0..P), each the owner of
//!   a deque of its own, push N/P jobs each (`producers`); the consumers take CPUs P.. .
//! - Each consumer (this binary again, pinned to CPU k, k = 1..) loops on `steal` (or on
//!   `steal_batch(B)` with `XTCQ_BENCH_BATCH=B`; `steal_into(B)` and one `ack_all` a batch
//!   with `XTCQ_BENCH_BATCH_INTO=1` too), copies the payload out and acks. When a
//!   look finds nothing it looks again at once (`XTCQ_BENCH_POLL=spin`, the default), after
//!   an exponential backoff of pause instructions (`backoff`), or it calls `steal_wait`
//!   instead of `steal` (`wait`). `XTCQ_BENCH_WORK_NS=N`: each job also costs N ns of the
//!   consumer's time (a spin) before its ack, as real jobs do.
//! - Rate = N / (time the last job was acked - time before the first push).
//!   `XTCQ_BENCH_PREFILL=1`: the producer queues all N jobs (at most 100,000) before the
//!   consumers may start, so the rate is the consumers' drain alone: what a job costs the
//!   consumer side, batch or single, with no producer to wait for.
//! - Exactly once: each consumer writes the sequence numbers it took to a file; the producer
//!   merges them into a bitmap and fails the run on a job taken twice or never.
//! - Every row says whether it was oversubscribed (more processes than CPUs online): with
//!   two cores here, 1 producer + 2 consumers already take turns, so only the device machine's
//!   rows say how the job path scales (benches/results/2026-12-04.md, "Scaling").
//! - Every figure is the median over `XTCQ_BENCH_RUNS` runs (default 3).
//! - Built with `--features cas-count`, each row also says how many CASes on a deque's `top`
//!   the consumers lost per job (`xtcq_shm::cas_count`: each consumer counts its own, in a
//!   thread-local cell; a lost CAS is a transfer of the `top` line that took no job). Without
//!   the feature the column says `-`.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use xtcq_benches::{bench_queue, env_u64, ncpus, pin, start_daemon, wait_for, SharedPage, BENCH_SEGMENT};
use xtcq_client::{Client, JobBatch};

#[path = "fanout/producers.rs"]
mod producers;
use producers::{push_share, Share};
use xtcq_testkit::{monotonic_ns, Daemon};

const MSG: usize = 64;
const QUEUE: &str = "fanout";
/// The most producers (`XTCQ_BENCH_PRODUCERS`), each a deque of the queue.
const MAX_PRODUCERS: usize = 16;
/// Consumers we can track: one line each in the shared control page.
const MAX_CONSUMERS: usize = 30;
/// The most jobs a prefilled run queues: the bench queue's deque (65,536) and overflow ring
/// hold them, and the segment's records (131,072).
const PREFILL_MAX: u64 = 100_000;

/// The page producer and consumers share: a line per word so that no two writers share one.
#[repr(C, align(128))]
struct Line(AtomicU64, [u64; 15]);

#[repr(C)]
struct Ctl {
    /// Consumers (and producer processes) that are attached and spinning.
    ready: Line,
    /// Set when producer processes may queue every job of a prefilled run.
    fill: Line,
    /// Producer processes that pushed their share.
    pushed: Line,
    /// Set by the producer once every job was taken: consumers write their files and exit.
    stop: Line,
    /// Set by the producer when the consumers may start: at once, or once every job is
    /// queued (`XTCQ_BENCH_PREFILL=1`).
    go: Line,
    /// Jobs taken by consumer k, stored (not added) by k alone.
    taken: [Line; MAX_CONSUMERS],
    /// CASes on `top` consumer k lost, stored by k alone before it exits.
    lost: [Line; MAX_CONSUMERS],
}

/// What a consumer does when a look found no job (`XTCQ_BENCH_POLL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Poll {
    /// Look again at once: every look reads the line the producer's next push writes.
    Spin,
    /// Look again after 2^k pause instructions, k = 0, 1, ... up to 7, back to 0 on a job.
    Backoff(u32),
    /// `steal_wait`: the library's own wait (yields for a while, then a futex sleep).
    Wait,
}

impl Poll {
    fn from_env() -> Poll {
        match std::env::var("XTCQ_BENCH_POLL").as_deref() {
            Ok("backoff") => Poll::Backoff(0),
            Ok("wait") => Poll::Wait,
            Ok("spin") | Err(_) => Poll::Spin,
            Ok(other) => panic!("XTCQ_BENCH_POLL={other}: spin, backoff or wait"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Poll::Spin => "spin",
            Poll::Backoff(_) => "backoff",
            Poll::Wait => "wait",
        }
    }

    fn idle(&mut self) {
        match self {
            Poll::Backoff(k) => {
                for _ in 0..1u32 << *k {
                    std::hint::spin_loop();
                }
                *k = (*k + 1).min(7);
            }
            Poll::Spin | Poll::Wait => std::hint::spin_loop(),
        }
    }

    fn reset(&mut self) {
        if let Poll::Backoff(k) = self {
            *k = 0;
        }
    }
}

/// Consumer role: steal until told to stop, then write the sequence numbers taken.
fn consumer() {
    let index: usize = env_u64("XTCQ_BENCH_INDEX").expect("index") as usize;
    pin(index + env_u64("XTCQ_BENCH_PRODUCERS").unwrap_or(1) as usize);
    let batch = env_u64("XTCQ_BENCH_BATCH").unwrap_or(1).max(1) as usize;
    let into = std::env::var("XTCQ_BENCH_BATCH_INTO").is_ok_and(|v| v == "1");
    let ctl_map =
        SharedPage::<Ctl>::open(Path::new(&std::env::var_os("XTCQ_BENCH_CTL").expect("ctl")), false);
    let ctl = ctl_map.get();
    let socket = PathBuf::from(std::env::var_os("XTCQ_SOCKET").expect("socket"));
    let client = Client::connect(Some(&socket)).expect("connect");
    let thief = client.attach_thief(QUEUE).expect("attach_thief");
    let mut taker = Taker {
        ctl,
        index,
        work_ns: env_u64("XTCQ_BENCH_WORK_NS").unwrap_or(0),
        poll: Poll::from_env(),
        seqs: Vec::with_capacity(1 << 20),
        buf: Vec::with_capacity(MSG),
    };
    ctl.ready.0.fetch_add(1, Ordering::AcqRel);
    wait_for_go(ctl);
    if batch > 1 && into {
        taker.run_into(&thief, batch);
    } else {
        taker.run(&thief, batch);
    }
    let lost = xtcq_shm::cas_count::lost_top_cases().unwrap_or(0);
    ctl.lost[index].0.store(lost, Ordering::Release);
    let path = std::env::var_os("XTCQ_BENCH_SEQS").expect("seqs path");
    let mut out = BufWriter::new(File::create(path).expect("seqs file"));
    for s in &taker.seqs {
        out.write_all(&s.to_le_bytes()).expect("write seqs");
    }
    out.flush().expect("flush seqs");
}

/// A consumer's loop state: what it took, and how it waits.
struct Taker<'c> {
    ctl: &'c Ctl,
    index: usize,
    work_ns: u64,
    poll: Poll,
    seqs: Vec<u64>,
    buf: Vec<u8>,
}

impl Taker<'_> {
    /// `steal`, `steal_wait` or `steal_batch(batch)`, each job acked on its own.
    fn run(&mut self, thief: &xtcq_client::ThiefHandle, batch: usize) {
        loop {
            let jobs = if batch > 1 {
                thief.steal_batch(batch).expect("steal_batch")
            } else if self.poll == Poll::Wait {
                thief.steal_wait(Some(Duration::from_millis(1))).expect("steal_wait").into_iter().collect()
            } else {
                thief.steal().expect("steal").into_iter().collect()
            };
            if jobs.is_empty() {
                if self.idle() {
                    return;
                }
                continue;
            }
            self.poll.reset();
            for job in jobs {
                self.buf.clear();
                job.read_payload(&mut self.buf).expect("payload");
                self.took();
                job.ack().expect("ack");
            }
            self.publish();
        }
    }

    /// `steal_into(batch)` and one `ack_all` a batch (`XTCQ_BENCH_BATCH_INTO=1`): the claims'
    /// clock read and counts once a batch, every record prefetched before the first claim.
    fn run_into(&mut self, thief: &xtcq_client::ThiefHandle, batch: usize) {
        let mut jobs = JobBatch::new();
        loop {
            if thief.steal_into(batch, &mut jobs).expect("steal_into") == 0 {
                if self.idle() {
                    return;
                }
                continue;
            }
            self.poll.reset();
            for i in 0..jobs.len() {
                self.buf.clear();
                jobs.read_payload(i, &mut self.buf).expect("payload");
                self.took();
            }
            jobs.ack_all().expect("ack_all");
            self.publish();
        }
    }

    /// Nothing found: `true` once the producer said stop, else a wait as `poll` says.
    fn idle(&mut self) -> bool {
        if self.ctl.stop.0.load(Ordering::Acquire) == 1 {
            return true;
        }
        self.poll.idle();
        false
    }

    /// Records the job whose payload is in `buf`, then spends its work time.
    fn took(&mut self) {
        assert_eq!(self.buf.len(), MSG, "payload length");
        self.seqs.push(u64::from_le_bytes(self.buf[..8].try_into().expect("8 bytes")));
        if self.work_ns > 0 {
            // The job's own work, as a spin: a consumer busy with a job is not looking.
            let until = monotonic_ns() + self.work_ns;
            while monotonic_ns() < until {
                std::hint::spin_loop();
            }
        }
    }

    /// Tells the producer how many we took: own line, one writer, a plain store (not a
    /// shared counter every consumer bumps).
    fn publish(&self) {
        self.ctl.taken[self.index].0.store(self.seqs.len() as u64, Ordering::Release);
    }
}

/// Spins until the producer says go; fails after two minutes (a producer that died).
fn wait_for_go(ctl: &Ctl) {
    let deadline = monotonic_ns() + 120_000_000_000;
    while ctl.go.0.load(Ordering::Acquire) == 0 {
        assert!(monotonic_ns() < deadline, "the producer never said go");
        std::hint::spin_loop();
    }
}

/// One run's figures.
struct Run {
    mjobs_per_s: f64,
    /// Smallest and largest share of the jobs one consumer took.
    share: (f64, f64),
    /// CASes on `top` the consumers lost, per job.
    lost_per_job: f64,
}

struct Bench {
    daemon: Daemon,
    /// This process's deque (one producer); `None` with producer processes.
    owner: Option<xtcq_client::OwnerHandle>,
    _client: Client,
    /// Producer processes (1: this process pushes).
    producers: usize,
    n: u64,
    batch: u64,
    /// Jobs the producer queues per `push_batch` (1: single pushes).
    push_batch: usize,
    /// Every job queued before the consumers start: the rate is the drain's alone.
    prefill: bool,
}

impl Bench {
    fn spawn_consumers(&self, consumers: usize, ctl_path: &Path, tag: &str) -> Vec<(Child, PathBuf)> {
        (0..consumers)
            .map(|k| {
                let seqs = self.daemon.dir().join(format!("seqs.{tag}.{k}"));
                let child = Command::new(std::env::current_exe().expect("current exe"))
                    .env("XTCQ_BENCH_ROLE", "consumer")
                    .env("XTCQ_BENCH_INDEX", k.to_string())
                    .env("XTCQ_BENCH_BATCH", self.batch.to_string())
                    .env("XTCQ_BENCH_PRODUCERS", self.producers.to_string())
                    .env("XTCQ_BENCH_CTL", ctl_path)
                    .env("XTCQ_BENCH_SEQS", &seqs)
                    .env("XTCQ_SOCKET", &self.daemon.socket)
                    .stdin(Stdio::null())
                    .stdout(Stdio::inherit())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .expect("spawn consumer");
                (child, seqs)
            })
            .collect()
    }

    /// The producer processes (`XTCQ_BENCH_PRODUCERS` > 1), each told its index.
    fn spawn_producers(&self, ctl_path: &Path) -> Vec<Child> {
        if self.owner.is_some() {
            return Vec::new();
        }
        (0..self.producers)
            .map(|p| {
                Command::new(std::env::current_exe().expect("current exe"))
                    .env("XTCQ_BENCH_ROLE", "producer")
                    .env("XTCQ_BENCH_INDEX", p.to_string())
                    .env("XTCQ_BENCH_PRODUCERS", self.producers.to_string())
                    .env("XTCQ_BENCH_N", self.n.to_string())
                    .env("XTCQ_BENCH_PUSH_BATCH", self.push_batch.to_string())
                    .env("XTCQ_BENCH_PREFILL", if self.prefill { "1" } else { "0" })
                    .env("XTCQ_BENCH_CTL", ctl_path)
                    .env("XTCQ_SOCKET", &self.daemon.socket)
                    .stdin(Stdio::null())
                    .spawn()
                    .expect("spawn producer")
            })
            .collect()
    }

    /// Every job pushed: by this process, or by the producer processes once `start` is set
    /// (waited for with `procs` watched).
    fn push_all(&self, ctl: &Ctl, start: &Line, procs: &mut [&mut Child]) {
        match &self.owner {
            Some(owner) => push_share(owner, Share { first: 0, step: 1, n: self.n }, self.push_batch),
            None => {
                start.0.store(1, Ordering::Release);
                let p = self.producers as u64;
                wait_for(procs, "every producer to push its share", Duration::from_secs(120), || {
                    ctl.pushed.0.load(Ordering::Acquire) == p
                });
            }
        }
    }

    fn one(&self, consumers: usize, k: u32) -> Run {
        let tag = format!("{consumers}.{k}");
        let ctl_path = self.daemon.dir().join(format!("ctl.{tag}"));
        let ctl_map = SharedPage::<Ctl>::open(&ctl_path, true);
        let ctl = ctl_map.get();
        let mut producers = self.spawn_producers(&ctl_path);
        let mut children = self.spawn_consumers(consumers, &ctl_path, &tag);
        let limit = Duration::from_secs(120);
        let mut procs: Vec<&mut Child> = children.iter_mut().map(|(c, _)| c).collect();
        procs.extend(producers.iter_mut());
        let attached = (consumers + producers_len(self)) as u64;
        wait_for(&mut procs, "the consumers and producers to attach", limit, || {
            ctl.ready.0.load(Ordering::Acquire) == attached
        });
        if self.prefill {
            self.push_all(ctl, &ctl.fill, &mut procs);
        }
        let t0 = monotonic_ns();
        if self.prefill || self.owner.is_some() {
            ctl.go.0.store(1, Ordering::Release);
        }
        if !self.prefill {
            // With producer processes, `go` starts them and the consumers at once.
            self.push_all(ctl, &ctl.go, &mut procs);
        }
        let taken = || ctl.taken[..consumers].iter().map(|l| l.0.load(Ordering::Acquire)).sum::<u64>();
        wait_for(&mut procs, "every job to be taken", limit, || taken() >= self.n);
        let t_end = monotonic_ns();
        ctl.stop.0.store(1, Ordering::Release);
        drop(procs);
        for mut p in producers {
            let st = p.wait().expect("wait producer");
            assert!(st.success(), "producer failed: {st}");
        }
        let counts = self.check_exactly_once(children);
        // Read after the consumers exited: each stored its count before it wrote its file.
        let lost: u64 = ctl.lost[..consumers].iter().map(|l| l.0.load(Ordering::Acquire)).sum();
        let (lo, hi) = (counts.iter().min().copied().unwrap_or(0), counts.iter().max().copied().unwrap_or(0));
        Run {
            mjobs_per_s: self.n as f64 * 1e3 / (t_end - t0) as f64,
            share: (lo as f64 / self.n as f64, hi as f64 / self.n as f64),
            lost_per_job: lost as f64 / self.n as f64,
        }
    }

    /// Waits for each consumer, merges what they took, and fails on a job taken twice or
    /// never. Returns each consumer's count.
    fn check_exactly_once(&self, children: Vec<(Child, PathBuf)>) -> Vec<u64> {
        let mut seen = vec![0u64; (self.n as usize).div_ceil(64)];
        let mut counts = Vec::new();
        for (mut child, path) in children {
            let st = child.wait().expect("wait consumer");
            assert!(st.success(), "consumer failed: {st}");
            let mut bytes = Vec::new();
            File::open(&path).and_then(|mut f| f.read_to_end(&mut bytes)).expect("read seqs");
            let _ = std::fs::remove_file(&path);
            for chunk in bytes.chunks_exact(8) {
                let s = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
                assert!(s < self.n, "a job that was never pushed: {s}");
                let (w, b) = ((s / 64) as usize, s % 64);
                assert_eq!(seen[w] & (1 << b), 0, "job {s} taken twice");
                seen[w] |= 1 << b;
            }
            counts.push(bytes.len() as u64 / 8);
        }
        assert_eq!(counts.iter().sum::<u64>(), self.n, "jobs lost");
        counts
    }
}

/// Producer processes a run has (none: this process pushes).
fn producers_len(b: &Bench) -> usize {
    if b.owner.is_some() {
        0
    } else {
        b.producers
    }
}

/// N = 1, 2, 4, ... while N + 1 fits the CPUs, then the first oversubscribed N.
fn default_consumer_counts(cpus: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut n = 1;
    while n < MAX_CONSUMERS && n < cpus {
        v.push(n);
        n *= 2;
    }
    if cpus >= 3 && !v.contains(&(cpus - 1)) && cpus - 1 < MAX_CONSUMERS {
        v.push(cpus - 1);
    }
    v.push(cpus.min(MAX_CONSUMERS));
    v.dedup();
    v
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

fn main() {
    match std::env::var("XTCQ_BENCH_ROLE").as_deref() {
        Ok("consumer") => return consumer(),
        Ok("producer") => return producers::producer(),
        _ => {}
    }
    let cpus = ncpus();
    let prefill = std::env::var("XTCQ_BENCH_PREFILL").is_ok_and(|v| v == "1");
    let n = env_u64("XTCQ_BENCH_N").unwrap_or(if prefill { PREFILL_MAX } else { 1_000_000 });
    assert!(
        !prefill || n <= PREFILL_MAX,
        "XTCQ_BENCH_PREFILL: at most {PREFILL_MAX} jobs (the queue holds them all)"
    );
    let runs = env_u64("XTCQ_BENCH_RUNS").unwrap_or(3).max(1) as u32;
    let batch = env_u64("XTCQ_BENCH_BATCH").unwrap_or(1).max(1);
    let push_batch = env_u64("XTCQ_BENCH_PUSH_BATCH").unwrap_or(1).clamp(1, 128) as usize;
    let work_ns = env_u64("XTCQ_BENCH_WORK_NS").unwrap_or(0);
    let work = if work_ns > 0 { format!("{work_ns} ns of work +") } else { String::new() };
    let counts: Vec<usize> = match std::env::var("XTCQ_BENCH_CONSUMERS") {
        Ok(s) => s.split(',').map(|x| x.trim().parse().expect("XTCQ_BENCH_CONSUMERS: numbers")).collect(),
        Err(_) => default_consumer_counts(cpus),
    };
    assert!(counts.iter().all(|&c| (1..=MAX_CONSUMERS).contains(&c)), "1 to {MAX_CONSUMERS} consumers");
    let producers = env_u64("XTCQ_BENCH_PRODUCERS").unwrap_or(1) as usize;
    assert!((1..=MAX_PRODUCERS).contains(&producers), "XTCQ_BENCH_PRODUCERS: 1 to {MAX_PRODUCERS}");
    // A deque per producer.
    let deques = producers.max(2).to_string();
    let flags: Vec<&str> = BENCH_SEGMENT
        .chunks(2)
        .flat_map(|kv| if kv[0] == "--deques-per-queue" { [kv[0], deques.as_str()] } else { [kv[0], kv[1]] })
        .collect();
    let daemon = start_daemon(&flags);
    pin(0);
    let client = daemon.client();
    let owner = if producers == 1 {
        Some(bench_queue(&client, QUEUE))
    } else {
        // As `bench_queue` makes it, with a deque for each producer process.
        let mut params = xtcq_client::QueueParams::new(QUEUE);
        params.deques = producers as u32;
        params.capacity = 65536;
        params.flavor = xtcq_client::Flavor::Fifo;
        client.create_queue(&params).expect("create queue");
        None
    };
    let bench = Bench { daemon, owner, _client: client, producers, n, batch, push_batch, prefill };
    let producer_how = format!(
        "{producers} producer{} ({})",
        if producers > 1 { "s, each its own deque" } else { "" },
        if push_batch > 1 { format!("push_batch({push_batch})") } else { "push".to_string() }
    );

    let poll = Poll::from_env();
    let into = std::env::var("XTCQ_BENCH_BATCH_INTO").is_ok_and(|v| v == "1");
    let consumer_how = match (batch > 1, poll) {
        (true, _) if into => format!("steal_into({batch}) + ack_all, {} when empty", poll.name()),
        (true, _) => format!("steal_batch({batch}), {} when empty", poll.name()),
        (false, Poll::Wait) => "steal_wait".to_string(),
        (false, _) => format!("steal, {} when empty", poll.name()),
    };
    println!(
        "fanout: {cpus} CPUs online, {producer_how} -> N consumers ({consumer_how} + payload + {work} ack), \
         64-byte jobs, {n} jobs per run, median of {runs} run(s), every run checked exactly once{}",
        if prefill {
            "; prefilled: all queued before the consumers start, the rate is the drain's"
        } else {
            ""
        }
    );
    println!();
    println!(
        "| consumers | M jobs/s | x 1 consumer | smallest-largest share | lost `top` CASes / job | processes / CPUs |"
    );
    println!("|---:|---:|---:|---|---:|---|");
    let counted = xtcq_shm::cas_count::lost_top_cases().is_some();
    let mut base = None;
    for &c in &counts {
        let rs: Vec<Run> = (0..runs).map(|k| bench.one(c, k)).collect();
        let rate = median(rs.iter().map(|r| r.mjobs_per_s).collect());
        let lo = median(rs.iter().map(|r| r.share.0).collect());
        let hi = median(rs.iter().map(|r| r.share.1).collect());
        let base_rate = *base.get_or_insert(rate);
        let procs = c + producers;
        let load = if procs > cpus { "oversubscribed" } else { "fits" };
        let lost = if counted {
            format!("{:.3}", median(rs.iter().map(|r| r.lost_per_job).collect()))
        } else {
            "-".to_string()
        };
        println!(
            "| {c} | {rate:.2} | {:.2} | {:.0}%-{:.0}% | {lost} | {}/{cpus} {load} |",
            rate / base_rate,
            lo * 100.0,
            hi * 100.0,
            procs
        );
    }
}
