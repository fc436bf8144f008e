//! `xtcq demo`: the main job on its built-in defaults. Starts a private daemon (the daemon
//! code built into `xtcq`, so that it is always this build's) on a
//! temporary socket and segment, creates a queue, starts worker processes (thieves) and one
//! producer process (an owner), farms the jobs, verifies that every job id was acked exactly
//! once and that the segment is consistent, prints throughput and latency, and removes
//! everything it made — also when a step fails.
//!
//! The producer and the workers are this binary again (`xtcq __demo-role`), so each is a
//! real separate process with its own mapping of the segment.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use xtcq_client::monotonic_ns;
use xtcq_client::{Client, Flavor, QueueParams};

use crate::exit;
use crate::out::sayln;

const QUEUE: &str = "demo";
/// Job payload: id (8 bytes), push time (8 bytes), padding to the usual 64 bytes.
const PAYLOAD: usize = 64;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Jobs to farm.
    #[arg(long, default_value_t = 100_000)]
    jobs: u64,
    /// Worker processes.
    #[arg(long, default_value_t = 3)]
    workers: u32,
    /// Keep the temporary directory (daemon log, per-process results) and say where it is.
    #[arg(long)]
    keep: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Role {
    Producer,
    Worker,
}

#[derive(Debug, Args)]
pub struct RoleArgs {
    #[arg(value_enum)]
    role: Role,
    #[arg(long)]
    jobs: u64,
    #[arg(long)]
    out: PathBuf,
    #[arg(long)]
    stop: PathBuf,
}

/// `xtcq __xtcqd ARGS`: the daemon, run in this process, as the `xtcqd` binary runs it.
///
/// `--socket` is `xtcq`'s own global flag (and `$XTCQ_SOCKET`), so clap hands it to us as
/// `socket` rather than in `args`: it is passed on to the daemon here.
pub fn embedded_daemon(socket: Option<&Path>, args: Vec<String>) -> Result<i32> {
    let mut argv: Vec<std::ffi::OsString> = vec!["xtcqd".into()];
    if let Some(s) = socket {
        argv.push("--socket".into());
        argv.push(s.as_os_str().to_owned());
    }
    argv.extend(args.into_iter().map(Into::into));
    match xtcqd::startup::entry::run_with_args(argv) {
        Ok(()) => Ok(exit::OK),
        Err(xtcqd::startup::entry::EntryError::Args(e)) => Err(anyhow!("{e}")),
        Err(e) => Err(anyhow::Error::from(e)),
    }
}

/// The daemon to start: the one built into this executable, always. An `xtcqd` beside it may
/// be another build (an upgrade half done, a stale `target/debug/xtcqd` beside a fresh
/// `xtcq`), whose segment layout this `xtcq` cannot attach to.
fn daemon_command() -> Result<Command> {
    let me = std::env::current_exe().context("cannot find the xtcq executable")?;
    let mut c = Command::new(me);
    c.arg("__xtcqd");
    Ok(c)
}

/// Kills and reaps a child when dropped, so a failed demo leaves no process behind.
struct Reaped(Option<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn wait_exit(child: &mut Reaped, within: Duration) -> Result<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    let c = child.0.as_mut().ok_or_else(|| anyhow!("process already reaped"))?;
    loop {
        if let Some(st) = c.try_wait()? {
            child.0 = None;
            return Ok(st);
        }
        if Instant::now() >= deadline {
            bail!("process {} did not exit within {} s", c.id(), within.as_secs());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Removes the segment file when dropped.
struct RemoveFile(PathBuf);

impl Drop for RemoveFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn us(ns: u64) -> String {
    if ns < 10_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else if ns < 10_000_000 {
        format!("{:.0} µs", ns as f64 / 1e3)
    } else {
        format!("{:.0} ms", ns as f64 / 1e6)
    }
}

pub fn demo(a: DemoArgs) -> Result<i32> {
    if a.jobs == 0 || a.workers == 0 {
        bail!("--jobs and --workers must be at least 1");
    }
    let tmp = tempfile::Builder::new()
        .prefix("xtcq-demo-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let dir = tmp.path().to_path_buf();
    let shm = Path::new("/dev/shm");
    let segment = if shm.is_dir() {
        shm.join(format!("xtcq-demo-{}", std::process::id()))
    } else {
        dir.join("segment")
    };
    let _segment_guard = RemoveFile(segment.clone());
    let socket = dir.join("xtcqd.sock");
    let log = dir.join("xtcqd.log");
    let result = run_demo(&a, &dir, &socket, &segment, &log);
    if let Err(e) = &result {
        if let Ok(text) = std::fs::read_to_string(&log) {
            if !text.trim().is_empty() {
                eprintln!("xtcq demo: the daemon's log:\n{text}");
            }
        }
        eprintln!("xtcq demo: failed: {}", crate::exit::message(e));
    }
    if a.keep {
        let kept = tmp.keep();
        eprintln!("xtcq demo: kept {}", kept.display());
    }
    result
}

fn run_demo(a: &DemoArgs, dir: &Path, socket: &Path, segment: &Path, log: &Path) -> Result<i32> {
    announce(a)?;
    let (mut daemon, client) = start_daemon(socket, segment, log)?;
    client.create_queue(&QueueParams {
        deques: 2,
        capacity: 1024,
        flavor: Flavor::Fifo,
        ..QueueParams::new(QUEUE)
    })?;
    let mut workers = run_producer_and_workers(a, dir, socket)?;
    wait_drained(&client)?;
    stop_workers(dir, &mut workers)?;
    let tally = Tally::read(a, dir)?;
    let report = client.check(true)?;
    tally.print(a, &report)?;
    // Stop the daemon cleanly.
    client.shutdown_daemon()?;
    drop(client);
    let st = wait_exit(&mut daemon, Duration::from_secs(10))?;
    if !st.success() {
        bail!("xtcqd did not stop cleanly ({st})");
    }
    let ok = tally.missing == 0 && tally.twice == 0 && tally.out_of_range == 0 && report.is_consistent();
    sayln!("  result       {}", if ok { "ok" } else { "FAILED" });
    Ok(if ok { exit::OK } else { exit::FAILED })
}

fn announce(a: &DemoArgs) -> Result<()> {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let processes = a.workers as usize + 1;
    sayln!(
        "xtcq demo: {} jobs, 1 producer process -> {} worker process(es) on {} CPU(s){}",
        a.jobs,
        a.workers,
        cpus,
        if processes > cpus { " (more processes than CPUs: they take turns)" } else { "" }
    );
    Ok(())
}

/// A private daemon on `socket` and `segment`, logging to `log`, and a client of it.
fn start_daemon(socket: &Path, segment: &Path, log: &Path) -> Result<(Reaped, Client)> {
    let logf = std::fs::File::create(log).context("cannot create the daemon log")?;
    let mut dcmd = daemon_command()?;
    dcmd.arg("--socket")
        .arg(socket)
        .arg("--segment")
        .arg(segment)
        .arg("--recreate")
        .args(["--queues", "2", "--deques-per-queue", "2", "--deque-capacity", "1024"])
        .args(["--records", "16384", "--payload-bytes", "64", "--process-slots", "32"])
        .args(["--overflow-capacity", "16384"])
        .env_remove("XTCQ_SOCKET")
        .env_remove("NOTIFY_SOCKET")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf);
    let mut daemon = Reaped(Some(dcmd.spawn().context("cannot start xtcqd")?));
    let pid = daemon.0.as_ref().map(|c| c.id()).unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let client = loop {
        if let Some(st) = daemon.0.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            daemon.0 = None;
            bail!("xtcqd exited at start ({st})");
        }
        match Client::connect(Some(socket)) {
            Ok(c) => break c,
            Err(e) if Instant::now() >= deadline => {
                return Err(anyhow::Error::from(e).context("xtcqd not ready"))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    sayln!("  daemon      xtcqd pid {pid}, socket {}, segment {}", socket.display(), segment.display());
    Ok((daemon, client))
}

/// Starts the workers (each says when it is attached), then the producer, and waits for the
/// producer to push every job. Returns the running workers.
fn run_producer_and_workers(a: &DemoArgs, dir: &Path, socket: &Path) -> Result<Vec<Reaped>> {
    let me = std::env::current_exe().context("cannot find the xtcq executable")?;
    let stop = dir.join("stop");
    let spawn = |role: &str, out: &Path| -> Result<Reaped> {
        let c = Command::new(&me)
            .arg("--socket")
            .arg(socket)
            .args(["__demo-role", role, "--jobs", &a.jobs.to_string()])
            .arg("--out")
            .arg(out)
            .arg("--stop")
            .arg(&stop)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start a {role} process"))?;
        let mut p = Reaped(Some(c));
        let out = p.0.as_mut().and_then(|c| c.stdout.take()).ok_or_else(|| anyhow!("no stdout"))?;
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line)?;
        if line.trim() != "ready" {
            bail!("a demo process failed to attach");
        }
        Ok(p)
    };
    let mut workers = Vec::new();
    for w in 0..a.workers {
        workers.push(spawn("worker", &dir.join(format!("worker{w}.out")))?);
    }
    let mut producer = spawn("producer", &dir.join("producer.out"))?;
    let st = wait_exit(&mut producer, Duration::from_secs(300))?;
    if !st.success() {
        bail!("the producer failed ({st})");
    }
    Ok(workers)
}

/// Waits until nothing is queued, being pushed or running.
fn wait_drained(client: &Client) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = client.stats(Some(QUEUE))?;
        let r = s.queues.first().map(|q| q.records.clone()).unwrap_or_default();
        if r.queued == 0 && r.claimed == 0 && r.filling == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("the queue did not drain in 120 s: {r:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Tells the workers to stop (the stop file) and waits for each.
fn stop_workers(dir: &Path, workers: &mut [Reaped]) -> Result<()> {
    std::fs::write(dir.join("stop"), b"").context("cannot create the stop file")?;
    for w in workers {
        let st = wait_exit(w, Duration::from_secs(30))?;
        if !st.success() {
            bail!("a worker failed ({st})");
        }
    }
    Ok(())
}

/// What the demo's processes wrote: every id's count, latencies, per-worker counts.
struct Tally {
    missing: usize,
    twice: usize,
    out_of_range: u64,
    latencies: Vec<u64>,
    per_worker: Vec<u64>,
    first_push: u64,
    last_ack: u64,
}

impl Tally {
    fn read(a: &DemoArgs, dir: &Path) -> Result<Tally> {
        let producer_out = std::fs::read_to_string(dir.join("producer.out")).context("producer results")?;
        let first_push: u64 = producer_out
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("the producer wrote no start time"))?;
        let mut seen = vec![0u32; a.jobs as usize];
        let mut t = Tally {
            missing: 0,
            twice: 0,
            out_of_range: 0,
            latencies: Vec::with_capacity(a.jobs as usize),
            per_worker: Vec::new(),
            first_push,
            last_ack: 0,
        };
        for w in 0..a.workers {
            let text =
                std::fs::read_to_string(dir.join(format!("worker{w}.out"))).context("worker results")?;
            let n = t.add_worker(&text, &mut seen);
            t.per_worker.push(n);
        }
        t.missing = seen.iter().filter(|&&c| c == 0).count();
        t.twice = seen.iter().filter(|&&c| c > 1).count();
        t.latencies.sort_unstable();
        Ok(t)
    }

    /// Counts one worker's lines (`ID LATENCY`, and `last T`); returns how many jobs it ran.
    fn add_worker(&mut self, text: &str, seen: &mut [u32]) -> u64 {
        let mut n = 0u64;
        for line in text.lines() {
            let mut f = line.split_whitespace().map(|v| v.parse::<u64>());
            match (f.next(), f.next()) {
                (Some(Ok(id)), Some(Ok(l))) if line.starts_with(|c: char| c.is_ascii_digit()) => {
                    match seen.get_mut(id as usize) {
                        Some(c) => *c += 1,
                        None => self.out_of_range += 1,
                    }
                    self.latencies.push(l);
                    n += 1;
                }
                _ => {
                    if let Some(t) = line.strip_prefix("last ").and_then(|v| v.trim().parse().ok()) {
                        self.last_ack = self.last_ack.max(t);
                    }
                }
            }
        }
        n
    }

    fn print(&self, a: &DemoArgs, report: &xtcq_client::CheckReport) -> Result<()> {
        let secs = (self.last_ack.saturating_sub(self.first_push)) as f64 / 1e9;
        let (missing, twice, lat) = (self.missing, self.twice, &self.latencies);
        sayln!(
            "  exactly once {} of {} ids acked once; {missing} missing, {twice} more than once{}",
            a.jobs as usize - missing - twice,
            a.jobs,
            if self.out_of_range > 0 { format!(", {} unknown", self.out_of_range) } else { String::new() }
        );
        sayln!(
            "  throughput   {:.2} M jobs/s ({} jobs in {:.1} ms, first push to last ack; push, claim, payload copy and ack each)",
            a.jobs as f64 / secs.max(1e-9) / 1e6,
            a.jobs,
            secs * 1e3
        );
        sayln!(
            "  latency      push -> claim, including time queued behind earlier jobs: p50 {}, p99 {}, max {}",
            us(percentile(lat, 0.5)),
            us(percentile(lat, 0.99)),
            us(lat.last().copied().unwrap_or(0))
        );
        let per_worker = self.per_worker.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ");
        sayln!("  per worker   {per_worker}");
        sayln!(
            "  segment      {}",
            if report.is_consistent() {
                "consistent (xtcq check)".to_string()
            } else {
                format!("INCONSISTENT: {}", report.problems.join("; "))
            }
        );
        Ok(())
    }
}

/// `xtcq __demo-role producer|worker`: one process of the demo.
pub fn role(socket: Option<&Path>, a: RoleArgs) -> Result<i32> {
    let client = Client::connect(socket)?;
    let mut out = BufWriter::new(std::fs::File::create(&a.out).context("cannot create the results file")?);
    match a.role {
        Role::Producer => {
            let owner = client.attach_owner(QUEUE)?;
            sayln!("ready");
            std::io::stdout().flush()?;
            let mut p = [0u8; PAYLOAD];
            let t0 = monotonic_ns();
            for id in 0..a.jobs {
                p[..8].copy_from_slice(&id.to_le_bytes());
                loop {
                    p[8..16].copy_from_slice(&monotonic_ns().to_le_bytes());
                    match owner.push(&p) {
                        Ok(_) => break,
                        // Both the deque and the ring are full: the workers are behind.
                        Err(xtcq_client::Error::QueueFull { .. } | xtcq_client::Error::RecordsFull(_)) => {
                            std::thread::yield_now()
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            writeln!(out, "{t0} {}", monotonic_ns())?;
            out.flush()?;
            owner.detach()?;
        }
        Role::Worker => {
            let thief = client.attach_thief(QUEUE)?;
            sayln!("ready");
            std::io::stdout().flush()?;
            let mut buf = Vec::with_capacity(PAYLOAD);
            let mut last = 0u64;
            loop {
                // steal_wait looks first, and sleeps only when there is nothing.
                let Some(job) = thief.steal_wait(Some(Duration::from_millis(20)))? else {
                    if a.stop.exists() && thief.steal()?.is_none() {
                        break;
                    }
                    continue;
                };
                let now = monotonic_ns();
                buf.clear();
                job.read_payload(&mut buf)?;
                if buf.len() < 16 {
                    bail!("job {} has a {}-byte payload, not a demo job", job.handle(), buf.len());
                }
                let id = u64::from_le_bytes(buf[..8].try_into()?);
                let pushed = u64::from_le_bytes(buf[8..16].try_into()?);
                job.ack()?;
                last = monotonic_ns();
                writeln!(out, "{id} {}", now.saturating_sub(pushed))?;
            }
            writeln!(out, "last {last}")?;
            out.flush()?;
        }
    }
    Ok(exit::OK)
}
